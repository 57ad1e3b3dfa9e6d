// Deterministic random numbers from a seed (splitmix64), identical on every platform and
// standard library: parameter init, shuffling, synthetic test data.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace zf {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (double)(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  float uniform(float lo, float hi) { return lo + (hi - lo) * (float)uniform(); }
  double normal() {  // Box-Muller
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }  // bias < n/2^64: irrelevant here

 private:
  uint64_t s_;
};

// Fisher-Yates permutation of [0, n).
inline std::vector<int32_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = (int32_t)i;
  Rng r(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[r.below((uint64_t)i + 1)]);
  return p;
}

}  // namespace zf
