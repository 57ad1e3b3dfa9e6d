// `zenflow-run finetune --model DIR --data FILE ...` and `zenflow-run eval --model DIR --data FILE`:
// the spec built from the command line (a Hugging Face model directory, a data file whose format
// is read from the file, a DeepSpeed config) instead of a hand-written one (docs/finetune.md).
// zenflow-run's own run options (--deepspeed, --strategy, --steps, --set, --metrics, ...) apply
// on top, as to a spec file.
#pragma once
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace zf::tools {

struct FinetuneArgs {
  std::string model, data, eval_data;
  int64_t context = 0;  // 0: min(config.json's max_position_embeddings, 512)
  int64_t epochs = 0;   // 0: the spec's default (1)
  bool gradient_checkpointing = false;  // Hugging Face's: train.activation_checkpointing "every_layer"
};

// finetune: --model, --data, --eval-data, --context, --epochs, --gradient-checkpointing. eval: --model, --data (the file
// evaluated, whole), --context.
void add_finetune_options(CLI::App& app, FinetuneArgs& f, bool eval);

// The data set a file holds, from its name and first bytes: "tokens" (.bin), "instructions" (JSON
// or JSONL records with "instruction"), "chat" (records with "messages" or "conversations"), "text"
// (anything else: UTF-8 text). JSON records of another shape are an InputError naming `option` and
// the file.
std::string detect_dataset(const std::string& path, const std::string& option);

// The spec's JSON from the arguments (the defaults of docs/finetune.md); `eval`: the data file is
// the evaluation data. Bad arguments are InputErrors naming the option.
nlohmann::json finetune_spec(const FinetuneArgs& f, bool eval);

}  // namespace zf::tools
