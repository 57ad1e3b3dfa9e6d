// IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or plain, validated:
// magic, dimensions, declared vs actual size, label range. Every problem is an InputError
// naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zf {

struct ImageSet {
  std::vector<uint8_t> images;  // (rows, cols) row-major, cols = height * width
  std::vector<uint8_t> labels;  // (rows)
  int64_t rows = 0, cols = 0;
  int32_t num_classes = 10;
};

// Reads an images file (magic 0x00000803, 3 dims) and a labels file (magic 0x00000801, 1 dim)
// with the same count. limit > 0 keeps the first `limit` examples.
ImageSet load_idx_pair(const std::string& images_path, const std::string& labels_path,
                       int64_t limit, int32_t num_classes);

struct FashionMnist {
  ImageSet train, test;
};
// dir holds train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-*.
FashionMnist load_fashion_mnist(const std::string& dir, int64_t train_limit, int64_t test_limit);

}  // namespace zf
