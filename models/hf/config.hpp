// A Hugging Face config.json (docs/hf.md) for the three families the engine implements:
// LlamaForCausalLM (model_type llama, or mistral without a sliding window), Qwen2ForCausalLM
// (qwen2, no sliding window in use) and GPT2LMHeadModel (gpt2). Absent fields take the defaults
// of transformers' LlamaConfig, MistralConfig, Qwen2Config and GPT2Config; a field the engine does
// not implement is a zf::InputError naming the file, the field and what is expected.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zf::hf {

enum class Family { Llama, Qwen2, Gpt2 };

// rope_scaling: null (or rope_type "default"), or Llama 3's frequency-dependent scaling.
struct RopeScaling {
  bool llama3 = false;
  double factor = 0, low_freq_factor = 0, high_freq_factor = 0;
  int64_t original_max_position_embeddings = 0;
};

struct Config {
  std::string path;          // the config.json read (errors name it)
  Family family = Family::Llama;
  std::string model_type;    // "llama", "mistral", "qwen2", "gpt2"
  std::string architecture;  // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "GPT2LMHeadModel"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        // gpt2: n_embd
  int64_t intermediate_size = 0;  // gpt2: n_inner, or 4 * n_embd when null
  int64_t num_layers = 0;         // num_hidden_layers; gpt2: n_layer
  int64_t num_heads = 0;          // num_attention_heads; gpt2: n_head
  int64_t num_kv_heads = 0;       // num_key_value_heads (GQA); gpt2: n_head
  int64_t head_dim = 0;           // head_dim, or hidden_size / num_heads
  int64_t max_positions = 0;      // max_position_embeddings; gpt2: n_positions
  double norm_eps = 0;            // rms_norm_eps; gpt2: layer_norm_epsilon
  double rope_theta = 0;          // 0 for gpt2 (learned positions)
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;          // q/k/v projections carry biases (qwen2; llama attention_bias; gpt2 c_attn)
  bool o_bias = false;            // the output projection too (llama attention_bias; gpt2 c_proj)
  std::string hidden_act;         // "silu" (llama, qwen2) or "gelu_new" (gpt2)
  double initializer_range = 0;
  // int or list in the file; empty when null. Given ids are below vocab_size; an absent field takes
  // the family's default, which may not be (GPT-2's 50256 with a small vocabulary): generate,
  // which feeds BOS to the model, checks it.
  std::vector<int64_t> bos_token_ids, eos_token_ids;
  std::optional<int64_t> pad_token_id;
  std::string torch_dtype;        // "float32", "bfloat16", "float16", or "" when absent
};

// Reads and checks `path` (a config.json).
Config read_config(const std::string& path);
// The same from the file's text; `path` names it in errors.
Config parse_config(const std::string& text, const std::string& path);

const char* family_name(Family f);

// The fields of `c` that define the model's computation, under config.json's names, as JSON text
// with one key per field: a checkpoint records it and --resume compares it with the config it
// resumes with (rope_theta and rms_norm_eps change no shape, so the weights alone would not tell).
std::string config_record(const Config& c);
// The first field of config_record whose value differs between the two records, "the checkpoint
// was written with X, this run has Y" in *what; *what is empty when they agree. A record that is
// not a JSON object differs at field "".
std::string config_record_difference(const std::string& recorded, const std::string& now, std::string* what);

}  // namespace zf::hf
