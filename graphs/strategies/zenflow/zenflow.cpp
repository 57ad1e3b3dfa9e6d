// The zenflow strategy's state (zenflow.hpp) and the auto update rule.
#include "graphs/strategies/zenflow/zenflow.hpp"

#include <algorithm>
#include <cmath>

namespace zf {
namespace zenflow {

ZenFlowStrategy::ZenFlowStrategy(Runtime& rt, std::vector<Param*> params, const Spec& spec, int64_t spe,
                                 const Comm* comm)
    : Strategy(rt, params, spec, comm), z_(spec.zenflow), cal_(CalendarConfig::from_spec(spec, spe)),
      ring_(cal_.staleness()) {
  {  // stage >= 1: the host state is the 2-D weights' (and the 1-D window sums' of the clip)
    std::vector<Param*> host;
    for (Param* p : params_)
      if (p->is_matrix() || cal_.vector_windows(clipping())) host.push_back(p);
    plan_partition(host);
  }
  for (Param* p : params_)
    if (p->is_matrix())
      add_matrix(p);
    else
      add_vector(p);
  make_clip(false);
}

WeightShard ZenFlowStrategy::shard(const Matrix& w) const {
  const std::vector<size_t>& b = *bounds(*w.p);
  const size_t r = (size_t)comm_->rank();
  return WeightShard{b[r], b[r + 1] - b[r], w.R, w.C, w.p->in_out};
}

size_t ZenFlowStrategy::shard_len(const Param& p) const {
  const std::vector<size_t>& b = shard_bounds_.at(&p);
  return b[(size_t)comm_->rank() + 1] - b[(size_t)comm_->rank()];
}

void ZenFlowStrategy::add_vector(Param* p) {
  // stage 3: the moments of this rank's shard only
  const std::vector<int64_t> shape =
      stage3() ? std::vector<int64_t>{(int64_t)std::max<size_t>(1, shard_len(*p))} : p->value.shape();
  vec_.push_back(Vector{p, Tensor::home(shape, p->name + ".m"), Tensor::home(shape, p->name + ".v"), {}, {}, {}, {}, {}});
  if (masters()) {  // from the (rounded) initial values; stage 3: this rank's shard's (a resume loads it)
    Vector& v = vec_.back();
    v.master = Tensor::home(shape, p->name + ".master");
    const Slice s = stage3() ? Slice{shard_bounds_.at(p)[(size_t)comm_->rank()], shard_len(*p)} : whole(p->value);
    if (s.n > 0)
      insert_copy(rt_.device(-1).named("init.master." + p->name), p->value, s, v.master, Slice{0, s.n});
  }
  for (int i = 0; i < cal_.vector_warm_sets(); ++i) {
    vec_.back().mw[i] = Tensor::home(p->value.shape(), p->name + ".m_warm" + std::to_string(i));
    vec_.back().vw[i] = Tensor::home(p->value.shape(), p->name + ".v_warm" + std::to_string(i));
  }
  if (cal_.vector_windows(clipping())) {
    for (int i = 0; i <= cal_.staleness(); ++i)
      vec_.back().acc.push_back(host_tensor(*p, p->name + ".acc" + std::to_string(i)));
    if (z_.accumulate_on_host() && bf16_)
      for (int i = 0; i < 2; ++i) vec_.back().down.push_back(host_tensor(*p, p->name + ".down" + std::to_string(i), 2));
  }
}

void ZenFlowStrategy::add_matrix(Param* p) {
  auto mx = std::make_unique<Matrix>();
  Matrix& w = *mx;
  w.p = p;
  w.R = (int)p->rows();
  w.C = (int)p->cols();
  w.k = std::clamp((int)std::floor(z_.topk_ratio * w.C), 1, w.C);
  const std::string& n = p->name;
  w.sel = Tensor::home({w.k}, n + ".sel", sizeof(int32_t));
  w.imp = Tensor::lazy({w.C}, n + ".importance");
  // (R, k); (k, R) for a weight stored (in, out): a selected column's moments are contiguous.
  // Stage 3: the most of them this rank's shard can own.
  const std::vector<int64_t> rk = stage3()       ? std::vector<int64_t>{(int64_t)selective_moments_capacity(shard(w), w.k)}
                                  : p->in_out ? std::vector<int64_t>{w.k, w.R}
                                              : std::vector<int64_t>{w.R, w.k};
  if (z_.offload) {
    w.m_sel_host = Tensor::home(rk, n + ".m_sel.host");
    w.v_sel_host = Tensor::home(rk, n + ".v_sel.host");
    w.m_sel = Tensor::lazy(rk, n + ".m_sel");
    w.v_sel = Tensor::lazy(rk, n + ".v_sel");
    if (masters()) {
      w.x_sel_host = Tensor::home(rk, n + ".master_sel.host");
      w.x_sel = Tensor::lazy(rk, n + ".master_sel");
    }
  } else {
    w.m_sel = Tensor::home(rk, n + ".m_sel");
    w.v_sel = Tensor::home(rk, n + ".v_sel");
    if (masters()) w.x_sel = Tensor::home(rk, n + ".master_sel");
  }
  w.mass = Tensor::home({2}, n + ".mass", sizeof(double));
  w.master = host_tensor(*p, n + ".master");
  w.m = host_tensor(*p, n + ".m");
  w.v = host_tensor(*p, n + ".v");
  if (cal_.host_moment_sets() == 2) {
    w.m2 = host_tensor(*p, n + ".m2");
    w.v2 = host_tensor(*p, n + ".v2");
  }
  // with precision bf16 the parameters cross as bf16 both ways (resync down, results up); the
  // accumulators stay fp32 (a sum of bf16 gradients needs the wider type). At fp32 a job's result
  // goes into its own accumulator slot once its AdamW has read it; 2-byte results need their own
  // ring (docs/zenflow.md, "Host memory").
  const size_t wire = bf16_ ? 2 : 4;
  w.resync = host_tensor(*p, n + ".resync", wire);
  for (int i = 0; i <= cal_.staleness(); ++i) {
    w.acc.push_back(host_tensor(*p, n + ".acc" + std::to_string(i)));
    if (bf16_) w.res.push_back(host_tensor(*p, n + ".res" + std::to_string(i), wire));
  }
  // accumulation on the host under bf16/fp16: the gradient crosses at 2 bytes into one of two
  // slots (so a step's crossing waits for the host's sum of the step two before, not the step
  // before); at fp32 the host sums the device gradient itself (update.cpp, accumulate)
  if (z_.accumulate_on_host() && bf16_)
    for (int i = 0; i < 2; ++i) w.down.push_back(host_tensor(*p, n + ".down" + std::to_string(i), wire));
  to_host(rt_.device(-1).named("init.master." + n), p->value, w.master, false);
  by_param_[p] = mx.get();
  mat_.push_back(std::move(mx));
}

// The auto update rule on the gradient mass of step t (docs/zenflow.md).
bool ZenFlowStrategy::auto_vote(int64_t t) {
  rt_.tracker().wait_device_through(t);  // the mass of step t is read back
  rt_.tracker().status().rethrow_if_failed();
  ++u_;
  const double r = z_.topk_ratio;
  int votes = 0;
  for (auto& wp : mat_) {
    Matrix& w = *wp;
    const double T = w.mass_host[0], Cm = w.mass_host[1];
    w.A = (w.A * (double)(u_ - 1) + Cm) / (double)u_ / (10.0 * r);
    if (r < 1.0) w.N += (T - Cm) / (10.0 * (1.0 - r));
    votes += w.N >= w.A;
  }
  const bool vote = votes >= (int)std::floor(z_.auto_ratio * (double)mat_.size());
  if (vote) {
    u_ = 0;
    for (auto& wp : mat_) wp->N = 0.0;
  }
  return vote;
}

}  // namespace zenflow

std::unique_ptr<Strategy> make_zenflow(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                       int64_t steps_per_epoch, const Comm* comm) {
  return std::make_unique<zenflow::ZenFlowStrategy>(rt, std::move(params), spec, steps_per_epoch, comm);
}

}  // namespace zf
