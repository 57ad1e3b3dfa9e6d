// Per-task records and per-step completion. Every task submitted through TaskBuilder carries a
// callback that records {codelet name, step, side, worker, start, end} from StarPU's task
// profiling and counts the step's outstanding work down; the trainer throttles submission on
// it and computes step times, device busy time and stall from the records. Also holds the
// per-step status in which noexcept codelets record their first failure (Chameleon's
// sequence->status); the host rethrows it at its next wait point.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace zf {

enum class Side : uint8_t { Device = 0, Host = 1 };

struct TaskRecord {
  const char* name;    // interned codelet/task name (stable for the process)
  int64_t step;        // training step that submitted it (-1: outside training)
  Side side;           // scheduling context it ran in
  int worker;          // StarPU worker id
  double start_us;     // starpu_timing_now() clock
  double end_us;
  // when StarPU pushed it to the scheduler, its dependencies met (push_end_time; same clock)
  double ready_us = 0.0;
  const char* codelet = nullptr;  // the codelet's symbol ("zf_<op>", static; null: unknown)
  // the simulation's memory traffic of the task (bytes; runtime/simulation.hpp's sim_task_bytes);
  // -1 in a real run
  double sim_bytes = -1.0;
};

// First failure wins; cheap to poll. Safe to call from worker threads.
class StepStatus {
 public:
  void fail(const std::string& msg) noexcept;
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  void rethrow_if_failed() const;  // throws zf::Error

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::string msg_;
};

class Tracker {
 public:
  void add_pending(int64_t step, Side side);
  void complete(int64_t step, Side side, const TaskRecord* rec);  // rec may be null
  // Blocks until every device-side item of steps <= step has completed.
  void wait_device_through(int64_t step);
  std::vector<TaskRecord> records() const;
  // Device-side aggregate of one step: busy time and the end of its last device task.
  struct StepAgg {
    double busy_us = 0.0;
    double first_start_us = 0.0;
    double last_end_us = 0.0;
    int64_t tasks = 0;
  };
  StepAgg step_agg(int64_t step) const;
  StepStatus& status() { return status_; }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<int64_t, int64_t> pending_device_;
  std::vector<TaskRecord> records_;
  std::unordered_map<int64_t, StepAgg> agg_;
  StepStatus status_;
};

// Whether the codelet of this symbol (TaskRecord::codelet, "zf_<op>") is a collective
// (CodeletDef::collective, runtime/task.cpp): the report sums their tasks' time per step
// (data_parallel.collective_s_per_step).
bool codelet_is_collective(const char* symbol) noexcept;

// Interned C strings for task names: StarPU keeps the pointer, not a copy.
const char* intern(const std::string& s);

}  // namespace zf
