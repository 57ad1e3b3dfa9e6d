// ZenFlow's selection: the top-k columns of each 2-D weight's importance, and the data-parallel
// collectives that depend on it (docs/zenflow.md, docs/data-parallel.md).
#include "graphs/strategies/zenflow/zenflow.hpp"

namespace zf::zenflow {

// Data-parallel selection: each rank's importance of its local gradient (C floats per weight),
// summed over the ranks; every rank then takes the same top-k of the sum (docs/data-parallel.md).
void ZenFlowStrategy::before_gradient_allreduce(const UpdateStep& u, const Comm& comm) {
  if (!cal_.is_select(u.o)) return;
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
void ZenFlowStrategy::select_columns(int64_t t, int64_t o) {
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
    if (cal_.resets_host_moments(o))  // after the last warm-up update's AdamW (RAW/WAR)
      for (size_t i = 0; i < w.m.tiles.size(); ++i) {
        insert_zero(rt_.host(t).named("reset.m." + n + "[" + std::to_string(i) + "]"), w.m.tiles[i]);
        insert_zero(rt_.host(t).named("reset.v." + n + "[" + std::to_string(i) + "]"), w.v.tiles[i]);
      }
    if (cal_.resyncs(o)) {  // M <- P: staged so the device never waits for in-flight host jobs
      to_host(rt_.crossing(t).named("d2h.resync." + n), w.p->value, w.resync);
      for (size_t i = 0; i < w.master.tiles.size(); ++i)
        insert_copy(rt_.host(t).named("resync." + n + "[" + std::to_string(i) + "]"), w.resync.tiles[i],
                    whole(w.resync.tiles[i]), w.master.tiles[i], whole(w.master.tiles[i]));
    }
    SubmitOptions dev = rt_.device(t);
    if (imp_reduced_at_ == t)  // data-parallel: already summed over the ranks (this step's gradient);
      allreduce_ += (int64_t)w.imp.bytes();  // counted here: a step skipped for an fp16 overflow selects nothing
    else
      insert_column_importance(dev.named("select.importance." + n), w.p->grad, w.imp, z_.importance == "l2",
                               w.p->in_out);
    insert_topk(dev.named("select.topk." + n), w.imp, w.sel);
    insert_zero(dev.named("select.zero_m." + n), z_.offload ? w.m_sel_host : w.m_sel);
    insert_zero(dev.named("select.zero_v." + n), z_.offload ? w.v_sel_host : w.v_sel);
    w.selections.emplace_back(w.k);
    rt_.read_async(w.sel, w.selections.back().data(), w.k * sizeof(int32_t), t);
  }
  selected_ = true;
  selected_at_ = t;
}

// Stage 2 (docs/data-parallel.md): the 2-D gradients are reduce-scattered, their selected
// columns all-reduced in the same task (the device update reads them on every rank), so the
// selection of this step comes first; the 1-D gradients (device-updated) are all-reduced.
void ZenFlowStrategy::submit_gradient_collectives(const UpdateStep& u, const Comm& comm) {
  if (zero_stage() != 2) return Strategy::submit_gradient_collectives(u, comm);
  if (cal_.is_select(u.o)) select_columns(u.t, u.o);
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

}  // namespace zf::zenflow
