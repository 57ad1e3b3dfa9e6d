// Causal multi-head self-attention, one sequence at a time: the GPT's on strided views of its
// fused qkv (B, T, 3C) = [q | k | v], and grouped-query attention (Llama, Qwen2: docs/llama.md) on
// q (B, T, H hs), k and v (B, T, Hkv hs) held apart, query head h reading KV head h / G, G = H / Hkv
// (HF's repeat_kv). The products are oneDNN matmul primitives batched over Hkv heads
// (kernels/cpu/gemm.hpp: one call on the calling thread, created once per shape): group j's call
// takes the query heads kv G + j, so with G = 1 (the GPT) it is one call over all heads; the
// causal softmax and its backward are loops that GCC vectorizes (exp through gelu_math's
// exp_poly, row sums in lanes.hpp's fixed order). Forward: S = q k^T / sqrt(hs), att = softmax
// over j <= i, out = att v. Backward: datt = dout v^T, dv = att^T dout,
// dS = att * (datt - rowsum(att datt)), dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs).
// bf16 (precision "bf16", where the CPU has native bf16; the GPT's attention, one KV head per
// query head): the products' operands are rounded to bf16 (q, k, v and dout per sequence, att and
// dS after the softmax and its backward), products summed in fp32 into fp32 outputs, as the linear
// layers' (kernels/cpu/matmul.cpp); the softmax and its backward stay fp32, and att is saved in
// fp32. The bf16 operands are packed head by head, (H, T, hs), and the products run over whole
// (T, T) blocks into dense (H, T, hs) outputs that are then copied into place: oneDNN 2.6 runs a
// batched bf16 matmul on AMX (brg:avx512_core_amx_bf16) only when every operand is dense, and
// falls back to gemm:jit otherwise (3.5-10x slower at the GPT's shapes, most with a scale:
// experiments/onednn, "bf16 step"), so the bf16 path has no causal blocking (below).
// Operands stored in bf16 (precision bf16's activations and, for the GPT, their gradients:
// attention_*_mixed, gqa_attention_*_mixed) are read as stored: the bf16 path copies the stored
// bits into its packed heads and rounds its outputs as it copies them into place; the fp32 path
// widens each sequence's rows in the tile that computes it and rounds its out there. Either way
// the bits of widening the whole buffers first and rounding the outputs after.
// dk and dv sum over the G query heads sharing a KV head in group order: group 0's product writes
// them, the next groups' accumulate (a fixed order).
// Each sequence is a tile of kernels::cpu::parallel_for: the device side's idle cores help, and
// every tile computes the same values whoever runs it (the same calls on the same shapes: bitwise
// independent of the thread count). The backward's (NH, T, T) scratch: the caller's for tiles it
// runs, a per-thread buffer for the tiles a helper runs (fully written before it is read, so its
// contents never matter); the bf16 operands likewise in per-thread buffers.
// Causal blocking (fp32): rows are taken kBlock at a time and a block of rows [r0, r1) only reads
// columns [0, r1), the columns a causal row can see; likewise a block of columns [c0, c1) of the
// transposed products only reads rows [c0, T). What is skipped lies above the diagonal, where
// att and dS are exact zeros (stored as such), so it adds nothing: at T = 256 this does 5/8 of
// the full T x T work, and for T <= kBlock it is the full product as before. The bf16 path
// computes the full (T, T) products (the softmax and its backward zero what lies above the
// diagonal): the same work for T <= kBlock, 8/5 of the blocked work at T = 256.
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
// One sequence's rows [off, off + n) of an operand as fp32: in place, or its bf16 bits widened
// (exact) into buf
const float* rows_f32(const float* f, const uint16_t* h, size_t off, size_t n, std::vector<float>& buf) {
  if (!h) return f + off;
  if (buf.size() < n) buf.resize(n);
  unpack_bf16(h + off, buf.data(), n);
  return buf.data();
}
// The fp32 path's sequence b: q, k, v (widened where stored in bf16: the thread's buffers)
struct Seq {
  const float *q, *k, *v;
};
Seq sequence(const Views& w, int b) {
  thread_local std::vector<float> bq, bk, bv;
  const size_t nq = (size_t)w.T * w.ldq, nkv = (size_t)w.T * w.ldkv;
  return {rows_f32(w.q, w.q16, (size_t)b * nq, nq, bq), rows_f32(w.k, w.k16, (size_t)b * nkv, nkv, bk),
          rows_f32(w.v, w.v16, (size_t)b * nkv, nkv, bv)};
}
struct Grads {
  float *dq, *dk, *dv;  // strides ldq, ldkv, ldkv as the views
  uint16_t* dqkv16 = nullptr;  // the bf16 backward: the GPT's fused dqkv stored in bf16 (rounded into place)
  // the fp32 backward: dq, dk, dv stored in bf16 (each sequence's computed in the tile's fp32
  // buffers, then rounded into place; dq, dk, dv null)
  uint16_t *dq16 = nullptr, *dk16 = nullptr, *dv16 = nullptr;
};

void fwd_fp32(const Views& w, float* out, float* att) {
  const int T = w.T, H = w.H, Hkv = w.Hkv, G = H / Hkv, hs = w.hs;
  const float scale = 1.0f / std::sqrt((float)hs);
  const int64_t TT = (int64_t)T * T, gq = (int64_t)G * hs, gt = (int64_t)G * TT;
  parallel_tiles(w.B, [&](int b) {
    const Seq sq = sequence(w, b);
    const float *q = sq.q, *k = sq.k, *v = sq.v;
    float* a = att + (size_t)b * H * TT;  // (H, T, T)
    thread_local std::vector<float> ob;    // a bf16 out's fp32 rows
    if (w.out16 && ob.size() < (size_t)T * w.ldo) ob.resize((size_t)T * w.ldo);
    float* o = w.out16 ? ob.data() : out + (size_t)b * T * w.ldo;  // (T, ldo), head h at column h hs
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
      for (int j = 0; j < G; ++j)
        heads(m, r1, hs, false, true, w.ldq, w.ldkv, T, scale, Hkv, gq, hs, gt, q + (size_t)r0 * w.ldq + j * hs, k,
              a + j * TT + (size_t)r0 * T);
      for (int hd = 0; hd < H; ++hd) causal_softmax(a + hd * TT, T, r0, r1);
      for (int j = 0; j < G; ++j)
        heads(m, hs, r1, false, false, T, w.ldkv, w.ldo, 1.0f, Hkv, gt, hs, gq, a + j * TT + (size_t)r0 * T, v,
              o + j * hs + (size_t)r0 * w.ldo);
    }
    if (w.out16) to_bf16(o, w.out16 + (size_t)b * T * w.ldo, (size_t)T * w.ldo);
  });
}

// One sequence's backward; ds: its (H, T, T) scratch
void bwd_sequence(const Views& w, const float* dout, const float* att, const Grads& g, float* ds, int b) {
  const int T = w.T, H = w.H, Hkv = w.Hkv, G = H / Hkv, hs = w.hs;
  const float scale = 1.0f / std::sqrt((float)hs);
  const int64_t TT = (int64_t)T * T, gq = (int64_t)G * hs, gt = (int64_t)G * TT;
  const Seq sq = sequence(w, b);
  const float *q = sq.q, *k = sq.k, *v = sq.v;
  thread_local std::vector<float> bo, bq, bk, bv;  // a bf16 dout widened; bf16 dq, dk, dv's fp32 rows
  const size_t nq = (size_t)T * w.ldq, nkv = (size_t)T * w.ldkv, no = (size_t)T * w.ldo;
  const float* dO = rows_f32(dout, w.dout16, (size_t)b * no, no, bo);
  auto rows = [&](float* f, const uint16_t* h, size_t n, std::vector<float>& buf) {
    if (!h) return f + (size_t)b * n;
    if (buf.size() < n) buf.resize(n);
    return buf.data();
  };
  const float* a = att + (size_t)b * H * TT;  // (H, T, T)
  float* dq = rows(g.dq, g.dq16, nq, bq);
  float* dk = rows(g.dk, g.dk16, nkv, bk);
  float* dv = rows(g.dv, g.dv16, nkv, bv);
  for (int r0 = 0; r0 < T; r0 += kBlock) {  // datt and dS by rows (in ds), then dq = dS k
    const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
    for (int j = 0; j < G; ++j)
      heads(m, r1, hs, false, true, w.ldo, w.ldkv, T, 1.0f, Hkv, gq, hs, gt, dO + (size_t)r0 * w.ldo + j * hs, v,
            ds + j * TT + (size_t)r0 * T);
    for (int hd = 0; hd < H; ++hd) causal_softmax_bwd(a + hd * TT, ds + hd * TT, T, r0, r1);
    for (int j = 0; j < G; ++j)
      heads(m, hs, r1, false, false, T, w.ldkv, w.ldq, scale, Hkv, gt, hs, gq, ds + j * TT + (size_t)r0 * T, k,
            dq + j * hs + (size_t)r0 * w.ldq);
  }
  // by columns: rows i >= c0 of column block [c0, c1) lie in row blocks that computed them; the G
  // groups sharing a KV head add into its dk and dv in group order
  for (int c0 = 0; c0 < T; c0 += kBlock) {
    const int c1 = std::min(T, c0 + kBlock), n = c1 - c0, rows = T - c0;
    for (int j = 0; j < G; ++j) {
      heads(n, hs, rows, true, false, T, w.ldo, w.ldkv, 1.0f, Hkv, gt, gq, hs, a + j * TT + (size_t)c0 * T + c0,
            dO + (size_t)c0 * w.ldo + j * hs, dv + (size_t)c0 * w.ldkv, j > 0);
      heads(n, hs, rows, true, false, T, w.ldq, w.ldkv, scale, Hkv, gt, gq, hs, ds + j * TT + (size_t)c0 * T + c0,
            q + (size_t)c0 * w.ldq + j * hs, dk + (size_t)c0 * w.ldkv, j > 0);
    }
  }
  if (g.dq16) to_bf16(dq, g.dq16 + (size_t)b * nq, nq);
  if (g.dk16) to_bf16(dk, g.dk16 + (size_t)b * nkv, nkv);
  if (g.dv16) to_bf16(dv, g.dv16 + (size_t)b * nkv, nkv);
}

// bf16 (H == Hkv). T rows of n heads of hs columns (head h at column h hs, row stride ld) of x,
// rounded to bf16 into buf as (n, T, hs)
void pack_heads(const float* x, int T, int ld, int n, int hs, std::vector<uint16_t>& buf) {
  if (buf.size() < (size_t)n * T * hs) buf.resize((size_t)n * T * hs);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < n; ++h) {
      const float* src = x + (size_t)t * ld + (size_t)h * hs;
      uint16_t* dst = buf.data() + ((size_t)h * T + t) * hs;
      to_bf16(src, dst, hs);
    }
}
// ... the same from bf16 bits (a stored bf16 qkv): the values as they are
void pack_heads(const uint16_t* x, int T, int ld, int n, int hs, std::vector<uint16_t>& buf) {
  if (buf.size() < (size_t)n * T * hs) buf.resize((size_t)n * T * hs);
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
void pack_all(const float* x, size_t n, std::vector<uint16_t>& buf) {
  if (buf.size() < n) buf.resize(n);
  to_bf16(x, buf.data(), n);
}
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
void fwd_bf16(const Views& w, float* out, float* att) {
  const int T = w.T, H = w.H, hs = w.hs;
  const float scale = 1.0f / std::sqrt((float)hs);
  const size_t TT = (size_t)T * T, Th = (size_t)T * hs;
  parallel_tiles(w.B, [&](int b) {
    thread_local std::vector<uint16_t> hqkv, hp;
    thread_local std::vector<float> o;
    pack_qkv(w, b, 3 * H, hqkv);
    const uint16_t *q = hqkv.data(), *k = q + H * Th, *v = k + H * Th;
    float* a = att + (size_t)b * H * TT;  // (H, T, T)
    dense_heads(T, T, hs, false, true, scale, H, q, k, a);
    for (int hd = 0; hd < H; ++hd) causal_softmax(a + hd * TT, T, 0, T);
    pack_all(a, H * TT, hp);
    if (o.size() < (size_t)H * Th) o.resize((size_t)H * Th);
    dense_heads(T, hs, T, false, false, 1.0f, H, hp.data(), v, o.data());
    if (w.out16)
      unpack_heads(o.data(), T, w.ldo, H, hs, w.out16 + (size_t)b * T * w.ldo);
    else
      unpack_heads(o.data(), T, w.ldo, H, hs, out + (size_t)b * T * w.ldo);
  });
}

// One sequence's bf16 backward; ds: its (H, T, T) scratch
void bwd_sequence_bf16(const Views& w, const float* dout, const float* att, const Grads& g, float* ds, int b) {
  thread_local std::vector<uint16_t> hqkv, hd, hp, hs16;
  thread_local std::vector<float> o;
  const int T = w.T, H = w.H, hs = w.hs;
  const float scale = 1.0f / std::sqrt((float)hs);
  const size_t TT = (size_t)T * T, Th = (size_t)T * hs;
  pack_qkv(w, b, 3 * H, hqkv);
  const uint16_t *q = hqkv.data(), *k = q + H * Th, *v = k + H * Th;
  if (w.dout16)
    pack_heads(w.dout16 + (size_t)b * T * w.ldo, T, w.ldo, H, hs, hd);
  else
    pack_heads(dout + (size_t)b * T * w.ldo, T, w.ldo, H, hs, hd);
  const float* a = att + (size_t)b * H * TT;  // (H, T, T)
  dense_heads(T, T, hs, false, true, 1.0f, H, hd.data(), v, ds);  // datt = dout v^T
  for (int h = 0; h < H; ++h) causal_softmax_bwd(a + h * TT, ds + h * TT, T, 0, T);  // dS, in place
  pack_all(a, H * TT, hp);
  pack_all(ds, H * TT, hs16);
  if (o.size() < (size_t)H * Th) o.resize((size_t)H * Th);
  // (H, T, hs) into the rows of a gradient at column offset col of the fused dqkv (or g's own)
  auto put = [&](float* dst, int ld, size_t col) {
    if (g.dqkv16)
      unpack_heads(o.data(), T, ld, H, hs, g.dqkv16 + (size_t)b * T * ld + col);
    else
      unpack_heads(o.data(), T, ld, H, hs, dst + (size_t)b * T * ld);
  };
  const size_t C = (size_t)H * hs;
  dense_heads(T, hs, T, false, false, scale, H, hs16.data(), k, o.data());  // dq = dS k / sqrt(hs)
  put(g.dq, w.ldq, 0);
  dense_heads(T, hs, T, true, false, 1.0f, H, hp.data(), hd.data(), o.data());  // dv = att^T dout
  put(g.dv, w.ldkv, 2 * C);
  dense_heads(T, hs, T, true, false, scale, H, hs16.data(), q, o.data());  // dk = dS^T q / sqrt(hs)
  put(g.dk, w.ldkv, C);
}

// The backward over the sequences; scratch: the caller's (H, T, T) for the tiles it runs, a
// per-thread buffer for a helper's
void bwd(const Views& w, const float* dout, const float* att, const Grads& g, float* scratch, bool bf16) {
  const size_t n = (size_t)w.H * w.T * w.T;
  float* const caller_scratch = scratch;
  const std::thread::id caller = std::this_thread::get_id();
  parallel_tiles(w.B, [&](int b) {
    thread_local std::vector<float> own;  // a helper's scratch
    float* ds = caller_scratch;  // (H, T, T): datt, then dS in place
    if (std::this_thread::get_id() != caller) {
      if (own.size() < n) own.resize(n);
      ds = own.data();
    }
    if (bf16)
      bwd_sequence_bf16(w, dout, att, g, ds, b);
    else
      bwd_sequence(w, dout, att, g, ds, b);
  });
}
}  // namespace

void causal_softmax(float* a, int T, int r0, int r1) {
  for (int i = r0; i < r1; ++i) {
    float* row = a + (size_t)i * T;
    const float mx = lane_max(row, i + 1);
    for (int j = 0; j <= i; ++j) row[j] = gelu_math::exp_poly(row[j] - mx);
    const float inv = 1.0f / lane_sum<float>(i + 1, [&](size_t j) { return row[j]; });
    for (int j = 0; j <= i; ++j) row[j] *= inv;
    for (int j = i + 1; j < T; ++j) row[j] = 0.0f;
  }
}

void causal_softmax_bwd(const float* att, float* ds, int T, int r0, int r1) {
  for (int i = r0; i < r1; ++i) {
    const float* ar = att + (size_t)i * T;
    float* dr = ds + (size_t)i * T;
    const float dot = lane_sum<float>(i + 1, [&](size_t j) { return ar[j] * dr[j]; });
    for (int j = 0; j <= i; ++j) dr[j] = ar[j] * (dr[j] - dot);
    for (int j = i + 1; j < r1; ++j) dr[j] = 0.0f;
  }
}

void attention_fwd(const float* qkv, float* out, float* att, int B, int T, int C, int NH, bool bf16) {
  const Views w{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, C, B, T, NH, NH, C / NH};
  if (bf16 && native_bf16())
    fwd_bf16(w, out, att);
  else
    fwd_fp32(w, out, att);
}

void attention_bwd(const float* dout, const float* qkv, const float* att, float* dqkv, float* scratch, int B,
                   int T, int C, int NH, bool bf16) {
  bwd(Views{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, C, B, T, NH, NH, C / NH}, dout, att,
      Grads{dqkv, dqkv + C, dqkv + 2 * C}, scratch, bf16 && native_bf16());
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

void attention_fwd_mixed(Ew qkv, Ew out, float* att, int B, int T, int C, int NH, bool bf16) {
  const size_t n = (size_t)B * T * C;
  if (bf16 && native_bf16()) {  // the products' bf16 operands: the stored bits copied as they are
    Views w{static_cast<const float*>(qkv.p), nullptr, nullptr, 3 * C, 3 * C, C, B, T, NH, NH, C / NH};
    if (qkv.bf16) w.q = nullptr, w.qkv16 = static_cast<const uint16_t*>(qkv.p);
    if (out.bf16) w.out16 = static_cast<uint16_t*>(out.p);
    fwd_bf16(w, static_cast<float*>(out.p), att);
    return;
  }
  const float* x = widened(qkv, 3 * n);
  if (!out.bf16) return attention_fwd(x, static_cast<float*>(out.p), att, B, T, C, NH, bf16);
  thread_local std::vector<float> o;
  o.resize(n);
  attention_fwd(x, o.data(), att, B, T, C, NH, bf16);
  pack_bf16(o.data(), static_cast<uint16_t*>(out.p), n);
}

void attention_bwd_mixed(Ew dout, Ew qkv, const float* att, Ew dqkv, float* scratch, int B, int T, int C, int NH,
                         bool bf16) {
  const size_t n = (size_t)B * T * C;
  if (bf16 && native_bf16()) {  // the products' bf16 operands: the stored bits copied as they are
    Views w{static_cast<const float*>(qkv.p), nullptr, nullptr, 3 * C, 3 * C, C, B, T, NH, NH, C / NH};
    if (qkv.bf16) w.q = nullptr, w.qkv16 = static_cast<const uint16_t*>(qkv.p);
    if (dout.bf16) w.dout16 = static_cast<const uint16_t*>(dout.p);
    float* d = static_cast<float*>(dqkv.p);
    Grads g{d, d + C, d + 2 * C};
    if (dqkv.bf16) g.dqkv16 = static_cast<uint16_t*>(dqkv.p);
    return bwd(w, dout.bf16 ? nullptr : static_cast<const float*>(dout.p), att, g, scratch, true);
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
  attention_bwd(dO, widened(qkv, 3 * n), att, d, scratch, B, T, C, NH, bf16);
  if (dqkv.bf16) pack_bf16(d, static_cast<uint16_t*>(dqkv.p), 3 * n);
}

void gqa_attention_fwd(const float* q, const float* k, const float* v, float* out, float* att, int B, int T, int H,
                       int Hkv, int hs) {
  fwd_fp32(Views{q, k, v, H * hs, Hkv * hs, H * hs, B, T, H, Hkv, hs}, out, att);
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

void gqa_attention_fwd_mixed(Ew q, Ew k, Ew v, Ew out, float* att, int B, int T, int H, int Hkv, int hs) {
  Views w = gqa_views(q, k, v, B, T, H, Hkv, hs);
  if (out.bf16) w.out16 = static_cast<uint16_t*>(out.p);
  fwd_fp32(w, static_cast<float*>(out.p), att);
}

void gqa_attention_bwd_mixed(Ew dout, Ew q, Ew k, Ew v, const float* att, Ew dq, Ew dk, Ew dv, float* scratch,
                             int B, int T, int H, int Hkv, int hs) {
  Views w = gqa_views(q, k, v, B, T, H, Hkv, hs);
  if (dout.bf16) w.dout16 = static_cast<const uint16_t*>(dout.p);
  auto f = [](Ew x) { return x.bf16 ? nullptr : static_cast<float*>(x.p); };
  auto h = [](Ew x) { return x.bf16 ? static_cast<uint16_t*>(x.p) : nullptr; };
  Grads g{f(dq), f(dk), f(dv)};
  g.dq16 = h(dq), g.dk16 = h(dk), g.dv16 = h(dv);
  bwd(w, dout.bf16 ? nullptr : static_cast<const float*>(dout.p), att, g, scratch, false);
}
void gqa_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* att,
                       float* dq, float* dk, float* dv, float* scratch, int B, int T, int H, int Hkv, int hs) {
  bwd(Views{q, k, v, H * hs, Hkv * hs, H * hs, B, T, H, Hkv, hs}, dout, att, Grads{dq, dk, dv}, scratch, false);
}

}  // namespace zf::kernels::cpu
