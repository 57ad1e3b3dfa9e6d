// Elementwise kernels: bias, ReLU, GELU (tanh form, as GPT-2, through a vectorized exp), accumulate,
// copy, zero.
// Written as simple loops that GCC vectorizes (-O3 -fno-math-errno).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

void bias_add(float* y, const float* b, int B, int N) {
  for (int i = 0; i < B; ++i) {
    float* row = y + (size_t)i * N;
    for (int j = 0; j < N; ++j) row[j] += b[j];
  }
}

void bias_grad(const float* dy, float* db, int B, int N) {
  for (int j = 0; j < N; ++j) db[j] = 0.0f;
  for (int i = 0; i < B; ++i) {
    const float* row = dy + (size_t)i * N;
    for (int j = 0; j < N; ++j) db[j] += row[j];
  }
}

void relu_fwd(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_bwd(const float* x, const float* dy, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

static constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

// exp(x) for x in [-80, 80] in plain float arithmetic that GCC vectorizes (libm's expf is a
// call per element): Cephes' expf, exp(x) = 2^n exp(r), r = x - n ln2 in two parts, a degree-6
// polynomial; relative error ~1e-7. Deterministic: the same operations for every element.
// (CMakeLists.txt compiles this file with -fno-trapping-math, without which GCC will not
// if-convert the clamps; values are unchanged, IEEE semantics are kept.)
static inline float exp_poly(float x) {
  x = x < -80.0f ? -80.0f : x;
  x = x > 80.0f ? 80.0f : x;
  const int32_t k = (int32_t)(x * 1.44269504088896341f + 128.5f) - 128;  // floor(x log2(e) + 0.5)
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
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

// 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): one exponential, no cancellation for large |u|.
void gelu_fwd(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluC * (v + 0.044715f * v * v * v);
    const float s = 1.0f / (1.0f + exp_poly(-2.0f * u));
    y[i] = v * s;
  }
}

// d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx, with 0.5 (1 + tanh u) = s and
// 1 - tanh^2 u = 4 s (1 - s).
void gelu_bwd(const float* x, const float* dy, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluC * (v + 0.044715f * v * v * v);
    const float s = 1.0f / (1.0f + exp_poly(-2.0f * u));
    const float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * du);
  }
}

void accumulate(float* acc, const float* g, size_t n, float scale) {
  for (size_t i = 0; i < n; ++i) acc[i] += scale * g[i];
}

void copy(float* dst, const float* src, size_t n) {
  if (n) std::memcpy(dst, src, n * sizeof(float));
}

void zero(float* x, size_t n) {
  if (n) std::memset(x, 0, n * sizeof(float));
}

}  // namespace zf::kernels::cpu
