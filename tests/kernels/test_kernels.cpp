// CPU kernels (codelets/kernels/cpu/, float) against the naive double reference
// (tests/reference/reference.hpp), on sizes with SIMD tails: 1, 22, 55, 64, 1000 and 2^20
// (elementwise, unless ZF_QUICK is set). Elementwise: |x - ref| <= atol + rtol*|ref| (llm.c);
// matmuls and reductions: max|C - Cref| / (max|A| max|B| K eps) < 10 (Chameleon's residual).
// AdamW also checks that splitting [0, n) into pieces is bitwise identical to one call, that the
// SIMD body and the scalar path agree bitwise, and that the fused accumulate+AdamW pass equals
// the three separate kernels bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/parallel.hpp"
#include "codelets/kernels/fp16.hpp"
#include "tests/reference/bf16_ref.hpp"
#include "tests/reference/fp16_ref.hpp"
#include "tests/reference/reference.hpp"

namespace {

namespace cpu = zf::kernels::cpu;
namespace ref = zf::ref;

constexpr double kAtol = 1e-6;         // elementwise absolute tolerance (default)
constexpr double kRtol = 1e-5;         // elementwise relative tolerance (default)
constexpr double kResidualMax = 10.0;  // norm-scaled residual bound (Chameleon)
constexpr double kFeps = FLT_EPSILON;

bool quick() { return std::getenv("ZF_QUICK") != nullptr; }

// Small sizes with SIMD tails (AVX2: 8 floats, AVX-512: 16).
const std::vector<size_t> kSmallSizes = {1, 22, 55, 64, 1000};

// Elementwise sizes: the small ones, plus 2^20 unless ZF_QUICK is set.
std::vector<size_t> elementwise_sizes() {
  std::vector<size_t> s = kSmallSizes;
  if (!quick()) s.push_back(size_t{1} << 20);
  return s;
}

std::vector<float> uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double max_abs(const float* a, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs((double)a[i]));
  return m;
}

double max_abs(const std::vector<double>& a) {
  double m = 0.0;
  for (double x : a) m = std::max(m, std::fabs(x));
  return m;
}

// |x - ref| <= atol + rtol*|ref| everywhere; on failure names the worst element.
::testing::AssertionResult elementwise_close(const float* x, const double* r, size_t n,
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
::testing::AssertionResult residual_ok(const float* x, const double* r, size_t n, double scale) {
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

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string shape_str(int B, int K, int N) {
  std::ostringstream s;
  s << "B=" << B << " K=" << K << " N=" << N;
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// Matmuls. Every size appears as each of B, K, N; the 1000^3 cube only without ZF_QUICK.
struct Shape { int B, K, N; };

std::vector<Shape> matmul_shapes() {
  std::vector<Shape> s;
  for (size_t n : kSmallSizes)
    if (n < 1000 || !quick()) s.push_back({(int)n, (int)n, (int)n});
  const std::vector<Shape> mixed = {
      {1, 22, 55},   {22, 55, 64},   {55, 64, 1000}, {64, 1000, 1},  {1000, 1, 22},
      {1, 1000, 64}, {1000, 64, 55}, {22, 1, 1000},  {55, 1000, 22}, {64, 22, 1},
      {1000, 55, 1}, {7, 17, 9},
      // batches of 1-4 rows take the SGEMV / row-by-row paths (codelets/kernels/cpu/matmul.cpp)
      {2, 55, 64}, {3, 1000, 22}, {4, 17, 1000}, {5, 64, 55}, {1, 784, 1000},
  };
  s.insert(s.end(), mixed.begin(), mixed.end());
  return s;
}

class Matmul : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { zf::blas_single_thread(); }
};

TEST_F(Matmul, FwdMatchesReference) {
  uint32_t seed = 1;
  for (const Shape& s : matmul_shapes()) {
    SCOPED_TRACE(shape_str(s.B, s.K, s.N));
    auto x = uniform((size_t)s.B * s.K, -1.f, 1.f, seed++);  // (B, K)
    auto w = uniform((size_t)s.N * s.K, -1.f, 1.f, seed++);  // (N, K)
    std::vector<float> y((size_t)s.B * s.N, NAN);            // (B, N)
    cpu::matmul_fwd(x.data(), w.data(), y.data(), s.B, s.K, s.N);
    auto xd = ref::to_double(x), wd = ref::to_double(w);
    std::vector<double> yr(y.size());
    ref::matmul_fwd(xd.data(), wd.data(), yr.data(), s.B, s.K, s.N);
    EXPECT_TRUE(residual_ok(y.data(), yr.data(), y.size(),
                            max_abs(x.data(), x.size()) * max_abs(w.data(), w.size()) * s.K));
  }
}

TEST_F(Matmul, BwdWeightMatchesReference) {
  uint32_t seed = 100;
  for (const Shape& s : matmul_shapes()) {
    for (bool acc : {false, true}) {
      SCOPED_TRACE(shape_str(s.B, s.K, s.N) + (acc ? " accumulate" : " overwrite"));
      auto dy = uniform((size_t)s.B * s.N, -1.f, 1.f, seed++);  // (B, N)
      auto x = uniform((size_t)s.B * s.K, -1.f, 1.f, seed++);   // (B, K)
      // (N, K): prior contents; must be ignored (NaN would leak) unless accumulating
      std::vector<float> dw = acc ? uniform((size_t)s.N * s.K, -1.f, 1.f, seed++)
                                  : std::vector<float>((size_t)s.N * s.K, NAN);
      std::vector<double> dwr = acc ? ref::to_double(dw) : std::vector<double>(dw.size(), 0.0);
      double c0 = acc ? max_abs(dw.data(), dw.size()) : 0.0;
      cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), s.B, s.K, s.N, acc);
      auto dyd = ref::to_double(dy), xd = ref::to_double(x);
      ref::matmul_bwd_weight(dyd.data(), xd.data(), dwr.data(), s.B, s.K, s.N, acc);
      // reduction over B; accumulation adds one rounding of |dw0|
      double scale = max_abs(dy.data(), dy.size()) * max_abs(x.data(), x.size()) * s.B + c0;
      EXPECT_TRUE(residual_ok(dw.data(), dwr.data(), dw.size(), scale));
    }
  }
}

TEST_F(Matmul, BwdDataMatchesReference) {
  uint32_t seed = 200;
  for (const Shape& s : matmul_shapes()) {
    SCOPED_TRACE(shape_str(s.B, s.K, s.N));
    auto dy = uniform((size_t)s.B * s.N, -1.f, 1.f, seed++);  // (B, N)
    auto w = uniform((size_t)s.N * s.K, -1.f, 1.f, seed++);   // (N, K)
    std::vector<float> dx((size_t)s.B * s.K, NAN);            // (B, K)
    cpu::matmul_bwd_data(dy.data(), w.data(), dx.data(), s.B, s.K, s.N);
    auto dyd = ref::to_double(dy), wd = ref::to_double(w);
    std::vector<double> dxr(dx.size());
    ref::matmul_bwd_data(dyd.data(), wd.data(), dxr.data(), s.B, s.K, s.N);
    // reduction over N
    EXPECT_TRUE(residual_ok(dx.data(), dxr.data(), dx.size(),
                            max_abs(dy.data(), dy.size()) * max_abs(w.data(), w.size()) * s.N));
  }
}

// ---------------------------------------------------------------------------------------------
// Bias.
TEST(BiasAdd, MatchesReference) {
  uint32_t seed = 300;
  for (size_t B : kSmallSizes)
    for (size_t N : kSmallSizes) {
      SCOPED_TRACE("B=" + std::to_string(B) + " N=" + std::to_string(N));
      auto y = uniform(B * N, -2.f, 2.f, seed++);  // (B, N)
      auto b = uniform(N, -2.f, 2.f, seed++);      // (N)
      auto yr = ref::to_double(y), br = ref::to_double(b);
      cpu::bias_add(y.data(), b.data(), (int)B, (int)N);
      ref::bias_add(yr.data(), br.data(), (int)B, (int)N);
      EXPECT_TRUE(elementwise_close(y.data(), yr.data(), y.size()));
    }
}

TEST(BiasGrad, MatchesReference) {
  uint32_t seed = 400;
  for (size_t B : kSmallSizes)
    for (size_t N : kSmallSizes) {
      SCOPED_TRACE("B=" + std::to_string(B) + " N=" + std::to_string(N));
      auto dy = uniform(B * N, -1.f, 1.f, seed++);  // (B, N)
      std::vector<float> db(N, NAN);                // (N): overwritten, not accumulated
      cpu::bias_grad(dy.data(), db.data(), (int)B, (int)N);
      auto dyd = ref::to_double(dy);
      std::vector<double> dbr(N);
      ref::bias_grad(dyd.data(), dbr.data(), (int)B, (int)N);
      EXPECT_TRUE(residual_ok(db.data(), dbr.data(), N, max_abs(dy.data(), dy.size()) * B));
    }
}

// ---------------------------------------------------------------------------------------------
// ReLU: a selection, so the result must be exact (including x = +-0, where dx = 0).
TEST(Relu, FwdBwdExact) {
  uint32_t seed = 500;
  for (size_t n : elementwise_sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = uniform(n, -3.f, 3.f, seed++);
    auto dy = uniform(n, -1.f, 1.f, seed++);
    for (size_t i = 0; i < n; i += 7) x[i] = (i % 2) ? 0.0f : -0.0f;
    std::vector<float> y(n, NAN), dx(n, NAN);
    cpu::relu_fwd(x.data(), y.data(), n);
    cpu::relu_bwd(x.data(), dy.data(), dx.data(), n);
    auto xd = ref::to_double(x), dyd = ref::to_double(dy);
    std::vector<double> yr(n), dxr(n);
    ref::relu_fwd(xd.data(), yr.data(), n);
    ref::relu_bwd(xd.data(), dyd.data(), dxr.data(), n);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += ((double)y[i] != yr[i]) + ((double)dx[i] != dxr[i]);
    EXPECT_EQ(bad, 0u);
  }
}

// ---------------------------------------------------------------------------------------------
// GELU (tanh form). Inputs in [-5, 5], the range of pre-activations in practice; the float
// kernel's error there is dominated by tanhf's rounding near +-1 (about 1e-7 absolute).
TEST(Gelu, FwdMatchesReference) {
  uint32_t seed = 600;
  for (size_t n : elementwise_sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = uniform(n, -5.f, 5.f, seed++);
    x[0] = 0.0f;
    std::vector<float> y(n, NAN);
    cpu::gelu_fwd(x.data(), y.data(), n);
    auto xd = ref::to_double(x);
    std::vector<double> yr(n);
    ref::gelu_fwd(xd.data(), yr.data(), n);
    EXPECT_TRUE(elementwise_close(y.data(), yr.data(), n));
  }
}

TEST(Gelu, BwdMatchesReference) {
  uint32_t seed = 700;
  for (size_t n : elementwise_sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = uniform(n, -5.f, 5.f, seed++);
    auto dy = uniform(n, -1.f, 1.f, seed++);
    x[0] = 0.0f;
    std::vector<float> dx(n, NAN);
    cpu::gelu_bwd(x.data(), dy.data(), dx.data(), n);
    auto xd = ref::to_double(x), dyd = ref::to_double(dy);
    std::vector<double> dxr(n);
    ref::gelu_bwd(xd.data(), dyd.data(), dxr.data(), n);
    EXPECT_TRUE(elementwise_close(dx.data(), dxr.data(), n));
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy. probs and the loss are reductions over a row: a row's rounding error
// is bounded by eps * (C + max_j |z_j - max z|) (sum of C exps, each exp(fl(z - max))), so the
// residuals are scaled by that, per row for probs and summed over rows for the loss.
struct XentCheck {
  double loss, loss_ref;
  int64_t correct, correct_ref;
};

XentCheck check_softmax_xent(const std::vector<float>& z, const std::vector<int32_t>& labels,
                             int B, int C) {
  std::vector<float> p((size_t)B * C, NAN);  // (B, C)
  int64_t correct = -1, correct_ref = -1;
  double loss = cpu::softmax_xent_fwd(z.data(), labels.data(), p.data(), B, C, &correct);
  auto zd = ref::to_double(z);
  std::vector<double> pr(p.size());
  double loss_ref = ref::softmax_xent_fwd(zd.data(), labels.data(), pr.data(), B, C, &correct_ref);

  double loss_scale = 0.0;
  for (int i = 0; i < B; ++i) {
    const float* zi = z.data() + (size_t)i * C;
    double mx = -INFINITY, mn = INFINITY;
    for (int j = 0; j < C; ++j) mx = std::max(mx, (double)zi[j]), mn = std::min(mn, (double)zi[j]);
    double row_scale = C + (mx - mn);
    loss_scale += row_scale;
    SCOPED_TRACE("probs row " + std::to_string(i));
    EXPECT_TRUE(residual_ok(p.data() + (size_t)i * C, pr.data() + (size_t)i * C, C,
                            max_abs(std::vector<double>(pr.begin() + (size_t)i * C,
                                                        pr.begin() + (size_t)(i + 1) * C)) *
                                row_scale));
  }
  EXPECT_TRUE(std::isfinite(loss));
  double loss_res = std::fabs(loss - loss_ref) / (loss_scale * kFeps);
  EXPECT_LT(loss_res, kResidualMax) << "loss " << loss << " want " << loss_ref;
  EXPECT_EQ(correct, correct_ref);
  return {loss, loss_ref, correct, correct_ref};
}

TEST(SoftmaxXent, FwdMatchesReference) {
  uint32_t seed = 800;
  for (size_t B : kSmallSizes)
    for (size_t C : kSmallSizes) {
      SCOPED_TRACE("B=" + std::to_string(B) + " C=" + std::to_string(C));
      auto z = uniform(B * C, -8.f, 8.f, seed++);  // (B, C)
      std::mt19937 rng(seed++);
      std::vector<int32_t> labels(B);  // (B)
      for (size_t i = 0; i < B; ++i) {
        labels[i] = (int32_t)(rng() % C);
        if (i % 2 == 0) {  // make half the rows correct, so the count is exercised
          size_t arg = 0;
          for (size_t j = 1; j < C; ++j)
            if (z[i * C + j] > z[i * C + arg]) arg = j;
          labels[i] = (int32_t)arg;
        }
      }
      auto r = check_softmax_xent(z, labels, (int)B, (int)C);
      EXPECT_GE(r.correct, (int64_t)((B + 1) / 2));
    }
}

TEST(SoftmaxXent, HugeLogitsUseMaxSubtraction) {
  const int B = 4, C = 5;
  std::vector<float> z = {
      1000.f,  -1000.f, 0.f,     3.f,     -2.f,     // exp(1000) overflows without max-subtraction
      -1000.f, -1000.f, -999.f,  -1001.f, -1000.f,  // everything underflows without it
      1000.f,  -1000.f, 1000.f,  999.f,   -1000.f,  // a tie at 1000: argmax is index 0
      88.f,    89.f,    -88.f,   0.f,     87.5f,
  };
  std::vector<int32_t> labels = {1, 2, 2, 1};  // row 0's label has probability ~exp(-2000)
  auto r = check_softmax_xent(z, labels, B, C);
  EXPECT_EQ(r.correct, 2);  // rows 1 (argmax 2) and 3 (argmax 1); row 2's tie picks index 0
  EXPECT_GT(r.loss, 2000.0);
}

TEST(SoftmaxXent, ArgmaxTieTakesLowestIndex) {
  const int B = 4, C = 4;
  std::vector<float> z = {
      3.f, 5.f, 5.f, 1.f,  // tie between 1 and 2
      3.f, 5.f, 5.f, 1.f,
      2.f, 2.f, 2.f, 2.f,  // all equal: argmax 0
      2.f, 2.f, 2.f, 2.f,
  };
  std::vector<int32_t> labels = {1, 2, 0, 3};  // correct, wrong, correct, wrong
  auto r = check_softmax_xent(z, labels, B, C);
  EXPECT_EQ(r.correct, 2);
}

TEST(SoftmaxXent, BwdMatchesReference) {
  uint32_t seed = 900;
  for (size_t B : kSmallSizes)
    for (size_t C : kSmallSizes) {
      SCOPED_TRACE("B=" + std::to_string(B) + " C=" + std::to_string(C));
      // probs: any row-stochastic float input; the kernel and the reference read the same one
      auto p = uniform(B * C, 0.f, 1.f, seed++);
      for (size_t i = 0; i < B; ++i) {
        float s = 0.f;
        for (size_t j = 0; j < C; ++j) s += p[i * C + j];
        for (size_t j = 0; j < C; ++j) p[i * C + j] /= s;
      }
      std::mt19937 rng(seed++);
      std::vector<int32_t> labels(B);
      for (auto& l : labels) l = (int32_t)(rng() % C);
      const float scale = 1.0f / (float)B;
      std::vector<float> d(B * C, NAN);  // (B, C)
      cpu::softmax_xent_bwd(p.data(), labels.data(), d.data(), (int)B, (int)C, scale);
      auto pd = ref::to_double(p);
      std::vector<double> dr(d.size());
      ref::softmax_xent_bwd(pd.data(), labels.data(), dr.data(), (int)B, (int)C, (double)scale);
      EXPECT_TRUE(elementwise_close(d.data(), dr.data(), d.size()));
    }
}

// ---------------------------------------------------------------------------------------------
// AdamW. 10 steps with fresh random gradients; parameters, m and v compared to the double
// reference (state kept in double there) within 1e-6 relative.
constexpr double kAdamRtol = 1e-6;
// Absolute floor, needed: values that end near zero after cancellation (m = b1 m + (1-b1) g
// changes sign often; so do some p) keep the absolute rounding error of the larger terms they
// came from (seen: ~1e-8 on m ~ 1e-7), which no relative tolerance covers.
constexpr double kAdamAtol = 1e-7;

ref::AdamParams to_ref(const cpu::AdamParams& hp) {
  ref::AdamParams r;
  r.lr = hp.lr;
  r.beta1 = hp.beta1;
  r.beta2 = hp.beta2;
  r.eps = hp.eps;
  r.weight_decay = hp.weight_decay;
  return r;
}

struct AdamRun { std::vector<float> p, m, v; std::vector<double> pr, mr, vr; double p_hist; };

// 10 steps of the kernel and the reference from the same p0 and gradients (m = v = 0 at start);
// p_hist is the largest |p| the reference saw.
AdamRun run_adam(size_t n, const cpu::AdamParams& hp, float grad_scale, uint32_t seed) {
  AdamRun r;
  r.p = uniform(n, -1.f, 1.f, seed++);
  r.m.assign(n, 0.f);
  r.v.assign(n, 0.f);
  r.pr = ref::to_double(r.p);
  r.mr.assign(n, 0.0);
  r.vr.assign(n, 0.0);
  r.p_hist = max_abs(r.pr);
  const ref::AdamParams hr = to_ref(hp);
  for (int64_t t = 1; t <= 10; ++t) {
    auto g = uniform(n, -1.f, 1.f, seed++);
    if (t == 3) std::fill(g.begin(), g.end(), 0.0f);  // a zero gradient: m and v only decay
    auto gd = ref::to_double(g);
    cpu::adam_step(r.p.data(), g.data(), r.m.data(), r.v.data(), n, hp, t, grad_scale);
    ref::adam_step(r.pr.data(), gd.data(), r.mr.data(), r.vr.data(), n, hr, t, grad_scale);
    r.p_hist = std::max(r.p_hist, max_abs(r.pr));
  }
  return r;
}

std::vector<size_t> adam_sizes() {
  std::vector<size_t> s = kSmallSizes;
  if (!quick()) s.push_back(size_t{1} << 20);
  return s;
}

TEST(AdamStep, MatchesReferenceOver10Steps) {
  // grad_scale 0.25 exercises the scaling (a power of two: exact in float and double)
  uint32_t seed = 1000;
  for (float grad_scale : {1.0f, 0.25f})
    for (size_t n : adam_sizes()) {
      SCOPED_TRACE("n=" + std::to_string(n) + " grad_scale=" + std::to_string(grad_scale));
      cpu::AdamParams hp;  // lr 1e-3, betas (0.9, 0.999), eps 1e-8
      hp.weight_decay = 0.01f;
      AdamRun r = run_adam(n, hp, grad_scale, seed);
      seed += 100;
      EXPECT_TRUE(elementwise_close(r.p.data(), r.pr.data(), n, kAdamAtol, kAdamRtol)) << "p";
      EXPECT_TRUE(elementwise_close(r.m.data(), r.mr.data(), n, kAdamAtol, kAdamRtol)) << "m";
      EXPECT_TRUE(elementwise_close(r.v.data(), r.vr.data(), n, kAdamAtol, kAdamRtol)) << "v";
    }
}

// A large lr (0.1) makes the update, not p * decay, dominate, and drives many parameters
// through zero, where a relative tolerance means nothing: a parameter that ends at 0.008 was
// O(1) for most of its 10 steps and carries the rounding of those steps (~20 roundings at
// magnitude ~1: several 1e-7). p is a running sum over steps, so it gets the norm-scaled
// residual: max|p - pref| / (max_t |pref_t| * steps * eps) < 10. m and v keep 1e-6 relative.
TEST(AdamStep, LargeLrMatchesReferenceOver10Steps) {
  uint32_t seed = 1500;
  for (size_t n : adam_sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    cpu::AdamParams hp;
    hp.lr = 0.1f;
    hp.weight_decay = 0.01f;
    AdamRun r = run_adam(n, hp, 1.0f, seed);
    seed += 100;
    EXPECT_TRUE(residual_ok(r.p.data(), r.pr.data(), n, r.p_hist * 10)) << "p";
    EXPECT_TRUE(elementwise_close(r.m.data(), r.mr.data(), n, kAdamAtol, kAdamRtol)) << "m";
    EXPECT_TRUE(elementwise_close(r.v.data(), r.vr.data(), n, kAdamAtol, kAdamRtol)) << "v";
  }
}

// The engine tiles parameters freely (ZenFlow's column selection, CPU/GPU split): one call on
// [0, n) must be bitwise equal to calls on [0, a) and [a, n), for any a.
TEST(AdamStep, SplitIsBitwiseIdentical) {
  cpu::AdamParams hp;
  hp.weight_decay = 0.01f;
  uint32_t seed = 2000;
  for (size_t n : {size_t{1000}, size_t{1027}, size_t{4099}}) {
    std::vector<size_t> splits = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 500, 501,
                                  n - 9, n - 8, n - 1, n};
    auto p0 = uniform(n, -1.f, 1.f, seed++);
    std::vector<std::vector<float>> grads;
    for (int t = 0; t < 3; ++t) grads.push_back(uniform(n, -1.f, 1.f, seed++));
    // whole
    std::vector<float> p = p0, m(n, 0.f), v(n, 0.f);
    for (int t = 0; t < 3; ++t)
      cpu::adam_step(p.data(), grads[t].data(), m.data(), v.data(), n, hp, t + 1, 1.0f);
    for (size_t a : splits) {
      SCOPED_TRACE("n=" + std::to_string(n) + " a=" + std::to_string(a));
      std::vector<float> ps = p0, ms(n, 0.f), vs(n, 0.f);
      for (int t = 0; t < 3; ++t) {
        cpu::adam_step(ps.data(), grads[t].data(), ms.data(), vs.data(), a, hp, t + 1, 1.0f);
        cpu::adam_step(ps.data() + a, grads[t].data() + a, ms.data() + a, vs.data() + a, n - a, hp,
                       t + 1, 1.0f);
      }
      EXPECT_TRUE(bitwise_equal(p, ps)) << "p";
      EXPECT_TRUE(bitwise_equal(m, ms)) << "m";
      EXPECT_TRUE(bitwise_equal(v, vs)) << "v";
    }
    // three pieces at odd offsets, each starting misaligned
    SCOPED_TRACE("n=" + std::to_string(n) + " three pieces");
    const size_t a = 13, b = n / 2 + 5;
    std::vector<float> ps = p0, ms(n, 0.f), vs(n, 0.f);
    for (int t = 0; t < 3; ++t)
      for (auto [lo, hi] : {std::pair{size_t{0}, a}, std::pair{a, b}, std::pair{b, n}})
        cpu::adam_step(ps.data() + lo, grads[t].data() + lo, ms.data() + lo, vs.data() + lo,
                       hi - lo, hp, t + 1, 1.0f);
    EXPECT_TRUE(bitwise_equal(p, ps));
    EXPECT_TRUE(bitwise_equal(m, ms));
    EXPECT_TRUE(bitwise_equal(v, vs));
  }
}

// The vector body (AVX-512 / AVX2) and the scalar head/tail must round identically: calls of one
// element each run only the scalar path, one whole call runs mostly the vector body. Values
// span magnitudes (tiny and huge gradients, zeros, p = 0) so that sqrt, div and the decay all
// see more than one exponent range.
TEST(AdamStep, VectorBodyMatchesScalarPath) {
  cpu::AdamParams hp;
  hp.weight_decay = 0.1f;
  const size_t n = 1031;  // a tail for every SIMD width
  uint32_t seed = 2500;
  auto p0 = uniform(n, -1.f, 1.f, seed++);
  for (size_t i = 0; i < n; i += 37) p0[i] = 0.0f;
  std::vector<std::vector<float>> grads;
  for (int t = 0; t < 4; ++t) {
    auto g = uniform(n, -1.f, 1.f, seed++);
    for (size_t i = 0; i < n; ++i) {
      if (i % 5 == 1) g[i] *= 1e-6f;
      if (i % 7 == 2) g[i] *= 1e4f;
      if (i % 11 == 3) g[i] = 0.0f;
    }
    grads.push_back(g);
  }
  for (float grad_scale : {1.0f, 0.3f}) {
    SCOPED_TRACE("grad_scale=" + std::to_string(grad_scale));
    std::vector<float> p = p0, m(n, 0.f), v(n, 0.f), ps = p0, ms(n, 0.f), vs(n, 0.f);
    for (int t = 0; t < 4; ++t) {
      cpu::adam_step(p.data(), grads[t].data(), m.data(), v.data(), n, hp, t + 1, grad_scale);
      for (size_t i = 0; i < n; ++i)
        cpu::adam_step(&ps[i], &grads[t][i], &ms[i], &vs[i], 1, hp, t + 1, grad_scale);
    }
    EXPECT_TRUE(bitwise_equal(p, ps)) << "p";
    EXPECT_TRUE(bitwise_equal(m, ms)) << "m";
    EXPECT_TRUE(bitwise_equal(v, vs)) << "v";
  }
}

// ZenFlow's fused pass: bitwise equal to accumulate(acc, g, 1) + adam_step(acc) + zero(acc),
// for any split of [0, n) (pieces at odd offsets: scalar heads and tails).
TEST(AdamStepAccumulate, BitwiseEqualsAccumulateAdamZero) {
  cpu::AdamParams hp;
  hp.weight_decay = 0.01f;
  uint32_t seed = 2700;
  std::vector<size_t> sizes = kSmallSizes;
  sizes.push_back(4099);
  if (!quick()) sizes.push_back(size_t{1} << 20);
  for (float grad_scale : {1.0f, 0.25f, 0.3f})
    for (size_t n : sizes) {
      SCOPED_TRACE("n=" + std::to_string(n) + " grad_scale=" + std::to_string(grad_scale));
      auto p0 = uniform(n, -1.f, 1.f, seed++);
      std::vector<float> p = p0, m(n, 0.f), v(n, 0.f), pf = p0, mf(n, 0.f), vf(n, 0.f);
      std::vector<float> acc(n), accf(n);
      for (int64_t t = 1; t <= 3; ++t) {
        // the accumulator holds earlier micro-steps' gradients (not zero) at the fused pass
        acc = uniform(n, -2.f, 2.f, seed++);
        accf = acc;
        auto g = uniform(n, -1.f, 1.f, seed++);
        cpu::accumulate(acc.data(), g.data(), n, 1.0f);
        cpu::adam_step(p.data(), acc.data(), m.data(), v.data(), n, hp, t, grad_scale);
        cpu::zero(acc.data(), n);
        const size_t a = std::min(n, size_t{13}), b = std::clamp(n / 2 + 5, a, n);
        for (auto [lo, hi] : {std::pair{size_t{0}, a}, std::pair{a, b}, std::pair{b, n}})
          cpu::adam_step_accumulate(pf.data() + lo, accf.data() + lo, g.data() + lo, mf.data() + lo,
                                    vf.data() + lo, hi - lo, hp, t, grad_scale);
      }
      EXPECT_TRUE(bitwise_equal(p, pf)) << "p";
      EXPECT_TRUE(bitwise_equal(m, mf)) << "m";
      EXPECT_TRUE(bitwise_equal(v, vf)) << "v";
      EXPECT_TRUE(bitwise_equal(acc, accf)) << "acc";
    }
}

// ---------------------------------------------------------------------------------------------
// accumulate, copy, zero.
TEST(Accumulate, MatchesReference) {
  uint32_t seed = 3000;
  for (size_t n : elementwise_sizes())
    for (float scale : {1.0f, -0.5f, 0.3f}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " scale=" + std::to_string(scale));
      auto acc = uniform(n, -1.f, 1.f, seed++);
      auto g = uniform(n, -1.f, 1.f, seed++);
      auto accr = ref::to_double(acc), gd = ref::to_double(g);
      cpu::accumulate(acc.data(), g.data(), n, scale);
      ref::accumulate(accr.data(), gd.data(), n, (double)scale);
      EXPECT_TRUE(elementwise_close(acc.data(), accr.data(), n));
    }
}

TEST(Copy, IsExact) {
  uint32_t seed = 4000;
  for (size_t n : elementwise_sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto src = uniform(n, -1.f, 1.f, seed++);
    src[0] = -0.0f;
    std::vector<float> dst(n + 1, 7.0f);  // one guard element past the end
    cpu::copy(dst.data(), src.data(), n);
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), n * sizeof(float)), 0);
    EXPECT_EQ(dst[n], 7.0f);
  }
  std::vector<float> dst = {5.0f}, src = {6.0f};
  cpu::copy(dst.data(), src.data(), 0);
  EXPECT_EQ(dst[0], 5.0f);
}

TEST(Zero, IsExact) {
  for (size_t n : elementwise_sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> x(n + 1, NAN);  // one guard element past the end
    cpu::zero(x.data(), n);
    std::vector<double> xr(n, 1.0);
    ref::zero(xr.data(), n);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += !(x[i] == 0.0f && !std::signbit(x[i]) && xr[i] == 0.0);
    EXPECT_EQ(bad, 0u);
    EXPECT_TRUE(std::isnan(x[n]));
  }
  std::vector<float> x = {5.0f};
  cpu::zero(x.data(), 0);
  EXPECT_EQ(x[0], 5.0f);
}

// ---------------------------------------------------------------- bf16
float f32_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

TEST(Bf16, HandCheckedRounding) {
  struct Case {
    uint32_t in;
    uint16_t want;
    const char* what;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80, "1.0 exact"},
      {0x3f808000u, 0x3f80, "1 + 2^-8: tie, to the even 1.0"},
      {0x3f818000u, 0x3f82, "1 + 3*2^-8: tie, to the even 1 + 2^-6"},
      {0x3f808001u, 0x3f81, "just above the tie: up"},
      {0x3f807fffu, 0x3f80, "just below the tie: down"},
      {0xbf818000u, 0xbf82, "negative tie to even"},
      {0x80000000u, 0x8000, "-0"},
      {0x000116c2u, 0x0001, "a subnormal, nearer its truncation"},
      {0x00018000u, 0x0002, "a subnormal tie: to the even"},
      {0x7f7f0000u, 0x7f7f, "largest finite bf16, exact"},
      {0x7f7f7fffu, 0x7f7f, "below the overflow tie: stays finite"},
      {0x7f7f8000u, 0x7f80, "overflow tie: to the even, infinity"},
      {0x7f7fffffu, 0x7f80, "FLT_MAX rounds to infinity"},
      {0xff800000u, 0xff80, "-infinity"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const float x = f32_of(c.in);
    uint16_t h = 0;
    cpu::pack_bf16(&x, &h, 1);
    EXPECT_EQ(h, c.want);
    float back = 0;
    cpu::unpack_bf16(&h, &back, 1);
    EXPECT_EQ(bits_of(back), (uint32_t)c.want << 16) << "unpacking is exact";
  }
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu}) {  // quiet and signalling NaNs stay NaN
    const float x = f32_of(nan);
    uint16_t h = 0;
    cpu::pack_bf16(&x, &h, 1);
    float back = 0;
    cpu::unpack_bf16(&h, &back, 1);
    EXPECT_TRUE(std::isnan(back)) << std::hex << nan;
    EXPECT_EQ(h >> 15, nan >> 31) << "sign kept";
  }
}

TEST(Bf16, PackAndRoundMatchNaiveOnRandomBits) {
  std::mt19937 rng(7);
  std::vector<float> x(1 << 16);
  for (auto& v : x) v = f32_of(rng());
  std::vector<uint16_t> h(x.size());
  cpu::pack_bf16(x.data(), h.data(), x.size());
  std::vector<float> r = x;
  cpu::round_bf16(r.data(), r.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = ref::naive_bf16(x[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(r[i])) << i;
      continue;
    }
    ASSERT_EQ(bits_of(r[i]), bits_of(want)) << "x bits " << std::hex << bits_of(x[i]);
    ASSERT_EQ((uint32_t)h[i] << 16, bits_of(want)) << "x bits " << std::hex << bits_of(x[i]);
  }
}

TEST(Bf16, MergeFromBf16EqualsMergeOfUnpackedValues) {
  // a 7 x 1000 weight, a tile starting mid-row, 3 selected columns; longer than the kernel's block
  const int R = 7, C = 1000, k = 3;
  const int32_t sel[k] = {2, 500, 999};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w((size_t)R * C), src(5003);
  for (auto& v : w) v = u(rng);
  for (auto& v : src) v = u(rng);
  std::vector<uint16_t> packed(src.size());
  cpu::pack_bf16(src.data(), packed.data(), src.size());
  std::vector<float> unpacked(src.size());
  cpu::unpack_bf16(packed.data(), unpacked.data(), src.size());
  for (int kk : {0, k}) {
    std::vector<float> a = w, b = w;
    const size_t na = cpu::merge_unselected_bf16(a.data(), C, packed.data(), 1001, src.size(), sel, kk);
    const size_t nb = cpu::merge_unselected(b.data(), C, unpacked.data(), 1001, src.size(), sel, kk);
    EXPECT_EQ(na, nb);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "k=" << kk;
  }
}

// ---------------------------------------------------------------- fp16
uint32_t bits32(float x) { return bits_of(x); }

TEST(Fp16, HandCheckedRounding) {
  struct Case {
    uint32_t in;
    uint16_t want;
    const char* what;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3c00, "1.0 exact"},
      {0x3f801000u, 0x3c00, "1 + 2^-11: tie, to the even 1.0"},
      {0x3f803000u, 0x3c02, "1 + 3*2^-11: tie, to the even 1 + 2^-9"},
      {0x3f801001u, 0x3c01, "just above the tie: up"},
      {0x3f800fffu, 0x3c00, "just below the tie: down"},
      {0xbf803000u, 0xbc02, "negative tie to even"},
      {0x80000000u, 0x8000, "-0"},
      {0x477fe000u, 0x7bff, "65504, the largest finite fp16"},
      {0x477fefffu, 0x7bff, "just below 65520: stays finite"},
      {0x477ff000u, 0x7c00, "65520: the overflow tie, to the even, infinity"},
      {0x47800000u, 0x7c00, "65536: infinity"},
      {0x7f7fffffu, 0x7c00, "FLT_MAX: infinity"},
      {0xff800000u, 0xfc00, "-infinity"},
      {0x38800000u, 0x0400, "2^-14, the smallest normal"},
      {0x387fc000u, 0x03ff, "2^-14 - 2^-24, the largest subnormal, exact"},
      {0x387fe000u, 0x0400, "2^-14 - 2^-25: tie, up to the even smallest normal"},
      {0x33800000u, 0x0001, "2^-24, the smallest subnormal"},
      {0x33000000u, 0x0000, "2^-25: the tie between 0 and 2^-24, to the even 0"},
      {0x33000001u, 0x0001, "just above 2^-25: up"},
      {0x33c00000u, 0x0002, "1.5 x 2^-24: tie, to the even 2 x 2^-24"},
      {0x35000000u, 0x0008, "2^-21, a subnormal"},
      {0x00000001u, 0x0000, "an fp32 subnormal: zero"},
      {0x80000001u, 0x8000, "a negative fp32 subnormal: -0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const float x = f32_of(c.in);
    uint16_t h = 0;
    cpu::pack_fp16(&x, &h, 1);
    EXPECT_EQ(h, c.want);
    float back = 0;
    cpu::unpack_fp16(&h, &back, 1);
    if (!std::isinf(back)) {
      EXPECT_EQ((double)back, ref::naive_fp16_value(c.want)) << "unpacking is exact";
    }
    EXPECT_EQ(bits32(ref::naive_fp16(x)), bits32(back)) << "the naive reference agrees";
  }
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0xff812345u}) {  // quiet and signalling NaNs
    const float x = f32_of(nan);
    uint16_t h = 0;
    cpu::pack_fp16(&x, &h, 1);
    EXPECT_EQ(h & 0x7e00u, 0x7e00u) << "a quiet NaN " << std::hex << nan;
    EXPECT_EQ(h >> 15, nan >> 31) << "sign kept";
    float back = 0;
    cpu::unpack_fp16(&h, &back, 1);
    EXPECT_TRUE(std::isnan(back));
  }
}

TEST(Fp16, UnpackIsExactForEveryHalf) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = (uint16_t)i;
  for (size_t off : {0, 3}) {  // the SIMD body and the scalar tail
    std::vector<float> f(all.size() - off);
    cpu::unpack_fp16(all.data() + off, f.data(), f.size());
    for (size_t i = 0; i < f.size(); ++i) {
      const uint16_t h = all[i + off];
      const double want = ref::naive_fp16_value(h);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(f[i])) << std::hex << h;
        continue;
      }
      ASSERT_EQ((double)f[i], want) << std::hex << h;
      ASSERT_EQ(std::signbit(f[i]), (h >> 15) != 0) << std::hex << h;
      ASSERT_EQ(zf::kernels::fp16::to_float(h), f[i]) << "the scalar path agrees, " << std::hex << h;
      uint16_t back = 0;
      cpu::pack_fp16(&f[i], &back, 1);
      ASSERT_EQ(back, h) << "round trip";
    }
  }
}

TEST(Fp16, PackAndRoundMatchNaiveOnRandomBitsAndTheSubnormalRange) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> small(-1e-4f, 1e-4f);  // subnormal fp16s and their edge
  for (size_t n : {1, 22, 55, 64, 1000, 1 << 16}) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = i % 2 ? f32_of(rng()) : small(rng);
    std::vector<uint16_t> h(n);
    cpu::pack_fp16(x.data(), h.data(), n);
    std::vector<float> r = x;
    const size_t bad = cpu::round_fp16(r.data(), n);
    size_t want_bad = 0;
    for (size_t i = 0; i < n; ++i) {
      const float want = ref::naive_fp16(x[i]);
      want_bad += !std::isfinite(want);
      ASSERT_EQ(zf::kernels::fp16::from_float(x[i]), h[i]) << "scalar and vector paths agree, x bits " << std::hex << bits32(x[i]);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(r[i])) << i;
        continue;
      }
      ASSERT_EQ(bits32(r[i]), bits32(want)) << "n=" << n << " x bits " << std::hex << bits32(x[i]);
      float u = 0;
      cpu::unpack_fp16(&h[i], &u, 1);
      ASSERT_EQ(bits32(u), bits32(want)) << "x bits " << std::hex << bits32(x[i]);
    }
    EXPECT_EQ(bad, want_bad) << "n=" << n << ": round_fp16 counts the inf and NaN results";
  }
}

TEST(Fp16, RoundCountsOverflowsInEveryLane) {
  for (size_t n : {1, 7, 8, 9, 64, 1000}) {
    for (size_t at : {(size_t)0, n / 2, n - 1}) {
      std::vector<float> x(n, 1.5f);
      x[at] = 70000.0f;  // finite in fp32, inf in fp16
      EXPECT_EQ(cpu::round_fp16(x.data(), n), 1u) << "n=" << n << " at " << at;
      EXPECT_TRUE(std::isinf(x[at]));
      x[at] = NAN;
      EXPECT_EQ(cpu::round_fp16(x.data(), n), 1u);
      x[at] = 65504.0f;
      EXPECT_EQ(cpu::round_fp16(x.data(), n), 0u);
    }
  }
}

TEST(Fp16, ScaleAndMergeFromFp16) {
  std::vector<float> x = {1.0f, -2.0f, 3.5f};
  cpu::scale(x.data(), x.size(), 0.25f);
  EXPECT_EQ(x, (std::vector<float>{0.25f, -0.5f, 0.875f}));
  const int R = 7, C = 1000, k = 3;
  const int32_t sel[k] = {2, 500, 999};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w((size_t)R * C), src(5003);
  for (auto& v : w) v = u(rng);
  for (auto& v : src) v = u(rng);
  std::vector<uint16_t> packed(src.size());
  cpu::pack_fp16(src.data(), packed.data(), src.size());
  std::vector<float> unpacked(src.size());
  cpu::unpack_fp16(packed.data(), unpacked.data(), src.size());
  for (int kk : {0, k}) {
    std::vector<float> a = w, b = w;
    const size_t na = cpu::merge_unselected_fp16(a.data(), C, packed.data(), 1001, src.size(), sel, kk);
    const size_t nb = cpu::merge_unselected(b.data(), C, unpacked.data(), 1001, src.size(), sel, kk);
    EXPECT_EQ(na, nb);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "k=" << kk;
  }
}

}  // namespace
