#include "graphs/strategies/host_tensor.hpp"

#include <algorithm>

namespace zf {

HostTensor::HostTensor(const std::string& name, size_t numel_, int64_t tile_elems, size_t elem_size, Half half,
                       const std::vector<size_t>* bounds_, const Comm* comm_)
    : numel(numel_), bounds(bounds_), comm(comm_) {
  const size_t tile = (size_t)tile_elems;
  size_t lo = 0, hi = numel;
  if (bounds) {  // this rank's segment (SIMD-aligned: Strategy::plan_partition)
    lo = (*bounds)[(size_t)comm->rank()];
    hi = (*bounds)[(size_t)comm->rank() + 1];
  }
  // the tile grid of stage 0, cut at the segment's ends: tile i is elements [i tile, (i+1) tile)
  // of the whole tensor, or this segment's part of it
  for (size_t i = lo / tile; lo < hi && i * tile < hi; ++i) {
    const size_t a = std::max(lo, i * tile), z = std::min(hi, (i + 1) * tile);
    tiles.push_back(Tensor::home({(int64_t)(z - a)}, name + "[" + std::to_string(i) + "]", elem_size));
    tiles.back().set_half(half);
    slices.push_back({a, z - a});
  }
}

size_t HostTensor::bytes() const {
  size_t b = 0;
  for (const Tensor& t : tiles) b += t.bytes();
  return b;
}

}  // namespace zf
