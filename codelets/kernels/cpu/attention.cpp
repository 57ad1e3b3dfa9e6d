// Causal multi-head self-attention (GPT-2), one sequence at a time: the products are oneDNN
// matmul primitives batched over the sequence's heads (kernels/cpu/gemm.hpp: one call on the
// calling thread, created once per shape) on strided views of qkv (B, T, 3C) = [q | k | v]; the
// causal softmax and its backward are loops that GCC vectorizes (exp through gelu_math's
// exp_poly, row sums in lanes.hpp's fixed order). Forward: S = q k^T / sqrt(hs), att = softmax
// over j <= i, out = att v. Backward: datt = dout v^T, dv = att^T dout,
// dS = att * (datt - rowsum(att datt)), dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs).
// bf16 (precision "bf16", where the CPU has native bf16): the products' operands are rounded to
// bf16 (q, k, v and dout per sequence, att and dS after the softmax and its backward), products
// summed in fp32 into fp32 outputs, as the linear layers' (kernels/cpu/matmul.cpp); the softmax and
// its backward stay fp32, and att is saved in fp32.
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

// A sequence's operands as the products read them: fp32 in place, or bf16 copies in the
// running thread's buffers (the same layout, so the same offsets)
struct View {
  const void* p;
  bool h;  // bf16
  const void* at(size_t off) const { return (const char*)p + off * (h ? 2 : 4); }
};
View as_operand(const float* x, size_t n, bool h, std::vector<uint16_t>& buf) {
  if (!h) return {x, false};
  if (buf.size() < n) buf.resize(n);
  pack_bf16(x, buf.data(), n);
  return {buf.data(), true};
}
// rows [r0, r1), columns [0, r1) of each head's (T, T) block of x into buf (bf16, same layout)
void pack_rows(const float* x, uint16_t* buf, int NH, int T, int r0, int r1) {
  for (int h = 0; h < NH; ++h)
    for (int i = r0; i < r1; ++i) pack_bf16(x + ((size_t)h * T + i) * T, buf + ((size_t)h * T + i) * T, r1);
}
// The batched product over the NH heads: C_h (M, N) = alpha op(A_h) op(B_h), head strides sa, sb, sc
void heads(int M, int N, int K, bool ta, bool tb, int lda, int ldb, int ldc, float alpha, int NH, int64_t sa,
           int64_t sb, int64_t sc, const void* A, const void* B, float* Cm, bool h) {
  dnnl_gemm({M, N, K, ta, tb, lda, ldb, ldc, false, h, alpha, NH, sa, sb, sc}, A, B, Cm);
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
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hs);
  const bool h = bf16 && native_bf16();
  const int64_t TT = (int64_t)T * T;
  parallel_tiles(B, [&](int b) {
    thread_local std::vector<uint16_t> hq, hp;
    const View q = as_operand(qkv + (size_t)b * T * C3, (size_t)T * C3, h, hq);  // (T, 3C) = [q | k | v]
    float* a = att + (size_t)b * NH * TT;  // (NH, T, T)
    float* o = out + (size_t)b * T * C;    // (T, C), head h at column h * hs
    if (h && hp.size() < (size_t)NH * TT) hp.resize((size_t)NH * TT);
    const View p = h ? View{hp.data(), true} : View{a, false};  // att as the second product reads it
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
      heads(m, r1, hs, false, true, C3, C3, T, scale, NH, hs, hs, TT, q.at((size_t)r0 * C3), q.at(C),
            a + (size_t)r0 * T, h);
      for (int hd = 0; hd < NH; ++hd) causal_softmax(a + hd * TT, T, r0, r1);
      if (h) pack_rows(a, hp.data(), NH, T, r0, r1);
      heads(m, hs, r1, false, false, T, C3, C, 1.0f, NH, TT, hs, hs, p.at((size_t)r0 * T), q.at(2 * C),
            o + (size_t)r0 * C, h);
    }
  });
}

void attention_bwd(const float* dout, const float* qkv, const float* att, float* dqkv, float* scratch, int B,
                   int T, int C, int NH, bool bf16) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hs);
  const bool h = bf16 && native_bf16();
  const int64_t TT = (int64_t)T * T;
  float* const caller_scratch = scratch;
  const std::thread::id caller = std::this_thread::get_id();
  parallel_tiles(B, [&](int b) {
    thread_local std::vector<float> own;  // a helper's scratch
    thread_local std::vector<uint16_t> hq, hd, hp, hs16;
    float* ds = caller_scratch;  // (NH, T, T): datt, then dS in place; row block [r0, r1) holds columns [0, r1)
    if (std::this_thread::get_id() != caller) {
      if (own.size() < (size_t)NH * TT) own.resize((size_t)NH * TT);
      ds = own.data();
    }
    const View q = as_operand(qkv + (size_t)b * T * C3, (size_t)T * C3, h, hq);  // (T, 3C) = [q | k | v]
    const View dO = as_operand(dout + (size_t)b * T * C, (size_t)T * C, h, hd);  // (T, C)
    const float* a = att + (size_t)b * NH * TT;                                   // (NH, T, T)
    float* dq = dqkv + (size_t)b * T * C3;                                        // dk: + C, dv: + 2C
    if (h && hp.size() < (size_t)NH * TT) hp.resize((size_t)NH * TT), hs16.resize((size_t)NH * TT);
    const View p = h ? View{hp.data(), true} : View{a, false}, s = h ? View{hs16.data(), true} : View{ds, false};
    for (int r0 = 0; r0 < T; r0 += kBlock) {  // datt and dS by rows, then dq = dS k
      const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
      heads(m, r1, hs, false, true, C, C3, T, 1.0f, NH, hs, hs, TT, dO.at((size_t)r0 * C), q.at(2 * C),
            ds + (size_t)r0 * T, h);
      for (int hd = 0; hd < NH; ++hd) causal_softmax_bwd(a + hd * TT, ds + hd * TT, T, r0, r1);
      if (h) pack_rows(a, hp.data(), NH, T, r0, r1), pack_rows(ds, hs16.data(), NH, T, r0, r1);
      heads(m, hs, r1, false, false, T, C3, C3, scale, NH, TT, hs, hs, s.at((size_t)r0 * T), q.at(C),
            dq + (size_t)r0 * C3, h);
    }
    // by columns: rows i >= c0 of column block [c0, c1) lie in row blocks that computed them
    for (int c0 = 0; c0 < T; c0 += kBlock) {
      const int c1 = std::min(T, c0 + kBlock), n = c1 - c0, rows = T - c0;
      heads(n, hs, rows, true, false, T, C, C3, 1.0f, NH, TT, hs, hs, p.at((size_t)c0 * T + c0),
            dO.at((size_t)c0 * C), dq + 2 * C + (size_t)c0 * C3, h);
      heads(n, hs, rows, true, false, T, C3, C3, scale, NH, TT, hs, hs, s.at((size_t)c0 * T + c0),
            q.at((size_t)c0 * C3), dq + C + (size_t)c0 * C3, h);
    }
  });
}

}  // namespace zf::kernels::cpu
