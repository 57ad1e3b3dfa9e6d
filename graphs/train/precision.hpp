// Precision "bf16" / "fp16" in the training loop (docs/spec.md): device parameters and gradients
// hold bf16 (fp16) values, rounded after every update and after every backward; under bf16 the
// device's matmuls and attention products multiply bf16 operands (Runtime::matmul_bf16): on CUDA
// workers on the tensor cores, on a CPU device where the CPU has native bf16 (the fp32 masters
// are the strategies': host-side for the offloading ones, device-side for device-adam). Under fp16
// also the loss scale (graphs/train/loss_scaler.hpp), the overflow check that skips a step, the
// updates applied so far and their checkpoint state (trainer.fp16.*). fp32: nothing is rounded
// and every update is applied.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "graphs/train/loss_scaler.hpp"
#include "runtime/runtime.hpp"

namespace zf {

class Comm;
class Strategy;
class StateReader;
class StateWriter;
class Workload;
struct UpdateStep;

class Precision {
 public:
  Precision(const Spec& spec, Runtime& rt, Workload& wl);
  bool bf16() const { return bf16_; }
  bool fp16() const { return fp16_; }
  // The run header's words for it: " (bf16)", " (fp16, dynamic loss scale)", or "".
  std::string describe() const;

  // bf16/fp16, before the strategy is made: each parameter's device value becomes 2-byte storage
  // (Tensor::store_half: 2 bytes per parameter on the device; every write to it rounded), its
  // values rounded into it. two_bytes false (RunOptions::half_storage, for tests): the values are
  // rounded in their 4-byte words, and again after every update (round_params).
  // The gradients too where two_byte_gradients(spec, ranks) holds (graphs/strategies/registry.hpp).
  void store_params(bool two_bytes, int ranks = 1);
  bool params_stored_half() const { return stored_; }
  bool grads_stored_half() const { return grads_stored_; }
  // Rounds the device parameters after step's update (-1: the initial values) where they are kept
  // in 4-byte words (not stored in 2 bytes). strat: where they are (ZeRO stage 3: this rank's
  // shards; Strategy::device_tensor); null: the workload's, whole.
  void round_params(int64_t step, const Strategy* strat) const;
  // Room for the loss scale of each of the run's T steps (the progress lines read it).
  void reserve_steps(int64_t T) { scale_of_.assign((size_t)T, 0.0); }
  // Step t starts: its loss scale (every micro-batch's) goes to the workload.
  void begin_step(int64_t t);
  // The updates applied before step t (UpdateStep::o).
  int64_t update_index(int64_t t) const { return fp16_ ? applied_ : t; }
  // After step t's backward and gradient collectives: rounds the gradients (ZeRO stage 3: this
  // rank's shards); fp16: waits for the overflow check, updates the scale and sets u.grad_scale.
  // False: the step is skipped. The gradients streamed during the backward (graphs/train/
  // grad_stream.hpp, never under fp16) it leaves: their layer's hook rounded them.
  bool finish_gradients(int64_t t, const Strategy& strat, const Comm* comm, UpdateStep& u);
  // Whether finish_gradients rounds the device gradients to bf16 (4-byte gradients the strategy
  // does not round itself).
  bool rounds_bf16_gradients(const Strategy& strat) const;
  // Step t's update was submitted.
  void after_update(int64_t t, const Strategy& strat) {
    round_params(t, &strat);
    ++applied_;
  }
  // The last applied update after T steps (-1: none), for Strategy::flush.
  int64_t last_update(int64_t T) const { return fp16_ ? applied_ - 1 : T - 1; }

  // The progress lines: the loss scale step s ran with, the steps skipped up to s, and the
  // schedule's index step s ran at (under fp16 the updates applied before it: DeepSpeed steps its
  // scheduler only on applied steps; UpdateStep::o), else s.
  double scale_at(int64_t s) const { return scale_of_[s]; }
  int64_t skipped_through(int64_t s) const;
  int64_t lr_index(int64_t s) const { return fp16_ ? s - (s > 0 ? skipped_through(s - 1) : 0) : s; }
  double scale() const { return scaler_.scale(); }
  size_t skipped_steps() const { return skipped_.size(); }
  // The metrics' "fp16" block (docs/metrics.md).
  nlohmann::json metrics() const;

  // Checkpoint state (fp16 only): the scaler, the updates applied, the steps skipped and the scale
  // changes, so the metrics cover the whole run.
  void save_state(StateWriter& w) const;
  void load_state(const StateReader& r);
  // After load_state from the checkpoint of `step` in `dir`: the counts agree with the step.
  void check_resumed(const std::string& dir, int64_t step) const;

 private:
  Runtime& rt_;
  Workload& wl_;
  bool bf16_, fp16_;
  bool stored_ = false;  // the parameters are stored in 2 bytes (store_params)
  bool grads_stored_ = false;  // and the gradients
  bool two_byte_grads_;        // two_byte_gradients(spec, 1): the spec allows them on one rank
  bool native_matmuls_ = false;  // bf16 on CUDA workers, or on a CPU device that multiplies bf16 natively
  // fp16: one flag word the gradient rounding raises on an inf or NaN (the overflow check)
  // (parameters that round to inf raise their own flag, which nobody reads: their next gradients
  // are then inf or NaN)
  Tensor overflow_, param_overflow_;
  LossScaler scaler_;
  int64_t applied_ = 0;
  std::vector<int64_t> skipped_;
  std::vector<std::pair<int64_t, double>> scale_changes_;  // (step, scale from the next step on)
  std::vector<double> scale_of_;  // the loss scale of each step (1 without fp16)
  double step_scale_ = 1.0;       // the current step's
};

}  // namespace zf
