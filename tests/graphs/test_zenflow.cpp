// ZenFlow (docs/zenflow.md): the column kernels against naive loops; the naive reference
// (tests/reference/zenflow_ref.hpp) against itself and the engine's baselines; the engine's
// `zenflow` strategy against the reference, bitwise, for staleness D x update interval K x
// warm-up, under every scheduling policy, with the measured staleness bounded by D x K.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "codelets/codelets.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "graphs/train/loss_scaler.hpp"
#include "models/safetensors.hpp"
#include "test_helpers.hpp"
#include "tests/reference/mlp_ref.hpp"
#include "tests/reference/zenflow_ref.hpp"

namespace zf::test {
namespace {

namespace cpu = zf::kernels::cpu;

constexpr double kResidualMax = 10.0;  // norm-scaled residual bound (Chameleon)

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

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
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

// ------------------------------------------------------------------ specs

// A zenflow spec on the tiny MLP: r = 0.25, reselection every 8 steps.
Spec zen_spec(int64_t steps, int D, int64_t K, int64_t W, const std::string& sched = "lws") {
  Spec s = tiny_spec(steps, "zenflow", sched);
  s.zenflow.given = true;
  s.zenflow.topk_ratio = 0.25;
  s.zenflow.select_strategy = "step";
  s.zenflow.select_interval = 8;
  s.zenflow.update_interval = K;
  s.zenflow.overlap_step = D > 0;
  s.zenflow.max_staleness = D;
  s.zenflow.full_warm_up_rounds = W;
  return s;
}


// Finds a key anywhere in a JSON object tree (nullptr if absent).
const nlohmann::json* find_key(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object()) return nullptr;
  if (auto it = j.find(key); it != j.end()) return &*it;
  for (auto& [k, v] : j.items())
    if (auto* r = find_key(v, key)) return r;
  return nullptr;
}

// ------------------------------------------------------------------ the (in, out) storage

// Under zenflow the MLP stores its weights (in, out) (docs/zenflow.md): what leaves the engine (the
// captured weights, a checkpoint's model and state files) is in the logical (out, in) layout. At a
// synchronous update the host master equals the device weights outside the selected columns, so
// the state file's master must match the model file there, element by element in (out, in) order.
TEST(ZenFlowLayout, StoredInOutCheckpointedInTheLogicalLayout) {
  TempDir tmp("zf_layout");
  Spec s = zen_spec(8, 0, 1, 2);  // synchronous, an update every step
  Weights cap;
  RunOptions o;
  o.quiet = true;
  o.evaluate = false;
  o.checkpoint_dir = tmp.path("ck");
  o.checkpoint_every = 8;
  std::vector<std::pair<bool, std::vector<int64_t>>> storage;
  o.inspect = [&](Runtime& rt, Workload& wl) {
    capture_weights(cap)(rt, wl);
    for (Param* p : wl.params()) storage.push_back({p->in_out, p->value.shape()});
  };
  run_training(s, o);
  ASSERT_EQ(storage.size(), 6u);  // fc1..fc3, weight and bias: 784-32-16-10
  EXPECT_TRUE(storage[0].first);
  EXPECT_EQ(storage[0].second, (std::vector<int64_t>{784, 32}));
  EXPECT_FALSE(storage[1].first);
  std::string latest;
  std::ifstream(tmp.path("ck/latest")) >> latest;
  const std::filesystem::path step = std::filesystem::path(tmp.path("ck")) / latest;
  const StFile model = read_safetensors((step / "model.safetensors").string());
  const StFile state = read_safetensors((step / "state.safetensors").string());
  for (const char* name : {"fc1.weight", "fc2.weight", "fc3.weight"}) {
    SCOPED_TRACE(name);
    const StTensor& t = model.tensors.at(name);
    ASSERT_EQ(t.shape.size(), 2u);
    const int64_t R = t.shape[0], C = t.shape[1];
    EXPECT_LT(R, C);  // (out, in): every layer narrows
    const std::vector<float> w = t.as_f32();
    EXPECT_TRUE(bits_equal(w, cap.at(name)));
    const std::vector<float> master = state.tensors.at(std::string("host.master.") + name).as_f32();
    const StTensor& st = state.tensors.at(std::string("device.sel.") + name);
    std::vector<int32_t> sel(st.bytes.size() / 4);
    std::memcpy(sel.data(), st.bytes.data(), st.bytes.size());
    std::vector<bool> selected((size_t)C, false);
    for (int32_t c : sel) selected[(size_t)c] = true;
    int64_t compared = 0;
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j)
        if (!selected[(size_t)j]) {
          ASSERT_EQ(std::memcmp(&master[(size_t)(i * C + j)], &w[(size_t)(i * C + j)], 4), 0) << i << ", " << j;
          ++compared;
        }
    EXPECT_EQ(compared, R * (C - (int64_t)sel.size()));
  }
}

// ------------------------------------------------------------------ the reference on its own

TEST(ZenFlowRef, DriverReproducesEngineDeviceAdamBitwise) {
  // mlp_ref.hpp's gradients are the engine's: one step, then 20 steps, for both baselines
  for (int64_t steps : {1, 20})
    for (const char* strat : {"device-adam", "zero-offload"}) {
      SCOPED_TRACE(std::string(strat) + " steps=" + std::to_string(steps));
      const Spec s = tiny_spec(steps, strat);
      const Weights eng = train_and_capture(s);
      const ref::RefRun r = ref::run_reference(s);
      EXPECT_EQ(first_difference(eng, r.weights), "");
    }
}

TEST(ZenFlowRef, PredicatesByHand) {
  std::vector<ref::RefParam> none;
  ref::ZenFlowConfig c;
  c.warm_up = 2;
  c.update_interval = 4;
  c.select_interval = 8;
  ref::ZenFlowRef z(c, none);
  std::vector<int64_t> upd, sel;
  for (int64_t t = 0; t < 24; ++t) {
    if (z.is_update(t)) upd.push_back(t);
    if (z.is_select(t)) sel.push_back(t);
  }
  // warm-up 0, 1; fixed boundaries (t + 1 - 2) % 4 == 0: 5, 9, 13, 17, 21; before reselection: 7, 15, 23
  EXPECT_EQ(upd, (std::vector<int64_t>{0, 1, 5, 7, 9, 13, 15, 17, 21, 23}));
  EXPECT_EQ(sel, (std::vector<int64_t>{2, 8, 16}));
}

TEST(ZenFlowRef, SelectiveBiasCorrectionRestartsAtEachSelection) {
  // A constant gradient: with bias correction counted from the moments' zeroing, every AdamW step
  // moves a value by exactly lr (m_hat = g, v_hat = g^2). Counted from step 0 (t + 1), the first
  // selective step after the warm-up moves it by 0.58 lr; counted from the warm-up without a reset
  // (DeepSpeed), the first step after the reselection at t = 6 does.
  std::vector<ref::RefParam> p = {{"w", {2, 4}, std::vector<float>(8, 0.0f)}};
  ref::ZenFlowConfig c;
  c.topk_ratio = 0.25;  // k = 1: column 0, the largest |g|
  c.warm_up = 3;
  c.update_interval = 2;
  c.select_interval = 6;
  c.hp.lr = 0.01f;
  c.hp.weight_decay = 0.0f;
  ref::ZenFlowRef z(c, p);
  const std::vector<float> g = {2.0f, 0.5f, 0.5f, 0.5f, -2.0f, 0.5f, 0.5f, 0.5f};
  for (int64_t t = 0; t < 14; ++t) {
    const std::vector<float> before = p[0].value;
    z.step(t, {g});
    if (t < c.warm_up) continue;
    ASSERT_EQ(z.selection(0), std::vector<int32_t>{0}) << "t=" << t;
    EXPECT_NEAR(p[0].value[0] - before[0], -0.01, 1e-8) << "t=" << t;
    EXPECT_NEAR(p[0].value[4] - before[4], 0.01, 1e-8) << "t=" << t;
  }
  EXPECT_EQ(z.selection_steps(), (std::vector<int64_t>{3, 6, 12}));
}

TEST(ZenFlowRef, TopkOneUpdateOneEqualsDeviceAdam) {
  // every column selected, moments never reset within the run (S = 32 steps > 20)
  Spec s = tiny_spec(20, "zenflow");
  s.zenflow.topk_ratio = 1.0;
  s.zenflow.update_interval = 1;
  s.zenflow.select_strategy = "auto";
  const ref::RefRun z = ref::run_reference(s);
  s.strategy = "device-adam";
  EXPECT_EQ(first_difference(z.weights, ref::run_reference(s).weights), "");
}

TEST(ZenFlowRef, TopkZeroSynchronousEqualsZeroOffload) {
  // k = 1 column on the device, the rest through the host each step: same AdamW, same moments
  Spec s = tiny_spec(20, "zenflow");
  s.zenflow.topk_ratio = 0.0;
  s.zenflow.update_interval = 1;
  s.zenflow.select_strategy = "auto";
  const ref::RefRun z = ref::run_reference(s);
  s.strategy = "zero-offload";
  EXPECT_EQ(first_difference(z.weights, ref::run_reference(s).weights), "");
}

TEST(ZenFlowRef, MergesAreExactlyDIntervalsLate) {
  for (int D : {0, 1, 2})
    for (int64_t K : {1, 4})
      for (int64_t S : {0, 8}) {
        SCOPED_TRACE("D=" + std::to_string(D) + " K=" + std::to_string(K) + " S=" + std::to_string(S));
        Spec s = zen_spec(30, D, K, 0);
        if (S == 0) s.zenflow.select_interval = 1000;
        const ref::RefRun r = ref::run_reference(s);
        int64_t executed = 0;
        for (const ref::MergeRecord& m : r.merges) {
          if (m.flush) {
            EXPECT_LT(m.intervals, D);
            continue;
          }
          ++executed;
          EXPECT_EQ(m.intervals, D) << "job " << m.job;
          if (S == 0) {
            EXPECT_EQ(m.steps, D * K) << "job " << m.job;
          }
          EXPECT_LE(m.steps, D * K) << "job " << m.job;
        }
        // every job merged exactly once, in order
        ASSERT_EQ(r.merges.size(), r.host_update_steps.size());
        for (size_t i = 0; i < r.merges.size(); ++i) EXPECT_EQ(r.merges[i].job, (int64_t)i);
        EXPECT_GT(executed, 0);
      }
}

// Two weights (1 x 10 each), r = 0.1 (k = 1): column 0 carries 10, the other nine a(t) each,
// so per step A = 10 / 1 = 10 and N grows by 9 a(t) / 9 = a(t). Weight 1's unimportant mass is
// twice weight 0's. Hand-computed trigger steps below.
struct AutoCase {
  double auto_ratio;
  std::vector<int64_t> want_updates;
};

TEST(ZenFlowRef, AutoUpdateRuleFiresWhereComputedByHand) {
  auto a_of = [](int64_t t) { return t < 3 ? 0.0f : 2.0f; };
  const std::vector<AutoCase> cases = {
      // both must vote (floor(1.0 * 2) = 2): weight 0 is the slower, N_0 = 2 (t - 2) from t = 3,
      // reaches 10 at t = 7 -> update at 8; then 5 more steps each time: 13, 18
      {1.0, {8, 13, 18}},
      // one vote suffices (floor(0.5 * 2) = 1): weight 1, N_1 = 4 (t - 2), reaches 10 at t = 5
      // (12 >= 10) -> update at 6; then N_1 = 4 u: u = 3 at t = 8 -> 9, 12, 15, 18
      {0.5, {6, 9, 12, 15, 18}},
  };
  for (const AutoCase& ac : cases) {
    SCOPED_TRACE("auto_ratio=" + std::to_string(ac.auto_ratio));
    std::vector<ref::RefParam> P = {{"a.weight", {1, 10}, std::vector<float>(10, 0.5f)},
                                    {"b.weight", {1, 10}, std::vector<float>(10, 0.5f)}};
    ref::ZenFlowConfig c;
    c.topk_ratio = 0.1;
    c.update_interval = -1;
    c.select_interval = 0;
    c.auto_ratio = ac.auto_ratio;
    ref::ZenFlowRef z(c, P);
    for (int64_t t = 0; t < 20; ++t) {
      std::vector<std::vector<float>> g(2, std::vector<float>(10));
      for (int j = 0; j < 10; ++j) {
        g[0][j] = j == 0 ? 10.0f : a_of(t);
        g[1][j] = j == 0 ? 10.0f : 2.0f * a_of(t);
      }
      z.step(t, g);
    }
    EXPECT_EQ(z.host_update_steps(), ac.want_updates);
    EXPECT_EQ(z.selection(0), (std::vector<int32_t>{0}));
  }
}

// ------------------------------------------------------------------ engine vs reference

class ZenFlowEngine : public ::testing::TestWithParam<std::tuple<int, int64_t, int64_t>> {};

// Reruns shorter trainings to find the first step after which engine and reference differ.
std::string first_divergent_step(const std::function<Spec(int64_t)>& make, int64_t steps) {
  for (int64_t s = 1; s <= steps; ++s) {
    const Spec sp = make(s);
    const std::string d = first_difference(train_and_capture(sp), ref::run_reference(sp).weights);
    if (!d.empty()) return "first differs after " + std::to_string(s) + " steps (step t=" +
                           std::to_string(s - 1) + ", flush included): engine vs reference " + d;
  }
  return "no divergence found in shorter runs";
}

TEST_P(ZenFlowEngine, WeightsEqualReferenceBitwise) {
  const auto [D, K, W] = GetParam();
  const int64_t steps = 30;
  auto make = [&](int64_t n) { return zen_spec(n, D, K, W); };
  const Spec s = make(steps);
  nlohmann::json m;
  const Weights eng = train_and_capture(s, &m);
  const ref::RefRun r = ref::run_reference(s);
  const std::string d = first_difference(eng, r.weights);
  EXPECT_EQ(d, "") << first_divergent_step(make, steps);
  if (const auto* h = find_key(m, "host_update_steps")) {
    EXPECT_EQ(h->get<std::vector<int64_t>>(), r.host_update_steps);
  }
}

INSTANTIATE_TEST_SUITE_P(DxKxW, ZenFlowEngine,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values<int64_t>(1, 4),
                                            ::testing::Values<int64_t>(0, 2)),
                         [](const auto& info) {
                           return "D" + std::to_string(std::get<0>(info.param)) + "_K" +
                                  std::to_string(std::get<1>(info.param)) + "_W" +
                                  std::to_string(std::get<2>(info.param));
                         });

// zenflow.semantics "deepspeed" (docs/zenflow.md): the engine equals DeepSpeedZenFlowRef, the
// sequential reference written from DeepSpeed's code (tests/reference/zenflow_ref.hpp), bitwise:
// staleness D (0: overlap_step off, 1: on, with its two host moment sets), update interval K,
// warm-up W, select interval S (every step needs K = 1: DeepSpeed requires S >= K).
class ZenFlowDeepSpeedSemantics
    : public ::testing::TestWithParam<std::tuple<int, std::pair<int64_t, int64_t>, int64_t>> {};

Spec deepspeed_spec(int64_t steps, int D, int64_t K, int64_t S, int64_t W) {
  Spec s = zen_spec(steps, D, K, W);
  s.zenflow.select_interval = S;
  s.zenflow.semantics = "deepspeed";
  return s;
}

TEST_P(ZenFlowDeepSpeedSemantics, WeightsEqualDeepSpeedReferenceBitwise) {
  const auto [D, KS, W] = GetParam();
  const auto [K, S] = KS;
  const int64_t steps = 26;
  auto make = [&](int64_t n) { return deepspeed_spec(n, D, K, S, W); };
  const Spec s = make(steps);
  nlohmann::json m;
  const Weights eng = train_and_capture(s, &m);
  const ref::RefRun r = ref::run_reference(s);
  EXPECT_EQ(first_difference(eng, r.weights), "") << first_divergent_step(make, steps);
  if (const auto* h = find_key(m, "host_update_steps")) {
    EXPECT_EQ(h->get<std::vector<int64_t>>(), r.host_update_steps);
  }
  // the rules change the result: the same spec under semantics "zenflow" differs
  Spec ours = s;
  ours.zenflow.semantics = "zenflow";
  EXPECT_NE(first_difference(eng, train_and_capture(ours)), "");
}

// gradient_clipping under "deepspeed" (docs/zenflow.md): DeepSpeed's norm at each boundary is over
// the window sums of g/K of every parameter, 1-D included; the factor scales the host step's
// gradient (and in the warm-up the 1-D parameters', whose host step is theirs then). The clip is
// set at the median norm of an unclipped reference run (of its warm-up's boundaries when there is
// a warm-up: g/K there is K times smaller than a full window's sum), so some boundaries clip and
// some do not, in the warm-up too; weights, every clip point's norm and the clipped count equal
// the reference's bitwise.
TEST_P(ZenFlowDeepSpeedSemantics, ClippingEqualsDeepSpeedReferenceBitwise) {
  const auto [D, KS, W] = GetParam();
  const auto [K, S] = KS;
  const int64_t steps = 26;
  Spec probe = deepspeed_spec(steps, D, K, S, W);
  probe.gradient_clipping = 1e9;  // norms recorded, nothing clipped
  const ref::RefRun unclipped = ref::run_reference(probe);
  ASSERT_EQ(unclipped.clips.size(), unclipped.host_update_steps.size());
  std::vector<float> norms;
  for (auto& [t, c] : unclipped.clips)
    if (W == 0 || t < W) norms.push_back(c.norm);
  std::sort(norms.begin(), norms.end());
  Spec s = probe;
  s.gradient_clipping = norms[norms.size() / 2];
  const ref::RefRun r = ref::run_reference(s);
  int64_t clipped = 0, clipped_warm = 0;
  for (auto& [t, c] : r.clips) {
    clipped += c.clipped;
    clipped_warm += c.clipped && t < W;
  }
  ASSERT_GT(clipped, 0);
  ASSERT_LT(clipped, (int64_t)r.clips.size());
  if (W > 0) {
    ASSERT_GT(clipped_warm, 0) << "the warm-up's 1-D steps are clipped only if a warm-up boundary clips";
  }

  nlohmann::json m;
  const Weights eng = train_and_capture(s, &m);
  ASSERT_TRUE(m.contains("gradient_clipping"));
  const auto& g = m["gradient_clipping"];
  ASSERT_EQ(g["norms"].size(), r.clips.size());
  for (size_t i = 0; i < r.clips.size(); ++i) {
    EXPECT_EQ(g["steps"][i].get<int64_t>(), r.clips[i].first) << "clip point " << i;
    EXPECT_EQ(g["norms"][i].get<float>(), r.clips[i].second.norm) << "clip point " << i << " at step " << r.clips[i].first;
  }
  EXPECT_EQ(g["clipped_steps"].get<int64_t>(), clipped);
  EXPECT_EQ(first_difference(eng, r.weights), "");
  Spec off = s;
  off.gradient_clipping = 0;
  EXPECT_NE(first_difference(eng, train_and_capture(off)), "") << "clipping changed nothing";
}

INSTANTIATE_TEST_SUITE_P(DxKSxW, ZenFlowDeepSpeedSemantics,
                         ::testing::Combine(::testing::Values(0, 1),
                                            ::testing::Values(std::pair<int64_t, int64_t>{1, 1},
                                                              std::pair<int64_t, int64_t>{1, 8},
                                                              std::pair<int64_t, int64_t>{4, 4},
                                                              std::pair<int64_t, int64_t>{4, 8}),
                                            ::testing::Values<int64_t>(0, 5)),
                         [](const auto& info) {
                           const auto& ks = std::get<1>(info.param);
                           return "D" + std::to_string(std::get<0>(info.param)) + "_K" + std::to_string(ks.first) +
                                  "_S" + std::to_string(ks.second) + "_W" + std::to_string(std::get<2>(info.param));
                         });

// A learning-rate schedule (docs/spec.md): every AdamW application of step t -- device, host,
// selective, 1-D -- uses the rate of step t; the reference computes the rates on its own.
TEST(ZenFlowEngineSchedule, DecayingLearningRateMatchesReferenceBitwise) {
  auto with_schedule = [](Spec s) {
    s.scheduler.type = "WarmupDecayLR";
    s.scheduler.warmup_num_steps = 5;
    s.scheduler.warmup_type = "log";
    s.scheduler.warmup_min_lr = 1e-4;
    s.scheduler.total_num_steps = 24;  // the last steps run at lr 0: only the host merges move weights
    return s;
  };
  for (const char* strategy : {"device-adam", "zero-offload"}) {
    SCOPED_TRACE(strategy);
    const Spec s = with_schedule(tiny_spec(28, strategy));
    const Weights eng = train_and_capture(s);
    EXPECT_EQ(first_difference(eng, ref::run_reference(s).weights), "");
    EXPECT_NE(first_difference(eng, train_and_capture(tiny_spec(28, strategy))), "") << "the schedule changed nothing";
  }
  {  // WarmupCosineLR: step 0 runs at rate 0 (the scheduler's value before its first step)
    Spec s = tiny_spec(28, "device-adam");
    s.scheduler.type = "WarmupCosineLR";
    s.scheduler.warmup_num_steps = 5;
    s.scheduler.warmup_min_ratio = 0.2;
    s.scheduler.total_num_steps = 24;
    s.scheduler.cos_min_ratio = 0.05;
    EXPECT_EQ(first_difference(train_and_capture(s), ref::run_reference(s).weights), "");
  }
  for (int D : {0, 1}) {
    SCOPED_TRACE("zenflow D=" + std::to_string(D));
    auto make = [&](int64_t n) { return with_schedule(zen_spec(n, D, 4, 2)); };
    const Spec s = make(28);
    EXPECT_EQ(first_difference(train_and_capture(s), ref::run_reference(s).weights), "") << first_divergent_step(make, 28);
  }
}

TEST(ZenFlowEngineBaselines, TopkOneUpdateOneEqualsDeviceAdam) {
  Spec s = tiny_spec(20, "zenflow");
  s.zenflow.given = true;
  s.zenflow.topk_ratio = 1.0;
  s.zenflow.update_interval = 1;
  s.zenflow.overlap_step = false;
  s.zenflow.select_strategy = "auto";  // S = 32 steps: no reselection (it would reset the moments)
  const Weights z = train_and_capture(s);
  const Weights dev = train_and_capture(tiny_spec(20, "device-adam"));
  EXPECT_LE(max_rel_diff(z, dev), 1e-6);
  EXPECT_EQ(first_difference(z, dev), "");  // bitwise expected: the same AdamW on the same values
}

TEST(ZenFlowEngineBaselines, TopkZeroSynchronousEqualsZeroOffload) {
  Spec s = tiny_spec(20, "zenflow");
  s.zenflow.given = true;
  s.zenflow.topk_ratio = 0.0;
  s.zenflow.update_interval = 1;
  s.zenflow.overlap_step = false;
  s.zenflow.select_strategy = "auto";
  const Weights z = train_and_capture(s);
  const Weights off = train_and_capture(tiny_spec(20, "zero-offload"));
  EXPECT_EQ(first_difference(z, off), "");
}

TEST(ZenFlowEngineBaselines, AutoUpdateIntervalMatchesReference) {
  for (int D : {0, 1}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    auto make = [&](int64_t n) {
      Spec s = zen_spec(n, D, -1, 2);
      s.zenflow.select_interval = 16;
      return s;
    };
    const Spec s = make(40);
    nlohmann::json m;
    const Weights eng = train_and_capture(s, &m);
    const ref::RefRun r = ref::run_reference(s);
    // the auto rule must fire beyond the warm-up and the reselection boundaries (2 + 15, 31)
    int64_t fired = 0;
    for (int64_t t : r.host_update_steps)
      if (t >= 2 && (t + 1) % 16 != 0) ++fired;
    EXPECT_GT(fired, 0) << "the auto rule never fired in the reference: the test shows nothing";
    EXPECT_EQ(first_difference(eng, r.weights), "") << first_divergent_step(make, 40);
    if (const auto* h = find_key(m, "host_update_steps")) {
      EXPECT_EQ(h->get<std::vector<int64_t>>(), r.host_update_steps);
    } else {
      std::cout << "[ note     ] engine metrics have no host_update_steps: weights compared only\n";
    }
  }
}

// ------------------------------------------------------------------ scheduling policies

TEST(ZenFlowEngineSched, SameWeightsUnderEveryPolicyAndStalenessBounded) {
  const int D = 1;
  const int64_t K = 4;
  const ref::RefRun r = ref::run_reference(zen_spec(30, D, K, 0));
  for (const char* pol : {"eager", "lws", "prio", "dmda", "dmdas", "ws", "zf-deadline"}) {
    SCOPED_TRACE(pol);
    Spec s = zen_spec(30, D, K, 0, pol);
    s.runtime.tile_elems = 1024;  // several host tiles per weight
    nlohmann::json m;
    const Weights eng = train_and_capture(s, &m);
    EXPECT_EQ(first_difference(eng, r.weights), "");
    const nlohmann::json* st = find_key(m, "staleness");
    ASSERT_NE(st, nullptr) << "metrics have no staleness: " << m.dump();
    const nlohmann::json* mx = st->is_object() ? find_key(*st, "max") : nullptr;
    if (mx == nullptr && st->is_object()) mx = find_key(*st, "max_steps");
    ASSERT_NE(mx, nullptr) << "staleness has no max: " << st->dump();
    EXPECT_LE(mx->get<double>(), (double)(D * K)) << st->dump();
    // the reference's merges, the end-of-training flush included
    int64_t ref_max = 0;
    for (const ref::MergeRecord& mr : r.merges) ref_max = std::max(ref_max, mr.steps);
    EXPECT_EQ(mx->get<double>(), (double)ref_max) << st->dump();
    if (const auto* mean = find_key(*st, "mean")) {
      double sum = 0;
      for (const ref::MergeRecord& mr : r.merges) sum += (double)mr.steps;
      EXPECT_NEAR(mean->get<double>(), sum / (double)r.merges.size(), 1e-12) << st->dump();
    }
    if (const auto* n = find_key(*st, "merges")) {
      EXPECT_EQ(n->get<int64_t>(), (int64_t)r.merges.size()) << st->dump();
    }
    if (const auto* mi = find_key(*st, "max_intervals")) {
      EXPECT_LE(mi->get<int64_t>(), D) << st->dump();
    }
    if (const auto* h = find_key(m, "host_update_steps")) {
      EXPECT_EQ(h->get<std::vector<int64_t>>(), r.host_update_steps);
    }
  }
}

// ------------------------------------------------------------------ crossings on the host side

// runtime.crossings = "host" moves the per-step crossings (gradient and parameter copies, ZenFlow's
// accumulation and resync) to the host context: the same weights bitwise, those tasks on the host
// side (so not device busy time), ZenFlow's merges and everything else still on the device side.
TEST(Crossings, OnTheHostSameWeightsAndHostSide) {
  for (const char* strat : {"zero-offload", "zero-offload-dpu", "zenflow"}) {
    SCOPED_TRACE(strat);
    Spec s = std::string(strat) == "zenflow" ? zen_spec(30, 1, 4, 2) : tiny_spec(30, strat);
    s.train.batch_size = 2;  // the small-batch matmul kernels too
    s.runtime.tile_elems = 256;
    const Weights on_device = train_and_capture(s);
    s.runtime.crossings = "host";
    Weights on_host;
    std::vector<TaskRecord> recs;
    RunOptions o;
    o.quiet = true;
    o.evaluate = false;
    o.inspect = [&](Runtime& rt, Workload& wl) {
      recs = rt.tracker().records();
      for (Param* p : wl.params()) on_host[p->name] = logical_values(*p);
    };
    run_training(s, o);
    EXPECT_EQ(first_difference(on_host, on_device), "");
    std::map<std::string, std::pair<int, int>> sides;  // name prefix -> (device, host) task counts
    for (const TaskRecord& r : recs) {
      if (r.step < 0) continue;
      const std::string n = r.name;
      for (const char* pre : {"d2h.grad", "h2d.param", "accumulate.", "d2h.resync", "merge.", "fwd.", "adam.host"})
        if (n.rfind(pre, 0) == 0) (r.side == Side::Device ? sides[pre].first : sides[pre].second)++;
    }
    const bool zen = std::string(strat) == "zenflow";
    for (const char* pre : zen ? std::vector<const char*>{"accumulate.", "d2h.resync"}
                               : std::vector<const char*>{"d2h.grad", "h2d.param"}) {
      EXPECT_EQ(sides[pre].first, 0) << pre << " ran on the device side";
      EXPECT_GT(sides[pre].second, 0) << pre;
    }
    if (zen) {
      EXPECT_GT(sides["merge."].first, 0);
      EXPECT_EQ(sides["merge."].second, 0) << "merges apply results on the device";
    }
    EXPECT_GT(sides["fwd."].first, 0);
    EXPECT_EQ(sides["fwd."].second, 0);
    EXPECT_GT(sides["adam.host"].second, 0);
  }
}

// A zenflow spec (D = 1, K = 4, W = 1) with one field changed, engine vs reference over 40 steps.
void expect_variant_matches(const std::function<void(Spec&)>& set) {
  auto make = [&](int64_t n) {
    Spec s = zen_spec(n, 1, 4, 1);
    set(s);
    return s;
  };
  const Spec s = make(40);
  EXPECT_EQ(first_difference(train_and_capture(s), ref::run_reference(s).weights), "")
      << first_divergent_step(make, 40);
}

TEST(ZenFlowEngineVariants, L2Importance) {
  expect_variant_matches([](Spec& s) { s.zenflow.importance = "l2"; });
}

TEST(ZenFlowEngineVariants, EpochSelection) {  // S = 1 epoch = 32 steps
  expect_variant_matches([](Spec& s) {
    s.zenflow.select_strategy = "epoch";
    s.zenflow.select_interval = 1;
  });
}

TEST(ZenFlowEngineVariants, RaggedHostTiles) {
  expect_variant_matches([](Spec& s) { s.runtime.tile_elems = 272; });
}

TEST(ZenFlowEngineVariants, SmallTopkStalenessThree) {
  expect_variant_matches([](Spec& s) {
    s.zenflow.topk_ratio = 0.05;
    s.zenflow.max_staleness = 3;
  });
}

// reset_host_moments: host m, v zeroed at the end of a 5-step warm-up, bias correction counting
// host updates from there; the engine equals the reference, and the option changes the result.
TEST(ZenFlowEngineVariants, ResetHostMomentsAfterWarmUp) {
  auto set = [](bool reset) {
    return [reset](Spec& s) {
      s.zenflow.full_warm_up_rounds = 5;
      s.zenflow.reset_host_moments = reset;
    };
  };
  expect_variant_matches(set(true));
  Spec a = zen_spec(40, 1, 4, 1), b = a;
  set(true)(a);
  set(false)(b);
  EXPECT_NE(first_difference(ref::run_reference(a).weights, ref::run_reference(b).weights), "");
}

// ------------------------------------------------------------------ precision bf16

bool all_bf16(const Weights& w) {
  for (auto& [name, v] : w)
    for (float x : v) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      if (u & 0xffffu) return false;
    }
  return true;
}

double bytes_of(const nlohmann::json& m, const char* dir) { return m["bytes"][dir].get<double>(); }

TEST(Bf16Engine, BaselinesEqualReferenceBitwise) {
  for (const char* strat : {"device-adam", "zero-offload"}) {
    SCOPED_TRACE(strat);
    Spec s = tiny_spec(20, strat);
    s.precision = "bf16";
    const Weights w = train_and_capture(s);
    EXPECT_EQ(first_difference(w, ref::run_reference(s).weights), "");
    EXPECT_TRUE(all_bf16(w)) << "device parameters hold bf16 values";
    Spec f = s;
    f.precision = "fp32";
    EXPECT_NE(first_difference(w, train_and_capture(f)), "") << "bf16 must change the result";
  }
}

TEST(Bf16Engine, DeviceAdamComputesWhatZeroOffloadDoes) {
  // both: fp32 master weights updated with bf16 gradients, device parameters = bf16(master)
  Spec d = tiny_spec(20, "device-adam"), z = tiny_spec(20, "zero-offload");
  d.precision = z.precision = "bf16";
  EXPECT_EQ(first_difference(train_and_capture(d), train_and_capture(z)), "");
}

TEST(Bf16Engine, ZenFlowEqualsReferenceBitwise) {
  for (auto [D, K, W] : {std::tuple<int, int64_t, int64_t>{1, 4, 0}, {0, 1, 2}, {2, 4, 2}}) {
    SCOPED_TRACE("D=" + std::to_string(D) + " K=" + std::to_string(K) + " W=" + std::to_string(W));
    auto make = [&](int64_t n) {
      Spec s = zen_spec(n, D, K, W);
      s.precision = "bf16";
      return s;
    };
    const Spec s = make(30);
    const Weights w = train_and_capture(s);
    EXPECT_EQ(first_difference(w, ref::run_reference(s).weights), "") << first_divergent_step(make, 30);
    EXPECT_TRUE(all_bf16(w));
  }
}

TEST(Bf16Engine, CrossingsCarryTwoBytesPerValue) {
  // zero-offload and its delayed variant: gradients down and parameters up in bf16, half the bytes;
  // zenflow: parameters up (merges) and down (resyncs) in bf16, the accumulated gradient in fp32
  // (docs/spec.md)
  for (const char* strat : {"zero-offload", "zero-offload-dpu", "zenflow"}) {
    SCOPED_TRACE(strat);
    Spec f = std::string(strat) == "zenflow" ? zen_spec(16, 1, 4, 0) : tiny_spec(16, strat);
    Spec b = f;
    b.precision = "bf16";
    nlohmann::json mf, mb;
    train_and_capture(f, &mf);
    const Weights wb = train_and_capture(b, &mb);
    EXPECT_TRUE(all_bf16(wb));
    EXPECT_EQ(mb["precision"], "bf16");
    EXPECT_GT(bytes_of(mf, "host_to_device"), 0);
    EXPECT_EQ(bytes_of(mb, "host_to_device") * 2, bytes_of(mf, "host_to_device"));
    if (std::string(strat) == "zenflow") {
      // the accumulation crosses in fp32 in both; the one resync (the reselection at step 8: the
      // device parameters of the 2-D weights go to the host masters) crosses in bf16
      const double weights_2d = 784 * 32 + 32 * 16 + 16 * 10;  // tiny_spec's MLP
      EXPECT_DOUBLE_EQ(bytes_of(mf, "device_to_host") - bytes_of(mb, "device_to_host"), weights_2d * 2 / 16);
    } else
      EXPECT_EQ(bytes_of(mb, "device_to_host") * 2, bytes_of(mf, "device_to_host"));
  }
}

// ------------------------------------------------------------------ precision fp16

bool all_fp16(const Weights& w) {
  for (auto& [name, v] : w)
    for (float x : v) {
      const float r = ref::naive_fp16(x);
      if (std::memcmp(&r, &x, 4) != 0) return false;
    }
  return true;
}

// fp16 with a first loss scale of 2^24 (the tiny MLP's first gradients overflow fp16 at it) and a
// growth window of 5 good steps: overflows, halvings, hysteresis and growth all happen in 30 steps.
Spec fp16_of(Spec s) {
  s.precision = "fp16";
  s.fp16.initial_scale_power = 24;
  s.fp16.loss_scale_window = 5;
  return s;
}

std::vector<int64_t> skipped_at(const nlohmann::json& m) { return m["fp16"]["skipped_at"].get<std::vector<int64_t>>(); }

// Runs s with an inf written into the first gradient at the backward of each step of `steps`.
Weights train_with_overflow(const Spec& s, const std::set<int64_t>& steps, nlohmann::json* metrics = nullptr) {
  Weights w;
  RunOptions o;
  o.quiet = true;
  o.evaluate = false;
  o.after_backward = [&](Runtime& rt, Workload& wl, int64_t t) {
    if (steps.count(t))
      insert_scale(rt.device(t).named("test.overflow"), wl.params().front()->grad, INFINITY);
  };
  o.inspect = capture_weights(w);
  nlohmann::json m = run_training(s, o);
  if (metrics) *metrics = m;
  return w;
}

TEST(Fp16LossScaler, DeepSpeedsRuleOnAHandCheckedSequence) {
  // init 2^4, window 3, hysteresis 2: the expected scales were worked out by hand from
  // DeepSpeed's update_scale
  Spec::Fp16 c;
  c.initial_scale_power = 4;
  c.loss_scale_window = 3;
  c.hysteresis = 2;
  LossScaler s(c);
  const struct {
    bool overflow;
    double scale_after;
  } seq[] = {
      {true, 16},   // it 0: hysteresis 2 -> 1, scale kept
      {true, 8},    // it 1: hysteresis is 1: halves; last overflow 1
      {false, 8},   // it 2: stable 0
      {false, 8},   // it 3: stable 1
      {false, 8},   // it 4: stable 2
      {false, 16},  // it 5: stable 3 = window: doubles, hysteresis refilled to 2
      {true, 16},   // it 6: hysteresis 2 -> 1
      {false, 16},  // it 7: stable 0 (no refill without consecutive_hysteresis)
      {true, 8},    // it 8: hysteresis still 1: halves
  };
  for (size_t i = 0; i < std::size(seq); ++i) {
    s.update(seq[i].overflow);
    EXPECT_EQ(s.scale(), seq[i].scale_after) << "iteration " << i;
  }
  c.consecutive_hysteresis = true;  // a good step refills: it 8 then only uses up the hysteresis
  LossScaler t(c);
  for (size_t i = 0; i < std::size(seq); ++i) t.update(seq[i].overflow);
  EXPECT_EQ(t.scale(), 16);
}

TEST(Fp16LossScaler, MatchesDeepSpeedsCodeOnRandomSequences) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    Spec::Fp16 c;
    c.initial_scale_power = (int)(rng() % 20);
    c.loss_scale_window = 1 + rng() % 6;
    c.hysteresis = 1 + (int)(rng() % 3);
    c.consecutive_hysteresis = rng() & 1;
    c.min_loss_scale = 1 + rng() % 4;
    LossScaler s(c);
    ref::RefLossScaler r(std::ldexp(1.0, c.initial_scale_power), c.loss_scale_window, (double)c.min_loss_scale,
                         c.hysteresis, c.consecutive_hysteresis);
    const unsigned p = 1 + rng() % 4;  // overflow with probability 1/(p+1)
    for (int it = 0; it < 300; ++it) {
      const bool of = rng() % (p + 1) == 0;
      bool threw_ref = false, threw = false;
      try {
        r.update_scale(of);
      } catch (const std::runtime_error&) {
        threw_ref = true;
      }
      try {
        s.update(of);
      } catch (const Error&) {
        threw = true;
      }
      ASSERT_EQ(threw, threw_ref) << "trial " << trial << " it " << it;
      if (threw) break;  // DeepSpeed stops the run
      ASSERT_EQ(s.scale(), r.cur_scale) << "trial " << trial << " it " << it;
    }
  }
  Spec::Fp16 st;
  st.loss_scale = 96.0;  // static: never changes, even on overflows
  LossScaler s(st);
  s.update(true);
  s.update(false);
  EXPECT_FALSE(s.dynamic());
  EXPECT_EQ(s.scale(), 96.0);
}

TEST(Fp16Engine, BaselinesEqualReferenceBitwise) {
  for (const char* strat : {"device-adam", "zero-offload"}) {
    SCOPED_TRACE(strat);
    const Spec s = fp16_of(tiny_spec(30, strat));
    nlohmann::json m;
    const Weights w = train_and_capture(s, &m);
    const ref::RefRun r = ref::run_reference(s);
    EXPECT_EQ(first_difference(w, r.weights), "");
    EXPECT_TRUE(all_fp16(w)) << "device parameters hold fp16 values";
    EXPECT_EQ(skipped_at(m), r.skipped);
    EXPECT_FALSE(r.skipped.empty()) << "the first scale must overflow for this test to mean something";
    EXPECT_EQ(m["fp16"]["loss_scale"].get<double>(), r.loss_scale);
    EXPECT_EQ(m["fp16"]["applied_steps"].get<int64_t>(), 30 - (int64_t)r.skipped.size());
    bool grew = false;  // some change doubled the scale (a window of good steps)
    double before = std::ldexp(1.0, s.fp16.initial_scale_power);
    for (auto& c : m["fp16"]["scale_changes"]) {
      grew |= c[1].get<double>() == 2 * before;
      before = c[1].get<double>();
    }
    EXPECT_TRUE(grew) << "a growth after the window " << m["fp16"].dump();
    Spec b = s;
    b.precision = "bf16";
    EXPECT_NE(first_difference(w, train_and_capture(b)), "") << "fp16 must differ from bf16";
  }
}

TEST(Fp16Engine, DeviceAdamComputesWhatZeroOffloadDoes) {
  const Spec d = fp16_of(tiny_spec(20, "device-adam")), z = fp16_of(tiny_spec(20, "zero-offload"));
  EXPECT_EQ(first_difference(train_and_capture(d), train_and_capture(z)), "");
}

TEST(Fp16Engine, ZenFlowEqualsReferenceBitwise) {
  for (auto [D, K, W] : {std::tuple<int, int64_t, int64_t>{1, 4, 0}, {0, 1, 2}, {2, 4, 2}}) {
    SCOPED_TRACE("D=" + std::to_string(D) + " K=" + std::to_string(K) + " W=" + std::to_string(W));
    auto make = [&](int64_t n) { return fp16_of(zen_spec(n, D, K, W)); };
    const Spec s = make(30);
    nlohmann::json m;
    const Weights w = train_and_capture(s, &m);
    const ref::RefRun r = ref::run_reference(s);
    EXPECT_EQ(first_difference(w, r.weights), "") << first_divergent_step(make, 30);
    EXPECT_TRUE(all_fp16(w));
    EXPECT_EQ(skipped_at(m), r.skipped);
    EXPECT_FALSE(r.skipped.empty());
    EXPECT_EQ(m["host_update_steps"].get<std::vector<int64_t>>(), r.host_update_steps)
        << "ZenFlow's intervals count applied steps";
  }
}

TEST(Fp16Engine, ForcedOverflowSkipsExactlyThatStep) {
  // Seven steps whose last overflows end where six steps end: no parameter, moment, counter or
  // host accumulation changed; the next steps then continue as the reference without that step.
  auto cases = std::vector<std::pair<const char*, Spec>>{
      {"device-adam", tiny_spec(7, "device-adam")},
      {"zero-offload-dpu", tiny_spec(7, "zero-offload-dpu")},
      {"zenflow-overlap", zen_spec(7, 1, 4, 0)},
      {"zenflow-warm-up", zen_spec(7, 0, 1, 3)},
  };
  for (auto& [name, base] : cases) {
    SCOPED_TRACE(name);
    Spec s = base;
    s.precision = "fp16";
    s.fp16.initial_scale_power = 10;  // no natural overflow on this MLP
    nlohmann::json m;
    const Weights skipped_last = train_with_overflow(s, {6}, &m);
    EXPECT_EQ(skipped_at(m), std::vector<int64_t>{6});
    Spec six = s;
    six.train.steps = 6;
    EXPECT_EQ(first_difference(skipped_last, train_and_capture(six)), "");
    // a skipped step inside the run (and one inside a ZenFlow interval): engine vs reference
    Spec longer = s;
    longer.train.steps = 20;
    if (std::string(name) == "zero-offload-dpu") continue;  // no reference for the delayed update
    const Weights w = train_with_overflow(longer, {6, 9}, &m);
    const ref::RefRun r = ref::run_reference(longer, {6, 9});
    EXPECT_EQ(r.skipped, (std::vector<int64_t>{6, 9}));
    EXPECT_EQ(first_difference(w, r.weights), "");
    EXPECT_NE(first_difference(w, train_and_capture(longer)), "") << "the skips must change the result";
  }
}

TEST(Fp16Engine, ForcedOverflowHalvesTheScaleWithHysteresis) {
  struct Case {
    int hysteresis;
    bool consecutive;
    std::set<int64_t> overflow;
    std::vector<std::pair<int64_t, double>> changes;  // (step, scale after it)
  };
  const Case cases[] = {
      {1, false, {6}, {{6, 512}}},                 // halves at once
      {2, false, {6}, {}},                         // one overflow uses up the hysteresis only
      {2, false, {6, 7}, {{7, 512}}},              // the second halves
      {2, false, {6, 9}, {{9, 512}}},              // the hysteresis is not refilled by good steps
      {2, true, {6, 9}, {}},                       // consecutive_hysteresis refills it at step 7
      {3, false, {4, 6, 8, 9}, {{8, 512}, {9, 256}}},  // 3 -> 2 -> 1, then every overflow halves
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("hysteresis " + std::to_string(c.hysteresis) + (c.consecutive ? " consecutive" : ""));
    Spec s = tiny_spec(12, "device-adam");
    s.precision = "fp16";
    s.fp16.initial_scale_power = 10;
    s.fp16.hysteresis = c.hysteresis;
    s.fp16.consecutive_hysteresis = c.consecutive;
    nlohmann::json m;
    train_with_overflow(s, c.overflow, &m);
    EXPECT_EQ(skipped_at(m), std::vector<int64_t>(c.overflow.begin(), c.overflow.end()));
    std::vector<std::pair<int64_t, double>> got;
    for (auto& x : m["fp16"]["scale_changes"]) got.push_back({x[0].get<int64_t>(), x[1].get<double>()});
    EXPECT_EQ(got, c.changes) << m["fp16"].dump();
  }
}

TEST(Fp16Engine, StaticScaleSkipsOverflowsAndKeepsTheScale) {
  Spec s = tiny_spec(12, "zero-offload");
  s.precision = "fp16";
  s.fp16.loss_scale = 256;  // static
  nlohmann::json m;
  const Weights w = train_with_overflow(s, {3}, &m);
  EXPECT_EQ(skipped_at(m), std::vector<int64_t>{3});
  EXPECT_EQ(m["fp16"]["loss_scale"].get<double>(), 256.0);
  EXPECT_TRUE(m["fp16"]["scale_changes"].empty());
  EXPECT_EQ(first_difference(w, ref::run_reference(s, {3}).weights), "");
}

TEST(Fp16Engine, CrossingsCarryTwoBytesPerValue) {
  for (const char* strat : {"zero-offload", "zero-offload-dpu", "zenflow"}) {
    SCOPED_TRACE(strat);
    Spec f = std::string(strat) == "zenflow" ? zen_spec(16, 1, 4, 0) : tiny_spec(16, strat);
    Spec h = f, b = f;
    h.precision = "fp16";
    h.fp16.initial_scale_power = 10;
    b.precision = "bf16";
    nlohmann::json mh, mb;
    const Weights wh = train_and_capture(h, &mh);
    train_and_capture(b, &mb);
    EXPECT_TRUE(all_fp16(wh));
    EXPECT_EQ(mh["precision"], "fp16");
    EXPECT_TRUE(mh["fp16"]["skipped_at"].empty());
    EXPECT_EQ(bytes_of(mh, "host_to_device"), bytes_of(mb, "host_to_device"));
    EXPECT_EQ(bytes_of(mh, "device_to_host"), bytes_of(mb, "device_to_host"));
  }
}

}  // namespace
}  // namespace zf::test
