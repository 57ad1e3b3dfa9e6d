// Elementwise kernels: bias, ReLU, GELU (tanh form, as GPT-2, through a vectorized exp), SwiGLU
// (the Llama MLP's silu(gate) * up, silu_math.hpp), accumulate, copy, zero.
// Written as simple loops that GCC vectorizes (-O3 -fno-math-errno). The device-side ones (bias,
// ReLU, GELU, SwiGLU) cut long arrays into fixed chunks (parallel.hpp) that idle device cores help with;
// every element is computed alone, so the result does not depend on who runs which chunk.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/parallel.hpp"
#include "codelets/kernels/gelu_math.hpp"
#include "codelets/kernels/silu_math.hpp"

namespace zf::kernels::cpu {

namespace {
// Chunks of at least kChunk elements (a multiple of 16), at most 16 of them.
constexpr size_t kChunk = 32768;
template <class F>
void chunked(size_t n, F&& f) {  // f(begin, end)
  const size_t tiles = std::min<size_t>(16, std::max<size_t>(1, n / kChunk));
  size_t len = (n + tiles - 1) / tiles;
  len = (len + 15) / 16 * 16;
  parallel_tiles((int)((n + len - 1) / len), [&](int t) {
    const size_t b = (size_t)t * len;
    f(b, std::min(n, b + len));
  });
}
}  // namespace

void bias_add(float* y, const float* b, int B, int N) {
  const int rows = std::max<int>(1, (int)(kChunk / std::max(1, N)));  // rows per tile
  parallel_tiles((B + rows - 1) / rows, [&](int t) {
    for (int i = t * rows; i < std::min(B, (t + 1) * rows); ++i) {
      float* row = y + (size_t)i * N;
      for (int j = 0; j < N; ++j) row[j] += b[j];
    }
  });
}

void bias_grad(const float* dy, float* db, int B, int N) {
  for (int j = 0; j < N; ++j) db[j] = 0.0f;
  for (int i = 0; i < B; ++i) {
    const float* row = dy + (size_t)i * N;
    for (int j = 0; j < N; ++j) db[j] += row[j];
  }
}

void relu_fwd(const float* x, float* y, size_t n) {
  chunked(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  });
}

void relu_bwd(const float* x, const float* dy, float* dx, size_t n) {
  chunked(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  });
}

void gelu_fwd(const float* x, float* y, size_t n) {
  chunked(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) y[i] = gelu_math::gelu_fwd(x[i]);
  });
}

void gelu_bwd(const float* x, const float* dy, float* dx, size_t n) {
  chunked(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) dx[i] = gelu_math::gelu_bwd(x[i], dy[i]);
  });
}

void swiglu_fwd(const float* gate, const float* up, float* out, size_t n) {
  chunked(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) out[i] = silu_math::swiglu_fwd(gate[i], up[i]);
  });
}

void swiglu_bwd(const float* gate, const float* up, const float* dout, float* dgate, float* dup, size_t n) {
  chunked(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) silu_math::swiglu_bwd(gate[i], up[i], dout[i], dgate + i, dup + i);
  });
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
