// Hugging Face's LlamaForCausalLM and Qwen2ForCausalLM (modeling_llama.py, modeling_qwen2.py) as a
// training workload, from a model directory's config.json and weights (docs/llama.md, "The
// workload"). Per block, with r the residual stream (B*T, C):
//   x = rmsnorm(r); q, k, v = x Wq^T (+bq), x Wk^T (+bk), x Wv^T (+bv); rope(q), rope(k) in place;
//   r1 = r + gqa_attention(q, k, v) Wo^T (+bo); h = rmsnorm(r1);
//   r2 = r1 + swiglu(h Wgate^T, h Wup^T) Wdown^T
// then the final rmsnorm and the head: lm_head.weight, or embed_tokens (tie_word_embeddings). The
// token embedding has no positions. Parameters carry Hugging Face's names (hf::expected_tensors)
// and logical (out, in) weights; the block linears are stored (in, out) under weights_in_out.
// The loss is the mean cross-entropy per target token (targets -1 of fixed rows carry none). The
// naive reference is tests/reference/llama_ref.hpp (the whole model: tests/models/llama_model_ref.hpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "codelets/codelets.hpp"
#include "models/hf/config.hpp"
#include "models/hf/load.hpp"
#include "models/hf/hf_model.hpp"
#include "models/data/lm_rows.hpp"
#include "models/data/tokens.hpp"
#include "models/workload.hpp"

namespace zf {

struct LlamaOptions {
  std::string dir;  // the model directory: weights from it (an InputError when it has none)
  int context = 128;  // T, at most config.json's max_position_embeddings (checked by the caller)
  bool random_init = false;  // model.init "random": Hugging Face's init (hf::init_tensor), no weights read
  uint64_t init_seed = 1;  // its seed
  int batch_size = 16;
  int eval_batch_size = 16;
  int64_t eval_limit = 0;  // evaluation windows / rows: the first eval_limit (0: all)
  // The blocks' linears (q, k, v, o, gate, up, down) stored (in, out) (Param::in_out): a ZenFlow
  // column contiguous. embed_tokens and lm_head keep (V, C): the embedding reads rows.
  bool weights_in_out = false;
  // train.activation_checkpointing: 0, or a checkpoint every N blocks (as GptConfig's)
  int checkpoint_every = 0;
  // runtime.logits_chunk_elems: above it, on a CPU device, the head and the loss in vocabulary
  // chunks (insert_lm_head_xent); 0: never
  int64_t logits_chunk_elems = 0;
};

class LlamaLanguageModel : public Workload, public HfModel {
 public:
  // Token windows (data.dataset "tokens"): unit u is the tokens [uT, uT + T] of the training file.
  LlamaLanguageModel(const hf::Config& c, const LlamaOptions& o, TokenSplit data, StepStatus* status);
  // Fixed rows (instruction data): unit u is row u; targets -1 carry no loss.
  LlamaLanguageModel(const hf::Config& c, const LlamaOptions& o, LmRowSplit data, StepStatus* status);
  ~LlamaLanguageModel() override;
  std::string describe() const override;
  std::vector<Param*> params() override;
  int64_t epoch_size() const override;
  int batch_size() const override { return opt_.batch_size; }
  void submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices, const Tensor& stats) override;
  EvalResult evaluate(Runtime& rt) override;
  // ZeRO stage 3: {embed_tokens}, each block's, {norm, lm_head}; none with a tied head (the
  // embedding is used by the first group and the last).
  std::vector<std::vector<Param*>> layer_groups() override;
  int64_t activation_bytes() const override;

  const hf::Config& hf_config() const override { return cfg_; }
  const hf::LoadResult& hf_loaded() const override { return loaded_; }
  std::vector<float> hf_tensor(const hf::TensorSpec& t) override;
  Param* param(const std::string& name);  // null when the model has none of that name

  struct Layer;  // one block's parameters
  struct Acts;   // activations and gradient buffers of one batch size

 private:
  void init();  // parameters created and loaded (or initialised), rotary table built
  void load();
  // bf16_acts, bf16_grads: Runtime::activations_bf16, activation_grads_bf16 (llama_parts.hpp)
  Acts& acts_for(int B, bool bf16_acts, bool bf16_grads);
  // block l's forward from its input, the tasks named n + ...; whole_block false stops before
  // down_proj (the recomputation of a segment's last block, whose output its backward does not read)
  void block_forward(const SubmitOptions& o, Acts& a, int l, const Tensor& in, const std::string& n,
                     bool whole_block);
  void block_backward(const SubmitOptions& o, Acts& a, int l, const Tensor& in);
  // The columns of a vocabulary chunk where the head and its loss run in chunks for a batch of N
  // rows (insert_lm_head_xent: a CPU device, N V above opt_.logits_chunk_elems), else 0
  int head_chunk(const SubmitOptions& o, int64_t N) const;
  // tokens -> the logits, or with chunk > 0 the final norm's output only (the head runs in the
  // backward, or in evaluate's loss task)
  void forward(const SubmitOptions& o, Acts& a, const Tensor& tokens, LayerHook* hook, int chunk);
  // The loss of the chunked head (chunk > 0): its gradient scaled by loss->scale, stats as
  // insert_softmax_xent_fwd_bwd's
  struct HeadLoss {
    int chunk = 0;
    const Tensor* targets = nullptr;
    const Tensor* stats = nullptr;
    float scale = 1.0f;
  };
  void backward(const SubmitOptions& o, Acts& a, const Tensor& tokens, LayerHook* hook, const HeadLoss& loss);
  // Loads the units (windows or rows) into a's slot buffers; returns the targets >= 0 they hold.
  int64_t load_batch(const SubmitOptions& o, Acts& a, int slot, const std::vector<int64_t>& units, bool eval);
  void run_batch(const SubmitOptions& o, int slot, const std::vector<int64_t>& units, const Tensor& stats,
                 bool eval);
  std::vector<int64_t> eval_units() const;

  hf::Config cfg_;
  LlamaOptions opt_;
  TokenSplit tokens_;
  LmRowSplit rows_;
  bool row_data_ = false;
  TextSource train_src_{}, val_src_{};
  RowTable train_rows_{}, eval_rows_{};
  StepStatus* status_;
  hf::LoadResult loaded_;
  std::vector<Param> params_;  // expected_tensors' order; never reallocated (pointers are kept)
  std::vector<Layer> layers_;
  Param* embed_ = nullptr;
  Param* norm_ = nullptr;
  Param* head_ = nullptr;  // lm_head, or embed_ when tied
  Tensor rope_;            // (2, T, hs/2)
  std::vector<std::unique_ptr<Acts>> acts_;
  int64_t submitted_ = 0;
};

}  // namespace zf
