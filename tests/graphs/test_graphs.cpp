// Step graphs through StarPU: results independent of the scheduling policy (bitwise), the
// strategies agree, tiling does not change results, the MLP learns, the runtime refuses
// unknown policies and reports the one in force.
#include <algorithm>
#include <gtest/gtest.h>

#include "test_helpers.hpp"

namespace zf::test {
namespace {

TEST(Graphs, OneStepBitwiseSameUnderEverySchedulingPolicy) {
  const Weights ref = train_and_capture(tiny_spec(1, "device-adam", "eager"));
  for (const char* pol : {"lws", "prio", "dmda", "dmdas", "ws"}) {
    SCOPED_TRACE(pol);
    EXPECT_EQ(train_and_capture(tiny_spec(1, "device-adam", pol)), ref);
  }
}

TEST(Graphs, ZeroOffloadStepBitwiseSameUnderEverySchedulingPolicy) {
  Spec s = tiny_spec(3, "zero-offload", "eager");
  s.runtime.tile_elems = 1024;  // several host tiles per weight
  const Weights ref = train_and_capture(s);
  for (const char* pol : {"lws", "prio", "dmda", "dmdas"}) {
    SCOPED_TRACE(pol);
    s.runtime.sched = pol;
    EXPECT_EQ(train_and_capture(s), ref);
  }
}

TEST(Graphs, ZeroOffloadEqualsDeviceAdamAfterSynchronousSteps) {
  // Both compute AdamW on the same gradients, one on the device, one on host master weights.
  const Weights dev = train_and_capture(tiny_spec(20, "device-adam"));
  const Weights off = train_and_capture(tiny_spec(20, "zero-offload"));
  EXPECT_EQ(off, dev);
}

TEST(Graphs, HostTilingDoesNotChangeResults) {
  Spec s = tiny_spec(5, "zero-offload");
  s.runtime.tile_elems = 1 << 20;
  const Weights one_tile = train_and_capture(s);
  s.runtime.tile_elems = 272;  // not a divisor of any weight size: ragged last tile
  EXPECT_EQ(train_and_capture(s), one_tile);
}

TEST(Graphs, MoreWorkersSameWeights) {
  Spec s = tiny_spec(4, "zero-offload");
  const Weights ref = train_and_capture(s);
  s.runtime.device_workers = 2;
  s.runtime.host_workers = 2;
  s.runtime.tile_elems = 512;
  EXPECT_EQ(train_and_capture(s), ref);
}

TEST(Graphs, MetricsCountBytesThatCross) {
  nlohmann::json m;
  train_and_capture(tiny_spec(4, "zero-offload"), &m);
  // every step ships all gradients down and all parameters up: 4 bytes per parameter each way
  const double params = 784 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10;
  EXPECT_DOUBLE_EQ(m["bytes"]["device_to_host"].get<double>(), 4 * params);
  EXPECT_DOUBLE_EQ(m["bytes"]["host_to_device"].get<double>(), 4 * params);
  train_and_capture(tiny_spec(4, "device-adam"), &m);
  EXPECT_EQ(m["bytes"]["device_to_host"].get<double>(), 0.0);
  EXPECT_EQ(m["steps"].get<int64_t>(), 4);
  EXPECT_GE(m["stall_fraction"].get<double>(), 0.0);
  EXPECT_LE(m["stall_fraction"].get<double>(), 1.0);
  EXPECT_GT(m["device_busy_s_per_step"].get<double>(), 0.0);
}

TEST(EndToEnd, MlpLearnsFashionMnistSubset) {
  // 2 epochs over 8192 examples; chance is loss ln(10) = 2.30 and 10% accuracy. A linear model
  // reaches about 0.6 loss / 78% here; the bound asks for clearly better than chance.
  Spec s = tiny_spec(0);
  s.data.train_limit = 8192;
  s.data.eval_limit = 2000;
  s.train.epochs = 2;
  s.model.hidden = {64};
  nlohmann::json m;
  train_and_capture(s, &m, true);
  EXPECT_LT(m["final"]["train_loss"].get<double>(), 0.75);
  EXPECT_LT(m["final"]["eval_loss"].get<double>(), 0.75);
  EXPECT_GT(m["final"]["eval_accuracy"].get<double>(), 0.72);
}

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
