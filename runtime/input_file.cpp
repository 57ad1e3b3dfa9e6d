#include "runtime/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "runtime/error.hpp"

namespace zf {
namespace {

std::string kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

[[noreturn]] void fail_errno(const std::string& where, int err) {
  if (err == ENOENT) throw InputError(where, "file not found");
  if (err == ELOOP) throw InputError(where, "cannot open: a loop of symbolic links");
  if (err == ENOTDIR) throw InputError(where, "file not found (a component of the path is not a directory)");
  throw InputError(where, std::string("cannot open: ") + std::strerror(err));
}

}  // namespace

int open_input_file(const std::string& path, const std::string& where) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      char to[4096];
      const ssize_t n = ::readlink(path.c_str(), to, sizeof to - 1);
      throw InputError(where, "a symbolic link to nothing (" + (n > 0 ? std::string(to, (size_t)n) : "?") +
                                  " does not exist)");
    }
    fail_errno(where, err);
  }
  if (!S_ISREG(st.st_mode)) throw InputError(where, "is " + kind(st.st_mode) + ", expected a regular file");
  // O_NONBLOCK: should the path have become a FIFO since stat(), open() does not wait for a writer
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail_errno(where, errno);
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t m = st.st_mode;
    ::close(fd);
    throw InputError(where, "is " + kind(m) + ", expected a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // a regular file: ordinary reads
  return fd;
}

namespace {
// MemAvailable of /proc/meminfo in bytes, -1 when unknown (graphs/train/memory_estimate.hpp has the
// same for the run's estimate; this layer sits below it).
int64_t mem_available() {
  const int fd = ::open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* p = std::strstr(buf, "MemAvailable:");
  long long kb = -1;
  if (!p || std::sscanf(p + 13, "%lld", &kb) != 1 || kb < 0) return -1;
  return (int64_t)kb * 1024;
}
}  // namespace

std::vector<uint8_t> read_input_file(const std::string& path, const std::string& where) {
  const int fd = open_input_file(path, where);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw InputError(where, std::string("cannot stat: ") + std::strerror(err));
  }
  // The size when opened is what is read: a sparse file of 2^40 bytes (or /proc/kcore, 128 TiB)
  // larger than the memory is refused before a byte is read, and a file that grows while it is
  // read (a writer appending, a /proc or /sys file, which report no size) cannot make it endless.
  const uint64_t size = (uint64_t)st.st_size;
  const int64_t avail = mem_available();
  if (avail >= 0 && size > (uint64_t)avail) {
    ::close(fd);
    throw InputError(where, "is " + std::to_string(size) + " bytes, more than the " + std::to_string(avail) +
                                " bytes of memory available (MemAvailable)");
  }
  std::vector<uint8_t> out;
  try {
    out.resize(size);
  } catch (const std::bad_alloc&) {
    ::close(fd);
    throw InputError(where, "is " + std::to_string(size) + " bytes: cannot allocate that much memory to read it");
  }
  size_t got = 0;
  uint8_t extra = 0;
  for (;;) {
    uint8_t* dst = got < size ? out.data() + got : &extra;
    const size_t want = got < size ? std::min<size_t>(size - got, 1 << 24) : 1;
    const ssize_t n = ::read(fd, dst, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw InputError(where, std::string("read error: ") + std::strerror(err));
    }
    if (n == 0) break;
    if (got >= size) {
      ::close(fd);
      throw InputError(where, "has more bytes than its size when it was opened (" + std::to_string(size) +
                                  "): a file being written while it is read, or a /proc or /sys file (expected a "
                                  "regular file that does not change)");
    }
    got += (size_t)n;
  }
  ::close(fd);
  if (got < size)
    throw InputError(where, "shrank while it was read (" + std::to_string(size) + " bytes when opened, " +
                                std::to_string(got) + " read): is another process writing it?");
  return out;
}

}  // namespace zf
