// Shared by the Llama / Qwen2 workload tests (test_llama.cpp, test_llama_runs.cpp): tiny
// config.json texts (GQA untied, tied, Qwen2 with biases), model directories written with
// hf::save_dir from chosen values (F32, BF16, sharded), token files, the hf spec, and the
// engine's parameters and gradients read back in the logical layout.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graphs/schema/spec.hpp"
#include "models/hf/config.hpp"
#include "models/hf/save.hpp"
#include "models/hf/tensors.hpp"
#include "models/rng.hpp"
#include "models/workload.hpp"
#include "test_helpers.hpp"

namespace zf::test::llama {

using json = nlohmann::json;
namespace fs = std::filesystem;

// GQA (4 heads, 2 KV heads), untied head, Llama 3's rope scaling.
inline json gqa_untied() {
  return json{{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 40},
              {"hidden_size", 16}, {"intermediate_size", 24}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 32},
              {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0},
              {"rope_scaling", {{"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                                {"original_max_position_embeddings", 16}, {"rope_type", "llama3"}}},
              {"hidden_act", "silu"}, {"tie_word_embeddings", false}, {"torch_dtype", "float32"}};
}
// Tied head, plain multi-head attention, theta 10000.
inline json tied() {
  json c = gqa_untied();
  c["tie_word_embeddings"] = true;
  c["num_key_value_heads"] = 4;
  c["rope_theta"] = 10000.0;
  c.erase("rope_scaling");
  return c;
}
// Qwen2: q/k/v biases, tied embeddings, 1 KV head of 2, head_dim 4 on hidden 8.
inline json qwen2() {
  return json{{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"vocab_size", 48},
              {"hidden_size", 8}, {"intermediate_size", 12}, {"num_hidden_layers", 2},
              {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0}, {"use_sliding_window", false},
              {"tie_word_embeddings", true}, {"torch_dtype", "bfloat16"}};
}

// Random values for every tensor of c (norm weights around 1, biases and weights O(0.4)), by name.
inline std::map<std::string, std::vector<float>> random_values(const hf::Config& c, uint64_t seed) {
  Rng r(seed);
  std::map<std::string, std::vector<float>> v;
  for (const hf::TensorSpec& t : hf::expected_tensors(c)) {
    std::vector<float>& x = v[t.name];
    x.resize(t.numel());
    const double base = t.init == hf::Init::Ones ? 1.0 : 0.0;
    for (float& e : x) e = (float)(base + 0.4 * r.normal());
  }
  return v;
}

// dir/config.json = config; returns the parsed config (its path in dir).
inline hf::Config write_config(const std::string& dir, const json& config) {
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << config.dump(2);
  return hf::read_config(dir + "/config.json");
}

// A model directory `out` with config.json and the values `v` saved by hf::save_dir in `dtype`
// ("F32", "BF16"), in shards of at most shard_bytes (0: one file). The config is first written to
// out + ".src" (save_dir copies it from there).
inline void write_model(const std::string& out, const json& config, const std::map<std::string, std::vector<float>>& v,
                        const std::string& dtype, uint64_t shard_bytes = 0) {
  const hf::Config c = write_config(out + ".src", config);
  hf::SaveOptions o;
  o.dtype = dtype;
  if (shard_bytes) o.max_shard_bytes = shard_bytes;
  hf::save_dir(out, c, [&](const hf::TensorSpec& t) { return v.at(t.name).data(); }, o);
}

// n raw little-endian uint16 ids below vocab (nanoGPT's train.bin layout)
inline std::vector<int32_t> write_tokens(const std::string& path, size_t n, int vocab, uint64_t seed) {
  Rng r(seed);
  std::vector<uint16_t> ids(n);
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = ids[i] = (uint16_t)r.below((uint64_t)vocab);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(ids.data()), (std::streamsize)(n * 2));
  return out;
}

// model.type hf on token files, context 8, batch 3, sequential order.
inline Spec hf_spec(const std::string& model_dir, const std::string& train, const std::string& eval) {
  Spec s;
  s.source = "llama-test";
  s.model.type = "hf";
  s.model.path = model_dir;
  s.model.context = 8;
  s.data.dataset = "tokens";
  s.data.path = train;
  s.data.eval_path = eval;
  s.data.order = "sequential";
  s.train.batch_size = 3;
  s.train.eval_batch_size = 4;
  s.optimizer.lr = 1e-2;
  s.log.every = 0;
  s.log.warmup_steps = 0;
  return s;
}

// Every parameter's values in the logical layout, by name.
inline std::map<std::string, std::vector<float>> values(Workload& wl) {
  std::map<std::string, std::vector<float>> v;
  for (Param* p : wl.params()) v[p->name] = logical_values(*p);
  return v;
}

}  // namespace zf::test::llama
