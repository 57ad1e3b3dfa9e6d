#include "graphs/strategies/zenflow/calendar.hpp"

#include <string>

#include "runtime/error.hpp"

namespace zf {

CalendarConfig CalendarConfig::from_spec(const Spec& s, int64_t steps_per_epoch) {
  const Spec::ZenFlow& z = s.zenflow;
  CalendarConfig c;
  c.staleness = z.staleness();
  c.warm_up = z.full_warm_up_rounds;
  c.auto_interval = z.update_interval.is_auto;
  c.update_interval = c.auto_interval ? 0 : z.update_interval.steps;
  c.select_interval = select_interval_steps(s, steps_per_epoch);
  c.deepspeed = z.deepspeed_rules();
  c.overlap_step = z.overlap_step;
  c.reset_host_moments = z.reset_host_moments;
  // semantics "deepspeed" comes with a fixed interval, no reset_host_moments and no fp16: the spec
  // was refused otherwise when read (graphs/schema/spec.cpp, graphs/strategies/registry.cpp).
  // select_strategy "epoch" is counted in steps only here, with the data's steps per epoch:
  const int64_t K = c.update_interval, S = c.select_interval;
  if (!c.auto_interval && S != 0 && S < K)
    throw InputError(s.where("zenflow.select_interval"), "the select interval (" + std::to_string(S) +
                                                             " steps) must be >= update_interval (" +
                                                             std::to_string(K) + ")");
  return c;
}

bool ZenFlowCalendar::is_select(int64_t o) const {
  const int64_t W = c_.warm_up, S = c_.select_interval;
  return o >= W && (o == W || (S != 0 && o % S == 0));
}

int64_t ZenFlowCalendar::last_select(int64_t o) const {
  const int64_t W = c_.warm_up, S = c_.select_interval;
  const int64_t m = S != 0 ? o / S * S : W;
  return m > W ? m : W;
}

bool ZenFlowCalendar::is_update(int64_t o, bool vote) const {
  const int64_t W = c_.warm_up, K = c_.update_interval, S = c_.select_interval;
  if (o < W) return true;
  if (!c_.auto_interval && K > 0 && (o + 1 - W) % K == 0) return true;
  if (c_.auto_interval && vote) return true;
  return S != 0 && (o + 1) % S == 0;
}

int64_t ZenFlowCalendar::merge_due(int64_t o) const {
  const int64_t W = c_.warm_up, K = c_.update_interval, S = c_.select_interval;
  if (c_.auto_interval) return o + c_.staleness + 1;
  int64_t u = o;
  for (int d = 0; d < c_.staleness; ++d)
    do ++u;
    while (!((u + 1 - W) % K == 0 || (S != 0 && (u + 1) % S == 0)));
  return u + 1;
}

int64_t ZenFlowCalendar::host_step(int64_t o, int64_t job) const {
  const int64_t W = c_.warm_up;
  return c_.reset_host_moments && W > 0 && o >= W ? job - W + 1 : o + 1;
}

int64_t ZenFlowCalendar::selective_step(int64_t o) const {
  return c_.deepspeed ? o - c_.warm_up + 1 : o - last_select(o) + 1;
}

// DeepSpeed's get_overlap_step_state: the parity of o in the warm-up, of o / update_interval after it
int ZenFlowCalendar::moment_set(int64_t o) const {
  if (host_moment_sets() == 1) return 0;
  return (int)((o < c_.warm_up ? o : o / c_.update_interval) & 1);
}

VectorUpdate ZenFlowCalendar::vector_update(int64_t o) const {
  if (!c_.deepspeed) return VectorUpdate::Device;
  return o < c_.warm_up ? VectorUpdate::HostWarmUp : VectorUpdate::Selective;
}

}  // namespace zf
