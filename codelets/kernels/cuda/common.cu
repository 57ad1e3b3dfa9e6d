// The shared helpers of common.cuh.
#include "codelets/kernels/cuda/common.cuh"

#include <cstdint>

namespace zf::kernels::cuda {
namespace detail {

Status check(cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS ? nullptr : cublasGetStatusString(st);
}

Status gemm_bf16(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                 const uint16_t* A, int lda, const uint16_t* B, int ldb, float beta, float* C, int ldc) {
  return check(cublasGemmEx(h, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C,
                            CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

Status gemm_strided_bf16(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         float alpha, const uint16_t* A, int lda, long long sa, const uint16_t* B, int ldb,
                         long long sb, float beta, float* C, int ldc, long long sc, int batch) {
  return check(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, sa, B, CUDA_R_16BF, ldb,
                                          sb, &beta, C, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
}

__global__ void colsum_finish(const float* part, int nchunk, int C, float* out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= C) return;
  float acc = 0.0f;
  for (int ch = 0; ch < nchunk; ++ch) acc += part[(size_t)ch * C + j];
  out[j] = acc;
}

}  // namespace detail

}  // namespace zf::kernels::cuda
