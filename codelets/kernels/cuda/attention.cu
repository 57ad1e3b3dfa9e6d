// Causal multi-head self-attention on the GPU, the CPU kernel's semantics (cpu/attention.cpp)
// with no T x T matrix kept between the passes (FlashAttention's recomputation, Dao et al. 2022,
// sec. 3.1, blocked by rows rather than fused): the forward saves each row's log-sum-exp
// lse_i = m_i + log sum_{j<=i} exp(s_ij - m_i) (m_i the row's max), the backward recomputes
// P_ij = exp(s_ij - lse_i). q, k, v: strided views of the GPT's qkv (B, T, 3C) = [q | k | v], or held
// apart with Hkv <= H KV heads (grouped-query attention: head h reads KV head h / (H / Hkv)).
// Query rows go R at a time, sequences Bc at a time; a row block [r0, r1) only sees columns
// [0, r1). Per block, each head's products are cuBLAS strided-batched GEMMs over the chunk's
// sequences into the block's scores (H, Bc, r1 - r0, r1), then one CUDA block per row does the
// softmax (P, lse) or its backward (P from lse, dS = P * (dP - rowsum(P * dP))). Forward:
// S = q k^T / sqrt(hs), out = P v. Backward: dP = dout v^T, dq = dS k / sqrt(hs) (each row block
// writes its rows), dk += dS^T q / sqrt(hs), dv += P^T dout into dk and dv zeroed first: row blocks
// in order, and within a block the heads in order (a KV head's G query heads in group order).
// Scratch (stream-ordered pool), E bytes per score: forward 4 (S, then P in place), backward 8 (S
// then P, dP then dS); bf16 adds P's (and dS's) bf16 copies: 6 and 12. With L = 64 MiB and
// W = H T E (one query row of a sequence, all heads): if T W <= L, R = T and
// Bc = min(B, floor(L / (T W))); else Bc = 1 and R = min(T, max(64, 64 floor(L / (64 W)))). The
// scratch is E ceil128(Bc H R T) bytes (its parts 256-byte aligned): at most L, plus that
// rounding, unless 64 rows of one sequence exceed it. Row-major operands are passed to
// column-major cuBLAS transposed (see matmul.cu).
// bf16 (precision bf16, as the CPU kernel's bf16 path): q, k, v and dout are rounded to bf16
// (kernels/bf16.hpp) into scratch in their own layout (2 bytes per element, besides the above), P
// after the fp32 softmax and dS after its fp32 backward likewise, and the products are
// cublasGemmStridedBatchedEx on the copies with fp32 sums into fp32 outputs (tensor cores).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

constexpr int kRowThreads = 128;
constexpr size_t kScratchBytes = size_t(64) << 20;  // L above
constexpr size_t kRowQuantum = 64;                   // R's multiple (and least value) when blocked

// The blocking of a pass with E bytes of scratch per score (the head comment's formula): R query
// rows per block, Bc sequences per chunk, n scores per part of the scratch (Bc H R T rounded up to
// 128: every part 256-byte aligned). B, T, H > 0.
struct Blocking {
  int R, Bc;
  size_t n;
};
Blocking blocking(int B, int T, int H, size_t E) {
  const size_t W = (size_t)H * T * E;
  size_t R = (size_t)T;
  if (R * W > kScratchBytes)
    R = std::min<size_t>(T, std::max(kRowQuantum, kScratchBytes / (kRowQuantum * W) * kRowQuantum));
  const size_t Bc = std::min<size_t>(B, std::max<size_t>(1, kScratchBytes / (R * W)));
  return {(int)R, (int)Bc, (Bc * H * R * T + 127) / 128 * 128};
}

__device__ inline void put(float* p, int j, float x) { p[j] = x; }
__device__ inline void put(uint16_t* p, int j, float x) { p[j] = bf16::from_float(x); }

// Rows of a block's scores (H, nb, m, n), row = (hd nb + b) m + (i - r0), n = r1: sequence b (of
// nb), head hd, query row i; lse (nb, H, T)
struct RowAt {
  int b, hd, i;
};
__device__ inline RowAt row_at(size_t row, int nb, int r0, int m) {
  const size_t hb = row / (size_t)m;
  return {(int)(hb % (size_t)nb), (int)(hb / (size_t)nb), r0 + (int)(row - hb * m)};
}

// The forward's row: softmax over j <= i of s into p (s itself, or its bf16 copy), zeros for
// i < j < n; lse_i. s is left holding exp(s - max).
template <class E>
__global__ void softmax_lse_k(float* s, E* p, float* lse, int nb, int H, int T, int r0, int m, int n) {
  __shared__ float sh[32];
  const size_t row = blockIdx.x;
  const RowAt at = row_at(row, nb, r0, m);
  const int i = at.i;
  float* a = s + row * n;
  E* o = p + row * n;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, a[j]);
  mx = block_max(mx, sh);
  float part = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float e = expf(a[j] - mx);
    a[j] = e;
    part += e;
  }
  const float sum = block_sum(part, sh);
  if (threadIdx.x == 0) lse[((size_t)at.b * H + at.hd) * T + i] = mx + logf(sum);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < n; j += blockDim.x) put(o, j, j <= i ? a[j] * inv : 0.0f);
}

// The backward's row, from the scores s and dP dp: P = exp(s - lse_i) and
// dS = P * (dP - sum_{j<=i} P dP) for j <= i, zeros for i < j < n, into p and ds (s and dp in
// place, or their bf16 copies). s is left holding P.
template <class E>
__global__ void softmax_lse_bwd_k(float* s, float* dp, E* p, E* ds, const float* lse, int nb, int H, int T,
                                  int r0, int m, int n) {
  __shared__ float sh[32];
  const size_t row = blockIdx.x;
  const RowAt at = row_at(row, nb, r0, m);
  const int i = at.i;
  const float l = lse[((size_t)at.b * H + at.hd) * T + i];
  float* a = s + row * n;
  float* d = dp + row * n;
  E* po = p + row * n;
  E* dso = ds + row * n;
  float part = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float pj = expf(a[j] - l);
    a[j] = pj;
    part += pj * d[j];
  }
  const float dot = block_sum(part, sh);
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float pj = j <= i ? a[j] : 0.0f, dj = j <= i ? pj * (d[j] - dot) : 0.0f;
    put(po, j, pj);
    put(dso, j, dj);
  }
}

// x (rows, cols), row stride ld, <- 0
__global__ void zero_rows_k(float* x, size_t rows, int cols, int ld) {
  ZF_GRID_STRIDE(e, rows * (size_t)cols) x[(e / cols) * ld + e % cols] = 0.0f;
}

// The products on fp32 operands (cublasSgemmStridedBatched) or bf16 ones (GemmStridedBatchedEx:
// fp32 sums into the fp32 C, tensor cores)
Status batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
               const float* A, int lda, long long sa, const float* B, int ldb, long long sb, float beta, float* C,
               int ldc, long long sc, int batch) {
  return check(cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, A, lda, sa, B, ldb, sb, &beta, C, ldc, sc, batch));
}
Status batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
               const uint16_t* A, int lda, long long sa, const uint16_t* B, int ldb, long long sb, float beta, float* C,
               int ldc, long long sc, int batch) {
  return gemm_strided_bf16(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

// Row-major views as the CPU kernel's: q (B, T, ldq), k and v (B, T, ldkv), head offsets h*hs; of
// element type E: float, or uint16_t for bf16 copies (the same layout, strides and offsets).
template <class E>
struct Views {
  const E *q, *k, *v;
  int ldq, ldkv;
  int B, T, H, Hkv, hs;
};

// One row block of a chunk: sequences [b0, b0 + nb), query rows [r0, r1), columns [0, r1); the
// scores' strides: sS per sequence, sH per head
struct Block {
  int b0, nb, r0, m, n;
  long long sS, sH;
};
template <class F>
Status for_blocks(int B, int T, const Blocking& bl, F&& f) {
  Status st = nullptr;
  for (int b0 = 0; b0 < B && !st; b0 += bl.Bc)
    for (int r0 = 0; r0 < T && !st; r0 += bl.R) {
      const int nb = std::min(bl.Bc, B - b0), r1 = std::min(T, r0 + bl.R);
      const long long sS = (long long)(r1 - r0) * r1;
      st = f(Block{b0, nb, r0, r1 - r0, r1, sS, sS * nb});
    }
  return st;
}

// out (B, T, ldo) as q's heads; lse (B, H, T)
template <class E>
Status fwd(const Views<E>& w, float* out, int ldo, float* lse, cublasHandle_t h, cudaStream_t s) {
  constexpr bool half = std::is_same_v<E, uint16_t>;
  const int T = w.T, H = w.H, hs = w.hs, G = H / w.Hkv;
  if (w.B <= 0 || T <= 0 || H <= 0) return nullptr;
  const size_t E_bytes = half ? 6 : 4;
  const Blocking bl = blocking(w.B, T, H, E_bytes);
  const float scale = 1.0f / std::sqrt((float)hs);
  const long long sQ = (long long)T * w.ldq, sKV = (long long)T * w.ldkv, sOut = (long long)T * ldo;
  void* scratch = nullptr;
  if (Status e = scratch_alloc(&scratch, bl.n * E_bytes, s)) return e;
  float* sc = static_cast<float*>(scratch);                               // S, then exp(S - max)
  E* p = half ? reinterpret_cast<E*>(sc + bl.n) : reinterpret_cast<E*>(sc);  // P
  Status st = check(cublasSetStream(h, s));
  if (!st)
    st = for_blocks(w.B, T, bl, [&](const Block& blk) {
      Status e = nullptr;
      for (int hd = 0; hd < H && !e; ++hd) {
        const E* q = w.q + blk.b0 * sQ + (long long)blk.r0 * w.ldq + hd * hs;
        const E* kk = w.k + blk.b0 * sKV + (hd / G) * hs;
        // S^T (n, m) col-major = op_T(k) q : S[i][j] = scale * q_i . k_j
        e = batched(h, CUBLAS_OP_T, CUBLAS_OP_N, blk.n, blk.m, hs, scale, kk, w.ldkv, sKV, q, w.ldq, sQ, 0.0f,
                    sc + hd * blk.sH, blk.n, blk.sS, blk.nb);
      }
      if (e) return e;
      softmax_lse_k<<<(unsigned)((size_t)H * blk.nb * blk.m), kRowThreads, 0, s>>>(sc, p, lse + (size_t)blk.b0 * H * T,
                                                                               blk.nb, H, T, blk.r0, blk.m, blk.n);
      e = launched();
      for (int hd = 0; hd < H && !e; ++hd) {
        const E* v = w.v + blk.b0 * sKV + (hd / G) * hs;
        float* o = out + blk.b0 * sOut + (long long)blk.r0 * ldo + hd * hs;
        // out^T (hs, m) = v^T (hs, n) P^T : out[i][d] = sum_j P[i][j] v[j][d]
        e = batched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, blk.m, blk.n, 1.0f, v, w.ldkv, sKV, p + hd * blk.sH, blk.n,
                    blk.sS, 0.0f, o, ldo, sOut, blk.nb);
      }
      return e;
    });
  scratch_free(scratch, s);
  return st;
}

struct Grads {
  float *dq, *dk, *dv;  // strides ldq, ldkv, ldkv
};

// dout (B, T, ldo) as q's heads (E: its bf16 copy for bf16)
template <class E>
Status bwd(const Views<E>& w, const E* dout, int ldo, const float* lse, const Grads& g, cublasHandle_t h,
           cudaStream_t s) {
  constexpr bool half = std::is_same_v<E, uint16_t>;
  const int T = w.T, H = w.H, hs = w.hs, G = H / w.Hkv;
  if (w.B <= 0 || T <= 0 || H <= 0) return nullptr;
  const size_t E_bytes = half ? 12 : 8;
  const Blocking bl = blocking(w.B, T, H, E_bytes);
  const float scale = 1.0f / std::sqrt((float)hs);
  const long long sQ = (long long)T * w.ldq, sKV = (long long)T * w.ldkv, sOut = (long long)T * ldo;
  // dk and dv are sums over row blocks and heads: zeroed, then every product adds (beta 1)
  const size_t rows = (size_t)w.B * T;
  const int kvc = w.Hkv * hs;
  zero_rows_k<<<blocks_for(rows * kvc), kThreads, 0, s>>>(g.dk, rows, kvc, w.ldkv);
  zero_rows_k<<<blocks_for(rows * kvc), kThreads, 0, s>>>(g.dv, rows, kvc, w.ldkv);
  if (Status e = launched()) return e;
  void* scratch = nullptr;
  if (Status e = scratch_alloc(&scratch, bl.n * E_bytes, s)) return e;
  float* sc = static_cast<float*>(scratch);  // S, then P
  float* dp = sc + bl.n;                     // dP, then dS
  E* p = half ? reinterpret_cast<E*>(dp + bl.n) : reinterpret_cast<E*>(sc);
  E* ds = half ? p + bl.n : reinterpret_cast<E*>(dp);
  Status st = check(cublasSetStream(h, s));
  if (!st)
    st = for_blocks(w.B, T, bl, [&](const Block& blk) {
      const long long rq = blk.b0 * sQ + (long long)blk.r0 * w.ldq, ro = blk.b0 * sOut + (long long)blk.r0 * ldo;
      Status e = nullptr;
      for (int hd = 0; hd < H && !e; ++hd) {
        const E* q = w.q + rq + hd * hs;
        const E* kk = w.k + blk.b0 * sKV + (hd / G) * hs;
        const E* v = w.v + blk.b0 * sKV + (hd / G) * hs;
        const E* dO = dout + ro + hd * hs;
        // S[i][j] = scale * q_i . k_j;  dP[i][j] = dO_i . v_j
        e = batched(h, CUBLAS_OP_T, CUBLAS_OP_N, blk.n, blk.m, hs, scale, kk, w.ldkv, sKV, q, w.ldq, sQ, 0.0f,
                    sc + hd * blk.sH, blk.n, blk.sS, blk.nb);
        if (!e)
          e = batched(h, CUBLAS_OP_T, CUBLAS_OP_N, blk.n, blk.m, hs, 1.0f, v, w.ldkv, sKV, dO, ldo, sOut, 0.0f,
                      dp + hd * blk.sH, blk.n, blk.sS, blk.nb);
      }
      if (e) return e;
      softmax_lse_bwd_k<<<(unsigned)((size_t)H * blk.nb * blk.m), kRowThreads, 0, s>>>(
          sc, dp, p, ds, lse + (size_t)blk.b0 * H * T, blk.nb, H, T, blk.r0, blk.m, blk.n);
      e = launched();
      for (int hd = 0; hd < H && !e; ++hd) {
        const E* q = w.q + rq + hd * hs;
        const E* kk = w.k + blk.b0 * sKV + (hd / G) * hs;
        const E* dO = dout + ro + hd * hs;
        const E* pb = p + hd * blk.sH;
        const E* dsb = ds + hd * blk.sH;
        float* dq = g.dq + rq + hd * hs;
        float* dk = g.dk + blk.b0 * sKV + (hd / G) * hs;
        float* dv = g.dv + blk.b0 * sKV + (hd / G) * hs;
        // dq[i][d] = scale sum_j dS[i][j] k[j][d]: dq^T (hs, m) = k^T (hs, n) dS^T
        e = batched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, blk.m, blk.n, scale, kk, w.ldkv, sKV, dsb, blk.n, blk.sS, 0.0f, dq,
                    w.ldq, sQ, blk.nb);
        // dk[j][d] += scale sum_i dS[i][j] q[i][d]: dk^T (hs, n) += q^T (hs, m) dS
        if (!e)
          e = batched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, blk.n, blk.m, scale, q, w.ldq, sQ, dsb, blk.n, blk.sS, 1.0f, dk,
                      w.ldkv, sKV, blk.nb);
        // dv[j][d] += sum_i P[i][j] dO[i][d]
        if (!e)
          e = batched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, blk.n, blk.m, 1.0f, dO, ldo, sOut, pb, blk.n, blk.sS, 1.0f, dv,
                      w.ldkv, sKV, blk.nb);
      }
      return e;
    });
  scratch_free(scratch, s);
  return st;
}

// The buffers q, k and v lie in (the GPT's fused qkv: one; grouped-query attention: three), and
// where: buffer index and element offset of q, k and v.
struct Inputs {
  const float* buf[3];
  size_t n[3];
  int nbuf;
  int at[3];
  size_t off[3];
};

// bf16: the inputs' bf16 copies and `extra` more bf16 elements in one stream-ordered scratch, then
// f(views of the copies, the extra elements); the scratch is freed in stream order after f's work.
template <class F>
Status with_bf16(const Views<float>& w, const Inputs& in, size_t extra, cudaStream_t s, F&& f) {
  size_t total = extra;
  for (int i = 0; i < in.nbuf; ++i) total += in.n[i];
  void* scratch = nullptr;
  if (Status e = scratch_alloc(&scratch, total * sizeof(uint16_t), s)) return e;
  uint16_t* p = static_cast<uint16_t*>(scratch);
  const uint16_t* base[3] = {};
  Status st = nullptr;
  for (int i = 0; i < in.nbuf; ++i) {
    base[i] = p;
    if (!st) st = pack_bf16(in.buf[i], p, in.n[i], s);
    p += in.n[i];
  }
  const Views<uint16_t> wh{base[in.at[0]] + in.off[0], base[in.at[1]] + in.off[1], base[in.at[2]] + in.off[2],
                           w.ldq, w.ldkv, w.B, w.T, w.H, w.Hkv, w.hs};
  if (!st) st = f(wh, p);
  scratch_free(scratch, s);
  return st;
}

Status fwd_any(const Views<float>& w, const Inputs& in, float* out, int ldo, float* lse, bool bf16, cublasHandle_t h,
               cudaStream_t s) {
  if (!bf16) return fwd(w, out, ldo, lse, h, s);
  return with_bf16(w, in, 0, s, [&](const Views<uint16_t>& wh, uint16_t*) { return fwd(wh, out, ldo, lse, h, s); });
}

Status bwd_any(const Views<float>& w, const Inputs& in, const float* dout, int ldo, const float* lse, const Grads& g,
               bool bf16, cublasHandle_t h, cudaStream_t s) {
  if (!bf16) return bwd(w, dout, ldo, lse, g, h, s);
  const size_t ndout = (size_t)w.B * w.T * ldo;
  return with_bf16(w, in, ndout, s, [&](const Views<uint16_t>& wh, uint16_t* hd) {
    Status st = pack_bf16(dout, hd, ndout, s);
    if (!st) st = bwd(wh, (const uint16_t*)hd, ldo, lse, g, h, s);
    return st;
  });
}

}  // namespace

Status attention_fwd(const float* qkv, float* out, float* lse, int B, int T, int C, int NH, cublasHandle_t h,
                     cudaStream_t s, bool bf16) {
  const Inputs in{{qkv}, {(size_t)B * T * 3 * C}, 1, {0, 0, 0}, {0, (size_t)C, 2 * (size_t)C}};
  return fwd_any(Views<float>{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, C / NH}, in, out, C, lse, bf16,
                 h, s);
}

Status attention_bwd(const float* dout, const float* qkv, const float* lse, float* dqkv, int B, int T, int C,
                     int NH, cublasHandle_t h, cudaStream_t s, bool bf16) {
  const Inputs in{{qkv}, {(size_t)B * T * 3 * C}, 1, {0, 0, 0}, {0, (size_t)C, 2 * (size_t)C}};
  return bwd_any(Views<float>{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, C / NH}, in, dout, C, lse,
                 Grads{dqkv, dqkv + C, dqkv + 2 * C}, bf16, h, s);
}

Status gqa_attention_fwd(const float* q, const float* k, const float* v, float* out, float* lse, int B, int T, int H,
                         int Hkv, int hs, cublasHandle_t h, cudaStream_t s, bool bf16) {
  const size_t nq = (size_t)B * T * H * hs, nkv = (size_t)B * T * Hkv * hs;
  const Inputs in{{q, k, v}, {nq, nkv, nkv}, 3, {0, 1, 2}, {0, 0, 0}};
  return fwd_any(Views<float>{q, k, v, H * hs, Hkv * hs, B, T, H, Hkv, hs}, in, out, H * hs, lse, bf16, h, s);
}

Status gqa_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* lse,
                         float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int hs, cublasHandle_t h,
                         cudaStream_t s, bool bf16) {
  const size_t nq = (size_t)B * T * H * hs, nkv = (size_t)B * T * Hkv * hs;
  const Inputs in{{q, k, v}, {nq, nkv, nkv}, 3, {0, 1, 2}, {0, 0, 0}};
  return bwd_any(Views<float>{q, k, v, H * hs, Hkv * hs, B, T, H, Hkv, hs}, in, dout, H * hs, lse,
                 Grads{dq, dk, dv}, bf16, h, s);
}

}  // namespace zf::kernels::cuda
