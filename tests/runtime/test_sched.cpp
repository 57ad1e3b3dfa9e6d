// Task priorities from the graph's structure (runtime.priorities) and the zf-deadline policy
// (runtime/sched_deadline.cpp): the order they impose on ready tasks, and that no result depends
// on them. A runtime test: its gate codelet is built here with StarPU's types (runtime/task.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "runtime/parallel.hpp"
#include "runtime/sched_deadline.hpp"
#include "runtime/task.hpp"
#include "test_helpers.hpp"

namespace zf::test {
namespace {

// ------------------------------------------------------------------ ordering on one worker

// Tasks without data: a gate that holds its worker until the test opens it (so that every
// later task is queued before the worker chooses), and markers that log their id in run order.
std::atomic<bool> gate_open{false};
std::mutex order_mu;
std::vector<int> order;

void gate_cpu(void*[], void*) {
  while (!gate_open.load(std::memory_order_acquire)) std::this_thread::yield();
}
void mark_cpu(void*[], void* arg) {
  int id;
  std::memcpy(&id, arg, sizeof id);
  std::lock_guard<std::mutex> lk(order_mu);
  order.push_back(id);
}
starpu_codelet make_cl(starpu_cpu_func_t f, const char* name) {
  starpu_codelet c{};
  c.cpu_funcs[0] = f;
  c.nbuffers = 0;
  c.name = name;
  return c;
}
starpu_codelet gate_cl = make_cl(gate_cpu, "test_gate");
starpu_codelet mark_cl = make_cl(mark_cpu, "test_mark");

struct Marker {
  SubmitOptions opt;
  int id;
};

// Submits the gate to `gate_opt`'s context, then the markers, opens the gate and returns the
// markers' ids in the order the (single) worker of that context ran them.
std::vector<int> run_order(Runtime& rt, const SubmitOptions& gate_opt, const std::vector<Marker>& markers) {
  gate_open = false;
  order.clear();
  TaskBuilder(gate_cl, gate_opt.named("gate")).submit();
  for (const Marker& m : markers) TaskBuilder(mark_cl, m.opt.named("mark")).args(m.id).submit();
  gate_open = true;
  rt.wait_all();
  return order;
}

RuntimeConfig one_each(const std::string& sched, bool priorities) {
  RuntimeConfig c;
  c.sched = sched;
  c.device_workers = 1;
  c.host_workers = 1;
  c.priorities = priorities;
  return c;
}

// Host context under zf-deadline: earliest deadline first, equal deadlines in submission order,
// with or without priorities (the deadline is the policy's own knowledge).
TEST(ZfDeadline, HostContextRunsEarliestDeadlineFirst) {
  for (bool prio : {true, false}) {
    SCOPED_TRACE(prio ? "priorities on" : "priorities off");
    Runtime rt(one_each("zf-deadline", prio));
    ASSERT_EQ(rt.policy(), "zf-deadline");
    const std::vector<Marker> m = {{rt.host(0).due_at(9), 0}, {rt.host(0).due_at(3), 1}, {rt.host(2).due_at(6), 2},
                                   {rt.host(1).due_at(3), 3}, {rt.host(0), 4} /* due step + 1 = 1 */};
    EXPECT_EQ(run_order(rt, rt.host(0), m), (std::vector<int>{4, 1, 3, 2, 0}));
  }
}

// Device context under zf-deadline: higher priority first (compute before crossings), else
// submission order; without priorities, submission order only.
TEST(ZfDeadline, DeviceContextRunsPrioritiesThenSubmissionOrder) {
  {
    Runtime rt(one_each("zf-deadline", true));
    const std::vector<Marker> m = {{rt.crossing(0), 0}, {rt.device(0), 1}, {rt.crossing(1), 2}, {rt.device(1), 3}};
    EXPECT_EQ(run_order(rt, rt.device(0), m), (std::vector<int>{1, 3, 0, 2}));
  }
  {
    Runtime rt(one_each("zf-deadline", false));
    const std::vector<Marker> m = {{rt.crossing(0), 0}, {rt.device(0), 1}, {rt.crossing(1), 2}, {rt.device(1), 3}};
    EXPECT_EQ(run_order(rt, rt.device(0), m), (std::vector<int>{0, 1, 2, 3}));
  }
}

// The priorities themselves: device compute above crossings above host work, host work ranked
// by how soon its result is needed; all 0 with priorities off, before step 0, and under a policy
// whose priority range is [0, 0] (eager).
TEST(Priorities, FromTheGraphsStructure) {
  {
    Runtime rt(one_each("lws", true));
    const int compute = rt.priority_of(rt.device(5), rt.device_ctx());
    const int crossing = rt.priority_of(rt.crossing(5), rt.device_ctx());
    const int host_next = rt.priority_of(rt.host(5), rt.host_ctx());  // due 6
    const int host_later = rt.priority_of(rt.host(5).due_at(9), rt.host_ctx());
    const int host_latest = rt.priority_of(rt.host(5).due_at(13), rt.host_ctx());
    EXPECT_GT(compute, crossing);
    EXPECT_GT(crossing, host_next);
    EXPECT_GT(host_next, host_later);
    EXPECT_GT(host_later, host_latest);
    EXPECT_GT(host_latest, 0);
    EXPECT_EQ(rt.priority_of(rt.device(-1), rt.device_ctx()), 0);  // set-up and evaluation
  }
  {
    Runtime rt(one_each("lws", false));
    EXPECT_EQ(rt.priority_of(rt.device(5), rt.device_ctx()), 0);
    EXPECT_EQ(rt.priority_of(rt.host(5).due_at(9), rt.host_ctx()), 0);
  }
  {
    Runtime rt(one_each("eager", true));
    EXPECT_EQ(rt.priority_of(rt.device(5), rt.device_ctx()), 0);
  }
}

// lws honours priorities: on its single host worker the same markers run by priority, i.e. by
// how soon they are needed, where without priorities they run in submission order.
TEST(Priorities, LwsHostWorkerRunsTheSoonestNeededFirst) {
  {
    Runtime rt(one_each("lws", true));
    const std::vector<Marker> m = {{rt.host(0).due_at(9), 0}, {rt.host(0).due_at(3), 1}};
    EXPECT_EQ(run_order(rt, rt.host(0), m), (std::vector<int>{1, 0}));
  }
  {
    Runtime rt(one_each("lws", false));
    const std::vector<Marker> m = {{rt.host(0).due_at(9), 0}, {rt.host(0).due_at(3), 1}};
    EXPECT_EQ(run_order(rt, rt.host(0), m), (std::vector<int>{0, 1}));
  }
}


// ------------------------------------------------------------------ idle workers

// Waits (yielding) until pred() holds; false if it does not within a minute (a hang guard, not a
// measurement: every wait below ends in microseconds to milliseconds when the feature works).
template <class P>
bool eventually(P pred) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

// Idle workers of zf-deadline sleep in the policy (Debian's StarPU drivers never block: they
// would spin), and a push wakes them. The sleeps' time bound is made longer than the test, so
// that only the push can end the device worker's sleep: the task runs, and a sleep ended by the
// epoch moving is counted.
TEST(ZfDeadline, IdleWorkersSleepAndAPushWakesThem) {
  Runtime rt(one_each("zf-deadline", true));
  deadline_policy_set_max_sleep(int64_t(3600) * 1000000);
  struct Restore {
    ~Restore() { deadline_policy_set_max_sleep(5000); }
  } restore;
  ASSERT_TRUE(eventually([] { return deadline_policy_sleep_stats().asleep == 2; }))
      << "the idle device and host workers never both slept";
  const uint64_t woken = deadline_policy_sleep_stats().woken;
  order.clear();
  TaskBuilder(mark_cl, rt.device(0).named("mark")).args(7).submit();
  ASSERT_TRUE(eventually([] {
    std::lock_guard<std::mutex> lk(order_mu);
    return order.size() == 1;
  })) << "the pushed task did not run: the sleeping device worker was not woken";
  rt.wait_all();
  EXPECT_EQ(order, std::vector<int>{7});
  EXPECT_GT(deadline_policy_sleep_stats().woken, woken);
}

// Under StarPU's own policies nothing sleeps in ours.
TEST(ZfDeadline, OtherPoliciesLeaveNobodyAsleepInOurs) {
  Runtime rt(one_each("lws", true));
  const uint64_t sleeps = deadline_policy_sleep_stats().sleeps;
  TaskBuilder(mark_cl, rt.device(0).named("mark")).args(1).submit();
  rt.wait_all();
  EXPECT_EQ(deadline_policy_sleep_stats().sleeps, sleeps);
}

// Tiles of a device kernel (parallel_for) are taken by an idle worker: two tiles
// that each wait until both have started can only end if a second thread runs one of them.
std::atomic<int> tiles_started{0};
std::atomic<bool> tiles_met{false};
void two_tiles_cpu(void*[], void*) {
  tiles_started = 0;
  tiles_met = true;
  parallel_tiles(2, [](int) {
    tiles_started.fetch_add(1);
    if (!eventually([] { return tiles_started.load() == 2; })) tiles_met = false;
  });
}
starpu_codelet two_tiles_cl = make_cl(two_tiles_cpu, "test_two_tiles");

TEST(ZfDeadline, IdleWorkersHelpWithDeviceTiles) {
  for (auto [dev, host] : {std::pair{2, 1}, std::pair{1, 1}}) {
    // device workers help each other; with one device worker the host worker lends its core
    // when the workers fit the cores
    if (dev == 1 && dev + host > Runtime::hwloc_cores()) continue;
    SCOPED_TRACE(std::to_string(dev) + " device + " + std::to_string(host) + " host workers");
    RuntimeConfig c = one_each("zf-deadline", true);
    c.device_workers = dev;
    c.host_workers = host;
    Runtime rt(c);
    TaskBuilder(two_tiles_cl, rt.device(0).named("tiles")).submit();
    rt.wait_all();
    EXPECT_TRUE(tiles_met.load()) << "no second thread took a tile";
  }
}

// ------------------------------------------------------------------ same weights


Spec small(const std::string& strategy, const std::string& sched, int staleness, int host_workers, bool prio) {
  Spec s = tiny_spec(24, strategy, sched);
  s.runtime.tile_elems = 1024;  // several host tiles per weight: host work spreads over the workers
  s.runtime.device_workers = 1;
  s.runtime.host_workers = host_workers;
  s.runtime.priorities = prio;
  if (strategy == "zenflow") {
    s.zenflow.given = true;
    s.zenflow.topk_ratio = 0.25;
    s.zenflow.select_strategy = "step";
    s.zenflow.select_interval = 8;
    s.zenflow.update_interval = 3;
    s.zenflow.overlap_step = staleness > 0;
    s.zenflow.max_staleness = staleness;
  }
  return s;
}

// Priorities change only the order among ready tasks: the weights are bitwise the same with and
// without them, under policies that honour priorities and one that does not.
TEST(Priorities, SameWeightsWithAndWithoutUnderSeveralPolicies) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"zenflow", "lws"}, {"zenflow", "dmdas"}, {"zenflow", "zf-deadline"}, {"zero-offload", "prio"},
      {"zero-offload", "zf-deadline"}};
  for (auto [strategy, pol] : cases) {
      SCOPED_TRACE(std::string(strategy) + " under " + pol);
      const Weights on = train_and_capture(small(strategy, pol, 2, 1, true));
      const Weights off = train_and_capture(small(strategy, pol, 2, 1, false));
      ASSERT_FALSE(on.empty());
      EXPECT_EQ(first_difference(on, off), "");
    }
}

// zf-deadline runs every strategy to the same weights as lws, bitwise, with one host worker, and
// the offloading ones with two host workers and the crossings on the host (so that the host
// context holds copies as well as AdamW tiles, spread over two workers).
TEST(ZfDeadline, EveryStrategySameWeightsAsLwsOnOneAndTwoHostWorkers) {
  struct Case {
    int hosts;
    const char* strategy;
    const char* crossings;
  };
  const std::vector<Case> cases = {{1, "device-adam", "device"}, {1, "zero-offload", "device"},
                                   {1, "zero-offload-dpu", "device"}, {1, "zenflow", "device"},
                                   {2, "zero-offload", "host"}, {2, "zenflow", "host"}};
  for (auto [hosts, strategy, crossings] : cases) {
        SCOPED_TRACE(std::string(strategy) + ", " + std::to_string(hosts) + " host workers, crossings " + crossings);
        Spec a = small(strategy, "lws", 1, hosts, true), b = small(strategy, "zf-deadline", 1, hosts, true);
        a.runtime.crossings = b.runtime.crossings = crossings;
        nlohmann::json mb;
        const Weights wa = train_and_capture(a), wb = train_and_capture(b, &mb);
        ASSERT_FALSE(wa.empty());
        EXPECT_EQ(first_difference(wb, wa), "");
        EXPECT_EQ(mb.value("sched", ""), "zf-deadline");
      }
}

// The device kernels' tiles make no result depend on how many cores run them: an MLP whose
// matmuls are cut into several tiles trains to bitwise the same weights on one device-side core
// (one device worker, two host workers: more workers than cores, so the host ones do not lend),
// on two device workers, and on one device worker with the host worker lending its core.
TEST(DeviceCores, MlpWeightsBitwiseSameOnOneAndTwoDeviceCores) {
  for (const char* strategy : {"device-adam", "zenflow"}) {
    SCOPED_TRACE(strategy);
    auto spec = [&](int dev, int host) {
      Spec s = small(strategy, "zf-deadline", 1, host, true);
      s.model.hidden = {256};  // fc1: 64 x 784 x 256, eight row tiles of its matmuls
      s.train.steps = 6;
      s.runtime.device_workers = dev;
      return s;
    };
    const Weights one = train_and_capture(spec(1, 2));
    ASSERT_FALSE(one.empty());
    EXPECT_EQ(first_difference(train_and_capture(spec(2, 1)), one), "") << "two device workers";
    EXPECT_EQ(first_difference(train_and_capture(spec(1, 1)), one), "") << "the host worker lending";
  }
}

}  // namespace
}  // namespace zf::test
