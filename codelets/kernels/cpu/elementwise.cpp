// Elementwise kernels: bias, ReLU, GELU (tanh form, as GPT-2), accumulate, copy, zero.
// Written as simple loops that GCC vectorizes (-O3 -fno-math-errno).
#include <cmath>
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

void gelu_fwd(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kGeluC * (v + 0.044715f * v * v * v);
    y[i] = 0.5f * v * (1.0f + std::tanh(u));
  }
}

void gelu_bwd(const float* x, const float* dy, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kGeluC * (v + 0.044715f * v * v * v);
    float t = std::tanh(u);
    float sech2 = 1.0f - t * t;
    float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * sech2 * du);
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
