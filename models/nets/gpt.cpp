// The GPT body's step graph and the language model on top of it (models/nets/gpt.hpp). Per block,
// with r the residual stream (B*T, C):
//   ln1 = LN(r); qkv = ln1 Wqkv^T + b; y = attn(qkv); r1 = r + y Wo^T + b
//   ln2 = LN(r1); h = gelu(ln2 Wfc^T + b); r2 = r1 + h Wp^T + b
// The backward mirrors it; the residual gradient is carried in two buffers that alternate.
#include "models/nets/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/error.hpp"
#include "runtime/simulation.hpp"

namespace zf {

namespace {
enum Blk {
  kLn1W, kLn1B, kAttnW, kAttnB, kAttnProjW, kAttnProjB, kLn2W, kLn2B, kFcW, kFcB, kMlpProjW, kMlpProjB
};
}

struct GptBody::Acts {
  int B, T;
  // x0, qkv, res1, fch and res2 (the residual stream and the matmuls' outputs): 2-byte bf16
  // tensors under Runtime::activations_bf16 (acts_for), written rounded, read widened by the
  // codelets (codelets/half_storage.cpp)
  Tensor x0;  // (BT, C) embedding output
  struct Layer {
    Tensor ln1, ln1_mean, ln1_rstd;  // (BT, C), (BT), (BT)
    Tensor qkv;                      // (BT, 3C)
    Tensor atty;                     // (BT, C) attention output before the projection
    Tensor lse;                      // (B, NH, T): the attention rows' log-sum-exp
    Tensor res1;                     // (BT, C) residual after attention
    Tensor ln2, ln2_mean, ln2_rstd;  // (BT, C), (BT), (BT)
    Tensor fch, fcg;                 // (BT, I) before / after GELU (I = 4C unless n_inner)
    Tensor res2;                     // (BT, C) residual after the MLP
    // Precision bf16 with bf16 matmuls (Runtime::matmul_inputs_bf16): each linear layer's input,
    // which only its matmuls read, stored in bf16 (Tensor::store_half) instead of ln1, atty, ln2
    // and fcg, by the LayerNorm, attention and GELU that write it (rounded as the matmuls would
    // round it). Where the matmuls keep their operands (matmul_keeps_bf16_operands) the bf16
    // copies of each linear layer's output gradient, written by its data gradient and read by
    // its weight gradient; without 2-byte storage also the inputs' bf16 copies, written by the
    // forward. Lazy: a tensor a run does not use is never allocated.
    Tensor ln1_h, atty_h, ln2_h, fcg_h;     // (BT, C), (BT, C), (BT, C), (BT, I)
    Tensor dqkv_h, dres1_h, dfch_h, dres2_h;  // (BT, 3C), (BT, C), (BT, I), (BT, C)
  };
  // One Layer a block, or with activation checkpointing every N blocks (GptConfig::checkpoint_every)
  // min(N, n_layer) of them, block l's in layers[l % N], reused by every segment of N blocks: the
  // backward recomputes a segment's forward into them. Then a segment's last block writes its
  // output into outs[l] (kept for the backward), the others into their Layer's res2.
  std::vector<Layer> layers;
  int every = 0, n_layer = 0;
  std::vector<Tensor> outs;  // checkpointing: the segments' outputs (invalid for the other blocks)
  Layer& at(int l) { return layers[(size_t)(every ? l % every : l)]; }
  bool segment_end(int l) const { return every && (l % every == every - 1 || l == n_layer - 1); }
  const Tensor& out(int l) { return segment_end(l) ? outs[(size_t)l] : at(l).res2; }
  Tensor lnf, lnf_mean, lnf_rstd;  // (BT, C), (BT), (BT)
  // gradients, reused by every layer
  Tensor dres_a, dres_b, dln, datty, dlnf;  // (BT, C)
  Tensor dqkv;                              // (BT, 3C)
  Tensor dfch, dfcg;                        // (BT, I)
  template <class F>
  void each(F&& f) const {  // every tensor above
    for (const Layer& L : layers)
      for (const Tensor* t : {&L.ln1, &L.ln1_mean, &L.ln1_rstd, &L.qkv, &L.atty, &L.lse, &L.res1, &L.ln2, &L.ln2_mean,
                              &L.ln2_rstd, &L.fch, &L.fcg, &L.res2, &L.ln1_h, &L.atty_h, &L.ln2_h, &L.fcg_h, &L.dqkv_h,
                              &L.dres1_h, &L.dfch_h, &L.dres2_h})
        f(*t);
    for (const Tensor& t : outs) f(t);
    for (const Tensor* t : {&x0, &lnf, &lnf_mean, &lnf_rstd, &dres_a, &dres_b, &dln, &datty, &dlnf, &dqkv, &dfch, &dfcg})
      f(*t);
  }
};

Param gpt_param(const std::string& name, std::vector<int64_t> shape, Rng& rng, float v, bool normal, bool in_out) {
  in_out = in_out && shape.size() == 2;
  const std::vector<int64_t> stored = in_out ? std::vector<int64_t>{shape[1], shape[0]} : shape;
  Param p{name, Tensor::home(stored, name), Tensor::lazy(stored, name + ".grad"), in_out};
  if (kSimulated) return p;  // no value is real in simulation (docs/simulation.md): no draws
  float* d = p.value.data();
  const size_t R = (size_t)shape[0], C = in_out ? (size_t)shape[1] : 1;
  for (size_t i = 0; i < p.value.numel(); ++i)  // logical element (r, c) = i in (out, in) order
    d[in_out ? (i % C) * R + i / C : i] = normal ? (float)(v * rng.normal()) : v;
  return p;
}

GptBody::GptBody(const GptConfig& c, Rng& rng) : cfg_(c) {
  const int64_t C = c.n_embd, I = c.inner();
  const float std = 0.02f, proj_std = 0.02f / std::sqrt(2.0f * (float)c.n_layer);
  const bool t = c.weights_in_out;
  params_.reserve(2 + 12 * (size_t)c.n_layer + 2);
  params_.push_back(gpt_param("wte", {c.vocab, C}, rng, std, true));
  params_.push_back(gpt_param("wpe", {c.positions(), C}, rng, std, true));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    params_.push_back(gpt_param(h + "ln_1.weight", {C}, rng, 1.0f, false));
    params_.push_back(gpt_param(h + "ln_1.bias", {C}, rng, 0.0f, false));
    params_.push_back(gpt_param(h + "attn.c_attn.weight", {3 * C, C}, rng, std, true, t));
    params_.push_back(gpt_param(h + "attn.c_attn.bias", {3 * C}, rng, 0.0f, false));
    params_.push_back(gpt_param(h + "attn.c_proj.weight", {C, C}, rng, proj_std, true, t));
    params_.push_back(gpt_param(h + "attn.c_proj.bias", {C}, rng, 0.0f, false));
    params_.push_back(gpt_param(h + "ln_2.weight", {C}, rng, 1.0f, false));
    params_.push_back(gpt_param(h + "ln_2.bias", {C}, rng, 0.0f, false));
    params_.push_back(gpt_param(h + "mlp.c_fc.weight", {I, C}, rng, std, true, t));
    params_.push_back(gpt_param(h + "mlp.c_fc.bias", {I}, rng, 0.0f, false));
    params_.push_back(gpt_param(h + "mlp.c_proj.weight", {C, I}, rng, proj_std, true, t));
    params_.push_back(gpt_param(h + "mlp.c_proj.bias", {C}, rng, 0.0f, false));
  }
  params_.push_back(gpt_param("ln_f.weight", {C}, rng, 1.0f, false));
  params_.push_back(gpt_param("ln_f.bias", {C}, rng, 0.0f, false));
}

GptBody::~GptBody() = default;

size_t GptBody::numel() const {
  size_t n = 0;
  for (auto& p : params_) n += p.value.numel();
  return n;
}

GptBody::Acts& GptBody::acts_for(int B, int T, bool bf16_acts, bool bf16_grads) {
  for (auto& a : acts_)
    if (a->B == B && a->T == T) return *a;
  auto a = std::make_unique<Acts>();
  a->B = B;
  a->T = T;
  const int64_t N = (int64_t)B * T, C = cfg_.n_embd, I = cfg_.inner();
  const std::string tag = ".b" + std::to_string(B) + "t" + std::to_string(T);
  auto t = [&](const std::string& name, std::vector<int64_t> shape) { return Tensor::lazy(shape, name + tag); };
  // the residual stream and the matmuls' outputs: bf16 under Runtime::activations_bf16
  auto act = [&](const std::string& name, std::vector<int64_t> shape) {
    return bf16_acts ? Tensor::lazy_half(shape, name + tag, Half::Bf16) : t(name, shape);
  };
  a->x0 = act("x0", {N, C});
  a->every = cfg_.checkpoint_every;
  a->n_layer = cfg_.n_layer;
  const int slots = a->every ? std::min(a->every, cfg_.n_layer) : cfg_.n_layer;
  for (int l = 0; l < slots; ++l) {
    const std::string h = (a->every ? "ckpt" : "h") + std::to_string(l) + ".";
    Acts::Layer L;
    L.ln1 = t(h + "ln1", {N, C});
    L.ln1_mean = t(h + "ln1.mean", {N});
    L.ln1_rstd = t(h + "ln1.rstd", {N});
    L.qkv = act(h + "qkv", {N, 3 * C});
    L.atty = t(h + "atty", {N, C});
    L.lse = t(h + "lse", {B, cfg_.n_head, T});
    L.res1 = act(h + "res1", {N, C});
    L.ln2 = t(h + "ln2", {N, C});
    L.ln2_mean = t(h + "ln2.mean", {N});
    L.ln2_rstd = t(h + "ln2.rstd", {N});
    L.fch = act(h + "fch", {N, I});
    L.fcg = t(h + "fcg", {N, I});
    L.res2 = act(h + "res2", {N, C});
    auto half = [&](const std::string& name, std::vector<int64_t> shape) {
      return Tensor::lazy(shape, name + tag + ".bf16", 2);
    };
    auto stored = [&](const std::string& name, std::vector<int64_t> shape) {
      return Tensor::lazy_half(shape, name + tag + ".bf16", Half::Bf16);
    };
    L.ln1_h = stored(h + "ln1", {N, C});
    L.atty_h = stored(h + "atty", {N, C});
    L.ln2_h = stored(h + "ln2", {N, C});
    L.fcg_h = stored(h + "fcg", {N, I});
    L.dqkv_h = half(h + "dqkv", {N, 3 * C});
    L.dres1_h = half(h + "dres1", {N, C});
    L.dfch_h = half(h + "dfch", {N, I});
    L.dres2_h = half(h + "dres2", {N, C});
    a->layers.push_back(std::move(L));
  }
  if (a->every)
    for (int l = 0; l < cfg_.n_layer; ++l)
      a->outs.push_back(a->segment_end(l) ? act("h" + std::to_string(l) + ".res2", {N, C}) : Tensor());
  a->lnf = t("lnf", {N, C});
  a->lnf_mean = t("lnf.mean", {N});
  a->lnf_rstd = t("lnf.rstd", {N});
  // the activation gradients between the layers: bf16 under Runtime::activation_grads_bf16 (the
  // head's output gradient dlnf stays fp32, as the final LayerNorm's output)
  auto grad = [&](const std::string& name, std::vector<int64_t> shape) {
    return bf16_grads ? Tensor::lazy_half(shape, name + tag, Half::Bf16) : t(name, shape);
  };
  a->dres_a = grad("dres_a", {N, C});
  a->dres_b = grad("dres_b", {N, C});
  a->dln = grad("dln", {N, C});
  a->datty = grad("datty", {N, C});
  a->dlnf = t("dlnf", {N, C});
  a->dqkv = grad("dqkv", {N, 3 * C});
  a->dfch = grad("dfch", {N, I});
  a->dfcg = grad("dfcg", {N, I});
  acts_.push_back(std::move(a));
  return *acts_.back();
}

int64_t GptBody::activation_bytes() const {
  int64_t n = 0;
  for (const auto& a : acts_) a->each([&](const Tensor& t) { n += allocated_bytes(t); });
  return n;
}

const Tensor& GptBody::out(const Acts& a) { return a.lnf; }
const Tensor& GptBody::d_out(const Acts& a) { return a.dlnf; }

std::vector<std::vector<Param*>> GptBody::groups() {
  std::vector<std::vector<Param*>> g{{&p(0), &p(1)}};
  for (int l = 0; l < cfg_.n_layer; ++l) {
    g.emplace_back();
    for (int k = 0; k < 12; ++k) g.back().push_back(&blk(l, k));
  }
  g.push_back({&p(params_.size() - 2), &p(params_.size() - 1)});
  return g;
}

void GptBody::forward(const SubmitOptions& o, Acts& a, const Tensor& tokens, const Conditioning* cond,
                      LayerHook* hook) {
  if (hook) hook->before_forward(o.step, 0);
  insert_embedding_fwd(o.named("fwd.embedding"), tokens, p(0).value, p(1).value, a.x0);
  if (cond) insert_class_embedding_fwd(o.named("fwd.class_embedding"), a.x0, *cond->table, *cond->ids);
  if (hook) hook->after_forward(o.step, 0);
  const Tensor* r = &a.x0;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    if (hook) hook->before_forward(o.step, l + 1);
    block_forward(o, a, l, *r, "fwd.h" + std::to_string(l) + ".", true);
    r = &a.out(l);
    if (hook) hook->after_forward(o.step, l + 1);
  }
  const size_t F = params_.size() - 2;
  if (hook) hook->before_forward(o.step, cfg_.n_layer + 1);
  insert_layernorm_fwd(o.named("fwd.ln_f"), *r, p(F).value, p(F + 1).value, a.lnf, a.lnf_mean, a.lnf_rstd, cfg_.ln_eps);
}

void GptBody::block_forward(const SubmitOptions& o, Acts& a, int l, const Tensor& r, const std::string& n,
                            bool whole_block) {
  const bool keep = matmul_keeps_bf16_operands(o, (int64_t)a.B * a.T);
  const bool h16 = o.rt && o.rt->matmul_inputs_bf16();
  Acts::Layer& L = a.at(l);
  auto v = [&](int k) -> const Tensor& { return blk(l, k).value; };
  auto io = [&](int k) { return blk(l, k).in_out; };
  // a linear layer's input: its bf16 tensor (h16), which the matmul reads as it is, or fp32 (and
  // its bf16 copy written by the matmul where operands are kept)
  auto in = [&](const Tensor& x, const Tensor& xh) -> const Tensor& { return h16 ? xh : x; };
  // (the forward's kept path writes an fp32 y: not with bf16 activations, where every linear
  // layer's output is one)
  const bool keep_fwd = keep && !h16 && !L.qkv.stored_half();
  // a linear layer, y = x w^T + b: the bias added in the product's task (one rounding of a bf16 y,
  // as PyTorch's addmm), or by a task of its own after the kept path's fp32 y
  auto linear = [&](const std::string& name, const Tensor& x, int k, const Tensor& y, const Tensor& xh) {
    if (keep_fwd) {
      insert_matmul_fwd_kept(o.named(n + name), x, v(k), y, xh, io(k));
      insert_bias_add(o.named(n + name + ".bias"), y, v(k + 1));
    } else {
      insert_matmul_bias_fwd(o.named(n + name), in(x, xh), v(k), v(k + 1), y, io(k));
    }
  };
  insert_layernorm_fwd(o.named(n + "ln_1"), r, v(kLn1W), v(kLn1B), in(L.ln1, L.ln1_h), L.ln1_mean, L.ln1_rstd,
                       cfg_.ln_eps);
  linear("c_attn", L.ln1, kAttnW, L.qkv, L.ln1_h);
  insert_attention_fwd(o.named(n + "attention"), L.qkv, in(L.atty, L.atty_h), L.lse, nullptr);
  linear("attn.c_proj", L.atty, kAttnProjW, L.res1, L.atty_h);
  insert_accumulate(o.named(n + "residual_1"), L.res1, whole(L.res1), r, whole(r), 1.0f);
  insert_layernorm_fwd(o.named(n + "ln_2"), L.res1, v(kLn2W), v(kLn2B), in(L.ln2, L.ln2_h), L.ln2_mean, L.ln2_rstd,
                       cfg_.ln_eps);
  linear("c_fc", L.ln2, kFcW, L.fch, L.ln2_h);
  insert_act_fwd(o.named(n + "gelu"), Activation::Gelu, L.fch, in(L.fcg, L.fcg_h));
  // (the kept path's c_proj also writes fcg's bf16 copy, which the backward reads)
  if (!whole_block && !keep_fwd) return;
  const Tensor& res2 = a.out(l);
  linear("mlp.c_proj", L.fcg, kMlpProjW, res2, L.fcg_h);
  insert_accumulate(o.named(n + "residual_2"), res2, whole(res2), L.res1, whole(L.res1), 1.0f);
}

void GptBody::backward(const SubmitOptions& o, Acts& a, const Tensor& tokens, const Tensor& d_out,
                       const Conditioning* cond, LayerHook* hook) {
  const size_t F = params_.size() - 2;
  const int Lc = cfg_.n_layer;
  const Tensor& last = Lc ? a.out(Lc - 1) : a.x0;
  // dA: gradient of the residual stream at the current layer's output
  Tensor* dA = &a.dres_a;
  Tensor* dB = &a.dres_b;
  const bool keep = matmul_keeps_bf16_operands(o, (int64_t)a.B * a.T);
  const bool h16 = o.rt && o.rt->matmul_inputs_bf16();  // the linear layers' inputs in bf16 (forward)
  insert_layernorm_bwd(o.named("bwd.ln_f"), d_out, last, a.lnf_mean, a.lnf_rstd, p(F).value, *dA, p(F).grad,
                       p(F + 1).grad);
  if (hook) hook->after_backward(o.step, Lc + 1);
  for (int l = Lc - 1; l >= 0; --l) {
    if (hook) hook->before_backward(o.step, l + 1);
    if (a.segment_end(l))  // activation checkpointing: the segment's forward again, from its input
      for (int j = l - l % a.every; j <= l; ++j)
        block_forward(o, a, j, j ? a.out(j - 1) : a.x0, "recompute.h" + std::to_string(j) + ".", j < l);
    Acts::Layer& L = a.at(l);
    const Tensor& in = l ? a.out(l - 1) : a.x0;
    const std::string n = "bwd.h" + std::to_string(l) + ".";
    auto P = [&](int k) -> Param& { return blk(l, k); };
    // a linear layer's weight, bias and data gradients; with kept bf16 operands the data gradient
    // first (it writes dy's bf16 copy dyh), then the weight gradient on the copies
    // (the kept products need xh: the stored input, or the copy the forward's kept path wrote)
    // (not with bf16 output gradients: the products read them as stored, as the inputs)
    const bool kept = keep && (h16 || !L.qkv.stored_half()) && !a.dres_a.stored_half();
    auto linear = [&](const std::string& name, int kw, const Tensor& dy, const Tensor& x, const Tensor& dx,
                      const Tensor& xh, const Tensor& dyh) {
      Param& W = P(kw);
      const Tensor& xin = h16 ? xh : x;
      if (kept) {
        insert_matmul_bwd_data_kept(o.named(n + name + ".dx"), dy, W.value, dx, dyh, W.in_out);
        insert_matmul_bwd_weight_kept(o.named(n + name + ".dw"), dyh, xh, dy, xin, W.grad, W.in_out);
        insert_bias_grad(o.named(n + name + ".db"), dy, P(kw + 1).grad);
        return;
      }
      insert_matmul_bwd_weight(o.named(n + name + ".dw"), dy, xin, W.grad, W.in_out);
      insert_bias_grad(o.named(n + name + ".db"), dy, P(kw + 1).grad);
      insert_matmul_bwd_data(o.named(n + name + ".dx"), dy, W.value, dx, W.in_out);
    };
    // MLP: r2 = r1 + gelu(LN(r1) Wfc^T + bfc) Wp^T + bp
    linear("mlp.c_proj", kMlpProjW, *dA, L.fcg, a.dfcg, L.fcg_h, L.dres2_h);
    insert_act_bwd(o.named(n + "gelu"), Activation::Gelu, L.fch, a.dfcg, a.dfch);
    linear("c_fc", kFcW, a.dfch, L.ln2, a.dln, L.ln2_h, L.dfch_h);
    insert_layernorm_bwd(o.named(n + "ln_2"), a.dln, L.res1, L.ln2_mean, L.ln2_rstd, P(kLn2W).value, *dB,
                         P(kLn2W).grad, P(kLn2B).grad);
    insert_accumulate(o.named(n + "residual_2"), *dB, whole(*dB), *dA, whole(*dA), 1.0f);
    // attention: r1 = r + attn(LN(r) Wqkv^T + bqkv) Wo^T + bo
    linear("attn.c_proj", kAttnProjW, *dB, L.atty, a.datty, L.atty_h, L.dres1_h);
    insert_attention_bwd(o.named(n + "attention"), a.datty, L.qkv, L.lse, a.dqkv, nullptr);
    linear("c_attn", kAttnW, a.dqkv, L.ln1, a.dln, L.ln1_h, L.dqkv_h);
    insert_layernorm_bwd(o.named(n + "ln_1"), a.dln, in, L.ln1_mean, L.ln1_rstd, P(kLn1W).value, *dA,
                         P(kLn1W).grad, P(kLn1B).grad);
    insert_accumulate(o.named(n + "residual_1"), *dA, whole(*dA), *dB, whole(*dB), 1.0f);
    if (hook) hook->after_backward(o.step, l + 1);
  }
  if (hook) hook->before_backward(o.step, 0);
  insert_embedding_bwd(o.named("bwd.embedding"), tokens, *dA, p(0).grad, p(1).grad);
  if (cond) insert_class_embedding_bwd(o.named("bwd.class_embedding"), *dA, *cond->ids, *cond->grad);
  if (hook) hook->after_backward(o.step, 0);
}

std::string describe_gpt(const GptConfig& c, size_t parameters) {
  char b[160];
  std::snprintf(b, sizeof b, "GPT %dx%d, %d heads, context %d, vocab %d, %zu parameters", c.n_layer, c.n_embd,
                c.n_head, c.context, c.vocab, parameters);
  return b;
}

// ------------------------------------------------------------------ language model

LmBuffers::LmBuffers(int b, int64_t T, int64_t V) : B(b) {
  const int64_t N = (int64_t)B * T;
  const std::string tag = ".b" + std::to_string(B);
  for (int s = 0; s < 2; ++s) {
    tokens[s] = Tensor::lazy({B, T}, "tokens" + tag + "." + std::to_string(s), sizeof(int32_t));
    targets[s] = Tensor::lazy({N}, "targets" + tag + "." + std::to_string(s), sizeof(int32_t));
  }
  logits = Tensor::lazy({N, V}, "logits" + tag);
  probs = Tensor::lazy({N, V}, "probs" + tag);
  dlogits = Tensor::lazy({N, V}, "dlogits" + tag);
}

struct GptLanguageModel::Head : LmBuffers {
  using LmBuffers::LmBuffers;
};

GptLanguageModel::GptLanguageModel(const GptConfig& cfg, TextSplit data, StepStatus* status)
    : cfg_(cfg), data_(std::move(data)), status_(status), rng_(cfg.init_seed) {
  train_src_ = {data_.train.data(), (int64_t)data_.train.size()};
  val_src_ = {data_.val.data(), (int64_t)data_.val.size()};
  data_description_ = data_.description;
  init();
}

GptLanguageModel::GptLanguageModel(const GptConfig& cfg, TokenSplit data, StepStatus* status)
    : cfg_(cfg), tokens_(std::move(data)), token_data_(true), status_(status), rng_(cfg.init_seed) {
  train_src_ = {tokens_.train.bytes(), tokens_.train.size(), tokens_.train.width};
  val_src_ = {tokens_.val.bytes(), tokens_.val.size(), tokens_.val.width};
  data_description_ = tokens_.description;
  init();
}

GptLanguageModel::GptLanguageModel(const GptConfig& cfg, LmRowSplit rows, StepStatus* status)
    : cfg_(cfg), rows_(std::move(rows)), row_data_(true), status_(status), rng_(cfg.init_seed) {
  for (const LmRows* r : {&rows_.train, &rows_.eval})
    if (r->T != cfg_.context || r->tokens.size() != (size_t)(r->rows * r->T) || r->targets.size() != r->tokens.size())
      throw Error("GptLanguageModel: rows of T " + std::to_string(r->T) + " (" + std::to_string(r->rows) +
                  " rows) do not match the context " + std::to_string(cfg_.context) + " or their own sizes");
  train_rows_ = {rows_.train.tokens.data(), rows_.train.targets.data(), rows_.train.rows, (int32_t)rows_.train.T};
  eval_rows_ = {rows_.eval.tokens.data(), rows_.eval.targets.data(), rows_.eval.rows, (int32_t)rows_.eval.T};
  data_description_ = rows_.train.description;
  init();
}

void GptLanguageModel::init() {
  body_ = std::make_unique<GptBody>(cfg_, rng_);
  if (cfg_.tied_head)
    head_dw_ = Tensor::lazy({cfg_.vocab, cfg_.n_embd}, "lm_head.tied.grad");
  else
    lm_head_ = gpt_param("lm_head.weight", {cfg_.vocab, cfg_.n_embd}, rng_, 0.02f, true);
}

GptLanguageModel::~GptLanguageModel() = default;

std::string GptLanguageModel::describe() const {
  const size_t n = body_->numel() + (cfg_.tied_head ? 0 : lm_head_.value.numel());
  return describe_gpt(cfg_, n) + (cfg_.tied_head ? " (LM head tied to wte); " : " (LM head untied); ") +
         data_description_;
}

std::vector<Param*> GptLanguageModel::params() {
  std::vector<Param*> out;
  for (auto& p : body_->params()) out.push_back(&p);
  if (!cfg_.tied_head) out.push_back(&lm_head_);
  return out;
}

int64_t GptLanguageModel::activation_bytes() const {
  int64_t n = body_->activation_bytes();
  for (const auto& h : heads_)
    for (const Tensor* t : {&h->logits, &h->probs, &h->dlogits}) n += allocated_bytes(*t);
  return n;
}

std::vector<std::vector<Param*>> GptLanguageModel::layer_groups() {
  if (cfg_.tied_head) return {};
  std::vector<std::vector<Param*>> g = body_->groups();
  g.back().push_back(&lm_head_);
  return g;
}

int64_t GptLanguageModel::epoch_size() const {
  return row_data_ ? rows_.train.rows : (train_src_.size - 1) / cfg_.context;
}

GptLanguageModel::Head& GptLanguageModel::head_for(int B) {
  for (auto& h : heads_)
    if (h->B == B) return *h;
  heads_.push_back(std::make_unique<Head>(B, cfg_.context, cfg_.vocab));
  return *heads_.back();
}

const Tensor& GptLanguageModel::head_weight() {
  return cfg_.tied_head ? body_->params()[0].value : lm_head_.value;
}

// One batch: forward, loss (stats), and with `backward` the gradients of every parameter. The
// loss gradient is scaled by 1 / scored (the mean over the targets that carry a loss). A tied
// head's weight gradient goes to head_dw_ and is added to wte's after the embedding's backward
// (which overwrites it): wte.grad = embedding part + head part, in that order.
void GptLanguageModel::run_batch(const SubmitOptions& o, int slot, int B, const Loader& load, double scored,
                                 const Tensor& stats, bool accumulate, bool backward) {
  const int T = cfg_.context;
  Head& h = head_for(B);
  GptBody::Acts& a = body_->acts_for(B, T, o.rt && o.rt->activations_bf16(),
                                            o.rt && o.rt->activation_grads_bf16());
  const std::string pre = backward ? "" : "eval.";
  load(o, pre, h, slot);
  LayerHook* hook = backward ? hook_ : nullptr;  // evaluation: the weights are whole
  const int last = cfg_.n_layer + 1;                // {ln_f, lm_head}
  body_->forward(o, a, h.tokens[slot], nullptr, hook);
  const Tensor& x = GptBody::out(a);
  insert_matmul_fwd(o.named(pre + "fwd.lm_head"), x, head_weight(), h.logits);
  if (hook) hook->after_forward(o.step, last);
  if (!backward) {
    insert_softmax_xent_fwd(o.named(pre + "fwd.loss"), h.logits, h.targets[slot], h.probs, stats, accumulate,
                            status_, row_data_);
    return;
  }
  // the loss and its gradient in one pass over the logits
  const float scale = scored > 0 ? loss_scale_ / (float)scored : 0.0f;  // a batch without targets: no gradient
  insert_softmax_xent_fwd_bwd(o.named("fwd_bwd.loss"), h.logits, h.targets[slot], h.dlogits, stats, scale,
                              accumulate, status_, row_data_);
  if (hook) hook->before_backward(o.step, last);
  insert_matmul_bwd_weight(o.named("bwd.lm_head.dw"), h.dlogits, x, cfg_.tied_head ? head_dw_ : lm_head_.grad);
  insert_matmul_bwd_data(o.named("bwd.lm_head.dx"), h.dlogits, head_weight(), GptBody::d_out(a));
  body_->backward(o, a, h.tokens[slot], GptBody::d_out(a), nullptr, hook);
  if (cfg_.tied_head) {
    const Tensor& dwte = body_->params()[0].grad;
    insert_accumulate(o.named("bwd.lm_head.tied"), dwte, whole(dwte), head_dw_, whole(head_dw_), 1.0f);
  }
}

int64_t GptLanguageModel::row_targets(const LmRows& r, const std::vector<int32_t>& rows) const {
  int64_t n = 0;
  for (int32_t i : rows)
    if (i >= 0 && i < r.rows)
      for (int64_t t = 0; t < r.T; ++t) n += r.targets[(size_t)(i * r.T + t)] >= 0;
  return n;
}

void GptLanguageModel::submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices,
                                   const Tensor& stats) {
  const int B = (int)indices.size();
  const int slot = (int)(submitted_++ & 1);
  if (row_data_) {
    auto load = [&](const SubmitOptions& o, const std::string& pre, Head& h, int s) {
      insert_load_rows(o.named(pre + "load_rows"), &train_rows_, indices, h.tokens[s], h.targets[s], status_);
    };
    run_batch(rt.device(step), slot, B, load, (double)row_targets(rows_.train, indices), stats, false, true);
    return;
  }
  std::vector<int64_t> starts(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) starts[i] = (int64_t)indices[i] * cfg_.context;
  auto load = [&](const SubmitOptions& o, const std::string& pre, Head& h, int s) {
    insert_load_windows(o.named(pre + "load_windows"), &train_src_, starts, h.tokens[s], h.targets[s], status_);
  };
  run_batch(rt.device(step), slot, B, load, (double)B * cfg_.context, stats, false, true);
}

std::vector<int64_t> GptLanguageModel::eval_starts() const {
  const int64_t T = cfg_.context;
  std::vector<int64_t> s;
  if (row_data_) {  // row indices: the first eval_limit rows
    const int64_t n = rows_.eval.rows, m = cfg_.eval_limit > 0 ? std::min(cfg_.eval_limit, n) : n;
    for (int64_t i = 0; i < m; ++i) s.push_back(i);
    return s;
  }
  const int64_t n = (val_src_.size - 1) / T;
  if (token_data_) {  // the first eval_limit windows (docs/gpt.md, "Token files")
    const int64_t m = cfg_.eval_limit > 0 ? std::min(cfg_.eval_limit, n) : n;
    for (int64_t i = 0; i < m; ++i) s.push_back(i * T);
  } else if (cfg_.eval_limit > 0 && cfg_.eval_limit < n) {
    for (int64_t i = 0; i < cfg_.eval_limit; ++i) s.push_back(i * n / cfg_.eval_limit * T);
  } else {
    for (int64_t i = 0; i < n; ++i) s.push_back(i * T);
  }
  return s;
}

EvalResult GptLanguageModel::evaluate(Runtime& rt) {
  Tensor stats = Tensor::home({3}, "eval.stats", sizeof(double));
  SubmitOptions o = rt.device(-1);
  insert_zero(o.named("eval.zero"), stats);
  const std::vector<int64_t> all = eval_starts();
  for (size_t i = 0; i < all.size(); i += (size_t)cfg_.eval_batch_size) {
    const size_t e = std::min(all.size(), i + (size_t)cfg_.eval_batch_size);
    std::vector<int64_t> starts(all.begin() + (int64_t)i, all.begin() + (int64_t)e);
    std::vector<int32_t> rows(starts.begin(), starts.end());
    auto load = [&](const SubmitOptions& so, const std::string& pre, Head& h, int s) {
      if (row_data_)
        insert_load_rows(so.named(pre + "load_rows"), &eval_rows_, rows, h.tokens[s], h.targets[s], status_);
      else
        insert_load_windows(so.named(pre + "load_windows"), &val_src_, starts, h.tokens[s], h.targets[s], status_);
    };
    run_batch(o, 0, (int)starts.size(), load, 0.0, stats, true, false);
  }
  rt.wait_all();
  stats.acquire_read();
  const double* s = stats.as<double>();
  EvalResult r{s[0] / s[2], s[1] / s[2], (int64_t)s[2]};
  stats.release();
  return r;
}

}  // namespace zf
