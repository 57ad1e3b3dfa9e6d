// Every training strategy in one table (docs/architecture.md, "Strategies"): its name, the line
// --help and the README print, the spec rules that depend on it, the optimizer state it keeps (the
// memory estimate's figures), its traits and its factory. Nothing outside graphs/strategies/ tests a
// strategy's name: code asks the table. Adding a strategy is one entry in registry.cpp and its file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zf {

struct Spec;
class Runtime;
class Comm;
struct Param;
class Strategy;

// Optimizer state beyond the device's values and gradients, in floats per parameter, for one rank
// (a ZeRO partition of the host part already divided out).
struct OptimizerFootprint {
  double host = 0, device = 0;
  // The share of the parameters whose gradients the strategy streams during the backward
  // (Strategy::streams_gradient; graphs/train/grad_stream.hpp), where streaming applies.
  double streamed = 0;
};

struct StrategyDef {
  const char* name;
  const char* summary;  // one line: what the strategy does after a step's backward
  // Keeps optimizer work on the host side (false: the host context has nothing to do but help the
  // device's kernels, so the worker split gives it one core; graphs/schema/machine_check.cpp).
  bool host_optimizer;
  // Updates selected weight columns (ZenFlow): its weights are stored (in, out) under
  // model.weight_layout "auto", and the spec's zenflow block applies to it.
  bool zenflow;
  // The spec rules that depend on the strategy, given the run's data-parallel ranks (1: one
  // process); throws InputError naming the field. Called once, where the spec is read
  // (graphs/schema/spec.cpp: parse_spec, load_spec).
  void (*check)(const Spec& spec, int ranks);
  // params: the model's parameter count; tensors: its parameter tensors.
  OptimizerFootprint (*footprint)(const Spec& spec, double params, double tensors, int ranks);
  std::unique_ptr<Strategy> (*make)(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                    int64_t steps_per_epoch, const Comm* comm);
};

// The strategies, in the order --help lists them.
const std::vector<StrategyDef>& strategy_defs();
// The entry of `name`; throws InputError ("strategy") for an unknown name.
const StrategyDef& strategy_def(const std::string& name);
// The entry of `name`, or null (a name read from a file, not validated yet).
const StrategyDef* find_strategy(const std::string& name);

// Precision bf16 keeps the device gradients in 2 bytes too (Tensor::store_half: every backward
// write to one rounded, as every write to a parameter) where nothing scales them in place on the
// device before they are read and every gradient is one micro-batch's on one process: bf16 (fp16's
// loss scale is unscaled in place), one rank, no gradient accumulation, and the strategy's
// in-place steps absent (device-adam's clipping, Twin-Flow's clipping of its device part, ZenFlow's
// semantics "deepspeed": the 1/K scale and the warm-up clip). Elsewhere they stay fp32 words
// rounded to bf16 once per step. docs/spec.md, "precision: bf16".
bool two_byte_gradients(const Spec& s, int ranks);
// "device-adam | zero-offload | ..." (--help, messages)
std::string strategy_names(const char* sep = " | ");

}  // namespace zf
