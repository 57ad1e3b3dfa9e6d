// Splitting one kernel call across the cores of the device side (StarPU-free: the kernels use it,
// the runtime lends it idle workers), and the BLAS library's own threads.
//
// A kernel cuts its work into tiles whose number and bounds depend only on the shapes (never on
// how many threads run them), so its result is bitwise the same however many threads help.
// parallel_for(n, fn) publishes the tiles and runs them on the calling thread; threads that the
// runtime lets help (idle StarPU workers waiting in the zf-deadline policy, runtime/
// sched_deadline.cpp) take tiles too. Without helpers, or while another call holds the one job
// slot, or when called from inside a tile, the tiles run in order on the caller.
#pragma once
#include <cstddef>

namespace zf {

using TileFn = void (*)(void* ctx, int tile);

// Runs fn(ctx, t) for t in [0, n), each exactly once, and returns when all have ended.
void parallel_for(int n, TileFn fn, void* ctx);

template <class F>
void parallel_tiles(int n, F&& f) {
  if (n <= 1) {
    if (n == 1) f(0);
    return;
  }
  parallel_for(n, [](void* c, int t) { (*static_cast<F*>(c))(t); }, &f);
}

// [0, n) cut into ranges of at least min_len elements, each length a multiple of unit (the last
// one shorter), at most 16: f(begin, end) for each, as tiles of parallel_tiles. The ranges depend
// on n, unit and min_len only, so an elementwise f gives the same result however many help.
template <class F>
void parallel_ranges(size_t n, size_t unit, size_t min_len, F&& f) {
  if (n == 0) return;
  unit = unit ? unit : 1;
  size_t len = (min_len + unit - 1) / unit * unit;
  const size_t max_tiles = 16;
  if ((n + len - 1) / len > max_tiles) len = ((n + max_tiles - 1) / max_tiles + unit - 1) / unit * unit;
  const size_t tiles = (n + len - 1) / len;
  parallel_tiles((int)tiles, [&](int t) {
    const size_t b = (size_t)t * len;
    f(b, b + len < n ? b + len : n);
  });
}

// For the runtime. The hook is called (from the posting thread) when a job with tiles to take is
// published: it wakes the threads that may help. help() runs tiles of the published job, if any,
// until none is left to take; true if it ran at least one. job_open(): a job has tiles to take.
void set_parallel_wake_hook(void (*hook)());
void set_parallel_helpers(int n);  // helpers the runtime provides (0: parallel_for runs serially)
bool parallel_help();
bool parallel_job_open();

// Since the process started: tiles of kernels cut into more than one, and how many of them
// helpers ran (the rest ran on their caller).
struct ParallelStats {
  unsigned long long tiles = 0, helped = 0;
};
ParallelStats parallel_stats();

// Every BLAS call runs on its caller's thread: the kernels cut their work into tiles themselves
// (a BLAS library's own threads would fight the StarPU workers for the cores).
void blas_single_thread();

}  // namespace zf
