// Host inference with a KV cache (docs/hf.md, "Generation"). Activations are (n, width) row-major
// for the n positions of one call; the cache of layer l holds (context, Hkv*hs) keys (after the
// rotary embedding) and values, row p for position p, so a call's k_proj and v_proj write their
// rows straight into it. Llama / Qwen2 (modeling_llama.py):
//   h = x + o_proj(attn(rope(q_proj(rms_1(x))), rope(k_proj(.)), v_proj(.)))
//   x' = h + down_proj(silu(gate_proj(rms_2(h))) * up_proj(rms_2(h)))
// GPT-2 (modeling_gpt2.py): x = wte[tok] + wpe[pos]; h = x + c_proj(attn(c_attn(ln_1(x))));
// x' = h + mlp.c_proj(gelu_new(c_fc(ln_2(h)))), the linears Conv1D (in, out).
#include "models/hf/causal_lm.hpp"

#include <algorithm>
#include <stdexcept>

#include "codelets/kernels/cpu/kernels.hpp"
#include "models/hf/tensors.hpp"

namespace zf::hf {

namespace k = zf::kernels::cpu;

HostTensors load_host_tensors(const std::string& dir, const Config& c, const InitFrom& init, LoadResult* result) {
  HostTensors w;
  LoadResult r = load_weights(dir, c, init, [&](const TensorSpec& t) {
    std::vector<float>& v = w[t.name];
    v.assign(t.numel(), 0.0f);
    return v.data();
  });
  if (result) *result = std::move(r);
  return w;
}

CausalLM::CausalLM(const Config& c, HostTensors w, int context) : c_(c), w_(std::move(w)), context_(context) {
  if (context < 1 || context > c.max_positions)
    throw std::invalid_argument("CausalLM: context " + std::to_string(context) + " not in [1, " +
                                std::to_string(c.max_positions) + "]");
  for (const TensorSpec& t : expected_tensors(c)) {
    auto it = w_.find(t.name);
    if (it == w_.end() || it->second.size() != t.numel())
      throw std::invalid_argument("CausalLM: tensor " + t.name + " missing or not " + shape_str(t.shape));
  }
  C_ = (int)c.hidden_size;
  H_ = (int)c.num_heads;
  Hkv_ = (int)c.num_kv_heads;
  hs_ = (int)c.head_dim;
  I_ = (int)c.intermediate_size;
  V_ = (int)c.vocab_size;
  prefix_ = c.family == Family::Gpt2 ? "transformer.h." : "model.layers.";
  if (c.family != Family::Gpt2) {
    k::RopeParams p;
    p.theta = c.rope_theta;
    p.llama3 = c.rope_scaling.llama3;
    if (p.llama3) {
      p.factor = c.rope_scaling.factor;
      p.low_freq_factor = c.rope_scaling.low_freq_factor;
      p.high_freq_factor = c.rope_scaling.high_freq_factor;
      p.original_max_position_embeddings = (double)c.rope_scaling.original_max_position_embeddings;
    }
    rope_.resize((size_t)2 * context * (hs_ / 2));
    k::rope_table(p, context, hs_, rope_.data());
  }
  kc_.assign(c.num_layers, std::vector<float>((size_t)context * Hkv_ * hs_));
  vc_.assign(c.num_layers, std::vector<float>((size_t)context * Hkv_ * hs_));
  scratch_.resize(context);
}

const float* CausalLM::W(const std::string& name) const { return w_.at(name).data(); }

void CausalLM::ensure_rows(int n) {
  if (n <= rows_) return;
  rows_ = n;
  const size_t N = n;
  const size_t qw = (size_t)H_ * hs_, wide = std::max<size_t>(I_, 3 * (size_t)C_);
  x_.resize(N * C_), h_.resize(N * C_), o_.resize(N * C_);
  q_.resize(N * qw), att_.resize(N * qw);
  a_.resize(N * wide), b_.resize(N * wide), c3_.resize(N * wide);
  stat1_.resize(N), stat2_.resize(N);
}

// q_ (n, H*hs) over the cache rows [0, len_ + n) of layer l -> att_ (n, H*hs)
void CausalLM::attend(int l, int n) {
  k::cached_attention(q_.data(), kc_[l].data(), vc_[l].data(), att_.data(), scratch_.data(), n, len_, H_, Hkv_, hs_);
}

void CausalLM::llama_layer(int l, int n) {
  const std::string p = prefix_ + std::to_string(l) + ".";
  const int qw = H_ * hs_, kvw = Hkv_ * hs_;
  const float eps = (float)c_.norm_eps;
  const float* cos = rope_.data();
  const float* sin = cos + (size_t)context_ * (hs_ / 2);
  float* kr = kc_[l].data() + (size_t)len_ * kvw;  // the new positions' rows of the cache (n, Hkv*hs)
  float* vr = vc_[l].data() + (size_t)len_ * kvw;
  k::rmsnorm_fwd(x_.data(), W(p + "input_layernorm.weight"), h_.data(), stat1_.data(), n, C_, eps);
  k::matmul_fwd(h_.data(), W(p + "self_attn.q_proj.weight"), q_.data(), n, C_, qw);
  k::matmul_fwd(h_.data(), W(p + "self_attn.k_proj.weight"), kr, n, C_, kvw);
  k::matmul_fwd(h_.data(), W(p + "self_attn.v_proj.weight"), vr, n, C_, kvw);
  if (c_.qkv_bias) {
    k::bias_add(q_.data(), W(p + "self_attn.q_proj.bias"), n, qw);
    k::bias_add(kr, W(p + "self_attn.k_proj.bias"), n, kvw);
    k::bias_add(vr, W(p + "self_attn.v_proj.bias"), n, kvw);
  }
  k::rope_fwd(q_.data(), cos, sin, 1, n, H_, hs_, len_);
  k::rope_fwd(kr, cos, sin, 1, n, Hkv_, hs_, len_);
  attend(l, n);
  k::matmul_fwd(att_.data(), W(p + "self_attn.o_proj.weight"), o_.data(), n, qw, C_);
  if (c_.o_bias) k::bias_add(o_.data(), W(p + "self_attn.o_proj.bias"), n, C_);
  k::accumulate(x_.data(), o_.data(), (size_t)n * C_, 1.0f);
  k::rmsnorm_fwd(x_.data(), W(p + "post_attention_layernorm.weight"), h_.data(), stat1_.data(), n, C_, eps);
  k::matmul_fwd(h_.data(), W(p + "mlp.gate_proj.weight"), a_.data(), n, C_, I_);
  k::matmul_fwd(h_.data(), W(p + "mlp.up_proj.weight"), b_.data(), n, C_, I_);
  k::swiglu_fwd(a_.data(), b_.data(), c3_.data(), (size_t)n * I_);
  k::matmul_fwd(c3_.data(), W(p + "mlp.down_proj.weight"), o_.data(), n, I_, C_);
  k::accumulate(x_.data(), o_.data(), (size_t)n * C_, 1.0f);
}

void CausalLM::gpt2_layer(int l, int n) {
  const std::string p = prefix_ + std::to_string(l) + ".";
  const float eps = (float)c_.norm_eps;
  const size_t C = C_;
  k::layernorm_fwd(x_.data(), W(p + "ln_1.weight"), W(p + "ln_1.bias"), h_.data(), stat1_.data(), stat2_.data(), n,
                   C_, eps);
  float* qkv = a_.data();  // (n, 3C) = [q | k | v]
  k::matmul_fwd(h_.data(), W(p + "attn.c_attn.weight"), qkv, n, C_, 3 * C_, /*w_in_out=*/true);
  k::bias_add(qkv, W(p + "attn.c_attn.bias"), n, 3 * C_);
  for (int t = 0; t < n; ++t) {  // q to q_, k and v to the cache row of position len_ + t
    const float* r = qkv + (size_t)t * 3 * C;
    k::copy(q_.data() + t * C, r, C);
    k::copy(kc_[l].data() + (size_t)(len_ + t) * C, r + C, C);
    k::copy(vc_[l].data() + (size_t)(len_ + t) * C, r + 2 * C, C);
  }
  attend(l, n);
  k::matmul_fwd(att_.data(), W(p + "attn.c_proj.weight"), o_.data(), n, C_, C_, true);
  k::bias_add(o_.data(), W(p + "attn.c_proj.bias"), n, C_);
  k::accumulate(x_.data(), o_.data(), (size_t)n * C, 1.0f);
  k::layernorm_fwd(x_.data(), W(p + "ln_2.weight"), W(p + "ln_2.bias"), h_.data(), stat1_.data(), stat2_.data(), n,
                   C_, eps);
  k::matmul_fwd(h_.data(), W(p + "mlp.c_fc.weight"), a_.data(), n, C_, I_, true);
  k::bias_add(a_.data(), W(p + "mlp.c_fc.bias"), n, I_);
  k::gelu_fwd(a_.data(), b_.data(), (size_t)n * I_);
  k::matmul_fwd(b_.data(), W(p + "mlp.c_proj.weight"), o_.data(), n, I_, C_, true);
  k::bias_add(o_.data(), W(p + "mlp.c_proj.bias"), n, C_);
  k::accumulate(x_.data(), o_.data(), (size_t)n * C, 1.0f);
}

void CausalLM::forward(const int32_t* tokens, int n, bool all_rows, std::vector<float>& logits) {
  if (n < 1 || len_ + n > context_)
    throw std::invalid_argument("CausalLM::forward: " + std::to_string(n) + " positions after " +
                                std::to_string(len_) + " do not fit the context of " + std::to_string(context_));
  for (int t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= V_)
      throw std::invalid_argument("CausalLM::forward: token id " + std::to_string(tokens[t]) + " not in [0, " +
                                  std::to_string(V_) + ")");
  ensure_rows(n);
  const bool gpt2 = c_.family == Family::Gpt2;
  const float* emb = W(gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight");  // (V, C)
  if (gpt2) {
    k::embedding_fwd(tokens, emb, W("transformer.wpe.weight") + (size_t)len_ * C_, x_.data(), 1, n, C_);
  } else {
    for (int t = 0; t < n; ++t) k::copy(x_.data() + (size_t)t * C_, emb + (size_t)tokens[t] * C_, C_);
  }
  for (int l = 0; l < (int)c_.num_layers; ++l) gpt2 ? gpt2_layer(l, n) : llama_layer(l, n);
  const int first = all_rows ? 0 : n - 1, rows = n - first;  // the positions whose logits are asked for
  const float* xf = x_.data() + (size_t)first * C_;
  if (gpt2)
    k::layernorm_fwd(xf, W("transformer.ln_f.weight"), W("transformer.ln_f.bias"), h_.data(), stat1_.data(),
                     stat2_.data(), rows, C_, (float)c_.norm_eps);
  else
    k::rmsnorm_fwd(xf, W("model.norm.weight"), h_.data(), stat1_.data(), rows, C_, (float)c_.norm_eps);
  const float* head = c_.tie_word_embeddings ? emb : W("lm_head.weight");  // (V, C)
  logits.resize((size_t)rows * V_);
  k::matmul_fwd(h_.data(), head, logits.data(), rows, C_, V_);
  len_ += n;
}

}  // namespace zf::hf
