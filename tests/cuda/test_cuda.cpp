// The GPU path (built with -DZF_ENABLE_CUDA=ON; docs/gpu.md), ggml's test-backend-ops pattern:
// every CUDA kernel (codelets/kernels/cuda) against the CPU kernel on the same inputs, sizes
// 1, 22, 55, 64, 1000 (and 2^20 elementwise unless ZF_QUICK). Bitwise where kernels.hpp says
// so; elementwise |x - ref| <= atol + rtol |ref| otherwise; matmul-like results by a
// norm-scaled residual (Chameleon's ||x - ref|| / (||ref|| K eps) < 10). Here the MLP's and
// ZenFlow's kernels; GPT's: test_cuda_gpt.cpp; bf16/fp16: test_cuda_precision.cpp; the engine on
// CUDA workers: test_cuda_engine.cpp. Every test is skipped, with a message, where
// cudaGetDeviceCount sees no GPU.
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
#include "models/rng.hpp"
#include "test_helpers.hpp"
#include "tests/cuda/cuda_helpers.hpp"
namespace zf::test {
namespace {
using cpu::AdamParams;

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

// The master variant (precision bf16/fp16, semantics zenflow): a filling step then a plain one,
// both layouts; w, the master, m and v bitwise the CPU kernel's.
TEST_F(ColumnMovesAndSelectiveAdam, MasterVariantCudaMatchesCpu) {
  const AdamParams hp{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
  for (bool in_out : {false, true})
    for (auto [R, C] : weight_shapes()) {
      const int k = std::max(1, C / 4);
      SCOPED_TRACE(std::to_string(R) + "x" + std::to_string(C) + " k " + std::to_string(k) + " in_out " +
                   std::to_string(in_out));
      auto w = randv((size_t)R * C, 64), grad = randv((size_t)R * C, 66), x = randv((size_t)R * k, 65),
           m = randv((size_t)R * k, 67, -0.1f, 0.1f), v = randv((size_t)R * k, 68, 0.0f, 0.01f);
      std::vector<int32_t> sel(k);
      cpu::topk_columns(randv(C, 69).data(), C, k, sel.data());
      Dev<int32_t> gs(sel);
      Dev<float> gw(w), gg(grad), gx(x), gm(m), gv(v);
      for (int64_t step : {1, 2}) {
        cpu::selective_adam_master(w.data(), R, C, sel.data(), k, grad.data(), x.data(), step == 1, m.data(),
                                   v.data(), hp, step, in_out);
        ok(gpu::selective_adam_master(gw.p(), R, C, gs.p(), k, gg.p(), gx.p(), step == 1, gm.p(), gv.p(), hp, step,
                                      s, in_out));
        EXPECT_TRUE(bitwise(gw.get(), w)) << "w, step " << step;
        EXPECT_TRUE(bitwise(gx.get(), x)) << "master, step " << step;
        EXPECT_TRUE(bitwise(gm.get(), m)) << "m, step " << step;
        EXPECT_TRUE(bitwise(gv.get(), v)) << "v, step " << step;
      }
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

}  // namespace
}  // namespace zf::test
