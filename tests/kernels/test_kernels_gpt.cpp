// GPT layer kernels (codelets/kernels/cpu/{embedding,layernorm,attention,pool,text}.cpp):
// 1. the double reference's backward (tests/reference/gpt_ref.hpp) against central finite
//    differences, h = 1e-6, of L = sum(Y * R) with random R (as tests/kernels/test_gradcheck.cpp);
// 2. each float kernel, forward and backward, against the reference on the same float inputs,
//    with the norm-scaled residual max|x - ref| / (scale * eps) < 10 (Chameleon), scale = the
//    operands' magnitude times the reduction length along the path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/parallel.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#include "tests/reference/gpt_ref.hpp"

namespace {

namespace cpu = zf::kernels::cpu;
namespace ref = zf::ref;
using namespace zf::test;
using zf::test::residual_ok;
using FVec = std::vector<float>;

Vec widen(const FVec& a) { return Vec(a.begin(), a.end()); }
std::vector<int32_t> random_ints(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = lo + (int32_t)(rng() % (uint32_t)(hi - lo + 1));
  return v;
}

::testing::AssertionResult residual_ok(const FVec& x, const Vec& r, double scale, const char* what) {
  if (x.size() != r.size()) return ::testing::AssertionFailure() << what << ": size mismatch";
  double diff = 0.0;
  for (size_t i = 0; i < x.size(); ++i) diff = std::max(diff, std::fabs((double)x[i] - r[i]));
  const double res = diff / (std::max(scale, 1e-30) * FLT_EPSILON);
  if (res < kResidualMax) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": norm-scaled residual " << res << " (max diff " << diff << ")";
}

// ------------------------------------------------------------------ reference gradient checks

TEST(GptGradCheck, Embedding) {
  const int B = 2, T = 3, C = 4, V = 5;
  auto tok = random_ints((size_t)B * T, 0, V - 1, 1);
  Vec wte = widen(uniform_f((size_t)V * C, -1, 1, 2)), wpe = widen(uniform_f((size_t)T * C, -1, 1, 3));
  Vec r = widen(uniform_f((size_t)B * T * C, -1, 1, 4));
  auto loss = [&] {
    Vec x((size_t)B * T * C);
    ref::embedding_fwd(tok.data(), wte.data(), wpe.data(), x.data(), B, T, C);
    return dot_loss(x, r);
  };
  Vec dwte(wte.size()), dwpe(wpe.size());
  ref::embedding_bwd(tok.data(), r.data(), dwte.data(), dwpe.data(), B, T, C, V);
  EXPECT_TRUE(gradcheck(loss, wte, dwte, "dwte"));
  EXPECT_TRUE(gradcheck(loss, wpe, dwpe, "dwpe"));
}

TEST(GptGradCheck, LayerNorm) {
  const int N = 5, C = 7;
  Vec x = widen(uniform_f((size_t)N * C, -2, 2, 10)), w = widen(uniform_f(C, 0.5f, 1.5f, 11));
  Vec b = widen(uniform_f(C, -1, 1, 12)), r = widen(uniform_f((size_t)N * C, -1, 1, 13));
  auto loss = [&] {
    Vec y(x.size()), m(N), s(N);
    ref::layernorm_fwd(x.data(), w.data(), b.data(), y.data(), m.data(), s.data(), N, C, 1e-5);
    return dot_loss(y, r);
  };
  Vec y(x.size()), m(N), s(N), dx(x.size()), dw(C), db(C);
  ref::layernorm_fwd(x.data(), w.data(), b.data(), y.data(), m.data(), s.data(), N, C, 1e-5);
  ref::layernorm_bwd(r.data(), x.data(), m.data(), s.data(), w.data(), dx.data(), dw.data(), db.data(), N, C);
  EXPECT_TRUE(gradcheck(loss, x, dx, "dx"));
  EXPECT_TRUE(gradcheck(loss, w, dw, "dw"));
  EXPECT_TRUE(gradcheck(loss, b, db, "db"));
}

TEST(GptGradCheck, Attention) {
  for (auto [B, T, C, NH] : {std::tuple{1, 1, 2, 1}, std::tuple{2, 5, 6, 2}, std::tuple{1, 7, 8, 4}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C));
    Vec qkv = widen(uniform_f((size_t)B * T * 3 * C, -1.5f, 1.5f, 20 + T));
    Vec r = widen(uniform_f((size_t)B * T * C, -1, 1, 21 + T));
    auto loss = [&] {
      Vec out((size_t)B * T * C), att((size_t)B * NH * T * T);
      ref::attention_fwd(qkv.data(), out.data(), att.data(), B, T, C, NH);
      return dot_loss(out, r);
    };
    Vec out((size_t)B * T * C), att((size_t)B * NH * T * T), dqkv(qkv.size());
    ref::attention_fwd(qkv.data(), out.data(), att.data(), B, T, C, NH);
    ref::attention_bwd(r.data(), qkv.data(), att.data(), dqkv.data(), B, T, C, NH);
    EXPECT_TRUE(gradcheck(loss, qkv, dqkv, "dqkv"));
  }
}

TEST(GptGradCheck, MeanPool) {
  const int B = 3, T = 4, C = 2;
  std::vector<int32_t> len = {1, 4, 3};
  Vec x = widen(uniform_f((size_t)B * T * C, -1, 1, 30)), r = widen(uniform_f((size_t)B * C, -1, 1, 31));
  auto loss = [&] {
    Vec y((size_t)B * C);
    ref::mean_pool_fwd(x.data(), len.data(), y.data(), B, T, C);
    return dot_loss(y, r);
  };
  Vec dx(x.size());
  ref::mean_pool_bwd(r.data(), len.data(), dx.data(), B, T, C);
  EXPECT_TRUE(gradcheck(loss, x, dx, "dx"));
}

// Max pooling is piecewise linear: away from ties (distinct random values, h far below their
// gaps) its gradient is exact.
TEST(GptGradCheck, MaxPool) {
  const int B = 3, T = 4, C = 2;
  std::vector<int32_t> len = {1, 4, 3};
  Vec x = widen(uniform_f((size_t)B * T * C, -1, 1, 32)), r = widen(uniform_f((size_t)B * C, -1, 1, 33));
  auto loss = [&] {
    Vec y((size_t)B * C);
    ref::max_pool_fwd(x.data(), len.data(), y.data(), B, T, C);
    return dot_loss(y, r);
  };
  Vec dx(x.size());
  ref::max_pool_bwd(x.data(), r.data(), len.data(), dx.data(), B, T, C);
  EXPECT_TRUE(gradcheck(loss, x, dx, "dx"));
}

// ------------------------------------------------------------------ float kernels vs reference

TEST(GptKernels, EmbeddingMatchesReference) {
  for (auto [B, T, C] : {std::tuple{1, 1, 1}, std::tuple{3, 22, 55}, std::tuple{2, 64, 64}}) {
    const int V = 256;
    auto tok = random_ints((size_t)B * T, 0, V - 1, 40);
    tok[0] = tok.back();  // a repeated token: its rows accumulate
    FVec wte = uniform_f((size_t)V * C, -1, 1, 41), wpe = uniform_f((size_t)T * C, -1, 1, 42);
    FVec dx = uniform_f((size_t)B * T * C, -1, 1, 43);
    FVec x(dx.size()), dwte(wte.size()), dwpe(wpe.size());
    cpu::embedding_fwd(tok.data(), wte.data(), wpe.data(), x.data(), B, T, C);
    cpu::embedding_bwd(tok.data(), dx.data(), dwte.data(), dwpe.data(), B, T, C, V);
    Vec xr(x.size()), dwter(wte.size()), dwper(wpe.size());
    Vec wted = widen(wte), wped = widen(wpe), dxd = widen(dx);
    ref::embedding_fwd(tok.data(), wted.data(), wped.data(), xr.data(), B, T, C);
    ref::embedding_bwd(tok.data(), dxd.data(), dwter.data(), dwper.data(), B, T, C, V);
    EXPECT_TRUE(residual_ok(x, xr, 2.0, "x"));
    EXPECT_TRUE(residual_ok(dwte, dwter, (double)B * T, "dwte"));
    EXPECT_TRUE(residual_ok(dwpe, dwper, (double)B, "dwpe"));
  }
}

TEST(GptKernels, LayerNormMatchesReference) {
  // the last two cut into row tiles (16384 elements each) whose dw and db partials are added after
  for (auto [N, C] : {std::pair{1, 1}, std::pair{22, 55}, std::pair{64, 64}, std::pair{5, 1000}, std::pair{1000, 22},
                      std::pair{300, 128}}) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    FVec x = uniform_f((size_t)N * C, -3, 3, 50), w = uniform_f(C, 0.5f, 1.5f, 51), b = uniform_f(C, -1, 1, 52);
    FVec dy = uniform_f(x.size(), -1, 1, 53);
    FVec y(x.size()), m(N), s(N), dx(x.size()), dw(C), db(C);
    cpu::layernorm_fwd(x.data(), w.data(), b.data(), y.data(), m.data(), s.data(), N, C, 1e-5f);
    cpu::layernorm_bwd(dy.data(), x.data(), m.data(), s.data(), w.data(), dx.data(), dw.data(), db.data(), N, C);
    Vec xd = widen(x), wd = widen(w), bd = widen(b), dyd = widen(dy);
    Vec yr(x.size()), mr(N), sr(N), dxr(x.size()), dwr(C), dbr(C);
    ref::layernorm_fwd(xd.data(), wd.data(), bd.data(), yr.data(), mr.data(), sr.data(), N, C, 1e-5);
    ref::layernorm_bwd(dyd.data(), xd.data(), mr.data(), sr.data(), wd.data(), dxr.data(), dwr.data(), dbr.data(),
                       N, C);
    // rstd can reach 1/sqrt(eps) for C = 1 (zero variance): errors scale with it
    const double rs = max_abs(sr);
    EXPECT_TRUE(residual_ok(y, yr, 1.5 * 3 * rs * 3 + 1, "y"));
    EXPECT_TRUE(residual_ok(dx, dxr, 1.5 * rs * C * 3, "dx"));
    EXPECT_TRUE(residual_ok(dw, dwr, 3 * rs * 3 * N, "dw"));
    EXPECT_TRUE(residual_ok(db, dbr, (double)N, "db"));
  }
}

TEST(GptKernels, AttentionMatchesReference) {
  zf::blas_single_thread();
  for (auto [B, T, C, NH] : {std::tuple{1, 1, 4, 1}, std::tuple{2, 7, 12, 3}, std::tuple{2, 22, 64, 4},
                             std::tuple{1, 55, 32, 2}, std::tuple{1, 64, 64, 1},
                             // across the kernel's 64-row causal blocks: one row past, a partial
                             // last block, whole blocks
                             std::tuple{1, 65, 16, 2}, std::tuple{2, 150, 32, 4}, std::tuple{1, 256, 32, 2}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                 " NH=" + std::to_string(NH));
    FVec qkv = uniform_f((size_t)B * T * 3 * C, -1, 1, 60 + T), dout = uniform_f((size_t)B * T * C, -1, 1, 61);
    FVec out(dout.size()), lse((size_t)B * NH * T), dqkv(qkv.size());
    cpu::attention_fwd(qkv.data(), out.data(), lse.data(), B, T, C, NH);
    cpu::attention_bwd(dout.data(), qkv.data(), lse.data(), dqkv.data(), B, T, C, NH);
    Vec q = widen(qkv), d = widen(dout), outr(out.size()), attr((size_t)B * NH * T * T), lser(lse.size()),
        dqkvr(qkv.size());
    ref::attention_fwd(q.data(), outr.data(), attr.data(), B, T, C, NH, lser.data());
    ref::attention_bwd(d.data(), q.data(), attr.data(), dqkvr.data(), B, T, C, NH);
    const int hs = C / NH;
    // scores sum hs products, the log-sum-exp T terms, the outputs T more; the backward
    // recomputes the probabilities from the scores and lse
    EXPECT_TRUE(residual_ok(lse, lser, (double)(hs + T), "lse"));
    EXPECT_TRUE(residual_ok(out, outr, (double)(hs + 2 * T), "out"));
    EXPECT_TRUE(residual_ok(dqkv, dqkvr, (double)(2 * hs + 3 * T), "dqkv"));
  }
}

// The backward's row blocks see only their causal columns: a key or value at position j moves
// no output or gradient of a query before j, however the blocks fall (T across several blocks).
TEST(GptKernels, AttentionIsCausalAcrossBlocks) {
  zf::blas_single_thread();
  const int B = 1, T = 150, C = 32, NH = 2;
  FVec qkv = uniform_f((size_t)B * T * 3 * C, -1, 1, 66), dout = uniform_f((size_t)B * T * C, -1, 1, 67);
  FVec out(dout.size()), lse((size_t)B * NH * T), dqkv(qkv.size());
  cpu::attention_fwd(qkv.data(), out.data(), lse.data(), B, T, C, NH);
  const int j = 100;  // perturb position j's key and value
  FVec qkv2 = qkv, out2(out.size()), lse2(lse.size()), dqkv2(dqkv.size());
  for (int c = C; c < 3 * C; ++c) qkv2[(size_t)j * 3 * C + c] += 0.5f;
  cpu::attention_fwd(qkv2.data(), out2.data(), lse2.data(), B, T, C, NH);
  for (size_t i = 0; i < (size_t)j * C; ++i) ASSERT_EQ(out[i], out2[i]) << "out element " << i;
  bool moved = false;
  for (size_t i = (size_t)j * C; i < out.size(); ++i) moved |= out[i] != out2[i];
  EXPECT_TRUE(moved);
  // dout zero from position j on: positions before j get the same dq, dk, dv (they see keys and
  // values before j only), positions from j on none
  FVec d = dout;
  for (size_t i = (size_t)j * C; i < d.size(); ++i) d[i] = 0.0f;
  cpu::attention_bwd(d.data(), qkv.data(), lse.data(), dqkv.data(), B, T, C, NH);
  cpu::attention_bwd(d.data(), qkv2.data(), lse2.data(), dqkv2.data(), B, T, C, NH);
  for (int t = 0; t < j; ++t)
    for (int c = 0; c < 3 * C; ++c) ASSERT_EQ(dqkv[(size_t)t * 3 * C + c], dqkv2[(size_t)t * 3 * C + c]) << t;
  for (int t = j; t < T; ++t)
    for (int c = 0; c < 3 * C; ++c) ASSERT_EQ(dqkv[(size_t)t * 3 * C + c], 0.0f) << t;
}

// A sequence's out, lse and dqkv are bitwise what it gets alone, wherever it falls in the batch
// (fp32 and bf16 products): what data-parallel ranks, which split the batch, rely on. (Tiles of
// several short sequences, each product batched over all their heads, would have to keep it.)
TEST(GptKernels, AttentionSequenceBitwiseWhateverTheBatch) {
  zf::blas_single_thread();
  const int C = 64, NH = 4;
  for (auto [B, T] : {std::pair{5, 64}, std::pair{7, 40}, std::pair{3, 100}})
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + (bf16 ? " bf16" : " fp32"));
      const size_t n = (size_t)T * C, na = (size_t)NH * T;
      FVec qkv = uniform_f(3 * B * n, -1, 1, 80 + T), dout = uniform_f(B * n, -1, 1, 81 + T);
      FVec out(B * n), lse(B * na), dqkv(3 * B * n);
      cpu::attention_fwd(qkv.data(), out.data(), lse.data(), B, T, C, NH, bf16);
      cpu::attention_bwd(dout.data(), qkv.data(), lse.data(), dqkv.data(), B, T, C, NH, bf16);
      for (int b = 0; b < B; ++b) {
        FVec o1(n), l1(na), d1(3 * n);
        cpu::attention_fwd(qkv.data() + 3 * b * n, o1.data(), l1.data(), 1, T, C, NH, bf16);
        cpu::attention_bwd(dout.data() + b * n, qkv.data() + 3 * b * n, l1.data(), d1.data(), 1, T, C, NH, bf16);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(o1[i], out[b * n + i]) << "out, sequence " << b;
        for (size_t i = 0; i < na; ++i) ASSERT_EQ(l1[i], lse[b * na + i]) << "lse, sequence " << b;
        for (size_t i = 0; i < 3 * n; ++i) ASSERT_EQ(d1[i], dqkv[3 * b * n + i]) << "dqkv, sequence " << b;
      }
    }
}

TEST(GptKernels, MeanPoolMatchesReference) {
  const int B = 3, T = 22, C = 55;
  std::vector<int32_t> len = {1, 22, 13};
  FVec x = uniform_f((size_t)B * T * C, -1, 1, 70), dy = uniform_f((size_t)B * C, -1, 1, 71);
  FVec y((size_t)B * C), dx(x.size());
  cpu::mean_pool_fwd(x.data(), len.data(), y.data(), B, T, C);
  cpu::mean_pool_bwd(dy.data(), len.data(), dx.data(), B, T, C);
  Vec xd = widen(x), dyd = widen(dy), yr(y.size()), dxr(dx.size());
  ref::mean_pool_fwd(xd.data(), len.data(), yr.data(), B, T, C);
  ref::mean_pool_bwd(dyd.data(), len.data(), dxr.data(), B, T, C);
  EXPECT_TRUE(residual_ok(y, yr, (double)T, "y"));
  EXPECT_TRUE(residual_ok(dx, dxr, 2.0, "dx"));
  for (int t = 13; t < T; ++t) EXPECT_EQ(dx[((size_t)2 * T + t) * C], 0.0f);  // padding gets no gradient
}

TEST(GptKernels, MaxPoolMatchesReference) {
  const int B = 3, T = 22, C = 55;
  std::vector<int32_t> len = {1, 22, 13};
  FVec x = uniform_f((size_t)B * T * C, -1, 1, 72), dy = uniform_f((size_t)B * C, -1, 1, 73);
  x[((size_t)1 * T + 5) * C] = x[((size_t)1 * T + 9) * C] = 2.0f;  // a tie: the first position wins
  FVec y((size_t)B * C), dx(x.size());
  cpu::max_pool_fwd(x.data(), len.data(), y.data(), B, T, C);
  cpu::max_pool_bwd(x.data(), dy.data(), len.data(), dx.data(), B, T, C);
  Vec xd = widen(x), dyd = widen(dy), yr(y.size()), dxr(dx.size());
  ref::max_pool_fwd(xd.data(), len.data(), yr.data(), B, T, C);
  ref::max_pool_bwd(xd.data(), dyd.data(), len.data(), dxr.data(), B, T, C);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ((double)y[i], yr[i]);  // selection only: exact
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ((double)dx[i], dxr[i]);
  EXPECT_EQ(dx[((size_t)1 * T + 5) * C], dy[(size_t)1 * C]);
  EXPECT_EQ(dx[((size_t)1 * T + 9) * C], 0.0f);
}

TEST(GptKernels, GatherWindowsAndSequences) {
  const std::string text = "In the beginning God created the heaven and the earth.";
  const uint8_t* p = reinterpret_cast<const uint8_t*>(text.data());
  std::vector<int64_t> starts = {0, 7, (int64_t)text.size() - 6};
  const int T = 5;
  std::vector<int32_t> tok(3 * T), tgt(3 * T);
  cpu::gather_windows(p, starts.data(), 3, T, tok.data(), tgt.data());
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(tok[b * T + t], (int32_t)(uint8_t)text[starts[b] + t]);
      EXPECT_EQ(tgt[b * T + t], (int32_t)(uint8_t)text[starts[b] + t + 1]);
    }
  // a (3, 4) table: "ab", "cdef", "g"
  const uint8_t table[] = {'a', 'b', 0, 0, 'c', 'd', 'e', 'f', 'g', 0, 0, 0};
  const int32_t lengths[] = {2, 4, 1}, labels[] = {0, 1, 0}, rows[] = {2, 1};
  std::vector<int32_t> out(2 * 4), len(2), lab(2);
  cpu::gather_sequences(table, lengths, labels, 4, rows, 2, out.data(), len.data(), lab.data());
  EXPECT_EQ(out, (std::vector<int32_t>{'g', 0, 0, 0, 'c', 'd', 'e', 'f'}));
  EXPECT_EQ(len, (std::vector<int32_t>{1, 4}));
  EXPECT_EQ(lab, (std::vector<int32_t>{0, 1}));
}

// The generative classifier's chunks: "Jesus wept." and its '\n' (12 bytes) at context 8 are two
// chunks, bytes [0, 8) and [8, 12), each after the class byte (1 + class).
TEST(GptKernels, GatherChunksOfAVerse) {
  const std::string text = "Amen.\nJesus wept.\n";
  const uint8_t* p = reinterpret_cast<const uint8_t*>(text.data());
  const int T = 8;
  // class 1 (byte 2) of a label-1 verse, the same chunk... scored as class 0 (byte 1), another verse
  const std::vector<cpu::ChunkRef> refs = {{6, 8, 1, 1}, {14, 4, 1, 1}, {0, 6, 0, 1}};
  std::vector<int32_t> tok(3 * T, 99), tgt(3 * T, 99), cls(3, 99), lab(3, 99);
  cpu::gather_chunks(p, refs.data(), 3, T, tok.data(), tgt.data(), cls.data(), lab.data());
  EXPECT_EQ(cls, (std::vector<int32_t>{1, 1, 0}));
  EXPECT_EQ(lab, (std::vector<int32_t>{1, 1, 1}));
  auto ints = [](const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); };
  auto row = [&](const std::vector<int32_t>& v, int b) {
    return std::vector<int32_t>(v.begin() + b * T, v.begin() + (b + 1) * T);
  };
  std::vector<int32_t> t0 = ints("Jesus w"), g0 = ints("Jesus we");
  t0.insert(t0.begin(), 2);
  EXPECT_EQ(row(tok, 0), t0);
  EXPECT_EQ(row(tgt, 0), g0);
  EXPECT_EQ(row(tok, 1), (std::vector<int32_t>{2, 'p', 't', '.', 0, 0, 0, 0}));
  EXPECT_EQ(row(tgt, 1), (std::vector<int32_t>{'p', 't', '.', '\n', -1, -1, -1, -1}));
  EXPECT_EQ(row(tok, 2), (std::vector<int32_t>{1, 'A', 'm', 'e', 'n', '.', 0, 0}));
  EXPECT_EQ(row(tgt, 2), (std::vector<int32_t>{'A', 'm', 'e', 'n', '.', '\n', -1, -1}));
}

// Negative labels (padded targets) are skipped by the loss and get a zero gradient; the other
// rows are as without them (bitwise: the same per-row arithmetic).
TEST(GptKernels, SoftmaxXentIgnoresNegativeLabels) {
  const int B = 5, C = 7;
  std::vector<float> z = uniform_f((size_t)B * C, -3, 3, 70);
  const std::vector<int32_t> masked = {3, -1, 0, -1, 6}, kept = {3, 0, 6};
  std::vector<float> zk;
  for (int i : {0, 2, 4}) zk.insert(zk.end(), z.begin() + i * C, z.begin() + (i + 1) * C);
  std::vector<float> p((size_t)B * C), pk((size_t)3 * C), d((size_t)B * C, 5.0f), dk((size_t)3 * C);
  int64_t ok = -1, okk = -1, n = -1;
  const double loss = cpu::softmax_xent_fwd(z.data(), masked.data(), p.data(), B, C, &ok, &n);
  const double lossk = cpu::softmax_xent_fwd(zk.data(), kept.data(), pk.data(), 3, C, &okk);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(ok, okk);
  EXPECT_EQ(loss, lossk);
  cpu::softmax_xent_bwd(p.data(), masked.data(), d.data(), B, C, 0.25f);
  cpu::softmax_xent_bwd(pk.data(), kept.data(), dk.data(), 3, C, 0.25f);
  for (int j = 0; j < C; ++j) {
    EXPECT_EQ(d[1 * C + j], 0.0f);
    EXPECT_EQ(d[3 * C + j], 0.0f);
    EXPECT_EQ(d[0 * C + j], dk[0 * C + j]);
    EXPECT_EQ(d[2 * C + j], dk[1 * C + j]);
    EXPECT_EQ(d[4 * C + j], dk[2 * C + j]);
  }
}

// The class embedding: row ids[b] added at every position of sequence b; the backward sums each
// class's rows (a class with no sequence gets zeros).
TEST(GptKernels, ClassEmbeddingAddsAndSumsPerClass) {
  const int B = 3, T = 4, C = 5, K = 3;
  FVec x = uniform_f((size_t)B * T * C, -1, 1, 72), x0 = x, table = uniform_f((size_t)K * C, -1, 1, 73);
  FVec dx = uniform_f(x.size(), -1, 1, 74), dt((size_t)K * C, 9.0f);
  const std::vector<int32_t> ids = {2, 0, 2};
  cpu::class_embedding_fwd(x.data(), table.data(), ids.data(), B, T, C);
  cpu::class_embedding_bwd(dx.data(), ids.data(), dt.data(), B, T, C, K);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const size_t i = ((size_t)b * T + t) * C + c;
        EXPECT_EQ(x[i], x0[i] + table[(size_t)ids[b] * C + c]);
      }
  for (int k = 0; k < K; ++k)
    for (int c = 0; c < C; ++c) {
      double want = 0.0;
      for (int b = 0; b < B; ++b)
        if (ids[b] == k)
          for (int t = 0; t < T; ++t) want += dx[((size_t)b * T + t) * C + c];
      EXPECT_NEAR(dt[(size_t)k * C + c], want, 1e-5) << k << " " << c;
    }
  for (int c = 0; c < C; ++c) EXPECT_EQ(dt[(size_t)1 * C + c], 0.0f);
}

// Each sequence's log-likelihood against log softmax computed in double; padded targets add nothing.
TEST(GptKernels, SequenceLogprobMatchesReference) {
  const int B = 3, T = 6, V = 256;
  std::vector<float> z = uniform_f((size_t)B * T * V, -4, 4, 71);
  std::vector<int32_t> y((size_t)B * T);
  for (size_t i = 0; i < y.size(); ++i) y[i] = (int32_t)((i * 37 + 11) % V);
  for (int t = 2; t < T; ++t) y[(size_t)1 * T + t] = -1;  // sequence 1: two targets
  for (int t = 0; t < T; ++t) y[(size_t)2 * T + t] = -1;  // sequence 2: none
  std::vector<double> out(B, 123.0);
  cpu::sequence_logprob(z.data(), y.data(), B, T, V, out.data());
  for (int b = 0; b < B; ++b) {
    double want = 0.0;
    for (int t = 0; t < T; ++t) {
      const size_t r = (size_t)b * T + t;
      if (y[r] < 0) continue;
      double mx = -INFINITY, sum = 0.0;
      for (int j = 0; j < V; ++j) mx = std::max(mx, (double)z[r * V + j]);
      for (int j = 0; j < V; ++j) sum += std::exp((double)z[r * V + j] - mx);
      want += (double)z[r * V + y[r]] - mx - std::log(sum);
    }
    // per row: a float sum of V exps (relative error ~V eps) and its log
    EXPECT_NEAR(out[b], want, 1e-5 * T) << "sequence " << b;
  }
  EXPECT_EQ(out[2], 0.0);
  EXPECT_LT(out[0], out[1]) << "six targets cost more than two";
}

// The generative classifier's loss: the double reference's gradient against central finite
// differences of its loss, then the float kernel against the reference (loss and dlogits).
TEST(GptKernels, GenClassLossMatchesReferenceAndFiniteDifferences) {
  const int K = 3, B = 2, T = 4, V = 6;
  FVec z = uniform_f((size_t)K * B * T * V, -2, 2, 80);
  std::vector<int32_t> y((size_t)K * B * T);
  for (int k = 0; k < K; ++k)  // the same bytes under every class; chunk 1 has two padded targets
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) y[((size_t)k * B + b) * T + t] = b == 1 && t >= 2 ? -1 : (b * 5 + t * 3) % V;
  const std::vector<int32_t> labels = {2, 0};
  const std::vector<double> prior = {std::log(0.5), std::log(0.3), std::log(0.2)};
  const double lm = 0.7;
  Vec zd = widen(z), d(zd.size());
  double ce_ref = 0.0;
  const double L = ref::gen_class_loss(zd.data(), y.data(), labels.data(), prior.data(), K, B, T, V, lm, d.data(),
                                       &ce_ref);
  EXPECT_GT(L, 0.0);
  for (size_t i = 0; i < zd.size(); ++i) {
    Vec zp = zd, zm = zd;
    zp[i] += kH;
    zm[i] -= kH;
    const double num = (ref::gen_class_loss(zp.data(), y.data(), labels.data(), prior.data(), K, B, T, V, lm, nullptr,
                                            nullptr) -
                        ref::gen_class_loss(zm.data(), y.data(), labels.data(), prior.data(), K, B, T, V, lm, nullptr,
                                            nullptr)) /
                       (2 * kH);
    ASSERT_NEAR(d[i], num, 1e-6) << "logit " << i;
  }
  for (int r : {1 * T + 2, 3 * T + 3, 5 * T + 2})  // padded rows (chunk 1 under classes 0, 1, 2)
    for (int j = 0; j < V; ++j) EXPECT_EQ(d[(size_t)r * V + j], 0.0);
  FVec dk(z.size(), 9.0f);
  int64_t correct = -1;
  const float lm_f = (float)lm;
  const double ce = cpu::gen_class_loss(z.data(), y.data(), labels.data(), prior.data(), K, B, T, V, lm_f, dk.data(),
                                        &correct);
  EXPECT_NEAR(ce, ce_ref, 1e-5 * ce_ref);
  EXPECT_TRUE(residual_ok(dk, d, (double)T * V, "dlogits"));
  EXPECT_GE(correct, 0);
  EXPECT_LE(correct, B);
}

}  // namespace
