#include "graphs/train/checkpoint.hpp"

#include "graphs/spec/field_table.hpp"

#include "runtime/comm.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "codelets/kernels/cpu/kernels.hpp"
#include "graphs/spec/spec.hpp"
#include "graphs/strategies/strategy.hpp"
#include "models/weights.hpp"
#include "models/workload.hpp"
#include "runtime/comm.hpp"
#include "runtime/json_depth.hpp"

namespace zf {
namespace fs = std::filesystem;
using json = nlohmann::json;

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

// A step number as written by the writer: decimal digits only (no sign, no space, no suffix),
// at most 18 of them. Anything else is refused, naming the file and the field.
int64_t parse_step(const std::string& text, const std::string& where) {
  int64_t v = -1;
  const char* b = text.data();
  const char* e = b + text.size();
  auto [end, ec] = std::from_chars(b, e, v);
  if (text.empty() || text.size() > 18 || !std::all_of(b, e, [](char c) { return c >= '0' && c <= '9'; }) ||
      ec != std::errc() || end != e)
    throw InputError(where, "'" + text.substr(0, 40) + (text.size() > 40 ? "..." : "") +
                                "' is not a step number (expected decimal digits, >= 0)");
  return v;
}

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
std::string read_latest(const fs::path& dir, bool strict) {
  const fs::path lp = dir / "latest";
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

bool is_temporary(const std::string& n) {
  return n.rfind(".tmp-step-", 0) == 0 || n.rfind(".old-step-", 0) == 0 || n.rfind(".pin-step-", 0) == 0 ||
         n.rfind(".latest.tmp.", 0) == 0;
}

std::string brief(const json& j) {  // a JSON value for a message, cut at 200 characters
  std::string s = j.dump();
  return s.size() > 200 ? s.substr(0, 200) + "... (" + std::to_string(s.size()) + " characters)" : s;
}

// What check_compatible reads of a checkpoint's spec must be there, with the right kind of value.
void validate_spec(const json& j, const std::string& where) {
  auto need = [&](const json& o, const std::string& path, const char* key, bool (json::*is)() const noexcept,
                  const char* kind) {
    auto it = o.find(key);
    if (it == o.end()) throw InputError(where + "." + path + key, "missing (expected " + std::string(kind) + ")");
    if (!((*it).*is)())
      throw InputError(where + "." + path + key, "expected " + std::string(kind) + ", got " + brief(*it));
  };
  if (!j.is_object()) throw InputError(where, "expected a JSON object (the run's spec), got " + brief(j));
  need(j, "", "strategy", &json::is_string, "a string");
  need(j, "", "model", &json::is_object, "an object");
  need(j, "", "optimizer", &json::is_object, "an object");
  need(j, "", "data", &json::is_object, "an object");
  need(j, "", "train", &json::is_object, "an object");
  for (const char* k : {"dataset", "dir"}) need(j["data"], "data.", k, &json::is_string, "a string");
  need(j["data"], "data.", "train_limit", &json::is_number_integer, "an integer");
  for (const char* k : {"batch_size", "seed"}) need(j["train"], "train.", k, &json::is_number_integer, "an integer");
  if (j.contains("precision")) need(j, "", "precision", &json::is_string, "a string");
  if (j.contains("scheduler")) need(j, "", "scheduler", &json::is_object, "an object");
  if (j["strategy"] == "zenflow") need(j, "", "zenflow", &json::is_object, "an object");
}

}  // namespace

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

// ---------------------------------------------------------------- the checkpoint directory
CheckpointDir::CheckpointDir(const std::string& dir, const Spec& spec, bool overwrite) : dir_(dir) {
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
  try {  // from here on the lock is ours: release it on any error
    {  // who holds it, for the message above
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      const std::time_t now = std::time(nullptr);
      char when[64];
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
      const std::string info =
          "pid " + std::to_string(::getpid()) + "\nhost " + host + "\nstarted " + when + "\n";
      if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, info.data(), info.size(), 0) != (ssize_t)info.size())
        throw Error("checkpoint: cannot write " + lp.string() + ": " + std::strerror(errno));
    }
    remove_stale_temporaries(dir);  // the lock is ours: no live writer owns them

    // Whose checkpoints are here? Those `latest` names, else the newest step directory's.
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
      const CheckpointInfo ck = find_checkpoint(probe);
      check_compatible(ck, spec);
    } catch (const InputError& e) {
      if (!overwrite)
        throw InputError("--checkpoint-dir " + dir,
                         "holds checkpoints of another run, or unreadable ones (" + std::string(e.what()) +
                             "); choose another directory, or pass --checkpoint-overwrite to write here anyway "
                             "(the directory's step directories are then deleted after this run's first checkpoint)");
      for (auto& [s, n] : steps) foreign_.insert(n);
    }
  } catch (...) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw;
  }
}

CheckpointDir::~CheckpointDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock; the file stays (unlinking it would race)
}

std::string write_checkpoint(const std::string& dir, int64_t step, const Spec& spec, Workload& wl,
                             const Strategy& strat, const std::function<void(StateWriter&)>& extra) {
  CheckpointDir d(dir, spec, false);
  return d.write(step, spec, wl, strat, extra);
}

std::string CheckpointDir::write(int64_t step, const Spec& spec, Workload& wl, const Strategy& strat,
                                 const std::function<void(StateWriter&)>& extra) {
  const fs::path d(dir_);
  const std::string name = step_name(step), pid = std::to_string(::getpid());
  const fs::path final_dir = d / name, tmp = d / (".tmp-" + name + "-" + pid);
  StFile model;
  model.metadata["format"] = "zenflow-weights";
  model.metadata["model"] = wl.describe();
  model.metadata["step"] = std::to_string(step);
  for (Param* p : wl.params())  // the logical layout, whatever the storage (Param::in_out)
    model.tensors[p->name] = st_f32(p->logical_shape(), logical_values(*p).data());
  StateWriter w;
  strat.save_state(w);
  if (extra) extra(w);
  w.file().metadata["format"] = "zenflow-state";
  w.file().metadata["step"] = std::to_string(step);
  w.file().metadata["strategy"] = strat.name();
  w.file().metadata["spec"] = spec.to_json().dump();
  // the schedule's timing (docs/spec.md): checkpoints without this key ran step t at lr(t)
  w.file().metadata["lr_timing"] = "deepspeed";
  const std::vector<uint8_t> model_bytes = encode_safetensors((tmp / "model.safetensors").string(), model, true);
  const std::vector<uint8_t> state_bytes = encode_safetensors((tmp / "state.safetensors").string(), w.file(), true);

  // 1. the new step directory, complete and durable under a temporary name
  try {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    make_dir(tmp);
    write_new_file(tmp / "model.safetensors", model_bytes.data(), model_bytes.size());
    write_new_file(tmp / "state.safetensors", state_bytes.data(), state_bytes.size());
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
  } else if (read_latest(d, false) != name) {  // an older copy of this step that latest does not name
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
    link_or_copy(tmp / "model.safetensors", pin / "model.safetensors");
    link_or_copy(tmp / "state.safetensors", pin / "state.safetensors");
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

// ---------------------------------------------------------------- the loader
CheckpointInfo find_checkpoint(const std::string& path) {
  fs::path p(path);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) throw InputError(path, "not a checkpoint directory (nor a step directory of one)");
  const std::string name = read_latest(p, true);
  if (!name.empty()) {
    p /= name;
    if (!fs::is_directory(p, ec))
      throw InputError((fs::path(path) / "latest").string(), "names '" + name + "', which is not a directory here");
  }
  const fs::path st = p / "state.safetensors";
  if (!fs::exists(st, ec) || !fs::exists(p / "model.safetensors", ec))
    throw InputError(p.string(), "no model.safetensors and state.safetensors here (not a checkpoint)");
  const StFile f = read_safetensors_metadata(st.string());
  auto meta = [&](const char* key) -> const std::string& {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end()) throw InputError(st.string() + ": __metadata__." + key, "missing (not a zenflow state file?)");
    return it->second;
  };
  if (meta("format") != "zenflow-state")
    throw InputError(st.string() + ": __metadata__.format", "'" + meta("format").substr(0, 40) + "', expected 'zenflow-state'");
  if (!f.metadata.count("zf_crc32"))
    throw InputError(st.string() + ": __metadata__.zf_crc32", "missing: the file has no checksum (not written by zenflow's checkpoint writer)");
  CheckpointInfo ck;
  ck.dir = p.string();
  ck.step_text = meta("step");
  ck.step = parse_step(ck.step_text, st.string() + ": __metadata__.step");
  const int64_t named = step_of_dir_name(p.filename().string());
  if (named >= 0 && named != ck.step)
    throw InputError(st.string() + ": __metadata__.step", std::to_string(ck.step) + ", but the directory is " +
                                                             p.filename().string());
  ck.spec_text = meta("spec");
  const std::string where = st.string() + ": __metadata__.spec";
  constexpr int kMaxDepth = 32;  // a spec nests 3 levels
  if (json_nesting_depth(ck.spec_text, kMaxDepth) > kMaxDepth)
    throw InputError(where, "nests arrays/objects more than " + std::to_string(kMaxDepth) + " levels deep (a spec has 3)");
  try {
    ck.spec = json::parse(ck.spec_text);
  } catch (const std::exception& e) {
    throw InputError(where, std::string("not valid JSON: ") + e.what());
  }
  {
    auto it = f.metadata.find("lr_timing");
    ck.lr_timing = it == f.metadata.end() ? "step" : it->second;
    if (ck.lr_timing != "step" && ck.lr_timing != "deepspeed")
      throw InputError(st.string() + ": __metadata__.lr_timing", "'" + ck.lr_timing.substr(0, 40) + "', expected 'deepspeed' or 'step'");
  }
  validate_spec(ck.spec, where);
  return ck;
}

void check_compatible(const CheckpointInfo& ck, const Spec& spec) {
  validate_spec(ck.spec, ck.dir + ": spec");  // callers may have built ck themselves
  const json now = spec.to_json();
  auto differ = [&](const std::string& field, const json& a, const json& b) {
    if (a != b)
      throw InputError(ck.dir + ": " + field, "the checkpoint was written with " + brief(a) + ", this run has " + brief(b));
  };
  for (const ResumeCheck& c : resume_checks(spec)) {  // the spec's field table says which must match
    differ(c.name, c.value(ck.spec), c.value(now));
    if (c.name == "scheduler" && !spec.scheduler.type.empty() && ck.lr_timing != "deepspeed")
      throw InputError(ck.dir + ": scheduler", "the checkpoint ran step t at the schedule's lr(t) (before 2026-12-01); "
                                               "this engine runs it at lr(t - 1) as DeepSpeed does: restart the run");
  }
}

void load_checkpoint(const CheckpointInfo& ck, Workload& wl, Strategy& strat,
                     const std::function<void(const StateReader&)>& extra) {
  const std::string model = ck.dir + "/model.safetensors", st = ck.dir + "/state.safetensors";
  const StFile mm = read_safetensors_metadata(model);
  auto ms = mm.metadata.find("step");  // absent in checkpoints written before it was added
  if (ms != mm.metadata.end() && ms->second != ck.step_text)
    throw InputError(model + ": __metadata__.step", "'" + ms->second.substr(0, 40) + "', but state.safetensors is at step " +
                                                        ck.step_text + " (files of two different checkpoints)");
  load_weights(wl, model);
  StFile f = read_safetensors(st);
  // the files find_checkpoint validated (a writer may have replaced the step directory since)
  if (f.metadata["step"] != ck.step_text || f.metadata["spec"] != ck.spec_text)
    throw InputError(st, "changed while it was being read (is another process writing this checkpoint directory?)");
  if (f.metadata["strategy"] != strat.name())
    throw InputError(st + ": __metadata__.strategy", "'" + f.metadata["strategy"].substr(0, 40) + "', this run uses '" +
                                                         strat.name() + "'");
  // the strategies' counters run on applied updates: with fp16, the checkpoint's step less the
  // steps skipped for an overflow (the trainer's extra state checks applied + skipped = step + 1)
  int64_t last_update = ck.step;
  if (f.tensors.count("trainer.fp16.applied")) {
    const std::vector<int64_t> a = StateReader(f, st, ck.step).i64("trainer.fp16.applied");
    if (a.size() != 1 || a[0] < 0 || a[0] > ck.step + 1)
      throw InputError(st + ": trainer.fp16.applied", "expected one count in [0, " + std::to_string(ck.step + 1) + "]");
    last_update = a[0] - 1;
  }
  const StateReader r(f, st, last_update);
  strat.load_state(r);
  if (extra) extra(r);
}

}  // namespace zf
