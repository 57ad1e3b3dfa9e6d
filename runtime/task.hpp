// Building and submitting one task: handles in the order of the codelet's modes, a trivially
// copyable argument block (malloc'ed: StarPU free()s it), an explicit context, a name and the
// completion callback that feeds the Tracker. Used by codelets/ only.
#pragma once
#include <starpu.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "runtime/collective_cost.hpp"
#include "runtime/runtime.hpp"
#include "runtime/simulation.hpp"

namespace zf {

class TaskBuilder {
 public:
  TaskBuilder(starpu_codelet& cl, const SubmitOptions& opt) : cl_(cl), opt_(opt) {}
  ~TaskBuilder() { std::free(arg_); }
  TaskBuilder(const TaskBuilder&) = delete;
  TaskBuilder& operator=(const TaskBuilder&) = delete;
  TaskBuilder& r(const Tensor& t) { return add(t, STARPU_R); }
  TaskBuilder& w(const Tensor& t) { return add(t, STARPU_W); }
  TaskBuilder& rw(const Tensor& t) { return add(t, STARPU_RW); }
  TaskBuilder& add(const Tensor& t, starpu_data_access_mode mode);
  // A handle that is not a Tensor (the runtime's comm token: a void handle, dependencies only).
  TaskBuilder& add_handle(starpu_data_handle_t h, starpu_data_access_mode mode);

  template <class A>
  TaskBuilder& args(const A& a) {
    static_assert(std::is_trivially_copyable_v<A>, "codelet args are copied with memcpy");
    return args_bytes(&a, sizeof a);
  }
  TaskBuilder& args_bytes(const void* p, size_t n);
  // Submit; throws NoDeviceError on -ENODEV, Error otherwise.
  void submit();

 private:
  starpu_codelet& cl_;
  SubmitOptions opt_;
  std::vector<starpu_data_handle_t> handles_;
  std::vector<starpu_data_access_mode> modes_;
  void* arg_ = nullptr;
  size_t arg_size_ = 0;
};

// A codelet with its perfmodel, built once. Symbol "zf_<op>" keys StarPU's calibration files:
// keep it stable. nbuffers < 0 means a variable number of buffers.
struct CodeletDef {
  const char* symbol;
  starpu_cpu_func_t cpu;
  starpu_cuda_func_t cuda;  // may be null (CPU-only operation)
  int nbuffers;
  starpu_data_access_mode modes[STARPU_NMAXBUFS];
  FlopsFn flops = nullptr;  // FLOPs of a task from its args, for the simulation's roofline (null: memory-bound)
  // A data-parallel collective (docs/simulation.md, "Data parallelism"): the simulation gives it the
  // ring formula's time (runtime/collective_cost.hpp) for n bytes: coll_bytes(cl_arg) where given,
  // else the size of buffer coll_buffer (the whole tensor every rank holds).
  Collective collective = Collective::None;
  int coll_buffer = 0;
  FlopsFn coll_bytes = nullptr;
  // The task's memory traffic in bytes for the simulation's roofline where it is not its buffers'
  // sizes (a codelet that works on a range of its buffers: the copies, accumulations, AdamW on a
  // slice); null: each buffer's size, once per read and once per write.
  FlopsFn bytes = nullptr;
  // Products in bf16 on a CUDA worker (precision bf16: tensor cores, docs/simulation.md): the
  // elements the task rounds to bf16 before its products, from its args (0: bf16 products on
  // operands stored in bf16; negative: fp32 products); the simulation prices such a task's FLOPs
  // at the GPU's bf16 rate after the conversions' traffic. null: fp32 products, or none.
  FlopsFn bf16_operands = nullptr;
  // Reads and writes buffers stored in 2 bytes (Tensor::store_half) itself: the codelets layer's
  // make_codelet (codelets/codelet_util.hpp) then leaves it as it is instead of widening them.
  bool native_half = false;
  // Buffers (bit i: buffer i) whose stored bf16 values the implementations (CPU and CUDA) read as
  // they are (2-byte elements, STARPU_VECTOR_GET_ELEMSIZE 2): make_codelet's wrapper passes them
  // through and still widens the task's other stored-half buffers.
  unsigned bf16_as_is = 0;
  // W buffers (bit i: buffer i) the implementations write in full: the wrapper does not widen a
  // stored-half one's old values before the kernel (the others it does: a kernel may write a slice).
  unsigned writes_whole = 0;
  // Buffers (bit i: buffer i) whose stored bf16 values the CPU implementation alone reads and
  // writes as they are (the elementwise kernels' *_mixed, kernels/cpu/kernels.hpp); the wrapper
  // still widens them for the CUDA one.
  unsigned cpu_bf16_as_is = 0;
};
// def with writes_whole = mask (codelet tables: `make_codelet(writes_whole({...}, 0b100), &m)`)
inline CodeletDef writes_whole(CodeletDef def, unsigned mask) {
  def.writes_whole = mask;
  return def;
}
// def with cpu_bf16_as_is = mask
inline CodeletDef cpu_bf16_as_is(CodeletDef def, unsigned mask) {
  def.cpu_bf16_as_is = mask;
  return def;
}
// The StarPU codelet of `def` with its performance model. Codelets go through the codelets
// layer's make_codelet, which adds the 2-byte storage's conversions (codelets/half_storage.cpp).
starpu_codelet make_starpu_codelet(const CodeletDef& def, starpu_perfmodel* model);

// The deadline (SubmitOptions::deadline()) and submission number of a task submitted by
// TaskBuilder: false for any other task (StarPU's own). For the zf-deadline policy
// (runtime/sched_deadline.cpp).
bool task_deadline(const starpu_task* t, int64_t* deadline, uint64_t* seq) noexcept;

// Records `what` as the first failure of the run, from inside a codelet (worker thread) of a task
// submitted by TaskBuilder; the host rethrows it at its next wait point. For failures that have no
// StepStatus at hand (a CUDA launch error, say).
void record_task_failure(const char* what) noexcept;

// Unpack helpers for kernels side.
inline float* vec_ptr(void* buf) { return reinterpret_cast<float*>(STARPU_VECTOR_GET_PTR(buf)); }
template <class T>
inline T* vec_as(void* buf) { return reinterpret_cast<T*>(STARPU_VECTOR_GET_PTR(buf)); }
inline size_t vec_n(void* buf) { return STARPU_VECTOR_GET_NX(buf); }

}  // namespace zf
