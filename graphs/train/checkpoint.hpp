// Full training-state checkpoints (docs/checkpoints.md): DIR/step-NNNNNNNN/{model,state}.safetensors
// plus DIR/latest (the name of the newest complete step directory) and DIR/lock.
// model.safetensors holds the device-side weights (loadable with --init); state.safetensors the
// strategy's state (moments, host master weights, ZenFlow's selection, device moments,
// accumulators, in-flight host results, counters), the step, and the effective spec. Both files
// carry CRC-32s of their header and their data. This file is the format: what a step directory
// holds, how it is found and loaded; graphs/train/checkpoint_dir.hpp installs step directories so
// that `latest` names a complete one whatever moment a writer dies at. The loader validates every
// value whether or not a checksum matches, and refuses anything else with an InputError naming the
// file and the field.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "graphs/strategies/state_io.hpp"
#include "graphs/train/checkpoint_dir.hpp"
#include "models/formats/safetensors.hpp"
#include "runtime/runtime.hpp"

namespace zf {

struct HostTensor;
class Workload;
class Strategy;
struct Spec;

// The checkpoint directory a run writes into, held for the run (a CrashSafeDir): a directory that
// holds another run's checkpoints (another strategy, model, data, optimizer, schedule, batch size
// or seed: check_compatible) is refused unless `overwrite`; with it, the other run's step
// directories are deleted once this run's first checkpoint is complete.
class CheckpointDir {
 public:
  CheckpointDir(const std::string& dir, const Spec& spec, bool overwrite);
  // Writes the checkpoint of the state after `step` (all tasks must be finished). Returns its dir.
  // `extra` adds the trainer's own state (the fp16 loss scaler) to state.safetensors.
  std::string write(int64_t step, const Spec& spec, Workload& wl, const Strategy& strat,
                    const std::function<void(StateWriter&)>& extra = nullptr);
  const std::string& path() const { return dir_.path(); }

 private:
  CrashSafeDir dir_;
};

// One checkpoint into `dir` through a CheckpointDir held for this call only (tests, fuzzing).
std::string write_checkpoint(const std::string& dir, int64_t step, const Spec& spec, Workload& wl,
                             const Strategy& strat, const std::function<void(StateWriter&)>& extra = nullptr);

struct CheckpointInfo {
  std::string dir;    // the step directory
  int64_t step = -1;  // last completed step
  nlohmann::json spec;  // validated: an object with the fields check_compatible compares
  std::string step_text, spec_text;  // the metadata as read (load_checkpoint re-checks them)
  std::string lr_timing;  // "deepspeed" (step t at the schedule's iteration t - 1), or "step" (older: lr(t))
};
// `path` is a checkpoint directory (its `latest` is followed) or a step directory. Reads and
// validates the state file's header only (format, step, spec; its checksum): no StarPU needed.
CheckpointInfo find_checkpoint(const std::string& path);
// Refuses a checkpoint whose model, data, optimizer or strategy differ from `spec`.
void check_compatible(const CheckpointInfo& ck, const Spec& spec);
// Loads weights and strategy state (before any step is submitted).
// `extra` reads what write_checkpoint's `extra` wrote.
void load_checkpoint(const CheckpointInfo& ck, Workload& wl, Strategy& strat,
                     const std::function<void(const StateReader&)>& extra = nullptr);

}  // namespace zf
