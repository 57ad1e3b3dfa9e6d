// The zenflow strategy (docs/zenflow.md) and ZeRO-Offload's delayed parameter update
// (zero-offload-dpu). The step builder submits tasks only; every ordering, including the bounded
// staleness, comes from data dependencies:
//   accumulate(t) -> acc[j % (D+1)] -RAW-> host AdamW of job j -> res[j % (D+1)]
//   merge of job j at the boundary of job j + D -RAW-> waits for job j (the only place the
//   device can wait), and the next forward reads the merged weights (RAW).
//   acc/res slots are reused D+1 jobs later (WAR), so at most D+1 host jobs are in flight.
#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <set>

#include "graphs/strategies/strategy.hpp"
#include "runtime/comm.hpp"

namespace zf {
namespace {

struct Matrix {  // a 2-D weight and its ZenFlow state
  Param* p;
  int R, C, k;
  Tensor sel, imp, m_sel, v_sel;             // device side
  Tensor m_sel_host, v_sel_host;             // offload: selective moments kept on the host
  Tensor mass;                               // {sum|g|, sum|g[:, sel]|} of the last step (auto rule)
  HostTensor master, m, v, resync;           // host side
  HostTensor m2, v2;                         // semantics deepspeed with overlap_step: the second host moment set
  std::vector<HostTensor> acc, res;          // rings of D+1
  double A = 0.0, N = 0.0;                   // auto rule
  double mass_host[2] = {0, 0};
  std::vector<std::vector<int32_t>> selections;  // read back at every selection (metrics)
};

struct Vector {  // a 1-D parameter: device AdamW every step
  Param* p;
  Tensor m, v;
  // semantics deepspeed: the warm-up's moments (DeepSpeed's host moments of the parameter, one
  // set per parity under overlap_step; docs/zenflow.md)
  Tensor mw[2], vw[2];
  // semantics deepspeed with gradient_clipping: the window sums of g/K on the host, a ring of D+1
  // like the 2-D accumulators (DeepSpeed's clip norm counts them; docs/zenflow.md)
  std::vector<HostTensor> acc;
};

struct Pending {
  int64_t job, slot, newest_step;
};

class ZenFlowStrategy final : public Strategy {
 public:
  ZenFlowStrategy(Runtime& rt, std::vector<Param*> params, const Spec& spec, int64_t spe, const Comm* comm)
      : Strategy(rt, params, spec, comm), z_(spec.zenflow) {
    D_ = z_.staleness();
    W_ = z_.full_warm_up_rounds;
    K_ = z_.update_interval.is_auto ? -1 : z_.update_interval.steps;  // -1: auto
    S_ = select_interval_steps(spec, spe);
    ds_ = z_.deepspeed_rules();
    two_sets_ = ds_ && z_.overlap_step;
    if (ds_ && (K_ < 0 || z_.reset_host_moments || spec.precision == "fp16"))
      throw InputError(spec.where("zenflow.semantics"), "\"deepspeed\" needs a fixed update_interval, no "
                                                        "reset_host_moments and no fp16");
    if (K_ > 0 && S_ != 0 && S_ < K_)
      throw InputError(spec.where("zenflow.select_interval"),
                       "the select interval (" + std::to_string(S_) + " steps) must be >= update_interval (" +
                           std::to_string(K_) + ")");
    const int ring = D_ + 1;
    {  // stage >= 1: the host state is the 2-D weights' (and the 1-D window sums' of the clip)
      std::vector<Param*> host;
      for (Param* p : params_)
        if (p->is_matrix() || (ds_ && clipping())) host.push_back(p);
      plan_partition(host);
    }
    for (Param* p : params_) {
      if (!p->is_matrix()) {
        vec_.push_back(Vector{p, Tensor::home(p->value.shape(), p->name + ".m"),
                              Tensor::home(p->value.shape(), p->name + ".v"), {}, {}, {}});
        if (ds_ && W_ > 0)
          for (int i = 0; i < (two_sets_ ? 2 : 1); ++i) {
            vec_.back().mw[i] = Tensor::home(p->value.shape(), p->name + ".m_warm" + std::to_string(i));
            vec_.back().vw[i] = Tensor::home(p->value.shape(), p->name + ".v_warm" + std::to_string(i));
          }
        if (ds_ && clipping())
          for (int i = 0; i < ring; ++i)
            vec_.back().acc.push_back(host_tensor(*p, p->name + ".acc" + std::to_string(i)));
        continue;
      }
      auto mx = std::make_unique<Matrix>();
      Matrix& w = *mx;
      w.p = p;
      w.R = (int)p->rows();
      w.C = (int)p->cols();
      w.k = std::clamp((int)std::floor(z_.topk_ratio * w.C), 1, w.C);
      const std::string& n = p->name;
      w.sel = Tensor::home({w.k}, n + ".sel", sizeof(int32_t));
      w.imp = Tensor::lazy({w.C}, n + ".importance");
      // (R, k); (k, R) for a weight stored (in, out): a selected column's moments are contiguous
      const std::vector<int64_t> rk = p->in_out ? std::vector<int64_t>{w.k, w.R} : std::vector<int64_t>{w.R, w.k};
      if (z_.offload) {
        w.m_sel_host = Tensor::home(rk, n + ".m_sel.host");
        w.v_sel_host = Tensor::home(rk, n + ".v_sel.host");
        w.m_sel = Tensor::lazy(rk, n + ".m_sel");
        w.v_sel = Tensor::lazy(rk, n + ".v_sel");
      } else {
        w.m_sel = Tensor::home(rk, n + ".m_sel");
        w.v_sel = Tensor::home(rk, n + ".v_sel");
      }
      w.mass = Tensor::home({2}, n + ".mass", sizeof(double));
      w.master = host_tensor(*p, n + ".master");
      w.m = host_tensor(*p, n + ".m");
      w.v = host_tensor(*p, n + ".v");
      if (two_sets_) {
        w.m2 = host_tensor(*p, n + ".m2");
        w.v2 = host_tensor(*p, n + ".v2");
      }
      // with precision bf16 the parameters cross as bf16 both ways (resync down, results up); the
      // accumulators stay fp32 (a sum of bf16 gradients needs the wider type)
      const size_t wire = bf16_ ? 2 : 4;
      w.resync = host_tensor(*p, n + ".resync", wire);
      for (int i = 0; i < ring; ++i) {
        w.acc.push_back(host_tensor(*p, n + ".acc" + std::to_string(i)));
        w.res.push_back(host_tensor(*p, n + ".res" + std::to_string(i), wire));
      }
      to_host(rt_.device(-1).named("init.master." + n), p->value, w.master, false);
      mat_.push_back(std::move(mx));
    }
    make_clip(false);
  }

  const char* name() const override { return "zenflow"; }

  bool is_select(int64_t t) const { return t >= W_ && (t == W_ || (S_ != 0 && t % S_ == 0)); }
  // The latest selection at or before step t >= W. The selective moments were zeroed there, so the
  // selective AdamW's bias correction counts from it (docs/zenflow.md, "Deliberate differences").
  int64_t last_select(int64_t t) const {
    const int64_t m = S_ != 0 ? t / S_ * S_ : W_;
    return m > W_ ? m : W_;
  }

  // semantics deepspeed with overlap_step: the host moment set of the update at step t, DeepSpeed's
  // get_overlap_step_state (the parity of t in the warm-up, of t / update_interval after it)
  int parity(int64_t t) const {
    if (!two_sets_) return 0;
    return (int)((t < W_ ? t : t / K_) & 1);
  }
  // The selective (device) AdamW's bias-correction step at step t >= W: since the latest
  // selection (ours), or DeepSpeed's count from its first step, never reset.
  int64_t selective_step(int64_t t) const { return ds_ ? t - W_ + 1 : t - last_select(t) + 1; }

  // The host AdamW's bias-correction step: t + 1 (DeepSpeed), or with reset_host_moments the host
  // updates since the end of the warm-up, whose moments restarted there (jobs 0..W-1 are the
  // warm-up's, one per step).
  int64_t host_step(int64_t t) const {
    return z_.reset_host_moments && W_ > 0 && t >= W_ ? job_ - W_ + 1 : t + 1;
  }

  // The step whose forward first needs the result of the asynchronous host update submitted at
  // update step t: the one after the step that merges it, D update boundaries later. Exact with a
  // fixed update_interval; under the auto rule the earliest possible (D steps later).
  int64_t merge_due(int64_t t) const {
    if (K_ < 0) return t + D_ + 1;
    int64_t u = t;
    for (int d = 0; d < D_; ++d)
      do ++u;
      while (!((u + 1 - W_) % K_ == 0 || (S_ != 0 && (u + 1) % S_ == 0)));
    return u + 1;
  }

  bool is_update(int64_t t) const {
    if (t < W_) return true;
    if (K_ > 0 && (t + 1 - W_) % K_ == 0) return true;
    if (K_ < 0 && last_vote_) return true;
    return S_ != 0 && (t + 1) % S_ == 0;
  }

  // Data-parallel selection: each rank's importance of its local gradient (C floats per weight),
  // summed over the ranks; every rank then takes the same top-k of the sum (docs/data-parallel.md).
  void before_gradient_allreduce(const UpdateStep& u, const Comm& comm) override {
    if (!is_select(u.o)) return;
    for (auto& wp : mat_) {
      Matrix& w = *wp;
      SubmitOptions o = rt_.device(u.t);
      insert_column_importance(o.named("select.importance." + w.p->name), w.p->grad, w.imp, z_.importance == "l2",
                               w.p->in_out);
      insert_allreduce(o.named("select.allreduce." + w.p->name), w.imp, 1.0f, comm);
    }
    imp_reduced_at_ = u.t;
  }

  // ZenFlow's selection at step t (update o): the top-k columns of each 2-D weight's importance.
  void select_columns(int64_t t, int64_t o) {
    if (sel_o_ == o && !sel_dropped_.empty()) {
      // stage 2 under fp16: the selection runs before the overflow check, and the step that made
      // the previous one at this update was skipped; it is selected again now and the skipped
      // step's selection leaves the metrics (a skipped step selects nothing: docs/zenflow.md)
      sel_dropped_.back() = 1;
      for (auto& wp : mat_) allreduce_ -= (int64_t)wp->imp.bytes();
    }
    sel_dropped_.push_back(0);
    sel_o_ = o;
    for (auto& wp : mat_) {
      Matrix& w = *wp;
      const std::string& n = w.p->name;
      if (o == W_ && W_ > 0 && z_.reset_host_moments)  // after the last warm-up update's AdamW (RAW/WAR)
        for (size_t i = 0; i < w.m.tiles.size(); ++i) {
          insert_zero(rt_.host(t).named("reset.m." + n + "[" + std::to_string(i) + "]"), w.m.tiles[i]);
          insert_zero(rt_.host(t).named("reset.v." + n + "[" + std::to_string(i) + "]"), w.v.tiles[i]);
        }
      if (o != 0) {  // M <- P: staged so the device never waits for in-flight host jobs
        to_host(rt_.crossing(t).named("d2h.resync." + n), w.p->value, w.resync);
        for (size_t i = 0; i < w.master.tiles.size(); ++i)
          insert_copy(rt_.host(t).named("resync." + n + "[" + std::to_string(i) + "]"), w.resync.tiles[i],
                      whole(w.resync.tiles[i]), w.master.tiles[i], whole(w.master.tiles[i]));
      }
      SubmitOptions o = rt_.device(t);
      if (imp_reduced_at_ == t)  // data-parallel: already summed over the ranks (this step's gradient);
        allreduce_ += (int64_t)w.imp.bytes();  // counted here: a step skipped for an fp16 overflow selects nothing
      else
        insert_column_importance(o.named("select.importance." + n), w.p->grad, w.imp, z_.importance == "l2",
                                   w.p->in_out);
      insert_topk(o.named("select.topk." + n), w.imp, w.sel);
      insert_zero(o.named("select.zero_m." + n), z_.offload ? w.m_sel_host : w.m_sel);
      insert_zero(o.named("select.zero_v." + n), z_.offload ? w.v_sel_host : w.v_sel);
      w.selections.emplace_back(w.k);
      rt_.read_async(w.sel, w.selections.back().data(), w.k * sizeof(int32_t), t);
    }
    selected_ = true;
    selected_at_ = t;
  }

  // Stage 2 (docs/data-parallel.md): the 2-D gradients are reduce-scattered, their selected
  // columns all-reduced in the same task (the device update reads them on every rank), so the
  // selection of this step comes first; the 1-D gradients (device-updated) are all-reduced.
  void submit_gradient_collectives(const UpdateStep& u, const Comm& comm) override {
    if (zero_stage() != 2) return Strategy::submit_gradient_collectives(u, comm);
    if (is_select(u.o)) select_columns(u.t, u.o);
    const float mean = 1.0f / (float)comm.size();
    for (Param* p : params_) {
      const Matrix* w = nullptr;
      for (auto& wp : mat_)
        if (wp->p == p) w = wp.get();
      if (w) {
        insert_reduce_scatter(rt_.device(u.t).named("reduce_scatter.grad." + p->name), p->grad, mean, *bounds(*p), comm,
                              selected_ ? &w->sel : nullptr, p->in_out);
        reduce_scatter_ += (int64_t)p->grad.bytes();
        if (selected_) grad_allreduce_ += (int64_t)w->R * w->k * (int64_t)sizeof(float);
      } else {
        insert_allreduce(rt_.device(u.t).named("allreduce.grad." + p->name), p->grad, mean, comm);
        grad_allreduce_ += (int64_t)p->grad.bytes();
      }
    }
  }

  // Step u.t's update. Every counter below runs on o, the applied updates (UpdateStep): a step
  // skipped for an fp16 overflow does not exist for ZenFlow (no selection, no accumulation, no
  // host or device update; docs/zenflow.md). t only tags the tasks.
  void submit_update(const UpdateStep& u) override {
    const int64_t t = u.t, o = u.o;
    // precision fp16: the device gradients are unscaled in place first (DeepSpeed's
    // unscale_and_clip_grads), so the selection, the accumulation and both device AdamWs read the
    // true gradient
    if (u.grad_scale != 1.0f)
      for (Param* p : params_) insert_scale(rt_.device(t).named("unscale.grad." + p->name), p->grad, u.grad_scale);
    // semantics deepspeed: DeepSpeed divides the loss by its accumulation steps, update_interval,
    // so every gradient it sees (selection, selective and 1-D steps, the host's window sum) is g/K
    if (ds_ && K_ > 1)
      for (Param* p : params_)
        insert_scale(rt_.device(t).named("scale.grad." + p->name), p->grad, 1.0f / (float)K_);
    // the auto rule's vote on the previous update's gradient (after a resume: on the restored
    // mass); its mass task is tagged with a step <= t - 1
    last_vote_ = K_ < 0 && o - 1 >= W_ && auto_vote(t - 1);

    // 1. selection (stage 2: already submitted before the gradient collectives)
    const bool select = is_select(o);
    if (select && selected_at_ != t) select_columns(t, o);

    // 2. accumulation of the full gradient into this interval's buffer
    const int64_t slot = job_ % (D_ + 1);
    auto accumulate = [&](const Param& p, const HostTensor& acc) {  // the window's first step copies
      for (size_t i = 0; i < acc.tiles.size(); ++i) {
        const std::string nm = "accumulate." + p.name + "[" + std::to_string(i) + "]";
        if (n_ == 0)
          insert_copy(rt_.crossing(t).named(nm), p.grad, acc.slices[i], acc.tiles[i], whole(acc.tiles[i]));
        else
          insert_accumulate(rt_.crossing(t).named(nm), acc.tiles[i], whole(acc.tiles[i]), p.grad, acc.slices[i], 1.0f);
      }
      for (const Slice& sl : acc.slices) d2h_ += (int64_t)(sl.n * p.grad.elem_size());  // this rank's tiles
    };
    for (auto& wp : mat_) accumulate(*wp->p, wp->acc[slot]);
    for (Vector& v : vec_)  // semantics deepspeed with clipping: the 1-D window sums, for the norm
      if (!v.acc.empty()) accumulate(*v.p, v.acc[slot]);
    ++n_;

    // 3. host update at the interval's boundary, merge of the job D intervals back
    if (is_update(o)) {
      update_steps_.push_back(o);
      // the interval's mean; semantics deepspeed: its sum of g/K (DeepSpeed's window sum)
      float scale = ds_ ? 1.0f : 1.0f / (float)n_;
      const bool sync = o < W_ || D_ == 0;
      // priority and zf-deadline's deadline, a step: merge_due counts applied updates (o); skipped
      // fp16 steps, not known in advance, only make the deadline earlier than the real merge
      const int64_t due = sync ? t + 1 : t + (merge_due(o) - o);
      if (clip_ && !ds_) {
        // DeepSpeed's ZenFlow clips here: the host step's gradient (the interval's, on the host
        // side, at its boundary) by its global norm; the selective and 1-D device steps are not
        // clipped (docs/zenflow.md). Norm of the mean acc/n; the factor folds the 1/n in. Loss
        // scale 1: under fp16 the device gradients were unscaled before they were accumulated
        // (each step of the interval may have run with another scale).
        std::vector<ClipPart> parts;
        for (auto& wp : mat_)
          for (const Tensor& tile : wp->acc[slot].tiles) parts.push_back({&tile, whole(tile)});
        clip_->submit(t, rt_.host(t).due_at(due), parts, (double)n_ * (double)n_, scale);
        scale = 1.0f;
      } else if (clip_) {
        // semantics deepspeed: DeepSpeed's norm is over its whole host partition's window sums of
        // g/K, every parameter in model order, 1-D included; the factor scales the 2-D window
        // sums here and, in the warm-up, the 1-D gradient of its host step (step 4); after the
        // warm-up DeepSpeed's clipped 1-D host step is overwritten by its unclipped selective one
        std::vector<ClipPart> parts;
        for (Param* p : params_) {
          for (auto& wp : mat_)
            if (wp->p == p)
              for (const Tensor& tile : wp->acc[slot].tiles) parts.push_back({&tile, whole(tile)});
          for (Vector& v : vec_)
            if (v.p == p)
              for (const Tensor& tile : v.acc[slot].tiles) parts.push_back({&tile, whole(tile), false});
        }
        clip_->submit(t, rt_.host(t).due_at(due), parts);
      }
      for (auto& wp : mat_) {
        Matrix& w = *wp;
        for (size_t i = 0; i < w.master.tiles.size(); ++i) {
          const std::string s = w.p->name + "[" + std::to_string(i) + "]";
          // synchronous: the merge reads the master weights next; else the result copy is what crosses
          // bf16: the synchronous merge reads a bf16 copy too (the result slot of this job)
          const bool copy_result = !sync || bf16_;
          const SubmitOptions ho = rt_.host(t).due_at(due).named("adam.host." + s);
          const bool second = parity(o) == 1;
          insert_adam_step(copy_result ? ho : ho.prefetched(0), hp(o), host_step(o), scale, w.master.tiles[i],
                           whole(w.master.tiles[i]), w.acc[slot].tiles[i], whole(w.acc[slot].tiles[i]),
                           second ? w.m2.tiles[i] : w.m.tiles[i], second ? w.v2.tiles[i] : w.v.tiles[i]);
          if (copy_result)
            insert_copy(rt_.host(t).due_at(due).named("result." + s).prefetched(1), w.master.tiles[i],
                        whole(w.master.tiles[i]), w.res[slot].tiles[i], whole(w.res[slot].tiles[i]));
        }
      }
      if (sync) {
        merge_all(t, [&](Matrix& w) -> const HostTensor& { return bf16_ ? w.res[slot] : w.master; },
                  MergeEvent{job_, o, o, 0, 0});
      } else {
        if (first_async_job_ < 0) first_async_job_ = job_;
        pending_.push_back({job_, slot, o});
        if (job_ - D_ >= first_async_job_) {
          Pending p = pending_.front();
          pending_.pop_front();
          merge_all(t, [&](Matrix& w) -> const HostTensor& { return w.res[p.slot]; },
                    MergeEvent{p.job, p.newest_step, o, 0, 0});
        }
      }
      ++job_;
      n_ = 0;
    }

    // 4. device updates: selected columns, 1-D parameters
    SubmitOptions dev = rt_.device(t);
    if (selected_) {
      for (auto& wp : mat_) {
        Matrix& w = *wp;
        const std::string& n = w.p->name;
        if (z_.offload) {
          insert_copy(rt_.crossing(t).named("h2d.m_sel." + n), w.m_sel_host, whole(w.m_sel_host), w.m_sel, whole(w.m_sel));
          insert_copy(rt_.crossing(t).named("h2d.v_sel." + n), w.v_sel_host, whole(w.v_sel_host), w.v_sel, whole(w.v_sel));
          h2d_ += 2 * (int64_t)w.m_sel.bytes();
        }
        insert_selective_adam(dev.named("adam.device." + n), hp(o), selective_step(o), w.p->value, w.sel, w.p->grad,
                              w.m_sel, w.v_sel, w.p->in_out);
        if (z_.offload) {
          insert_copy(rt_.crossing(t).named("d2h.m_sel." + n), w.m_sel, whole(w.m_sel), w.m_sel_host, whole(w.m_sel_host));
          insert_copy(rt_.crossing(t).named("d2h.v_sel." + n), w.v_sel, whole(w.v_sel), w.v_sel_host, whole(w.v_sel_host));
          d2h_ += 2 * (int64_t)w.m_sel.bytes();
        }
      }
    }
    for (Vector& v : vec_) {
      if (!ds_) {
        insert_adam_step(dev.named("adam.device." + v.p->name), hp(o), o + 1, 1.0f, v.p->value, whole(v.p->value),
                         v.p->grad, whole(v.p->grad), v.m, v.v);
      } else if (o < W_) {
        // DeepSpeed's warm-up: the host step (at the host's moments, step o + 1) whose result is
        // copied back synchronously; run here on the device parameter, equal to its host master
        const int s = parity(o);
        if (clip_)  // this step's clip point (step 3), over the window g/K of every parameter
          insert_scale_by(dev.named("clip.scale." + v.p->name), v.p->grad, whole(v.p->grad), clip_->factor());
        insert_adam_step(dev.named("adam.warm." + v.p->name), hp(o), o + 1, 1.0f, v.p->value, whole(v.p->value),
                         v.p->grad, whole(v.p->grad), v.mw[s], v.vw[s]);
      } else {
        // after it: DeepSpeed's selective optimizer, whose moments start at the end of the warm-up
        // and are zeroed at every selection while its step count runs on
        if (select) {
          insert_zero(dev.named("select.zero_m." + v.p->name), v.m);
          insert_zero(dev.named("select.zero_v." + v.p->name), v.v);
        }
        insert_adam_step(dev.named("adam.device." + v.p->name), hp(o), selective_step(o), 1.0f, v.p->value,
                         whole(v.p->value), v.p->grad, whole(v.p->grad), v.m, v.v);
      }
    }

    // the auto rule reads the gradient mass of this step when the next one is submitted
    if (K_ < 0 && o >= W_)
      for (auto& wp : mat_) {
        insert_grad_mass(dev.named("auto.mass." + wp->p->name), wp->p->grad, wp->sel, wp->mass, wp->p->in_out);
        rt_.read_async(wp->mass, wp->mass_host, sizeof wp->mass_host, t);
      }
  }

  std::vector<TraceEvent> trace_events(const std::vector<TaskRecord>& recs) const override {
    std::vector<TraceEvent> ev;
    std::map<int64_t, const TaskRecord*> first_host;  // step -> first host AdamW task of its job
    for (auto& r : recs) {
      std::string n = r.name;
      if (n.rfind("select.topk.", 0) == 0)
        ev.push_back({r.end_us, r.worker, "select", n.substr(12) + " at step " + std::to_string(r.step)});
      if (n.rfind("adam.host.", 0) == 0) {
        auto& f = first_host[r.step];
        if (!f || r.start_us < f->start_us) f = &r;
      }
    }
    for (auto& [step, r] : first_host)
      ev.push_back({r->start_us, r->worker, "host_update", "started, interval ending at step " + std::to_string(step)});
    std::set<int64_t> seen;
    for (auto& e : log_.events())
      if (seen.insert(e.job).second)
        ev.push_back({e.start_us, -1, "merge",
                      "host update " + std::to_string(e.job) + " applied at step " + std::to_string(e.merge_step) +
                          ", staleness " + std::to_string(e.merge_step - e.newest_step) + " steps"});
    return ev;
  }

  void save_state(StateWriter& w) const override {
    for (auto& wp : mat_) {
      const Matrix& m = *wp;
      const std::string& n = m.p->name;
      const int64_t io = m.p->in_out ? m.R : 0;  // weight-shaped state in the logical layout
      w.put("host.master." + n, m.master, io);
      w.put("host.m." + n, m.m, io);
      w.put("host.v." + n, m.v, io);
      if (two_sets_) {
        w.put("host.m2." + n, m.m2, io);
        w.put("host.v2." + n, m.v2, io);
      }
      for (int i = 0; i <= D_; ++i) {
        w.put("host.acc" + std::to_string(i) + "." + n, m.acc[i], io);
        w.put("host.res" + std::to_string(i) + "." + n, m.res[i], io);
      }
      w.put("device.sel." + n, m.sel);
      w.put("device.m_sel." + n, z_.offload ? m.m_sel_host : m.m_sel, io);
      w.put("device.v_sel." + n, z_.offload ? m.v_sel_host : m.v_sel, io);
      w.put_f64("auto.AN." + n, {m.A, m.N, m.mass_host[0], m.mass_host[1]});
    }
    for (const Vector& v : vec_) {
      w.put("device.m." + v.p->name, v.m);
      w.put("device.v." + v.p->name, v.v);
      for (size_t i = 0; i < v.acc.size(); ++i) w.put("host.acc" + std::to_string(i) + "." + v.p->name, v.acc[i]);
      for (int i = 0; i < 2; ++i)
        if (v.mw[i].numel()) {
          w.put("device.m_warm" + std::to_string(i) + "." + v.p->name, v.mw[i]);
          w.put("device.v_warm" + std::to_string(i) + "." + v.p->name, v.vw[i]);
        }
    }
    if (ds_) w.put_i64("zenflow.semantics_deepspeed", {1});
    w.put_i64("zenflow.counters", {job_, n_, first_async_job_, u_, selected_ ? 1 : 0, last_vote_ ? 1 : 0, D_});
    std::vector<int64_t> pend;
    for (auto& p : pending_) pend.insert(pend.end(), {p.job, p.slot, p.newest_step});
    w.put_i64("zenflow.pending", pend);
    w.put_i64("zenflow.update_steps", update_steps_);
  }

  // Every value is checked against the others and the checkpoint's step (docs/checkpoints.md): the
  // counters, the ring slots and the selected columns index buffers, so nothing unchecked reaches a
  // kernel or a ring, whether or not the file's checksum matched.
  void load_state(const StateReader& r) override {
    using V = StateReader::Values;
    const int64_t s = r.step();
    auto c = r.i64("zenflow.counters");
    if (c.size() != 7) r.fail("zenflow.counters", std::to_string(c.size()) + " values, expected 7");
    if (c[6] != D_) r.fail("zenflow.counters", "written with max_staleness " + std::to_string(c[6]) + ", this run has " +
                                                   std::to_string(D_));
    const int64_t job = c[0], acc_n = c[1], first_async = c[2], u = c[3];
    if (r.has("zenflow.semantics_deepspeed") != ds_)
      r.fail("zenflow.semantics", std::string("written with semantics \"") + (ds_ ? "zenflow" : "deepspeed") +
                                      "\", this run has \"" + z_.semantics + "\"");
    auto counter = [&](int idx, const char* what, int64_t v, int64_t want_lo, int64_t want_hi) {
      if (v < want_lo || v > want_hi)
        r.fail("zenflow.counters[" + std::to_string(idx) + "]",
               std::string(what) + " " + std::to_string(v) + ", expected " +
                   (want_lo == want_hi ? std::to_string(want_lo)
                                       : "[" + std::to_string(want_lo) + ", " + std::to_string(want_hi) + "]") +
                   " (the checkpoint is at step " + std::to_string(s) + ")");
    };
    counter(0, "host jobs", job, 0, s + 1);
    counter(3, "auto-rule updates", u, 0, s + 1);
    counter(4, "selected flag", c[4], 0, 1);
    counter(5, "vote flag", c[5], 0, 1);
    if ((c[4] != 0) != (s >= W_))
      r.fail("zenflow.counters[4]", "selected flag " + std::to_string(c[4]) + " at step " + std::to_string(s) +
                                        " with full_warm_up_rounds " + std::to_string(W_));
    const std::vector<int64_t> us = r.i64("zenflow.update_steps");
    if ((int64_t)us.size() != job)
      r.fail("zenflow.update_steps", std::to_string(us.size()) + " steps for " + std::to_string(job) + " host jobs");
    for (size_t i = 0; i < us.size(); ++i)
      if (us[i] < 0 || us[i] > s || (i > 0 && us[i] <= us[i - 1]))
        r.fail("zenflow.update_steps", "element " + std::to_string(i) + " is " + std::to_string(us[i]) +
                                           " (expected increasing steps in [0, " + std::to_string(s) + "])");
    const int64_t want_n = us.empty() ? s + 1 : s - us.back();  // gradients since the last update
    if (acc_n != want_n) counter(1, "accumulated steps", acc_n, want_n, want_n);
    // the first asynchronous job: the first update at or after the warm-up (none with staleness 0)
    const int64_t sync_jobs = std::count_if(us.begin(), us.end(), [&](int64_t t) { return t < W_; });
    const int64_t want_first = D_ > 0 && sync_jobs < job ? sync_jobs : -1;
    if (first_async != want_first) counter(2, "first asynchronous job", first_async, want_first, want_first);
    auto pend = r.i64("zenflow.pending");
    if (pend.size() % 3) r.fail("zenflow.pending", std::to_string(pend.size()) + " values, expected (job, slot, step) triples");
    // in flight: the last min(D, async jobs) jobs, each in its ring slot
    const int64_t in_flight = first_async < 0 ? 0 : std::min<int64_t>(D_, job - first_async);
    if ((int64_t)pend.size() / 3 != in_flight)
      r.fail("zenflow.pending", std::to_string(pend.size() / 3) + " host jobs in flight, expected " +
                                    std::to_string(in_flight));
    std::deque<Pending> pending;
    for (size_t i = 0; i < pend.size(); i += 3) {
      const int64_t j = job - in_flight + (int64_t)(i / 3);
      if (pend[i] != j || pend[i + 1] != j % (D_ + 1) || pend[i + 2] != us[(size_t)j])
        r.fail("zenflow.pending", "entry " + std::to_string(i / 3) + " is (job " + std::to_string(pend[i]) + ", slot " +
                                      std::to_string(pend[i + 1]) + ", step " + std::to_string(pend[i + 2]) +
                                      "), expected (" + std::to_string(j) + ", " + std::to_string(j % (D_ + 1)) + ", " +
                                      std::to_string(us[(size_t)j]) + ")");
      pending.push_back({pend[i], pend[i + 1], pend[i + 2]});
    }
    const bool selected = c[4] != 0;
    for (auto& wp : mat_) {
      Matrix& m = *wp;
      const std::string& n = m.p->name;
      const int64_t io = m.p->in_out ? m.R : 0;  // the file holds the logical layout
      r.get("host.master." + n, m.master, V::Finite, io);
      r.get("host.m." + n, m.m, V::Finite, io);
      r.get("host.v." + n, m.v, V::NonNegative, io);
      if (two_sets_) {
        r.get("host.m2." + n, m.m2, V::Finite, io);
        r.get("host.v2." + n, m.v2, V::NonNegative, io);
      }
      for (int i = 0; i <= D_; ++i) {
        r.get("host.acc" + std::to_string(i) + "." + n, m.acc[i], V::Finite, io);
        r.get("host.res" + std::to_string(i) + "." + n, m.res[i], V::Finite, io);
      }
      if (selected)  // before the first selection the buffer is unused (and overwritten by it)
        r.get_indices("device.sel." + n, m.sel, m.C);
      r.get("device.m_sel." + n, z_.offload ? m.m_sel_host : m.m_sel, V::Finite, io);
      r.get("device.v_sel." + n, z_.offload ? m.v_sel_host : m.v_sel, V::NonNegative, io);
      auto an = r.f64("auto.AN." + n);
      if (an.size() != 4) r.fail("auto.AN." + n, std::to_string(an.size()) + " values, expected 4");
      for (int i = 0; i < 4; ++i)
        if (!std::isfinite(an[i]) || (i != 1 && an[i] < 0))
          r.fail("auto.AN." + n, "element " + std::to_string(i) + " is " + std::to_string(an[i]) +
                                     (i != 1 ? " (expected a finite number >= 0)" : " (expected a finite number)"));
      m.A = an[0];
      m.N = an[1];
      m.mass_host[0] = an[2];  // gradient mass of the last step: its vote is taken on resume
      m.mass_host[1] = an[3];
    }
    for (Vector& v : vec_) {
      r.get("device.m." + v.p->name, v.m);
      r.get("device.v." + v.p->name, v.v, V::NonNegative);
      for (size_t i = 0; i < v.acc.size(); ++i) r.get("host.acc" + std::to_string(i) + "." + v.p->name, v.acc[i]);
      for (int i = 0; i < 2; ++i)
        if (v.mw[i].numel()) {
          r.get("device.m_warm" + std::to_string(i) + "." + v.p->name, v.mw[i]);
          r.get("device.v_warm" + std::to_string(i) + "." + v.p->name, v.vw[i], V::NonNegative);
        }
    }
    job_ = job;
    n_ = acc_n;
    first_async_job_ = first_async;
    u_ = u;
    selected_ = selected;
    last_vote_ = c[5] != 0;
    pending_ = std::move(pending);
    update_steps_ = us;
  }

  // semantics deepspeed: none (DeepSpeed has no end-of-training flush; results in flight stay unmerged)
  void flush(const UpdateStep& last) override {
    if (ds_) return;
    while (!pending_.empty()) {
      Pending p = pending_.front();
      pending_.pop_front();
      merge_all(last.t, [&](Matrix& w) -> const HostTensor& { return w.res[p.slot]; },
                MergeEvent{p.job, p.newest_step, last.o, 0, 0});
    }
  }

  void add_metrics(nlohmann::json& m, int64_t steps) const override {
    auto ev = log_.events();
    double mx = 0, sum = 0;
    int64_t mx_int = 0;
    std::set<int64_t> seen;
    for (auto& e : ev) {
      if (!seen.insert(e.job).second) continue;  // one event per (job, first weight tile)
      double s = (double)(e.merge_step - e.newest_step);
      mx = std::max(mx, s);
      sum += s;
      // intervals: update boundaries in (newest_step, merge_step]
      int64_t b = std::count_if(update_steps_.begin(), update_steps_.end(),
                                [&](int64_t u) { return u > e.newest_step && u <= e.merge_step; });
      mx_int = std::max(mx_int, b);
    }
    m["staleness"] = {{"max", mx}, {"mean", seen.empty() ? 0.0 : sum / (double)seen.size()},
                      {"max_intervals", mx_int}, {"bound_intervals", D_}, {"merges", (int64_t)seen.size()}};
    m["host_updates"] = job_;
    m["host_update_steps"] = update_steps_;
    int64_t changes = 0, pairs = 0, reselections = 0;
    double overlap = 0;
    for (auto& wp : mat_) {
      std::vector<std::vector<int32_t>> sv;  // without the selections of skipped steps
      for (size_t i = 0; i < wp->selections.size(); ++i)
        if (i >= sel_dropped_.size() || !sel_dropped_[i]) sv.push_back(wp->selections[i]);
      for (size_t i = 1; i < sv.size(); ++i) {
        std::vector<int32_t> common;
        std::set_intersection(sv[i - 1].begin(), sv[i - 1].end(), sv[i].begin(), sv[i].end(),
                              std::back_inserter(common));
        overlap += (double)common.size() / (double)wp->k;
        changes += sv[i] != sv[i - 1];
        ++pairs;
      }
      reselections = std::max<int64_t>(reselections, (int64_t)sv.size());
    }
    m["selection"] = {{"changes", changes}, {"mean_overlap", pairs ? overlap / (double)pairs : 1.0},
                      {"selections", reselections}};
    m["zenflow"] = {{"update_interval", K_ < 0 ? nlohmann::json("auto") : nlohmann::json(K_)},
                    {"select_interval_steps", S_}, {"max_staleness", D_}, {"warm_up", W_},
                    {"topk_ratio", z_.topk_ratio}, {"overlap_step", z_.overlap_step}, {"offload", z_.offload}};
  }

 private:
  // Stage >= 1: each rank merges its partition's tiles, then the weight is all-gathered (the
  // selected columns, updated alike on every rank, travel with the rest).
  template <class Src>
  void merge_all(int64_t t, Src src, MergeEvent ev) {
    bool logged = false;  // one event per merge: at its first tile on this rank
    for (auto& wp : mat_) {
      Matrix& w = *wp;
      const HostTensor& h = src(w);
      size_t elems = 0;
      for (size_t i = 0; i < h.tiles.size(); ++i) {
        insert_merge(rt_.device(t).named("merge." + w.p->name + "[" + std::to_string(i) + "]"), h.tiles[i],
                     w.p->value, h.slices[i], selected_ ? &w.sel : nullptr, logged ? nullptr : &log_, ev,
                     w.p->in_out);
        logged = true;
        elems += h.slices[i].n;
      }
      // the unselected columns' share of this rank's tiles
      const int64_t cols = selected_ ? w.C - w.k : w.C;
      if (!h.tiles.empty())
        h2d_ += (int64_t)elems / w.C * cols * (int64_t)h.tiles.front().elem_size() +
                (int64_t)elems % w.C * (int64_t)h.tiles.front().elem_size() * cols / w.C;
      allgather_param(t, *w.p);
    }
  }

  // The auto update rule on the gradient mass of step t (docs/zenflow.md).
  bool auto_vote(int64_t t) {
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

  Spec::ZenFlow z_;
  int D_;
  int64_t W_, K_, S_;
  bool ds_ = false, two_sets_ = false;  // semantics deepspeed; with overlap_step (two host moment sets)
  std::vector<std::unique_ptr<Matrix>> mat_;
  std::vector<Vector> vec_;
  int64_t job_ = 0, n_ = 0, first_async_job_ = -1, u_ = 0;
  bool selected_ = false, last_vote_ = false;
  int64_t imp_reduced_at_ = -1;  // step whose importance before_gradient_allreduce all-reduced
  int64_t selected_at_ = -1;     // step whose selection select_columns submitted
  int64_t sel_o_ = -1;           // the update of the latest selection
  std::vector<char> sel_dropped_;  // per selection of this run: made at a step later skipped (fp16)
  std::deque<Pending> pending_;
  std::vector<int64_t> update_steps_;
  MergeLog log_;
};

// ZeRO-Offload with the delayed parameter update: the host AdamW of step t overlaps the device's
// step t + 1, and its result is copied to the device at the end of step t + 1.
class ZeroOffloadDpu final : public Strategy {
 public:
  ZeroOffloadDpu(Runtime& rt, std::vector<Param*> params, const Spec& spec, const Comm* comm)
      : Strategy(rt, params, spec, comm) {
    plan_partition(params_);  // stage >= 1: each rank's share of every parameter's host state
    for (Param* p : params_) {
      State s;
      s.master = host_tensor(*p, p->name + ".master");
      s.m = host_tensor(*p, p->name + ".m");
      s.v = host_tensor(*p, p->name + ".v");
      // bf16: gradients and results cross as bf16; the host unpacks gradients into hgrad32
      const size_t wire = bf16_ ? 2 : 4;
      for (int i = 0; i < 2; ++i) {
        s.hgrad[i] = host_tensor(*p, p->name + ".hgrad" + std::to_string(i), wire);
        s.res[i] = host_tensor(*p, p->name + ".res" + std::to_string(i), wire);
      }
      if (bf16_) s.hgrad32 = host_tensor(*p, p->name + ".hgrad.f32");
      to_host(rt_.device(-1).named("init.master." + p->name), p->value, s.master, false);
      st_.push_back(std::move(s));
    }
    make_clip(false);
  }
  const char* name() const override { return "zero-offload-dpu"; }
  void save_state(StateWriter& w) const override {
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& n = params_[i]->name;
      const int64_t io = params_[i]->in_out ? params_[i]->rows() : 0;  // logical layout (Param::in_out)
      w.put("host.master." + n, st_[i].master, io);
      w.put("host.m." + n, st_[i].m, io);
      w.put("host.v." + n, st_[i].v, io);
      w.put("host.res0." + n, st_[i].res[0], io);
      w.put("host.res1." + n, st_[i].res[1], io);
    }
    w.put_i64("dpu.last", {last_});
  }
  void load_state(const StateReader& r) override {
    auto l = r.i64("dpu.last");
    if (l.size() != 1) r.fail("dpu.last", std::to_string(l.size()) + " values, expected one counter");
    if (l[0] != r.step())  // the step of the last host update: every step has one
      r.fail("dpu.last", std::to_string(l[0]) + ", expected the checkpoint's step " + std::to_string(r.step()));
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& n = params_[i]->name;
      const int64_t io = params_[i]->in_out ? params_[i]->rows() : 0;
      r.get("host.master." + n, st_[i].master, StateReader::Values::Finite, io);
      r.get("host.m." + n, st_[i].m, StateReader::Values::Finite, io);
      r.get("host.v." + n, st_[i].v, StateReader::Values::NonNegative, io);
      r.get("host.res0." + n, st_[i].res[0], StateReader::Values::Finite, io);
      r.get("host.res1." + n, st_[i].res[1], StateReader::Values::Finite, io);
    }
    last_ = l[0];
  }
  // Counts applied updates (UpdateStep::o): the ring parity and the first delayed copy follow o, so
  // a step skipped for an fp16 overflow leaves the pipeline as it was.
  // With clipping: every gradient down, the clip over their host copies (its factor unscales the
  // fp16 loss scale and clips at once), then the updates with grad_scale 1.
  void submit_update(const UpdateStep& u) override {
    const int64_t t = u.t;
    const int b = (int)(u.o & 1);
    if (clip_) {
      for (size_t i = 0; i < params_.size(); ++i) gradient_down(t, b, i);
      std::vector<ClipPart> parts;
      for (const State& s : st_)
        for (size_t k = 0; k < s.master.tiles.size(); ++k) {
          const Tensor& g = bf16_ ? s.hgrad32.tiles[k] : s.hgrad[b].tiles[k];
          parts.push_back({&g, whole(g)});
        }
      clip_->submit(t, rt_.host(t).due_at(t + 2), parts, 1.0, 1.0f, 1.0f / u.grad_scale);
      for (size_t i = 0; i < params_.size(); ++i) update(u, i, 1.0f);
    } else {
      for (size_t i = 0; i < params_.size(); ++i) {
        gradient_down(t, b, i);
        update(u, i, u.grad_scale);
      }
    }
    last_ = u.o;
  }
  void gradient_down(int64_t t, int b, size_t i) {
    Param& p = *params_[i];
    State& s = st_[i];
    to_host(rt_.crossing(t).named("d2h.grad." + p.name), p.grad, s.hgrad[b]);
    if (bf16_)
      for (size_t k = 0; k < s.master.tiles.size(); ++k)
        insert_copy(rt_.host(t).due_at(t + 2).named("unpack.grad." + p.name + "[" + std::to_string(k) + "]"), s.hgrad[b].tiles[k],
                    whole(s.hgrad[b].tiles[k]), s.hgrad32.tiles[k], whole(s.hgrad32.tiles[k]));
  }
  void update(const UpdateStep& u, size_t i, float grad_scale) {
    const int64_t t = u.t;
    const int b = (int)(u.o & 1);
    Param& p = *params_[i];
    State& s = st_[i];
    for (size_t k = 0; k < s.master.tiles.size(); ++k) {
      const std::string nm = p.name + "[" + std::to_string(k) + "]";
      const Tensor& g = bf16_ ? s.hgrad32.tiles[k] : s.hgrad[b].tiles[k];
      insert_adam_step(rt_.host(t).due_at(t + 2).named("adam.host." + nm), hp(u.o), u.o + 1, grad_scale, s.master.tiles[k],
                       whole(s.master.tiles[k]), g, whole(g), s.m.tiles[k], s.v.tiles[k]);
      insert_copy(rt_.host(t).due_at(t + 2).named("result." + nm).prefetched(1), s.master.tiles[k], whole(s.master.tiles[k]),
                  s.res[b].tiles[k], whole(s.res[b].tiles[k]));
    }
    if (u.o >= 1) {
      to_device(rt_.crossing(t).named("h2d.param." + p.name), s.res[b ^ 1], p.value);
      allgather_param(t, p);  // stage >= 1: the other ranks' partitions
    }
  }
  void flush(const UpdateStep& last) override {
    if (last_ < 0) return;
    for (size_t i = 0; i < params_.size(); ++i) {
      to_device(rt_.crossing(last.t).named("h2d.param." + params_[i]->name), st_[i].res[last_ & 1],
                params_[i]->value);
      allgather_param(last.t, *params_[i]);
    }
  }

 private:
  struct State {
    HostTensor master, m, v, hgrad[2], res[2];
    HostTensor hgrad32;  // bf16: the unpacked gradient
  };
  std::vector<State> st_;
  int64_t last_ = -1;
};

}  // namespace

std::unique_ptr<Strategy> make_zenflow(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                       int64_t steps_per_epoch, const Comm* comm) {
  return std::make_unique<ZenFlowStrategy>(rt, std::move(params), spec, steps_per_epoch, comm);
}

std::unique_ptr<Strategy> make_zero_offload_dpu(const Spec& spec, Runtime& rt, std::vector<Param*> params,
                                                const Comm* comm) {
  return std::make_unique<ZeroOffloadDpu>(rt, std::move(params), spec, comm);
}

}  // namespace zf
