// Naive double-precision forward of a whole Hugging Face causal LM over one sequence (the
// generation tests' reference, tests/models/test_generate.cpp): Llama / Qwen2 from llama_ref.hpp's
// layers (RMSNorm, rotate-half RoPE with llama3 scaling, grouped-query attention, SwiGLU; q/k/v
// and o biases where the config has them), GPT-2 from gpt_ref.hpp's (learned positions,
// LayerNorm, fused c_attn, gelu_new; Conv1D weights (in, out)). No cache: every position's logits
// from the full causal forward, positions 0 .. T-1. Tensors by Hugging Face's canonical names.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tests/reference/gpt_ref.hpp"
#include "tests/reference/llama_ref.hpp"
#include "tests/reference/reference.hpp"

namespace zf::ref {

struct HfRefConfig {
  bool gpt2 = false;
  int L = 0, C = 0, H = 0, Hkv = 0, hs = 0, I = 0, V = 0;
  double eps = 1e-5;
  bool qkv_bias = false, o_bias = false, tied = false;
  RopeRef rope;
};

// y (B, N) = x (B, K) w (K, N): a Conv1D (in, out) weight
inline void matmul_in_out(const double* x, const double* w, double* y, int B, int K, int N) {
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0.0;
      for (int k = 0; k < K; ++k) s += x[(size_t)i * K + k] * w[(size_t)k * N + j];
      y[(size_t)i * N + j] = s;
    }
}

// logits (T, V) of tokens tok (T)
inline std::vector<double> hf_lm_logits(const HfRefConfig& c, const std::map<std::string, std::vector<double>>& w,
                                        const std::vector<int32_t>& tok) {
  const int T = (int)tok.size(), C = c.C, qw = c.H * c.hs, kvw = c.Hkv * c.hs, I = c.I;
  auto P = [&](const std::string& n) { return w.at(n).data(); };
  std::vector<double> x((size_t)T * C), h(x.size()), o(x.size()), st1(T), st2(T);
  std::vector<double> q((size_t)T * qw), qr(q.size()), k((size_t)T * kvw), kr(k.size()), v(k.size()), att(q.size());
  std::vector<double> probs((size_t)c.H * T * T), a((size_t)T * std::max(I, 3 * C)), b(a.size()), g(a.size());
  const std::vector<double> inv_freq = c.gpt2 ? std::vector<double>() : rope_inv_freq(c.rope, c.hs);
  auto residual = [&] { for (size_t i = 0; i < x.size(); ++i) x[i] += o[i]; };
  if (c.gpt2) {
    embedding_fwd(tok.data(), P("transformer.wte.weight"), P("transformer.wpe.weight"), x.data(), 1, T, C);
  } else {
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < C; ++j) x[(size_t)t * C + j] = w.at("model.embed_tokens.weight")[(size_t)tok[t] * C + j];
  }
  for (int l = 0; l < c.L; ++l) {
    if (c.gpt2) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      layernorm_fwd(x.data(), P(p + "ln_1.weight"), P(p + "ln_1.bias"), h.data(), st1.data(), st2.data(), T, C, c.eps);
      matmul_in_out(h.data(), P(p + "attn.c_attn.weight"), a.data(), T, C, 3 * C);
      bias_add(a.data(), P(p + "attn.c_attn.bias"), T, 3 * C);
      attention_fwd(a.data(), att.data(), probs.data(), 1, T, C, c.H);
      matmul_in_out(att.data(), P(p + "attn.c_proj.weight"), o.data(), T, C, C);
      bias_add(o.data(), P(p + "attn.c_proj.bias"), T, C);
      residual();
      layernorm_fwd(x.data(), P(p + "ln_2.weight"), P(p + "ln_2.bias"), h.data(), st1.data(), st2.data(), T, C, c.eps);
      matmul_in_out(h.data(), P(p + "mlp.c_fc.weight"), a.data(), T, C, I);
      bias_add(a.data(), P(p + "mlp.c_fc.bias"), T, I);
      gelu_fwd(a.data(), g.data(), (size_t)T * I);
      matmul_in_out(g.data(), P(p + "mlp.c_proj.weight"), o.data(), T, I, C);
      bias_add(o.data(), P(p + "mlp.c_proj.bias"), T, C);
      residual();
      continue;
    }
    const std::string p = "model.layers." + std::to_string(l) + ".";
    rmsnorm_fwd(x.data(), P(p + "input_layernorm.weight"), h.data(), st1.data(), T, C, c.eps);
    matmul_fwd(h.data(), P(p + "self_attn.q_proj.weight"), q.data(), T, C, qw);
    matmul_fwd(h.data(), P(p + "self_attn.k_proj.weight"), k.data(), T, C, kvw);
    matmul_fwd(h.data(), P(p + "self_attn.v_proj.weight"), v.data(), T, C, kvw);
    if (c.qkv_bias) {
      bias_add(q.data(), P(p + "self_attn.q_proj.bias"), T, qw);
      bias_add(k.data(), P(p + "self_attn.k_proj.bias"), T, kvw);
      bias_add(v.data(), P(p + "self_attn.v_proj.bias"), T, kvw);
    }
    rope_fwd(q.data(), qr.data(), inv_freq, 1, T, c.H, c.hs, 0);
    rope_fwd(k.data(), kr.data(), inv_freq, 1, T, c.Hkv, c.hs, 0);
    gqa_attention_fwd(qr.data(), kr.data(), v.data(), att.data(), probs.data(), 1, T, c.H, c.Hkv, c.hs);
    matmul_fwd(att.data(), P(p + "self_attn.o_proj.weight"), o.data(), T, qw, C);
    if (c.o_bias) bias_add(o.data(), P(p + "self_attn.o_proj.bias"), T, C);
    residual();
    rmsnorm_fwd(x.data(), P(p + "post_attention_layernorm.weight"), h.data(), st1.data(), T, C, c.eps);
    matmul_fwd(h.data(), P(p + "mlp.gate_proj.weight"), a.data(), T, C, I);
    matmul_fwd(h.data(), P(p + "mlp.up_proj.weight"), b.data(), T, C, I);
    swiglu_fwd(a.data(), b.data(), g.data(), (size_t)T * I);
    matmul_fwd(g.data(), P(p + "mlp.down_proj.weight"), o.data(), T, I, C);
    residual();
  }
  if (c.gpt2)
    layernorm_fwd(x.data(), P("transformer.ln_f.weight"), P("transformer.ln_f.bias"), h.data(), st1.data(), st2.data(),
                  T, C, c.eps);
  else
    rmsnorm_fwd(x.data(), P("model.norm.weight"), h.data(), st1.data(), T, C, c.eps);
  const std::string emb = c.gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
  std::vector<double> logits((size_t)T * c.V);
  matmul_fwd(h.data(), P(c.tied ? emb : "lm_head.weight"), logits.data(), T, C, c.V);
  return logits;
}

}  // namespace zf::ref
