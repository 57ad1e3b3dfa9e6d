// The GPU path (built with -DZF_ENABLE_CUDA=ON; docs/gpu.md), ggml's test-backend-ops pattern:
// - every CUDA kernel (codelets/kernels/cuda) against the CPU kernel on the same inputs, sizes
//   1, 22, 55, 64, 1000 (and 2^20 elementwise unless ZF_QUICK). Bitwise where kernels.hpp says
//   so; elementwise |x - ref| <= atol + rtol |ref| otherwise; matmul-like results by a
//   norm-scaled residual (Chameleon's ||x - ref|| / (||ref|| K eps) < 10);
// - the engine with CUDA workers: a few training steps of the MLP (every strategy) and of a
//   tiny GPT against the same run on CPU workers (runtime.cuda_workers = -1).
// Every test is skipped, with a message, where cudaGetDeviceCount sees no GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cuda/kernels.hpp"
#ifdef ZF_USE_NCCL
#include "codelets/kernels/cuda/allreduce.hpp"
#include "runtime/cuda_device.hpp"
#endif
#include "models/rng.hpp"
#include "test_helpers.hpp"

namespace zf::test {
namespace {

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;
using cpu::AdamParams;

bool quick() { return std::getenv("ZF_QUICK") != nullptr; }

std::vector<size_t> sizes() {
  std::vector<size_t> s{1, 22, 55, 64, 1000};
  if (!quick()) s.push_back(size_t(1) << 20);
  return s;
}

std::vector<float> randv(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = r.uniform(lo, hi);
  return v;
}
std::vector<int32_t> randi(size_t n, uint64_t seed, int32_t hi) {
  Rng r(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = (int32_t)r.below((uint64_t)hi);
  return v;
}

// A device copy of a host vector; read back with get().
template <class T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& h) : n_(h.size()) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(n_, 1) * sizeof(T)), cudaSuccess);
    if (n_) {
      EXPECT_EQ(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  explicit Dev(size_t n) : Dev(std::vector<T>(n)) {}
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* p() const { return static_cast<T*>(p_); }
  std::vector<T> get() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n_) {
      EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
  }

 private:
  void* p_ = nullptr;
  size_t n_;
};

::testing::AssertionResult bitwise(const std::vector<float>& x, const std::vector<float>& r) {
  if (x.size() != r.size()) return ::testing::AssertionFailure() << "sizes " << x.size() << " vs " << r.size();
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &r[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "first difference at [" << i << "]: got " << x[i] << " want " << r[i]
                                           << " (of " << x.size() << ")";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult close(const std::vector<float>& x, const std::vector<float>& r, double atol,
                                 double rtol) {
  if (x.size() != r.size()) return ::testing::AssertionFailure() << "sizes " << x.size() << " vs " << r.size();
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double err = std::fabs((double)x[i] - r[i]), tol = atol + rtol * std::fabs((double)r[i]);
    if (!(err <= tol)) ++bad;
    if (!(err / tol <= worst_ratio)) worst_ratio = err / tol, worst = i;
  }
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << x.size() << " out of tolerance; worst [" << worst
                                       << "] got " << x[worst] << " want " << r[worst];
}

// ||x - r|| / (||r|| K eps) < 10 (Chameleon's residual test for products over K terms)
::testing::AssertionResult residual(const std::vector<float>& x, const std::vector<float>& r, size_t K) {
  double d = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) d += ((double)x[i] - r[i]) * ((double)x[i] - r[i]), n += (double)r[i] * r[i];
  const double res = std::sqrt(d) / ((std::sqrt(n) + 1e-30) * (double)std::max<size_t>(K, 1) *
                                     std::numeric_limits<float>::epsilon());
  if (res < 10.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "residual " << res << " (K = " << K << ")";
}

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount sees none): the CUDA kernels are built but not run here";
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (h) cublasDestroy(h);
    if (s) cudaStreamDestroy(s);
  }
  // a launcher's status, then the stream's
  void ok(gpu::Status st) {
    ASSERT_EQ(st, nullptr) << st;
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  cudaStream_t s = nullptr;
  cublasHandle_t h = nullptr;
};

// One suite per operation (style.md: AdamStep.CudaMatchesCpu), all with the fixture above.
class Matmul : public Cuda {};
class Bias : public Cuda {};
class Activations : public Cuda {};
class SoftmaxXent : public Cuda {};
class AdamStep : public Cuda {};
class AdamStepAccumulate : public Cuda {};
class AccumulateCopyZero : public Cuda {};
class ColumnImportance : public Cuda {};
class Topk : public Cuda {};
class ColumnMovesAndSelectiveAdam : public Cuda {};
class Embedding : public Cuda {};
class LayerNorm : public Cuda {};
class Attention : public Cuda {};
class Pooling : public Cuda {};
class Bf16 : public Cuda {};
class Fp16 : public Cuda {};

// (B, K, N) shapes with odd sizes and the listed ones
std::vector<std::array<int, 3>> mm_shapes() {
  return {{1, 1, 1}, {22, 55, 64}, {64, 1000, 22}, {55, 64, 1000}, {1000, 22, 55}, {1, 1000, 1}};
}

TEST_F(Matmul, CudaMatchesCpu) {
  for (auto [B, K, N] : mm_shapes()) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(K) + "x" + std::to_string(N));
    auto x = randv((size_t)B * K, 1), w = randv((size_t)N * K, 2), dy = randv((size_t)B * N, 3);
    auto dw0 = randv((size_t)N * K, 4);
    std::vector<float> y(B * N), dw(N * K), dx(B * K), dwa = dw0;
    cpu::matmul_fwd(x.data(), w.data(), y.data(), B, K, N);
    cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N, false);
    cpu::matmul_bwd_weight(dy.data(), x.data(), dwa.data(), B, K, N, true);
    cpu::matmul_bwd_data(dy.data(), w.data(), dx.data(), B, K, N);
    Dev<float> gx(x), gw(w), gdy(dy), gy(y.size()), gdw(dw.size()), gdwa(dw0), gdx(dx.size());
    ok(gpu::matmul_fwd(gx.p(), gw.p(), gy.p(), B, K, N, h, s));
    ok(gpu::matmul_bwd_weight(gdy.p(), gx.p(), gdw.p(), B, K, N, false, h, s));
    ok(gpu::matmul_bwd_weight(gdy.p(), gx.p(), gdwa.p(), B, K, N, true, h, s));
    ok(gpu::matmul_bwd_data(gdy.p(), gw.p(), gdx.p(), B, K, N, h, s));
    EXPECT_TRUE(residual(gy.get(), y, K)) << "fwd";
    EXPECT_TRUE(residual(gdw.get(), dw, B)) << "bwd_weight";
    EXPECT_TRUE(residual(gdwa.get(), dwa, B + 1)) << "bwd_weight accumulate";
    EXPECT_TRUE(residual(gdx.get(), dx, N)) << "bwd_data";
    // the weight stored (in, out) (Param::in_out): w^T and dw^T
    std::vector<float> wt((size_t)K * N), yt(y.size()), dwt(dw.size()), dxt(dx.size());
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) wt[(size_t)k * N + n] = w[(size_t)n * K + k];
    cpu::matmul_fwd(x.data(), wt.data(), yt.data(), B, K, N, true);
    cpu::matmul_bwd_weight(dy.data(), x.data(), dwt.data(), B, K, N, false, true);
    cpu::matmul_bwd_data(dy.data(), wt.data(), dxt.data(), B, K, N, true);
    Dev<float> gwt(wt), gyt(y.size()), gdwt(dw.size()), gdxt(dx.size());
    ok(gpu::matmul_fwd(gx.p(), gwt.p(), gyt.p(), B, K, N, h, s, true));
    ok(gpu::matmul_bwd_weight(gdy.p(), gx.p(), gdwt.p(), B, K, N, false, h, s, true));
    ok(gpu::matmul_bwd_data(gdy.p(), gwt.p(), gdxt.p(), B, K, N, h, s, true));
    EXPECT_TRUE(residual(gyt.get(), yt, K)) << "fwd, in_out";
    EXPECT_TRUE(residual(gdwt.get(), dwt, B)) << "bwd_weight, in_out";
    EXPECT_TRUE(residual(gdxt.get(), dxt, N)) << "bwd_data, in_out";
  }
}

TEST_F(Bias, CudaMatchesCpu) {
  for (auto [B, N] : std::vector<std::pair<int, int>>{{1, 1}, {22, 55}, {64, 10}, {65, 3}, {1000, 64}, {55, 1000}}) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(N));
    auto y = randv((size_t)B * N, 5), b = randv(N, 6);
    std::vector<float> db(N);
    Dev<float> gy(y), gb(b), gdb(N);
    cpu::bias_grad(y.data(), db.data(), B, N);
    ok(gpu::bias_grad(gy.p(), gdb.p(), B, N, s));
    if (B <= 64)
      EXPECT_TRUE(bitwise(gdb.get(), db)) << "bias_grad, one row chunk";
    else
      EXPECT_TRUE(close(gdb.get(), db, 1e-5, 1e-5)) << "bias_grad, chunked sums";  // order of B terms
    cpu::bias_add(y.data(), b.data(), B, N);
    ok(gpu::bias_add(gy.p(), gb.p(), B, N, s));
    EXPECT_TRUE(bitwise(gy.get(), y)) << "bias_add";
  }
}

TEST_F(Activations, CudaMatchesCpu) {
  for (size_t n : sizes()) {
    SCOPED_TRACE(n);
    auto x = randv(n, 7, -6.0f, 6.0f), dy = randv(n, 8);
    if (n > 2) x[0] = 0.0f, x[1] = -100.0f, x[2] = 100.0f;  // ReLU's kink, GELU's clamped exp
    std::vector<float> y(n), dx(n);
    Dev<float> gx(x), gdy(dy), gy(n), gdx(n);
    cpu::relu_fwd(x.data(), y.data(), n);
    ok(gpu::relu_fwd(gx.p(), gy.p(), n, s));
    EXPECT_TRUE(bitwise(gy.get(), y)) << "relu_fwd";
    cpu::relu_bwd(x.data(), dy.data(), dx.data(), n);
    ok(gpu::relu_bwd(gx.p(), gdy.p(), gdx.p(), n, s));
    EXPECT_TRUE(bitwise(gdx.get(), dx)) << "relu_bwd";
    cpu::gelu_fwd(x.data(), y.data(), n);
    ok(gpu::gelu_fwd(gx.p(), gy.p(), n, s));
    EXPECT_TRUE(bitwise(gy.get(), y)) << "gelu_fwd";
    cpu::gelu_bwd(x.data(), dy.data(), dx.data(), n);
    ok(gpu::gelu_bwd(gx.p(), gdy.p(), gdx.p(), n, s));
    EXPECT_TRUE(bitwise(gdx.get(), dx)) << "gelu_bwd";
  }
}

TEST_F(SoftmaxXent, CudaMatchesCpu) {
  for (auto [B, C] : std::vector<std::pair<int, int>>{{1, 1}, {22, 10}, {55, 64}, {64, 1000}, {1000, 22}, {3, 256}}) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(C));
    auto z = randv((size_t)B * C, 9, -8.0f, 8.0f);
    auto y = randi(B, 10, C);
    if (C > 3) z[2] = z[3] = 50.0f;  // argmax tie in row 0: the lower index wins
    std::vector<float> p(z.size()), d(z.size());
    int64_t correct = 0;
    const double loss = cpu::softmax_xent_fwd(z.data(), y.data(), p.data(), B, C, &correct);
    Dev<float> gz(z), gp(z.size()), gd(z.size());
    Dev<int32_t> gy(y);
    Dev<double> st(std::vector<double>{1.0, 2.0, 3.0});
    ok(gpu::softmax_xent_fwd(gz.p(), gy.p(), gp.p(), B, C, st.p(), false, s));
    EXPECT_TRUE(close(gp.get(), p, 1e-7, 1e-5)) << "probs";  // expf vs the GPU's expf, sum order
    auto stats = st.get();
    EXPECT_NEAR(stats[0], loss, 1e-5 * std::fabs(loss) + 1e-6);
    EXPECT_EQ(stats[1], (double)correct);
    EXPECT_EQ(stats[2], (double)B);
    ok(gpu::softmax_xent_fwd(gz.p(), gy.p(), gp.p(), B, C, st.p(), true, s));
    stats = st.get();
    EXPECT_NEAR(stats[0], 2 * loss, 2e-5 * std::fabs(loss) + 1e-6) << "accumulate";
    EXPECT_EQ(stats[2], 2.0 * B);
    // backward on the same probabilities: elementwise, bitwise
    Dev<float> gpc(p);
    cpu::softmax_xent_bwd(p.data(), y.data(), d.data(), B, C, 1.0f / B);
    ok(gpu::softmax_xent_bwd(gpc.p(), gy.p(), gd.p(), B, C, 1.0f / B, s));
    EXPECT_TRUE(bitwise(gd.get(), d)) << "bwd";
  }
}

TEST_F(SoftmaxXent, CudaBadLabelGivesNaNLoss) {
  auto z = randv(20, 11);
  Dev<float> gz(z), gp(20);
  Dev<int32_t> bad(std::vector<int32_t>{1, 10});  // C = 10: row 1's label is out of range
  Dev<double> st(3);
  ok(gpu::softmax_xent_fwd(gz.p(), bad.p(), gp.p(), 2, 10, st.p(), false, s));
  EXPECT_TRUE(std::isnan(st.get()[0]));
}

struct AdamCase {
  AdamParams hp;
  float grad_scale;
};

TEST_F(AdamStep, CudaBitwiseEqualsCpu) {
  const AdamCase cases[] = {{{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f}, 1.0f}, {{3e-2f, 0.8f, 0.99f, 1e-6f, 0.1f}, 0.5f}};
  for (size_t n : sizes())
    for (const AdamCase& c : cases) {
      SCOPED_TRACE(n);
      auto p = randv(n, 12), m = randv(n, 13, -0.1f, 0.1f), v = randv(n, 14, 0.0f, 0.01f);
      Dev<float> gp(p), gm(m), gv(v);
      for (int64_t t = 1; t <= 5; ++t) {
        auto g = randv(n, 100 + t);
        Dev<float> gg2(g);
        cpu::adam_step(p.data(), g.data(), m.data(), v.data(), n, c.hp, t, c.grad_scale);
        ok(gpu::adam_step(gp.p(), gg2.p(), gm.p(), gv.p(), n, c.hp, t, c.grad_scale, s));
      }
      EXPECT_TRUE(bitwise(gp.get(), p)) << "p";
      EXPECT_TRUE(bitwise(gm.get(), m)) << "m";
      EXPECT_TRUE(bitwise(gv.get(), v)) << "v";
    }
}

TEST_F(AdamStepAccumulate, CudaBitwiseEqualsCpu) {
  const AdamParams hp{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
  for (size_t n : sizes()) {
    SCOPED_TRACE(n);
    auto p = randv(n, 15), acc = randv(n, 16), g = randv(n, 17), m = randv(n, 18, -0.1f, 0.1f),
         v = randv(n, 19, 0.0f, 0.01f);
    Dev<float> gp(p), gacc(acc), gg(g), gm(m), gv(v);
    cpu::adam_step_accumulate(p.data(), acc.data(), g.data(), m.data(), v.data(), n, hp, 3, 0.25f);
    ok(gpu::adam_step_accumulate(gp.p(), gacc.p(), gg.p(), gm.p(), gv.p(), n, hp, 3, 0.25f, s));
    EXPECT_TRUE(bitwise(gp.get(), p));
    EXPECT_TRUE(bitwise(gacc.get(), acc));
    EXPECT_TRUE(bitwise(gm.get(), m));
    EXPECT_TRUE(bitwise(gv.get(), v));
  }
}

TEST_F(AccumulateCopyZero, CudaMatchesCpu) {
  for (size_t n : sizes()) {
    SCOPED_TRACE(n);
    auto acc = randv(n, 20), g = randv(n, 21);
    Dev<float> gacc(acc), gg(g), gdst(n);
    cpu::accumulate(acc.data(), g.data(), n, 0.125f);
    ok(gpu::accumulate(gacc.p(), gg.p(), n, 0.125f, s));
    EXPECT_TRUE(bitwise(gacc.get(), acc)) << "accumulate";
    ok(gpu::copy(gdst.p(), gacc.p(), n, s));
    EXPECT_TRUE(bitwise(gdst.get(), acc)) << "copy";
    ok(gpu::zero(gdst.p(), n, s));
    EXPECT_TRUE(bitwise(gdst.get(), std::vector<float>(n, 0.0f))) << "zero";
  }
  Dev<double> d(std::vector<double>{1, 2, 3});
  ok(gpu::zero_bytes(d.p(), 3 * sizeof(double), s));
  EXPECT_EQ(d.get(), (std::vector<double>{0, 0, 0})) << "zero_bytes on doubles";
}

// (R, C) shapes of a weight
std::vector<std::pair<int, int>> weight_shapes() {
  return {{1, 1}, {22, 55}, {64, 64}, {65, 22}, {1000, 55}, {55, 1000}, {3, 1000}};
}

TEST_F(ColumnImportance, CudaMatchesCpu) {
  for (auto [R, C] : weight_shapes())
    for (bool l2 : {false, true}) {
      SCOPED_TRACE(std::to_string(R) + "x" + std::to_string(C) + (l2 ? " l2" : " l1"));
      auto g = randv((size_t)R * C, 22);
      std::vector<float> imp(C);
      cpu::column_importance(g.data(), R, C, l2, imp.data());
      Dev<float> gg(g), gimp(C);
      ok(gpu::column_importance(gg.p(), R, C, l2, gimp.p(), s));
      if (R <= 64)
        EXPECT_TRUE(bitwise(gimp.get(), imp));
      else
        EXPECT_TRUE(close(gimp.get(), imp, 0.0, 1e-5));  // sums of R positive terms, other order
    }
}

TEST_F(Topk, CudaMatchesCpu) {
  for (int C : {1, 22, 55, 64, 1000, 3000})
    for (int k : {1, 2, C / 3, C - 1, C}) {
      if (k < 1 || k > C) continue;
      SCOPED_TRACE("C " + std::to_string(C) + " k " + std::to_string(k));
      auto imp = randv(C, 23, 0.0f, 1.0f);
      for (int j = 0; j < C; j += 7) imp[j] = 0.5f;  // ties: the lower index wins
      if (C > 10) imp[3] = NAN, imp[9] = -INFINITY;  // NaN counts as smallest, ties with -inf
      std::vector<int32_t> sel(k);
      cpu::topk_columns(imp.data(), C, k, sel.data());
      Dev<float> gimp(imp);
      Dev<int32_t> gsel(k);
      ok(gpu::topk_columns(gimp.p(), C, k, gsel.p(), s));
      EXPECT_EQ(gsel.get(), sel);
    }
}

TEST_F(ColumnMovesAndSelectiveAdam, CudaMatchesCpu) {
  const AdamParams hp{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
  for (auto [R, C] : weight_shapes()) {
    const int k = std::max(1, C / 4);
    SCOPED_TRACE(std::to_string(R) + "x" + std::to_string(C) + " k " + std::to_string(k));
    auto w = randv((size_t)R * C, 24), in = randv((size_t)R * k, 25), grad = randv((size_t)R * C, 26),
         m = randv((size_t)R * k, 27, -0.1f, 0.1f), v = randv((size_t)R * k, 28, 0.0f, 0.01f);
    std::vector<int32_t> sel(k);
    cpu::topk_columns(randv(C, 29).data(), C, k, sel.data());
    Dev<int32_t> gs(sel);
    Dev<float> gw(w), gout((size_t)R * k), gin(in), gg(grad), gm(m), gv(v);
    std::vector<float> out((size_t)R * k);
    cpu::gather_columns(w.data(), R, C, sel.data(), k, out.data());
    ok(gpu::gather_columns(gw.p(), R, C, gs.p(), k, gout.p(), s));
    EXPECT_TRUE(bitwise(gout.get(), out)) << "gather";
    cpu::scatter_columns(in.data(), R, C, sel.data(), k, w.data());
    ok(gpu::scatter_columns(gin.p(), R, C, gs.p(), k, gw.p(), s));
    EXPECT_TRUE(bitwise(gw.get(), w)) << "scatter";
    cpu::selective_adam(w.data(), R, C, sel.data(), k, grad.data(), m.data(), v.data(), hp, 4);
    ok(gpu::selective_adam(gw.p(), R, C, gs.p(), k, gg.p(), gm.p(), gv.p(), hp, 4, s));
    EXPECT_TRUE(bitwise(gw.get(), w)) << "selective_adam w";
    EXPECT_TRUE(bitwise(gm.get(), m)) << "selective_adam m";
    EXPECT_TRUE(bitwise(gv.get(), v)) << "selective_adam v";
    // merges of slices (tile boundaries inside rows), with and without a selection
    const size_t n = (size_t)R * C;
    for (size_t off : {size_t(0), n / 3}) {
      const size_t len = std::max<size_t>(1, (n - off) / 2);
      auto src = randv(len, 30 + off);
      Dev<float> gsrc(src);
      for (bool with_sel : {false, true}) {
        cpu::merge_unselected(w.data(), C, src.data(), off, len, with_sel ? sel.data() : nullptr, with_sel ? k : 0);
        ok(gpu::merge_unselected(gw.p(), C, gsrc.p(), off, len, with_sel ? gs.p() : nullptr, with_sel ? k : 0, s));
        EXPECT_TRUE(bitwise(gw.get(), w)) << "merge off " << off << (with_sel ? " sel" : " all");
      }
    }
    double t = 0, sl = 0;
    cpu::grad_mass(w.data(), R, C, sel.data(), k, &t, &sl);
    Dev<double> mass(2);
    ok(gpu::grad_mass(gw.p(), R, C, gs.p(), k, mass.p(), s));
    auto gm2 = mass.get();
    EXPECT_NEAR(gm2[0], t, 1e-10 * t) << "grad_mass total";  // double sums of up to 55000 terms, other order
    EXPECT_NEAR(gm2[1], sl, 1e-10 * sl) << "grad_mass selected";
    ok(gpu::grad_mass(gw.p(), R, C, gs.p(), k, mass.p(), s));
    EXPECT_EQ(mass.get(), gm2) << "grad_mass is deterministic";
    // the weight stored (in, out) (Param::in_out): w, grad (C, R), m, v (k, R); the same elements
    // as the CPU kernels' in_out variants
    Dev<float> gwt(w), ggt(grad), gmt(m), gvt(v);
    cpu::selective_adam(w.data(), R, C, sel.data(), k, grad.data(), m.data(), v.data(), hp, 5, true);
    ok(gpu::selective_adam(gwt.p(), R, C, gs.p(), k, ggt.p(), gmt.p(), gvt.p(), hp, 5, s, true));
    EXPECT_TRUE(bitwise(gwt.get(), w)) << "selective_adam w, in_out";
    EXPECT_TRUE(bitwise(gmt.get(), m)) << "selective_adam m, in_out";
    EXPECT_TRUE(bitwise(gvt.get(), v)) << "selective_adam v, in_out";
    for (size_t off : {size_t(0), n / 3}) {
      const size_t len = std::max<size_t>(1, (n - off) / 2);
      auto src = randv(len, 40 + off);
      Dev<float> gsrc(src);
      cpu::merge_unselected(w.data(), C, src.data(), off, len, sel.data(), k, R);
      ok(gpu::merge_unselected(gwt.p(), C, gsrc.p(), off, len, gs.p(), k, s, R));
      EXPECT_TRUE(bitwise(gwt.get(), w)) << "merge, in_out, off " << off;
    }
    std::vector<float> impt(C);
    Dev<float> gimpt(C);
    cpu::column_importance(grad.data(), R, C, false, impt.data(), true);
    ok(gpu::column_importance(ggt.p(), R, C, false, gimpt.p(), s, true));
    if (R <= 64)
      EXPECT_TRUE(bitwise(gimpt.get(), impt)) << "importance, in_out";
    else
      EXPECT_TRUE(close(gimpt.get(), impt, 0.0, 1e-5)) << "importance, in_out";  // R positive terms, other order
    cpu::grad_mass(w.data(), R, C, sel.data(), k, &t, &sl, true);
    ok(gpu::grad_mass(gwt.p(), R, C, gs.p(), k, mass.p(), s, true));
    auto gm3 = mass.get();
    EXPECT_NEAR(gm3[0], t, 1e-10 * t) << "grad_mass total, in_out";
    EXPECT_NEAR(gm3[1], sl, 1e-10 * sl) << "grad_mass selected, in_out";
  }
}

// GPT shapes (B, T, C, V, NH)
struct GptShape {
  int B, T, C, V, NH;
};
std::vector<GptShape> gpt_shapes() { return {{1, 1, 1, 1, 1}, {2, 22, 64, 55, 4}, {3, 64, 55, 256, 5}, {1, 1000, 22, 64, 2}}; }

TEST_F(Embedding, CudaMatchesCpu) {
  for (auto [B, T, C, V, NH] : gpt_shapes()) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(C));
    auto tok = randi((size_t)B * T, 31, V);
    auto wte = randv((size_t)V * C, 32), wpe = randv((size_t)T * C, 33), dx = randv((size_t)B * T * C, 34);
    std::vector<float> x((size_t)B * T * C), dwte((size_t)V * C), dwpe((size_t)T * C);
    cpu::embedding_fwd(tok.data(), wte.data(), wpe.data(), x.data(), B, T, C);
    cpu::embedding_bwd(tok.data(), dx.data(), dwte.data(), dwpe.data(), B, T, C, V);
    Dev<int32_t> gt(tok);
    Dev<float> gwte(wte), gwpe(wpe), gx(x.size()), gdx(dx), gdwte(dwte.size()), gdwpe(dwpe.size());
    ok(gpu::embedding_fwd(gt.p(), gwte.p(), gwpe.p(), gx.p(), B, T, C, s));
    ok(gpu::embedding_bwd(gt.p(), gdx.p(), gdwte.p(), gdwpe.p(), B, T, C, V, s));
    EXPECT_TRUE(bitwise(gx.get(), x)) << "fwd";
    EXPECT_TRUE(bitwise(gdwte.get(), dwte)) << "bwd wte";
    EXPECT_TRUE(bitwise(gdwpe.get(), dwpe)) << "bwd wpe";
  }
}

// The generative classifier's kernels: the class embedding (bitwise: the CPU's order), the
// sequence log-likelihoods, masked cross-entropy and the generative classification loss.
TEST_F(Embedding, ClassEmbeddingCudaMatchesCpu) {
  for (auto [B, T, C, V, NH] : gpt_shapes()) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(C));
    const int K = 3;
    auto ids = randi((size_t)B, 35, K);
    auto x = randv((size_t)B * T * C, 36), table = randv((size_t)K * C, 37), dx = randv((size_t)B * T * C, 38);
    std::vector<float> dt((size_t)K * C);
    Dev<float> gx(x), gtab(table), gdx(dx), gdt(dt.size());
    Dev<int32_t> gi(ids);
    cpu::class_embedding_fwd(x.data(), table.data(), ids.data(), B, T, C);
    cpu::class_embedding_bwd(dx.data(), ids.data(), dt.data(), B, T, C, K);
    ok(gpu::class_embedding_fwd(gx.p(), gtab.p(), gi.p(), B, T, C, s));
    ok(gpu::class_embedding_bwd(gdx.p(), gi.p(), gdt.p(), B, T, C, K, s));
    EXPECT_TRUE(bitwise(gx.get(), x)) << "fwd";
    EXPECT_TRUE(bitwise(gdt.get(), dt)) << "bwd";
  }
}

TEST_F(SoftmaxXent, GenerativeLossesCudaMatchCpu) {
  const int K = 2, B = 3, T = 5, V = 256;
  auto z = randv((size_t)K * B * T * V, 39, -6.0f, 6.0f);
  auto y = randi((size_t)K * B * T, 40, V);
  for (int k = 0; k < K; ++k)  // the same targets under each class, the last two of chunk 2 padded
    for (int i = 0; i < B * T; ++i) y[(size_t)k * B * T + i] = i % T >= 3 && i / T == 2 ? -1 : y[(size_t)i];
  const std::vector<int32_t> labels = {1, 0, 1, 1, 0, 1};  // K*B rows: the first B are the true classes
  const std::vector<double> prior = {std::log(0.75), std::log(0.25)};
  // masked cross-entropy
  std::vector<float> p(z.size()), d(z.size());
  int64_t correct = 0, counted = 0;
  const double loss = cpu::softmax_xent_fwd(z.data(), y.data(), p.data(), K * B * T, V, &correct, &counted);
  Dev<float> gz(z), gp(z.size()), gd(z.size());
  Dev<int32_t> gy(y), gl(labels);
  Dev<double> st(3), gprior(prior), gseq((size_t)K * B);
  ok(gpu::softmax_xent_fwd(gz.p(), gy.p(), gp.p(), K * B * T, V, st.p(), false, s, true));
  auto stats = st.get();
  EXPECT_NEAR(stats[0], loss, 1e-5 * std::fabs(loss));
  EXPECT_EQ(stats[1], (double)correct);
  EXPECT_EQ(stats[2], (double)counted);
  // sequence log-likelihoods
  std::vector<double> seq((size_t)K * B);
  cpu::sequence_logprob(z.data(), y.data(), K * B, T, V, seq.data());
  ok(gpu::sequence_logprob(gz.p(), gy.p(), K * B, T, V, gseq.p(), s));
  auto gs = gseq.get();
  for (size_t i = 0; i < seq.size(); ++i) EXPECT_NEAR(gs[i], seq[i], 1e-5 * std::fabs(seq[i])) << i;
  // the generative classification loss
  const double ce = cpu::gen_class_loss(z.data(), y.data(), labels.data(), prior.data(), K, B, T, V, 1.0f, d.data(),
                                        &correct);
  ok(gpu::gen_class_loss(gz.p(), gy.p(), gl.p(), gprior.p(), K, B, T, V, 1.0f, gd.p(), st.p(), s));
  stats = st.get();
  EXPECT_NEAR(stats[0], ce, 1e-5 * std::fabs(ce));
  EXPECT_EQ(stats[1], (double)correct);
  EXPECT_EQ(stats[2], (double)B);
  EXPECT_TRUE(close(gd.get(), d, 1e-7, 1e-5)) << "dlogits";
}

TEST_F(LayerNorm, CudaMatchesCpu) {
  for (auto [N, C] : std::vector<std::pair<int, int>>{{1, 1}, {22, 55}, {64, 64}, {1000, 22}, {55, 1000}, {3, 768}}) {
    SCOPED_TRACE(std::to_string(N) + "x" + std::to_string(C));
    auto x = randv((size_t)N * C, 35, -2.0f, 3.0f), w = randv(C, 36, 0.5f, 1.5f), b = randv(C, 37),
         dy = randv((size_t)N * C, 38);
    std::vector<float> y(x.size()), mean(N), rstd(N), dx(x.size()), dw(C), db(C);
    cpu::layernorm_fwd(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, 1e-5f);
    cpu::layernorm_bwd(dy.data(), x.data(), mean.data(), rstd.data(), w.data(), dx.data(), dw.data(), db.data(), N, C);
    Dev<float> gx(x), gw(w), gb(b), gy(x.size()), gmean(N), grstd(N), gdy(dy), gdx(x.size()), gdw(C), gdb(C);
    ok(gpu::layernorm_fwd(gx.p(), gw.p(), gb.p(), gy.p(), gmean.p(), grstd.p(), N, C, 1e-5f, s));
    // the statistics' double sums run in another order: equal after rounding to float, or 1 ulp
    EXPECT_TRUE(close(gmean.get(), mean, 1e-7, 1e-6)) << "mean";
    EXPECT_TRUE(close(grstd.get(), rstd, 0.0, 1e-6)) << "rstd";
    EXPECT_TRUE(close(gy.get(), y, 1e-6, 1e-5)) << "y";
    // backward from the CPU's saved statistics
    Dev<float> cmean(mean), crstd(rstd);
    ok(gpu::layernorm_bwd(gdy.p(), gx.p(), cmean.p(), crstd.p(), gw.p(), gdx.p(), gdw.p(), gdb.p(), N, C, s));
    EXPECT_TRUE(close(gdx.get(), dx, 1e-5, 1e-4)) << "dx";  // mean(dy w) etc. in another order, cancellation
    if (N <= 64) {
      EXPECT_TRUE(bitwise(gdw.get(), dw)) << "dw";
      EXPECT_TRUE(bitwise(gdb.get(), db)) << "db";
    } else {
      EXPECT_TRUE(close(gdw.get(), dw, 1e-4, 1e-4)) << "dw";  // N terms in chunk order
      EXPECT_TRUE(close(gdb.get(), db, 1e-4, 1e-4)) << "db";
    }
  }
}

TEST_F(Attention, CudaMatchesCpu) {
  for (auto [B, T, C, V, NH] : std::vector<GptShape>{{1, 1, 1, 0, 1}, {2, 22, 64, 0, 4}, {3, 64, 55, 0, 5},
                                                     {1, 100, 32, 0, 2}}) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(C) + " nh " + std::to_string(NH));
    auto qkv = randv((size_t)B * T * 3 * C, 39, -2.0f, 2.0f), dout = randv((size_t)B * T * C, 40);
    std::vector<float> out((size_t)B * T * C), att((size_t)B * NH * T * T), dqkv(qkv.size()), scratch((size_t)T * T);
    cpu::attention_fwd(qkv.data(), out.data(), att.data(), B, T, C, NH);
    cpu::attention_bwd(dout.data(), qkv.data(), att.data(), dqkv.data(), scratch.data(), B, T, C, NH);
    Dev<float> gqkv(qkv), gout(out.size()), gatt(att.size()), gdout(dout), gdqkv(dqkv.size());
    ok(gpu::attention_fwd(gqkv.p(), gout.p(), gatt.p(), B, T, C, NH, h, s));
    EXPECT_TRUE(close(gatt.get(), att, 1e-6, 1e-5)) << "att";
    EXPECT_TRUE(residual(gout.get(), out, T)) << "out";
    Dev<float> catt(att);  // backward from the CPU's probabilities
    ok(gpu::attention_bwd(gdout.p(), gqkv.p(), catt.p(), gdqkv.p(), B, T, C, NH, h, s));
    EXPECT_TRUE(residual(gdqkv.get(), dqkv, 2 * T + C)) << "dqkv";
  }
}

TEST_F(Pooling, CudaMatchesCpu) {
  for (auto [B, T, C] : std::vector<std::array<int, 3>>{{1, 1, 1}, {22, 55, 64}, {3, 1000, 22}}) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(C));
    auto x = randv((size_t)B * T * C, 41), dy = randv((size_t)B * C, 42);
    auto len = randi(B, 43, T);
    for (auto& l : len) l += 1;  // [1, T]
    if (B == 22) x[(size_t)0 * C + 5] = x[(size_t)1 * C + 5] = 9.0f;  // a tie at t 0 and 1: the first wins
    std::vector<float> y((size_t)B * C), dx(x.size()), ymax(y.size()), dxmax(x.size()), ylast(y.size()),
        dxlast(x.size());
    cpu::mean_pool_fwd(x.data(), len.data(), y.data(), B, T, C);
    cpu::mean_pool_bwd(dy.data(), len.data(), dx.data(), B, T, C);
    cpu::max_pool_fwd(x.data(), len.data(), ymax.data(), B, T, C);
    cpu::max_pool_bwd(x.data(), dy.data(), len.data(), dxmax.data(), B, T, C);
    cpu::last_pool_fwd(x.data(), len.data(), ylast.data(), B, T, C);
    cpu::last_pool_bwd(dy.data(), len.data(), dxlast.data(), B, T, C);
    Dev<float> gx(x), gy(y.size()), gdy(dy), gdx(dx.size());
    Dev<int32_t> gl(len);
    ok(gpu::mean_pool_fwd(gx.p(), gl.p(), gy.p(), B, T, C, s));
    ok(gpu::mean_pool_bwd(gdy.p(), gl.p(), gdx.p(), B, T, C, s));
    EXPECT_TRUE(bitwise(gy.get(), y)) << "mean fwd";
    EXPECT_TRUE(bitwise(gdx.get(), dx)) << "mean bwd";
    ok(gpu::max_pool_fwd(gx.p(), gl.p(), gy.p(), B, T, C, s));
    ok(gpu::max_pool_bwd(gx.p(), gdy.p(), gl.p(), gdx.p(), B, T, C, s));
    EXPECT_TRUE(bitwise(gy.get(), ymax)) << "max fwd";
    EXPECT_TRUE(bitwise(gdx.get(), dxmax)) << "max bwd";
    ok(gpu::last_pool_fwd(gx.p(), gl.p(), gy.p(), B, T, C, s));
    ok(gpu::last_pool_bwd(gdy.p(), gl.p(), gdx.p(), B, T, C, s));
    EXPECT_TRUE(bitwise(gy.get(), ylast)) << "last fwd";
    EXPECT_TRUE(bitwise(gdx.get(), dxlast)) << "last bwd";
  }
}

TEST_F(Bf16, CudaBitwiseEqualsCpu) {
  for (size_t n : sizes()) {
    SCOPED_TRACE(n);
    // random bit patterns: every exponent, NaNs and infinities included
    Rng r(40 + n);
    std::vector<float> x(n);
    for (auto& v : x) {
      const uint32_t u = (uint32_t)r.below(uint64_t(1) << 32);
      std::memcpy(&v, &u, 4);
    }
    std::vector<uint16_t> h(n);
    cpu::pack_bf16(x.data(), h.data(), n);
    std::vector<float> back(n), rounded = x;
    cpu::unpack_bf16(h.data(), back.data(), n);
    cpu::round_bf16(rounded.data(), n);
    Dev<float> gx(x), gback(n), grounded(x);
    Dev<uint16_t> gh(n);
    ok(gpu::pack_bf16(gx.p(), gh.p(), n, s));
    EXPECT_EQ(gh.get(), h) << "pack";
    ok(gpu::unpack_bf16(gh.p(), gback.p(), n, s));
    EXPECT_TRUE(bitwise(gback.get(), back)) << "unpack";
    ok(gpu::round_bf16(grounded.p(), n, s));
    EXPECT_TRUE(bitwise(grounded.get(), rounded)) << "round";
  }
  // the merge from a bf16 source: a tile starting mid-row, with and without selected columns
  const int R = 7, C = 1000;
  const std::vector<int32_t> sel{2, 500, 999};
  auto w = randv((size_t)R * C, 41), src = randv(5003, 42);
  std::vector<uint16_t> packed(src.size());
  cpu::pack_bf16(src.data(), packed.data(), src.size());
  Dev<uint16_t> gsrc(packed);
  Dev<int32_t> gsel(sel);
  for (int k : {0, 3}) {
    std::vector<float> want = w;
    cpu::merge_unselected_bf16(want.data(), C, packed.data(), 1001, src.size(), sel.data(), k);
    Dev<float> gw(w);
    ok(gpu::merge_unselected_bf16(gw.p(), C, gsrc.p(), 1001, src.size(), gsel.p(), k, s));
    EXPECT_TRUE(bitwise(gw.get(), want)) << "merge k=" << k;
  }
}

TEST_F(Fp16, CudaBitwiseEqualsCpu) {
  for (size_t n : sizes()) {
    SCOPED_TRACE(n);
    // random bit patterns: every exponent (fp16 subnormals and overflows), NaNs and infinities
    Rng r(50 + n);
    std::vector<float> x(n);
    for (auto& v : x) {
      const uint32_t u = (uint32_t)r.below(uint64_t(1) << 32);
      std::memcpy(&v, &u, 4);
    }
    std::vector<uint16_t> h(n);
    cpu::pack_fp16(x.data(), h.data(), n);
    std::vector<float> back(n), rounded = x;
    cpu::unpack_fp16(h.data(), back.data(), n);
    const size_t bad = cpu::round_fp16(rounded.data(), n);
    Dev<float> gx(x), gback(n), grounded(x);
    Dev<uint16_t> gh(n);
    Dev<uint32_t> flag(std::vector<uint32_t>{0});
    ok(gpu::pack_fp16(gx.p(), gh.p(), n, s));
    EXPECT_EQ(gh.get(), h) << "pack";
    ok(gpu::unpack_fp16(gh.p(), gback.p(), n, s));
    EXPECT_TRUE(bitwise(gback.get(), back)) << "unpack";
    ok(gpu::round_fp16(grounded.p(), n, flag.p(), s));
    EXPECT_TRUE(bitwise(grounded.get(), rounded)) << "round";
    EXPECT_EQ(flag.get()[0], bad ? 1u : 0u) << "the overflow flag";
  }
  // the flag stays 0 on finite fp16 values and is raised by one overflow anywhere
  std::vector<float> fin(1000, 1.5f);
  Dev<float> gf(fin);
  Dev<uint32_t> flag(std::vector<uint32_t>{0});
  ok(gpu::round_fp16(gf.p(), fin.size(), flag.p(), s));
  EXPECT_EQ(flag.get()[0], 0u);
  fin[777] = 70000.0f;
  Dev<float> go(fin);
  ok(gpu::round_fp16(go.p(), fin.size(), flag.p(), s));
  EXPECT_EQ(flag.get()[0], 1u);
  ok(gpu::scale(go.p(), fin.size(), 0.5f, s));
  EXPECT_EQ(go.get()[0], 0.75f);
  // the merge from an fp16 source: a tile starting mid-row, with and without selected columns
  const int R = 7, C = 1000;
  const std::vector<int32_t> sel{2, 500, 999};
  auto w = randv((size_t)R * C, 51), src = randv(5003, 52);
  std::vector<uint16_t> packed(src.size());
  cpu::pack_fp16(src.data(), packed.data(), src.size());
  Dev<uint16_t> gsrc(packed);
  Dev<int32_t> gsel(sel);
  for (int k : {0, 3}) {
    std::vector<float> want = w;
    cpu::merge_unselected_fp16(want.data(), C, packed.data(), 1001, src.size(), sel.data(), k);
    Dev<float> gw(w);
    ok(gpu::merge_unselected_fp16(gw.p(), C, gsrc.p(), 1001, src.size(), gsel.p(), k, s));
    EXPECT_TRUE(bitwise(gw.get(), want)) << "merge k=" << k;
  }
}

#ifdef ZF_USE_NCCL
// NCCL is loaded at run time (kernels/cuda/allreduce.hpp); loading needs no GPU, so this test
// runs wherever libnccl.so.2 is on the loader's path (the CUDA 13 toolkit's lib/ is, here).
TEST(Nccl, LoadsAtRunTimeWithEverySymbol) {
  const char* err = nullptr;
  const NcclApi* nc = nccl_api(&err);
  if (!nc) GTEST_SKIP() << err;
  EXPECT_NE(nc->get_unique_id, nullptr);
  EXPECT_NE(nc->comm_init_rank, nullptr);
  EXPECT_NE(nc->comm_destroy, nullptr);
  EXPECT_NE(nc->all_reduce, nullptr);
  ASSERT_NE(nc->get_error_string, nullptr);
  EXPECT_STREQ(nc->get_error_string(ncclSuccess), "no error");
}
#endif

// ---- the engine on CUDA workers vs the same run on CPU workers

// ||a - b|| / ||b|| over all weights
double rel_norm_diff(const Weights& a, const Weights& b) {
  double d = 0, n = 0;
  for (auto& [k, v] : b) {
    auto it = a.find(k);
    if (it == a.end() || it->second.size() != v.size()) return INFINITY;
    for (size_t i = 0; i < v.size(); ++i) {
      const double e = (double)it->second[i] - v[i];
      d += e * e;
      n += (double)v[i] * v[i];
    }
  }
  return std::sqrt(d / std::max(n, 1e-300));
}

class CudaEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::cuda_devices() == 0)
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount sees none): the engine's CUDA workers are not run here";
  }
};

// Matmul rounding (cuBLAS vs OpenBLAS) is the only difference at step 1; AdamW turns it into
// differences of up to ~lr on weights whose gradient is near zero, hence the norm tolerance.
constexpr double kEngineTol = 2e-3;

TEST_F(CudaEngine, MlpStepsOnCudaWorkersMatchCpuWorkers) {
  // ZF_FASHION_MNIST_DIR: a copy of the data where the Debian package is not installed
  // (tools/device-check.sh carries a 2048 + 500 example subset to GPU machines).
  const char* dir = std::getenv("ZF_FASHION_MNIST_DIR");
  const std::string data_dir = dir ? dir : Spec().data.dir;
  if (!std::filesystem::exists(data_dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST in " << data_dir << " (install dataset-fashion-mnist or set ZF_FASHION_MNIST_DIR)";
  for (const char* strategy : {"device-adam", "zero-offload", "zero-offload-dpu", "zenflow"}) {
    SCOPED_TRACE(strategy);
    Spec s = tiny_spec(4, strategy);
    s.data.dir = data_dir;
    if (std::string(strategy) == "zenflow") {
      s.zenflow.update_interval = 2;
      s.zenflow.overlap_step = true;
      s.zenflow.given = true;
    }
    s.runtime.cuda_workers = -1;
    nlohmann::json ref_metrics;
    const Weights ref = train_and_capture(s, &ref_metrics);
    EXPECT_EQ(ref_metrics["prefetches"].get<int64_t>(), 0) << "no prefetch without CUDA workers";
    s.runtime.cuda_workers = 1;
    nlohmann::json metrics;
    const Weights got = train_and_capture(s, &metrics);
    EXPECT_LT(rel_norm_diff(got, ref), kEngineTol);
    // every host result that crosses back is prefetched to the GPU when written
    if (std::string(strategy) != "device-adam") {
      EXPECT_GT(metrics["prefetches"].get<int64_t>(), 0);
    }
  }
}

TEST_F(CudaEngine, Bf16StepsOnCudaWorkersMatchCpuWorkers) {
  const char* dir = std::getenv("ZF_FASHION_MNIST_DIR");
  const std::string data_dir = dir ? dir : Spec().data.dir;
  if (!std::filesystem::exists(data_dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST in " << data_dir << " (install dataset-fashion-mnist or set ZF_FASHION_MNIST_DIR)";
  for (const char* strategy : {"device-adam", "zero-offload", "zenflow"}) {
    SCOPED_TRACE(strategy);
    Spec s = tiny_spec(4, strategy);
    s.data.dir = data_dir;
    s.precision = "bf16";
    s.runtime.cuda_workers = -1;
    const Weights ref = train_and_capture(s);
    s.runtime.cuda_workers = 1;
    const Weights got = train_and_capture(s);
    // bf16 rounding can turn a last-bit matmul difference into one bf16 ulp (2^-8 relative) on a
    // few weights, hence a tolerance above kEngineTol's
    EXPECT_LT(rel_norm_diff(got, ref), 1e-2);
    for (auto& [name, v] : got)
      for (float x : v) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        ASSERT_EQ(u & 0xffffu, 0u) << name << ": a device parameter that is not a bf16 value";
      }
  }
}

TEST_F(CudaEngine, GptStepsOnCudaWorkersMatchCpuWorkers) {
  std::string text;
  Rng r(5);
  const char* words[] = {"in", "the", "beginning", "God", "created", "heaven", "and", "earth."};
  while (text.size() < 4000) text += std::string(words[r.below(8)]) + (r.below(7) ? " " : "\n");
  const std::string path = (std::filesystem::temp_directory_path() / ("zf_cuda_text_" + std::to_string(getpid()))).string();
  std::ofstream(path, std::ios::binary) << text;
  Spec s;
  s.source = "tiny-gpt-cuda";
  s.model.type = "gpt";
  s.model.n_layer = 2;
  s.model.n_head = 2;
  s.model.n_embd = 32;
  s.model.context = 16;
  s.data.dataset = "text";
  s.data.path = path;
  s.data.split = "verse";
  s.train.batch_size = 4;
  s.train.eval_batch_size = 4;
  s.train.steps = 3;
  s.optimizer.lr = 1e-3;
  s.log.every = 0;
  s.log.warmup_steps = 0;
  for (const char* strategy : {"device-adam", "zenflow"}) {
    SCOPED_TRACE(strategy);
    s.strategy = strategy;
    s.runtime.cuda_workers = -1;
    const Weights ref = train_and_capture(s);
    s.runtime.cuda_workers = 1;
    const Weights got = train_and_capture(s);
    EXPECT_LT(rel_norm_diff(got, ref), kEngineTol);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace zf::test
