// oneDNN matmuls (codelets/kernels/cpu/gemm.hpp, matmul.cpp): cached primitives called from
// several threads at once give the serial bits; bf16 matmuls within bf16's rounding of the exact
// result (the same fp32-summation bound as fp32 against the exact product of the rounded inputs),
// and the fp32 path where the CPU has no native bf16 or the batch is small.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/cpu/gemm.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#include "tests/reference/bf16_ref.hpp"
#include "tests/reference/gpt_ref.hpp"

namespace zf::test {
namespace {

namespace cpu = zf::kernels::cpu;

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

std::vector<float> transposed(const std::vector<float>& a, int R, int C) {
  std::vector<float> t(a.size());
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) t[(size_t)c * R + r] = a[(size_t)r * C + c];
  return t;
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = zf::ref::naive_bf16(x);
  return v;
}

// C (M, P) against the exact A (M, n) B (n, P): the largest of |C - AB| / bound over the outputs,
// bound = rel * sum_i |a_i b_i| + kResidualMax * n * eps_fp32 * |a| |b| (a row of A, a column of B)
double worst(const std::vector<float>& C, const std::vector<float>& A, const std::vector<float>& B, int M, int n,
             int P, double rel) {
  double w = 0;
  for (int m = 0; m < M; ++m)
    for (int p = 0; p < P; ++p) {
      double s = 0, sa = 0, aa = 0, bb = 0;
      for (int i = 0; i < n; ++i) {
        const double a = A[(size_t)m * n + i], b = B[(size_t)i * P + p];
        s += a * b, sa += std::fabs(a * b), aa += a * a, bb += b * b;
      }
      const double bound = rel * sa + kResidualMax * n * FLT_EPSILON * std::sqrt(aa * bb) + 1e-300;
      w = std::max(w, std::fabs((double)C[(size_t)m * P + p] - s) / bound);
    }
  return w;
}

TEST(OneDnnGemm, ConcurrentCallsGiveTheSerialBits) {
  // shapes of the GPT's tiles in both layouts (both flags), and an accumulating one
  const std::vector<cpu::GemmShape> shapes = {{512, 384, 128, false, true, 128, 128, 384, false, false},
                                              {512, 384, 128, false, false, 128, 384, 384, false, false},
                                              {128, 256, 1024, true, false, 128, 256, 256, true, false},
                                              {256, 128, 512, false, true, 512, 512, 128, false, false}};
  std::vector<std::vector<float>> A, B, C0, serial;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& s = shapes[i];
    A.push_back(normal((size_t)s.M * s.K, 11 + i));
    B.push_back(normal((size_t)s.K * s.N, 21 + i));
    C0.push_back(normal((size_t)s.M * s.N, 31 + i));
    serial.push_back(C0[i]);
    cpu::dnnl_gemm(s, A[i].data(), B[i].data(), serial[i].data());
  }
  std::vector<std::vector<std::vector<float>>> got(2, std::vector<std::vector<float>>(shapes.size()));
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t j = 0; j < shapes.size(); ++j) {
          const size_t i = t ? shapes.size() - 1 - j : j;  // the two threads in opposite orders
          got[t][i] = C0[i];
          cpu::dnnl_gemm(shapes[i], A[i].data(), B[i].data(), got[t][i].data());
        }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 2; ++t)
    for (size_t i = 0; i < shapes.size(); ++i) EXPECT_TRUE(bits_equal(got[t][i], serial[i])) << "thread " << t << " shape " << i;
}

// The three products of x (B, K) -> y (B, N) in both weight layouts with bf16 = true.
// The kept-operand kernels (precision bf16 with each activation and output gradient converted
// once, codelets/matmul.cpp): the forward and the data gradient leave their input's bf16 copy
// (pack_bf16's bits), and all three give the bits of the per-call bf16 kernels, on every oneDNN
// path: tiles of rows, a head wider than the batch (N > B), both weight layouts, dw (K, N) cut
// by columns (N > K) and by rows.
TEST(MatmulBf16, KeptOperandsBitwiseSameAsPerCall) {
  if (!cpu::native_bf16()) GTEST_SKIP() << "no native bf16 on this CPU: the kept path is not used";
  for (auto [B, K, N] : std::vector<std::tuple<int, int, int>>{
           {64, 55, 22}, {1024, 128, 384}, {1024, 512, 128}, {256, 64, 512}, {96, 40, 200}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
    const std::vector<float> x = normal((size_t)B * K, 4), w = normal((size_t)N * K, 5), dy = normal((size_t)B * N, 6);
    std::vector<uint16_t> xh_ref((size_t)B * K), dyh_ref((size_t)B * N);
    cpu::pack_bf16(x.data(), xh_ref.data(), xh_ref.size());
    cpu::pack_bf16(dy.data(), dyh_ref.data(), dyh_ref.size());
    for (bool io : {false, true}) {
      SCOPED_TRACE(io ? "(in, out)" : "(out, in)");
      const std::vector<float> wl = io ? transposed(w, N, K) : w;
      std::vector<float> y((size_t)B * N), dx((size_t)B * K), dw((size_t)N * K, 0.5f);
      std::vector<float> y2 = y, dx2 = dx, dw2 = dw;
      std::vector<uint16_t> xh((size_t)B * K, 0xffff), dyh((size_t)B * N, 0xffff);
      cpu::matmul_fwd(x.data(), wl.data(), y.data(), B, K, N, io, true);
      cpu::matmul_bwd_data(dy.data(), wl.data(), dx.data(), B, K, N, io, true);
      cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N, false, io, true);
      const uint64_t calls = cpu::matmul_kept_bf16_calls();
      cpu::matmul_fwd_keep_x(x.data(), wl.data(), y2.data(), xh.data(), B, K, N, io);
      cpu::matmul_bwd_data_keep_dy(dy.data(), wl.data(), dx2.data(), dyh.data(), B, K, N, io);
      cpu::matmul_bwd_weight_bf16(dyh.data(), xh.data(), dw2.data(), B, K, N, false, io);
      EXPECT_EQ(cpu::matmul_kept_bf16_calls() - calls, 3u);
      EXPECT_EQ(xh, xh_ref);
      EXPECT_EQ(dyh, dyh_ref);
      EXPECT_TRUE(bits_equal(y, y2)) << "forward";
      EXPECT_TRUE(bits_equal(dx, dx2)) << "data gradient";
      EXPECT_TRUE(bits_equal(dw, dw2)) << "weight gradient";
      // accumulate (dw += ...) as the per-call kernel does
      cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N, true, io, true);
      cpu::matmul_bwd_weight_bf16(dyh.data(), xh.data(), dw2.data(), B, K, N, true, io);
      EXPECT_TRUE(bits_equal(dw, dw2)) << "weight gradient, accumulated";
    }
  }
}

// The products with operands given as bf16 bits (a stored bf16 weight or activation read as it
// is, codelets/matmul.cpp): bitwise what the fp32-operand functions give on the widened values, for
// each operand in fp32 or bf16, with bf16 products and without, below kMatmulBf16Rows rows (the
// fp32 paths) and above (oneDNN's tiles, a head wider than the batch), in both weight layouts.
TEST(MatmulBf16, MixedOperandsBitwiseSameAsWidened) {
  for (auto [B, K, N] : std::vector<std::tuple<int, int, int>>{
           {3, 40, 300}, {16, 64, 96}, {64, 55, 22}, {256, 64, 512}, {1024, 128, 384}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
    std::vector<float> x = normal((size_t)B * K, 7), w = normal((size_t)N * K, 8), dy = normal((size_t)B * N, 9);
    std::vector<uint16_t> xh(x.size()), wh(w.size()), dyh(dy.size());
    cpu::pack_bf16(x.data(), xh.data(), xh.size());
    cpu::pack_bf16(w.data(), wh.data(), wh.size());
    cpu::pack_bf16(dy.data(), dyh.data(), dyh.size());
    std::vector<float> xr(x.size()), wr(w.size()), dyr(dy.size());  // the widened bf16 values
    cpu::unpack_bf16(xh.data(), xr.data(), xr.size());
    cpu::unpack_bf16(wh.data(), wr.data(), wr.size());
    cpu::unpack_bf16(dyh.data(), dyr.data(), dyr.size());
    for (bool bf16 : {false, true})
      for (bool io : {false, true})
        for (int mask = 0; mask < 4; ++mask) {  // bit 0: the first operand in bf16, bit 1: the second
          SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp32") + (io ? " (in, out)" : " (out, in)") + " mask " +
                       std::to_string(mask));
          const bool a16 = mask & 1, b16 = mask & 2;
          // the weight's layout: (N, K), or (K, N) for in_out (the bf16 bits transposed as the values)
          std::vector<float> wl = io ? transposed(w, N, K) : w, wlr = io ? transposed(wr, N, K) : wr;
          std::vector<uint16_t> whl((size_t)N * K);
          cpu::pack_bf16(wlr.data(), whl.data(), whl.size());
          const cpu::MatOperand X{a16 ? (const void*)xh.data() : x.data(), a16};
          const cpu::MatOperand W{b16 ? (const void*)whl.data() : wl.data(), b16};
          const cpu::MatOperand DY{a16 ? (const void*)dyh.data() : dy.data(), a16};
          const cpu::MatOperand Xb{b16 ? (const void*)xh.data() : x.data(), b16};
          const float* xw = a16 ? xr.data() : x.data();   // what the reference multiplies
          const float* ww = b16 ? wlr.data() : wl.data();
          const float* dyw = a16 ? dyr.data() : dy.data();
          const float* xbw = b16 ? xr.data() : x.data();
          std::vector<float> y((size_t)B * N), y2 = y, dx((size_t)B * K), dx2 = dx, dw((size_t)N * K, 0.5f), dw2 = dw;
          cpu::matmul_fwd(xw, ww, y.data(), B, K, N, io, bf16);
          cpu::matmul_fwd_mixed(X, W, y2.data(), B, K, N, io, bf16);
          EXPECT_TRUE(bits_equal(y, y2)) << "forward";
          cpu::matmul_bwd_data(dyw, ww, dx.data(), B, K, N, io, bf16);
          cpu::matmul_bwd_data_mixed(DY, W, dx2.data(), B, K, N, io, bf16);
          EXPECT_TRUE(bits_equal(dx, dx2)) << "data gradient";
          cpu::matmul_bwd_weight(dyw, xbw, dw.data(), B, K, N, true, io, bf16);
          cpu::matmul_bwd_weight_mixed(DY, Xb, dw2.data(), B, K, N, true, io, bf16);
          EXPECT_TRUE(bits_equal(dw, dw2)) << "weight gradient, accumulated";
        }
  }
}

// The forward with its output as stored and the bias in the product's tiles (cpu::matmul_fwd_out,
// the matmul codelets' CPU forward): an fp32 y is bitwise matmul_fwd_mixed then bias_add (the
// separate tasks it replaces); a bf16 y is that fp32 result rounded once (PyTorch's addmm). Every
// path: below kMatmulBf16Rows rows, oneDNN's tiles of rows and of output features (a head wider
// than the batch), fp32 and bf16 products, both weight layouts, x in fp32 or bf16, no bias, an
// fp32 bias or a bf16 one; y's old contents (NaN) never leak in. The data gradient likewise
// (cpu::matmul_bwd_data_out): a bf16 dx is matmul_bwd_data_mixed's rounded once, dy fp32 or bf16.
TEST(MatmulBf16, OutputsAsStoredWithBiasInTheTile) {
  for (auto [B, K, N] : std::vector<std::tuple<int, int, int>>{
           {3, 40, 300}, {16, 64, 96}, {64, 55, 22}, {256, 64, 512}, {1024, 128, 384}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
    const std::vector<float> x = normal((size_t)B * K, 7), w = normal((size_t)N * K, 8), b = normal((size_t)N, 10);
    std::vector<uint16_t> xh(x.size()), bh(b.size());
    cpu::pack_bf16(x.data(), xh.data(), xh.size());
    cpu::pack_bf16(b.data(), bh.data(), bh.size());
    std::vector<float> br(b.size());  // the bf16 bias widened
    cpu::unpack_bf16(bh.data(), br.data(), br.size());
    // an output as stored (bf16 bits h, or fp32 v) against the separate tasks' fp32 result
    auto expect_stored = [](bool half, const std::vector<uint16_t>& h, const std::vector<float>& v,
                            const std::vector<float>& want, const char* what) {
      if (half) {
        std::vector<uint16_t> packed(want.size());
        cpu::pack_bf16(want.data(), packed.data(), packed.size());
        EXPECT_TRUE(h == packed) << what << ": bf16 output is not the fp32 result rounded once";
      } else {
        EXPECT_TRUE(bits_equal(want, v)) << what << ": fp32 output differs from the separate tasks'";
      }
    };
    for (bool bf16 : {false, true})
      for (bool io : {false, true})
        for (bool x16 : {false, true})
          for (int bias = 0; bias < 3; ++bias)  // none, fp32, bf16
            for (bool y16 : {false, true}) {
              SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp32") + (io ? " (in, out)" : " (out, in)") +
                           (x16 ? " x bf16" : " x fp32") + " bias " + std::to_string(bias) +
                           (y16 ? " y bf16" : " y fp32"));
              const std::vector<float> wl = io ? transposed(w, N, K) : w;
              const cpu::MatOperand X{x16 ? (const void*)xh.data() : x.data(), x16}, W{wl.data(), false};
              const cpu::MatOperand Bi{bias == 0 ? nullptr : bias == 1 ? (const void*)b.data() : bh.data(), bias == 2};
              std::vector<float> want((size_t)B * N);  // the separate tasks: product, bias add
              cpu::matmul_fwd_mixed(X, W, want.data(), B, K, N, io, bf16);
              if (bias) cpu::bias_add(want.data(), bias == 1 ? b.data() : br.data(), B, N);
              std::vector<float> y((size_t)B * N, NAN);
              std::vector<uint16_t> yh((size_t)B * N, 0x7fc0);
              cpu::matmul_fwd_out(X, W, Bi, {y16 ? (void*)yh.data() : y.data(), y16}, B, K, N, io, bf16);
              expect_stored(y16, yh, y, want, "forward");
              if (bias) continue;  // the data gradient, once per layout and operand (x as dy)
              const std::vector<float> dy = normal((size_t)B * N, 11);
              std::vector<uint16_t> dyh(dy.size());
              cpu::pack_bf16(dy.data(), dyh.data(), dyh.size());
              const cpu::MatOperand DY{x16 ? (const void*)dyh.data() : dy.data(), x16};
              std::vector<float> dx_want((size_t)B * K), dx((size_t)B * K, NAN);
              cpu::matmul_bwd_data_mixed(DY, W, dx_want.data(), B, K, N, io, bf16);
              std::vector<uint16_t> dxh((size_t)B * K, 0x7fc0);
              cpu::matmul_bwd_data_out(DY, W, {y16 ? (void*)dxh.data() : dx.data(), y16}, B, K, N, io, bf16);
              expect_stored(y16, dxh, dx, dx_want, "data gradient");
            }
  }
}

// Where oneDNN rounds a bf16 output itself (bf16 products from kMatmulBf16Rows rows, a CPU with
// native bf16: cpu::matmul_fwd_out and matmul_bwd_data_out), the one departure from the fp32 result
// rounded by kernels/bf16.hpp (gemm.hpp): an fp32 value below 2^-126 in magnitude is a zero of its
// sign, where from_float rounds it to a bf16 subnormal. (The bf16 dot products flush subnormals
// themselves, in both paths: only the bias add can make one, the case built here.)
TEST(MatmulBf16, OutputRoundedByThePrimitiveFlushesSubnormalSums) {
  if (!cpu::native_bf16()) GTEST_SKIP() << "no native bf16: the fp32 paths round every output";
  const int B = 2 * cpu::kMatmulBf16Rows, K = 32, N = 48;
  // every product 2^-120 (rows r = 0 mod 4: 2^-90), two a column, signed by the column; the bias
  // cancels a sum of 2^-119 to m 2^-128, m = 0..3 (subnormal or zero), leaving rows r = 0 mod 4 normal
  std::vector<float> x((size_t)B * K), w((size_t)N * K, 0.0f), b(N);
  for (int r = 0; r < B; ++r)
    for (int k = 0; k < K; ++k) x[(size_t)r * K + k] = std::ldexp(1.0f, r % 4 ? -60 : -30);
  for (int n = 0; n < N; ++n) {
    const float sgn = n % 2 ? -1.0f : 1.0f;
    for (int k = 0; k < 2; ++k) w[(size_t)n * K + k] = sgn * std::ldexp(1.0f, -60);
    b[n] = -sgn * (std::ldexp(1.0f, -119) - (float)(n / 2 % 4) * std::ldexp(1.0f, -128));
  }
  std::vector<float> want((size_t)B * N);
  cpu::matmul_fwd_mixed({x.data(), false}, {w.data(), false}, want.data(), B, K, N, false, true);
  cpu::bias_add(want.data(), b.data(), B, N);
  std::vector<uint16_t> yh((size_t)B * N, 0x7fc0);
  cpu::matmul_fwd_out({x.data(), false}, {w.data(), false}, {b.data(), false}, {yh.data(), true}, B, K, N, false,
                      true);
  int subnormal = 0, normal = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float v = want[i];
    if (v != 0.0f && std::fabs(v) < FLT_MIN) {
      ++subnormal;
      EXPECT_EQ(yh[i], std::signbit(v) ? 0x8000 : 0x0000) << "element " << i << " = " << v;
    } else {
      normal += v != 0.0f;
      EXPECT_EQ(yh[i], zf::kernels::bf16::from_float(v)) << "element " << i << " = " << v;
    }
  }
  EXPECT_GT(subnormal, B * N / 2);  // both cases are exercised
  EXPECT_GT(normal, B * N / 8);
}

TEST(MatmulBf16, WithinBf16RoundingOfTheExactProduct) {
  // bf16 keeps 8 significant bits: each input is within u = 2^-8 of itself relative, a product of
  // two within 2u + u^2; products of two bf16 values are exact in fp32 and summed in fp32
  const double u = std::ldexp(1.0, -8), rel = 2 * u + u * u;
  const bool native = cpu::native_bf16();
  for (auto [B, K, N] : std::vector<std::tuple<int, int, int>>{{64, 55, 22}, {1024, 128, 384}, {1024, 512, 128}, {8, 128, 384}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
    const std::vector<float> x = normal((size_t)B * K, 1), w = normal((size_t)N * K, 2), dy = normal((size_t)B * N, 3);
    const std::vector<float> wt = transposed(w, N, K);
    // as GEMMs: y = x w^T, dx = dy w, dw = dy^T x; and the same of the bf16-rounded inputs
    const std::vector<float> xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
    for (bool io : {false, true}) {
      SCOPED_TRACE(io ? "(in, out)" : "(out, in)");
      const std::vector<float>& wl = io ? wt : w;
      std::vector<float> y((size_t)B * N), dx((size_t)B * K), dw((size_t)N * K), y32 = y, dx32 = dx, dw32 = dw;
      cpu::matmul_fwd(x.data(), wl.data(), y.data(), B, K, N, io, true);
      cpu::matmul_bwd_data(dy.data(), wl.data(), dx.data(), B, K, N, io, true);
      cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N, false, io, true);
      if (io) dw = transposed(dw, K, N);
      if (!native || B < 64) {
        // without native bf16: fp32, as without bf16; below 64 rows: the fp32 paths on the
        // bf16-rounded inputs (the same products as the oneDNN tiles, summed in fp32)
        const std::vector<float> wrt = transposed(wr, N, K);
        const std::vector<float>& xi = native ? xr : x;
        const std::vector<float>& dyi = native ? dyr : dy;
        const std::vector<float>& wi = native ? (io ? wrt : wr) : wl;
        cpu::matmul_fwd(xi.data(), wi.data(), y32.data(), B, K, N, io);
        cpu::matmul_bwd_data(dyi.data(), wi.data(), dx32.data(), B, K, N, io);
        cpu::matmul_bwd_weight(dyi.data(), xi.data(), dw32.data(), B, K, N, false, io);
        if (io) dw32 = transposed(dw32, K, N);
        EXPECT_TRUE(bits_equal(y, y32) && bits_equal(dx, dx32) && bits_equal(dw, dw32));
        if (!native) continue;
      }
      // the exact product of the rounded inputs, to fp32's summation bound (the fp32 kernels on
      // the unrounded inputs are outside it where the sums are short: B = 64, K = 55, N = 22)
      EXPECT_LT(worst(y, xr, transposed(wr, N, K), B, K, N, 0.0), 1.0);
      EXPECT_LT(worst(dx, dyr, wr, B, N, K, 0.0), 1.0);
      EXPECT_LT(worst(dw, transposed(dyr, B, N), xr, N, B, K, 0.0), 1.0);
      // and the exact product of the inputs as given, to bf16's rounding of the two factors
      EXPECT_LT(worst(y, x, transposed(w, N, K), B, K, N, rel), 1.0);
      EXPECT_LT(worst(dx, dy, w, B, N, K, rel), 1.0);
      EXPECT_LT(worst(dw, transposed(dy, B, N), x, N, B, K, rel), 1.0);
    }
  }
}

// The attention with bf16 = true (kernels/cpu/attention.cpp): where the CPU has native bf16, the
// double reference on the bf16-rounded qkv and dout, within fp32 rounding plus the rounding of the
// products' other operands (P, dS) to bf16: u = 2^-8 of sum |term| per output; elsewhere the
// fp32 kernel's bits.
TEST(AttentionBf16, WithinBf16RoundingOfTheReference) {
  const double u = std::ldexp(1.0, -8);
  for (auto [B, T, C, NH] : {std::tuple{2, 22, 64, 4}, std::tuple{1, 150, 32, 4}, std::tuple{16, 64, 128, 4}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T));
    const int hs = C / NH, C3 = 3 * C;
    const std::vector<float> qkv = uniform((size_t)B * T * C3, -1, 1, 41), dout = uniform((size_t)B * T * C, -1, 1, 42);
    std::vector<float> out(dout.size()), lse((size_t)B * NH * T), dqkv(qkv.size());
    cpu::attention_fwd(qkv.data(), out.data(), lse.data(), B, T, C, NH, true);
    cpu::attention_bwd(dout.data(), qkv.data(), lse.data(), dqkv.data(), B, T, C, NH, true);
    if (!cpu::native_bf16()) {
      std::vector<float> o32 = out, l32 = lse, d32 = dqkv;
      cpu::attention_fwd(qkv.data(), o32.data(), l32.data(), B, T, C, NH);
      cpu::attention_bwd(dout.data(), qkv.data(), l32.data(), d32.data(), B, T, C, NH);
      EXPECT_TRUE(bits_equal(out, o32) && bits_equal(lse, l32) && bits_equal(dqkv, d32));
      continue;
    }
    const std::vector<float> qr = rounded(qkv), dr = rounded(dout);
    std::vector<double> q(qr.begin(), qr.end()), d(dr.begin(), dr.end()), outr(out.size()),
        attr((size_t)B * NH * T * T), lser(lse.size()), dqkvr(qkv.size());
    ref::attention_fwd(q.data(), outr.data(), attr.data(), B, T, C, NH, lser.data());
    ref::attention_bwd(d.data(), q.data(), attr.data(), dqkvr.data(), B, T, C, NH);
    // the scores multiply the bf16 q and k exactly (fp32 sums): lse within fp32 rounding
    EXPECT_TRUE(residual_ok(lse.data(), lser.data(), lse.size(), (double)(hs + T))) << "lse";
    // per output: the bf16 rounding of its product's first operand (att or dS) over sum |term|
    std::vector<double> bo(out.size()), bd(qkv.size());
    const double scale = 1.0 / std::sqrt((double)hs);
    auto at = [&](int b, int t, int part, int h, int c) { return ((size_t)b * T + t) * C3 + part * C + h * hs + c; };
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h) {
        const double* P = attr.data() + ((size_t)b * NH + h) * T * T;
        for (int i = 0; i < T; ++i) {
          std::vector<double> ds(T);  // dS row i = P (dP - sum P dP), dP = dout v^T
          double dot = 0;
          for (int j = 0; j <= i; ++j) {
            for (int c = 0; c < hs; ++c) ds[j] += d[((size_t)b * T + i) * C + h * hs + c] * q[at(b, j, 2, h, c)];
            dot += P[(size_t)i * T + j] * ds[j];
          }
          for (int j = 0; j <= i; ++j) ds[j] = P[(size_t)i * T + j] * (ds[j] - dot);
          for (int j = 0; j <= i; ++j)
            for (int c = 0; c < hs; ++c) {
              const double p = std::fabs(P[(size_t)i * T + j]), s = std::fabs(ds[j]) * scale;
              bo[((size_t)b * T + i) * C + h * hs + c] += u * p * std::fabs(q[at(b, j, 2, h, c)]);
              bd[at(b, i, 0, h, c)] += u * s * std::fabs(q[at(b, j, 1, h, c)]);             // dq
              bd[at(b, j, 1, h, c)] += u * s * std::fabs(q[at(b, i, 0, h, c)]);             // dk
              bd[at(b, j, 2, h, c)] += u * p * std::fabs(d[((size_t)b * T + i) * C + h * hs + c]);  // dv
            }
        }
      }
    auto within = [&](const std::vector<float>& x, const std::vector<double>& r, const std::vector<double>& bound,
                      double terms) {
      size_t bad = 0;
      for (size_t i = 0; i < x.size(); ++i)
        bad += !(std::fabs(x[i] - r[i]) <= 1.01 * bound[i] + kResidualMax * terms * FLT_EPSILON);
      return bad;
    };
    EXPECT_EQ(within(out, outr, bo, hs + 2 * T), 0u) << "out";
    EXPECT_EQ(within(dqkv, dqkvr, bd, 2 * hs + 3 * T), 0u) << "dqkv";  // the scores again: hs more
    std::vector<float> o32 = out, l32 = lse;
    cpu::attention_fwd(qkv.data(), o32.data(), l32.data(), B, T, C, NH);
    EXPECT_FALSE(bits_equal(out, o32)) << "bf16 must change the result";
  }
}

}  // namespace
}  // namespace zf::test
