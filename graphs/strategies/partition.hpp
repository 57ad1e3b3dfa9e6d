// ZeRO stage 1 and 2 partition bounds (docs/data-parallel.md, "Partition"): the partitioned
// parameters' elements, concatenated in model order, cut into R contiguous shares of about N / R
// elements each. A cut falls inside one parameter, on a multiple of kPartitionAlign elements from
// its start (or on its end), so every rank's host tiles start SIMD-aligned, as stage 0's do, and
// a rank holds within kPartitionSlack elements of N / R whatever the tile size.
#pragma once
#include <cstddef>
#include <vector>

namespace zf {

inline constexpr size_t kPartitionAlign = 16;
// |a rank's elements - N / R| <= this: each of its two cuts is within half an alignment step and
// half an element (the rounding of r x N / R) of its ideal position
inline constexpr size_t kPartitionSlack = kPartitionAlign + 1;

// sizes: the partitioned parameters' element counts, in model order; ranks >= 1. Returns one
// vector per parameter: ranks + 1 offsets 0 = b[0] <= b[1] <= ... <= b[ranks] = its size, rank r
// owning elements [b[r], b[r+1]) of it. The global cut of rank r is round(r x N / R) moved to the
// nearest multiple of kPartitionAlign within its parameter, or to the parameter's end if nearer.
std::vector<std::vector<size_t>> partition_bounds(const std::vector<size_t>& sizes, size_t ranks);

// Elements of every parameter that rank r owns under `bounds` (partition_bounds' result).
size_t partition_share(const std::vector<std::vector<size_t>>& bounds, size_t r);

}  // namespace zf
