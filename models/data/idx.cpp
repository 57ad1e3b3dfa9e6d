#include "models/data/idx.hpp"

#include <unistd.h>
#include <zlib.h>

#include <filesystem>

#include "runtime/error.hpp"
#include "runtime/input_file.hpp"

namespace zf {
namespace {

// Whole file, decompressed (gzread reads plain files transparently).
std::vector<uint8_t> read_all(const std::string& path) {
  const int fd = open_input_file(path, path);  // a regular file: a FIFO must not block (input_file.hpp)
  gzFile f = gzdopen(fd, "rb");
  if (!f) {
    ::close(fd);
    throw InputError(path, "cannot open");
  }
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      throw InputError(path, "corrupt gzip stream (" + msg + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  // a truncated gzip member reads as a short stream plus an error flag
  int err = 0;
  const char* msg = gzerror(f, &err);
  if (err != Z_OK && err != Z_STREAM_END) {
    std::string m = msg;
    gzclose(f);
    throw InputError(path, "corrupt or truncated gzip stream (" + m + ")");
  }
  gzclose(f);
  return out;
}

uint32_t be32(const std::vector<uint8_t>& d, size_t off) {
  return (uint32_t)d[off] << 24 | (uint32_t)d[off + 1] << 16 | (uint32_t)d[off + 2] << 8 | d[off + 3];
}

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

std::string dims_str(const std::vector<uint32_t>& dims) {
  std::string r;
  for (auto v : dims) r += (r.empty() ? "" : " x ") + std::to_string(v);
  return r;
}

// Returns the dims after checking magic and size.
std::vector<uint32_t> parse_header(const std::vector<uint8_t>& d, const std::string& path,
                                   uint32_t magic, size_t ndims) {
  if (d.size() < 4) throw InputError(path, "file too short for an IDX header (" + std::to_string(d.size()) + " bytes)");
  uint32_t m = be32(d, 0);
  if (m != magic)
    throw InputError(path, "bad magic " + hex(m) + ", expected " + hex(magic) +
                               (ndims == 3 ? " (IDX unsigned-byte images, 3 dimensions)"
                                           : " (IDX unsigned-byte labels, 1 dimension)"));
  size_t hdr = 4 + 4 * ndims;
  if (d.size() < hdr) throw InputError(path, "truncated IDX header");
  std::vector<uint32_t> dims(ndims);
  size_t expect = 1;
  bool overflow = false;  // dims whose product wraps must not pass as a small size
  for (size_t i = 0; i < ndims; ++i) {
    dims[i] = be32(d, 4 + 4 * i);
    overflow |= __builtin_mul_overflow(expect, (size_t)dims[i], &expect);
  }
  if (overflow)
    throw InputError(path, "header dimensions " + dims_str(dims) + " declare more than 2^64 bytes of data");
  if (d.size() - hdr < expect)
    throw InputError(path, "truncated: header declares " + std::to_string(expect) + " bytes of data, file has " +
                               std::to_string(d.size() - hdr));
  if (d.size() - hdr > expect)
    throw InputError(path, "wrong size: " + std::to_string(d.size() - hdr - expect) +
                               " bytes after the declared data");
  return dims;
}

}  // namespace

ImageSet load_idx_pair(const std::string& images_path, const std::string& labels_path,
                       int64_t limit, int32_t num_classes) {
  auto img = read_all(images_path);
  auto dims = parse_header(img, images_path, 0x00000803u, 3);
  auto lab = read_all(labels_path);
  auto ldims = parse_header(lab, labels_path, 0x00000801u, 1);
  if (dims[0] != ldims[0])
    throw InputError(labels_path, "holds " + std::to_string(ldims[0]) + " labels but " + images_path +
                                      " holds " + std::to_string(dims[0]) + " images");
  if (dims[0] == 0 || dims[1] == 0 || dims[2] == 0) throw InputError(images_path, "empty image set");
  ImageSet s;
  s.num_classes = num_classes;
  s.rows = dims[0];
  s.cols = (int64_t)dims[1] * dims[2];
  if (limit > 0 && limit < s.rows) s.rows = limit;
  s.images.assign(img.begin() + 16, img.begin() + 16 + s.rows * s.cols);
  s.labels.assign(lab.begin() + 8, lab.begin() + 8 + s.rows);
  for (int64_t i = 0; i < s.rows; ++i)
    if (s.labels[i] >= num_classes)
      throw InputError(labels_path, "label " + std::to_string(s.labels[i]) + " at index " +
                                        std::to_string(i) + " is outside [0, " +
                                        std::to_string(num_classes) + ")");
  return s;
}

FashionMnist load_fashion_mnist(const std::string& dir, int64_t train_limit, int64_t test_limit) {
  if (!std::filesystem::is_directory(dir))
    throw InputError(dir.empty() ? "data.dir ''" : dir, "not a directory (install the Debian package dataset-fashion-mnist, or set data.dir)");
  FashionMnist f;
  f.train = load_idx_pair(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz",
                          train_limit, 10);
  f.test = load_idx_pair(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz",
                         test_limit, 10);
  if (f.train.cols != f.test.cols)
    throw InputError(dir + "/t10k-images-idx3-ubyte.gz",
                     "images of " + std::to_string(f.test.cols) + " pixels, but " + dir +
                         "/train-images-idx3-ubyte.gz has " + std::to_string(f.train.cols) +
                         " (expected the train and test images the same size)");
  return f;
}

}  // namespace zf
