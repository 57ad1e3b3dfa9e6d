// bf16 / fp16 rounding, the fp16 overflow check and loss scale, and their checkpoint state
// (graphs/train/precision.hpp).
#include "graphs/train/precision.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "codelets/codelets.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "graphs/strategies/registry.hpp"
#include "graphs/strategies/strategy.hpp"
#include "models/workload.hpp"
#include "runtime/comm.hpp"
#include "runtime/simulation.hpp"

namespace zf {

using json = nlohmann::json;

Precision::Precision(const Spec& spec, Runtime& rt, Workload& wl)
    : rt_(rt),
      wl_(wl),
      bf16_(spec.precision == "bf16"),
      fp16_(spec.precision == "fp16"),
      two_byte_grads_(two_byte_gradients(spec, 1)),
      overflow_(fp16_ ? Tensor::home({1}, "fp16.overflow") : Tensor()),
      param_overflow_(fp16_ ? Tensor::home({1}, "fp16.param_overflow") : Tensor()),
      scaler_(spec.fp16) {
  // bf16 matmuls on CUDA workers (tensor cores from sm_80: the CUDA build's default architectures,
  // 80 and 90, docs/gpu.md) and on a CPU device where the CPU multiplies bf16 natively
  native_matmuls_ = bf16_ && (rt.device_is_cuda() || cpu_native_bf16());
  rt.set_matmul_bf16(native_matmuls_);
  rt.set_matmul_inputs_bf16(native_matmuls_);  // store_params(false) turns it off
  rt.set_activations_bf16(bf16_);               // on every device (RunOptions::bf16_activations)
  rt.set_activation_grads_bf16(bf16_);          // likewise (RunOptions::bf16_activation_grads)
  if (bf16_ && !rt.device_is_cuda() && !native_matmuls_)
    std::fprintf(stderr,
                 "zenflow-run: note: precision bf16: this CPU has no native bf16 (AVX512_BF16 or AMX, as oneDNN "
                 "sees it): the device matmuls run in fp32 (parameters and gradients still rounded to bf16)\n");
}

std::string Precision::describe() const {
  if (bf16_ && rt_.device_is_cuda()) return " (bf16, matmuls in bf16 on tensor cores)";
  if (bf16_)
    return native_matmuls_ ? " (bf16, matmuls in bf16)" : " (bf16, matmuls in fp32: no native bf16 on this CPU)";
  return std::string(bf16_ ? " (bf16)" : "") +
         (fp16_ ? (scaler_.dynamic() ? " (fp16, dynamic loss scale)" : " (fp16, static loss scale)") : "");
}

void Precision::store_params(bool two_bytes, int ranks) {
  if (!bf16_ && !fp16_) return;
  if (!two_bytes) {
    rt_.set_matmul_inputs_bf16(false);  // the 4-byte words throughout (the tests' A/B)
    round_params(-1, nullptr);
    return;
  }
  const Half h = bf16_ ? Half::Bf16 : Half::Fp16;
  for (Param* p : wl_.params()) {
    if (p->value.stored_half()) continue;
    Tensor s = Tensor::home(p->value.shape(), p->value.name(), 2);
    if (!kSimulated) {  // no value is real in simulation
      p->value.acquire_read();
      if (bf16_)
        kernels::cpu::pack_bf16(p->value.data(), s.as<uint16_t>(), p->value.numel());
      else
        kernels::cpu::pack_fp16(p->value.data(), s.as<uint16_t>(), p->value.numel());
      p->value.release();
    }
    s.store_half(h);
    std::swap(p->value, s);  // s, the fp32 buffer, is freed here
  }
  stored_ = true;
  if (!two_byte_grads_ || ranks > 1) return;
  for (Param* p : wl_.params()) {  // lazy: nothing written yet
    if (p->grad.stored_half()) continue;
    Tensor g = Tensor::lazy(p->grad.shape(), p->grad.name(), 2);
    g.store_half(h);
    std::swap(p->grad, g);
  }
  grads_stored_ = true;
}

// Rounding is elementwise: rounding the shards of stage 3 rounds what their gathers make whole.
void Precision::round_params(int64_t step, const Strategy* strat) const {
  if (stored_) return;  // every write to 2-byte storage rounds
  if (bf16_ && strat && strat->rounds_bf16_params()) return;  // its update wrote them rounded
  for (Param* p : wl_.params()) {
    const Tensor& v = strat ? strat->device_tensor(p->value) : p->value;
    if (bf16_)
      insert_round_bf16(rt_.device(step).named("bf16.param." + p->name), v);
    else if (fp16_)
      insert_round_fp16(rt_.device(step).named("fp16.param." + p->name), v, param_overflow_);
  }
}

void Precision::begin_step(int64_t t) {
  step_scale_ = scaler_.scale();
  if (fp16_) wl_.set_loss_scale((float)step_scale_);
  scale_of_[t] = fp16_ ? step_scale_ : 1.0;
}

bool Precision::rounds_bf16_gradients(const Strategy& strat) const {
  return bf16_ && !grads_stored_ && !strat.rounds_bf16_grads();
}

bool Precision::finish_gradients(int64_t t, const Strategy& strat, const Comm* comm, UpdateStep& u) {
  // (2-byte gradients: every write rounded them already)
  if (rounds_bf16_gradients(strat))  // else the update rounds them as it reads them
    for (Param* p : wl_.params())
      if (!strat.streamed(*p)) insert_round_bf16(rt_.device(t).named("bf16.grad." + p->name), strat.device_tensor(p->grad));
  if (!fp16_) return true;
  // The overflow check: the rounding to fp16 raises the flag on an inf or NaN in any gradient of
  // the step (after the all-reduce, so on every rank alike: an inf on one rank is an inf or NaN in
  // the sum). The builder waits for it here, as DeepSpeed reads its overflow flag on the host every
  // step: the step's update depends on it.
  for (Param* p : wl_.params())
    insert_round_fp16(rt_.device(t).named("fp16.grad." + p->name), strat.device_tensor(p->grad), overflow_);
  // ZeRO stage 2: a rank's reduce-scattered gradients are its partition's sums and the rest its
  // local values; an inf or NaN in any rank's local gradient is one in its owner's sum, so the OR
  // over the ranks of their flags is the global gradient's (every rank agrees). Stage 3: a rank
  // rounds only its shards (the sums of its segments), so the OR over the ranks sees every shard.
  if (comm && strat.zero_stage() >= 2)
    insert_allreduce_flag(rt_.host(t).named("fp16.overflow.allreduce"), overflow_, *comm);
  // The tracker's wait first: a blocking acquire issued while the step's tasks still run slows
  // every device task several times (docs/spec.md); after the wait the acquire finds the flag
  // written (and on a GPU only copies the word back).
  rt_.tracker().wait_device_through(t);
  overflow_.acquire_write();
  const bool skip = overflow_.as<uint32_t>()[0] != 0;
  overflow_.as<uint32_t>()[0] = 0;
  overflow_.release();
  rt_.tracker().status().rethrow_if_failed();
  scaler_.update(skip);  // DeepSpeed's update_scale (throws at min_loss_scale)
  if (scaler_.scale() != step_scale_) scale_changes_.push_back({t, scaler_.scale()});
  // unscale by the scale this step ran with (DeepSpeed divides by the scale update_scale has just
  // changed: docs/spec.md)
  u.grad_scale = (float)(1.0 / step_scale_);
  if (skip) skipped_.push_back(t);
  return !skip;
}

int64_t Precision::skipped_through(int64_t s) const {
  return (int64_t)(std::upper_bound(skipped_.begin(), skipped_.end(), s) - skipped_.begin());
}

json Precision::metrics() const {
  json changes = json::array();
  for (auto& [step, sc] : scale_changes_) changes.push_back({step, sc});
  return {{"dynamic", scaler_.dynamic()},
          {"loss_scale", scaler_.scale()},
          {"skipped_steps", (int64_t)skipped_.size()},
          {"skipped_at", skipped_},
          {"applied_steps", applied_},
          {"scale_changes", changes}};
}

void Precision::save_state(StateWriter& w) const {
  if (!fp16_) return;
  w.put_f64("trainer.fp16.scaler", scaler_.state());
  w.put_i64("trainer.fp16.applied", {applied_});
  w.put_i64("trainer.fp16.skipped", skipped_);
  std::vector<double> changes;  // (step, scale) pairs, flat
  for (auto& [step, sc] : scale_changes_) changes.insert(changes.end(), {(double)step, sc});
  w.put_f64("trainer.fp16.scale_changes", changes);
}

void Precision::load_state(const StateReader& r) {
  if (!fp16_) return;
  try {
    scaler_.set_state(r.f64("trainer.fp16.scaler"));
  } catch (const std::invalid_argument& e) {
    r.fail("trainer.fp16.scaler", e.what());
  }
  const std::vector<int64_t> a = r.i64("trainer.fp16.applied");
  if (a.size() != 1 || a[0] < 0) r.fail("trainer.fp16.applied", "expected one count >= 0");
  applied_ = a[0];
  skipped_ = r.i64("trainer.fp16.skipped");
  const std::vector<double> changes = r.f64("trainer.fp16.scale_changes");
  if (changes.size() % 2) r.fail("trainer.fp16.scale_changes", "expected (step, scale) pairs, got an odd count");
  scale_changes_.clear();
  for (size_t i = 0; i < changes.size(); i += 2) {
    const double step = changes[i], sc = changes[i + 1];
    if (!(step >= 0 && step <= 9.0e15 && step == std::floor(step)) || !(std::isfinite(sc) && sc > 0) ||
        (!scale_changes_.empty() && (int64_t)step <= scale_changes_.back().first))
      r.fail("trainer.fp16.scale_changes",
             "pair " + std::to_string(i / 2) + ": expected an increasing whole step >= 0 and a finite scale > 0");
    scale_changes_.push_back({(int64_t)step, sc});
  }
}

void Precision::check_resumed(const std::string& dir, int64_t step) const {
  if (!fp16_) return;
  if (applied_ + (int64_t)skipped_.size() != step + 1)
    throw InputError(dir + "/state.safetensors: trainer.fp16.applied",
                     "applied + skipped steps differ from the checkpoint's step + 1");
  for (size_t i = 0; i < skipped_.size(); ++i)
    if (skipped_[i] < 0 || skipped_[i] > step || (i > 0 && skipped_[i] <= skipped_[i - 1]))
      throw InputError(dir + "/state.safetensors: trainer.fp16.skipped",
                       "entry " + std::to_string(i) + " (" + std::to_string(skipped_[i]) +
                           "): expected increasing steps in [0, " + std::to_string(step) + "]");
  if (!scale_changes_.empty() && scale_changes_.back().first > step)
    throw InputError(dir + "/state.safetensors: trainer.fp16.scale_changes",
                     "a change at step " + std::to_string(scale_changes_.back().first) + ", after the checkpoint's step " +
                         std::to_string(step));
}

}  // namespace zf
