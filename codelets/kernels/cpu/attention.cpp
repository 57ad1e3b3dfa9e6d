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
// bf16 (precision "bf16", where the CPU has native bf16): the products' operands are rounded to
// bf16 (q, k, v and dout per sequence, att and dS after the softmax and its backward), products
// summed in fp32 into fp32 outputs, as the linear layers' (kernels/cpu/matmul.cpp); the softmax and
// its backward stay fp32, and att is saved in fp32.
// dk and dv sum over the G query heads sharing a KV head in group order: group 0's product writes
// them, the next groups' accumulate (a fixed order).
// Each sequence is a tile of kernels::cpu::parallel_for: the device side's idle cores help, and
// every tile computes the same values whoever runs it (the same calls on the same shapes: bitwise
// independent of the thread count). The backward's (NH, T, T) scratch: the caller's for tiles it
// runs, a per-thread buffer for the tiles a helper runs (fully written before it is read, so its
// contents never matter); the bf16 operands likewise in per-thread buffers.
// Causal blocking: rows are taken kBlock at a time and a block of rows [r0, r1) only reads
// columns [0, r1), the columns a causal row can see; likewise a block of columns [c0, c1) of the
// transposed products only reads rows [c0, T). What is skipped lies above the diagonal, where
// att and dS are exact zeros (stored as such), so it adds nothing: at T = 256 this does 5/8 of
// the full T x T work, and for T <= kBlock it is the full product as before.
// oneDNN against OpenBLAS at the GPT's shapes: docs/architecture.md, "Attention".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "codelets/kernels/cpu/gemm.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cpu/lanes.hpp"
#include "runtime/parallel.hpp"
#include "codelets/kernels/gelu_math.hpp"

namespace zf::kernels::cpu {

namespace {
constexpr int kBlock = 64;

// An operand as the products read it: fp32 in place, or a bf16 copy in the running thread's
// buffer (the same layout, so the same offsets)
struct View {
  const void* p;
  bool h;  // bf16
  const void* at(size_t off) const { return (const char*)p + off * (h ? 2 : 4); }
};
// T rows of `width` columns, row stride ld, from x: x itself, or (bf16) their bf16 copy in buf
View as_operand(const float* x, int T, int ld, int width, bool h, std::vector<uint16_t>& buf) {
  if (!h) return {x, false};
  if (buf.size() < (size_t)T * ld) buf.resize((size_t)T * ld);
  for (int t = 0; t < T; ++t) pack_bf16(x + (size_t)t * ld, buf.data() + (size_t)t * ld, width);
  return {buf.data(), true};
}
// rows [r0, r1), columns [0, r1) of each head's (T, T) block of x into buf (bf16, same layout)
void pack_rows(const float* x, uint16_t* buf, int NH, int T, int r0, int r1) {
  for (int h = 0; h < NH; ++h)
    for (int i = r0; i < r1; ++i) pack_bf16(x + ((size_t)h * T + i) * T, buf + ((size_t)h * T + i) * T, r1);
}
// The batched product over n heads: C_i (M, N) (+)= alpha op(A_i) op(B_i), head strides sa, sb, sc
void heads(int M, int N, int K, bool ta, bool tb, int lda, int ldb, int ldc, float alpha, int n, int64_t sa,
           int64_t sb, int64_t sc, const void* A, const void* B, float* Cm, bool h, bool acc = false) {
  dnnl_gemm({M, N, K, ta, tb, lda, ldb, ldc, acc, h, alpha, n, sa, sb, sc}, A, B, Cm);
}

// Row-major views: q (B, T, ldq) with head h at column h hs, k and v (B, T, ldkv) with KV head g at
// column g hs; out and dout (B, T, ldo) as q's heads.
struct Views {
  const float *q, *k, *v;
  int ldq, ldkv, ldo;
  int B, T, H, Hkv, hs;
};
struct Grads {
  float *dq, *dk, *dv;  // strides ldq, ldkv, ldkv as the views
};

void fwd(const Views& w, float* out, float* att, bool bf16) {
  const int T = w.T, H = w.H, Hkv = w.Hkv, G = H / Hkv, hs = w.hs;
  const float scale = 1.0f / std::sqrt((float)hs);
  const bool h = bf16 && native_bf16();
  const int64_t TT = (int64_t)T * T, gq = (int64_t)G * hs, gt = (int64_t)G * TT;
  parallel_tiles(w.B, [&](int b) {
    thread_local std::vector<uint16_t> hq, hk, hv, hp;
    const View q = as_operand(w.q + (size_t)b * T * w.ldq, T, w.ldq, H * hs, h, hq);
    const View k = as_operand(w.k + (size_t)b * T * w.ldkv, T, w.ldkv, Hkv * hs, h, hk);
    const View v = as_operand(w.v + (size_t)b * T * w.ldkv, T, w.ldkv, Hkv * hs, h, hv);
    float* a = att + (size_t)b * H * TT;      // (H, T, T)
    float* o = out + (size_t)b * T * w.ldo;  // (T, ldo), head h at column h hs
    if (h && hp.size() < (size_t)H * TT) hp.resize((size_t)H * TT);
    const View p = h ? View{hp.data(), true} : View{a, false};  // att as the second product reads it
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
      for (int j = 0; j < G; ++j)
        heads(m, r1, hs, false, true, w.ldq, w.ldkv, T, scale, Hkv, gq, hs, gt, q.at((size_t)r0 * w.ldq + j * hs),
              k.at(0), a + j * TT + (size_t)r0 * T, h);
      for (int hd = 0; hd < H; ++hd) causal_softmax(a + hd * TT, T, r0, r1);
      if (h) pack_rows(a, hp.data(), H, T, r0, r1);
      for (int j = 0; j < G; ++j)
        heads(m, hs, r1, false, false, T, w.ldkv, w.ldo, 1.0f, Hkv, gt, hs, gq, p.at(j * TT + (size_t)r0 * T),
              v.at(0), o + j * hs + (size_t)r0 * w.ldo, h);
    }
  });
}

// One sequence's backward; ds: its (H, T, T) scratch
void bwd_sequence(const Views& w, const float* dout, const float* att, const Grads& g, float* ds, int b, bool h) {
  thread_local std::vector<uint16_t> hq, hk, hv, hd, hp, hs16;
  const int T = w.T, H = w.H, Hkv = w.Hkv, G = H / Hkv, hs = w.hs;
  const float scale = 1.0f / std::sqrt((float)hs);
  const int64_t TT = (int64_t)T * T, gq = (int64_t)G * hs, gt = (int64_t)G * TT;
  const View q = as_operand(w.q + (size_t)b * T * w.ldq, T, w.ldq, H * hs, h, hq);
  const View k = as_operand(w.k + (size_t)b * T * w.ldkv, T, w.ldkv, Hkv * hs, h, hk);
  const View v = as_operand(w.v + (size_t)b * T * w.ldkv, T, w.ldkv, Hkv * hs, h, hv);
  const View dO = as_operand(dout + (size_t)b * T * w.ldo, T, w.ldo, H * hs, h, hd);
  const float* a = att + (size_t)b * H * TT;  // (H, T, T)
  float* dq = g.dq + (size_t)b * T * w.ldq;
  float* dk = g.dk + (size_t)b * T * w.ldkv;
  float* dv = g.dv + (size_t)b * T * w.ldkv;
  if (h && hp.size() < (size_t)H * TT) hp.resize((size_t)H * TT), hs16.resize((size_t)H * TT);
  const View p = h ? View{hp.data(), true} : View{a, false}, s = h ? View{hs16.data(), true} : View{ds, false};
  for (int r0 = 0; r0 < T; r0 += kBlock) {  // datt and dS by rows (in ds), then dq = dS k
    const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
    for (int j = 0; j < G; ++j)
      heads(m, r1, hs, false, true, w.ldo, w.ldkv, T, 1.0f, Hkv, gq, hs, gt, dO.at((size_t)r0 * w.ldo + j * hs),
            v.at(0), ds + j * TT + (size_t)r0 * T, h);
    for (int hd = 0; hd < H; ++hd) causal_softmax_bwd(a + hd * TT, ds + hd * TT, T, r0, r1);
    if (h) pack_rows(a, hp.data(), H, T, r0, r1), pack_rows(ds, hs16.data(), H, T, r0, r1);
    for (int j = 0; j < G; ++j)
      heads(m, hs, r1, false, false, T, w.ldkv, w.ldq, scale, Hkv, gt, hs, gq, s.at(j * TT + (size_t)r0 * T),
            k.at(0), dq + j * hs + (size_t)r0 * w.ldq, h);
  }
  // by columns: rows i >= c0 of column block [c0, c1) lie in row blocks that computed them; the G
  // groups sharing a KV head add into its dk and dv in group order
  for (int c0 = 0; c0 < T; c0 += kBlock) {
    const int c1 = std::min(T, c0 + kBlock), n = c1 - c0, rows = T - c0;
    for (int j = 0; j < G; ++j) {
      heads(n, hs, rows, true, false, T, w.ldo, w.ldkv, 1.0f, Hkv, gt, gq, hs, p.at(j * TT + (size_t)c0 * T + c0),
            dO.at((size_t)c0 * w.ldo + j * hs), dv + (size_t)c0 * w.ldkv, h, j > 0);
      heads(n, hs, rows, true, false, T, w.ldq, w.ldkv, scale, Hkv, gt, gq, hs, s.at(j * TT + (size_t)c0 * T + c0),
            q.at((size_t)c0 * w.ldq + j * hs), dk + (size_t)c0 * w.ldkv, h, j > 0);
    }
  }
}

void bwd(const Views& w, const float* dout, const float* att, const Grads& g, float* scratch, bool bf16) {
  const bool h = bf16 && native_bf16();
  const size_t n = (size_t)w.H * w.T * w.T;
  float* const caller_scratch = scratch;
  const std::thread::id caller = std::this_thread::get_id();
  parallel_tiles(w.B, [&](int b) {
    thread_local std::vector<float> own;  // a helper's scratch
    float* ds = caller_scratch;  // (H, T, T): datt, then dS in place; row block [r0, r1) holds columns [0, r1)
    if (std::this_thread::get_id() != caller) {
      if (own.size() < n) own.resize(n);
      ds = own.data();
    }
    bwd_sequence(w, dout, att, g, ds, b, h);
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
  fwd(Views{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, C, B, T, NH, NH, C / NH}, out, att, bf16);
}

void attention_bwd(const float* dout, const float* qkv, const float* att, float* dqkv, float* scratch, int B,
                   int T, int C, int NH, bool bf16) {
  bwd(Views{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, C, B, T, NH, NH, C / NH}, dout, att,
      Grads{dqkv, dqkv + C, dqkv + 2 * C}, scratch, bf16);
}

void gqa_attention_fwd(const float* q, const float* k, const float* v, float* out, float* att, int B, int T, int H,
                       int Hkv, int hs) {
  fwd(Views{q, k, v, H * hs, Hkv * hs, H * hs, B, T, H, Hkv, hs}, out, att, false);
}

void gqa_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* att,
                       float* dq, float* dk, float* dv, float* scratch, int B, int T, int H, int Hkv, int hs) {
  bwd(Views{q, k, v, H * hs, Hkv * hs, H * hs, B, T, H, Hkv, hs}, dout, att, Grads{dq, dk, dv}, scratch, false);
}

}  // namespace zf::kernels::cpu
