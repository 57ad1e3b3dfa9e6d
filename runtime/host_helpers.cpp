// HostHelpers (host_helpers.hpp): the wake hook bumps a generation counter under a mutex and wakes
// every helper; a helper that sees a new generation takes tiles until none is left, then sleeps.
// A wake while it is busy changes the generation, so it looks again: no job is missed.
#include "runtime/host_helpers.hpp"

#include <atomic>
#include <stdexcept>
#include <string>

#include "runtime/parallel.hpp"

namespace zf {

namespace {
std::mutex mu;
std::condition_variable cv;
uint64_t generation = 0;
bool stopping = false;
std::atomic<bool> active{false};

void wake() {
  {
    std::lock_guard<std::mutex> l(mu);
    ++generation;
  }
  cv.notify_all();
}

void helper_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return stopping || generation != seen; });
      if (stopping) return;
      seen = generation;
    }
    while (parallel_help()) {
    }
  }
}
}  // namespace

HostHelpers::HostHelpers(int n) {
  if (active.exchange(true)) throw std::logic_error("HostHelpers: another one is active");
  {
    std::lock_guard<std::mutex> l(mu);
    stopping = false;
  }
  try {
    for (int i = 0; i < n; ++i) threads_.emplace_back(helper_loop);
  } catch (const std::exception& e) {
    // a thread that cannot start (EAGAIN: a process or address-space limit; bad_alloc): the ones started
    // are stopped and joined (destroying a joinable std::thread would call std::terminate)
    const size_t started = threads_.size();
    stop_and_join();
    throw HelperStartError("could not start helper thread " + std::to_string(started + 1) + " of " +
                               std::to_string(n) + " (" + e.what() + ")",
                           started);
  }
  if (n > 0) {
    set_parallel_wake_hook(wake);
    set_parallel_helpers(n);
  }
}

HostHelpers::~HostHelpers() {
  if (!threads_.empty()) {
    set_parallel_helpers(0);
    set_parallel_wake_hook(nullptr);
  }
  stop_and_join();
}

void HostHelpers::stop_and_join() {
  {
    std::lock_guard<std::mutex> l(mu);
    stopping = true;
  }
  cv.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  active.store(false);
}

}  // namespace zf
