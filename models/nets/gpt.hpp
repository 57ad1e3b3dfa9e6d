// A GPT-2-style decoder on tokens (bytes: vocabulary 256; token files: model.vocab): token + position embeddings, n_layer
// pre-LayerNorm blocks (causal multi-head self-attention, then a 4x GELU MLP, each added to the
// residual stream), a final LayerNorm and an LM head (lm_head.weight (vocab, C), no bias), or the
// head tied to wte (GptConfig::tied_head, GPT-2's; models/hf/gpt2_hf.hpp).
// Parameter names and shapes follow GPT-2 (wte, wpe, h.{i}.ln_1.weight, h.{i}.attn.c_attn.weight,
// ...), with 2-D weights (out_features, in_features) like the MLP's (the blocks' four Linear weights
// stored transposed under GptConfig::weights_in_out, Param::in_out). Initialisation as
// GPT-2: weights normal(0, 0.02), the two residual projections per block 0.02 / sqrt(2 n_layer),
// biases 0, LayerNorm gains 1. docs/gpt.md; the naive reference is tests/reference/gpt_ref.hpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codelets/codelets.hpp"
#include "models/data/lm_rows.hpp"
#include "models/rng.hpp"
#include "models/data/text.hpp"
#include "models/data/tokens.hpp"
#include "models/workload.hpp"

namespace zf {

struct GptConfig {
  int n_layer = 4, n_head = 4, n_embd = 128, context = 128;
  int vocab = 256;
  uint64_t init_seed = 1;
  int batch_size = 16;
  int eval_batch_size = 16;
  int64_t eval_limit = 0;  // evaluation windows / examples (0: all; else evenly spaced)
  // Store the blocks' Linear weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) transposed,
  // (in, out) (Param::in_out): a column is contiguous for ZenFlow's selective step
  // (docs/zenflow.md). The same initial values and logical weights; wte, wpe and the heads keep
  // (rows, C) (the embeddings read rows). make_workload sets it from model.weight_layout.
  bool weights_in_out = false;
  // A Hugging Face GPT-2 (models/hf/gpt2_hf.hpp; the defaults keep the byte GPT as it was):
  int n_positions = 0;   // rows of wpe (0: context); positions 0 .. context - 1 are used
  int n_inner = 0;       // the MLP's width (0: 4 n_embd)
  float ln_eps = 1e-5f;  // every LayerNorm's eps
  bool tied_head = false;  // the LM head is wte: no lm_head.weight (its gradient added to wte's)
  bool hf_random_init = false;  // model.init "random": Hugging Face's init from init_seed, no weights read
  // train.activation_checkpointing: 0, or a checkpoint every N layers (GptBody's forward keeps the
  // residual stream after each segment of N layers; its backward recomputes a segment's forward)
  int checkpoint_every = 0;
  int positions() const { return n_positions > 0 ? n_positions : context; }
  int inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
};

// The transformer without its head: parameters and one batch's forward (to the final
// LayerNorm's output) and backward (from the gradient of that output).
class GptBody {
 public:
  // Parameters in GPT-2 order, initialised from rng: wte, wpe, h.0.*, ..., ln_f.*
  GptBody(const GptConfig& cfg, Rng& rng);
  ~GptBody();
  struct Acts;  // activations and gradient buffers of one (B, T)
  // ... made on first use: with bf16_acts (Runtime::activations_bf16) the residual stream and the
  // matmuls' outputs are 2-byte bf16 tensors (Tensor::store_half)
  // bf16_acts, bf16_grads: Runtime::activations_bf16, activation_grads_bf16
  Acts& acts_for(int B, int T, bool bf16_acts, bool bf16_grads);
  // Optional conditioning: row ids[b] of table (K, C) added to the embedding of every position of
  // sequence b (the generative classifier's class embedding); its gradient goes to grad.
  struct Conditioning {
    const Tensor* table;
    const Tensor* grad;
    const Tensor* ids;  // (B) int32
  };
  // tokens (B, T) int32 -> out(a) (B*T, C)
  // hook (ZeRO stage 3, Workload::layer_groups): the groups of groups(), in order; the body calls
  // every hook of its groups except after_forward and before_backward of the last one ({ln_f}),
  // which the caller calls around its head (whose parameters may join that group).
  void forward(const SubmitOptions& o, Acts& a, const Tensor& tokens, const Conditioning* cond = nullptr,
               LayerHook* hook = nullptr);
  // d_out (B*T, C) -> gradients of every body parameter (and of the conditioning table)
  void backward(const SubmitOptions& o, Acts& a, const Tensor& tokens, const Tensor& d_out,
                const Conditioning* cond = nullptr, LayerHook* hook = nullptr);
  // The layer groups in forward order: {wte, wpe}, each block's 12, {ln_f.weight, ln_f.bias}.
  // (The language model with a tied head has none: wte is read in its first and last groups.)
  std::vector<std::vector<Param*>> groups();
  static const Tensor& out(const Acts& a);     // final LayerNorm output (B*T, C)
  static const Tensor& d_out(const Acts& a);   // a buffer for its gradient (B*T, C)
  std::vector<Param>& params() { return params_; }
  const GptConfig& config() const { return cfg_; }
  size_t numel() const;
  // The bytes of its activation and gradient buffers StarPU has allocated (Workload::activation_bytes)
  int64_t activation_bytes() const;

 private:
  // Block l's forward from its input r, the tasks named n + ...; whole_block false stops after the GELU
  // (the recomputation of a segment's last block, whose output its backward does not read)
  void block_forward(const SubmitOptions& o, Acts& a, int l, const Tensor& r, const std::string& n, bool whole_block);
  Param& p(size_t i) { return params_[i]; }
  Param& blk(int l, int k) { return params_[2 + 12 * (size_t)l + k]; }
  GptConfig cfg_;
  std::vector<Param> params_;
  std::vector<std::unique_ptr<Acts>> acts_;
};

// Shared by the language model and the classifier: "GPT 4x128, 4 heads, context 128, N parameters"
std::string describe_gpt(const GptConfig& c, size_t parameters);
// A parameter tensor initialised normal(0, std) (2-D) or constant (1-D).
// in_out: a 2-D (out, in) shape stored (in, out), the values drawn in the logical (out, in) order.
Param gpt_param(const std::string& name, std::vector<int64_t> shape, Rng& rng, float std_or_value,
                bool normal, bool in_out = false);

// The next-byte head's buffers for one batch size B (the language model's and the generative
// classifier's): tokens (B, T) and targets (B*T) int32, double-buffered by step slot; logits,
// probs and dlogits (B*T, V).
struct LmBuffers {
  LmBuffers(int B, int64_t T, int64_t V);
  int B;
  Tensor tokens[2], targets[2];
  Tensor logits, probs, dlogits;
};

// Next-token prediction on a text (bytes) or on token files (ids below cfg.vocab): a sampling unit
// is window u, the tokens [uT, uT + T] (T = context: inputs the first T, targets the last T);
// epoch_size = floor((N - 1) / T) windows of the training tokens; the loss is per token (nats).
// On fixed rows (LmRowSplit, models/data/lm_rows.hpp) a unit is a row, and the loss is the mean over
// the batch's targets >= 0 (a target of -1 carries no loss).
class GptLanguageModel : public Workload {
 public:
  GptLanguageModel(const GptConfig& cfg, TextSplit data, StepStatus* status);
  GptLanguageModel(const GptConfig& cfg, TokenSplit data, StepStatus* status);
  GptLanguageModel(const GptConfig& cfg, LmRowSplit rows, StepStatus* status);
  ~GptLanguageModel() override;
  std::string describe() const override;
  std::vector<Param*> params() override;  // the body's, then lm_head.weight (untied only)
  int64_t epoch_size() const override;
  int batch_size() const override { return cfg_.batch_size; }
  void submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices,
                   const Tensor& stats) override;
  EvalResult evaluate(Runtime& rt) override;
  // The body's, lm_head with ln_f; none with a tied head (ZeRO stage 3 refuses the model: wte
  // would be read in the first and the last group).
  std::vector<std::vector<Param*>> layer_groups() override;
  int64_t activation_bytes() const override;  // the body's and the heads' logits, probs, dlogits
  bool ignorable_on_init(const std::string& name) const override {
    return cfg_.tied_head && name == "lm_head.weight";
  }
  // Start offsets of the evaluation windows: all of them (eval_limit 0), else eval_limit of them,
  // evenly spaced for text, the first ones for token files. (Rows: the first eval_limit rows.)
  std::vector<int64_t> eval_starts() const;
  const GptConfig& config() const { return cfg_; }

 private:
  struct Head;  // tokens and targets (double-buffered), logits, probs, dlogits of one batch size
  void init();  // the parameters, once the data is in place
  Head& head_for(int B);
  // loads the batch's tokens and targets into h's slot; `scored`: its targets that carry a loss
  using Loader = std::function<void(const SubmitOptions&, const std::string& name, Head& h, int slot)>;
  void run_batch(const SubmitOptions& o, int slot, int B, const Loader& load, double scored, const Tensor& stats,
                 bool accumulate, bool backward);
  const Tensor& head_weight();  // lm_head.weight, or wte when tied
  int64_t row_targets(const LmRows& r, const std::vector<int32_t>& rows) const;

  GptConfig cfg_;
  TextSplit data_;      // text datasets
  TokenSplit tokens_;   // data.dataset "tokens"
  LmRowSplit rows_;     // fixed rows (instructions)
  bool token_data_ = false, row_data_ = false;
  std::string data_description_;
  TextSource train_src_{}, val_src_{};
  RowTable train_rows_{}, eval_rows_{};
  StepStatus* status_;
  Rng rng_;
  std::unique_ptr<GptBody> body_;
  Param lm_head_;   // untied only
  Tensor head_dw_;  // tied: the head's part of wte's gradient (V, C), added after the embedding's
  std::vector<std::unique_ptr<Head>> heads_;
  int64_t submitted_ = 0;
};

}  // namespace zf
