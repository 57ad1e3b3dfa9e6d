// ZenFlow's staleness ring (docs/zenflow.md): the host jobs' bookkeeping, pure (no StarPU). Job j
// accumulates into ring slot j % (D+1) and writes its result there; an asynchronous job is merged
// at the boundary of job j + D, so at most D+1 jobs hold a slot at once. The tasks that realise
// it (accumulate, host AdamW, merge) are submitted by the strategy (zenflow.hpp).
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace zf {

struct Pending {  // an asynchronous host job not merged yet
  int64_t job, slot, newest_step;
};

class StalenessRing {
 public:
  explicit StalenessRing(int staleness) : D_(staleness) {}
  int64_t job() const { return job_; }  // the current (next) host job
  int64_t slot() const { return job_ % (D_ + 1); }
  int64_t accumulated() const { return n_; }  // gradients in the current window
  void accumulate() { ++n_; }
  // The current job is submitted at update o: recorded as a host update step.
  void record_update(int64_t o) { update_steps_.push_back(o); }
  // The current job runs asynchronously: it joins the jobs in flight; returns the job to merge at
  // this boundary, D jobs back (none while the first D are in flight).
  std::optional<Pending> push_async(int64_t o) {
    if (first_async_job_ < 0) first_async_job_ = job_;
    pending_.push_back({job_, slot(), o});
    if (job_ - D_ < first_async_job_) return std::nullopt;
    return pop();
  }
  // The window closes: the next job starts with an empty accumulator.
  void end_job() {
    ++job_;
    n_ = 0;
  }
  // The oldest job in flight (the end-of-training flush), none when none is.
  std::optional<Pending> pop() {
    if (pending_.empty()) return std::nullopt;
    Pending p = pending_.front();
    pending_.pop_front();
    return p;
  }
  const std::vector<int64_t>& update_steps() const { return update_steps_; }
  const std::deque<Pending>& pending() const { return pending_; }
  int64_t first_async_job() const { return first_async_job_; }

  // Checkpoints: the state as saved, restored once checked (zenflow/state.cpp).
  void restore(int64_t job, int64_t accumulated, int64_t first_async_job, std::deque<Pending> pending,
               std::vector<int64_t> update_steps) {
    job_ = job;
    n_ = accumulated;
    first_async_job_ = first_async_job;
    pending_ = std::move(pending);
    update_steps_ = std::move(update_steps);
  }

 private:
  int D_;
  int64_t job_ = 0, n_ = 0, first_async_job_ = -1;
  std::deque<Pending> pending_;
  std::vector<int64_t> update_steps_;
};

}  // namespace zf
