// Gradient clipping on the GPU (docs/spec.md, "gradient_clipping"), mirroring kernels/cpu/clip.cpp:
// the scalar arithmetic is kernels/clip_math.hpp on both sides. The sum of squares is one block
// with a fixed stride and a fixed reduction tree (deterministic; it differs from the CPU's index
// order by rounding only); the factor and the scaling read and write device memory only.
#include "codelets/kernels/clip_math.hpp"
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

constexpr int kSumThreads = 1024;

__global__ void sumsq_k(const float* x, size_t n, double* out) {
  __shared__ double part[kSumThreads];
  double s = 0.0;
  for (size_t i = threadIdx.x; i < n; i += kSumThreads) s += (double)x[i] * (double)x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = kSumThreads / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = part[0];
}

__global__ void clip_factor_k(const double* partial, size_t parts, double sq_div, float clip, float loss_scale,
                              float extra, float* out) {
  double s = 0.0;
  for (size_t i = 0; i < parts; ++i) s += partial[i];
  s /= sq_div;
  const float norm = clip_math::global_norm(s);
  out[0] = clip_math::gradient_factor(norm, clip, loss_scale, extra);
  out[1] = clip_math::reported_norm(norm, loss_scale);
  out[2] = clip_math::clips(norm, clip, loss_scale) ? 1.0f : 0.0f;
}

__global__ void scale_by_k(float* x, size_t n, const float* factor) {
  const float f = *factor;
  ZF_GRID_STRIDE(i, n) x[i] *= f;
}

}  // namespace

Status sumsq(const float* x, size_t n, double* out, cudaStream_t s) {
  sumsq_k<<<1, kSumThreads, 0, s>>>(x, n, out);
  return launched();
}

Status clip_factor(const double* partial, size_t parts, double sq_div, float clip, float loss_scale, float extra,
                   float* out, cudaStream_t s) {
  clip_factor_k<<<1, 1, 0, s>>>(partial, parts, sq_div, clip, loss_scale, extra, out);
  return launched();
}

Status scale_by(float* x, size_t n, const float* factor, cudaStream_t s) {
  if (!n) return nullptr;
  scale_by_k<<<blocks_for(n), kThreads, 0, s>>>(x, n, factor);
  return launched();
}

}  // namespace zf::kernels::cuda
