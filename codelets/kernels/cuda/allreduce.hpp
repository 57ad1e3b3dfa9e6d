// The GPU side of the data-parallel gradient and importance all-reduce (docs/data-parallel.md):
// NCCL SUM in place on the caller's stream, then x *= scale. Queued, never synchronizing. Kept
// out of kernels.hpp so that only the all-reduce codelet sees <nccl.h>.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>

#include "codelets/kernels/cuda/kernels.hpp"

namespace zf::kernels::cuda {

// NCCL is loaded at run time (dlopen of libnccl.so.2 on first use), not linked: only a
// data-parallel run on GPUs needs it, and the GPU machines' own CUDA installations supply it
// (the CUDA toolkit's lib/ or pip's nvidia-nccl wheels), as they supply cuBLAS. null and *error
// set when it cannot be loaded.
struct NcclApi {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  const char* (*get_error_string)(ncclResult_t);
};
const NcclApi* nccl_api(const char** error);

// x (n) <- scale * sum over the communicator's ranks of x; every rank must call it with the same n
// in the same order (NCCL's rule, and the comm token's purpose in codelets/allreduce.cpp).
Status allreduce_scale(float* x, size_t n, float scale, ncclComm_t comm, cudaStream_t s);

}  // namespace zf::kernels::cuda
