#include "graphs/schema/spec.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graphs/schema/deepspeed.hpp"
#include "graphs/schema/field_table.hpp"
#include "graphs/schema/fields.hpp"
#include "graphs/strategies/registry.hpp"
#include "runtime/error.hpp"
#include "runtime/json_input.hpp"
#include "runtime/simulation.hpp"

namespace zf {

using json = nlohmann::json;

void parse_zenflow_block(Fields& f, Spec& s) {
  const Spec::ZenFlow& z = s.zenflow;
  read_block(f, "zenflow", s);
  f.finish();
  if (z.select_strategy == "auto" && z.select_interval != -1)
    f.fail(f.at("select_interval"), "must be \"auto\" with select_strategy \"auto\" (which reselects once per epoch)");
  if (z.select_strategy != "auto" && z.select_interval == -1)
    f.fail(f.at("select_interval"), "must be an integer with select_strategy \"" + z.select_strategy + "\"");
  if (z.select_strategy == "step" && !z.update_interval.is_auto && z.select_interval < z.update_interval.steps)
    f.fail(f.at("select_interval"), std::to_string(z.select_interval) + " must be >= update_interval (" +
                                        std::to_string(z.update_interval.steps) + ")");
  if (!z.overlap_step && z.max_staleness > 0)
    f.fail(f.at("max_staleness"), "must be 0 without overlap_step: true (updates are synchronous)");
  // DeepSpeed's rules are implemented for a fixed update_interval only (docs/zenflow.md)
  if (z.deepspeed_rules() && z.update_interval.is_auto)
    f.fail(f.at("semantics"), "\"deepspeed\" needs an integer update_interval (DeepSpeed's \"auto\" divides the loss "
                              "by zero accumulation steps; use semantics \"zenflow\" for \"auto\")");
  if (z.deepspeed_rules() && z.reset_host_moments)
    f.fail(f.at("semantics"), "\"deepspeed\" cannot be combined with reset_host_moments (ours; DeepSpeed never resets "
                              "its host moments)");
}

namespace {

// Model and data must fit together (docs/gpt.md); checked with or without a data block.
void check_model_data(const Fields& top, Spec& s) {
  const std::string& m = s.model.type;
  const std::string& d = s.data.dataset;
  if (m == "mlp" && d != "fashion-mnist")
    top.fail("data.dataset", "'" + d + "' needs a text model (model.type gpt or gpt-classifier); mlp trains on fashion-mnist");
  if (m == "hf" && s.model.path.empty())
    top.fail("model.path", "required with model.type hf (a Hugging Face model directory, docs/llama.md)");
  if (m != "hf" && !s.model.path.empty())
    top.fail("model.path", "only with model.type hf (model.type is " + m + ")");
  if (m != "hf" && s.model.init != "weights")
    top.fail("model.init", "only with model.type hf (a " + m + " model is always initialised from model.init_seed)");
  if (m == "hf" && d == "fashion-mnist")
    top.fail("data.dataset", "model.type hf trains on language: set data.dataset to tokens, text, kjv, instructions or chat");
  const bool records = d == "instructions" || d == "chat";
  if (m != "hf" && records)
    top.fail("data.dataset", d + " records are tokenized by a Hugging Face model's tokenizer: set model.type hf");
  if (s.data.pack && !records)
    top.fail("data.pack", "packs instruction or chat records into full rows: only with data.dataset instructions or "
                          "chat (" + d + " is cut into full windows already)");
  if (d == "instructions" && s.data.path.empty())
    top.fail("data.path", "required with data.dataset instructions (Alpaca-style JSON or JSONL records, docs/hf.md)");
  if (d == "chat" && s.data.path.empty())
    top.fail("data.path", "required with data.dataset chat (JSON or JSONL records with messages or conversations, "
                          "docs/finetune.md)");
  if (m == "gpt" && d == "fashion-mnist")
    top.fail("data.dataset", "model.type gpt trains on text or tokens: set data.dataset to kjv, text or tokens");
  if (m == "gpt-classifier" && d != "kjv")
    top.fail("data.dataset", "model.type gpt-classifier classifies KJV verses: set data.dataset to kjv");
  if (d == "text" && s.data.path.empty()) top.fail("data.path", "required with data.dataset text (a UTF-8 text file)");
  if (d == "kjv" && s.data.path.empty()) s.data.path = kKjvDefaultPath;
  if (m == "gpt-classifier" && d == "tokens")
    top.fail("data.dataset", "model.type gpt-classifier classifies KJV verses: set data.dataset to kjv");
  if (d == "tokens" && s.data.path.empty())
    top.fail("data.path", "required with data.dataset tokens (the training token file, docs/gpt.md)");
  if (d == "tokens" && s.data.eval_path.empty())
    top.fail("data.eval_path", "required with data.dataset tokens (the evaluation token file, docs/gpt.md)");
  const bool own_eval = d == "tokens" || records || (m == "hf" && d == "text");
  if (!own_eval && !s.data.eval_path.empty())
    top.fail("data.eval_path", "only with data.dataset tokens, instructions, chat, or text with model.type hf (" + d +
                                   " has its own evaluation split)");
  // the byte datasets' ids are the 256 byte values; the classifier's heads are built on them
  if ((m == "gpt-classifier" && s.model.vocab != 256) || (m != "hf" && (d == "text" || d == "kjv") && s.model.vocab < 256))
    top.fail("model.vocab", std::to_string(s.model.vocab) + ": " +
                                (m == "gpt-classifier" ? "gpt-classifier reads bytes, vocabulary 256"
                                                       : "data.dataset " + d + " reads bytes: at least 256") +
                                " (another vocabulary needs data.dataset tokens)");
}

// Checks across the fields of a block the spec has, after its unknown keys are refused.
void check_block(const std::string& block, const Fields& f, Spec& s) {
  if (block == "fp16") {
    s.fp16.given = true;
    if (s.precision != "fp16")
      f.fail("fp16", "the loss-scaling block needs precision \"fp16\" (precision is \"" + s.precision + "\")");
  } else if (block == "model" && s.model.n_embd % s.model.n_head) {
    f.fail("model.n_embd", std::to_string(s.model.n_embd) + " is not a multiple of model.n_head (" +
                               std::to_string(s.model.n_head) + ")");
  } else if (block == "train" && s.train.batch_size % s.train.gradient_accumulation_steps) {
    f.fail("train.gradient_accumulation_steps", std::to_string(s.train.gradient_accumulation_steps) +
                                                    " does not divide train.batch_size " +
                                                    std::to_string(s.train.batch_size) + " into equal micro-batches");
  }
}

// One block of the table, from its object in the spec (absent: its defaults stay).
void parse_block(Fields& top, const std::string& block, Spec& s) {
  const json* b = top.object(block);
  if (b) {
    Fields f(*b, block, top.source());
    if (block == "zenflow") {
      s.zenflow.given = true;
      parse_zenflow_block(f, s);
    } else {
      read_block(f, block, s);
      f.finish();
      check_block(block, f, s);
    }
  }
  if (block == "data") check_model_data(top, s);
}

// The table in order: its top-level keys from the top object, its blocks each from its object;
// the strategy's rules are checked by the caller (they name a --deepspeed file's fields).
Spec read_spec(const json& j, const std::string& source) {
  Spec s;
  s.source = source;
  Fields top(j, "", source);
  const std::vector<FieldDef>& table = spec_fields();
  for (size_t i = 0; i < table.size();) {
    const std::string block = table[i].block();
    size_t end = i;
    while (end < table.size() && table[end].block() == block) ++end;
    if (block.empty()) {
      for (size_t k = i; k < end; ++k) table[k].read(top, table[k].key(), s);
    } else {
      parse_block(top, block, s);
    }
    i = end;
  }
  top.finish();
  if (kSimulated && s.precision == "fp16")
    top.fail("precision", "\"fp16\" reads each step's overflow flag; use \"bf16\" or \"fp32\" in simulation (a "
                          "simulated run computes no values, docs/simulation.md)");
  return s;
}

// The rules across blocks that depend on the strategy: its entry in graphs/strategies/registry.hpp.
void check_strategy(const Spec& s, int ranks) { strategy_def(s.strategy).check(s, ranks); }

}  // namespace

Spec parse_spec(const json& j, const std::string& source, int ranks) {
  Spec s = read_spec(j, source);
  check_strategy(s, ranks);
  return s;
}

json Spec::to_json() const {
  json j = json::object();
  write_fields(*this, j);
  return j;
}

json Spec::applicable_json() const {
  json j = to_json();
  auto drop = [&](const char* block, std::initializer_list<const char*> keys) {
    if (j.contains(block))
      for (const char* k : keys) j[block].erase(k);
  };
  const std::string& m = model.type;
  if (m != "mlp") drop("model", {"hidden", "activation"});
  if (m == "mlp" || m == "hf") drop("model", {"n_layer", "n_head", "n_embd", "vocab"});  // hf: config.json's
  if (m == "mlp") drop("model", {"context"});
  if (m != "gpt-classifier") drop("model", {"pool", "head"});
  if (m != "hf") drop("model", {"init"});
  if (data.dataset != "fashion-mnist") drop("data", {"dir", "train_limit"});
  if (m != "gpt-classifier") drop("data", {"labels", "split"});
  if (data.dataset == "fashion-mnist") drop("data", {"path"});
  if (!strategy_def(strategy).zenflow) j.erase("zenflow");
  return j;
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "cannot open (file not found or unreadable)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_input(ss.str(), path);  // errors name the field, excerpts are short
}

void apply_override(json& j, const std::string& assignment, const std::string& source) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError("--set " + assignment, "expected FIELD.PATH=VALUE");
  std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  // A spec is UTF-8 JSON: a field path or a bare-word value that is not valid UTF-8 could not be
  // printed back (--print-spec, a checkpoint's spec) and names no field
  try {
    (void)json(assignment).dump();
  } catch (const json::type_error&) {
    throw InputError("--set " + json(path).dump(-1, ' ', false, json::error_handler_t::replace),
                     "not valid UTF-8 (a spec's field paths and values are UTF-8 text)");
  }
  json value;
  try {
    value = json::parse(text);
  } catch (...) {
    value = text;  // bare words are strings: --set strategy=zero-offload
  }
  json* cur = &j;
  size_t start = 0;
  for (;;) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) throw InputError("--set " + assignment, "empty component in field path '" + path + "'");
    if (!cur->is_object())
      throw InputError("--set " + assignment, "'" + path.substr(0, start ? start - 1 : 0) + "' is not an object in " + source);
    if (dot == std::string::npos) {
      if (value.is_null())  // KEY=null: the field or block removed, as if the spec never had it (its default)
        cur->erase(key);
      else
        (*cur)[key] = value;
      return;
    }
    if (!cur->contains(key) && value.is_null()) return;  // nothing to remove
    if (!cur->contains(key)) (*cur)[key] = json::object();
    cur = &(*cur)[key];
    start = dot + 1;
  }
}

// The spec file's relative paths (model.path, data.path, data.eval_path, data.dir) against the
// file's folder, so that a spec runs from any directory; what is not a string is left to the parser.
static void resolve_paths(json& j, const std::string& spec_path) {
  const std::filesystem::path base = std::filesystem::path(spec_path).parent_path();
  if (base.empty() || !j.is_object()) return;
  for (auto [block, key] : {std::pair{"model", "path"}, {"data", "path"}, {"data", "eval_path"}, {"data", "dir"}}) {
    auto b = j.find(block);
    if (b == j.end() || !b->is_object()) continue;
    auto v = b->find(key);
    if (v == b->end() || !v->is_string() || v->get<std::string>().empty()) continue;
    const std::filesystem::path p = v->get<std::string>();
    if (p.is_relative()) *v = (base / p).lexically_normal().string();
  }
}

Spec load_spec(const std::string& path, const std::vector<std::string>& overrides,
               const std::string& deepspeed_config, int ranks) {
  json j = read_json_file(path);
  resolve_paths(j, path);  // before the overrides: a path on the command line is the shell's
  return load_spec_json(std::move(j), path, overrides, deepspeed_config, ranks);
}

Spec load_spec_json(json j, const std::string& path, const std::vector<std::string>& overrides,
                    const std::string& deepspeed_config, int ranks) {
  if (!deepspeed_config.empty()) {
    json resolved = j;  // what the config's "auto" values are filled from: the spec with the overrides
    for (auto& o : overrides) apply_override(resolved, o, path);
    apply_deepspeed(j, deepspeed_config, ranks, resolved);
  }
  for (auto& o : overrides) apply_override(j, o, path);
  Spec s = read_spec(j, path);
  // messages about these fields, from here on, name the DeepSpeed file
  if (!deepspeed_config.empty()) record_deepspeed_origins(s, deepspeed_config, overrides);
  check_strategy(s, ranks);
  return s;
}

int64_t steps_per_epoch(const Spec& s, int64_t epoch_size) {
  return std::max<int64_t>(1, epoch_size / s.train.batch_size);
}

int64_t select_interval_steps(const Spec::ZenFlow& z, int64_t spe) {
  if (z.select_strategy == "auto") return spe;  // "epoch", interval 1
  if (z.select_strategy == "epoch") return z.select_interval * spe;
  return z.select_interval;
}

int64_t total_steps(const Spec& s, int64_t epoch_size) {
  return s.train.steps > 0 ? s.train.steps : s.train.epochs * steps_per_epoch(s, epoch_size);
}

}  // namespace zf
