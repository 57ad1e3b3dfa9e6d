// The GPU side of the data-parallel gradient and importance all-reduce (docs/data-parallel.md):
// NCCL SUM in place on the caller's stream, then x *= scale. Queued, never synchronizing. Kept
// out of kernels.hpp so that only the all-reduce codelet sees <nccl.h>.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <vector>

#include "codelets/kernels/cuda/kernels.hpp"
#include "runtime/nccl.hpp"

namespace zf::kernels::cuda {

// x (n) <- scale * sum over the communicator's ranks of x; every rank must call it with the same n
// in the same order (NCCL's rule, and the comm token's purpose in codelets/allreduce.cpp).
Status allreduce_scale(float* x, size_t n, float scale, ncclComm_t comm, cudaStream_t s);

// ZenFlow at ZeRO stage 2 (codelets/allreduce.cpp, allreduce_columns): the k selected columns of
// x (rows, cols), stored (cols, rows) when in_out, <- their sum over the ranks: gathered into one
// rows x k scratch buffer, one ncclAllReduce, scattered back (each element is non-zero on its
// owner only after the reduce-scatter, so the sum is exact: bitwise the CPU path's MPI result).
// wire: -1 fp32 (one ncclAllReduce), 0 bf16, 1 fp16 (allreduce_wire below: exact too, the values
// being the owners' wire values)
Status allreduce_columns(float* x, int rows, int cols, const int32_t* sel, int k, bool in_out, int wire, int rank,
                         int ranks, ncclComm_t comm, cudaStream_t s);

// The gradients' collectives on a 2-byte wire (codelets/wire.hpp, bitwise its CPU arithmetic): x
// rounded to bf16 (fp16 when fp16) into scratch, each segment sent to its owner (ncclSend /
// ncclRecv, one group), the owner adding the R copies in rank order in fp32, times scale, rounded
// once. reduce_scatter_wire: this rank's segment <- that, the other segments <- 0 (as
// reduce_scatter_scale). allreduce_wire: every element <- that, over an even cut of x
// (wire::even_bounds), the owners' 2-byte results broadcast.
Status reduce_scatter_wire(float* x, const std::vector<size_t>& bounds, int rank, float scale, bool fp16,
                           ncclComm_t comm, cudaStream_t s);
Status allreduce_wire(float* x, size_t n, float scale, bool fp16, int rank, int ranks, ncclComm_t comm,
                      cudaStream_t s);

// ZeRO partitions (docs/data-parallel.md): bounds = ranks + 1 element offsets of x. The segments
// are cut on multiples of 16 elements, hence uneven, and ncclReduceScatter / ncclAllGather take equal counts: the
// reduce-scatter is one ncclReduce per segment (rooted at its owner, in place) and the all-gather
// one ncclBroadcast per segment (from its owner, in place), each set in one NCCL group.
// reduce_scatter_scale then scales this rank's own segment by `scale` and zeroes the others.
Status reduce_scatter_scale(float* x, const std::vector<size_t>& bounds, int rank, float scale, ncclComm_t comm,
                            cudaStream_t s);
Status allgather(float* x, const std::vector<size_t>& bounds, ncclComm_t comm, cudaStream_t s);
Status allgather_2byte(uint16_t* x, const std::vector<size_t>& bounds, ncclComm_t comm, cudaStream_t s);

// ZeRO stage 3 (codelets/shard.cpp): gather_shards copies this rank's shard (its segment's
// elements) into its segment of x, then all-gathers x as above; reduce_scatter_shard reduce-scatters
// x as reduce_scatter_scale does, then copies this rank's segment into shard (shard_n >= the
// segment's elements; the rest of the shard, a placeholder, <- 0).
Status gather_shards(const float* shard, float* x, const std::vector<size_t>& bounds, int rank, ncclComm_t comm,
                     cudaStream_t s);
// The same for a parameter stored in 2 bytes (bf16 or fp16 bits, moved as they are)
Status gather_shards_2byte(const uint16_t* shard, uint16_t* x, const std::vector<size_t>& bounds, int rank,
                           ncclComm_t comm, cudaStream_t s);
// wire: -1 fp32, 0 bf16, 1 fp16 (reduce_scatter_wire)
Status reduce_scatter_shard(float* x, float* shard, size_t shard_n, const std::vector<size_t>& bounds, int rank,
                            float scale, int wire, ncclComm_t comm, cudaStream_t s);

}  // namespace zf::kernels::cuda
