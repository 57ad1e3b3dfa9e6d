// Causal multi-head self-attention on the GPU, the CPU kernel's algorithm (cpu/attention.cpp):
// for each head h, the four products are cuBLAS strided-batched GEMMs over the batch on strided
// views of qkv (B, T, 3C) = [q | k | v] (GPT) or of q, k, v held apart with Hkv <= H KV heads
// (grouped-query attention: head h reads KV head h / (H / Hkv)); the causal softmax and its
// backward are one block per row. The backward visits the heads in order, the first of a KV head's
// group writing its dk and dv (beta 0) and the others adding to them (beta 1): a fixed order.
// Row-major operands are passed to column-major cuBLAS transposed (see matmul.cu). fp32: SGEMMs.
// bf16 (precision bf16, as the CPU kernel's bf16 path): q, k, v and dout are rounded to bf16
// (kernels/bf16.hpp) into stream-ordered scratch in their own layout, att after the fp32 softmax and
// dS after its fp32 backward likewise, and the products are cublasGemmStridedBatchedEx on the copies
// with fp32 sums into fp32 outputs (tensor cores); att is saved in fp32.
#include <cmath>

#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

constexpr int kRowThreads = 128;

// row i of S (T, T): softmax over j <= i, zeros above the diagonal
__global__ void causal_softmax_k(float* att, int T) {
  __shared__ float sh[32];
  const size_t row = blockIdx.x;
  const int i = (int)(row % (size_t)T);
  float* a = att + row * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, a[j]);
  mx = block_max(mx, sh);
  float part = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float e = expf(a[j] - mx);
    a[j] = e;
    part += e;
  }
  const float inv = 1.0f / block_sum(part, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x) a[j] = j <= i ? a[j] * inv : 0.0f;
}

// row i: ds = att * (datt - sum_j<=i att datt), zeros above the diagonal (in place on datt)
__global__ void causal_softmax_bwd_k(const float* att, float* ds, int T, size_t att_row0_stride_rows,
                                     int rows_per_batch) {
  __shared__ float sh[32];
  const size_t row = blockIdx.x;  // over (b, i) of one head
  const size_t b = row / (size_t)rows_per_batch;
  const int i = (int)(row - b * rows_per_batch);
  const float* a = att + b * att_row0_stride_rows * T + (size_t)i * T;
  float* d = ds + row * T;
  float part = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) part += a[j] * d[j];
  const float dot = block_sum(part, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x) d[j] = j <= i ? a[j] * (d[j] - dot) : 0.0f;
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
// x (n fp32) as a product's operand: itself, or its bf16 copy written into buf
Status operand(const float* x, size_t, float*, const float** out, cudaStream_t) {
  *out = x;
  return nullptr;
}
Status operand(const float* x, size_t n, uint16_t* buf, const uint16_t** out, cudaStream_t s) {
  *out = buf;
  return pack_bf16(x, buf, n, s);
}

// Row-major views as the CPU kernel's: q (B, T, ldq), k and v (B, T, ldkv), head offsets h*hs; of
// element type E: float, or uint16_t for bf16 copies (the same layout, strides and offsets).
template <class E>
struct Views {
  const E *q, *k, *v;
  int ldq, ldkv;
  int B, T, H, Hkv, hs;
};

// att_buf: scratch for att's bf16 copy (B*H*T*T; unused for fp32)
template <class E>
Status fwd(const Views<E>& w, float* out, int ldo, float* att, E* att_buf, cublasHandle_t h, cudaStream_t s) {
  const int T = w.T, B = w.B, hs = w.hs, G = w.H / w.Hkv;
  const float scale = 1.0f / std::sqrt((float)hs);
  const long long sQ = (long long)T * w.ldq, sKV = (long long)T * w.ldkv, sAtt = (long long)w.H * T * T,
                  sOut = (long long)T * ldo;
  if (Status e = check(cublasSetStream(h, s))) return e;
  for (int hd = 0; hd < w.H; ++hd) {
    const E* q = w.q + hd * hs;
    const E* k = w.k + (hd / G) * hs;
    float* a = att + (size_t)hd * T * T;
    // S^T (T, T) col-major = op_T(k) q : S[i][j] = scale * q_i . k_j
    if (Status e = batched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, w.ldkv, sKV, q, w.ldq, sQ, 0.0f, a, T,
                           sAtt, B))
      return e;
  }
  if (B > 0 && T > 0) causal_softmax_k<<<(unsigned)((size_t)B * w.H * T), kRowThreads, 0, s>>>(att, T);
  if (Status e = launched()) return e;
  const E* pa = nullptr;  // att as the second product's operand
  if (Status e = operand(att, (size_t)B * sAtt, att_buf, &pa, s)) return e;
  for (int hd = 0; hd < w.H; ++hd) {
    const E* v = w.v + (hd / G) * hs;
    const E* a = pa + (size_t)hd * T * T;
    float* o = out + hd * hs;
    // out^T (hs, T) = v^T (hs, T) att^T : out[i][d] = sum_j att[i][j] v[j][d]
    if (Status e = batched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, w.ldkv, sKV, a, T, sAtt, 0.0f, o, ldo,
                           sOut, B))
      return e;
  }
  return nullptr;
}

struct Grads {
  float *dq, *dk, *dv;  // strides ldq, ldkv, ldkv
};

// One head over the batch; ds (B, T, T) fp32 scratch, ds_buf (B, T, T) scratch for dS's bf16 copy
// (unused for fp32); att fp32 for the softmax's backward, pa (E) for the product dv. beta 0 writes
// dk and dv, 1 adds to them.
template <class E>
Status bwd_head(const Views<E>& w, const E* dout, int ldo, const float* att, const E* pa, const Grads& g, float* ds,
                E* ds_buf, int hd, float beta, cublasHandle_t h, cudaStream_t s) {
  const int T = w.T, B = w.B, hs = w.hs, G = w.H / w.Hkv;
  const float scale = 1.0f / std::sqrt((float)hs);
  const long long sQ = (long long)T * w.ldq, sKV = (long long)T * w.ldkv, sAtt = (long long)w.H * T * T,
                  sOut = (long long)T * ldo, sDs = (long long)T * T;
  const E* q = w.q + hd * hs;
  const E* k = w.k + (hd / G) * hs;
  const E* v = w.v + (hd / G) * hs;
  float* dq = g.dq + hd * hs;
  float* dk = g.dk + (hd / G) * hs;
  float* dv = g.dv + (hd / G) * hs;
  const float* a = att + (size_t)hd * T * T;
  const E* ah = pa + (size_t)hd * T * T;
  const E* dO = dout + hd * hs;
  // datt[i][j] = dO_i . v_j
  Status st = batched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, w.ldkv, sKV, dO, ldo, sOut, 0.0f, ds, T, sDs, B);
  // dv[j][d] (+)= sum_i att[i][j] dO[i][d]
  if (!st)
    st = batched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dO, ldo, sOut, ah, T, sAtt, beta, dv, w.ldkv, sKV, B);
  if (!st && B > 0 && T > 0) {
    causal_softmax_bwd_k<<<(unsigned)((size_t)B * T), kRowThreads, 0, s>>>(a, ds, T, (size_t)w.H * T, T);
    st = launched();
  }
  const E* pds = nullptr;  // dS as the products' operand
  if (!st) st = operand(ds, (size_t)B * sDs, ds_buf, &pds, s);
  // dq[i][d] = scale sum_j dS[i][j] k[j][d];  dk[j][d] (+)= scale sum_i dS[i][j] q[i][d]
  if (!st)
    st = batched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, k, w.ldkv, sKV, pds, T, sDs, 0.0f, dq, w.ldq, sQ, B);
  if (!st)
    st = batched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, q, w.ldq, sQ, pds, T, sDs, beta, dk, w.ldkv, sKV, B);
  return st;
}

template <class E>
Status bwd(const Views<E>& w, const E* dout, int ldo, const float* att, const E* pa, const Grads& g, E* ds_buf,
           cublasHandle_t h, cudaStream_t s) {
  const int G = w.H / w.Hkv;
  void* scratch = nullptr;  // ds (B, T, T) for one head
  if (Status e = scratch_alloc(&scratch, (size_t)w.B * w.T * w.T * sizeof(float), s)) return e;
  Status st = check(cublasSetStream(h, s));
  for (int hd = 0; hd < w.H && !st; ++hd)
    st = bwd_head(w, dout, ldo, att, pa, g, (float*)scratch, ds_buf, hd, hd % G == 0 ? 0.0f : 1.0f, h, s);
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

Status fwd_any(const Views<float>& w, const Inputs& in, float* out, int ldo, float* att, bool bf16, cublasHandle_t h,
               cudaStream_t s) {
  if (!bf16) return fwd(w, out, ldo, att, (float*)nullptr, h, s);
  const size_t natt = (size_t)w.B * w.H * w.T * w.T;
  return with_bf16(w, in, natt, s, [&](const Views<uint16_t>& wh, uint16_t* att_buf) {
    return fwd(wh, out, ldo, att, att_buf, h, s);
  });
}

Status bwd_any(const Views<float>& w, const Inputs& in, const float* dout, int ldo, const float* att, const Grads& g,
               bool bf16, cublasHandle_t h, cudaStream_t s) {
  if (!bf16) return bwd(w, dout, ldo, att, att, g, (float*)nullptr, h, s);
  const size_t ndout = (size_t)w.B * w.T * ldo, natt = (size_t)w.B * w.H * w.T * w.T,
               nds = (size_t)w.B * w.T * w.T;
  return with_bf16(w, in, ndout + natt + nds, s, [&](const Views<uint16_t>& wh, uint16_t* buf) {
    uint16_t *hd = buf, *ha = buf + ndout, *hds = ha + natt;  // dout, att, dS (one head)
    Status st = pack_bf16(dout, hd, ndout, s);
    if (!st) st = pack_bf16(att, ha, natt, s);
    if (!st) st = bwd(wh, (const uint16_t*)hd, ldo, att, (const uint16_t*)ha, g, hds, h, s);
    return st;
  });
}

}  // namespace

Status attention_fwd(const float* qkv, float* out, float* att, int B, int T, int C, int NH, cublasHandle_t h,
                     cudaStream_t s, bool bf16) {
  const Inputs in{{qkv}, {(size_t)B * T * 3 * C}, 1, {0, 0, 0}, {0, (size_t)C, 2 * (size_t)C}};
  return fwd_any(Views<float>{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, C / NH}, in, out, C, att, bf16,
                 h, s);
}

Status attention_bwd(const float* dout, const float* qkv, const float* att, float* dqkv, int B, int T, int C,
                     int NH, cublasHandle_t h, cudaStream_t s, bool bf16) {
  const Inputs in{{qkv}, {(size_t)B * T * 3 * C}, 1, {0, 0, 0}, {0, (size_t)C, 2 * (size_t)C}};
  return bwd_any(Views<float>{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, C / NH}, in, dout, C, att,
                 Grads{dqkv, dqkv + C, dqkv + 2 * C}, bf16, h, s);
}

Status gqa_attention_fwd(const float* q, const float* k, const float* v, float* out, float* att, int B, int T, int H,
                         int Hkv, int hs, cublasHandle_t h, cudaStream_t s, bool bf16) {
  const size_t nq = (size_t)B * T * H * hs, nkv = (size_t)B * T * Hkv * hs;
  const Inputs in{{q, k, v}, {nq, nkv, nkv}, 3, {0, 1, 2}, {0, 0, 0}};
  return fwd_any(Views<float>{q, k, v, H * hs, Hkv * hs, B, T, H, Hkv, hs}, in, out, H * hs, att, bf16, h, s);
}

Status gqa_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* att,
                         float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int hs, cublasHandle_t h,
                         cudaStream_t s, bool bf16) {
  const size_t nq = (size_t)B * T * H * hs, nkv = (size_t)B * T * Hkv * hs;
  const Inputs in{{q, k, v}, {nq, nkv, nkv}, 3, {0, 1, 2}, {0, 0, 0}};
  return bwd_any(Views<float>{q, k, v, H * hs, Hkv * hs, B, T, H, Hkv, hs}, in, dout, H * hs, att,
                 Grads{dq, dk, dv}, bf16, h, s);
}

}  // namespace zf::kernels::cuda
