// Device discovery, memory pools and the shared helpers of common.cuh.
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

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear "no driver" / "no device"
    return 0;
  }
  return n;
}

Status configure_memory_pools() {
  const int n = device_count();
  for (int d = 0; d < n; ++d) {
    cudaMemPool_t pool;
    if (Status e = detail::check(cudaDeviceGetDefaultMemPool(&pool, d))) return e;
    uint64_t keep = UINT64_MAX;
    if (Status e = detail::check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep))) return e;
  }
  return nullptr;
}

}  // namespace zf::kernels::cuda
