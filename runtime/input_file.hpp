// Opening a user's input file (data files, weights) so that it can never hang or escape as an
// internal error: the path is stat()ed first and must be a regular file (a FIFO would block
// open() and read() forever, a directory or device is not data), it is opened with O_NONBLOCK and
// checked again with fstat (the path may have changed in between), and every failure, a symbolic
// link loop included, is an InputError naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zf {

// Returns an open file descriptor (the caller closes it). `where` prefixes errors (e.g.
// "spec.json: data.path: /x/kjv.txt" or just the path).
int open_input_file(const std::string& path, const std::string& where);

// The whole file: the size fstat gives when it is opened, which must fit the memory available
// (MemAvailable; a sparse file of 1 TiB is refused before a byte is read). A file with more or
// fewer bytes than that (being written, or a /proc or /sys file, which report no size) is an
// InputError too.
std::vector<uint8_t> read_input_file(const std::string& path, const std::string& where);

}  // namespace zf
