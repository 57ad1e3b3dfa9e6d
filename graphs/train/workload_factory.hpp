// The spec's workload: its model (MLP, GPT language model, GPT classifier) and its data, checked
// against the batch size.
#pragma once
#include <memory>

#include "graphs/schema/spec.hpp"
#include "models/hf/config.hpp"
#include "models/data/lm_rows.hpp"
#include "models/data/tokens.hpp"

namespace zf {

class Workload;
class StepStatus;

// Builds the spec's workload (model + data). Needs a live Runtime.
std::unique_ptr<Workload> make_workload(const Spec& spec, StepStatus* status);

// model.type "hf" (docs/llama.md): model.path's config.json, checked against the spec (a directory
// with a config.json; model.context <= max_position_embeddings; llama, mistral, qwen2 and gpt2).
hf::Config hf_model_config(const Spec& spec);
// The Hugging Face model of config c on token windows (data.dataset "tokens", or a text tokenized
// by the model's tokenizer) or on fixed rows (instruction data), checked against the batch size.
std::unique_ptr<Workload> make_hf_workload(const Spec& spec, const hf::Config& c, TokenSplit data, StepStatus* status);
std::unique_ptr<Workload> make_hf_workload(const Spec& spec, const hf::Config& c, LmRowSplit data, StepStatus* status);

}  // namespace zf
