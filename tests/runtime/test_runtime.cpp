// The runtime (runtime/runtime.hpp): unknown and unusable scheduling policies refused with the
// reason before StarPU starts, the policy in force and the two contexts reported, too many
// workers refused.
#include <algorithm>
#include <gtest/gtest.h>

#include "runtime/collective_cost.hpp"
#include "test_helpers.hpp"

namespace zf::test {
namespace {
TEST(Runtime, UnknownPolicyIsRefused) {
  RuntimeConfig c;
  c.sched = "no-such-policy";
  EXPECT_THROW(Runtime rt(c), Error);
  EXPECT_FALSE(Runtime::is_policy("no-such-policy"));
  EXPECT_TRUE(Runtime::is_policy("dmdas"));
}

// StarPU's policies that crash or hang on our step graphs are refused, with a reason, before
// StarPU starts; every other predefined policy stays usable.
TEST(Runtime, UnusablePoliciesAreRefusedWithTheReason) {
  const auto unusable = Runtime::unusable_policies();
  EXPECT_EQ(unusable.size(), 3u);
  for (const char* p : {"peager", "graph_test", "modular-heteroprio-heft"}) {
    EXPECT_NE(std::find(unusable.begin(), unusable.end(), p), unusable.end()) << p;
    ASSERT_NE(Runtime::unusable_policy(p), nullptr) << p;
    EXPECT_FALSE(Runtime::is_policy(p)) << p;
    RuntimeConfig c;
    c.sched = p;
    try {
      Runtime rt(c);
      ADD_FAILURE() << p << " was started";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot run zenflow"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(Runtime::unusable_policy("lws"), nullptr);
  EXPECT_TRUE(Runtime::is_policy("modular-heteroprio"));
}

TEST(Runtime, ReportsPolicyInForceAndContexts) {
  for (const char* pol : {"eager", "dmdas"}) {
    RuntimeConfig c;
    c.sched = pol;
    Runtime rt(c);
    EXPECT_EQ(rt.policy(), pol);
    EXPECT_EQ(rt.device_worker_count(), 1);
    EXPECT_EQ(rt.host_worker_count(), 1);
    EXPECT_NE(rt.device_ctx(), rt.host_ctx());
  }
}

TEST(Runtime, TooManyWorkersIsRefused) {
  RuntimeConfig c;
  c.device_workers = Runtime::max_cpu_workers();
  c.host_workers = 1;
  EXPECT_THROW(Runtime rt(c), Error);
}

}  // namespace
}  // namespace zf::test

// The ring formula the simulation gives every collective (runtime/collective_cost.hpp,
// docs/simulation.md): 1 GB over 4 ranks on 25.2 GB/s links with 24 us of latency.
TEST(CollectiveCost, RingFormula) {
  const double n = 1e9, B = 25.2e9, a = 24e-6;
  // all-reduce: 2 steps of n/R bytes each
  EXPECT_DOUBLE_EQ(zf::ring_collective_s(zf::Collective::AllReduce, n, 4, B, a), 6 * (0.25e9 / 25.2e9 + 24e-6));
  // reduce-scatter and all-gather: R-1 steps, half the all-reduce
  EXPECT_DOUBLE_EQ(zf::ring_collective_s(zf::Collective::ReduceScatter, n, 4, B, a), 3 * (0.25e9 / 25.2e9 + 24e-6));
  EXPECT_DOUBLE_EQ(zf::ring_collective_s(zf::Collective::AllGather, n, 4, B, a), 3 * (0.25e9 / 25.2e9 + 24e-6));
  // two ranks: one step each way, n/2 bytes per step
  EXPECT_DOUBLE_EQ(zf::ring_collective_s(zf::Collective::AllReduce, n, 2, B, a), 2 * (0.5e9 / 25.2e9 + 24e-6));
  // the bandwidth term is 2 n / B x (R-1)/R: below 2 n / B, tending to it as R grows (the ring's optimality)
  const double big = zf::ring_collective_s(zf::Collective::AllReduce, n, 1000, B, 0);
  EXPECT_LT(big, 2 * n / B);
  EXPECT_NEAR(big, 2 * n / B * 999 / 1000, 1e-15);
  // one rank: nothing to exchange
  EXPECT_EQ(zf::ring_collective_s(zf::Collective::AllReduce, n, 1, B, a), 0.0);
  EXPECT_EQ(zf::ring_collective_s(zf::Collective::None, n, 4, B, a), 0.0);
}
