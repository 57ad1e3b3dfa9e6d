// Paje traces of a run for ViTE and pajeng (format: schnorr/pajeng lang-paje; ViTE's quirks in
// starpu-cheatsheet.md section 5). One container per StarPU worker, grouped under a "device" and a
// "host" context container; one state per task, valued by its category (forward, backward,
// select, adam.device, accumulate, adam.host, merge, copy, load, eval); point events for step
// boundaries and ZenFlow's selections, host updates and merges. Times in ms from the first
// record, all events sorted by time (pj_dump refuses unsorted traces). No comment lines (ViTE).
#pragma once
#include <string>
#include <vector>

#include "runtime/tracker.hpp"

namespace zf {

struct TraceEvent {
  double time_us;
  int worker;         // worker container, or -1 for the program container
  std::string kind;   // event type: "step", "select", "host_update", "merge"
  std::string value;  // shown by ViTE
};

struct TraceWorker {
  int id;
  std::string name;  // "CPU 0"
  Side side;
};

// The category a task name maps to ("fwd.fc1.matmul" -> "forward", "adam.host.w[0]" -> "adam.host").
std::string task_category(const std::string& task_name);

void write_paje(const std::string& path, const std::vector<TaskRecord>& records,
                const std::vector<TraceWorker>& workers, std::vector<TraceEvent> events);
// The same records as CSV: name,category,step,side,worker,start_us,end_us,codelet (the codelet's
// symbol "zf_<op>": the calibration's key, experiments/simulation/calibrate.py)
void write_task_csv(const std::string& path, const std::vector<TaskRecord>& records);

}  // namespace zf
