// ZenFlow's calendar (docs/zenflow.md, "Notation" and "semantics: deepspeed"): which update
// selects, accumulates into which window, updates on the host, merges when, with which bias
// correction and which moment set. Pure functions of the applied-update counter o (UpdateStep::o)
// and the config: no StarPU, so tests/graphs/test_zenflow_calendar.cpp checks them against the
// naive reference's own schedule (tests/reference/zenflow_ref.hpp) over a grid of configs.
// The "deepspeed" semantics are answered here too, so the step builder asks instead of branching.
#pragma once
#include <cstdint>

#include "graphs/schema/spec.hpp"

namespace zf {

struct CalendarConfig {
  int64_t warm_up = 0;          // W: full_warm_up_rounds, one synchronous host update per step
  int64_t update_interval = 1;  // K; unused under the auto rule
  bool auto_interval = false;   // update_interval "auto"
  int64_t select_interval = 0;  // S in steps; 0: never reselect
  int staleness = 0;            // D: update boundaries a host result may lag
  bool deepspeed = false;       // semantics "deepspeed"
  bool overlap_step = false;
  bool reset_host_moments = false;
  // The zenflow block of `s`, resolved (select_interval_steps); throws an InputError where the
  // calendar cannot hold ("deepspeed" with "auto", reset_host_moments or fp16; S < K).
  static CalendarConfig from_spec(const Spec& s, int64_t steps_per_epoch);
};

// How a 1-D parameter is updated at an update o.
enum class VectorUpdate {
  Device,      // AdamW on the device every update (semantics "zenflow")
  HostWarmUp,  // deepspeed, in the warm-up: DeepSpeed's host step, run on the device's copy
  Selective,   // deepspeed, after it: DeepSpeed's selective optimizer (moments zeroed at selections)
};

class ZenFlowCalendar {
 public:
  explicit ZenFlowCalendar(const CalendarConfig& c) : c_(c) {}
  const CalendarConfig& config() const { return c_; }
  int64_t warm_up() const { return c_.warm_up; }
  int staleness() const { return c_.staleness; }
  bool auto_interval() const { return c_.auto_interval; }
  int64_t update_interval() const { return c_.update_interval; }  // meaningless under the auto rule
  int64_t select_interval() const { return c_.select_interval; }
  bool deepspeed() const { return c_.deepspeed; }

  bool is_select(int64_t o) const;
  // The latest selection at or before o >= W. The selective moments were zeroed there, so the
  // selective AdamW's bias correction counts from it (docs/zenflow.md, "Deliberate differences").
  int64_t last_select(int64_t o) const;
  // Whether update o ends a window (a host update). vote: the auto rule's vote on update o - 1,
  // taken only where votes_before(o).
  bool is_update(int64_t o, bool vote) const;
  bool votes_before(int64_t o) const { return c_.auto_interval && o - 1 >= c_.warm_up; }
  // The auto rule reads the gradient mass of update o (for the vote of o + 1).
  bool reads_mass(int64_t o) const { return c_.auto_interval && o >= c_.warm_up; }
  // The update whose forward first needs the result of the asynchronous host update submitted at
  // update o: the one after the update that merges it, D update boundaries later. Exact with a
  // fixed update_interval; under the auto rule the earliest possible (D updates later).
  int64_t merge_due(int64_t o) const;
  // The host update of o is merged at once (the warm-up, or staleness 0).
  bool synchronous(int64_t o) const { return o < c_.warm_up || c_.staleness == 0; }
  // The priority and zf-deadline's deadline (a step) of the host update submitted at step t,
  // update o: merge_due counts applied updates; skipped fp16 steps, not known in advance, only
  // make the deadline earlier than the real merge.
  int64_t host_due(int64_t t, int64_t o) const { return synchronous(o) ? t + 1 : t + (merge_due(o) - o); }
  // The host AdamW's bias-correction step of host job `job` at update o: o + 1, or with
  // reset_host_moments the host updates since the end of the warm-up, whose moments restarted
  // there (jobs 0..W-1 are the warm-up's, one per update).
  int64_t host_step(int64_t o, int64_t job) const;
  // reset_host_moments: the host moments are zeroed at this selection (the end of the warm-up).
  bool resets_host_moments(int64_t o) const { return o == c_.warm_up && c_.warm_up > 0 && c_.reset_host_moments; }
  // The selection re-syncs the host master weights from the device (at every one but o = 0).
  bool resyncs(int64_t o) const { return o != 0; }
  // The selective (device) AdamW's bias-correction step at o >= W: since the latest selection
  // (ours), or DeepSpeed's count from its first step, never reset.
  int64_t selective_step(int64_t o) const;
  int64_t ring_slot(int64_t job) const { return job % (c_.staleness + 1); }

  // semantics "deepspeed" (docs/zenflow.md): DeepSpeed divides the loss by its accumulation
  // steps, update_interval, so every gradient it sees is g/K; its host step takes the window's
  // sum (ours its mean); it has one host moment set per parity of get_overlap_step_state under
  // overlap_step; its clip norm covers every parameter's window sum; it never flushes.
  bool divides_gradients() const { return c_.deepspeed && c_.update_interval > 1; }
  float gradient_factor() const { return 1.0f / (float)c_.update_interval; }
  float host_scale(int64_t accumulated) const { return c_.deepspeed ? 1.0f : 1.0f / (float)accumulated; }
  int host_moment_sets() const { return c_.deepspeed && c_.overlap_step ? 2 : 1; }
  int moment_set(int64_t o) const;
  // the clip norm is over every parameter's window sum (1-D included), not the 2-D interval mean
  bool clips_window_sums() const { return c_.deepspeed; }
  // with gradient clipping, the 1-D parameters keep host window sums for the clip norm
  bool vector_windows(bool clipping) const { return c_.deepspeed && clipping; }
  // the 1-D parameters' warm-up moment sets (DeepSpeed's host moments of them)
  int vector_warm_sets() const { return c_.deepspeed && c_.warm_up > 0 ? host_moment_sets() : 0; }
  VectorUpdate vector_update(int64_t o) const;
  // the end of training merges the host results in flight (DeepSpeed has no such flush)
  bool flushes() const { return !c_.deepspeed; }

 private:
  CalendarConfig c_;
};

}  // namespace zf
