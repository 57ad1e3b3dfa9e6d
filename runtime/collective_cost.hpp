// The time of a data-parallel collective on a ring of R ranks (docs/simulation.md, "Data
// parallelism"): the simulation build gives every collective task (codelets/allreduce.cpp,
// codelets/shard.cpp) this duration instead of running it. StarPU-free, so the engine tests check
// it without a SimGrid build.
//
// A ring collective of n bytes cuts the buffer into R chunks of n/R bytes; each of its steps every
// rank sends one chunk to its successor and receives one from its predecessor at once, over a
// link of bandwidth B (bytes/s, per direction) and latency a (s):
//   reduce-scatter, all-gather:  steps        t = (R-1) (n / (R B) + a)
//   all-reduce (reduce-scatter then all-gather):     t = 2 (R-1) (n / (R B) + a)
// (NCCL's ring algorithm; Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for
// clusters of workstations", JPDC 2009). One rank: no collective, t = 0.
#pragma once
#include <cstdint>

namespace zf {

enum class Collective : uint8_t { None = 0, AllReduce, ReduceScatter, AllGather };

// The ring steps of a collective over R ranks.
constexpr int ring_steps(Collective k, int ranks) {
  if (ranks <= 1 || k == Collective::None) return 0;
  return k == Collective::AllReduce ? 2 * (ranks - 1) : ranks - 1;
}

// Seconds for a collective of `bytes` (the whole buffer, every rank's n) over `ranks` ranks on
// links of `bandwidth` bytes/s and `latency_s`.
constexpr double ring_collective_s(Collective k, double bytes, int ranks, double bandwidth, double latency_s) {
  const int steps = ring_steps(k, ranks);
  if (steps == 0) return 0.0;
  return steps * (bytes / ((double)ranks * bandwidth) + latency_s);
}

}  // namespace zf
