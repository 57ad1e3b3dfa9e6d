// The Llama / Qwen2 model's parameters and step graph (models/nets/llama.hpp, docs/llama.md): the
// blocks' forward and backward on the codelets of codelets/llama.cpp and attention.cpp, the
// embedding and the head (tied: its weight gradient added to the embedding's after the
// embedding's scatter-add, one fixed order). The backward mirrors the forward; the residual
// gradient is carried in two buffers, as the GPT's (models/nets/gpt.cpp).
#include "models/nets/llama.hpp"
#include "models/nets/llama_parts.hpp"

#include <algorithm>

#include "runtime/error.hpp"
#include "runtime/simulation.hpp"

namespace zf {

Param* LlamaLanguageModel::param(const std::string& name) {
  for (Param& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

void LlamaLanguageModel::init() {
  const std::vector<hf::TensorSpec> specs = hf::expected_tensors(cfg_);
  params_.reserve(specs.size());
  for (const hf::TensorSpec& t : specs) {
    const bool linear = t.shape.size() == 2 && t.name.rfind("model.layers.", 0) == 0;
    const bool in_out = linear && opt_.weights_in_out;
    const std::vector<int64_t> stored = in_out ? std::vector<int64_t>{t.shape[1], t.shape[0]} : t.shape;
    params_.push_back(Param{t.name, Tensor::home(stored, t.name), Tensor::lazy(stored, t.name + ".grad"), in_out});
  }
  embed_ = param("model.embed_tokens.weight");
  norm_ = param("model.norm.weight");
  head_ = cfg_.tie_word_embeddings ? embed_ : param("lm_head.weight");
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer L;
    L.in_norm = param(p + "input_layernorm.weight");
    L.q = param(p + "self_attn.q_proj.weight");
    L.qb = param(p + "self_attn.q_proj.bias");
    L.k = param(p + "self_attn.k_proj.weight");
    L.kb = param(p + "self_attn.k_proj.bias");
    L.v = param(p + "self_attn.v_proj.weight");
    L.vb = param(p + "self_attn.v_proj.bias");
    L.o = param(p + "self_attn.o_proj.weight");
    L.ob = param(p + "self_attn.o_proj.bias");
    L.post_norm = param(p + "post_attention_layernorm.weight");
    L.gate = param(p + "mlp.gate_proj.weight");
    L.up = param(p + "mlp.up_proj.weight");
    L.down = param(p + "mlp.down_proj.weight");
    layers_.push_back(L);
  }
  if (!embed_ || !norm_ || !head_) throw Error("llama: " + cfg_.path + ": the tensor list lacks the embedding, norm or head");
  load();
  kernels::cpu::RopeParams rp;
  rp.theta = cfg_.rope_theta;
  rp.llama3 = cfg_.rope_scaling.llama3;
  if (rp.llama3) {
    rp.factor = cfg_.rope_scaling.factor;
    rp.low_freq_factor = cfg_.rope_scaling.low_freq_factor;
    rp.high_freq_factor = cfg_.rope_scaling.high_freq_factor;
    rp.original_max_position_embeddings = (double)cfg_.rope_scaling.original_max_position_embeddings;
  }
  rope_ = make_rope_table(rp, opt_.context, (int)cfg_.head_dim, "rope_table");
}

// The tensors straight into the parameters' buffers in the checkpoint's (out, in) layout; the
// weights stored (in, out) are transposed after.
void LlamaLanguageModel::load() {
  const hf::InitFrom from = opt_.random_init ? hf::InitFrom::random_init(opt_.init_seed) : hf::InitFrom::files();
  loaded_ = hf::load_weights(opt_.dir, cfg_, from, [&](const hf::TensorSpec& t) -> float* {
    Param* p = param(t.name);
    if (!p || p->value.numel() != t.numel()) throw Error("llama: no parameter for tensor " + t.name);
    return p->value.data();
  });
  // in simulation no value is real (docs/simulation.md): the transposes would copy every weight
  // (27 GB for Llama-2-7B) through a temporary vector, minutes of the simulation's wall time
  if (kSimulated) return;
  for (Param& p : params_)
    if (p.in_out) {
      const std::vector<float> logical(p.value.data(), p.value.data() + p.value.numel());
      transpose(logical.data(), p.rows(), p.cols(), p.value.data());
    }
}

std::vector<float> LlamaLanguageModel::hf_tensor(const hf::TensorSpec& t) {
  Param* p = param(t.name);
  if (!p || p->value.numel() != t.numel()) throw Error("llama: no parameter for tensor " + t.name);
  return logical_values(*p);  // nn.Linear's (out, in): the checkpoint's layout
}

std::vector<Param*> LlamaLanguageModel::params() {
  std::vector<Param*> out;
  for (Param& p : params_) out.push_back(&p);
  return out;
}

std::vector<std::vector<Param*>> LlamaLanguageModel::layer_groups() {
  if (cfg_.tie_word_embeddings) return {};
  std::vector<std::vector<Param*>> g{{embed_}};
  for (const Layer& L : layers_) g.push_back(L.all());
  g.push_back({norm_, head_});
  return g;
}

LlamaLanguageModel::Acts& LlamaLanguageModel::acts_for(int B, bool bf16_acts, bool bf16_grads) {
  for (auto& a : acts_)
    if (a->B == B) return *a;
  auto a = std::make_unique<Acts>();
  a->B = B;
  const int64_t T = opt_.context, N = (int64_t)B * T, C = cfg_.hidden_size, F = cfg_.intermediate_size;
  const int64_t Q = cfg_.num_heads * cfg_.head_dim, KV = cfg_.num_kv_heads * cfg_.head_dim, V = cfg_.vocab_size;
  const std::string tag = ".b" + std::to_string(B);
  auto t = [&](const std::string& name, std::vector<int64_t> shape) { return Tensor::lazy(shape, name + tag); };
  auto half = [&](const std::string& name, std::vector<int64_t> shape) {  // a bf16 matmul input (Acts::L)
    return Tensor::lazy_half(shape, name + tag + ".bf16", Half::Bf16);
  };
  // the residual stream and the matmuls' outputs: bf16 under Runtime::activations_bf16
  auto act = [&](const std::string& name, std::vector<int64_t> shape) {
    return bf16_acts ? Tensor::lazy_half(shape, name + tag, Half::Bf16) : t(name, shape);
  };
  for (int s = 0; s < 2; ++s) {
    a->tokens[s] = Tensor::lazy({B, T}, "tokens" + tag + "." + std::to_string(s), sizeof(int32_t));
    a->targets[s] = Tensor::lazy({N}, "targets" + tag + "." + std::to_string(s), sizeof(int32_t));
  }
  a->x0 = act("x0", {N, C});
  a->every = opt_.checkpoint_every;
  a->n_layer = (int)cfg_.num_layers;
  const int64_t slots = a->every ? std::min<int64_t>(a->every, cfg_.num_layers) : cfg_.num_layers;
  for (int64_t l = 0; l < slots; ++l) {
    const std::string h = (a->every ? "ckpt" : "l") + std::to_string(l) + ".";
    Acts::L L{t(h + "xn1", {N, C}), t(h + "rstd1", {N}), act(h + "q", {N, Q}), act(h + "k", {N, KV}),
              act(h + "v", {N, KV}), t(h + "atty", {N, Q}), t(h + "lse", {B, cfg_.num_heads, T}),
              act(h + "res1", {N, C}), t(h + "xn2", {N, C}), t(h + "rstd2", {N}), act(h + "gate", {N, F}),
              act(h + "up", {N, F}), t(h + "h", {N, F}), act(h + "res2", {N, C}),
              half(h + "xn1", {N, C}), half(h + "atty", {N, Q}), half(h + "xn2", {N, C}), half(h + "h", {N, F})};
    a->layers.push_back(std::move(L));
  }
  if (a->every)
    for (int l = 0; l < a->n_layer; ++l)
      a->outs.push_back(a->segment_end(l) ? act("l" + std::to_string(l) + ".res2", {N, C}) : Tensor());
  a->xf = t("xf", {N, C});
  a->xf_h = half("xf", {N, C});
  a->rstdf = t("rstdf", {N});
  a->logits = t("logits", {N, V});
  a->dlogits = t("dlogits", {N, V});
  if (cfg_.tie_word_embeddings) a->head_dw = t("head_dw", {V, C});
  // the activation gradients between the layers: bf16 under Runtime::activation_grads_bf16 (the
  // head's output gradient dxf stays fp32, as xf's fp32 copy)
  auto grad = [&](const std::string& name, std::vector<int64_t> shape) {
    return bf16_grads ? Tensor::lazy_half(shape, name + tag, Half::Bf16) : t(name, shape);
  };
  a->dres_a = grad("dres_a", {N, C}), a->dres_b = grad("dres_b", {N, C}), a->dxn = grad("dxn", {N, C});
  a->dxn_b = grad("dxn_b", {N, C}), a->dxf = t("dxf", {N, C});
  a->datty = grad("datty", {N, Q}), a->dq = grad("dq", {N, Q}), a->dk = grad("dk", {N, KV});
  a->dv = grad("dv", {N, KV}), a->dh = grad("dh", {N, F}), a->dgate = grad("dgate", {N, F});
  a->dup = grad("dup", {N, F});
  auto copy = [&](const std::string& name, std::vector<int64_t> shape) {
    return Tensor::lazy(shape, name + tag + ".bf16", 2);
  };
  a->dres_a_h = copy("dres_a", {N, C}), a->dres_b_h = copy("dres_b", {N, C});
  a->dq_h = copy("dq", {N, Q}), a->dk_h = copy("dk", {N, KV}), a->dv_h = copy("dv", {N, KV});
  a->dgate_h = copy("dgate", {N, F}), a->dup_h = copy("dup", {N, F}), a->dlogits_h = copy("dlogits", {N, V});
  acts_.push_back(std::move(a));
  return *acts_.back();
}

int64_t LlamaLanguageModel::activation_bytes() const {
  int64_t n = 0;
  for (const auto& a : acts_) a->each([&](const Tensor& t) { n += allocated_bytes(t); });
  return n;
}

const Tensor& LlamaLanguageModel::Acts::kept(const Tensor& dy) const {
  for (auto [g, h] : {std::pair{&dres_a, &dres_a_h}, {&dres_b, &dres_b_h}, {&dq, &dq_h}, {&dk, &dk_h},
                      {&dv, &dv_h}, {&dgate, &dgate_h}, {&dup, &dup_h}, {&dlogits, &dlogits_h}})
    if (g->handle() == dy.handle()) return *h;
  throw Error("llama: no bf16 copy for the gradient " + dy.name());
}

void LlamaLanguageModel::block_forward(const SubmitOptions& o, Acts& a, int l, const Tensor& in, const std::string& n,
                                       bool whole_block) {
  const Layer& P = layers_[(size_t)l];
  Acts::L& A = a.at(l);
  const int T = opt_.context, H = (int)cfg_.num_heads, Hkv = (int)cfg_.num_kv_heads;
  const float eps = (float)cfg_.norm_eps;
  auto linear = [&](const std::string& name, const Tensor& x, const Param* w, const Param* b, const Tensor& y) {
    if (b)  // the bias in the product's task: one rounding of a bf16 y (PyTorch's addmm)
      insert_matmul_bias_fwd(o.named(n + name), x, w->value, b->value, y, w->in_out);
    else
      insert_matmul_fwd(o.named(n + name), x, w->value, y, w->in_out);
  };
  // the linear layers' inputs, in bf16 where the matmuls multiply bf16 (acts_for)
  const bool h16 = o.rt && o.rt->matmul_inputs_bf16();
  const Tensor &xn1 = A.in(A.xn1, A.xn1_h, h16), &atty = A.in(A.atty, A.atty_h, h16);
  const Tensor &xn2 = A.in(A.xn2, A.xn2_h, h16), &hh = A.in(A.h, A.h_h, h16);
  insert_rmsnorm_fwd(o.named(n + "input_layernorm"), in, P.in_norm->value, xn1, A.rstd1, eps);
  linear("q_proj", xn1, P.q, P.qb, A.q);
  linear("k_proj", xn1, P.k, P.kb, A.k);
  linear("v_proj", xn1, P.v, P.vb, A.v);
  insert_rope_fwd(o.named(n + "rope_q"), A.q, rope_, T, H);
  insert_rope_fwd(o.named(n + "rope_k"), A.k, rope_, T, Hkv);
  insert_gqa_attention_fwd(o.named(n + "attention"), A.q, A.k, A.v, atty, A.lse, Hkv, status_);
  linear("o_proj", atty, P.o, P.ob, A.res1);
  insert_accumulate(o.named(n + "residual_1"), A.res1, whole(A.res1), in, whole(in), 1.0f);
  insert_rmsnorm_fwd(o.named(n + "post_attention_layernorm"), A.res1, P.post_norm->value, xn2, A.rstd2, eps);
  linear("gate_proj", xn2, P.gate, nullptr, A.gate);
  linear("up_proj", xn2, P.up, nullptr, A.up);
  insert_swiglu_fwd(o.named(n + "swiglu"), A.gate, A.up, hh);
  if (!whole_block) return;
  const Tensor& res2 = a.out(l);
  linear("down_proj", hh, P.down, nullptr, res2);
  insert_accumulate(o.named(n + "residual_2"), res2, whole(res2), A.res1, whole(A.res1), 1.0f);
}

// a.dres_a: the gradient of the block's output in, of its input out.
void LlamaLanguageModel::block_backward(const SubmitOptions& o, Acts& a, int l, const Tensor& in) {
  const Layer& P = layers_[(size_t)l];
  Acts::L& A = a.at(l);
  const std::string n = "bwd.l" + std::to_string(l) + ".";
  const int T = opt_.context, H = (int)cfg_.num_heads, Hkv = (int)cfg_.num_kv_heads;
  Tensor &dA = a.dres_a, &dB = a.dres_b;
  const bool h16 = o.rt && o.rt->matmul_inputs_bf16();  // as block_forward
  // (the kept products read the inputs' bf16 storage: h16; not with bf16 output gradients, which
  // the products read as stored)
  const bool kept = h16 && matmul_keeps_bf16_operands(o, (int64_t)a.B * T) && !dA.stored_half();
  // dx (written, or added to dx with `add` through a.dxn_b) and the weight's gradients of y = x W^T + b;
  // with kept bf16 operands the data gradient first (it writes dy's bf16 copy), then the weight
  // gradient on the copies
  auto linear_bwd = [&](const std::string& name, const Tensor& dy, const Tensor& x, const Param* w, const Param* b,
                        const Tensor& dx, bool add) {
    const Tensor& out = add ? a.dxn_b : dx;
    if (kept) {
      insert_matmul_bwd_data_kept(o.named(n + name + ".dx"), dy, w->value, out, a.kept(dy), w->in_out);
      insert_matmul_bwd_weight_kept(o.named(n + name + ".dw"), a.kept(dy), x, dy, x, w->grad, w->in_out);
    } else {
      insert_matmul_bwd_weight(o.named(n + name + ".dw"), dy, x, w->grad, w->in_out);
      insert_matmul_bwd_data(o.named(n + name + ".dx"), dy, w->value, out, w->in_out);
    }
    if (b) insert_bias_grad(o.named(n + name + ".db"), dy, b->grad);
    if (add) insert_accumulate(o.named(n + name + ".dx_add"), dx, whole(dx), a.dxn_b, whole(a.dxn_b), 1.0f);
  };
  const Tensor &xn1 = A.in(A.xn1, A.xn1_h, h16), &atty = A.in(A.atty, A.atty_h, h16);
  const Tensor &xn2 = A.in(A.xn2, A.xn2_h, h16), &hh = A.in(A.h, A.h_h, h16);
  // MLP: r2 = r1 + swiglu(xn2 Wg^T, xn2 Wu^T) Wd^T
  linear_bwd("down_proj", dA, hh, P.down, nullptr, a.dh, false);
  insert_swiglu_bwd(o.named(n + "swiglu"), A.gate, A.up, a.dh, a.dgate, a.dup);
  linear_bwd("gate_proj", a.dgate, xn2, P.gate, nullptr, a.dxn, false);
  linear_bwd("up_proj", a.dup, xn2, P.up, nullptr, a.dxn, true);
  insert_rmsnorm_bwd(o.named(n + "post_attention_layernorm"), a.dxn, A.res1, A.rstd2, P.post_norm->value, dB,
                     P.post_norm->grad);
  insert_accumulate(o.named(n + "residual_2"), dB, whole(dB), dA, whole(dA), 1.0f);
  // attention: r1 = r + attn(rope(xn1 Wq^T + bq), rope(xn1 Wk^T + bk), xn1 Wv^T + bv) Wo^T + bo
  linear_bwd("o_proj", dB, atty, P.o, P.ob, a.datty, false);
  insert_gqa_attention_bwd(o.named(n + "attention"), a.datty, A.q, A.k, A.v, A.lse, a.dq, a.dk, a.dv, Hkv, status_);
  insert_rope_bwd(o.named(n + "rope_q"), a.dq, rope_, T, H);
  insert_rope_bwd(o.named(n + "rope_k"), a.dk, rope_, T, Hkv);
  linear_bwd("q_proj", a.dq, xn1, P.q, P.qb, a.dxn, false);
  linear_bwd("k_proj", a.dk, xn1, P.k, P.kb, a.dxn, true);
  linear_bwd("v_proj", a.dv, xn1, P.v, P.vb, a.dxn, true);
  insert_rmsnorm_bwd(o.named(n + "input_layernorm"), a.dxn, in, A.rstd1, P.in_norm->value, dA, P.in_norm->grad);
  insert_accumulate(o.named(n + "residual_1"), dA, whole(dA), dB, whole(dB), 1.0f);
}

// tokens -> a.logits (chunk 0), or xf. Hooks (ZeRO stage 3): group 0 the embedding, l + 1 block l, L + 1 the final
// norm and the head.
void LlamaLanguageModel::forward(const SubmitOptions& o, Acts& a, const Tensor& tokens, LayerHook* hook, int chunk) {
  const int Lc = (int)cfg_.num_layers;
  if (hook) hook->before_forward(o.step, 0);
  insert_token_embedding_fwd(o.named("fwd.embed_tokens"), tokens, embed_->value, a.x0);
  if (hook) hook->after_forward(o.step, 0);
  const Tensor* r = &a.x0;
  for (int l = 0; l < Lc; ++l) {
    if (hook) hook->before_forward(o.step, l + 1);
    block_forward(o, a, l, *r, "fwd.l" + std::to_string(l) + ".", true);
    r = &a.out(l);
    if (hook) hook->after_forward(o.step, l + 1);
  }
  if (hook) hook->before_forward(o.step, Lc + 1);
  const Tensor& xf = o.rt && o.rt->matmul_inputs_bf16() ? a.xf_h : a.xf;  // as block_forward's inputs
  insert_rmsnorm_fwd(o.named("fwd.norm"), *r, norm_->value, xf, a.rstdf, (float)cfg_.norm_eps);
  if (!chunk) insert_matmul_fwd(o.named("fwd.lm_head"), xf, head_->value, a.logits);
  if (hook) hook->after_forward(o.step, Lc + 1);
}

int LlamaLanguageModel::head_chunk(const SubmitOptions& o, int64_t N) const {
  if (o.rt && o.rt->device_is_cuda()) return 0;  // (no CUDA implementation: the whole logits)
  return lm_head_chunk_cols(N, cfg_.vocab_size, opt_.logits_chunk_elems);
}

// a.dlogits (or the chunked head's loss) -> every parameter's gradient
void LlamaLanguageModel::backward(const SubmitOptions& o, Acts& a, const Tensor& tokens, LayerHook* hook,
                                  const HeadLoss& loss) {
  const int Lc = (int)cfg_.num_layers;
  const bool tied = cfg_.tie_word_embeddings;
  const Tensor& last = Lc ? a.out(Lc - 1) : a.x0;
  if (hook) hook->before_backward(o.step, Lc + 1);
  const bool h16 = o.rt && o.rt->matmul_inputs_bf16();
  const Tensor& xf = h16 ? a.xf_h : a.xf;
  const Tensor& head_dw = tied ? a.head_dw : head_->grad;
  if (loss.chunk) {  // the logits chunk by chunk, their loss and gradient, dxf and the head's gradient
    insert_lm_head_xent(o.named("fwd_bwd.lm_head_loss"), xf, head_->value, *loss.targets, &a.dxf, &head_dw,
                        *loss.stats, loss.chunk, loss.scale, false, status_, row_data_);
  } else if (h16 && matmul_keeps_bf16_operands(o, (int64_t)a.B * opt_.context)) {  // as block_backward's
    insert_matmul_bwd_data_kept(o.named("bwd.lm_head.dx"), a.dlogits, head_->value, a.dxf, a.dlogits_h);
    insert_matmul_bwd_weight_kept(o.named("bwd.lm_head.dw"), a.dlogits_h, xf, a.dlogits, xf, head_dw);
  } else {
    insert_matmul_bwd_weight(o.named("bwd.lm_head.dw"), a.dlogits, xf, head_dw);
    insert_matmul_bwd_data(o.named("bwd.lm_head.dx"), a.dlogits, head_->value, a.dxf);
  }
  insert_rmsnorm_bwd(o.named("bwd.norm"), a.dxf, last, a.rstdf, norm_->value, a.dres_a, norm_->grad);
  if (hook) hook->after_backward(o.step, Lc + 1);
  for (int l = Lc - 1; l >= 0; --l) {
    if (hook) hook->before_backward(o.step, l + 1);
    if (a.segment_end(l))  // activation checkpointing: the segment's forward again, from its input
      for (int j = l - l % a.every; j <= l; ++j)
        block_forward(o, a, j, j ? a.out(j - 1) : a.x0, "recompute.l" + std::to_string(j) + ".", j < l);
    block_backward(o, a, l, l ? a.out(l - 1) : a.x0);
    if (hook) hook->after_backward(o.step, l + 1);
  }
  if (hook) hook->before_backward(o.step, 0);
  insert_token_embedding_bwd(o.named("bwd.embed_tokens"), tokens, a.dres_a, embed_->grad);
  if (tied)  // the head's share, after the embedding's scatter-add: one order on every device
    insert_accumulate(o.named("bwd.lm_head.tied"), embed_->grad, whole(embed_->grad), a.head_dw, whole(a.head_dw),
                      1.0f);
  if (hook) hook->after_backward(o.step, 0);
}

}  // namespace zf
