// The CUDA devices the runtime drives (built with ZF_ENABLE_CUDA only): discovery and the
// stream-ordered memory pools the CUDA kernels' scratch comes from.
#pragma once

namespace zf {

// CUDA devices seen (0 when there is no driver or no device: never an error).
int cuda_device_count();
// Device d's total memory in bytes (cudaDeviceProp::totalGlobalMem; -1 on an error).
double cuda_total_memory(int d);
// Keeps freed scratch in every device's default pool (no trim at synchronizations). Call once.
// nullptr, or the CUDA error's text.
const char* cuda_keep_memory_pools();

}  // namespace zf
