#include "graphs/strategies/registry.hpp"

#include <algorithm>
#include <cmath>

#include "graphs/schema/spec.hpp"
#include "graphs/strategies/strategy.hpp"
#include "runtime/error.hpp"
#include "runtime/simulation.hpp"

namespace zf {
namespace {

bool half(const Spec& s) { return s.precision == "bf16" || s.precision == "fp16"; }
// a value crossing between the sides, in floats: 2-byte tiles under bf16 and fp16
double wire(const Spec& s) { return half(s) ? 0.5 : 1.0; }
bool several(int ranks) { return ranks > 1; }  // one process: every ZeRO stage is stage 0

// zero_optimization.stage >= 1 over several ranks: each rank holds 1/R of the host part
// (docs/data-parallel.md); device state stays whole
OptimizerFootprint per_rank(const Spec& s, OptimizerFootprint f, int ranks) {
  if (s.zero_stage >= 1 && several(ranks)) f.host /= ranks;
  return f;
}

// Twin-Flow (zero_optimization.offload_optimizer.ratio < 1) splits zero-offload's state only.
void check_no_twin_flow(const Spec& s) {
  if (s.offload_ratio < 1.0)
    throw InputError(s.where("zero_optimization.offload_optimizer.ratio"),
                     nlohmann::json(s.offload_ratio).dump() +
                         " (DeepSpeed's Twin-Flow) splits zero-offload's optimizer state; strategy is \"" + s.strategy +
                         "\": use zero-offload, or ratio 1");
}

// ---- device-adam: AdamW on the device; moments (2 floats), and the fp32 master under bf16/fp16
// (ZeRO stages 1 and 2 on several ranks: each rank holds 1/R of them, DeepSpeed's ZeRO without offload)
void check_device_adam(const Spec& s, int) {
  check_no_twin_flow(s);
  if (s.zero_stage == 3)
    throw InputError(s.where("zero_optimization.stage"),
                     "3 partitions the device parameters with an offloaded optimizer (zero-offload, zero-offload-dpu, "
                     "zenflow); device-adam partitions its optimizer state at stages 1 and 2: use stage 1 or 2");
}
OptimizerFootprint device_adam_footprint(const Spec& s, double, double, int ranks) {
  const double f = 2.0 + (half(s) ? 1 : 0);
  return {0, s.zero_stage >= 1 && several(ranks) ? f / ranks : f};
}

// ---- zero-offload: host master, gradient and moments (4), under bf16 the 2-byte gradient down and
// parameter up; with a Twin-Flow split (graphs/strategies/twin_flow.hpp) the first
// floor((1 - ratio) x N) of its N sub-groups keep device-adam's state on the device, the
// sub-groups taken as equal in size (N: 1 when sub_group_size >= the parameters, the parameter
// tensors when it is 0, else parameters / sub_group_size rounded up)
void check_zero_offload(const Spec& s, int ranks) {
  if (s.offload_ratio < 1.0 && s.zero_stage >= 1 && several(ranks))
    throw InputError(s.where("zero_optimization.offload_optimizer.ratio"),
                     nlohmann::json(s.offload_ratio).dump() + " (Twin-Flow) with zero_optimization.stage " +
                         std::to_string(s.zero_stage) +
                         " on several ranks: a split of partitioned state is not implemented (Twin-Flow runs in one "
                         "process, where every stage is stage 0); use one process or ratio 1 (docs/spec.md, "
                         "\"Twin-Flow\")");
}
OptimizerFootprint zero_offload_footprint(const Spec& s, double P, double tensors, int ranks) {
  const double groups = s.sub_group_size >= P   ? 1.0
                        : s.sub_group_size <= 0 ? std::max(1.0, tensors)
                                                : std::ceil(P / (double)s.sub_group_size);
  const double on_device = std::floor(std::max(0.0, 1.0 - s.offload_ratio) * groups) / groups;
  OptimizerFootprint f = per_rank(
      s, {(1 - on_device) * (4 + (half(s) ? 2 * wire(s) : 0)), on_device * (2 + (half(s) ? 1 : 0))}, ranks);
  f.streamed = 1 - on_device;  // the host part's
  return f;
}

// ---- zero-offload-dpu: host master and moments (3) and two slots of gradient down and result up
// (4 x 1; under bf16 4 x 0.5 and the fp32 gradient, 1)
void check_zero_offload_dpu(const Spec& s, int) { check_no_twin_flow(s); }
OptimizerFootprint zero_offload_dpu_footprint(const Spec& s, double, double, int ranks) {
  OptimizerFootprint f = per_rank(s, {3 + 4 * wire(s) + (half(s) ? 1 : 0), 0}, ranks);
  f.streamed = 1;
  return f;
}

// ---- zenflow (graphs/strategies/zenflow/, docs/zenflow.md)
void check_zenflow(const Spec& s, int ranks) {
  check_no_twin_flow(s);
  const Spec::ZenFlow& z = s.zenflow;
  if (z.deepspeed_rules() && s.precision == "fp16")
    throw InputError(s.where("zenflow.semantics"),
                     "\"deepspeed\" is not implemented with precision fp16 (DeepSpeed checks the overflow only at "
                     "update boundaries and drops the whole window there, while its selective steps take every "
                     "step's loss-scaled gradient unchecked; docs/zenflow.md): use semantics \"zenflow\"");
  if (s.train.gradient_accumulation_steps > 1)
    throw InputError(s.where("train.gradient_accumulation_steps"),
                     "must be 1 with strategy zenflow: DeepSpeed's ZenFlow engine replaces the accumulation steps by "
                     "zenflow.update_interval (the host accumulates update_interval steps; docs/zenflow.md)");
  if (kSimulated && z.update_interval.is_auto)
    throw InputError(s.where("zenflow.update_interval"),
                     "\"auto\" reads the gradient mass each step; give a number of steps in simulation (a simulated "
                     "run computes no values, docs/simulation.md)");
  if (!several(ranks) || s.zero_stage < 2) return;
  // docs/data-parallel.md, "ZeRO stages": what stages 2 and 3 do not cover
  const std::string where = s.where("zero_optimization.stage"), st = std::to_string(s.zero_stage);
  if (s.zero_stage == 3 && z.local_sum())
    throw InputError(where, "3 with zenflow.dp_selection \"local-sum\" is not implemented (the proxy reads each "
                            "rank's whole local gradient, which stage 3 reduce-scatters inside the backward); use "
                            "dp_selection \"exact\" (the default) or stage 2");
  if (s.zero_stage == 3 && z.deepspeed_rules())
    throw InputError(where, "3 with zenflow.semantics \"deepspeed\" is not implemented (its 1-D warm-up and window "
                            "sums read whole parameters); use semantics \"zenflow\" or stage 2");
  if (z.update_interval.is_auto)
    throw InputError(where, st + " with zenflow.update_interval \"auto\": the auto rule reads whole gradients, "
                                 "which stage " + st + " reduce-scatters; use stage 1 or a fixed update_interval");
}
// host master and moments (3; with semantics deepspeed and overlap_step a second set of moments,
// 2), the resync buffer (1; bf16 0.5), its D+1 fp32 accumulators (bf16: and D+1 2-byte results);
// on the device the selected columns' moments (2 x topk_ratio) and under bf16/fp16 with semantics
// zenflow their fp32 master (topk_ratio), twice with zenflow.offload: the host copy and the
// device's. accumulate_on "host" under bf16/fp16: the two slots the gradient crosses into (2 x
// 0.5); "device": the interval's accumulator as the device's (1, device_state_bytes.accumulator). The 1-D
// parameters' device moments and masters are among the 1-D extras the estimate leaves out
// (memory_estimate.cpp).
OptimizerFootprint zenflow_footprint(const Spec& s, double, double, int ranks) {
  const Spec::ZenFlow& z = s.zenflow;
  const double two_sets = z.deepspeed_rules() && z.overlap_step ? 2 : 0;
  const double D = z.staleness();
  const double sel_state = 2 + (half(s) && !z.deepspeed_rules() ? 1 : 0);
  const bool on_host = z.accumulate_on_host();
  OptimizerFootprint f =
      per_rank(s,
               {3 + two_sets + wire(s) + (D + 1) * (1 + (half(s) ? wire(s) : 0)) + (on_host && half(s) ? 2 * wire(s) : 0),
                sel_state * z.topk_ratio * (z.offload ? 2 : 1) +
                    (on_host ? 0 : s.zero_stage >= 1 && several(ranks) ? 1.0 / ranks : 1)},
               ranks);
  f.streamed = 1;  // the 2-D weights' (the 1-D ones are a small share)
  return f;
}

}  // namespace

const std::vector<StrategyDef>& strategy_defs() {
  static const std::vector<StrategyDef> defs = {
      {"device-adam", "AdamW on the device, no offload (the speed reference)", false, false, check_device_adam,
       device_adam_footprint,
       [](const Spec& s, Runtime& rt, std::vector<Param*> p, int64_t, const Comm* c) {
         return make_device_adam(s, rt, std::move(p), c);
       }},
      {"zero-offload", "host AdamW on fp32 masters, the device waits for the parameters (ZeRO-Offload)", true, false,
       check_zero_offload, zero_offload_footprint,
       [](const Spec& s, Runtime& rt, std::vector<Param*> p, int64_t, const Comm* c) {
         return make_zero_offload(s, rt, std::move(p), c, false);
       }},
      {"zero-offload-dpu", "zero-offload with its one-step delayed parameter update", true, false,
       check_zero_offload_dpu, zero_offload_dpu_footprint,
       [](const Spec& s, Runtime& rt, std::vector<Param*> p, int64_t, const Comm* c) {
         return make_zero_offload(s, rt, std::move(p), c, true);
       }},
      {"zenflow", "top-k columns on the device at once, the rest by an asynchronous host AdamW (ZenFlow)", true, true,
       check_zenflow, zenflow_footprint,
       [](const Spec& s, Runtime& rt, std::vector<Param*> p, int64_t spe, const Comm* c) {
         return make_zenflow(s, rt, std::move(p), spe, c);
       }},
  };
  return defs;
}

const StrategyDef* find_strategy(const std::string& name) {
  for (const StrategyDef& d : strategy_defs())
    if (name == d.name) return &d;
  return nullptr;
}

const StrategyDef& strategy_def(const std::string& name) {
  if (const StrategyDef* d = find_strategy(name)) return *d;
  throw InputError("strategy", "unknown strategy '" + name + "' (expected " + strategy_names() + ")");
}

std::string strategy_names(const char* sep) {
  std::string out;
  for (const StrategyDef& d : strategy_defs()) out += (out.empty() ? "" : sep) + std::string(d.name);
  return out;
}

bool two_byte_gradients(const Spec& s, int ranks) {
  if (s.precision != "bf16" || ranks > 1 || s.train.gradient_accumulation_steps > 1) return false;
  const bool clip = s.gradient_clipping > 0;
  if (s.strategy == "device-adam") return !clip;
  if (s.strategy == "zero-offload") return !(clip && s.offload_ratio < 1.0);
  if (s.strategy == "zero-offload-dpu") return true;
  if (s.strategy == "zenflow") return !s.zenflow.deepspeed_rules();
  return false;
}

}  // namespace zf
