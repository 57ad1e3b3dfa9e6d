#include "graphs/schema/field_table.hpp"

#include <algorithm>
#include <climits>

#include "graphs/schema/fields.hpp"
#include "graphs/strategies/registry.hpp"

namespace zf {
namespace {

using json = nlohmann::json;
using Read = std::function<void(Fields&, const std::string&, Spec&)>;

using Write = std::function<json(const Spec&)>;

FieldDef entry(std::string name, Read read, Write write) {
  FieldDef d;
  d.name = std::move(name);
  d.read = std::move(read);
  d.write = std::move(write);
  return d;
}

// The typed entries: `get` is a generic lambda returning the Spec member (const or not), e.g.
// [](auto& s) -> auto& { return s.train.seed; }.
template <class Get>
FieldDef text(std::string name, Get get, std::vector<std::string> allowed = {}) {
  return entry(std::move(name), [=](Fields& f, const std::string& k, Spec& s) { f.str(k, get(s), allowed); },
               [=](const Spec& s) { return json(get(s)); });
}
template <class Get>
FieldDef integer(std::string name, Get get, int64_t lo, int64_t hi) {
  return entry(std::move(name), [=](Fields& f, const std::string& k, Spec& s) { f.integer(k, get(s), lo, hi); },
               [=](const Spec& s) { return json(get(s)); });
}
template <class Get>
FieldDef number(std::string name, Get get, double lo, double hi, bool open_lo = false) {
  return entry(std::move(name), [=](Fields& f, const std::string& k, Spec& s) { f.number(k, get(s), lo, hi, open_lo); },
               [=](const Spec& s) { return json(get(s)); });
}
template <class Get>
FieldDef boolean(std::string name, Get get) {
  return entry(std::move(name), [=](Fields& f, const std::string& k, Spec& s) { f.boolean(k, get(s)); },
               [=](const Spec& s) { return json(get(s)); });
}
// An entry whose read has its own rules.
template <class Get>
FieldDef custom(std::string name, Get get, Read read) {
  return entry(std::move(name), std::move(read), [=](const Spec& s) { return json(get(s)); });
}

bool uses_zenflow(const Spec& s) { return strategy_def(s.strategy).zenflow; }
std::vector<std::string> strategy_name_list() {
  std::vector<std::string> names;
  for (const StrategyDef& d : strategy_defs()) names.push_back(d.name);
  return names;
}
bool uses_fp16(const Spec& s) { return s.precision == "fp16"; }
bool twin_flow(const Spec& s) { return s.offload_ratio != 1.0; }

// {"ratio": r}, r in [0, 1] (DeepSpeed's offload_config.py: Field(1.0, ge=0.0, le=1.0))
void read_offload_optimizer(Fields& f, const std::string& k, Spec& s) {
  const json* o = f.object(k);
  if (!o) return;
  Fields g(*o, f.at(k), f.source());
  g.number("ratio", s.offload_ratio, 0.0, 1.0);
  g.finish();
}

// "auto" or an integer in [1, INT32_MAX] (no run is longer: interval x steps per epoch cannot
// overflow); false when the key is absent.
bool read_int_or_auto(Fields& f, const std::string& key, UpdateInterval& out) {
  const json* v = f.find(key);
  if (!v) return false;
  if (v->is_string()) {
    if (v->get<std::string>() != "auto") f.fail(f.at(key), "expected \"auto\" or a positive integer");
    out = UpdateInterval::automatic();
  } else if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT32_MAX)
      f.fail(f.at(key), v->dump() + " is outside [1, " + std::to_string(INT32_MAX) + "]");
    if (v->get<int64_t>() < 1)
      f.fail(f.at(key), "expected \"auto\" or a positive integer, got " + std::to_string(v->get<int64_t>()));
    out = UpdateInterval(v->get<int64_t>());
  } else {
    f.fail(f.at(key), "expected \"auto\" or a positive integer, got " + json_type_name(*v));
  }
  return true;
}

void read_hidden(Fields& f, const std::string& k, Spec& s) {
  const json* h = f.find(k);
  if (!h) return;
  if (!h->is_array()) f.fail("model.hidden", "expected an array of layer widths, got " + json_type_name(*h));
  s.model.hidden.clear();
  for (size_t i = 0; i < h->size(); ++i) {
    const json& w = (*h)[i];
    std::string p = "model.hidden[" + std::to_string(i) + "]";
    if (!w.is_number_integer()) f.fail(p, "expected an integer width, got " + json_type_name(w));
    int64_t x = w.get<int64_t>();
    if (x < 1 || x > (1 << 16)) f.fail(p, std::to_string(x) + " is outside [1, 65536]");
    s.model.hidden.push_back((int)x);
  }
}

// "none", "every_layer" or a positive integer N (a checkpoint every N layers)
void read_activation_checkpointing(Fields& f, const std::string& k, Spec& s) {
  const json* v = f.find(k);
  if (!v) return;
  const std::string what = "expected \"none\", \"every_layer\" or a positive number of layers per checkpoint";
  if (v->is_string()) {
    const std::string t = v->get<std::string>();
    if (t != "none" && t != "every_layer") f.fail(f.at(k), what + ", got \"" + t + "\"");
    s.train.activation_checkpointing = t == "none" ? 0 : 1;
  } else if (v->is_number_integer()) {
    const int64_t n = v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT32_MAX ? -1 : v->get<int64_t>();
    if (n < 1 || n > (1 << 16)) f.fail(f.at(k), what + ", got " + v->dump());
    s.train.activation_checkpointing = (int)n;
  } else {
    f.fail(f.at(k), what + ", got " + json_type_name(*v));
  }
}

void read_betas(Fields& f, const std::string& k, Spec& s) {
  const json* b = f.find(k);
  if (!b) return;
  if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number())
    f.fail("optimizer.betas", "expected [beta1, beta2], two numbers in [0, 1)");
  double b1 = (*b)[0].get<double>(), b2 = (*b)[1].get<double>();
  if (b1 < 0 || b1 >= 1) f.fail("optimizer.betas[0]", "must be in [0, 1)");
  if (b2 < 0 || b2 >= 1) f.fail("optimizer.betas[1]", "must be in [0, 1)");
  s.optimizer.beta1 = b1;
  s.optimizer.beta2 = b2;
}

std::vector<FieldDef> top_and_model_fields() {
  return {
      text("name", [](auto& s) -> auto& { return s.name; }),
      text("strategy", [](auto& s) -> auto& { return s.strategy; },
           strategy_name_list()).must_match(Match::field, 1),
      text("precision", [](auto& s) -> auto& { return s.precision; }, {"fp32", "bf16", "fp16"})
          .must_match(Match::field, 2),
      custom("communication_data_type", [](auto& s) -> auto& { return s.communication_data_type; },
             [](Fields& f, const std::string& k, Spec& s) {
               if (f.find(k)) f.str(k, s.communication_data_type, {"fp32", "bf16", "fp16"});  // absent: the precision's
             })
          .only_if([](const Spec& s) { return !s.communication_data_type.empty(); }),
      number("gradient_clipping", [](auto& s) -> auto& { return s.gradient_clipping; }, 0.0, 1e9)
          .only_if([](const Spec& s) { return s.gradient_clipping > 0; }).must_match(Match::field, 6),
      custom("zero_optimization.stage", [](auto& s) -> auto& { return s.zero_stage; },
             [](Fields& f, const std::string& k, Spec& s) {
               f.integer(k, s.zero_stage, 0, 3);  // what each stage supports: the strategy's check (registry.cpp)
             }).only_if([](const Spec& s) { return s.zero_stage != 0; }),
      // DeepSpeed's Twin-Flow: the one key of its offload_optimizer block the spec has (the block
      // as an object, so that the path is DeepSpeed's)
      entry("zero_optimization.offload_optimizer", read_offload_optimizer,
            [](const Spec& s) { return json{{"ratio", s.offload_ratio}}; })
          .only_if(twin_flow).must_match(Match::field, 15),
      integer("zero_optimization.stage3_max_live_parameters",
              [](auto& s) -> auto& { return s.stage3_max_live_parameters; }, 0, INT64_MAX)
          .only_if([](const Spec& s) { return s.stage3_max_live_parameters != 0; }),
      integer("zero_optimization.reduce_bucket_size", [](auto& s) -> auto& { return s.reduce_bucket_size; }, 1,
              INT64_MAX)
          .only_if([](const Spec& s) { return s.reduce_bucket_size != Spec{}.reduce_bucket_size; }),
      integer("zero_optimization.sub_group_size", [](auto& s) -> auto& { return s.sub_group_size; }, 0, INT64_MAX)
          .only_if(twin_flow).must_match(Match::field, 16, twin_flow),
      // DeepSpeed's fp16 keys (deepspeed/runtime/precision_config.py) other than enabled, auto_cast
      // and fp16_master_weights_and_grads
      custom("fp16.loss_scale", [](auto& s) -> auto& { return s.fp16.loss_scale; },
             [](Fields& f, const std::string& k, Spec& s) {
               if (auto* v = f.find(k); v && v->is_boolean())
                 f.fail(f.at(k), "expected a number (0: dynamic loss scaling), got a boolean");
               f.number(k, s.fp16.loss_scale, 0.0, 3.0e38);
             }).only_if(uses_fp16).must_match(Match::block, 14, uses_fp16),
      integer("fp16.initial_scale_power", [](auto& s) -> auto& { return s.fp16.initial_scale_power; }, 0, 126)
          .only_if(uses_fp16).must_match(Match::block, 14, uses_fp16),
      integer("fp16.loss_scale_window", [](auto& s) -> auto& { return s.fp16.loss_scale_window; }, 1, INT32_MAX)
          .only_if(uses_fp16).must_match(Match::block, 14, uses_fp16),
      integer("fp16.hysteresis", [](auto& s) -> auto& { return s.fp16.hysteresis; }, 1, INT32_MAX)
          .only_if(uses_fp16).must_match(Match::block, 14, uses_fp16),
      boolean("fp16.consecutive_hysteresis", [](auto& s) -> auto& { return s.fp16.consecutive_hysteresis; })
          .only_if(uses_fp16).must_match(Match::block, 14, uses_fp16),
      integer("fp16.min_loss_scale", [](auto& s) -> auto& { return s.fp16.min_loss_scale; }, 1, int64_t(1) << 62)
          .only_if(uses_fp16).must_match(Match::block, 14, uses_fp16),
      text("model.type", [](auto& s) -> auto& { return s.model.type; }, {"mlp", "gpt", "gpt-classifier", "hf"})
          .must_match(Match::block, 3),
      custom("model.hidden", [](auto& s) -> auto& { return s.model.hidden; }, read_hidden).must_match(Match::block, 3),
      text("model.activation", [](auto& s) -> auto& { return s.model.activation; }, {"relu", "gelu"})
          .must_match(Match::block, 3),
      integer("model.init_seed", [](auto& s) -> auto& { return s.model.init_seed; }, 0, INT64_MAX)
          .must_match(Match::block, 3),
      integer("model.n_layer", [](auto& s) -> auto& { return s.model.n_layer; }, 1, 64).must_match(Match::block, 3),
      integer("model.n_head", [](auto& s) -> auto& { return s.model.n_head; }, 1, 256).must_match(Match::block, 3),
      integer("model.n_embd", [](auto& s) -> auto& { return s.model.n_embd; }, 1, 8192).must_match(Match::block, 3),
      integer("model.context", [](auto& s) -> auto& { return s.model.context; }, 1, 8192).must_match(Match::block, 3),
      // absent from to_json when default: older checkpoints' specs compare equal
      integer("model.vocab", [](auto& s) -> auto& { return s.model.vocab; }, 1, 1 << 24)
          .only_if([](const Spec& s) { return s.model.vocab != 256; }).must_match(Match::block, 3),
      text("model.pool", [](auto& s) -> auto& { return s.model.pool; }, {"mean", "max", "last"})
          .must_match(Match::block, 3),
      // absent from to_json when default: older checkpoints' specs compare equal
      text("model.head", [](auto& s) -> auto& { return s.model.head; }, {"linear", "generative"})
          .only_if([](const Spec& s) { return s.model.head != "linear"; }).must_match(Match::block, 3),
      // storage only: a checkpoint resumes under any layout (saved state is in the logical layout)
      text("model.weight_layout", [](auto& s) -> auto& { return s.model.weight_layout; }, {"auto", "in_out", "out_in"})
          .only_if([](const Spec& s) { return s.model.weight_layout != "auto"; }),
      // hf: the model directory (absent from to_json when empty: older checkpoints' specs compare equal)
      text("model.path", [](auto& s) -> auto& { return s.model.path; })
          .only_if([](const Spec& s) { return !s.model.path.empty(); }).must_match(Match::block, 3),
      // hf: weights read or initialised (absent from to_json when "weights"); not compared on --resume
      // (the checkpoint holds the weights)
      text("model.init", [](auto& s) -> auto& { return s.model.init; }, {"weights", "random"})
          .only_if([](const Spec& s) { return s.model.init != "weights"; }),
  };
}

std::vector<FieldDef> data_train_optimizer_fields() {
  return {
      text("data.dataset", [](auto& s) -> auto& { return s.data.dataset; }, {"fashion-mnist", "kjv", "text", "tokens", "instructions", "chat"})
          .must_match(Match::field, 8),
      text("data.dir", [](auto& s) -> auto& { return s.data.dir; }).must_match(Match::field, 9),
      integer("data.train_limit", [](auto& s) -> auto& { return s.data.train_limit; }, 0, INT32_MAX)
          .must_match(Match::field, 10),
      integer("data.eval_limit", [](auto& s) -> auto& { return s.data.eval_limit; }, 0, INT32_MAX),
      text("data.path", [](auto& s) -> auto& { return s.data.path; }),
      text("data.eval_path", [](auto& s) -> auto& { return s.data.eval_path; })
          .only_if([](const Spec& s) { return !s.data.eval_path.empty(); }),
      // absent from to_json when default (older checkpoints' specs compare equal); a resumed run
      // must see the same batches
      text("data.order", [](auto& s) -> auto& { return s.data.order; }, {"random", "sequential"})
          .only_if([](const Spec& s) { return s.data.order != "random"; }).must_match(Match::field, 17),
      text("data.labels", [](auto& s) -> auto& { return s.data.labels; }, {"testament", "section"}),
      // absent from to_json when false (older checkpoints' specs compare equal); other rows, other units
      boolean("data.pack", [](auto& s) -> auto& { return s.data.pack; })
          .only_if([](const Spec& s) { return s.data.pack; }).must_match(Match::field, 18),
      text("data.split", [](auto& s) -> auto& { return s.data.split; }, {"book", "verse"}),
      integer("train.batch_size", [](auto& s) -> auto& { return s.train.batch_size; }, 1, 1 << 20)
          .must_match(Match::field, 11),
      integer("train.epochs", [](auto& s) -> auto& { return s.train.epochs; }, 1, 1 << 20),
      integer("train.steps", [](auto& s) -> auto& { return s.train.steps; }, 0, INT32_MAX),
      integer("train.seed", [](auto& s) -> auto& { return s.train.seed; }, 0, INT64_MAX).must_match(Match::field, 12),
      integer("train.eval_batch_size", [](auto& s) -> auto& { return s.train.eval_batch_size; }, 1, 1 << 20),
      // absent from to_json when 0; not compared on --resume (it changes no step)
      integer("train.eval_every", [](auto& s) -> auto& { return s.train.eval_every; }, 0, INT32_MAX)
          .only_if([](const Spec& s) { return s.train.eval_every != 0; }),
      // "none" (0), "every_layer" (1) or N >= 1; absent from to_json when "none" (it changes no value)
      entry("train.activation_checkpointing", read_activation_checkpointing,
            [](const Spec& s) {
              const int n = s.train.activation_checkpointing;
              return n == 0 ? json("none") : n == 1 ? json("every_layer") : json(n);
            })
          .only_if([](const Spec& s) { return s.train.activation_checkpointing != 0; }),
      integer("train.gradient_accumulation_steps", [](auto& s) -> auto& { return s.train.gradient_accumulation_steps; },
              1, 1 << 16)
          .only_if([](const Spec& s) { return s.train.gradient_accumulation_steps != 1; })
          .must_match(Match::field, 7),
      text("optimizer.type", [](auto& s) -> auto& { return s.optimizer.type; }, {"adamw"}).must_match(Match::block, 4),
      number("optimizer.lr", [](auto& s) -> auto& { return s.optimizer.lr; }, 0.0, 10.0, true)
          .must_match(Match::block, 4),
      entry("optimizer.betas", read_betas,
            [](const Spec& s) { return json::array({s.optimizer.beta1, s.optimizer.beta2}); })
          .must_match(Match::block, 4),
      number("optimizer.eps", [](auto& s) -> auto& { return s.optimizer.eps; }, 0.0, 1.0, true)
          .must_match(Match::block, 4),
      number("optimizer.weight_decay", [](auto& s) -> auto& { return s.optimizer.weight_decay; }, 0.0, 1.0)
          .must_match(Match::block, 4),
      entry("scheduler",
            [](Fields& f, const std::string& k, Spec& s) {
              if (auto* sc = f.object(k)) {
                Fields g(*sc, "scheduler", f.source());
                s.scheduler = LrSchedule::parse(g);
              }
            },
            [](const Spec& s) { return s.scheduler.to_json(s.peak_lr()); })
          .only_if([](const Spec& s) { return !s.scheduler.type.empty(); })
          .must_match(Match::block, 5),
  };
}

// DeepSpeed's zenflow keys (deepspeed/runtime/zenflow/zenflow_config.py) and ours.
std::vector<FieldDef> zenflow_fields() {
  auto z = [](FieldDef d) { return std::move(d).must_match(Match::block, 13, uses_zenflow); };
  return {
      z(number("zenflow.topk_ratio", [](auto& s) -> auto& { return s.zenflow.topk_ratio; }, 0.0, 1.0)),
      z(text("zenflow.select_strategy", [](auto& s) -> auto& { return s.zenflow.select_strategy; },
             {"auto", "step", "epoch"})),
      z(entry("zenflow.select_interval",
              [](Fields& f, const std::string& k, Spec& s) {
                UpdateInterval v;
                if (read_int_or_auto(f, k, v)) s.zenflow.select_interval = v.is_auto ? -1 : v.steps;
              },
              [](const Spec& s) {
                return s.zenflow.select_interval < 0 ? json("auto") : json(s.zenflow.select_interval);
              })),
      z(entry("zenflow.update_interval",
              [](Fields& f, const std::string& k, Spec& s) { read_int_or_auto(f, k, s.zenflow.update_interval); },
              [](const Spec& s) { return s.zenflow.update_interval.to_json(); })),
      z(boolean("zenflow.overlap_step", [](auto& s) -> auto& { return s.zenflow.overlap_step; })),
      z(boolean("zenflow.offload", [](auto& s) -> auto& { return s.zenflow.offload; })),
      z(number("zenflow.auto_ratio", [](auto& s) -> auto& { return s.zenflow.auto_ratio; }, 0.0, 1.0)),
      z(integer("zenflow.full_warm_up_rounds", [](auto& s) -> auto& { return s.zenflow.full_warm_up_rounds; }, 0,
                INT32_MAX)),
      z(custom("zenflow.pt_reserved_cores_perc", [](auto& s) -> auto& { return s.zenflow.pt_reserved_cores_perc; },
               [](Fields& f, const std::string& k, Spec& s) {
                 if (auto* v = f.find(k)) {
                   // DeepSpeed: "pt_reserved_cores_perc must be a float"
                   if (!v->is_number_float())
                     f.fail(f.at(k), "expected a float in [0, 1] (e.g. 0.5), got " + json_type_name(*v));
                   s.zenflow.cores_perc_given = true;
                 }
                 f.number(k, s.zenflow.pt_reserved_cores_perc, 0.0, 1.0);
               })),
      // written resolved: the staleness the run uses
      z(entry("zenflow.max_staleness",
              [](Fields& f, const std::string& k, Spec& s) { f.integer(k, s.zenflow.max_staleness, 0, 64); },
              [](const Spec& s) { return json(s.zenflow.staleness()); })),
      z(text("zenflow.importance", [](auto& s) -> auto& { return s.zenflow.importance; }, {"l1", "l2"})),
      z(boolean("zenflow.reset_host_moments", [](auto& s) -> auto& { return s.zenflow.reset_host_moments; })
            .only_if([](const Spec& s) { return s.zenflow.reset_host_moments; })),
      z(text("zenflow.semantics", [](auto& s) -> auto& { return s.zenflow.semantics; }, {"zenflow", "deepspeed"})
            .only_if([](const Spec& s) { return s.zenflow.deepspeed_rules(); })),
      // not compared on --resume (no must_match): it decides only which columns data-parallel
      // ranks select, as changing the rank count does
      text("zenflow.dp_selection", [](auto& s) -> auto& { return s.zenflow.dp_selection; }, {"exact", "local-sum"})
          .only_if([](const Spec& s) { return s.zenflow.local_sum(); }),
      // not compared on --resume: the same values either way, only where the sum runs
      text("zenflow.accumulate_on", [](auto& s) -> auto& { return s.zenflow.accumulate_on; }, {"host", "device"})
          .only_if([](const Spec& s) { return !s.zenflow.accumulate_on_host(); }),
  };
}

// The worker counts' upper bound is the machine's (check_machine, graphs/schema/machine_check.hpp).
std::vector<FieldDef> runtime_log_fields() {
  return {
      text("runtime.sched", [](auto& s) -> auto& { return s.runtime.sched; }),
      integer("runtime.device_workers", [](auto& s) -> auto& { return s.runtime.device_workers; }, INT_MIN, INT_MAX),
      integer("runtime.host_workers", [](auto& s) -> auto& { return s.runtime.host_workers; }, INT_MIN, INT_MAX),
      custom("runtime.cuda_workers", [](auto& s) -> auto& { return s.runtime.cuda_workers; },
             [](Fields& f, const std::string& k, Spec& s) {
               f.integer(k, s.runtime.cuda_workers, -1, 64);
#if !defined(ZF_USE_CUDA) && !defined(ZF_SIMGRID)  // simulated CUDA workers count as CUDA
               if (s.runtime.cuda_workers > 0)
                 f.fail("runtime.cuda_workers", std::to_string(s.runtime.cuda_workers) +
                                                    ": this build has no CUDA (-1 or 0; configure with "
                                                    "-DZF_ENABLE_CUDA=ON, docs/gpu.md)");
#endif
             }),
      custom("runtime.tile_elems", [](auto& s) -> auto& { return s.runtime.tile_elems; },
             [](Fields& f, const std::string& k, Spec& s) {
               f.integer(k, s.runtime.tile_elems, 16, int64_t(1) << 32);
               if (s.runtime.tile_elems % 16) f.fail("runtime.tile_elems", "must be a multiple of 16 (SIMD-aligned tiles)");
             }),
      integer("runtime.lookahead", [](auto& s) -> auto& { return s.runtime.lookahead; }, 1, 64),
      text("runtime.crossings", [](auto& s) -> auto& { return s.runtime.crossings; }, {"device", "host"}),
      boolean("runtime.priorities", [](auto& s) -> auto& { return s.runtime.priorities; }),
      boolean("runtime.stream_gradients", [](auto& s) -> auto& { return s.runtime.stream_gradients; })
          .only_if([](const Spec& s) { return !s.runtime.stream_gradients; }),
      integer("runtime.logits_chunk_elems", [](auto& s) -> auto& { return s.runtime.logits_chunk_elems; }, 0,
              int64_t(1) << 40)
          .only_if([](const Spec& s) { return s.runtime.logits_chunk_elems != (int64_t(1) << 24); }),
      integer("log.every", [](auto& s) -> auto& { return s.log.every; }, 0, INT32_MAX),
      integer("log.warmup_steps", [](auto& s) -> auto& { return s.log.warmup_steps; }, 0, INT32_MAX),
  };
}

std::vector<FieldDef> build_table() {
  std::vector<FieldDef> t;
  for (auto part : {top_and_model_fields, data_train_optimizer_fields, zenflow_fields, runtime_log_fields})
    for (FieldDef& d : part()) t.push_back(std::move(d));
  return t;
}

// j[key], null when j is not an object or has no such key.
json member(const json& j, const std::string& key) {
  if (!j.is_object()) return json();
  auto it = j.find(key);
  return it == j.end() ? json() : *it;
}

ResumeCheck field_check(const FieldDef& d) {
  const json fallback = d.write(Spec{});  // a spec written before the field existed had the default
  const std::string block = d.block(), key = d.key();
  return {d.name, [=](const json& j) {
            json v = block.empty() ? member(j, key) : member(member(j, block), key);
            return v.is_null() ? fallback : v;
          }};
}

ResumeCheck block_check(const FieldDef& d) {
  const std::string block = d.block().empty() ? d.name : d.block();
  std::vector<std::string> free;  // the block's fields that may change
  for (const FieldDef& e : spec_fields())
    if (e.block() == block && e.match == Match::none) free.push_back(e.key());
  return {block, [=](const json& j) {
            json b = member(j, block);
            if (b.is_object())
              for (const std::string& k : free) b.erase(k);
            return b;
          }};
}

}  // namespace

std::string FieldDef::block() const {
  const size_t dot = name.find('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

std::string FieldDef::key() const {
  const size_t dot = name.find('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

const std::vector<FieldDef>& spec_fields() {
  static const std::vector<FieldDef> table = build_table();
  return table;
}

void read_block(Fields& f, const std::string& block, Spec& s) {
  for (const FieldDef& d : spec_fields())
    if (d.block() == block) d.read(f, d.key(), s);
}

void write_fields(const Spec& s, json& j) {
  for (const FieldDef& d : spec_fields()) {
    if (d.written && !d.written(s)) continue;
    if (d.block().empty())
      j[d.name] = d.write(s);
    else
      j[d.block()][d.key()] = d.write(s);
  }
}

json block_json(const Spec& s, const std::string& block) {
  json j = json::object();
  for (const FieldDef& d : spec_fields())
    if (d.block() == block) j[d.key()] = d.write(s);
  return j;
}

std::vector<ResumeCheck> resume_checks(const Spec& s) {
  std::vector<const FieldDef*> compared;
  for (const FieldDef& d : spec_fields())
    if (d.match != Match::none && (!d.match_if || d.match_if(s))) compared.push_back(&d);
  std::stable_sort(compared.begin(), compared.end(),
                   [](const FieldDef* a, const FieldDef* b) { return a->match_order < b->match_order; });
  std::vector<ResumeCheck> checks;
  int last_order = -1;
  for (const FieldDef* d : compared) {
    if (d->match == Match::block && d->match_order == last_order) continue;  // the block is one check
    checks.push_back(d->match == Match::field ? field_check(*d) : block_check(*d));
    last_order = d->match_order;
  }
  return checks;
}

}  // namespace zf
