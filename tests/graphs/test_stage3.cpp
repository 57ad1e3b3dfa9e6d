// ZeRO stage 3's plan of which parameters are whole (graphs/strategies/stage3.hpp, LiveGroups):
// replayed over a training step's hooks for several depths and budgets, against what the layers read.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "graphs/strategies/stage3.hpp"

namespace zf {
namespace {

struct Replay {
  int64_t most = 0;                          // the most elements whole at once
  std::vector<std::vector<int>> gathers;     // per parameter
  int64_t prefetched = 0;                    // elements gathered ahead of their group's use
};

// One step's hooks: every group is whole while its forward and its backward run (the model reads
// its values there), nothing is whole after the step, each parameter is gathered at most twice
// (forward, backward), the last group's once (kept from its forward into its backward).
Replay replay(const std::vector<std::vector<int64_t>>& n, int64_t budget) {
  const int G = (int)n.size();
  LiveGroups lg(n, budget);
  Replay r;
  for (const auto& g : n) r.gathers.emplace_back(g.size(), 0);
  int64_t whole = 0;
  auto gather = [&](int now, const std::vector<LiveGroups::Item>& xs) {
    for (auto [g, i] : xs) {
      ++r.gathers[g][i];
      whole += n[g][i];
      if (g != now) r.prefetched += n[g][i];
    }
    r.most = std::max(r.most, whole);
    EXPECT_EQ(whole, lg.live_elems());
  };
  auto drop = [&](const std::vector<LiveGroups::Item>& xs) {
    for (auto [g, i] : xs) whole -= n[g][i];
  };
  for (int g = 0; g < G; ++g) {
    gather(g, lg.before_forward(g));
    EXPECT_TRUE(lg.whole(g)) << G << " groups, forward of " << g;
    drop(lg.after_forward(g));
  }
  for (int g = G; g-- > 0;) {
    gather(g, lg.before_backward(g));
    EXPECT_TRUE(lg.whole(g)) << G << " groups, backward of " << g;
    drop(lg.after_backward(g));
  }
  EXPECT_EQ(whole, 0);
  for (int g = 0; g < G; ++g)
    for (size_t i = 0; i < n[g].size(); ++i) {
      EXPECT_FALSE(lg.live(g, (int)i)) << g << "." << i << " still whole after the step";
      EXPECT_EQ(r.gathers[g][i], g + 1 < G ? 2 : 1) << G << " groups, parameter " << g << "." << i;
    }
  return r;
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// An unbounded budget: each next group whole one group ahead (the prefetch), at most two at once.
TEST(Stage3, LiveGroupsGatherAheadAndRelease) {
  for (int G : {1, 2, 3, 5}) {
    std::vector<std::vector<int64_t>> n(G, std::vector<int64_t>{10, 1});
    const Replay r = replay(n, INT64_MAX);
    EXPECT_EQ(r.most, 11 * std::min(G, 2)) << G << " groups";
    EXPECT_EQ(r.prefetched, G > 1 ? 11 * (2 * G - 2) : 0) << G << " groups: not prefetched";
  }
}

// The default budget (0: the largest group's): never more than one layer's elements whole, and
// what of the next group fits beside the current one still prefetched. The test MLP's layers
// (784-32-16-10) and a GPT-like model whose blocks are its largest groups.
TEST(Stage3, LiveGroupsStayWithinOneLayerAndPrefetchWhatFits) {
  const std::vector<std::vector<int64_t>> mlp = {{25088, 32}, {512, 16}, {160, 10}};
  const std::vector<std::vector<int64_t>> gpt = {{16384, 2048}, {64, 64, 12288, 192, 4096, 64, 64, 64, 16384, 256, 16384, 64},
                                                 {64, 64, 12288, 192, 4096, 64, 64, 64, 16384, 256, 16384, 64},
                                                 {64, 64, 16384}};
  for (const auto* n : {&mlp, &gpt}) {
    int64_t largest = 0;
    for (const auto& g : *n) largest = std::max(largest, sum(g));
    const Replay r = replay(*n, 0);
    EXPECT_LE(r.most, largest);
    EXPECT_GT(r.prefetched, 0) << "nothing prefetched";
    EXPECT_EQ(replay(*n, largest / 2).most, r.most) << "a budget below the largest group is raised to it";
  }
  // forward: {160, 10} prefetched beside {512, 16}; backward: {512, 16} beside {160, 10}, then
  // fc1's bias (32) beside {512, 16} (its weight does not fit)
  EXPECT_EQ(replay(mlp, 0).prefetched, 170 + 528 + 32);
}

}  // namespace
}  // namespace zf
