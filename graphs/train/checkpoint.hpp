// Full training-state checkpoints (docs/checkpoints.md): DIR/step-NNNNNNNN/{model,state}.safetensors
// plus DIR/latest (the name of the newest complete step directory) and DIR/lock.
// model.safetensors holds the device-side weights (loadable with --init); state.safetensors the
// strategy's state (moments, host master weights, ZenFlow's selection, device moments,
// accumulators, in-flight host results, counters), the step, and the effective spec. Both files
// carry CRC-32s of their header and their data. A step directory is written under a temporary name,
// fsync'ed, renamed (or exchanged) into place, and only then does `latest` switch to it: whatever
// moment a writer dies at, `latest` names a complete checkpoint. One writer per directory (an
// advisory lock held for the run). The loader validates every value whether or not a checksum
// matches, and refuses anything else with an InputError naming the file and the field.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "graphs/strategies/state_io.hpp"
#include "models/safetensors.hpp"
#include "runtime/runtime.hpp"

namespace zf {

struct HostTensor;
class Workload;
class Strategy;
struct Spec;

// The checkpoint directory a run writes into, held for the run: created if missing, locked
// (flock on DIR/lock, which names the holder: pid, host, start time; a second writer is refused
// with an InputError naming it), stale temporaries of dead writers removed, and a directory that
// holds another run's checkpoints (another strategy, model, data, optimizer, schedule, batch size or
// seed: check_compatible) refused unless `overwrite`; with it, the other run's step directories
// are deleted once this run's first checkpoint is complete.
class CheckpointDir {
 public:
  CheckpointDir(const std::string& dir, const Spec& spec, bool overwrite);
  ~CheckpointDir();
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;
  // Writes the checkpoint of the state after `step` (all tasks must be finished). Returns its dir.
  // `extra` adds the trainer's own state (the fp16 loss scaler) to state.safetensors.
  std::string write(int64_t step, const Spec& spec, Workload& wl, const Strategy& strat,
                    const std::function<void(StateWriter&)>& extra = nullptr);
  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
  int lock_fd_ = -1;
  std::set<std::string> foreign_;  // step directories of another run (deleted after our first write)
};

// One checkpoint into `dir` through a CheckpointDir held for this call only (tests, fuzzing).
std::string write_checkpoint(const std::string& dir, int64_t step, const Spec& spec, Workload& wl,
                             const Strategy& strat, const std::function<void(StateWriter&)>& extra = nullptr);

// Removes what a dead writer left in `dir` (.tmp-step-*, .old-step-*, .latest.tmp.*, and
// .pin-step-* unless `latest` names it). Only call while holding the directory's lock.
void remove_stale_temporaries(const std::string& dir);

// Fault injection for the crash tests (docs/checkpoints.md): with ZF_FAULT_AFTER_FSOPS=N in the
// environment, the process kills itself (SIGKILL, as kill -9) right after the Nth filesystem
// operation of its checkpoint writes. Returns the number of operations counted so far.
int64_t checkpoint_fs_ops();

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
