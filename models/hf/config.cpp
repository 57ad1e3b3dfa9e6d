#include "models/hf/config.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/input_file.hpp"
#include "runtime/json_input.hpp"

namespace zf::hf {
namespace {

using json = nlohmann::json;

// The largest dimension accepted (vocabulary, widths, positions): products of two stay far below
// 2^63, and no published model comes near it.
constexpr int64_t kMaxDim = int64_t(1) << 24;
constexpr int64_t kMaxLayers = 4096;  // Llama 3.1 405B has 126

// Typed access to config.json's fields: absent or null takes the default; a value of the wrong type
// or range is an InputError naming the file and the field.
class Fields {
 public:
  Fields(const json& j, const std::string& path) : j_(j), path_(path) {}

  const json* get(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(path_ + ": " + key, what);
  }
  int64_t integer(const std::string& key, int64_t def, int64_t lo = 1, int64_t hi = kMaxDim) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_number_integer()) fail(key, "expected an integer, got " + excerpt(v->dump()));
    if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)hi)
      fail(key, v->dump() + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi)
      fail(key, std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  // A finite number > 0 (or >= 0 when `zero_ok`).
  double positive(const std::string& key, double def, bool zero_ok = false) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_number()) fail(key, "expected a number, got " + excerpt(v->dump()));
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < 0 || (x == 0 && !zero_ok))
      fail(key, v->dump() + (zero_ok ? ": expected a finite number >= 0" : ": expected a finite number > 0"));
    return x;
  }
  bool boolean(const std::string& key, bool def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) fail(key, "expected true or false, got " + excerpt(v->dump()));
    return v->get<bool>();
  }
  std::string string(const std::string& key, const std::string& def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_string()) fail(key, "expected a string, got " + excerpt(v->dump()));
    return v->get<std::string>();
  }
  // An integer token id, a list of them, or null (none); each in [0, vocab).
  std::vector<int64_t> ids(const std::string& key, std::vector<int64_t> def, int64_t vocab) const {
    auto it = j_.find(key);
    // absent: the family's default, unchecked here (GPT2Config's 50256 is no id of a 4096-id GPT-2):
    // what uses a BOS names the absent field against vocab_size, and never drops it silently
    if (it == j_.end()) return def;
    if (it->is_null()) return {};
    const json* v = &*it;
    std::vector<int64_t> out;
    auto one = [&](const json& e) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= vocab)
        fail(key, excerpt(v->dump()) + ": expected a token id in [0, " + std::to_string(vocab) +
                      ") (vocab_size) or a list of them");
      out.push_back(e.get<int64_t>());
    };
    if (v->is_array()) {
      for (auto& e : *v) one(e);
    } else {
      one(*v);
    }
    return out;
  }

 private:
  const json& j_;
  const std::string& path_;
};

// Each family's defaults for absent fields (transformers' configuration_*.py).
struct Defaults {
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, max_positions;
  std::vector<int64_t> bos, eos;
  bool tie;
};
const Defaults kLlama{32000, 4096, 11008, 32, 32, 0 /* = heads */, 2048, {1}, {2}, false};
const Defaults kMistral{32000, 4096, 14336, 32, 32, 8, 4096 * 32, {1}, {2}, false};
const Defaults kQwen2{151936, 4096, 22016, 32, 32, 32, 32768, {}, {}, false};

// rope_scaling, or transformers 5's rope_parameters (rope_theta and the scaling in one object);
// `key` names the field in errors.
void read_rope_scaling(const Fields& f, Config& c, const std::string& key) {
  const json* v = f.get(key);
  if (!v) return;
  if (!v->is_object()) f.fail(key, "expected null or an object, got " + excerpt(v->dump()));
  const Fields r(*v, c.path);
  if (key == "rope_parameters") c.rope_theta = r.positive("rope_theta", c.rope_theta);
  std::string type = r.string("rope_type", "");
  if (type.empty()) type = r.string("type", "");  // the older key
  if (type == "default" || (type.empty() && key == "rope_parameters")) return;  // transformers: no scaling
  if (type != "llama3")
    f.fail(key + ".rope_type", "'" + excerpt(type) +
                                         "' is not implemented (expected null, \"default\" or \"llama3\")");
  auto need = [&](const char* k) {
    if (!r.get(k)) f.fail(key + "." + k, "missing (the llama3 type needs factor, "
                                                            "low_freq_factor, high_freq_factor, original_max_position_embeddings)");
  };
  for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) need(k);
  RopeScaling& s = c.rope_scaling;
  s.llama3 = true;
  s.factor = r.positive("factor", 0);
  s.low_freq_factor = r.positive("low_freq_factor", 0);
  s.high_freq_factor = r.positive("high_freq_factor", 0);
  s.original_max_position_embeddings = r.integer("original_max_position_embeddings", 0);
  if (s.factor < 1) f.fail(key + ".factor", "expected >= 1");
  if (s.high_freq_factor <= s.low_freq_factor) f.fail(key + ".high_freq_factor", "expected greater than low_freq_factor");
}

// llama, mistral, qwen2: RMSNorm, rotary embeddings, SwiGLU.
void read_llama_like(const Fields& f, Config& c, const Defaults& d) {
  c.vocab_size = f.integer("vocab_size", d.vocab);
  c.hidden_size = f.integer("hidden_size", d.hidden);
  c.intermediate_size = f.integer("intermediate_size", d.intermediate);
  c.num_layers = f.integer("num_hidden_layers", d.layers, 1, kMaxLayers);
  c.num_heads = f.integer("num_attention_heads", d.heads);
  c.num_kv_heads = f.integer("num_key_value_heads", d.kv_heads ? d.kv_heads : c.num_heads);
  c.max_positions = f.integer("max_position_embeddings", d.max_positions);
  c.norm_eps = f.positive("rms_norm_eps", 1e-6);
  c.rope_theta = f.positive("rope_theta", 10000.0);
  c.hidden_act = f.string("hidden_act", "silu");
  if (c.hidden_act != "silu") f.fail("hidden_act", "'" + excerpt(c.hidden_act) + "' is not implemented (expected silu)");
  if (!f.get("head_dim") && c.hidden_size % c.num_heads)
    f.fail("num_attention_heads", std::to_string(c.num_heads) + " does not divide hidden_size " +
                                      std::to_string(c.hidden_size) + " (and there is no head_dim)");
  c.head_dim = f.integer("head_dim", c.hidden_size / c.num_heads);
  if (c.head_dim % 2) f.fail("head_dim", std::to_string(c.head_dim) + ": expected even (rotary embeddings rotate halves)");
  if (c.num_heads % c.num_kv_heads)
    f.fail("num_key_value_heads", std::to_string(c.num_kv_heads) + " does not divide num_attention_heads " +
                                      std::to_string(c.num_heads));
  if (f.boolean("mlp_bias", false)) f.fail("mlp_bias", "true is not implemented (expected false: no MLP biases)");
  read_rope_scaling(f, c, "rope_scaling");
  read_rope_scaling(f, c, "rope_parameters");
  if (f.get("rope_scaling") && f.get("rope_parameters"))
    f.fail("rope_parameters", "given with rope_scaling: expected one of them (rope_parameters is transformers 5's name)");
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", d.tie);
  c.bos_token_ids = f.ids("bos_token_id", d.bos, c.vocab_size);
  c.eos_token_ids = f.ids("eos_token_id", d.eos, c.vocab_size);
}

void read_gpt2(const Fields& f, Config& c) {
  // GPT2Config's attribute_map: hidden_size etc. are other names of n_embd etc.
  auto alias = [&](const char* key, const char* other, int64_t def, int64_t hi = kMaxDim) {
    if (f.get(key) && f.get(other) && f.integer(key, 0, 1, hi) != f.integer(other, 0, 1, hi))
      f.fail(other, "differs from " + std::string(key) + " (the same field under GPT-2's other name)");
    return f.get(key) ? f.integer(key, def, 1, hi) : f.integer(other, def, 1, hi);
  };
  c.vocab_size = f.integer("vocab_size", 50257);
  c.hidden_size = alias("n_embd", "hidden_size", 768);
  c.num_layers = alias("n_layer", "num_hidden_layers", 12, kMaxLayers);
  c.num_heads = alias("n_head", "num_attention_heads", 12);
  c.max_positions = alias("n_positions", "max_position_embeddings", 1024);
  c.intermediate_size = f.integer("n_inner", 4 * c.hidden_size);
  if (c.hidden_size % c.num_heads)
    f.fail("n_head", std::to_string(c.num_heads) + " does not divide n_embd " + std::to_string(c.hidden_size));
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.hidden_size / c.num_heads;
  c.norm_eps = f.positive("layer_norm_epsilon", 1e-5);
  c.hidden_act = f.string("activation_function", "gelu_new");
  if (c.hidden_act != "gelu_new")
    f.fail("activation_function", "'" + excerpt(c.hidden_act) + "' is not implemented (expected gelu_new)");
  if (!f.boolean("scale_attn_weights", true))
    f.fail("scale_attn_weights", "false is not implemented (expected true: scores scaled by 1/sqrt(head_dim))");
  if (f.boolean("scale_attn_by_inverse_layer_idx", false))
    f.fail("scale_attn_by_inverse_layer_idx", "true is not implemented (expected false)");
  if (f.boolean("add_cross_attention", false))
    f.fail("add_cross_attention", "true is not implemented (expected false: a decoder-only model)");
  c.qkv_bias = c.o_bias = true;
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);  // PretrainedConfig's default
  c.bos_token_ids = f.ids("bos_token_id", {50256}, c.vocab_size);
  c.eos_token_ids = f.ids("eos_token_id", {50256}, c.vocab_size);
}

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::Llama: return "llama";
    case Family::Qwen2: return "qwen2";
    case Family::Gpt2: return "gpt2";
  }
  return "?";
}

Config parse_config(const std::string& text, const std::string& path) {
  const json j = parse_json_input(text, path, 64);
  if (!j.is_object()) throw InputError(path, "expected a JSON object (a Hugging Face config.json)");
  Config c;
  c.path = path;
  const Fields f(j, path);
  if (!f.get("model_type")) f.fail("model_type", "missing (expected llama, mistral, qwen2 or gpt2)");
  c.model_type = f.string("model_type", "");
  const char* arch = c.model_type == "llama"     ? "LlamaForCausalLM"
                     : c.model_type == "mistral" ? "MistralForCausalLM"
                     : c.model_type == "qwen2"   ? "Qwen2ForCausalLM"
                     : c.model_type == "gpt2"    ? "GPT2LMHeadModel"
                                                 : nullptr;
  if (!arch) f.fail("model_type", "'" + excerpt(c.model_type) + "' is not implemented (expected llama, mistral, qwen2 or gpt2)");
  c.architecture = arch;
  if (const json* a = f.get("architectures")) {
    if (!a->is_array() || a->empty()) f.fail("architectures", "expected a non-empty list of class names");
    for (auto& e : *a)
      if (!e.is_string() || e.get<std::string>() != c.architecture)
        f.fail("architectures", excerpt(e.dump()) + " is not implemented (model_type " + c.model_type +
                                    " expects [\"" + c.architecture + "\"])");
  }
  if (f.get("quantization_config"))
    f.fail("quantization_config", "present: quantized checkpoints are not read (expected F32, BF16 or F16 weights)");
  if (c.model_type == "gpt2") {
    c.family = Family::Gpt2;
    read_gpt2(f, c);
  } else if (c.model_type == "qwen2") {
    c.family = Family::Qwen2;
    if (f.boolean("use_sliding_window", false))
      f.fail("use_sliding_window", "true is not implemented (expected false: full causal attention)");
    read_llama_like(f, c, kQwen2);
    c.qkv_bias = true;  // Qwen2Attention: q/k/v with biases, o_proj without
  } else {
    c.family = Family::Llama;
    const bool mistral = c.model_type == "mistral";
    read_llama_like(f, c, mistral ? kMistral : kLlama);
    if (mistral) {  // MistralConfig's default window is 4096; MistralAttention has no biases
      const int64_t w = f.get("sliding_window") ? f.integer("sliding_window", 0) : (j.contains("sliding_window") ? 0 : 4096);
      if (w && w < c.max_positions)
        f.fail("sliding_window", std::to_string(w) + (j.contains("sliding_window") ? "" : " (MistralConfig's default)") +
                                     " is in use below max_position_embeddings " + std::to_string(c.max_positions) +
                                     ": not implemented (expected null)");
    } else {
      c.qkv_bias = c.o_bias = f.boolean("attention_bias", false);
    }
  }
  c.initializer_range = f.positive("initializer_range", 0.02, true);
  if (f.get("pad_token_id")) c.pad_token_id = f.integer("pad_token_id", 0, 0, c.vocab_size - 1);
  c.torch_dtype = f.string("torch_dtype", f.string("dtype", ""));
  if (!c.torch_dtype.empty() && c.torch_dtype != "float32" && c.torch_dtype != "bfloat16" && c.torch_dtype != "float16")
    f.fail(f.get("torch_dtype") ? "torch_dtype" : "dtype",
           "'" + excerpt(c.torch_dtype) + "' is not implemented (expected float32, bfloat16 or float16)");
  return c;
}

std::string config_record(const Config& c) {
  const bool gpt2 = c.family == Family::Gpt2;
  json j{{"model_type", c.model_type},
         {"vocab_size", c.vocab_size},
         {gpt2 ? "n_embd" : "hidden_size", c.hidden_size},
         {gpt2 ? "n_inner" : "intermediate_size", c.intermediate_size},
         {gpt2 ? "n_layer" : "num_hidden_layers", c.num_layers},
         {gpt2 ? "n_head" : "num_attention_heads", c.num_heads},
         {"num_key_value_heads", c.num_kv_heads},
         {"head_dim", c.head_dim},
         {gpt2 ? "n_positions" : "max_position_embeddings", c.max_positions},
         {gpt2 ? "layer_norm_epsilon" : "rms_norm_eps", c.norm_eps},
         {"tie_word_embeddings", c.tie_word_embeddings},
         {"attention_bias", json::array({c.qkv_bias, c.o_bias})},
         {gpt2 ? "activation_function" : "hidden_act", c.hidden_act}};
  if (!gpt2) {
    j["rope_theta"] = c.rope_theta;
    const RopeScaling& r = c.rope_scaling;
    j["rope_scaling"] = r.llama3 ? json{{"rope_type", "llama3"},
                                        {"factor", r.factor},
                                        {"low_freq_factor", r.low_freq_factor},
                                        {"high_freq_factor", r.high_freq_factor},
                                        {"original_max_position_embeddings", r.original_max_position_embeddings}}
                                 : json(nullptr);
  }
  return j.dump();
}

std::string config_record_difference(const std::string& recorded, const std::string& now, std::string* what) {
  const json a = json::parse(recorded, nullptr, false), b = json::parse(now, nullptr, false);
  if (!a.is_object() || !b.is_object()) {
    *what = "the checkpoint's record is not a JSON object";
    return "";
  }
  auto brief = [](const json* v) { return v ? excerpt(v->dump(), 60) : std::string("absent"); };
  for (const auto* side : {&a, &b})
    for (auto it = side->begin(); it != side->end(); ++it) {
      const json* x = a.contains(it.key()) ? &a.at(it.key()) : nullptr;
      const json* y = b.contains(it.key()) ? &b.at(it.key()) : nullptr;
      if (!x || !y || *x != *y) {
        *what = "the checkpoint was written with " + brief(x) + ", this run has " + brief(y);
        return it.key();
      }
    }
  *what = "";
  return "";
}

Config read_config(const std::string& path) {
  const std::vector<uint8_t> b = read_input_file(path, path);
  return parse_config(std::string(b.begin(), b.end()), path);
}

}  // namespace zf::hf
