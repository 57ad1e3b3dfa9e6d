// Finite-difference gradient checks, in double, of each layer's backward in the reference
// (tests/reference/reference.hpp): central differences dL/dx ~ (L(x+h) - L(x-h)) / 2h, h = 1e-6,
// on a scalar loss L = sum(Y * R) with random R (softmax cross-entropy: its mean loss).
// Then the shipped float CPU kernels' backward against the checked double backward, layer by
// layer and through a small MLP (linear -> GELU -> linear -> softmax cross-entropy).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/parallel.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#include "tests/reference/reference.hpp"

namespace {

namespace cpu = zf::kernels::cpu;
namespace ref = zf::ref;
using namespace zf::test;
using zf::test::max_abs;
using zf::test::elementwise_close;
using zf::test::residual_ok;

Vec uniform_d(size_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<int32_t> random_labels(int B, int C, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> l(B);
  for (auto& x : l) x = (int32_t)(rng() % (uint32_t)C);
  return l;
}

double max_abs(const std::vector<float>& a) {
  double m = 0.0;
  for (float x : a) m = std::max(m, std::fabs((double)x));
  return m;
}

// |x - ref| <= atol + rtol*|ref| everywhere.
::testing::AssertionResult elementwise_close(const std::vector<float>& x, const Vec& r) {
  size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    double err = std::fabs((double)x[i] - r[i]);
    double tol = kAtol + kRtol * std::fabs(r[i]);
    if (!(err <= tol)) ++bad;
    if (!(err / tol <= worst_ratio)) { worst_ratio = err / tol; worst = i; }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << x.size() << " out of tolerance; worst ["
                                       << worst << "] got " << x[worst] << " want " << r[worst];
}

// max|x - ref| / (scale * eps) < 10.
::testing::AssertionResult residual_ok(const std::vector<float>& x, const Vec& r, double scale,
                                       const char* what) {
  double diff = 0.0;
  for (size_t i = 0; i < x.size(); ++i) diff = std::max(diff, std::fabs((double)x[i] - r[i]));
  double res = diff / (scale * kFeps);
  if (res < kResidualMax) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": norm-scaled residual " << res
                                       << " >= " << kResidualMax << " (max diff " << diff << ")";
}

std::vector<float> to_float(const Vec& a) { return std::vector<float>(a.begin(), a.end()); }

// ---------------------------------------------------------------------------------------------
// Gradient checks of the double reference.

// Linear: Y (B, N) = X (B, K) W (N, K)^T + b (N); L = sum(Y * R).
TEST(GradCheck, Linear) {
  const int B = 5, K = 7, N = 4;
  Vec x = uniform_d((size_t)B * K, -1, 1, 1), w = uniform_d((size_t)N * K, -1, 1, 2);
  Vec b = uniform_d(N, -1, 1, 3), r = uniform_d((size_t)B * N, -1, 1, 4);
  LossFn loss = [&] {
    Vec y((size_t)B * N);
    ref::matmul_fwd(x.data(), w.data(), y.data(), B, K, N);
    ref::bias_add(y.data(), b.data(), B, N);
    return dot_loss(y, r);
  };
  Vec dw((size_t)N * K), db(N), dx((size_t)B * K);  // dY = R
  ref::matmul_bwd_weight(r.data(), x.data(), dw.data(), B, K, N, false);
  ref::bias_grad(r.data(), db.data(), B, N);
  ref::matmul_bwd_data(r.data(), w.data(), dx.data(), B, K, N);
  EXPECT_TRUE(gradcheck(loss, w, dw, "dW"));
  EXPECT_TRUE(gradcheck(loss, b, db, "db"));
  EXPECT_TRUE(gradcheck(loss, x, dx, "dX"));

  // accumulate = true adds onto what is there
  Vec dw2 = dw;
  ref::matmul_bwd_weight(r.data(), x.data(), dw2.data(), B, K, N, true);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_DOUBLE_EQ(dw2[i], 2.0 * dw[i]);
}

// ReLU away from its kink: |x| in [0.1, 2], far beyond h.
TEST(GradCheck, Relu) {
  const size_t n = 64;
  Vec x = uniform_d(n, 0.1, 2.0, 10), r = uniform_d(n, -1, 1, 11);
  for (size_t i = 0; i < n; i += 2) x[i] = -x[i];
  LossFn loss = [&] {
    Vec y(n);
    ref::relu_fwd(x.data(), y.data(), n);
    return dot_loss(y, r);
  };
  Vec dx(n);
  ref::relu_bwd(x.data(), r.data(), dx.data(), n);
  EXPECT_TRUE(gradcheck(loss, x, dx, "dX"));
}

TEST(GradCheck, Gelu) {
  const size_t n = 200;
  Vec x = uniform_d(n, -5.0, 5.0, 20), r = uniform_d(n, -1, 1, 21);
  x[0] = 0.0;
  LossFn loss = [&] {
    Vec y(n);
    ref::gelu_fwd(x.data(), y.data(), n);
    return dot_loss(y, r);
  };
  Vec dx(n);
  ref::gelu_bwd(x.data(), r.data(), dx.data(), n);
  EXPECT_TRUE(gradcheck(loss, x, dx, "dX"));
}

// Mean softmax cross-entropy: L = (1/B) sum_i -log softmax(z_i)[y_i]; dz = (p - onehot) / B.
TEST(GradCheck, SoftmaxXent) {
  for (int C : {1, 2, 7, 30}) {
    SCOPED_TRACE("C=" + std::to_string(C));
    const int B = 5;
    Vec z = uniform_d((size_t)B * C, -3, 3, 30 + C);
    auto labels = random_labels(B, C, 40 + C);
    LossFn loss = [&] {
      Vec p(z.size());
      double sum = ref::softmax_xent_fwd(z.data(), labels.data(), p.data(), B, C, nullptr);
      return LossValue{sum / B, sum / B};  // every row's loss is >= 0
    };
    Vec p(z.size()), dz(z.size());
    ref::softmax_xent_fwd(z.data(), labels.data(), p.data(), B, C, nullptr);
    ref::softmax_xent_bwd(p.data(), labels.data(), dz.data(), B, C, 1.0 / B);
    EXPECT_TRUE(gradcheck(loss, z, dz, "dZ"));
  }
}

// A small MLP through every backward: X -> linear (H) -> GELU -> linear (C) -> mean xent.
struct Mlp {
  int B, K, H, C;
  Vec x, w1, b1, w2, b2;  // (B,K) (H,K) (H) (C,H) (C)
  std::vector<int32_t> labels;

  static Mlp make(int B, int K, int H, int C, uint32_t seed) {
    Mlp m{B, K, H, C, {}, {}, {}, {}, {}, {}};
    m.x = uniform_d((size_t)B * K, -1, 1, seed);
    m.w1 = uniform_d((size_t)H * K, -1, 1, seed + 1);
    m.b1 = uniform_d(H, -0.5, 0.5, seed + 2);
    m.w2 = uniform_d((size_t)C * H, -1, 1, seed + 3);
    m.b2 = uniform_d(C, -0.5, 0.5, seed + 4);
    m.labels = random_labels(B, C, seed + 5);
    return m;
  }

  // Forward in double; fills activations, returns the mean loss.
  double forward(Vec& a1, Vec& h, Vec& z, Vec& p) const {
    a1.assign((size_t)B * H, 0.0);
    h.assign(a1.size(), 0.0);
    z.assign((size_t)B * C, 0.0);
    p.assign(z.size(), 0.0);
    ref::matmul_fwd(x.data(), w1.data(), a1.data(), B, K, H);
    ref::bias_add(a1.data(), b1.data(), B, H);
    ref::gelu_fwd(a1.data(), h.data(), a1.size());
    ref::matmul_fwd(h.data(), w2.data(), z.data(), B, H, C);
    ref::bias_add(z.data(), b2.data(), B, C);
    return ref::softmax_xent_fwd(z.data(), labels.data(), p.data(), B, C, nullptr) / B;
  }

  struct Grads { Vec dx, dw1, db1, dw2, db2; };

  Grads backward() const {
    Vec a1, h, z, p;
    forward(a1, h, z, p);
    Grads g;
    Vec dz(z.size()), dh(h.size()), da1(a1.size());
    ref::softmax_xent_bwd(p.data(), labels.data(), dz.data(), B, C, 1.0 / B);
    g.dw2.assign(w2.size(), 0.0);
    g.db2.assign(C, 0.0);
    ref::matmul_bwd_weight(dz.data(), h.data(), g.dw2.data(), B, H, C, false);
    ref::bias_grad(dz.data(), g.db2.data(), B, C);
    ref::matmul_bwd_data(dz.data(), w2.data(), dh.data(), B, H, C);
    ref::gelu_bwd(a1.data(), dh.data(), da1.data(), a1.size());
    g.dw1.assign(w1.size(), 0.0);
    g.db1.assign(H, 0.0);
    g.dx.assign(x.size(), 0.0);
    ref::matmul_bwd_weight(da1.data(), x.data(), g.dw1.data(), B, K, H, false);
    ref::bias_grad(da1.data(), g.db1.data(), B, H);
    ref::matmul_bwd_data(da1.data(), w1.data(), g.dx.data(), B, K, H);
    return g;
  }
};

TEST(GradCheck, MlpChain) {
  Mlp m = Mlp::make(4, 6, 8, 5, 50);
  LossFn loss = [&] {
    Vec a1, h, z, p;
    double l = m.forward(a1, h, z, p);
    return LossValue{l, l};
  };
  Mlp::Grads g = m.backward();
  EXPECT_TRUE(gradcheck(loss, m.w2, g.dw2, "dW2"));
  EXPECT_TRUE(gradcheck(loss, m.b2, g.db2, "db2"));
  EXPECT_TRUE(gradcheck(loss, m.w1, g.dw1, "dW1"));
  EXPECT_TRUE(gradcheck(loss, m.b1, g.db1, "db1"));
  EXPECT_TRUE(gradcheck(loss, m.x, g.dx, "dX"));
}

// ---------------------------------------------------------------------------------------------
// The shipped float kernels' backward against the (checked) double backward, on the same
// float inputs. Matmul-like results use the norm-scaled residual, elementwise ones atol/rtol.

TEST(KernelBackward, LinearMatchesReference) {
  zf::blas_single_thread();
  for (auto [B, K, N] : {std::tuple{1, 1, 1}, std::tuple{22, 55, 64}, std::tuple{64, 1000, 55},
                         std::tuple{1000, 22, 64}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
    auto x = uniform_f((size_t)B * K, -1, 1, 60), w = uniform_f((size_t)N * K, -1, 1, 61);
    auto dy = uniform_f((size_t)B * N, -1, 1, 62);
    std::vector<float> dw((size_t)N * K), db(N), dx((size_t)B * K);
    cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N, false);
    cpu::bias_grad(dy.data(), db.data(), B, N);
    cpu::matmul_bwd_data(dy.data(), w.data(), dx.data(), B, K, N);
    Vec xd(x.begin(), x.end()), wd(w.begin(), w.end()), dyd(dy.begin(), dy.end());
    Vec dwr(dw.size()), dbr(N), dxr(dx.size());
    ref::matmul_bwd_weight(dyd.data(), xd.data(), dwr.data(), B, K, N, false);
    ref::bias_grad(dyd.data(), dbr.data(), B, N);
    ref::matmul_bwd_data(dyd.data(), wd.data(), dxr.data(), B, K, N);
    EXPECT_TRUE(residual_ok(dw, dwr, max_abs(dy) * max_abs(x) * B, "dW"));
    EXPECT_TRUE(residual_ok(db, dbr, max_abs(dy) * B, "db"));
    EXPECT_TRUE(residual_ok(dx, dxr, max_abs(dy) * max_abs(w) * N, "dX"));
  }
}

TEST(KernelBackward, ActivationsMatchReference) {
  const size_t n = 1000;
  auto x = uniform_f(n, -5, 5, 70), dy = uniform_f(n, -1, 1, 71);
  Vec xd(x.begin(), x.end()), dyd(dy.begin(), dy.end());
  std::vector<float> dx(n);
  Vec dxr(n);
  cpu::relu_bwd(x.data(), dy.data(), dx.data(), n);
  ref::relu_bwd(xd.data(), dyd.data(), dxr.data(), n);
  EXPECT_TRUE(elementwise_close(dx, dxr)) << "relu";
  cpu::gelu_bwd(x.data(), dy.data(), dx.data(), n);
  ref::gelu_bwd(xd.data(), dyd.data(), dxr.data(), n);
  EXPECT_TRUE(elementwise_close(dx, dxr)) << "gelu";
}

// Forward and backward of the kernel from float logits vs the reference from the same logits:
// dlogits inherits the probs' row error, eps * (C + range of the row) relative to max p.
TEST(KernelBackward, SoftmaxXentMatchesReference) {
  for (auto [B, C] : {std::pair{1, 1}, std::pair{22, 55}, std::pair{64, 1000}, std::pair{1000, 22}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " C=" + std::to_string(C));
    auto z = uniform_f((size_t)B * C, -8, 8, 80);
    auto labels = random_labels(B, C, 81);
    std::vector<float> p(z.size()), dz(z.size());
    const float scale = 1.0f / (float)B;
    cpu::softmax_xent_fwd(z.data(), labels.data(), p.data(), B, C, nullptr);
    cpu::softmax_xent_bwd(p.data(), labels.data(), dz.data(), B, C, scale);
    Vec zd(z.begin(), z.end()), pr(z.size()), dzr(z.size());
    ref::softmax_xent_fwd(zd.data(), labels.data(), pr.data(), B, C, nullptr);
    ref::softmax_xent_bwd(pr.data(), labels.data(), dzr.data(), B, C, (double)scale);
    EXPECT_TRUE(residual_ok(dz, dzr, scale * (C + 16.0), "dZ"));  // logits range <= 16
  }
}

// The whole MLP backward with float kernels (float forward too) against the double reference.
// Errors now propagate through the chain, so the residual is scaled by each result's operand
// norms times the total reduction length along the path (B + K + H + C), with C + 16 for the
// softmax rows (logit range here stays well under 16).
TEST(KernelBackward, MlpChainMatchesReference) {
  zf::blas_single_thread();
  const int B = 64, K = 55, H = 100, C = 22;
  Mlp m = Mlp::make(B, K, H, C, 90);
  // round the double parameters to float first, so both sides start from the same values
  for (Vec* v : {&m.x, &m.w1, &m.b1, &m.w2, &m.b2})
    for (double& e : *v) e = (double)(float)e;
  Mlp::Grads gr = m.backward();
  Vec a1r, hr, zr, pr;
  m.forward(a1r, hr, zr, pr);

  auto x = to_float(m.x), w1 = to_float(m.w1), b1 = to_float(m.b1), w2 = to_float(m.w2),
       b2 = to_float(m.b2);
  std::vector<float> a1((size_t)B * H), h(a1.size()), z((size_t)B * C), p(z.size());
  cpu::matmul_fwd(x.data(), w1.data(), a1.data(), B, K, H);
  cpu::bias_add(a1.data(), b1.data(), B, H);
  cpu::gelu_fwd(a1.data(), h.data(), a1.size());
  cpu::matmul_fwd(h.data(), w2.data(), z.data(), B, H, C);
  cpu::bias_add(z.data(), b2.data(), B, C);
  double loss = cpu::softmax_xent_fwd(z.data(), m.labels.data(), p.data(), B, C, nullptr) / B;
  std::vector<float> dz(z.size()), dh(h.size()), da1(a1.size());
  std::vector<float> dw2(w2.size()), db2(C), dw1(w1.size()), db1(H), dx(x.size());
  cpu::softmax_xent_bwd(p.data(), m.labels.data(), dz.data(), B, C, 1.0f / (float)B);
  cpu::matmul_bwd_weight(dz.data(), h.data(), dw2.data(), B, H, C, false);
  cpu::bias_grad(dz.data(), db2.data(), B, C);
  cpu::matmul_bwd_data(dz.data(), w2.data(), dh.data(), B, H, C);
  cpu::gelu_bwd(a1.data(), dh.data(), da1.data(), a1.size());
  cpu::matmul_bwd_weight(da1.data(), x.data(), dw1.data(), B, K, H, false);
  cpu::bias_grad(da1.data(), db1.data(), B, H);
  cpu::matmul_bwd_data(da1.data(), w1.data(), dx.data(), B, K, H);

  const double path = B + K + H + C + 16.0;
  double loss_ref = m.forward(a1r, hr, zr, pr);
  EXPECT_LT(std::fabs(loss - loss_ref) / (std::fabs(loss_ref) * path * kFeps), kResidualMax);
  Vec dzr(zr.size()), dhr(hr.size()), da1r(a1r.size());
  ref::softmax_xent_bwd(pr.data(), m.labels.data(), dzr.data(), B, C, 1.0 / B);
  ref::matmul_bwd_data(dzr.data(), m.w2.data(), dhr.data(), B, H, C);
  ref::gelu_bwd(a1r.data(), dhr.data(), da1r.data(), a1r.size());
  EXPECT_TRUE(residual_ok(dw2, gr.dw2, max_abs(dzr) * max_abs(hr) * path, "dW2"));
  EXPECT_TRUE(residual_ok(db2, gr.db2, max_abs(dzr) * path, "db2"));
  EXPECT_TRUE(residual_ok(dw1, gr.dw1, max_abs(da1r) * max_abs(m.x) * path, "dW1"));
  EXPECT_TRUE(residual_ok(db1, gr.db1, max_abs(da1r) * path, "db1"));
  EXPECT_TRUE(residual_ok(dx, gr.dx, max_abs(da1r) * max_abs(m.w1) * path, "dX"));
}

}  // namespace
