// Shared by the Hugging Face directory tests (test_hf_config.cpp, test_hf_dir.cpp): tiny
// config.json texts of each family, safetensors files made by hand (the format's JSON header and
// raw bytes, independent of the engine's writer), and whole model directories built from them.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/hf/config.hpp"
#include "models/hf/load.hpp"
#include "models/hf/tensors.hpp"
#include "models/rng.hpp"
#include "test_helpers.hpp"

namespace zf::test::hf {

using json = nlohmann::json;

// GQA (4 heads, 2 kv heads), untied head, Llama 3's rope scaling.
inline json tiny_llama() {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", 40},
              {"hidden_size", 16},
              {"intermediate_size", 24},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"max_position_embeddings", 32},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", 500000.0},
              {"rope_scaling",
               {{"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                {"original_max_position_embeddings", 16}, {"rope_type", "llama3"}}},
              {"hidden_act", "silu"},
              {"initializer_range", 0.02},
              {"bos_token_id", 1},
              {"eos_token_id", {2, 3}},
              {"tie_word_embeddings", false},
              {"torch_dtype", "bfloat16"}};
}

// q/k/v biases, tied head, no sliding window, 2 kv heads of 2.
inline json tiny_qwen2() {
  return json{{"architectures", {"Qwen2ForCausalLM"}},
              {"model_type", "qwen2"},
              {"vocab_size", 48},
              {"hidden_size", 8},
              {"intermediate_size", 12},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 2},
              {"num_key_value_heads", 1},
              {"max_position_embeddings", 64},
              {"max_window_layers", 2},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", 1000000.0},
              {"sliding_window", 64},
              {"use_sliding_window", false},
              {"tie_word_embeddings", true},
              {"bos_token_id", 5},
              {"eos_token_id", 6},
              {"torch_dtype", "float32"}};
}

inline json tiny_gpt2() {
  return json{{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", 30},
              {"n_embd", 8},
              {"n_layer", 2},
              {"n_head", 2},
              {"n_positions", 12},
              {"n_inner", nullptr},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", 1e-5},
              {"initializer_range", 0.02},
              {"bos_token_id", 29},
              {"eos_token_id", 29}};
}

// One tensor as stored: its name, dtype and little-endian bytes.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// A safetensors file from a hand-made header ({"__metadata__": {"format": "pt"}, tensors in order}).
inline std::vector<uint8_t> safetensors_bytes(const std::vector<RawTensor>& ts) {
  nlohmann::ordered_json h;
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const RawTensor& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  const std::string text = h.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = (char)((uint64_t)text.size() >> (8 * i));
  out += text;
  for (const RawTensor& t : ts) out.append(t.bytes.begin(), t.bytes.end());
  return std::vector<uint8_t>(out.begin(), out.end());
}

// Random finite values of `dtype` (F32: normal floats; BF16/F16: random finite bit patterns, sign
// and exponent included, so every conversion path is exercised).
inline std::vector<uint8_t> random_bytes(const std::string& dtype, size_t n, Rng& r) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < n; ++i) {
    if (dtype == "F32") {
      const float x = (float)(r.normal() * 0.5);
      const uint8_t* p = reinterpret_cast<const uint8_t*>(&x);
      out.insert(out.end(), p, p + 4);
      continue;
    }
    uint16_t h;
    do h = (uint16_t)r.next();
    while (dtype == "BF16" ? (h & 0x7f80u) == 0x7f80u : (h & 0x7c00u) == 0x7c00u);  // no inf or NaN
    out.push_back((uint8_t)h);
    out.push_back((uint8_t)(h >> 8));
  }
  return out;
}

// Every tensor the config needs, random, in `dtype`.
inline std::vector<RawTensor> random_tensors(const json& config, const std::string& dtype, uint64_t seed) {
  const zf::hf::Config c = zf::hf::parse_config(config.dump(), "config.json");
  Rng r(seed);
  std::vector<RawTensor> out;
  for (const auto& s : zf::hf::expected_tensors(c)) out.push_back({s.name, dtype, s.shape, random_bytes(dtype, s.numel(), r)});
  return out;
}

// A model directory: config.json and model.safetensors, or (shards > 1) the tensors dealt round
// robin into `shards` files with model.safetensors.index.json.
inline void write_model_dir(const TempDir& d, const json& config, const std::vector<RawTensor>& ts, int shards = 1) {
  d.write("config.json", config.dump(2));
  if (shards == 1) {
    write_plain(d.path("model.safetensors"), safetensors_bytes(ts));
    return;
  }
  std::vector<std::vector<RawTensor>> parts(shards);
  json map = json::object();
  for (size_t i = 0; i < ts.size(); ++i) {
    parts[i % shards].push_back(ts[i]);
    map[ts[i].name] = "model-0000" + std::to_string(i % shards + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
  }
  for (int s = 0; s < shards; ++s)
    write_plain(d.path("model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors"),
                safetensors_bytes(parts[s]));
  d.write("model.safetensors.index.json", json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump(2));
}

// The model's tensors as fp32, by canonical name.
struct Loaded {
  std::map<std::string, std::vector<float>> values;
  zf::hf::LoadResult result;
};
// random: Hugging Face's init from `seed` (model.init "random"), else the directory's weights.
inline Loaded load_dir(const std::string& dir, bool random = false, uint64_t seed = 1) {
  Loaded l;
  const zf::hf::Config c = zf::hf::read_config(dir + "/config.json");
  const zf::hf::InitFrom from = random ? zf::hf::InitFrom::random_init(seed) : zf::hf::InitFrom::files();
  l.result = zf::hf::load_weights(dir, c, from, [&](const zf::hf::TensorSpec& t) {
    auto& v = l.values[t.name];
    v.assign(t.numel(), -7.0f);
    return v.data();
  });
  return l;
}

}  // namespace zf::test::hf
