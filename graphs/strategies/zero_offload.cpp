// zero-offload: gradients to host buffers, AdamW on fp32 master weights in the host context,
// parameters back; the next forward waits for them (ZeRO-Offload). With delayed_update
// (zero-offload-dpu, ZeRO-Offload's delayed parameter update) the host AdamW of step t overlaps
// the device's step t + 1, and its result is copied to the device at the end of step t + 1.
// With zero_optimization.offload_optimizer.ratio < 1 (DeepSpeed's Twin-Flow, twin_flow.hpp) the
// parameters of the first sub-groups keep their optimizer state on the device and are updated
// there every step, by the device AdamW as device-adam does; the others as above.
#include "graphs/strategies/strategy.hpp"
#include "graphs/strategies/twin_flow.hpp"

namespace zf {
namespace {

class ZeroOffload final : public Strategy {
 public:
  ZeroOffload(Runtime& rt, std::vector<Param*> params, const Spec& spec, const Comm* comm, bool delayed_update)
      : Strategy(rt, params, spec, comm), delayed_(delayed_update) {
    plan_twin_flow();
    std::vector<Param*> host_side;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!split_.on_device[i]) host_side.push_back(params_[i]);
    plan_partition(host_side);  // stage >= 1: each rank's share of every parameter's host state
    for (size_t i = 0; i < params_.size(); ++i) {
      Param* p = params_[i];
      if (split_.on_device[i]) {
        st_.push_back(make_device_state(*p));
        continue;
      }
      st_.push_back(make_state(*p));
      // fp32 master weights start as the device parameters (not a per-step crossing)
      to_host(rt_.device(-1).named("init.master." + p->name), p->value, st_.back().master, false);
    }
    make_clip(split_.host_elems == 0);  // all on the device: clipped there, as device-adam
    for (size_t i = 0; i < params_.size(); ++i) index_[params_[i]] = i;
  }
  const char* name() const override { return delayed_ ? "zero-offload-dpu" : "zero-offload"; }

  void save_state(StateWriter& w) const override {
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& n = params_[i]->name;
      const int64_t io = params_[i]->in_out ? params_[i]->rows() : 0;  // logical layout (Param::in_out)
      if (split_.on_device[i]) {  // Twin-Flow's device part: device-adam's keys
        w.put("device.m." + n, st_[i].dm, io);
        w.put("device.v." + n, st_[i].dv, io);
        if (bf16_) w.put("device.master." + n, st_[i].dmaster, io);
        continue;
      }
      w.put("host.master." + n, st_[i].master, io);
      w.put("host.m." + n, st_[i].m, io);
      w.put("host.v." + n, st_[i].v, io);
      if (delayed_) {
        w.put("host.res0." + n, st_[i].up[0], io);
        w.put("host.res1." + n, st_[i].up[1], io);
      }
    }
    if (delayed_) w.put_i64("dpu.last", {last_});
  }

  void load_state(const StateReader& r) override {
    using V = StateReader::Values;
    std::vector<int64_t> l;
    if (delayed_) {
      l = r.i64("dpu.last");
      if (l.size() != 1) r.fail("dpu.last", std::to_string(l.size()) + " values, expected one counter");
      if (l[0] != r.step())  // the step of the last host update: every step has one
        r.fail("dpu.last", std::to_string(l[0]) + ", expected the checkpoint's step " + std::to_string(r.step()));
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& n = params_[i]->name;
      const int64_t io = params_[i]->in_out ? params_[i]->rows() : 0;
      if (split_.on_device[i]) {
        r.get("device.m." + n, st_[i].dm, V::Finite, io);
        r.get("device.v." + n, st_[i].dv, V::NonNegative, io);
        if (bf16_) r.get("device.master." + n, st_[i].dmaster, V::Finite, io);
        continue;
      }
      r.get("host.master." + n, st_[i].master, V::Finite, io);
      r.get("host.m." + n, st_[i].m, V::Finite, io);
      r.get("host.v." + n, st_[i].v, V::NonNegative, io);
      if (delayed_) {
        r.get("host.res0." + n, st_[i].up[0], V::Finite, io);
        r.get("host.res1." + n, st_[i].up[1], V::Finite, io);
      }
    }
    if (delayed_) last_ = l[0];
  }

  // Without clipping, each parameter's host AdamW starts as soon as its own gradient has crossed;
  // with it, after every gradient has crossed and the clip (over all of them) scaled them. fp16:
  // the gradient crosses as it is, scaled by the loss scale; the host AdamW unscales it, or the
  // clip's combined factor does (then the AdamW takes grad_scale 1).
  // delayed_update counts applied updates (UpdateStep::o): the ring parity and the first delayed
  // copy follow o, so a step skipped for an fp16 overflow leaves the pipeline as it was.
  void submit_update(const UpdateStep& u) override {
    const int b = slot(u);
    if (clip_) {  // Twin-Flow: the device part's gradients are parts too, where they are
      std::vector<ClipPart> parts;
      for (size_t i = 0; i < params_.size(); ++i) {
        if (split_.on_device[i]) {
          parts.push_back({&params_[i]->grad, whole(params_[i]->grad)});
          continue;
        }
        if (!streamed(*params_[i])) gradient_down(u.t, b, i);
        for (const Tensor& g : adam_grad(st_[i], b).tiles) parts.push_back({&g, whole(g)});
      }
      clip_->submit(u.t, split_.host_elems ? host(u.t) : rt_.device(u.t), parts, 1.0, 1.0f, 1.0f / u.grad_scale);
      for (size_t i = 0; i < params_.size(); ++i) update(u, i, 1.0f);
    } else {
      for (size_t i = 0; i < params_.size(); ++i) {
        if (!split_.on_device[i] && !streamed(*params_[i])) gradient_down(u.t, b, i);
        update(u, i, u.grad_scale);
      }
    }
    last_ = u.o;
  }

  // The host part's gradients cross as their layer's backward writes them; nothing else here
  // reads them on the device (the clip reads the host copies). Twin-Flow's device part stays whole.
  bool streams_gradient(const Param& p) const override {
    auto it = index_.find(&p);
    return it != index_.end() && !split_.on_device[it->second];
  }
  void stream_gradient(const UpdateStep& u, const Param& p, const Comm* comm) override {
    stream_prologue(u, p, comm);
    gradient_down(u.t, slot(u), index_.at(&p));
  }

  void add_metrics(nlohmann::json& m, int64_t) const override {
    if (spec_.offload_ratio == 1.0) return;
    m["twin_flow"] = {{"ratio", spec_.offload_ratio},           {"sub_group_size", spec_.sub_group_size},
                      {"sub_groups", split_.sub_groups},         {"device_sub_groups", split_.device_sub_groups},
                      {"device_elements", split_.device_elems}, {"host_elements", split_.host_elems},
                      {"device_state_bytes", device_state_}};
  }

  void flush(const UpdateStep& last) override {
    if (!delayed_ || last_ < 0) return;
    for (size_t i = 0; i < params_.size(); ++i) {
      to_device(rt_.crossing(last.t).named("h2d.param." + params_[i]->name), st_[i].up[last_ & 1],
                params_[i]->value);
      allgather_param(last.t, *params_[i]);
    }
  }

 private:
  // grad: the fp32 host gradient the AdamW reads (delayed_update: only with 2-byte crossings);
  // down / up: what the gradient crosses into and the parameters cross from (delayed_update: a
  // pair, by the parity of the update; else one, only with 2-byte crossings)
  // Twin-Flow's device part: dm, dv (and with 2-byte precisions the fp32 master dmaster), as
  // device-adam's
  struct State {
    HostTensor master, m, v, grad;
    HostTensor down[2], up[2];
    Tensor dm, dv, dmaster;
  };

  // DeepSpeed's split (twin_flow.hpp); ratio 1: every parameter on the host
  void plan_twin_flow() {
    std::vector<int64_t> numels;
    for (const Param* p : params_) numels.push_back(p->value.numel());
    split_ = twin_flow_split(numels, spec_.offload_ratio, spec_.sub_group_size);
    if (!split_.device_elems) return;
    // zero-offload-dpu and several partitioned ranks were refused when the spec was read (registry.cpp)
    if (clipping() && split_.host_elems && rt_.device_is_cuda())
      throw InputError(spec_.where("gradient_clipping"),
                       "with a Twin-Flow split on CUDA workers is not implemented (the host-side clip would read "
                       "the device part's gradients); use ratio 0 or 1, or no clipping");
  }

  State make_device_state(const Param& p) {
    State s;
    s.dm = Tensor::home(p.value.shape(), p.name + ".m");
    s.dv = Tensor::home(p.value.shape(), p.name + ".v");
    device_state_ += 2 * (int64_t)s.dm.bytes();
    if (bf16_) {  // as device-adam: fp32 master weights on the device
      s.dmaster = Tensor::home(p.value.shape(), p.name + ".master");
      device_state_ += (int64_t)s.dmaster.bytes();
      insert_copy(rt_.device(-1).named("init.master." + p.name), p.value, whole(p.value), s.dmaster, whole(s.dmaster));
    }
    return s;
  }

  // Twin-Flow's device part: device-adam's update of parameter i (device_adam.cpp)
  void device_update(const UpdateStep& u, size_t i, float grad_scale) {
    const SubmitOptions o = rt_.device(u.t);
    Param& p = *params_[i];
    State& s = st_[i];
    const Tensor& x = bf16_ ? s.dmaster : p.value;
    insert_adam_step(o.named("adam.device." + p.name), hp(u.o), u.o + 1, grad_scale, x, whole(x), p.grad,
                     whole(p.grad), s.dm, s.dv);
    if (bf16_) insert_copy(o.named("master.device." + p.name), x, whole(x), p.value, whole(p.value));
  }

  // precision "bf16" or "fp16" crosses 2-byte values; delayed_update crosses through its own
  // buffers at every precision
  bool wire() const { return delayed_ || bf16_; }
  int slot(const UpdateStep& u) const { return delayed_ ? (int)(u.o & 1) : 0; }
  // delayed_update: the host work of step t is needed two steps later
  SubmitOptions host(int64_t t) const { return delayed_ ? rt_.host(t).due_at(t + 2) : rt_.host(t); }
  const HostTensor& adam_grad(const State& s, int b) const { return delayed_ && !bf16_ ? s.down[b] : s.grad; }

  State make_state(const Param& p) {
    State s;
    const std::string& n = p.name;
    s.master = host_tensor(p, n + ".master");
    if (!delayed_) s.grad = host_tensor(p, n + ".hgrad");
    s.m = host_tensor(p, n + ".m");
    s.v = host_tensor(p, n + ".v");
    if (delayed_) {
      const size_t bytes = bf16_ ? 2 : 4;
      for (int i = 0; i < 2; ++i) {
        s.down[i] = host_tensor(p, n + ".hgrad" + std::to_string(i), bytes);
        s.up[i] = host_tensor(p, n + ".res" + std::to_string(i), bytes);
      }
      if (bf16_) s.grad = host_tensor(p, n + ".hgrad.f32");
    } else if (bf16_) {  // what crosses: bf16 (fp16) gradients down, bf16 (fp16) parameters up
      const std::string f = half_ == Half::Fp16 ? ".fp16" : ".bf16";
      s.down[0] = host_tensor(p, n + ".hgrad" + f, 2);
      s.up[0] = host_tensor(p, n + ".param" + f, 2);
    }
    return s;
  }

  void gradient_down(int64_t t, int b, size_t i) {
    Param& p = *params_[i];
    State& s = st_[i];
    to_host(rt_.crossing(t).named("d2h.grad." + p.name), p.grad, wire() ? s.down[b] : s.grad);
    if (bf16_)
      for (size_t k = 0; k < s.master.tiles.size(); ++k)
        insert_copy(host(t).named("unpack.grad." + p.name + "[" + std::to_string(k) + "]"), s.down[b].tiles[k],
                    whole(s.down[b].tiles[k]), s.grad.tiles[k], whole(s.grad.tiles[k]));
  }

  void update(const UpdateStep& u, size_t i, float grad_scale) {
    if (split_.on_device[i]) return device_update(u, i, grad_scale);
    const int64_t t = u.t;
    const int b = slot(u);
    Param& p = *params_[i];
    State& s = st_[i];
    const HostTensor& g = adam_grad(s, b);
    for (size_t k = 0; k < s.master.tiles.size(); ++k) {
      const std::string nm = p.name + "[" + std::to_string(k) + "]";
      const SubmitOptions ho = host(t).named(kHostAdamTask + nm);
      // without a copy after it, the AdamW's result is what crosses: prefetch it
      insert_adam_step(wire() ? ho : ho.prefetched(0), hp(u.o), u.o + 1, grad_scale, s.master.tiles[k],
                       whole(s.master.tiles[k]), g.tiles[k], whole(g.tiles[k]), s.m.tiles[k], s.v.tiles[k]);
      if (wire())
        insert_copy(host(t).named((delayed_ ? "result." : "pack.param.") + nm).prefetched(1), s.master.tiles[k],
                    whole(s.master.tiles[k]), s.up[b].tiles[k], whole(s.up[b].tiles[k]));
    }
    // delayed_update: the previous update's result (none before the first)
    const HostTensor* up = !delayed_ ? (bf16_ ? &s.up[0] : &s.master) : u.o >= 1 ? &s.up[b ^ 1] : nullptr;
    if (!up) return;
    to_device(rt_.crossing(t).named("h2d.param." + p.name), *up, p.value);
    allgather_param(t, p);  // stage >= 1: the other ranks' partitions
  }

  bool delayed_;
  TwinFlowSplit split_;
  int64_t device_state_ = 0;  // Twin-Flow: bytes of the device part's optimizer state
  std::vector<State> st_;
  std::map<const Param*, size_t> index_;  // params_[i] -> i
  int64_t last_ = -1;  // delayed_update: the last applied update (UpdateStep::o)
};

}  // namespace

std::unique_ptr<Strategy> make_zero_offload(const Spec& spec, Runtime& rt, std::vector<Param*> params, const Comm* comm,
                                            bool delayed_update) {
  return std::make_unique<ZeroOffload>(rt, std::move(params), spec, comm, delayed_update);
}

}  // namespace zf
