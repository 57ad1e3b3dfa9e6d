// ZenFlow's selection: the top-k columns of each 2-D weight's importance, and the data-parallel
// collectives that depend on it (docs/zenflow.md, docs/data-parallel.md).
#include "graphs/strategies/zenflow/zenflow.hpp"

namespace zf::zenflow {

// zenflow.dp_selection "local-sum" (the proxy): each rank's importance of its local gradient
// (C floats per weight), summed over the ranks; every rank then takes the same top-k of the sum.
// "exact" needs nothing here: it selects on the reduced gradient (select_matrix).
void ZenFlowStrategy::before_gradient_allreduce(const UpdateStep& u, const Comm& comm) {
  if (!z_.local_sum() || !cal_.is_select(u.o)) return;
  for (auto& wp : mat_)
    if (!streamed(*wp->p)) local_importance(u, *wp, comm);  // streamed: by stream_gradient
}

void ZenFlowStrategy::local_importance(const UpdateStep& u, Matrix& w, const Comm& comm) {
  SubmitOptions o = rt_.device(u.t);
  insert_column_importance(o.named("select.importance." + w.p->name), w.p->grad, w.imp, z_.importance == "l2",
                           w.p->in_out);
  insert_allreduce(o.named("select.allreduce." + w.p->name), w.imp, 1.0f, comm);
  w.imp_reduced_at = u.t;
}

// ZenFlow's selection at step t (update o): the top-k columns of a 2-D weight's importance.
// Submitted by matrix_part (from the weight's layer hook when its gradient is streamed, else from
// submit_update after the gradient collectives and the fp16 overflow check: a skipped step
// selects nothing), on the gradient the update reads (unscaled, rounded):
//   one process, stages 0 and 1 (exact): the importance of the whole (all-reduced) gradient;
//   stage 2 (exact): each rank's importance of its reduce-scattered gradient (its segment's rows,
//     the rest zeros), all-reduced: L1 and squared L2 are sums over the rows, so the sum of the
//     ranks' partial sums is the reduced gradient's importance (up to the order of the additions);
//   stage 3 (exact): the same partial sums from this rank's gradient shard (the same bytes);
//   local-sum: the sum before_gradient_allreduce all-reduced.
void ZenFlowStrategy::select_matrix(int64_t t, int64_t o, Matrix& w) {
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
  if (w.imp_reduced_at == t) {  // local-sum: this step's sum (a skipped step's is made again, not counted)
    allreduce_ += (int64_t)w.imp.bytes();
  } else {
    if (stage3()) {  // the partial importance of this rank's gradient shard (the rest counts as zeros)
      size_t base = 0;
      insert_column_importance_shard(dev.named("select.importance." + n), shard_of(w.p->grad, &base), shard(w),
                                     w.imp, z_.importance == "l2");
    } else {
      insert_column_importance(dev.named("select.importance." + n), w.p->grad, w.imp, z_.importance == "l2",
                               w.p->in_out);
    }
    if (zero_stage() >= 2) {  // the ranks' partial importances (comm_ is set from stage 1 on)
      insert_allreduce(dev.named("select.allreduce." + n), w.imp, 1.0f, *comm_);
      allreduce_ += (int64_t)w.imp.bytes();
    }
  }
  insert_topk(dev.named("select.topk." + n), w.imp, w.sel);
  insert_zero(dev.named("select.zero_m." + n), z_.offload ? w.m_sel_host : w.m_sel);
  insert_zero(dev.named("select.zero_v." + n), z_.offload ? w.v_sel_host : w.v_sel);
  w.selections.emplace_back(w.k);
  rt_.read_async(w.sel, w.selections.back().data(), w.k * sizeof(int32_t), t);
}

// Stage 2 (docs/data-parallel.md): the 2-D gradients are reduce-scattered (the host side reads
// only its segment), the 1-D gradients (device-updated) all-reduced. The selected columns, which
// the device update reads on every rank, are completed after the selection (allreduce_selected).
void ZenFlowStrategy::submit_gradient_collectives(const UpdateStep& u, const Comm& comm) {
  if (zero_stage() != 2) return Strategy::submit_gradient_collectives(u, comm);
  const float mean = 1.0f / (float)comm.size();
  for (Param* p : params_) {
    if (streamed(*p)) continue;  // its layer's hook did it (stream_gradient)
    if (p->is_matrix()) {
      insert_reduce_scatter(rt_.device(u.t).named("reduce_scatter.grad." + p->name), p->grad, mean, *bounds(*p), comm,
                            wire_);
      reduce_scatter_ += (int64_t)(p->grad.numel() * wire_bytes(wire_));
    } else {
      insert_allreduce(rt_.device(u.t).named("allreduce.grad." + p->name), p->grad, mean, comm, wire_);
      grad_allreduce_ += (int64_t)(p->grad.numel() * wire_bytes(wire_));
    }
  }
}

// Stage 2, every update once a selection exists: the selected columns of every row, from their
// owners' reduce-scattered means (rows x k floats per 2-D weight, one all-reduce each; matrix_part).
// Stage 3 needs none: each rank updates the selected elements of its own shard.
void ZenFlowStrategy::allreduce_selected(int64_t t, Matrix& w, Wire wire) {
  insert_allreduce_columns(rt_.device(t).named("allreduce.selected." + w.p->name), w.p->grad, w.sel, *comm_,
                           w.p->in_out, wire);
  grad_allreduce_ += (int64_t)w.R * w.k * (int64_t)wire_bytes(wire);
}

}  // namespace zf::zenflow
