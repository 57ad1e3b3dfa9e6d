// Causal multi-head self-attention (GPT-2), one (batch, head) at a time: the products are
// single-threaded SGEMMs on strided views of qkv (B, T, 3C) = [q | k | v] (GPT), or of q, k and v
// held apart with fewer KV heads than query heads (grouped-query attention, Llama / Qwen2: query
// head h reads KV head h / G, G = H / Hkv, as HF's repeat_kv); the causal softmax
// and its backward are loops that GCC vectorizes (exp through gelu_math's exp_poly, row sums in
// lanes.hpp's fixed order). Forward: S = q k^T / sqrt(hs), att = softmax over j <= i,
// out = att v. Backward: datt = dout v^T, dv = att^T dout, dS = att * (datt - rowsum(att datt)),
// dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs).
// Each (batch, head) is a tile of kernels::cpu::parallel_for in the forward, each (batch, KV head)
// in the backward (its G query heads in head order, so that dk and dv, summed over the heads
// sharing them, are added in a fixed order: the first head's SGEMM writes them, the next ones'
// accumulate, beta = 1): the device side's idle cores help, and every tile computes the same
// values whoever runs it (bitwise independent of the thread count). With G = 1 (GPT) both are the
// calls they were before GQA. The backward's (T, T) scratch: the caller's for tiles it runs, a per-thread buffer
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

// Row-major views: q (B, T, ldq) with head h at column h*hs, k and v (B, T, ldkv) with KV head g
// at column g*hs, out (B, T, ldo); the gradients have their tensors' strides.
struct Views {
  const float *q, *k, *v;
  int ldq, ldkv;
  int B, T, H, Hkv, hs;
};

void fwd(const Views& w, float* out, int ldo, float* att) {
  const int T = w.T, G = w.H / w.Hkv;
  const float scale = 1.0f / std::sqrt((float)w.hs);
  parallel_tiles(w.B * w.H, [&](int tile) {
      const int b = tile / w.H, h = tile % w.H;
      const float* q = w.q + (size_t)b * T * w.ldq + h * w.hs;  // (T, hs), row stride ldq
      const float* k = w.k + (size_t)b * T * w.ldkv + (h / G) * w.hs;  // row stride ldkv
      const float* v = w.v + (size_t)b * T * w.ldkv + (h / G) * w.hs;
      float* a = att + ((size_t)b * w.H + h) * T * T;  // (T, T)
      float* o = out + (size_t)b * T * ldo + h * w.hs;    // (T, hs), row stride ldo
      for (int r0 = 0; r0 < T; r0 += kBlock) {
        const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
        float* ab = a + (size_t)r0 * T;  // rows [r0, r1), columns [0, r1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, w.hs, scale, q + (size_t)r0 * w.ldq, w.ldq, k,
                    w.ldkv, 0.0f, ab, T);
        for (int i = r0; i < r1; ++i) {
          float* row = a + (size_t)i * T;
          const float mx = lane_max(row, i + 1);
          for (int j = 0; j <= i; ++j) row[j] = gelu_math::exp_poly(row[j] - mx);
          const float inv = 1.0f / lane_sum<float>(i + 1, [&](size_t j) { return row[j]; });
          for (int j = 0; j <= i; ++j) row[j] *= inv;
          for (int j = i + 1; j < T; ++j) row[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, w.hs, r1, 1.0f, ab, T, v, w.ldkv, 0.0f,
                    o + (size_t)r0 * ldo, ldo);
      }
  });
}

struct Grads {
  float *dq, *dk, *dv;  // strides ldq, ldkv, ldkv as the views
};

// One query head h of batch b; dk and dv += (beta 0: =) its contributions. ds: (T, T) scratch.
void bwd_head(const Views& w, const float* dout, int ldo, const float* att, const Grads& g, float* ds, int b, int h,
              float beta) {
  const int T = w.T, G = w.H / w.Hkv, hs = w.hs;
  const float scale = 1.0f / std::sqrt((float)hs);
  const float* q = w.q + (size_t)b * T * w.ldq + h * hs;  // (T, hs), row stride ldq
  const float* k = w.k + (size_t)b * T * w.ldkv + (h / G) * hs;  // row stride ldkv
  const float* v = w.v + (size_t)b * T * w.ldkv + (h / G) * hs;
  float* dq = g.dq + (size_t)b * T * w.ldq + h * hs;
  float* dk = g.dk + (size_t)b * T * w.ldkv + (h / G) * hs;
  float* dv = g.dv + (size_t)b * T * w.ldkv + (h / G) * hs;
  const float* a = att + ((size_t)b * w.H + h) * T * T;  // (T, T)
  const float* dO = dout + (size_t)b * T * ldo + h * hs;  // (T, hs), row stride ldo
  for (int r0 = 0; r0 < T; r0 += kBlock) {  // datt and dS by rows, then dq = dS k
    const int r1 = std::min(T, r0 + kBlock), m = r1 - r0;
    float* db = ds + (size_t)r0 * T;  // datt, then dS in place; row block [r0, r1) holds columns [0, r1)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hs, 1.0f, dO + (size_t)r0 * ldo, ldo, v, w.ldkv,
                0.0f, db, T);
    for (int i = r0; i < r1; ++i) {
      const float* ar = a + (size_t)i * T;
      float* dr = ds + (size_t)i * T;
      const float dot = lane_sum<float>(i + 1, [&](size_t j) { return ar[j] * dr[j]; });
      for (int j = 0; j <= i; ++j) dr[j] = ar[j] * (dr[j] - dot);
      for (int j = i + 1; j < r1; ++j) dr[j] = 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, r1, scale, db, T, k, w.ldkv, 0.0f,
                dq + (size_t)r0 * w.ldq, w.ldq);
  }
  // by columns: rows i >= c0 of column block [c0, c1) lie in row blocks that computed them
  for (int c0 = 0; c0 < T; c0 += kBlock) {
    const int c1 = std::min(T, c0 + kBlock), n = c1 - c0, rows = T - c0;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, rows, 1.0f, a + (size_t)c0 * T + c0, T,
                dO + (size_t)c0 * ldo, ldo, beta, dv + (size_t)c0 * w.ldkv, w.ldkv);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, rows, scale, ds + (size_t)c0 * T + c0, T,
                q + (size_t)c0 * w.ldq, w.ldq, beta, dk + (size_t)c0 * w.ldkv, w.ldkv);
  }
}

// Tiles (batch, KV head): the KV head's query heads in order, the first writing dk and dv.
void bwd(const Views& w, const float* dout, int ldo, const float* att, const Grads& g, float* scratch) {
  const int T = w.T, G = w.H / w.Hkv;
  thread_local std::vector<float> own;  // a helper's scratch
  float* const caller_scratch = scratch;
  const std::thread::id caller = std::this_thread::get_id();
  parallel_tiles(w.B * w.Hkv, [&](int tile) {
      const int b = tile / w.Hkv, kv = tile % w.Hkv;
      float* ds = caller_scratch;  // (T, T)
      if (std::this_thread::get_id() != caller) {
        if (own.size() < (size_t)T * T) own.resize((size_t)T * T);
        ds = own.data();
      }
      for (int j = 0; j < G; ++j) bwd_head(w, dout, ldo, att, g, ds, b, kv * G + j, j == 0 ? 0.0f : 1.0f);
  });
}
}  // namespace

void attention_fwd(const float* qkv, float* out, float* att, int B, int T, int C, int NH) {
  fwd(Views{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, C / NH}, out, C, att);
}

void attention_bwd(const float* dout, const float* qkv, const float* att, float* dqkv, float* scratch,
                   int B, int T, int C, int NH) {
  bwd(Views{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, C / NH}, dout, C, att,
      Grads{dqkv, dqkv + C, dqkv + 2 * C}, scratch);
}

void gqa_attention_fwd(const float* q, const float* k, const float* v, float* out, float* att, int B, int T, int H,
                       int Hkv, int hs) {
  fwd(Views{q, k, v, H * hs, Hkv * hs, B, T, H, Hkv, hs}, out, H * hs, att);
}

void gqa_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* att,
                       float* dq, float* dk, float* dv, float* scratch, int B, int T, int H, int Hkv, int hs) {
  bwd(Views{q, k, v, H * hs, Hkv * hs, B, T, H, Hkv, hs}, dout, H * hs, att, Grads{dq, dk, dv}, scratch);
}

}  // namespace zf::kernels::cpu
