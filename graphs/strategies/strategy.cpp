#include "graphs/strategies/strategy.hpp"

#include "runtime/comm.hpp"

namespace zf {

Strategy::Strategy(Runtime& rt, std::vector<Param*> params, const Spec& spec, const Comm* comm)
    : rt_(rt), params_(std::move(params)), spec_(spec), tile_elems_(spec.runtime.tile_elems),
      bf16_(spec.precision == "bf16" || spec.precision == "fp16"),
      half_(spec.precision == "fp16" ? Half::Fp16 : Half::Bf16),
      comm_(comm && comm->size() > 1 && spec.zero_stage >= 1 ? comm : nullptr) {
  hp_.beta1 = spec.optimizer.beta1;
  hp_.beta2 = spec.optimizer.beta2;
  hp_.eps = spec.optimizer.eps;
  hp_.weight_decay = spec.optimizer.weight_decay;
}

void Strategy::plan_partition(const std::vector<Param*>& ps) {
  if (!comm_) return;
  const uint64_t R = (uint64_t)comm_->size(), tile = (uint64_t)tile_elems_;
  uint64_t total = 0;
  for (const Param* p : ps) total += p->value.numel();
  // tile -> owner: the rank whose 1/R of all elements holds the tile's middle (contiguous ranges in
  // model order, each within one tile of total / R)
  std::vector<int64_t> tiles_of(R, 0);
  uint64_t start = 0;
  for (const Param* p : ps) {
    const uint64_t n = p->value.numel();
    std::vector<size_t> b(R + 1, (size_t)n);
    b[0] = 0;
    for (uint64_t off = 0; off < n; off += tile) {
      const uint64_t len = std::min(tile, n - off);
      const uint64_t owner = std::min(R - 1, (2 * (start + off) + len) * R / (2 * total));
      ++tiles_of[owner];
      for (uint64_t r = 1; r <= owner; ++r) b[r] = std::min<size_t>(b[r], (size_t)off);
    }
    // owners rise along the tiles: b[r] is the first tile of rank >= r (n when none)
    for (uint64_t r = R - 1; r >= 1; --r) b[r] = std::min(b[r], b[r + 1]);
    bounds_[p] = std::move(b);
    start += n;
  }
  for (uint64_t r = 0; r < R; ++r)
    if (tiles_of[r] == 0)
      throw InputError(spec_.where("runtime.tile_elems"),
                       std::to_string(tile_elems_) + " elements per host tile leave rank " + std::to_string(r) + " of " +
                           std::to_string(R) + " without a tile of the partitioned host state (zero_optimization.stage " +
                           std::to_string(spec_.zero_stage) + "): lower runtime.tile_elems below " +
                           std::to_string(total / R) + " (docs/data-parallel.md)");
}

HostTensor Strategy::host_tensor(const Param& p, const std::string& name, size_t elem_size) {
  const std::vector<size_t>* b = bounds(p);
  HostTensor h(name, p.value.numel(), tile_elems_, elem_size, half_, b, b ? comm_ : nullptr);
  host_state_ += (int64_t)h.bytes();
  return h;
}

void Strategy::allgather_param(int64_t t, const Param& p) {
  const std::vector<size_t>* b = bounds(p);
  if (!b) return;
  insert_allgather(rt_.device(t).named("allgather.param." + p.name), p.value, *b, *comm_);
  allgather_ += (int64_t)p.value.bytes();
}

void Strategy::submit_gradient_collectives(const UpdateStep& u, const Comm& comm) {
  const float mean = 1.0f / (float)comm.size();
  for (Param* p : params_) {
    const std::vector<size_t>* b = zero_stage() == 2 ? bounds(*p) : nullptr;
    if (b) {
      insert_reduce_scatter(rt_.device(u.t).named("reduce_scatter.grad." + p->name), p->grad, mean, *b, comm);
      reduce_scatter_ += (int64_t)p->grad.bytes();
    } else {
      insert_allreduce(rt_.device(u.t).named("allreduce.grad." + p->name), p->grad, mean, comm);
      grad_allreduce_ += (int64_t)p->grad.bytes();
    }
  }
}

void Strategy::to_host(const SubmitOptions& o, const Tensor& dev, const HostTensor& host, bool count) {
  for (size_t i = 0; i < host.tiles.size(); ++i) {
    insert_copy(o.named(std::string(o.name) + "[" + std::to_string(i) + "]"), dev, host.slices[i],
                host.tiles[i], whole(host.tiles[i]));
    if (count) d2h_ += (int64_t)host.tiles[i].bytes();
  }
}

void Strategy::to_device(const SubmitOptions& o, const HostTensor& host, const Tensor& dev, bool count) {
  for (size_t i = 0; i < host.tiles.size(); ++i) {
    insert_copy(o.named(std::string(o.name) + "[" + std::to_string(i) + "]"), host.tiles[i],
                whole(host.tiles[i]), dev, host.slices[i]);
    if (count) h2d_ += (int64_t)host.tiles[i].bytes();
  }
}

namespace {

// ---------------------------------------------------------------- device-adam
class DeviceAdam final : public Strategy {
 public:
  DeviceAdam(Runtime& rt, std::vector<Param*> params, const Spec& spec) : Strategy(rt, params, spec, nullptr) {
    for (Param* p : params_) {
      m_.push_back(Tensor::home(p->value.shape(), p->name + ".m"));
      v_.push_back(Tensor::home(p->value.shape(), p->name + ".v"));
      if (bf16_) {  // mixed precision without offload: fp32 master weights on the device
        master_.push_back(Tensor::home(p->value.shape(), p->name + ".master"));
        insert_copy(rt_.device(-1).named("init.master." + p->name), p->value, whole(p->value), master_.back(),
                    whole(master_.back()));
      }
    }
    make_clip(true);
  }
  const char* name() const override { return "device-adam"; }
  void save_state(StateWriter& w) const override {
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t io = params_[i]->in_out ? params_[i]->rows() : 0;  // logical layout (Param::in_out)
      w.put("device.m." + params_[i]->name, m_[i], io);
      w.put("device.v." + params_[i]->name, v_[i], io);
      if (bf16_) w.put("device.master." + params_[i]->name, master_[i], io);
    }
  }
  void load_state(const StateReader& r) override {
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t io = params_[i]->in_out ? params_[i]->rows() : 0;
      r.get("device.m." + params_[i]->name, m_[i], StateReader::Values::Finite, io);
      r.get("device.v." + params_[i]->name, v_[i], StateReader::Values::NonNegative, io);
      if (bf16_) r.get("device.master." + params_[i]->name, master_[i], StateReader::Values::Finite, io);
    }
  }
  void submit_update(const UpdateStep& u) override {
    SubmitOptions o = rt_.device(u.t);
    float gs = u.grad_scale;
    if (clip_) {  // the device gradients, in place, before the AdamW reads them; the clip factor
                  // unscales (fp16) and clips at once, so the AdamW takes grad_scale 1
      std::vector<ClipPart> parts;
      for (Param* p : params_) parts.push_back({&p->grad, whole(p->grad)});
      clip_->submit(u.t, o, parts, 1.0, 1.0f, 1.0f / u.grad_scale);
      gs = 1.0f;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      Param& p = *params_[i];
      const Tensor& x = bf16_ ? master_[i] : p.value;
      insert_adam_step(o.named("adam.device." + p.name), hp(u.o), u.o + 1, gs, x, whole(x), p.grad,
                       whole(p.grad), m_[i], v_[i]);
      // the trainer rounds the parameters to bf16 / fp16 after the update (graphs/train/trainer.cpp)
      if (bf16_) insert_copy(o.named("master.device." + p.name), x, whole(x), p.value, whole(p.value));
    }
  }

 private:
  std::vector<Tensor> m_, v_, master_;
};

// ---------------------------------------------------------------- zero-offload
class ZeroOffload final : public Strategy {
 public:
  ZeroOffload(Runtime& rt, std::vector<Param*> params, const Spec& spec, const Comm* comm)
      : Strategy(rt, params, spec, comm) {
    plan_partition(params_);  // stage >= 1: each rank's share of every parameter's host state
    for (Param* p : params_) {
      State s;
      s.master = host_tensor(*p, p->name + ".master");
      s.hgrad = host_tensor(*p, p->name + ".hgrad");
      s.m = host_tensor(*p, p->name + ".m");
      s.v = host_tensor(*p, p->name + ".v");
      if (bf16_) {  // what crosses: bf16 (fp16) gradients down, bf16 (fp16) parameters up
        const std::string f = half_ == Half::Fp16 ? ".fp16" : ".bf16";
        s.wire_g = host_tensor(*p, p->name + ".hgrad" + f, 2);
        s.wire_p = host_tensor(*p, p->name + ".param" + f, 2);
      }
      // fp32 master weights start as the device parameters (not a per-step crossing)
      to_host(rt_.device(-1).named("init.master." + p->name), p->value, s.master, false);
      st_.push_back(std::move(s));
    }
    make_clip(false);
  }
  const char* name() const override { return "zero-offload"; }
  void save_state(StateWriter& w) const override {
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& n = params_[i]->name;
      const int64_t io = params_[i]->in_out ? params_[i]->rows() : 0;  // logical layout (Param::in_out)
      w.put("host.master." + n, st_[i].master, io);
      w.put("host.m." + n, st_[i].m, io);
      w.put("host.v." + n, st_[i].v, io);
    }
  }
  void load_state(const StateReader& r) override {
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& n = params_[i]->name;
      const int64_t io = params_[i]->in_out ? params_[i]->rows() : 0;
      r.get("host.master." + n, st_[i].master, StateReader::Values::Finite, io);
      r.get("host.m." + n, st_[i].m, StateReader::Values::Finite, io);
      r.get("host.v." + n, st_[i].v, StateReader::Values::NonNegative, io);
    }
  }
  void submit_update(const UpdateStep& u) override {
    const int64_t t = u.t;
    // without clipping, each parameter's host AdamW starts as soon as its own gradient has crossed;
    // with it, after every gradient has crossed and the clip (over all of them) scaled them.
    // fp16: the gradient crosses as it is, scaled by the loss scale; the host AdamW unscales it, or
    // the clip's combined factor does (then the AdamW takes grad_scale 1)
    if (clip_) {
      for (size_t i = 0; i < params_.size(); ++i) gradient_down(t, i);
      std::vector<ClipPart> parts;
      for (const State& s : st_)
        for (const Tensor& tile : s.hgrad.tiles) parts.push_back({&tile, whole(tile)});
      clip_->submit(t, rt_.host(t), parts, 1.0, 1.0f, 1.0f / u.grad_scale);
      for (size_t i = 0; i < params_.size(); ++i) update(u, i, 1.0f);
    } else {
      for (size_t i = 0; i < params_.size(); ++i) {
        gradient_down(t, i);
        update(u, i, u.grad_scale);
      }
    }
  }

 private:
  void gradient_down(int64_t t, size_t i) {
    Param& p = *params_[i];
    State& s = st_[i];
    to_host(rt_.crossing(t).named("d2h.grad." + p.name), p.grad, bf16_ ? s.wire_g : s.hgrad);
    if (bf16_)
      for (size_t k = 0; k < s.master.tiles.size(); ++k)
        insert_copy(rt_.host(t).named("unpack.grad." + p.name + "[" + std::to_string(k) + "]"), s.wire_g.tiles[k],
                    whole(s.wire_g.tiles[k]), s.hgrad.tiles[k], whole(s.hgrad.tiles[k]));
  }
  void update(const UpdateStep& u, size_t i, float grad_scale) {
    const int64_t t = u.t;
    Param& p = *params_[i];
    State& s = st_[i];
    for (size_t k = 0; k < s.master.tiles.size(); ++k) {
      const std::string nm = p.name + "[" + std::to_string(k) + "]";
      const SubmitOptions ho = rt_.host(t).named("adam.host." + nm);
      insert_adam_step(bf16_ ? ho : ho.prefetched(0), hp(u.o), u.o + 1, grad_scale, s.master.tiles[k],
                       whole(s.master.tiles[k]), s.hgrad.tiles[k], whole(s.hgrad.tiles[k]), s.m.tiles[k],
                       s.v.tiles[k]);
      if (bf16_)
        insert_copy(rt_.host(t).named("pack.param." + nm).prefetched(1), s.master.tiles[k], whole(s.master.tiles[k]),
                    s.wire_p.tiles[k], whole(s.wire_p.tiles[k]));
    }
    to_device(rt_.crossing(t).named("h2d.param." + p.name), bf16_ ? s.wire_p : s.master, p.value);
    allgather_param(t, p);  // stage >= 1: the other ranks' partitions
  }

  struct State {
    HostTensor master, hgrad, m, v;
    HostTensor wire_g, wire_p;  // 2-byte crossings (precision "bf16" or "fp16")
  };
  std::vector<State> st_;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                        int64_t steps_per_epoch, const Comm* comm) {
  if (spec.zero_stage >= 1) {  // docs/data-parallel.md, "ZeRO stages"
    const std::string where = spec.where("zero_optimization.stage");
    const std::string st = std::to_string(spec.zero_stage);
    if (spec.strategy == "device-adam")
      throw InputError(where, st + " partitions the host optimizer state of the offloading strategies (zero-offload, "
                              "zero-offload-dpu, zenflow); device-adam has none: use stage 0");
    const bool ranks = comm && comm->size() > 1;  // one process: every stage is stage 0
    if (ranks && spec.zero_stage == 2 && spec.strategy == "zenflow" && spec.zenflow.update_interval.is_auto)
      throw InputError(where, "2 with zenflow.update_interval \"auto\": the auto rule reads whole gradients, which "
                              "stage 2 reduce-scatters; use stage 1 or a fixed update_interval");
    if (ranks && spec.zero_stage == 2 && spec.strategy == "zenflow" && rt.device_is_cuda())
      throw InputError(where, "2 with zenflow on CUDA workers: the selected columns' all-reduce inside the "
                              "reduce-scatter runs on CPU workers only; use stage 1");
  }
  if (spec.strategy == "zenflow") return make_zenflow(spec, rt, params, steps_per_epoch, comm);
  if (spec.strategy == "zero-offload-dpu") return make_zero_offload_dpu(spec, rt, params, comm);
  if (spec.strategy == "device-adam") return std::make_unique<DeviceAdam>(rt, params, spec);
  if (spec.strategy == "zero-offload") return std::make_unique<ZeroOffload>(rt, params, spec, comm);
  throw InputError(spec.source + ": strategy", "unknown strategy '" + spec.strategy + "'");
}

}  // namespace zf
