// ZenFlow's metrics (staleness of the merges, selection churn, the resolved config) and its trace
// events (selections, host updates, merges).
#include <algorithm>
#include <map>
#include <set>

#include "graphs/strategies/zenflow/zenflow.hpp"

namespace zf::zenflow {

// One entry per merged job (its first weight tile's event).
StalenessSummary ZenFlowStrategy::staleness() const {
  StalenessSummary r;
  double sum = 0;
  std::set<int64_t> seen;
  const std::vector<int64_t>& us = ring_.update_steps();
  for (auto& e : log_.events()) {
    if (!seen.insert(e.job).second) continue;
    double s = (double)(e.merge_step - e.newest_step);
    r.max = std::max(r.max, s);
    sum += s;
    // intervals: update boundaries in (newest_step, merge_step]
    int64_t b = std::count_if(us.begin(), us.end(), [&](int64_t u) { return u > e.newest_step && u <= e.merge_step; });
    r.max_intervals = std::max(r.max_intervals, b);
  }
  r.mean = seen.empty() ? 0.0 : sum / (double)seen.size();
  r.merges = (int64_t)seen.size();
  return r;
}

StrategyReport ZenFlowStrategy::report() const {
  const StalenessSummary s = staleness();
  StrategyReport r;
  r.zenflow = StrategyReport::ZenFlow{ring_.job(), s.max, s.mean,
                                      mat_.empty() ? 0 : (int64_t)mat_.front()->selections.size(), z_.dp_selection};
  return r;
}

void ZenFlowStrategy::add_metrics(nlohmann::json& m, int64_t steps) const {
  const StalenessSummary st = staleness();
  m["staleness"] = {{"max", st.max}, {"mean", st.mean}, {"max_intervals", st.max_intervals},
                    {"bound_intervals", cal_.staleness()}, {"merges", st.merges}};
  m["host_updates"] = ring_.job();
  m["host_update_steps"] = ring_.update_steps();
  int64_t changes = 0, pairs = 0, reselections = 0;
  double overlap = 0;
  for (auto& wp : mat_) {
    const std::vector<std::vector<int32_t>>& sv = wp->selections;  // a skipped step selects nothing
    for (size_t i = 1; i < sv.size(); ++i) {
      std::vector<int32_t> common;
      std::set_intersection(sv[i - 1].begin(), sv[i - 1].end(), sv[i].begin(), sv[i].end(),
                            std::back_inserter(common));
      overlap += (double)common.size() / (double)wp->k;
      changes += sv[i] != sv[i - 1];
      ++pairs;
    }
    reselections = std::max<int64_t>(reselections, (int64_t)sv.size());
  }
  m["selection"] = {{"changes", changes}, {"mean_overlap", pairs ? overlap / (double)pairs : 1.0},
                    {"selections", reselections}};
  const nlohmann::json interval =
      cal_.auto_interval() ? nlohmann::json("auto") : nlohmann::json(cal_.update_interval());
  m["zenflow"] = {{"update_interval", interval}, {"select_interval_steps", cal_.select_interval()},
                  {"max_staleness", cal_.staleness()}, {"warm_up", cal_.warm_up()},
                  {"topk_ratio", z_.topk_ratio}, {"overlap_step", z_.overlap_step}, {"offload", z_.offload}};
}

std::vector<TraceEvent> ZenFlowStrategy::trace_events(const std::vector<TaskRecord>& recs) const {
  std::vector<TraceEvent> ev;
  std::map<int64_t, const TaskRecord*> first_host;  // step -> first host AdamW task of its job
  for (auto& r : recs) {
    std::string n = r.name;
    if (n.rfind("select.topk.", 0) == 0)
      ev.push_back({r.end_us, r.worker, "select", n.substr(12) + " at step " + std::to_string(r.step)});
    if (host_adam_task(r)) {
      auto& f = first_host[r.step];
      if (!f || r.start_us < f->start_us) f = &r;
    }
  }
  for (auto& [step, r] : first_host)
    ev.push_back({r->start_us, r->worker, "host_update", "started, interval ending at step " + std::to_string(step)});
  std::set<int64_t> seen;
  for (auto& e : log_.events())
    if (seen.insert(e.job).second)
      ev.push_back({e.start_us, -1, "merge",
                    "host update " + std::to_string(e.job) + " applied at step " + std::to_string(e.merge_step) +
                        ", staleness " + std::to_string(e.merge_step - e.newest_step) + " steps"});
  return ev;
}

}  // namespace zf::zenflow
