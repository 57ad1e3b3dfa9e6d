// The ZeRO stage 1 and 2 partition planner (graphs/strategies/partition.hpp) for R = 1..8 over
// parameter-size lists: the MLPs', a GPT block's, parameters smaller than the alignment, one tiny
// parameter, tensors of several default host tiles, random lists. Every rank's share is one
// contiguous range in model order, cut on SIMD-aligned offsets, within kPartitionSlack of N / R.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "graphs/strategies/partition.hpp"

namespace zf {
namespace {

// Checks every property of partition_bounds(sizes, R); returns the largest share.
size_t check_plan(const std::vector<size_t>& sizes, size_t R) {
  SCOPED_TRACE("R=" + std::to_string(R) + ", " + std::to_string(sizes.size()) + " parameters");
  const auto b = partition_bounds(sizes, R);
  size_t N = 0;
  for (size_t n : sizes) N += n;
  EXPECT_EQ(b.size(), sizes.size());
  for (size_t p = 0; p < b.size(); ++p) {
    if (b[p].size() != R + 1) {
      ADD_FAILURE() << "param " << p << ": " << b[p].size() << " bounds, expected " << R + 1;
      return 0;
    }
    EXPECT_EQ(b[p][0], 0u);
    EXPECT_EQ(b[p][R], sizes[p]);
    for (size_t r = 1; r <= R; ++r) {
      EXPECT_LE(b[p][r - 1], b[p][r]) << "param " << p << " rank " << r;
      EXPECT_TRUE(b[p][r] % kPartitionAlign == 0 || b[p][r] == sizes[p]) << "param " << p << " bound " << b[p][r];
    }
  }
  // cut r: the parameters before it are wholly below it, those after it wholly above, so rank r's
  // share is one contiguous range [C_r, C_{r+1}) of the concatenation, C_r within half an
  // alignment step and half an element of r N / R
  for (size_t r = 1; r < R; ++r) {
    size_t C = 0, inside = 0;
    bool above = false;
    for (size_t p = 0; p < b.size(); ++p) {
      const size_t x = b[p][r];
      if (above) {
        EXPECT_EQ(x, 0u) << "param " << p << " after cut " << r;
      }
      if (x < sizes[p]) above = true;
      inside += x > 0 && x < sizes[p];
      C += x;
    }
    EXPECT_LE(inside, 1u) << "cut " << r << " falls inside several parameters";
    const long double dev = std::abs((long double)C * R - (long double)r * N);  // R x |C_r - r N / R|
    EXPECT_LE(2 * dev, (long double)(kPartitionAlign + 1) * R) << "cut " << r << " at " << C << " of " << N;
  }
  size_t sum = 0, largest = 0;
  for (size_t r = 0; r < R; ++r) {
    const size_t s = partition_share(b, r);
    sum += s;
    largest = std::max(largest, s);
    EXPECT_LE(std::abs((long double)s * R - (long double)N), (long double)kPartitionSlack * R) << "rank " << r;
  }
  EXPECT_EQ(sum, N);
  // the promise of docs/data-parallel.md: at most 1.1 x N / R once N >= 10 kPartitionSlack R
  if (N >= 10 * kPartitionSlack * R) {
    EXPECT_LE((long double)largest * R, 1.1L * N) << "largest share " << largest;
  }
  return largest;
}

std::vector<std::vector<size_t>> size_lists() {
  std::vector<std::vector<size_t>> l = {
      {784 * 64, 64, 64 * 10, 10},                                    // mlp-fashion, hidden 64
      {784 * 32, 32, 32 * 16, 16, 16 * 10, 10},                      // the tests' MLP
      {3, 7, 15, 1, 2, 9},                                            // all below the alignment
      {1},                                                            // one tiny parameter
      {5, 100000, 3},                                                 // tiny ones around a large one
      {3 * 1048576 + 5, 17, 1000000},                                 // several default host tiles
      {65 * 128, 64 * 128, 128, 128, 3 * 128 * 128, 3 * 128, 128 * 128, 128, 4 * 128 * 128, 128 * 4 * 128},  // a GPT block
  };
  std::mt19937_64 rng(29);
  for (int k = 0; k < 20; ++k) {
    std::vector<size_t> s(1 + rng() % 12);
    for (size_t& n : s) n = 1 + rng() % (k % 2 ? 40 : 300000);
    l.push_back(s);
  }
  return l;
}

TEST(Partition, BalancedAlignedContiguous) {
  for (const auto& s : size_lists())
    for (size_t R = 1; R <= 8; ++R) check_plan(s, R);
}

TEST(Partition, Examples) {
  // one process: everything on rank 0
  EXPECT_EQ(partition_bounds({100, 7}, 1), (std::vector<std::vector<size_t>>{{0, 100}, {0, 7}}));
  // round(100 / 2) = 50 -> 48, the nearer multiple of 16
  EXPECT_EQ(partition_bounds({100}, 2), (std::vector<std::vector<size_t>>{{0, 48, 100}}));
  // the cut on a parameter boundary: the first to rank 0, the second to rank 1
  EXPECT_EQ(partition_bounds({40, 40}, 2), (std::vector<std::vector<size_t>>{{0, 40, 40}, {0, 0, 40}}));
  // 90 elements: the cut at 45, 4 into the second parameter, moves to its start
  EXPECT_EQ(partition_bounds({41, 49}, 2), (std::vector<std::vector<size_t>>{{0, 41, 41}, {0, 0, 49}}));
  // the MLP at hidden 64 on 2 ranks: balanced (whole 1M-element tiles gave rank 0 everything)
  const size_t largest = check_plan({784 * 64, 64, 64 * 10, 10}, 2);
  EXPECT_LE(largest, 50890u / 2 + kPartitionSlack);
}

TEST(Partition, TooFewElementsLeaveRanksEmpty) {
  // a single tiny parameter: one rank holds it, the others nothing (Strategy::plan_partition
  // refuses such a run, naming zero_optimization.stage)
  const auto b = partition_bounds({1}, 8);
  size_t holders = 0;
  for (size_t r = 0; r < 8; ++r) holders += partition_share(b, r) > 0;
  EXPECT_EQ(holders, 1u);
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(partition_share(partition_bounds({16 * 4}, 4), r), 16u);
}

}  // namespace
}  // namespace zf
