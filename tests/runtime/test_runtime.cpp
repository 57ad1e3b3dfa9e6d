// The runtime (runtime/runtime.hpp): unknown and unusable scheduling policies refused with the
// reason before StarPU starts, the policy in force and the two contexts reported, too many
// workers refused.
#include <algorithm>
#include <gtest/gtest.h>

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
