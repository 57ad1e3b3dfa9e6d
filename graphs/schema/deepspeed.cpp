// A DeepSpeed config as a patch to a spec's JSON; the spec's parser then reads the patched JSON.
// Each DeepSpeed block is validated here as well, so that its errors name the DeepSpeed file.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>

#include "graphs/schema/deepspeed.hpp"
#include "graphs/schema/field_table.hpp"
#include "graphs/schema/fields.hpp"
#include "runtime/error.hpp"

namespace zf {
namespace {

using json = nlohmann::json;

class Patch {
 public:
  Patch(const std::string& src, std::vector<std::string>* notes) : src_(src), notes_(notes) {}
  const std::string& src() const { return src_; }
  void note(const std::string& s) const {
    if (notes_) notes_->push_back(s);
  }
  json j = json::object();

 private:
  const std::string& src_;
  std::vector<std::string>* notes_;
};

// DeepSpeed's batch arithmetic (runtime/config.py _configure_train_batch_size):
// train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x ranks; any
// two give the third (train_batch_size alone: accumulation 1).
void resolve_batch(Fields& top, int64_t& tbs, int64_t& micro, int64_t& gas, int ranks) {
  const std::string rk = std::to_string(ranks) + " rank(s)";
  if (tbs && micro && gas) {
    if (tbs != micro * gas * ranks)
      top.fail("train_batch_size", std::to_string(tbs) + " != train_micro_batch_size_per_gpu " + std::to_string(micro) +
                                       " x gradient_accumulation_steps " + std::to_string(gas) + " x " + rk);
  } else if (tbs && micro) {
    if (tbs % (micro * ranks))
      top.fail("train_batch_size", std::to_string(tbs) + " is not a multiple of train_micro_batch_size_per_gpu " +
                                       std::to_string(micro) + " x " + rk);
    gas = tbs / (micro * ranks);
  } else if (tbs && gas) {
    if (tbs % (gas * ranks))
      top.fail("train_batch_size", std::to_string(tbs) + " is not a multiple of gradient_accumulation_steps " +
                                       std::to_string(gas) + " x " + rk);
    micro = tbs / (gas * ranks);
  } else if (micro) {
    gas = gas ? gas : 1;
    tbs = micro * gas * ranks;
  } else if (tbs) {
    if (tbs % ranks) top.fail("train_batch_size", std::to_string(tbs) + " is not a multiple of the " + rk);
    gas = 1;
    micro = tbs / ranks;
  } else if (gas) {
    top.fail("gradient_accumulation_steps", "needs train_batch_size or train_micro_batch_size_per_gpu (DeepSpeed's rule)");
  }
}

bool has_zenflow(const json& ds) {
  return ds.contains("zero_optimization") && ds["zero_optimization"].is_object() &&
         ds["zero_optimization"].contains("zenflow");
}

void patch_batch(Fields& top, const json& ds, int ranks, Patch& p) {
  int64_t tbs = 0, micro = 0, gas = 0;
  top.integer("train_batch_size", tbs, 1, 1 << 20);
  top.integer("train_micro_batch_size_per_gpu", micro, 1, 1 << 20);
  top.integer("gradient_accumulation_steps", gas, 1, 1 << 16);
  resolve_batch(top, tbs, micro, gas, ranks);
  if (!tbs) return;
  if (has_zenflow(ds)) {
    // DeepSpeed's ZenFlow engine (runtime/zenflow/engine.py configure_zenflow) sets the
    // accumulation steps to update_interval: every step is one micro-batch of every rank, and
    // the host accumulates update_interval of them (docs/zenflow.md)
    p.j["train"]["batch_size"] = micro * ranks;
    if (gas > 1)
      p.note("gradient_accumulation_steps " + std::to_string(gas) +
             " (DeepSpeed's ZenFlow replaces it by zenflow.update_interval: each step is one micro-batch of " +
             std::to_string(micro) + " per rank)");
  } else {
    p.j["train"]["batch_size"] = tbs;
    if (gas > 1) p.j["train"]["gradient_accumulation_steps"] = gas;
  }
}

// fp16.enabled: DeepSpeed's loss scaling (docs/spec.md), its keys validated as the spec's fp16 block.
void patch_fp16(Fields& f, Patch& p) {
  Spec c;
  read_block(f, "fp16", c);
  if (auto* a = f.find("auto_cast"))
    if (!a->is_boolean() || a->get<bool>())
      f.fail(f.at("auto_cast"), "only false: the engine's model computes in its own precision (docs/spec.md)");
  if (auto* m = f.find("fp16_master_weights_and_grads"))
    if (!m->is_boolean() || m->get<bool>()) f.fail(f.at("fp16_master_weights_and_grads"), "only false: the master weights are fp32");
  f.finish();
  p.j["precision"] = "fp16";
  p.j["fp16"] = block_json(c, "fp16");
}

void patch_precision(Fields& top, Patch& p) {
  bool fp16_on = false;
  for (const char* prec : {"fp16", "bf16"}) {
    const json* b = top.object(prec);
    if (!b) continue;
    Fields f(*b, prec, p.src());
    bool enabled = false;
    if (auto* e = f.find("enabled")) {
      if (!e->is_boolean()) f.fail(f.at("enabled"), "expected true or false");
      enabled = e->get<bool>();
    }
    if (enabled && std::string(prec) == "fp16") {
      patch_fp16(f, p);
      fp16_on = true;
      continue;
    }
    for (auto& [k, v] : b->items()) f.find(k);  // other precision knobs only matter when enabled
    if (enabled && fp16_on) f.fail(f.at("enabled"), "fp16 and bf16 cannot both be enabled (as DeepSpeed)");
    if (enabled) {
      p.j["precision"] = "bf16";
      // bf16 masters or moments would change every update: refused; the others are noted
      for (const char* k : {"bf16_master_weights_and_grads", "bf16_optimizer_states"})
        if (auto v = b->find(k); v != b->end() && (!v->is_boolean() || v->get<bool>()))
          f.fail(f.at(k), "only false: the masters and moments are fp32 (docs/spec.md)");
      for (auto& [k, v] : b->items())
        if (k != "enabled") p.note(std::string(prec) + "." + k + " (DeepSpeed's bf16 tuning; this engine's bf16 is docs/spec.md's)");
    }
  }
}

// communication_data_type (DeepSpeed's runtime/config.py: fp32, fp16 or bf16, any case; null or
// absent: the precision's format): the gradients' wire (docs/data-parallel.md)
void patch_communication_data_type(Fields& top, Patch& p) {
  const json* v = top.find("communication_data_type");
  if (!v || v->is_null()) return;
  std::string t = v->is_string() ? v->get<std::string>() : "";
  for (char& c : t) c = (char)std::tolower((unsigned char)c);
  if (t != "fp32" && t != "fp16" && t != "bf16")
    top.fail("communication_data_type", "expected \"fp32\", \"fp16\" or \"bf16\" (DeepSpeed's), got " + v->dump());
  p.j["communication_data_type"] = t;
}

// DeepSpeed's scaling around the gradient all-reduce (stage_1_and_2.py,
// gradient_reduction_w_predivide): its defaults are this engine's mean after the sum; the others
// round the mean differently (and move fp16's range), so they are refused.
void patch_gradient_scaling(Fields& top, Patch& p, int ranks) {
  double f = 1.0;
  top.number("gradient_predivide_factor", f, 0.0, 1e9, true);
  if (f != 1.0)
    top.fail("gradient_predivide_factor", "only 1 (DeepSpeed's default): the gradients are summed, then divided by the "
                                          "ranks (docs/data-parallel.md)");
  if (auto* v = top.find("prescale_gradients")) {
    if (!v->is_boolean()) top.fail("prescale_gradients", "expected true or false");
    if (v->get<bool>() && ranks > 1)
      top.fail("prescale_gradients", "only false on several ranks: the gradients are summed, then divided by the ranks "
                                     "(docs/data-parallel.md)");
    if (v->get<bool>()) p.note("prescale_gradients (one process: divided by 1 before a sum of one)");
  }
}

// DeepSpeed's defaults, warmup_max_lr 0.001 included.
void patch_scheduler(Fields& top, Patch& p) {
  const json* sc = top.object("scheduler");
  if (!sc) return;
  Fields f(*sc, "scheduler", p.src());
  const LrSchedule c = LrSchedule::parse(f);
  // WarmupDecayLR's warmup_max_lr defaults to 0.001; WarmupLR's to the optimizer's rate (None in
  // lr_schedules.py: the param group's lr); WarmupCosineLR scales the optimizer's rate
  p.j["scheduler"] = c.to_json(c.type == "WarmupDecayLR" ? 0.001 : -1.0);
}

void patch_optimizer_params(Fields& q, const json& pp, Patch& p) {
  double lr = 1e-3, eps = 1e-8, wd = 0.01;
  q.number("lr", lr, 0.0, 10.0, true);
  q.number("eps", eps, 0.0, 1.0, true);
  q.number("weight_decay", wd, 0.0, 1.0);
  if (auto* b = q.find("betas")) {  // validated here too, so that errors name the DeepSpeed file
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number())
      q.fail("optimizer.params.betas", "expected [beta1, beta2], two numbers in [0, 1)");
    for (int i = 0; i < 2; ++i) {
      const double x = (*b)[i].get<double>();
      if (!(x >= 0 && x < 1)) q.fail("optimizer.params.betas[" + std::to_string(i) + "]", "must be in [0, 1)");
    }
    p.j["optimizer"]["betas"] = *b;
  }
  if (auto* m = q.find("adam_w_mode"))
    if (!m->is_boolean() || !m->get<bool>()) q.fail("optimizer.params.adam_w_mode", "only AdamW (adam_w_mode: true) is supported");
  if (auto* a = q.find("amsgrad"))
    if (!a->is_boolean() || a->get<bool>()) q.fail("optimizer.params.amsgrad", "AMSGrad is not supported");
  if (q.find("torch_adam")) p.note("optimizer.params.torch_adam (implementation choice)");
  q.finish();
  if (pp.contains("lr")) p.j["optimizer"]["lr"] = lr;
  if (pp.contains("eps")) p.j["optimizer"]["eps"] = eps;
  if (pp.contains("weight_decay")) p.j["optimizer"]["weight_decay"] = wd;
}

void patch_optimizer(Fields& top, Patch& p) {
  const json* o = top.object("optimizer");
  if (!o) return;
  Fields f(*o, "optimizer", p.src());
  std::string type;
  f.str("type", type);
  if (type != "AdamW" && type != "Adam" && type != "adamw" && type != "adam")
    f.fail("optimizer.type", "'" + type + "' is not supported: AdamW (or Adam, which DeepSpeed runs as AdamW)");
  if (auto* pp = f.object("params")) {
    Fields q(*pp, "optimizer.params", p.src());
    patch_optimizer_params(q, *pp, p);
  }
  f.finish();
}

// zero_optimization.offload_optimizer: true when the optimizer is offloaded to the cpu; ratio:
// Twin-Flow's (DeepSpeed's offload_config.py: default 1, in [0, 1]).
bool read_offload(Fields& f, Patch& p, double& ratio) {
  const json* off = f.object("offload_optimizer");
  if (!off) return false;
  Fields g(*off, "zero_optimization.offload_optimizer", p.src());
  std::string dev = "none";
  g.str("device", dev, {"cpu", "none", "nvme"});
  if (dev == "nvme") g.fail(g.at("device"), "NVMe offload is not supported (cpu or none)");
  // pin_memory: host buffers are pinned whenever CUDA workers exist
  if (auto* pin = g.find("pin_memory"); pin && !pin->is_boolean()) g.fail(g.at("pin_memory"), "expected true or false");
  for (const char* k : {"buffer_count", "fast_init"})  // NVMe's buffers and initialisation
    if (g.find(k)) p.note(std::string("zero_optimization.offload_optimizer.") + k + " (NVMe offload tuning)");
  g.number("ratio", ratio, 0.0, 1.0);
  g.finish();
  return dev == "cpu";
}

// DeepSpeed's Twin-Flow (ZeRO-Offload++): offload_optimizer.ratio < 1 is DeepSpeed's stage 3 only
// (runtime/zero/config.py, offload_ratio_check); here a split runs in one process (where every
// stage is stage 0) and is refused on several ranks (zero_offload.cpp). With the optimizer on the cpu the ratio
// and sub_group_size become the spec's (graphs/strategies/twin_flow.hpp); without it DeepSpeed
// ignores the ratio (stage3.py: only an offloaded optimizer is split).
void patch_twin_flow(const Fields& f, const json& zo, Patch& p, int stage, bool offload_cpu, double ratio) {
  if (ratio < 1.0 && stage != 3)
    f.fail("zero_optimization.offload_optimizer.ratio",
           json(ratio).dump() + " needs zero_optimization.stage 3 (DeepSpeed's own check, runtime/zero/config.py: "
                                   "\"Partial offloading only supported for ZeRO Stage 3.\")");
  if (ratio < 1.0 && offload_cpu) {
    p.j["zero_optimization"]["offload_optimizer"]["ratio"] = ratio;
    if (zo.contains("sub_group_size")) p.j["zero_optimization"]["sub_group_size"] = zo["sub_group_size"];
  } else {
    if (ratio < 1.0) p.note("zero_optimization.offload_optimizer.ratio (the optimizer is not offloaded: DeepSpeed ignores it)");
    if (zo.contains("sub_group_size"))
      p.note("zero_optimization.sub_group_size (without a Twin-Flow ratio below 1: DeepSpeed's stage-3 tiling)");
  }
}

// activation_checkpointing (DeepSpeed's deepspeed/runtime/activation_checkpointing/config.py): it
// configures deepspeed.checkpointing, which a model's code calls; like DeepSpeed, the block turns
// nothing on by itself (Hugging Face's gradient_checkpointing does: train.activation_checkpointing,
// docs/spec.md). What the engine cannot honour is refused by name; the rest is noted.
void patch_activation_checkpointing(Fields& top, Patch& p) {
  const json* a = top.object("activation_checkpointing");
  if (!a) return;
  Fields f(*a, "activation_checkpointing", p.src());
  const std::pair<const char*, const char*> refused[] = {
      {"partition_activations", "splits each checkpoint over the model-parallel ranks; the engine has no model "
                                "parallelism (its data-parallel ranks each hold their own checkpoints)"},
      {"contiguous_memory_optimization", "copies the partitioned checkpoints into one preallocated buffer; the "
                                         "engine's checkpoints are StarPU buffers of their own"},
      {"cpu_checkpointing", "moves the checkpoints to host memory; the engine keeps them on the device"}};
  for (const auto& [k, why] : refused) {
    bool v = false;
    f.boolean(k, v);
    if (v) f.fail(f.at(k), std::string("true is not supported: it ") + why + " (false, or leave it out)");
  }
  if (const json* n = f.find("number_checkpoints")) {
    if (!n->is_null() && !(n->is_number_integer() && n->get<int64_t>() >= 1))
      f.fail(f.at("number_checkpoints"), "expected null or a positive integer, got " + n->dump());
    p.note("activation_checkpointing.number_checkpoints (the size of contiguous_memory_optimization's buffer)");
  }
  bool v = false;
  f.boolean("synchronize_checkpoint_boundary", v);
  if (f.find("synchronize_checkpoint_boundary"))
    p.note("activation_checkpointing.synchronize_checkpoint_boundary (StarPU orders the recomputation by its data)");
  f.boolean("profile", v);
  if (f.find("profile"))
    p.note("activation_checkpointing.profile (the trace times the recomputed forward's tasks, \"recompute.*\")");
  f.finish();
}

// zero_optimization: the offload, ZeRO stage and zenflow block; returns the strategy it selects.
std::string patch_zero(Fields& top, Patch& p) {
  const json* zo = top.object("zero_optimization");
  if (!zo) return "device-adam";
  Fields f(*zo, "zero_optimization", p.src());
  int stage = 0;
  f.integer("stage", stage, 0, 3);
  double ratio = 1.0;
  const bool offload_cpu = read_offload(f, p, ratio);
  bool zenflow = false;
  if (auto* zf = f.object("zenflow")) {
    Fields g(*zf, "zero_optimization.zenflow", p.src());
    Spec z;
    parse_zenflow_block(g, z);  // validated here so errors name the DeepSpeed file
    p.j["zenflow"] = *zf;
    zenflow = true;
  }
  // reduce_bucket_size: the bound on the gradients in flight (graphs/train/grad_stream.hpp); "auto"
  // (Hugging Face's, from the model's hidden size) stays a note
  const json* rbs = f.find("reduce_bucket_size");
  int64_t bucket = 0;
  const bool has_bucket = rbs && !rbs->is_string();
  if (has_bucket) f.integer("reduce_bucket_size", bucket, 1, INT64_MAX);
  for (const char* k : {"contiguous_gradients", "overlap_comm", "reduce_scatter", "reduce_bucket_size",
                        "allgather_partitions", "allgather_bucket_size", "round_robin_gradients",
                        "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                        "stage3_max_reuse_distance",
                        "stage3_gather_16bit_weights_on_model_save", "elastic_checkpoint"})
    if (f.find(k) && !(has_bucket && std::string(k) == "reduce_bucket_size"))
      p.note(std::string("zero_optimization.") + k + " (communication tuning)");
  int64_t sub_group_size = 0;  // DeepSpeed's Field(ge=0); used by patch_twin_flow
  f.integer("sub_group_size", sub_group_size, 0, INT64_MAX);
  // DeepSpeed's default is 1e9 elements; absent, the spec's 0: the gathered values bounded to one layer
  const bool has_max_live = f.find("stage3_max_live_parameters") != nullptr;
  int64_t max_live = 0;
  f.integer("stage3_max_live_parameters", max_live, 0, INT64_MAX);
  f.finish();
  if (zenflow && !offload_cpu)
    f.fail("zero_optimization.offload_optimizer.device", "ZenFlow requires the optimizer offloaded to the cpu (DeepSpeed's constraint)");
  if (zenflow && stage == 0) f.fail("zero_optimization.stage", "ZenFlow runs with ZeRO stage 1, 2 or 3");
  if ((offload_cpu && stage > 0) || stage == 1 || stage == 2)  // without offload: device-adam's ZeRO 1 / 2
    p.j["zero_optimization"] = {{"stage", stage}};
  else if (stage > 0)  // stage 3 without offload: device-adam's state on the device, replicated (stage 0)
    p.note("zero_optimization.stage 3 (no optimizer offload: device-adam partitions at stages 1 and 2 only; its "
           "state stays on the device, replicated as with stage 0)");
  if (has_max_live && offload_cpu && stage == 3)
    p.j["zero_optimization"]["stage3_max_live_parameters"] = max_live;
  else if (has_max_live)
    p.note("zero_optimization.stage3_max_live_parameters (read at stage 3 with an optimizer offload only)");
  if (has_bucket) p.j["zero_optimization"]["reduce_bucket_size"] = bucket;
  patch_twin_flow(f, *zo, p, stage, offload_cpu, ratio);
  return zenflow ? "zenflow" : offload_cpu ? "zero-offload" : "device-adam";
}

// DeepSpeed's "auto" values, which Hugging Face Trainer fills from its TrainingArguments
// (transformers/integrations/deepspeed.py, trainer_config_process): here from the spec the config
// is applied to (its value, else the spec's default), as the Trainer does from its own. An "auto"
// with nothing to fill it from is an InputError naming the field; the communication knobs' "auto"
// (reduce_bucket_size, ...) stays: they are notes, no effect here. Other keys' "auto" is the
// translator's to read (zenflow's select_interval and update_interval take it).
void resolve_auto(json& ds, const json& spec, const std::string& path, int ranks) {
  if (!ds.is_object()) return;
  const Spec d;
  auto spec_value = [&](const char* block, const char* key, const json& def) -> json {
    const json* b = block[0] ? (spec.contains(block) && spec[block].is_object() ? &spec[block] : nullptr) : &spec;
    return b && b->is_object() && b->contains(key) ? (*b)[key] : def;
  };
  auto is_auto = [](const json& o, const char* k) {
    return o.is_object() && o.contains(k) && o[k].is_string() && o[k].get<std::string>() == "auto";
  };
  const json gas = spec_value("train", "gradient_accumulation_steps", d.train.gradient_accumulation_steps);
  const json batch = spec_value("train", "batch_size", d.train.batch_size);
  if (is_auto(ds, "gradient_accumulation_steps")) ds["gradient_accumulation_steps"] = gas;
  if (is_auto(ds, "train_batch_size")) ds["train_batch_size"] = batch;
  if (is_auto(ds, "train_micro_batch_size_per_gpu")) {
    const json& a = ds.contains("gradient_accumulation_steps") ? ds["gradient_accumulation_steps"] : gas;
    if (!batch.is_number_integer() || !a.is_number_integer() || a.get<int64_t>() < 1 ||
        batch.get<int64_t>() % (a.get<int64_t>() * ranks) != 0)
      throw InputError(path + ": train_micro_batch_size_per_gpu",
                       "\"auto\": the spec's train.batch_size " + batch.dump() + " is not divisible by the " +
                           "accumulation steps " + a.dump() + " x " + std::to_string(ranks) + " rank(s)");
    ds["train_micro_batch_size_per_gpu"] = batch.get<int64_t>() / (a.get<int64_t>() * ranks);
  }
  if (is_auto(ds, "gradient_clipping")) ds["gradient_clipping"] = spec_value("", "gradient_clipping", 0.0);
  const std::string precision = spec_value("", "precision", d.precision).is_string()
                                    ? spec_value("", "precision", d.precision).get<std::string>() : d.precision;
  for (const char* p : {"bf16", "fp16"})
    if (ds.contains(p) && is_auto(ds[p], "enabled")) ds[p]["enabled"] = precision == p;
  if (ds.contains("optimizer") && ds["optimizer"].is_object() && ds["optimizer"].contains("params")) {
    json& q = ds["optimizer"]["params"];
    if (is_auto(q, "lr")) q["lr"] = spec_value("optimizer", "lr", d.optimizer.lr);
    if (is_auto(q, "eps")) q["eps"] = spec_value("optimizer", "eps", d.optimizer.eps);
    if (is_auto(q, "weight_decay"))
      q["weight_decay"] = spec_value("optimizer", "weight_decay", d.optimizer.weight_decay);
    if (is_auto(q, "betas"))
      q["betas"] = spec_value("optimizer", "betas", json::array({d.optimizer.beta1, d.optimizer.beta2}));
  }
  if (ds.contains("scheduler") && ds["scheduler"].is_object() && ds["scheduler"].contains("params")) {
    json& q = ds["scheduler"]["params"];
    if (is_auto(q, "warmup_min_lr")) q["warmup_min_lr"] = 0.0;  // the Trainer's: 0
    if (is_auto(q, "warmup_max_lr")) q["warmup_max_lr"] = spec_value("optimizer", "lr", d.optimizer.lr);
    // the Trainer's default warmup_steps 0, which DeepSpeed's WarmupLR raises to max(2, .)
    if (is_auto(q, "warmup_num_steps")) q["warmup_num_steps"] = 2;
    if (is_auto(q, "total_num_steps")) {
      const json steps = spec_value("train", "steps", 0);
      if (!steps.is_number_integer() || steps.get<int64_t>() < 1)
        throw InputError(path + ": scheduler.params.total_num_steps",
                         "\"auto\" is the run's step count, which Hugging Face Trainer knows and the spec does not "
                         "say (train.steps; with train.epochs it is known only once the data is read): give --steps "
                         "N, or a number here");
      q["total_num_steps"] = steps;
    }
  }
}

void merge_patch(json& dst, const json& patch) {
  for (auto& [k, v] : patch.items()) {
    if (v.is_object() && dst.contains(k) && dst[k].is_object())
      merge_patch(dst[k], v);
    else
      dst[k] = v;
  }
}

}  // namespace

json deepspeed_patch(const json& ds, const std::string& src, std::vector<std::string>* notes, int ranks) {
  Fields top(ds, "", src);
  Patch p(src, notes);
  patch_batch(top, ds, ranks, p);
  double clip = 0.0;
  top.number("gradient_clipping", clip, 0.0, 1e9);
  if (clip > 0) p.j["gradient_clipping"] = clip;
  patch_precision(top, p);
  patch_communication_data_type(top, p);
  for (const char* k : {"steps_per_print", "wall_clock_breakdown", "dump_state", "zero_allow_untested_optimizer"})
    if (top.find(k)) p.note(std::string(k) + " (logging, or a permission)");
  patch_gradient_scaling(top, p, ranks);
  patch_scheduler(top, p);
  patch_optimizer(top, p);
  patch_activation_checkpointing(top, p);
  const std::string strategy = patch_zero(top, p);
  top.finish();
  p.j["strategy"] = strategy;
  return p.j;
}

void apply_deepspeed(json& j, const std::string& path, int ranks, const json& auto_from) {
  std::vector<std::string> notes;
  json ds = read_json_file(path);
  resolve_auto(ds, auto_from, path, ranks);
  json patch = deepspeed_patch(ds, path, &notes, ranks);
  for (const char* k : {"zenflow", "scheduler", "fp16"})  // the DeepSpeed block replaces the spec's
    if (patch.contains(k)) j.erase(k);
  merge_patch(j, patch);
  for (auto& n : notes) std::fprintf(stderr, "zenflow-run: note: %s: %s accepted, no effect here\n", path.c_str(), n.c_str());
}

void record_deepspeed_origins(Spec& s, const std::string& path, const std::vector<std::string>& overrides) {
  auto overridden = [&](const std::string& field) {
    return std::any_of(overrides.begin(), overrides.end(), [&](const std::string& o) {
      return o.rfind(field + "=", 0) == 0 || o.rfind(field.substr(0, field.find('.')) + "=", 0) == 0;
    });
  };
  const json ds = read_json_file(path);
  if ((ds.contains("train_batch_size") || ds.contains("train_micro_batch_size_per_gpu")) && !overridden("train.batch_size"))
    s.field_origin["train.batch_size"] =
        path + ": " + (ds.contains("train_batch_size") ? "train_batch_size" : "train_micro_batch_size_per_gpu");
  if (has_zenflow(ds))
    for (const char* k : {"select_interval", "update_interval", "topk_ratio", "select_strategy", "full_warm_up_rounds"})
      if (!overridden(std::string("zenflow.") + k))
        s.field_origin[std::string("zenflow.") + k] = path + ": zero_optimization.zenflow." + k;
}

}  // namespace zf
