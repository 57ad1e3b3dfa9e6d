// The gradients' collectives on a 2-byte wire (DeepSpeed's communication_data_type bf16 or fp16;
// docs/data-parallel.md, "The gradients' wire"), on host memory (CPU workers; the CUDA twins are
// codelets/kernels/cuda/allreduce.cu's *_wire, with the same arithmetic):
// - every rank rounds its fp32 values to the wire's format and sends each segment to its owner
//   (Comm::alltoall_segments: (R-1)/R of 2 bytes a value leave each rank);
// - the owner adds the R copies of each element in fp32, in rank order 0, 1, ..., R-1, multiplies
//   the sum by `scale` and rounds it once to the wire's format.
// An element's result depends on the ranks' values and their order only, never on where the
// segments are cut, so stages 0-3 (all-reduce, reduce-scatter, stage 3's shards) give the same
// bits at any R. The results are fp32 words holding wire-format values.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/fp16.hpp"
#include "runtime/comm.hpp"

namespace zf::wire {

ZF_BF16_HD inline uint16_t pack(bool fp16, float x) {
  return fp16 ? kernels::fp16::from_float(x) : kernels::bf16::from_float(x);
}
ZF_BF16_HD inline float unpack(bool fp16, uint16_t h) {
  return fp16 ? kernels::fp16::to_float(h) : kernels::bf16::to_float(h);
}
// element i of a segment of n from the R ranks' copies (rank q's at q x n), summed as above
ZF_BF16_HD inline float fold(bool fp16, const uint16_t* copies, size_t n, int R, size_t i, float scale) {
  float s = unpack(fp16, copies[i]);  // rank 0's (a sum of -0s stays -0, as one rank's value)
  for (int q = 1; q < R; ++q) s += unpack(fp16, copies[(size_t)q * n + i]);
  return unpack(fp16, pack(fp16, s * scale));
}

// x[bounds[rank]..bounds[rank+1]) <- the owner's sums above; the other segments keep this rank's
// values. Returns the Comm's error code (0: success).
int reduce_scatter(const Comm& comm, float* x, const std::vector<size_t>& bounds, Wire w, float scale);
// x (n) <- the same sums on every rank: the reduce-scatter above over an even cut of x, then the
// owners' 2-byte results all-gathered (Comm::allgather of uint16).
int allreduce(const Comm& comm, float* x, size_t n, Wire w, float scale);
// the even cut allreduce uses: ranks + 1 offsets, rank r owning [n r / R, n (r+1) / R)
inline std::vector<size_t> even_bounds(size_t n, int ranks) {
  std::vector<size_t> b((size_t)ranks + 1);
  for (size_t r = 0; r <= (size_t)ranks; ++r) b[r] = n * r / (size_t)ranks;
  return b;
}

}  // namespace zf::wire
