// ZeRO stage 3's plan of which layer groups are whole (graphs/strategies/stage3.hpp, LiveGroups):
// replayed over a training step's hooks for several depths, against what the layers read.
#include <gtest/gtest.h>

#include <vector>

#include "graphs/strategies/stage3.hpp"

namespace zf {
namespace {

// One step's hooks on G groups: every group is whole while its forward and its backward run
// (the model reads its values there), the next one is gathered one group ahead (the prefetch), at
// most two are whole at once, and nothing is whole after the step. Each group is gathered at most
// twice (forward, backward), the last one once (kept from its forward into its backward).
TEST(Stage3, LiveGroupsGatherAheadAndRelease) {
  for (int G : {1, 2, 3, 5}) {
    LiveGroups lg(G);
    std::vector<int> gathers(G, 0);
    int whole = 0, most = 0;
    auto gather = [&](const std::vector<int>& gs) {
      for (int g : gs) ++gathers[g], ++whole;
      most = std::max(most, whole);
    };
    auto drop = [&](const std::vector<int>& gs) { whole -= (int)gs.size(); };
    for (int g = 0; g < G; ++g) {
      gather(lg.before_forward(g));
      EXPECT_TRUE(lg.live(g)) << G << " groups, forward of " << g;
      if (g + 1 < G) {
        EXPECT_TRUE(lg.live(g + 1)) << G << " groups: " << g + 1 << " not prefetched";
      }
      drop(lg.after_forward(g));
    }
    for (int g = G; g-- > 0;) {
      gather(lg.before_backward(g));
      EXPECT_TRUE(lg.live(g)) << G << " groups, backward of " << g;
      if (g > 0) {
        EXPECT_TRUE(lg.live(g - 1)) << G << " groups: " << g - 1 << " not prefetched";
      }
      drop(lg.after_backward(g));
    }
    for (int g = 0; g < G; ++g) {
      EXPECT_FALSE(lg.live(g)) << G << " groups: " << g << " still whole after the step";
      EXPECT_EQ(gathers[g], g + 1 < G ? 2 : 1) << G << " groups, group " << g;
    }
    EXPECT_EQ(whole, 0);
    EXPECT_EQ(most, std::min(G, 2)) << G << " groups";
  }
}

}  // namespace
}  // namespace zf
