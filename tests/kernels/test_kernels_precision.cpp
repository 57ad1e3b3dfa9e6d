// bf16 and fp16 (codelets/kernels/cpu/, codelets/kernels/fp16.hpp): rounding on hand-checked
// values and against the naive references (tests/reference/bf16_ref.hpp, fp16_ref.hpp) on random
// bits, overflow counts, and the merges from the 2-byte formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/fp16.hpp"
#include "codelets/wire.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#include "tests/reference/bf16_ref.hpp"
#include "tests/reference/fp16_ref.hpp"

namespace {

namespace cpu = zf::kernels::cpu;
namespace ref = zf::ref;
using namespace zf::test;

// ---------------------------------------------------------------- bf16
float f32_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

TEST(Bf16, HandCheckedRounding) {
  struct Case {
    uint32_t in;
    uint16_t want;
    const char* what;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80, "1.0 exact"},
      {0x3f808000u, 0x3f80, "1 + 2^-8: tie, to the even 1.0"},
      {0x3f818000u, 0x3f82, "1 + 3*2^-8: tie, to the even 1 + 2^-6"},
      {0x3f808001u, 0x3f81, "just above the tie: up"},
      {0x3f807fffu, 0x3f80, "just below the tie: down"},
      {0xbf818000u, 0xbf82, "negative tie to even"},
      {0x80000000u, 0x8000, "-0"},
      {0x000116c2u, 0x0001, "a subnormal, nearer its truncation"},
      {0x00018000u, 0x0002, "a subnormal tie: to the even"},
      {0x7f7f0000u, 0x7f7f, "largest finite bf16, exact"},
      {0x7f7f7fffu, 0x7f7f, "below the overflow tie: stays finite"},
      {0x7f7f8000u, 0x7f80, "overflow tie: to the even, infinity"},
      {0x7f7fffffu, 0x7f80, "FLT_MAX rounds to infinity"},
      {0xff800000u, 0xff80, "-infinity"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const float x = f32_of(c.in);
    uint16_t h = 0;
    cpu::pack_bf16(&x, &h, 1);
    EXPECT_EQ(h, c.want);
    float back = 0;
    cpu::unpack_bf16(&h, &back, 1);
    EXPECT_EQ(bits_of(back), (uint32_t)c.want << 16) << "unpacking is exact";
  }
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu}) {  // quiet and signalling NaNs stay NaN
    const float x = f32_of(nan);
    uint16_t h = 0;
    cpu::pack_bf16(&x, &h, 1);
    float back = 0;
    cpu::unpack_bf16(&h, &back, 1);
    EXPECT_TRUE(std::isnan(back)) << std::hex << nan;
    EXPECT_EQ(h >> 15, nan >> 31) << "sign kept";
  }
}

TEST(Bf16, PackAndRoundMatchNaiveOnRandomBits) {
  std::mt19937 rng(7);
  std::vector<float> x(1 << 16);
  for (auto& v : x) v = f32_of(rng());
  std::vector<uint16_t> h(x.size());
  cpu::pack_bf16(x.data(), h.data(), x.size());
  std::vector<float> r = x;
  cpu::round_bf16(r.data(), r.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = ref::naive_bf16(x[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(r[i])) << i;
      continue;
    }
    ASSERT_EQ(bits_of(r[i]), bits_of(want)) << "x bits " << std::hex << bits_of(x[i]);
    ASSERT_EQ((uint32_t)h[i] << 16, bits_of(want)) << "x bits " << std::hex << bits_of(x[i]);
  }
}

TEST(Bf16, MergeFromBf16EqualsMergeOfUnpackedValues) {
  // a 7 x 1000 weight, a tile starting mid-row, 3 selected columns; longer than the kernel's block
  const int R = 7, C = 1000, k = 3;
  const int32_t sel[k] = {2, 500, 999};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w((size_t)R * C), src(5003);
  for (auto& v : w) v = u(rng);
  for (auto& v : src) v = u(rng);
  std::vector<uint16_t> packed(src.size());
  cpu::pack_bf16(src.data(), packed.data(), src.size());
  std::vector<float> unpacked(src.size());
  cpu::unpack_bf16(packed.data(), unpacked.data(), src.size());
  for (int kk : {0, k}) {
    std::vector<float> a = w, b = w;
    const size_t na = cpu::merge_unselected_bf16(a.data(), C, packed.data(), 1001, src.size(), sel, kk);
    const size_t nb = cpu::merge_unselected(b.data(), C, unpacked.data(), 1001, src.size(), sel, kk);
    EXPECT_EQ(na, nb);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "k=" << kk;
  }
}

// ---------------------------------------------------------------- fp16
uint32_t bits32(float x) { return bits_of(x); }

// AdamW's hyperparameters with this rate and decay (the rest PyTorch's defaults)
cpu::AdamParams adam_params(float lr, float weight_decay) {
  cpu::AdamParams hp;
  hp.lr = lr;
  hp.weight_decay = weight_decay;
  return hp;
}

// An output of a mixed kernel (cpu::*_mixed) as stored (bf16 bits h when half, else the fp32
// values v) against the wrapper's fp32 result want: a bf16 output must be want packed
// (cpu::pack_bf16), an fp32 one want's bits.
::testing::AssertionResult same_as_stored(bool half, const std::vector<uint16_t>& h, const std::vector<float>& v,
                                          const std::vector<float>& want) {
  if (half) {
    std::vector<uint16_t> packed(want.size());
    cpu::pack_bf16(want.data(), packed.data(), want.size());
    if (h != packed) return ::testing::AssertionFailure() << "bf16 output differs from the wrapper's packed result";
  } else if (v.size() != want.size() || std::memcmp(v.data(), want.data(), want.size() * 4) != 0) {
    return ::testing::AssertionFailure() << "fp32 output differs from the wrapper's bits";
  }
  return ::testing::AssertionSuccess();
}

// A mixed kernel's buffer: fp32 values v, or (half) bf16 bits h with v their widened values (what
// the wrapper's fp32 kernel reads); ew() is the buffer as the mixed kernel gets it.
struct Buf {
  std::vector<float> v;
  std::vector<uint16_t> h;
  bool half;
  cpu::Ew ew() { return half ? cpu::Ew{h.data(), true} : cpu::Ew{v.data(), false}; }
};
Buf input(size_t n, bool half, std::mt19937& gen) {  // n normal values, as stored
  std::normal_distribution<float> d(0.0f, 1.0f);
  Buf b{std::vector<float>(n), std::vector<uint16_t>(n), half};
  for (float& x : b.v) x = d(gen);
  cpu::pack_bf16(b.v.data(), b.h.data(), n);
  if (half) cpu::unpack_bf16(b.h.data(), b.v.data(), n);
  return b;
}
Buf output(size_t n, bool half) { return {std::vector<float>(n, NAN), std::vector<uint16_t>(n, 0x7fc0), half}; }
// an output as stored against the wrapper's fp32 result
::testing::AssertionResult same_as_stored(const Buf& b, const std::vector<float>& want) {
  return same_as_stored(b.half, b.h, b.v, want);
}

// The elementwise kernels on bf16-stored operands (cpu::*_mixed: precision bf16's 2-byte
// activations, read and written by the CPU kernels as they are) give bitwise what the 2-byte
// wrapper gave them: every bf16 operand widened whole, the fp32 kernel, each bf16 output rounded
// back (cpu::pack_bf16). Every combination of fp32 and bf16 operands, at lengths that end inside a
// block, span several blocks and several parallel chunks; the bias add on rows of 3 widths, the
// accumulation at an offset.
TEST(Bf16, ElementwiseOnStoredOperandsBitwiseSameAsWidened) {
  using Fn = std::function<void(const std::vector<float*>&, size_t)>;  // the fp32 kernel on fp32 buffers
  using Mixed = std::function<void(const std::vector<cpu::Ew>&, size_t)>;
  struct Op {
    const char* name;
    int ni, no;  // inputs, then outputs (accumulate reads its output's old values)
    Fn fp32;
    Mixed mixed;
  };
  const std::vector<Op> ops = {
      {"gelu_fwd", 1, 1, [](auto& b, size_t n) { cpu::gelu_fwd(b[0], b[1], n); },
       [](auto& e, size_t n) { cpu::act_fwd_mixed(true, e[0], e[1], n); }},
      {"relu_fwd", 1, 1, [](auto& b, size_t n) { cpu::relu_fwd(b[0], b[1], n); },
       [](auto& e, size_t n) { cpu::act_fwd_mixed(false, e[0], e[1], n); }},
      {"gelu_bwd", 2, 1, [](auto& b, size_t n) { cpu::gelu_bwd(b[0], b[1], b[2], n); },
       [](auto& e, size_t n) { cpu::act_bwd_mixed(true, e[0], e[1], e[2], n); }},
      {"relu_bwd", 2, 1, [](auto& b, size_t n) { cpu::relu_bwd(b[0], b[1], b[2], n); },
       [](auto& e, size_t n) { cpu::act_bwd_mixed(false, e[0], e[1], e[2], n); }},
      {"swiglu_fwd", 2, 1, [](auto& b, size_t n) { cpu::swiglu_fwd(b[0], b[1], b[2], n); },
       [](auto& e, size_t n) { cpu::swiglu_fwd_mixed(e[0], e[1], e[2], n); }},
      {"swiglu_bwd", 3, 2, [](auto& b, size_t n) { cpu::swiglu_bwd(b[0], b[1], b[2], b[3], b[4], n); },
       [](auto& e, size_t n) { cpu::swiglu_bwd_mixed(e[0], e[1], e[2], e[3], e[4], n); }},
      {"accumulate", 1, 1, [](auto& b, size_t n) { cpu::accumulate(b[1], b[0], n, 0.37f); },
       [](auto& e, size_t n) { cpu::accumulate_mixed(e[1], e[0], n, 0.37f); }},
  };
  std::mt19937 gen(7);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (const Op& op : ops)
    for (size_t n : {size_t{1000}, size_t{2048 * 3 + 5}, size_t{32768 * 3 + 77}}) {
      const int nb = op.ni + op.no;
      for (unsigned mask = 0; mask < (1u << nb); ++mask) {
        SCOPED_TRACE(std::string(op.name) + " n " + std::to_string(n) + " bf16 mask " + std::to_string(mask));
        // each buffer's values, bf16 ones rounded (as stored); the outputs' old values too
        std::vector<std::vector<float>> v(nb, std::vector<float>(n));
        std::vector<std::vector<uint16_t>> h(nb, std::vector<uint16_t>(n));
        for (int k = 0; k < nb; ++k) {
          for (float& x : v[k]) x = d(gen);
          if (mask >> k & 1) {
            cpu::pack_bf16(v[k].data(), h[k].data(), n);
            cpu::unpack_bf16(h[k].data(), v[k].data(), n);
          }
        }
        // the wrapper's path: fp32 copies, the fp32 kernel, the bf16 outputs rounded
        std::vector<std::vector<float>> w = v;
        std::vector<float*> wp;
        for (auto& x : w) wp.push_back(x.data());
        op.fp32(wp, n);
        std::vector<cpu::Ew> e;
        for (int k = 0; k < nb; ++k)
          e.push_back(mask >> k & 1 ? cpu::Ew{h[k].data(), true} : cpu::Ew{v[k].data(), false});
        op.mixed(e, n);
        for (int k = op.ni; k < nb; ++k) {
          if (mask >> k & 1) {
            std::vector<uint16_t> want(n);
            cpu::pack_bf16(w[k].data(), want.data(), n);
            ASSERT_EQ(h[k], want) << "output " << k;
          } else {
            ASSERT_EQ(0, std::memcmp(v[k].data(), w[k].data(), n * 4)) << "output " << k;
          }
        }
      }
    }
  // the bias add on bf16 rows (the bias fp32)
  for (int N : {7, 384, 5000}) {
    const int B = 70;
    SCOPED_TRACE("bias_add N " + std::to_string(N));
    std::vector<float> y((size_t)B * N), b((size_t)N);
    for (float& x : y) x = d(gen);
    for (float& x : b) x = d(gen);
    std::vector<uint16_t> yh(y.size());
    cpu::pack_bf16(y.data(), yh.data(), y.size());
    cpu::unpack_bf16(yh.data(), y.data(), y.size());
    cpu::bias_add(y.data(), b.data(), B, N);
    std::vector<uint16_t> want(y.size());
    cpu::pack_bf16(y.data(), want.data(), y.size());
    cpu::bias_add_mixed({yh.data(), true}, b.data(), B, N);
    EXPECT_EQ(yh, want);
  }
  // the accumulation at an offset into bf16 buffers: only the range changes
  {
    const size_t n = 10000, off = 333, len = 5000;
    std::vector<float> a(n), g(n);
    for (float& x : a) x = d(gen);
    for (float& x : g) x = d(gen);
    std::vector<uint16_t> ah(n), gh(n);
    cpu::pack_bf16(a.data(), ah.data(), n);
    cpu::pack_bf16(g.data(), gh.data(), n);
    cpu::unpack_bf16(ah.data(), a.data(), n);
    cpu::unpack_bf16(gh.data(), g.data(), n);
    cpu::accumulate(a.data() + off, g.data() + off, len, 1.0f);
    std::vector<uint16_t> want(n);
    cpu::pack_bf16(a.data(), want.data(), n);
    cpu::accumulate_mixed({ah.data() + off, true}, {gh.data() + off, true}, len, 1.0f);
    EXPECT_EQ(ah, want);
  }
}

// The row kernels on bf16-stored operands (cpu::layernorm_*_mixed, rmsnorm_*_mixed, rope_mixed:
// the activations, the norms' weights and their gradients read and written as stored, tile by
// tile) give bitwise the wrapper's result: every bf16 operand widened whole, the fp32 kernel, each
// bf16 output packed. Every combination of fp32 and bf16 for the operands that may be stored in
// bf16 (the statistics and the rotary table stay fp32), widths of one tile, a few tiles and one
// row a tile.
TEST(Bf16, RowKernelsOnStoredOperandsBitwiseSameAsWidened) {
  using Bufs = std::vector<float*>;
  using Ews = std::vector<cpu::Ew>;
  struct Op {
    const char* name;
    // the buffers' lengths from (N, C) (rope: N rows of C = NH * hs, hs 8), and which are outputs
    std::vector<int> len;  // 0: N*C, 1: C, 2: N (fp32 only: statistics), 3: the rope table
    std::vector<bool> out, ew;  // written; may be bf16
    std::function<void(const Bufs&, int, int)> fp32;
    std::function<void(const Ews&, const Bufs&, int, int)> mixed;  // Ews where ew, else Bufs
  };
  const int hs = 8;
  auto tbl = [&](const Bufs& b, int n) { return std::pair<const float*, const float*>{b[1], b[1] + (size_t)n * hs / 2}; };
  auto rope_op = [&](bool fwd) {  // x (RW) and the table, T = N positions of one sequence
    return Op{fwd ? "rope_fwd" : "rope_bwd", {0, 3}, {true, false}, {true, false},
              [&, fwd](const Bufs& b, int N, int C) {
                auto [c, s] = tbl(b, N);
                (fwd ? cpu::rope_fwd : cpu::rope_bwd)(b[0], c, s, 1, N, C / hs, hs, 0);
              },
              [&, fwd](const Ews& e, const Bufs& b, int N, int C) {
                auto [c, s] = tbl(b, N);
                cpu::rope_mixed(fwd, e[0], c, s, 1, N, C / hs, hs, 0);
              }};
  };
  const std::vector<Op> ops = {
      {"layernorm_fwd", {0, 1, 1, 0, 2, 2}, {false, false, false, true, true, true}, {true, true, true, true, false, false},
       [](const Bufs& b, int N, int C) { cpu::layernorm_fwd(b[0], b[1], b[2], b[3], b[4], b[5], N, C, 1e-5f); },
       [](const Ews& e, const Bufs& b, int N, int C) {
         cpu::layernorm_fwd_mixed(e[0], e[1], e[2], e[3], b[4], b[5], N, C, 1e-5f);
       }},
      {"layernorm_bwd", {0, 0, 2, 2, 1, 0, 1, 1}, {false, false, false, false, false, true, true, true},
       {true, true, false, false, true, true, true, true},
       [](const Bufs& b, int N, int C) { cpu::layernorm_bwd(b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], N, C); },
       [](const Ews& e, const Bufs& b, int N, int C) {
         cpu::layernorm_bwd_mixed(e[0], e[1], b[2], b[3], e[4], e[5], e[6], e[7], N, C);
       }},
      {"rmsnorm_fwd", {0, 1, 0, 2}, {false, false, true, true}, {true, true, true, false},
       [](const Bufs& b, int N, int C) { cpu::rmsnorm_fwd(b[0], b[1], b[2], b[3], N, C, 1e-6f); },
       [](const Ews& e, const Bufs& b, int N, int C) { cpu::rmsnorm_fwd_mixed(e[0], e[1], e[2], b[3], N, C, 1e-6f); }},
      {"rmsnorm_bwd", {0, 0, 2, 1, 0, 1}, {false, false, false, false, true, true}, {true, true, false, true, true, true},
       [](const Bufs& b, int N, int C) { cpu::rmsnorm_bwd(b[0], b[1], b[2], b[3], b[4], b[5], N, C); },
       [](const Ews& e, const Bufs& b, int N, int C) { cpu::rmsnorm_bwd_mixed(e[0], e[1], b[2], e[3], e[4], e[5], N, C); }},
      rope_op(true),
      rope_op(false),
  };
  std::mt19937 gen(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const Op& op : ops)
    for (int C : {8, 384, 5000}) {
      const int N = 70;
      const int nb = (int)op.len.size();
      std::vector<int> ewi;  // the buffers that may be bf16
      for (int k = 0; k < nb; ++k)
        if (op.ew[k]) ewi.push_back(k);
      for (unsigned mask = 0; mask < (1u << ewi.size()); ++mask) {
        SCOPED_TRACE(std::string(op.name) + " C " + std::to_string(C) + " bf16 mask " + std::to_string(mask));
        std::vector<bool> half(nb, false);
        for (size_t j = 0; j < ewi.size(); ++j) half[ewi[j]] = mask >> j & 1;
        std::vector<std::vector<float>> v(nb);
        std::vector<std::vector<uint16_t>> h(nb);
        for (int k = 0; k < nb; ++k) {
          const size_t n = op.len[k] == 0 ? (size_t)N * C : op.len[k] == 1 ? (size_t)C : op.len[k] == 2 ? (size_t)N
                                                                                                      : (size_t)N * hs;
          v[k].resize(n);
          // statistics as a forward leaves them: mean around 0, rstd positive
          for (float& x : v[k]) x = op.len[k] == 2 ? 0.5f + std::fabs(d(gen)) : d(gen);
          h[k].resize(n);
          if (half[k]) {
            cpu::pack_bf16(v[k].data(), h[k].data(), n);
            cpu::unpack_bf16(h[k].data(), v[k].data(), n);
          }
        }
        std::vector<std::vector<float>> w = v;  // the wrapper's path
        Bufs wp, vp;
        for (auto& x : w) wp.push_back(x.data());
        for (auto& x : v) vp.push_back(x.data());
        op.fp32(wp, N, C);
        Ews e;
        for (int k = 0; k < nb; ++k) e.push_back(half[k] ? cpu::Ew{h[k].data(), true} : cpu::Ew{v[k].data(), false});
        op.mixed(e, vp, N, C);
        for (int k = 0; k < nb; ++k) {
          if (!op.out[k]) continue;
          ASSERT_TRUE(same_as_stored(half[k], h[k], v[k], w[k])) << "output " << k;
        }
      }
    }
}

// ZenFlow's selective AdamW on a bf16-stored weight and gradient (cpu::selective_adam_mixed: the
// selected columns read and written as stored, where the wrapper widened the whole weight and
// gradient) gives bitwise the wrapper's result: the fp32 kernel on the widened buffers, the weight
// packed after; master and moments the same bits. In place and with a master (filled or not), both
// weight layouts, every mix of fp32 and bf16 weight and gradient.
TEST(Bf16, SelectiveAdamOnStoredWeightBitwiseSameAsWidened) {
  std::mt19937 gen(13);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const cpu::AdamParams hp = adam_params(1e-2f, 0.01f);
  const int R = 37, C = 300, k = 29;
  std::vector<int32_t> sel;
  for (int j = 0; j < k; ++j) sel.push_back(j * 10 + j % 3);
  for (int variant = 0; variant < 3; ++variant)  // in place, master, master filled
    for (bool in_out : {false, true})
      for (int mask = 1; mask < 4; ++mask) {  // bit 0: the weight in bf16, bit 1: the gradient
        SCOPED_TRACE("variant " + std::to_string(variant) + " in_out " + std::to_string(in_out) + " mask " +
                     std::to_string(mask));
        const size_t n = (size_t)R * C, ks = (size_t)R * k;
        std::vector<float> w(n), g(n), x(ks), m(ks), v(ks);
        for (float& e : w) e = d(gen);
        for (float& e : g) e = 0.1f * d(gen);
        for (float& e : x) e = d(gen);
        for (float& e : m) e = 0.01f * d(gen);
        for (float& e : v) e = std::fabs(1e-3f * d(gen));
        std::vector<uint16_t> wh(n), gh(n);
        cpu::pack_bf16(w.data(), wh.data(), n);
        cpu::pack_bf16(g.data(), gh.data(), n);
        if (mask & 1) cpu::unpack_bf16(wh.data(), w.data(), n);
        if (mask & 2) cpu::unpack_bf16(gh.data(), g.data(), n);
        std::vector<float> ww = w, wx = x, wm = m, wv = v;  // the wrapper's path
        float* xp = variant ? x.data() : nullptr;
        if (variant)
          cpu::selective_adam_master(ww.data(), R, C, sel.data(), k, g.data(), wx.data(), variant == 2, wm.data(),
                                     wv.data(), hp, 3, in_out);
        else
          cpu::selective_adam(ww.data(), R, C, sel.data(), k, g.data(), wm.data(), wv.data(), hp, 3, in_out);
        const cpu::Ew we = mask & 1 ? cpu::Ew{wh.data(), true} : cpu::Ew{w.data(), false};
        const cpu::Ew ge = mask & 2 ? cpu::Ew{gh.data(), true} : cpu::Ew{g.data(), false};
        cpu::selective_adam_mixed(we, R, C, sel.data(), k, ge, xp, variant == 2, m.data(), v.data(), hp, 3, in_out);
        ASSERT_TRUE(same_as_stored(mask & 1, wh, w, ww)) << "weight";
        ASSERT_TRUE(same_as_stored(false, {}, m, wm)) << "m";
        ASSERT_TRUE(same_as_stored(false, {}, v, wv)) << "v";
        ASSERT_TRUE(same_as_stored(false, {}, x, wx)) << "master";
      }
}

// Precision bf16's fused device AdamW on a bf16-stored gradient and parameter
// (cpu::adam_step_bf16_mixed: device-adam's adam_group reads and writes them as stored) gives
// bitwise the wrapper's result: the gradient widened whole, cpu::adam_step_bf16 into an fp32
// parameter, the parameter packed; the master and moments the same bits. Both modes (the gradient
// rounded first or not), every mix of fp32 and bf16 gradient and parameter, lengths inside one
// block, across blocks and with a tail of lanes.
TEST(Bf16, AdamOnStoredGradientAndParameterBitwiseSameAsWidened) {
  std::mt19937 gen(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const cpu::AdamParams hp = adam_params(3e-3f, 0.1f);
  for (bool round_grad : {false, true})
    for (size_t n : {size_t{37}, size_t{2048 * 2 + 13}, size_t{9000}})
      for (int mask = 1; mask < 4; ++mask) {  // bit 0: the gradient in bf16, bit 1: the parameter
        SCOPED_TRACE("round_grad " + std::to_string(round_grad) + " n " + std::to_string(n) + " mask " +
                     std::to_string(mask));
        std::vector<float> master(n), g(n), m(n), v(n), param(n, 0.0f);
        for (size_t i = 0; i < n; ++i) {
          master[i] = d(gen);
          g[i] = 0.1f * d(gen);
          m[i] = 0.01f * d(gen);
          v[i] = std::fabs(1e-3f * d(gen));
        }
        std::vector<uint16_t> gh(n), ph(n, 0);
        cpu::pack_bf16(g.data(), gh.data(), n);
        if (mask & 1) cpu::unpack_bf16(gh.data(), g.data(), n);  // as stored
        // the wrapper's path
        std::vector<float> wm = master, wg = g, wmo = m, wv = v, wp = param;
        cpu::adam_step_bf16(wm.data(), wg.data(), wmo.data(), wv.data(), wp.data(), n, hp, 5, 0.5f, round_grad);
        const cpu::Ew ge = mask & 1 ? cpu::Ew{gh.data(), true} : cpu::Ew{g.data(), false};
        const cpu::Ew pe = mask & 2 ? cpu::Ew{ph.data(), true} : cpu::Ew{param.data(), false};
        cpu::adam_step_bf16_mixed(master.data(), ge, m.data(), v.data(), pe, n, hp, 5, 0.5f, round_grad);
        ASSERT_TRUE(same_as_stored(false, {}, master, wm)) << "master";
        ASSERT_TRUE(same_as_stored(false, {}, m, wmo)) << "m";
        ASSERT_TRUE(same_as_stored(false, {}, v, wv)) << "v";
        ASSERT_TRUE(same_as_stored(mask & 2, ph, param, wp)) << "parameter";
        // a stored bf16 gradient is already rounded: the same bits stay
        ASSERT_TRUE(same_as_stored(mask & 1, gh, g, wg)) << "gradient";
      }
}

// The GPT's attention on a bf16-stored qkv, out, dout and dqkv (cpu::attention_*_mixed: read and
// written as stored, the bf16 products' operands copied from the stored bits) gives bitwise what
// the 2-byte wrapper gave: the inputs widened whole, attention_fwd / attention_bwd, the outputs
// rounded back. fp32 and bf16 products, each buffer fp32 or bf16, one row block (T 5), a full
// one (64) and two (80).
TEST(Bf16, AttentionOnStoredQkvBitwiseSameAsWidened) {
  std::mt19937 gen(13);
  const int B = 3, C = 64, NH = 4;
  for (int T : {5, 64, 80})
    for (bool bf16 : {false, true})
      for (int mask = 0; mask < 16; ++mask) {  // bits 0-3: qkv, out, dout, dqkv in bf16
        SCOPED_TRACE("T " + std::to_string(T) + (bf16 ? " bf16" : " fp32") + " mask " + std::to_string(mask));
        const size_t n = (size_t)B * T * C, na = (size_t)B * NH * T;
        Buf qkv = input(3 * n, mask & 1, gen), dout = input(n, mask & 4, gen);
        Buf out = output(n, mask & 2), dqkv = output(3 * n, mask & 8);
        std::vector<float> wout(n), wlse(na, 0.0f), wd(3 * n), lse(na, 0.0f);
        cpu::attention_fwd(qkv.v.data(), wout.data(), wlse.data(), B, T, C, NH, bf16);
        cpu::attention_bwd(dout.v.data(), qkv.v.data(), wlse.data(), wd.data(), B, T, C, NH, bf16);
        cpu::attention_fwd_mixed(qkv.ew(), out.ew(), lse.data(), B, T, C, NH, bf16);
        ASSERT_TRUE(same_as_stored(out, wout)) << "out";
        ASSERT_TRUE(same_as_stored(false, {}, lse, wlse)) << "lse";
        cpu::attention_bwd_mixed(dout.ew(), qkv.ew(), lse.data(), dqkv.ew(), B, T, C, NH, bf16);
        ASSERT_TRUE(same_as_stored(dqkv, wd)) << "dqkv";
      }
}

// Grouped-query attention (the Llama's) on bf16-stored q, k, v, out, dout, dq, dk and dv
// (cpu::gqa_attention_*_mixed: each sequence widened and rounded in its tile) gives bitwise what
// the 2-byte wrapper gave: the inputs widened whole, gqa_attention_fwd / _bwd, the outputs rounded
// back.
// One, two and four KV heads for four query heads; every mix of fp32 and bf16 operands.
// Also at T = 600, hs = 512, where a tile is one KV head of a sequence (kv_per_tile): the stored
// operands' columns widened and the outputs' rounded into place tile by tile.
TEST(Bf16, GqaAttentionOnStoredOperandsBitwiseSameAsWidened) {
  std::mt19937 gen(17);
  struct Shape { int B, H, Hkv, T, hs; };
  std::vector<std::pair<Shape, int>> cases;  // a shape and a mask
  for (int Hkv : {1, 2, 4})
    for (int T : {5, 80})
      for (int mask = 0; mask < 64; ++mask) cases.push_back({Shape{3, 4, Hkv, T, 16}, mask});
  for (int mask : {0, 7, 56, 63}) cases.push_back({Shape{2, 4, 2, 600, 512}, mask});
  for (const auto& [sh, mask] : cases) {  // mask bits 0-3: q, k, v, out in bf16; 4: dout; 5: dq, dk, dv
      const int B = sh.B, H = sh.H, Hkv = sh.Hkv, T = sh.T, hs = sh.hs;
      {
        SCOPED_TRACE("Hkv " + std::to_string(Hkv) + " T " + std::to_string(T) + " hs " + std::to_string(hs) +
                     " mask " + std::to_string(mask));
        const size_t nq = (size_t)B * T * H * hs, nkv = (size_t)B * T * Hkv * hs, na = (size_t)B * H * T;
        Buf q = input(nq, mask & 1, gen), k = input(nkv, mask & 2, gen), v = input(nkv, mask & 4, gen);
        Buf dout = input(nq, mask & 16, gen), out = output(nq, mask & 8);
        Buf dq = output(nq, mask & 32), dk = output(nkv, mask & 32), dv = output(nkv, mask & 32);
        std::vector<float> wout(nq), wlse(na, 0.0f), wdq(nq), wdk(nkv), wdv(nkv), lse(na, 0.0f);
        cpu::gqa_attention_fwd(q.v.data(), k.v.data(), v.v.data(), wout.data(), wlse.data(), B, T, H, Hkv, hs);
        cpu::gqa_attention_bwd(dout.v.data(), q.v.data(), k.v.data(), v.v.data(), wlse.data(), wdq.data(), wdk.data(),
                               wdv.data(), B, T, H, Hkv, hs);
        cpu::gqa_attention_fwd_mixed(q.ew(), k.ew(), v.ew(), out.ew(), lse.data(), B, T, H, Hkv, hs);
        ASSERT_TRUE(same_as_stored(out, wout)) << "out";
        ASSERT_TRUE(same_as_stored(false, {}, lse, wlse)) << "lse";
        cpu::gqa_attention_bwd_mixed(dout.ew(), q.ew(), k.ew(), v.ew(), lse.data(), dq.ew(), dk.ew(), dv.ew(), B, T, H,
                                     Hkv, hs);
        ASSERT_TRUE(same_as_stored(dq, wdq)) << "dq";
        ASSERT_TRUE(same_as_stored(dk, wdk)) << "dk";
        ASSERT_TRUE(same_as_stored(dv, wdv)) << "dv";
      }
  }
}

// The bias gradient of a bf16-stored output gradient (cpu::bias_grad_mixed, each row widened in
// turn) sums what bias_grad sums on the widened rows, in its order: the same bits. Both sum each
// column over the rows in row order: a plain loop's bits.
TEST(Bf16, BiasGradOnStoredGradientBitwiseSameAsWidened) {
  std::mt19937 gen(19);
  for (auto [B, N] : std::vector<std::pair<int, int>>{{1, 7}, {64, 384}, {1024, 3000}, {512, 200}}) {
    SCOPED_TRACE("B " + std::to_string(B) + " N " + std::to_string(N));
    Buf dy = input((size_t)B * N, true, gen);
    std::vector<float> want((size_t)N), got((size_t)N, NAN), serial((size_t)N, 0.0f);
    cpu::bias_grad(dy.v.data(), want.data(), B, N);
    cpu::bias_grad_mixed(dy.ew(), got.data(), B, N);
    ASSERT_TRUE(same_as_stored(false, {}, got, want));
    for (int i = 0; i < B; ++i)
      for (int j = 0; j < N; ++j) serial[j] += dy.v[(size_t)i * N + j];
    ASSERT_TRUE(same_as_stored(false, {}, want, serial));
  }
}

TEST(Fp16, HandCheckedRounding) {
  struct Case {
    uint32_t in;
    uint16_t want;
    const char* what;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3c00, "1.0 exact"},
      {0x3f801000u, 0x3c00, "1 + 2^-11: tie, to the even 1.0"},
      {0x3f803000u, 0x3c02, "1 + 3*2^-11: tie, to the even 1 + 2^-9"},
      {0x3f801001u, 0x3c01, "just above the tie: up"},
      {0x3f800fffu, 0x3c00, "just below the tie: down"},
      {0xbf803000u, 0xbc02, "negative tie to even"},
      {0x80000000u, 0x8000, "-0"},
      {0x477fe000u, 0x7bff, "65504, the largest finite fp16"},
      {0x477fefffu, 0x7bff, "just below 65520: stays finite"},
      {0x477ff000u, 0x7c00, "65520: the overflow tie, to the even, infinity"},
      {0x47800000u, 0x7c00, "65536: infinity"},
      {0x7f7fffffu, 0x7c00, "FLT_MAX: infinity"},
      {0xff800000u, 0xfc00, "-infinity"},
      {0x38800000u, 0x0400, "2^-14, the smallest normal"},
      {0x387fc000u, 0x03ff, "2^-14 - 2^-24, the largest subnormal, exact"},
      {0x387fe000u, 0x0400, "2^-14 - 2^-25: tie, up to the even smallest normal"},
      {0x33800000u, 0x0001, "2^-24, the smallest subnormal"},
      {0x33000000u, 0x0000, "2^-25: the tie between 0 and 2^-24, to the even 0"},
      {0x33000001u, 0x0001, "just above 2^-25: up"},
      {0x33c00000u, 0x0002, "1.5 x 2^-24: tie, to the even 2 x 2^-24"},
      {0x35000000u, 0x0008, "2^-21, a subnormal"},
      {0x00000001u, 0x0000, "an fp32 subnormal: zero"},
      {0x80000001u, 0x8000, "a negative fp32 subnormal: -0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const float x = f32_of(c.in);
    uint16_t h = 0;
    cpu::pack_fp16(&x, &h, 1);
    EXPECT_EQ(h, c.want);
    float back = 0;
    cpu::unpack_fp16(&h, &back, 1);
    if (!std::isinf(back)) {
      EXPECT_EQ((double)back, ref::naive_fp16_value(c.want)) << "unpacking is exact";
    }
    EXPECT_EQ(bits32(ref::naive_fp16(x)), bits32(back)) << "the naive reference agrees";
  }
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0xff812345u}) {  // quiet and signalling NaNs
    const float x = f32_of(nan);
    uint16_t h = 0;
    cpu::pack_fp16(&x, &h, 1);
    EXPECT_EQ(h & 0x7e00u, 0x7e00u) << "a quiet NaN " << std::hex << nan;
    EXPECT_EQ(h >> 15, nan >> 31) << "sign kept";
    float back = 0;
    cpu::unpack_fp16(&h, &back, 1);
    EXPECT_TRUE(std::isnan(back));
  }
}

TEST(Fp16, UnpackIsExactForEveryHalf) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = (uint16_t)i;
  for (size_t off : {0, 3}) {  // the SIMD body and the scalar tail
    std::vector<float> f(all.size() - off);
    cpu::unpack_fp16(all.data() + off, f.data(), f.size());
    for (size_t i = 0; i < f.size(); ++i) {
      const uint16_t h = all[i + off];
      const double want = ref::naive_fp16_value(h);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(f[i])) << std::hex << h;
        continue;
      }
      ASSERT_EQ((double)f[i], want) << std::hex << h;
      ASSERT_EQ(std::signbit(f[i]), (h >> 15) != 0) << std::hex << h;
      ASSERT_EQ(zf::kernels::fp16::to_float(h), f[i]) << "the scalar path agrees, " << std::hex << h;
      uint16_t back = 0;
      cpu::pack_fp16(&f[i], &back, 1);
      ASSERT_EQ(back, h) << "round trip";
    }
  }
}

TEST(Fp16, PackAndRoundMatchNaiveOnRandomBitsAndTheSubnormalRange) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> small(-1e-4f, 1e-4f);  // subnormal fp16s and their edge
  for (size_t n : {1, 22, 55, 64, 1000, 1 << 16}) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = i % 2 ? f32_of(rng()) : small(rng);
    std::vector<uint16_t> h(n);
    cpu::pack_fp16(x.data(), h.data(), n);
    std::vector<float> r = x;
    const size_t bad = cpu::round_fp16(r.data(), n);
    size_t want_bad = 0;
    for (size_t i = 0; i < n; ++i) {
      const float want = ref::naive_fp16(x[i]);
      want_bad += !std::isfinite(want);
      ASSERT_EQ(zf::kernels::fp16::from_float(x[i]), h[i]) << "scalar and vector paths agree, x bits " << std::hex << bits32(x[i]);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(r[i])) << i;
        continue;
      }
      ASSERT_EQ(bits32(r[i]), bits32(want)) << "n=" << n << " x bits " << std::hex << bits32(x[i]);
      float u = 0;
      cpu::unpack_fp16(&h[i], &u, 1);
      ASSERT_EQ(bits32(u), bits32(want)) << "x bits " << std::hex << bits32(x[i]);
    }
    EXPECT_EQ(bad, want_bad) << "n=" << n << ": round_fp16 counts the inf and NaN results";
  }
}

TEST(Fp16, RoundCountsOverflowsInEveryLane) {
  for (size_t n : {1, 7, 8, 9, 64, 1000}) {
    for (size_t at : {(size_t)0, n / 2, n - 1}) {
      std::vector<float> x(n, 1.5f);
      x[at] = 70000.0f;  // finite in fp32, inf in fp16
      EXPECT_EQ(cpu::round_fp16(x.data(), n), 1u) << "n=" << n << " at " << at;
      EXPECT_TRUE(std::isinf(x[at]));
      x[at] = NAN;
      EXPECT_EQ(cpu::round_fp16(x.data(), n), 1u);
      x[at] = 65504.0f;
      EXPECT_EQ(cpu::round_fp16(x.data(), n), 0u);
    }
  }
}

TEST(Fp16, ScaleAndMergeFromFp16) {
  std::vector<float> x = {1.0f, -2.0f, 3.5f};
  cpu::scale(x.data(), x.size(), 0.25f);
  EXPECT_EQ(x, (std::vector<float>{0.25f, -0.5f, 0.875f}));
  const int R = 7, C = 1000, k = 3;
  const int32_t sel[k] = {2, 500, 999};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w((size_t)R * C), src(5003);
  for (auto& v : w) v = u(rng);
  for (auto& v : src) v = u(rng);
  std::vector<uint16_t> packed(src.size());
  cpu::pack_fp16(src.data(), packed.data(), src.size());
  std::vector<float> unpacked(src.size());
  cpu::unpack_fp16(packed.data(), unpacked.data(), src.size());
  for (int kk : {0, k}) {
    std::vector<float> a = w, b = w;
    const size_t na = cpu::merge_unselected_fp16(a.data(), C, packed.data(), 1001, src.size(), sel, kk);
    const size_t nb = cpu::merge_unselected(b.data(), C, unpacked.data(), 1001, src.size(), sel, kk);
    EXPECT_EQ(na, nb);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "k=" << kk;
  }
}


// ---- the gradients' 2-byte wire (codelets/wire.hpp, docs/data-parallel.md "The gradients' wire")

// An owner adds the ranks' copies in fp32 in rank order 0, 1, 2: 1 + 2^-30 is 1 in fp32, so the
// order decides between 0 and 2^-30 (the other order, (1 - 1) + 2^-30, gives 2^-30).
TEST(GradWire, OwnerAddsTheCopiesInRankOrder) {
  for (bool f16 : {false, true}) {
    const float tiny = f16 ? 0x1p-20f : 0x1p-30f;  // an exact value of the format, 2^-24 of 1 or below
    const uint16_t copies[3] = {zf::wire::pack(f16, 1.0f), zf::wire::pack(f16, tiny), zf::wire::pack(f16, -1.0f)};
    ASSERT_EQ(zf::wire::unpack(f16, copies[1]), tiny);
    if (!f16) EXPECT_EQ(zf::wire::fold(f16, copies, 1, 3, 0, 1.0f), 0.0f);
    // fp16's 1 + 2^-20 is exact in fp32: the sum is tiny, then rounded to fp16 once
    if (f16) EXPECT_EQ(zf::wire::fold(f16, copies, 1, 3, 0, 1.0f), tiny);
  }
}

// The sum times the scale is rounded once: 1 + 2^-7 (two bf16 values) times 0.5 is 0.50390625,
// a bf16 value; (1 + 2^-8) x 0.5 is a tie between two bf16 values and rounds to the even 0.5.
TEST(GradWire, SumTimesScaleRoundedOnce) {
  const uint16_t a[2] = {zf::kernels::bf16::from_float(1.0f), zf::kernels::bf16::from_float(0x1p-7f)};
  EXPECT_EQ(zf::wire::fold(false, a, 1, 2, 0, 0.5f), 0.50390625f);
  const uint16_t b[2] = {zf::kernels::bf16::from_float(1.0f), zf::kernels::bf16::from_float(0x1p-8f)};
  EXPECT_EQ(zf::wire::fold(false, b, 1, 2, 0, 0.5f), 0.5f);
  // a segment of n = 2 elements: element i of rank q is copies[q * n + i]
  const uint16_t c[4] = {zf::kernels::bf16::from_float(2.0f), zf::kernels::bf16::from_float(3.0f),
                         zf::kernels::bf16::from_float(4.0f), zf::kernels::bf16::from_float(5.0f)};
  EXPECT_EQ(zf::wire::fold(false, c, 2, 2, 0, 1.0f), 6.0f);
  EXPECT_EQ(zf::wire::fold(false, c, 2, 2, 1, 1.0f), 8.0f);
}

}  // namespace
