// ZeRO stage 3's ZenFlow kernels (codelets/kernels/cpu/select.cpp, docs/zenflow.md "ZeRO stage 3"):
// a weight cut into flat segments at arbitrary offsets (inside rows and columns), each kernel on
// the segments against the whole-weight kernel, bitwise, in both storage layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "tests/kernels/kernel_helpers.hpp"

namespace zf::test {
namespace {

namespace cpu = zf::kernels::cpu;

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// R = 13 rows, C = 37 columns, k = 7 selected (one of them the last column); segment bounds cut
// inside rows and columns of both layouts, one segment empty
constexpr int R = 13, C = 37, k = 7;
const std::vector<int32_t> kSel = {0, 3, 4, 17, 18, 30, 36};
const std::vector<size_t> kBounds = {0, 50, 50, 200, 371, (size_t)R * C};

// the column of flat element e of the storage
size_t column(size_t e, bool in_out) { return in_out ? e / R : e % C; }

TEST(ZenFlowShard, SelectedBeforeCountsSelectedElements) {
  for (bool in_out : {false, true}) {
    size_t n = 0;
    for (size_t e = 0; e <= (size_t)R * C; ++e) {
      ASSERT_EQ(cpu::selected_before(e, R, C, kSel.data(), k, in_out), n) << "e " << e << " in_out " << in_out;
      if (e < (size_t)R * C && std::binary_search(kSel.begin(), kSel.end(), (int32_t)column(e, in_out))) ++n;
    }
    EXPECT_EQ(n, (size_t)R * k);
  }
}

TEST(ZenFlowShard, ImportanceOfASegmentIsTheWholeKernelsWithZerosElsewhere) {
  const std::vector<float> g = randn((size_t)R * C, 1);
  for (bool in_out : {false, true})
    for (bool l2 : {false, true})
      for (size_t s = 0; s + 1 < kBounds.size(); ++s) {
        const size_t lo = kBounds[s], hi = kBounds[s + 1];
        std::vector<float> padded((size_t)R * C, 0.0f), want(C), got(C, -1.0f);
        std::copy(g.begin() + lo, g.begin() + hi, padded.begin() + lo);
        cpu::column_importance(padded.data(), R, C, l2, want.data(), in_out);
        cpu::column_importance_segment(g.data() + lo, lo, hi, R, C, l2, got.data(), in_out);
        EXPECT_TRUE(bits_equal(got, want)) << "segment " << s << " in_out " << in_out << " l2 " << l2;
      }
}

TEST(ZenFlowShard, SelectiveAdamOnTheSegmentsIsTheWholeKernelsBitwise) {
  cpu::AdamParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.01f;
  for (bool in_out : {false, true}) {
    std::vector<float> w = randn((size_t)R * C, 2), ws = w;
    std::vector<float> m((size_t)R * k, 0.0f), v = m;
    // each segment's moments: [before(lo), before(hi)) of the whole ones, in a buffer of its own
    std::vector<std::vector<float>> ms, vs;
    for (size_t s = 0; s + 1 < kBounds.size(); ++s) {
      const size_t n = cpu::selected_before(kBounds[s + 1], R, C, kSel.data(), k, in_out) -
                       cpu::selected_before(kBounds[s], R, C, kSel.data(), k, in_out);
      ms.emplace_back(std::max<size_t>(n, 1), 0.0f);
      vs.emplace_back(std::max<size_t>(n, 1), 0.0f);
    }
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> g = randn((size_t)R * C, 10 + (uint32_t)step);
      cpu::selective_adam(w.data(), R, C, kSel.data(), k, g.data(), m.data(), v.data(), hp, step, in_out);
      for (size_t s = 0; s + 1 < kBounds.size(); ++s) {
        const size_t lo = kBounds[s], hi = kBounds[s + 1];
        std::vector<float> shard(ws.begin() + lo, ws.begin() + hi);
        cpu::selective_adam_segment(shard.data(), lo, hi, R, C, kSel.data(), k, g.data() + lo, ms[s].data(),
                                    vs[s].data(), hp, step, in_out);
        std::copy(shard.begin(), shard.end(), ws.begin() + lo);
      }
    }
    EXPECT_TRUE(bits_equal(ws, w)) << "in_out " << in_out;
    std::vector<float> mj, vj;  // the segments' moments joined: the whole kernel's
    for (size_t s = 0; s + 1 < kBounds.size(); ++s) {
      const size_t n = cpu::selected_before(kBounds[s + 1], R, C, kSel.data(), k, in_out) -
                       cpu::selected_before(kBounds[s], R, C, kSel.data(), k, in_out);
      mj.insert(mj.end(), ms[s].begin(), ms[s].begin() + n);
      vj.insert(vj.end(), vs[s].begin(), vs[s].begin() + n);
    }
    EXPECT_TRUE(bits_equal(mj, m)) << "in_out " << in_out;
    EXPECT_TRUE(bits_equal(vj, v)) << "in_out " << in_out;
  }
}

// The master variant (precision bf16/fp16): each segment's part of the master, indexed as its
// moments, filled from the shard at the first step; bitwise the whole weight's master kernel.
TEST(ZenFlowShard, SelectiveAdamMasterOnTheSegmentsIsTheWholeKernelsBitwise) {
  cpu::AdamParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.01f;
  for (bool in_out : {false, true}) {
    std::vector<float> w = randn((size_t)R * C, 4), ws = w;
    std::vector<float> m((size_t)R * k, 0.0f), v = m, x = m;
    std::vector<std::vector<float>> ms, vs, xs;
    std::vector<size_t> ns;
    for (size_t s = 0; s + 1 < kBounds.size(); ++s) {
      ns.push_back(cpu::selected_before(kBounds[s + 1], R, C, kSel.data(), k, in_out) -
                   cpu::selected_before(kBounds[s], R, C, kSel.data(), k, in_out));
      ms.emplace_back(std::max<size_t>(ns.back(), 1), 0.0f);
      vs.emplace_back(std::max<size_t>(ns.back(), 1), 0.0f);
      xs.emplace_back(std::max<size_t>(ns.back(), 1), 0.0f);
    }
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> g = randn((size_t)R * C, 30 + (uint32_t)step);
      cpu::selective_adam_master(w.data(), R, C, kSel.data(), k, g.data(), x.data(), step == 1, m.data(), v.data(),
                                 hp, step, in_out);
      for (size_t s = 0; s + 1 < kBounds.size(); ++s) {
        const size_t lo = kBounds[s], hi = kBounds[s + 1];
        std::vector<float> shard(ws.begin() + lo, ws.begin() + hi);
        cpu::selective_adam_segment_master(shard.data(), lo, hi, R, C, kSel.data(), k, g.data() + lo, xs[s].data(),
                                           step == 1, ms[s].data(), vs[s].data(), hp, step, in_out);
        std::copy(shard.begin(), shard.end(), ws.begin() + lo);
      }
    }
    EXPECT_TRUE(bits_equal(ws, w)) << "in_out " << in_out;
    std::vector<float> xj;  // the segments' masters joined: the whole kernel's
    for (size_t s = 0; s + 1 < kBounds.size(); ++s) xj.insert(xj.end(), xs[s].begin(), xs[s].begin() + ns[s]);
    EXPECT_TRUE(bits_equal(xj, x)) << "in_out " << in_out;
  }
}

TEST(ZenFlowShard, MergeIntoAShardIsTheWholeMergesPart) {
  const std::vector<float> src = randn((size_t)R * C, 3), w0 = randn((size_t)R * C, 4);
  for (bool in_out : {false, true})
    for (size_t s = 0; s + 1 < kBounds.size(); ++s) {
      const size_t lo = kBounds[s], hi = kBounds[s + 1];
      // a host tile [off, off + n) inside the segment, cut inside a row
      const size_t off = lo + (hi - lo) / 3, n = (hi - lo) / 2;
      std::vector<float> whole = w0, shard(w0.begin() + lo, w0.begin() + hi);
      const size_t a = cpu::merge_unselected(whole.data(), C, src.data() + off, off, n, kSel.data(), k,
                                             in_out ? R : 0);
      const size_t b = cpu::merge_unselected(shard.data(), C, src.data() + off, off, n, kSel.data(), k,
                                             in_out ? R : 0, lo);
      EXPECT_EQ(a, b);
      EXPECT_TRUE(bits_equal(shard, std::vector<float>(whole.begin() + lo, whole.begin() + hi)))
          << "segment " << s << " in_out " << in_out;
    }
}

}  // namespace
}  // namespace zf::test
