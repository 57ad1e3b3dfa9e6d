// Causal multi-head self-attention on the GPU, the CPU kernel's algorithm (cpu/attention.cpp):
// for each head h, the four products are cuBLAS strided-batched SGEMMs over the batch on strided
// views of qkv (B, T, 3C) = [q | k | v]; the causal softmax and its backward are one block per
// row. Row-major operands are passed to column-major cuBLAS transposed (see matmul.cu).
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

}  // namespace

Status attention_fwd(const float* qkv, float* out, float* att, int B, int T, int C, int NH, cublasHandle_t h,
                     cudaStream_t s) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hs), one = 1.0f, zero = 0.0f;
  const long long sQKV = (long long)T * C3, sAtt = (long long)NH * T * T, sOut = (long long)T * C;
  if (Status e = check(cublasSetStream(h, s))) return e;
  for (int hd = 0; hd < NH; ++hd) {
    const float* q = qkv + hd * hs;
    const float* k = q + C;
    float* a = att + (size_t)hd * T * T;
    // S^T (T, T) col-major = op_T(k) q : S[i][j] = scale * q_i . k_j
    if (Status e = check(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &scale, k, C3, sQKV, q,
                                                   C3, sQKV, &zero, a, T, sAtt, B)))
      return e;
  }
  if (B > 0 && T > 0) causal_softmax_k<<<(unsigned)((size_t)B * NH * T), kRowThreads, 0, s>>>(att, T);
  if (Status e = launched()) return e;
  for (int hd = 0; hd < NH; ++hd) {
    const float* v = qkv + hd * hs + 2 * C;
    const float* a = att + (size_t)hd * T * T;
    float* o = out + hd * hs;
    // out^T (hs, T) = v^T (hs, T) att^T : out[i][d] = sum_j att[i][j] v[j][d]
    if (Status e = check(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &one, v, C3, sQKV, a, T,
                                                   sAtt, &zero, o, C, sOut, B)))
      return e;
  }
  return nullptr;
}

Status attention_bwd(const float* dout, const float* qkv, const float* att, float* dqkv, int B, int T, int C,
                     int NH, cublasHandle_t h, cudaStream_t s) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hs), one = 1.0f, zero = 0.0f;
  const long long sQKV = (long long)T * C3, sAtt = (long long)NH * T * T, sOut = (long long)T * C,
                  sDs = (long long)T * T;
  void* scratch = nullptr;  // ds (B, T, T) for one head
  if (Status e = scratch_alloc(&scratch, (size_t)B * T * T * sizeof(float), s)) return e;
  float* ds = (float*)scratch;
  Status st = check(cublasSetStream(h, s));
  for (int hd = 0; hd < NH && !st; ++hd) {
    const float* q = qkv + hd * hs;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* dq = dqkv + hd * hs;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* a = att + (size_t)hd * T * T;
    const float* dO = dout + hd * hs;
    // datt[i][j] = dO_i . v_j
    st = check(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &one, v, C3, sQKV, dO, C, sOut,
                                         &zero, ds, T, sDs, B));
    // dv[j][d] = sum_i att[i][j] dO[i][d]
    if (!st)
      st = check(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &one, dO, C, sOut, a, T, sAtt,
                                           &zero, dv, C3, sQKV, B));
    if (!st && B > 0 && T > 0) {
      causal_softmax_bwd_k<<<(unsigned)((size_t)B * T), kRowThreads, 0, s>>>(a, ds, T, (size_t)NH * T, T);
      st = launched();
    }
    // dq[i][d] = scale sum_j dS[i][j] k[j][d];  dk[j][d] = scale sum_i dS[i][j] q[i][d]
    if (!st)
      st = check(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &scale, k, C3, sQKV, ds, T, sDs,
                                           &zero, dq, C3, sQKV, B));
    if (!st)
      st = check(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &scale, q, C3, sQKV, ds, T, sDs,
                                           &zero, dk, C3, sQKV, B));
  }
  scratch_free(scratch, s);
  return st;
}

}  // namespace zf::kernels::cuda
