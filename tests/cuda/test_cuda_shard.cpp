// ZenFlow at ZeRO stage 3 and 2 on the GPU (docs/data-parallel.md, docs/gpu.md): the segment
// kernels of a weight's shard (codelets/select_shard.cpp, the merge's shard base) against the CPU
// kernels, bitwise (each CUDA kernel does the CPU kernel's operations in its order: each column's
// importance one thread's sum over the rows from 0, AdamW element by element as adam_step), and
// the selected columns' all-reduce after the reduce-scatter on a one-rank NCCL communicator.
// Skipped, with a message, where no GPU is seen.
#include <algorithm>
#include <string>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cuda/kernels.hpp"
#ifdef ZF_USE_NCCL
#include "codelets/kernels/cuda/allreduce.hpp"
#endif
#include "tests/cuda/cuda_helpers.hpp"

namespace zf::test {
namespace {
using cpu::AdamParams;

class ShardSegment : public Cuda {};

// [lo, hi) segments of a (R, C) weight's n elements: the whole weight, from inside a row to
// inside another, inside one row, the last element, the first third
std::vector<std::pair<size_t, size_t>> segments(size_t n, size_t row) {
  std::vector<std::pair<size_t, size_t>> s = {{0, n}, {n - 1, n}, {0, std::max<size_t>(1, n / 3)}};
  if (n > row + 2) s.push_back({row / 2 + 1, n - row / 2 - 1});
  if (row > 3) s.push_back({row + 1, 2 * row - 1});
  return s;
}

struct Case {
  int R, C, k;
  bool in_out;
  size_t lo, hi;
  std::string name() const {
    return std::to_string(R) + "x" + std::to_string(C) + " k " + std::to_string(k) + (in_out ? " in_out" : "") +
           " [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (auto [R, C] : std::vector<std::pair<int, int>>{{1, 1}, {22, 55}, {64, 64}, {65, 22}, {3, 1000}})
    for (bool in_out : {false, true}) {
      const size_t n = (size_t)R * C, row = in_out ? (size_t)R : (size_t)C;
      for (auto [lo, hi] : segments(n, row)) out.push_back({R, C, std::max(1, C / 4), in_out, lo, hi});
    }
  return out;
}

std::vector<int32_t> selection(int C, int k, uint64_t seed) {
  std::vector<int32_t> sel((size_t)k);
  cpu::topk_columns(randv((size_t)C, seed).data(), C, k, sel.data());
  return sel;
}

TEST_F(ShardSegment, SelectedBeforeEqualsCpu) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const auto sel = selection(c.C, c.k, 51);
    Dev<int32_t> gs(sel);
    Dev<size_t> out(1);
    for (size_t e : {c.lo, (c.lo + c.hi) / 2, c.hi}) {
      ok(gpu::selected_before(e, c.R, c.C, gs.p(), c.k, c.in_out, out.p(), s));
      EXPECT_EQ(out.get()[0], cpu::selected_before(e, c.R, c.C, sel.data(), c.k, c.in_out)) << "e " << e;
    }
  }
}

TEST_F(ShardSegment, ColumnImportanceBitwiseEqualsCpu) {
  for (const Case& c : cases())
    for (bool l2 : {false, true}) {
      SCOPED_TRACE(c.name() + (l2 ? " l2" : " l1"));
      const auto g = randv(c.hi - c.lo, 52);
      std::vector<float> imp((size_t)c.C);
      cpu::column_importance_segment(g.data(), c.lo, c.hi, c.R, c.C, l2, imp.data(), c.in_out);
      Dev<float> gg(g), gimp(randv((size_t)c.C, 53));  // not zero: the kernel must write every column
      ok(gpu::column_importance_segment(gg.p(), c.lo, c.hi, c.R, c.C, l2, gimp.p(), s, c.in_out));
      EXPECT_TRUE(bitwise(gimp.get(), imp));
    }
}

TEST_F(ShardSegment, SelectiveAdamBitwiseEqualsCpu) {
  const AdamParams hp{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const auto sel = selection(c.C, c.k, 54);
    const size_t need = cpu::selected_before(c.hi, c.R, c.C, sel.data(), c.k, c.in_out) -
                        cpu::selected_before(c.lo, c.R, c.C, sel.data(), c.k, c.in_out);
    const size_t nm = need + 3;  // moments longer than needed: the tail must stay as it is
    auto w = randv(c.hi - c.lo, 55), g = randv(c.hi - c.lo, 56), m = randv(nm, 57, -0.1f, 0.1f),
         v = randv(nm, 58, 0.0f, 0.01f);
    Dev<int32_t> gs(sel);
    Dev<float> gw(w), gg(g), gm(m), gv(v);
    cpu::selective_adam_segment(w.data(), c.lo, c.hi, c.R, c.C, sel.data(), c.k, g.data(), m.data(), v.data(), hp, 3,
                                c.in_out);
    ok(gpu::selective_adam_segment(gw.p(), c.lo, c.hi, c.R, c.C, gs.p(), c.k, gg.p(), gm.p(), gv.p(), hp, 3, s,
                                   c.in_out));
    EXPECT_TRUE(bitwise(gw.get(), w)) << "w";
    EXPECT_TRUE(bitwise(gm.get(), m)) << "m";
    EXPECT_TRUE(bitwise(gv.get(), v)) << "v";
  }
}

// the master variant: a filling step then a plain one; the master indexed as the moments
TEST_F(ShardSegment, SelectiveAdamMasterBitwiseEqualsCpu) {
  const AdamParams hp{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const auto sel = selection(c.C, c.k, 74);
    const size_t need = cpu::selected_before(c.hi, c.R, c.C, sel.data(), c.k, c.in_out) -
                        cpu::selected_before(c.lo, c.R, c.C, sel.data(), c.k, c.in_out);
    const size_t nm = need + 3;  // longer than needed: the tail must stay as it is
    auto w = randv(c.hi - c.lo, 75), g = randv(c.hi - c.lo, 76), x = randv(nm, 79), m = randv(nm, 77, -0.1f, 0.1f),
         v = randv(nm, 78, 0.0f, 0.01f);
    Dev<int32_t> gs(sel);
    Dev<float> gw(w), gg(g), gx(x), gm(m), gv(v);
    for (int64_t step : {1, 2}) {
      cpu::selective_adam_segment_master(w.data(), c.lo, c.hi, c.R, c.C, sel.data(), c.k, g.data(), x.data(),
                                         step == 1, m.data(), v.data(), hp, step, c.in_out);
      ok(gpu::selective_adam_segment_master(gw.p(), c.lo, c.hi, c.R, c.C, gs.p(), c.k, gg.p(), gx.p(), step == 1,
                                            gm.p(), gv.p(), hp, step, s, c.in_out));
      EXPECT_TRUE(bitwise(gw.get(), w)) << "w, step " << step;
      EXPECT_TRUE(bitwise(gx.get(), x)) << "master, step " << step;
      EXPECT_TRUE(bitwise(gm.get(), m)) << "m, step " << step;
      EXPECT_TRUE(bitwise(gv.get(), v)) << "v, step " << step;
    }
  }
}

// the merge of a host slice [off, off + len) into a shard holding [base, hi) of the weight
TEST_F(ShardSegment, MergeIntoShardBitwiseEqualsCpu) {
  for (const Case& c : cases())
    for (bool with_sel : {false, true}) {
      SCOPED_TRACE(c.name() + (with_sel ? " sel" : " all"));
      const auto sel = selection(c.C, c.k, 59);
      const size_t base = c.lo, off = c.lo + (c.hi - c.lo) / 4, len = std::max<size_t>(1, (c.hi - off) / 2);
      auto dst = randv(c.hi - c.lo, 60);
      const auto src = randv(len, 61);
      Dev<int32_t> gs(sel);
      Dev<float> gdst(dst), gsrc(src);
      const int k = with_sel ? c.k : 0, rows = c.in_out ? c.R : 0;
      cpu::merge_unselected(dst.data(), c.C, src.data(), off, len, with_sel ? sel.data() : nullptr, k, rows, base);
      ok(gpu::merge_unselected(gdst.p(), c.C, gsrc.p(), off, len, with_sel ? gs.p() : nullptr, k, s, rows, base));
      EXPECT_TRUE(bitwise(gdst.get(), dst));
    }
}

#ifdef ZF_USE_NCCL
// ZenFlow at stage 2 (codelets/allreduce.cpp): the selected columns' all-reduce on a one-rank
// communicator (one GPU) is the identity on the selected columns and leaves the others alone, so
// a gather or scatter that misplaces an element shows. The sum over ranks is dp_test.sh's (MPI).
TEST_F(ShardSegment, SelectedColumnsAllReduceOnOneRank) {
  const OneRankNccl one;
  if (!one.comm) GTEST_SKIP() << one.skip;
  const ncclComm_t comm = one.comm;
  for (bool in_out : {false, true}) {
    const int rows = 22, cols = 55, k = 13;
    const auto sel = selection(cols, k, 62);
    const auto x = randv((size_t)rows * cols, 63);
    Dev<int32_t> gs(sel);
    Dev<float> gx(x);
    ok(gpu::allreduce_columns(gx.p(), rows, cols, gs.p(), k, in_out, -1, 0, 1, comm, s));
    EXPECT_TRUE(bitwise(gx.get(), x)) << (in_out ? "in_out" : "(rows, cols)");
    // on the bf16 wire (codelets/wire.hpp), values already bf16: the identity too
    std::vector<float> xb = x;
    for (float& v : xb) v = kernels::bf16::round(v);
    Dev<float> gb(xb);
    ok(gpu::allreduce_columns(gb.p(), rows, cols, gs.p(), k, in_out, 0, 0, 1, comm, s));
    EXPECT_TRUE(bitwise(gb.get(), xb)) << "bf16 wire, " << (in_out ? "in_out" : "(rows, cols)");
  }
}
#endif

}  // namespace
}  // namespace zf::test
