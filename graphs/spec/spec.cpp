#include "graphs/spec/spec.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/error.hpp"
#include "runtime/json_input.hpp"
#include "runtime/runtime.hpp"

namespace zf {
namespace {

using json = nlohmann::json;

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number with a fraction";
    default: return "a number";
  }
}

// Reads the fields of one JSON object; finish() rejects keys nobody asked for.
class Fields {
 public:
  Fields(const json& j, std::string path, const std::string& source)
      : j_(j), path_(std::move(path)), source_(source) {
    if (!j.is_object()) fail(path_.empty() ? "(top level)" : path_, "expected an object, got " + type_name(j));
  }
  std::string at(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& source() const { return source_; }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw InputError(source_ + ": " + field, what);
  }
  const json* find(const std::string& key) {
    seen_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  void str(const std::string& key, std::string& out, std::initializer_list<const char*> allowed = {}) {
    if (auto* v = find(key)) {
      if (!v->is_string()) fail(at(key), "expected a string, got " + type_name(*v));
      out = v->get<std::string>();
    }
    if (allowed.size()) {
      std::string list;
      for (auto a : allowed) {
        if (out == a) return;
        list += (list.empty() ? "" : ", ") + std::string(a);
      }
      fail(at(key), "'" + out + "' is not one of: " + list);
    }
  }
  template <class I>
  void integer(const std::string& key, I& out, int64_t lo, int64_t hi) {
    if (auto* v = find(key)) {
      if (!v->is_number_integer()) fail(at(key), "expected an integer, got " + type_name(*v));
      if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT64_MAX)
        fail(at(key), v->dump() + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      int64_t x = v->get<int64_t>();
      if (x < lo || x > hi)
        fail(at(key), std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      out = (I)x;
    }
  }
  void number(const std::string& key, double& out, double lo, double hi, bool open_lo = false) {
    if (auto* v = find(key)) {
      if (!v->is_number()) fail(at(key), "expected a number, got " + type_name(*v));
      double x = v->get<double>();
      if (!(x >= lo && x <= hi) || (open_lo && x == lo)) {
        std::ostringstream os;
        os << x << " is outside " << (open_lo ? "(" : "[") << lo << ", " << hi << "]";
        fail(at(key), os.str());
      }
      out = x;
    }
  }
  void boolean(const std::string& key, bool& out) {
    if (auto* v = find(key)) {
      if (!v->is_boolean()) fail(at(key), "expected true or false, got " + type_name(*v));
      out = v->get<bool>();
    }
  }
  const json* object(const std::string& key) {
    const json* v = find(key);
    if (v && !v->is_object()) fail(at(key), "expected an object, got " + type_name(*v));
    return v;
  }
  void finish() const {
    for (auto& [k, v] : j_.items())
      if (!seen_.count(k)) {
        std::string known;
        for (auto& s : seen_) known += (known.empty() ? "" : ", ") + s;
        fail(at(k), "unknown key (known here: " + known + ")");
      }
  }

 private:
  const json& j_;
  std::string path_;
  const std::string& source_;
  std::set<std::string> seen_;
};

// DeepSpeed's zenflow keys (deepspeed/runtime/zenflow/zenflow_config.py) and ours.
void parse_zenflow(Fields& f, Spec::ZenFlow& z) {
  f.number("topk_ratio", z.topk_ratio, 0.0, 1.0);
  f.str("select_strategy", z.select_strategy, {"auto", "step", "epoch"});
  auto int_or_auto = [&](const char* key, int64_t& out) {
    if (auto* v = f.find(key)) {
      if (v->is_string()) {
        if (v->get<std::string>() != "auto") f.fail(f.at(key), "expected \"auto\" or a positive integer");
        out = -1;
      } else if (v->is_number_integer()) {
        // at most INT32_MAX (no run is longer): interval x steps per epoch cannot overflow
        if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT32_MAX)
          f.fail(f.at(key), v->dump() + " is outside [1, " + std::to_string(INT32_MAX) + "]");
        if (v->get<int64_t>() < 1) f.fail(f.at(key), "expected \"auto\" or a positive integer, got " + std::to_string(v->get<int64_t>()));
        out = v->get<int64_t>();
      } else {
        f.fail(f.at(key), "expected \"auto\" or a positive integer, got " + type_name(*v));
      }
    }
  };
  int_or_auto("select_interval", z.select_interval);
  int_or_auto("update_interval", z.update_interval);
  auto boolean = [&](const char* key, bool& out) {
    if (auto* v = f.find(key)) {
      if (!v->is_boolean()) f.fail(f.at(key), "expected true or false, got " + type_name(*v));
      out = v->get<bool>();
    }
  };
  boolean("overlap_step", z.overlap_step);
  boolean("offload", z.offload);
  f.number("auto_ratio", z.auto_ratio, 0.0, 1.0);
  f.integer("full_warm_up_rounds", z.full_warm_up_rounds, 0, INT32_MAX);
  if (auto* v = f.find("pt_reserved_cores_perc")) {
    // DeepSpeed: "pt_reserved_cores_perc must be a float"
    if (!v->is_number_float()) f.fail(f.at("pt_reserved_cores_perc"), "expected a float in [0, 1] (e.g. 0.5), got " + type_name(*v));
    z.cores_perc_given = true;
  }
  f.number("pt_reserved_cores_perc", z.pt_reserved_cores_perc, 0.0, 1.0);
  f.integer("max_staleness", z.max_staleness, 0, 64);
  f.str("importance", z.importance, {"l1", "l2"});
  boolean("reset_host_moments", z.reset_host_moments);
  f.str("semantics", z.semantics, {"zenflow", "deepspeed"});
  f.finish();
  if (z.select_strategy == "auto" && z.select_interval != -1)
    f.fail(f.at("select_interval"), "must be \"auto\" with select_strategy \"auto\" (which reselects once per epoch)");
  if (z.select_strategy != "auto" && z.select_interval == -1)
    f.fail(f.at("select_interval"), "must be an integer with select_strategy \"" + z.select_strategy + "\"");
  if (z.select_strategy == "step" && z.update_interval > 0 && z.select_interval < z.update_interval)
    f.fail(f.at("select_interval"), std::to_string(z.select_interval) + " must be >= update_interval (" +
                                        std::to_string(z.update_interval) + ")");
  if (!z.overlap_step && z.max_staleness > 0)
    f.fail(f.at("max_staleness"), "must be 0 without overlap_step: true (updates are synchronous)");
  // DeepSpeed's rules are implemented for a fixed update_interval only (docs/zenflow.md)
  if (z.deepspeed_rules() && z.update_interval < 0)
    f.fail(f.at("semantics"), "\"deepspeed\" needs an integer update_interval (DeepSpeed's \"auto\" divides the loss "
                              "by zero accumulation steps; use semantics \"zenflow\" for \"auto\")");
  if (z.deepspeed_rules() && z.reset_host_moments)
    f.fail(f.at("semantics"), "\"deepspeed\" cannot be combined with reset_host_moments (ours; DeepSpeed never resets "
                              "its host moments)");
}

// DeepSpeed's scheduler block: {"type": ..., "params": {...}}, its three warm-up schedulers
// (deepspeed/runtime/lr_schedules.py: the same params, defaults and checks; a param the class does
// not take is an unknown key, as DeepSpeed's constructor would raise a TypeError).
void parse_scheduler(Fields& f, Spec::Scheduler& c) {
  if (!f.find("type")) f.fail(f.at("type"), "required: WarmupLR, WarmupDecayLR or WarmupCosineLR");
  f.str("type", c.type);
  if (c.type != "WarmupLR" && c.type != "WarmupDecayLR" && c.type != "WarmupCosineLR")
    f.fail(f.at("type"), "'" + c.type + "' is not supported: WarmupLR, WarmupDecayLR or WarmupCosineLR (DeepSpeed's, same params)");
  const bool cosine = c.type == "WarmupCosineLR", needs_total = c.type != "WarmupLR";
  if (auto* p = f.object("params")) {
    Fields q(*p, f.at("params"), f.source());
    if (cosine) {
      q.number("warmup_min_ratio", c.warmup_min_ratio, 0.0, 1.0);
      q.number("cos_min_ratio", c.cos_min_ratio, 0.0, 1.0);
    } else {
      q.number("warmup_min_lr", c.warmup_min_lr, 0.0, 10.0);
      q.number("warmup_max_lr", c.warmup_max_lr, 0.0, 10.0);
    }
    // DeepSpeed: "warmup_num_steps must be a positive integer" (then max(2, it))
    q.integer("warmup_num_steps", c.warmup_num_steps, 1, INT32_MAX);
    q.str("warmup_type", c.warmup_type, {"log", "linear"});
    if (needs_total) {
      if (!q.find("total_num_steps"))
        q.fail(q.at("total_num_steps"), "required with " + c.type + " (the step at which the decay ends)");
      q.integer("total_num_steps", c.total_num_steps, 1, INT32_MAX);
    }
    q.finish();
  } else if (needs_total) {
    f.fail(f.at("params"), "required with " + c.type + " (at least total_num_steps)");
  }
  f.finish();
}

// The block with every param written out; warmup_max_lr unset (-1) becomes max_lr (-1: stays
// unset, the optimizer's rate).
json scheduler_json(const Spec::Scheduler& c, double max_lr) {
  json p = {{"warmup_num_steps", c.warmup_num_steps}, {"warmup_type", c.warmup_type}};
  if (c.type == "WarmupCosineLR") {
    p["warmup_min_ratio"] = c.warmup_min_ratio;
    p["cos_min_ratio"] = c.cos_min_ratio;
  } else {
    p["warmup_min_lr"] = c.warmup_min_lr;
    const double mx = c.warmup_max_lr < 0 ? max_lr : c.warmup_max_lr;
    if (mx >= 0) p["warmup_max_lr"] = mx;
  }
  if (c.type != "WarmupLR") p["total_num_steps"] = c.total_num_steps;
  return {{"type", c.type}, {"params", p}};
}

// DeepSpeed's fp16 keys (deepspeed/runtime/precision_config.py) other than enabled, auto_cast and
// fp16_master_weights_and_grads.
void parse_fp16(Fields& f, Spec::Fp16& c) {
  if (auto* v = f.find("loss_scale")) {
    if (v->is_boolean()) f.fail(f.at("loss_scale"), "expected a number (0: dynamic loss scaling), got a boolean");
  }
  f.number("loss_scale", c.loss_scale, 0.0, 3.0e38);
  f.integer("initial_scale_power", c.initial_scale_power, 0, 126);
  f.integer("loss_scale_window", c.loss_scale_window, 1, INT32_MAX);
  f.integer("hysteresis", c.hysteresis, 1, INT32_MAX);
  if (auto* v = f.find("consecutive_hysteresis")) {
    if (!v->is_boolean()) f.fail(f.at("consecutive_hysteresis"), "expected true or false, got " + type_name(*v));
    c.consecutive_hysteresis = v->get<bool>();
  }
  f.integer("min_loss_scale", c.min_loss_scale, 1, int64_t(1) << 62);
}

json fp16_json(const Spec::Fp16& c) {
  return {{"loss_scale", c.loss_scale},          {"initial_scale_power", c.initial_scale_power},
          {"loss_scale_window", c.loss_scale_window}, {"hysteresis", c.hysteresis},
          {"consecutive_hysteresis", c.consecutive_hysteresis}, {"min_loss_scale", c.min_loss_scale}};
}

}  // namespace

Spec parse_spec(const json& j, const std::string& source) {
  Spec s;
  s.source = source;
  Fields top(j, "", source);
  top.str("name", s.name);
  top.str("strategy", s.strategy, {"device-adam", "zero-offload", "zero-offload-dpu", "zenflow"});
  top.str("precision", s.precision, {"fp32", "bf16", "fp16"});
  top.number("gradient_clipping", s.gradient_clipping, 0.0, 1e9);
  if (auto* z = top.object("zero_optimization")) {
    Fields f(*z, "zero_optimization", source);
    f.integer("stage", s.zero_stage, 0, 3);
    if (s.zero_stage == 3)
      f.fail("zero_optimization.stage", "stage 3 (partitioned parameters) is not implemented; 0, 1 or 2");
    f.finish();
  }
  if (auto* b = top.object("fp16")) {
    Fields f(*b, "fp16", source);
    parse_fp16(f, s.fp16);
    f.finish();
    s.fp16.given = true;
    if (s.precision != "fp16")
      top.fail("fp16", "the loss-scaling block needs precision \"fp16\" (precision is \"" + s.precision + "\")");
  }

  if (auto* m = top.object("model")) {
    Fields f(*m, "model", source);
    f.str("type", s.model.type, {"mlp", "gpt", "gpt-classifier"});
    if (auto* h = f.find("hidden")) {
      if (!h->is_array()) f.fail("model.hidden", "expected an array of layer widths, got " + type_name(*h));
      s.model.hidden.clear();
      for (size_t i = 0; i < h->size(); ++i) {
        const json& w = (*h)[i];
        std::string p = "model.hidden[" + std::to_string(i) + "]";
        if (!w.is_number_integer()) f.fail(p, "expected an integer width, got " + type_name(w));
        int64_t x = w.get<int64_t>();
        if (x < 1 || x > (1 << 16)) f.fail(p, std::to_string(x) + " is outside [1, 65536]");
        s.model.hidden.push_back((int)x);
      }
    }
    f.str("activation", s.model.activation, {"relu", "gelu"});
    f.integer("init_seed", s.model.init_seed, 0, INT64_MAX);
    f.integer("n_layer", s.model.n_layer, 1, 64);
    f.integer("n_head", s.model.n_head, 1, 256);
    f.integer("n_embd", s.model.n_embd, 1, 8192);
    f.integer("context", s.model.context, 1, 8192);
    f.str("pool", s.model.pool, {"mean", "max", "last"});
    f.str("head", s.model.head, {"linear", "generative"});
    f.str("weight_layout", s.model.weight_layout, {"auto", "in_out", "out_in"});
    f.finish();
    if (s.model.n_embd % s.model.n_head)
      f.fail("model.n_embd", std::to_string(s.model.n_embd) + " is not a multiple of model.n_head (" +
                                 std::to_string(s.model.n_head) + ")");
  }
  if (auto* d = top.object("data")) {
    Fields f(*d, "data", source);
    f.str("dataset", s.data.dataset, {"fashion-mnist", "kjv", "text"});
    f.str("dir", s.data.dir);
    f.integer("train_limit", s.data.train_limit, 0, INT32_MAX);
    f.integer("eval_limit", s.data.eval_limit, 0, INT32_MAX);
    f.str("path", s.data.path);
    f.str("labels", s.data.labels, {"testament", "section"});
    f.str("split", s.data.split, {"book", "verse"});
    f.finish();
  }
  {  // model and data must fit together (docs/gpt.md)
    const std::string& m = s.model.type;
    const std::string& d = s.data.dataset;
    if (m == "mlp" && d != "fashion-mnist")
      top.fail("data.dataset", "'" + d + "' needs a text model (model.type gpt or gpt-classifier); mlp trains on fashion-mnist");
    if (m == "gpt" && d == "fashion-mnist")
      top.fail("data.dataset", "model.type gpt trains on text: set data.dataset to kjv or text");
    if (m == "gpt-classifier" && d != "kjv")
      top.fail("data.dataset", "model.type gpt-classifier classifies KJV verses: set data.dataset to kjv");
    if (d == "text" && s.data.path.empty()) top.fail("data.path", "required with data.dataset text (a UTF-8 text file)");
    if (d == "kjv" && s.data.path.empty()) s.data.path = kKjvDefaultPath;
  }
  if (auto* t = top.object("train")) {
    Fields f(*t, "train", source);
    f.integer("batch_size", s.train.batch_size, 1, 1 << 20);
    f.integer("epochs", s.train.epochs, 1, 1 << 20);
    f.integer("steps", s.train.steps, 0, INT32_MAX);
    f.integer("seed", s.train.seed, 0, INT64_MAX);
    f.integer("eval_batch_size", s.train.eval_batch_size, 1, 1 << 20);
    f.integer("gradient_accumulation_steps", s.train.gradient_accumulation_steps, 1, 1 << 16);
    f.finish();
    if (s.train.batch_size % s.train.gradient_accumulation_steps)
      f.fail("train.gradient_accumulation_steps", std::to_string(s.train.gradient_accumulation_steps) +
                                                      " does not divide train.batch_size " +
                                                      std::to_string(s.train.batch_size) + " into equal micro-batches");
  }
  if (auto* o = top.object("optimizer")) {
    Fields f(*o, "optimizer", source);
    f.str("type", s.optimizer.type, {"adamw"});
    f.number("lr", s.optimizer.lr, 0.0, 10.0, true);
    if (auto* b = f.find("betas")) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number())
        f.fail("optimizer.betas", "expected [beta1, beta2], two numbers in [0, 1)");
      double b1 = (*b)[0].get<double>(), b2 = (*b)[1].get<double>();
      if (b1 < 0 || b1 >= 1) f.fail("optimizer.betas[0]", "must be in [0, 1)");
      if (b2 < 0 || b2 >= 1) f.fail("optimizer.betas[1]", "must be in [0, 1)");
      s.optimizer.beta1 = b1;
      s.optimizer.beta2 = b2;
    }
    f.number("eps", s.optimizer.eps, 0.0, 1.0, true);
    f.number("weight_decay", s.optimizer.weight_decay, 0.0, 1.0);
    f.finish();
  }
  if (auto* sc = top.object("scheduler")) {
    Fields f(*sc, "scheduler", source);
    parse_scheduler(f, s.scheduler);
  }
  if (auto* z = top.object("zenflow")) {
    Fields f(*z, "zenflow", source);
    s.zenflow.given = true;
    parse_zenflow(f, s.zenflow);
  }
  if (auto* r = top.object("runtime")) {
    Fields f(*r, "runtime", source);
    f.str("sched", s.runtime.sched);
    if (const char* why = Runtime::unusable_policy(s.runtime.sched))
      f.fail("runtime.sched", "StarPU's policy '" + s.runtime.sched + "' cannot run zenflow: " + why +
                                  " (the usable ones: zenflow-run --list-policies)");
    if (!Runtime::is_policy(s.runtime.sched)) {
      std::string list;
      for (auto& p : Runtime::policies()) list += (list.empty() ? "" : ", ") + p;
      f.fail("runtime.sched", "unknown StarPU scheduling policy '" + s.runtime.sched + "' (known: " + list + ")");
    }
    f.integer("device_workers", s.runtime.device_workers, 0, Runtime::max_cpu_workers());
    f.integer("host_workers", s.runtime.host_workers, 0, Runtime::max_cpu_workers());
    if ((s.runtime.device_workers == 0) != (s.runtime.host_workers == 0))
      f.fail("runtime.device_workers", "set both device_workers and host_workers, or neither (0: from zenflow.pt_reserved_cores_perc)");
    if (s.runtime.device_workers > 0 && s.zenflow.cores_perc_given)
      f.fail("runtime.device_workers", "conflicts with zenflow.pt_reserved_cores_perc: give one way of splitting the CPU workers");
    f.integer("cuda_workers", s.runtime.cuda_workers, -1, 64);
#ifndef ZF_USE_CUDA
    if (s.runtime.cuda_workers > 0)
      f.fail("runtime.cuda_workers", std::to_string(s.runtime.cuda_workers) +
                                         ": this build has no CUDA (-1 or 0; configure with -DZF_ENABLE_CUDA=ON, docs/gpu.md)");
#endif
    f.integer("tile_elems", s.runtime.tile_elems, 16, int64_t(1) << 32);
    if (s.runtime.tile_elems % 16) f.fail("runtime.tile_elems", "must be a multiple of 16 (SIMD-aligned tiles)");
    f.integer("lookahead", s.runtime.lookahead, 1, 64);
    f.str("crossings", s.runtime.crossings, {"device", "host"});
    f.boolean("priorities", s.runtime.priorities);
    f.finish();
    if (s.runtime.device_workers + s.runtime.host_workers > Runtime::max_cpu_workers())
      f.fail("runtime.device_workers", "device_workers + host_workers = " +
                                           std::to_string(s.runtime.device_workers + s.runtime.host_workers) +
                                           " exceeds the " + std::to_string(Runtime::max_cpu_workers()) +
                                           " CPU workers this StarPU build can start (STARPU_MAXCPUS)");
  }
  if (auto* l = top.object("log")) {
    Fields f(*l, "log", source);
    f.integer("every", s.log.every, 0, INT32_MAX);
    f.integer("warmup_steps", s.log.warmup_steps, 0, INT32_MAX);
    f.finish();
  }
  top.finish();
  if (s.strategy == "zenflow" && s.zenflow.deepspeed_rules() && s.precision == "fp16")
    top.fail("zenflow.semantics", "\"deepspeed\" is not implemented with precision fp16 (DeepSpeed checks the overflow "
                                  "only at update boundaries and drops the whole window there, while its selective "
                                  "steps take every step's loss-scaled gradient unchecked; docs/zenflow.md): use "
                                  "semantics \"zenflow\"");
  if (s.strategy == "zenflow" && s.train.gradient_accumulation_steps > 1)
    top.fail("train.gradient_accumulation_steps", "must be 1 with strategy zenflow: DeepSpeed's ZenFlow engine replaces the "
                                                  "accumulation steps by zenflow.update_interval (the host accumulates "
                                                  "update_interval steps; docs/zenflow.md)");
  return s;
}

double Spec::schedule_at(int64_t it) const {
  const Scheduler& c = scheduler;
  if (c.type.empty()) return optimizer.lr;
  const int64_t W = std::max<int64_t>(2, c.warmup_num_steps);  // as DeepSpeed: at least 2
  auto warm = [&] {  // the warm-up's fraction at it < W
    return c.warmup_type == "log" ? (1.0 / std::log((double)W)) * std::log((double)it + 1.0) : (double)it / (double)W;
  };
  if (c.type == "WarmupCosineLR") {
    if (it < 0) return 0.0;  // get_lr before the first step(): [0.0 for each group]
    double ratio;
    if (it < W) {
      ratio = c.warmup_min_ratio + warm() * (1.0 - c.warmup_min_ratio);
    } else {
      const double real_last = (double)(it - W + 1), real_total = (double)std::max<int64_t>(1, c.total_num_steps - W);
      const double progress = std::min(1.0, real_last / real_total);
      ratio = std::max(0.0, c.cos_min_ratio + (1.0 - c.cos_min_ratio) * ((1.0 + std::cos(M_PI * progress)) / 2.0));
    }
    return optimizer.lr * ratio;
  }
  const double lo = c.warmup_min_lr, hi = peak_lr();
  if (it < 0) return lo;  // get_lr before the first step(): min_lrs
  double gamma = 1.0;
  if (it < W)
    gamma = warm();
  else if (c.type == "WarmupDecayLR")
    gamma = std::max(0.0, (double)(c.total_num_steps - it) / std::max(1.0, (double)(c.total_num_steps - W)));
  return lo + (hi - lo) * gamma;
}

std::string Spec::describe_lr() const {
  std::ostringstream os;
  if (scheduler.type.empty()) {
    os << "lr " << optimizer.lr << " (constant)";
    return os.str();
  }
  const Scheduler& c = scheduler;
  const int64_t W = std::max<int64_t>(2, c.warmup_num_steps);
  if (c.type == "WarmupCosineLR") {
    os << "lr WarmupCosineLR: " << c.warmup_min_ratio << " to 1 x " << optimizer.lr << " over " << W << " steps ("
       << c.warmup_type << "), then cosine to " << c.cos_min_ratio << " x at step " << c.total_num_steps;
  } else {
    os << "lr " << c.type << ": " << c.warmup_min_lr << " to " << peak_lr() << " over " << W << " steps ("
       << c.warmup_type << ")";
    if (c.type == "WarmupDecayLR") os << ", then linear to " << c.warmup_min_lr << " at step " << c.total_num_steps;
  }
  os << "; step t runs at the scheduler's iteration t - 1 (DeepSpeed's timing)";
  return os.str();
}

json Spec::to_json() const {
  json j{
      {"name", name},
      {"strategy", strategy},
      {"precision", precision},
      {"model", {{"type", model.type}, {"hidden", model.hidden}, {"activation", model.activation}, {"init_seed", model.init_seed},
                 {"n_layer", model.n_layer}, {"n_head", model.n_head}, {"n_embd", model.n_embd}, {"context", model.context}, {"pool", model.pool}}},
      {"data", {{"dataset", data.dataset}, {"dir", data.dir}, {"train_limit", data.train_limit}, {"eval_limit", data.eval_limit},
                {"path", data.path}, {"labels", data.labels}, {"split", data.split}}},
      {"train", {{"batch_size", train.batch_size}, {"epochs", train.epochs}, {"steps", train.steps}, {"seed", train.seed}, {"eval_batch_size", train.eval_batch_size}}},
      {"optimizer", {{"type", optimizer.type}, {"lr", optimizer.lr}, {"betas", {optimizer.beta1, optimizer.beta2}}, {"eps", optimizer.eps}, {"weight_decay", optimizer.weight_decay}}},
      {"zenflow", {{"topk_ratio", zenflow.topk_ratio}, {"select_strategy", zenflow.select_strategy},
                   {"select_interval", zenflow.select_interval < 0 ? json("auto") : json(zenflow.select_interval)},
                   {"update_interval", zenflow.update_interval < 0 ? json("auto") : json(zenflow.update_interval)},
                   {"overlap_step", zenflow.overlap_step}, {"offload", zenflow.offload}, {"auto_ratio", zenflow.auto_ratio},
                   {"full_warm_up_rounds", zenflow.full_warm_up_rounds}, {"pt_reserved_cores_perc", zenflow.pt_reserved_cores_perc},
                   {"max_staleness", zenflow.staleness()}, {"importance", zenflow.importance}}},
      {"runtime", {{"sched", runtime.sched}, {"device_workers", runtime.device_workers}, {"host_workers", runtime.host_workers}, {"cuda_workers", runtime.cuda_workers}, {"tile_elems", runtime.tile_elems}, {"lookahead", runtime.lookahead}, {"crossings", runtime.crossings}, {"priorities", runtime.priorities}}},
      {"log", {{"every", log.every}, {"warmup_steps", log.warmup_steps}}},
  };
  // absent without a schedule (with the default head): older checkpoints' specs compare equal
  if (!scheduler.type.empty()) j["scheduler"] = scheduler_json(scheduler, peak_lr());
  if (model.head != "linear") j["model"]["head"] = model.head;
  if (model.weight_layout != "auto") j["model"]["weight_layout"] = model.weight_layout;  // absent: auto
  if (zenflow.reset_host_moments) j["zenflow"]["reset_host_moments"] = true;
  if (zenflow.deepspeed_rules()) j["zenflow"]["semantics"] = zenflow.semantics;  // absent: "zenflow"
  if (gradient_clipping > 0) j["gradient_clipping"] = gradient_clipping;
  if (zero_stage != 0) j["zero_optimization"] = {{"stage", zero_stage}};  // absent: 0
  if (train.gradient_accumulation_steps != 1) j["train"]["gradient_accumulation_steps"] = train.gradient_accumulation_steps;
  if (precision == "fp16") j["fp16"] = fp16_json(fp16);
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
      (*cur)[key] = value;
      return;
    }
    if (!cur->contains(key)) (*cur)[key] = json::object();
    cur = &(*cur)[key];
    start = dot + 1;
  }
}

namespace {
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
  json patch = json::object();
  auto note = [&](const std::string& s) {
    if (notes) notes->push_back(s);
  };
  // DeepSpeed's batch arithmetic (runtime/config.py _configure_train_batch_size):
  // train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x ranks; any
  // two give the third (train_batch_size alone: accumulation 1).
  int64_t tbs = 0, micro = 0, gas = 0;
  top.integer("train_batch_size", tbs, 1, 1 << 20);
  top.integer("train_micro_batch_size_per_gpu", micro, 1, 1 << 20);
  top.integer("gradient_accumulation_steps", gas, 1, 1 << 16);
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
  const bool ds_zenflow = ds.contains("zero_optimization") && ds["zero_optimization"].is_object() &&
                          ds["zero_optimization"].contains("zenflow");
  if (tbs) {
    if (ds_zenflow) {
      // DeepSpeed's ZenFlow engine (runtime/zenflow/engine.py configure_zenflow) sets the
      // accumulation steps to update_interval: every step is one micro-batch of every rank, and
      // the host accumulates update_interval of them (docs/zenflow.md)
      patch["train"]["batch_size"] = micro * ranks;
      if (gas > 1)
        note("gradient_accumulation_steps " + std::to_string(gas) +
             " (DeepSpeed's ZenFlow replaces it by zenflow.update_interval: each step is one micro-batch of " +
             std::to_string(micro) + " per rank)");
    } else {
      patch["train"]["batch_size"] = tbs;
      if (gas > 1) patch["train"]["gradient_accumulation_steps"] = gas;
    }
  }
  double clip = 0.0;
  top.number("gradient_clipping", clip, 0.0, 1e9);
  if (clip > 0) patch["gradient_clipping"] = clip;
  bool fp16_on = false;
  for (const char* prec : {"fp16", "bf16"})
    if (auto* p = top.object(prec)) {
      Fields f(*p, prec, src);
      bool enabled = false;
      if (auto* e = f.find("enabled")) {
        if (!e->is_boolean()) f.fail(f.at("enabled"), "expected true or false");
        enabled = e->get<bool>();
      }
      if (enabled && std::string(prec) == "fp16") {  // DeepSpeed's loss scaling (docs/spec.md)
        Spec::Fp16 c;
        parse_fp16(f, c);  // validated here so errors name the DeepSpeed file
        if (auto* a = f.find("auto_cast"))
          if (!a->is_boolean() || a->get<bool>())
            f.fail(f.at("auto_cast"), "only false: the engine's model computes in its own precision (docs/spec.md)");
        if (auto* m = f.find("fp16_master_weights_and_grads"))
          if (!m->is_boolean() || m->get<bool>())
            f.fail(f.at("fp16_master_weights_and_grads"), "only false: the master weights are fp32");
        f.finish();
        fp16_on = true;
        patch["precision"] = "fp16";
        patch["fp16"] = fp16_json(c);
        continue;
      }
      for (auto& [k, v] : p->items()) f.find(k);  // other precision knobs only matter when enabled
      if (enabled && fp16_on)
        f.fail(f.at("enabled"), "fp16 and bf16 cannot both be enabled (as DeepSpeed)");
      if (enabled) {
        patch["precision"] = "bf16";
        for (auto& [k, v] : p->items())
          if (k != "enabled") note(std::string(prec) + "." + k + " (DeepSpeed's bf16 tuning; this engine's bf16 is docs/spec.md's)");
      }
    }
  for (const char* k : {"steps_per_print", "wall_clock_breakdown", "dump_state", "prescale_gradients",
                        "gradient_predivide_factor", "zero_allow_untested_optimizer"})
    if (top.find(k)) note(std::string(k) + " (logging or multi-GPU tuning)");
  if (auto* sc = top.object("scheduler")) {  // DeepSpeed's defaults, warmup_max_lr 0.001 included
    Fields f(*sc, "scheduler", src);
    Spec::Scheduler c;
    parse_scheduler(f, c);
    // WarmupDecayLR's warmup_max_lr defaults to 0.001; WarmupLR's to the optimizer's rate (None in
    // lr_schedules.py: the param group's lr); WarmupCosineLR scales the optimizer's rate
    patch["scheduler"] = scheduler_json(c, c.type == "WarmupDecayLR" ? 0.001 : -1.0);
  }
  if (auto* o = top.object("optimizer")) {
    Fields f(*o, "optimizer", src);
    std::string type;
    f.str("type", type);
    if (type != "AdamW" && type != "Adam" && type != "adamw" && type != "adam")
      f.fail("optimizer.type", "'" + type + "' is not supported: AdamW (or Adam, which DeepSpeed runs as AdamW)");
    if (auto* pp = f.object("params")) {
      Fields q(*pp, "optimizer.params", src);
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
        patch["optimizer"]["betas"] = *b;
      }
      if (auto* m = q.find("adam_w_mode"))
        if (!m->is_boolean() || !m->get<bool>()) q.fail("optimizer.params.adam_w_mode", "only AdamW (adam_w_mode: true) is supported");
      if (auto* a = q.find("amsgrad"))
        if (!a->is_boolean() || a->get<bool>()) q.fail("optimizer.params.amsgrad", "AMSGrad is not supported");
      if (auto* t = q.find("torch_adam")) note("optimizer.params.torch_adam (implementation choice)"), (void)t;
      q.finish();
      if (pp->contains("lr")) patch["optimizer"]["lr"] = lr;
      if (pp->contains("eps")) patch["optimizer"]["eps"] = eps;
      if (pp->contains("weight_decay")) patch["optimizer"]["weight_decay"] = wd;
    }
    f.finish();
  }
  bool offload_cpu = false, has_zenflow = false;
  if (auto* zo = top.object("zero_optimization")) {
    Fields f(*zo, "zero_optimization", src);
    int stage = 0;
    f.integer("stage", stage, 0, 3);
    if (auto* off = f.object("offload_optimizer")) {
      Fields g(*off, "zero_optimization.offload_optimizer", src);
      std::string dev = "none";
      g.str("device", dev, {"cpu", "none", "nvme"});
      if (dev == "nvme") g.fail(g.at("device"), "NVMe offload is not supported (cpu or none)");
      offload_cpu = dev == "cpu";
      bool pin = true;
      if (auto* p = g.find("pin_memory")) {
        if (!p->is_boolean()) g.fail(g.at("pin_memory"), "expected true or false");
        pin = p->get<bool>();
      }
      (void)pin;  // host buffers are pinned whenever CUDA workers exist
      for (const char* k : {"buffer_count", "fast_init", "ratio"})
        if (g.find(k)) note(std::string("zero_optimization.offload_optimizer.") + k);
      g.finish();
    }
    if (auto* zf = f.object("zenflow")) {
      Fields g(*zf, "zero_optimization.zenflow", src);
      Spec::ZenFlow z;
      parse_zenflow(g, z);  // validated here so errors name the DeepSpeed file
      patch["zenflow"] = *zf;
      has_zenflow = true;
    }
    for (const char* k : {"contiguous_gradients", "overlap_comm", "reduce_scatter", "reduce_bucket_size",
                          "allgather_partitions", "allgather_bucket_size", "round_robin_gradients",
                          "sub_group_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                          "stage3_max_live_parameters", "stage3_max_reuse_distance",
                          "stage3_gather_16bit_weights_on_model_save", "elastic_checkpoint"})
      if (f.find(k)) note(std::string("zero_optimization.") + k + " (communication tuning)");
    f.finish();
    if (has_zenflow && !offload_cpu)
      f.fail("zero_optimization.offload_optimizer.device", "ZenFlow requires the optimizer offloaded to the cpu (DeepSpeed's constraint)");
    if (has_zenflow && stage == 0)
      f.fail("zero_optimization.stage", "ZenFlow runs with ZeRO stage 1, 2 or 3");
    if (stage == 3)
      f.fail("zero_optimization.stage", "stage 3 (partitioned parameters) is not implemented: use 1 or 2 "
                                        "(docs/data-parallel.md)");
    if (offload_cpu && stage > 0)
      patch["zero_optimization"] = {{"stage", stage}};
    else if (stage > 0)  // device-adam: its optimizer state is on the device, replicated (stage 0)
      note("zero_optimization.stage " + std::to_string(stage) +
           " (no optimizer offload: device-adam's state stays on the device, replicated as with stage 0)");
  }
  top.finish();
  patch["strategy"] = has_zenflow ? "zenflow" : offload_cpu ? "zero-offload" : "device-adam";
  return patch;
}

Spec load_spec(const std::string& path, const std::vector<std::string>& overrides,
               const std::string& deepspeed_config, int ranks) {
  json j = read_json_file(path);
  if (!deepspeed_config.empty()) {
    std::vector<std::string> notes;
    json patch = deepspeed_patch(read_json_file(deepspeed_config), deepspeed_config, &notes, ranks);
    for (const char* k : {"zenflow", "scheduler", "fp16"})  // the DeepSpeed block replaces the spec's
      if (patch.contains(k)) j.erase(k);
    merge_patch(j, patch);
    for (auto& n : notes) std::fprintf(stderr, "zenflow-run: note: %s: %s accepted, no effect here\n", deepspeed_config.c_str(), n.c_str());
  }
  for (auto& o : overrides) apply_override(j, o, path);
  Spec s = parse_spec(j, path);
  if (!deepspeed_config.empty()) {  // later messages about these fields name the DeepSpeed file
    auto overridden = [&](const std::string& field) {
      return std::any_of(overrides.begin(), overrides.end(), [&](const std::string& o) {
        return o.rfind(field + "=", 0) == 0 || o.rfind(field.substr(0, field.find('.')) + "=", 0) == 0;
      });
    };
    const json ds = read_json_file(deepspeed_config);
    if ((ds.contains("train_batch_size") || ds.contains("train_micro_batch_size_per_gpu")) &&
        !overridden("train.batch_size"))
      s.field_origin["train.batch_size"] =
          deepspeed_config + ": " + (ds.contains("train_batch_size") ? "train_batch_size" : "train_micro_batch_size_per_gpu");
    if (ds.contains("zero_optimization") && ds["zero_optimization"].is_object() &&
        ds["zero_optimization"].contains("zenflow"))
      for (const char* k : {"select_interval", "update_interval", "topk_ratio", "select_strategy", "full_warm_up_rounds"})
        if (!overridden(std::string("zenflow.") + k))
          s.field_origin[std::string("zenflow.") + k] = deepspeed_config + ": zero_optimization.zenflow." + k;
  }
  return s;
}

int64_t steps_per_epoch(const Spec& s, int64_t epoch_size) {
  return std::max<int64_t>(1, epoch_size / s.train.batch_size);
}

int64_t select_interval_steps(const Spec& s, int64_t spe) {
  const auto& z = s.zenflow;
  if (z.select_strategy == "auto") return spe;  // "epoch", interval 1
  if (z.select_strategy == "epoch") return z.select_interval * spe;
  return z.select_interval;
}

std::pair<int, int> worker_split(const Spec& s) {
  if (s.runtime.device_workers > 0) return {s.runtime.device_workers, s.runtime.host_workers};
  int n = std::min(Runtime::hwloc_cores(), Runtime::max_cpu_workers());
  if (n < 2) n = 2;  // one core: both contexts share it (oversubscribed)
  // device-adam has no host work: one host worker (the runtime needs one), which has nothing to
  // do but help the device kernels (docs/architecture.md, "Device cores"), the rest device
  if (s.strategy == "device-adam") return {n - 1, 1};
  int dev = (int)std::floor(s.zenflow.pt_reserved_cores_perc * n);
  dev = std::clamp(dev, 1, n - 1);
  return {dev, n - dev};
}

int64_t total_steps(const Spec& s, int64_t epoch_size) {
  return s.train.steps > 0 ? s.train.steps : s.train.epochs * steps_per_epoch(s, epoch_size);
}

}  // namespace zf
