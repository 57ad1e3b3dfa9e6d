// Matmuls through cuBLAS (fp32, the handle's default math mode). Our tensors are row-major; cuBLAS
// is column-major, so each product is computed transposed (a row-major (r, c) matrix is a
// column-major (c, r) one):  y^T = w^T-op x^T,  dw^T = x^T dy,  dx^T = w^T-op dy^T. in_out: the weight
// (and dw) is stored (K, N) row-major, a column-major (N, K) matrix (as kernels::cpu::matmul_*).
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
using namespace detail;

// y (B, N) = x (B, K) w (N, K)^T  <=>  y^T (N, B) = op_T(w: col-major (K, N)) x^T (K, B)
Status matmul_fwd(const float* x, const float* w, float* y, int B, int K, int N, cublasHandle_t h,
                  cudaStream_t s, bool w_in_out) {
  const float one = 1.0f, zero = 0.0f;
  if (Status e = check(cublasSetStream(h, s))) return e;
  if (w_in_out)  // y^T (N, B) = w (col-major (N, K)) x^T (K, B)
    return check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, B, K, &one, w, N, x, K, &zero, y, N));
  return check(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, B, K, &one, w, K, x, K, &zero, y, N));
}

// dw (N, K) = dy (B, N)^T x (B, K)  <=>  dw^T (K, N) = x^T (K, B) op_T(dy^T: col-major (N, B))
Status matmul_bwd_weight(const float* dy, const float* x, float* dw, int B, int K, int N, bool accumulate,
                         cublasHandle_t h, cudaStream_t s, bool dw_in_out) {
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  if (Status e = check(cublasSetStream(h, s))) return e;
  if (dw_in_out)  // dw (col-major (N, K)) = dy^T (N, B) op_T(x^T: col-major (K, B))
    return check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, N, K, B, &one, dy, N, x, K, &beta, dw, N));
  return check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, K, N, B, &one, x, K, dy, N, &beta, dw, K));
}

// dx (B, K) = dy (B, N) w (N, K)  <=>  dx^T (K, B) = w^T (K, N) dy^T (N, B)
Status matmul_bwd_data(const float* dy, const float* w, float* dx, int B, int K, int N, cublasHandle_t h,
                       cudaStream_t s, bool w_in_out) {
  const float one = 1.0f, zero = 0.0f;
  if (Status e = check(cublasSetStream(h, s))) return e;
  if (w_in_out)  // dx^T (K, B) = op_T(w: col-major (N, K)) dy^T (N, B)
    return check(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, K, B, N, &one, w, N, dy, N, &zero, dx, K));
  return check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, K, B, N, &one, w, K, dy, N, &zero, dx, K));
}

}  // namespace zf::kernels::cuda
