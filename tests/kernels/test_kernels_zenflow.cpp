// ZenFlow's column kernels (codelets/kernels/cpu/, docs/zenflow.md) against naive loops:
// topk_columns (ties, NaN), column importance, gather/scatter, selective AdamW, merge_unselected,
// the gradient mass, and the (in, out) weight layout's matmuls and column operations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#include "tests/reference/zenflow_ref.hpp"

namespace zf::test {
namespace {

namespace cpu = zf::kernels::cpu;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// k distinct sorted columns of [0, C)
std::vector<int32_t> random_sel(int C, int k, uint32_t seed) {
  std::vector<int32_t> all(C);
  for (int j = 0; j < C; ++j) all[j] = j;
  std::mt19937 gen(seed);
  std::shuffle(all.begin(), all.end(), gen);
  std::vector<int32_t> s(all.begin(), all.begin() + k);
  std::sort(s.begin(), s.end());
  return s;
}

// ------------------------------------------------------------------ kernels: topk_columns

TEST(TopkColumns, TiesGoToLowerIndex) {
  const std::vector<float> imp = {1, 3, 3, 2, 3, 3};
  std::vector<int32_t> sel(3);
  cpu::topk_columns(imp.data(), 6, 3, sel.data());
  EXPECT_EQ(sel, (std::vector<int32_t>{1, 2, 4}));
  const std::vector<float> flat(9, 0.5f);  // all tied
  std::vector<int32_t> s4(4);
  cpu::topk_columns(flat.data(), 9, 4, s4.data());
  EXPECT_EQ(s4, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(TopkColumns, KEqualsCSelectsAllAscending) {
  for (int C : {1, 22, 55, 64}) {
    const std::vector<float> imp = randn(C, 7 + C);
    std::vector<int32_t> sel(C);
    cpu::topk_columns(imp.data(), C, C, sel.data());
    for (int j = 0; j < C; ++j) EXPECT_EQ(sel[j], j) << "C=" << C;
  }
}

TEST(TopkColumns, SingleColumn) {
  const float imp = -3.0f;
  int32_t sel = -1;
  cpu::topk_columns(&imp, 1, 1, &sel);
  EXPECT_EQ(sel, 0);
}

TEST(TopkColumns, NaNCountsAsSmallest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> imp = {nan, 1.0f, nan, 0.0f, 2.0f};
  std::vector<int32_t> s3(3), s4(4);
  cpu::topk_columns(imp.data(), 5, 3, s3.data());
  EXPECT_EQ(s3, (std::vector<int32_t>{1, 3, 4}));
  cpu::topk_columns(imp.data(), 5, 4, s4.data());  // a NaN must fill: the lower index
  EXPECT_EQ(s4, (std::vector<int32_t>{0, 1, 3, 4}));
}

TEST(TopkColumns, MatchesNaiveWithManyTies) {
  for (int C : {1, 22, 55, 64, 1000}) {
    std::mt19937 gen(C);
    std::uniform_int_distribution<int> d(0, 4);  // integer values: ties everywhere
    std::vector<float> imp(C);
    for (float& x : imp) x = (float)d(gen);
    for (int k : {1, std::max(1, C / 4), std::max(1, C / 2), C}) {
      std::vector<int32_t> sel(k);
      cpu::topk_columns(imp.data(), C, k, sel.data());
      EXPECT_EQ(sel, ref::naive_topk(imp, k)) << "C=" << C << " k=" << k;
    }
  }
}

// ------------------------------------------------------------------ kernels: column_importance

TEST(ColumnImportance, L1AndL2MatchNaiveDouble) {
  const std::vector<std::pair<int, int>> shapes = {{1, 1}, {22, 55}, {55, 22}, {64, 1000}, {1000, 64}};
  for (auto [R, C] : shapes) {
    const std::vector<float> g = randn((size_t)R * C, R * 31 + C);
    for (bool l2 : {false, true}) {
      std::vector<float> imp(C);
      cpu::column_importance(g.data(), R, C, l2, imp.data());
      for (int j = 0; j < C; ++j) {
        double s = 0.0;
        for (int i = 0; i < R; ++i) {
          const double x = g[(size_t)i * C + j];
          s += l2 ? x * x : std::fabs(x);
        }
        // a sum of R non-negative terms: residual / (norm * R * eps) (the norm is the sum itself)
        const double res = std::fabs((double)imp[j] - s) / (std::max(s, 1e-30) * R * FLT_EPSILON);
        EXPECT_LT(res, kResidualMax) << "R=" << R << " C=" << C << " l2=" << l2 << " j=" << j;
      }
    }
  }
}

// ------------------------------------------------------------------ kernels: gather / scatter

TEST(GatherScatter, RoundTrip) {
  const int R = 22, C = 55, k = 13;
  const std::vector<float> w = randn((size_t)R * C, 3);
  const std::vector<int32_t> sel = random_sel(C, k, 4);
  std::vector<float> out((size_t)R * k);
  cpu::gather_columns(w.data(), R, C, sel.data(), k, out.data());
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < k; ++c) ASSERT_EQ(out[(size_t)i * k + c], w[(size_t)i * C + sel[c]]);
  std::vector<float> z((size_t)R * C, 0.0f);
  cpu::scatter_columns(out.data(), R, C, sel.data(), k, z.data());
  std::vector<bool> selected(C, false);
  for (int32_t c : sel) selected[c] = true;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) ASSERT_EQ(z[(size_t)i * C + j], selected[j] ? w[(size_t)i * C + j] : 0.0f);
  std::vector<float> back((size_t)R * k);
  cpu::gather_columns(z.data(), R, C, sel.data(), k, back.data());
  EXPECT_TRUE(bits_equal(back, out));
}

// ------------------------------------------------------------------ kernels: selective_adam

TEST(SelectiveAdam, EqualsAdamStepOnGatheredValuesBitwise) {
  for (auto [R, C, k] : std::vector<std::tuple<int, int, int>>{{22, 55, 13}, {1, 1, 1}, {64, 1000, 250}, {16, 32, 32}}) {
    std::vector<float> w = randn((size_t)R * C, 11), w2 = w;
    const std::vector<float> w0 = w;
    const std::vector<int32_t> sel = random_sel(C, k, 12);
    std::vector<float> m((size_t)R * k, 0.0f), v = m, m2 = m, v2 = m;
    cpu::AdamParams hp;
    hp.lr = 1e-2f;
    hp.weight_decay = 0.01f;
    for (int64_t step = 1; step <= 5; ++step) {
      const std::vector<float> g = randn((size_t)R * C, 100 + (uint32_t)step);  // the whole gradient
      cpu::selective_adam(w.data(), R, C, sel.data(), k, g.data(), m.data(), v.data(), hp, step);
      std::vector<float> tmp((size_t)R * k), gs((size_t)R * k);
      for (int i = 0; i < R; ++i)
        for (int c = 0; c < k; ++c) {
          tmp[(size_t)i * k + c] = w2[(size_t)i * C + sel[c]];
          gs[(size_t)i * k + c] = g[(size_t)i * C + sel[c]];
        }
      cpu::adam_step(tmp.data(), gs.data(), m2.data(), v2.data(), tmp.size(), hp, step, 1.0f);
      for (int i = 0; i < R; ++i)
        for (int c = 0; c < k; ++c) w2[(size_t)i * C + sel[c]] = tmp[(size_t)i * k + c];
    }
    EXPECT_TRUE(bits_equal(w, w2)) << R << "x" << C << " k=" << k;
    EXPECT_TRUE(bits_equal(m, m2));
    EXPECT_TRUE(bits_equal(v, v2));
    std::vector<bool> selected(C, false);
    for (int32_t c : sel) selected[c] = true;
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < C; ++j)
        if (!selected[j]) {
          ASSERT_EQ(w[(size_t)i * C + j], w0[(size_t)i * C + j]);
        }
  }
}

// The master variant (precision bf16/fp16, semantics zenflow): AdamW on the fp32 master of the
// selected elements (filled from w at the selection's step), w's selected elements = the master,
// rounded to bf16 after each step as the trainer does; bitwise the naive gather / adam_step /
// scatter on the same values, both layouts; the unselected columns untouched.
TEST(SelectiveAdam, MasterVariantEqualsAdamStepOnTheMasterBitwise) {
  for (bool in_out : {false, true})
    for (auto [R, C, k] : std::vector<std::tuple<int, int, int>>{{22, 55, 13}, {1, 1, 1}, {16, 32, 32}}) {
      std::vector<float> w = randn((size_t)R * C, 21);
      for (float& e : w) e = kernels::bf16::round(e);
      std::vector<float> w2 = w;  // the reference, in the logical (R, C) layout
      const std::vector<int32_t> sel = random_sel(C, k, 22);
      const size_t rk = (size_t)R * k;
      std::vector<float> x(rk, -7.0f), m(rk, 0.0f), v = m, x2(rk), m2 = m, v2 = m;
      cpu::AdamParams hp;
      hp.lr = 1e-3f;
      hp.weight_decay = 0.01f;
      // storage (C, R) with in_out: a transpose of the logical values
      auto stored = [&](const std::vector<float>& a) {
        if (!in_out) return a;
        std::vector<float> t(a.size());
        for (int i = 0; i < R; ++i)
          for (int j = 0; j < C; ++j) t[(size_t)j * R + i] = a[(size_t)i * C + j];
        return t;
      };
      auto at = [&](int i, int c) { return in_out ? (size_t)c * R + i : (size_t)i * k + c; };  // m's layout
      std::vector<float> ws = stored(w);
      for (int64_t step = 1; step <= 4; ++step) {
        const std::vector<float> g = randn((size_t)R * C, 200 + (uint32_t)step);
        const std::vector<float> gs_stored = stored(g);
        cpu::selective_adam_master(ws.data(), R, C, sel.data(), k, gs_stored.data(), x.data(), step == 1, m.data(),
                                   v.data(), hp, step, in_out);
        for (float& e : ws) e = kernels::bf16::round(e);
        std::vector<float> gs(rk);
        for (int i = 0; i < R; ++i)
          for (int c = 0; c < k; ++c) {
            if (step == 1) x2[at(i, c)] = w2[(size_t)i * C + sel[c]];
            gs[at(i, c)] = g[(size_t)i * C + sel[c]];
          }
        cpu::adam_step(x2.data(), gs.data(), m2.data(), v2.data(), rk, hp, step, 1.0f);
        for (int i = 0; i < R; ++i)
          for (int c = 0; c < k; ++c) w2[(size_t)i * C + sel[c]] = kernels::bf16::round(x2[at(i, c)]);
      }
      SCOPED_TRACE(std::to_string(R) + "x" + std::to_string(C) + " k=" + std::to_string(k) + " in_out " +
                   std::to_string(in_out));
      EXPECT_TRUE(bits_equal(ws, stored(w2)));
      EXPECT_TRUE(bits_equal(x, x2));
      EXPECT_TRUE(bits_equal(m, m2));
      EXPECT_TRUE(bits_equal(v, v2));
    }
}

// The bug the masters fix (issue 43): AdamW steps below half a bf16 spacing. Weights at 1.0, a
// constant gradient, lr 1e-3: each step moves an element about 1e-3, under half the spacing below
// 1.0 (2^-9), so the in-place kernel's rounded weights never move; the master's cross it.
TEST(SelectiveAdam, MasterKeepsStepsBelowHalfABf16Spacing) {
  const int R = 4, C = 8, k = 3;
  const std::vector<int32_t> sel = {1, 4, 6};
  const std::vector<float> g((size_t)R * C, 1.0f);
  cpu::AdamParams hp;
  hp.lr = 1e-3f;
  std::vector<float> w_in((size_t)R * C, 1.0f), w_x = w_in, m((size_t)R * k, 0.0f), v = m, mx = m, vx = m, x(m.size());
  for (int64_t step = 1; step <= 5; ++step) {
    cpu::selective_adam(w_in.data(), R, C, sel.data(), k, g.data(), m.data(), v.data(), hp, step);
    cpu::selective_adam_master(w_x.data(), R, C, sel.data(), k, g.data(), x.data(), step == 1, mx.data(), vx.data(),
                               hp, step);
    for (float& e : w_in) e = kernels::bf16::round(e);
    for (float& e : w_x) e = kernels::bf16::round(e);
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) {
      const bool selected = std::binary_search(sel.begin(), sel.end(), j);
      EXPECT_EQ(w_in[(size_t)i * C + j], 1.0f) << "in place: rounded away";
      if (selected)
        EXPECT_LT(w_x[(size_t)i * C + j], 1.0f) << "row " << i << " column " << j;
      else
        EXPECT_EQ(w_x[(size_t)i * C + j], 1.0f) << "row " << i << " column " << j;
    }
}

// ------------------------------------------------------------------ kernels: merge_unselected

// dst[:, c] = src[:, c] for c not in sel (naive)
std::vector<float> naive_merge(std::vector<float> dst, const std::vector<float>& src, int C,
                               const std::vector<int32_t>& sel) {
  std::vector<bool> selected(C, false);
  for (int32_t c : sel) selected[c] = true;
  for (size_t e = 0; e < dst.size(); ++e)
    if (!selected[e % C]) dst[e] = src[e];
  return dst;
}

TEST(MergeUnselected, SkipsSelectedColumns) {
  const int R = 22, C = 55, k = 13;
  const std::vector<float> src = randn((size_t)R * C, 21), dst0 = randn((size_t)R * C, 22);
  const std::vector<int32_t> sel = random_sel(C, k, 23);
  std::vector<float> dst = dst0;
  const size_t written = cpu::merge_unselected(dst.data(), C, src.data(), 0, dst.size(), sel.data(), k);
  EXPECT_EQ(written, (size_t)R * (C - k));
  EXPECT_TRUE(bits_equal(dst, naive_merge(dst0, src, C, sel)));
}

TEST(MergeUnselected, KZeroCopiesAll) {
  const int R = 7, C = 64;
  const std::vector<float> src = randn((size_t)R * C, 31);
  std::vector<float> dst = randn((size_t)R * C, 32);
  EXPECT_EQ(cpu::merge_unselected(dst.data(), C, src.data(), 0, dst.size(), nullptr, 0), dst.size());
  EXPECT_TRUE(bits_equal(dst, src));
}

TEST(MergeUnselected, TileOffsetsNotAlignedToRows) {
  const int R = 22, C = 55;
  const std::vector<float> src = randn((size_t)R * C, 41), dst0 = randn((size_t)R * C, 42);
  for (int k : {1, 13, 55}) {
    const std::vector<int32_t> sel = random_sel(C, k, 43 + k);
    const std::vector<float> want = naive_merge(dst0, src, C, sel);
    for (size_t tile : {(size_t)1, (size_t)7, (size_t)13, (size_t)54, (size_t)272, (size_t)R * C}) {
      std::vector<float> dst = dst0;
      size_t written = 0;
      for (size_t off = 0; off < dst.size(); off += tile) {
        const size_t n = std::min(tile, dst.size() - off);
        written += cpu::merge_unselected(dst.data(), C, src.data() + off, off, n, sel.data(), k);
      }
      EXPECT_EQ(written, (size_t)R * (C - k)) << "k=" << k << " tile=" << tile;
      EXPECT_TRUE(bits_equal(dst, want)) << "k=" << k << " tile=" << tile;
    }
  }
}

// ------------------------------------------------------------------ kernels: grad_mass

TEST(GradMass, MatchesNaive) {
  for (auto [R, C, k] : std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {22, 55, 13}, {64, 1000, 100}}) {
    const std::vector<float> g = randn((size_t)R * C, 51 + R);
    const std::vector<int32_t> sel = random_sel(C, k, 52);
    double total = -1, selected = -1;
    cpu::grad_mass(g.data(), R, C, sel.data(), k, &total, &selected);
    long double t = 0, s = 0;
    for (float x : g) t += std::fabs((long double)x);
    for (int i = 0; i < R; ++i)
      for (int32_t c : sel) s += std::fabs((long double)g[(size_t)i * C + c]);
    EXPECT_NEAR(total, (double)t, 1e-12 * (double)t);
    EXPECT_NEAR(selected, (double)s, 1e-12 * (double)s);
    cpu::grad_mass(g.data(), R, C, nullptr, 0, &total, &selected);
    EXPECT_EQ(selected, 0.0);
  }
}

// ------------------------------------------------------------------ kernels: the (in, out) layout

// (cols, rows) = a (rows, cols)^T
std::vector<float> transposed(const std::vector<float>& a, int rows, int cols) {
  std::vector<float> t(a.size());
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) t[(size_t)j * rows + i] = a[(size_t)i * cols + j];
  return t;
}

// A weight stored (in, out) (Param::in_out, docs/zenflow.md) takes other code paths than the
// (out, in) one: OpenBLAS with other transpose flags (another kernel, another summation order,
// which also depends on the OpenBLAS kernel the CPU selects, OPENBLAS_CORETYPE), or our own loops.
// What the engine guarantees on every BLAS kernel: each layout's forward, data gradient and weight
// gradient (with and without accumulation) within the norm-scaled residual bound of a
// double-precision reference. Bitwise equality of the two layouts only where the engine itself
// fixes the order of every sum: the weight gradient of at most kSmallBatch (4) rows, which is our
// own loop in both layouts (the same products, added in row order).
TEST(MatmulInOut, WithinRoundingOfDoubleReferenceBitwiseWhereOurLoops) {
  constexpr int kSmallBatch = 4;  // codelets/kernels/cpu/matmul.cpp
  for (auto [K, N] : std::vector<std::pair<int, int>>{{784, 32}, {32, 16}, {16, 10}, {55, 22}, {784, 1000}, {1000, 64},
                                                      {1001, 1000}, {16384, 10}, {128, 384}, {512, 128}})
    for (int B : {1, 2, 3, 4, 5, 8, 64, 1024}) {
      if ((int64_t)K * N > 100000 && B > 5 && B != 64) continue;  // the larger shapes: fewer batch sizes
      // the GPT's batches (batch x context rows, the large-batch paths) on two of its layer shapes
      if (B == 1024 && !((K == 128 && N == 384) || (K == 512 && N == 128))) continue;
      SCOPED_TRACE("B=" + std::to_string(B) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
      const std::vector<float> x = randn((size_t)B * K, 61), w = randn((size_t)N * K, 62), dy = randn((size_t)B * N, 63);
      const std::vector<float> wt = transposed(w, N, K), dw0 = randn((size_t)N * K, 64);
      // double references: y = x w^T (B, N), dx = dy w (B, K), dw = dy^T x (N, K)
      std::vector<double> y_ref((size_t)B * N, 0.0), dx_ref((size_t)B * K, 0.0), dw_ref((size_t)N * K, 0.0);
      for (int b = 0; b < B; ++b)
        for (int n = 0; n < N; ++n)
          for (int k = 0; k < K; ++k) {
            const double xv = x[(size_t)b * K + k], wv = w[(size_t)n * K + k], dv = dy[(size_t)b * N + n];
            y_ref[(size_t)b * N + n] += xv * wv;
            dx_ref[(size_t)b * K + k] += dv * wv;
            dw_ref[(size_t)n * K + k] += dv * xv;
          }
      // max over outputs of |a - ref| / ((|u| |v| + |c|) n eps): u, v the two vectors of the output's
      // dot product (rows of U and columns of V, U (rows, n), V (n, cols) given by strides), c the
      // accumulated-into value (or 0)
      auto residual = [](const std::vector<float>& a, const std::vector<double>& ref, const std::vector<float>* c,
                         const std::vector<float>& U, size_t us_r, size_t us_i, const std::vector<float>& V,
                         size_t vs_i, size_t vs_c, int rows, int cols, int n) {
        double worst = 0;
        for (int r = 0; r < rows; ++r)
          for (int q = 0; q < cols; ++q) {
            double uu = 0, vv = 0;
            for (int i = 0; i < n; ++i) {
              const double u = U[r * us_r + i * us_i], v = V[i * vs_i + q * vs_c];
              uu += u * u, vv += v * v;
            }
            const size_t e = (size_t)r * cols + q;
            const double cv = c ? std::fabs((double)(*c)[e]) : 0.0, want = ref[e] + (c ? (double)(*c)[e] : 0.0);
            worst = std::max(worst, std::fabs((double)a[e] - want) / ((std::sqrt(uu * vv) + cv) * n * FLT_EPSILON + 1e-300));
          }
        return worst;
      };
      for (bool io : {false, true}) {
        SCOPED_TRACE(io ? "(in, out)" : "(out, in)");
        const std::vector<float>& wl = io ? wt : w;
        std::vector<float> y((size_t)B * N), dx((size_t)B * K);
        cpu::matmul_fwd(x.data(), wl.data(), y.data(), B, K, N, io);
        cpu::matmul_bwd_data(dy.data(), wl.data(), dx.data(), B, K, N, io);
        EXPECT_LT(residual(y, y_ref, nullptr, x, K, 1, w, 1, K, B, N, K), kResidualMax);     // x (B, K), w^T (K, N)
        EXPECT_LT(residual(dx, dx_ref, nullptr, dy, N, 1, w, K, 1, B, K, N), kResidualMax);  // dy (B, N), w (N, K)
        for (bool acc : {true, false}) {
          SCOPED_TRACE(acc ? "accumulate" : "overwrite");
          std::vector<float> dw = io ? transposed(dw0, N, K) : dw0;
          cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N, acc, io);
          if (io) dw = transposed(dw, K, N);
          // dy^T (N, B): row n is dy[:, n] (stride N); x (B, K)
          EXPECT_LT(residual(dw, dw_ref, acc ? &dw0 : nullptr, dy, 1, N, x, K, 1, N, K, B), kResidualMax);
        }
      }
      if (B <= kSmallBatch)  // our own loops in both layouts: bitwise, whatever the BLAS
        for (bool acc : {true, false}) {
          std::vector<float> dw = dw0, dwt = transposed(dw0, N, K);
          cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N, acc);
          cpu::matmul_bwd_weight(dy.data(), x.data(), dwt.data(), B, K, N, acc, true);
          EXPECT_TRUE(bits_equal(transposed(dwt, K, N), dw)) << "accumulate " << acc;
        }
    }
}

TEST(ColumnOpsInOut, EqualTheOutInKernelsBitwise) {
  for (auto [R, C, k] : std::vector<std::tuple<int, int, int>>{{22, 55, 13}, {1, 1, 1}, {64, 1000, 250}, {16, 32, 32},
                                                             {10, 19, 1}, {300, 9, 4}}) {
    SCOPED_TRACE(std::to_string(R) + "x" + std::to_string(C) + " k=" + std::to_string(k));
    const std::vector<int32_t> sel = random_sel(C, k, 71);
    // importance: the same sums in the same order
    const std::vector<float> g = randn((size_t)R * C, 72), gt = transposed(g, R, C);
    for (bool l2 : {false, true}) {
      std::vector<float> imp(C), impt(C);
      cpu::column_importance(g.data(), R, C, l2, imp.data());
      cpu::column_importance(gt.data(), R, C, l2, impt.data(), true);
      EXPECT_TRUE(bits_equal(imp, impt)) << "l2 " << l2;
    }
    // selective AdamW: w, g (C, R), m, v (k, R)
    std::vector<float> w = randn((size_t)R * C, 73), wt = transposed(w, R, C);
    std::vector<float> m((size_t)R * k, 0.0f), v = m, mt = m, vt = m;
    cpu::AdamParams hp;
    hp.lr = 1e-2f;
    hp.weight_decay = 0.01f;
    for (int64_t step = 1; step <= 4; ++step) {
      const std::vector<float> gs = randn((size_t)R * C, 200 + (uint32_t)step), gst = transposed(gs, R, C);
      cpu::selective_adam(w.data(), R, C, sel.data(), k, gs.data(), m.data(), v.data(), hp, step);
      cpu::selective_adam(wt.data(), R, C, sel.data(), k, gst.data(), mt.data(), vt.data(), hp, step, true);
    }
    EXPECT_TRUE(bits_equal(transposed(wt, C, R), w));
    EXPECT_TRUE(bits_equal(transposed(mt, k, R), m));
    EXPECT_TRUE(bits_equal(transposed(vt, k, R), v));
    // merge, fp32, bf16 and fp16 sources, tiles of the flat storage not aligned to columns
    const std::vector<float> src = randn((size_t)R * C, 74), dst0 = randn((size_t)R * C, 75);
    const std::vector<float> srct = transposed(src, R, C), dst0t = transposed(dst0, R, C);
    std::vector<uint16_t> src16(srct.size());
    for (int half = 0; half < 3; ++half)
      for (const int32_t* sp : {sel.data(), (const int32_t*)nullptr}) {
        const int kk = sp ? k : 0;
        std::vector<float> want = dst0;
        if (half == 0) {
          cpu::merge_unselected(want.data(), C, src.data(), 0, want.size(), sp, kk);
        } else {  // the row-major merge of the unpacked values
          std::vector<uint16_t> s16(src.size());
          std::vector<float> un(src.size());
          if (half == 1) cpu::pack_bf16(src.data(), s16.data(), s16.size()), cpu::unpack_bf16(s16.data(), un.data(), un.size());
          else cpu::pack_fp16(src.data(), s16.data(), s16.size()), cpu::unpack_fp16(s16.data(), un.data(), un.size());
          cpu::merge_unselected(want.data(), C, un.data(), 0, want.size(), sp, kk);
          if (half == 1) cpu::pack_bf16(srct.data(), src16.data(), src16.size());
          else cpu::pack_fp16(srct.data(), src16.data(), src16.size());
        }
        for (size_t tile : {(size_t)1, (size_t)7, (size_t)R, (size_t)R + 3, (size_t)R * C}) {
          std::vector<float> dst = dst0t;
          size_t written = 0;
          for (size_t off = 0; off < dst.size(); off += tile) {
            const size_t n = std::min(tile, dst.size() - off);
            if (half == 0) written += cpu::merge_unselected(dst.data(), C, srct.data() + off, off, n, sp, kk, R);
            if (half == 1) written += cpu::merge_unselected_bf16(dst.data(), C, src16.data() + off, off, n, sp, kk, R);
            if (half == 2) written += cpu::merge_unselected_fp16(dst.data(), C, src16.data() + off, off, n, sp, kk, R);
          }
          EXPECT_EQ(written, (size_t)R * (C - kk)) << "half " << half << " tile " << tile;
          EXPECT_TRUE(bits_equal(transposed(dst, C, R), want)) << "half " << half << " tile " << tile;
        }
      }
    // gradient mass: the same sums up to the order of the double additions
    double total = -1, selected = -1, total_t = -1, selected_t = -1;
    cpu::grad_mass(g.data(), R, C, sel.data(), k, &total, &selected);
    cpu::grad_mass(gt.data(), R, C, sel.data(), k, &total_t, &selected_t, true);
    EXPECT_NEAR(total_t, total, 1e-12 * total);
    EXPECT_NEAR(selected_t, selected, 1e-12 * selected);
  }
}

}  // namespace
}  // namespace zf::test
