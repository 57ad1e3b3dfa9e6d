// A Hugging Face GPT2LMHeadModel directory (docs/gpt.md "GPT-2 from Hugging Face", docs/hf.md)
// trained as the engine's GPT (models/nets/gpt.hpp): config.json's sizes (vocab_size, n_embd, n_layer,
// n_head, n_positions rows of wpe, n_inner or 4 n_embd, layer_norm_epsilon), the head tied to wte
// unless tie_word_embeddings is false, weights from hf::load_weights (F32, BF16, F16, one file or
// shards; names with or without "transformer.") or, without weight files, Hugging Face's
// initialisation from model.init_seed. Conv1D weights are stored (in, out), which is the engine's
// Param::in_out storage: read straight in under weights_in_out, transposed otherwise.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/nets/gpt.hpp"
#include "models/hf/hf_model.hpp"
#include "models/hf/config.hpp"
#include "models/hf/load.hpp"
#include "models/hf/save.hpp"
#include "models/data/lm_rows.hpp"
#include "models/data/tokens.hpp"

namespace zf {

// The GptConfig of the GPT-2 `c` with the run's fields taken from `run` (context, init_seed,
// batch_size, eval_batch_size, eval_limit, weights_in_out; the model's sizes from `c`). An
// InputError naming c.path when `c` is not a gpt2 config, or run.context is not in
// [1, n_positions].
GptConfig gpt2_config(const hf::Config& c, const GptConfig& run);

// The engine parameter of a canonical Hugging Face tensor name ("transformer.wte.weight" -> "wte",
// "transformer.h.0.attn.c_attn.weight" -> "h.0.attn.c_attn.weight", "lm_head.weight" as is).
std::string gpt2_param_name(const std::string& hf_name);
// Whether the tensor is a Conv1D weight (stored (in, out) in the checkpoint: c_attn, c_proj, c_fc).
bool gpt2_conv1d(const std::string& hf_name);

class Gpt2HfModel : public GptLanguageModel, public HfModel {
 public:
  // dir: the model directory (weights read from it, or, with run.hf_random_init, initialised from
  // run.init_seed).
  Gpt2HfModel(const hf::Config& c, const std::string& dir, const GptConfig& run, TokenSplit data, StepStatus* status);
  Gpt2HfModel(const hf::Config& c, const std::string& dir, const GptConfig& run, LmRowSplit rows, StepStatus* status);
  std::string describe() const override;
  const hf::Config& hf_config() const override { return hf_; }
  // The files read and each tensor's stored dtype (from_files false: initialised).
  const hf::LoadResult& hf_load() const { return load_; }
  const hf::LoadResult& hf_loaded() const override { return load_; }
  std::vector<float> hf_tensor(const hf::TensorSpec& t) override { return hf_values(t); }
  // Tensor t (one of hf::expected_tensors(hf_config())) as the checkpoint stores it: fp32 values
  // in its layout (Conv1D weights (in, out)). Waits for the parameter's writers.
  std::vector<float> hf_values(const hf::TensorSpec& t);
  // --save-hf: the model as a Hugging Face directory (hf::save_dir); o.input defaults to the
  // dtypes read (hf_load().dtypes).
  void save_hf(const std::string& out_dir, hf::SaveOptions o);

 private:
  void load(const std::string& dir);
  Param& param(const std::string& hf_name);
  hf::Config hf_;
  hf::LoadResult load_;
};

// For the workload factory (model.type "hf" with a gpt2 config.json): a sampling unit is a window
// of the token files (data.dataset "tokens"), or a row (LmRowSplit: instructions).
std::unique_ptr<Workload> make_hf_gpt2(const hf::Config& c, const std::string& dir, const GptConfig& run,
                                       TokenSplit data, StepStatus* status);
std::unique_ptr<Workload> make_hf_gpt2(const hf::Config& c, const std::string& dir, const GptConfig& run,
                                       LmRowSplit rows, StepStatus* status);

}  // namespace zf
