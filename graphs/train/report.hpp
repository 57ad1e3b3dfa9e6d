// What a run reports (docs/metrics.md): the progress lines during the loop, and after it the
// metrics JSON, the traces (--trace, --trace-csv) and the summary table.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/workload.hpp"
#include "runtime/runtime.hpp"
#include "runtime/tracker.hpp"

namespace zf {

class Comm;
class Precision;
class StepGraph;
class Strategy;
struct RunOptions;
struct Spec;

// printf-formats one number ("%.2f")
std::string fmt(const char* f, double x);

// The training loop's clock: wall time, the process's CPU time (every thread) and device tiles.
struct LoopClock {
  double t_start_us = 0, cpu_start = 0;
  Runtime::TileCounts tiles_start, tiles_end;
  double train_wall_s = 0, train_cpu_s = 0;
  void start(Runtime& rt);
  void stop(Runtime& rt);
};

// The progress lines: one per log.every steps, once those steps completed.
class Progress {
 public:
  Progress(const Spec& spec, Runtime& rt, const StepGraph& graph, const Precision& prec, const Strategy& strat,
           std::ostream& out, bool quiet, int64_t t0, int64_t T, double t_start_us);
  // Steps [0, done) are complete: prints the lines due.
  void operator()(int64_t done);

 private:
  const Spec& spec_;
  Runtime& rt_;
  const StepGraph& graph_;
  const Precision& prec_;
  const Strategy& strat_;
  std::ostream& out_;
  const bool quiet_;
  const int64_t t0_, T_;
  const double t_start_us_;
  int64_t printed_;
};

// The measured steps [t0 + W, T): W warm-up steps excluded, M measured.
struct StepTimes {
  int64_t W = 0, M = 0;
  std::vector<double> step_s;  // each step's wall time, from the previous step's last device task
  double busy = 0, wall = 0, stall = 0;
};
StepTimes measure_steps(Runtime& rt, int64_t t0, int64_t T, int64_t warmup_steps);

// The host AdamW time per measured step (microseconds) of the measured steps [from, T).
double host_adam_us_per_step(const std::vector<TaskRecord>& records, int64_t from, int64_t T, int64_t M);

// The mean training loss of the last (up to 50) steps, from the gathered records.
double last_steps_loss(const StepGraph& graph, int64_t t0, int64_t T);
// Each step's training loss (the batch's mean), steps t0 .. T - 1.
std::vector<double> step_losses(const StepGraph& graph, int64_t t0, int64_t T);

// An evaluation during the run (train.eval_every): after `step` steps.
struct EvalPoint {
  int64_t step = 0;
  EvalResult ev;
};

// One run's results, as the reports read them after the loop.
struct RunReport {
  const Spec& spec;
  const RunOptions& opt;  // this rank's
  Runtime& rt;
  Workload& wl;
  const Strategy& strat;
  const Precision& prec;
  const Comm* comm;  // null: one process
  int64_t t0, T;
  int A, B, Bl, ranks;  // accumulation steps, global batch, this rank's micro-batch, ranks
  LoopClock clock;
  StepTimes times;
  double host_adam_us = 0, train_loss = 0;
  EvalResult ev;
  std::vector<double> losses;    // step_losses(t0, T)
  std::vector<EvalPoint> evals;  // train.eval_every's
};
// The metrics JSON (docs/metrics.md) but wall_s and spec, which the caller adds last.
nlohmann::json metrics_json(const RunReport& r);
// --trace (Paje) and --trace-csv.
void write_traces(const RunReport& r);
// The summary table after the run.
void print_summary(const RunReport& r, const nlohmann::json& m, std::ostream& out);

}  // namespace zf
