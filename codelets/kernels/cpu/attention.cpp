// Causal multi-head self-attention that keeps no T x T matrix (flash-attention's memory shape),
// one sequence at a time: the GPT's on strided views of its fused qkv (B, T, 3C) = [q | k | v],
// and grouped-query attention (Llama, Qwen2: docs/llama.md) on q (B, T, H hs), k and v
// (B, T, Hkv hs) held apart, query head h reading KV head h / G, G = H / Hkv (HF's repeat_kv).
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
// The products are oneDNN matmul primitives batched over Hkv heads (kernels/cpu/gemm.hpp: one
// call on the calling thread, created once per shape): group j's call takes the query heads
// kv G + j, so with G = 1 (the GPT) it is one call over all heads; the softmax and its backward
// are loops that GCC vectorizes (exp through gelu_math's exp_poly, row sums in lanes.hpp's fixed
// order).
// bf16 (precision "bf16", where the CPU has native bf16; the GPT's attention, one KV head per
// query head): the products' operands are rounded to bf16 (q, k, v and dout per sequence, P and
// dS after the fp32 softmax and its backward), products summed in fp32 into fp32 outputs, as the
// linear layers' (kernels/cpu/matmul.cpp). The bf16 operands are packed head by head, (H, T, hs),
// and each block's operands are dense (H, rows, hs) copies (the packed heads themselves when one
// block holds the sequence): oneDNN 2.6 runs a batched bf16 matmul on AMX (brg:avx512_core_amx_bf16)
// only when every operand is dense and falls back to gemm:jit otherwise (3.5-10x slower at the
// GPT's shapes: experiments/onednn, "bf16 step"). dk and dv sum the blocks' dense products in
// fp32 accumulators (H, T, hs) of the thread.
// Operands stored in bf16 (precision bf16's activations and, for the GPT, their gradients:
// attention_*_mixed, gqa_attention_*_mixed) are read as stored: the bf16 path copies the stored
// bits into its packed heads and rounds its outputs as it copies them into place; the fp32 path
// widens each sequence's rows in the tile that computes it and rounds its out there. Either way
// the bits of widening the whole buffers first and rounding the outputs after.
// The tiles of kernels::cpu::parallel_for: the fp32 path's are a sequence's KV heads a few at a
// time (kv_per_tile: as many as keep its scratch near 16 MiB, from the shapes only), the bf16
// path's a whole sequence. The device side's idle cores help, and every tile computes the same
// values whoever runs it (the same calls on the same shapes: bitwise independent of the thread
// count). Every scratch is a per-thread buffer, fully written before it is read: fp32,
// 2 n min(T, kBlock) T floats for P and dS of a tile's n query heads, plus the tile's widened or
// packed operands (attention_workspace_bytes counts them; H = 32, T = 4096, hs = 128: one head
// a tile, 20 MiB, where a whole sequence's were 576 MiB).
// oneDNN against OpenBLAS at the GPT's shapes: docs/architecture.md, "Attention".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "codelets/kernels/cpu/bf16_pack.hpp"
#include "codelets/kernels/cpu/gemm.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cpu/lanes.hpp"
#include "runtime/parallel.hpp"
#include "codelets/kernels/gelu_math.hpp"

namespace zf::kernels::cpu {

// Row block [r0, r1) of one head's scores s (r1 - r0 rows of r1 columns, row i - r0 holding query
// i): the causal softmax in place (0 for i < j < r1) and lse[i], the row's log-sum-exp
void causal_softmax(float* s, int r0, int r1, float* lse) {
  for (int i = r0; i < r1; ++i) {
    float* row = s + (size_t)(i - r0) * r1;
    const float mx = lane_max(row, i + 1);
    for (int j = 0; j <= i; ++j) row[j] = gelu_math::exp_poly(row[j] - mx);
    const float sum = lane_sum<float>(i + 1, [&](size_t j) { return row[j]; });
    const float inv = 1.0f / sum;
    for (int j = 0; j <= i; ++j) row[j] *= inv;
    for (int j = i + 1; j < r1; ++j) row[j] = 0.0f;
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
    for (int j = 0; j <= i; ++j) row[j] = gelu_math::exp_poly(row[j] - l);
    for (int j = i + 1; j < r1; ++j) row[j] = 0.0f;
  }
}
}  // namespace

// dS = P (dP - rowsum(P dP)) on a row block (layout as causal_softmax's), in place on dP (ds)
void causal_softmax_bwd(const float* p, float* ds, int r0, int r1) {
  for (int i = r0; i < r1; ++i) {
    const float* pr = p + (size_t)(i - r0) * r1;
    float* dr = ds + (size_t)(i - r0) * r1;
    const float dot = lane_sum<float>(i + 1, [&](size_t j) { return pr[j] * dr[j]; });
    for (int j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - dot);
    for (int j = i + 1; j < r1; ++j) dr[j] = 0.0f;
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
  const uint16_t* qkv16 = nullptr;  // the bf16 path: the GPT's fused qkv as stored in bf16 (q null)
  uint16_t* out16 = nullptr;        // the forward: out stored in bf16 (rounded into place)
  const uint16_t* dout16 = nullptr; // the backward: dout stored in bf16 (the dout argument null)
  // the fp32 path: q, k, v stored in bf16 (each sequence's rows widened in its tile; q, k, v null)
  const uint16_t *q16 = nullptr, *k16 = nullptr, *v16 = nullptr;
};
// The fp32 path's tile: sequence b's KV heads [g0, g0 + ng) and their query heads
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
// the fp32 path's per-thread operand buffers (q, k, v, out or dout; dq, dk, dv)
thread_local std::vector<float> tl_q, tl_k, tl_v, tl_o, tl_dq, tl_dk, tl_dv;
struct Grads {
  float *dq, *dk, *dv;  // strides ldq, ldkv, ldkv as the views
  uint16_t* dqkv16 = nullptr;  // the bf16 backward: the GPT's fused dqkv stored in bf16 (rounded into place)
  // the fp32 backward: dq, dk, dv stored in bf16 (each sequence's computed in the tile's fp32
  // buffers, then rounded into place; dq, dk, dv null)
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

// bf16 (H == Hkv). T rows of n heads of hs columns (head h at column h hs, row stride ld) of x,
// rounded to bf16 into buf as (n, T, hs)
void pack_heads(const float* x, int T, int ld, int n, int hs, std::vector<uint16_t>& buf) {
  grown(buf, (size_t)n * T * hs);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < n; ++h) {
      const float* src = x + (size_t)t * ld + (size_t)h * hs;
      uint16_t* dst = buf.data() + ((size_t)h * T + t) * hs;
      to_bf16(src, dst, hs);
    }
}
// ... the same from bf16 bits (a stored bf16 qkv): the values as they are
void pack_heads(const uint16_t* x, int T, int ld, int n, int hs, std::vector<uint16_t>& buf) {
  grown(buf, (size_t)n * T * hs);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < n; ++h)
      std::copy_n(x + (size_t)t * ld + (size_t)h * hs, hs, buf.data() + ((size_t)h * T + t) * hs);
}
// one sequence's fused qkv (row stride ld) as 3n heads: from the stored bf16 bits, or rounded
void pack_qkv(const Views& w, int b, int n, std::vector<uint16_t>& buf) {
  const size_t row0 = (size_t)b * w.T * w.ldq;
  if (w.qkv16)
    pack_heads(w.qkv16 + row0, w.T, w.ldq, n, w.hs, buf);
  else
    pack_heads(w.q + row0, w.T, w.ldq, n, w.hs, buf);
}
// Rows [r0, r1) of n packed heads x (n, T, hs) as a dense (n, r1 - r0, hs): x itself for all T
// rows, else copied into buf (the products' operands stay dense: see the head comment)
const uint16_t* head_rows(const uint16_t* x, int T, int n, int hs, int r0, int r1, std::vector<uint16_t>& buf) {
  if (r0 == 0 && r1 == T) return x;
  const size_t m = (size_t)(r1 - r0) * hs;
  uint16_t* d = grown(buf, (size_t)n * m);
  for (int h = 0; h < n; ++h) std::copy_n(x + ((size_t)h * T + r0) * hs, m, d + h * m);
  return d;
}
// g (n, T, hs) rounded to bf16 into y16 (T rows, row stride ld, head h at column h hs)
void unpack_heads(const float* g, int T, int ld, int n, int hs, uint16_t* y16) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < n; ++h) to_bf16(g + ((size_t)h * T + t) * hs, y16 + (size_t)t * ld + (size_t)h * hs, hs);
}
// g (n, T, hs) into y (T rows, row stride ld, head h at column h hs)
void unpack_heads(const float* g, int T, int ld, int n, int hs, float* y) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < n; ++h)
    {
      const float* src = g + ((size_t)h * T + t) * hs;
      float* dst = y + (size_t)t * ld + (size_t)h * hs;
      for (int c = 0; c < hs; ++c) dst[c] = src[c];  // inline: hs is short, a memmove call costs more
    }
}
void pack_all(const float* x, size_t n, std::vector<uint16_t>& buf) { to_bf16(x, grown(buf, n), n); }
// The batched bf16 product over H heads on dense operands: C_i (M, N) = alpha op(A_i) op(B_i),
// A_i (M, K) (or (K, M) with ta), B_i (K, N) (or (N, K) with tb), C_i (M, N), all row-major with
// no gaps between heads
void dense_heads(int M, int N, int K, bool ta, bool tb, float alpha, int H, const uint16_t* A, const uint16_t* B,
                 float* Cm) {
  dnnl_gemm({M, N, K, ta, tb, ta ? M : K, tb ? K : N, N, false, true, alpha, H, (int64_t)M * K, (int64_t)K * N,
             (int64_t)M * N},
            A, B, Cm);
}

// bf16 over the GPT's fused qkv (B, T, 3C): q, k and v of a sequence packed in one pass as 3H
// heads, (3H, T, hs): q's heads, then k's, then v's
void fwd_bf16(const Views& w, float* out, float* lse) {
  const int T = w.T, H = w.H, hs = w.hs;
  const float scale = 1.0f / std::sqrt((float)hs);
  const size_t Th = (size_t)T * hs;
  parallel_tiles(w.B, [&](int b) {
    thread_local std::vector<uint16_t> hqkv, hp, bq, bk, bv;
    thread_local std::vector<float> o;
    pack_qkv(w, b, 3 * H, hqkv);
    const uint16_t *q = hqkv.data(), *k = q + H * Th, *v = k + H * Th;
    float* s = grown(tl_p, block_floats(T, H));
    float* ob = grown(o, (size_t)H * std::min(T, kBlock) * hs);
    float* l = lse + (size_t)b * H * T;
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
      const size_t mn = (size_t)m * r1;
      const uint16_t* kb = head_rows(k, T, H, hs, 0, r1, bk);
      dense_heads(m, r1, hs, false, true, scale, H, head_rows(q, T, H, hs, r0, r1, bq), kb, s);
      for (int hd = 0; hd < H; ++hd) causal_softmax(s + hd * mn, r0, r1, l + (size_t)hd * T);
      pack_all(s, H * mn, hp);
      dense_heads(m, hs, r1, false, false, 1.0f, H, hp.data(), head_rows(v, T, H, hs, 0, r1, bv), ob);
      const size_t row0 = ((size_t)b * T + r0) * w.ldo;
      if (w.out16)
        unpack_heads(ob, m, w.ldo, H, hs, w.out16 + row0);
      else
        unpack_heads(ob, m, w.ldo, H, hs, out + row0);
    }
  });
}

// One sequence's bf16 backward, row blocks from the last to the first as bwd_sequence's; dk and dv
// sum the blocks' (H, r1, hs) products in fp32 accumulators (H, T, hs)
void bwd_sequence_bf16(const Views& w, const float* dout, const float* lse, const Grads& g, int b) {
  thread_local std::vector<uint16_t> hqkv, hd, hp, hs16, bq, bk, bv, bo;
  thread_local std::vector<float> o, ak, av;
  const int T = w.T, H = w.H, hs = w.hs;
  const float scale = 1.0f / std::sqrt((float)hs);
  const size_t Th = (size_t)T * hs;
  pack_qkv(w, b, 3 * H, hqkv);
  const uint16_t *q = hqkv.data(), *k = q + H * Th, *v = k + H * Th;
  if (w.dout16)
    pack_heads(w.dout16 + (size_t)b * T * w.ldo, T, w.ldo, H, hs, hd);
  else
    pack_heads(dout + (size_t)b * T * w.ldo, T, w.ldo, H, hs, hd);
  float *p = grown(tl_p, block_floats(T, H)), *ds = grown(tl_ds, block_floats(T, H));
  float* t = grown(o, (size_t)H * Th);
  float *dk = grown(ak, (size_t)H * Th), *dv = grown(av, (size_t)H * Th);
  const float* l = lse + (size_t)b * H * T;
  const size_t C = (size_t)H * hs;
  // (H, m, hs) into rows [r0, r0 + m) of a gradient at column offset col of the fused dqkv (or g's own)
  auto put = [&](const float* x, int m, int r0, float* dst, int ld, size_t col) {
    const size_t row0 = ((size_t)b * T + r0) * ld;
    if (g.dqkv16)
      unpack_heads(x, m, ld, H, hs, g.dqkv16 + row0 + col);
    else
      unpack_heads(x, m, ld, H, hs, dst + row0);
  };
  // acc (H, T, hs) rows [0, r1) (+)= t (H, r1, hs)
  auto add = [&](float* acc, int r1, bool first) {
    const size_t n = (size_t)r1 * hs;
    for (int h = 0; h < H; ++h) {
      float* a = acc + h * Th;
      const float* x = t + h * n;
      if (first)
        std::copy_n(x, n, a);
      else
        for (size_t i = 0; i < n; ++i) a[i] += x[i];
    }
  };
  const int last = last_block(T);
  for (int r0 = last; r0 >= 0; r0 -= kBlock) {
    const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
    const size_t mn = (size_t)m * r1;
    const uint16_t* qb = head_rows(q, T, H, hs, r0, r1, bq);
    const uint16_t* ob = head_rows(hd.data(), T, H, hs, r0, r1, bo);
    const uint16_t* kb = head_rows(k, T, H, hs, 0, r1, bk);
    dense_heads(m, r1, hs, false, true, scale, H, qb, kb, p);                                // S again
    dense_heads(m, r1, hs, false, true, 1.0f, H, ob, head_rows(v, T, H, hs, 0, r1, bv), ds);  // dP = dout v^T
    for (int h = 0; h < H; ++h) {
      probs_rows(p + h * mn, r0, r1, l + (size_t)h * T);
      causal_softmax_bwd(p + h * mn, ds + h * mn, r0, r1);
    }
    pack_all(p, H * mn, hp);
    pack_all(ds, H * mn, hs16);
    dense_heads(m, hs, r1, false, false, scale, H, hs16.data(), kb, t);  // dq = dS k / sqrt(hs)
    put(t, m, r0, g.dq, w.ldq, 0);
    dense_heads(r1, hs, m, true, false, 1.0f, H, hp.data(), ob, t);  // dv += P^T dout
    add(dv, r1, r0 == last);
    dense_heads(r1, hs, m, true, false, scale, H, hs16.data(), qb, t);  // dk += dS^T q / sqrt(hs)
    add(dk, r1, r0 == last);
  }
  put(dv, T, 0, g.dv, w.ldkv, 2 * C);
  put(dk, T, 0, g.dk, w.ldkv, C);
}

// The backward over the sequences (each tile's buffers are its thread's)
void bwd(const Views& w, const float* dout, const float* lse, const Grads& g, bool bf16) {
  if (w.T == 0) return;
  if (bf16) return parallel_tiles(w.B, [&](int b) { bwd_sequence_bf16(w, dout, lse, g, b); });
  const int G = w.H / w.Hkv, nkv = kv_per_tile(w.T, w.Hkv, G, w.hs), per = (w.Hkv + nkv - 1) / nkv;
  parallel_tiles(w.B * per, [&](int tile) {
    const int g0 = tile % per * nkv;
    bwd_tile(w, dout, lse, g, tile / per, g0, std::min(nkv, w.Hkv - g0));
  });
}
}  // namespace

size_t attention_workspace_bytes(int T, int H, int Hkv, int hs, bool bf16_products) {
  // the fp32 path's tile: P and dS for its heads, the widened q, k, v, dout and the rows of a
  // bf16 out, dq, dk, dv (kv_per_tile's count)
  const int G = H / std::max(Hkv, 1), nkv = kv_per_tile(T, Hkv, G, hs), nh = nkv * G;
  const size_t tq = (size_t)T * nh * hs, tkv = (size_t)T * nkv * hs;
  const size_t fp32 = sizeof(float) * (2 * block_floats(T, nh) + 4 * tq + 4 * tkv);
  if (!bf16_products) return fp32;
  // the bf16 path (the GPT's, a whole sequence a tile): P and dS (fp32), the backward's packed q,
  // k, v, dout and their block copies, P and dS rounded (2 bytes each), its fp32 dq block and dk,
  // dv accumulators
  const size_t th = (size_t)T * H * hs, blk = block_floats(T, H);
  return std::max(fp32, 2 * sizeof(float) * blk + 2 * (8 * th + 2 * blk) + 4 * (3 * th));
}

void attention_fwd(const float* qkv, float* out, float* lse, int B, int T, int C, int NH, bool bf16) {
  const Views w{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, C, B, T, NH, NH, C / NH};
  if (bf16 && native_bf16())
    fwd_bf16(w, out, lse);
  else
    fwd_fp32(w, out, lse);
}

void attention_bwd(const float* dout, const float* qkv, const float* lse, float* dqkv, int B, int T, int C, int NH,
                   bool bf16) {
  bwd(Views{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, C, B, T, NH, NH, C / NH}, dout, lse,
      Grads{dqkv, dqkv + C, dqkv + 2 * C}, bf16 && native_bf16());
}

namespace {
// A bf16 qkv widened whole (exact) into the calling thread's buffer: the fp32 kernels' operand
const float* widened(Ew x, size_t n) {
  if (!x.bf16) return static_cast<const float*>(x.p);
  thread_local std::vector<float> buf;
  buf.resize(n);
  unpack_bf16(static_cast<const uint16_t*>(x.p), buf.data(), n);
  return buf.data();
}
}  // namespace

void attention_fwd_mixed(Ew qkv, Ew out, float* lse, int B, int T, int C, int NH, bool bf16) {
  const size_t n = (size_t)B * T * C;
  if (bf16 && native_bf16()) {  // the products' bf16 operands: the stored bits copied as they are
    Views w{static_cast<const float*>(qkv.p), nullptr, nullptr, 3 * C, 3 * C, C, B, T, NH, NH, C / NH};
    if (qkv.bf16) w.q = nullptr, w.qkv16 = static_cast<const uint16_t*>(qkv.p);
    if (out.bf16) w.out16 = static_cast<uint16_t*>(out.p);
    fwd_bf16(w, static_cast<float*>(out.p), lse);
    return;
  }
  const float* x = widened(qkv, 3 * n);
  if (!out.bf16) return attention_fwd(x, static_cast<float*>(out.p), lse, B, T, C, NH, bf16);
  thread_local std::vector<float> o;
  o.resize(n);
  attention_fwd(x, o.data(), lse, B, T, C, NH, bf16);
  pack_bf16(o.data(), static_cast<uint16_t*>(out.p), n);
}

void attention_bwd_mixed(Ew dout, Ew qkv, const float* lse, Ew dqkv, int B, int T, int C, int NH, bool bf16) {
  const size_t n = (size_t)B * T * C;
  if (bf16 && native_bf16()) {  // the products' bf16 operands: the stored bits copied as they are
    Views w{static_cast<const float*>(qkv.p), nullptr, nullptr, 3 * C, 3 * C, C, B, T, NH, NH, C / NH};
    if (qkv.bf16) w.q = nullptr, w.qkv16 = static_cast<const uint16_t*>(qkv.p);
    if (dout.bf16) w.dout16 = static_cast<const uint16_t*>(dout.p);
    float* d = static_cast<float*>(dqkv.p);
    Grads g{d, d + C, d + 2 * C};
    if (dqkv.bf16) g.dqkv16 = static_cast<uint16_t*>(dqkv.p);
    return bwd(w, dout.bf16 ? nullptr : static_cast<const float*>(dout.p), lse, g, true);
  }
  // (the second thread-local buffer: widened() holds qkv's)
  thread_local std::vector<float> wd, gd;
  const float* dO = static_cast<const float*>(dout.p);
  if (dout.bf16) {
    wd.resize(n);
    unpack_bf16(static_cast<const uint16_t*>(dout.p), wd.data(), n);
    dO = wd.data();
  }
  float* d = static_cast<float*>(dqkv.p);
  if (dqkv.bf16) gd.resize(3 * n), d = gd.data();
  attention_bwd(dO, widened(qkv, 3 * n), lse, d, B, T, C, NH, bf16);
  if (dqkv.bf16) pack_bf16(d, static_cast<uint16_t*>(dqkv.p), 3 * n);
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
  bwd(w, dout.bf16 ? nullptr : static_cast<const float*>(dout.p), lse, g, false);
}
void gqa_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* lse,
                       float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int hs) {
  bwd(Views{q, k, v, H * hs, Hkv * hs, H * hs, B, T, H, Hkv, hs}, dout, lse, Grads{dq, dk, dv}, false);
}

}  // namespace zf::kernels::cpu
