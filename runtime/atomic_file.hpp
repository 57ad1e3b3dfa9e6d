// Atomic file writes: nothing a user saved is ever half-written.
#pragma once
#include <cstddef>
#include <string>

namespace zf {

// Writes `path` via a temporary file in the same directory, fsync, rename, fsync of the directory.
void write_file_atomic(const std::string& path, const void* data, size_t n);

}  // namespace zf
