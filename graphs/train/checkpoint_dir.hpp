// The crash-safe checkpoint directory (docs/checkpoints.md, "Guarantees"): DIR/lock (one writer,
// an advisory flock held for the run), DIR/latest (the name of the newest complete step
// directory), and step directories installed so that whatever moment a writer dies at, `latest`
// names a complete one. Knows nothing of what the files hold: graphs/train/checkpoint.hpp writes
// and reads them. Every filesystem operation of a write is a fault-injection point
// (ZF_FAULT_AFTER_FSOPS, tests/checkpoint_test.sh).
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace zf {

// One file of a step directory: its name in the directory and its bytes.
struct StepFile {
  std::string name;
  std::vector<uint8_t> bytes;
};

// The directory a run writes its step directories into, held for the run: created if missing,
// locked (flock on DIR/lock, which names the holder: pid, host, start time; a second writer is
// refused with an InputError naming it) and cleared of dead writers' temporaries. `check_owner`
// is called with the checkpoint already there (DIR if it has a `latest`, else its newest step
// directory) and throws an InputError when it belongs to another run: refused unless `overwrite`;
// with it, the other run's step directories are deleted once this run's first step is installed.
class CrashSafeDir {
 public:
  CrashSafeDir(const std::string& dir, bool overwrite, const std::function<void(const std::string&)>& check_owner);
  ~CrashSafeDir();
  CrashSafeDir(const CrashSafeDir&) = delete;
  CrashSafeDir& operator=(const CrashSafeDir&) = delete;
  // Where install(step, ...) writes the files first (DIR/.tmp-step-NNNNNNNN-PID).
  std::string staging_dir(int64_t step) const;
  // Installs DIR/step-NNNNNNNN holding `files` (written in this order) and points `latest` at it.
  // Returns the step directory.
  std::string install(int64_t step, const std::vector<StepFile>& files);
  const std::string& path() const { return dir_; }

 private:
  void lock();
  void find_foreign(bool overwrite, const std::function<void(const std::string&)>& check_owner);

  std::string dir_;
  int lock_fd_ = -1;
  std::set<std::string> foreign_;  // step directories of another run (deleted after our first write)
};

// Removes what a dead writer left in `dir` (.tmp-step-*, .old-step-*, .latest.tmp.*, and
// .pin-step-* unless `latest` names it). Only call while holding the directory's lock.
void remove_stale_temporaries(const std::string& dir);

// Fault injection for the crash tests (docs/checkpoints.md): with ZF_FAULT_AFTER_FSOPS=N in the
// environment, the process kills itself (SIGKILL, as kill -9) right after the Nth filesystem
// operation of its checkpoint writes. Returns the number of operations counted so far.
int64_t checkpoint_fs_ops();

// The step-directory name DIR/latest holds, validated ("" when there is no latest). `strict`:
// refuse an unreadable or malformed file with an InputError (the loader); else "" (the writer only
// compares it).
std::string read_latest(const std::string& dir, bool strict);

// The step a directory name says (step-NNNNNNNN, or the writer's .pin-step-NNNNNNNN-PID), or -1.
int64_t step_of_dir_name(const std::string& name);

}  // namespace zf
