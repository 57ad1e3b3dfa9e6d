// The whole LlamaForCausalLM / Qwen2ForCausalLM in double precision (tests/models/test_llama.cpp):
// the layers of tests/reference/llama_ref.hpp chained as modeling_llama.py does (token embedding,
// per block rmsnorm, q/k/v projections with optional biases, rotary embeddings, grouped-query
// attention, o_proj, residual, rmsnorm, SwiGLU MLP, residual; final norm; tied or untied head),
// the mean cross-entropy over the targets >= 0, and every parameter's gradient. Parameters by
// Hugging Face's names, weights (out, in) row-major. Deliberately naive.
#pragma once
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "models/hf/config.hpp"
#include "tests/reference/llama_ref.hpp"

namespace zf::ref {

class LlamaModelRef {
 public:
  using Params = std::map<std::string, std::vector<double>>;
  LlamaModelRef(const hf::Config& c, Params p) : c_(c), p_(std::move(p)) {
    RopeRef r;
    r.theta = c.rope_theta;
    r.llama3 = c.rope_scaling.llama3;
    if (r.llama3) {
      r.factor = c.rope_scaling.factor, r.low = c.rope_scaling.low_freq_factor;
      r.high = c.rope_scaling.high_freq_factor, r.old_ctx = (double)c.rope_scaling.original_max_position_embeddings;
    }
    inv_freq_ = rope_inv_freq(r, (int)c.head_dim);
  }
  Params& params() { return p_; }
  // After loss() with grads: sum over the input x of every linear layer of |x| |dL/dx| (each
  // layer's own share of dL/dx: q, k and v apart; reference.hpp's abs_dot). A bf16 forward that
  // rounds those inputs (relative error <= 2^-8 each) is within 2^-8 of this of the loss, to first
  // order. Precision bf16 also stores the residual stream and the matmuls' outputs in bf16
  // (Runtime::activations_bf16), each rounded where it is written: the embedding's output, each
  // product's output with its bias (one rounding: the bias is added in the product's task, as
  // PyTorch's addmm), again after the residual add, q and k again after the rotary embedding;
  // their |x| |dL/dx| are counted too.
  double bf16_sensitivity() const { return sens_; }

  // Mean cross-entropy over the targets >= 0 of tokens (B, T); grads (when given) of every parameter.
  double loss(const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt, int B, int T, Params* grads) {
    B_ = B, T_ = T, N_ = B * T;
    forward(tok);
    const int V = (int)c_.vocab_size;
    std::vector<double> dlogits((size_t)N_ * V, 0.0);
    double sum = 0.0;
    int count = 0;
    for (int i = 0; i < N_; ++i)
      if (tgt[(size_t)i] >= 0) ++count;
    for (int i = 0; i < N_; ++i) {
      if (tgt[(size_t)i] < 0) continue;
      const double* z = &logits_[(size_t)i * V];
      double mx = z[0];
      for (int v = 1; v < V; ++v) mx = std::max(mx, z[v]);
      double s = 0.0;
      for (int v = 0; v < V; ++v) s += std::exp(z[v] - mx);
      sum += std::log(s) + mx - z[tgt[(size_t)i]];
      for (int v = 0; v < V; ++v) dlogits[(size_t)i * V + v] = std::exp(z[v] - mx) / s / count;
      dlogits[(size_t)i * V + tgt[(size_t)i]] -= 1.0 / count;
    }
    if (grads) backward(tok, dlogits, *grads);
    return sum / count;
  }

 private:
  struct Layer {
    std::vector<double> in, xn1, rstd1, q, k, v, qr, kr, atty, att, res1, xn2, rstd2, g, u, h, res2;
  };
  const std::vector<double>& P(const std::string& n) const { return p_.at(n); }
  bool has(const std::string& n) const { return p_.count(n) != 0; }
  std::string lp(int l) const { return "model.layers." + std::to_string(l) + "."; }
  const std::string& head_name() const {
    static const std::string tied = "model.embed_tokens.weight", untied = "lm_head.weight";
    return c_.tie_word_embeddings ? tied : untied;
  }

  // y (N, O) = x (N, I) W^T (W (O, I)) + b
  void linear(const std::vector<double>& x, const std::string& w, const std::string& b, int I, int O,
              std::vector<double>& y) const {
    y.assign((size_t)N_ * O, 0.0);
    const std::vector<double>& W = P(w);
    for (int n = 0; n < N_; ++n)
      for (int o = 0; o < O; ++o) {
        double s = has(b) ? P(b)[(size_t)o] : 0.0;
        for (int i = 0; i < I; ++i) s += x[(size_t)n * I + i] * W[(size_t)o * I + i];
        y[(size_t)n * O + o] = s;
      }
  }
  // dx (N, I) += dy W; dW (O, I) += dy^T x; db += column sums of dy
  void linear_bwd(const std::vector<double>& dy, const std::vector<double>& x, const std::string& w,
                  const std::string& b, int I, int O, std::vector<double>& dx, Params& g) const {
    const std::vector<double>& W = P(w);
    std::vector<double>& dW = g[w];
    dW.resize((size_t)O * I, 0.0);
    if (has(b)) g[b].resize((size_t)O, 0.0);
    dx.resize((size_t)N_ * I, 0.0);
    for (int n = 0; n < N_; ++n)
      for (int o = 0; o < O; ++o) {
        const double d = dy[(size_t)n * O + o];
        if (has(b)) g[b][(size_t)o] += d;
        for (int i = 0; i < I; ++i) dW[(size_t)o * I + i] += d * x[(size_t)n * I + i];
      }
    std::vector<double> dxl((size_t)N_ * I, 0.0);  // this layer's share of dx
    for (int n = 0; n < N_; ++n)
      for (int o = 0; o < O; ++o)
        for (int i = 0; i < I; ++i) dxl[(size_t)n * I + i] += dy[(size_t)n * O + o] * W[(size_t)o * I + i];
    for (size_t k = 0; k < dxl.size(); ++k) dx[k] += dxl[k];
    sens_ += abs_dot(x.data(), dxl.data(), dxl.size());
  }

  void forward(const std::vector<int32_t>& tok) {
    const int C = (int)c_.hidden_size, F = (int)c_.intermediate_size, H = (int)c_.num_heads;
    const int Hkv = (int)c_.num_kv_heads, hs = (int)c_.head_dim, Q = H * hs, KV = Hkv * hs;
    std::vector<double> r((size_t)N_ * C);
    for (int n = 0; n < N_; ++n)
      for (int ch = 0; ch < C; ++ch) r[(size_t)n * C + ch] = P("model.embed_tokens.weight")[(size_t)tok[(size_t)n] * C + ch];
    layers_.assign((size_t)c_.num_layers, Layer{});
    for (int l = 0; l < (int)c_.num_layers; ++l) {
      Layer& L = layers_[(size_t)l];
      const std::string p = lp(l);
      L.in = r;
      L.xn1.resize((size_t)N_ * C), L.rstd1.resize((size_t)N_);
      rmsnorm_fwd(r.data(), P(p + "input_layernorm.weight").data(), L.xn1.data(), L.rstd1.data(), N_, C, c_.norm_eps);
      linear(L.xn1, p + "self_attn.q_proj.weight", p + "self_attn.q_proj.bias", C, Q, L.q);
      linear(L.xn1, p + "self_attn.k_proj.weight", p + "self_attn.k_proj.bias", C, KV, L.k);
      linear(L.xn1, p + "self_attn.v_proj.weight", p + "self_attn.v_proj.bias", C, KV, L.v);
      L.qr.resize(L.q.size()), L.kr.resize(L.k.size());
      rope_fwd(L.q.data(), L.qr.data(), inv_freq_, B_, T_, H, hs, 0);
      rope_fwd(L.k.data(), L.kr.data(), inv_freq_, B_, T_, Hkv, hs, 0);
      L.atty.resize((size_t)N_ * Q), L.att.resize((size_t)B_ * H * T_ * T_);
      gqa_attention_fwd(L.qr.data(), L.kr.data(), L.v.data(), L.atty.data(), L.att.data(), B_, T_, H, Hkv, hs);
      linear(L.atty, p + "self_attn.o_proj.weight", p + "self_attn.o_proj.bias", Q, C, L.res1);
      for (size_t i = 0; i < r.size(); ++i) L.res1[i] += r[i];
      L.xn2.resize((size_t)N_ * C), L.rstd2.resize((size_t)N_);
      rmsnorm_fwd(L.res1.data(), P(p + "post_attention_layernorm.weight").data(), L.xn2.data(), L.rstd2.data(), N_, C,
                  c_.norm_eps);
      linear(L.xn2, p + "mlp.gate_proj.weight", "", C, F, L.g);
      linear(L.xn2, p + "mlp.up_proj.weight", "", C, F, L.u);
      L.h.resize(L.g.size());
      swiglu_fwd(L.g.data(), L.u.data(), L.h.data(), L.g.size());
      linear(L.h, p + "mlp.down_proj.weight", "", F, C, L.res2);
      for (size_t i = 0; i < r.size(); ++i) L.res2[i] += L.res1[i];
      r = L.res2;
    }
    last_ = r;
    xf_.resize(r.size()), rstdf_.resize((size_t)N_);
    rmsnorm_fwd(r.data(), P("model.norm.weight").data(), xf_.data(), rstdf_.data(), N_, C, c_.norm_eps);
    linear(xf_, head_name(), "", C, (int)c_.vocab_size, logits_);
  }

  // The bf16 activations' roundings (linear_input_sensitivity): |x| |dx| for x stored once
  void stored(const std::vector<double>& x, const std::vector<double>& dx) const {
    sens_ += abs_dot(x.data(), dx.data(), dx.size());
  }
  static std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> d(a.size());
    for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
    return d;
  }

  void block_backward(int l, std::vector<double>& dr, Params& g) {
    const int C = (int)c_.hidden_size, F = (int)c_.intermediate_size, H = (int)c_.num_heads;
    const int Hkv = (int)c_.num_kv_heads, hs = (int)c_.head_dim, Q = H * hs, KV = Hkv * hs;
    const Layer& L = layers_[(size_t)l];
    const std::string p = lp(l);
    std::vector<double> dh, dg(L.g.size()), du(L.g.size()), dxn2, dres1((size_t)N_ * C);
    stored(L.res2, dr);
    stored(minus(L.res2, L.res1), dr);
    linear_bwd(dr, L.h, p + "mlp.down_proj.weight", "", F, C, dh, g);
    swiglu_bwd(L.g.data(), L.u.data(), dh.data(), dg.data(), du.data(), dg.size());
    stored(L.g, dg);
    stored(L.u, du);
    linear_bwd(dg, L.xn2, p + "mlp.gate_proj.weight", "", C, F, dxn2, g);
    linear_bwd(du, L.xn2, p + "mlp.up_proj.weight", "", C, F, dxn2, g);
    std::vector<double>& dw2 = g[p + "post_attention_layernorm.weight"];
    dw2.resize((size_t)C);
    rmsnorm_bwd(dxn2.data(), L.res1.data(), L.rstd2.data(), P(p + "post_attention_layernorm.weight").data(),
                dres1.data(), dw2.data(), N_, C);
    for (size_t i = 0; i < dres1.size(); ++i) dres1[i] += dr[i];
    stored(L.res1, dres1);
    stored(minus(L.res1, L.in), dres1);
    std::vector<double> datty, dqr(L.q.size()), dkr(L.k.size()), dv(L.v.size()), dq(L.q.size()), dk(L.k.size());
    linear_bwd(dres1, L.atty, p + "self_attn.o_proj.weight", p + "self_attn.o_proj.bias", Q, C, datty, g);
    gqa_attention_bwd(datty.data(), L.qr.data(), L.kr.data(), L.v.data(), L.att.data(), dqr.data(), dkr.data(),
                      dv.data(), B_, T_, H, Hkv, hs);
    rope_bwd(dqr.data(), dq.data(), inv_freq_, B_, T_, H, hs, 0);
    rope_bwd(dkr.data(), dk.data(), inv_freq_, B_, T_, Hkv, hs, 0);
    stored(L.qr, dqr);
    stored(L.kr, dkr);
    stored(L.q, dq);
    stored(L.k, dk);
    stored(L.v, dv);
    std::vector<double> dxn1;
    linear_bwd(dq, L.xn1, p + "self_attn.q_proj.weight", p + "self_attn.q_proj.bias", C, Q, dxn1, g);
    linear_bwd(dk, L.xn1, p + "self_attn.k_proj.weight", p + "self_attn.k_proj.bias", C, KV, dxn1, g);
    linear_bwd(dv, L.xn1, p + "self_attn.v_proj.weight", p + "self_attn.v_proj.bias", C, KV, dxn1, g);
    std::vector<double>& dw1 = g[p + "input_layernorm.weight"];
    dw1.resize((size_t)C);
    rmsnorm_bwd(dxn1.data(), L.in.data(), L.rstd1.data(), P(p + "input_layernorm.weight").data(), dr.data(),
                dw1.data(), N_, C);
    for (size_t i = 0; i < dr.size(); ++i) dr[i] += dres1[i];
  }

  void backward(const std::vector<int32_t>& tok, const std::vector<double>& dlogits, Params& g) {
    const int C = (int)c_.hidden_size;
    g.clear();
    sens_ = 0.0;
    std::vector<double> dxf, dr((size_t)N_ * C);
    Params head;  // the head's gradient apart: added to the embedding's when tied
    linear_bwd(dlogits, xf_, head_name(), "", C, (int)c_.vocab_size, dxf, head);
    std::vector<double>& dn = g["model.norm.weight"];
    dn.resize((size_t)C);
    rmsnorm_bwd(dxf.data(), last_.data(), rstdf_.data(), P("model.norm.weight").data(), dr.data(), dn.data(), N_, C);
    for (int l = (int)c_.num_layers - 1; l >= 0; --l) block_backward(l, dr, g);
    if (!layers_.empty()) stored(layers_[0].in, dr);  // the embedding's output
    std::vector<double>& de = g["model.embed_tokens.weight"];
    de.assign((size_t)c_.vocab_size * C, 0.0);
    for (int n = 0; n < N_; ++n)
      for (int ch = 0; ch < C; ++ch) de[(size_t)tok[(size_t)n] * C + ch] += dr[(size_t)n * C + ch];
    const std::vector<double>& dh = head[head_name()];
    if (c_.tie_word_embeddings)
      for (size_t i = 0; i < de.size(); ++i) de[i] += dh[i];
    else
      g["lm_head.weight"] = dh;
  }

  hf::Config c_;
  Params p_;
  std::vector<double> inv_freq_;
  int B_ = 0, T_ = 0, N_ = 0;
  std::vector<Layer> layers_;
  std::vector<double> last_, xf_, rstdf_, logits_;
  mutable double sens_ = 0.0;  // linear_bwd is const
};

}  // namespace zf::ref
