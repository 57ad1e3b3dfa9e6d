// Hugging Face config.json (models/hf/config.hpp) and the tensor list (models/hf/tensors.hpp): each
// family's fields and transformers' defaults for absent ones, every refusal naming the file and the
// field, the names and shapes of each family's tensors, Hugging Face's initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/hf/config.hpp"
#include "models/hf/tensors.hpp"
#include "models/hf_helpers.hpp"
#include "runtime/error.hpp"
#include "test_helpers.hpp"

namespace {

using namespace zf::test;
using namespace zf::test::hf;
using zf::hf::parse_config;

zf::hf::Config parse(const json& j) { return parse_config(j.dump(), "/m/config.json"); }

void expect_refused(const json& j, std::initializer_list<std::string> parts) {
  expect_input_error([&] { parse(j); }, parts);
}

TEST(HfConfig, LlamaFields) {
  const auto c = parse(tiny_llama());
  EXPECT_EQ(c.family, zf::hf::Family::Llama);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.vocab_size, 40);
  EXPECT_EQ(c.hidden_size, 16);
  EXPECT_EQ(c.intermediate_size, 24);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.max_positions, 32);
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_TRUE(c.rope_scaling.llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 16);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.bos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

// transformers' LlamaConfig / Qwen2Config / GPT2Config / MistralConfig defaults for absent fields
TEST(HfConfig, Defaults) {
  const auto l = parse(json{{"model_type", "llama"}});
  EXPECT_EQ(l.vocab_size, 32000);
  EXPECT_EQ(l.hidden_size, 4096);
  EXPECT_EQ(l.intermediate_size, 11008);
  EXPECT_EQ(l.num_layers, 32);
  EXPECT_EQ(l.num_kv_heads, 32);  // num_attention_heads when absent
  EXPECT_EQ(l.head_dim, 128);
  EXPECT_EQ(l.max_positions, 2048);
  EXPECT_EQ(l.norm_eps, 1e-6);
  EXPECT_EQ(l.rope_theta, 10000.0);
  EXPECT_EQ(l.initializer_range, 0.02);
  EXPECT_FALSE(l.rope_scaling.llama3);
  EXPECT_FALSE(l.tie_word_embeddings);
  EXPECT_EQ(l.bos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(l.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(l.architecture, "LlamaForCausalLM");
  const auto q = parse(json{{"model_type", "qwen2"}});
  EXPECT_EQ(q.vocab_size, 151936);
  EXPECT_EQ(q.intermediate_size, 22016);
  EXPECT_EQ(q.max_positions, 32768);
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.o_bias);
  EXPECT_TRUE(q.bos_token_ids.empty());
  const auto g = parse(json{{"model_type", "gpt2"}});
  EXPECT_EQ(g.vocab_size, 50257);
  EXPECT_EQ(g.hidden_size, 768);
  EXPECT_EQ(g.intermediate_size, 4 * 768);
  EXPECT_EQ(g.max_positions, 1024);
  EXPECT_EQ(g.norm_eps, 1e-5);
  EXPECT_TRUE(g.tie_word_embeddings);  // PretrainedConfig's default
  EXPECT_EQ(g.eos_token_ids, std::vector<int64_t>{50256});
  const auto m = parse(json{{"model_type", "mistral"}, {"sliding_window", nullptr}});
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.intermediate_size, 14336);
  EXPECT_EQ(m.architecture, "MistralForCausalLM");
  EXPECT_FALSE(m.qkv_bias);
  // null means none (not the default)
  EXPECT_TRUE(parse(json{{"model_type", "llama"}, {"bos_token_id", nullptr}}).bos_token_ids.empty());
}

TEST(HfConfig, Qwen2AndGpt2Fields) {
  const auto q = parse(tiny_qwen2());
  EXPECT_EQ(q.family, zf::hf::Family::Qwen2);
  EXPECT_EQ(q.num_kv_heads, 1);
  EXPECT_EQ(q.head_dim, 4);
  EXPECT_TRUE(q.tie_word_embeddings);
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_EQ(q.rope_theta, 1e6);
  const auto g = parse(tiny_gpt2());
  EXPECT_EQ(g.family, zf::hf::Family::Gpt2);
  EXPECT_EQ(g.hidden_size, 8);
  EXPECT_EQ(g.intermediate_size, 32);
  EXPECT_EQ(g.num_heads, 2);
  EXPECT_EQ(g.num_kv_heads, 2);
  EXPECT_EQ(g.max_positions, 12);
  EXPECT_EQ(g.hidden_act, "gelu_new");
  EXPECT_TRUE(g.qkv_bias && g.o_bias);
  json g2 = tiny_gpt2();
  g2.erase("n_embd");
  g2["hidden_size"] = 8;  // GPT2Config's attribute_map alias
  EXPECT_EQ(parse(g2).hidden_size, 8);
  g2["n_embd"] = 16;
  expect_refused(g2, {"/m/config.json: hidden_size", "differs from n_embd"});
  // rope_scaling of type "default" is no scaling
  json l = tiny_llama();
  l["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_FALSE(parse(l).rope_scaling.llama3);
  l["rope_scaling"] = {{"type", "llama3"}, {"factor", 2.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 2.0},
                       {"original_max_position_embeddings", 8}};  // the older key
  EXPECT_TRUE(parse(l).rope_scaling.llama3);
  // transformers 5: rope_theta and the scaling as rope_parameters
  l.erase("rope_scaling");
  l["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 123.0}};
  EXPECT_EQ(parse(l).rope_theta, 123.0);
  EXPECT_FALSE(parse(l).rope_scaling.llama3);
  l["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 5e5}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
  EXPECT_TRUE(parse(l).rope_scaling.llama3);
  EXPECT_EQ(parse(l).rope_scaling.factor, 8.0);
  l["rope_parameters"]["rope_type"] = "yarn";
  expect_refused(l, {"/m/config.json: rope_parameters.rope_type", "'yarn' is not implemented"});
  // Mistral's window is harmless when it covers every position
  EXPECT_NO_THROW(parse(json{{"model_type", "mistral"}, {"sliding_window", 4096}, {"max_position_embeddings", 4096}}));
}

TEST(HfConfig, RefusesWhatTheEngineDoesNotImplement) {
  json j = tiny_llama();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  expect_refused(j, {"/m/config.json: rope_scaling.rope_type", "'linear' is not implemented", "llama3"});
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 2.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}};
  expect_refused(j, {"rope_scaling.original_max_position_embeddings", "missing"});
  j = tiny_llama();
  j["hidden_act"] = "gelu";
  expect_refused(j, {"/m/config.json: hidden_act", "'gelu' is not implemented (expected silu)"});
  j = tiny_gpt2();
  j["activation_function"] = "relu";
  expect_refused(j, {"/m/config.json: activation_function", "expected gelu_new"});
  j = tiny_qwen2();
  j["use_sliding_window"] = true;
  expect_refused(j, {"/m/config.json: use_sliding_window", "not implemented"});
  expect_refused(json{{"model_type", "mistral"}}, {"/m/config.json: sliding_window", "4096 (MistralConfig's default)"});
  expect_refused(json{{"model_type", "mistral"}, {"sliding_window", 16}, {"max_position_embeddings", 32}},
                 {"sliding_window", "16 is in use"});
  expect_refused(json{{"model_type", "bert"}}, {"/m/config.json: model_type", "'bert' is not implemented"});
  expect_refused(json{{"vocab_size", 3}}, {"/m/config.json: model_type", "missing"});
  j = tiny_llama();
  j["architectures"] = {"LlamaForSequenceClassification"};
  expect_refused(j, {"/m/config.json: architectures", "LlamaForSequenceClassification", "LlamaForCausalLM"});
  j = tiny_llama();
  j["mlp_bias"] = true;
  expect_refused(j, {"mlp_bias", "not implemented"});
  j = tiny_llama();
  j["quantization_config"] = {{"quant_method", "gptq"}};
  expect_refused(j, {"quantization_config", "quantized"});
  j = tiny_gpt2();
  j["scale_attn_by_inverse_layer_idx"] = true;
  expect_refused(j, {"scale_attn_by_inverse_layer_idx"});
  j = tiny_gpt2();
  j["add_cross_attention"] = true;
  expect_refused(j, {"add_cross_attention"});
}

TEST(HfConfig, RefusesBadValues) {
  auto with = [](json j, const std::string& k, json v) {
    j[k] = std::move(v);
    return j;
  };
  expect_refused(with(tiny_llama(), "hidden_size", "16"), {"/m/config.json: hidden_size", "expected an integer"});
  expect_refused(with(tiny_llama(), "hidden_size", 0), {"hidden_size", "out of range"});
  expect_refused(with(tiny_llama(), "vocab_size", 1e30), {"vocab_size", "expected an integer"});
  expect_refused(with(tiny_llama(), "num_key_value_heads", 3), {"num_key_value_heads", "does not divide"});
  expect_refused(with(tiny_llama(), "num_attention_heads", 5), {"num_attention_heads", "does not divide hidden_size"});
  expect_refused(with(tiny_llama(), "head_dim", 3), {"head_dim", "even"});
  expect_refused(with(tiny_llama(), "rms_norm_eps", -1), {"rms_norm_eps", "> 0"});
  expect_refused(with(tiny_llama(), "rope_theta", "big"), {"rope_theta", "expected a number"});
  expect_refused(with(tiny_llama(), "tie_word_embeddings", 1), {"tie_word_embeddings", "true or false"});
  expect_refused(with(tiny_llama(), "eos_token_id", json{2, 40}), {"eos_token_id", "[0, 40)"});
  expect_refused(with(tiny_llama(), "bos_token_id", "<s>"), {"bos_token_id", "token id"});
  expect_refused(with(tiny_llama(), "torch_dtype", "float64"), {"torch_dtype", "float64"});
  expect_refused(with(tiny_llama(), "rope_scaling", "llama3"), {"rope_scaling", "null or an object"});
  expect_refused(with(tiny_gpt2(), "n_head", 3), {"n_head", "does not divide n_embd"});
  expect_input_error([] { parse_config("[1, 2]", "/m/config.json"); }, {"/m/config.json", "JSON object"});
  expect_input_error([] { parse_config("{\"model_type\": ", "/m/config.json"); }, {"/m/config.json"});
  EXPECT_EQ(parse(with(tiny_llama(), "head_dim", 6)).head_dim, 6);  // explicit head_dim (Mistral Nemo style)
}

TEST(HfTensors, LlamaNamesAndShapes) {
  const auto c = parse(tiny_llama());
  const auto ts = zf::hf::expected_tensors(c);
  ASSERT_EQ(ts.size(), 1u + 2u * 9u + 1u + 1u);
  EXPECT_EQ(ts[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(ts[0].shape, (std::vector<int64_t>{40, 16}));
  std::map<std::string, std::vector<int64_t>> by;
  for (auto& t : ts) by[t.name] = t.shape;
  EXPECT_EQ(by.at("model.layers.1.self_attn.q_proj.weight"), (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(by.at("model.layers.1.self_attn.k_proj.weight"), (std::vector<int64_t>{8, 16}));  // 2 kv heads of 4
  EXPECT_EQ(by.at("model.layers.1.self_attn.v_proj.weight"), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(by.at("model.layers.1.self_attn.o_proj.weight"), (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(by.at("model.layers.0.mlp.gate_proj.weight"), (std::vector<int64_t>{24, 16}));
  EXPECT_EQ(by.at("model.layers.0.mlp.up_proj.weight"), (std::vector<int64_t>{24, 16}));
  EXPECT_EQ(by.at("model.layers.0.mlp.down_proj.weight"), (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(by.at("model.layers.0.input_layernorm.weight"), (std::vector<int64_t>{16}));
  EXPECT_EQ(by.at("model.layers.0.post_attention_layernorm.weight"), (std::vector<int64_t>{16}));
  EXPECT_EQ(by.at("model.norm.weight"), (std::vector<int64_t>{16}));
  EXPECT_EQ(by.at("lm_head.weight"), (std::vector<int64_t>{40, 16}));
  EXPECT_FALSE(by.count("model.layers.0.self_attn.q_proj.bias"));
  // qwen2: q/k/v biases, no o_proj bias, tied: no lm_head
  std::map<std::string, std::vector<int64_t>> q;
  for (auto& t : zf::hf::expected_tensors(parse(tiny_qwen2()))) q[t.name] = t.shape;
  EXPECT_EQ(q.at("model.layers.1.self_attn.q_proj.bias"), (std::vector<int64_t>{8}));
  EXPECT_EQ(q.at("model.layers.1.self_attn.k_proj.bias"), (std::vector<int64_t>{4}));
  EXPECT_EQ(q.at("model.layers.1.self_attn.v_proj.bias"), (std::vector<int64_t>{4}));
  EXPECT_FALSE(q.count("model.layers.1.self_attn.o_proj.bias"));
  EXPECT_FALSE(q.count("lm_head.weight"));
  EXPECT_EQ(q.size(), 1u + 2u * 12u + 1u);
}

TEST(HfTensors, Gpt2NamesShapesAndCheckpointSpellings) {
  const auto c = parse(tiny_gpt2());
  const auto ts = zf::hf::expected_tensors(c);
  ASSERT_EQ(ts.size(), 2u + 2u * 12u + 2u);  // tied: no lm_head
  std::map<std::string, std::vector<int64_t>> by;
  for (auto& t : ts) by[t.name] = t.shape;
  EXPECT_EQ(by.at("transformer.wte.weight"), (std::vector<int64_t>{30, 8}));
  EXPECT_EQ(by.at("transformer.wpe.weight"), (std::vector<int64_t>{12, 8}));
  EXPECT_EQ(by.at("transformer.h.1.attn.c_attn.weight"), (std::vector<int64_t>{8, 24}));  // Conv1D (in, out)
  EXPECT_EQ(by.at("transformer.h.1.attn.c_attn.bias"), (std::vector<int64_t>{24}));
  EXPECT_EQ(by.at("transformer.h.1.attn.c_proj.weight"), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(by.at("transformer.h.1.mlp.c_fc.weight"), (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(by.at("transformer.h.1.mlp.c_proj.weight"), (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(by.at("transformer.h.0.ln_2.bias"), (std::vector<int64_t>{8}));
  EXPECT_EQ(by.at("transformer.ln_f.weight"), (std::vector<int64_t>{8}));
  using K = zf::hf::NameKind;
  auto kind = [&](const std::string& n) { return zf::hf::match_name(c, ts, n); };
  EXPECT_EQ(kind("h.0.attn.c_attn.weight").kind, K::Param);  // openai-community/gpt2 has no prefix
  EXPECT_EQ(kind("h.0.attn.c_attn.weight").canonical, "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(kind("transformer.h.0.attn.bias").kind, K::Ignored);  // the causal-mask buffer
  EXPECT_EQ(kind("h.1.attn.masked_bias").kind, K::Ignored);
  EXPECT_EQ(kind("lm_head.weight").kind, K::Ignored);  // tied
  EXPECT_EQ(kind("h.2.attn.c_attn.weight").kind, K::Unknown);  // layer 2 of 2
  EXPECT_EQ(kind("h.x.attn.bias").kind, K::Unknown);
  const auto l = parse(tiny_llama());
  const auto lt = zf::hf::expected_tensors(l);
  EXPECT_EQ(zf::hf::match_name(l, lt, "layers.0.mlp.up_proj.weight").canonical, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(zf::hf::match_name(l, lt, "model.layers.0.self_attn.rotary_emb.inv_freq").kind, K::Ignored);
  EXPECT_EQ(zf::hf::match_name(l, lt, "lm_head.weight").kind, K::Param);  // untied
}

// normal(0, initializer_range), ones, zeros; GPT-2's c_proj at / sqrt(2 * n_layer); the padding row
TEST(HfTensors, InitAsHuggingFace) {
  json j = tiny_llama();
  j["pad_token_id"] = 3;
  j["initializer_range"] = 0.5;
  const auto c = parse(j);
  std::map<std::string, std::vector<float>> v;
  for (const auto& t : zf::hf::expected_tensors(c)) {
    v[t.name].resize(t.numel());
    zf::hf::init_tensor(t, 42, v[t.name].data());
  }
  for (float x : v.at("model.norm.weight")) EXPECT_EQ(x, 1.0f);
  for (float x : v.at("model.layers.1.input_layernorm.weight")) EXPECT_EQ(x, 1.0f);
  const auto& e = v.at("model.embed_tokens.weight");
  for (int i = 0; i < 16; ++i) EXPECT_EQ(e[3 * 16 + i], 0.0f) << i;  // padding_idx row
  auto stddev = [](const std::vector<float>& x) {
    double s = 0, s2 = 0;
    for (float f : x) s += f, s2 += (double)f * f;
    return std::sqrt(s2 / x.size() - (s / x.size()) * (s / x.size()));
  };
  // 640 draws: the sample std is within 10 % of 0.5 with probability > 0.99 (its relative error ~ 1/sqrt(2n))
  EXPECT_NEAR(stddev(e), 0.5, 0.05);
  EXPECT_NE(v.at("model.layers.0.mlp.up_proj.weight"), v.at("model.layers.0.mlp.gate_proj.weight"));
  std::vector<float> again(e.size());
  zf::hf::init_tensor(zf::hf::expected_tensors(c)[0], 42, again.data());
  EXPECT_EQ(again, e);  // reproducible from the seed
  zf::hf::init_tensor(zf::hf::expected_tensors(c)[0], 43, again.data());
  EXPECT_NE(again, e);
  json g = tiny_gpt2();
  g["n_layer"] = 8;
  g["n_embd"] = 64;
  g["initializer_range"] = 1.0;
  std::map<std::string, zf::hf::TensorSpec> gs;
  for (const auto& t : zf::hf::expected_tensors(parse(g))) gs[t.name] = t;
  EXPECT_DOUBLE_EQ(gs.at("transformer.h.3.attn.c_proj.weight").std, 0.25);  // 1 / sqrt(2 * 8)
  EXPECT_DOUBLE_EQ(gs.at("transformer.h.3.mlp.c_proj.weight").std, 0.25);
  EXPECT_DOUBLE_EQ(gs.at("transformer.h.3.mlp.c_fc.weight").std, 1.0);
  EXPECT_EQ(gs.at("transformer.h.3.attn.c_attn.bias").init, zf::hf::Init::Zeros);
  EXPECT_EQ(gs.at("transformer.h.3.ln_1.weight").init, zf::hf::Init::Ones);
  EXPECT_EQ(gs.at("transformer.h.3.ln_1.bias").init, zf::hf::Init::Zeros);
  std::vector<float> cp(gs.at("transformer.h.3.mlp.c_proj.weight").numel());
  zf::hf::init_tensor(gs.at("transformer.h.3.mlp.c_proj.weight"), 1, cp.data());
  EXPECT_NEAR(stddev(cp), 0.25, 0.025);  // 16384 draws: 10 % is > 10 standard errors
}

}  // namespace
