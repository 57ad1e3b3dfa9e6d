// Helper threads for the kernels' tiles outside StarPU (zenflow-run generate: inference on the
// host): n threads that sleep until a kernel's parallel_for publishes tiles (parallel.hpp's wake
// hook), then take them (parallel_help), as idle StarPU workers do in a training run. The tiles
// depend on the shapes only, so results are the same bits with or without helpers.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace zf {

class HostHelpers {
 public:
  // n >= 0 helper threads (0: the kernels run on their caller alone). One HostHelpers at a time
  // (parallel.hpp has one wake hook): a second is a std::logic_error.
  explicit HostHelpers(int n);
  ~HostHelpers();
  HostHelpers(const HostHelpers&) = delete;
  HostHelpers& operator=(const HostHelpers&) = delete;

 private:
  std::vector<std::thread> threads_;
};

}  // namespace zf
