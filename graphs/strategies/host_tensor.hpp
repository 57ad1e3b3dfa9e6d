// The host side of an offloaded tensor: host-resident tiles mirroring a device tensor, this rank's
// share of them under ZeRO stages 1 and 2.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codelets/codelets.hpp"
#include "runtime/comm.hpp"
#include "runtime/runtime.hpp"

namespace zf {

// A host-resident copy of a device tensor, split into SIMD-aligned tiles so host work spreads
// over the host workers. tiles[i] mirrors device elements slices[i]. elem_size 2: bf16 or fp16
// tiles (`half`), the form in which values cross with precision "bf16" or "fp16" (insert_copy
// converts).
//
// ZeRO stage 1 and 2 (docs/data-parallel.md): a partitioned HostTensor holds only this rank's
// segment [bounds[rank], bounds[rank + 1]) of the tensor's `numel` elements: stage 0's tiles cut
// to the segment (a tile the segment's ends fall inside is cut there, the piece keeping the
// tile's name; tiles and slices list them, slices giving their offsets in the whole tensor); the
// other ranks hold the rest. Checkpoints gather the segments on rank 0 (StateWriter) and every
// rank reads its own back (StateReader), so the files are those of stage 0.
struct HostTensor {
  std::vector<Tensor> tiles;
  std::vector<Slice> slices;
  size_t numel = 0;                             // of the whole tensor
  const std::vector<size_t>* bounds = nullptr;  // partitioned: ranks + 1 offsets (the strategy's)
  const Comm* comm = nullptr;                   // partitioned: the ranks
  HostTensor() = default;
  HostTensor(const std::string& name, size_t numel, int64_t tile_elems, size_t elem_size = 4, Half half = Half::Bf16,
             const std::vector<size_t>* bounds = nullptr, const Comm* comm = nullptr);
  size_t bytes() const;  // of the tiles held here
};

}  // namespace zf
