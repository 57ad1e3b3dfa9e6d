// Causal multi-head self-attention (GPT-2), one (batch, head) at a time: the products are
// single-threaded SGEMMs on strided views of qkv (B, T, 3C) = [q | k | v]; the causal softmax
// and its backward are loops that GCC vectorizes (exp through gelu_math's exp_poly, row sums in
// lanes.hpp's fixed order). Forward: S = q k^T / sqrt(hs), att = softmax over j <= i,
// out = att v. Backward: datt = dout v^T, dv = att^T dout, dS = att * (datt - rowsum(att datt)),
// dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs).
// Each (batch, head) is a tile of kernels::cpu::parallel_for: the device side's idle cores help,
// and every tile computes the same values whoever runs it (bitwise independent of the thread
// count). The backward's (T, T) scratch: the caller's for tiles it runs, a per-thread buffer
// for the tiles a helper runs (fully written before it is read, so its contents never matter).
// Causal blocking: rows are taken kBlock at a time and a block of rows [r0, r1) only reads
// columns [0, r1), the columns a causal row can see; likewise a block of columns [c0, c1) of the
// transposed products only reads rows [c0, T). What is skipped lies above the diagonal, where
// att and dS are exact zeros (stored as such), so it adds nothing: at T = 256 this does 5/8 of
// the full T x T work, and for T <= kBlock it is the full product as before.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cpu/lanes.hpp"
#include "runtime/parallel.hpp"
#include "codelets/kernels/gelu_math.hpp"

namespace zf::kernels::cpu {

namespace {
constexpr int kBlock = 64;
}

void attention_fwd(const float* qkv, float* out, float* att, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hs);
  parallel_tiles(B * NH, [&](int tile) {
      const int b = tile / NH, h = tile % NH;
      const float* q = qkv + (size_t)b * T * C3 + h * hs;  // (T, hs), row stride 3C
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + ((size_t)b * NH + h) * T * T;  // (T, T)
      float* o = out + (size_t)b * T * C + h * hs;    // (T, hs), row stride C
      for (int r0 = 0; r0 < T; r0 += kBlock) {
        const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
        float* ab = a + (size_t)r0 * T;  // rows [r0, r1), columns [0, r1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hs, scale, q + (size_t)r0 * C3, C3, k, C3,
                    0.0f, ab, T);
        for (int i = r0; i < r1; ++i) {
          float* row = a + (size_t)i * T;
          const float mx = lane_max(row, i + 1);
          for (int j = 0; j <= i; ++j) row[j] = gelu_math::exp_poly(row[j] - mx);
          const float inv = 1.0f / lane_sum<float>(i + 1, [&](size_t j) { return row[j]; });
          for (int j = 0; j <= i; ++j) row[j] *= inv;
          for (int j = i + 1; j < T; ++j) row[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, r1, 1.0f, ab, T, v, C3, 0.0f,
                    o + (size_t)r0 * C, C);
      }
  });
}

void attention_bwd(const float* dout, const float* qkv, const float* att, float* dqkv, float* scratch,
                   int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hs);
  thread_local std::vector<float> own;  // a helper's scratch
  float* const caller_scratch = scratch;
  const std::thread::id caller = std::this_thread::get_id();
  parallel_tiles(B * NH, [&](int tile) {
      const int b = tile / NH, h = tile % NH;
      float* ds = caller_scratch;  // (T, T): datt, then dS in place; row block [r0, r1) holds columns [0, r1)
      if (std::this_thread::get_id() != caller) {
        if (own.size() < (size_t)T * T) own.resize((size_t)T * T);
        ds = own.data();
      }
      const float* q = qkv + (size_t)b * T * C3 + h * hs;  // (T, hs), row stride 3C
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + (size_t)b * T * C3 + h * hs;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + ((size_t)b * NH + h) * T * T;  // (T, T)
      const float* dO = dout + (size_t)b * T * C + h * hs;  // (T, hs), row stride C
      for (int r0 = 0; r0 < T; r0 += kBlock) {  // datt and dS by rows, then dq = dS k
        const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
        float* db = ds + (size_t)r0 * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hs, 1.0f, dO + (size_t)r0 * C, C, v, C3, 0.0f,
                    db, T);
        for (int i = r0; i < r1; ++i) {
          const float* ar = a + (size_t)i * T;
          float* dr = ds + (size_t)i * T;
          const float dot = lane_sum<float>(i + 1, [&](size_t j) { return ar[j] * dr[j]; });
          for (int j = 0; j <= i; ++j) dr[j] = ar[j] * (dr[j] - dot);
          for (int j = i + 1; j < r1; ++j) dr[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, r1, scale, db, T, k, C3, 0.0f,
                    dq + (size_t)r0 * C3, C3);
      }
      // by columns: rows i >= c0 of column block [c0, c1) lie in row blocks that computed them
      for (int c0 = 0; c0 < T; c0 += kBlock) {
        const int c1 = std::min(T, c0 + kBlock), n = c1 - c0, rows = T - c0;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, rows, 1.0f, a + (size_t)c0 * T + c0, T,
                    dO + (size_t)c0 * C, C, 0.0f, dv + (size_t)c0 * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, rows, scale, ds + (size_t)c0 * T + c0, T,
                    q + (size_t)c0 * C3, C3, 0.0f, dk + (size_t)c0 * C3, C3);
      }
  });
}

}  // namespace zf::kernels::cpu
