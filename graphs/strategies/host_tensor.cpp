#include "graphs/strategies/host_tensor.hpp"

#include <algorithm>

namespace zf {

HostTensor::HostTensor(const std::string& name, size_t numel_, int64_t tile_elems, size_t elem_size, Half half,
                       const std::vector<size_t>* bounds_, const Comm* comm_)
    : numel(numel_), bounds(bounds_), comm(comm_) {
  const size_t tile = (size_t)tile_elems;
  size_t lo = 0, hi = numel;
  if (bounds) {  // this rank's segment (tile-aligned: Strategy::plan_partition)
    lo = (*bounds)[(size_t)comm->rank()];
    hi = (*bounds)[(size_t)comm->rank() + 1];
  }
  for (size_t off = 0, i = 0; off < numel; off += tile, ++i) {
    if (off < lo || off >= hi) continue;
    const size_t n = std::min(tile, numel - off);
    tiles.push_back(Tensor::home({(int64_t)n}, name + "[" + std::to_string(i) + "]", elem_size));
    tiles.back().set_half(half);
    slices.push_back({off, n});
  }
}

size_t HostTensor::bytes() const {
  size_t b = 0;
  for (const Tensor& t : tiles) b += t.bytes();
  return b;
}

}  // namespace zf
