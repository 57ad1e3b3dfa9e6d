// Causal multi-head self-attention on the GPU, the CPU kernel's algorithm (cpu/attention.cpp):
// for each head h, the four products are cuBLAS strided-batched SGEMMs over the batch on strided
// views of qkv (B, T, 3C) = [q | k | v] (GPT) or of q, k, v held apart with Hkv <= H KV heads
// (grouped-query attention: head h reads KV head h / (H / Hkv)); the causal softmax and its
// backward are one block per row. The backward visits the heads in order, the first of a KV head's
// group writing its dk and dv (beta 0) and the others adding to them (beta 1): a fixed order. Row-major operands are passed to column-major cuBLAS transposed (see matmul.cu).
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


// Row-major views as the CPU kernel's: q (B, T, ldq), k and v (B, T, ldkv), head offsets h*hs.
struct Views {
  const float *q, *k, *v;
  int ldq, ldkv;
  int B, T, H, Hkv, hs;
};

Status fwd(const Views& w, float* out, int ldo, float* att, cublasHandle_t h, cudaStream_t s) {
  const int T = w.T, B = w.B, hs = w.hs, G = w.H / w.Hkv;
  const float scale = 1.0f / std::sqrt((float)hs), one = 1.0f, zero = 0.0f;
  const long long sQ = (long long)T * w.ldq, sKV = (long long)T * w.ldkv, sAtt = (long long)w.H * T * T,
                  sOut = (long long)T * ldo;
  if (Status e = check(cublasSetStream(h, s))) return e;
  for (int hd = 0; hd < w.H; ++hd) {
    const float* q = w.q + hd * hs;
    const float* k = w.k + (hd / G) * hs;
    float* a = att + (size_t)hd * T * T;
    // S^T (T, T) col-major = op_T(k) q : S[i][j] = scale * q_i . k_j
    if (Status e = check(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &scale, k, w.ldkv, sKV,
                                                   q, w.ldq, sQ, &zero, a, T, sAtt, B)))
      return e;
  }
  if (B > 0 && T > 0) causal_softmax_k<<<(unsigned)((size_t)B * w.H * T), kRowThreads, 0, s>>>(att, T);
  if (Status e = launched()) return e;
  for (int hd = 0; hd < w.H; ++hd) {
    const float* v = w.v + (hd / G) * hs;
    const float* a = att + (size_t)hd * T * T;
    float* o = out + hd * hs;
    // out^T (hs, T) = v^T (hs, T) att^T : out[i][d] = sum_j att[i][j] v[j][d]
    if (Status e = check(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &one, v, w.ldkv, sKV, a,
                                                   T, sAtt, &zero, o, ldo, sOut, B)))
      return e;
  }
  return nullptr;
}

struct Grads {
  float *dq, *dk, *dv;  // strides ldq, ldkv, ldkv
};

// One head over the batch; ds (B, T, T) scratch. beta 0 writes dk and dv, 1 adds to them.
Status bwd_head(const Views& w, const float* dout, int ldo, const float* att, const Grads& g, float* ds, int hd,
                float beta, cublasHandle_t h, cudaStream_t s) {
  const int T = w.T, B = w.B, hs = w.hs, G = w.H / w.Hkv;
  const float scale = 1.0f / std::sqrt((float)hs), one = 1.0f, zero = 0.0f;
  const long long sQ = (long long)T * w.ldq, sKV = (long long)T * w.ldkv, sAtt = (long long)w.H * T * T,
                  sOut = (long long)T * ldo, sDs = (long long)T * T;
  const float* q = w.q + hd * hs;
  const float* k = w.k + (hd / G) * hs;
  const float* v = w.v + (hd / G) * hs;
  float* dq = g.dq + hd * hs;
  float* dk = g.dk + (hd / G) * hs;
  float* dv = g.dv + (hd / G) * hs;
  const float* a = att + (size_t)hd * T * T;
  const float* dO = dout + hd * hs;
  // datt[i][j] = dO_i . v_j
  Status st = check(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &one, v, w.ldkv, sKV, dO, ldo,
                                              sOut, &zero, ds, T, sDs, B));
  // dv[j][d] (+)= sum_i att[i][j] dO[i][d]
  if (!st)
    st = check(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &one, dO, ldo, sOut, a, T, sAtt,
                                         &beta, dv, w.ldkv, sKV, B));
  if (!st && B > 0 && T > 0) {
    causal_softmax_bwd_k<<<(unsigned)((size_t)B * T), kRowThreads, 0, s>>>(a, ds, T, (size_t)w.H * T, T);
    st = launched();
  }
  // dq[i][d] = scale sum_j dS[i][j] k[j][d];  dk[j][d] (+)= scale sum_i dS[i][j] q[i][d]
  if (!st)
    st = check(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &scale, k, w.ldkv, sKV, ds, T, sDs,
                                         &zero, dq, w.ldq, sQ, B));
  if (!st)
    st = check(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &scale, q, w.ldq, sQ, ds, T, sDs,
                                         &beta, dk, w.ldkv, sKV, B));
  return st;
}

Status bwd(const Views& w, const float* dout, int ldo, const float* att, const Grads& g, cublasHandle_t h,
           cudaStream_t s) {
  const int G = w.H / w.Hkv;
  void* scratch = nullptr;  // ds (B, T, T) for one head
  if (Status e = scratch_alloc(&scratch, (size_t)w.B * w.T * w.T * sizeof(float), s)) return e;
  Status st = check(cublasSetStream(h, s));
  for (int hd = 0; hd < w.H && !st; ++hd)
    st = bwd_head(w, dout, ldo, att, g, (float*)scratch, hd, hd % G == 0 ? 0.0f : 1.0f, h, s);
  scratch_free(scratch, s);
  return st;
}

}  // namespace

Status attention_fwd(const float* qkv, float* out, float* att, int B, int T, int C, int NH, cublasHandle_t h,
                     cudaStream_t s) {
  return fwd(Views{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, C / NH}, out, C, att, h, s);
}

Status attention_bwd(const float* dout, const float* qkv, const float* att, float* dqkv, int B, int T, int C,
                     int NH, cublasHandle_t h, cudaStream_t s) {
  return bwd(Views{qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, NH, NH, C / NH}, dout, C, att,
             Grads{dqkv, dqkv + C, dqkv + 2 * C}, h, s);
}

Status gqa_attention_fwd(const float* q, const float* k, const float* v, float* out, float* att, int B, int T, int H,
                         int Hkv, int hs, cublasHandle_t h, cudaStream_t s) {
  return fwd(Views{q, k, v, H * hs, Hkv * hs, B, T, H, Hkv, hs}, out, H * hs, att, h, s);
}

Status gqa_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* att,
                         float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int hs, cublasHandle_t h,
                         cudaStream_t s) {
  return bwd(Views{q, k, v, H * hs, Hkv * hs, B, T, H, Hkv, hs}, dout, H * hs, att, Grads{dq, dk, dv}, h, s);
}

}  // namespace zf::kernels::cuda
