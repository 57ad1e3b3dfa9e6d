#include "runtime/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/error.hpp"

namespace zf {

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  dir_ = dir.string();
  tmp_ = (dir / ("." + p.filename().string() + ".tmp." + std::to_string(getpid()))).string();
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path + ": cannot create " + tmp_ + ": " + std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {  // not committed
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::write(const void* data, size_t n) {
  const char* c = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd_, c + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(path_ + ": write failed: " + std::strerror(errno));
    }
    done += (size_t)w;
  }
}

void AtomicFileWriter::commit() {
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp_.c_str());
    throw Error(path_ + ": fsync/close failed: " + std::strerror(e));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp_.c_str());
    throw Error(path_ + ": rename failed: " + std::strerror(e));
  }
  int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  AtomicFileWriter w(path);
  w.write(data, n);
  w.commit();
}

}  // namespace zf
