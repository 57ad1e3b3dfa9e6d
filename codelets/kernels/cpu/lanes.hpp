// Sums in a fixed order that GCC vectorizes without -ffast-math: element i goes to lane i % 8,
// the lanes are added pairwise at the end. The order depends on n only (never on alignment or on
// who calls), so the result is deterministic; with 8 partial sums it is also a little more
// accurate than one running sum. Double lanes for statistics that the kernels keep in double.
#pragma once

#include <cstddef>

namespace zf::kernels::cpu {

template <class Acc, class F>
inline Acc lane_sum(size_t n, F&& term) {  // sum over i < n of term(i), accumulated in Acc
  Acc a[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += (Acc)term(i + j);
  for (int j = 0; i + j < n; ++j) a[j] += (Acc)term(i + j);
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// max over i < n (n >= 1) of x[i] in lanes (exact, so the order does not change the value; a NaN
// is kept only where it lands in a lane's first element, like a running max from x[0]).
inline float lane_max(const float* x, size_t n) {
  float a[8];
  for (int j = 0; j < 8; ++j) a[j] = x[0];
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] = x[i + j] > a[j] ? x[i + j] : a[j];
  for (int j = 0; i + j < n; ++j) a[j] = x[i + j] > a[j] ? x[i + j] : a[j];
  float m = a[0];
  for (int j = 1; j < 8; ++j) m = a[j] > m ? a[j] : m;
  return m;
}

}  // namespace zf::kernels::cpu
