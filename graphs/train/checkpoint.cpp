// The checkpoint format (graphs/train/checkpoint.hpp): what a step directory holds, and how a
// checkpoint is found, checked against the run and loaded.
#include "graphs/train/checkpoint.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

#include "graphs/schema/field_table.hpp"
#include "graphs/schema/spec.hpp"
#include "graphs/strategies/registry.hpp"
#include "graphs/strategies/strategy.hpp"
#include "models/formats/weights.hpp"
#include "models/hf/hf_model.hpp"
#include "models/workload.hpp"
#include "runtime/json_depth.hpp"

namespace zf {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A step number as written by the writer: decimal digits only (no sign, no space, no suffix),
// at most 18 of them. Anything else is refused, naming the file and the field.
int64_t parse_step(const std::string& text, const std::string& where) {
  int64_t v = -1;
  const char* b = text.data();
  const char* e = b + text.size();
  auto [end, ec] = std::from_chars(b, e, v);
  if (text.empty() || text.size() > 18 || !std::all_of(b, e, [](char c) { return c >= '0' && c <= '9'; }) ||
      ec != std::errc() || end != e)
    throw InputError(where, "'" + text.substr(0, 40) + (text.size() > 40 ? "..." : "") +
                                "' is not a step number (expected decimal digits, >= 0)");
  return v;
}

std::string brief(const json& j) {  // a JSON value for a message, cut at 200 characters
  std::string s = j.dump();
  return s.size() > 200 ? s.substr(0, 200) + "... (" + std::to_string(s.size()) + " characters)" : s;
}

// What check_compatible reads of a checkpoint's spec must be there, with the right kind of value.
void validate_spec(const json& j, const std::string& where) {
  auto need = [&](const json& o, const std::string& path, const char* key, bool (json::*is)() const noexcept,
                  const char* kind) {
    auto it = o.find(key);
    if (it == o.end()) throw InputError(where + "." + path + key, "missing (expected " + std::string(kind) + ")");
    if (!((*it).*is)())
      throw InputError(where + "." + path + key, "expected " + std::string(kind) + ", got " + brief(*it));
  };
  if (!j.is_object()) throw InputError(where, "expected a JSON object (the run's spec), got " + brief(j));
  need(j, "", "strategy", &json::is_string, "a string");
  need(j, "", "model", &json::is_object, "an object");
  need(j, "", "optimizer", &json::is_object, "an object");
  need(j, "", "data", &json::is_object, "an object");
  need(j, "", "train", &json::is_object, "an object");
  for (const char* k : {"dataset", "dir"}) need(j["data"], "data.", k, &json::is_string, "a string");
  need(j["data"], "data.", "train_limit", &json::is_number_integer, "an integer");
  for (const char* k : {"batch_size", "seed"}) need(j["train"], "train.", k, &json::is_number_integer, "an integer");
  if (j.contains("precision")) need(j, "", "precision", &json::is_string, "a string");
  if (j.contains("scheduler")) need(j, "", "scheduler", &json::is_object, "an object");
  const StrategyDef* strategy = find_strategy(j["strategy"].get<std::string>());
  if (strategy && strategy->zenflow) need(j, "", "zenflow", &json::is_object, "an object");
}

}  // namespace

// ---------------------------------------------------------------- the writer
CheckpointDir::CheckpointDir(const std::string& dir, const Spec& spec, bool overwrite)
    : dir_(dir, overwrite, [&spec](const std::string& probe) {
        const CheckpointInfo ck = find_checkpoint(probe);
        check_compatible(ck, spec);
      }) {}

std::string write_checkpoint(const std::string& dir, int64_t step, const Spec& spec, Workload& wl,
                             const Strategy& strat, const std::function<void(StateWriter&)>& extra) {
  CheckpointDir d(dir, spec, false);
  return d.write(step, spec, wl, strat, extra);
}

std::string CheckpointDir::write(int64_t step, const Spec& spec, Workload& wl, const Strategy& strat,
                                 const std::function<void(StateWriter&)>& extra) {
  const fs::path tmp(dir_.staging_dir(step));  // where the files are written first (their messages name it)
  StFile model;
  model.metadata["format"] = "zenflow-weights";
  model.metadata["model"] = wl.describe();
  model.metadata["step"] = std::to_string(step);
  for (Param* p : wl.params())  // the logical layout, whatever the storage (Param::in_out)
    model.tensors[p->name] = st_f32(p->logical_shape(), logical_values(*p).data());
  StateWriter w;
  strat.save_state(w);
  if (extra) extra(w);
  w.file().metadata["format"] = "zenflow-state";
  w.file().metadata["step"] = std::to_string(step);
  w.file().metadata["strategy"] = strat.name();
  w.file().metadata["spec"] = spec.to_json().dump();
  // the schedule's timing (docs/spec.md): checkpoints without this key ran step t at lr(t)
  w.file().metadata["lr_timing"] = "deepspeed";
  // a Hugging Face model's config.json fields (--resume compares them: load_checkpoint)
  if (const auto* m = dynamic_cast<const HfModel*>(&wl))
    w.file().metadata["hf_config"] = hf::config_record(m->hf_config());
  std::vector<StepFile> files;
  files.push_back({"model.safetensors", encode_safetensors((tmp / "model.safetensors").string(), model, true)});
  files.push_back({"state.safetensors", encode_safetensors((tmp / "state.safetensors").string(), w.file(), true)});
  return dir_.install(step, files);
}

// ---------------------------------------------------------------- the loader
CheckpointInfo find_checkpoint(const std::string& path) {
  fs::path p(path);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) throw InputError(path, "not a checkpoint directory (nor a step directory of one)");
  const std::string name = read_latest(p.string(), true);
  if (!name.empty()) {
    p /= name;
    if (!fs::is_directory(p, ec))
      throw InputError((fs::path(path) / "latest").string(), "names '" + name + "', which is not a directory here");
  }
  const fs::path st = p / "state.safetensors";
  if (!fs::exists(st, ec) || !fs::exists(p / "model.safetensors", ec))
    throw InputError(p.string(), "no model.safetensors and state.safetensors here (not a checkpoint)");
  const StFile f = read_safetensors_metadata(st.string());
  auto meta = [&](const char* key) -> const std::string& {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end()) throw InputError(st.string() + ": __metadata__." + key, "missing (not a zenflow state file?)");
    return it->second;
  };
  if (meta("format") != "zenflow-state")
    throw InputError(st.string() + ": __metadata__.format", "'" + meta("format").substr(0, 40) + "', expected 'zenflow-state'");
  if (!f.metadata.count("zf_crc32"))
    throw InputError(st.string() + ": __metadata__.zf_crc32", "missing: the file has no checksum (not written by zenflow's checkpoint writer)");
  CheckpointInfo ck;
  ck.dir = p.string();
  ck.step_text = meta("step");
  ck.step = parse_step(ck.step_text, st.string() + ": __metadata__.step");
  const int64_t named = step_of_dir_name(p.filename().string());
  if (named >= 0 && named != ck.step)
    throw InputError(st.string() + ": __metadata__.step", std::to_string(ck.step) + ", but the directory is " +
                                                             p.filename().string());
  ck.spec_text = meta("spec");
  const std::string where = st.string() + ": __metadata__.spec";
  constexpr int kMaxDepth = 32;  // a spec nests 3 levels
  if (json_nesting_depth(ck.spec_text, kMaxDepth) > kMaxDepth)
    throw InputError(where, "nests arrays/objects more than " + std::to_string(kMaxDepth) + " levels deep (a spec has 3)");
  try {
    ck.spec = json::parse(ck.spec_text);
  } catch (const std::exception& e) {
    throw InputError(where, std::string("not valid JSON: ") + e.what());
  }
  {
    auto it = f.metadata.find("lr_timing");
    ck.lr_timing = it == f.metadata.end() ? "step" : it->second;
    if (ck.lr_timing != "step" && ck.lr_timing != "deepspeed")
      throw InputError(st.string() + ": __metadata__.lr_timing", "'" + ck.lr_timing.substr(0, 40) + "', expected 'deepspeed' or 'step'");
  }
  validate_spec(ck.spec, where);
  return ck;
}

void check_compatible(const CheckpointInfo& ck, const Spec& spec) {
  validate_spec(ck.spec, ck.dir + ": spec");  // callers may have built ck themselves
  const json now = spec.to_json();
  auto differ = [&](const std::string& field, const json& a, const json& b) {
    if (a != b)
      throw InputError(ck.dir + ": " + field, "the checkpoint was written with " + brief(a) + ", this run has " + brief(b));
  };
  for (const ResumeCheck& c : resume_checks(spec)) {  // the spec's field table says which must match
    differ(c.name, c.value(ck.spec), c.value(now));
    if (c.name == "scheduler" && !spec.scheduler.type.empty() && ck.lr_timing != "deepspeed")
      throw InputError(ck.dir + ": scheduler", "the checkpoint ran step t at the schedule's lr(t) (before 2026-12-01); "
                                               "this engine runs it at lr(t - 1) as DeepSpeed does: restart the run");
  }
}

void load_checkpoint(const CheckpointInfo& ck, Workload& wl, Strategy& strat,
                     const std::function<void(const StateReader&)>& extra) {
  const std::string model = ck.dir + "/model.safetensors", st = ck.dir + "/state.safetensors";
  const StFile mm = read_safetensors_metadata(model);
  auto ms = mm.metadata.find("step");  // absent in checkpoints written before it was added
  if (ms != mm.metadata.end() && ms->second != ck.step_text)
    throw InputError(model + ": __metadata__.step", "'" + ms->second.substr(0, 40) + "', but state.safetensors is at step " +
                                                        ck.step_text + " (files of two different checkpoints)");
  // config.json's fields before the weights: an edit of rope_theta or rms_norm_eps changes no
  // shape, and one that does is named better here than by a tensor's shape
  if (const auto* m = dynamic_cast<const HfModel*>(&wl)) {
    const StFile sm = read_safetensors_metadata(st);
    if (auto it = sm.metadata.find("hf_config"); it != sm.metadata.end()) {  // absent before 2026-12-05
      std::string what;
      const std::string field = hf::config_record_difference(it->second, hf::config_record(m->hf_config()), &what);
      if (!what.empty())
        throw InputError(m->hf_config().path + (field.empty() ? "" : ": " + field),
                         what + " (--resume continues the checkpoint's model: restore config.json or start a new run)");
    }
  }
  load_weights(wl, model);
  StFile f = read_safetensors(st);
  // the files find_checkpoint validated (a writer may have replaced the step directory since)
  if (f.metadata["step"] != ck.step_text || f.metadata["spec"] != ck.spec_text)
    throw InputError(st, "changed while it was being read (is another process writing this checkpoint directory?)");
  if (f.metadata["strategy"] != strat.name())
    throw InputError(st + ": __metadata__.strategy", "'" + f.metadata["strategy"].substr(0, 40) + "', this run uses '" +
                                                         strat.name() + "'");
  // the strategies' counters run on applied updates: with fp16, the checkpoint's step less the
  // steps skipped for an overflow (the trainer's extra state checks applied + skipped = step + 1)
  int64_t last_update = ck.step;
  if (f.tensors.count("trainer.fp16.applied")) {
    const std::vector<int64_t> a = StateReader(f, st, ck.step).i64("trainer.fp16.applied");
    if (a.size() != 1 || a[0] < 0 || a[0] > ck.step + 1)
      throw InputError(st + ": trainer.fp16.applied", "expected one count in [0, " + std::to_string(ck.step + 1) + "]");
    last_update = a[0] - 1;
  }
  const StateReader r(f, st, last_update);
  strat.load_state(r);
  if (extra) extra(r);
}

}  // namespace zf
