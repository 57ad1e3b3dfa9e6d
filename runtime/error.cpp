#include "runtime/error.hpp"

#include <cerrno>
#include <cstring>

namespace zf {

std::string printable(const std::string& s) {
  std::string r;
  r.reserve(s.size());
  for (const char c : s) {
    const unsigned char u = (unsigned char)c;
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      r += "\\x";
      r += hex[u >> 4];
      r += hex[u & 15];
    } else {
      r += c;
    }
  }
  return r;
}

void throw_starpu_error(int rc, const char* expr, const char* file, int line) {
  std::string msg = std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " +
                    std::strerror(-rc) + " (" + std::to_string(rc) + ")";
  if (rc == -ENODEV) throw NoDeviceError(msg);
  throw Error(msg);
}

}  // namespace zf
