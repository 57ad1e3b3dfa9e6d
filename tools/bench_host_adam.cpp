// Host AdamW against the memory bandwidth of the same run (Google Benchmark): a STREAM triad
// (a = b + s*c) and kernels::cpu::adam_step / adam_step_accumulate over N = 1e8 fp32 elements,
// on the same persistent std::thread pool, arrays first-touched (pre-faulted) by the threads that
// use them, split on 16-element (64-byte) boundaries. Prints bytes/s and AdamW / triad at the end.
// Bytes counted per element (docs/performance-limits.md): triad 12 (STREAM's count; 16 with the
// write-allocate read of a), AdamW 28 (read p g m v, write p m v), fused 36 (+ read and write acc).
//   build/bench_host_adam [--benchmark_repetitions=3 ...]
//   env: ZF_BENCH_N (1e8), ZF_BENCH_HUGEPAGES=1 (madvise), ZF_BENCH_STAGGER=1 (see alloc())
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"

namespace {

namespace cpu = zf::kernels::cpu;

constexpr size_t kAlign = 16;  // elements per tile boundary: one cache line, one AVX-512 vector
constexpr int kMaxThreads = 2;
constexpr double kTriadBytes = 12, kTriadBytesWA = 16, kAdamBytes = 28, kAdamAccBytes = 36;

// Persistent workers: run(k, f) calls f(t) on threads 0..k-1 and waits for all of them.
class Pool {
 public:
  explicit Pool(int n) {
    for (int t = 0; t < n; ++t) threads_.emplace_back([this, t] { loop(t); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      ++gen_;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void run(int k, const std::function<void(int)>& f) {
    {
      std::lock_guard<std::mutex> l(mu_);
      f_ = &f;
      active_ = k;
      pending_ = k;
      ++gen_;
    }
    start_.notify_all();
    std::unique_lock<std::mutex> l(mu_);
    done_.wait(l, [&] { return pending_ == 0; });
  }

 private:
  void loop(int t) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* f;
      {
        std::unique_lock<std::mutex> l(mu_);
        start_.wait(l, [&] { return gen_ != seen; });
        seen = gen_;
        if (stop_) return;
        if (t >= active_) continue;
        f = f_;
      }
      (*f)(t);
      std::lock_guard<std::mutex> l(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* f_ = nullptr;
  int active_ = 0, pending_ = 0;
  uint64_t gen_ = 0;
  bool stop_ = false;
};

// Part t of k of [0, n), boundaries on multiples of kAlign.
std::pair<size_t, size_t> part(size_t n, int k, int t) {
  size_t chunk = (n / k + kAlign - 1) / kAlign * kAlign;
  size_t lo = std::min(n, chunk * t), hi = (t == k - 1) ? n : std::min(n, lo + chunk);
  return {lo, hi};
}

struct Arrays {
  size_t n = 0;
  float *a, *b, *c;          // triad
  float *p, *g, *m, *v, *acc;  // AdamW
  Pool pool{kMaxThreads};
  int64_t step = 0;
};
Arrays* A = nullptr;

// 2 MiB-aligned, like any large allocation page-aligned, so all arrays share their address modulo
// 4 KiB (as the engine's tensors do). stagger: array k starts k * 320 bytes (5 cache lines) in
// instead, as STREAM's consecutive static arrays do.
float* alloc(size_t n, bool huge, int k, bool stagger) {
  const size_t off = stagger ? (size_t)k * 320 : 0;
  size_t bytes = (n * sizeof(float) + off + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  void* p = std::aligned_alloc(2u << 20, bytes);
  if (!p) {
    std::fprintf(stderr, "bench_host_adam: cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  return reinterpret_cast<float*>(static_cast<char*>(p) + off);
}

// Allocate and pre-fault: every page is first written by the thread that later works on it.
void setup(size_t n, bool huge, bool stagger) {
  A = new Arrays;
  A->n = n;
  int k = 0;
  for (float** x : {&A->a, &A->b, &A->c, &A->p, &A->g, &A->m, &A->v, &A->acc}) *x = alloc(n, huge, k++, stagger);
  A->pool.run(kMaxThreads, [](int t) {
    auto [lo, hi] = part(A->n, kMaxThreads, t);
    for (size_t i = lo; i < hi; ++i) {
      float x = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;  // in [-0.5, 0.5)
      A->a[i] = 0.0f;
      A->b[i] = x;
      A->c[i] = 1.0f - x;
      A->p[i] = x;
      A->g[i] = x * 1e-2f;
      A->m[i] = 0.0f;
      A->v[i] = 0.0f;
      A->acc[i] = 0.0f;
    }
  });
}

void triad(float* __restrict a, const float* __restrict b, const float* __restrict c, float s,
           size_t lo, size_t hi) {
  for (size_t i = lo; i < hi; ++i) a[i] = b[i] + s * c[i];
}

cpu::AdamParams hparams() {
  cpu::AdamParams hp;
  hp.weight_decay = 0.01f;
  return hp;
}

void set_counters(benchmark::State& st, double bytes_per_elem, size_t elems) {
  using C = benchmark::Counter;
  st.counters["bytes_per_s"] = C(bytes_per_elem * (double)elems, C::kIsIterationInvariantRate, C::kIs1000);
  st.counters["elems_per_s"] = C((double)elems, C::kIsIterationInvariantRate, C::kIs1000);
}

void BM_Triad(benchmark::State& st) {
  const int k = (int)st.range(0);
  const std::function<void(int)> f = [k](int t) {
    auto [lo, hi] = part(A->n, k, t);
    triad(A->a, A->b, A->c, 3.0f, lo, hi);
  };
  for (auto _ : st) {
    A->pool.run(k, f);
    benchmark::ClobberMemory();
  }
  set_counters(st, kTriadBytes, A->n);
  st.counters["bytes_per_s_wa"] = benchmark::Counter(kTriadBytesWA * (double)A->n,
                                                     benchmark::Counter::kIsIterationInvariantRate,
                                                     benchmark::Counter::kIs1000);
}

void BM_AdamW(benchmark::State& st) {
  const int k = (int)st.range(0);
  const cpu::AdamParams hp = hparams();
  for (auto _ : st) {
    const int64_t step = ++A->step;
    A->pool.run(k, [&](int t) {
      auto [lo, hi] = part(A->n, k, t);
      cpu::adam_step(A->p + lo, A->g + lo, A->m + lo, A->v + lo, hi - lo, hp, step, 1.0f);
    });
    benchmark::ClobberMemory();
  }
  set_counters(st, kAdamBytes, A->n);
}

void BM_AdamWAccumulate(benchmark::State& st) {
  const int k = (int)st.range(0);
  const cpu::AdamParams hp = hparams();
  for (auto _ : st) {
    const int64_t step = ++A->step;
    A->pool.run(k, [&](int t) {
      auto [lo, hi] = part(A->n, k, t);
      cpu::adam_step_accumulate(A->p + lo, A->acc + lo, A->g + lo, A->m + lo, A->v + lo, hi - lo, hp,
                                step, 0.25f);
    });
    benchmark::ClobberMemory();
  }
  set_counters(st, kAdamAccBytes, A->n);
}

// The engine's tiling without StarPU: one kernel call per tile of `tile` elements. Static: one
// thread walks all tiles in order. Dynamic: threads take the next tile from a shared counter (as
// StarPU's eager workers take ready tasks), so the last tiles show the load imbalance.
void BM_AdamWTiles(benchmark::State& st) {
  const size_t tile = (size_t)st.range(0);
  const int k = (int)st.range(1);
  const size_t ntiles = (A->n + tile - 1) / tile;
  const cpu::AdamParams hp = hparams();
  double seconds = 0;
  for (auto _ : st) {
    const int64_t step = ++A->step;
    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<size_t> next{0};
    A->pool.run(k, [&](int) {
      for (size_t j; (j = next.fetch_add(1)) < ntiles;) {
        size_t lo = j * tile, n = std::min(tile, A->n - lo);
        cpu::adam_step(A->p + lo, A->g + lo, A->m + lo, A->v + lo, n, hp, step, 1.0f);
      }
    });
    benchmark::ClobberMemory();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  set_counters(st, kAdamBytes, A->n);
  st.counters["tiles"] = (double)ntiles;
  // wall time of one tile on one thread (k threads run k tiles at a time)
  st.counters["us_per_tile"] = seconds * 1e6 * k / ((double)st.iterations() * (double)ntiles);
}

// Console output plus, at the end, the bandwidth table and AdamW / triad (median over repetitions).
class Summary : public benchmark::ConsoleReporter {
 public:
  explicit Summary(OutputOptions o) : ConsoleReporter(o) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration && !r.error_occurred) {
        auto it = r.counters.find("bytes_per_s");
        if (it != r.counters.end()) series(r.benchmark_name()).push_back(it->second.value);
        auto wa = r.counters.find("bytes_per_s_wa");
        if (wa != r.counters.end()) series(r.benchmark_name() + " (+write-allocate)").push_back(wa->second.value);
      }
    ConsoleReporter::ReportRuns(runs);
  }
  void print() {
    std::printf("\n%-54s %11s %9s %4s\n", "benchmark", "median GB/s", "max GB/s", "reps");
    for (auto& [name, v] : bw_) std::printf("%-54s %11.2f %9.2f %4zu\n", name.c_str(), med(v) / 1e9,
                                            *std::max_element(v.begin(), v.end()) / 1e9, v.size());
    for (int k = 1; k <= kMaxThreads; ++k) {
      std::string t = "/threads:" + std::to_string(k) + "/real_time";
      for (const char* op : {"AdamW", "AdamWAccumulate"}) {
        const auto *tr = find("Triad" + t), *tw = find("Triad" + t + " (+write-allocate)"), *ad = find(op + t);
        if (!tr || !tw || !ad) continue;
        std::printf("RATIO %s/Triad threads=%d: %.3f (triad counting write-allocate: %.3f)\n", op, k,
                    med(*ad) / med(*tr), med(*ad) / med(*tw));
      }
    }
  }

 private:
  static double med(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  std::vector<double>& series(const std::string& name) {
    for (auto& [n, v] : bw_)
      if (n == name) return v;
    return bw_.emplace_back(name, std::vector<double>{}).second;
  }
  const std::vector<double>* find(const std::string& name) const {
    for (auto& [n, v] : bw_)
      if (n == name) return &v;
    return nullptr;
  }
  std::vector<std::pair<std::string, std::vector<double>>> bw_;  // in the order first reported
};

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const char* ne = std::getenv("ZF_BENCH_N");
  const size_t n = ne ? (size_t)std::atof(ne) : size_t{100000000};
  const char* he = std::getenv("ZF_BENCH_HUGEPAGES");
  const bool huge = he && std::string(he) == "1";
  const char* se = std::getenv("ZF_BENCH_STAGGER");
  const bool stagger = se && std::string(se) == "1";
  setup(n, huge, stagger);

  for (int k = 1; k <= kMaxThreads; ++k) {
    benchmark::RegisterBenchmark("Triad", BM_Triad)->ArgName("threads")->Arg(k)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("AdamW", BM_AdamW)->ArgName("threads")->Arg(k)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("AdamWAccumulate", BM_AdamWAccumulate)
        ->ArgName("threads")->Arg(k)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  auto* tiles = benchmark::RegisterBenchmark("AdamWTiles", BM_AdamWTiles)
                    ->ArgNames({"tile", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
  for (int k = 1; k <= kMaxThreads; ++k)
    for (int64_t tile = int64_t{1} << 16; tile <= int64_t{1} << 24; tile *= 2) tiles->Args({tile, k});

  benchmark::AddCustomContext("elements", std::to_string(n));
  benchmark::AddCustomContext("hugepages", huge ? "madvise" : "no");
  benchmark::AddCustomContext("stagger", stagger ? "yes" : "no");
  benchmark::AddCustomContext("loadavg_start", loadavg());
  Summary rep(isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                                     : benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&rep);
  rep.print();
  std::printf("elements %zu, hugepages %s, stagger %s, loadavg at end %s\n", n, huge ? "madvise" : "no",
              stagger ? "yes" : "no", loadavg().c_str());
  benchmark::Shutdown();
  return 0;
}
