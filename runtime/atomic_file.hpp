// Atomic file writes: nothing a user saved is ever half-written.
#pragma once
#include <cstddef>
#include <string>

namespace zf {

// Writes `path` via a temporary file in the same directory, fsync, rename, fsync of the directory.
void write_file_atomic(const std::string& path, const void* data, size_t n);

// The same for a file written in pieces (a large checkpoint shard, never whole in memory): write()
// appends to the temporary, commit() fsyncs and renames it over `path`; destroyed without commit()
// (an exception on the way), the temporary is removed and `path` is untouched.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(const void* data, size_t n);
  void commit();

 private:
  std::string path_, tmp_, dir_;
  int fd_ = -1;
};

}  // namespace zf
