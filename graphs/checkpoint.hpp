// Full training-state checkpoints: DIR/step-NNNNNNNN/{model,state}.safetensors plus DIR/latest.
// model.safetensors holds the device-side weights (loadable with --init); state.safetensors the
// strategy's state (moments, host master weights, ZenFlow's selection, device moments,
// accumulators, in-flight host results, counters), the step, and the effective spec. Both files
// carry a CRC-32 of their data; a step directory is written under a temporary name and renamed,
// then `latest` is replaced atomically: an interrupted write never damages a saved checkpoint.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/safetensors.hpp"
#include "runtime/runtime.hpp"

namespace zf {

struct HostTensor;
class Workload;
class Strategy;
struct Spec;

// Strategies write and read their state through these (call only while no task is in flight).
class StateWriter {
 public:
  void put(const std::string& name, const Tensor& t);
  void put(const std::string& name, const HostTensor& t);  // tiles concatenated
  void put_i64(const std::string& name, const std::vector<int64_t>& v);
  void put_f64(const std::string& name, const std::vector<double>& v);
  StFile& file() { return f_; }

 private:
  StFile f_;
};

class StateReader {
 public:
  StateReader(const StFile& f, std::string path) : f_(f), path_(std::move(path)) {}
  void get(const std::string& name, const Tensor& t) const;
  void get(const std::string& name, const HostTensor& t) const;
  std::vector<int64_t> i64(const std::string& name) const;
  std::vector<double> f64(const std::string& name) const;
  bool has(const std::string& name) const { return f_.tensors.count(name) != 0; }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const;

 private:
  const StTensor& find(const std::string& name, const std::string& dtype, size_t bytes) const;
  const StFile& f_;
  std::string path_;
};

// Writes the checkpoint of the state after `step` (all tasks must be finished). Returns its dir.
// `extra` adds the trainer's own state (the fp16 loss scaler) to state.safetensors.
std::string write_checkpoint(const std::string& dir, int64_t step, const Spec& spec, Workload& wl,
                             const Strategy& strat, const std::function<void(StateWriter&)>& extra = nullptr);

struct CheckpointInfo {
  std::string dir;   // the step directory
  int64_t step = -1; // last completed step
  nlohmann::json spec;
  std::string lr_timing;  // "deepspeed" (step t at the schedule's iteration t - 1), or "step" (older: lr(t))
};
// `path` is a checkpoint directory (its `latest` is followed) or a step directory.
CheckpointInfo find_checkpoint(const std::string& path);
// Refuses a checkpoint whose model, data, optimizer or strategy differ from `spec`.
void check_compatible(const CheckpointInfo& ck, const Spec& spec);
// Loads weights and strategy state (before any step is submitted).
// `extra` reads what write_checkpoint's `extra` wrote.
void load_checkpoint(const CheckpointInfo& ck, Workload& wl, Strategy& strat,
                     const std::function<void(const StateReader&)>& extra = nullptr);

}  // namespace zf
