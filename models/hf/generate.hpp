// Generation with a KV cache (zenflow-run generate; docs/hf.md, "Generation"): the prompt in one
// forward call (the prefill), then one position per new token, each chosen by models/hf/sampler.hpp
// from the last position's logits; stops at an EOS id, after max_new_tokens, or when the context
// (max_position_embeddings) is full.
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/hf/causal_lm.hpp"
#include "models/hf/sampler.hpp"

namespace zf::tok {
class Tokenizer;
}

namespace zf::hf {

struct GenerateOptions {
  int max_new_tokens = 64;         // >= 1
  SamplingParams sampling;
  uint64_t seed = 0;               // the sampler's Rng
  std::vector<int64_t> eos;        // stop after any of these ids (config.json's eos_token_id)
  int candidates = 0;              // ids [0, candidates) may be drawn (0: the whole vocabulary)
  std::vector<int32_t> allowed;    // when not empty: only these ids (ascending) may be drawn
};

// Logits that are not finite (NaN or infinity) where a token is to be drawn: weights whose
// products overflow float32. The caller names the model.
struct NonFiniteLogits : std::runtime_error {
  NonFiniteLogits(const std::string& what, int64_t position) : std::runtime_error(what), position(position) {}
  int64_t position;  // the position whose logits they are
};

// The bytes generation holds for a prompt of `prompt_tokens` and a cache of `context` positions:
// the fp32 weights, the KV cache, the rotary table, the work rows of the prefill, the logits and
// the sampler's buffers (docs/hf.md, "Generation").
struct GenerateMemory {
  double weights = 0, cache = 0, work = 0;
  double total() const { return weights + cache + work; }
};
GenerateMemory generate_memory(const Config& c, int64_t context, int64_t prompt_tokens);

enum class StopReason { Eos, MaxNewTokens, Context };
const char* stop_name(StopReason r);  // "EOS", "max-new-tokens", "context full"

struct GenerateResult {
  std::vector<int32_t> tokens;  // the new tokens (an EOS that stopped the run included)
  StopReason stop = StopReason::MaxNewTokens;
  double prefill_s = 0, decode_s = 0;  // time of the prompt's forward call, of the later ones
};

// Runs `prompt` (at least one id) on `m` from an empty cache, then samples up to max_new_tokens.
// on_token(id), when given, sees each new token as it is chosen. m.context() must hold the prompt.
GenerateResult generate(CausalLM& m, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token = {});

// Text of the continuation as the tokens come (HF's TextStreamer): after each token, the decoded
// text of prompt + new tokens (special tokens skipped) past the decoded prompt, less what was
// already given, held back while it ends in U+FFFD (a character whose bytes are still to come).
class TextStream {
 public:
  TextStream(const tok::Tokenizer& t, std::vector<uint32_t> prompt);
  std::string push(int32_t id);  // the text that is now final
  std::string finish();          // what is left
 private:
  std::string text_now() const;
  const tok::Tokenizer& t_;
  std::vector<uint32_t> ids_;
  size_t prompt_len_ = 0;
  std::string prompt_text_;
  std::string given_;  // the continuation's text already returned
};

}  // namespace zf::hf
