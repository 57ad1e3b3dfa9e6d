// One training step's task graph (graphs/train/step_graph.hpp): micro-batches, collectives,
// precision rounding, the strategy's update.
#include "graphs/train/step_graph.hpp"

#include <string>

#include "codelets/codelets.hpp"
#include "graphs/schema/spec.hpp"
#include "graphs/strategies/strategy.hpp"
#include "graphs/train/grad_stream.hpp"
#include "graphs/train/precision.hpp"
#include "models/rng.hpp"
#include "runtime/comm.hpp"

namespace zf {

StepGraph::StepGraph(const Spec& spec, Runtime& rt, Workload& wl, Strategy& strat, Precision& prec, Comm* comm,
                     int rank, int ranks, int64_t T, int64_t steps_per_epoch, AfterBackward after_backward)
    : spec_(spec),
      rt_(rt),
      wl_(wl),
      strat_(strat),
      prec_(prec),
      comm_(comm),
      after_backward_(std::move(after_backward)),
      rank_(rank),
      ranks_(ranks),
      A_(spec.train.gradient_accumulation_steps),
      Bl_(wl.batch_size()),
      B_(Bl_ * ranks * A_),
      // stats ring: step t writes slot t % R (micro-batch m: slot (t % R) x A + m); its read
      // completes before t+R may write it
      R_(spec.runtime.lookahead + 2),
      per_epoch_(steps_per_epoch),
      order_{spec.data.order == "sequential", wl.epoch_size(), steps_per_epoch, B_, Bl_, ranks},
      idx_(Bl_) {
  for (int i = 0; i < R_ * A_; ++i) stats_.push_back(Tensor::home({3}, "stats." + std::to_string(i), sizeof(double)));
  rec_.resize(T);
  micro_rec_.resize(A_ > 1 ? (size_t)T * (A_ - 1) : 0);
  // gradient accumulation (DeepSpeed's: each micro-batch's gradient scaled by 1/A, summed in
  // micro-batch order; docs/spec.md)
  // (ZeRO stage 3: into the gradient shards, graphs/strategies/stage3.hpp)
  if (A_ > 1 && !strat_.stage3())
    for (Param* p : wl_.params()) grad_acc_.push_back(Tensor::home(p->grad.shape(), p->name + ".grad_acc"));
  // the gradients the strategy only crosses leave the device during the backward, where nothing
  // else reads them after it (a test's after_backward reads them all: kept whole)
  bool any = false;
  for (const Param* p : wl_.params()) any = any || strat_.streams_gradient(*p);
  if (!any) return;
  stream_off_ = after_backward_ ? "a caller reads them after the backward"
                                : grad_stream_off(spec, ranks, !wl.layer_groups().empty());
  if (!stream_off_.empty() || strat_.stage3()) return;
  stream_ = std::make_unique<GradStream>(rt, wl, strat, comm, spec.reduce_bucket_size,
                                         prec.rounds_bf16_gradients(strat));
  if (stream_->active())
    wl_.set_layer_hook(stream_.get());
  else
    stream_.reset();
}

StepGraph::~StepGraph() {
  if (stream_) wl_.set_layer_hook(nullptr);
}

void StepGraph::submit(int64_t t) {
  const int64_t e = t / per_epoch_;
  if (e != epoch_ && !order_.sequential) {
    epoch_ = e;
    perm_ = permutation(wl_.epoch_size(), spec_.train.seed * 1000003ull + (uint64_t)e);
  }
  prec_.begin_step(t);
  // the micro-batches first: the fp16 overflow check follows the last one (it reads the
  // accumulated gradient)
  for (int mb = 0; mb < A_; ++mb) submit_micro_batch(t, mb);
  UpdateStep u{t, prec_.update_index(t), 1.0f};
  if (comm_) {  // the mean of the ranks' local-batch mean gradients: the global batch's
    strat_.before_gradient_allreduce(u, *comm_);
    strat_.submit_gradient_collectives(u, *comm_);  // all-reduce; ZeRO stage 2: reduce-scatter
  }
  if (after_backward_) after_backward_(rt_, wl_, t);
  if (prec_.finish_gradients(t, strat_, comm_, u)) {  // false: an fp16 overflow skips the step
    strat_.submit_update(u);
    prec_.after_update(t, strat_);
  }
}

// micro-batch mb of step t: rows [mb R Bl, (mb + 1) R Bl) of the step's global batch (R ranks),
// rank r: its r-th Bl of them (BatchOrder)
void StepGraph::submit_micro_batch(int64_t t, int mb) {
  for (int i = 0; i < Bl_; ++i) idx_[i] = order_.unit(perm_, t, order_.row(mb, rank_, i));
  const Tensor& st = stats_[(t % R_) * A_ + mb];
  strat_.set_micro_batch(mb);
  wl_.submit_step(rt_, t, idx_, st);
  double* dst = mb == 0 ? rec_[t].stats : micro_rec_[(size_t)t * (A_ - 1) + mb - 1].stats;
  rt_.read_async(st, dst, 3 * sizeof(double), t);
  if (A_ > 1 && !strat_.stage3()) accumulate_gradients(t, mb);
}

void StepGraph::accumulate_gradients(int64_t t, int mb) {
  const std::vector<Param*> ps = wl_.params();
  for (size_t i = 0; i < ps.size(); ++i) {
    const SubmitOptions o = rt_.device(t);
    const std::string& n = ps[i]->name;
    if (mb == 0) insert_zero(o.named("micro.zero." + n), grad_acc_[i]);
    insert_accumulate(o.named("micro.accumulate." + n), grad_acc_[i], whole(grad_acc_[i]), ps[i]->grad,
                      whole(ps[i]->grad), 1.0f / (float)A_);
    if (mb == A_ - 1)
      insert_copy(o.named("micro.result." + n), grad_acc_[i], whole(grad_acc_[i]), ps[i]->grad, whole(ps[i]->grad));
  }
}

void StepGraph::submit_flush(int64_t T) {
  strat_.flush(UpdateStep{T - 1, prec_.last_update(T), 1.0f});
  prec_.round_params(T - 1, &strat_);
}

double StepGraph::step_stats(int64_t s, int k) const {
  double x = rec_[s].stats[k];
  for (int m = 1; m < A_; ++m) x += micro_rec_[(size_t)s * (A_ - 1) + m - 1].stats[k];
  return x;
}

void StepGraph::gather_records(int64_t t0, int64_t T, const Comm* comm) {
  static_assert(sizeof(StepRecord) == 3 * sizeof(double));
  for (int64_t s = t0; s < T && A_ > 1; ++s)  // the step's whole batch in rec
    for (int k = 0; k < 3; ++k) rec_[s].stats[k] = step_stats(s, k);
  if (comm && comm->allreduce_sum(rec_[0].stats, 3 * rec_.size()) != 0)  // global-batch losses
    throw Error("MPI_Allreduce of the step losses failed");
}

}  // namespace zf
