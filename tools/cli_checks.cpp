#include "tools/cli_checks.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "runtime/error.hpp"

namespace zf::tools {

namespace fs = std::filesystem;

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        int64_t x = 0;
        const char* end = v.data() + v.size();
        const bool digits = !v.empty() && v.find_first_not_of("0123456789", v[0] == '-' ? 1 : 0) == std::string::npos &&
                            v != "-";
        if (!digits) return "'" + v + "' is not an integer (expected one in " + range + ")";
        const auto r = std::from_chars(v.data(), end, x);
        if (r.ec == std::errc::result_out_of_range || x < lo || x > hi)
          return "'" + v + "' is out of range (expected an integer in " + range + ")";
        return "";
      },
      "");
}

CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        uint64_t x = 0;
        if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
          return "'" + v + "' is not an unsigned integer";
        if (std::from_chars(v.data(), v.data() + v.size(), x).ec == std::errc::result_out_of_range)
          return "'" + v + "' is out of range (expected an unsigned integer below 2^64)";
        return "";
      },
      "");
}

CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](std::string& v) -> std::string { return v.empty() ? "an empty path (expected a path)" : ""; }, "");
}

void check_output_hf_dir(const std::string& option, const std::string& dir) {
  const std::string where = option + " " + dir;
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(dir, ec);
  const fs::file_status st = fs::status(dir, ec);
  if (fs::is_symlink(link) && !fs::exists(st))
    throw InputError(where, "is a symbolic link to nothing (a dangling link: expected a new or empty directory)");
  // not_a_directory: a component is a file, named below as the parent that is not a directory
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
    throw InputError(where, "cannot access (" + ec.message() + ")");
  fs::path writable_dir = dir;
  if (fs::exists(st)) {
    if (!fs::is_directory(st) || !fs::is_empty(dir, ec))
      throw InputError(where, "exists and is not an empty directory (nothing is overwritten)");
  } else {
    // a new directory: its parent must exist (create_directories would make a whole chain, and
    // fail after the run under a file) and be writable
    writable_dir = fs::path(dir).lexically_normal().parent_path();
    if (writable_dir.empty()) writable_dir = ".";
    const fs::file_status ps = fs::status(writable_dir, ec);
    if (!fs::exists(ps))
      throw InputError(where, "directory " + writable_dir.string() + " does not exist (expected a new directory in "
                                                                   "an existing one)");
    if (!fs::is_directory(ps)) throw InputError(where, writable_dir.string() + " is not a directory");
  }
  // create and remove a file: a read-only file system, /proc, permissions (for root too)
  const fs::path probe = writable_dir / (".zf-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw InputError(where, "directory " + writable_dir.string() + " is not writable (" + std::strerror(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
}

namespace {
// The absolute, normalised path with symbolic links of its existing part resolved, without a
// trailing slash.
std::string place(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) r = fs::absolute(p, ec).lexically_normal();
  std::string s = r.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}
bool inside(const std::string& p, const std::string& dir) {
  return p.size() > dir.size() && p.compare(0, dir.size(), dir) == 0 && (p[dir.size()] == '/' || dir == "/");
}
}  // namespace

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                            const std::pair<std::string, std::string>& exclusive) {
  std::vector<std::pair<std::string, std::string>> all;
  if (!exclusive.second.empty()) all.push_back(exclusive);
  for (const auto& o : outputs)
    if (!o.second.empty()) all.push_back(o);
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j) {
      const std::string a = place(all[i].second), b = place(all[j].second);
      const std::string bad = all[j].first + " " + all[j].second;
      if (a == b) throw InputError(bad, "is the same path as " + all[i].first + " (expected different outputs)");
      // the exclusive directory (i == 0) holds nothing else and lies in no other output
      if (i == 0 && !exclusive.second.empty() && (inside(b, a) || inside(a, b)))
        throw InputError(bad, std::string(inside(b, a) ? "is inside " : "contains ") + all[0].first + " " +
                                  all[0].second + " (expected separate outputs)");
    }
}

void check_outputs_are_not_inputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                                  const std::vector<std::pair<std::string, std::string>>& inputs) {
  for (const auto& [oopt, out] : outputs) {
    struct stat so;
    if (out.empty() || ::stat(out.c_str(), &so) != 0) continue;  // a new file is no input
    for (const auto& [iopt, in] : inputs) {
      struct stat si;
      if (in.empty() || ::stat(in.c_str(), &si) != 0) continue;
      if (so.st_dev == si.st_dev && so.st_ino == si.st_ino)
        throw InputError(oopt + " " + out, "is the input " + iopt + " " + in +
                                               " (expected an output that does not replace an input)");
    }
  }
}

}  // namespace zf::tools
