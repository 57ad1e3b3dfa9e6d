// Naive bfloat16 rounding for the tests (kernels/bf16.hpp is what the engine uses).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace zf::ref {

// x rounded to bfloat16 (8 exponent bits, 7 mantissa bits) by comparing distances: of the two bf16
// neighbours of x (its fp32 bits truncated to the upper 16, and the next bf16 away from zero)
// the nearer wins, the one with an even last mantissa bit on a tie; beyond the largest finite bf16
// the upper neighbour is infinity, at distance as if it were 2^128 (IEEE overflow). NaN stays NaN.
inline float naive_bf16(float x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return x;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float a, b;
  std::memcpy(&a, &lo, 4);
  std::memcpy(&b, &hi, 4);
  const double bd = std::isinf(b) ? std::copysign(std::ldexp(1.0, 128), (double)x) : (double)b;
  const double da = std::fabs((double)x - (double)a), db = std::fabs(bd - (double)x);
  if (da < db) return a;
  if (db < da) return b;
  return (lo & 0x10000u) ? b : a;
}

}  // namespace zf::ref
