// Training strategies: what happens after a step's backward. Each submits the optimizer part of
// step t as tasks over the model's device-side handles and its own host-side handles:
//   device-adam   AdamW on the device, no offload (the speed reference).
//   zero-offload  gradients to host buffers, AdamW on fp32 master weights in the host context,
//                 parameters back; the next forward waits for them (ZeRO-Offload).
//   zero-offload-dpu  the same with ZeRO-Offload's one-step delayed parameter update.
//   zenflow       top-k columns on the device, the rest accumulated and updated on the host
//                 with bounded staleness (graphs/zenflow.cpp, docs/zenflow.md).
// Device-side and host-side copies are separate handles; every crossing is a copy task whose
// bytes are counted.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "codelets/codelets.hpp"
#include "graphs/checkpoint.hpp"
#include "graphs/clip.hpp"
#include "runtime/trace.hpp"
#include "graphs/spec.hpp"
#include "models/workload.hpp"

namespace zf {

// A host-resident copy of a device tensor, split into SIMD-aligned tiles so host work spreads
// over the host workers. tiles[i] mirrors device elements slices[i]. elem_size 2: bf16 or fp16
// tiles (`half`), the form in which values cross with precision "bf16" or "fp16" (insert_copy
// converts).
struct HostTensor {
  std::vector<Tensor> tiles;
  std::vector<Slice> slices;
  HostTensor() = default;
  HostTensor(const std::string& name, size_t numel, int64_t tile_elems, size_t elem_size = 4, Half half = Half::Bf16);
};

// One step's update as the trainer hands it to a strategy.
//   t: the trainer's step; it tags the tasks (metrics, traces, the lookahead throttle).
//   o: the updates applied before this one: t minus the steps skipped for a gradient overflow
//      under precision "fp16" (DeepSpeed skips them without advancing its optimizer or its
//      learning-rate scheduler); every optimizer counter (AdamW's bias correction, ZenFlow's
//      warm-up, intervals and selections) and the schedule's rate run on o. Without fp16, o == t.
//   grad_scale: multiplies every gradient the optimizer reads: 1 / the loss scale step t ran with
//      under fp16, else 1. The one place the gradients are unscaled; a clipping coefficient joins
//      it here (DeepSpeed's combined scale = clip x loss scale).
struct UpdateStep {
  int64_t t = 0, o = 0;
  float grad_scale = 1.0f;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual const char* name() const = 0;
  // Submits the update of step u.t (after the workload's backward of that step).
  virtual void submit_update(const UpdateStep& u) = 0;
  // Data-parallel runs (docs/data-parallel.md): called after the backward of step u.t, before the
  // trainer all-reduces the gradients, for what must read this rank's local gradients (ZenFlow's
  // column importance, all-reduced here instead of the gradients being gathered for selection).
  // u.grad_scale is not known yet (the overflow check follows the all-reduce).
  virtual void before_gradient_allreduce(const UpdateStep& u, const Comm& comm) {}
  // Submits whatever is still needed to make the device parameters final after the last step
  // (last.t: the last step; last.o: the last applied update, -1 when none was).
  virtual void flush(const UpdateStep& last) {}
  virtual void add_metrics(nlohmann::json& m, int64_t steps) const {}
  // Full optimizer state for checkpoints (no task may be in flight), and back (before step 0
  // of the resumed run is submitted). graphs/checkpoint.hpp.
  // ZenFlow events for traces (selections, host updates, merges), from the task records.
  virtual std::vector<TraceEvent> trace_events(const std::vector<TaskRecord>& records) const { return {}; }
  virtual void save_state(StateWriter& w) const = 0;
  virtual void load_state(const StateReader& r) = 0;

  // Bytes that crossed between the device and host sides (copy tasks submitted).
  int64_t bytes_d2h() const { return d2h_; }
  int64_t bytes_h2d() const { return h2d_; }
  // Bytes this rank contributed to collectives submitted by before_gradient_allreduce.
  int64_t bytes_allreduce() const { return allreduce_; }
  // gradient_clipping > 0: the clip points (graphs/clip.hpp); null otherwise.
  const GradClip* grad_clip() const { return clip_.get(); }

 protected:
  Strategy(Runtime& rt, std::vector<Param*> params, const Spec& spec);
  // Crossing copies, counted (by the host tiles' bytes: 2 per element for bf16 and fp16 tiles).
  void to_host(const SubmitOptions& o, const Tensor& dev, const HostTensor& host, bool count = true);
  void to_device(const SubmitOptions& o, const HostTensor& host, const Tensor& dev, bool count = true);

  Runtime& rt_;
  std::vector<Param*> params_;
  AdamParams hp_;  // betas, eps, weight decay; the rate comes from hp(t)
  Spec spec_;
  // The AdamW hyper-parameters of step t: hp_ with the learning rate of the schedule (Spec::lr_at).
  AdamParams hp(int64_t t) const {
    AdamParams h = hp_;
    h.lr = (float)spec_.lr_at(t);
    return h;
  }
  int64_t tile_elems_;
  bool bf16_;  // precision "bf16" or "fp16": crossings carry 2-byte values, of format half_
  Half half_;
  int64_t d2h_ = 0, h2d_ = 0;
  int64_t allreduce_ = 0;
  // gradient_clipping: created by the strategy that clips (device_side: where its parts live)
  std::unique_ptr<GradClip> clip_;
  bool clipping() const { return spec_.gradient_clipping > 0; }
  void make_clip(bool device_side) {
    if (clipping()) clip_ = std::make_unique<GradClip>(rt_, name(), (float)spec_.gradient_clipping, device_side);
  }
};

std::unique_ptr<Strategy> make_strategy(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                        int64_t steps_per_epoch);
// graphs/zenflow.cpp
std::unique_ptr<Strategy> make_zenflow(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                       int64_t steps_per_epoch);
std::unique_ptr<Strategy> make_zero_offload_dpu(const Spec& spec, Runtime& rt, std::vector<Param*> params);

}  // namespace zf
