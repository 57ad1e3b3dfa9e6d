#include "graphs/strategies/partition.hpp"

namespace zf {

std::vector<std::vector<size_t>> partition_bounds(const std::vector<size_t>& sizes, size_t ranks) {
  unsigned __int128 total = 0;
  for (size_t n : sizes) total += n;
  std::vector<std::vector<size_t>> out;
  size_t start = 0;  // the parameter's first element in the concatenation
  for (size_t n : sizes) {
    std::vector<size_t> b(ranks + 1, n);
    b[0] = 0;
    for (size_t r = 1; r < ranks; ++r) {
      const size_t cut = (size_t)((2 * (unsigned __int128)r * total + ranks) / (2 * ranks));  // round(r N / R)
      if (cut <= start) {
        b[r] = 0;
      } else if (cut < start + n) {
        const size_t local = cut - start, lo = local / kPartitionAlign * kPartitionAlign;
        const size_t hi = lo + kPartitionAlign < n ? lo + kPartitionAlign : n;
        b[r] = local - lo <= hi - local ? lo : hi;  // the nearer (ties: the lower)
      }
    }
    out.push_back(std::move(b));
    start += n;
  }
  return out;
}

size_t partition_share(const std::vector<std::vector<size_t>>& bounds, size_t r) {
  size_t s = 0;
  for (const auto& b : bounds) s += b[r + 1] - b[r];
  return s;
}

}  // namespace zf
