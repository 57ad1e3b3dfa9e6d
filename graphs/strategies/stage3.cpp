// ZeRO stage 3: persistent shards, transient whole values (graphs/strategies/stage3.hpp).
#include "graphs/strategies/stage3.hpp"

#include <algorithm>
#include <utility>

#include "codelets/codelets.hpp"

namespace zf {

LiveGroups::LiveGroups(std::vector<std::vector<int64_t>> numels, int64_t budget) : n_(std::move(numels)) {
  for (const auto& g : n_) {
    live_.emplace_back(g.size(), false);
    int64_t e = 0;
    for (int64_t n : g) e += n;
    budget_ = std::max(budget_, e);
  }
  budget_ = std::max(budget_, budget);
}

bool LiveGroups::whole(int g) const {
  for (bool b : live_[(size_t)g])
    if (!b) return false;
  return true;
}

std::vector<LiveGroups::Item> LiveGroups::want(int g, int next) {
  std::vector<Item> out;
  auto take = [&](int h, size_t i) {
    out.push_back({h, (int)i});
    live_[(size_t)h][i] = true;
    live_elems_ += n_[(size_t)h][i];
  };
  for (size_t i = 0; i < n_[(size_t)g].size(); ++i)
    if (!live_[(size_t)g][i]) take(g, i);
  if (next >= 0 && next < groups())  // the prefetch: what fits beside g
    for (size_t i = 0; i < n_[(size_t)next].size(); ++i)
      if (!live_[(size_t)next][i] && live_elems_ + n_[(size_t)next][i] <= budget_) take(next, i);
  return out;
}

std::vector<LiveGroups::Item> LiveGroups::drop(int g) {
  std::vector<Item> out;
  for (size_t i = 0; i < n_[(size_t)g].size(); ++i)
    if (live_[(size_t)g][i]) {
      live_[(size_t)g][i] = false;
      live_elems_ -= n_[(size_t)g][i];
      out.push_back({g, (int)i});
    }
  return out;
}

namespace {
// A buffer for (part of) parameter value v: fp32, or 2-byte storage as v's (Tensor::store_half).
Tensor value_like(const Tensor& v, std::vector<int64_t> shape, const std::string& name, bool home) {
  const size_t es = v.stored_half() ? 2 : 4;
  Tensor t = home ? Tensor::home(std::move(shape), name, es) : Tensor::lazy(std::move(shape), name, es);
  if (v.stored_half()) t.store_half(v.half());
  return t;
}

std::vector<std::vector<int64_t>> numels(Workload& wl) {
  std::vector<std::vector<int64_t>> n;
  for (const std::vector<Param*>& g : wl.layer_groups()) {
    n.emplace_back();
    for (const Param* p : g) n.back().push_back((int64_t)p->value.numel());
  }
  return n;
}
}  // namespace

Stage3::Stage3(Runtime& rt, const Comm& comm, Workload& wl, const std::map<const Param*, std::vector<size_t>>& bounds,
               int64_t* allgather, int64_t* reduce_scatter, int64_t max_live, int accumulation, Wire wire)
    : rt_(rt), comm_(comm), wl_(wl), live_(numels(wl), max_live), allgather_(allgather),
      reduce_scatter_(reduce_scatter), A_(accumulation), wire_(wire) {
  const size_t r = (size_t)comm.rank();
  for (const std::vector<Param*>& group : wl.layer_groups()) {
    std::vector<Entry> es;
    for (Param* p : group) {
      auto it = bounds.find(p);
      if (it == bounds.end()) throw Error("ZeRO stage 3: parameter " + p->name + " is not partitioned");
      const size_t len = std::max<size_t>(1, it->second[r + 1] - it->second[r]);
      es.push_back({p, &it->second, (int)r, value_like(p->value, {(int64_t)len}, p->name + ".shard", false),
                    Tensor::lazy({(int64_t)len}, p->name + ".grad.shard"),
                    A_ > 1 ? Tensor::lazy({(int64_t)len}, p->name + ".grad_acc.shard") : Tensor()});
    }
    groups_.push_back(std::move(es));
  }
  for (const auto& g : groups_)
    for (const Entry& e : g) {
      by_tensor_[&e.p->value] = &e;
      by_tensor_[&e.p->grad] = &e;
    }
}


size_t Stage3::Entry::base() const { return (*b)[(size_t)value_rank]; }
size_t Stage3::Entry::len() const { return (*b)[(size_t)value_rank + 1] - (*b)[(size_t)value_rank]; }

void Stage3::shard() {
  if (sharded_) return;
  for (auto& g : groups_)
    for (Entry& e : g) {
      const SubmitOptions o = rt_.device(-1).named("stage3.shard." + e.p->name);
      if (e.len() > 0)
        insert_copy(o, e.p->value, {e.base(), e.len()}, e.value, {0, e.len()});
      else
        insert_zero(o, e.value);  // a rank without elements of p: a placeholder the gathers read
      Tensor whole_value = value_like(e.p->value, e.p->value.shape(), e.p->value.name(), false);
      std::swap(e.p->value, whole_value);
      whole_value.reset();  // the home tensor, once the copy has read it
      e.p->grad.discard();
    }
  rt_.wait_all();
  sharded_ = true;
  wl_.set_layer_hook(this);
}

void Stage3::unshard() {
  if (!sharded_) return;
  std::vector<Tensor> old;
  for (auto& g : groups_)
    for (Entry& e : g) {
      Tensor home = value_like(e.p->value, e.p->value.shape(), e.p->value.name(), true);
      insert_gather_shards(rt_.device(-1).named("stage3.unshard." + e.p->name), e.value, home, *e.b, comm_);
      std::swap(e.p->value, home);
      old.push_back(std::move(home));
    }
  rt_.wait_all();
  old.clear();
  for (int g = 0; g < (int)groups_.size(); ++g) live_.after_backward(g);  // none whole: the next shard() starts afresh
  live_bytes_ = 0;
  sharded_ = false;
  wl_.set_layer_hook(nullptr);
}

const Tensor& Stage3::resolve(const Tensor& dev, size_t* base) const {
  auto it = sharded_ ? by_tensor_.find(&dev) : by_tensor_.end();
  if (it == by_tensor_.end()) {
    *base = 0;
    return dev;
  }
  *base = it->second->base();
  return &dev == &it->second->p->value ? it->second->value : it->second->grad;
}

int64_t Stage3::group_bytes(int g) const {
  int64_t n = 0;
  for (const Entry& e : groups_[(size_t)g]) n += (int64_t)e.p->value.bytes();
  return n;
}

int64_t Stage3::param_shard_bytes() const {
  int64_t n = 0;
  for (const auto& g : groups_)
    for (const Entry& e : g) n += (int64_t)e.value.bytes();
  return n;
}

void Stage3::gather(int64_t step, const std::vector<LiveGroups::Item>& items) {
  for (const auto& [g, i] : items) {
    const Entry& e = groups_[(size_t)g][(size_t)i];
    insert_gather_shards(rt_.device(step).named("stage3.gather." + e.p->name), e.value, e.p->value, *e.b, comm_);
    // the gather moves the parameter's stored bytes (2 a value under bf16/fp16: codelets/shard.cpp)
    *allgather_ += (int64_t)e.p->value.bytes();
    live_bytes_ += (int64_t)e.p->value.bytes();
  }
  param_peak_ = std::max(param_peak_, live_bytes_);
}

void Stage3::release(const std::vector<LiveGroups::Item>& items) {
  for (const auto& [g, i] : items) {
    const Entry& e = groups_[(size_t)g][(size_t)i];
    e.p->value.discard();
    live_bytes_ -= (int64_t)e.p->value.bytes();
  }
}

void Stage3::before_forward(int64_t step, int g) { gather(step, live_.before_forward(g)); }
void Stage3::after_forward(int64_t step, int g) { release(live_.after_forward(g)); }
void Stage3::before_backward(int64_t step, int g) {
  gather(step, live_.before_backward(g));
  grad_peak_ = std::max(grad_peak_, group_bytes(g));  // the backward of g writes its whole gradients
}
// the gradients' mean over the ranks into the shards, as the backward completes; with gradient
// accumulation, times 1 / A into the accumulators (zeroed by the first micro-batch), which the
// last micro-batch copies into the gradient shards (stage 2's StepGraph does the same on whole
// gradients before its one reduce-scatter: the sums differ in order only)
void Stage3::after_backward(int64_t step, int g) {
  release(live_.after_backward(g));
  const float mean = 1.0f / (float)comm_.size();
  const SubmitOptions o = rt_.device(step);
  for (const Entry& e : groups_[(size_t)g]) {
    insert_reduce_scatter_shard(o.named("stage3.reduce_scatter." + e.p->name), e.p->grad, e.grad, mean, *e.b, comm_,
                                wire_);
    *reduce_scatter_ += (int64_t)(e.p->grad.numel() * wire_bytes(wire_));
    e.p->grad.discard();
    if (A_ == 1) continue;
    if (mb_ == 0) insert_zero(o.named("stage3.micro.zero." + e.p->name), e.acc);
    insert_accumulate(o.named("stage3.micro.accumulate." + e.p->name), e.acc, whole(e.acc), e.grad, whole(e.grad),
                      1.0f / (float)A_);
    if (mb_ == A_ - 1)
      insert_copy(o.named("stage3.micro.result." + e.p->name), e.acc, whole(e.acc), e.grad, whole(e.grad));
  }
}

}  // namespace zf
