// Gradient clipping's scalar arithmetic (docs/spec.md, "gradient_clipping"), shared by the CPU and
// CUDA kernels (kernels/cpu/clip.cpp, kernels/cuda/clip.cu) and written step by step as DeepSpeed
// computes it, so that it rounds where DeepSpeed rounds:
//   runtime/zero/stage_1_and_2.py complete_grad_norm_calculation_for_cpu_offload: the sum of the
//     squared per-parameter norms (double) goes into a float tensor, then its square root is taken
//     in double and stored as a float; a non-finite norm becomes -1;
//   unscale_and_clip_grads: combined = loss_scale x max(1, (norm / loss_scale + 1e-6) / clip)
//     in float, and the gradient is multiplied by 1 / combined (a float).
// THE SINGLE POINT where a loss scale meets clipping: combined_scale() returns the factor that
// unscales and clips at once (DeepSpeed's "combined scale factor"); fp32 and bf16 runs pass
// loss_scale 1, a loss-scaled (fp16) run its current scale, and the norm it is given is then the
// norm of the scaled gradient, as DeepSpeed's is.
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define ZF_CLIP_HD __host__ __device__
#else
#define ZF_CLIP_HD
#endif

namespace zf::kernels::clip_math {

// The global L2 norm from the sum of squares (double), rounded as DeepSpeed rounds it; -1 when
// not finite (DeepSpeed's marker: then nothing is clipped).
ZF_CLIP_HD inline float global_norm(double sumsq) {
  const float total = (float)sumsq;  // FloatTensor([float(total_norm)])
  const double root = std::sqrt((double)total);
  const float norm = (float)root;  // torch.tensor(total_norm, dtype=torch.float)
  return std::isfinite(norm) ? norm : -1.0f;
}

// DeepSpeed's combined scale: loss_scale x max(1, (norm / loss_scale + 1e-6) / clip) (clip <= 0:
// no clipping, just the loss scale).
ZF_CLIP_HD inline float combined_scale(float norm, float clip, float loss_scale) {
  float combined = loss_scale;
  if (clip > 0.0f) {
    float c = ((norm / loss_scale) + 1e-6f) / clip;
    c = c < 1.0f ? 1.0f : c;
    combined = c * loss_scale;
  }
  return combined;
}

// Whether the clip coefficient is active (the gradient's norm exceeds the clip, up to DeepSpeed's
// 1e-6).
ZF_CLIP_HD inline bool clips(float norm, float clip, float loss_scale) {
  return clip > 0.0f && ((norm / loss_scale) + 1e-6f) / clip > 1.0f;
}

// The norm a run reports (metrics, progress lines): the true gradient's, i.e. the scaled norm
// divided by the loss scale, as DeepSpeed's _global_grad_norm = scaled_global_norm / loss_scale
// (-1 kept: not finite).
ZF_CLIP_HD inline float reported_norm(float norm, float loss_scale) {
  return norm < 0.0f || loss_scale == 1.0f ? norm : norm / loss_scale;
}

// The factor the gradient is multiplied by: 1 / combined_scale, times `extra` (ZenFlow's host
// step folds its 1/n, the mean of the interval, in here; 1 elsewhere).
ZF_CLIP_HD inline float gradient_factor(float norm, float clip, float loss_scale, float extra) {
  const float f = 1.0f / combined_scale(norm, clip, loss_scale);
  return extra == 1.0f ? f : f * extra;
}

}  // namespace zf::kernels::clip_math
