// Matmuls through cuBLAS. Our tensors are row-major; cuBLAS is column-major, so each product is
// computed transposed (a row-major (r, c) matrix is a column-major (c, r) one):  y^T = w^T-op x^T,
// dw^T = x^T dy,  dx^T = w^T-op dy^T. in_out: the weight (and dw) is stored (K, N) row-major, a
// column-major (N, K) matrix (as kernels::cpu::matmul_*). fp32: cublasSgemm (the handle's default
// math mode). bf16 (precision bf16, as the CPU kernels' bf16 flag): both operands are rounded to
// bf16 (kernels/bf16.hpp, pack_bf16) into stream-ordered scratch and multiplied by cublasGemmEx
// with fp32 sums into the fp32 output (CUBLAS_COMPUTE_32F: tensor cores).
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
using namespace detail;

namespace {
// C (m, n) col-major = op(A) op(B) + beta C, A holding na and B nb elements
Status gemm(bool bf16, cublasHandle_t h, cudaStream_t s, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
            int k, const float* A, int lda, size_t na, const float* B, int ldb, size_t nb, float beta, float* C,
            int ldc) {
  const float one = 1.0f;
  if (Status e = check(cublasSetStream(h, s))) return e;
  if (!bf16) return check(cublasSgemm(h, ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, C, ldc));
  void* scratch = nullptr;  // (na + nb) bf16: A's copy, then B's
  if (Status e = scratch_alloc(&scratch, (na + nb) * sizeof(uint16_t), s)) return e;
  uint16_t* a = static_cast<uint16_t*>(scratch);
  uint16_t* b = a + na;
  Status st = pack_bf16(A, a, na, s);
  if (!st) st = pack_bf16(B, b, nb, s);
  if (!st) st = gemm_bf16(h, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, C, ldc);
  scratch_free(scratch, s);
  return st;
}
}  // namespace

// y (B, N) = x (B, K) w (N, K)^T  <=>  y^T (N, B) = op_T(w: col-major (K, N)) x^T (K, B)
Status matmul_fwd(const float* x, const float* w, float* y, int B, int K, int N, cublasHandle_t h,
                  cudaStream_t s, bool w_in_out, bool bf16) {
  const size_t nx = (size_t)B * K, nw = (size_t)N * K;
  if (w_in_out)  // y^T (N, B) = w (col-major (N, K)) x^T (K, B)
    return gemm(bf16, h, s, CUBLAS_OP_N, CUBLAS_OP_N, N, B, K, w, N, nw, x, K, nx, 0.0f, y, N);
  return gemm(bf16, h, s, CUBLAS_OP_T, CUBLAS_OP_N, N, B, K, w, K, nw, x, K, nx, 0.0f, y, N);
}

// dw (N, K) = dy (B, N)^T x (B, K)  <=>  dw^T (K, N) = x^T (K, B) op_T(dy^T: col-major (N, B))
Status matmul_bwd_weight(const float* dy, const float* x, float* dw, int B, int K, int N, bool accumulate,
                         cublasHandle_t h, cudaStream_t s, bool dw_in_out, bool bf16) {
  const float beta = accumulate ? 1.0f : 0.0f;
  const size_t ndy = (size_t)B * N, nx = (size_t)B * K;
  if (dw_in_out)  // dw (col-major (N, K)) = dy^T (N, B) op_T(x^T: col-major (K, B))
    return gemm(bf16, h, s, CUBLAS_OP_N, CUBLAS_OP_T, N, K, B, dy, N, ndy, x, K, nx, beta, dw, N);
  return gemm(bf16, h, s, CUBLAS_OP_N, CUBLAS_OP_T, K, N, B, x, K, nx, dy, N, ndy, beta, dw, K);
}

// dx (B, K) = dy (B, N) w (N, K)  <=>  dx^T (K, B) = w^T (K, N) dy^T (N, B)
Status matmul_bwd_data(const float* dy, const float* w, float* dx, int B, int K, int N, cublasHandle_t h,
                       cudaStream_t s, bool w_in_out, bool bf16) {
  const size_t ndy = (size_t)B * N, nw = (size_t)N * K;
  if (w_in_out)  // dx^T (K, B) = op_T(w: col-major (N, K)) dy^T (N, B)
    return gemm(bf16, h, s, CUBLAS_OP_T, CUBLAS_OP_N, K, B, N, w, N, nw, dy, N, ndy, 0.0f, dx, K);
  return gemm(bf16, h, s, CUBLAS_OP_N, CUBLAS_OP_N, K, B, N, w, K, nw, dy, N, ndy, 0.0f, dx, K);
}

}  // namespace zf::kernels::cuda
