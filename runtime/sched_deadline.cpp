#include "runtime/sched_deadline.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <new>
#include <set>
#include <tuple>
#include <vector>

#include "runtime/parallel.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

// Idle CPU workers sleep in pop (Debian's StarPU has non-blocking drivers: its own loop around
// pop never blocks, docs/architecture.md "Idle workers"). kSpin: how long an idle worker keeps
// looking before it sleeps, counted from its entering pop, tiles it runs included (a task pushed
// or tiles published within it are taken without a wake-up); max_sleep_us: the longest sleep, so
// that StarPU's own loop (its other context, shutdown, context changes, which wait for the pop to
// return) runs at least that often.
constexpr double kSpinUs = 20.0;
std::atomic<int64_t> max_sleep_us{5000};  // deadline_policy_set_max_sleep

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Per-worker state of the sleep (indexed by StarPU worker id).
struct WorkerState {
  std::atomic<bool> may_sleep{false};  // CPU worker of a run without CUDA workers
  std::atomic<bool> helps{false};      // takes tiles of parallel_for while idle
  std::atomic<bool> sim_helps{false};  // simulation: would help (deadline_policy_set_sim_helpers)
  std::atomic<bool> idle{false};       // its last look found no task
};
WorkerState wstate[STARPU_NMAXWORKERS];

// The sleep of a context's idle workers: an epoch that every push to the context and every
// published job of tiles advances. A worker reads the epoch, looks for work, and sleeps only while
// the epoch has not moved. Static, indexed by context id: a sleeper never outlives it.
struct Sleep {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> epoch{0};
  std::atomic<int> sleepers{0};     // workers about to sleep or asleep (wake notifies)
  std::atomic<int> asleep{0};       // workers in the wait
  std::atomic<uint64_t> sleeps{0};  // sleeps entered
  std::atomic<uint64_t> woken{0};   // sleeps ended by a push or a job (the epoch moved)
};
Sleep ctx_sleep[STARPU_NMAX_SCHED_CTXS];

void wake_sleepers(Sleep& z) {
  z.epoch.fetch_add(1);
  if (z.sleepers.load() > 0) {
    std::lock_guard<std::mutex> lk(z.mu);
    z.cv.notify_all();
  }
}
void wake_all() {  // a job of tiles: helpers may sleep in any context
  for (Sleep& z : ctx_sleep) wake_sleepers(z);
}

struct Entry {
  int64_t key;        // deadline (host) or -priority (device): smaller runs first
  uint64_t seq;       // submission order (TaskBuilder's count; 0 for StarPU's own tasks)
  starpu_task* task;
  bool operator<(const Entry& o) const { return std::tie(key, seq) < std::tie(o.key, o.seq); }
};

// One per scheduling context (starpu_sched_ctx_set_policy_data).
struct Queue {
  PolicyMutex mu;  // held across StarPU calls (runtime/simulation.hpp)
  std::multiset<Entry> tasks;  // equal keys keep push order
  std::atomic<int64_t> ntasks{0};  // read without the mutex by idle workers
  std::atomic<bool> by_deadline{false};
  // Non-blocking drivers (Debian's build): an idle worker keeps calling pop. As StarPU's prio
  // policy does, a worker that found nothing marks itself waiting and does not take the mutex
  // again until a push clears its mark.
  std::atomic<bool> waiting[STARPU_NMAXWORKERS];
  Queue() {
    for (auto& w : waiting) w.store(false, std::memory_order_relaxed);
  }
};

Queue& queue_of(unsigned ctx) { return *static_cast<Queue*>(starpu_sched_ctx_get_policy_data(ctx)); }

void init(unsigned ctx) {
  starpu_sched_ctx_set_policy_data(ctx, new Queue);
  // any int priority (as prio, lws and dmdas accept)
  if (!starpu_sched_ctx_min_priority_is_set(ctx)) starpu_sched_ctx_set_min_priority(ctx, INT_MIN);
  if (!starpu_sched_ctx_max_priority_is_set(ctx)) starpu_sched_ctx_set_max_priority(ctx, INT_MAX);
}

void deinit(unsigned ctx) {
  delete &queue_of(ctx);
  starpu_sched_ctx_set_policy_data(ctx, nullptr);
}

void add_workers(unsigned ctx, int* ids, unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    if (ids[i] != starpu_worker_get_id()) starpu_wake_worker_locked(ids[i]);
    starpu_sched_ctx_worker_shares_tasks_lists(ids[i], (int)ctx);
  }
}

int push(starpu_task* task) {
  const unsigned ctx = task->sched_ctx;
  Queue& q = queue_of(ctx);
  int64_t deadline = INT64_MIN;  // StarPU's own tasks: first
  uint64_t seq = 0;
  task_deadline(task, &deadline, &seq);
  const int64_t key = q.by_deadline.load(std::memory_order_relaxed) ? deadline : -(int64_t)task->priority;
  int wake = -1;
  starpu_worker_relax_on();
  {
    std::lock_guard<PolicyMutex> lk(q.mu);
    starpu_worker_relax_off();
    q.tasks.insert(Entry{key, seq, task});
    q.ntasks.fetch_add(1, std::memory_order_release);
    starpu_push_task_end(task);
    // wake one waiting worker of this context that can run it
    starpu_worker_collection* workers = starpu_sched_ctx_get_worker_collection(ctx);
    starpu_sched_ctx_iterator it;
    workers->init_iterator_for_parallel_tasks(workers, &it, task);
    while (workers->has_next(workers, &it)) {
      const int w = workers->get_next(workers, &it);
      if (!q.waiting[w].load(std::memory_order_relaxed)) continue;
      if (starpu_worker_can_execute_task_first_impl(w, task, nullptr)) {
        q.waiting[w].store(false, std::memory_order_release);
        wake = w;
        break;
      }
    }
  }
#ifndef STARPU_NON_BLOCKING_DRIVERS
  if (wake >= 0) starpu_wake_worker_relax_light(wake);  // blocking drivers sleep on their condition
#else
  (void)wake;
#endif
  wake_sleepers(ctx_sleep[ctx]);
  return 0;
}

starpu_task* try_pop(Queue& q, unsigned ctx, int me) {
#ifdef STARPU_NON_BLOCKING_DRIVERS
  if (q.ntasks.load(std::memory_order_acquire) == 0) return nullptr;
  if (q.waiting[me].load(std::memory_order_acquire)) return nullptr;  // nobody pushed since
#endif
  // Blocking drivers (StarPU with SimGrid, docs/simulation.md): a worker that finds nothing sleeps
  // until a push wakes it, so it marks itself waiting under the mutex even when the queue is empty.
  starpu_task* chosen = nullptr;
  bool skipped = false;
  starpu_worker_relax_on();
  std::lock_guard<PolicyMutex> lk(q.mu);
  starpu_worker_relax_off();
  for (auto it = q.tasks.begin(); it != q.tasks.end(); ++it) {
    unsigned nimpl = 0;
    if (starpu_worker_can_execute_task_first_impl(me, it->task, &nimpl)) {
      chosen = it->task;
      starpu_task_set_implementation(chosen, nimpl);
      q.tasks.erase(it);
      q.ntasks.fetch_sub(1, std::memory_order_release);
      break;
    }
    skipped = true;
  }
  if (!chosen) {
    if (skipped) {  // tasks for other workers only: let them look
      starpu_worker_collection* workers = starpu_sched_ctx_get_worker_collection(ctx);
      starpu_sched_ctx_iterator it;
      workers->init_iterator(workers, &it);
      while (workers->has_next(workers, &it)) {
        const int w = workers->get_next(workers, &it);
        if (w != me) q.waiting[w].store(false, std::memory_order_release);
      }
    }
    q.waiting[me].store(true, std::memory_order_release);
  }
  wstate[me].idle.store(chosen == nullptr, std::memory_order_relaxed);
  return chosen;
}

// Work this worker could take now: a task pushed since it last looked, or tiles to help with.
bool has_work(Queue& q, int me) {
  if (q.ntasks.load(std::memory_order_acquire) > 0 && !q.waiting[me].load(std::memory_order_acquire)) return true;
  return wstate[me].helps.load(std::memory_order_relaxed) && parallel_job_open();
}

bool help(int me) {
  if (!wstate[me].helps.load(std::memory_order_relaxed) || !parallel_job_open()) return false;
  starpu_worker_relax_on();  // others may lock this worker meanwhile (as around any wait in pop)
  const bool ran = parallel_help();
  starpu_worker_relax_off();
  return ran;
}

starpu_task* pop(unsigned ctx) {
  Queue& q = queue_of(ctx);
  const int me = starpu_worker_get_id_check();
  if (starpu_task* t = try_pop(q, ctx, me)) return t;
  if (!wstate[me].may_sleep.load(std::memory_order_relaxed)) return nullptr;
  // Idle: help with tiles, look again for a while, then sleep until a push or a job moves the
  // epoch (or max_sleep_us passes). The epoch is read before looking, so a push after the look wakes.
  Sleep& z = ctx_sleep[ctx];
  const double spin_end = starpu_timing_now() + kSpinUs;
  for (;;) {
    const uint64_t e = z.epoch.load();
    if (help(me)) continue;
    if (starpu_task* t = try_pop(q, ctx, me)) return t;
    if (starpu_timing_now() < spin_end) {
      for (int i = 0; i < 64 && z.epoch.load(std::memory_order_relaxed) == e; ++i) cpu_relax();
      continue;
    }
    z.sleepers.fetch_add(1);
    bool moved;
    starpu_worker_relax_on();  // others may lock this worker while it sleeps
    {
      std::unique_lock<std::mutex> lk(z.mu);
      if (has_work(q, me) || z.epoch.load() != e) {
        moved = true;
      } else {
        z.sleeps.fetch_add(1);
        z.asleep.fetch_add(1);
        moved = z.cv.wait_for(lk, std::chrono::microseconds(max_sleep_us.load()), [&] { return z.epoch.load() != e; });
        z.asleep.fetch_sub(1);
        if (moved) z.woken.fetch_add(1);
      }
    }
    starpu_worker_relax_off();
    z.sleepers.fetch_sub(1);
    if (!moved) return nullptr;  // back to StarPU's loop now and then
    if (help(me)) continue;
    return try_pop(q, ctx, me);
  }
}

starpu_sched_policy make_policy() {
  starpu_sched_policy p{};
  p.init_sched = init;
  p.deinit_sched = deinit;
  p.push_task = push;
  p.pop_task = pop;
  p.add_workers = add_workers;
  p.policy_name = "zf-deadline";
  p.policy_description = "zenflow: host context earliest deadline first, device context priorities then submission order";
  p.worker_type = STARPU_WORKER_LIST;
  return p;
}

starpu_sched_policy policy = make_policy();

}  // namespace

starpu_sched_policy* deadline_policy() { return &policy; }

void deadline_policy_set_idle(const std::vector<int>& sleepers, const std::vector<int>& helpers) {
  for (auto& w : wstate) {
    w.may_sleep.store(false);
    w.helps.store(false);
  }
  for (int w : sleepers) wstate[w].may_sleep.store(true);
  int n = 0;
  for (int w : helpers)
    if (wstate[w].may_sleep.load()) {
      wstate[w].helps.store(true);
      ++n;
    }
  // one helper alone is the caller itself: its kernels run their tiles in order
  set_parallel_wake_hook(n > 1 ? wake_all : nullptr);
  set_parallel_helpers(n > 1 ? n : 0);
  wake_all();
}

void deadline_policy_set_max_sleep(int64_t us) {
  max_sleep_us.store(us);
  wake_all();
}

void deadline_policy_set_sim_helpers(const std::vector<int>& helpers) {
  for (auto& w : wstate) w.sim_helps.store(false);
  for (int w : helpers) wstate[w].sim_helps.store(true);
}

int deadline_policy_idle_helpers(int me) {
  int n = 0;
  for (int w = 0; w < (int)starpu_worker_get_count() && w < STARPU_NMAXWORKERS; ++w)
    if (w != me && wstate[w].sim_helps.load(std::memory_order_relaxed) && wstate[w].idle.load(std::memory_order_relaxed))
      ++n;
  return n;
}

DeadlineSleepStats deadline_policy_sleep_stats() {
  DeadlineSleepStats st;
  for (Sleep& z : ctx_sleep) {
    st.sleeps += z.sleeps.load();
    st.woken += z.woken.load();
    st.asleep += z.asleep.load();
  }
  return st;
}

void deadline_policy_order_by_deadline(unsigned sched_ctx) {
  queue_of(sched_ctx).by_deadline.store(true, std::memory_order_relaxed);
}

}  // namespace zf
