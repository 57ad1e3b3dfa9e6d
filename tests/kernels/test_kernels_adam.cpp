// The AdamW kernel (codelets/kernels/cpu/) against the double reference (tests/reference/
// reference.hpp); splitting [0, n) into pieces is bitwise identical to one call, the SIMD body and
// the scalar path agree bitwise, and the fused accumulate+AdamW pass equals the three separate
// kernels bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#include "tests/reference/reference.hpp"

namespace {

namespace cpu = zf::kernels::cpu;
namespace ref = zf::ref;
using namespace zf::test;

// ---------------------------------------------------------------------------------------------
// AdamW. 10 steps with fresh random gradients; parameters, m and v compared to the double
// reference (state kept in double there) within 1e-6 relative.
constexpr double kAdamRtol = 1e-6;
// Absolute floor, needed: values that end near zero after cancellation (m = b1 m + (1-b1) g
// changes sign often; so do some p) keep the absolute rounding error of the larger terms they
// came from (seen: ~1e-8 on m ~ 1e-7), which no relative tolerance covers.
constexpr double kAdamAtol = 1e-7;

ref::AdamParams to_ref(const cpu::AdamParams& hp) {
  ref::AdamParams r;
  r.lr = hp.lr;
  r.beta1 = hp.beta1;
  r.beta2 = hp.beta2;
  r.eps = hp.eps;
  r.weight_decay = hp.weight_decay;
  return r;
}

struct AdamRun { std::vector<float> p, m, v; std::vector<double> pr, mr, vr; double p_hist; };

// 10 steps of the kernel and the reference from the same p0 and gradients (m = v = 0 at start);
// p_hist is the largest |p| the reference saw.
AdamRun run_adam(size_t n, const cpu::AdamParams& hp, float grad_scale, uint32_t seed) {
  AdamRun r;
  r.p = uniform(n, -1.f, 1.f, seed++);
  r.m.assign(n, 0.f);
  r.v.assign(n, 0.f);
  r.pr = ref::to_double(r.p);
  r.mr.assign(n, 0.0);
  r.vr.assign(n, 0.0);
  r.p_hist = max_abs(r.pr);
  const ref::AdamParams hr = to_ref(hp);
  for (int64_t t = 1; t <= 10; ++t) {
    auto g = uniform(n, -1.f, 1.f, seed++);
    if (t == 3) std::fill(g.begin(), g.end(), 0.0f);  // a zero gradient: m and v only decay
    auto gd = ref::to_double(g);
    cpu::adam_step(r.p.data(), g.data(), r.m.data(), r.v.data(), n, hp, t, grad_scale);
    ref::adam_step(r.pr.data(), gd.data(), r.mr.data(), r.vr.data(), n, hr, t, grad_scale);
    r.p_hist = std::max(r.p_hist, max_abs(r.pr));
  }
  return r;
}

std::vector<size_t> adam_sizes() {
  std::vector<size_t> s = kSmallSizes;
  if (!quick()) s.push_back(size_t{1} << 20);
  return s;
}

TEST(AdamStep, MatchesReferenceOver10Steps) {
  // grad_scale 0.25 exercises the scaling (a power of two: exact in float and double)
  uint32_t seed = 1000;
  for (float grad_scale : {1.0f, 0.25f})
    for (size_t n : adam_sizes()) {
      SCOPED_TRACE("n=" + std::to_string(n) + " grad_scale=" + std::to_string(grad_scale));
      cpu::AdamParams hp;  // lr 1e-3, betas (0.9, 0.999), eps 1e-8
      hp.weight_decay = 0.01f;
      AdamRun r = run_adam(n, hp, grad_scale, seed);
      seed += 100;
      EXPECT_TRUE(elementwise_close(r.p.data(), r.pr.data(), n, kAdamAtol, kAdamRtol)) << "p";
      EXPECT_TRUE(elementwise_close(r.m.data(), r.mr.data(), n, kAdamAtol, kAdamRtol)) << "m";
      EXPECT_TRUE(elementwise_close(r.v.data(), r.vr.data(), n, kAdamAtol, kAdamRtol)) << "v";
    }
}

// A large lr (0.1) makes the update, not p * decay, dominate, and drives many parameters
// through zero, where a relative tolerance means nothing: a parameter that ends at 0.008 was
// O(1) for most of its 10 steps and carries the rounding of those steps (~20 roundings at
// magnitude ~1: several 1e-7). p is a running sum over steps, so it gets the norm-scaled
// residual: max|p - pref| / (max_t |pref_t| * steps * eps) < 10. m and v keep 1e-6 relative.
TEST(AdamStep, LargeLrMatchesReferenceOver10Steps) {
  uint32_t seed = 1500;
  for (size_t n : adam_sizes()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    cpu::AdamParams hp;
    hp.lr = 0.1f;
    hp.weight_decay = 0.01f;
    AdamRun r = run_adam(n, hp, 1.0f, seed);
    seed += 100;
    EXPECT_TRUE(residual_ok(r.p.data(), r.pr.data(), n, r.p_hist * 10)) << "p";
    EXPECT_TRUE(elementwise_close(r.m.data(), r.mr.data(), n, kAdamAtol, kAdamRtol)) << "m";
    EXPECT_TRUE(elementwise_close(r.v.data(), r.vr.data(), n, kAdamAtol, kAdamRtol)) << "v";
  }
}

// The engine tiles parameters freely (ZenFlow's column selection, CPU/GPU split): one call on
// [0, n) must be bitwise equal to calls on [0, a) and [a, n), for any a.
TEST(AdamStep, SplitIsBitwiseIdentical) {
  cpu::AdamParams hp;
  hp.weight_decay = 0.01f;
  uint32_t seed = 2000;
  for (size_t n : {size_t{1000}, size_t{1027}, size_t{4099}}) {
    std::vector<size_t> splits = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 500, 501,
                                  n - 9, n - 8, n - 1, n};
    auto p0 = uniform(n, -1.f, 1.f, seed++);
    std::vector<std::vector<float>> grads;
    for (int t = 0; t < 3; ++t) grads.push_back(uniform(n, -1.f, 1.f, seed++));
    // whole
    std::vector<float> p = p0, m(n, 0.f), v(n, 0.f);
    for (int t = 0; t < 3; ++t)
      cpu::adam_step(p.data(), grads[t].data(), m.data(), v.data(), n, hp, t + 1, 1.0f);
    for (size_t a : splits) {
      SCOPED_TRACE("n=" + std::to_string(n) + " a=" + std::to_string(a));
      std::vector<float> ps = p0, ms(n, 0.f), vs(n, 0.f);
      for (int t = 0; t < 3; ++t) {
        cpu::adam_step(ps.data(), grads[t].data(), ms.data(), vs.data(), a, hp, t + 1, 1.0f);
        cpu::adam_step(ps.data() + a, grads[t].data() + a, ms.data() + a, vs.data() + a, n - a, hp,
                       t + 1, 1.0f);
      }
      EXPECT_TRUE(bitwise_equal(p, ps)) << "p";
      EXPECT_TRUE(bitwise_equal(m, ms)) << "m";
      EXPECT_TRUE(bitwise_equal(v, vs)) << "v";
    }
    // three pieces at odd offsets, each starting misaligned
    SCOPED_TRACE("n=" + std::to_string(n) + " three pieces");
    const size_t a = 13, b = n / 2 + 5;
    std::vector<float> ps = p0, ms(n, 0.f), vs(n, 0.f);
    for (int t = 0; t < 3; ++t)
      for (auto [lo, hi] : {std::pair{size_t{0}, a}, std::pair{a, b}, std::pair{b, n}})
        cpu::adam_step(ps.data() + lo, grads[t].data() + lo, ms.data() + lo, vs.data() + lo,
                       hi - lo, hp, t + 1, 1.0f);
    EXPECT_TRUE(bitwise_equal(p, ps));
    EXPECT_TRUE(bitwise_equal(m, ms));
    EXPECT_TRUE(bitwise_equal(v, vs));
  }
}

// The vector body (AVX-512 / AVX2) and the scalar head/tail must round identically: calls of one
// element each run only the scalar path, one whole call runs mostly the vector body. Values
// span magnitudes (tiny and huge gradients, zeros, p = 0) so that sqrt, div and the decay all
// see more than one exponent range.
TEST(AdamStep, VectorBodyMatchesScalarPath) {
  cpu::AdamParams hp;
  hp.weight_decay = 0.1f;
  const size_t n = 1031;  // a tail for every SIMD width
  uint32_t seed = 2500;
  auto p0 = uniform(n, -1.f, 1.f, seed++);
  for (size_t i = 0; i < n; i += 37) p0[i] = 0.0f;
  std::vector<std::vector<float>> grads;
  for (int t = 0; t < 4; ++t) {
    auto g = uniform(n, -1.f, 1.f, seed++);
    for (size_t i = 0; i < n; ++i) {
      if (i % 5 == 1) g[i] *= 1e-6f;
      if (i % 7 == 2) g[i] *= 1e4f;
      if (i % 11 == 3) g[i] = 0.0f;
    }
    grads.push_back(g);
  }
  for (float grad_scale : {1.0f, 0.3f}) {
    SCOPED_TRACE("grad_scale=" + std::to_string(grad_scale));
    std::vector<float> p = p0, m(n, 0.f), v(n, 0.f), ps = p0, ms(n, 0.f), vs(n, 0.f);
    for (int t = 0; t < 4; ++t) {
      cpu::adam_step(p.data(), grads[t].data(), m.data(), v.data(), n, hp, t + 1, grad_scale);
      for (size_t i = 0; i < n; ++i)
        cpu::adam_step(&ps[i], &grads[t][i], &ms[i], &vs[i], 1, hp, t + 1, grad_scale);
    }
    EXPECT_TRUE(bitwise_equal(p, ps)) << "p";
    EXPECT_TRUE(bitwise_equal(m, ms)) << "m";
    EXPECT_TRUE(bitwise_equal(v, vs)) << "v";
  }
}

// ZenFlow's fused pass: bitwise equal to accumulate(acc, g, 1) + adam_step(acc) + zero(acc),
// for any split of [0, n) (pieces at odd offsets: scalar heads and tails).
TEST(AdamStepAccumulate, BitwiseEqualsAccumulateAdamZero) {
  cpu::AdamParams hp;
  hp.weight_decay = 0.01f;
  uint32_t seed = 2700;
  std::vector<size_t> sizes = kSmallSizes;
  sizes.push_back(4099);
  if (!quick()) sizes.push_back(size_t{1} << 20);
  for (float grad_scale : {1.0f, 0.25f, 0.3f})
    for (size_t n : sizes) {
      SCOPED_TRACE("n=" + std::to_string(n) + " grad_scale=" + std::to_string(grad_scale));
      auto p0 = uniform(n, -1.f, 1.f, seed++);
      std::vector<float> p = p0, m(n, 0.f), v(n, 0.f), pf = p0, mf(n, 0.f), vf(n, 0.f);
      std::vector<float> acc(n), accf(n);
      for (int64_t t = 1; t <= 3; ++t) {
        // the accumulator holds earlier micro-steps' gradients (not zero) at the fused pass
        acc = uniform(n, -2.f, 2.f, seed++);
        accf = acc;
        auto g = uniform(n, -1.f, 1.f, seed++);
        cpu::accumulate(acc.data(), g.data(), n, 1.0f);
        cpu::adam_step(p.data(), acc.data(), m.data(), v.data(), n, hp, t, grad_scale);
        cpu::zero(acc.data(), n);
        const size_t a = std::min(n, size_t{13}), b = std::clamp(n / 2 + 5, a, n);
        for (auto [lo, hi] : {std::pair{size_t{0}, a}, std::pair{a, b}, std::pair{b, n}})
          cpu::adam_step_accumulate(pf.data() + lo, accf.data() + lo, g.data() + lo, mf.data() + lo,
                                    vf.data() + lo, hi - lo, hp, t, grad_scale);
      }
      EXPECT_TRUE(bitwise_equal(p, pf)) << "p";
      EXPECT_TRUE(bitwise_equal(m, mf)) << "m";
      EXPECT_TRUE(bitwise_equal(v, vf)) << "v";
      EXPECT_TRUE(bitwise_equal(acc, accf)) << "acc";
    }
}

// ZenFlow's host update with its result in the gradient's buffer: bitwise equal to adam_step +
// copy(g, p), for any split of [0, n) (pieces at odd offsets: scalar heads and tails).
TEST(AdamStepResult, BitwiseEqualsAdamThenCopy) {
  cpu::AdamParams hp;
  hp.weight_decay = 0.01f;
  uint32_t seed = 2900;
  std::vector<size_t> sizes = kSmallSizes;
  sizes.push_back(4099);
  if (!quick()) sizes.push_back(size_t{1} << 20);
  for (float grad_scale : {1.0f, 0.25f})
    for (size_t n : sizes) {
      SCOPED_TRACE("n=" + std::to_string(n) + " grad_scale=" + std::to_string(grad_scale));
      auto p0 = uniform(n, -1.f, 1.f, seed++);
      std::vector<float> p = p0, m(n, 0.f), v(n, 0.f), pf = p0, mf(n, 0.f), vf(n, 0.f);
      std::vector<float> g, gf;
      for (int64_t t = 1; t <= 3; ++t) {
        g = uniform(n, -1.f, 1.f, seed++);
        gf = g;
        cpu::adam_step(p.data(), g.data(), m.data(), v.data(), n, hp, t, grad_scale);
        cpu::copy(g.data(), p.data(), n);
        const size_t a = std::min(n, size_t{13}), b = std::clamp(n / 2 + 5, a, n);
        for (auto [lo, hi] : {std::pair{size_t{0}, a}, std::pair{a, b}, std::pair{b, n}})
          cpu::adam_step_result(pf.data() + lo, gf.data() + lo, mf.data() + lo, vf.data() + lo, hi - lo, hp, t,
                                grad_scale);
        ASSERT_TRUE(bitwise_equal(g, gf)) << "result, step " << t;
      }
      EXPECT_TRUE(bitwise_equal(p, pf)) << "p";
      EXPECT_TRUE(bitwise_equal(m, mf)) << "m";
      EXPECT_TRUE(bitwise_equal(v, vf)) << "v";
    }
}

// Precision bf16's fused device AdamW: bitwise [round_bf16(g)] + adam_step(master) + copy(param,
// master) + round_bf16(param), with and without the gradient's rounding, for any split of [0, n)
// (pieces at odd offsets: scalar heads and tails), on gradients holding rounding ties, values
// that round up into the next binade, subnormals, infinities and NaNs among random values.
TEST(AdamStepBf16, BitwiseEqualsRoundAdamCopyRound) {
  cpu::AdamParams hp;
  hp.weight_decay = 0.01f;
  uint32_t seed = 3100;
  std::vector<size_t> sizes = kSmallSizes;
  sizes.push_back(4099);
  if (!quick()) sizes.push_back(size_t{1} << 20);
  auto from_bits = [](uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  };
  const std::vector<float> special = {
      from_bits(0x3f808000u),  // a tie, even kept bit: stays
      from_bits(0x3f818000u),  // a tie, odd kept bit: rounds up
      from_bits(0x3f7fffffu),  // rounds up into the next binade
      from_bits(0x00000001u),  // the least subnormal
      from_bits(0x807fffffu),  // the largest negative subnormal: rounds to -2^-126
      from_bits(0x7f7fffffu),  // FLT_MAX: rounds to infinity
      std::numeric_limits<float>::infinity(),
      from_bits(0x7f800001u),  // a signalling NaN: quiet, sign and upper bits kept
      from_bits(0xffc12345u),  // a negative quiet NaN
      -0.0f};
  for (bool round_grad : {true, false})
    for (float grad_scale : {1.0f, 0.25f})
      for (size_t n : sizes) {
        SCOPED_TRACE("n=" + std::to_string(n) + " grad_scale=" + std::to_string(grad_scale) +
                     " round_grad=" + std::to_string(round_grad));
        const auto w0 = uniform(n, -1.f, 1.f, seed++);
        std::vector<float> w = w0, m(n, 0.f), v(n, 0.f), p(n, 7.f);  // the separate kernels
        std::vector<float> wf = w0, mf(n, 0.f), vf(n, 0.f), pf(n, 7.f);  // the fused one
        for (int64_t t = 1; t <= 3; ++t) {
          auto g = uniform(n, -1.f, 1.f, seed++);
          // the specials in the last step only (a NaN would make every later step NaN), spread
          for (size_t i = 0; t == 3 && i < special.size() && i < n; ++i) g[(i * 7919) % n] = special[i];
          auto gf = g;
          if (round_grad) cpu::round_bf16(g.data(), n);
          cpu::adam_step(w.data(), g.data(), m.data(), v.data(), n, hp, t, grad_scale);
          cpu::copy(p.data(), w.data(), n);
          cpu::round_bf16(p.data(), n);
          const size_t a = std::min(n, size_t{13}), b = std::clamp(n / 2 + 5, a, n);
          for (auto [lo, hi] : {std::pair{size_t{0}, a}, std::pair{a, b}, std::pair{b, n}})
            cpu::adam_step_bf16(wf.data() + lo, gf.data() + lo, mf.data() + lo, vf.data() + lo, pf.data() + lo,
                                hi - lo, hp, t, grad_scale, round_grad);
          ASSERT_TRUE(bitwise_equal(g, gf)) << "gradient, step " << t;
          ASSERT_TRUE(bitwise_equal(p, pf)) << "parameter, step " << t;
        }
        EXPECT_TRUE(bitwise_equal(w, wf)) << "master";
        EXPECT_TRUE(bitwise_equal(m, mf)) << "m";
        EXPECT_TRUE(bitwise_equal(v, vf)) << "v";
      }
}
}  // namespace
