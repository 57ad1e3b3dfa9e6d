// GELU (tanh approximation) element by element, shared by the CPU kernel (kernels/cpu/elementwise.cpp)
// and the CUDA kernel (kernels/cuda/elementwise.cu) so that both perform the same operations in the
// same order: with no fused multiply-add on either side (-ffp-contract=off, nvcc --fmad=false) they
// round identically, and the CUDA tests compare them bitwise.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ZF_HD __host__ __device__
#else
#define ZF_HD
#endif

namespace zf::kernels::gelu_math {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

// exp(x) for x in [-80, 80] (NaN for NaN) in plain float arithmetic that GCC vectorizes (libm's expf is a
// call per element): Cephes' expf, exp(x) = 2^n exp(r), r = x - n ln2 in two parts, a degree-6
// polynomial; relative error ~1e-7. Deterministic: the same operations for every element.
// (CMakeLists.txt compiles the CPU kernel with -fno-trapping-math, without which GCC will not
// if-convert the clamps; values are unchanged, IEEE semantics are kept.)
ZF_HD inline float exp_poly(float x) {
  x = x < -80.0f ? -80.0f : x;
  x = x > 80.0f ? 80.0f : x;
  // NaN passes the clamps and stays in r (the result is NaN, as a softmax of NaN logits must be);
  // only n is taken from 0 instead, since converting NaN to an integer is undefined behaviour
  const float xn = x == x ? x : 0.0f;
  const int32_t k = (int32_t)(xn * 1.44269504088896341f + 128.5f) - 128;  // floor(x log2(e) + 0.5)
  const float n = (float)k;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const int32_t bits = (k + 127) << 23;  // 2^n, n in [-116, 116]
#if defined(__CUDA_ARCH__)
  const float scale = __int_as_float(bits);
#else
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
#endif
  return y * scale;
}

// 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): one exponential, no cancellation for large |u|.
ZF_HD inline float gelu_sigma(float v) {
  const float u = kGeluC * (v + 0.044715f * v * v * v);
  return 1.0f / (1.0f + exp_poly(-2.0f * u));
}

ZF_HD inline float gelu_fwd(float v) { return v * gelu_sigma(v); }

// d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx, with 0.5 (1 + tanh u) = s and
// 1 - tanh^2 u = 4 s (1 - s).
ZF_HD inline float gelu_bwd(float v, float dy) {
  const float s = gelu_sigma(v);
  const float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
  return dy * (s + 2.0f * v * s * (1.0f - s) * du);
}

}  // namespace zf::kernels::gelu_math
