#include "runtime/parallel.hpp"

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ZF_PAUSE() _mm_pause()
#else
#define ZF_PAUSE() ((void)0)
#endif

extern "C" void openblas_set_num_threads(int);

namespace zf {

void blas_single_thread() { openblas_set_num_threads(1); }

namespace {

// The one job slot. A helper announces itself (helpers + 1) before reading the job and checks
// that it is still open after; the owner closes it and waits for the announced helpers to leave
// before the slot is reused, so no helper ever reads a job's fields while another is being set.
struct Job {
  std::atomic<bool> busy{false};  // owned by a parallel_for call
  std::atomic<bool> open{false};  // tiles may be taken
  TileFn fn = nullptr;
  void* ctx = nullptr;
  int n = 0;
  std::atomic<int> next{0};
  std::atomic<int> done{0};
  std::atomic<int> helpers{0};
};
Job job;
std::atomic<void (*)()> wake_hook{nullptr};
std::atomic<int> nhelpers{0};
thread_local bool in_tile = false;
std::atomic<uint64_t> tiles_total{0}, tiles_helped{0};  // parallel_stats()

// Take and run tiles until none is left; returns how many this thread ran.
int run_tiles() {
  int ran = 0;
  in_tile = true;
  for (;;) {
    const int t = job.next.fetch_add(1);
    if (t >= job.n) break;
    job.fn(job.ctx, t);
    job.done.fetch_add(1, std::memory_order_release);
    ++ran;
  }
  in_tile = false;
  return ran;
}


}  // namespace

void set_parallel_wake_hook(void (*hook)()) { wake_hook.store(hook); }
ParallelStats parallel_stats() { return {tiles_total.load(), tiles_helped.load()}; }
void set_parallel_helpers(int n) { nhelpers.store(n); }


bool parallel_job_open() { return job.open.load(std::memory_order_acquire); }

bool parallel_help() {
  if (in_tile || !job.open.load(std::memory_order_acquire)) return false;
  job.helpers.fetch_add(1);
  bool ran = false;
  if (job.open.load()) {
    const int n = run_tiles();
    tiles_helped.fetch_add((uint64_t)n, std::memory_order_relaxed);
    ran = n > 0;
  }
  job.helpers.fetch_sub(1);
  return ran;
}

void parallel_for(int n, TileFn fn, void* ctx) {
  bool expected = false;
  if (n <= 1 || in_tile || nhelpers.load(std::memory_order_relaxed) == 0 ||
      !job.busy.compare_exchange_strong(expected, true)) {
    for (int t = 0; t < n; ++t) fn(ctx, t);
    if (n > 1) tiles_total.fetch_add((uint64_t)n, std::memory_order_relaxed);
    return;
  }
  tiles_total.fetch_add((uint64_t)n, std::memory_order_relaxed);
  job.fn = fn;
  job.ctx = ctx;
  job.n = n;
  job.next.store(0);
  job.done.store(0);
  job.open.store(true);
  if (auto h = wake_hook.load()) h();
  run_tiles();
  while (job.done.load(std::memory_order_acquire) < n) ZF_PAUSE();  // tiles a helper still runs
  job.open.store(false);
  while (job.helpers.load() != 0) ZF_PAUSE();  // helpers that saw it open leave
  job.busy.store(false, std::memory_order_release);
}

}  // namespace zf
