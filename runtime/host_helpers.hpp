// Helper threads for the kernels' tiles outside StarPU (zenflow-run generate: inference on the
// host): n threads that sleep until a kernel's parallel_for publishes tiles (parallel.hpp's wake
// hook), then take them (parallel_help), as idle StarPU workers do in a training run. The tiles
// depend on the shapes only, so results are the same bits with or without helpers.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace zf {

// A helper thread the system would not start (a limit on processes or address space): the
// constructor has stopped and joined the ones it had started.
struct HelperStartError : std::runtime_error {
  HelperStartError(const std::string& what, size_t started) : std::runtime_error(what), started(started) {}
  size_t started;  // threads that had started
};

class HostHelpers {
 public:
  // n >= 0 helper threads (0: the kernels run on their caller alone). One HostHelpers at a time
  // (parallel.hpp has one wake hook): a second is a std::logic_error. A thread that fails to
  // start is a HelperStartError, with nothing left running.
  explicit HostHelpers(int n);
  ~HostHelpers();
  HostHelpers(const HostHelpers&) = delete;
  HostHelpers& operator=(const HostHelpers&) = delete;

 private:
  void stop_and_join();
  std::vector<std::thread> threads_;
};

}  // namespace zf
