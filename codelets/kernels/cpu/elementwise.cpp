// Elementwise kernels: bias, ReLU, GELU (tanh form, as GPT-2, through a vectorized exp), SwiGLU
// (the Llama MLP's silu(gate) * up, silu_math.hpp), accumulate, copy, zero.
// Written as simple loops that GCC vectorizes (-O3 -fno-math-errno). The device-side ones (bias,
// ReLU, GELU, SwiGLU) cut long arrays into fixed chunks (parallel.hpp) that idle device cores help with;
// every element is computed alone, so the result does not depend on who runs which chunk.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/parallel.hpp"
#include "codelets/kernels/gelu_math.hpp"
#include "codelets/kernels/silu_math.hpp"

namespace zf::kernels::cpu {

namespace {
// Chunks of at least kChunk elements (a multiple of 16), at most 16 of them.
constexpr size_t kChunk = 32768;
inline float widen(float x) { return x; }
inline float widen(uint16_t x) { return bf16::to_float(x); }
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

namespace {
// db[j] = sum over the rows of row(i)[j], in row order
template <class Row>
void bias_grad_rows(int B, int N, float* db, Row row) {
  for (int j = 0; j < N; ++j) db[j] = 0.0f;
  for (int i = 0; i < B; ++i) {
    const auto* r = row(i);
    for (int j = 0; j < N; ++j) db[j] += widen(r[j]);
  }
}
}  // namespace

void bias_grad(const float* dy, float* db, int B, int N) {
  bias_grad_rows(B, N, db, [&](int i) { return dy + (size_t)i * N; });
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

// ------------------------------------------------------------------ bf16-stored operands

namespace {
constexpr size_t kBlock = 2048;  // values a block: its fp32 copies stay in L1/L2
// f(in, out, m) on blocks of at most kBlock values of [0, n): the inputs' and (with read_out) the
// outputs' bf16 operands widened into the thread's block buffers, the outputs' rounded back
template <size_t NI, size_t NO, class F>
void mixed_blocks(size_t b, size_t e, const Ew (&in)[NI], const Ew (&out)[NO], bool read_out, F&& f) {
  thread_local float tl[NI + NO][kBlock];
  for (size_t s = b; s < e; s += kBlock) {
    const size_t m = std::min(kBlock, e - s);
    const float* ip[NI];
    float* op[NO];
    for (size_t i = 0; i < NI; ++i) {
      if (!in[i].bf16) {
        ip[i] = static_cast<const float*>(in[i].p) + s;
        continue;
      }
      unpack_bf16(static_cast<const uint16_t*>(in[i].p) + s, tl[i], m);
      ip[i] = tl[i];
    }
    for (size_t o = 0; o < NO; ++o) {
      if (!out[o].bf16) {
        op[o] = static_cast<float*>(out[o].p) + s;
        continue;
      }
      if (read_out) unpack_bf16(static_cast<const uint16_t*>(out[o].p) + s, tl[NI + o], m);
      op[o] = tl[NI + o];
    }
    f(ip, op, m);
    for (size_t o = 0; o < NO; ++o)
      if (out[o].bf16) pack_bf16(op[o], static_cast<uint16_t*>(out[o].p) + s, m);
  }
}
// out[k] = op(in[k]...) where every operand is bf16 as stored: widened and rounded in registers
// (the loop vectorizes), the same bits as mixed()'s blocks (bf16::from_float is pack_bf16's rounding)
template <class Op, class... In>
void all_bf16(size_t n, Ew out, Op op, In... in) {
  auto* o = static_cast<uint16_t*>(out.p);
  chunked(n, [&](size_t b, size_t e) {
    for (size_t k = b; k < e; ++k) o[k] = bf16::from_float(op(bf16::to_float(static_cast<const uint16_t*>(in.p)[k])...));
  });
}
template <size_t NI, size_t NO, class F>
void mixed(size_t n, const Ew (&in)[NI], const Ew (&out)[NO], bool read_out, F&& f) {
  chunked(n, [&](size_t b, size_t e) { mixed_blocks(b, e, in, out, read_out, f); });
}
}  // namespace

void bias_add_mixed(Ew y, const float* b, int B, int N) {
  if (!y.bf16) return bias_add(static_cast<float*>(y.p), b, B, N);
  const int rows = std::max<int>(1, (int)(kChunk / std::max(1, N)));  // rows per tile, as bias_add
  parallel_tiles((B + rows - 1) / rows, [&](int t) {
    thread_local float tl[kBlock];
    for (int i = t * rows; i < std::min(B, (t + 1) * rows); ++i) {
      uint16_t* row = static_cast<uint16_t*>(y.p) + (size_t)i * N;
      for (size_t s = 0; s < (size_t)N; s += kBlock) {
        const size_t m = std::min(kBlock, (size_t)N - s);
        unpack_bf16(row + s, tl, m);
        for (size_t j = 0; j < m; ++j) tl[j] += b[s + j];
        pack_bf16(tl, row + s, m);
      }
    }
  });
}

void bias_grad_mixed(Ew dy, float* db, int B, int N) {
  if (!dy.bf16) return bias_grad(static_cast<const float*>(dy.p), db, B, N);
  // bias_grad's sums, in its order, each row widened in registers
  bias_grad_rows(B, N, db, [&](int i) { return static_cast<const uint16_t*>(dy.p) + (size_t)i * N; });
}

void act_fwd_mixed(bool gelu, Ew x, Ew y, size_t n) {
  if (gelu && x.bf16 && y.bf16)
    return all_bf16(n, y, [](float v) { return gelu_math::gelu_fwd(v); }, x);
  const Ew in[1] = {x}, out[1] = {y};
  mixed(n, in, out, false, [&](const float* const* i, float* const* o, size_t m) {
    if (gelu)
      for (size_t k = 0; k < m; ++k) o[0][k] = gelu_math::gelu_fwd(i[0][k]);
    else
      for (size_t k = 0; k < m; ++k) o[0][k] = i[0][k] > 0.0f ? i[0][k] : 0.0f;
  });
}

void act_bwd_mixed(bool gelu, Ew x, Ew dy, Ew dx, size_t n) {
  if (gelu && x.bf16 && dy.bf16 && dx.bf16)
    return all_bf16(n, dx, [](float v, float d) { return gelu_math::gelu_bwd(v, d); }, x, dy);
  const Ew in[2] = {x, dy}, out[1] = {dx};
  mixed(n, in, out, false, [&](const float* const* i, float* const* o, size_t m) {
    if (gelu)
      for (size_t k = 0; k < m; ++k) o[0][k] = gelu_math::gelu_bwd(i[0][k], i[1][k]);
    else
      for (size_t k = 0; k < m; ++k) o[0][k] = i[0][k] > 0.0f ? i[1][k] : 0.0f;
  });
}

void swiglu_fwd_mixed(Ew gate, Ew up, Ew out, size_t n) {
  if (gate.bf16 && up.bf16 && out.bf16)
    return all_bf16(n, out, [](float g, float u) { return silu_math::swiglu_fwd(g, u); }, gate, up);
  const Ew in[2] = {gate, up}, o1[1] = {out};
  mixed(n, in, o1, false, [&](const float* const* i, float* const* o, size_t m) {
    for (size_t k = 0; k < m; ++k) o[0][k] = silu_math::swiglu_fwd(i[0][k], i[1][k]);
  });
}

void swiglu_bwd_mixed(Ew gate, Ew up, Ew dout, Ew dgate, Ew dup, size_t n) {
  if (gate.bf16 && up.bf16 && dout.bf16 && dgate.bf16 && dup.bf16) {  // in registers, as all_bf16
    const auto *g = static_cast<const uint16_t*>(gate.p), *u = static_cast<const uint16_t*>(up.p),
               *d = static_cast<const uint16_t*>(dout.p);
    auto *dg = static_cast<uint16_t*>(dgate.p), *du = static_cast<uint16_t*>(dup.p);
    chunked(n, [&](size_t b, size_t e) {
      for (size_t k = b; k < e; ++k) {
        float a, c;
        silu_math::swiglu_bwd(bf16::to_float(g[k]), bf16::to_float(u[k]), bf16::to_float(d[k]), &a, &c);
        dg[k] = bf16::from_float(a);
        du[k] = bf16::from_float(c);
      }
    });
    return;
  }
  const Ew in[3] = {gate, up, dout}, out[2] = {dgate, dup};
  mixed(n, in, out, false, [&](const float* const* i, float* const* o, size_t m) {
    for (size_t k = 0; k < m; ++k) silu_math::swiglu_bwd(i[0][k], i[1][k], i[2][k], o[0] + k, o[1] + k);
  });
}

void accumulate_mixed(Ew acc, Ew g, size_t n, float scale) {
  if (acc.bf16 && g.bf16)  // accumulate's acc[i] += scale * g[i], rounded once
    return all_bf16(n, acc, [scale](float a, float x) { return a + scale * x; }, acc, g);
  const Ew in[1] = {g}, out[1] = {acc};
  parallel_ranges(n, 16, size_t{1} << 16, [&](size_t lo, size_t hi) {
    mixed_blocks(lo, hi, in, out, true, [&](const float* const* i, float* const* o, size_t m) {
      accumulate(o[0], i[0], m, scale);
    });
  });
}

void copy(float* dst, const float* src, size_t n) {
  if (n) std::memcpy(dst, src, n * sizeof(float));
}

void zero(float* x, size_t n) {
  if (n) std::memset(x, 0, n * sizeof(float));
}

}  // namespace zf::kernels::cpu
