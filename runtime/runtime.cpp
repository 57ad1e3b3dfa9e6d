#include "runtime/runtime.hpp"

#include "runtime/calibration.hpp"

#include <hwloc.h>
#include <starpu.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "runtime/parallel.hpp"
#include "runtime/sched_deadline.hpp"
#include "runtime/simulation.hpp"
#ifdef ZF_USE_CUDA
#include "runtime/cuda_device.hpp"
#endif

namespace zf {

// ---------------------------------------------------------------- Tensor
static size_t home_bytes(size_t bytes) {
  size_t n = (bytes + 63) / 64 * 64;
  return n == 0 ? 64 : n;
}

static void* alloc_home(size_t bytes) {
  const size_t n = home_bytes(bytes);
#ifdef ZF_SIMGRID
  // Simulation: no data is real; StarPU's folded allocation maps every page of the buffer onto
  // the same few physical pages (STARPU_MALLOC_SIMULATION_FOLD), so a 7B model takes no memory.
  void* q = nullptr;
  if (starpu_malloc_flags(&q, n, STARPU_MALLOC_SIMULATION_FOLDED) != 0 || !q) throw std::bad_alloc();
  return q;
#else
  void* p = std::aligned_alloc(64, n);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, n);  // pre-fault: no first-touch page faults inside the first step
  return p;
#endif
}

static size_t numel_of(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (auto d : shape) {
    if (d <= 0) throw Error("tensor with a non-positive dimension");
    n *= (size_t)d;
  }
  return n;
}

Tensor::Tensor(std::vector<int64_t> shape, const std::string& name, size_t elem_size)
    : shape_(std::move(shape)), numel_(numel_of(shape_)), elem_size_(elem_size), name_(name) {}

Tensor Tensor::home(std::vector<int64_t> shape, const std::string& name, size_t elem_size) {
  Tensor t(std::move(shape), name, elem_size);
  t.ptr_ = alloc_home(t.numel_ * elem_size);
  // Page-locked when CUDA workers run: transfers to and from the GPU are then asynchronous DMA
  // that overlaps compute (pageable memory is staged). Pinning is a hint: a failure is ignored.
  // STARPU_DISABLE_PINNING=1 turns it off.
  if (!kSimulated && starpu_cuda_worker_get_count() > 0)
    t.pinned_ = starpu_memory_pin(t.ptr_, t.numel_ * elem_size) == 0;
  starpu_vector_data_register(&t.handle_, STARPU_MAIN_RAM, (uintptr_t)t.ptr_, t.numel_, elem_size);
  starpu_data_set_name(t.handle_, intern(name));
  return t;
}

Tensor Tensor::lazy(std::vector<int64_t> shape, const std::string& name, size_t elem_size) {
  Tensor t(std::move(shape), name, elem_size);
  starpu_vector_data_register(&t.handle_, -1, 0, t.numel_, elem_size);
  starpu_data_set_name(t.handle_, intern(name));
  return t;
}

Tensor Tensor::lazy_half(std::vector<int64_t> shape, const std::string& name, Half h) {
  Tensor t = lazy(std::move(shape), name, 2);
  t.store_half(h);
  return t;
}

namespace {
const Half kStoredBf16 = Half::Bf16, kStoredFp16 = Half::Fp16;
}

void Tensor::store_half(Half h) {
  if (elem_size_ != 2 || !handle_) throw Error("Tensor::store_half: " + name_ + " is not a registered 2-byte tensor");
  half_ = h;
  stored_half_ = true;
  starpu_data_set_user_data(handle_, const_cast<Half*>(h == Half::Bf16 ? &kStoredBf16 : &kStoredFp16));
}

const Half* stored_half_of(starpu_data_handle_t h) noexcept {
  if (!h) return nullptr;
  const void* u = starpu_data_get_user_data(h);
  return u == &kStoredBf16 || u == &kStoredFp16 ? static_cast<const Half*>(u) : nullptr;
}

bool Tensor::allocated() const {
  if (!handle_) return false;
  for (unsigned n = 0; n < starpu_memory_nodes_get_count(); ++n)
    if (starpu_data_test_if_allocated_on_node(handle_, n)) return true;
  return false;
}

void Tensor::discard() const {
  if (handle_) starpu_data_invalidate_submit(handle_);
}

void Tensor::wont_use() const {
  if (handle_) starpu_data_wont_use(handle_);
}

Tensor Tensor::alias(const Tensor& t, const std::string& name) {
  if (!t.handle_) throw Error("Tensor::alias: " + t.name_ + " is not registered");
  Tensor a(t.shape_, name, t.elem_size_);
  a.handle_ = t.handle_;
  a.ptr_ = t.ptr_;
  a.half_ = t.half_;
  a.stored_half_ = t.stored_half_;
  a.alias_ = true;
  return a;
}

void Tensor::reset() {
  if (alias_) {  // the owner's handle and memory stay
    handle_ = nullptr;
    ptr_ = nullptr;
    stored_half_ = alias_ = false;
    return;
  }
  if (handle_) starpu_data_unregister(handle_);
  handle_ = nullptr;
  stored_half_ = false;
  if (pinned_) starpu_memory_unpin(ptr_, numel_ * elem_size_);
  pinned_ = false;
#ifdef ZF_SIMGRID
  if (ptr_) starpu_free_flags(ptr_, home_bytes(numel_ * elem_size_), STARPU_MALLOC_SIMULATION_FOLDED);
#else
  std::free(ptr_);
#endif
  ptr_ = nullptr;
}

Tensor::~Tensor() { reset(); }

Tensor::Tensor(Tensor&& o) noexcept { *this = std::move(o); }

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    reset();
    handle_ = o.handle_;
    ptr_ = o.ptr_;
    shape_ = std::move(o.shape_);
    numel_ = o.numel_;
    elem_size_ = o.elem_size_;
    half_ = o.half_;
    name_ = std::move(o.name_);
    pinned_ = o.pinned_;
    stored_half_ = o.stored_half_;
    alias_ = o.alias_;
    o.handle_ = nullptr;
    o.ptr_ = nullptr;
    o.pinned_ = false;
    o.stored_half_ = false;
    o.alias_ = false;
  }
  return *this;
}

void Tensor::acquire_read() const { ZF_CHECK_STARPU(starpu_data_acquire(handle_, STARPU_R)); }
void Tensor::acquire_write() const { ZF_CHECK_STARPU(starpu_data_acquire(handle_, STARPU_RW)); }
void Tensor::release() const { starpu_data_release(handle_); }

// ---------------------------------------------------------------- Runtime
// StarPU 1.3's policies that cannot run a training run, each seen on the headline spec
// (experiments/scheduling-policies/README.md): the reason is what a user is told.
const char* Runtime::unusable_policy(const std::string& name) {
  if (name == "peager")
    return "StarPU 1.3's parallel eager (for parallel tasks on combined workers) crashes in its pop "
           "(_starpu_pop_task) when the workers are split into scheduling contexts, as zenflow splits "
           "them (one device, one host context)";
  if (name == "graph_test")
    return "StarPU's test policy holds every task until the application calls starpu_do_schedule() "
           "with the whole graph submitted; a training run submits step by step and waits in "
           "between, so it would wait forever";
  if (name == "modular-heteroprio-heft")
    return "StarPU 1.3's modular-heteroprio-heft loses tasks in its tree: runs hang with the "
           "workers polling an empty scheduler (every strategy, within 5 steps)";
  return nullptr;
}

std::vector<std::string> Runtime::unusable_policies() {
  std::vector<std::string> out;
  for (starpu_sched_policy** p = starpu_sched_get_predefined_policies(); p && *p; ++p)
    if (unusable_policy((*p)->policy_name)) out.emplace_back((*p)->policy_name);
  return out;
}

std::vector<std::string> Runtime::policies() {
  std::vector<std::string> out;
  for (starpu_sched_policy** p = starpu_sched_get_predefined_policies(); p && *p; ++p)
    if (!unusable_policy((*p)->policy_name)) out.emplace_back((*p)->policy_name);
  out.emplace_back(deadline_policy()->policy_name);
  return out;
}

bool Runtime::is_policy(const std::string& name) {
  for (auto& p : policies())
    if (p == name) return true;
  return false;
}

int Runtime::max_cpu_workers() { return STARPU_MAXCPUS; }

Runtime::TileCounts Runtime::tile_counts() {
  const ParallelStats s = parallel_stats();
  return {(uint64_t)s.tiles, (uint64_t)s.helped};
}

int Runtime::cuda_devices() {
#ifdef ZF_USE_CUDA
  return cuda_device_count();
#elif defined(ZF_SIMGRID)
  const char* n = std::getenv("ZF_SIM_GPUS");  // the simulated machine's (tools/zf simulate)
  return n ? std::atoi(n) : 0;
#else
  return 0;
#endif
}

double Runtime::cuda_device_memory() {
#ifdef ZF_USE_CUDA
  return cuda_device_count() > 0 ? cuda_total_memory(0) : -1.0;
#else
  return -1.0;
#endif
}

namespace {
// The cores (their count) entirely inside this process's CPU binding, and the machine's
std::pair<int, int> bound_and_all_cores() {
  hwloc_topology_t topo;
  hwloc_topology_init(&topo);
  hwloc_topology_load(topo);
  const hwloc_obj_type_t type =
      hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  const int all = hwloc_get_nbobjs_by_type(topo, type);
  int bound = all;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0 && !hwloc_bitmap_iszero(set))
    bound = hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, type);
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
  return {std::max(1, std::min(bound, all)), std::max(1, all)};
}
}  // namespace

int Runtime::hwloc_cores() {
#ifdef ZF_SIMGRID
  if (const char* n = std::getenv("ZF_SIM_CORES")) return std::max(1, std::atoi(n));  // the simulated host's
#endif
  return bound_and_all_cores().second;
}

bool Runtime::process_bound() {
#ifdef ZF_SIMGRID
  return false;
#else
  const auto [bound, all] = bound_and_all_cores();
  return bound < all;
#endif
}

int Runtime::rank_cores(int local_ranks) {
#ifdef ZF_SIMGRID
  if (std::getenv("ZF_SIM_CORES")) return hwloc_cores();  // already the simulated rank's share
#endif
  const auto [bound, all] = bound_and_all_cores();
  if (bound < all) return bound;
  return std::max(1, all / std::max(1, local_ranks));
}

Runtime::Runtime(const RuntimeConfig& cfg) : cfg_(cfg) {
#ifdef ZF_SIMGRID
  sim_load_roofline(cfg.sched);
#endif
  const int ncuda = check_config();
  device_is_cuda_ = ncuda > 0;
  crossings_on_host_ = cfg.crossings_on_host;
  const int ncpu = device_is_cuda_ ? cfg.host_workers : cfg.device_workers + cfg.host_workers;
  if (ncpu > STARPU_MAXCPUS)
    throw Error(std::to_string(ncpu) + " CPU workers requested; this StarPU build starts at most " +
                std::to_string(STARPU_MAXCPUS) + " (STARPU_MAXCPUS)");
  start_starpu(ncpu, ncuda);
  assign_workers(ncpu, ncuda);
  create_contexts();
}

int Runtime::check_config() const {
  const RuntimeConfig& cfg = cfg_;
  if (const char* why = unusable_policy(cfg.sched))
    throw Error("StarPU scheduling policy '" + cfg.sched + "' cannot run zenflow: " + why);
  if (!is_policy(cfg.sched)) throw Error("unknown StarPU scheduling policy '" + cfg.sched + "'");
  if (cfg.device_workers < 1 || cfg.host_workers < 1)
    throw Error("need at least one device worker and one host worker");
  // CUDA workers for the device context (docs/gpu.md); with them, CPU workers are the host's only.
  int ncuda = 0;
  if (cfg.cuda_workers < -1) throw Error("runtime.cuda_workers must be >= -1");
#if defined(ZF_USE_CUDA) || defined(ZF_SIMGRID)
  const int gpus = cuda_devices();
  ncuda = cfg.cuda_workers < 0 ? 0 : cfg.cuda_workers == 0 ? gpus : cfg.cuda_workers;
  if (ncuda > gpus)
    throw NoDeviceError(std::to_string(ncuda) + " CUDA workers requested, " + std::to_string(gpus) + " GPUs seen");
  if (cfg.cuda_device >= 0 && ncuda > 0) {
    if (cfg.cuda_device >= gpus)
      throw NoDeviceError("GPU " + std::to_string(cfg.cuda_device) + " requested, " + std::to_string(gpus) + " seen");
    ncuda = 1;
  }
#else
  if (cfg.cuda_device >= 0) throw Error("runtime: a GPU was requested, but this build has no CUDA");
  if (cfg.cuda_workers > 0)
    throw Error("runtime.cuda_workers = " + std::to_string(cfg.cuda_workers) +
                ": this build has no CUDA (configure with -DZF_ENABLE_CUDA=ON, docs/gpu.md)");
#endif
  return ncuda;
}

void Runtime::start_starpu(int ncpu, int ncuda) {
  const RuntimeConfig& cfg = cfg_;
  blas_single_thread();
  deadline_policy_set_idle({}, {});  // nothing sleeps or helps until our policy's contexts exist
#ifndef ZF_SIMGRID
  // Where the workers run (docs/data-parallel.md, "A rank's cores"), unless the user's
  // STARPU_WORKERS_* say: within the process's binding where the launcher bound it (StarPU binds
  // its workers from the first core otherwise, whatever the binding); not bound at all where
  // several unbound ranks share the node (each would bind its workers to the same first cores)
  if (!std::getenv("STARPU_WORKERS_CPUID") && !std::getenv("STARPU_WORKERS_NOBIND") &&
      !std::getenv("STARPU_WORKERS_GETBIND")) {
    if (process_bound())
      setenv("STARPU_WORKERS_GETBIND", "1", 1);
    else if (cfg.local_ranks > 1)
      setenv("STARPU_WORKERS_NOBIND", "1", 1);
  }
#endif

  starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = ncpu;
  conf.ncuda = ncuda;
  if (cfg.cuda_device >= 0 && ncuda == 1) {  // this GPU, not the first one
    conf.use_explicit_workers_cuda_gpuid = 1;
    conf.workers_cuda_gpuid[0] = (unsigned)cfg.cuda_device;
  }
  conf.nopencl = 0;
  conf.nmic = 0;
  conf.nmpi_ms = 0;
  conf.precedence_over_environment_variables = 1;  // our worker counts, not STARPU_NCPU's
  conf.sched_policy_name = "eager";                // global context: we never submit to it
  repair_calibration(calibration_dir(), std::cerr);  // StarPU aborts on a damaged file (calibration.hpp)
  ZF_CHECK_STARPU(starpu_init(&conf));
  if (cfg.profiling) starpu_profiling_status_set(STARPU_PROFILING_ENABLE);

}

void Runtime::assign_workers(int ncpu, int ncuda) {
  const RuntimeConfig& cfg = cfg_;
  int cpus[STARPU_NMAXWORKERS];
  int n = starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, cpus, STARPU_NMAXWORKERS);
  if (n < ncpu) {
    starpu_shutdown();
    throw Error("StarPU started " + std::to_string(n) + " CPU workers, " + std::to_string(ncpu) +
                " requested");
  }
  if (device_is_cuda_) {
    int gpus_ids[STARPU_NMAXWORKERS];
    int ng = starpu_worker_get_ids_by_type(STARPU_CUDA_WORKER, gpus_ids, STARPU_NMAXWORKERS);
    if (ng < ncuda) {
      starpu_shutdown();
      throw NoDeviceError("StarPU started " + std::to_string(ng) + " CUDA workers, " + std::to_string(ncuda) +
                          " requested");
    }
#ifdef ZF_USE_CUDA
    starpu_cublas_init();  // one cuBLAS handle per CUDA worker, bound to its stream
    if (const char* e = cuda_keep_memory_pools())
      std::cerr << "zenflow: CUDA memory pools left as they are: " << e << "\n";
#endif
    device_workers_.assign(gpus_ids, gpus_ids + ncuda);
    host_workers_.assign(cpus, cpus + ncpu);
    if (ncuda == 1) prefetch_node_ = (int)starpu_worker_get_memory_node(gpus_ids[0]);
  } else {
    device_workers_.assign(cpus, cpus + cfg.device_workers);
    host_workers_.assign(cpus + cfg.device_workers, cpus + ncpu);
  }
}

void Runtime::create_contexts() {
  const RuntimeConfig& cfg = cfg_;
  // Our policy is passed as a struct (StarPU looks names up among its own only); each context
  // gets its own instance of its state. The host context orders by deadline.
  if (cfg.sched == deadline_policy()->policy_name) {
    device_ctx_ = starpu_sched_ctx_create(device_workers_.data(), (int)device_workers_.size(), "device",
                                          STARPU_SCHED_CTX_POLICY_STRUCT, deadline_policy(), 0);
    host_ctx_ = starpu_sched_ctx_create(host_workers_.data(), (int)host_workers_.size(), "host",
                                        STARPU_SCHED_CTX_POLICY_STRUCT, deadline_policy(), 0);
    deadline_policy_order_by_deadline(host_ctx_);
    // Idle CPU workers sleep in the policy; idle device workers take tiles of the device
    // kernels, and so do the host workers when they have cores of their own (device + host
    // workers <= cores): a host worker's core then serves the device side while it has no host
    // task (docs/architecture.md, "Idle workers" and "Device cores"). Not with CUDA workers:
    // their drivers must keep polling their streams.
    // Nor in simulation: workers are SimGrid actors, and a sleep on a condition variable would stop
    // the whole simulation.
    if (!device_is_cuda_ && !kSimulated) {
      std::vector<int> all = device_workers_, helpers = device_workers_;
      all.insert(all.end(), host_workers_.begin(), host_workers_.end());
      if ((int)all.size() <= hwloc_cores()) helpers = all;
      deadline_policy_set_idle(all, helpers);
    }
    // In simulation the same workers are the helpers of the roofline's tile split (docs/simulation.md,
    // "Helpers"): a tiled kernel's time is shared with the helpers idle when it starts.
    if (!device_is_cuda_ && kSimulated) {
      std::vector<int> all = device_workers_, helpers = device_workers_;
      all.insert(all.end(), host_workers_.begin(), host_workers_.end());
      if ((int)all.size() <= hwloc_cores()) helpers = all;
      deadline_policy_set_sim_helpers(helpers);
    }
  } else {
    device_ctx_ = starpu_sched_ctx_create(device_workers_.data(), (int)device_workers_.size(), "device",
                                          STARPU_SCHED_CTX_POLICY_NAME, cfg.sched.c_str(), 0);
    host_ctx_ = starpu_sched_ctx_create(host_workers_.data(), (int)host_workers_.size(), "host",
                                        STARPU_SCHED_CTX_POLICY_NAME, cfg.sched.c_str(), 0);
  }
  starpu_sched_policy* pol = starpu_sched_ctx_get_sched_policy(device_ctx_);
  policy_ = pol && pol->policy_name ? pol->policy_name : "?";
  if (policy_ != cfg.sched) {
    std::string got = policy_;
    starpu_sched_ctx_delete(host_ctx_);
    starpu_sched_ctx_delete(device_ctx_);
#ifdef ZF_USE_CUDA
    if (device_is_cuda_) starpu_cublas_shutdown();
#endif
    starpu_shutdown();
    throw Error("StarPU runs policy '" + got + "' instead of the requested '" + cfg.sched + "'");
  }
}

Runtime::~Runtime() {
  starpu_task_wait_for_all();
  deadline_policy_set_idle({}, {});
  deadline_policy_set_sim_helpers({});
  if (comm_token_) starpu_data_unregister(comm_token_);
  starpu_sched_ctx_delete(host_ctx_);
  starpu_sched_ctx_delete(device_ctx_);
#ifdef ZF_USE_CUDA
  if (device_is_cuda_) starpu_cublas_shutdown();
#endif
  starpu_shutdown();
}

SubmitOptions Runtime::device(int64_t step) const {
  SubmitOptions o;
  o.rt = const_cast<Runtime*>(this);
  o.ctx = device_ctx_;
  o.side = Side::Device;
  o.step = step;
  return o;
}

SubmitOptions Runtime::host(int64_t step) const {
  SubmitOptions o = device(step);
  o.ctx = host_ctx_;
  o.side = Side::Host;
  o.role = Role::Host;
  return o;
}

int Runtime::priority_of(const SubmitOptions& o, unsigned ctx) const {
  if (!cfg_.priorities || o.step < 0) return 0;
  int p = 0;
  switch (o.role) {
    case Role::Compute: p = kPrioCompute; break;
    case Role::Crossing: p = kPrioCrossing; break;
    case Role::Host: {
      const int64_t lead = std::max<int64_t>(1, o.deadline() - o.step);
      p = (int)std::max<int64_t>(1, kPrioHost - lead);
      break;
    }
  }
  return std::clamp(p, starpu_sched_ctx_get_min_priority(ctx), starpu_sched_ctx_get_max_priority(ctx));
}

std::string Runtime::worker_name(int id) const {
  char buf[64];
  starpu_worker_get_name(id, buf, sizeof buf);
  return buf;
}

void Runtime::wait_all() {
  ZF_CHECK_STARPU(starpu_task_wait_for_all());
  tracker_.status().rethrow_if_failed();
}

double Runtime::now_us() const { return starpu_timing_now(); }

namespace {
struct ReadArg {
  starpu_data_handle_t h;
  void* dst;
  size_t bytes;
  Tracker* tracker;
  int64_t step;
};
void on_acquired(void* p) noexcept {
  auto* a = static_cast<ReadArg*>(p);
  void* src = starpu_data_handle_to_pointer(a->h, STARPU_MAIN_RAM);
  if (src) std::memcpy(a->dst, src, a->bytes);
  starpu_data_release(a->h);
  a->tracker->complete(a->step, Side::Device, nullptr);
  delete a;
}
}  // namespace

starpu_data_handle_t Runtime::comm_token() {
  if (!comm_token_) {
    starpu_void_data_register(&comm_token_);
    starpu_data_set_name(comm_token_, "comm_token");
  }
  return comm_token_;
}

void Runtime::read_async(const Tensor& t, void* dst, size_t bytes, int64_t step) {
  if (bytes > t.bytes()) throw Error("read_async: " + t.name() + " is smaller than requested");
  tracker_.add_pending(step, Side::Device);
  auto* a = new ReadArg{t.handle(), dst, bytes, &tracker_, step};
  int rc = starpu_data_acquire_cb(t.handle(), STARPU_R, on_acquired, a);
  if (rc < 0) {
    delete a;
    tracker_.complete(step, Side::Device, nullptr);
    ZF_CHECK_STARPU(rc);
  }
}

}  // namespace zf
