// The generation loop and the continuation's text stream (models/hf/generate.hpp).
#include "models/hf/generate.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

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
  Rng rng(o.seed);
  GenerateResult r;
  std::vector<float> logits;
  m.reset();
  auto t0 = clock::now();
  m.forward(prompt.data(), (int)prompt.size(), false, logits);
  r.prefill_s = std::chrono::duration<double>(clock::now() - t0).count();
  t0 = clock::now();
  for (;;) {
    const int32_t id = sample_token(logits.data(), n, o.sampling, rng);
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
