// The simulation build (ZF_SIMGRID: StarPU built with SimGrid, docs/simulation.md): no codelet
// runs, StarPU takes each task's duration from its perfmodel. Here that model is a roofline:
// max(FLOPs / rate, bytes / bandwidth) per device type (plus a CUDA worker's launch overhead; a CPU
// worker's per-task overhead is idle time between tasks: sim_dispatch_gap), with the rates of the
// simulated machine read from the file tools/sim_machine.py writes ($ZF_SIM_ROOFLINE). A codelet
// reports its FLOPs from its argument block (CodeletDef::flops); its bytes are its buffers' sizes.
// A CUDA worker's bf16 products (precision bf16: the matmuls and attentions) run at its bf16 rate.
#pragma once
#include <mutex>
#include <string>

#include "runtime/collective_cost.hpp"
#ifdef ZF_SIMGRID
#include <starpu_thread.h>
#endif

struct starpu_task;
struct starpu_perfmodel;
struct starpu_perfmodel_arch;

namespace zf {

// FLOPs of one task from its codelet argument block (StarPU's cl_arg).
using FlopsFn = double (*)(const void* cl_arg);

// Whether this binary simulates (built against a SimGrid StarPU).
constexpr bool kSimulated =
#ifdef ZF_SIMGRID
    true;
#else
    false;
#endif

// A mutex that StarPU's scheduler hooks hold across StarPU calls. In simulation every worker is a
// SimGrid actor on one OS thread, and a StarPU call may switch actors: a std::mutex held across it
// would block the thread (and the simulation) when the next actor takes it; StarPU's own mutex is
// SimGrid's there.
#ifdef ZF_SIMGRID
class PolicyMutex {
 public:
  PolicyMutex() { starpu_pthread_mutex_init(&m_, nullptr); }
  ~PolicyMutex() { starpu_pthread_mutex_destroy(&m_); }
  PolicyMutex(const PolicyMutex&) = delete;
  PolicyMutex& operator=(const PolicyMutex&) = delete;
  void lock() { starpu_pthread_mutex_lock(&m_); }
  void unlock() { starpu_pthread_mutex_unlock(&m_); }

 private:
  starpu_pthread_mutex_t m_;
};
#else
using PolicyMutex = std::mutex;
#endif

#ifdef ZF_SIMGRID
// Reads $ZF_SIM_ROOFLINE (InputError naming the file and key when missing or bad). Once, before
// the first task. `sched`: the run's policy, whose CPU per-task overhead (cpu.overhead_us.SCHED,
// measured per policy) replaces the generic cpu.overhead_us where the file has one.
void sim_load_roofline(const std::string& sched);
// The codelet whose perfmodel is `model` reports its FLOPs with `flops` (null: memory-bound only);
// a collective (CodeletDef::collective) its bytes with coll_bytes (null: buffer coll_buffer's size).
// `bytes` (null: the buffers' sizes) its memory traffic where it works on a range of its buffers.
// `bf16_operands` (CodeletDef::bf16_operands; null or negative: fp32): the elements a task rounds
// to bf16 before bf16 products on a CUDA worker; such a task takes 6 bytes per element (read 4,
// write 2) at the GPU's bandwidth, then its roofline with the GPU's bf16 FLOP/s (cuda.bf16_flops).
void sim_register(const starpu_perfmodel* model, FlopsFn flops, Collective collective = Collective::None,
                  int coll_buffer = 0, FlopsFn coll_bytes = nullptr, FlopsFn bytes = nullptr,
                  FlopsFn bf16_operands = nullptr);
// The simulated data-parallel world: this process is one rank of `ranks` (ZF_SIM_RANKS, set by
// tools/zf simulate --ranks); its collectives take the ring formula's time over the machine's links.
void sim_set_ranks(int ranks);
// Microseconds of a collective of `bytes` on a worker of the given kind (CUDA: the GPU-GPU link,
// else the host's), the ring formula (plus the launch overhead on a CUDA worker).
double sim_collective_us(Collective k, double bytes, bool cuda);
// The CPU worker's per-task overhead as idle simulated time: the roofline file's
// cpu.overhead_us[.SCHED] (the runtime's time between two tasks under that policy, measured by
// calibrate.py), plus cpu.overhead_cold_us where the worker's previous task moved more than
// cpu.cold_bytes (the last-level cache: the runtime then starts cold; measured by calibrate.py).
// The pop prologue of every task (runtime/task.cpp, with the task's sim_task_bytes as its
// argument) sleeps it on a CPU worker before the task starts, so it counts as stall, not as busy
// time, as in a real run. A CUDA worker's overhead (the launch) stays in the task's cost.
void sim_dispatch_gap(void* task_bytes);
// The task's memory traffic as the roofline counts it (bytes; 0 for a collective)
double sim_task_bytes(starpu_task* task);
// StarPU's per-arch cost function (microseconds) for every codelet in simulation.
double sim_task_cost_us(starpu_task* task, starpu_perfmodel_arch* arch, unsigned nimpl);
// The placeholder CUDA implementation: never called (simulated workers run no code).
void sim_cuda_placeholder(void* buffers[], void* cl_arg) noexcept;
#endif

}  // namespace zf
