// AdamW, as torch.optim.AdamW (decoupled weight decay, bias correction). A plain loop that
// GCC vectorizes with -fno-math-errno; with -ffp-contract=off the vector body and the scalar
// tail round identically, so results do not depend on how [0, n) is split into tiles.
#include <cmath>

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

void adam_step(float* __restrict p, const float* __restrict g, float* __restrict m,
               float* __restrict v, size_t n, const AdamParams& hp, int64_t step,
               float grad_scale) {
  const double bc1 = 1.0 - std::pow((double)hp.beta1, (double)step);
  const double bc2 = 1.0 - std::pow((double)hp.beta2, (double)step);
  const float step_size = (float)(hp.lr / bc1);
  const float inv_sqrt_bc2 = (float)(1.0 / std::sqrt(bc2));
  // decoupled decay as p - (lr*wd)*p: 1 - lr*wd rounded to float loses small lr*wd entirely
  const float lr_wd = hp.lr * hp.weight_decay;
  const float b1 = hp.beta1, b2 = hp.beta2, ob1 = 1.0f - hp.beta1, ob2 = 1.0f - hp.beta2;
  const float eps = hp.eps;
  for (size_t i = 0; i < n; ++i) {
    float gi = g[i] * grad_scale;
    float mi = b1 * m[i] + ob1 * gi;
    float vi = b2 * v[i] + ob2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
    float pi = p[i];
    p[i] = (pi - lr_wd * pi) - step_size * (mi / denom);
  }
}

}  // namespace zf::kernels::cpu
