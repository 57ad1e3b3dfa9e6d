#include "graphs/schema/machine_check.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "graphs/strategies/registry.hpp"
#include "runtime/error.hpp"
#include "runtime/runtime.hpp"

namespace zf {
namespace {

void check_policy(const Spec& s) {
  const std::string& sched = s.runtime.sched;
  if (const char* why = Runtime::unusable_policy(sched))
    throw InputError(s.where("runtime.sched"), "StarPU's policy '" + sched + "' cannot run zenflow: " + why +
                                                   " (the usable ones: zenflow-run --list-policies)");
  if (!Runtime::is_policy(sched)) {
    std::string list;
    for (auto& p : Runtime::policies()) list += (list.empty() ? "" : ", ") + p;
    throw InputError(s.where("runtime.sched"), "unknown StarPU scheduling policy '" + sched + "' (known: " + list + ")");
  }
}

void check_workers(const Spec& s) {
  const Spec::Runtime& r = s.runtime;
  const int max = Runtime::max_cpu_workers();
  for (auto [key, n] : {std::pair{"runtime.device_workers", r.device_workers}, {"runtime.host_workers", r.host_workers}})
    if (n < 0 || n > max)
      throw InputError(s.where(key), std::to_string(n) + " is outside [0, " + std::to_string(max) + "]");
  if ((r.device_workers == 0) != (r.host_workers == 0))
    throw InputError(s.where("runtime.device_workers"),
                     "set both device_workers and host_workers, or neither (0: from zenflow.pt_reserved_cores_perc)");
  if (r.device_workers > 0 && s.zenflow.cores_perc_given)
    throw InputError(s.where("runtime.device_workers"),
                     "conflicts with zenflow.pt_reserved_cores_perc: give one way of splitting the CPU workers");
  if (r.device_workers + r.host_workers > max)
    throw InputError(s.where("runtime.device_workers"),
                     "device_workers + host_workers = " + std::to_string(r.device_workers + r.host_workers) +
                         " exceeds the " + std::to_string(max) +
                         " CPU workers this StarPU build can start (STARPU_MAXCPUS)");
}

}  // namespace

void check_machine(const Spec& s) {
  check_policy(s);
  check_workers(s);
}

std::pair<int, int> worker_split(const Spec& s, int ncuda, int local_ranks) {
  if (s.runtime.device_workers > 0) return {s.runtime.device_workers, s.runtime.host_workers};
  return split_cores(s, std::min(Runtime::rank_cores(local_ranks), Runtime::max_cpu_workers()), ncuda);
}

std::pair<int, int> split_cores(const Spec& s, int n, int ncuda) {
  if (n < 2) n = 2;  // one core: both contexts share it (oversubscribed)
  // a strategy without host work (device-adam): one host worker (the runtime needs one), which has nothing to
  // do but help the device kernels (docs/architecture.md, "Device cores"), the rest device
  if (!strategy_def(s.strategy).host_optimizer) return {n - 1, 1};
  if (ncuda > 0) {
    // the CUDA workers drive the device, a core each; the host gets every other core, or, where
    // the spec gives zenflow.pt_reserved_cores_perc, those outside the reserved share (DeepSpeed's
    // ZenFlow binds its optimizer to the cores the training process does not reserve)
    int reserved = ncuda;
    if (s.zenflow.cores_perc_given)
      reserved = std::max(reserved, (int)std::floor(s.zenflow.pt_reserved_cores_perc * n));
    const int host = std::max(1, n - reserved);
    return {std::max(1, n - host), host};
  }
  int dev = (int)std::floor(s.zenflow.pt_reserved_cores_perc * n);
  dev = std::clamp(dev, 1, n - 1);
  return {dev, n - dev};
}

}  // namespace zf
