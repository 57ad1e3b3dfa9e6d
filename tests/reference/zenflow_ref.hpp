// Deliberately naive, sequential implementation of the `zenflow` strategy exactly as
// docs/zenflow.md states it (predicates, selection, accumulation, host AdamW, exactly-D-late
// merges through an explicit queue, device-wins merge, selective AdamW, auto update rule,
// flush), plus the device-adam and zero-offload baselines. Every AdamW application goes through
// kernels::cpu::adam_step on the same element values as the engine, so results can be bitwise
// equal; selection, merges and bookkeeping are plain loops written here from the doc.
#pragma once
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "graphs/schema/spec.hpp"
#include "tests/reference/bf16_ref.hpp"
#include "tests/reference/fp16_ref.hpp"
#include "tests/reference/mlp_ref.hpp"

namespace zf::ref {

using kernels::cpu::AdamParams;

// The strategy's parameters, resolved (docs/zenflow.md, "Notation").
struct ZenFlowConfig {
  double topk_ratio = 0.1;      // r
  int64_t warm_up = 0;          // W
  int64_t update_interval = 4;  // K; -1: "auto"
  int64_t select_interval = 0;  // S in steps; 0: never reselect
  int64_t staleness = 0;        // D (0 without overlap_step)
  bool l2 = false;              // importance: squared L2 instead of L1
  bool reset_host_moments = false;  // host m, v zeroed at t == W > 0; bias correction from there
  double auto_ratio = 0.99;
  double clip = 0.0;            // gradient_clipping (0: off)
  // precision bf16/fp16 with semantics zenflow: the device AdamWs (selected columns, 1-D) run on
  // fp32 masters, the parameters take their values (rounded by the caller after the step)
  bool masters = false;
  AdamParams hp;
  std::function<float(int64_t)> lr;  // the learning rate of step t; empty: hp.lr
  AdamParams hp_at(int64_t t) const {
    AdamParams h = hp;
    if (lr) h.lr = lr(t);
    return h;
  }
};

// The learning rate of optimizer step t under the spec's DeepSpeed scheduler block, written out
// from DeepSpeed's engine and lr_schedules.py (docs/spec.md) separately from Spec::lr_at: the
// scheduler is stepped after the optimizer, so step t runs at last_batch_iteration i = t - 1, and
// at i = -1 (step 0) the rate is what the constructor set: min_lr (WarmupLR, WarmupDecayLR) or 0
// (WarmupCosineLR).
inline float ref_lr(const Spec& s, int64_t t) {
  const auto& c = s.scheduler;
  if (c.type.empty()) return (float)s.optimizer.lr;
  const int64_t i = t - 1;
  const double W = c.warmup_num_steps < 2 ? 2.0 : (double)c.warmup_num_steps;
  auto warm = [&] { return c.warmup_type == "linear" ? (double)i / W : (1.0 / std::log(W)) * std::log((double)(i + 1)); };
  if (c.type == "WarmupCosineLR") {
    if (i < 0) return 0.0f;
    double ratio;
    if ((double)i < W) {
      ratio = c.warmup_min_ratio + warm() * (1.0 - c.warmup_min_ratio);
    } else {
      double total = (double)c.total_num_steps - W;
      if (total < 1.0) total = 1.0;
      double progress = ((double)i - W + 1.0) / total;
      if (progress > 1.0) progress = 1.0;
      ratio = c.cos_min_ratio + (1.0 - c.cos_min_ratio) * (1.0 + std::cos(3.14159265358979323846 * progress)) / 2.0;
      if (ratio < 0.0) ratio = 0.0;
    }
    return (float)(s.optimizer.lr * ratio);
  }
  const double max_lr = c.warmup_max_lr < 0 ? s.optimizer.lr : c.warmup_max_lr;
  if (i < 0) return (float)c.warmup_min_lr;
  double gamma;
  if ((double)i < W) {
    gamma = warm();
  } else if (c.type == "WarmupLR") {
    gamma = 1.0;
  } else {
    const double left = (double)c.total_num_steps - (double)i, span = (double)c.total_num_steps - W;
    gamma = left / (span < 1.0 ? 1.0 : span);
    if (gamma < 0.0) gamma = 0.0;
  }
  return (float)(c.warmup_min_lr + (max_lr - c.warmup_min_lr) * gamma);
}

inline AdamParams adam_params(const Spec& s) {
  AdamParams hp;
  hp.lr = (float)s.optimizer.lr;
  hp.beta1 = (float)s.optimizer.beta1;
  hp.beta2 = (float)s.optimizer.beta2;
  hp.eps = (float)s.optimizer.eps;
  hp.weight_decay = (float)s.optimizer.weight_decay;
  return hp;
}

inline ZenFlowConfig zenflow_config(const Spec& s, int64_t steps_per_epoch) {
  const auto& z = s.zenflow;
  ZenFlowConfig c;
  c.topk_ratio = z.topk_ratio;
  c.warm_up = z.full_warm_up_rounds;
  c.update_interval = z.update_interval.is_auto ? -1 : z.update_interval.steps;  // -1 = auto
  if (z.select_strategy == "step")
    c.select_interval = z.select_interval;
  else if (z.select_strategy == "epoch")
    c.select_interval = z.select_interval * steps_per_epoch;
  else  // "auto": once per epoch
    c.select_interval = steps_per_epoch;
  c.staleness = z.overlap_step ? (z.max_staleness >= 0 ? z.max_staleness : 1) : 0;
  c.l2 = z.importance == "l2";
  c.reset_host_moments = z.reset_host_moments;
  c.auto_ratio = z.auto_ratio;
  c.clip = s.gradient_clipping;
  c.hp = adam_params(s);
  c.lr = [s](int64_t t) { return ref_lr(s, t); };
  return c;
}

// DeepSpeed's gradient clipping, written out from runtime/zero/stage_1_and_2.py
// (complete_grad_norm_calculation_for_cpu_offload, then unscale_and_clip_grads with loss scale 1)
// with the roundings it makes: each parameter's sum of squares in double (index order), added
// in parameter order, divided by `div` (ZenFlow's interval mean: n^2), stored in a float; its
// square root taken in double and stored in a float (-1 when not finite); the coefficient
// c = max(1, (norm + 1e-6) / max_norm) in float; the gradient multiplied by 1 / c (by
// (1 / c) x extra when extra != 1: ZenFlow's 1/n folded in).
struct RefClip {
  float norm = 0.0f, factor = 1.0f;
  bool clipped = false;
};
// loss_scale: the fp16 loss scale the gradients still carry (DeepSpeed's unscale_and_clip_grads:
// combined = loss_scale x max(1, (norm / loss_scale + 1e-6) / clip), factor 1 / combined; the
// reported norm is norm / loss_scale).
inline RefClip ref_clip(const std::vector<const std::vector<float>*>& grads, double max_norm, double div = 1.0,
                        float extra = 1.0f, float loss_scale = 1.0f) {
  double total = 0.0;
  for (const std::vector<float>* g : grads) {
    double s = 0.0;
    for (float x : *g) s += (double)x * (double)x;
    total += s;
  }
  total /= div;
  const float total_f = (float)total;
  float norm = (float)std::sqrt((double)total_f);
  if (!std::isfinite(norm)) norm = -1.0f;
  float c = ((loss_scale == 1.0f ? norm : norm / loss_scale) + 1e-6f) / (float)max_norm;
  RefClip r;
  r.norm = norm < 0.0f || loss_scale == 1.0f ? norm : norm / loss_scale;
  r.clipped = c > 1.0f;
  if (c < 1.0f) c = 1.0f;
  r.factor = 1.0f / (loss_scale == 1.0f ? c : c * loss_scale);
  if (extra != 1.0f) r.factor = r.factor * extra;
  return r;
}

// One merged host result: job j, last step u of its interval, step m at which it was applied.
struct MergeRecord {
  int64_t job = 0, u = 0, m = 0;
  int64_t steps = 0;      // m - u
  int64_t intervals = 0;  // update boundaries in (u, m]
  bool flush = false;     // merged by the end-of-training flush
};

// The k columns of largest importance, ties to the lower index, NaN smallest; ascending.
inline std::vector<int32_t> naive_topk(const std::vector<float>& imp, int k) {
  const int C = (int)imp.size();
  std::vector<bool> taken(C, false);
  auto less = [&](int a, int b) {  // is column a less important than column b?
    const bool na = std::isnan(imp[a]), nb = std::isnan(imp[b]);
    if (na != nb) return na;
    if (!na && imp[a] != imp[b]) return imp[a] < imp[b];
    return a > b;  // equal (or both NaN): the higher index loses
  };
  for (int round = 0; round < k; ++round) {
    int best = -1;
    for (int j = 0; j < C; ++j)
      if (!taken[j] && (best < 0 || less(best, j))) best = j;
    taken[best] = true;
  }
  std::vector<int32_t> sel;
  for (int j = 0; j < C; ++j)
    if (taken[j]) sel.push_back(j);
  return sel;
}

class ZenFlowRef {
 public:
  // params: the device parameters P, updated in place by step() and flush().
  ZenFlowRef(const ZenFlowConfig& c, std::vector<RefParam>& params) : c_(c), P_(params) {
    for (auto& p : P_) {
      State s;
      const size_t n = p.value.size();
      if (p.is_matrix()) {
        s.M = p.value;  // at the start: M = P
        s.mh.assign(n, 0.0f);
        s.vh.assign(n, 0.0f);
        s.acc.assign(n, 0.0f);
      } else {
        s.m1.assign(n, 0.0f);
        s.v1.assign(n, 0.0f);
        if (c_.masters) s.x1 = p.value;  // from the (rounded) initial values
      }
      st_.push_back(std::move(s));
      if (p.is_matrix()) ++n2d_;
    }
  }

  bool is_select(int64_t t) const {
    const int64_t W = c_.warm_up, S = c_.select_interval;
    return t >= W && (t == W || (S != 0 && t % S == 0));
  }
  bool is_update(int64_t t) const {
    const int64_t W = c_.warm_up, K = c_.update_interval, S = c_.select_interval;
    if (t < W) return true;
    if (K > 0 && (t + 1 - W) % K == 0) return true;
    if (K < 0 && vote(t - 1)) return true;
    if (S != 0 && (t + 1) % S == 0) return true;
    return false;
  }
  bool vote(int64_t t) const {
    auto it = votes_.find(t);
    return it != votes_.end() && it->second;
  }
  int k_of(int C) const {
    int k = (int)std::floor(c_.topk_ratio * C);
    if (k < 1) k = 1;
    if (k > C) k = C;
    return k;
  }

  // One step t with the gradients g (params order) of forward/backward(t) at the current P.
  void step(int64_t t, const std::vector<std::vector<float>>& g) {
    if (t != last_step_ + 1) throw std::logic_error("ZenFlowRef: steps must be consecutive");
    last_step_ = t;
    // 1. selection
    if (is_select(t)) {
      for (size_t i = 0; i < P_.size(); ++i) {
        if (!P_[i].is_matrix()) continue;
        State& s = st_[i];
        const int R = P_[i].rows(), C = P_[i].cols();
        if (t != 0) s.M = P_[i].value;  // every earlier host job has already run (sequential)
        if (t == c_.warm_up && c_.warm_up > 0 && c_.reset_host_moments) {
          s.mh.assign(s.mh.size(), 0.0f);
          s.vh.assign(s.vh.size(), 0.0f);
        }
        std::vector<float> imp(C, 0.0f);
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < C; ++j) {
            const float x = g[i][(size_t)r * C + j];
            imp[j] += c_.l2 ? x * x : std::fabs(x);
          }
        s.sel = naive_topk(imp, k_of(C));
        s.msel.assign((size_t)R * s.sel.size(), 0.0f);
        s.vsel.assign((size_t)R * s.sel.size(), 0.0f);
        if (c_.masters) {  // the selected columns' master: their values now (the merges skip them)
          const int k = (int)s.sel.size();
          s.xsel.resize((size_t)R * k);
          for (int r = 0; r < R; ++r)
            for (int c = 0; c < k; ++c) s.xsel[(size_t)r * k + c] = P_[i].value[(size_t)r * C + s.sel[c]];
        }
      }
      has_selection_ = true;
      selections_.push_back(t);
    }
    // 2. accumulation of the full 2-D gradients
    for (size_t i = 0; i < P_.size(); ++i) {
      if (!P_[i].is_matrix()) continue;
      State& s = st_[i];
      for (size_t e = 0; e < s.acc.size(); ++e) s.acc[e] = n_ == 0 ? g[i][e] : s.acc[e] + g[i][e];
    }
    n_ += 1;
    // 3. host update
    if (is_update(t)) {
      float scale = 1.0f / (float)n_;
      if (c_.clip > 0) {  // the host step's gradient, the interval's mean, clipped by its norm
        std::vector<const std::vector<float>*> host_grads;
        for (size_t i = 0; i < P_.size(); ++i)
          if (P_[i].is_matrix()) host_grads.push_back(&st_[i].acc);
        const RefClip rc = ref_clip(host_grads, c_.clip, (double)n_ * (double)n_, scale);
        for (size_t i = 0; i < P_.size(); ++i)
          if (P_[i].is_matrix())
            for (float& x : st_[i].acc) x *= rc.factor;
        clips_.push_back({t, rc});
        scale = 1.0f;
      }
      Pending job{j_, t, {}};
      for (size_t i = 0; i < P_.size(); ++i) {
        if (!P_[i].is_matrix()) continue;
        State& s = st_[i];
        // with reset_host_moments the host's bias correction counts its updates since the warm-up
        // (one job per warm-up step, so job j_ - W is the (j_ - W + 1)-th)
        const int64_t hs = c_.reset_host_moments && c_.warm_up > 0 && t >= c_.warm_up ? j_ - c_.warm_up + 1 : t + 1;
        kernels::cpu::adam_step(s.M.data(), s.acc.data(), s.mh.data(), s.vh.data(), s.M.size(), c_.hp_at(t), hs,
                                scale);
        job.result.push_back(s.M);
      }
      update_steps_.push_back(t);
      if (t < c_.warm_up || c_.staleness == 0) {
        merge(job, t, false);
      } else {
        if (J0_ < 0) J0_ = j_;
        queue_.push_back(std::move(job));
        if (j_ - c_.staleness >= J0_) {
          if (queue_.front().job != j_ - c_.staleness) throw std::logic_error("ZenFlowRef: queue out of order");
          merge(queue_.front(), t, false);
          queue_.pop_front();
        }
      }
      j_ += 1;
      n_ = 0;
    }
    // 4. device updates: selected columns of 2-D weights, all of every 1-D parameter
    for (size_t i = 0; i < P_.size(); ++i) {
      State& s = st_[i];
      RefParam& p = P_[i];
      if (p.is_matrix()) {
        if (!has_selection_) continue;
        const int R = p.rows(), C = p.cols(), k = (int)s.sel.size();
        std::vector<float> w((size_t)R * k), gs((size_t)R * k);  // (R, k)
        for (int r = 0; r < R; ++r)
          for (int c = 0; c < k; ++c) {
            w[(size_t)r * k + c] = p.value[(size_t)r * C + s.sel[c]];
            gs[(size_t)r * k + c] = g[i][(size_t)r * C + s.sel[c]];
          }
        std::vector<float>& x = c_.masters ? s.xsel : w;
        // bias correction counts the steps since the latest selection, which zeroed m_sel and v_sel
        kernels::cpu::adam_step(x.data(), gs.data(), s.msel.data(), s.vsel.data(), x.size(), c_.hp_at(t),
                                t - selections_.back() + 1, 1.0f);
        for (int r = 0; r < R; ++r)
          for (int c = 0; c < k; ++c) p.value[(size_t)r * C + s.sel[c]] = x[(size_t)r * k + c];
      } else {
        std::vector<float>& x = c_.masters ? s.x1 : p.value;
        kernels::cpu::adam_step(x.data(), g[i].data(), s.m1.data(), s.v1.data(), x.size(), c_.hp_at(t), t + 1, 1.0f);
        if (c_.masters) p.value = s.x1;
      }
    }
    // auto update rule: the vote of step t decides is_update(t + 1)
    if (c_.update_interval < 0 && t >= c_.warm_up) auto_vote(t, g);
  }

  // End of training: merge every submitted, unmerged host result in job order.
  void flush() {
    while (!queue_.empty()) {
      merge(queue_.front(), last_step_, true);
      queue_.pop_front();
    }
  }

  const std::vector<int64_t>& host_update_steps() const { return update_steps_; }
  const std::vector<int64_t>& selection_steps() const { return selections_; }
  const std::vector<MergeRecord>& merges() const { return merges_; }
  const std::map<int64_t, bool>& votes() const { return votes_; }
  const std::vector<std::pair<int64_t, RefClip>>& clips() const { return clips_; }
  // Current selection of parameter i (empty before the first selection or for 1-D).
  const std::vector<int32_t>& selection(size_t i) const { return st_[i].sel; }
  const std::vector<float>& master(size_t i) const { return st_[i].M; }

 private:
  struct State {
    std::vector<float> M, mh, vh, acc;  // host (2-D): master, moments, accumulator (R, C)
    std::vector<int32_t> sel;           // (k) ascending
    std::vector<float> msel, vsel;      // (R, k)
    std::vector<float> m1, v1;          // 1-D moments
    std::vector<float> xsel, x1;        // ZenFlowConfig::masters: the (R, k) and 1-D fp32 masters
  };
  struct Pending {
    int64_t job, u;
    std::vector<std::vector<float>> result;  // one (R, C) per 2-D weight, params order
  };

  // P[:, c] <- X[:, c] for every column c not in the current selection (all before the first).
  void merge(const Pending& x, int64_t m, bool flush) {
    size_t q = 0;
    for (size_t i = 0; i < P_.size(); ++i) {
      if (!P_[i].is_matrix()) continue;
      const std::vector<float>& X = x.result[q++];
      const int R = P_[i].rows(), C = P_[i].cols();
      std::vector<bool> selected(C, false);
      if (has_selection_)
        for (int32_t c : st_[i].sel) selected[c] = true;
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
          if (!selected[c]) P_[i].value[(size_t)r * C + c] = X[(size_t)r * C + c];
    }
    MergeRecord rec;
    rec.job = x.job;
    rec.u = x.u;
    rec.m = m;
    rec.steps = m - x.u;
    for (int64_t s : update_steps_)
      if (s > x.u && s <= m) ++rec.intervals;
    rec.flush = flush;
    merges_.push_back(rec);
  }

  void auto_vote(int64_t t, const std::vector<std::vector<float>>& g) {
    const double r = c_.topk_ratio;
    u_ += 1;
    if (A_.empty()) {
      A_.assign(P_.size(), 0.0);
      N_.assign(P_.size(), 0.0);
    }
    int64_t yes = 0;
    for (size_t i = 0; i < P_.size(); ++i) {
      if (!P_[i].is_matrix()) continue;
      const int R = P_[i].rows(), C = P_[i].cols();
      double T = 0.0, Cm = 0.0;
      for (size_t e = 0; e < g[i].size(); ++e) T += std::fabs((double)g[i][e]);
      for (int row = 0; row < R; ++row)
        for (int32_t c : st_[i].sel) Cm += std::fabs((double)g[i][(size_t)row * C + c]);
      A_[i] = (A_[i] * (double)(u_ - 1) + Cm) / (double)u_ / (10.0 * r);
      if (r < 1.0) N_[i] += (T - Cm) / (10.0 * (1.0 - r));
      if (N_[i] >= A_[i]) ++yes;
    }
    const bool v = yes >= (int64_t)std::floor(c_.auto_ratio * (double)n2d_);
    votes_[t] = v;
    if (v) {
      u_ = 0;
      for (double& x : N_) x = 0.0;
    }
  }

  ZenFlowConfig c_;
  std::vector<RefParam>& P_;
  std::vector<State> st_;
  int64_t n2d_ = 0;
  int64_t last_step_ = -1;
  bool has_selection_ = false;
  int64_t j_ = 0, n_ = 0, J0_ = -1;
  std::deque<Pending> queue_;
  std::vector<int64_t> update_steps_, selections_;
  std::vector<MergeRecord> merges_;
  std::vector<std::pair<int64_t, RefClip>> clips_;
  // auto rule
  int64_t u_ = 0;
  std::vector<double> A_, N_;
  std::map<int64_t, bool> votes_;
};

// `zenflow.semantics: "deepspeed"`: DeepSpeed's ZenFlow as its code runs it, written from
// deepspeed/runtime/zenflow/{engine.py, zenflow_stage_1_and_2.py} and ops/adam/zenflow_*.py,
// independently of ZenFlowRef (sequential: a host job runs when it is submitted):
// - backward_prologue: at a select boundary the fp32 partition (every parameter, 1-D included) is
//   re-synced from the device (not at micro step 0) and the selective optimizer's moments zeroed;
// - the loss is divided by the accumulation steps, K: every gradient below is g / K;
// - average_tensor: the selection (top-k columns of sum |g/K|) at a select boundary; from the
//   warm-up's end on, every step's selected gradients (all of a 1-D parameter) go to the selective
//   AdamW: inside backward between boundaries (group_step), after the host copy at a boundary
//   (temp_copy_param saves the selected values first, _step_without_offload restores them);
// - its step count starts at its first step and is never reset;
// - the host (CPU Adam) steps every parameter on the window sum of g / K at step id t + 1, with
//   one moment set (sequential) or two indexed by get_overlap_step_state (overlap_step): the parity
//   of t in the warm-up, of t / K after it;
// - a boundary's host result is copied to every device parameter (the selected ones restored
//   after): at once in the warm-up and without overlap_step; with overlap_step after it, the
//   previous boundary's result at this boundary (wait_last_update_and_copy), before the new job;
// - no flush at the end;
// - gradient_clipping (DeepSpeed's optimizer.step(): scaled_global_norm over norm_for_param_grads,
//   set at the boundary for every parameter of its host partition, then unscale_and_clip_grads on
//   the whole partition): at every boundary the norm of the window sums of g / K of every
//   parameter, 1-D included, in model order (ref_clip), and every window multiplied by the factor
//   before the host step; the selective steps take their gradients unclipped. So in the warm-up
//   the 1-D parameters step on the clipped gradient (their host step is copied back), after it
//   the clipped host step of a 1-D parameter is overwritten by its unclipped selective one.
// Where DeepSpeed races (with full_warm_up_rounds 0 its first two waits are skipped; the re-sync
// does not wait for a running host job) this runs the ordering docs/zenflow.md states: every job
// done before the next copy or re-sync, job j copied at the boundary after its own.
class DeepSpeedZenFlowRef {
 public:
  DeepSpeedZenFlowRef(const ZenFlowConfig& c, bool overlap_step, std::vector<RefParam>& params)
      : c_(c), overlap_(overlap_step), P_(params) {
    if (c.update_interval < 1 || c.reset_host_moments || c.l2 || c.staleness != (overlap_step ? 1 : 0))
      throw std::invalid_argument("DeepSpeedZenFlowRef: fixed update_interval, L1, DeepSpeed's staleness only");
    for (auto& p : P_) {
      Host h;
      h.fp32 = p.value;
      for (int s = 0; s < 2; ++s) {
        h.exp_avg[s].assign(p.value.size(), 0.0f);
        h.exp_avg_sq[s].assign(p.value.size(), 0.0f);
      }
      host_.push_back(std::move(h));
      sel_.push_back({});
    }
  }

  void step(int64_t t, const std::vector<std::vector<float>>& g_in) {
    const int64_t W = c_.warm_up, K = c_.update_interval, S = c_.select_interval;
    const bool select = t - W >= 0 && (t - W == 0 || (S != 0 && t % S == 0));  // is_zenflow_select_boundary
    const bool boundary = t + 1 < W || (t + 1 - W) % K == 0 || (S != 0 && (t + 1) % S == 0);
    // backward_prologue
    if (select) {
      if (t != 0)
        for (size_t i = 0; i < P_.size(); ++i) host_[i].fp32 = P_[i].value;
      for (Sel& s : sel_)
        if (s.created) {
          std::fill(s.exp_avg.begin(), s.exp_avg.end(), 0.0f);
          std::fill(s.exp_avg_sq.begin(), s.exp_avg_sq.end(), 0.0f);
        }
    }
    std::vector<std::vector<float>> g = g_in;  // backward of loss / gradient_accumulation_steps
    for (auto& v : g)
      for (float& x : v) x = x / (float)K;
    // update_selected_channels
    if (select)
      for (size_t i = 0; i < P_.size(); ++i) {
        if (!P_[i].is_matrix()) continue;
        const int R = P_[i].rows(), C = P_[i].cols();
        std::vector<float> sum(C, 0.0f);
        for (int r = 0; r < R; ++r)
          for (int j = 0; j < C; ++j) sum[j] += std::fabs(g[i][(size_t)r * C + j]);
        int k = (int)std::floor(c_.topk_ratio * C);
        k = k < 1 ? 1 : k > C ? C : k;
        sel_[i].cols = naive_topk(sum, k);
      }
    // the CPU window accumulation (micro_step_id restarts after every optimizer step)
    for (size_t i = 0; i < P_.size(); ++i) {
      std::vector<float>& a = host_[i].window;
      if (window_steps_ == 0)
        a = g[i];
      else
        for (size_t e = 0; e < a.size(); ++e) a[e] = a[e] + g[i][e];
    }
    ++window_steps_;
    const bool selective = t >= W;
    if (selective && !boundary) selective_step(t, g);
    if (!boundary) return;
    // temp_copy_param
    std::vector<std::vector<float>> temp;
    if (selective)
      for (size_t i = 0; i < P_.size(); ++i) temp.push_back(gather(i));
    // optimizer.step(): the clip over every parameter's window, then the host step
    if (c_.clip > 0) {
      std::vector<const std::vector<float>*> windows;
      for (const Host& h : host_) windows.push_back(&h.window);
      const RefClip rc = ref_clip(windows, c_.clip);
      for (Host& h : host_)
        for (float& x : h.window) x *= rc.factor;
      clips_.push_back({t, rc});
    }
    const int state = !overlap_ ? 0 : (int)((t < W ? t : t / K) & 1);
    auto cpu_adam = [&] {
      std::vector<std::vector<float>> result;
      for (size_t i = 0; i < P_.size(); ++i) {
        Host& h = host_[i];
        kernels::cpu::adam_step(h.fp32.data(), h.window.data(), h.exp_avg[state].data(), h.exp_avg_sq[state].data(),
                                h.fp32.size(), c_.hp_at(t), t + 1, 1.0f);
        result.push_back(h.fp32);
      }
      return result;
    };
    auto copy_to_device = [&](const std::vector<std::vector<float>>& x) {
      for (size_t i = 0; i < P_.size(); ++i) P_[i].value = x[i];
    };
    if (!overlap_ || t < W) {
      copy_to_device(cpu_adam());
    } else {
      if (!stale_.empty()) copy_to_device(stale_);
      stale_ = cpu_adam();
    }
    update_steps_.push_back(t);
    window_steps_ = 0;
    // zenflow_step -> selective_optimizer_step: restore the selected values, step them
    if (selective) {
      for (size_t i = 0; i < P_.size(); ++i) scatter(i, temp[i]);
      selective_step(t, g);
    }
  }

  const std::vector<int64_t>& host_update_steps() const { return update_steps_; }
  const std::vector<std::pair<int64_t, RefClip>>& clips() const { return clips_; }

 private:
  struct Host {
    std::vector<float> fp32, window, exp_avg[2], exp_avg_sq[2];
  };
  struct Sel {
    std::vector<int32_t> cols;  // 2-D: the selected columns; 1-D: unused (all of it)
    bool created = false;       // the selective optimizer's state exists
    int64_t step = 0;
    std::vector<float> exp_avg, exp_avg_sq;
  };

  // param.data[:, selected_indices] (all of a 1-D parameter), row-major (R, k)
  std::vector<float> gather(size_t i) const {
    if (!P_[i].is_matrix()) return P_[i].value;
    const int R = P_[i].rows(), C = P_[i].cols(), k = (int)sel_[i].cols.size();
    std::vector<float> x((size_t)R * k);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < k; ++c) x[(size_t)r * k + c] = P_[i].value[(size_t)r * C + sel_[i].cols[c]];
    return x;
  }
  void scatter(size_t i, const std::vector<float>& x) {
    if (!P_[i].is_matrix()) {
      P_[i].value = x;
      return;
    }
    const int R = P_[i].rows(), C = P_[i].cols(), k = (int)sel_[i].cols.size();
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < k; ++c) P_[i].value[(size_t)r * C + sel_[i].cols[c]] = x[(size_t)r * k + c];
  }

  // ZenFlowSelectiveAdamW: AdamW on the selected values with the selected gradients
  void selective_step(int64_t t, const std::vector<std::vector<float>>& g) {
    for (size_t i = 0; i < P_.size(); ++i) {
      Sel& s = sel_[i];
      std::vector<float> x = gather(i);
      std::vector<float> gs;
      if (P_[i].is_matrix()) {
        const int R = P_[i].rows(), C = P_[i].cols(), k = (int)s.cols.size();
        gs.resize((size_t)R * k);
        for (int r = 0; r < R; ++r)
          for (int c = 0; c < k; ++c) gs[(size_t)r * k + c] = g[i][(size_t)r * C + s.cols[c]];
      } else {
        gs = g[i];
      }
      if (!s.created) {
        s.created = true;
        s.exp_avg.assign(x.size(), 0.0f);
        s.exp_avg_sq.assign(x.size(), 0.0f);
      }
      s.step += 1;
      kernels::cpu::adam_step(x.data(), gs.data(), s.exp_avg.data(), s.exp_avg_sq.data(), x.size(), c_.hp_at(t), s.step,
                              1.0f);
      scatter(i, x);
    }
  }

  ZenFlowConfig c_;
  bool overlap_;
  std::vector<RefParam>& P_;
  std::vector<Host> host_;
  std::vector<Sel> sel_;
  int64_t window_steps_ = 0;
  std::vector<std::vector<float>> stale_;  // overlap_step: the result of the job in flight
  std::vector<int64_t> update_steps_;
  std::vector<std::pair<int64_t, RefClip>> clips_;
};

// AdamW on every parameter each step (device-adam; zero-offload is the same math on master
// copies that are copied back).
class AdamRef {
 public:
  AdamRef(const AdamParams& hp, std::vector<RefParam>& params, bool offload,
          std::function<float(int64_t)> lr = nullptr, double clip = 0.0)
      : hp_(hp), lr_(std::move(lr)), P_(params), offload_(offload), clip_(clip) {
    for (auto& p : P_) {
      m_.emplace_back(p.value.size(), 0.0f);
      v_.emplace_back(p.value.size(), 0.0f);
      master_.push_back(p.value);
    }
  }
  // loss_scale: with clipping, g may still carry an fp16 loss scale, removed by the clip's
  // combined factor (DeepSpeed's order); without clipping g is the true gradient.
  void step(int64_t t, const std::vector<std::vector<float>>& g_in, float loss_scale = 1.0f) {
    AdamParams hp = hp_;
    if (lr_) hp.lr = lr_(t);
    std::vector<std::vector<float>> g = g_in;
    if (clip_ > 0) {  // every gradient of the step, by their global norm
      std::vector<const std::vector<float>*> all;
      for (auto& v : g) all.push_back(&v);
      const RefClip rc = ref_clip(all, clip_, 1.0, 1.0f, loss_scale);
      for (auto& v : g)
        for (float& x : v) x *= rc.factor;
      clips_.push_back({t, rc});
    }
    for (size_t i = 0; i < P_.size(); ++i) {
      std::vector<float>& x = offload_ ? master_[i] : P_[i].value;
      kernels::cpu::adam_step(x.data(), g[i].data(), m_[i].data(), v_[i].data(), x.size(), hp, t + 1, 1.0f);
      if (offload_) P_[i].value = master_[i];
    }
  }
  // ZeRO-Offload's delayed parameter update (zero-offload-dpu): the host step t runs as above on
  // the masters, but the device parameters after step t are the masters after step t - 1 (and
  // stay as they are after step 0); finish() copies the last masters.
  void step_delayed(int64_t t, const std::vector<std::vector<float>>& g) {
    std::vector<std::vector<float>> keep;
    for (auto& p : P_) keep.push_back(p.value);
    const std::vector<std::vector<float>> before = master_;
    step(t, g);  // updates master_ (and, offloaded, P_: put back below)
    for (size_t i = 0; i < P_.size(); ++i) P_[i].value = t >= 1 ? before[i] : keep[i];
  }
  void finish_delayed() {
    for (size_t i = 0; i < P_.size(); ++i) P_[i].value = master_[i];
  }
  const std::vector<std::pair<int64_t, RefClip>>& clips() const { return clips_; }

 private:
  AdamParams hp_;
  std::function<float(int64_t)> lr_;
  std::vector<RefParam>& P_;
  bool offload_;
  double clip_;
  std::vector<std::vector<float>> m_, v_, master_;
  std::vector<std::pair<int64_t, RefClip>> clips_;
};

using RefWeights = std::map<std::string, std::vector<float>>;

struct RefRun {
  RefWeights weights;
  std::vector<int64_t> host_update_steps;  // zenflow only
  std::vector<int64_t> selection_steps;
  std::vector<MergeRecord> merges;
  std::vector<double> loss;  // per step
  std::vector<std::pair<int64_t, RefClip>> clips;  // gradient_clipping: every clip point
  std::vector<int64_t> skipped;  // precision fp16: the steps skipped for an overflow
  double loss_scale = 1.0;       // precision fp16: the scale after the last step
};

inline int64_t ref_total_steps(const Spec& s, int64_t steps_per_epoch) {
  return s.train.steps > 0 ? s.train.steps : s.train.epochs * steps_per_epoch;
}

// Trains the spec's MLP with the spec's strategy (device-adam, zero-offload or zenflow).
// Precision "bf16" (docs/spec.md): the parameters are rounded to bf16 before training and after
// every step (and the flush), the gradients after every backward; the strategies' masters stay
// fp32 (for device-adam too: it then computes exactly what zero-offload does; for zenflow's
// selected columns and 1-D parameters too, ZenFlowConfig::masters).
// Precision "fp16": the same with fp16 rounding, and DeepSpeed's loss scaling: the gradient of
// step t is fp16(S g) with S the scale of step t (the engine scales the loss, which for a power of
// two S gives exactly S g in fp32); an inf or NaN in it (or t in forced_overflow) skips the step:
// no optimizer call, no rounding, and the optimizer's step count o does not advance; the scaler
// updates; else the strategy steps on o with the gradient times 1/S.
inline RefRun run_reference(const Spec& s, const std::set<int64_t>& forced_overflow = {}) {
  MlpRef mlp(s);
  const int64_t T = ref_total_steps(s, mlp.steps_per_epoch());
  const bool bf16 = s.precision == "bf16", fp16 = s.precision == "fp16";
  RefRun out;
  auto capture = [&] {
    for (auto& p : mlp.params()) out.weights[p.name] = p.value;
  };
  auto round_params = [&] {
    for (auto& p : mlp.params())
      for (float& x : p.value) x = bf16 ? naive_bf16(x) : fp16 ? naive_fp16(x) : x;
  };
  const auto& c16 = s.fp16;
  RefLossScaler scaler(c16.loss_scale == 0 ? std::ldexp(1.0, c16.initial_scale_power) : c16.loss_scale,
                       c16.loss_scale_window, (double)c16.min_loss_scale, c16.hysteresis,
                       c16.consecutive_hysteresis);
  const bool dynamic = c16.loss_scale == 0;
  std::vector<std::vector<float>> g;
  bool overflow = false;
  // fp16 with clipping on device-adam / zero-offload: the gradient stays scaled until the clip's
  // combined factor (S: the scale it carries); ZenFlow unscales before it accumulates
  const bool clip_scaled = fp16 && s.gradient_clipping > 0 && s.strategy != "zenflow";
  float carried = 1.0f;
  auto grads = [&](int64_t t) -> const std::vector<std::vector<float>>& {
    g = mlp.grads(t);
    overflow = false;
    if (bf16)
      for (auto& v : g)
        for (float& x : v) x = naive_bf16(x);
    if (fp16) {
      const float S = (float)scaler.cur_scale, inv = (float)(1.0 / scaler.cur_scale);
      for (auto& v : g)
        for (float& x : v) {
          x = naive_fp16(S * x);
          overflow |= !std::isfinite(x);
          if (!clip_scaled) x *= inv;
        }
      carried = clip_scaled ? S : 1.0f;
      overflow |= forced_overflow.count(t) != 0;
      if (dynamic) scaler.update_scale(overflow);
      if (overflow) out.skipped.push_back(t);
    }
    return g;
  };
  int64_t o = 0;  // applied steps
  round_params();
  if (s.strategy == "zenflow" && s.zenflow.semantics == "deepspeed") {
    if (fp16) throw std::invalid_argument("run_reference: no fp16 reference for semantics deepspeed");
    DeepSpeedZenFlowRef z(zenflow_config(s, mlp.steps_per_epoch()), s.zenflow.overlap_step, mlp.params());
    for (int64_t t = 0; t < T; ++t) {
      z.step(t, grads(t));
      out.loss.push_back(mlp.last_loss());
      round_params();
    }
    out.host_update_steps = z.host_update_steps();
    out.clips = z.clips();
  } else if (s.strategy == "zenflow") {
    ZenFlowConfig zc = zenflow_config(s, mlp.steps_per_epoch());
    zc.masters = bf16 || fp16;  // semantics zenflow: fp32 masters for every device update
    ZenFlowRef z(zc, mlp.params());
    for (int64_t t = 0; t < T; ++t) {
      grads(t);
      out.loss.push_back(mlp.last_loss());
      if (overflow) continue;
      z.step(o++, g);
      round_params();
    }
    z.flush();
    round_params();
    out.host_update_steps = z.host_update_steps();
    out.selection_steps = z.selection_steps();
    out.merges = z.merges();
    out.clips = z.clips();
  } else if (s.strategy == "device-adam" || s.strategy == "zero-offload") {
    AdamRef a(adam_params(s), mlp.params(), s.strategy == "zero-offload" || bf16 || fp16,
              [s](int64_t t) { return ref_lr(s, t); }, s.gradient_clipping);
    for (int64_t t = 0; t < T; ++t) {
      grads(t);
      out.loss.push_back(mlp.last_loss());
      if (overflow) continue;
      a.step(o++, g, carried);
      round_params();
    }
    out.clips = a.clips();
  } else if (s.strategy == "zero-offload-dpu" && !bf16 && !fp16) {
    AdamRef a(adam_params(s), mlp.params(), true, [s](int64_t t) { return ref_lr(s, t); }, s.gradient_clipping);
    for (int64_t t = 0; t < T; ++t) {
      a.step_delayed(t, grads(t));
      out.loss.push_back(mlp.last_loss());
    }
    a.finish_delayed();
    out.clips = a.clips();
  } else {
    throw std::invalid_argument("run_reference: no reference for strategy '" + s.strategy + "'");
  }
  capture();
  out.loss_scale = fp16 ? scaler.cur_scale : 1.0;
  return out;
}

}  // namespace zf::ref
