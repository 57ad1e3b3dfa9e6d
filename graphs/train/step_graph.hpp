// One training step's task graph, as the trainer submits it: the step's micro-batches (forward,
// loss and backward of each, their gradients accumulated), the gradient collectives of a
// data-parallel run, the precision rounding and fp16 overflow check, and the strategy's update.
// Also the step losses the micro-batches record (read back asynchronously).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/runtime.hpp"

namespace zf {

class Comm;
class GradStream;
class Precision;
class Strategy;
class Workload;
struct Spec;

struct StepRecord {
  double stats[3] = {0, 0, 0};  // loss sum, correct, count (written by read_async)
};

// Which training units (Workload::submit_step's indices) a step's rows are (docs/spec.md,
// data.order). Row b of step t's global batch of B rows is unit perm[(t mod per_epoch) B + b] of
// the epoch's permutation ("random"), or unit (t B + b) mod units ("sequential"). With R ranks and
// A micro-batches of Bl rows each (B = Bl R A), rank r's micro-batch mb holds the global rows
// row(mb, r, 0 .. Bl): every rank sees the rows one process would.
struct BatchOrder {
  bool sequential = false;
  int64_t units = 0, per_epoch = 1;  // Workload::epoch_size(), steps per epoch
  int B = 0, Bl = 0, ranks = 1;
  int64_t row(int mb, int rank, int i) const { return ((int64_t)mb * ranks + rank) * Bl + i; }
  // perm: the epoch's permutation of the units (unused when sequential)
  int32_t unit(const std::vector<int32_t>& perm, int64_t t, int64_t row) const {
    return sequential ? (int32_t)((t * B + row) % units) : perm[(size_t)((t % per_epoch) * B + row)];
  }
};

class StepGraph {
 public:
  // Called after step t's backward (and gradient all-reduce) is submitted (RunOptions::after_backward).
  using AfterBackward = std::function<void(Runtime&, Workload&, int64_t)>;
  // rank, ranks: this process in a data-parallel run (0, 1: one process); T: the run's steps.
  StepGraph(const Spec& spec, Runtime& rt, Workload& wl, Strategy& strat, Precision& prec, Comm* comm, int rank,
            int ranks, int64_t T, int64_t steps_per_epoch, AfterBackward after_backward);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;  // read_async writes into the records
  StepGraph& operator=(const StepGraph&) = delete;

  // Submits step t: its micro-batches, collectives, precision rounding and update.
  void submit(int64_t t);
  // After the last step T - 1: whatever makes the device parameters final.
  void submit_flush(int64_t T);

  // The whole batch's stats of step s (every micro-batch's; once its tasks finished).
  double step_stats(int64_t s, int k) const;
  // After the run: every step's record holds its whole batch, summed over the ranks.
  void gather_records(int64_t t0, int64_t T, const Comm* comm);
  const StepRecord& record(int64_t s) const { return rec_[s]; }
  int micro_batch_rows() const { return Bl_; }  // this rank's rows of one micro-batch
  int batch_rows() const { return B_; }         // the global batch of one optimizer step
  // Gradients that leave the device during the backward (graphs/train/grad_stream.hpp): null
  // when none do; stream_off(): why not, where the strategy would stream some ("" otherwise).
  const GradStream* grad_stream() const { return stream_.get(); }
  const std::string& stream_off() const { return stream_off_; }

 private:
  void submit_micro_batch(int64_t t, int mb);
  void accumulate_gradients(int64_t t, int mb);

  const Spec& spec_;
  Runtime& rt_;
  Workload& wl_;
  Strategy& strat_;
  Precision& prec_;
  Comm* comm_;
  AfterBackward after_backward_;
  const int rank_, ranks_, A_, Bl_, B_, R_;
  const int64_t per_epoch_;
  const BatchOrder order_;
  std::vector<Tensor> stats_;      // the stats ring
  std::vector<StepRecord> rec_;    // per step: micro-batch 0's, then (gather_records) the whole batch
  std::vector<StepRecord> micro_rec_;  // micro-batches 1..A-1
  std::vector<Tensor> grad_acc_;   // gradient accumulation: one device buffer per parameter
  std::vector<int32_t> perm_, idx_;
  std::unique_ptr<GradStream> stream_;
  std::string stream_off_;
  int64_t epoch_ = -1;
};

}  // namespace zf
