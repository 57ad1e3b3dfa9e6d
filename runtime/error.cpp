#include "runtime/error.hpp"

#include <cerrno>
#include <cstring>

namespace zf {

void throw_starpu_error(int rc, const char* expr, const char* file, int line) {
  std::string msg = std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " +
                    std::strerror(-rc) + " (" + std::to_string(rc) + ")";
  if (rc == -ENODEV) throw NoDeviceError(msg);
  throw Error(msg);
}

}  // namespace zf
