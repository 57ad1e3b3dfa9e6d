// Gradient clipping on the CPU (docs/spec.md, "gradient_clipping"): sums of squares, the combined
// factor (kernels/clip_math.hpp) and the in-place scaling.
#include "codelets/kernels/clip_math.hpp"
#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

double sumsq(const float* x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += (double)x[i] * (double)x[i];
  return s;
}

void clip_factor(const double* partial, size_t parts, double sq_div, float clip, float loss_scale, float extra,
                 float* out) {
  double s = 0.0;
  for (size_t i = 0; i < parts; ++i) s += partial[i];
  s /= sq_div;
  const float norm = clip_math::global_norm(s);
  out[0] = clip_math::gradient_factor(norm, clip, loss_scale, extra);
  out[1] = clip_math::reported_norm(norm, loss_scale);
  out[2] = clip_math::clips(norm, clip, loss_scale) ? 1.0f : 0.0f;
}

void scale_by(float* x, size_t n, const float* factor) {
  const float f = *factor;
  for (size_t i = 0; i < n; ++i) x[i] *= f;
}

}  // namespace zf::kernels::cpu
