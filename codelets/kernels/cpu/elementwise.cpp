// Elementwise kernels: bias, ReLU, GELU (tanh form, as GPT-2, through a vectorized exp), accumulate,
// copy, zero.
// Written as simple loops that GCC vectorizes (-O3 -fno-math-errno).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/gelu_math.hpp"

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

void gelu_fwd(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = gelu_math::gelu_fwd(x[i]);
}

void gelu_bwd(const float* x, const float* dy, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = gelu_math::gelu_bwd(x[i], dy[i]);
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
