// SiLU and SwiGLU element by element, shared by the CPU kernel (kernels/cpu/elementwise.cpp) and
// the CUDA kernel (kernels/cuda/llama.cu) so that both perform the same operations in the same
// order (no fused multiply-add on either side): the CUDA tests compare them bitwise. The
// exponential is gelu_math's exp_poly (relative error ~1e-7, argument clamped to [-80, 80]).
#pragma once

#include "codelets/kernels/gelu_math.hpp"

namespace zf::kernels::silu_math {

// sigma(g) = 1 / (1 + exp(-g))
ZF_HD inline float sigmoid(float g) { return 1.0f / (1.0f + gelu_math::exp_poly(-g)); }

// out = silu(g) * u, silu(g) = g sigma(g) (torch.nn.functional.silu, then the product with up)
ZF_HD inline float swiglu_fwd(float g, float u) { return (g * sigmoid(g)) * u; }

// d out / d g = u sigma(g) (1 + g (1 - sigma(g))), d out / d u = silu(g)
ZF_HD inline void swiglu_bwd(float g, float u, float dy, float* dg, float* du) {
  const float s = sigmoid(g);
  *dg = dy * (u * (s * (1.0f + g * (1.0f - s))));
  *du = dy * (g * s);
}

}  // namespace zf::kernels::silu_math
