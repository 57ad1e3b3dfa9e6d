// Shared by the libFuzzer targets (tests/fuzz/README.md). Bad input must end in zf::InputError
// (zenflow-run's exit 2); any other exception is a finding (abort), as are sanitizer reports.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

#include "runtime/error.hpp"

namespace zf::fuzz {

// A per-process scratch file (in /dev/shm when there is one: no disk traffic per input).
inline std::string scratch(const std::string& name) {
  static const std::string dir = [] {
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(base) + "/zf-fuzz-" + std::to_string(getpid());
  }();
  std::string mk = "mkdir -p " + dir;
  static bool made = std::system(mk.c_str()) == 0;
  (void)made;
  return dir + "/" + name;
}

inline void write(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), (std::streamsize)size);
}

// Runs f: InputError is the expected outcome of bad input; anything else aborts (a finding).
template <class F>
int expect_input_errors_only(F&& f) {
  try {
    f();
  } catch (const zf::InputError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FINDING: not an InputError: %s\n", e.what());
    std::abort();
  }
  return 0;
}

}  // namespace zf::fuzz
