// The GPU side of the data-parallel gradient and importance all-reduce (docs/data-parallel.md):
// NCCL SUM in place on the caller's stream, then x *= scale. Queued, never synchronizing. Kept
// out of kernels.hpp so that only the all-reduce codelet sees <nccl.h>.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <vector>

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
  // ZeRO stage 1 and 2: uneven segments (whole host tiles), so grouped rooted collectives
  ncclResult_t (*reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)();
  ncclResult_t (*group_end)();
};
const NcclApi* nccl_api(const char** error);

// x (n) <- scale * sum over the communicator's ranks of x; every rank must call it with the same n
// in the same order (NCCL's rule, and the comm token's purpose in codelets/allreduce.cpp).
Status allreduce_scale(float* x, size_t n, float scale, ncclComm_t comm, cudaStream_t s);

// ZeRO partitions (docs/data-parallel.md): bounds = ranks + 1 element offsets of x. The segments
// are whole host tiles, hence uneven, and ncclReduceScatter / ncclAllGather take equal counts: the
// reduce-scatter is one ncclReduce per segment (rooted at its owner, in place) and the all-gather
// one ncclBroadcast per segment (from its owner, in place), each set in one NCCL group.
// reduce_scatter_scale then scales this rank's own segment by `scale` and zeroes the others.
Status reduce_scatter_scale(float* x, const std::vector<size_t>& bounds, int rank, float scale, ncclComm_t comm,
                            cudaStream_t s);
Status allgather(float* x, const std::vector<size_t>& bounds, ncclComm_t comm, cudaStream_t s);

}  // namespace zf::kernels::cuda
