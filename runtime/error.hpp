// Errors on the host side are exceptions (style.md). Three kinds: Error (engine failure),
// NoDeviceError (-ENODEV: no worker can run a codelet; tests skip on it), InputError (bad user
// input: spec, config, data file, checkpoint; zenflow-run exits with code 2 on it).
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

namespace zf {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct NoDeviceError : Error {
  using Error::Error;
};
// `s` with its control characters other than newline and tab written as \xNN: a message quoting
// user input never carries a NUL (what() is a C string: it would end there) or a terminal escape.
std::string printable(const std::string& s);

// `where` names the file and the field path; `what` the expectation. Both are kept printable.
struct InputError : Error {
  InputError(const std::string& where, const std::string& what)
      : InputError(printable(where), printable(what), 0) {}
  const std::string& where() const { return where_; }
  const std::string& message() const { return message_; }  // what() without "where: "

 private:
  InputError(std::string where, std::string what, int)
      : Error(where + ": " + what), where_(std::move(where)), message_(std::move(what)) {}
  std::string where_, message_;
};

[[noreturn]] void throw_starpu_error(int rc, const char* expr, const char* file, int line);

}  // namespace zf

// Every StarPU call that returns an int goes through this.
#define ZF_CHECK_STARPU(expr)                                                   \
  do {                                                                          \
    int zf_rc_ = (expr);                                                        \
    if (zf_rc_ < 0) ::zf::throw_starpu_error(zf_rc_, #expr, __FILE__, __LINE__); \
  } while (0)
