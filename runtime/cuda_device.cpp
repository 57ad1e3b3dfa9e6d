#include "runtime/cuda_device.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace zf {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear "no driver" / "no device"
    return 0;
  }
  return n;
}

double cuda_total_memory(int d) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
    cudaGetLastError();
    return -1.0;
  }
  return (double)p.totalGlobalMem;
}

const char* cuda_keep_memory_pools() {
  const int n = cuda_device_count();
  for (int d = 0; d < n; ++d) {
    cudaMemPool_t pool;
    if (cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, d); e != cudaSuccess) return cudaGetErrorString(e);
    uint64_t keep = UINT64_MAX;
    if (cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep); e != cudaSuccess)
      return cudaGetErrorString(e);
  }
  return nullptr;
}

}  // namespace zf
