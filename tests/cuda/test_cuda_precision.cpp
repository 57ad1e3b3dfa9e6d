// bf16 and fp16 on the GPU (docs/gpu.md): rounding, packing and the merges from the 2-byte formats,
// bitwise equal to the CPU kernels; precision bf16's products on the tensor cores (the matmuls and
// both attentions with bf16 = true) against the CPU's bf16 path and a double reference that rounds
// where the kernels round. Skipped, with a message, where cudaGetDeviceCount sees no GPU.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "codelets/kernels/cpu/gemm.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cuda/kernels.hpp"
#include "models/rng.hpp"
#include "tests/reference/bf16_ref.hpp"
#include "test_helpers.hpp"
#include "tests/cuda/cuda_helpers.hpp"
namespace zf::test {
namespace {
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

// x rounded to bf16 (the kernels' rounding, kernels/bf16.hpp)
std::vector<float> rounded(std::vector<float> x) {
  cpu::round_bf16(x.data(), x.size());
  return x;
}
double dist(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
  return std::sqrt(d);
}
// The bf16 path was taken: `got` is at least 3 times nearer the bf16 reference than the fp32
// result of the same call is (the bf16 rounding of the operands moves a result by about 2^-9 of
// its terms; the order of fp32 sums by about 2^-24)
::testing::AssertionResult bf16_taken(const std::vector<float>& got, const std::vector<float>& fp32,
                                      const std::vector<float>& ref) {
  const double dg = dist(got, ref), df = dist(fp32, ref);
  if (3 * dg < df) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "distance to the bf16 reference " << dg << ", the fp32 result's " << df;
}
std::vector<float> floats(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

// Precision bf16's matmuls (cublasGemmEx, bf16 operands, fp32 sums) against the CPU's bf16 path:
// the CPU kernel's bf16 flag where the CPU multiplies bf16 natively, else the fp32 kernel on the
// operands rounded to bf16 first, which is what that flag computes (a product of two bf16 values
// is exact in fp32; both sum in fp32). Only the order of the sums differs: the fp32 test's
// norm-scaled residual. Both weight layouts; the weight gradient also accumulating (beta 1).
TEST_F(Matmul, Bf16CudaMatchesCpu) {
  const bool native = cpu::native_bf16();
  for (auto [B, K, N] : std::vector<std::array<int, 3>>{
           {1, 1, 1}, {22, 55, 64}, {64, 1000, 22}, {55, 64, 1000}, {1000, 22, 55}, {1, 1000, 1}, {128, 256, 96}})
    for (bool io : {false, true}) {
      SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(K) + "x" + std::to_string(N) + (io ? " in_out" : ""));
      auto x = randv((size_t)B * K, 71), w = randv((size_t)N * K, 72), dy = randv((size_t)B * N, 73);
      const auto dw0 = randv((size_t)N * K, 74);
      const auto xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
      // the CPU's bf16 results (y, dw, dw0 + dw, dx) and its fp32 ones
      std::vector<float> y(B * N), dw(N * K), dwa = dw0, dx(B * K), y32(y.size()), dw32(dw.size()), dx32(dx.size());
      const float *cx = native ? x.data() : xr.data(), *cw = native ? w.data() : wr.data(),
                  *cdy = native ? dy.data() : dyr.data();
      cpu::matmul_fwd(cx, cw, y.data(), B, K, N, io, native);
      cpu::matmul_bwd_weight(cdy, cx, dw.data(), B, K, N, false, io, native);
      cpu::matmul_bwd_weight(cdy, cx, dwa.data(), B, K, N, true, io, native);
      cpu::matmul_bwd_data(cdy, cw, dx.data(), B, K, N, io, native);
      cpu::matmul_fwd(x.data(), w.data(), y32.data(), B, K, N, io);
      cpu::matmul_bwd_weight(dy.data(), x.data(), dw32.data(), B, K, N, false, io);
      cpu::matmul_bwd_data(dy.data(), w.data(), dx32.data(), B, K, N, io);
      Dev<float> gx(x), gw(w), gdy(dy), gy(y.size()), gdw(dw.size()), gdwa(dw0), gdx(dx.size());
      ok(gpu::matmul_fwd(gx.p(), gw.p(), gy.p(), B, K, N, h, s, io, true));
      ok(gpu::matmul_bwd_weight(gdy.p(), gx.p(), gdw.p(), B, K, N, false, h, s, io, true));
      ok(gpu::matmul_bwd_weight(gdy.p(), gx.p(), gdwa.p(), B, K, N, true, h, s, io, true));
      ok(gpu::matmul_bwd_data(gdy.p(), gw.p(), gdx.p(), B, K, N, h, s, io, true));
      const auto ry = gy.get(), rdw = gdw.get(), rdwa = gdwa.get(), rdx = gdx.get();
      EXPECT_TRUE(residual(ry, y, K)) << "fwd";
      EXPECT_TRUE(residual(rdw, dw, B)) << "bwd_weight";
      EXPECT_TRUE(residual(rdwa, dwa, B + 1)) << "bwd_weight accumulate";
      EXPECT_TRUE(residual(rdx, dx, N)) << "bwd_data";
      EXPECT_TRUE(bf16_taken(ry, y32, y)) << "fwd";
      EXPECT_TRUE(bf16_taken(rdw, dw32, dw)) << "bwd_weight";
      EXPECT_TRUE(bf16_taken(rdx, dx32, dx)) << "bwd_data";
      // the fp32 call is unchanged by the new argument's default
      Dev<float> gy32(y.size());
      ok(gpu::matmul_fwd(gx.p(), gw.p(), gy32.p(), B, K, N, h, s, io));
      EXPECT_TRUE(residual(gy32.get(), y32, K)) << "fwd fp32";
    }
}

// The products with operands stored in bf16 and read as they are (a parameter's or a linear
// layer's input under 2-byte storage, codelets/matmul.cpp): bitwise the fp32-operand launchers'
// results on the same values widened (both hand cuBLAS the same bf16 operands, or the same fp32
// ones), for each operand in fp32 or bf16, bf16 products and fp32, both weight layouts.
TEST_F(Matmul, MixedOperandsBitwiseSameAsWidened) {
  for (auto [B, K, N] : std::vector<std::array<int, 3>>{{1, 1, 1}, {22, 55, 64}, {128, 256, 96}, {55, 64, 1000}})
    for (bool io : {false, true})
      for (bool bf16 : {false, true})
        for (int mask = 0; mask < 4; ++mask) {  // bit 0: the first operand in bf16, bit 1: the second
          SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(K) + "x" + std::to_string(N) + (io ? " in_out" : "") +
                       (bf16 ? " bf16" : " fp32") + " mask " + std::to_string(mask));
          const bool a16 = mask & 1, b16 = mask & 2;
          const auto x = rounded(randv((size_t)B * K, 81)), w = rounded(randv((size_t)N * K, 82)),
                     dy = rounded(randv((size_t)B * N, 83));
          auto bits = [](const std::vector<float>& v) {
            std::vector<uint16_t> h(v.size());
            cpu::pack_bf16(v.data(), h.data(), v.size());
            return h;
          };
          Dev<float> gx(x), gw(w), gdy(dy);
          Dev<uint16_t> hx(bits(x)), hw(bits(w)), hdy(bits(dy));
          const cpu::MatOperand X{a16 ? (const void*)hx.p() : gx.p(), a16}, W{b16 ? (const void*)hw.p() : gw.p(), b16},
              DY{a16 ? (const void*)hdy.p() : gdy.p(), a16}, Xb{b16 ? (const void*)hx.p() : gx.p(), b16};
          Dev<float> y(B * N), y2(B * N), dx(B * K), dx2(B * K), dw(randv((size_t)N * K, 84)), dw2(dw.get());
          ok(gpu::matmul_fwd(gx.p(), gw.p(), y.p(), B, K, N, h, s, io, bf16));
          ok(gpu::matmul_fwd_mixed(X, W, y2.p(), B, K, N, h, s, io, bf16));
          ok(gpu::matmul_bwd_data(gdy.p(), gw.p(), dx.p(), B, K, N, h, s, io, bf16));
          ok(gpu::matmul_bwd_data_mixed(DY, W, dx2.p(), B, K, N, h, s, io, bf16));
          ok(gpu::matmul_bwd_weight(gdy.p(), gx.p(), dw.p(), B, K, N, true, h, s, io, bf16));
          ok(gpu::matmul_bwd_weight_mixed(DY, Xb, dw2.p(), B, K, N, true, h, s, io, bf16));
          EXPECT_TRUE(bitwise(y2.get(), y.get())) << "fwd";
          EXPECT_TRUE(bitwise(dx2.get(), dx.get())) << "bwd_data";
          EXPECT_TRUE(bitwise(dw2.get(), dw.get())) << "bwd_weight accumulate";
        }
}

// Grouped-query causal attention in double, rounding where the bf16 kernels round (the GPT's is
// the case Hkv = H on q, k, v held apart): q, k, v and dout rounded to bf16 first, P after the
// softmax (as an fp32) for the product P v, and the backward's P (recomputed from the lse given,
// as an fp32) for dv, dS after the softmax's backward for dq and dk. bound_*: 2^-8 of the sum of
// |term| over each output's terms (a rounding of P or dS the kernel makes on the other side of a
// bf16 boundary than this one moves its term by at most that).
struct AttentionBf16Ref {
  std::vector<double> out, lse, dq, dk, dv, bound_out, bound_dq, bound_dk, bound_dv;
};
AttentionBf16Ref attention_bf16_ref(const std::vector<float>& q32, const std::vector<float>& k32,
                                    const std::vector<float>& v32, const std::vector<float>& dout32,
                                    const std::vector<float>& lse_fp32, int B, int T, int H, int Hkv, int hs) {
  const double u = std::ldexp(1.0, -8), scale = 1.0 / std::sqrt((double)hs);
  const int G = H / Hkv;
  const auto q = rounded(q32), k = rounded(k32), v = rounded(v32), dout = rounded(dout32);
  AttentionBf16Ref r;
  const size_t nq = q.size(), nkv = k.size();
  r.out.assign(nq, 0);
  r.lse.assign((size_t)B * H * T, 0);
  r.dq.assign(nq, 0), r.dk.assign(nkv, 0), r.dv.assign(nkv, 0);
  r.bound_out.assign(nq, 0), r.bound_dq.assign(nq, 0), r.bound_dk.assign(nkv, 0), r.bound_dv.assign(nkv, 0);
  auto iq = [&](int b, int t, int hd, int d) { return ((size_t)b * T + t) * H * hs + (size_t)hd * hs + d; };
  auto ikv = [&](int b, int t, int g, int d) { return ((size_t)b * T + t) * Hkv * hs + (size_t)g * hs + d; };
  std::vector<double> sc(T), datt(T), a(T), a32(T);
  for (int b = 0; b < B; ++b)
    for (int hd = 0; hd < H; ++hd) {
      const int g = hd / G;
      for (int i = 0; i < T; ++i) {
        const size_t row = ((size_t)b * H + hd) * T + i;
        double mx = -INFINITY, sum = 0, dot = 0;
        for (int j = 0; j <= i; ++j) {
          sc[j] = 0;
          for (int d = 0; d < hs; ++d) sc[j] += (double)q[iq(b, i, hd, d)] * k[ikv(b, j, g, d)];
          sc[j] *= scale;
          mx = std::max(mx, sc[j]);
        }
        for (int j = 0; j <= i; ++j) sum += std::exp(sc[j] - mx);
        r.lse[row] = mx + std::log(sum);
        for (int j = 0; j <= i; ++j) a[j] = std::exp(sc[j] - mx) / sum;
        for (int j = 0; j <= i; ++j) {
          a32[j] = (float)std::exp(sc[j] - (double)lse_fp32[row]);
          datt[j] = 0;
          for (int d = 0; d < hs; ++d) datt[j] += (double)dout[iq(b, i, hd, d)] * v[ikv(b, j, g, d)];
          dot += a32[j] * datt[j];
        }
        for (int j = 0; j <= i; ++j) {
          const double p = ref::naive_bf16((float)a[j]), p32 = ref::naive_bf16((float)a32[j]);
          const double ds = ref::naive_bf16((float)(a32[j] * (datt[j] - dot)));
          for (int d = 0; d < hs; ++d) {
            const size_t oq = iq(b, i, hd, d), okv = ikv(b, j, g, d);
            r.out[oq] += p * v[okv];
            r.bound_out[oq] += u * std::fabs(p * v[okv]);
            r.dv[okv] += p32 * dout[oq];
            r.bound_dv[okv] += u * std::fabs(p32 * dout[oq]);
            r.dq[oq] += scale * ds * k[okv];
            r.bound_dq[oq] += u * std::fabs(scale * ds * k[okv]);
            r.dk[okv] += scale * ds * q[oq];
            r.bound_dk[okv] += u * std::fabs(scale * ds * q[oq]);
          }
        }
      }
    }
  return r;
}
// |x - r| within the bound (times `times`) plus fp32 rounding over `terms` terms of size about 1
size_t outside(const std::vector<float>& x, const std::vector<double>& r, const std::vector<double>& bound,
               double terms, double times = 1.0) {
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i)
    bad += !(std::fabs(x[i] - r[i]) <= times * 1.01 * bound[i] + kResidualMax * terms * FLT_EPSILON);
  return bad;
}

// Grouped-query attention (and, with Hkv = H, the GPT's) in bf16 on the GPU: the double reference
// above; bf16's rounding taken (nearer it than the fp32 kernel's result by 3x). The CPU has no bf16
// grouped-query attention (kernels/cpu/attention.cpp: oneDNN's dense bf16 layout), so the CPU twin
// of this path is the GPT's (Attention.Bf16CudaMatchesCpu). The last two shapes exceed one block
// of attention.cu's scratch: row blocks (1100 rows of 16 heads; 600 in the backward) and chunks
// of sequences (3 of 600), the last of each ragged.
TEST_F(Attention, GqaBf16CudaMatchesReference) {
  for (auto [B, T, H, Hkv, hs] : std::vector<std::tuple<int, int, int, int, int>>{
           {1, 1, 1, 1, 4}, {2, 22, 8, 2, 8}, {3, 64, 6, 3, 16}, {1, 100, 4, 1, 32}, {2, 70, 4, 4, 8},
           {1, 1100, 16, 4, 8}, {3, 600, 16, 8, 8}}) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(T) + " heads " + std::to_string(H) + "/" +
                 std::to_string(Hkv) + " of " + std::to_string(hs));
    const size_t nq = (size_t)B * T * H * hs, nkv = (size_t)B * T * Hkv * hs, nlse = (size_t)B * H * T;
    auto q = randv(nq, 75, -2.0f, 2.0f), k = randv(nkv, 76, -2.0f, 2.0f), v = randv(nkv, 77), dout = randv(nq, 78);
    Dev<float> gq(q), gk(k), gv(v), gdout(dout), gout(nq), glse(nlse), gdq(nq), gdk(nkv), gdv(nkv);
    Dev<float> fout(nq), flse(nlse), fdq(nq), fdk(nkv), fdv(nkv);  // fp32
    ok(gpu::gqa_attention_fwd(gq.p(), gk.p(), gv.p(), gout.p(), glse.p(), B, T, H, Hkv, hs, h, s, true));
    ok(gpu::gqa_attention_bwd(gdout.p(), gq.p(), gk.p(), gv.p(), glse.p(), gdq.p(), gdk.p(), gdv.p(), B, T, H, Hkv,
                              hs, h, s, true));
    ok(gpu::gqa_attention_fwd(gq.p(), gk.p(), gv.p(), fout.p(), flse.p(), B, T, H, Hkv, hs, h, s));
    ok(gpu::gqa_attention_bwd(gdout.p(), gq.p(), gk.p(), gv.p(), flse.p(), fdq.p(), fdk.p(), fdv.p(), B, T, H, Hkv,
                              hs, h, s));
    const auto lse = glse.get();
    const AttentionBf16Ref r = attention_bf16_ref(q, k, v, dout, lse, B, T, H, Hkv, hs);
    const double G = H / Hkv;
    EXPECT_TRUE(residual_ok(lse.data(), r.lse.data(), nlse, (double)(hs + T))) << "lse";
    const auto out = gout.get(), dq = gdq.get(), dk = gdk.get(), dv = gdv.get();
    EXPECT_EQ(outside(out, r.out, r.bound_out, hs + 2 * T), 0u) << "out";
    EXPECT_EQ(outside(dq, r.dq, r.bound_dq, hs + 3 * T), 0u) << "dq";
    EXPECT_EQ(outside(dk, r.dk, r.bound_dk, G * (hs + 3 * T)), 0u) << "dk";
    EXPECT_EQ(outside(dv, r.dv, r.bound_dv, G * (hs + 2 * T)), 0u) << "dv";
    if (T > 1) {  // T = 1: P is exactly 1, and dS exactly 0
      EXPECT_TRUE(bf16_taken(out, fout.get(), floats(r.out))) << "out";
      EXPECT_TRUE(bf16_taken(dq, fdq.get(), floats(r.dq))) << "dq";
      EXPECT_TRUE(bf16_taken(dv, fdv.get(), floats(r.dv))) << "dv";
    }
  }
}

// The GPT's attention in bf16 on the GPU against the CPU kernel's bf16 path (where the CPU has
// native bf16: both within the bound of the reference above, so within twice it of each other)
// and the double reference (everywhere); the last two shapes as GqaBf16CudaMatchesReference's.
TEST_F(Attention, Bf16CudaMatchesCpu) {
  const bool native = cpu::native_bf16();
  for (auto [B, T, C, NH] : std::vector<std::array<int, 4>>{{1, 1, 1, 1}, {2, 22, 64, 4}, {3, 64, 55, 5},
                                                            {1, 100, 32, 2}, {2, 150, 64, 4}, {1, 1100, 128, 16},
                                                            {3, 600, 128, 16}}) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(C) + " nh " + std::to_string(NH));
    const int hs = C / NH;
    if (hs * NH != C) continue;  // the kernels take C a multiple of the heads
    auto qkv = randv((size_t)B * T * 3 * C, 79, -2.0f, 2.0f), dout = randv((size_t)B * T * C, 80);
    const size_t nlse = (size_t)B * NH * T;
    Dev<float> gqkv(qkv), gout(dout.size()), glse(nlse), gdout(dout), gdqkv(qkv.size());
    ok(gpu::attention_fwd(gqkv.p(), gout.p(), glse.p(), B, T, C, NH, h, s, true));
    ok(gpu::attention_bwd(gdout.p(), gqkv.p(), glse.p(), gdqkv.p(), B, T, C, NH, h, s, true));
    const auto out = gout.get(), lse = glse.get(), dqkv = gdqkv.get();
    // q, k, v apart (GQA with Hkv = H) for the reference
    std::vector<float> q((size_t)B * T * C), k(q.size()), v(q.size());
    for (size_t r = 0; r < (size_t)B * T; ++r)
      for (int c = 0; c < C; ++c)
        q[r * C + c] = qkv[r * 3 * C + c], k[r * C + c] = qkv[r * 3 * C + C + c], v[r * C + c] = qkv[r * 3 * C + 2 * C + c];
    const AttentionBf16Ref r = attention_bf16_ref(q, k, v, dout, lse, B, T, NH, NH, hs);
    std::vector<double> rd(qkv.size()), bd(qkv.size());  // dq, dk, dv fused back into (B, T, 3C)
    for (size_t i = 0; i < (size_t)B * T; ++i)
      for (int c = 0; c < C; ++c) {
        rd[i * 3 * C + c] = r.dq[i * C + c], bd[i * 3 * C + c] = r.bound_dq[i * C + c];
        rd[i * 3 * C + C + c] = r.dk[i * C + c], bd[i * 3 * C + C + c] = r.bound_dk[i * C + c];
        rd[i * 3 * C + 2 * C + c] = r.dv[i * C + c], bd[i * 3 * C + 2 * C + c] = r.bound_dv[i * C + c];
      }
    EXPECT_TRUE(residual_ok(lse.data(), r.lse.data(), nlse, (double)(hs + T))) << "lse";
    EXPECT_EQ(outside(out, r.out, r.bound_out, hs + 2 * T), 0u) << "out";
    EXPECT_EQ(outside(dqkv, rd, bd, hs + 3 * T), 0u) << "dqkv";
    if (!native) {
      std::printf("note: this CPU has no native bf16: the CPU's attention runs fp32, compared with the reference only\n");
      continue;
    }
    std::vector<float> cout_(out.size()), clse(nlse), cdqkv(qkv.size());
    cpu::attention_fwd(qkv.data(), cout_.data(), clse.data(), B, T, C, NH, true);
    cpu::attention_bwd(dout.data(), qkv.data(), lse.data(), cdqkv.data(), B, T, C, NH, true);
    const std::vector<double> co(cout_.begin(), cout_.end()), cd(cdqkv.begin(), cdqkv.end()),
        cl(clse.begin(), clse.end());
    EXPECT_TRUE(residual_ok(lse.data(), cl.data(), nlse, 2.0 * (hs + T))) << "lse vs the CPU";
    EXPECT_EQ(outside(out, co, r.bound_out, hs + 2 * T, 2.0), 0u) << "out vs the CPU";
    EXPECT_EQ(outside(dqkv, cd, bd, hs + 3 * T, 2.0), 0u) << "dqkv vs the CPU (from the same lse)";
  }
}

}  // namespace
}  // namespace zf::test
