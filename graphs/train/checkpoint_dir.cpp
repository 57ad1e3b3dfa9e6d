// The crash-safe checkpoint directory (graphs/train/checkpoint_dir.hpp): its lock, the writer's
// filesystem operations (each a fault-injection point), `latest`, and the install of a step
// directory under a temporary name, renamed (or exchanged) into place before `latest` switches.
#include "graphs/train/checkpoint_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/error.hpp"

namespace zf {
namespace fs = std::filesystem;

// ---------------------------------------------------------------- the writer's filesystem operations
// Every filesystem operation of a checkpoint write goes through fs_op(), the fault-injection point:
// ZF_FAULT_AFTER_FSOPS=N kills the process (SIGKILL, as kill -9) right after the Nth one.
namespace {

std::atomic<int64_t> g_fs_ops{0};

int64_t fault_after() {
  static const int64_t n = [] {
    const char* e = std::getenv("ZF_FAULT_AFTER_FSOPS");
    if (!e || !*e) return (int64_t)0;
    int64_t v = 0;
    auto [end, ec] = std::from_chars(e, e + std::strlen(e), v);
    if (ec != std::errc() || *end != '\0' || v < 1)
      throw InputError("ZF_FAULT_AFTER_FSOPS", std::string("'") + e + "': expected a positive integer");
    return v;
  }();
  return n;
}

void fs_op() {
  const int64_t n = ++g_fs_ops;
  if (n == fault_after()) ::kill(::getpid(), SIGKILL);
}

[[noreturn]] void fs_fail(const std::string& what, const fs::path& p) {
  const int e = errno;
  throw Error("checkpoint: " + what + " " + p.string() + ": " + std::strerror(e));
}

void fsync_dir(const fs::path& d) {
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fs_fail("cannot open directory", d);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fs_fail("fsync of directory", d);
  fs_op();
}

void make_dir(const fs::path& d) {
  if (::mkdir(d.c_str(), 0755) != 0) fs_fail("cannot create directory", d);
  fs_op();
}

void rename_path(const fs::path& a, const fs::path& b) {
  if (::rename(a.c_str(), b.c_str()) != 0) fs_fail("cannot rename " + a.string() + " to", b);
  fs_op();
}

// Atomically swaps two directory entries (renameat2 RENAME_EXCHANGE); false where the filesystem
// cannot (NFS, some FUSE filesystems) or ZF_FAULT_NO_RENAME_EXCHANGE=1 (tests of the fallback).
bool exchange_paths(const fs::path& a, const fs::path& b) {
  const char* off = std::getenv("ZF_FAULT_NO_RENAME_EXCHANGE");
  if (off && std::string(off) == "1") return false;
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) {
    fs_op();
    return true;
  }
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP || errno == EOPNOTSUPP) return false;
  fs_fail("cannot exchange " + a.string() + " and", b);
}

void remove_path(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) throw Error("checkpoint: cannot remove " + p.string() + ": " + ec.message());
  fs_op();
}

// A new file, written in two halves (so a fault can leave it half-written), fsync'ed and closed.
void write_new_file(const fs::path& p, const void* data, size_t n) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fs_fail("cannot create", p);
  fs_op();
  const char* c = static_cast<const char*>(data);
  auto put = [&](size_t from, size_t to) {
    while (from < to) {
      const ssize_t w = ::write(fd, c + from, to - from);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int e = errno;
        ::close(fd);
        errno = e;
        fs_fail("cannot write", p);
      }
      from += (size_t)w;
    }
    fs_op();
  };
  put(0, n / 2);
  put(n / 2, n);
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    fs_fail("fsync of", p);
  }
  fs_op();
  if (::close(fd) != 0) fs_fail("cannot close", p);
  fs_op();
}

// DIR/latest <- "name\n", atomically (DIR/.latest.tmp.PID, fsync, rename, fsync of DIR).
void write_latest(const fs::path& dir, const std::string& name) {
  const fs::path tmp = dir / (".latest.tmp." + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove(tmp, ec);
  const std::string text = name + "\n";
  write_new_file(tmp, text.data(), text.size());
  rename_path(tmp, dir / "latest");
  fsync_dir(dir);
}

// A hard link of `from` at `to` (a copy where the filesystem has no hard links).
void link_or_copy(const fs::path& from, const fs::path& to) {
  if (::link(from.c_str(), to.c_str()) != 0) {
    std::error_code ec;
    fs::copy_file(from, to, ec);
    if (ec) throw Error("checkpoint: cannot link or copy " + from.string() + " to " + to.string() + ": " + ec.message());
    const int fd = ::open(to.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) fs_fail("fsync of", to);
    ::close(fd);
  }
  fs_op();
}

std::string step_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%08lld", (long long)step);
  return b;
}

bool is_temporary(const std::string& n) {
  return n.rfind(".tmp-step-", 0) == 0 || n.rfind(".old-step-", 0) == 0 || n.rfind(".pin-step-", 0) == 0 ||
         n.rfind(".latest.tmp.", 0) == 0;
}

}  // namespace

// The step a directory name says (step-NNNNNNNN, or the writer's .pin-step-NNNNNNNN-PID), or -1.
int64_t step_of_dir_name(const std::string& name) {
  std::string n = name;
  if (n.rfind(".pin-", 0) == 0) {
    n = n.substr(5);
    const size_t dash = n.rfind('-');
    if (dash == std::string::npos || dash < 5) return -1;
    n = n.substr(0, dash);
  }
  if (n.rfind("step-", 0) != 0 || n.size() < 13) return -1;
  const std::string d = n.substr(5);
  if (!std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }) || d.size() > 18) return -1;
  return std::stoll(d);
}

// The step-directory name DIR/latest holds, validated ("" when there is no latest). `strict`:
// refuse an unreadable or malformed file (the loader); else "" (the writer only compares it).
std::string read_latest(const std::string& dir, bool strict) {
  const fs::path lp = fs::path(dir) / "latest";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(lp, ec))) return "";
  auto bad = [&](const std::string& what) -> std::string {
    if (strict) throw InputError(lp.string(), what);
    return "";
  };
  if (!fs::is_regular_file(lp, ec)) return bad("not a regular file (expected the name of a step directory)");
  if (fs::file_size(lp, ec) > 256) return bad("longer than 256 bytes (expected the name of a step directory)");
  std::ifstream in(lp, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.eof() && in.fail()) return bad("cannot be read");
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty() || text == "." || text == ".." ||
      !std::all_of(text.begin(), text.end(), [](char c) { return std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.'; }))
    return bad("'" + text.substr(0, 40) + "' is not the name of a step directory (expected e.g. step-00000099)");
  return text;
}

int64_t checkpoint_fs_ops() { return g_fs_ops.load(); }

void remove_stale_temporaries(const std::string& dir) {
  const std::string keep = read_latest(dir, false);  // a .pin-* that latest names is the checkpoint
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (!is_temporary(n) || n == keep) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);  // best effort: what cannot go now goes at the next run
  }
}

// ---------------------------------------------------------------- the directory
CrashSafeDir::CrashSafeDir(const std::string& dir, bool overwrite,
                           const std::function<void(const std::string&)>& check_owner)
    : dir_(dir) {
  lock();
  try {  // from here on the lock is ours: release it on any error
    {  // who holds it, for the message of a second writer
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      const std::time_t now = std::time(nullptr);
      char when[64];
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
      const std::string info =
          "pid " + std::to_string(::getpid()) + "\nhost " + host + "\nstarted " + when + "\n";
      if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, info.data(), info.size(), 0) != (ssize_t)info.size())
        throw Error("checkpoint: cannot write " + (fs::path(dir) / "lock").string() + ": " + std::strerror(errno));
    }
    remove_stale_temporaries(dir);  // the lock is ours: no live writer owns them
    find_foreign(overwrite, check_owner);
  } catch (...) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw;
  }
}

// Creates the directory if missing and takes its lock, or refuses naming the holder.
void CrashSafeDir::lock() {
  const std::string& dir = dir_;
  const fs::path d(dir);
  std::error_code ec;
  if (fs::exists(d, ec) && !fs::is_directory(d, ec))
    throw InputError("--checkpoint-dir " + dir, "exists and is not a directory");
  fs::create_directories(d, ec);
  if (ec) throw InputError("--checkpoint-dir " + dir, "cannot create the directory: " + ec.message());
  const fs::path lp = d / "lock";
  lock_fd_ = ::open(lp.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0)
    throw InputError("--checkpoint-dir " + dir, "cannot open its lock file " + lp.string() + ": " + std::strerror(errno) +
                                                    " (is the directory writable?)");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    char buf[512] = {};
    const ssize_t n = ::pread(lock_fd_, buf, sizeof buf - 1, 0);
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (e != EWOULDBLOCK) throw InputError("--checkpoint-dir " + dir, "cannot lock " + lp.string() + ": " + std::strerror(e));
    std::string holder = n > 0 ? std::string(buf, (size_t)n) : "";
    for (char& c : holder)
      if (c == '\n') c = ' ';
    while (!holder.empty() && holder.back() == ' ') holder.pop_back();
    throw InputError("--checkpoint-dir " + dir,
                     "in use by another run (" + (holder.empty() ? std::string("holder unknown") : holder) +
                         "): one writer per checkpoint directory; wait for it to end or choose another directory");
  }
}

// Whose checkpoints are here? Those `latest` names, else the newest step directory's.
void CrashSafeDir::find_foreign(bool overwrite, const std::function<void(const std::string&)>& check_owner) {
  const std::string& dir = dir_;
  const fs::path d(dir);
  std::error_code ec;
  std::vector<std::pair<int64_t, std::string>> steps;
  for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind("step-", 0) == 0) steps.push_back({step_of_dir_name(n), n});
  }
  std::sort(steps.begin(), steps.end());
  std::string probe;
  std::error_code lec;
  if (fs::exists(fs::symlink_status(d / "latest", lec))) probe = dir;
  else if (!steps.empty()) probe = (d / steps.back().second).string();
  if (probe.empty()) return;
  try {
    check_owner(probe);
  } catch (const InputError& e) {
    if (!overwrite)
      throw InputError("--checkpoint-dir " + dir,
                       "holds checkpoints of another run, or unreadable ones (" + std::string(e.what()) +
                           "); choose another directory, or pass --checkpoint-overwrite to write here anyway "
                           "(the directory's step directories are then deleted after this run's first checkpoint)");
    for (auto& [s, n] : steps) foreign_.insert(n);
  }
}

CrashSafeDir::~CrashSafeDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock; the file stays (unlinking it would race)
}

std::string CrashSafeDir::staging_dir(int64_t step) const {
  return (fs::path(dir_) / (".tmp-" + step_name(step) + "-" + std::to_string(::getpid()))).string();
}

std::string CrashSafeDir::install(int64_t step, const std::vector<StepFile>& files) {
  const fs::path d(dir_);
  const std::string name = step_name(step), pid = std::to_string(::getpid());
  const fs::path final_dir = d / name, tmp = staging_dir(step);
  // 1. the new step directory, complete and durable under a temporary name
  try {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    make_dir(tmp);
    for (const StepFile& f : files) write_new_file(tmp / f.name, f.bytes.data(), f.bytes.size());
    fsync_dir(tmp);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // a full disk must not keep a partial copy
    throw;
  }
  // 2. into place; `latest` names a complete step directory at every moment
  std::error_code ec;
  fs::path old, pin;
  if (!fs::exists(fs::symlink_status(final_dir, ec))) {
    rename_path(tmp, final_dir);
    fsync_dir(d);
  } else if (read_latest(dir_, false) != name) {  // an older copy of this step that latest does not name
    old = d / (".old-" + name + "-" + pid);
    rename_path(final_dir, old);
    rename_path(tmp, final_dir);
    fsync_dir(d);
  } else if (exchange_paths(tmp, final_dir)) {  // latest names it: swap the two atomically
    old = tmp;
    fsync_dir(d);
  } else {  // no RENAME_EXCHANGE: latest names a hard-linked copy of the new one meanwhile
    pin = d / (".pin-" + name + "-" + pid);
    make_dir(pin);
    for (const StepFile& f : files) link_or_copy(tmp / f.name, pin / f.name);
    fsync_dir(pin);
    write_latest(d, pin.filename().string());
    old = d / (".old-" + name + "-" + pid);
    rename_path(final_dir, old);
    rename_path(tmp, final_dir);
    fsync_dir(d);
  }
  // 3. latest switches, then what it no longer needs goes
  write_latest(d, name);
  if (!old.empty()) remove_path(old);
  if (!pin.empty()) remove_path(pin);
  foreign_.erase(name);
  for (const std::string& f : foreign_) remove_path(d / f);  // --checkpoint-overwrite: the other run's steps
  foreign_.clear();
  remove_stale_temporaries(dir_);  // a dead writer's pinned copy that latest named until now
  fs_op();
  return final_dir.string();
}

}  // namespace zf
