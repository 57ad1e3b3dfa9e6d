// The StarPU layer: RAII lifecycle, the two scheduling contexts (device: forward, backward and
// device-side updates; host: the host optimizer), policy validation (StarPU itself silently
// falls back to lws on an unknown name), tensors as registered data handles, and the options
// every task is submitted with. Only runtime/ and codelets/ include <starpu.h>.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/tracker.hpp"

struct _starpu_data_state;
typedef struct _starpu_data_state* starpu_data_handle_t;

namespace zf {

struct RuntimeConfig {
  std::string sched = "zf-deadline";  // StarPU policy for both contexts (or one of ours)
  int device_workers = 1;     // CPU workers driving the device side (when it has no CUDA workers)
  int host_workers = 1;       // CPU workers running the host optimizer
  // CUDA workers of the device context (builds with ZF_USE_CUDA): 0 = one per GPU seen (none when no
  // GPU is seen: then device_workers CPU workers, as in a CPU build), N = N GPUs, -1 = none.
  int cuda_workers = 0;
  // >= 0: drive only this GPU (one CUDA worker): rank r of a data-parallel run drives GPU
  // r % count (docs/data-parallel.md). -1: as cuda_workers says.
  int cuda_device = -1;
  bool profiling = true;      // task profiling (needed for metrics and traces)
  // Who runs the per-step crossings (copies, accumulation, merges between device and host
  // buffers): false = the device context (a GPU's copy is then a StarPU transfer plus a device
  // task); true = the host context, as a copy engine and the host's side of the link would, so
  // that they are not device busy time (CPU-emulated device only; docs/spec.md).
  bool crossings_on_host = false;
  // Task priorities from the graph's structure (SubmitOptions::role and due); false: every task
  // priority 0 (for studies). Never changes a result, only the order among ready tasks.
  bool priorities = true;
  // Ranks of this process's node (Comm::local_size): unbound ranks sharing a node do not bind
  // their workers (docs/data-parallel.md, "A rank's cores")
  int local_ranks = 1;
};

class Runtime;

// What a task is to the step graph, for its priority (Runtime::priority_of):
//   Compute   device work on the path to the next forward (forward, backward, device updates, merges)
//   Crossing  a copy or accumulation between device and host buffers (Runtime::crossing)
//   Host      host optimizer work, ranked by how soon its result is needed (SubmitOptions::due)
enum class Role : uint8_t { Compute, Crossing, Host };

// Priority levels (within StarPU's int range; clamped to each context's [min, max] priority, so
// policies without priorities see 0). Host tasks get kPrioHost - (due - step), at least 1.
inline constexpr int kPrioCompute = 100;
inline constexpr int kPrioCrossing = 50;
inline constexpr int kPrioHost = 40;

// Where and how a task is submitted: its context, the step it belongs to, its role and the step
// by which its result is needed (priority and the zf-deadline policy's deadline), name.
struct SubmitOptions {
  Runtime* rt = nullptr;
  unsigned ctx = 0;
  Side side = Side::Device;
  int64_t step = -1;
  Role role = Role::Compute;
  // The step whose forward needs this task's result (for a ZenFlow host update: the step after
  // the merge that reads it). -1: step + 1, the next forward.
  int64_t due = -1;
  const char* name = "task";
  // >= 0: when the task ends, prefetch its buffer of that index (which it wrote: a host-side
  // result that a later device task reads) to the GPU; a no-op unless the device context holds
  // CUDA workers.
  int prefetch_buffer = -1;
  SubmitOptions named(const std::string& n) const {
    SubmitOptions o = *this;
    o.name = intern(n);
    return o;
  }
  SubmitOptions due_at(int64_t step_needed) const {
    SubmitOptions o = *this;
    o.due = step_needed;
    return o;
  }
  // The deadline: due, or step + 1 (the next forward); -1 for set-up and evaluation tasks.
  int64_t deadline() const { return step < 0 ? -1 : due >= 0 ? due : step + 1; }
  SubmitOptions prefetched(int buffer) const {
    SubmitOptions o = *this;
    o.prefetch_buffer = buffer;
    return o;
  }
};

// The format of a tensor with 2-byte elements: bfloat16 or IEEE fp16 (precision "bf16" / "fp16",
// docs/spec.md); insert_copy and insert_merge convert by it.
enum class Half : uint8_t { Bf16, Fp16 };

// A contiguous buffer of `numel` elements and its StarPU handle. `home` tensors live in host
// memory that we own (parameters, optimizer state, host-side buffers: readable after sync());
// lazy tensors are allocated by StarPU where first written (activations, scratch).
class Tensor {
 public:
  Tensor() = default;
  static Tensor home(std::vector<int64_t> shape, const std::string& name, size_t elem_size = 4);
  static Tensor lazy(std::vector<int64_t> shape, const std::string& name, size_t elem_size = 4);
  // A lazy 2-byte tensor stored in format h (store_half): bf16/fp16 activations the codelets see
  // as fp32.
  static Tensor lazy_half(std::vector<int64_t> shape, const std::string& name, Half h);
  // Another name for t's data handle, not its owner: t must outlive it, and resetting the alias
  // drops only the name. Tasks on either are ordered as on one tensor (StarPU's sequential
  // consistency). The layer groups' gradients that share a buffer (graphs/train/grad_stream.hpp).
  static Tensor alias(const Tensor& t, const std::string& name);
  bool is_alias() const { return alias_; }
  ~Tensor();
  Tensor(Tensor&&) noexcept;
  Tensor& operator=(Tensor&&) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  starpu_data_handle_t handle() const { return handle_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t numel() const { return numel_; }
  size_t bytes() const { return numel_ * elem_size_; }
  size_t elem_size() const { return elem_size_; }
  Half half() const { return half_; }  // meaningful when elem_size() == 2
  void set_half(Half h) { half_ = h; }
  // Precision bf16/fp16's 2-byte storage of a tensor the codelets see as fp32 (a parameter,
  // docs/spec.md "precision: bf16"): elem_size() 2, values in the format half(); a codelet without
  // its own 2-byte path reads it widened to fp32 and its writes are rounded back
  // (codelets/half_storage.cpp). Marks the handle (stored_half_of). Call once, before any task.
  void store_half(Half h);
  bool stored_half() const { return stored_half_; }
  const std::string& name() const { return name_; }
  bool valid() const { return handle_ != nullptr; }
  // Whether StarPU holds memory for it on some memory node (a lazy tensor: once a task wrote it;
  // StarPU keeps the buffer until the tensor is reset or discarded)
  bool allocated() const;

  // Host pointer of a home tensor. Only meaningful while no task may touch it: call
  // acquire()/release() (blocking) or use it after Runtime::wait_all().
  float* data() const { return static_cast<float*>(ptr_); }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  void acquire_read() const;
  void acquire_write() const;
  void release() const;
  // Drop the handle (waits for tasks on it); memory of a home tensor is freed too.
  void reset();
  // Discards the contents once the tasks submitted on it so far are done
  // (starpu_data_invalidate_submit): a lazy tensor's memory goes back to StarPU. The next task
  // must write it whole (STARPU_W). ZeRO stage 3's transient parameters and gradients.
  void discard() const;
  // Advises StarPU that the tasks submitted on it so far are its last for a while
  // (starpu_data_wont_use): its replicas off the home node (a GPU's) are written back and are the
  // first evicted when a device needs room. A host-homed crossing buffer a device task writes.
  void wont_use() const;

 private:
  // shape, element count, element size and name; no data yet (home and lazy register it)
  Tensor(std::vector<int64_t> shape, const std::string& name, size_t elem_size);
  starpu_data_handle_t handle_ = nullptr;
  void* ptr_ = nullptr;
  std::vector<int64_t> shape_;
  size_t numel_ = 0, elem_size_ = 4;
  Half half_ = Half::Bf16;
  std::string name_;
  bool pinned_ = false;  // page-locked for DMA (home tensors when CUDA workers run)
  bool stored_half_ = false;
  bool alias_ = false;  // Tensor::alias: the handle is another tensor's
};

// t's bytes if StarPU holds memory for it (Tensor::allocated), else 0
inline int64_t allocated_bytes(const Tensor& t) { return t.allocated() ? (int64_t)t.bytes() : 0; }

// The 2-byte format of a handle marked by Tensor::store_half, or null: a plain buffer.
const Half* stored_half_of(starpu_data_handle_t h) noexcept;

class Runtime {
 public:
  explicit Runtime(const RuntimeConfig& cfg);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  SubmitOptions device(int64_t step) const;
  SubmitOptions host(int64_t step) const;
  // Where a step's crossing task goes: device(step), or host(step) with crossings_on_host.
  SubmitOptions crossing(int64_t step) const {
    SubmitOptions o = crossings_on_host_ ? host(step) : device(step);
    o.role = Role::Crossing;
    return o;
  }
  // The StarPU priority of a task submitted with `o` (0 with priorities off or before step 0),
  // clamped to the priority range of the context it goes to.
  int priority_of(const SubmitOptions& o, unsigned ctx) const;
  bool priorities() const { return cfg_.priorities; }

  unsigned device_ctx() const { return device_ctx_; }
  unsigned host_ctx() const { return host_ctx_; }
  // The policy StarPU reports for our contexts (never a silent fallback).
  const std::string& policy() const { return policy_; }
  // Tiles of the device kernels run since the process started, and how many of them idle
  // workers ran for another (docs/architecture.md, "Device cores").
  struct TileCounts {
    uint64_t tiles = 0, helped = 0;
  };
  static TileCounts tile_counts();
  int device_worker_count() const { return (int)device_workers_.size(); }
  // True when the device context's workers are CUDA workers (then CPU-only operations submitted to
  // the device context run on the host workers, see TaskBuilder::submit).
  bool device_is_cuda() const { return device_is_cuda_; }
  // The memory node that explicit prefetches target: the GPU's when the device context holds
  // exactly one CUDA worker, else -1 (with several GPUs the scheduler's own prefetch decides).
  int prefetch_node() const { return prefetch_node_; }
  // Prefetches issued (SubmitOptions::prefetch_buffer), for the tests and the metrics.
  int64_t prefetches() const { return prefetches_.load(); }
  void count_prefetch() { prefetches_.fetch_add(1, std::memory_order_relaxed); }
  int host_worker_count() const { return (int)host_workers_.size(); }
  // Precision "bf16" (graphs/train/precision.hpp): the device's CPU matmul codelets multiply bf16
  // operands where the CPU has native bf16 (codelets/matmul.cpp); false: fp32.
  void set_matmul_bf16(bool on) { matmul_bf16_ = on; }
  bool matmul_bf16() const { return matmul_bf16_; }
  // Whether the bf16 matmuls may keep their operands' bf16 copies a step (codelets/matmul.cpp,
  // matmul_keeps_bf16_operands); false: each call converts them (RunOptions, for the tests' A/B).
  void set_matmul_keep_bf16_operands(bool on) { matmul_keep_bf16_ = on; }
  bool matmul_keep_bf16_operands() const { return matmul_keep_bf16_; }
  // Precision bf16 with bf16 matmuls and 2-byte storage: the activations that only matmuls read
  // (a linear layer's input) are stored in bf16 (models/nets/gpt.cpp, llama.cpp), the same bits as
  // the fp32 ones the matmuls round; false: fp32 (RunOptions::half_storage, for the tests' A/B).
  void set_matmul_inputs_bf16(bool on) { matmul_inputs_bf16_ = on; }
  bool matmul_inputs_bf16() const { return matmul_inputs_bf16_; }
  // Precision bf16: the activations the backward reads that are not a linear layer's input (the
  // residual stream, the matmuls' outputs: models/nets/gpt.cpp, llama.cpp) are stored in bf16,
  // rounded where they are written, as a bf16 model keeps them (docs/spec.md, "precision: bf16");
  // false: fp32 (RunOptions::bf16_activations, for the tests' A/B). Read when a batch size's
  // activations are first made.
  void set_activations_bf16(bool on) { activations_bf16_ = on; }
  bool activations_bf16() const { return activations_bf16_; }
  // Precision bf16: the activation gradients between the layers (the backward's residual-stream
  // gradient and each layer's input and output gradients: models/nets/gpt.cpp) are stored in bf16,
  // rounded where they are written, as a bf16 model's autograd keeps them; false: fp32
  // (RunOptions::bf16_activation_grads, for the tests' A/B). Read when a batch size's activations
  // are first made.
  void set_activation_grads_bf16(bool on) { activation_grads_bf16_ = on; }
  bool activation_grads_bf16() const { return activation_grads_bf16_; }
  const std::vector<int>& device_workers() const { return device_workers_; }
  const std::vector<int>& host_workers() const { return host_workers_; }
  std::string worker_name(int id) const;

  Tracker& tracker() { return tracker_; }
  void wait_all();  // every submitted task, then rethrows a recorded codelet failure
  double now_us() const;

  // Non-blocking read of a small handle into host memory when its writers are done
  // (starpu_data_acquire_cb); counted as device-side work of `step`.
  void read_async(const Tensor& t, void* dst, size_t bytes, int64_t step);

  // A data-less handle that every collective task takes in RW mode, so that this process runs its
  // collectives in submission order (codelets/allreduce.cpp). Registered on first use.
  starpu_data_handle_t comm_token();

  // Names StarPU accepts for STARPU_SCHED / contexts that run our step graphs, then ours
  // (zf-deadline, runtime/sched_deadline.hpp). StarPU's policies that cannot are left out:
  // unusable_policy() names each with the reason.
  static std::vector<std::string> policies();
  static bool is_policy(const std::string& name);
  // Why StarPU's policy `name` cannot run zenflow's step graphs (a crash or a hang in StarPU 1.3,
  // or a policy that waits for a call we do not make), or nullptr when it can.
  static const char* unusable_policy(const std::string& name);
  static std::vector<std::string> unusable_policies();
  // CPU workers this StarPU build can start (STARPU_MAXCPUS).
  static int max_cpu_workers();
  // Physical cores seen by hwloc.
  static int hwloc_cores();
  // The cores this process may use, one of `local_ranks` on its node (docs/data-parallel.md, "A
  // rank's cores"): those of its CPU binding where the launcher bound it (mpirun --bind-to ...;
  // StarPU's workers are then bound within it, STARPU_WORKERS_GETBIND), else the node's cores /
  // local_ranks. In simulation the simulated rank's share (ZF_SIM_CORES).
  static int rank_cores(int local_ranks = 1);
  // The process is bound to a part of the machine's cores (hwloc_get_cpubind)
  static bool process_bound();
  // CUDA devices this build can drive (0 without ZF_USE_CUDA, without a driver or without a GPU).
  static int cuda_devices();
  // The first CUDA device's memory in bytes (-1 without one)
  static double cuda_device_memory();

 private:
  bool matmul_bf16_ = false;
  bool matmul_keep_bf16_ = true;
  bool matmul_inputs_bf16_ = false;
  bool activations_bf16_ = false;
  bool activation_grads_bf16_ = false;
  // The constructor's phases, in order: the configuration checked (returns the CUDA workers to
  // start), StarPU started, its workers split between the contexts, the contexts created.
  int check_config() const;
  void start_starpu(int ncpu, int ncuda);
  void assign_workers(int ncpu, int ncuda);
  void create_contexts();

  RuntimeConfig cfg_;
  unsigned device_ctx_ = 0, host_ctx_ = 0;
  std::vector<int> device_workers_, host_workers_;
  bool device_is_cuda_ = false;
  bool crossings_on_host_ = false;
  int prefetch_node_ = -1;
  std::atomic<int64_t> prefetches_{0};
  std::string policy_;
  Tracker tracker_;
  starpu_data_handle_t comm_token_ = nullptr;
};

}  // namespace zf
