// ZenFlow's merges: a host result into the device weights, its unselected columns only (the
// device wins on the selected ones), at once or D update boundaries later (ring.hpp).
#include "graphs/strategies/zenflow/zenflow.hpp"

namespace zf::zenflow {

// Stage >= 1: each rank merges its partition's tiles, then the weight is all-gathered (the
// selected columns, updated alike on every rank, travel with the rest). Stage 3: into this rank's
// shard, which the next forward gathers.
void ZenFlowStrategy::merge_all(int64_t t, int64_t slot, MergeEvent ev) {
  bool logged = false;  // one event per merge: at its first tile on this rank
  for (auto& wp : mat_) {
    Matrix& w = *wp;
    const HostTensor& h = slot < 0 ? w.master : w.result(slot);
    size_t elems = 0, base = 0;
    const Tensor& x = shard_of(w.p->value, &base);  // stage 3: this rank's shard
    const WeightShard sh = stage3() ? shard(w) : WeightShard{};
    for (size_t i = 0; i < h.tiles.size(); ++i) {
      insert_merge(rt_.device(t).named("merge." + w.p->name + "[" + std::to_string(i) + "]"), h.tiles[i], x,
                   h.slices[i], selected_ ? &w.sel : nullptr, logged ? nullptr : &log_, ev, w.p->in_out,
                   stage3() ? &sh : nullptr);
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

// The host job of update o (ring slot `slot`): merged now when synchronous (from its result
// slot with 2-byte crossings, else from the master weights), else in flight, merging the job
// D boundaries back.
void ZenFlowStrategy::merge_job(int64_t t, int64_t o, int64_t slot) {
  if (cal_.synchronous(o)) {
    merge_all(t, bf16_ ? slot : -1, MergeEvent{ring_.job(), o, o, 0, 0});
  } else if (std::optional<Pending> p = ring_.push_async(o)) {
    merge_all(t, p->slot, MergeEvent{p->job, p->newest_step, o, 0, 0});
  }
}

// The jobs still in flight, oldest first. Semantics deepspeed: none (DeepSpeed has no
// end-of-training flush; results in flight stay unmerged).
void ZenFlowStrategy::flush(const UpdateStep& last) {
  if (!cal_.flushes()) return;
  while (std::optional<Pending> p = ring_.pop())
    merge_all(last.t, p->slot, MergeEvent{p->job, p->newest_step, last.o, 0, 0});
}

}  // namespace zf::zenflow
