#include "graphs/strategies/strategy.hpp"

#include <string_view>

#include "graphs/strategies/partition.hpp"
#include "graphs/strategies/registry.hpp"
#include "runtime/comm.hpp"

namespace zf {

Strategy::Strategy(Runtime& rt, std::vector<Param*> params, const Spec& spec, const Comm* comm)
    : rt_(rt), params_(std::move(params)), spec_(spec), tile_elems_(spec.runtime.tile_elems),
      bf16_(spec.precision == "bf16" || spec.precision == "fp16"),
      half_(spec.precision == "fp16" ? Half::Fp16 : Half::Bf16),
      wire_(spec.grad_wire() == "bf16" ? Wire::Bf16 : spec.grad_wire() == "fp16" ? Wire::Fp16 : Wire::Fp32),
      comm_(comm && comm->size() > 1 && spec.zero_stage >= 1 ? comm : nullptr) {
  hp_.beta1 = spec.optimizer.beta1;
  hp_.beta2 = spec.optimizer.beta2;
  hp_.eps = spec.optimizer.eps;
  hp_.weight_decay = spec.optimizer.weight_decay;
}

void Strategy::plan_partition(const std::vector<Param*>& ps) {
  if (!comm_) return;
  const size_t R = (size_t)comm_->size();
  std::vector<size_t> sizes;
  for (const Param* p : ps) sizes.push_back(p->value.numel());
  std::vector<std::vector<size_t>> b = partition_bounds(sizes, R);
  for (size_t r = 0; r < R; ++r)
    if (partition_share(b, r) == 0) {
      size_t total = 0;
      for (size_t n : sizes) total += n;
      throw InputError(spec_.where("zero_optimization.stage"),
                       std::to_string(spec_.zero_stage) + " partitions " + std::to_string(total) +
                           " host-state elements per buffer over " + std::to_string(R) + " ranks, leaving rank " +
                           std::to_string(r) + " none (shares are cut on multiples of " +
                           std::to_string(kPartitionAlign) + " elements): use fewer ranks or stage 0 "
                           "(docs/data-parallel.md)");
    }
  for (size_t i = 0; i < ps.size(); ++i) bounds_[ps[i]] = std::move(b[i]);
  if (spec_.zero_stage != 3) return;
  shard_bounds_ = bounds_;
  std::vector<Param*> rest;
  std::vector<size_t> rest_sizes;
  for (Param* p : params_)
    if (!bounds_.count(p)) {
      rest.push_back(p);
      rest_sizes.push_back(p->value.numel());
    }
  std::vector<std::vector<size_t>> rb = partition_bounds(rest_sizes, R);
  for (size_t i = 0; i < rest.size(); ++i) shard_bounds_[rest[i]] = std::move(rb[i]);
}

HostTensor Strategy::host_tensor(const Param& p, const std::string& name, size_t elem_size) {
  const std::vector<size_t>* b = bounds(p);
  HostTensor h(name, p.value.numel(), tile_elems_, elem_size, half_, b, b ? comm_ : nullptr);
  host_state_ += (int64_t)h.bytes();
  return h;
}

void Strategy::insert_adam_groups(const SubmitOptions& o, const AdamParams& hp, int64_t step, float grad_scale,
                                  const std::vector<AdamGroupPart>& parts, const std::vector<std::string>& names,
                                  AdamGroupMode mode) const {
  std::vector<AdamGroupPart> group;
  size_t elems = 0, first = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    group.push_back(parts[i]);
    elems += parts[i].x->numel();
    if (elems >= kGroupElems || group.size() == kGroupParts || i + 1 == parts.size()) {
      const std::string more = group.size() > 1 ? "+" + std::to_string(group.size() - 1) : "";
      insert_adam_group(o.named("adam.device." + names[first] + more), hp, step, grad_scale, group, mode);
      group.clear();
      elems = 0;
      first = i + 1;
    }
  }
}

void Strategy::allgather_param(int64_t t, const Param& p) {
  const std::vector<size_t>* b = bounds(p);
  if (!b || s3_) return;  // stage 3: the next forward gathers the shards
  insert_allgather(rt_.device(t).named("allgather.param." + p.name), p.value, *b, *comm_);
  allgather_ += (int64_t)p.value.bytes();  // its stored bytes on the wire (2 a value under bf16/fp16)
}

void Strategy::submit_gradient_collectives(const UpdateStep& u, const Comm& comm) {
  if (s3_) return;  // stage 3: reduce-scattered by the layer hook as the backward completes
  for (const Param* p : params_)
    if (!streamed(*p)) submit_gradient_collective(u, *p, comm);
}

void Strategy::stream_prologue(const UpdateStep& u, const Param& p, const Comm* comm) {
  if (comm) submit_gradient_collective(u, p, *comm);
  if (stream_round_) insert_round_bf16(rt_.device(u.t).named("bf16.grad." + p.name), p.grad);
}

void Strategy::submit_gradient_collective(const UpdateStep& u, const Param& p, const Comm& comm) {
  const float mean = 1.0f / (float)comm.size();
  const std::vector<size_t>* b = zero_stage() == 2 ? bounds(p) : nullptr;
  if (b) {
    insert_reduce_scatter(rt_.device(u.t).named("reduce_scatter.grad." + p.name), p.grad, mean, *b, comm, wire_);
    reduce_scatter_ += (int64_t)(p.grad.numel() * wire_bytes(wire_));
  } else {
    insert_allreduce(rt_.device(u.t).named("allreduce.grad." + p.name), p.grad, mean, comm, wire_);
    grad_allreduce_ += (int64_t)(p.grad.numel() * wire_bytes(wire_));
  }
}

// stage 3: a parameter's value or gradient is its shard (the slices shifted to the segment's start)
void Strategy::to_host(const SubmitOptions& o, const Tensor& dev_in, const HostTensor& host, bool count) {
  size_t base = 0;
  const Tensor& dev = s3_ ? s3_->resolve(dev_in, &base) : dev_in;
  for (size_t i = 0; i < host.tiles.size(); ++i) {
    insert_copy(o.named(std::string(o.name) + "[" + std::to_string(i) + "]"), dev,
                {host.slices[i].offset - base, host.slices[i].n}, host.tiles[i], whole(host.tiles[i]));
    if (count) d2h_ += (int64_t)host.tiles[i].bytes();
  }
}

void Strategy::to_device(const SubmitOptions& o, const HostTensor& host, const Tensor& dev_in, bool count) {
  size_t base = 0;
  const Tensor& dev = s3_ ? s3_->resolve(dev_in, &base) : dev_in;
  for (size_t i = 0; i < host.tiles.size(); ++i) {
    insert_copy(o.named(std::string(o.name) + "[" + std::to_string(i) + "]"), host.tiles[i],
                whole(host.tiles[i]), dev, {host.slices[i].offset - base, host.slices[i].n});
    if (count) h2d_ += (int64_t)host.tiles[i].bytes();
  }
}

void Strategy::begin_stage3(Workload& wl) {
  if (zero_stage() != 3) return;
  const std::vector<std::vector<Param*>> groups = wl.layer_groups();
  size_t n = 0;
  for (const auto& g : groups) n += g.size();
  if (groups.empty() || n != params_.size())
    throw InputError(spec_.where("zero_optimization.stage"),
                     "3 partitions the device parameters by layer; the model " + wl.describe() +
                         " does not tell its layers (supported: the MLP, the GPT language model and classifiers); use stage 2");
  s3_ = std::make_unique<Stage3>(rt_, *comm_, wl, shard_bounds_, &allgather_, &reduce_scatter_,
                                 spec_.stage3_max_live_parameters, spec_.train.gradient_accumulation_steps, wire_);
  s3_->shard();
}

Strategy::DeviceState Strategy::device_state() const {
  DeviceState d;
  for (const Param* p : params_)
    if (!streamed(*p)) d.grads += (int64_t)p->grad.bytes();
  d.grads += stream_peak_;  // the streamed ones in flight (graphs/train/grad_stream.hpp)
  if (s3_) {
    d.params_shards = s3_->param_shard_bytes();
    d.params_transient = s3_->param_peak_bytes();
    d.grads = s3_->grad_shard_bytes() + s3_->grad_peak_bytes();
  } else {
    for (const Param* p : params_) d.params_shards += (int64_t)p->value.bytes();
  }
  d.params = d.params_shards + d.params_transient;
  d.optimizer = device_optimizer_bytes();
  d.accumulator = device_accumulator_bytes();
  return d;
}

bool Strategy::host_adam_task(const TaskRecord& r) {
  return std::string_view(r.name).rfind(kHostAdamTask, 0) == 0;
}

std::unique_ptr<Strategy> make_strategy(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                        int64_t steps_per_epoch, const Comm* comm) {
  return strategy_def(spec.strategy).make(spec, rt, std::move(params), steps_per_epoch, comm);
}

}  // namespace zf
