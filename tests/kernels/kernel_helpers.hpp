// Helpers shared by the CPU kernel tests (zf_tests: no StarPU, no engine): random inputs, the
// elementwise tolerance |x - ref| <= atol + rtol*|ref| (llm.c), Chameleon's norm-scaled residual,
// bitwise comparison, and the central-difference gradient check of the double references.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace zf::test {

using Vec = std::vector<double>;

constexpr double kAtol = 1e-6;         // elementwise absolute tolerance (default)
constexpr double kRtol = 1e-5;         // elementwise relative tolerance (default)
constexpr double kResidualMax = 10.0;  // norm-scaled residual bound (Chameleon)
constexpr double kFeps = FLT_EPSILON;

inline bool quick() { return std::getenv("ZF_QUICK") != nullptr; }

// Small sizes with SIMD tails (AVX2: 8 floats, AVX-512: 16).
inline const std::vector<size_t> kSmallSizes = {1, 22, 55, 64, 1000};

// Elementwise sizes: the small ones, plus 2^20 unless ZF_QUICK is set.
inline std::vector<size_t> elementwise_sizes() {
  std::vector<size_t> s = kSmallSizes;
  if (!quick()) s.push_back(size_t{1} << 20);
  return s;
}

inline std::vector<float> uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<float> uniform_f(size_t n, float lo, float hi, uint32_t seed) { return uniform(n, lo, hi, seed); }

// ||got - want|| / ||want|| (L2, in double)
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    d += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
    n += (double)want[i] * want[i];
  }
  return got.size() == want.size() ? std::sqrt(d / std::max(n, 1e-300)) : INFINITY;
}
inline double max_abs(const float* a, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs((double)a[i]));
  return m;
}

inline double max_abs(const std::vector<double>& a) {
  double m = 0.0;
  for (double x : a) m = std::max(m, std::fabs(x));
  return m;
}

// |x - ref| <= atol + rtol*|ref| everywhere; on failure names the worst element.
inline ::testing::AssertionResult elementwise_close(const float* x, const double* r, size_t n,
                                                    double atol = kAtol, double rtol = kRtol) {
  size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double err = std::fabs((double)x[i] - r[i]);
    double tol = atol + rtol * std::fabs(r[i]);
    double ratio = err / tol;
    if (!(err <= tol)) ++bad;  // NaN counts as bad
    if (!(ratio <= worst_ratio)) { worst_ratio = ratio; worst = i; }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << n << " elements out of tolerance; worst [" << worst << "] got "
         << x[worst] << " want " << r[worst] << " (err/tol " << worst_ratio << ")";
}

// max|x - ref| / (scale * eps) < 10, where scale bounds the exact result's rounding
// (max|A| * max|B| * K for a product with K terms).
inline ::testing::AssertionResult residual_ok(const float* x, const double* r, size_t n, double scale) {
  double diff = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = std::fabs((double)x[i] - r[i]);
    if (!(d <= diff)) { diff = d; at = i; }
  }
  if (scale == 0.0) scale = 1.0;  // all-zero operands: the result must be exactly zero
  double res = diff / (scale * kFeps);
  if (res < kResidualMax) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "norm-scaled residual " << res << " >= " << kResidualMax
                                       << " (max diff " << diff << " at [" << at << "], got "
                                       << x[at] << " want " << r[at] << ")";
}

inline bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  // (an empty vector's data() may be null, which memcmp must not get)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) { return bits_equal(a, b); }

// ---- gradient checks: central differences dL/dx ~ (L(x+h) - L(x-h)) / 2h, in double
constexpr double kH = 1e-6;         // finite-difference step
constexpr double kGradRtol = 1e-6;  // analytic vs numeric, relative
// Absolute floor for gradients near zero: L(x+h) and L(x-h) each carry a rounding error of a
// few DBL_EPSILON * sum|terms of L|, divided by 2h; kFdRounding * eps * |L|_1 / h bounds it.
constexpr double kFdRounding = 64.0;

// A scalar loss that also reports sum|terms| (the magnitude its rounding error scales with).
struct LossValue {
  double value, abs_sum;
};
using LossFn = std::function<LossValue()>;

// Compare the analytic gradient `grad` of `loss` with respect to `x` against central
// differences, element by element. `loss` reads x by reference.
inline ::testing::AssertionResult gradcheck(const LossFn& loss, Vec& x, const Vec& grad, const char* what) {
  size_t bad = 0, worst = 0;
  double worst_ratio = 0.0, worst_num = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    const double xp = x0 + kH, xm = x0 - kH;
    x[i] = xp;
    LossValue lp = loss();
    x[i] = xm;
    LossValue lm = loss();
    x[i] = x0;
    const double num = (lp.value - lm.value) / (xp - xm);  // the step actually taken
    const double err = std::fabs(num - grad[i]);
    const double floor = kFdRounding * DBL_EPSILON * std::max(lp.abs_sum, lm.abs_sum) / kH;
    const double tol = kGradRtol * std::max(std::fabs(num), std::fabs(grad[i])) + floor;
    const double ratio = err / tol;
    if (!(err <= tol)) ++bad;
    if (!(ratio <= worst_ratio)) { worst_ratio = ratio; worst = i; worst_num = num; }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << x.size() << " gradients off; worst [" << worst
         << "] analytic " << grad[worst] << " numeric " << worst_num << " (err/tol "
         << worst_ratio << ")";
}

// L = sum(Y * R) and sum|Y * R|.
inline LossValue dot_loss(const Vec& y, const Vec& r) {
  LossValue l{0.0, 0.0};
  for (size_t i = 0; i < y.size(); ++i) {
    l.value += y[i] * r[i];
    l.abs_sum += std::fabs(y[i] * r[i]);
  }
  return l;
}

}  // namespace zf::test
