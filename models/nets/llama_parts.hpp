// The Llama workload's inner structures (models/nets/llama.hpp), shared by models/nets/llama.cpp (the
// step graph) and models/nets/llama_lm.cpp (data and steps): one block's parameters, one batch
// size's activations and gradient buffers.
#pragma once
#include <vector>

#include "models/nets/llama.hpp"

namespace zf {

struct LlamaLanguageModel::Layer {
  Param *in_norm = nullptr, *q = nullptr, *qb = nullptr, *k = nullptr, *kb = nullptr, *v = nullptr, *vb = nullptr;
  Param *o = nullptr, *ob = nullptr, *post_norm = nullptr, *gate = nullptr, *up = nullptr, *down = nullptr;
  std::vector<Param*> all() const {
    std::vector<Param*> a;
    for (Param* p : {in_norm, q, qb, k, kb, v, vb, o, ob, post_norm, gate, up, down})
      if (p) a.push_back(p);
    return a;
  }
};

struct LlamaLanguageModel::Acts {
  int B;
  Tensor tokens[2], targets[2];  // (B, T), (B*T) int32, double-buffered by step slot
  Tensor x0;                     // (N, C) the embedding's output, N = B*T
  // x0 and each layer's q, k, v, res1, gate, up and res2 (the residual stream and the matmuls'
  // outputs): 2-byte bf16 tensors under Runtime::activations_bf16 (acts_for), written rounded,
  // read widened by the codelets (codelets/half_storage.cpp)
  struct L {
    Tensor xn1, rstd1;     // (N, C), (N) input_layernorm
    Tensor q, k, v;        // (N, H*hs), (N, Hkv*hs), (N, Hkv*hs), q and k rotated in place
    Tensor atty, lse;      // (N, H*hs), (B, H, T): the attention rows' log-sum-exp
    Tensor res1;           // (N, C) residual after attention
    Tensor xn2, rstd2;     // (N, C), (N) post_attention_layernorm
    Tensor gate, up, h;    // (N, F) each: h = silu(gate) * up
    Tensor res2;           // (N, C) residual after the MLP
    // Precision bf16 with bf16 matmuls (Runtime::matmul_inputs_bf16): the linear layers' inputs,
    // which only matmuls read, stored in bf16 (Tensor::store_half) instead of xn1, atty, xn2, h.
    // Lazy: the variant a run does not use is never allocated.
    Tensor xn1_h, atty_h, xn2_h, h_h;
    const Tensor& in(const Tensor& x, const Tensor& xh, bool h16) const { return h16 ? xh : x; }
  };
  // One L a block, or with activation checkpointing every N blocks (LlamaOptions::checkpoint_every)
  // min(N, layers) of them, block l's in layers[l % N], reused by every segment of N blocks: the
  // backward recomputes a segment's forward into them. Then a segment's last block writes its
  // output into outs[l] (kept for the backward), the others into their L's res2.
  std::vector<L> layers;
  int every = 0, n_layer = 0;
  std::vector<Tensor> outs;  // checkpointing: the segments' outputs (invalid for the other blocks)
  L& at(int l) { return layers[(size_t)(every ? l % every : l)]; }
  bool segment_end(int l) const { return every && (l % every == every - 1 || l == n_layer - 1); }
  const Tensor& out(int l) { return segment_end(l) ? outs[(size_t)l] : at(l).res2; }
  Tensor xf, rstdf;                 // (N, C), (N) the final norm
  Tensor xf_h;                      // xf in bf16, as the layers' inputs above (the head's input)
  Tensor logits, dlogits;           // (N, V) (not with the chunked head: LlamaLanguageModel::head_chunk)
  Tensor head_dw;                   // (V, C) tied head: its weight gradient, added to the embedding's
  Tensor dres_a, dres_b, dxn, dxn_b, dxf;  // (N, C)
  Tensor datty, dq, dk, dv;                // (N, H*hs), (N, H*hs), (N, Hkv*hs), (N, Hkv*hs)
  Tensor dh, dgate, dup;                   // (N, F)
  // Where the matmuls keep their bf16 operands (matmul_keeps_bf16_operands): the output gradients'
  // bf16 copies, written by a linear layer's data-gradient product and read by its weight-gradient
  // product (one conversion of dy instead of one per product). Plain 2-byte buffers, shared by the
  // layers as the gradients above; lazy, never allocated where unused.
  Tensor dres_a_h, dres_b_h, dq_h, dk_h, dv_h, dgate_h, dup_h, dlogits_h;
  // dy's copy, for dy one of the gradient buffers above
  const Tensor& kept(const Tensor& dy) const;
  template <class F>
  void each(F&& f) const {  // every activation and gradient buffer above (not the tokens)
    for (const L& A : layers)
      for (const Tensor* t : {&A.xn1, &A.rstd1, &A.q, &A.k, &A.v, &A.atty, &A.lse, &A.res1, &A.xn2, &A.rstd2, &A.gate,
                              &A.up, &A.h, &A.res2, &A.xn1_h, &A.atty_h, &A.xn2_h, &A.h_h})
        f(*t);
    for (const Tensor& t : outs) f(t);
    for (const Tensor* t : {&x0, &xf, &rstdf, &xf_h, &logits, &dlogits, &head_dw, &dres_a, &dres_b, &dxn,
                            &dxn_b, &dxf, &datty, &dq, &dk, &dv, &dh, &dgate, &dup, &dres_a_h, &dres_b_h, &dq_h, &dk_h,
                            &dv_h, &dgate_h, &dup_h, &dlogits_h})
      f(*t);
  }
};

}  // namespace zf
