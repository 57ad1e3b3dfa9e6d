// The shared helpers of common.cuh.
#include "codelets/kernels/cuda/common.cuh"

#include <cstdint>

namespace zf::kernels::cuda {
namespace detail {

Status check(cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS ? nullptr : cublasGetStatusString(st);
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
