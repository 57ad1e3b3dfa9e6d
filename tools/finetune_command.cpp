// zenflow-run finetune / eval without a spec file (tools/finetune_command.hpp, docs/finetune.md).
#include "tools/finetune_command.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "models/hf/config.hpp"
#include "runtime/json_input.hpp"
#include "runtime/error.hpp"

namespace zf::tools {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string lower_extension(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return (char)std::tolower(c); });
  return e;
}

// The first `n` bytes of a file.
std::string head(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string s(n, '\0');
  in.read(s.data(), (std::streamsize)n);
  s.resize((size_t)in.gcount());
  return s;
}

void check_file(const std::string& option, const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw InputError(option + " " + path, "no such file");
  if (!fs::is_regular_file(st)) throw InputError(option + " " + path, "not a regular file (expected a data file)");
}

}  // namespace

void add_finetune_options(CLI::App& app, FinetuneArgs& f, bool eval) {
  app.add_option("--model", f.model, "a Hugging Face model directory: config.json, model.safetensors (or an index "
                                     "and shards), tokenizer.json or tokenizer.model (docs/llama.md)")
      ->required();
  app.add_option("--data", f.data, eval ? "the data to evaluate, whole (format as finetune's --data)"
                                        : "training data; the format from the file: Alpaca records (.json array "
                                          "or .jsonl: instruction, input, output), chat records (messages with "
                                          "role and content, or ShareGPT's conversations; rendered in the model's "
                                          "chat template), token ids (.bin, uint16), or "
                                          "UTF-8 text (anything else)")
      ->required();
  if (!eval) {
    app.add_option("--eval-data", f.eval_data, "evaluation data in --data's format (default: every 10th record of "
                                               "Alpaca or chat data, the last 10% of a text; required with a .bin)");
    app.add_option("--epochs", f.epochs, "passes over the training data (default 1; --steps N overrides)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    app.add_flag("--gradient-checkpointing", f.gradient_checkpointing,
                 "recompute each block's forward in the backward instead of keeping its activations (Hugging "
                 "Face's gradient_checkpointing: train.activation_checkpointing \"every_layer\"; the same "
                 "weights, less activation memory, a longer step)");
  }
  app.add_option("--context", f.context, "the window T in tokens: a record longer than T is refused (default: "
                                         "config.json's max_position_embeddings, at most 512)")
      ->check(CLI::Range(int64_t(1), int64_t(8192)));
}

std::string detect_dataset(const std::string& path, const std::string& option) {
  check_file(option, path);
  const std::string ext = lower_extension(path);
  if (ext == ".bin") return "tokens";
  if (ext != ".json" && ext != ".jsonl") return "text";
  const std::string h = head(path, 1 << 16);
  const size_t first = h.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) throw InputError(option + " " + path, "empty (expected JSON or JSONL records)");
  if (h[first] != '[' && h[first] != '{')
    throw InputError(option + " " + path, "expected JSON records (a JSON array or one object a line), starts with '" +
                                              excerpt(h.substr(first, 20)) + "'");
  // the first record's keys decide; the loader checks every record
  if (h.find("\"instruction\"") != std::string::npos) return "instructions";
  if (h.find("\"messages\"") != std::string::npos || h.find("\"conversations\"") != std::string::npos) return "chat";
  throw InputError(option + " " + path, "JSON records without an \"instruction\", \"messages\" or \"conversations\" "
                                        "field: expected Alpaca records {\"instruction\", \"input\", \"output\"} or "
                                        "chat records {\"messages\": [{\"role\", \"content\"}]} (docs/finetune.md)");
}

json finetune_spec(const FinetuneArgs& f, bool eval) {
  std::error_code ec;
  if (!fs::is_directory(f.model, ec))
    throw InputError("--model " + f.model,
                     "not a directory (expected a Hugging Face model directory with config.json)");
  const std::string config = (fs::path(f.model) / "config.json").string();
  if (!fs::is_regular_file(config, ec)) throw InputError("--model " + f.model, "has no config.json");
  const hf::Config c = hf::read_config(config);
  const int64_t context = f.context > 0 ? f.context : std::min<int64_t>(c.max_positions, 512);
  const std::string dataset = detect_dataset(f.data, "--data");
  if (!f.eval_data.empty() && detect_dataset(f.eval_data, "--eval-data") != dataset)
    throw InputError("--eval-data " + f.eval_data, "holds " + detect_dataset(f.eval_data, "--eval-data") +
                                                       ", --data " + f.data + " holds " + dataset +
                                                       ": expected the same format");
  json data = {{"dataset", dataset}, {"path", fs::absolute(f.data).string()}};
  if (eval) {  // the file is evaluated whole: the evaluation file, and the (unused) training file
    data["eval_path"] = data["path"];
  } else if (!f.eval_data.empty()) {
    data["eval_path"] = fs::absolute(f.eval_data).string();
  } else if (dataset == "tokens") {
    throw InputError("--eval-data", "required with a token file (--data " + f.data + "): the evaluation token file");
  }
  std::string name = fs::path(f.model).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(f.model).lexically_normal().parent_path().filename().string();
  json j = {
      {"name", (eval ? "eval-" : "finetune-") + name},
      {"strategy", "device-adam"},
      {"model", {{"type", "hf"}, {"path", fs::absolute(f.model).lexically_normal().string()}, {"context", context}}},
      {"data", data},
      // Hugging Face Trainer's defaults where a DeepSpeed config does not say: per-device batch 8,
      // AdamW at 5e-5 without weight decay; a DeepSpeed config's values replace these
      {"train", {{"batch_size", eval ? 1 : 8}, {"eval_batch_size", 8}, {"seed", 42}}},
      {"optimizer", {{"type", "adamw"}, {"lr", 5e-5}, {"weight_decay", 0.0}}},
      {"log", {{"every", 10}, {"warmup_steps", 2}}},
  };
  if (f.epochs > 0) j["train"]["epochs"] = f.epochs;
  if (f.gradient_checkpointing) j["train"]["activation_checkpointing"] = "every_layer";
  return j;
}

}  // namespace zf::tools
