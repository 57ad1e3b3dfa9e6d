// device-adam: AdamW on the device every step, no offload (the speed reference). At ZeRO stage 1
// or 2 on several ranks (DeepSpeed's ZeRO without offload, docs/data-parallel.md) each rank keeps
// the moments (and bf16's masters) of its partition only and updates that partition; the
// gradients are all-reduced (stage 1) or reduce-scattered (stage 2) before, the parameters
// all-gathered after.
#include "graphs/strategies/host_tensor.hpp"
#include "graphs/strategies/strategy.hpp"

namespace zf {
namespace {

class DeviceAdam final : public Strategy {
 public:
  DeviceAdam(Runtime& rt, std::vector<Param*> params, const Spec& spec, const Comm* comm)
      : Strategy(rt, params, spec, comm) {
    plan_partition(params_);  // stage >= 1 on several ranks (else nothing is partitioned)
    if (!bounds_.empty()) {
      partitioned_setup();
      make_clip(true);
      return;
    }
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
  int64_t device_optimizer_bytes() const override {  // the moments (and bf16's fp32 masters)
    int64_t n = 0;
    for (const auto* hs : {&pm_, &pv_, &pmaster_})
      for (const HostTensor& h : *hs) n += (int64_t)h.bytes();
    for (size_t i = 0; i < m_.size(); ++i) n += (int64_t)(m_[i].bytes() + v_[i].bytes());
    for (const Tensor& w : master_) n += (int64_t)w.bytes();
    return n;
  }
  // The state is the whole tensors, or at ZeRO stage >= 1 this rank's partitions (the writer gathers
  // them on rank 0, the reader takes this rank's: the files are stage 0's either way)
  void save_state(StateWriter& w) const override {
    if (bounds_.empty()) return put_state(w, m_, v_, master_);
    put_state(w, pm_, pv_, pmaster_);
  }
  void load_state(const StateReader& r) override {
    if (bounds_.empty()) return get_state(r, m_, v_, master_);
    get_state(r, pm_, pv_, pmaster_);
  }
  template <class T>
  void put_state(StateWriter& w, const std::vector<T>& m, const std::vector<T>& v, const std::vector<T>& master) const {
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t io = params_[i]->in_out ? params_[i]->rows() : 0;  // logical layout (Param::in_out)
      w.put("device.m." + params_[i]->name, m[i], io);
      w.put("device.v." + params_[i]->name, v[i], io);
      if (bf16_) w.put("device.master." + params_[i]->name, master[i], io);
    }
  }
  template <class T>
  void get_state(const StateReader& r, const std::vector<T>& m, const std::vector<T>& v,
                 const std::vector<T>& master) const {
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t io = params_[i]->in_out ? params_[i]->rows() : 0;
      r.get("device.m." + params_[i]->name, m[i], StateReader::Values::Finite, io);
      r.get("device.v." + params_[i]->name, v[i], StateReader::Values::NonNegative, io);
      if (bf16_) r.get("device.master." + params_[i]->name, master[i], StateReader::Values::Finite, io);
    }
  }
  // On a CPU device (not at ZeRO stage 3, whose shards the trainer rounds; not fp16, whose
  // overflow check rounds on its own) consecutive parameters share one AdamW task
  // (insert_adam_groups). In bf16 that task also rounds the gradient, updates the master and writes
  // the rounded parameter, where the trainer and this update would otherwise submit four tasks per
  // parameter (bf16.grad, adam.device, master.device, bf16.param): the same bits either way. With
  // gradient clipping the gradients are rounded before the clip reads them, so the trainer keeps
  // rounding them.
  bool grouped() const {
    return !rt_.device_is_cuda() && !stage3() && bounds_.empty() && (!bf16_ || half_ == Half::Bf16);
  }
  bool rounds_bf16_grads() const override { return bf16_ && grouped() && !clip_; }
  bool rounds_bf16_params() const override { return bf16_ && grouped(); }
  void submit_update(const UpdateStep& u) override {
    if (!bounds_.empty()) return partitioned_update(u);
    SubmitOptions o = rt_.device(u.t);
    float gs = u.grad_scale;
    if (clip_) {  // the device gradients, in place, before the AdamW reads them; the clip factor
                  // unscales (fp16) and clips at once, so the AdamW takes grad_scale 1
      std::vector<ClipPart> parts;
      for (Param* p : params_) parts.push_back({&p->grad, whole(p->grad)});
      clip_->submit(u.t, o, parts, 1.0, 1.0f, 1.0f / u.grad_scale);
      gs = 1.0f;
    }
    if (grouped()) {
      const AdamGroupMode mode = !bf16_ ? AdamGroupMode::Fp32
                                 : rounds_bf16_grads() ? AdamGroupMode::Bf16RoundGrad
                                                       : AdamGroupMode::Bf16;
      std::vector<AdamGroupPart> parts;
      std::vector<std::string> names;
      for (size_t i = 0; i < params_.size(); ++i) {
        Param& p = *params_[i];
        parts.push_back({bf16_ ? &master_[i] : &p.value, &p.grad, &m_[i], &v_[i], bf16_ ? &p.value : nullptr});
        names.push_back(p.name);
      }
      insert_adam_groups(o, hp(u.o), u.o + 1, gs, parts, names, mode);
      return;
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
  // ZeRO stage >= 1: this rank's partition of every parameter, in tiles (HostTensor: stage 0's tiles
  // cut to the partition; the moments and masters live wherever the device's AdamW tasks run, a
  // CUDA worker keeping their replicas), the masters from the initial values
  void partitioned_setup() {
    for (Param* p : params_) {
      const std::vector<size_t>* b = bounds(*p);
      pm_.emplace_back(p->name + ".m", p->value.numel(), tile_elems_, 4, half_, b, comm_);
      pv_.emplace_back(p->name + ".v", p->value.numel(), tile_elems_, 4, half_, b, comm_);
      if (!bf16_) continue;
      pmaster_.emplace_back(p->name + ".master", p->value.numel(), tile_elems_, 4, half_, b, comm_);
      const HostTensor& w = pmaster_.back();
      for (size_t k = 0; k < w.tiles.size(); ++k)
        insert_copy(rt_.device(-1).named("init.master." + p->name + "[" + std::to_string(k) + "]"), p->value,
                    w.slices[k], w.tiles[k], whole(w.tiles[k]));
    }
  }
  // the clip over this rank's partitions (the sums of squares all-reduced: GradClip), AdamW on
  // them, the bf16 parameter rounded from the master, then every rank's partition gathered
  void partitioned_update(const UpdateStep& u) {
    const SubmitOptions o = rt_.device(u.t);
    float gs = u.grad_scale;
    if (clip_) {
      std::vector<ClipPart> parts;
      for (size_t i = 0; i < params_.size(); ++i)
        for (const Slice& sl : pm_[i].slices) parts.push_back({&params_[i]->grad, sl});
      clip_->submit(u.t, o, parts, 1.0, 1.0f, 1.0f / u.grad_scale);
      gs = 1.0f;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      Param& p = *params_[i];
      for (size_t k = 0; k < pm_[i].tiles.size(); ++k) {
        const Slice sl = pm_[i].slices[k];
        const std::string n = p.name + "[" + std::to_string(k) + "]";
        if (!bf16_) {
          insert_adam_step(o.named("adam.device." + n), hp(u.o), u.o + 1, gs, p.value, sl, p.grad, sl,
                           pm_[i].tiles[k], pv_[i].tiles[k]);
          continue;
        }
        const Tensor& x = pmaster_[i].tiles[k];
        insert_adam_step(o.named("adam.device." + n), hp(u.o), u.o + 1, gs, x, whole(x), p.grad, sl, pm_[i].tiles[k],
                         pv_[i].tiles[k]);
        insert_copy(o.named("master.device." + n), x, whole(x), p.value, sl);  // rounded into the 2-byte value
      }
      allgather_param(u.t, p);
    }
  }

  std::vector<Tensor> m_, v_, master_;
  std::vector<HostTensor> pm_, pv_, pmaster_;  // ZeRO stage >= 1 (partitioned_setup)
};

}  // namespace

std::unique_ptr<Strategy> make_device_adam(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                           const Comm* comm) {
  return std::make_unique<DeviceAdam>(rt, std::move(params), spec, comm);
}

}  // namespace zf
