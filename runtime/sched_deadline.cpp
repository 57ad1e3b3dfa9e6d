#include "runtime/sched_deadline.hpp"

#include <atomic>
#include <climits>
#include <cstdint>
#include <mutex>
#include <new>
#include <set>
#include <tuple>

#include "runtime/task.hpp"

namespace zf {
namespace {

struct Entry {
  int64_t key;        // deadline (host) or -priority (device): smaller runs first
  uint64_t seq;       // submission order (TaskBuilder's count; 0 for StarPU's own tasks)
  starpu_task* task;
  bool operator<(const Entry& o) const { return std::tie(key, seq) < std::tie(o.key, o.seq); }
};

// One per scheduling context (starpu_sched_ctx_set_policy_data).
struct Queue {
  std::mutex mu;
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
    std::lock_guard<std::mutex> lk(q.mu);
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
  return 0;
}

starpu_task* pop(unsigned ctx) {
  Queue& q = queue_of(ctx);
  const int me = starpu_worker_get_id_check();
  if (q.ntasks.load(std::memory_order_acquire) == 0) return nullptr;
#ifdef STARPU_NON_BLOCKING_DRIVERS
  if (q.waiting[me].load(std::memory_order_acquire)) return nullptr;  // nobody pushed since
#endif
  starpu_task* chosen = nullptr;
  bool skipped = false;
  starpu_worker_relax_on();
  std::lock_guard<std::mutex> lk(q.mu);
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
  return chosen;
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

void deadline_policy_order_by_deadline(unsigned sched_ctx) {
  queue_of(sched_ctx).by_deadline.store(true, std::memory_order_relaxed);
}

}  // namespace zf
