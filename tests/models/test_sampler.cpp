// The generation sampler on known logits (models/hf/sampler.hpp; docs/hf.md "Generation"):
// greedy's lowest id on ties, the nucleus (smallest prefix of the sorted probabilities whose mass
// reaches top-p, ties by lower id, renormalised), the temperature, the draws' frequencies and their
// reproducibility by seed, the refused parameters; and the continuation's text stream on the
// shipped KJV tokenizer (held back inside a multi-byte character, equal to the text in the end).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/hf/generate.hpp"
#include "models/hf/sampler.hpp"
#include "models/tokenizer/tokenizer.hpp"

namespace {

using zf::hf::SamplingParams;

// log of the probabilities {0.5, 0.2, 0.2, 0.1}
std::vector<float> known_logits() {
  return {(float)std::log(0.5), (float)std::log(0.2), (float)std::log(0.2), (float)std::log(0.1)};
}

TEST(Sampler, GreedyTakesTheLowestIdOfTheLargest) {
  const std::vector<float> l = {1.0f, 3.0f, -2.0f, 3.0f, 2.5f};
  EXPECT_EQ(zf::hf::argmax_token(l.data(), 5), 1);
  zf::Rng r(1);
  EXPECT_EQ(zf::hf::sample_token(l.data(), 5, {0.0, 0.3}, r), 1);
  EXPECT_EQ(r.next(), zf::Rng(1).next()) << "greedy draws nothing";
  const std::vector<float> bad = {1.0f, NAN};
  EXPECT_THROW(zf::hf::sample_token(bad.data(), 2, {0.0, 1.0}, r), std::runtime_error);
}

TEST(Sampler, NucleusIsTheSmallestPrefixReachingTopP) {
  const std::vector<float> l = known_logits();
  auto ids = [&](double top_p) {
    std::vector<int32_t> out;
    for (auto [id, p] : zf::hf::nucleus(l.data(), 4, {1.0, top_p})) out.push_back(id);
    return out;
  };
  EXPECT_EQ(ids(0.3), (std::vector<int32_t>{0}));
  EXPECT_EQ(ids(0.45), (std::vector<int32_t>{0}));
  EXPECT_EQ(ids(0.6), (std::vector<int32_t>{0, 1}));  // 1 and 2 tie: the lower id first
  EXPECT_EQ(ids(0.8), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(ids(0.95), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(ids(1.0), (std::vector<int32_t>{0, 1, 2, 3}));
  const auto n = zf::hf::nucleus(l.data(), 4, {1.0, 0.6});
  EXPECT_NEAR(n[0].second, 0.5 / 0.7, 1e-7);
  EXPECT_NEAR(n[1].second, 0.2 / 0.7, 1e-7);
  // temperature 2: probabilities proportional to p^(1/2)
  const auto t = zf::hf::nucleus(l.data(), 4, {2.0, 1.0});
  const double s = std::sqrt(0.5) + 2 * std::sqrt(0.2) + std::sqrt(0.1);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_NEAR(t[0].second, std::sqrt(0.5) / s, 1e-7);
  EXPECT_NEAR(t[3].second, std::sqrt(0.1) / s, 1e-7);
  // temperature 0.25: p^4, normalised: 0.0625 / (0.0625 + 2 * 0.0016 + 0.0001)
  EXPECT_NEAR(zf::hf::nucleus(l.data(), 4, {0.25, 1.0})[0].second, 0.0625 / 0.0658, 1e-6);
}

TEST(Sampler, DrawsFollowTheNucleusAndTheSeed) {
  const std::vector<float> l = known_logits();
  const SamplingParams p{1.0, 0.6};
  auto draws = [&](uint64_t seed, int n) {
    zf::Rng r(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(zf::hf::sample_token(l.data(), 4, p, r));
    return out;
  };
  const std::vector<int32_t> a = draws(5, 20000);
  EXPECT_EQ(a, draws(5, 20000));
  EXPECT_NE(a, draws(6, 20000));
  int zeros = 0;
  for (int32_t id : a) {
    EXPECT_TRUE(id == 0 || id == 1) << id << " is outside the nucleus";
    zeros += id == 0;
  }
  // Binomial(20000, 5/7): standard deviation 64; 5 of them
  EXPECT_NEAR(zeros, 20000.0 * 5 / 7, 320.0);
  // no top-p: every id, id 3 about 10 %
  zf::Rng r(9);
  int threes = 0;
  for (int i = 0; i < 20000; ++i) threes += zf::hf::sample_token(l.data(), 4, {1.0, 1.0}, r) == 3;
  EXPECT_NEAR(threes, 2000.0, 5 * 42.4);
}

TEST(Sampler, RefusesBadParameters) {
  EXPECT_EQ(zf::hf::sampling_problem({0.0, 1.0}), "");
  EXPECT_EQ(zf::hf::sampling_problem({0.7, 0.9}), "");
  for (double t : {-1.0, (double)NAN, (double)INFINITY})
    EXPECT_EQ(zf::hf::sampling_problem({t, 1.0}).rfind("--temperature", 0), 0u) << t;
  for (double p : {0.0, 1.5, -0.1, (double)NAN})
    EXPECT_EQ(zf::hf::sampling_problem({1.0, p}).rfind("--top-p", 0), 0u) << p;
}

TEST(Sampler, TextStreamGivesTheContinuationWhole) {
  const auto t = zf::tok::load_tokenizer(std::string(ZF_SOURCE_DIR) + "/graphs/tokenizers/kjv-bpe");
  const std::string prompt = "In the beginning", cont = " God créa 🙂 the heaven, 天 and the earth.";
  const std::vector<uint32_t> p = t->encode(prompt), c = t->encode(cont);
  zf::hf::TextStream s(*t, p);
  std::string got;
  int held = 0;
  for (uint32_t id : c) {
    const std::string piece = s.push((int32_t)id);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "an unfinished character was given";
    held += piece.empty();
    got += piece;
  }
  got += s.finish();
  EXPECT_EQ(got, cont);
  EXPECT_GT(held, 0) << "the emoji's and 天's bytes are separate tokens in a 4096-id vocabulary";
}

}  // namespace
