// ZenFlow's checkpoint state (docs/checkpoints.md): every host and device tensor, the ring's
// counters and jobs in flight, the auto rule's sums.
#include <algorithm>
#include <cmath>
#include <deque>

#include "graphs/strategies/zenflow/zenflow.hpp"

namespace zf::zenflow {

void ZenFlowStrategy::save_state(StateWriter& w) const {
  for (auto& wp : mat_) {
    const Matrix& m = *wp;
    const std::string& n = m.p->name;
    const int64_t io = m.p->in_out ? m.R : 0;  // weight-shaped state in the logical layout
    w.put("host.master." + n, m.master, io);
    w.put("host.m." + n, m.m, io);
    w.put("host.v." + n, m.v, io);
    if (cal_.host_moment_sets() == 2) {
      w.put("host.m2." + n, m.m2, io);
      w.put("host.v2." + n, m.v2, io);
    }
    // acc: a window's sum, or at fp32 the result of the job in flight in that slot (zenflow.pending)
    for (int i = 0; i <= cal_.staleness(); ++i) w.put("host.acc" + std::to_string(i) + "." + n, m.acc[i], io);
    for (size_t i = 0; i < m.res.size(); ++i) w.put("host.res" + std::to_string(i) + "." + n, m.res[i], io);
    w.put("device.sel." + n, m.sel);
    if (stage3()) {  // the shards' parts, whole in the file (zeros before the first selection)
      const std::vector<size_t> mb = selected_ ? moment_bounds(m) : std::vector<size_t>{};
      const size_t rk = (size_t)m.R * (size_t)m.k;
      put_owned(w, "device.m_sel." + n, z_.offload ? m.m_sel_host : m.m_sel, rk, mb, io);
      put_owned(w, "device.v_sel." + n, z_.offload ? m.v_sel_host : m.v_sel, rk, mb, io);
      if (masters()) put_owned(w, "device.master_sel." + n, z_.offload ? m.x_sel_host : m.x_sel, rk, mb, io);
    } else {
      w.put("device.m_sel." + n, z_.offload ? m.m_sel_host : m.m_sel, io);
      w.put("device.v_sel." + n, z_.offload ? m.v_sel_host : m.v_sel, io);
      if (masters()) w.put("device.master_sel." + n, z_.offload ? m.x_sel_host : m.x_sel, io);
    }
    w.put_f64("auto.AN." + n, {m.A, m.N, m.mass_host[0], m.mass_host[1]});
  }
  for (const Vector& v : vec_) {
    if (stage3()) {
      put_owned(w, "device.m." + v.p->name, v.m, v.p->value.numel(), shard_bounds_.at(v.p), 0);
      put_owned(w, "device.v." + v.p->name, v.v, v.p->value.numel(), shard_bounds_.at(v.p), 0);
      if (v.master.numel())
        put_owned(w, "device.master." + v.p->name, v.master, v.p->value.numel(), shard_bounds_.at(v.p), 0);
    } else {
      w.put("device.m." + v.p->name, v.m);
      w.put("device.v." + v.p->name, v.v);
      if (v.master.numel()) w.put("device.master." + v.p->name, v.master);
    }
    for (size_t i = 0; i < v.acc.size(); ++i) w.put("host.acc" + std::to_string(i) + "." + v.p->name, v.acc[i]);
    for (int i = 0; i < 2; ++i)
      if (v.mw[i].numel()) {
        w.put("device.m_warm" + std::to_string(i) + "." + v.p->name, v.mw[i]);
        w.put("device.v_warm" + std::to_string(i) + "." + v.p->name, v.vw[i]);
      }
  }
  if (cal_.deepspeed()) w.put_i64("zenflow.semantics_deepspeed", {1});
  w.put_i64("zenflow.counters", {ring_.job(), ring_.accumulated(), ring_.first_async_job(), u_, selected_ ? 1 : 0,
                                 last_vote_ ? 1 : 0, cal_.staleness()});
  std::vector<int64_t> pend;
  for (auto& p : ring_.pending()) pend.insert(pend.end(), {p.job, p.slot, p.newest_step});
  w.put_i64("zenflow.pending", pend);
  w.put_i64("zenflow.update_steps", ring_.update_steps());
}

namespace {

// The counters as read and checked, before they replace the strategy's.
struct SavedCounters {
  int64_t job = 0, accumulated = 0, first_async = -1, u = 0;
  bool selected = false, vote = false;
  std::vector<int64_t> update_steps;
  std::deque<Pending> pending;
};

// zenflow.counters and zenflow.update_steps, each checked against the others and the step.
SavedCounters read_counters(const StateReader& r, const ZenFlowCalendar& cal, const std::string& semantics) {
  const int64_t s = r.step(), D = cal.staleness(), W = cal.warm_up();
  auto c = r.i64("zenflow.counters");
  if (c.size() != 7) r.fail("zenflow.counters", std::to_string(c.size()) + " values, expected 7");
  if (c[6] != D) r.fail("zenflow.counters", "written with max_staleness " + std::to_string(c[6]) + ", this run has " +
                                                std::to_string(D));
  SavedCounters k{c[0], c[1], c[2], c[3], c[4] != 0, c[5] != 0, {}, {}};
  if (r.has("zenflow.semantics_deepspeed") != cal.deepspeed())
    r.fail("zenflow.semantics", std::string("written with semantics \"") + (cal.deepspeed() ? "zenflow" : "deepspeed") +
                                    "\", this run has \"" + semantics + "\"");
  auto counter = [&](int idx, const char* what, int64_t v, int64_t want_lo, int64_t want_hi) {
    if (v < want_lo || v > want_hi)
      r.fail("zenflow.counters[" + std::to_string(idx) + "]",
             std::string(what) + " " + std::to_string(v) + ", expected " +
                 (want_lo == want_hi ? std::to_string(want_lo)
                                     : "[" + std::to_string(want_lo) + ", " + std::to_string(want_hi) + "]") +
                 " (the checkpoint is at step " + std::to_string(s) + ")");
  };
  counter(0, "host jobs", k.job, 0, s + 1);
  counter(3, "auto-rule updates", k.u, 0, s + 1);
  counter(4, "selected flag", c[4], 0, 1);
  counter(5, "vote flag", c[5], 0, 1);
  if ((c[4] != 0) != (s >= W))
    r.fail("zenflow.counters[4]", "selected flag " + std::to_string(c[4]) + " at step " + std::to_string(s) +
                                      " with full_warm_up_rounds " + std::to_string(W));
  const std::vector<int64_t> us = r.i64("zenflow.update_steps");
  if ((int64_t)us.size() != k.job)
    r.fail("zenflow.update_steps", std::to_string(us.size()) + " steps for " + std::to_string(k.job) + " host jobs");
  for (size_t i = 0; i < us.size(); ++i)
    if (us[i] < 0 || us[i] > s || (i > 0 && us[i] <= us[i - 1]))
      r.fail("zenflow.update_steps", "element " + std::to_string(i) + " is " + std::to_string(us[i]) +
                                         " (expected increasing steps in [0, " + std::to_string(s) + "])");
  const int64_t want_n = us.empty() ? s + 1 : s - us.back();  // gradients since the last update
  if (k.accumulated != want_n) counter(1, "accumulated steps", k.accumulated, want_n, want_n);
  // the first asynchronous job: the first update at or after the warm-up (none with staleness 0)
  const int64_t sync_jobs = std::count_if(us.begin(), us.end(), [&](int64_t t) { return t < W; });
  const int64_t want_first = D > 0 && sync_jobs < k.job ? sync_jobs : -1;
  if (k.first_async != want_first) counter(2, "first asynchronous job", k.first_async, want_first, want_first);
  k.update_steps = us;
  return k;
}

// zenflow.pending: in flight, the last min(D, async jobs) jobs, each in its ring slot.
std::deque<Pending> read_pending(const StateReader& r, const SavedCounters& k, int64_t D) {
  auto pend = r.i64("zenflow.pending");
  if (pend.size() % 3) r.fail("zenflow.pending", std::to_string(pend.size()) + " values, expected (job, slot, step) triples");
  const int64_t in_flight = k.first_async < 0 ? 0 : std::min<int64_t>(D, k.job - k.first_async);
  if ((int64_t)pend.size() / 3 != in_flight)
    r.fail("zenflow.pending", std::to_string(pend.size() / 3) + " host jobs in flight, expected " +
                                  std::to_string(in_flight));
  const std::vector<int64_t>& us = k.update_steps;
  std::deque<Pending> pending;
  for (size_t i = 0; i < pend.size(); i += 3) {
    const int64_t j = k.job - in_flight + (int64_t)(i / 3);
    if (pend[i] != j || pend[i + 1] != j % (D + 1) || pend[i + 2] != us[(size_t)j])
      r.fail("zenflow.pending", "entry " + std::to_string(i / 3) + " is (job " + std::to_string(pend[i]) + ", slot " +
                                    std::to_string(pend[i + 1]) + ", step " + std::to_string(pend[i + 2]) +
                                    "), expected (" + std::to_string(j) + ", " + std::to_string(j % (D + 1)) + ", " +
                                    std::to_string(us[(size_t)j]) + ")");
    pending.push_back({pend[i], pend[i + 1], pend[i + 2]});
  }
  return pending;
}

}  // namespace

// Every value is checked against the others and the checkpoint's step (docs/checkpoints.md): the
// counters, the ring slots and the selected columns index buffers, so nothing unchecked reaches a
// kernel or a ring, whether or not the file's checksum matched.
void ZenFlowStrategy::load_state(const StateReader& r) {
  SavedCounters k = read_counters(r, cal_, z_.semantics);
  k.pending = read_pending(r, k, cal_.staleness());
  load_tensors(r, k.selected, k.pending);
  ring_.restore(k.job, k.accumulated, k.first_async, std::move(k.pending), std::move(k.update_steps));
  u_ = k.u;
  selected_ = k.selected;
  last_vote_ = k.vote;
}

void ZenFlowStrategy::load_tensors(const StateReader& r, bool selected, const std::deque<Pending>& pending) {
  using V = StateReader::Values;
  std::vector<char> in_flight((size_t)cal_.staleness() + 1, 0);
  for (const Pending& p : pending) in_flight[(size_t)p.slot] = 1;  // slots checked by read_pending
  for (auto& wp : mat_) {
    Matrix& m = *wp;
    const std::string& n = m.p->name;
    const int64_t io = m.p->in_out ? m.R : 0;  // the file holds the logical layout
    r.get("host.master." + n, m.master, V::Finite, io);
    r.get("host.m." + n, m.m, V::Finite, io);
    r.get("host.v." + n, m.v, V::NonNegative, io);
    if (cal_.host_moment_sets() == 2) {
      r.get("host.m2." + n, m.m2, V::Finite, io);
      r.get("host.v2." + n, m.v2, V::NonNegative, io);
    }
    for (int i = 0; i <= cal_.staleness(); ++i) {
      const std::string acc = "host.acc" + std::to_string(i) + "." + n, res = "host.res" + std::to_string(i) + "." + n;
      if (!m.res.empty())
        r.get(res, m.res[(size_t)i], V::Finite, io);
      // fp32, written before 2026-12-02 (its own result ring): a job in flight's result is its res
      // slot's (its acc slot holds the gradient sum it has read); this run keeps it in the acc slot
      r.get(m.res.empty() && in_flight[(size_t)i] && r.has(res) ? res : acc, m.acc[(size_t)i], V::Finite, io);
    }
    if (selected)  // before the first selection the buffer is unused (and overwritten by it)
      r.get_indices("device.sel." + n, m.sel, m.C);
    if (stage3()) {  // this rank's shard's part of the whole moments (none before the first selection)
      const std::vector<size_t> mb = selected ? moment_bounds(m) : std::vector<size_t>{};
      const size_t rk = (size_t)m.R * (size_t)m.k;
      get_owned(r, "device.m_sel." + n, z_.offload ? m.m_sel_host : m.m_sel, rk, mb, V::Finite, io);
      get_owned(r, "device.v_sel." + n, z_.offload ? m.v_sel_host : m.v_sel, rk, mb, V::NonNegative, io);
    } else {
      r.get("device.m_sel." + n, z_.offload ? m.m_sel_host : m.m_sel, V::Finite, io);
      r.get("device.v_sel." + n, z_.offload ? m.v_sel_host : m.v_sel, V::NonNegative, io);
    }
    // the selected columns' masters; a checkpoint written before them (2026-12-05) has none: the
    // next selective AdamW fills them from the weights (their rounded values)
    const std::string xs = "device.master_sel." + n;
    if (masters() && r.has(xs)) {
      const std::vector<size_t> mb = stage3() && selected ? moment_bounds(m) : std::vector<size_t>{};
      if (stage3())
        get_owned(r, xs, z_.offload ? m.x_sel_host : m.x_sel, (size_t)m.R * (size_t)m.k, mb, V::Finite, io);
      else
        r.get(xs, z_.offload ? m.x_sel_host : m.x_sel, V::Finite, io);
    } else if (masters()) {
      refill_ = true;
    }
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
    if (stage3()) {
      get_owned(r, "device.m." + v.p->name, v.m, v.p->value.numel(), shard_bounds_.at(v.p), V::Finite, 0);
      get_owned(r, "device.v." + v.p->name, v.v, v.p->value.numel(), shard_bounds_.at(v.p), V::NonNegative, 0);
    } else {
      r.get("device.m." + v.p->name, v.m);
      r.get("device.v." + v.p->name, v.v, V::NonNegative);
    }
    // the 1-D master; a checkpoint written before them (2026-12-05) has none: copied from the
    // parameter, whose weights were loaded before this state
    const std::string xn = "device.master." + v.p->name;
    if (v.master.numel() && r.has(xn)) {
      if (stage3())
        get_owned(r, xn, v.master, v.p->value.numel(), shard_bounds_.at(v.p), V::Finite, 0);
      else
        r.get(xn, v.master, V::Finite);
    } else if (v.master.numel()) {
      const Slice s =
          stage3() ? Slice{shard_bounds_.at(v.p)[(size_t)comm_->rank()], shard_len(*v.p)} : whole(v.p->value);
      if (s.n > 0)
        insert_copy(rt_.device(-1).named("resume.master." + v.p->name), v.p->value, s, v.master, Slice{0, s.n});
    }
    for (size_t i = 0; i < v.acc.size(); ++i) r.get("host.acc" + std::to_string(i) + "." + v.p->name, v.acc[i]);
    for (int i = 0; i < 2; ++i)
      if (v.mw[i].numel()) {
        r.get("device.m_warm" + std::to_string(i) + "." + v.p->name, v.mw[i]);
        r.get("device.v_warm" + std::to_string(i) + "." + v.p->name, v.vw[i], V::NonNegative);
      }
  }
}

// Stage 3: rank r's shard [b[r], b[r+1]) of a weight owns the selective moments [mb[r], mb[r+1])
// of the whole (R, k) or (k, R) ones (the selected elements in storage order); sel must be final.
std::vector<size_t> ZenFlowStrategy::moment_bounds(const Matrix& w) const {
  const std::vector<size_t>& b = *bounds(*w.p);
  WeightShard whole{0, (size_t)w.R * (size_t)w.C, w.R, w.C, w.p->in_out};
  std::vector<size_t> mb(b.size());
  w.sel.acquire_read();
  for (size_t r = 0; r < b.size(); ++r) mb[r] = selected_elements_before(b[r], whole, w.sel.as<int32_t>(), w.k);
  w.sel.release();
  return mb;
}

// Every rank calls it: the parts all-gathered into a whole tensor of `numel` elements, which rank
// 0's file gets (b empty: no rank owns any, zeros).
void ZenFlowStrategy::put_owned(StateWriter& w, const std::string& name, const Tensor& own, size_t numel,
                                const std::vector<size_t>& b, int64_t io) const {
  const size_t r = (size_t)comm_->rank();
  Tensor all = Tensor::home({(int64_t)numel}, name + ".whole");
  all.acquire_write();
  std::fill(all.data(), all.data() + all.numel(), 0.0f);
  int rc = 0;
  if (!b.empty()) {
    own.acquire_read();
    std::copy(own.data(), own.data() + (b[r + 1] - b[r]), all.data() + b[r]);
    own.release();
    rc = comm_->allgather(all.data(), b);
  }
  all.release();
  if (rc != 0) throw Error("checkpoint: MPI_Allgatherv of " + name + " failed");
  w.put(name, all, io);
}

// The whole tensor read (and checked) from the file; this rank keeps its part (zeros past it; b
// empty: none).
void ZenFlowStrategy::get_owned(const StateReader& r, const std::string& name, const Tensor& own, size_t numel,
                                const std::vector<size_t>& b, StateReader::Values v, int64_t io) const {
  const size_t rank = (size_t)comm_->rank();
  Tensor all = Tensor::home({(int64_t)numel}, name + ".whole");
  r.get(name, all, v, io);
  all.acquire_read();
  own.acquire_write();
  std::fill(own.data(), own.data() + own.numel(), 0.0f);
  if (!b.empty()) std::copy(all.data() + b[rank], all.data() + b[rank + 1], own.data());
  own.release();
  all.release();
}

}  // namespace zf::zenflow
