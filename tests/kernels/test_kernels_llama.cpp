// The Llama family's kernels (codelets/kernels/cpu/llama.cpp, SwiGLU in elementwise.cpp, grouped-
// query attention in attention.cpp; docs/llama.md):
// 1. the double reference's backward (tests/reference/llama_ref.hpp) against central finite
//    differences, h = 1e-6, of L = sum(Y * R) with random R (as test_kernels_gpt.cpp);
// 2. each float kernel, forward and backward, against the reference on the same float inputs
//    (norm-scaled residual max|x - ref| / (scale * eps) < 10, scale = the operands' magnitude
//    times the reduction length along the path), the llama3 inverse frequencies against values
//    computed independently from Hugging Face's formula;
// 3. every kernel bitwise the same with helper threads taking its tiles as on its caller alone
//    (runtime/parallel.hpp: results independent of the number of device cores).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/parallel.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#include "tests/reference/llama_ref.hpp"

namespace {

namespace cpu = zf::kernels::cpu;
namespace ref = zf::ref;
using namespace zf::test;
using FVec = std::vector<float>;

Vec widen(const FVec& a) { return Vec(a.begin(), a.end()); }

::testing::AssertionResult residual_ok(const FVec& x, const Vec& r, double scale, const char* what) {
  if (x.size() != r.size()) return ::testing::AssertionFailure() << what << ": size mismatch";
  double diff = 0.0;
  for (size_t i = 0; i < x.size(); ++i) diff = std::max(diff, std::fabs((double)x[i] - r[i]));
  const double res = diff / (std::max(scale, 1e-30) * FLT_EPSILON);
  if (res < kResidualMax) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": norm-scaled residual " << res << " (max diff " << diff << ")";
}

ref::RopeRef ref_params(const cpu::RopeParams& p) {
  return {p.theta, p.llama3, p.factor, p.low_freq_factor, p.high_freq_factor, p.original_max_position_embeddings};
}

// llama3 scaling whose three regimes all occur at small head sizes: wavelengths 2 pi theta^(2i/hs)
// from 6.3 up, bounds 16 / 4 = 4 and 16 / 1 = 16.
cpu::RopeParams small_llama3() {
  cpu::RopeParams p;
  p.theta = 100.0;
  p.llama3 = true;
  p.factor = 8.0;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  p.original_max_position_embeddings = 16.0;
  return p;
}

// ------------------------------------------------------------------ reference gradient checks

TEST(LlamaGradCheck, RmsNorm) {
  const int N = 5, C = 7;
  Vec x = widen(uniform_f((size_t)N * C, -2, 2, 1)), w = widen(uniform_f(C, 0.5f, 1.5f, 2));
  Vec r = widen(uniform_f((size_t)N * C, -1, 1, 3));
  auto loss = [&] {
    Vec y(x.size()), s(N);
    ref::rmsnorm_fwd(x.data(), w.data(), y.data(), s.data(), N, C, 1e-5);
    return dot_loss(y, r);
  };
  Vec y(x.size()), s(N), dx(x.size()), dw(C);
  ref::rmsnorm_fwd(x.data(), w.data(), y.data(), s.data(), N, C, 1e-5);
  ref::rmsnorm_bwd(r.data(), x.data(), s.data(), w.data(), dx.data(), dw.data(), N, C);
  EXPECT_TRUE(gradcheck(loss, x, dx, "dx"));
  EXPECT_TRUE(gradcheck(loss, w, dw, "dw"));
}

TEST(LlamaGradCheck, Rope) {
  const int B = 2, T = 3, NH = 2, hs = 8, pos0 = 5;
  for (bool llama3 : {false, true}) {
    SCOPED_TRACE(llama3 ? "llama3" : "default");
    cpu::RopeParams p = llama3 ? small_llama3() : cpu::RopeParams{};
    const auto f = ref::rope_inv_freq(ref_params(p), hs);
    Vec x = widen(uniform_f((size_t)B * T * NH * hs, -1, 1, 10)), r = widen(uniform_f(x.size(), -1, 1, 11));
    auto loss = [&] {
      Vec y(x.size());
      ref::rope_fwd(x.data(), y.data(), f, B, T, NH, hs, pos0);
      return dot_loss(y, r);
    };
    Vec dx(x.size());
    ref::rope_bwd(r.data(), dx.data(), f, B, T, NH, hs, pos0);
    EXPECT_TRUE(gradcheck(loss, x, dx, "dx"));
  }
}

TEST(LlamaGradCheck, SwiGlu) {
  const size_t n = 64;
  Vec g = widen(uniform_f(n, -6, 6, 20)), u = widen(uniform_f(n, -2, 2, 21)), r = widen(uniform_f(n, -1, 1, 22));
  g[0] = 0.0;
  auto loss = [&] {
    Vec y(n);
    ref::swiglu_fwd(g.data(), u.data(), y.data(), n);
    return dot_loss(y, r);
  };
  Vec dg(n), du(n);
  ref::swiglu_bwd(g.data(), u.data(), r.data(), dg.data(), du.data(), n);
  EXPECT_TRUE(gradcheck(loss, g, dg, "dgate"));
  EXPECT_TRUE(gradcheck(loss, u, du, "dup"));
}

TEST(LlamaGradCheck, GqaAttention) {
  for (auto [B, T, H, Hkv, hs] : {std::tuple{1, 1, 1, 1, 2}, std::tuple{2, 5, 4, 2, 3}, std::tuple{1, 6, 6, 2, 2},
                                  std::tuple{2, 4, 4, 1, 2}, std::tuple{1, 5, 3, 3, 2}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
                 " Hkv=" + std::to_string(Hkv) + " hs=" + std::to_string(hs));
    const size_t nq = (size_t)B * T * H * hs, nkv = (size_t)B * T * Hkv * hs;
    Vec q = widen(uniform_f(nq, -1.5f, 1.5f, 30 + T)), k = widen(uniform_f(nkv, -1.5f, 1.5f, 31 + T));
    Vec v = widen(uniform_f(nkv, -1.5f, 1.5f, 32 + T)), r = widen(uniform_f(nq, -1, 1, 33 + T));
    Vec att((size_t)B * H * T * T);
    auto loss = [&] {
      Vec out(nq), a(att.size());
      ref::gqa_attention_fwd(q.data(), k.data(), v.data(), out.data(), a.data(), B, T, H, Hkv, hs);
      return dot_loss(out, r);
    };
    Vec out(nq), dq(nq), dk(nkv), dv(nkv);
    ref::gqa_attention_fwd(q.data(), k.data(), v.data(), out.data(), att.data(), B, T, H, Hkv, hs);
    ref::gqa_attention_bwd(r.data(), q.data(), k.data(), v.data(), att.data(), dq.data(), dk.data(), dv.data(), B, T,
                           H, Hkv, hs);
    EXPECT_TRUE(gradcheck(loss, q, dq, "dq"));
    EXPECT_TRUE(gradcheck(loss, k, dk, "dk"));
    EXPECT_TRUE(gradcheck(loss, v, dv, "dv"));
  }
}

// ------------------------------------------------------------------ float kernels vs reference

TEST(LlamaKernels, RmsNormMatchesReference) {
  // the last two cut into row tiles (16384 elements each) whose dw partials are added after
  for (auto [N, C] : {std::pair{1, 1}, std::pair{22, 55}, std::pair{64, 64}, std::pair{5, 1000}, std::pair{1000, 22},
                      std::pair{300, 128}}) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    FVec x = uniform_f((size_t)N * C, -3, 3, 40), w = uniform_f(C, 0.5f, 1.5f, 41), dy = uniform_f(x.size(), -1, 1, 42);
    FVec y(x.size()), s(N), dx(x.size()), dw(C);
    cpu::rmsnorm_fwd(x.data(), w.data(), y.data(), s.data(), N, C, 1e-6f);
    cpu::rmsnorm_bwd(dy.data(), x.data(), s.data(), w.data(), dx.data(), dw.data(), N, C);
    Vec xd = widen(x), wd = widen(w), dyd = widen(dy), yr(x.size()), sr(N), dxr(x.size()), dwr(C);
    ref::rmsnorm_fwd(xd.data(), wd.data(), yr.data(), sr.data(), N, C, 1e-6);
    ref::rmsnorm_bwd(dyd.data(), xd.data(), sr.data(), wd.data(), dxr.data(), dwr.data(), N, C);
    const double rs = max_abs(sr);  // |x| rstd <= sqrt(C)
    EXPECT_TRUE(residual_ok(s, sr, rs * 4, "rstd"));
    EXPECT_TRUE(residual_ok(y, yr, 1.5 * 3 * rs * 4, "y"));
    EXPECT_TRUE(residual_ok(dx, dxr, 1.5 * rs * 3 * rs * (C + 4), "dx"));
    EXPECT_TRUE(residual_ok(dw, dwr, 3 * rs * 3 * N, "dw"));
  }
}

// The inverse frequencies against values computed apart from both (Python's float arithmetic on
// HF's formula, theta 500000, head size 128, factor 8, low 1, high 4, original context 8192: Llama
// 3.1's), then the kernel's tables against the reference's cos and sin, rounded once.
TEST(LlamaKernels, RopeInvFreqAndTables) {
  cpu::RopeParams p;
  p.theta = 500000.0;
  p.llama3 = true;
  p.original_max_position_embeddings = 8192.0;
  std::vector<double> f(64);
  cpu::rope_inv_freq(p, 128, f.data());
  const std::pair<int, double> known[] = {{0, 1.0},                      // high frequency: kept
                                          {28, 0.0032114459947525913},   // the last one kept
                                          {29, 0.002166570763503359},    // interpolated
                                          {32, 0.0005248461609929547},   // interpolated
                                          {35, 9.556212353964683e-05},   // low frequency: / factor
                                          {63, 3.068925988914511e-07}};
  for (auto [i, want] : known) EXPECT_NEAR(f[i], want, 1e-14 * want) << "inv_freq[" << i << "]";
  p.llama3 = false;
  cpu::rope_inv_freq(p, 128, f.data());
  EXPECT_NEAR(f[35], 0.0007644969883171747, 1e-14 * 0.0007644969883171747) << "without rope_scaling";

  for (const cpu::RopeParams& q : {cpu::RopeParams{}, small_llama3(), p}) {
    for (int hs : {2, 8, 128}) {
      const int Tmax = 300, d = hs / 2;
      FVec table((size_t)2 * Tmax * d);
      cpu::rope_table(q, Tmax, hs, table.data());
      const auto fr = ref::rope_inv_freq(ref_params(q), hs);
      for (int t = 0; t < Tmax; ++t)
        for (int i = 0; i < d; ++i) {  // the same double angle, rounded once: equal
          ASSERT_EQ(table[(size_t)t * d + i], (float)std::cos(t * fr[i])) << "cos t=" << t << " i=" << i;
          ASSERT_EQ(table[(size_t)Tmax * d + (size_t)t * d + i], (float)std::sin(t * fr[i])) << "sin";
        }
    }
  }
}

TEST(LlamaKernels, RopeMatchesReference) {
  for (auto [B, T, NH, hs, pos0] : {std::tuple{1, 1, 1, 2, 0}, std::tuple{2, 22, 3, 8, 0}, std::tuple{2, 7, 4, 64, 9},
                                    std::tuple{1, 300, 2, 128, 0}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                 " hs=" + std::to_string(hs) + " pos0=" + std::to_string(pos0));
    for (const cpu::RopeParams& p : {cpu::RopeParams{}, small_llama3()}) {
      const int Tmax = pos0 + T + 3, d = hs / 2;
      FVec table((size_t)2 * Tmax * d);
      cpu::rope_table(p, Tmax, hs, table.data());
      const float* cs = table.data();
      const float* sn = cs + (size_t)Tmax * d;
      FVec x = uniform_f((size_t)B * T * NH * hs, -2, 2, 50 + T), dy = uniform_f(x.size(), -1, 1, 51 + T);
      FVec y = x, dx = dy;
      cpu::rope_fwd(y.data(), cs, sn, B, T, NH, hs, pos0);
      cpu::rope_bwd(dx.data(), cs, sn, B, T, NH, hs, pos0);
      const auto f = ref::rope_inv_freq(ref_params(p), hs);
      Vec xd = widen(x), dyd = widen(dy), yr(x.size()), dxr(x.size());
      ref::rope_fwd(xd.data(), yr.data(), f, B, T, NH, hs, pos0);
      ref::rope_bwd(dyd.data(), dxr.data(), f, B, T, NH, hs, pos0);
      // two products of a value and a table entry (each rounded once), one sum
      EXPECT_TRUE(residual_ok(y, yr, 2 * 2.0 * 2, "y"));
      EXPECT_TRUE(residual_ok(dx, dxr, 2 * 1.0 * 2, "dx"));
    }
  }
}

TEST(LlamaKernels, SwiGluMatchesReference) {
  for (size_t n : elementwise_sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    FVec g = uniform_f(n, -12, 12, 60), u = uniform_f(n, -2, 2, 61), dy = uniform_f(n, -1, 1, 62);
    FVec y(n), dg(n), du(n);
    cpu::swiglu_fwd(g.data(), u.data(), y.data(), n);
    cpu::swiglu_bwd(g.data(), u.data(), dy.data(), dg.data(), du.data(), n);
    Vec gd = widen(g), ud = widen(u), dyd = widen(dy), yr(n), dgr(n), dur(n);
    ref::swiglu_fwd(gd.data(), ud.data(), yr.data(), n);
    ref::swiglu_bwd(gd.data(), ud.data(), dyd.data(), dgr.data(), dur.data(), n);
    // exp_poly's relative error (~1e-7) plus a few roundings, well inside the default rtol 1e-5
    EXPECT_TRUE(elementwise_close(y.data(), yr.data(), n)) << "out";
    EXPECT_TRUE(elementwise_close(dg.data(), dgr.data(), n)) << "dgate";
    EXPECT_TRUE(elementwise_close(du.data(), dur.data(), n)) << "dup";
  }
}

struct Gqa {
  int B, T, H, Hkv, hs;
  FVec q, k, v, dout, out, lse, dq, dk, dv;
  Gqa(int B_, int T_, int H_, int Hkv_, int hs_, uint32_t seed) : B(B_), T(T_), H(H_), Hkv(Hkv_), hs(hs_) {
    const size_t nq = (size_t)B * T * H * hs, nkv = (size_t)B * T * Hkv * hs;
    q = uniform_f(nq, -1, 1, seed), k = uniform_f(nkv, -1, 1, seed + 1), v = uniform_f(nkv, -1, 1, seed + 2);
    dout = uniform_f(nq, -1, 1, seed + 3);
    out.assign(nq, 0.0f), dq.assign(nq, 0.0f), dk.assign(nkv, 0.0f), dv.assign(nkv, 0.0f);
    lse.assign((size_t)B * H * T, 0.0f);
  }
  void run() {
    cpu::gqa_attention_fwd(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, H, Hkv, hs);
    cpu::gqa_attention_bwd(dout.data(), q.data(), k.data(), v.data(), lse.data(), dq.data(), dk.data(), dv.data(), B,
                           T, H, Hkv, hs);
  }
};

TEST(LlamaKernels, GqaAttentionMatchesReference) {
  zf::blas_single_thread();
  for (auto [B, T, H, Hkv, hs] : {std::tuple{1, 1, 1, 1, 4}, std::tuple{2, 7, 4, 2, 3}, std::tuple{2, 22, 8, 2, 8},
                                  std::tuple{1, 64, 2, 2, 32}, std::tuple{1, 65, 4, 1, 8},
                                  std::tuple{2, 150, 6, 3, 16},
                                  // two KV heads a tile (kernels/cpu/attention.cpp's kv_per_tile at
                                  // this T and hs): tiles of 2 and 1 KV heads per sequence
                                  std::tuple{2, 300, 6, 3, 512}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
                 " Hkv=" + std::to_string(Hkv) + " hs=" + std::to_string(hs));
    Gqa g(B, T, H, Hkv, hs, 70 + T);
    g.run();
    Vec q = widen(g.q), k = widen(g.k), v = widen(g.v), d = widen(g.dout);
    Vec outr(g.out.size()), attr((size_t)B * H * T * T), lser(g.lse.size()), dqr(g.dq.size()), dkr(g.dk.size()),
        dvr(g.dv.size());
    ref::gqa_attention_fwd(q.data(), k.data(), v.data(), outr.data(), attr.data(), B, T, H, Hkv, hs, lser.data());
    ref::gqa_attention_bwd(d.data(), q.data(), k.data(), v.data(), attr.data(), dqr.data(), dkr.data(), dvr.data(), B,
                           T, H, Hkv, hs);
    const int G = H / Hkv;
    // as the GPT's attention (scores: hs products, log-sum-exp: T terms, outputs: T more; the
    // backward's probabilities recomputed from the scores and lse); dk and dv add G heads'
    // contributions, each as large as one head's
    EXPECT_TRUE(residual_ok(g.lse, lser, (double)(hs + T), "lse"));
    EXPECT_TRUE(residual_ok(g.out, outr, (double)(hs + 2 * T), "out"));
    EXPECT_TRUE(residual_ok(g.dq, dqr, (double)(2 * hs + 3 * T), "dq"));
    EXPECT_TRUE(residual_ok(g.dk, dkr, (double)G * (2 * hs + 3 * T), "dk"));
    EXPECT_TRUE(residual_ok(g.dv, dvr, (double)G * (2 * hs + 3 * T), "dv"));
  }
}

// With as many KV heads as query heads, GQA is the GPT's attention on q, k, v held apart: the same
// values, within the rounding of products summed in another order (below).
TEST(LlamaKernels, GqaWithoutGroupingIsTheGptAttention) {
  zf::blas_single_thread();
  const int B = 2, T = 70, H = 4, hs = 8, C = H * hs;
  Gqa g(B, T, H, H, hs, 80);
  g.run();
  FVec qkv((size_t)B * T * 3 * C), dqkv(qkv.size()), out(g.out.size()), lse(g.lse.size());
  for (size_t r = 0; r < (size_t)B * T; ++r)
    for (int c = 0; c < C; ++c) {
      qkv[r * 3 * C + c] = g.q[r * C + c];
      qkv[r * 3 * C + C + c] = g.k[r * C + c];
      qkv[r * 3 * C + 2 * C + c] = g.v[r * C + c];
    }
  cpu::attention_fwd(qkv.data(), out.data(), lse.data(), B, T, C, H);
  cpu::attention_bwd(g.dout.data(), qkv.data(), lse.data(), dqkv.data(), B, T, C, H);
  // Not bitwise: the GPT's products run on dense per-head copies (oneDNN's brgemm), the
  // grouped-query ones on strided views (gemm:jit), so their sums of hs or T terms are ordered
  // differently. Within fp32 rounding of those sums: a relative L2 of a few 1e-8 here, 1e-6 a bound
  // that a wrong head or mask (errors of order 1) cannot meet.
  EXPECT_LT(rel_l2(out, g.out), 1e-6) << "out";
  EXPECT_LT(rel_l2(lse, g.lse), 1e-6) << "lse";
  FVec dq(g.dq.size()), dk(g.dk.size()), dv(g.dv.size());
  for (size_t r = 0; r < (size_t)B * T; ++r)
    for (int c = 0; c < C; ++c) {
      dq[r * C + c] = dqkv[r * 3 * C + c];
      dk[r * C + c] = dqkv[r * 3 * C + C + c];
      dv[r * C + c] = dqkv[r * 3 * C + 2 * C + c];
    }
  EXPECT_LT(rel_l2(dq, g.dq), 1e-6) << "dq";
  EXPECT_LT(rel_l2(dk, g.dk), 1e-6) << "dk";
  EXPECT_LT(rel_l2(dv, g.dv), 1e-6) << "dv";
}

TEST(LlamaKernels, RopeParamsProblemsNameTheField) {
  EXPECT_STREQ(cpu::rope_params_problem(cpu::RopeParams{}), "");
  EXPECT_STREQ(cpu::rope_params_problem(small_llama3()), "");
  auto problem = [](auto change) {
    cpu::RopeParams p = small_llama3();
    change(p);
    return std::string(cpu::rope_params_problem(p));
  };
  EXPECT_NE(problem([](cpu::RopeParams& p) { p.theta = 0; }).find("rope_theta"), std::string::npos);
  EXPECT_NE(problem([](cpu::RopeParams& p) { p.factor = -1; }).find("rope_scaling.factor"), std::string::npos);
  EXPECT_NE(problem([](cpu::RopeParams& p) { p.low_freq_factor = 0; }).find("low_freq_factor"), std::string::npos);
  EXPECT_NE(problem([](cpu::RopeParams& p) { p.high_freq_factor = 1; }).find("high_freq_factor"), std::string::npos);
  EXPECT_NE(problem([](cpu::RopeParams& p) { p.original_max_position_embeddings = 0; })
                .find("original_max_position_embeddings"),
            std::string::npos);
  EXPECT_NE(problem([](cpu::RopeParams& p) { p.theta = NAN; }).find("rope_theta"), std::string::npos);
}

// ------------------------------------------------------------------ independent of the core count

// Two helper threads take tiles of every kernel call (as idle StarPU workers do, parallel.hpp);
// each kernel's results must be the bits of the same call on its caller alone. Shapes with many
// tiles: RMSNorm and the rotary embedding in row tiles, SwiGLU in chunks, the attentions (the
// Llama's grouped-query one, groups of 3; the GPT's in fp32 and bf16) in sequence tiles of three
// 64-row blocks (T 130), whose scratch is each thread's own. A call is repeated
// until helpers did take some of its tiles (parallel_stats), at most kTries times.
class Helpers {
 public:
  explicit Helpers(int n) {
    zf::set_parallel_helpers(n);
    for (int i = 0; i < n; ++i)
      threads_.emplace_back([this] {
        while (!stop_.load())
          if (!zf::parallel_help()) std::this_thread::yield();
      });
  }
  ~Helpers() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
    zf::set_parallel_helpers(0);
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

struct Case {
  const char* name;
  std::function<std::vector<FVec>()> run;
};

// One case per kernel call, so that the helpers' tiles are counted for that call; the backward
// calls start from the forward results computed alone.
std::vector<Case> cases() {
  const int N = 2048, C = 256;  // RMSNorm: 32 row tiles of 64 rows; rotary: as many, 16 heads of 16
  auto x = std::make_shared<FVec>(uniform_f((size_t)N * C, -3, 3, 90));
  auto w = std::make_shared<FVec>(uniform_f(C, 0.5f, 1.5f, 91));
  auto dy = std::make_shared<FVec>(uniform_f(x->size(), -1, 1, 92));
  auto rs = std::make_shared<FVec>(N), y = std::make_shared<FVec>(x->size());
  cpu::rmsnorm_fwd(x->data(), w->data(), y->data(), rs->data(), N, C, 1e-5f);
  auto lm = std::make_shared<FVec>(N), ls = std::make_shared<FVec>(N);
  cpu::layernorm_fwd(x->data(), w->data(), dy->data(), y->data(), lm->data(), ls->data(), N, C, 1e-5f);
  const int B = 8, T = 256, NH = 16, hs = 16;
  auto table = std::make_shared<FVec>((size_t)2 * T * hs / 2);
  cpu::rope_table(small_llama3(), T, hs, table->data());
  const size_t n = 15 * 32768 + 7;  // SwiGLU: 15 chunks
  auto g = std::make_shared<FVec>(uniform_f(n, -8, 8, 93)), u = std::make_shared<FVec>(uniform_f(n, -2, 2, 94));
  auto d = std::make_shared<FVec>(uniform_f(n, -1, 1, 95));
  auto a = std::make_shared<Gqa>(4, 130, 6, 2, 16, 96);  // 4 sequence tiles of 3 row blocks
  a->run();
  const int Bg = 4, Tg = 130, Cg = 64, Hg = 4;  // the GPT's attention on a fused qkv
  auto qkv = std::make_shared<FVec>(uniform_f((size_t)Bg * Tg * 3 * Cg, -1, 1, 97));
  auto gd = std::make_shared<FVec>(uniform_f((size_t)Bg * Tg * Cg, -1, 1, 98));
  auto glse = std::make_shared<FVec>((size_t)Bg * Hg * Tg), glse16 = std::make_shared<FVec>(glse->size());
  {
    FVec o((size_t)Bg * Tg * Cg);
    cpu::attention_fwd(qkv->data(), o.data(), glse->data(), Bg, Tg, Cg, Hg);
    cpu::attention_fwd(qkv->data(), o.data(), glse16->data(), Bg, Tg, Cg, Hg, true);
  }
  auto gpt_fwd = [=](bool bf16) {
    FVec o((size_t)Bg * Tg * Cg), l(glse->size());
    cpu::attention_fwd(qkv->data(), o.data(), l.data(), Bg, Tg, Cg, Hg, bf16);
    return std::vector<FVec>{o, l};
  };
  auto gpt_bwd = [=](bool bf16) {
    FVec dqkv(qkv->size());
    cpu::attention_bwd(gd->data(), qkv->data(), (bf16 ? glse16 : glse)->data(), dqkv.data(), Bg, Tg, Cg, Hg, bf16);
    return std::vector<FVec>{dqkv};
  };
  return {
      {"rmsnorm_fwd",
       [=] {
         FVec yy(x->size()), s(N);
         cpu::rmsnorm_fwd(x->data(), w->data(), yy.data(), s.data(), N, C, 1e-5f);
         return std::vector<FVec>{yy, s};
       }},
      {"rmsnorm_bwd",
       [=] {
         FVec dx(x->size()), dw(C);
         cpu::rmsnorm_bwd(dy->data(), x->data(), rs->data(), w->data(), dx.data(), dw.data(), N, C);
         return std::vector<FVec>{dx, dw};
       }},
      // the GPT's LayerNorm (oneDNN, one primitive call a tile) on the same 32 row tiles
      {"layernorm_fwd",
       [=] {
         FVec yy(x->size()), m(N), s(N);
         cpu::layernorm_fwd(x->data(), w->data(), dy->data(), yy.data(), m.data(), s.data(), N, C, 1e-5f);
         return std::vector<FVec>{yy, m, s};
       }},
      {"layernorm_bwd",
       [=] {
         FVec dx(x->size()), dw(C), db(C);
         cpu::layernorm_bwd(dy->data(), x->data(), lm->data(), ls->data(), w->data(), dx.data(), dw.data(), db.data(),
                            N, C);
         return std::vector<FVec>{dx, dw, db};
       }},
      {"rope_fwd",
       [=] {
         FVec r = *x;
         cpu::rope_fwd(r.data(), table->data(), table->data() + (size_t)T * hs / 2, B, T, NH, hs, 0);
         return std::vector<FVec>{r};
       }},
      {"rope_bwd",
       [=] {
         FVec r = *dy;
         cpu::rope_bwd(r.data(), table->data(), table->data() + (size_t)T * hs / 2, B, T, NH, hs, 0);
         return std::vector<FVec>{r};
       }},
      {"swiglu_fwd",
       [=] {
         FVec o(n);
         cpu::swiglu_fwd(g->data(), u->data(), o.data(), n);
         return std::vector<FVec>{o};
       }},
      {"swiglu_bwd",
       [=] {
         FVec dg(n), du(n);
         cpu::swiglu_bwd(g->data(), u->data(), d->data(), dg.data(), du.data(), n);
         return std::vector<FVec>{dg, du};
       }},
      {"attention_fwd", [=] { return gpt_fwd(false); }},
      {"attention_bwd", [=] { return gpt_bwd(false); }},
      {"attention_fwd bf16", [=] { return gpt_fwd(true); }},
      {"attention_bwd bf16", [=] { return gpt_bwd(true); }},
      {"gqa_attention_fwd",
       [=] {
         FVec out(a->out.size()), lse(a->lse.size());
         cpu::gqa_attention_fwd(a->q.data(), a->k.data(), a->v.data(), out.data(), lse.data(), a->B, a->T, a->H,
                                a->Hkv, a->hs);
         return std::vector<FVec>{out, lse};
       }},
      {"gqa_attention_bwd",
       [=] {
         FVec dq(a->dq.size()), dk(a->dk.size()), dv(a->dv.size());
         cpu::gqa_attention_bwd(a->dout.data(), a->q.data(), a->k.data(), a->v.data(), a->lse.data(), dq.data(),
                                dk.data(), dv.data(), a->B, a->T, a->H, a->Hkv, a->hs);
         return std::vector<FVec>{dq, dk, dv};
       }},
  };
}

TEST(LlamaKernels, BitwiseSameWithHelperThreads) {
  constexpr int kTries = 200;
  zf::blas_single_thread();
  const std::vector<Case> cs = cases();
  std::vector<std::vector<FVec>> alone;
  zf::set_parallel_helpers(0);
  for (const Case& c : cs) alone.push_back(c.run());
  Helpers h(2);
  for (size_t k = 0; k < cs.size(); ++k) {
    SCOPED_TRACE(cs[k].name);
    bool helped = false;
    for (int t = 0; t < kTries && !helped; ++t) {
      const unsigned long long before = zf::parallel_stats().helped;
      const std::vector<FVec> got = cs[k].run();
      helped = zf::parallel_stats().helped > before;
      ASSERT_EQ(got.size(), alone[k].size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(bits_equal(got[i], alone[k][i])) << "result " << i;
    }
    EXPECT_TRUE(helped) << "the helpers took no tile in " << kTries << " calls: nothing was compared";
  }
}

}  // namespace
