#include "runtime/task.hpp"

#include <atomic>
#include <cassert>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <string>

namespace zf {
namespace {

struct CallbackArg {
  Tracker* tracker;
  int64_t step;
  Side side;
  Runtime* prefetch_rt = nullptr;  // set: prefetch buffer `prefetch_buffer` to prefetch_rt->prefetch_node()
  int prefetch_buffer = -1;
  int64_t deadline = -1;  // SubmitOptions::deadline(), read by the zf-deadline policy
  uint64_t seq = 0;       // submission order (StarPU's job ids are 0 without FxT)
  double sim_bytes = -1;  // simulation only: the task's memory traffic (sim_task_bytes)
};

std::atomic<uint64_t> submitted{0};

// the symbols of the collective codelets (make_starpu_codelet), for codelet_is_collective
std::mutex collective_mu;
std::set<std::string>& collective_symbols() {
  static std::set<std::string> s;
  return s;
}

// An explicit host-to-device prefetch of a buffer the task wrote, started the moment it is
// written (asynchronous, so allowed in a callback): the transfer overlaps device work instead of
// starting when the device task that reads it is scheduled.
void prefetch_output(starpu_task* t, Runtime& rt, int buffer) noexcept {
  const int node = rt.prefetch_node();
  if (node < 0 || buffer >= (int)STARPU_TASK_GET_NBUFFERS(t) || !(STARPU_TASK_GET_MODE(t, buffer) & STARPU_W))
    return;
  if (starpu_data_prefetch_on_node(STARPU_TASK_GET_HANDLE(t, buffer), (unsigned)node, 1) == 0) rt.count_prefetch();
}

void on_task_end(void* p) noexcept {
  auto* a = static_cast<CallbackArg*>(p);
  starpu_task* t = starpu_task_get_current();
  TaskRecord rec{};
  const TaskRecord* recp = nullptr;
  if (t && t->profiling_info) {
    starpu_profiling_task_info* info = t->profiling_info;
    rec.name = t->name ? t->name : "task";
    rec.codelet = t->cl ? t->cl->name : nullptr;
    rec.step = a->step;
    rec.side = a->side;
    rec.worker = info->workerid;
    rec.start_us = starpu_timing_timespec_to_us(&info->start_time);
    rec.end_us = starpu_timing_timespec_to_us(&info->end_time);
    rec.ready_us = starpu_timing_timespec_to_us(&info->push_end_time);
    rec.sim_bytes = a->sim_bytes;
    recp = &rec;
  }
  if (t && a->prefetch_rt) prefetch_output(t, *a->prefetch_rt, a->prefetch_buffer);
  try {
    a->tracker->complete(a->step, a->side, recp);
  } catch (...) {
    a->tracker->status().fail("task bookkeeping failed (out of memory)");
  }
  delete a;
}

}  // namespace

bool task_deadline(const starpu_task* t, int64_t* deadline, uint64_t* seq) noexcept {
  if (!t || t->callback_func != on_task_end || !t->callback_arg) return false;
  const auto* a = static_cast<const CallbackArg*>(t->callback_arg);
  *deadline = a->deadline;
  *seq = a->seq;
  return true;
}

void record_task_failure(const char* what) noexcept {
  starpu_task* t = starpu_task_get_current();
  if (!t || t->callback_func != on_task_end || !t->callback_arg) return;
  auto* a = static_cast<CallbackArg*>(t->callback_arg);
  try {
    a->tracker->status().fail(std::string(t->name ? t->name : "task") + ": " + (what ? what : "failed"));
  } catch (...) {
    a->tracker->status().fail("a task failed (out of memory while recording why)");
  }
}

TaskBuilder& TaskBuilder::add(const Tensor& t, starpu_data_access_mode mode) {
  if (!t.valid()) throw Error(std::string("task ") + opt_.name + ": unregistered tensor");
  handles_.push_back(t.handle());
  modes_.push_back(mode);
  return *this;
}

TaskBuilder& TaskBuilder::add_handle(starpu_data_handle_t h, starpu_data_access_mode mode) {
  if (!h) throw Error(std::string("task ") + opt_.name + ": unregistered handle");
  handles_.push_back(h);
  modes_.push_back(mode);
  return *this;
}

TaskBuilder& TaskBuilder::args_bytes(const void* p, size_t n) {
  std::free(arg_);
  arg_ = std::malloc(n);
  if (!arg_) throw std::bad_alloc();
  std::memcpy(arg_, p, n);
  arg_size_ = n;
  return *this;
}

void TaskBuilder::submit() {
  starpu_task* task = starpu_task_create();
  task->cl = &cl_;
  const int n = (int)handles_.size();
  if (cl_.nbuffers == STARPU_VARIABLE_NBUFFERS) {
    task->nbuffers = n;
    if (n > STARPU_NMAXBUFS) {
      task->dyn_handles = (starpu_data_handle_t*)std::malloc(n * sizeof(starpu_data_handle_t));
      task->dyn_modes = (starpu_data_access_mode*)std::malloc(n * sizeof(starpu_data_access_mode));
      for (int i = 0; i < n; ++i) { task->dyn_handles[i] = handles_[i]; task->dyn_modes[i] = modes_[i]; }
    } else {
      for (int i = 0; i < n; ++i) { task->handles[i] = handles_[i]; task->modes[i] = modes_[i]; }
    }
  } else {
    if (n != cl_.nbuffers) {
      std::free(arg_);
      throw Error(std::string("task ") + opt_.name + ": " + std::to_string(n) +
                  " buffers given, codelet takes " + std::to_string(cl_.nbuffers));
    }
    for (int i = 0; i < n; ++i) {
      assert(modes_[i] == cl_.modes[i]);
      task->handles[i] = handles_[i];
    }
  }
  task->cl_arg = arg_;
  task->cl_arg_size = arg_size_;
  task->cl_arg_free = 1;
  arg_ = nullptr;
  task->sched_ctx = opt_.ctx;
  // A device-side operation with no CUDA implementation (a host-side gather such as load_batch)
  // runs on the host workers when the device context holds only CUDA workers; its output moves
  // to the GPU with the first CUDA task that reads it. Accounting stays the device side's.
  if (opt_.rt && opt_.ctx == opt_.rt->device_ctx() && opt_.rt->device_is_cuda() && !cl_.cuda_funcs[0])
    task->sched_ctx = opt_.rt->host_ctx();
  task->priority = opt_.rt ? opt_.rt->priority_of(opt_, task->sched_ctx) : 0;
  task->name = opt_.name;
  Tracker& tr = opt_.rt->tracker();
  task->callback_func = on_task_end;
  const bool prefetch = opt_.prefetch_buffer >= 0 && opt_.rt->prefetch_node() >= 0;
  auto* cb = new CallbackArg{&tr, opt_.step, opt_.side, prefetch ? opt_.rt : nullptr, opt_.prefetch_buffer,
                             opt_.deadline(), submitted.fetch_add(1, std::memory_order_relaxed)};
  task->callback_arg = cb;
#ifdef ZF_SIMGRID
  // the runtime's time between two tasks of a CPU worker: idle simulated time before the task
  // starts (runtime/simulation.hpp), as the real worker is idle while StarPU dispatches; longer
  // after a task that streamed more than the cache, so the gap reads each task's bytes
  cb->sim_bytes = sim_task_bytes(task);
  task->prologue_callback_pop_func = sim_dispatch_gap;
  task->prologue_callback_pop_arg = &cb->sim_bytes;
#endif
  tr.add_pending(opt_.step, opt_.side);
  int rc = starpu_task_submit(task);
  if (rc < 0) {
    tr.complete(opt_.step, opt_.side, nullptr);
    delete static_cast<CallbackArg*>(task->callback_arg);
    task->callback_arg = nullptr;
    task->destroy = 0;
    starpu_task_destroy(task);
    ZF_CHECK_STARPU(rc);
  }
}

starpu_codelet make_starpu_codelet(const CodeletDef& def, starpu_perfmodel* model) {
  starpu_codelet c{};
  c.cpu_funcs[0] = def.cpu;
#ifdef ZF_USE_CUDA
  if (def.cuda) {
    c.cuda_funcs[0] = def.cuda;
    c.cuda_flags[0] = STARPU_CUDA_ASYNC;
  }
#endif
  c.nbuffers = def.nbuffers < 0 ? STARPU_VARIABLE_NBUFFERS : def.nbuffers;
  if (def.nbuffers > 0)
    for (int i = 0; i < def.nbuffers; ++i) c.modes[i] = def.modes[i];
  model->type = STARPU_HISTORY_BASED;
  model->symbol = def.symbol;
#ifdef ZF_SIMGRID
  // Simulation: every codelet gets a (simulated) CUDA implementation where it has a real one
  // (ZF_CUDA_FUNC), and its duration from the roofline (runtime/simulation.hpp).
  if (def.cuda) c.cuda_funcs[0] = def.cuda;
  model->type = STARPU_PER_ARCH;
  model->arch_cost_function = sim_task_cost_us;
  sim_register(model, def.flops, def.collective, def.coll_buffer, def.coll_bytes, def.bytes, def.bf16_operands);
#endif
  if (def.collective != Collective::None) {
    std::lock_guard<std::mutex> lk(collective_mu);
    collective_symbols().insert(def.symbol);
  }
  c.model = model;
  c.name = def.symbol;
  return c;
}

bool codelet_is_collective(const char* symbol) noexcept {
  if (!symbol) return false;
  try {
    std::lock_guard<std::mutex> lk(collective_mu);
    return collective_symbols().count(symbol) > 0;
  } catch (...) {
    return false;
  }
}


}  // namespace zf
