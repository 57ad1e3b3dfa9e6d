// Gradient clipping (docs/spec.md, "gradient_clipping"): DeepSpeed's global-norm clip submitted as
// tasks of the step graph. One clip point = the sum of squares of every part (one task each, in
// parallel on the host side), the combined factor (kernels/clip_math.hpp: DeepSpeed's
// unscale_and_clip_grads, the single point where a loss scale would join) and every part scaled
// in place by it, before the optimizer reads it. The strategies choose the parts and the side:
// device-adam the device gradients, zero-offload(-dpu) the host copies of the gradients, ZenFlow
// its host accumulators at each interval's boundary (graphs/strategies/zenflow/update.cpp; with semantics
// "deepspeed" the 1-D parameters' host window sums too, as norm-only parts). Data-parallel runs clip
// after the gradient all-reduce, so every rank holds the global gradient and its norm already (no
// further collective), except under ZeRO stage >= 1, where each rank's parts are its partition
// and one all-reduce of the sums of squares gives the global norm.
#pragma once
#include <deque>
#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codelets/codelets.hpp"

namespace zf {

struct ClipPart {
  const Tensor* tensor;
  Slice slice;
  // false: the part enters the norm but is not scaled (ZenFlow's semantics "deepspeed": the 1-D
  // parameters' window sums, which DeepSpeed's norm counts but whose clipped host step is dropped
  // after the warm-up; graphs/strategies/zenflow/update.cpp)
  bool scaled = true;
};

class GradClip {
 public:
  // max_norm: DeepSpeed's gradient_clipping (> 0). device_side: the parts live on the device
  // (one partial-sums tensor, read back on CUDA workers), else on the host (one per part).
  // comm: the host parts are this rank's partition of a ZeRO stage >= 1 run (docs/data-parallel.md):
  // the sums of squares are all-reduced (a collective task) before the factor.
  GradClip(Runtime& rt, const std::string& name, float max_norm, bool device_side, const Comm* comm = nullptr);
  // Submits the clip point of step t over `parts` (the same count every time) in context `ctx`.
  // The norm is sqrt(sum of squares / sq_div) and the parts are multiplied by extra / combined
  // scale: ZenFlow's host step passes n^2 and 1/n (the interval's mean), the others 1 and 1.
  // loss_scale: the fp16 loss scale the parts still carry (1 / UpdateStep::grad_scale; 1 without
  // fp16): the factor then unscales and clips at once (DeepSpeed's combined scale), so the
  // optimizer that follows takes grad_scale 1; the recorded norm is the unscaled one.
  void submit(int64_t t, const SubmitOptions& ctx, const std::vector<ClipPart>& parts, double sq_div = 1.0,
              float extra = 1.0f, float loss_scale = 1.0f);
  // The clip points executed so far, by step (complete once their tasks ran).
  std::vector<ClipRecord> records() const;
  // The latest norm of a clip point at a step <= t (NaN: none yet).
  float norm_through(int64_t t) const;
  nlohmann::json metrics() const;
  float max_norm() const { return clip_; }
  // The latest clip point's factors {gradient factor, reported norm, clipped flag} (3 floats,
  // written by its clip-factor task): a task that reads it after submit() scales by that clip
  // point's factor (ZenFlow's semantics "deepspeed": the 1-D warm-up step on the device).
  const Tensor& factor() const { return factor_; }

 private:
  Runtime& rt_;
  std::string name_;
  float clip_;
  bool device_;
  std::vector<Tensor> partials_;
  const Comm* comm_;
  Tensor total_;  // comm: the sum of squares over the ranks
  Tensor factor_;
  ClipLog log_;
  // CUDA device-side clip points: read back (step, {factor, norm, clipped})
  std::deque<std::pair<int64_t, std::array<float, 3>>> readback_;
};

}  // namespace zf
