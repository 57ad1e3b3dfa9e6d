// Training strategies: what happens after a step's backward. Each submits the optimizer part of
// step t as tasks over the model's device-side handles and its own host-side handles:
//   device-adam   AdamW on the device, no offload (the speed reference; device_adam.cpp).
//   zero-offload  gradients to host buffers, AdamW on fp32 master weights in the host context,
//                 parameters back; the next forward waits for them (ZeRO-Offload; zero_offload.cpp).
//   zero-offload-dpu  the same with ZeRO-Offload's one-step delayed parameter update.
//   zenflow       top-k columns on the device, the rest accumulated and updated on the host
//                 with bounded staleness (graphs/strategies/zenflow/, docs/zenflow.md).
// Device-side and host-side copies are separate handles; every crossing is a copy task whose
// bytes are counted.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <nlohmann/json.hpp>
#include <vector>

#include "codelets/codelets.hpp"
#include "graphs/strategies/host_tensor.hpp"
#include "graphs/strategies/stage3.hpp"
#include "graphs/strategies/state_io.hpp"
#include "graphs/strategies/clip.hpp"
#include "runtime/trace.hpp"
#include "graphs/schema/spec.hpp"
#include "models/workload.hpp"

namespace zf {

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

// What the trainer reads of a strategy's run besides its metrics JSON, typed.
struct StrategyReport {
  struct ZenFlow {
    int64_t host_updates = 0;
    double staleness_max = 0, staleness_mean = 0;  // steps from a host result's newest gradient to its merge
    int64_t selections = 0;                        // column selections of this run
    std::string dp_selection;                      // zenflow.dp_selection
  };
  std::optional<ZenFlow> zenflow;  // strategy zenflow
};

// The name prefix of every host AdamW task (the trainer's host optimizer time, traces).
inline constexpr const char* kHostAdamTask = "adam.host.";

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual const char* name() const = 0;
  // The run header's words for it: the name, and what distinguishes its variants (zenflow: its semantics)
  virtual std::string describe() const { return name(); }
  // Submits the update of step u.t (after the workload's backward of that step).
  virtual void submit_update(const UpdateStep& u) = 0;
  // Data-parallel runs (docs/data-parallel.md): called after the backward of step u.t, before the
  // trainer all-reduces the gradients, for what must read this rank's local gradients (ZenFlow's
  // local-sum proxy: its column importance, all-reduced here; docs/data-parallel.md).
  // u.grad_scale is not known yet (the overflow check follows the all-reduce).
  virtual void before_gradient_allreduce(const UpdateStep& u, const Comm& comm) {}
  // Submits whatever is still needed to make the device parameters final after the last step
  // (last.t: the last step; last.o: the last applied update, -1 when none was).
  virtual void flush(const UpdateStep& last) {}
  virtual void add_metrics(nlohmann::json& m, int64_t steps) const {}
  virtual StrategyReport report() const { return {}; }
  // Bytes of optimizer state the strategy keeps on the device (device_state_bytes.optimizer).
  virtual int64_t device_optimizer_bytes() const { return 0; }
  // Host-homed buffers that device tasks read-write across steps (a CUDA worker keeps their
  // replica on the GPU): zenflow's accumulator with accumulate_on "device".
  virtual int64_t device_accumulator_bytes() const { return 0; }
  // Precision bf16: whether the update rounds the device gradients to bf16 itself as it reads them,
  // and writes the device parameters already rounded, so that the trainer (graphs/train/precision.hpp)
  // submits no rounding tasks of its own for them.
  virtual bool rounds_bf16_grads() const { return false; }
  virtual bool rounds_bf16_params() const { return false; }
  // Whether r is one of the host optimizer's AdamW tasks.
  static bool host_adam_task(const TaskRecord& r);
  // Full optimizer state for checkpoints (no task may be in flight), and back (before step 0
  // of the resumed run is submitted). graphs/train/checkpoint.hpp.
  // ZenFlow events for traces (selections, host updates, merges), from the task records.
  virtual std::vector<TraceEvent> trace_events(const std::vector<TaskRecord>& records) const { return {}; }
  virtual void save_state(StateWriter& w) const = 0;
  virtual void load_state(const StateReader& r) = 0;

  // Bytes that crossed between the device and host sides (copy tasks submitted).
  int64_t bytes_d2h() const { return d2h_; }
  int64_t bytes_h2d() const { return h2d_; }
  // Bytes this rank contributed to ZenFlow's importance all-reduces (docs/data-parallel.md).
  int64_t bytes_allreduce() const { return allreduce_; }
  // Data-parallel runs: the step's gradient collectives, after before_gradient_allreduce: every
  // gradient all-reduced (the mean over the ranks), or with zero_optimization.stage 2 the
  // partitioned ones reduce-scattered (each rank receives its partition's mean).
  // (Gradients streamed by graphs/train/grad_stream.hpp are not: their layer's hook did them.)
  virtual void submit_gradient_collectives(const UpdateStep& u, const Comm& comm);
  // p's part of submit_gradient_collectives: its all-reduce, or at stage 2 its reduce-scatter.
  void submit_gradient_collective(const UpdateStep& u, const Param& p, const Comm& comm);
  // Gradients that leave the device during the backward (graphs/train/grad_stream.hpp, docs/
  // architecture.md "Gradients in flight"). streams_gradient: whether nothing of this strategy
  // reads p's device gradient but its crossing to the host, so that the crossing may go as soon
  // as p's layer's backward has written it and the buffer be shared with another layer's.
  // stream_gradient: submits p's part of step u now, right after its layer's backward: its
  // collective (comm: a data-parallel run, else null), its bf16 rounding where the trainer
  // rounds 4-byte gradients (stream_prologue, for Precision::finish_gradients, which skips them),
  // its crossing and whatever else of the strategy reads the device gradient (the update of u then
  // skips them).
  virtual bool streams_gradient(const Param& p) const { return false; }
  virtual void stream_gradient(const UpdateStep& u, const Param& p, const Comm* comm) {}
  // The parameters whose gradients are streamed, and the bytes of their device buffers (each
  // shared one once; device_state_bytes.grads counts that in place of their whole gradients).
  // round_bf16: precision bf16 with 4-byte gradients the strategy does not round itself.
  void set_streamed(std::set<const Param*> ps, int64_t peak_bytes, bool round_bf16) {
    streamed_ = std::move(ps);
    stream_peak_ = peak_bytes;
    stream_round_ = round_bf16;
  }
  bool streamed(const Param& p) const { return streamed_.count(&p) != 0; }
  // Collective bytes (buffer sizes, summed over the steps): gradients all-reduced,
  // reduce-scattered, and device weights all-gathered after the host updates (stages 1 and 2).
  int64_t bytes_grad_allreduce() const { return grad_allreduce_; }
  int64_t bytes_reduce_scatter() const { return reduce_scatter_; }
  int64_t bytes_allgather() const { return allgather_; }
  // the format the gradients' collectives cross in (Spec::grad_wire)
  Wire grad_wire() const { return wire_; }
  // This rank's host-side optimizer state (every host tile it allocated: fp32 masters, moments,
  // host gradients and the 2-byte crossing buffers; ZenFlow's accumulators, results, resync).
  int64_t host_state_bytes() const { return host_state_; }
  // zero_optimization.stage in effect: 0 in a single process (nothing to partition)
  int zero_stage() const { return comm_ ? spec_.zero_stage : 0; }
  // ZeRO stage 3 (graphs/strategies/stage3.hpp; no-ops at other stages). begin_stage3: after the
  // weights are final (--init, --resume), before step 0: the device parameters become this rank's
  // shards, gathered by the workload's layer hook (exit 2 when the model has no layer groups).
  // unshard_params / shard_params: every rank together, around whatever reads whole parameters
  // outside a step (a checkpoint; after the last step, for good).
  void begin_stage3(Workload& wl);
  void unshard_params() {
    if (s3_) s3_->unshard();
  }
  void shard_params() {
    if (s3_) s3_->shard();
  }
  // Stage 3: the most elements of whole parameters at once in effect (LiveGroups::budget); 0 otherwise.
  int64_t stage3_max_live_elems() const { return s3_ ? s3_->max_live_elems() : 0; }
  // Stage 3: the micro-batch (0 .. A - 1) submitted next (its gradients accumulate into the shards).
  bool stage3() const { return s3_ != nullptr; }
  void set_micro_batch(int mb) {
    if (s3_) s3_->set_micro_batch(mb);
  }
  // Where a parameter's device value or gradient is (t: &p.value or &p.grad): at stage 3, while
  // sharded, this rank's shard of it (elementwise work, e.g. the precision rounding, goes there);
  // else t itself.
  const Tensor& device_tensor(const Tensor& t) const {
    size_t base = 0;
    return s3_ ? s3_->resolve(t, &base) : t;
  }
  // This rank's device state (docs/metrics.md, device_state_bytes): parameters (at stage 3 the
  // shards plus the most whole layer groups held at once), gradients likewise, device optimizer state.
  struct DeviceState {
    int64_t params = 0, params_shards = 0, params_transient = 0, grads = 0, optimizer = 0, accumulator = 0;
    int64_t total() const { return params + grads + optimizer + accumulator; }
  };
  DeviceState device_state() const;
  // gradient_clipping > 0: the clip points (graphs/strategies/clip.hpp); null otherwise.
  const GradClip* grad_clip() const { return clip_.get(); }

 protected:
  Strategy(Runtime& rt, std::vector<Param*> params, const Spec& spec, const Comm* comm);
  // ZeRO stage >= 1 over several ranks (else a no-op): partitions the elements of `ps` over the
  // ranks (contiguous shares in model order, each within kPartitionSlack elements of 1/R, cut on
  // SIMD-aligned offsets: partition.hpp). Call before the host tensors are made. Throws an
  // InputError when some rank would own no element. Stage 3: the other parameters' device values
  // are partitioned too, among themselves (shard_bounds_; a rank may own none of them).
  void plan_partition(const std::vector<Param*>& ps);
  // This rank's share of p's host copy (all of it unless partitioned), counted in host_state_bytes.
  HostTensor host_tensor(const Param& p, const std::string& name, size_t elem_size = 4);
  // p's partition bounds (null: p is not partitioned)
  const std::vector<size_t>* bounds(const Param& p) const {
    auto it = bounds_.find(&p);
    return it == bounds_.end() ? nullptr : &it->second;
  }
  // After this rank's updated partition of p crossed into p.value: every rank's partition in.
  void allgather_param(int64_t t, const Param& p);
  // On a CPU device, consecutive parameters' device AdamW in shared tasks (insert_adam_group), up
  // to kGroupElems elements or kGroupParts parameters a task, named "adam.device.<first>+<more>":
  // a task per parameter costs the device worker its per-task overhead each time (53 times a step
  // for the GPT of gpt-kjv.json). names[i] is parts[i]'s parameter. The same bits as a task each.
  static constexpr size_t kGroupElems = size_t{1} << 18, kGroupParts = 16;
  void insert_adam_groups(const SubmitOptions& o, const AdamParams& hp, int64_t step, float grad_scale,
                          const std::vector<AdamGroupPart>& parts, const std::vector<std::string>& names,
                          AdamGroupMode mode) const;
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
  Wire wire_;  // the gradients' collectives' format (Spec::grad_wire, codelets/wire.hpp)
  int64_t d2h_ = 0, h2d_ = 0;
  int64_t allreduce_ = 0;
  int64_t grad_allreduce_ = 0, reduce_scatter_ = 0, allgather_ = 0, host_state_ = 0;
  const Comm* comm_;  // null: one process, or zero_optimization.stage 0 (nothing partitioned)
  std::unique_ptr<Stage3> s3_;  // stage 3, from begin_stage3
  std::map<const Param*, std::vector<size_t>> bounds_;
  // stage 3: every parameter's device partition: bounds_, and for the parameters without host
  // state (zenflow's 1-D ones) a partition of their own (plan_partition)
  std::map<const Param*, std::vector<size_t>> shard_bounds_;
  // stage 3, sharded: the shard of a parameter's value or gradient (*base: its first element),
  // else dev itself (*base = 0)
  const Tensor& shard_of(const Tensor& dev, size_t* base) const {
    *base = 0;
    return s3_ ? s3_->resolve(dev, base) : dev;
  }
  std::set<const Param*> streamed_;  // set_streamed
  int64_t stream_peak_ = 0;
  bool stream_round_ = false;
  // A streamed gradient's collective (comm: a data-parallel run) and bf16 rounding, as the
  // trainer does them after the backward for the others (the first of stream_gradient's tasks).
  void stream_prologue(const UpdateStep& u, const Param& p, const Comm* comm);
  // gradient_clipping: created by the strategy that clips (device_side: where its parts live)
  std::unique_ptr<GradClip> clip_;
  bool clipping() const { return spec_.gradient_clipping > 0; }
  void make_clip(bool device_side) {
    if (clipping())
      clip_ = std::make_unique<GradClip>(rt_, name(), (float)spec_.gradient_clipping, device_side,
                                         bounds_.empty() ? nullptr : comm_);
  }
};

// The strategy of spec.strategy, from the table of graphs/strategies/registry.hpp (the spec's
// strategy rules were checked when it was read). comm: the ranks of a data-parallel run (null or
// one rank: a single process); with zero_optimization.stage >= 1 the strategy partitions its host
// state over them.
std::unique_ptr<Strategy> make_strategy(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                        int64_t steps_per_epoch, const Comm* comm = nullptr);
// One per strategy (device_adam.cpp, zero_offload.cpp, zenflow/zenflow.cpp); the registry calls them.
std::unique_ptr<Strategy> make_device_adam(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                           const Comm* comm);
// delayed_update: zero-offload-dpu
std::unique_ptr<Strategy> make_zero_offload(const Spec& spec, Runtime& rt, std::vector<Param*> params, const Comm* comm,
                                            bool delayed_update);
std::unique_ptr<Strategy> make_zenflow(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                       int64_t steps_per_epoch, const Comm* comm);

}  // namespace zf
