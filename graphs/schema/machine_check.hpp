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

// Worker split actually used (resolves 0 = auto from the cores hwloc sees).
std::pair<int, int> worker_split(const Spec& s);

}  // namespace zf
