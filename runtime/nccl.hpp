// NCCL, the collectives of data-parallel runs on GPUs (built with ZF_ENABLE_CUDA and nccl.h only).
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

namespace zf {

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
  // ZeRO stage 1 and 2: uneven segments (graphs/strategies/partition.hpp), so grouped rooted collectives
  ncclResult_t (*reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)();
  ncclResult_t (*group_end)();
  // the gradients' 2-byte wire (codelets/wire.hpp): each segment to its owner
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
};
const NcclApi* nccl_api(const char** error);

}  // namespace zf
