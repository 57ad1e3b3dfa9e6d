// Inference of a Hugging Face causal language model on the host, with a KV cache (docs/hf.md,
// "Generation"): LlamaForCausalLM (and Mistral), Qwen2ForCausalLM and GPT2LMHeadModel, from the
// fp32 tensors load_weights gives, on the StarPU-free CPU kernels (codelets/kernels/cpu). A
// forward call runs the next positions of one sequence, appending their keys and values to the
// cache; a prompt is one call (the prefill), each new token one more.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/hf/config.hpp"
#include "models/hf/load.hpp"

namespace zf::hf {

// Every tensor of expected_tensors(c), fp32 in the checkpoint's layout, by canonical name.
using HostTensors = std::map<std::string, std::vector<float>>;

// Reads (or, with InitFrom::random_init, initialises) every tensor of the model in `dir` into host
// memory.
HostTensors load_host_tensors(const std::string& dir, const Config& c, const InitFrom& init,
                              LoadResult* result = nullptr);

class CausalLM {
 public:
  // `context`: the positions the cache holds, 1 <= context <= c.max_positions. Every tensor of
  // expected_tensors(c) must be in `w` with its size (std::invalid_argument otherwise).
  CausalLM(const Config& c, HostTensors w, int context);

  // Runs tokens[0, n) (ids below vocab_size) at positions cache_len() .. cache_len() + n - 1,
  // appends their keys and values to the cache, and writes logits: (n, V) for every position when
  // all_rows, else (1, V) for the last. cache_len() + n must not exceed context().
  void forward(const int32_t* tokens, int n, bool all_rows, std::vector<float>& logits);

  int cache_len() const { return len_; }
  int context() const { return context_; }
  void reset() { len_ = 0; }  // forget the sequence (the cache is overwritten by the next one)
  const Config& config() const { return c_; }

 private:
  const float* W(const std::string& name) const;
  void llama_layer(int l, int n);
  void gpt2_layer(int l, int n);
  void attend(int l, int n);  // q_ (n, H*hs) over the cache of layer l -> att_
  void ensure_rows(int n);

  Config c_;
  HostTensors w_;
  int context_ = 0, len_ = 0;
  int C_ = 0, H_ = 0, Hkv_ = 0, hs_ = 0, I_ = 0, V_ = 0;
  std::string prefix_;            // "model.layers." or "transformer.h."
  std::vector<float> rope_;       // (2, context, hs/2): cos, then sin (Llama, Qwen2)
  std::vector<std::vector<float>> kc_, vc_;  // per layer (context, Hkv*hs): keys after RoPE, values
  // work buffers for `rows_` positions
  int rows_ = 0;
  std::vector<float> x_, h_, q_, att_, o_, a_, b_, c3_, stat1_, stat2_, scratch_;
};

}  // namespace zf::hf
