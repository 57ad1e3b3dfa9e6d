#include "graphs/strategy.hpp"

namespace zf {

HostTensor::HostTensor(const std::string& name, size_t numel, int64_t tile_elems, size_t elem_size, Half half) {
  const size_t tile = (size_t)tile_elems;
  for (size_t off = 0, i = 0; off < numel; off += tile, ++i) {
    const size_t n = std::min(tile, numel - off);
    tiles.push_back(Tensor::home({(int64_t)n}, name + "[" + std::to_string(i) + "]", elem_size));
    tiles.back().set_half(half);
    slices.push_back({off, n});
  }
}

Strategy::Strategy(Runtime& rt, std::vector<Param*> params, const Spec& spec)
    : rt_(rt), params_(std::move(params)), spec_(spec), tile_elems_(spec.runtime.tile_elems),
      bf16_(spec.precision == "bf16" || spec.precision == "fp16"),
      half_(spec.precision == "fp16" ? Half::Fp16 : Half::Bf16) {
  hp_.beta1 = spec.optimizer.beta1;
  hp_.beta2 = spec.optimizer.beta2;
  hp_.eps = spec.optimizer.eps;
  hp_.weight_decay = spec.optimizer.weight_decay;
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
  DeviceAdam(Runtime& rt, std::vector<Param*> params, const Spec& spec) : Strategy(rt, params, spec) {
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
      // the trainer rounds the parameters to bf16 / fp16 after the update (graphs/trainer.cpp)
      if (bf16_) insert_copy(o.named("master.device." + p.name), x, whole(x), p.value, whole(p.value));
    }
  }

 private:
  std::vector<Tensor> m_, v_, master_;
};

// ---------------------------------------------------------------- zero-offload
class ZeroOffload final : public Strategy {
 public:
  ZeroOffload(Runtime& rt, std::vector<Param*> params, const Spec& spec) : Strategy(rt, params, spec) {
    for (Param* p : params_) {
      const size_t n = p->value.numel();
      State s;
      s.master = HostTensor(p->name + ".master", n, tile_elems_);
      s.hgrad = HostTensor(p->name + ".hgrad", n, tile_elems_);
      s.m = HostTensor(p->name + ".m", n, tile_elems_);
      s.v = HostTensor(p->name + ".v", n, tile_elems_);
      if (bf16_) {  // what crosses: bf16 (fp16) gradients down, bf16 (fp16) parameters up
        const std::string f = half_ == Half::Fp16 ? ".fp16" : ".bf16";
        s.wire_g = HostTensor(p->name + ".hgrad" + f, n, tile_elems_, 2, half_);
        s.wire_p = HostTensor(p->name + ".param" + f, n, tile_elems_, 2, half_);
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
  }

  struct State {
    HostTensor master, hgrad, m, v;
    HostTensor wire_g, wire_p;  // 2-byte crossings (precision "bf16" or "fp16")
  };
  std::vector<State> st_;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                        int64_t steps_per_epoch) {
  if (spec.strategy == "zenflow") return make_zenflow(spec, rt, params, steps_per_epoch);
  if (spec.strategy == "zero-offload-dpu") return make_zero_offload_dpu(spec, rt, params);
  if (spec.strategy == "device-adam") return std::make_unique<DeviceAdam>(rt, params, spec);
  if (spec.strategy == "zero-offload") return std::make_unique<ZeroOffload>(rt, params, spec);
  throw InputError(spec.source + ": strategy", "unknown strategy '" + spec.strategy + "'");
}

}  // namespace zf
