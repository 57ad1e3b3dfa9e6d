// The tensors of a Hugging Face model (docs/hf.md): names as save_pretrained writes them
// ("model." / "transformer." prefix), shapes as stored (nn.Linear (out, in); GPT-2's Conv1D
// (in, out)), and Hugging Face's _init_weights for a directory without weights: normal(0,
// initializer_range) for linears and embeddings (GPT-2's c_proj: / sqrt(2 * n_layer); the
// padding_idx row of a Llama/Qwen2 embedding zero), ones for norm weights, zeros for biases.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/hf/config.hpp"

namespace zf::hf {

enum class Init { Normal, Ones, Zeros };

struct TensorSpec {
  std::string name;            // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // as stored in the checkpoint
  Init init = Init::Normal;
  double std = 0;              // Init::Normal's standard deviation
  int64_t zero_row = -1;       // Init::Normal: this row set to zero (an embedding's padding_idx)
  size_t numel() const;
};

// Every parameter of the model `c` describes, in the model's order (embeddings, layers, final norm,
// head). A tied head (tie_word_embeddings) has no lm_head.weight.
std::vector<TensorSpec> expected_tensors(const Config& c);

enum class NameKind {
  Param,    // one of expected_tensors (under its canonical name)
  Ignored,  // a non-parameter buffer (GPT-2's attn.bias / attn.masked_bias, rotary_emb.inv_freq) or
            // lm_head.weight of a tied model: Hugging Face skips them too
  Unknown,  // not this model's
};
struct NameMatch {
  NameKind kind = NameKind::Unknown;
  std::string canonical;  // kind Param: the name in expected_tensors
};
// A checkpoint's tensor name, with or without the base model's prefix ("wte.weight" and
// "transformer.wte.weight"; "layers.0..." and "model.layers.0...").
NameMatch match_name(const Config& c, const std::vector<TensorSpec>& expected, const std::string& name);

// Fills out[numel] with t's initial values. Each tensor has its own stream (models/rng.hpp seeded
// from `seed` and the tensor's name), so the values do not depend on the order of the calls.
void init_tensor(const TensorSpec& t, uint64_t seed, float* out);

std::string shape_str(const std::vector<int64_t>& s);

}  // namespace zf::hf
