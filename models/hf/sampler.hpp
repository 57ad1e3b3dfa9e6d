// Next-token choice for generation (docs/hf.md, "Generation"): temperature 0 is greedy (the
// argmax, the lowest id on ties); otherwise softmax(logits / temperature), cut to the top-p
// nucleus (ids sorted by probability descending, lower id first on ties; the smallest prefix
// whose mass reaches top_p), renormalised, and one draw of models/rng.hpp's uniform: the same
// seed gives the same tokens.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/rng.hpp"

namespace zf::hf {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy; else finite and > 0
  double top_p = 1.0;        // in (0, 1]; 1 keeps every id
};

// What makes p unusable ("--temperature: ..." / "--top-p: ..."), empty when it is fine.
std::string sampling_problem(const SamplingParams& p);

// The lowest id of the largest of logits[0, n).
int32_t argmax_token(const float* logits, int n);

// The nucleus of logits[0, n) at p.temperature > 0: (id, probability) sorted by probability
// descending (lower id first on ties), the smallest prefix whose probability mass is >= top_p,
// the probabilities renormalised to sum 1. Computed in double.
std::vector<std::pair<int32_t, double>> nucleus(const float* logits, int n, const SamplingParams& p);

// The next token: argmax_token at temperature 0 (no draw), else one rng.uniform() u and the first
// id of the nucleus whose cumulative probability exceeds u. Non-finite logits are a
// std::runtime_error.
int32_t sample_token(const float* logits, int n, const SamplingParams& p, Rng& rng);

}  // namespace zf::hf
