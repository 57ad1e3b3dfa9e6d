// The generation loop and the continuation's text stream (models/hf/generate.hpp).
#include "models/hf/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "models/hf/tensors.hpp"

#include "models/tokenizer/tokenizer.hpp"

namespace zf::hf {

const char* stop_name(StopReason r) {
  switch (r) {
    case StopReason::Eos: return "EOS";
    case StopReason::MaxNewTokens: return "max-new-tokens";
    case StopReason::Context: return "context full";
  }
  return "?";
}

GenerateResult generate(CausalLM& m, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token) {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) throw std::invalid_argument("generate: an empty prompt");
  if (o.max_new_tokens < 1) throw std::invalid_argument("generate: max_new_tokens < 1");
  const int V = (int)m.config().vocab_size;
  const int n = o.candidates > 0 ? std::min(o.candidates, V) : V;
  for (int32_t id : o.allowed)
    if (id < 0 || id >= n) throw std::invalid_argument("generate: an allowed id outside the candidates");
  std::vector<float> logits;
  std::vector<float> compact(o.allowed.size());  // the allowed ids' logits, in their order
  // The next id from the last position's logits: only the candidates (all finite), only the
  // allowed ones where given (the sampler sees them in ascending id order, so ties and the
  // nucleus order are those of the ids)
  auto draw = [&](Rng& rng) -> int32_t {
    for (int i = 0; i < n; ++i)
      if (!std::isfinite(logits[i]))
        throw NonFiniteLogits("the logit of token " + std::to_string(i) + " at position " +
                                  std::to_string(m.cache_len() - 1) + " is " + std::to_string(logits[i]),
                              m.cache_len() - 1);
    if (o.allowed.empty()) return sample_token(logits.data(), n, o.sampling, rng);
    for (size_t k = 0; k < o.allowed.size(); ++k) compact[k] = logits[o.allowed[k]];
    return o.allowed[sample_token(compact.data(), (int)compact.size(), o.sampling, rng)];
  };
  Rng rng(o.seed);
  GenerateResult r;
  m.reset();
  auto t0 = clock::now();
  m.forward(prompt.data(), (int)prompt.size(), false, logits);
  r.prefill_s = std::chrono::duration<double>(clock::now() - t0).count();
  t0 = clock::now();
  for (;;) {
    const int32_t id = draw(rng);
    r.tokens.push_back(id);
    if (on_token) on_token(id);
    if (std::find(o.eos.begin(), o.eos.end(), (int64_t)id) != o.eos.end()) {
      r.stop = StopReason::Eos;
      break;
    }
    if ((int)r.tokens.size() == o.max_new_tokens) {
      r.stop = StopReason::MaxNewTokens;
      break;
    }
    if (m.cache_len() == m.context()) {
      r.stop = StopReason::Context;
      break;
    }
    m.forward(&id, 1, false, logits);
  }
  r.decode_s = std::chrono::duration<double>(clock::now() - t0).count();
  return r;
}

GenerateMemory generate_memory(const Config& c, int64_t context, int64_t prompt_tokens) {
  // CausalLM's buffers (causal_lm.cpp), in doubles: the dimensions are below 2^24 each, their
  // products may pass 2^63
  GenerateMemory g;
  for (const TensorSpec& t : expected_tensors(c)) {
    double n = 1;
    for (int64_t d : t.shape) n *= (double)d;
    g.weights += 4 * n;
  }
  const double C = (double)c.hidden_size, V = (double)c.vocab_size, kv = (double)c.num_kv_heads * c.head_dim;
  const double qw = (double)c.num_heads * c.head_dim, wide = std::max((double)c.intermediate_size, 3 * C);
  g.cache = 4 * (2 * (double)c.num_layers * (double)context * kv + (double)context * c.head_dim + (double)context);
  const double rows = (double)prompt_tokens;
  // x, h, o; q, att; a, b, c3; two statistics per row; the logits; the sampler's (id, p) pairs,
  // the allowed ids and their logits
  g.work = 4 * rows * (3 * C + 2 * qw + 3 * wide + 2) + 4 * V + 16 * V + 8 * V;
  return g;
}

TextStream::TextStream(const tok::Tokenizer& t, std::vector<uint32_t> prompt)
    : t_(t), ids_(std::move(prompt)), prompt_len_(ids_.size()), prompt_text_(t.decode(ids_, true)) {}

// The continuation's text: the decoded whole past the decoded prompt; the new tokens decoded
// alone when the decoder changed the prompt's text at the boundary.
std::string TextStream::text_now() const {
  const std::string all = t_.decode(ids_, true);
  if (all.compare(0, prompt_text_.size(), prompt_text_) == 0) return all.substr(prompt_text_.size());
  return t_.decode(std::vector<uint32_t>(ids_.begin() + (long)prompt_len_, ids_.end()), true);
}

std::string TextStream::push(int32_t id) {
  ids_.push_back((uint32_t)id);
  const std::string s = text_now();
  static const std::string kReplacement = "\xEF\xBF\xBD";
  if (s.size() >= kReplacement.size() && s.compare(s.size() - 3, 3, kReplacement) == 0) return "";
  if (s.compare(0, given_.size(), given_) != 0) return "";  // the decoder changed given text: wait
  std::string out = s.substr(given_.size());
  given_ = s;
  return out;
}

std::string TextStream::finish() {
  const std::string s = text_now();
  if (s.size() <= given_.size() || s.compare(0, given_.size(), given_) != 0) return "";
  std::string out = s.substr(given_.size());
  given_ = s;
  return out;
}

}  // namespace zf::hf
