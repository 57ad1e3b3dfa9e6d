// zf-deadline: a StarPU 1.3 scheduling policy of ours (struct starpu_sched_policy), selected with
// runtime.sched / --sched "zf-deadline". One central queue per scheduling context:
//   host context   earliest deadline first: every task carries the step by which its result is
//                  needed (SubmitOptions::deadline(): for a ZenFlow host update the step after the
//                  merge that reads it), ties in submission order;
//   device context submission order with priorities (higher first, ties in submission order).
// Tasks StarPU submits itself (no deadline) go first. docs/architecture.md says what it knows that
// StarPU's own policies do not.
// Idle CPU workers sleep inside the policy's pop (Debian's StarPU 1.3 is built with non-blocking
// drivers: its workers would otherwise spin), woken by a push or by a kernel's tiles to help with
// (runtime/parallel.hpp); docs/architecture.md, "Idle workers".
#pragma once
#include <starpu.h>

#include <cstdint>
#include <vector>

namespace zf {

starpu_sched_policy* deadline_policy();
// Orders the context's queue by deadline (call right after creating the context, before any task
// is submitted to it); contexts start ordered by priority.
void deadline_policy_order_by_deadline(unsigned sched_ctx);

// Which workers sleep when idle (CPU workers of a run without CUDA workers), and which of them
// take tiles of kernels::cpu::parallel_for while idle (the device side's cores). Call after the
// contexts are created, before submitting; a new call replaces the previous sets.
void deadline_policy_set_idle(const std::vector<int>& sleepers, const std::vector<int>& helpers);

// Simulation (ZF_SIMGRID, docs/simulation.md "Helpers"): no kernel runs, so nothing takes tiles;
// the roofline (runtime/simulation.cpp) splits a tiled kernel's time between its worker and the
// helpers idle when it starts. These are the workers that would help (the same rule as
// deadline_policy_set_idle's helpers; none sleeps), and how many of them, other than `me`, found
// no task at their last look (idle now).
void deadline_policy_set_sim_helpers(const std::vector<int>& helpers);
int deadline_policy_idle_helpers(int me);

// Counts since the process started: sleeps entered, sleeps ended by a push or a published job
// (not by the time bound), workers asleep now.
struct DeadlineSleepStats {
  uint64_t sleeps = 0, woken = 0;
  int asleep = 0;
};
DeadlineSleepStats deadline_policy_sleep_stats();
// The longest sleep before a worker returns to StarPU's loop (default 5 ms; tests lengthen it
// so that only a push or a job can end a sleep).
void deadline_policy_set_max_sleep(int64_t microseconds);

}  // namespace zf
