// Errors on the host side are exceptions (style.md). Three kinds: Error (engine failure),
// NoDeviceError (-ENODEV: no worker can run a codelet; tests skip on it), InputError (bad user
// input: spec, config, data file, checkpoint; zenflow-run exits with code 2 on it).
#pragma once
#include <stdexcept>
#include <string>

namespace zf {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct NoDeviceError : Error {
  using Error::Error;
};
// `where` names the file and the field path; `what` the expectation.
struct InputError : Error {
  InputError(const std::string& where, const std::string& what)
      : Error(where + ": " + what), where_(where) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

[[noreturn]] void throw_starpu_error(int rc, const char* expr, const char* file, int line);

}  // namespace zf

// Every StarPU call that returns an int goes through this.
#define ZF_CHECK_STARPU(expr)                                                   \
  do {                                                                          \
    int zf_rc_ = (expr);                                                        \
    if (zf_rc_ < 0) ::zf::throw_starpu_error(zf_rc_, #expr, __FILE__, __LINE__); \
  } while (0)
