#include "runtime/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
  if (::stat(path.c_str(), &st) != 0) fail_errno(where, errno);
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

std::vector<uint8_t> read_input_file(const std::string& path, const std::string& where) {
  const int fd = open_input_file(path, where);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw InputError(where, std::string("read error: ") + std::strerror(err));
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

}  // namespace zf
