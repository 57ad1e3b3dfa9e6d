// A spec against the machine it is about to run on: the StarPU scheduling policy this StarPU build
// offers and can run, and the CPU workers it can start (STARPU_MAXCPUS) and hwloc sees. Kept out of
// parse_spec, which reads the file alone; zenflow-run calls check_machine right after load_spec.
#pragma once
#include <utility>

#include "graphs/schema/spec.hpp"

namespace zf {

// Throws InputError naming the spec's file and the field (runtime.sched, runtime.device_workers,
// runtime.host_workers).
void check_machine(const Spec& s);

// Worker split actually used (resolves 0 = auto from the rank's cores, Runtime::rank_cores) for a
// run with `ncuda` CUDA workers (they drive the device: the CPU workers are the host's) and
// `local_ranks` ranks on this node. {device, host} CPU workers; with CUDA workers the device
// count is not started (docs/spec.md, worker split).
std::pair<int, int> worker_split(const Spec& s, int ncuda = 0, int local_ranks = 1);
// The same split of n cores (worker_split with the spec's runtime.*_workers 0)
std::pair<int, int> split_cores(const Spec& s, int n, int ncuda);

}  // namespace zf
