// The spec's workload (graphs/train/workload_factory.hpp): model.type -> MLP, GPT, GPT classifier
// or a Hugging Face model directory (hf: Llama, Mistral, Qwen2).
#include "graphs/train/workload_factory.hpp"

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "graphs/strategies/registry.hpp"
#include "models/nets/gpt.hpp"
#include "models/hf/gpt2_hf.hpp"
#include "models/nets/gpt_classifier.hpp"
#include "models/hf/config.hpp"
#include "models/data/idx.hpp"
#include "models/data/chat.hpp"
#include "models/data/instructions.hpp"
#include "models/nets/llama.hpp"
#include "models/nets/mlp.hpp"
#include "models/data/text.hpp"
#include "models/data/text_tokens.hpp"
#include "models/tokenizer/tokenizer.hpp"
#include "models/data/tokens.hpp"
#include "runtime/error.hpp"

namespace zf {
namespace {

std::unique_ptr<Workload> make_mlp(const Spec& spec, StepStatus* status) {
  FashionMnist d = load_fashion_mnist(spec.data.dir, spec.data.train_limit, spec.data.eval_limit);
  if (spec.train.batch_size > d.train.rows)
    throw InputError(spec.where("train.batch_size"),
                     std::to_string(spec.train.batch_size) + " exceeds the " +
                         std::to_string(d.train.rows) + " training examples");
  MlpConfig c;
  c.hidden = spec.model.hidden;
  c.activation = spec.model.activation == "gelu" ? Activation::Gelu : Activation::Relu;
  c.init_seed = spec.model.init_seed;
  c.batch_size = spec.train.batch_size;
  c.eval_batch_size = spec.train.eval_batch_size;
  c.weights_in_out = spec.model.weight_layout != "out_in";
  return std::make_unique<MlpClassifier>(c, std::move(d.train), std::move(d.test), status);
}

// What the language models' options share: the init, the batches, the evaluation's size and the
// weight layout: (in, out) where ZenFlow's selective step gains from it; the other strategies keep
// the (out, in) layout, whose matmuls the device-adam step is tuned on (docs/zenflow.md).
template <class Options>
void lm_options(const Spec& spec, Options& o) {
  o.init_seed = spec.model.init_seed;
  o.batch_size = spec.train.batch_size;
  o.eval_batch_size = spec.train.eval_batch_size;
  o.eval_limit = spec.data.eval_limit;
  o.checkpoint_every = spec.train.activation_checkpointing;
  o.weights_in_out = spec.model.weight_layout == "in_out" ||
                     (spec.model.weight_layout == "auto" && strategy_def(spec.strategy).zenflow);
}

GptConfig gpt_config(const Spec& spec) {
  GptConfig c;
  c.n_layer = spec.model.n_layer;
  c.n_head = spec.model.n_head;
  c.n_embd = spec.model.n_embd;
  c.context = spec.model.context;
  c.vocab = spec.model.vocab;
  lm_options(spec, c);
  c.hf_random_init = spec.model.type == "hf" && spec.model.init == "random";
  return c;
}

// model.type "gpt-classifier": a verse classifier on the KJV (docs/gpt.md)
std::unique_ptr<Workload> make_gpt_classifier(const Spec& spec, const GptConfig& c, const std::string& where,
                                              StepStatus* status) {
  const std::vector<Verse> verses = load_kjv(spec.data.path, where);
  VerseTask t = make_verse_task(verses, spec.data.labels, spec.data.split, c.context);
  if (t.eval.rows == 0)  // nothing to evaluate: an accuracy of 0 / 0 is no result
    throw InputError(where + ": " + spec.data.path,
                     "no held-out verses for data.split \"" + spec.data.split + "\" (" +
                         (spec.data.split == "book" ? "the held-out books are absent from the file"
                                                    : "every 10th verse is held out; the file has too few") +
                         "): the run would have no evaluation rows");
  if (spec.model.head == "generative") return std::make_unique<GptGenerativeClassifier>(c, std::move(t), verses, status);
  return std::make_unique<GptClassifier>(c, std::move(t), spec.model.pool, status);
}

std::unique_ptr<Workload> make_gpt(const Spec& spec, StepStatus* status) {  // docs/gpt.md
  const GptConfig c = gpt_config(spec);
  const std::string where = spec.source + ": data.path";
  std::unique_ptr<Workload> w;
  if (spec.model.type == "gpt" && spec.data.dataset == "tokens") {
    w = std::make_unique<GptLanguageModel>(
        c, load_token_split(spec.data.path, where, spec.data.eval_path, spec.source + ": data.eval_path", c.vocab, c.context),
        status);
  } else if (spec.model.type == "gpt") {
    TextSplit t = spec.data.dataset == "kjv" ? kjv_lm_split(load_kjv(spec.data.path, where))
                                             : load_text_split(spec.data.path, where);
    check_split(t, c.context, spec.data.path, where);
    w = std::make_unique<GptLanguageModel>(c, std::move(t), status);
  } else {
    w = make_gpt_classifier(spec, c, where, status);
  }
  const int64_t units = w->epoch_size();
  if (spec.train.batch_size > units)
    throw InputError(spec.where("train.batch_size"), std::to_string(spec.train.batch_size) + " exceeds the " +
                                                             std::to_string(units) + " training " +
                                                             (spec.model.type == "gpt" ? "windows" : "verses"));
  return w;
}

LlamaOptions llama_options(const Spec& spec) {
  LlamaOptions o;
  o.dir = spec.model.path;
  o.context = spec.model.context;
  lm_options(spec, o);
  o.random_init = spec.model.init == "random";
  o.logits_chunk_elems = spec.runtime.logits_chunk_elems;
  return o;
}

std::unique_ptr<Workload> checked_units(const Spec& spec, std::unique_ptr<Workload> w, const char* units) {
  if (spec.train.batch_size > w->epoch_size())
    throw InputError(spec.where("train.batch_size"), std::to_string(spec.train.batch_size) + " exceeds the " +
                                                         std::to_string(w->epoch_size()) + " training " + units);
  return w;
}

}  // namespace

hf::Config hf_model_config(const Spec& spec) {
  namespace fs = std::filesystem;
  const std::string where = spec.where("model.path"), dir = spec.model.path;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError(where, "'" + dir + "' is not a directory (expected a Hugging Face model directory with config.json)");
  const std::string path = (fs::path(dir) / "config.json").string();
  // absent (no entry at all) is named here; a FIFO, a directory, a symbolic link loop or a dangling
  // link are read_config's (open_input_file's) messages, naming the file
  if (!fs::exists(fs::symlink_status(path, ec))) throw InputError(where, "'" + dir + "' has no config.json");
  hf::Config c = hf::read_config(path);
  if (spec.model.context > c.max_positions)
    throw InputError(spec.where("model.context"), std::to_string(spec.model.context) + " exceeds " + path +
                                                      "'s max_position_embeddings (" +
                                                      std::to_string(c.max_positions) + ")");
  return c;
}

std::unique_ptr<Workload> make_hf_workload(const Spec& spec, const hf::Config& c, TokenSplit data,
                                           StepStatus* status) {
  if (c.family == hf::Family::Gpt2)
    return checked_units(spec, make_hf_gpt2(c, spec.model.path, gpt_config(spec), std::move(data), status), "windows");
  return checked_units(spec, std::make_unique<LlamaLanguageModel>(c, llama_options(spec), std::move(data), status),
                       "windows");
}

std::unique_ptr<Workload> make_hf_workload(const Spec& spec, const hf::Config& c, LmRowSplit data,
                                           StepStatus* status) {
  if (c.family == hf::Family::Gpt2)
    return checked_units(spec, make_hf_gpt2(c, spec.model.path, gpt_config(spec), std::move(data), status), "rows");
  return checked_units(spec, std::make_unique<LlamaLanguageModel>(c, llama_options(spec), std::move(data), status),
                       "rows");
}

// model.type "hf" (docs/hf.md "Data"): token files as they are; text, the KJV and instruction
// records tokenized with the model directory's tokenizer and config.json's BOS / EOS; chat records in
// its chat template.
static std::unique_ptr<Workload> make_hf(const Spec& spec, StepStatus* status) {
  const hf::Config c = hf_model_config(spec);
  const std::string& d = spec.data.dataset;
  const std::string where = spec.where("data.path"), eval_where = spec.where("data.eval_path");
  if (d == "tokens")
    return make_hf_workload(spec, c,
                            load_token_split(spec.data.path, where, spec.data.eval_path, eval_where, c.vocab_size,
                                             spec.model.context),
                            status);
  const std::unique_ptr<tok::Tokenizer> tok = tok::load_tokenizer(spec.model.path);
  const tok::SpecialIds ids = tok::read_special_ids(spec.model.path);
  auto progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  if (d == "instructions" || d == "chat") {
    InstructionOptions o;
    o.T = spec.model.context;
    o.bos = ids.bos;
    o.eos = ids.eos;
    o.specials_where = spec.model.path + "/config.json: eos_token_id";
    o.vocab = c.vocab_size;
    o.vocab_where = c.path + ": vocab_size";
    o.progress = progress;
    o.pack = spec.data.pack;
    if (d == "chat")
      return make_hf_workload(spec, c,
                              load_chat_split(spec.data.path, where, spec.data.eval_path, eval_where, *tok,
                                              load_chat_format(spec.model.path), o),
                              status);
    return make_hf_workload(
        spec, c, load_instruction_split(spec.data.path, where, spec.data.eval_path, eval_where, *tok, o), status);
  }
  TextTokenOptions o;
  o.bos = ids.bos;
  o.eos = ids.eos;
  o.vocab = c.vocab_size;
  o.vocab_where = c.path + ": vocab_size";
  o.context = spec.model.context;
  o.progress = progress;
  if (d == "kjv")
    return make_hf_workload(spec, c, tokenize_text_split(kjv_lm_split(load_kjv(spec.data.path, where)), where, *tok, o),
                            status);
  return make_hf_workload(spec, c, load_text_token_split(spec.data.path, where, spec.data.eval_path, eval_where, *tok, o),
                          status);
}

// train.activation_checkpointing: the transformers' blocks (GPT, GPT-2, Llama, Qwen2); at ZeRO stage 3
// one block a segment (the recomputation runs inside the block's backward hooks, which gather its
// parameters alone)
void check_activation_checkpointing(const Spec& spec) {
  const int n = spec.train.activation_checkpointing;
  if (n == 0) return;
  if (spec.model.type == "mlp")
    throw InputError(spec.where("train.activation_checkpointing"),
                     "model.type \"mlp\" has no transformer blocks to checkpoint (\"none\", or a GPT or hf model)");
  if (n > 1 && spec.zero_stage == 3)
    throw InputError(spec.where("train.activation_checkpointing"),
                     std::to_string(n) + " blocks a segment at ZeRO stage 3: the recomputation gathers one block's "
                     "parameters at a time; use \"every_layer\" (or stage 2)");
}

std::unique_ptr<Workload> make_workload(const Spec& spec, StepStatus* status) {
  check_activation_checkpointing(spec);
  if (spec.model.type == "mlp") return make_mlp(spec, status);
  if (spec.model.type == "gpt" || spec.model.type == "gpt-classifier") return make_gpt(spec, status);
  if (spec.model.type == "hf") return make_hf(spec, status);
  throw InputError(spec.source + ": model.type", "unknown model type '" + spec.model.type + "'");
}

}  // namespace zf
