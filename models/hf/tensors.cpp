#include "models/hf/tensors.hpp"

#include <algorithm>
#include <cmath>

#include "models/rng.hpp"
#include "runtime/simulation.hpp"

namespace zf::hf {
namespace {

void add(std::vector<TensorSpec>& out, std::string name, std::vector<int64_t> shape, Init init, double std = 0) {
  TensorSpec t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.init = init;
  t.std = std;
  out.push_back(std::move(t));
}

// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (modeling_llama.py and its copies).
void llama_tensors(const Config& c, std::vector<TensorSpec>& out) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const double s = c.initializer_range;
  add(out, "model.embed_tokens.weight", {V, H}, Init::Normal, s);
  if (c.pad_token_id) out.back().zero_row = *c.pad_token_id;  // nn.Embedding(..., padding_idx)
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(out, p + "input_layernorm.weight", {H}, Init::Ones);
    add(out, p + "self_attn.q_proj.weight", {q, H}, Init::Normal, s);
    if (c.qkv_bias) add(out, p + "self_attn.q_proj.bias", {q}, Init::Zeros);
    add(out, p + "self_attn.k_proj.weight", {kv, H}, Init::Normal, s);
    if (c.qkv_bias) add(out, p + "self_attn.k_proj.bias", {kv}, Init::Zeros);
    add(out, p + "self_attn.v_proj.weight", {kv, H}, Init::Normal, s);
    if (c.qkv_bias) add(out, p + "self_attn.v_proj.bias", {kv}, Init::Zeros);
    add(out, p + "self_attn.o_proj.weight", {H, q}, Init::Normal, s);
    if (c.o_bias) add(out, p + "self_attn.o_proj.bias", {H}, Init::Zeros);
    add(out, p + "post_attention_layernorm.weight", {H}, Init::Ones);
    add(out, p + "mlp.gate_proj.weight", {I, H}, Init::Normal, s);
    add(out, p + "mlp.up_proj.weight", {I, H}, Init::Normal, s);
    add(out, p + "mlp.down_proj.weight", {H, I}, Init::Normal, s);
  }
  add(out, "model.norm.weight", {H}, Init::Ones);
  if (!c.tie_word_embeddings) add(out, "lm_head.weight", {V, H}, Init::Normal, s);
}

// GPT2LMHeadModel (modeling_gpt2.py): Conv1D weights are (in, out); c_proj's init is scaled by
// 1/sqrt(2 * n_layer) (GPT2PreTrainedModel._init_weights, "2 layer norms per block").
void gpt2_tensors(const Config& c, std::vector<TensorSpec>& out) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, P = c.max_positions;
  const double s = c.initializer_range, sp = s / std::sqrt(2.0 * (double)c.num_layers);
  add(out, "transformer.wte.weight", {V, C}, Init::Normal, s);
  add(out, "transformer.wpe.weight", {P, C}, Init::Normal, s);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    add(out, p + "ln_1.weight", {C}, Init::Ones);
    add(out, p + "ln_1.bias", {C}, Init::Zeros);
    add(out, p + "attn.c_attn.weight", {C, 3 * C}, Init::Normal, s);
    add(out, p + "attn.c_attn.bias", {3 * C}, Init::Zeros);
    add(out, p + "attn.c_proj.weight", {C, C}, Init::Normal, sp);
    add(out, p + "attn.c_proj.bias", {C}, Init::Zeros);
    add(out, p + "ln_2.weight", {C}, Init::Ones);
    add(out, p + "ln_2.bias", {C}, Init::Zeros);
    add(out, p + "mlp.c_fc.weight", {C, I}, Init::Normal, s);
    add(out, p + "mlp.c_fc.bias", {I}, Init::Zeros);
    add(out, p + "mlp.c_proj.weight", {I, C}, Init::Normal, sp);
    add(out, p + "mlp.c_proj.bias", {C}, Init::Zeros);
  }
  add(out, "transformer.ln_f.weight", {C}, Init::Ones);
  add(out, "transformer.ln_f.bias", {C}, Init::Zeros);
  if (!c.tie_word_embeddings) add(out, "lm_head.weight", {V, C}, Init::Normal, s);
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// "PREFIX<digits>.REST" with REST one of `rests`
bool layer_buffer(const std::string& n, const std::string& prefix, std::initializer_list<const char*> rests) {
  if (!starts_with(n, prefix)) return false;
  size_t i = prefix.size(), j = i;
  while (j < n.size() && n[j] >= '0' && n[j] <= '9') ++j;
  if (j == i || j >= n.size() || n[j] != '.') return false;
  const std::string rest = n.substr(j + 1);
  return std::any_of(rests.begin(), rests.end(), [&](const char* r) { return rest == r; });
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

}  // namespace

size_t TensorSpec::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= (size_t)d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::vector<TensorSpec> expected_tensors(const Config& c) {
  std::vector<TensorSpec> out;
  if (c.family == Family::Gpt2) {
    gpt2_tensors(c, out);
  } else {
    llama_tensors(c, out);
  }
  return out;
}

NameMatch match_name(const Config& c, const std::vector<TensorSpec>& expected, const std::string& name) {
  const std::string base = c.family == Family::Gpt2 ? "transformer." : "model.";
  const std::string canon = name == "lm_head.weight" || starts_with(name, base) ? name : base + name;
  NameMatch m;
  for (const TensorSpec& t : expected)
    if (t.name == canon) {
      m.kind = NameKind::Param;
      m.canonical = canon;
      return m;
    }
  const bool ignored = c.family == Family::Gpt2
                           ? layer_buffer(canon, base + "h.", {"attn.bias", "attn.masked_bias"})
                           : layer_buffer(canon, base + "layers.", {"self_attn.rotary_emb.inv_freq"});
  if (ignored || (canon == "lm_head.weight" && c.tie_word_embeddings)) m.kind = NameKind::Ignored;
  return m;
}

void init_tensor(const TensorSpec& t, uint64_t seed, float* out) {
  if (kSimulated) return;  // no value is real in simulation (docs/simulation.md)
  const size_t n = t.numel();
  if (t.init != Init::Normal) {
    std::fill(out, out + n, t.init == Init::Ones ? 1.0f : 0.0f);
    return;
  }
  Rng rng(seed * 0x9e3779b97f4a7c15ull ^ fnv1a(t.name));
  for (size_t i = 0; i < n; ++i) out[i] = (float)(rng.normal() * t.std);
  if (t.zero_row >= 0 && t.shape.size() == 2 && t.zero_row < t.shape[0])
    std::fill(out + (size_t)t.zero_row * (size_t)t.shape[1], out + (size_t)(t.zero_row + 1) * (size_t)t.shape[1], 0.0f);
}

}  // namespace zf::hf
