// The runtime (runtime/runtime.hpp): unknown and unusable scheduling policies refused with the
// reason before StarPU starts, the policy in force and the two contexts reported, too many
// workers refused; the gradients' 2-byte wire on one rank.
#include <algorithm>
#include <gtest/gtest.h>

#include "codelets/wire.hpp"
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

// The gradients' 2-byte wire (codelets/wire.hpp) on a world of one rank (no MPI): each value
// rounded to the wire, scaled, rounded again; the all-reduce over the even cut and the
// reduce-scatter of any cut give the same bits. (The ranks' sums: tests/dp_test.sh grad_wire_*.)
TEST(GradWire, OneRankRoundsTheValuesAndAnyCutAgrees) {
  const Comm one;
  std::vector<float> x = {1.0f + 0x1p-9f, -3.14159f, 1e-3f, 65536.5f, 0.0f, -0.0f, 7e-39f};
  for (Wire w : {Wire::Bf16, Wire::Fp16}) {
    const bool f16 = w == Wire::Fp16;
    std::vector<float> a = x, b = x;
    ASSERT_EQ(wire::allreduce(one, a.data(), a.size(), w, 0.25f), 0);
    ASSERT_EQ(wire::reduce_scatter(one, b.data(), {0, b.size()}, w, 0.25f), 0);
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = wire::unpack(f16, wire::pack(f16, wire::unpack(f16, wire::pack(f16, x[i])) * 0.25f));
      EXPECT_EQ(zf::kernels::bf16::bits_of(a[i]), zf::kernels::bf16::bits_of(want)) << wire_name(w) << " element " << i;
      EXPECT_EQ(zf::kernels::bf16::bits_of(b[i]), zf::kernels::bf16::bits_of(want)) << wire_name(w) << " element " << i;
    }
  }
  EXPECT_EQ(wire::even_bounds(10, 4), (std::vector<size_t>{0, 2, 5, 7, 10}));
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
