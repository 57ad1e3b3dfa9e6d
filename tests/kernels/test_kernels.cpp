// CPU kernels (codelets/kernels/cpu/, float) against the naive double reference
// (tests/reference/reference.hpp), on sizes with SIMD tails: 1, 22, 55, 64, 1000 and 2^20
// (elementwise, unless ZF_QUICK is set). Elementwise: |x - ref| <= atol + rtol*|ref| (llm.c);
// matmuls and reductions: max|C - Cref| / (max|A| max|B| K eps) < 10 (Chameleon's residual).
// AdamW: test_kernels_adam.cpp; bf16 and fp16: test_kernels_precision.cpp.
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
#include "codelets/kernels/gelu_math.hpp"
#include "runtime/parallel.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#include "tests/reference/reference.hpp"

namespace {

namespace cpu = zf::kernels::cpu;
namespace ref = zf::ref;
using namespace zf::test;

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

// The fused forward + backward of a training step: bitwise the two kernels' loss, counts and
// gradient (rows of negative labels ignored: no loss, a zero gradient), on shapes with SIMD tails
// and more than one tile of rows (16384 logits a tile).
TEST(SoftmaxXent, FwdBwdFusedIsBitwiseFwdThenBwd) {
  uint32_t seed = 950;
  for (auto [B, C] : std::vector<std::pair<int, int>>{{1, 1}, {3, 22}, {55, 64}, {64, 1000}, {40, 4096}, {300, 257}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " C=" + std::to_string(C));
    auto z = uniform((size_t)B * C, -12.f, 12.f, seed++);
    std::mt19937 rng(seed++);
    std::vector<int32_t> labels((size_t)B);
    for (int i = 0; i < B; ++i) {
      labels[(size_t)i] = i % 5 == 4 ? -1 : (int32_t)(rng() % (unsigned)C);
      if (i % 3 == 0 && labels[(size_t)i] >= 0)  // some correct rows: the count is exercised
        labels[(size_t)i] = (int32_t)(std::max_element(z.begin() + (size_t)i * C, z.begin() + (size_t)(i + 1) * C) -
                                      (z.begin() + (size_t)i * C));
    }
    const float scale = 0.37f / (float)B;
    std::vector<float> p((size_t)B * C), d((size_t)B * C, NAN), f((size_t)B * C, NAN);
    int64_t ok = -1, n = -1, okf = -2, nf = -2;
    const double loss = cpu::softmax_xent_fwd(z.data(), labels.data(), p.data(), B, C, &ok, &n);
    cpu::softmax_xent_bwd(p.data(), labels.data(), d.data(), B, C, scale);
    const double lossf = cpu::softmax_xent_fwd_bwd(z.data(), labels.data(), f.data(), B, C, scale, &okf, &nf);
    EXPECT_EQ(std::memcmp(&loss, &lossf, sizeof loss), 0) << loss << " vs " << lossf;
    EXPECT_EQ(ok, okf);
    EXPECT_EQ(n, nf);
    EXPECT_EQ(n, (int64_t)std::count_if(labels.begin(), labels.end(), [](int32_t y) { return y >= 0; }));
    if (B >= 3) {
      EXPECT_GT(okf, 0);
    }
    EXPECT_EQ(std::memcmp(d.data(), f.data(), d.size() * sizeof(float)), 0);
    // and the gradient is the reference's (softmax - onehot) * scale
    auto zd = ref::to_double(z);
    std::vector<double> pr(zd.size()), dr(zd.size());
    std::vector<int32_t> kept(labels);
    for (auto& y : kept) y = std::max(y, 0);  // the reference has no ignored rows: compared row by row below
    ref::softmax_xent_fwd(zd.data(), kept.data(), pr.data(), B, C, nullptr);
    ref::softmax_xent_bwd(pr.data(), kept.data(), dr.data(), B, C, (double)scale);
    for (int i = 0; i < B; ++i) {
      const size_t o = (size_t)i * C;
      if (labels[(size_t)i] < 0) {
        EXPECT_TRUE(std::all_of(f.begin() + o, f.begin() + o + C, [](float v) { return v == 0.0f; })) << "row " << i;
        continue;
      }
      EXPECT_TRUE(elementwise_close(f.data() + o, dr.data() + o, (size_t)C)) << "row " << i;
    }
  }
}

// The LM head and its loss in vocabulary chunks (lm_head_xent, the Llama's head above
// runtime.logits_chunk_elems) against the whole logits: the product, softmax_xent_fwd_bwd and the
// two gradient products. One chunk, equal chunks, a shorter last chunk and one column a chunk; fp32
// and bf16 products (x and w as bf16 bits, dw written in bf16 or fp32). The counts are equal; the
// loss, dx and dw within rounding: the chunked sum of exp is rescaled when a later chunk raises a
// row's max, so its float rounding differs from the one-pass sum (1e-6 relative on the loss and
// 1e-5 relative L2 on the fp32 gradients; 2e-3 where a gradient is rounded to bf16, half a bf16
// spacing). The forward alone (no dx) returns the same loss and counts, bitwise.
TEST(LmHeadXent, ChunksMatchTheWholeLogits) {
  uint32_t seed = 4400;
  struct Case { int N, C, V, Vc; };
  for (const Case k : {Case{5, 16, 37, 37}, {33, 24, 100, 25}, {33, 24, 100, 7}, {70, 64, 300, 64}, {9, 8, 13, 1}}) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE("N=" + std::to_string(k.N) + " C=" + std::to_string(k.C) + " V=" + std::to_string(k.V) +
                   " Vc=" + std::to_string(k.Vc) + (bf16 ? " bf16" : " fp32"));
      const int N = k.N, C = k.C, V = k.V;
      std::vector<float> x = uniform((size_t)N * C, -1.5f, 1.5f, seed++), w = uniform((size_t)V * C, -1.f, 1.f, seed++);
      std::vector<uint16_t> xh(x.size()), wh(w.size());
      if (bf16) {  // the operands as stored bf16 values
        cpu::pack_bf16(x.data(), xh.data(), x.size());
        cpu::pack_bf16(w.data(), wh.data(), w.size());
        cpu::unpack_bf16(xh.data(), x.data(), x.size());
        cpu::unpack_bf16(wh.data(), w.data(), w.size());
      }
      const cpu::MatOperand X{bf16 ? (const void*)xh.data() : x.data(), bf16};
      const cpu::MatOperand W{bf16 ? (const void*)wh.data() : w.data(), bf16};
      std::mt19937 rng(seed++);
      std::vector<int32_t> labels((size_t)N);
      for (int i = 0; i < N; ++i) labels[(size_t)i] = i % 4 == 3 ? -1 : (int32_t)(rng() % (unsigned)V);
      const float scale = 0.5f / (float)N;
      // the whole logits
      std::vector<float> z((size_t)N * V), dz(z.size()), dx((size_t)N * C), dw((size_t)V * C);
      cpu::matmul_fwd_mixed(X, W, z.data(), N, C, V, false, bf16);
      for (int i = 0; i < N; i += 3)  // some rows whose label is the argmax: the count is exercised
        if (labels[(size_t)i] >= 0)
          labels[(size_t)i] = (int32_t)(std::max_element(z.begin() + (size_t)i * V, z.begin() + (size_t)(i + 1) * V) -
                                        (z.begin() + (size_t)i * V));
      int64_t ok = -1, n = -1;
      const double loss = cpu::softmax_xent_fwd_bwd(z.data(), labels.data(), dz.data(), N, V, scale, &ok, &n);
      cpu::matmul_bwd_weight_mixed({dz.data(), false}, X, dw.data(), N, C, V, false, false, bf16);
      cpu::matmul_bwd_data_mixed({dz.data(), false}, W, dx.data(), N, C, V, false, bf16);
      // chunked, dw in fp32 and (bf16) in bf16
      for (bool dw16 : {false, true}) {
        if (dw16 && !bf16) continue;
        SCOPED_TRACE(dw16 ? "dw bf16" : "dw fp32");
        std::vector<float> gx((size_t)N * C, NAN), gw((size_t)V * C, NAN);
        std::vector<uint16_t> gwh(gw.size(), 0xffff);
        int64_t ok2 = -1, n2 = -1;
        const cpu::Ew DW{dw16 ? (void*)gwh.data() : (void*)gw.data(), dw16};
        const double loss2 =
            cpu::lm_head_xent(X, W, labels.data(), gx.data(), DW, N, C, V, k.Vc, scale, bf16, &ok2, &n2);
        if (dw16) cpu::unpack_bf16(gwh.data(), gw.data(), gw.size());
        EXPECT_EQ(ok2, ok);
        EXPECT_EQ(n2, n);
        EXPECT_GT(ok2, 0);
        EXPECT_NEAR(loss2, loss, 1e-6 * std::fabs(loss));
        EXPECT_LT(rel_l2(gx, dx), bf16 ? 2e-3 : 1e-5) << "dx";
        EXPECT_LT(rel_l2(gw, dw), dw16 || bf16 ? 2e-3 : 1e-5) << "dw";
        int64_t ok3 = -1, n3 = -1;
        const double loss3 = cpu::lm_head_xent(X, W, labels.data(), nullptr, {nullptr, false}, N, C, V, k.Vc, scale,
                                               bf16, &ok3, &n3);
        EXPECT_EQ(std::memcmp(&loss3, &loss2, sizeof loss3), 0) << loss3 << " vs " << loss2;
        EXPECT_EQ(ok3, ok2);
        EXPECT_EQ(n3, n2);
      }
    }
  }
}

// The token embedding on buffers as stored (the Llama's under precision bf16: a (V, C) bf16 table
// and gradient, not widened whole): bitwise the fp32 kernels on the widened buffers with the
// outputs rounded, every combination of fp32 and bf16 table and x; repeated and unused ids.
TEST(TokenEmbeddingMixed, BitwiseTheWidenedKernels) {
  const int B = 3, T = 40, C = 19, V = 11;
  std::vector<int32_t> tok((size_t)B * T);  // ids 0-10, 5 unused, about 13 positions each
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = (int32_t)((i * 7) % 5 + (i % 4 == 0 ? 6 : 0));
  std::vector<float> w = uniform((size_t)V * C, -2.f, 2.f, 71), dx = uniform((size_t)B * T * C, -1.f, 1.f, 72);
  for (size_t i = 0; i < dx.size(); i += 3) dx[i] *= 1000.0f + (float)i;  // magnitudes apart: the sums' order shows
  std::vector<uint16_t> wh(w.size()), dxh(dx.size());
  cpu::pack_bf16(w.data(), wh.data(), w.size());
  cpu::pack_bf16(dx.data(), dxh.data(), dx.size());
  std::vector<float> wr(w.size()), dxr(dx.size());
  cpu::unpack_bf16(wh.data(), wr.data(), wr.size());
  cpu::unpack_bf16(dxh.data(), dxr.data(), dxr.size());
  for (bool in16 : {false, true})
    for (bool out16 : {false, true}) {
      SCOPED_TRACE(std::string(in16 ? "bf16" : "fp32") + " in, " + (out16 ? "bf16" : "fp32") + " out");
      // the reference: the fp32 kernels on the widened inputs, the output rounded after
      std::vector<float> x((size_t)B * T * C), dw((size_t)V * C);
      cpu::embedding_fwd(tok.data(), in16 ? wr.data() : w.data(), nullptr, x.data(), B, T, C);
      cpu::embedding_bwd(tok.data(), in16 ? dxr.data() : dx.data(), dw.data(), nullptr, B, T, C, V);
      if (out16) cpu::round_bf16(x.data(), x.size()), cpu::round_bf16(dw.data(), dw.size());
      std::vector<float> x2(x.size(), NAN), dw2(dw.size(), NAN);
      std::vector<uint16_t> x2h(x.size(), 0xffff), dw2h(dw.size(), 0xffff);
      const cpu::Ew W{in16 ? (void*)wh.data() : (void*)w.data(), in16}, D{in16 ? (void*)dxh.data() : (void*)dx.data(), in16};
      const cpu::Ew X{out16 ? (void*)x2h.data() : (void*)x2.data(), out16};
      const cpu::Ew DW{out16 ? (void*)dw2h.data() : (void*)dw2.data(), out16};
      cpu::token_embedding_fwd_mixed(tok.data(), W, X, B, T, C);
      cpu::token_embedding_bwd_mixed(tok.data(), D, DW, B, T, C, V);
      if (out16) cpu::unpack_bf16(x2h.data(), x2.data(), x2.size()), cpu::unpack_bf16(dw2h.data(), dw2.data(), dw2.size());
      EXPECT_EQ(std::memcmp(x.data(), x2.data(), x.size() * sizeof(float)), 0) << "forward";
      EXPECT_EQ(std::memcmp(dw.data(), dw2.data(), dw.size() * sizeof(float)), 0) << "backward";
      EXPECT_EQ(dw2[(size_t)5 * C], 0.0f) << "an unused id's row is zero";
    }
}

// gelu_math's exp_poly, the softmax's and the GELU's exponential, against exp in double rounded to
// float: within 1 ulp (measured: at most 1) over [-80, 80], the range it is exact in (below -80 it
// returns exp(-80), which the softmax's max subtraction makes a weight of at most 1.8e-35).
TEST(ExpPoly, WithinOneUlpOfExp) {
  auto ord = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i;
  };
  int worst = 0;
  float at = 0.0f;
  size_t n = 0;
  // every 1021st float of [-80, 80] (both signs, every binade) and the grid of 1/1024 steps
  auto check = [&](float x) {
    const float got = zf::kernels::gelu_math::exp_poly(x), want = (float)std::exp((double)x);
    const int ulps = std::abs(ord(got) - ord(want));
    if (ulps > worst) worst = ulps, at = x;
    ++n;
  };
  for (int32_t i = ord(0.0f); i <= ord(80.0f); i += 1021) {
    float x;
    std::memcpy(&x, &i, sizeof x);
    check(x);
    check(-x);
  }
  for (int k = -80 * 1024; k <= 80 * 1024; ++k) check((float)k / 1024.0f);
  EXPECT_LE(worst, 1) << "at x = " << at << " (" << n << " points)";
  EXPECT_GT(n, 2000000u);
  EXPECT_EQ(zf::kernels::gelu_math::exp_poly(0.0f), 1.0f);
  // NaN gives NaN (softmax and SwiGLU of NaN logits stay NaN, which generate reports), and the
  // infinities the clamped ends; under tools/zf sanitize, without an undefined conversion of NaN
  EXPECT_TRUE(std::isnan(zf::kernels::gelu_math::exp_poly(std::nanf(""))));
  EXPECT_EQ(zf::kernels::gelu_math::exp_poly(-INFINITY), zf::kernels::gelu_math::exp_poly(-80.0f));
  EXPECT_EQ(zf::kernels::gelu_math::exp_poly(INFINITY), zf::kernels::gelu_math::exp_poly(80.0f));
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
}  // namespace
