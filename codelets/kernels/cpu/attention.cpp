// Causal multi-head self-attention that keeps no T x T matrix (flash-attention's memory shape),
// one sequence at a time: the GPT's on its fused qkv (B, T, 3C) = [q | k | v], and grouped-query
// attention (Llama, Qwen2: docs/llama.md) on q (B, T, H hs), k and v (B, T, Hkv hs) held apart,
// query head h reading KV head h / G, G = H / Hkv (HF's repeat_kv).
// Rows are taken kBlock at a time; a block of query rows [r0, r1) reads the columns [0, r1) a
// causal row can see, into a (H, r1 - r0, r1) scratch of its thread.
// Forward, per row block: S = q k^T / sqrt(hs), P = softmax over j <= i, out = P v; what is saved
// is lse (B, H, T), each row's log-sum-exp (fp32), not P.
// Backward, per row block from the last to the first: S again (the forward's call, so the same
// bits), P = exp(S - lse), dP = dout v^T, dS = P (dP - rowsum(P dP)), dq = dS k / sqrt(hs); then
// dv += P^T dout and dk += dS^T q / sqrt(hs) on rows [0, r1). The last block sees every column,
// so group 0's products there write dk and dv and all later ones add: a fixed order (the blocks
// from the last to the first, in each the G query heads sharing a KV head in group order). The
// recomputation costs one more product than keeping P (5 against 4); P from exp(S - lse) differs
// from the forward's normalised P by rounding only.
// The products are oneDNN matmul primitives batched over a tile's heads (kernels/cpu/gemm.hpp:
// one call on the calling thread, created once per shape); the softmax and its backward are
// loops that GCC vectorizes (exp through gelu_math's exp_poly, row sums in lanes.hpp's fixed
// order).
// Two paths:
// - The GPT's (dense): a tile is a sequence, its q, k, v (and dout) packed head by head into
//   dense (H, T, hs) buffers, each block's operands dense (H, rows, hs) copies (the packed heads
//   themselves when one block holds the sequence), its outputs dense (H, rows, hs) copied into
//   place, dk and dv summed in fp32 accumulators (H, T, hs). oneDNN 2.6 runs a batched matmul
//   with brgemm (brg:avx512_core; brg:avx512_core_amx_bf16) only when every operand is dense and
//   falls back to gemm:jit otherwise: in fp32 at T = 64 the strided QK^T took 1.4x the dense one
//   (experiments/flash-attention, "T = 64"), in bf16 3.5-10x (experiments/onednn, "bf16 step").
//   Under bf16 (precision "bf16", where the CPU has native bf16) the packed operands are bf16 (q,
//   k, v and dout rounded, P and dS rounded after the fp32 softmax and its backward), products
//   summed in fp32 into fp32 outputs, as the linear layers' (kernels/cpu/matmul.cpp); otherwise
//   fp32.
// - The grouped-query one (fp32 products): strided views of q, k, v, a call per group j taking
//   the query heads kv G + j. Its tiles are a sequence's KV heads a few at a time (kv_per_tile:
//   as many as keep its scratch near 16 MiB, from the shapes only).
// Operands stored in bf16 (precision bf16's activations and, for the GPT, their gradients:
// attention_*_mixed, gqa_attention_*_mixed) are read as stored: the dense path copies (or
// widens) the stored bits into its packed heads and rounds its outputs as it copies them into
// place; the grouped-query path widens each tile's columns and rounds its outputs there. Either
// way the bits of widening the whole buffers first and rounding the outputs after.
// The tiles of kernels::cpu::parallel_for: the device side's idle cores help, and every tile
// computes the same values whoever runs it (the same calls on the same shapes: bitwise
// independent of the thread count, and of the batch around a sequence). Every scratch is a
// per-thread buffer, fully written before it is read: 2 n min(T, kBlock) T floats for P and dS
// of a tile's n query heads, plus the tile's widened or packed operands
// (attention_workspace_bytes counts them; H = 32, T = 4096, hs = 128: one head a tile, 20 MiB,
// where a whole sequence's were 576 MiB).
// oneDNN against OpenBLAS at the GPT's shapes: docs/architecture.md, "Attention".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

#include "codelets/kernels/cpu/bf16_pack.hpp"
#include "codelets/kernels/cpu/gemm.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cpu/lanes.hpp"
#include "runtime/parallel.hpp"
#include "codelets/kernels/gelu_math.hpp"

namespace zf::kernels::cpu {

namespace {
// f(j) for j in [0, n), 16 at a time (a loop of 16 that GCC turns into one AVX-512 operation, with
// no alignment peeling or scalar epilogue), then one by one
template <class F>
inline void by16(int n, F&& f) {
  int j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; ++k) f(j + k);
  for (; j < n; ++j) f(j);
}
// Row i's exponentials are taken over [0, padded(i, r1)): whole 16-float vectors, so no row ends
// in a scalar loop of exp_poly (which cost more than the vector part at T = 64). What lies past
// the diagonal is computed and then zeroed: elementwise, so the values at j <= i are the same
// bits as a loop that stops at i.
int padded(int i, int r1) { return std::min(r1, (i + 16) / 16 * 16); }
}  // namespace

// Row block [r0, r1) of one head's scores s (r1 - r0 rows of r1 columns, row i - r0 holding query
// i): the causal softmax in place (0 for i < j < r1) and lse[i], the row's log-sum-exp
void causal_softmax(float* s, int r0, int r1, float* lse) {
  for (int i = r0; i < r1; ++i) {
    float* row = s + (size_t)(i - r0) * r1;
    const float mx = lane_max(row, i + 1);
    by16(padded(i, r1), [&](int j) { row[j] = gelu_math::exp_poly(row[j] - mx); });
    const float sum = lane_sum<float>(i + 1, [&](size_t j) { return row[j]; });
    const float inv = 1.0f / sum;
    for (int j = 0; j < r1; ++j) row[j] = j <= i ? row[j] * inv : 0.0f;
    lse[i] = mx + std::log(sum);
  }
}
namespace {
// The backward's probabilities from the scores and the saved lse, in place: exp(s - lse[i]) for
// j <= i, 0 after
void probs_rows(float* s, int r0, int r1, const float* lse) {
  for (int i = r0; i < r1; ++i) {
    float* row = s + (size_t)(i - r0) * r1;
    const float l = lse[i];
    const int n = padded(i, r1);
    by16(n, [&](int j) {
      const float e = gelu_math::exp_poly(row[j] - l);
      row[j] = j <= i ? e : 0.0f;
    });
    for (int j = n; j < r1; ++j) row[j] = 0.0f;
  }
}
}  // namespace

// dS = P (dP - rowsum(P dP)) on a row block (layout as causal_softmax's), in place on dP (ds)
void causal_softmax_bwd(const float* p, float* ds, int r0, int r1) {
  for (int i = r0; i < r1; ++i) {
    const float* pr = p + (size_t)(i - r0) * r1;
    float* dr = ds + (size_t)(i - r0) * r1;
    const float dot = lane_sum<float>(i + 1, [&](size_t j) { return pr[j] * dr[j]; });
    for (int j = 0; j < r1; ++j) dr[j] = j <= i ? pr[j] * (dr[j] - dot) : 0.0f;
  }
}
namespace {
constexpr int kBlock = 64;

// The batched product over n heads: C_i (M, N) (+)= alpha op(A_i) op(B_i), head strides sa, sb, sc
void heads(int M, int N, int K, bool ta, bool tb, int lda, int ldb, int ldc, float alpha, int n, int64_t sa,
           int64_t sb, int64_t sc, const float* A, const float* B, float* Cm, bool acc = false) {
  dnnl_gemm({M, N, K, ta, tb, lda, ldb, ldc, acc, false, alpha, n, sa, sb, sc}, A, B, Cm);
}

// Row-major views: q (B, T, ldq) with head h at column h hs, k and v (B, T, ldkv) with KV head g at
// column g hs; out and dout (B, T, ldo) as q's heads.
struct Views {
  const float *q, *k, *v;
  int ldq, ldkv, ldo;
  int B, T, H, Hkv, hs;
  const uint16_t* qkv16 = nullptr;  // the dense path: the GPT's fused qkv as stored in bf16 (q null)
  uint16_t* out16 = nullptr;        // the forward: out stored in bf16 (rounded into place)
  const uint16_t* dout16 = nullptr; // the backward: dout stored in bf16 (the dout argument null)
  // the grouped-query path: q, k, v stored in bf16 (each tile's columns widened; q, k, v null)
  const uint16_t *q16 = nullptr, *k16 = nullptr, *v16 = nullptr;
};
// The grouped-query path's tile: sequence b's KV heads [g0, g0 + ng) and their query heads
// [g0 G, (g0 + ng) G). KV heads are taken kv_per_tile at a time, a number from the shapes only,
// so that a tile's scratch (its widened operands and a row block's P and dS) stays near
// kTileBytes: at T = 4096 one head (about 19 MB), where a whole sequence's was 576 MB.
constexpr size_t kTileBytes = size_t(16) << 20;
int kv_per_tile(int T, int Hkv, int G, int hs) {
  const size_t blk = 2 * (size_t)G * std::min(T, 64) * T, ops = (size_t)T * hs * (4 * (size_t)G + 4);
  return (int)std::clamp<size_t>(kTileBytes / (sizeof(float) * (blk + ops)), 1, (size_t)std::max(Hkv, 1));
}
// Columns [c0, c0 + n) of sequence b's T rows (row stride ld) of an operand as fp32: in place,
// or its bf16 bits widened (exact) into buf, row stride n
struct Cols {
  const float* p;
  int ld;
};
Cols cols_f32(const float* f, const uint16_t* h, int ld, int b, int T, int c0, int n, std::vector<float>& buf) {
  const size_t row0 = (size_t)b * T;
  if (!h) return {f + row0 * ld + c0, ld};
  if (buf.size() < (size_t)T * n) buf.resize((size_t)T * n);
  for (int t = 0; t < T; ++t) unpack_bf16(h + (row0 + t) * ld + c0, buf.data() + (size_t)t * n, (size_t)n);
  return {buf.data(), n};
}
// A tile's output columns: in place (f), or a buffer (row stride n) that round_cols rounds into
// the bf16 output h after
struct OutCols {
  float* p;
  int ld;
};
OutCols out_cols(float* f, uint16_t* h, int ld, int b, int T, int c0, int n, std::vector<float>& buf) {
  if (!h) return {f + (size_t)b * T * ld + c0, ld};
  if (buf.size() < (size_t)T * n) buf.resize((size_t)T * n);
  return {buf.data(), n};
}
void round_cols(const OutCols& o, uint16_t* h, int ld, int b, int T, int c0, int n) {
  if (!h) return;
  for (int t = 0; t < T; ++t) to_bf16(o.p + (size_t)t * n, h + ((size_t)b * T + t) * ld + c0, (size_t)n);
}
// the grouped-query path's per-thread operand buffers (q, k, v, out or dout; dq, dk, dv)
thread_local std::vector<float> tl_q, tl_k, tl_v, tl_o, tl_dq, tl_dk, tl_dv;
struct Grads {
  float *dq, *dk, *dv;  // strides ldq, ldkv, ldkv as the views
  uint16_t* dqkv16 = nullptr;  // the dense path: the GPT's fused dqkv stored in bf16 (rounded into place)
  // the grouped-query path: dq, dk, dv stored in bf16 (each tile's computed in its fp32 buffers,
  // then rounded into place; dq, dk, dv null)
  uint16_t *dq16 = nullptr, *dk16 = nullptr, *dv16 = nullptr;
};

template <class V>
V* grown(std::vector<V>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}
// A row block's P (the forward's scores and probabilities) and dP/dS, (H, m, r1) each: one pair
// per thread, shared by every path
thread_local std::vector<float> tl_p, tl_ds;
size_t block_floats(int T, int H) { return (size_t)H * std::min(T, kBlock) * T; }
// the first row of the last row block (the backward runs the blocks from it down to 0)
int last_block(int T) { return T > 0 ? (T - 1) / kBlock * kBlock : 0; }

void fwd_fp32(const Views& w, float* out, float* lse) {
  const int T = w.T, H = w.H, Hkv = w.Hkv, G = H / Hkv, hs = w.hs;
  const float scale = 1.0f / std::sqrt((float)hs);
  const int64_t gq = (int64_t)G * hs;
  const int nkv = kv_per_tile(T, Hkv, G, hs), per = (Hkv + nkv - 1) / nkv;
  parallel_tiles(w.B * per, [&](int tile) {
    const int b = tile / per, g0 = tile % per * nkv, ng = std::min(nkv, Hkv - g0), nh = ng * G;
    const Cols q = cols_f32(w.q, w.q16, w.ldq, b, T, g0 * G * hs, nh * hs, tl_q);
    const Cols k = cols_f32(w.k, w.k16, w.ldkv, b, T, g0 * hs, ng * hs, tl_k);
    const Cols v = cols_f32(w.v, w.v16, w.ldkv, b, T, g0 * hs, ng * hs, tl_v);
    const OutCols o = out_cols(out, w.out16, w.ldo, b, T, g0 * G * hs, nh * hs, tl_o);
    float* s = grown(tl_p, block_floats(T, nh));
    float* l = lse + ((size_t)b * H + (size_t)g0 * G) * T;  // (nh, T) of (B, H, T)
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
      const int64_t mn = (int64_t)m * r1;
      for (int j = 0; j < G; ++j)
        heads(m, r1, hs, false, true, q.ld, k.ld, r1, scale, ng, gq, hs, G * mn, q.p + (size_t)r0 * q.ld + j * hs,
              k.p, s + j * mn);
      for (int hd = 0; hd < nh; ++hd) causal_softmax(s + hd * mn, r0, r1, l + (size_t)hd * T);
      for (int j = 0; j < G; ++j)
        heads(m, hs, r1, false, false, r1, v.ld, o.ld, 1.0f, ng, G * mn, hs, gq, s + j * mn, v.p,
              o.p + j * hs + (size_t)r0 * o.ld);
    }
    round_cols(o, w.out16, w.ldo, b, T, g0 * G * hs, nh * hs);
  });
}

// One tile's backward (fwd_fp32's tiles), row blocks from the last to the first: the last
// block's columns are all T rows of dk and dv, so group 0's products there write them and every
// later product adds
void bwd_tile(const Views& w, const float* dout, const float* lse, const Grads& g, int b, int g0, int ng) {
  const int T = w.T, H = w.H, Hkv = w.Hkv, G = H / Hkv, hs = w.hs, nh = ng * G;
  const float scale = 1.0f / std::sqrt((float)hs);
  const int64_t gq = (int64_t)G * hs;
  const int cq = g0 * G * hs, ckv = g0 * hs;  // the tile's first columns
  const Cols q = cols_f32(w.q, w.q16, w.ldq, b, T, cq, nh * hs, tl_q);
  const Cols k = cols_f32(w.k, w.k16, w.ldkv, b, T, ckv, ng * hs, tl_k);
  const Cols v = cols_f32(w.v, w.v16, w.ldkv, b, T, ckv, ng * hs, tl_v);
  const Cols dO = cols_f32(dout, w.dout16, w.ldo, b, T, cq, nh * hs, tl_o);
  const OutCols dq = out_cols(g.dq, g.dq16, w.ldq, b, T, cq, nh * hs, tl_dq);
  const OutCols dk = out_cols(g.dk, g.dk16, w.ldkv, b, T, ckv, ng * hs, tl_dk);
  const OutCols dv = out_cols(g.dv, g.dv16, w.ldkv, b, T, ckv, ng * hs, tl_dv);
  float *p = grown(tl_p, block_floats(T, nh)), *ds = grown(tl_ds, block_floats(T, nh));
  const float* l = lse + ((size_t)b * H + (size_t)g0 * G) * T;
  const int last = last_block(T);
  for (int r0 = last; r0 >= 0; r0 -= kBlock) {
    const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
    const int64_t mn = (int64_t)m * r1;
    const float* qb = q.p + (size_t)r0 * q.ld;
    const float* ob = dO.p + (size_t)r0 * dO.ld;
    for (int j = 0; j < G; ++j) {  // S again (the forward's call), dP = dout v^T
      heads(m, r1, hs, false, true, q.ld, k.ld, r1, scale, ng, gq, hs, G * mn, qb + j * hs, k.p, p + j * mn);
      heads(m, r1, hs, false, true, dO.ld, v.ld, r1, 1.0f, ng, gq, hs, G * mn, ob + j * hs, v.p, ds + j * mn);
    }
    for (int hd = 0; hd < nh; ++hd) {
      probs_rows(p + hd * mn, r0, r1, l + (size_t)hd * T);
      causal_softmax_bwd(p + hd * mn, ds + hd * mn, r0, r1);
    }
    for (int j = 0; j < G; ++j) {
      const bool acc = r0 != last || j > 0;
      heads(m, hs, r1, false, false, r1, k.ld, dq.ld, scale, ng, G * mn, hs, gq, ds + j * mn, k.p,
            dq.p + j * hs + (size_t)r0 * dq.ld);                                                 // dq = dS k
      heads(r1, hs, m, true, false, r1, dO.ld, dv.ld, 1.0f, ng, G * mn, gq, hs, p + j * mn, ob + j * hs, dv.p,
            acc);                                                                                // dv += P^T dout
      heads(r1, hs, m, true, false, r1, q.ld, dk.ld, scale, ng, G * mn, gq, hs, ds + j * mn, qb + j * hs, dk.p,
            acc);                                                                                // dk += dS^T q
    }
  }
  round_cols(dq, g.dq16, w.ldq, b, T, cq, nh * hs);
  round_cols(dk, g.dk16, w.ldkv, b, T, ckv, ng * hs);
  round_cols(dv, g.dv16, w.ldkv, b, T, ckv, ng * hs);
}

// The GPT's path (H == Hkv, the fused qkv): operands packed head by head into dense (heads, T, hs)
// buffers of the products' type E (uint16_t: bf16 products, precision "bf16" where the CPU has
// native bf16; float: fp32 products), every product on dense operands and outputs. oneDNN 2.6
// runs a batched matmul with brgemm (brg:avx512_core, brg:avx512_core_amx_bf16) only when every
// operand is dense, and falls back to gemm:jit otherwise: in fp32 at T = 64, 1.4x slower for QK^T
// (experiments/flash-attention, "T = 64"); in bf16 3.5-10x (experiments/onednn, "bf16 step").
// A tile is a sequence, packed [q | k | v], each part (H, T, hs). (Tiles of several short
// sequences, each call batched over all their heads, made the kernel 5 % faster on one thread
// but the attention tasks 10 % slower in a run at T = 64, where the device's second core helps
// with tiles: experiments/flash-attention, "T = 64".)

// n values of x as y's type: rounded to bf16, copied, or widened (a stored bf16 x into fp32)
inline void put(const float* x, uint16_t* y, size_t n) { to_bf16(x, y, n); }
inline void put(const uint16_t* x, uint16_t* y, size_t n) { std::copy_n(x, n, y); }
inline void put(const float* x, float* y, size_t n) {
  for (size_t c = 0; c < n; ++c) y[c] = x[c];  // inline: hs is short, a memmove call costs more
}
inline void put(const uint16_t* x, float* y, size_t n) { unpack_bf16(x, y, n); }

// T rows of n heads of hs columns (head h at column h hs, row stride ld) of x into dst (n, T, hs)
template <class S, class E>
void pack_heads(const S* x, int T, int ld, int n, int hs, E* dst) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < n; ++h) put(x + (size_t)t * ld + (size_t)h * hs, dst + ((size_t)h * T + t) * hs, hs);
}
// Sequence b of the fused qkv (row stride ld = 3 H hs) as 3H heads, (3H, T, hs): q's heads, then
// k's, then v's; from the stored bf16 bits, or from fp32
template <class E>
void pack_qkv(const Views& w, int b, std::vector<E>& buf) {
  const size_t row0 = (size_t)b * w.T * w.ldq;
  E* d = grown(buf, (size_t)3 * w.H * w.T * w.hs);
  if (w.qkv16)
    pack_heads(w.qkv16 + row0, w.T, w.ldq, 3 * w.H, w.hs, d);
  else
    pack_heads(w.q + row0, w.T, w.ldq, 3 * w.H, w.hs, d);
}
// the same for sequence b of dout (row stride ld = H hs): (H, T, hs)
template <class S, class E>
const E* pack_rows(const S* x, int b, const Views& w, std::vector<E>& buf) {
  E* d = grown(buf, (size_t)w.H * w.T * w.hs);
  pack_heads(x + (size_t)b * w.T * w.ldo, w.T, w.ldo, w.H, w.hs, d);
  return d;
}
// Rows [r0, r1) of n packed heads x (n, T, hs) as a dense (n, r1 - r0, hs): x itself for all T
// rows, else copied into buf
template <class E>
const E* head_rows(const E* x, int T, int n, int hs, int r0, int r1, std::vector<E>& buf) {
  if (r0 == 0 && r1 == T) return x;
  const size_t m = (size_t)(r1 - r0) * hs;
  E* d = grown(buf, (size_t)n * m);
  for (int h = 0; h < n; ++h) std::copy_n(x + ((size_t)h * T + r0) * hs, m, d + h * m);
  return d;
}
// g (n, T, hs) into y (T rows, row stride ld, head h at column h hs): rounded to bf16, or copied
template <class Y>
void unpack_heads(const float* g, int T, int ld, int n, int hs, Y* y) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < n; ++h) put(g + ((size_t)h * T + t) * hs, y + (size_t)t * ld + (size_t)h * hs, hs);
}
// P or dS (fp32) as the products' operand: itself, or rounded to bf16 into buf
const float* operand(const float* x, size_t, std::vector<float>&) { return x; }
const uint16_t* operand(const float* x, size_t n, std::vector<uint16_t>& buf) {
  to_bf16(x, grown(buf, n), n);
  return buf.data();
}
// The batched product over n dense heads: C_i (M, N) = alpha op(A_i) op(B_i), A_i (M, K) (or
// (K, M) with ta), B_i (K, N) (or (N, K) with tb), C_i (M, N), all row-major with no gaps
// between heads; E = uint16_t: bf16 operands, summed in fp32
template <class E>
void dense_heads(int M, int N, int K, bool ta, bool tb, float alpha, int n, const E* A, const E* B, float* Cm) {
  dnnl_gemm({M, N, K, ta, tb, ta ? M : K, tb ? K : N, N, false, std::is_same_v<E, uint16_t>, alpha, n,
             (int64_t)M * K, (int64_t)K * N, (int64_t)M * N},
            A, B, Cm);
}
// rows [r0, r0 + m) of sequence b of a (B, T, ld) output from o (H, m, hs): into out16 (rounded)
// where given, else out
void put_rows(const Views& w, const float* o, int b, int r0, int m, float* out, uint16_t* out16, int ld) {
  const size_t row0 = ((size_t)b * w.T + r0) * ld;
  if (out16)
    unpack_heads(o, m, ld, w.H, w.hs, out16 + row0);
  else
    unpack_heads(o, m, ld, w.H, w.hs, out + row0);
}

template <class E>
void fwd_dense(const Views& w, float* out, float* lse) {
  const int T = w.T, hs = w.hs, n = w.H;
  const float scale = 1.0f / std::sqrt((float)hs);
  parallel_tiles(w.B, [&](int b) {
    thread_local std::vector<E> hqkv, hp, bq, bk, bv;
    thread_local std::vector<float> o;
    pack_qkv(w, b, hqkv);
    const size_t part = (size_t)n * T * hs;
    const E *q = hqkv.data(), *k = q + part, *v = k + part;
    float* s = grown(tl_p, block_floats(T, n));
    float* ob = grown(o, (size_t)n * std::min(T, kBlock) * hs);
    float* l = lse + (size_t)b * n * T;  // (H, T)
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
      const size_t mn = (size_t)m * r1;
      const E* kb = head_rows(k, T, n, hs, 0, r1, bk);
      dense_heads(m, r1, hs, false, true, scale, n, head_rows(q, T, n, hs, r0, r1, bq), kb, s);
      for (int hd = 0; hd < n; ++hd) causal_softmax(s + hd * mn, r0, r1, l + (size_t)hd * T);
      dense_heads(m, hs, r1, false, false, 1.0f, n, operand(s, n * mn, hp), head_rows(v, T, n, hs, 0, r1, bv), ob);
      put_rows(w, ob, b, r0, m, out, w.out16, w.ldo);
    }
  });
}

// Sequence b's backward, row blocks from the last to the first as bwd_tile's; dk and dv sum the
// blocks' (H, r1, hs) products in fp32 accumulators (H, T, hs), which the last block's (r1 = T)
// write
template <class E>
void bwd_dense(const Views& w, const float* dout, const float* lse, const Grads& g, int b) {
  thread_local std::vector<E> hqkv, hd, hp, hs16, bq, bk, bv, bo;
  thread_local std::vector<float> o, ak, av;
  const int T = w.T, hs = w.hs, n = w.H;
  const float scale = 1.0f / std::sqrt((float)hs);
  const size_t Th = (size_t)T * hs, part = (size_t)n * Th;
  pack_qkv(w, b, hqkv);
  const E *q = hqkv.data(), *k = q + part, *v = k + part;
  const E* dO = w.dout16 ? pack_rows(w.dout16, b, w, hd) : pack_rows(dout, b, w, hd);
  float *p = grown(tl_p, block_floats(T, n)), *ds = grown(tl_ds, block_floats(T, n));
  float* t = grown(o, part);
  float *dk = grown(ak, part), *dv = grown(av, part);
  const float* l = lse + (size_t)b * n * T;
  const size_t C = (size_t)w.H * hs;
  // acc (n, T, hs) rows [0, r1) += t (n, r1, hs)
  auto add = [&](float* acc, int r1) {
    const size_t len = (size_t)r1 * hs;
    for (int h = 0; h < n; ++h) {
      float* a = acc + h * Th;
      const float* x = t + h * len;
      for (size_t i = 0; i < len; ++i) a[i] += x[i];
    }
  };
  const int last = last_block(T);
  for (int r0 = last; r0 >= 0; r0 -= kBlock) {
    const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
    const size_t mn = (size_t)m * r1;
    const E* qb = head_rows(q, T, n, hs, r0, r1, bq);
    const E* ob = head_rows(dO, T, n, hs, r0, r1, bo);
    const E* kb = head_rows(k, T, n, hs, 0, r1, bk);
    dense_heads(m, r1, hs, false, true, scale, n, qb, kb, p);                                // S again
    dense_heads(m, r1, hs, false, true, 1.0f, n, ob, head_rows(v, T, n, hs, 0, r1, bv), ds);  // dP = dout v^T
    for (int h = 0; h < n; ++h) {
      probs_rows(p + h * mn, r0, r1, l + (size_t)h * T);
      causal_softmax_bwd(p + h * mn, ds + h * mn, r0, r1);
    }
    const E* pe = operand(p, n * mn, hp);
    const E* dse = operand(ds, n * mn, hs16);
    dense_heads(m, hs, r1, false, false, scale, n, dse, kb, t);  // dq = dS k / sqrt(hs)
    put_rows(w, t, b, r0, m, g.dq, g.dqkv16, w.ldq);
    const bool first = r0 == last;
    dense_heads(r1, hs, m, true, false, 1.0f, n, pe, ob, first ? dv : t);  // dv += P^T dout
    if (!first) add(dv, r1);
    dense_heads(r1, hs, m, true, false, scale, n, dse, qb, first ? dk : t);  // dk += dS^T q / sqrt(hs)
    if (!first) add(dk, r1);
  }
  put_rows(w, dv, b, 0, T, g.dv, g.dqkv16 ? g.dqkv16 + 2 * C : nullptr, w.ldkv);
  put_rows(w, dk, b, 0, T, g.dk, g.dqkv16 ? g.dqkv16 + C : nullptr, w.ldkv);
}

// The backward over the tiles (each tile's buffers are its thread's)
void bwd(const Views& w, const float* dout, const float* lse, const Grads& g) {
  if (w.T == 0) return;
  const int G = w.H / w.Hkv, nkv = kv_per_tile(w.T, w.Hkv, G, w.hs), per = (w.Hkv + nkv - 1) / nkv;
  parallel_tiles(w.B * per, [&](int tile) {
    const int g0 = tile % per * nkv;
    bwd_tile(w, dout, lse, g, tile / per, g0, std::min(nkv, w.Hkv - g0));
  });
}
// the GPT's backward (a sequence a tile)
void bwd_gpt(const Views& w, const float* dout, const float* lse, const Grads& g, bool bf16) {
  if (w.T == 0) return;
  parallel_tiles(w.B, [&](int b) {
    if (bf16)
      bwd_dense<uint16_t>(w, dout, lse, g, b);
    else
      bwd_dense<float>(w, dout, lse, g, b);
  });
}
}  // namespace

size_t attention_workspace_bytes(int T, int H, int Hkv, int hs, bool gpt, bool bf16_products) {
  if (!gpt) {
    // the grouped-query path's tile: P and dS for its heads, the widened q, k, v, dout and the
    // rows of a bf16 out, dq, dk, dv (kv_per_tile's count)
    const int G = H / std::max(Hkv, 1), nkv = kv_per_tile(T, Hkv, G, hs), nh = nkv * G;
    const size_t tq = (size_t)T * nh * hs, tkv = (size_t)T * nkv * hs;
    return sizeof(float) * (2 * block_floats(T, nh) + 4 * tq + 4 * tkv);
  }
  // the GPT's tile (a sequence): P and dS (fp32); the backward's packed q, k, v, dout and their
  // block copies (4 and 4 (H, T, hs) at most), P and dS as operands (bf16 copies; fp32 products
  // use them in place), in E's bytes; its fp32 dq block and dk, dv accumulators
  const size_t e = bf16_products ? 2 : 4, th = (size_t)T * H * hs, blk = block_floats(T, H);
  return 2 * sizeof(float) * blk + e * 8 * th + (bf16_products ? 2 * e * blk : 0) + 4 * (3 * th);
}

namespace {
// the GPT's views of its fused qkv, as stored (fp32, or bf16 bits)
Views gpt_views(Ew qkv, int B, int T, int C, int NH) {
  Views w{static_cast<const float*>(qkv.p), nullptr, nullptr, 3 * C, 3 * C, C, B, T, NH, NH, C / NH};
  if (qkv.bf16) w.q = nullptr, w.qkv16 = static_cast<const uint16_t*>(qkv.p);
  return w;
}
void fwd_gpt(const Views& w, float* out, float* lse, bool bf16) {
  if (w.T == 0) return;
  if (bf16 && native_bf16())
    fwd_dense<uint16_t>(w, out, lse);
  else
    fwd_dense<float>(w, out, lse);
}
}  // namespace

void attention_fwd(const float* qkv, float* out, float* lse, int B, int T, int C, int NH, bool bf16) {
  fwd_gpt(gpt_views({const_cast<float*>(qkv), false}, B, T, C, NH), out, lse, bf16);
}

void attention_bwd(const float* dout, const float* qkv, const float* lse, float* dqkv, int B, int T, int C, int NH,
                   bool bf16) {
  bwd_gpt(gpt_views({const_cast<float*>(qkv), false}, B, T, C, NH), dout, lse, Grads{dqkv, dqkv + C, dqkv + 2 * C},
          bf16 && native_bf16());
}

// Stored bf16 operands are packed as they are (widened for fp32 products) and the outputs rounded
// as they are copied into place: the bits of widening the buffers first and rounding after
void attention_fwd_mixed(Ew qkv, Ew out, float* lse, int B, int T, int C, int NH, bool bf16) {
  Views w = gpt_views(qkv, B, T, C, NH);
  if (out.bf16) w.out16 = static_cast<uint16_t*>(out.p);
  fwd_gpt(w, static_cast<float*>(out.p), lse, bf16);
}

void attention_bwd_mixed(Ew dout, Ew qkv, const float* lse, Ew dqkv, int B, int T, int C, int NH, bool bf16) {
  Views w = gpt_views(qkv, B, T, C, NH);
  if (dout.bf16) w.dout16 = static_cast<const uint16_t*>(dout.p);
  float* d = static_cast<float*>(dqkv.p);
  Grads g{d, d + C, d + 2 * C};
  if (dqkv.bf16) g.dqkv16 = static_cast<uint16_t*>(dqkv.p);
  bwd_gpt(w, dout.bf16 ? nullptr : static_cast<const float*>(dout.p), lse, g, bf16 && native_bf16());
}

void gqa_attention_fwd(const float* q, const float* k, const float* v, float* out, float* lse, int B, int T, int H,
                       int Hkv, int hs) {
  fwd_fp32(Views{q, k, v, H * hs, Hkv * hs, H * hs, B, T, H, Hkv, hs}, out, lse);
}

namespace {
// grouped-query attention's views of q, k, v as stored (fp32, or bf16 bits)
Views gqa_views(Ew q, Ew k, Ew v, int B, int T, int H, int Hkv, int hs) {
  auto f = [](Ew x) { return x.bf16 ? nullptr : static_cast<const float*>(x.p); };
  auto h = [](Ew x) { return x.bf16 ? static_cast<const uint16_t*>(x.p) : nullptr; };
  Views w{f(q), f(k), f(v), H * hs, Hkv * hs, H * hs, B, T, H, Hkv, hs};
  w.q16 = h(q), w.k16 = h(k), w.v16 = h(v);
  return w;
}
}  // namespace

void gqa_attention_fwd_mixed(Ew q, Ew k, Ew v, Ew out, float* lse, int B, int T, int H, int Hkv, int hs) {
  Views w = gqa_views(q, k, v, B, T, H, Hkv, hs);
  if (out.bf16) w.out16 = static_cast<uint16_t*>(out.p);
  fwd_fp32(w, static_cast<float*>(out.p), lse);
}

void gqa_attention_bwd_mixed(Ew dout, Ew q, Ew k, Ew v, const float* lse, Ew dq, Ew dk, Ew dv,
                             int B, int T, int H, int Hkv, int hs) {
  Views w = gqa_views(q, k, v, B, T, H, Hkv, hs);
  if (dout.bf16) w.dout16 = static_cast<const uint16_t*>(dout.p);
  auto f = [](Ew x) { return x.bf16 ? nullptr : static_cast<float*>(x.p); };
  auto h = [](Ew x) { return x.bf16 ? static_cast<uint16_t*>(x.p) : nullptr; };
  Grads g{f(dq), f(dk), f(dv)};
  g.dq16 = h(dq), g.dk16 = h(dk), g.dv16 = h(dv);
  bwd(w, dout.bf16 ? nullptr : static_cast<const float*>(dout.p), lse, g);
}
void gqa_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* lse,
                       float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int hs) {
  bwd(Views{q, k, v, H * hs, Hkv * hs, H * hs, B, T, H, Hkv, hs}, dout, lse, Grads{dq, dk, dv});
}

}  // namespace zf::kernels::cpu
