// ZenFlow's step update (docs/zenflow.md): selection, accumulation into the window's ring slot, the
// host update at the window's boundary with the merge of the job D windows back, the device updates.
#include "graphs/strategies/zenflow/zenflow.hpp"

namespace zf::zenflow {

// Step u.t's update. Every counter below runs on o, the applied updates (UpdateStep): a step
// skipped for an fp16 overflow does not exist for ZenFlow (no selection, no accumulation, no
// host or device update; docs/zenflow.md). t only tags the tasks. The 2-D weights' parts that
// read the device gradient (matrix_part) ran already where the weight's gradient is streamed
// (stream_gradient, from its layer's hook during the backward); the others run here.
void ZenFlowStrategy::submit_update(const UpdateStep& u) {
  const int64_t t = u.t, o = u.o;
  begin_step(u);
  // the 1-D parameters: the crossing (accumulation on the host under bf16/fp16: as it is,
  // rounded, not yet unscaled or divided, so it is exact at 2 bytes; the host task applies those
  // factors), then the scales prepare_gradients applies
  for (Vector& v : vec_)
    if (!v.down.empty()) to_host(rt_.crossing(t).named("d2h.grad." + v.p->name), v.p->grad, v.down[(size_t)(o & 1)]);
  prepare_gradients(u);
  // 1-4. the 2-D weights not streamed: selection, accumulation, selective update, mass
  for (auto& wp : mat_)
    if (!streamed(*wp->p)) matrix_part(u, *wp);
  for (Vector& v : vec_)  // semantics deepspeed with clipping: the 1-D window sums, for the norm
    if (!v.acc.empty()) accumulate(u, *v.p, v.acc[ring_.slot()], v.down);
  ring_.accumulate();
  // 5. host update at the interval's boundary, merge of the job D intervals back (the merge
  // writes the unselected columns, the selective AdamW the selected ones: either order is the same)
  if (cal_.is_update(o, last_vote_)) host_update(t, o);
  // 6. device updates of the 1-D parameters
  vector_updates(t, o, select_);
}

// The step's flags, before any weight's part: the auto rule's vote on the previous update's
// gradient (after a resume: on the restored mass; its mass task is tagged with a step <= t - 1),
// whether it selects, whether the selective AdamW fills the masters. From the first streamed
// weight's hook, the vote's wait for step t - 1 comes before the rest of step t's backward is
// submitted (zenflow.update_interval "auto" only).
void ZenFlowStrategy::begin_step(const UpdateStep& u) {
  if (begun_ == u.t) return;
  begun_ = u.t;
  last_vote_ = cal_.votes_before(u.o) && auto_vote(u.t - 1);
  select_ = cal_.is_select(u.o);
  if (select_) selected_ = true;
  if (selected_) {
    fill_ = select_ || refill_;
    refill_ = false;
  }
}

void ZenFlowStrategy::stream_gradient(const UpdateStep& u, const Param& p, const Comm* comm) {
  begin_step(u);
  Matrix& w = *by_param_.at(&p);
  if (comm && z_.local_sum() && select_) local_importance(u, w, *comm);
  stream_prologue(u, p, comm);  // stage 2: the reduce-scatter, as submit_gradient_collectives
  matrix_part(u, w);
}

void ZenFlowStrategy::matrix_part(const UpdateStep& u, Matrix& w) {
  const int64_t t = u.t, o = u.o;
  Param& p = *w.p;
  if (!w.down.empty()) to_host(rt_.crossing(t).named("d2h.grad." + p.name), p.grad, w.down[(size_t)(o & 1)]);
  // precision fp16: unscaled in place first (DeepSpeed's unscale_and_clip_grads), so the
  // selection, the accumulation and the device AdamW read the true gradient (stage 3: the
  // shard); semantics deepspeed: every gradient DeepSpeed sees is g/K
  size_t base = 0;
  if (u.grad_scale != 1.0f)
    insert_scale(rt_.device(t).named("unscale.grad." + p.name), shard_of(p.grad, &base), u.grad_scale);
  if (cal_.divides_gradients())
    insert_scale(rt_.device(t).named("scale.grad." + p.name), shard_of(p.grad, &base), cal_.gradient_factor());
  // 1. selection; stage 2: then the selected columns of every row
  if (select_) select_matrix(t, o, w);
  // (on the gradients' wire when nothing scaled the owners' wire values in place above: then the
  // 2-byte crossing is exact, else fp32 words)
  if (zero_stage() == 2 && selected_)
    allreduce_selected(t, w, u.grad_scale == 1.0f && !cal_.divides_gradients() ? wire_ : Wire::Fp32);
  // 2. accumulation of the full gradient into this interval's buffer
  accumulate(u, p, w.acc[ring_.slot()], w.down);
  // 3. the selected columns' device AdamW
  if (selected_) selective_update(t, o, w);
  // 4. the auto rule reads the gradient mass of this step when the next one is submitted
  if (cal_.reads_mass(o)) {
    insert_grad_mass(rt_.device(t).named("auto.mass." + p.name), p.grad, w.sel, w.mass, p.in_out);
    rt_.read_async(w.mass, w.mass_host, sizeof w.mass_host, t);
  }
}

void ZenFlowStrategy::prepare_gradients(const UpdateStep& u) {
  // the 1-D parameters' unscale and 1/K (the 2-D weights': matrix_part)
  size_t base = 0;
  if (u.grad_scale != 1.0f)
    for (Vector& v : vec_)
      insert_scale(rt_.device(u.t).named("unscale.grad." + v.p->name), shard_of(v.p->grad, &base), u.grad_scale);
  if (cal_.divides_gradients())
    for (Vector& v : vec_)
      insert_scale(rt_.device(u.t).named("scale.grad." + v.p->name), shard_of(v.p->grad, &base), cal_.gradient_factor());
}

// The window's first step copies, the others add (docs/zenflow.md, "Where the accumulation runs").
// accumulate_on "device": a crossing task reads the device gradient (stage 3: its shard).
// "host": a host task, at fp32 on the device gradient itself (StarPU's transfer is the crossing;
// after the device's unscale and 1/K, as the device's would), under bf16/fp16 on what crossed
// (matrix_part, submit_update), applying the loss scale's and 1/K's factors itself.
void ZenFlowStrategy::accumulate(const UpdateStep& u, const Param& p, const HostTensor& acc,
                                 const std::vector<HostTensor>& down) {
  const int64_t t = u.t;
  const bool first = ring_.accumulated() == 0;
  auto name = [&](size_t i) { return "accumulate." + p.name + "[" + std::to_string(i) + "]"; };
  if (!down.empty()) {
    const HostTensor& d = down[(size_t)(u.o & 1)];
    const float s2 = cal_.divides_gradients() ? cal_.gradient_factor() : 1.0f;
    for (size_t i = 0; i < acc.tiles.size(); ++i) {
      insert_accumulate_host(rt_.host(t).named(name(i)), acc.tiles[i], d.tiles[i], u.grad_scale, s2, first);
      d.tiles[i].wont_use();  // on a GPU: its replica (what the crossing wrote) is evicted first
    }
    return;
  }
  const SubmitOptions where = z_.accumulate_on_host() ? rt_.host(t) : rt_.crossing(t);
  size_t base = 0;
  const Tensor& g = shard_of(p.grad, &base);
  for (size_t i = 0; i < acc.tiles.size(); ++i) {
    const Slice gs{acc.slices[i].offset - base, acc.slices[i].n};
    if (first)
      insert_copy(where.named(name(i)), g, gs, acc.tiles[i], whole(acc.tiles[i]));
    else
      insert_accumulate(where.named(name(i)), acc.tiles[i], whole(acc.tiles[i]), g, gs, 1.0f);
  }
  // this rank's tiles, the fp32 gradient (a 2-byte one is widened: codelets/half_storage.cpp)
  for (const Slice& sl : acc.slices) d2h_ += (int64_t)(sl.n * sizeof(float));
}

void ZenFlowStrategy::host_update(int64_t t, int64_t o) {
  ring_.record_update(o);
  const int64_t slot = ring_.slot();
  // the interval's mean; semantics deepspeed: its sum of g/K (DeepSpeed's window sum)
  float scale = cal_.host_scale(ring_.accumulated());
  const int64_t due = cal_.host_due(t, o);
  if (clip_) scale = clip_host(t, due, slot, scale);
  host_adam(t, o, due, slot, scale);
  merge_job(t, o, slot);
  ring_.end_job();
}

// Returns the host AdamW's gradient scale once the clip's factor is folded in.
float ZenFlowStrategy::clip_host(int64_t t, int64_t due, int64_t slot, float scale) {
  std::vector<ClipPart> parts;
  if (!cal_.clips_window_sums()) {
    // DeepSpeed's ZenFlow clips here: the host step's gradient (the interval's, on the host
    // side, at its boundary) by its global norm; the selective and 1-D device steps are not
    // clipped (docs/zenflow.md). Norm of the mean acc/n; the factor folds the 1/n in. Loss
    // scale 1: under fp16 the device gradients were unscaled before they were accumulated
    // (each step of the interval may have run with another scale).
    for (auto& wp : mat_)
      for (const Tensor& tile : wp->acc[slot].tiles) parts.push_back({&tile, whole(tile)});
    const double n = (double)ring_.accumulated();
    clip_->submit(t, rt_.host(t).due_at(due), parts, n * n, scale);
    return 1.0f;
  }
  // semantics deepspeed: DeepSpeed's norm is over its whole host partition's window sums of
  // g/K, every parameter in model order, 1-D included; the factor scales the 2-D window
  // sums here and, in the warm-up, the 1-D gradient of its host step (vector_updates); after the
  // warm-up DeepSpeed's clipped 1-D host step is overwritten by its unclipped selective one
  for (Param* p : params_) {
    for (auto& wp : mat_)
      if (wp->p == p)
        for (const Tensor& tile : wp->acc[slot].tiles) parts.push_back({&tile, whole(tile)});
    for (Vector& v : vec_)
      if (v.p == p)
        for (const Tensor& tile : v.acc[slot].tiles) parts.push_back({&tile, whole(tile), false});
  }
  clip_->submit(t, rt_.host(t).due_at(due), parts);
  return scale;
}

void ZenFlowStrategy::host_adam(int64_t t, int64_t o, int64_t due, int64_t slot, float scale) {
  // synchronous: the merge reads the master weights next; else the result copy is what crosses,
  // written into this job's accumulator slot after the AdamW read it (WAR; res with 2 bytes)
  // bf16: the synchronous merge reads a bf16 copy too (the result slot of this job)
  const bool copy_result = !cal_.synchronous(o) || bf16_;
  const bool second = cal_.moment_set(o) == 1;
  for (auto& wp : mat_) {
    Matrix& w = *wp;
    for (size_t i = 0; i < w.master.tiles.size(); ++i) {
      const std::string s = w.p->name + "[" + std::to_string(i) + "]";
      const SubmitOptions ho = rt_.host(t).due_at(due).named(kHostAdamTask + s);
      const Tensor &mt = second ? w.m2.tiles[i] : w.m.tiles[i], &vt = second ? w.v2.tiles[i] : w.v.tiles[i];
      const int64_t hs = cal_.host_step(o, ring_.job());
      if (copy_result && w.res.empty()) {  // fp32: the AdamW leaves its result in the slot it read
        insert_adam_step_result(ho.prefetched(1), hp(o), hs, scale, w.master.tiles[i], whole(w.master.tiles[i]),
                                w.acc[slot].tiles[i], whole(w.acc[slot].tiles[i]), mt, vt);
        continue;
      }
      insert_adam_step(copy_result ? ho : ho.prefetched(0), hp(o), hs, scale, w.master.tiles[i],
                       whole(w.master.tiles[i]), w.acc[slot].tiles[i], whole(w.acc[slot].tiles[i]), mt, vt);
      if (copy_result)
        insert_copy(rt_.host(t).due_at(due).named("result." + s).prefetched(1), w.master.tiles[i],
                    whole(w.master.tiles[i]), w.result(slot).tiles[i], whole(w.result(slot).tiles[i]));
    }
  }
}

// Precision bf16/fp16 (semantics zenflow): on the fp32 master of the selected elements, which the
// update of a selection fills from the weight (the values the device holds: the merges skip the
// selected columns, so nothing else writes them until the next selection); the weight's selected
// elements take the master's values, rounded by the trainer.
void ZenFlowStrategy::selective_update(int64_t t, int64_t o, Matrix& w) {
  SubmitOptions dev = rt_.device(t);
  const std::string& n = w.p->name;
  const Tensor* x = masters() ? &w.x_sel : nullptr;
  const int copies = x ? 3 : 2;  // the moments, and the master (its host copy is stale at a selection)
  if (z_.offload) {
    insert_copy(rt_.crossing(t).named("h2d.m_sel." + n), w.m_sel_host, whole(w.m_sel_host), w.m_sel, whole(w.m_sel));
    insert_copy(rt_.crossing(t).named("h2d.v_sel." + n), w.v_sel_host, whole(w.v_sel_host), w.v_sel, whole(w.v_sel));
    if (x)
      insert_copy(rt_.crossing(t).named("h2d.master_sel." + n), w.x_sel_host, whole(w.x_sel_host), w.x_sel,
                  whole(w.x_sel));
    h2d_ += copies * (int64_t)w.m_sel.bytes();
  }
  if (stage3()) {  // the selected elements of this rank's shard (the owners')
    size_t base = 0;
    insert_selective_adam_shard(dev.named("adam.device." + n), hp(o), cal_.selective_step(o),
                                shard_of(w.p->value, &base), shard(w), w.sel, shard_of(w.p->grad, &base), w.m_sel,
                                w.v_sel, x, fill_);
  } else {
    insert_selective_adam(dev.named("adam.device." + n), hp(o), cal_.selective_step(o), w.p->value, w.sel,
                          w.p->grad, w.m_sel, w.v_sel, w.p->in_out, x, fill_);
  }
  if (z_.offload) {
    insert_copy(rt_.crossing(t).named("d2h.m_sel." + n), w.m_sel, whole(w.m_sel), w.m_sel_host, whole(w.m_sel_host));
    insert_copy(rt_.crossing(t).named("d2h.v_sel." + n), w.v_sel, whole(w.v_sel), w.v_sel_host, whole(w.v_sel_host));
    if (x)
      insert_copy(rt_.crossing(t).named("d2h.master_sel." + n), w.x_sel, whole(w.x_sel), w.x_sel_host,
                  whole(w.x_sel_host));
    d2h_ += copies * (int64_t)w.m_sel.bytes();
  }
}

void ZenFlowStrategy::vector_updates(int64_t t, int64_t o, bool select) {
  SubmitOptions dev = rt_.device(t);
  // On a CPU device (not at stage 3, not fp16) the device updates share AdamW tasks, as device-adam's
  // (insert_adam_groups): the master updated and the parameter written rounded (bf16) in one task
  // for up to 16 parameters, where each took two (adam.device, master.device); the same bits
  bool grouped = cal_.vector_update(o) == VectorUpdate::Device && !rt_.device_is_cuda() && !stage3() &&
                 (!bf16_ || half_ == Half::Bf16);
  for (const Vector& v : vec_) grouped = grouped && (v.master.numel() > 0) == bf16_;
  std::vector<AdamGroupPart> parts;
  std::vector<std::string> names;
  for (Vector& v : vec_) {
    Param& p = *v.p;
    if (grouped) {
      const bool master = v.master.numel() > 0;
      parts.push_back({master ? &v.master : &p.value, &p.grad, &v.m, &v.v, master ? &p.value : nullptr});
      names.push_back(p.name);
      continue;
    }
    switch (cal_.vector_update(o)) {
      case VectorUpdate::Device: {
        // stage 3: this rank's shard (none when it owns no element of p)
        size_t base = 0;
        const Slice s = stage3() ? Slice{0, shard_len(p)} : whole(p.value);
        if (s.n == 0) break;
        const Tensor& x = shard_of(p.value, &base);
        // precision bf16/fp16: on the fp32 master, copied into the parameter (the trainer rounds it)
        insert_adam_step(dev.named("adam.device." + p.name), hp(o), o + 1, 1.0f, v.master.numel() ? v.master : x, s,
                         shard_of(p.grad, &base), s, v.m, v.v);
        if (v.master.numel()) insert_copy(dev.named("master.device." + p.name), v.master, s, x, s);
        break;
      }
      case VectorUpdate::HostWarmUp: {
        // DeepSpeed's warm-up: the host step (at the host's moments, step o + 1) whose result is
        // copied back synchronously; run here on the device parameter, equal to its host master
        const int s = cal_.moment_set(o);
        if (clip_)  // this step's clip point (host_update), over the window g/K of every parameter
          insert_scale_by(dev.named("clip.scale." + p.name), p.grad, whole(p.grad), clip_->factor());
        insert_adam_step(dev.named("adam.warm." + p.name), hp(o), o + 1, 1.0f, p.value, whole(p.value), p.grad,
                         whole(p.grad), v.mw[s], v.vw[s]);
        break;
      }
      case VectorUpdate::Selective:
        // after it: DeepSpeed's selective optimizer, whose moments start at the end of the warm-up
        // and are zeroed at every selection while its step count runs on
        if (select) {
          insert_zero(dev.named("select.zero_m." + p.name), v.m);
          insert_zero(dev.named("select.zero_v." + p.name), v.v);
        }
        insert_adam_step(dev.named("adam.device." + p.name), hp(o), cal_.selective_step(o), 1.0f, p.value,
                         whole(p.value), p.grad, whole(p.grad), v.m, v.v);
        break;
    }
  }
  if (!parts.empty())
    insert_adam_groups(dev, hp(o), o + 1, 1.0f, parts, names, bf16_ ? AdamGroupMode::Bf16 : AdamGroupMode::Fp32);
}

}  // namespace zf::zenflow
