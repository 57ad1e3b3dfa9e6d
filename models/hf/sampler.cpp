// Greedy, temperature and top-p (nucleus) sampling (models/hf/sampler.hpp; docs/hf.md
// "Generation"). The nucleus as Holtzman et al. define it (2019, "The Curious Case of Neural Text
// Degeneration", section 3.1): the smallest set of most probable ids whose mass reaches p.
#include "models/hf/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace zf::hf {

std::string sampling_problem(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return "--temperature: " + std::to_string(p.temperature) + ", expected a finite number >= 0 (0: greedy)";
  if (!(p.top_p > 0 && p.top_p <= 1))
    return "--top-p: " + std::to_string(p.top_p) + ", expected a number in (0, 1]";
  return "";
}

namespace {
void check_finite(const float* logits, int n) {
  for (int i = 0; i < n; ++i)
    if (!std::isfinite(logits[i]))
      throw std::runtime_error("generate: the logit of token " + std::to_string(i) + " is not finite");
}
}  // namespace

int32_t argmax_token(const float* logits, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

std::vector<std::pair<int32_t, double>> nucleus(const float* logits, int n, const SamplingParams& p) {
  const double mx = logits[argmax_token(logits, n)];
  std::vector<std::pair<int32_t, double>> c(n);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    c[i] = {i, std::exp(((double)logits[i] - mx) / p.temperature)};
    sum += c[i].second;
  }
  std::stable_sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  size_t keep = 0;
  double mass = 0.0;
  while (keep < c.size() && (keep == 0 || mass < p.top_p * sum)) mass += c[keep++].second;
  c.resize(keep);
  for (auto& e : c) e.second /= mass;
  return c;
}

int32_t sample_token(const float* logits, int n, const SamplingParams& p, Rng& rng) {
  check_finite(logits, n);
  if (p.temperature == 0) return argmax_token(logits, n);
  const auto c = nucleus(logits, n, p);
  const double u = rng.uniform();
  double acc = 0.0;
  for (const auto& [id, prob] : c) {
    acc += prob;
    if (u < acc) return id;
  }
  return c.back().first;  // u within rounding of 1
}

}  // namespace zf::hf
