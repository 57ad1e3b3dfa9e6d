// The naive ZenFlow reference (tests/reference/zenflow_ref.hpp) on its own: its driver reproduces
// the engine's device-adam, its predicates and bias correction by hand, its degenerate cases equal
// the baselines, merges come exactly D intervals late, the "auto" update rule fires where computed
// by hand.
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
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "test_helpers.hpp"
#include "tests/graphs/zenflow_helpers.hpp"
#include "tests/reference/mlp_ref.hpp"
#include "tests/reference/zenflow_ref.hpp"

namespace zf::test {
namespace {
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

}  // namespace
}  // namespace zf::test
