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

#include "models/data/lm_rows.hpp"
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

// The rows' contract (models/data/lm_rows.hpp) of masked record rows: T and the sizes, ids below
// `vocab`, targets -1 or ids, at least one target a row; a breach is a finding (trap).
inline void check_record_rows(const zf::LmRowSplit& s, int64_t T, int32_t vocab) {
  for (const zf::LmRows* r : {&s.train, &s.eval}) {
    if (r->T != T || (int64_t)r->tokens.size() != r->rows * r->T || r->targets.size() != r->tokens.size())
      __builtin_trap();
    for (int64_t i = 0; i < r->rows; ++i) {
      bool any = false;
      for (int64_t t = 0; t < r->T; ++t) {
        const int32_t tk = r->tokens[(size_t)(i * r->T + t)], tg = r->targets[(size_t)(i * r->T + t)];
        if (tk < 0 || tk >= vocab || tg < -1 || tg >= vocab) __builtin_trap();
        any |= tg >= 0;
      }
      if (!any) __builtin_trap();  // every row has a response token
    }
  }
}

}  // namespace zf::fuzz
