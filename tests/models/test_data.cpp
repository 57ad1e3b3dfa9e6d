// IDX loader validation (models/data/idx.hpp) on crafted files, plain and gzip-compressed (zlib's
// gzwrite): bad magic, truncated or oversized data, image/label count mismatch, labels out of
// range, truncated or corrupt gzip streams, missing files. Each is a zf::InputError naming the
// file. Then the real Fashion-MNIST (60000/10000 x 784, labels < 10) and data.train_limit.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "models/data/idx.hpp"
#include "runtime/error.hpp"
#include "test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using namespace zf::test;  // TempDir, Bytes, read_file, expect_input_error (test_helpers.hpp)

constexpr const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back((uint8_t)(v >> s));
}

// IDX header (magic, dims) followed by `data`.
Bytes idx(uint32_t magic, std::initializer_list<uint32_t> dims, const Bytes& data) {
  Bytes b;
  put_be32(b, magic);
  for (auto d : dims) put_be32(b, d);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Bytes images_idx(uint32_t n, uint32_t h, uint32_t w, size_t extra = 0, size_t missing = 0) {
  Bytes data(size_t(n) * h * w + extra - missing);
  for (size_t i = 0; i < data.size(); ++i) data[i] = (uint8_t)(i * 7 + 3);
  return idx(0x00000803u, {n, h, w}, data);
}

Bytes labels_idx(uint32_t n, uint8_t classes = 10) {
  Bytes data(n);
  for (size_t i = 0; i < n; ++i) data[i] = (uint8_t)(i % classes);
  return idx(0x00000801u, {n}, data);
}

void write_gz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!b.empty()) {
    ASSERT_EQ(gzwrite(f, b.data(), (unsigned)b.size()), (int)b.size());
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Every case runs on plain and on gzip-compressed files (the loader reads both).
class IdxFiles : public ::testing::TestWithParam<bool> {
 protected:
  bool gz() const { return GetParam(); }
  std::string put(const std::string& name, const Bytes& b) {
    std::string p = dir_.path(name + (gz() ? ".gz" : ""));
    if (gz()) {
      write_gz(p, b);
    } else {
      write_plain(p, b);
    }
    return p;
  }
  TempDir dir_;
};

TEST_P(IdxFiles, ValidPairLoads) {
  Bytes img = images_idx(5, 2, 3);
  auto ip = put("img", img), lp = put("lab", labels_idx(5));
  zf::ImageSet s = zf::load_idx_pair(ip, lp, 0, 10);
  EXPECT_EQ(s.rows, 5);
  EXPECT_EQ(s.cols, 6);
  EXPECT_EQ(s.images, Bytes(img.begin() + 16, img.end()));
  EXPECT_EQ(s.labels, (Bytes{0, 1, 2, 3, 4}));
  zf::ImageSet l = zf::load_idx_pair(ip, lp, 3, 10);
  EXPECT_EQ(l.rows, 3);
  EXPECT_EQ(l.images, Bytes(img.begin() + 16, img.begin() + 16 + 18));
  EXPECT_EQ(l.labels, (Bytes{0, 1, 2}));
  EXPECT_EQ(zf::load_idx_pair(ip, lp, 99, 10).rows, 5);  // a limit above the count keeps all
}

TEST_P(IdxFiles, BadMagic) {
  auto lp = put("lab", labels_idx(5));
  auto ip = put("img", idx(0x00000801u, {5, 2, 3}, Bytes(30)));
  expect_input_error([&] { zf::load_idx_pair(ip, lp, 0, 10); }, {ip, "bad magic 0x00000801", "expected 0x00000803"});
  auto ip2 = put("img2", images_idx(5, 2, 3));
  // an images file given as labels
  expect_input_error([&] { zf::load_idx_pair(ip2, ip2, 0, 10); }, {ip2, "bad magic 0x00000803", "expected 0x00000801"});
  auto junk = put("junk", Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!', 0, 0, 0, 0, 1});
  expect_input_error([&] { zf::load_idx_pair(junk, lp, 0, 10); }, {junk, "bad magic"});
}

TEST_P(IdxFiles, HeaderTooShort) {
  auto lp = put("lab", labels_idx(5));
  auto a = put("tiny", Bytes{0, 0});
  expect_input_error([&] { zf::load_idx_pair(a, lp, 0, 10); }, {a, "too short"});
  auto b = put("hdr", idx(0x00000803u, {5}, {}));  // magic and one of three dims
  expect_input_error([&] { zf::load_idx_pair(b, lp, 0, 10); }, {b, "truncated IDX header"});
  auto e = put("empty", Bytes{});
  expect_input_error([&] { zf::load_idx_pair(e, lp, 0, 10); }, {e, "too short"});
}

TEST_P(IdxFiles, TruncatedData) {
  auto lp = put("lab", labels_idx(5));
  auto ip = put("img", images_idx(5, 2, 3, 0, 4));  // header declares 30 bytes, 26 present
  expect_input_error([&] { zf::load_idx_pair(ip, lp, 0, 10); }, {ip, "truncated", "declares 30 bytes", "has 26"});
  auto ip2 = put("img2", images_idx(5, 2, 3));
  auto lp2 = put("lab2", idx(0x00000801u, {5}, Bytes{0, 1, 2}));
  expect_input_error([&] { zf::load_idx_pair(ip2, lp2, 0, 10); }, {lp2, "truncated"});
}

TEST_P(IdxFiles, TrailingBytes) {
  auto lp = put("lab", labels_idx(5));
  auto ip = put("img", images_idx(5, 2, 3, 7));
  expect_input_error([&] { zf::load_idx_pair(ip, lp, 0, 10); }, {ip, "wrong size", "7 bytes after"});
  auto ip2 = put("img2", images_idx(5, 2, 3));
  auto lp2 = put("lab2", idx(0x00000801u, {5}, Bytes{0, 1, 2, 3, 4, 5}));
  expect_input_error([&] { zf::load_idx_pair(ip2, lp2, 0, 10); }, {lp2, "wrong size"});
}

TEST_P(IdxFiles, CountMismatch) {
  auto ip = put("img", images_idx(5, 2, 3));
  auto lp = put("lab", labels_idx(4));
  expect_input_error([&] { zf::load_idx_pair(ip, lp, 0, 10); }, {lp, "4 labels", "5 images", ip});
}

TEST_P(IdxFiles, LabelOutOfRange) {
  auto ip = put("img", images_idx(5, 2, 3));
  auto lp = put("lab", idx(0x00000801u, {5}, Bytes{0, 1, 9, 10, 2}));
  expect_input_error([&] { zf::load_idx_pair(ip, lp, 0, 10); }, {lp, "label 10 at index 3", "[0, 10)"});
  auto lp2 = put("lab2", idx(0x00000801u, {5}, Bytes{0, 1, 2, 3, 255}));
  expect_input_error([&] { zf::load_idx_pair(ip, lp2, 0, 10); }, {lp2, "label 255 at index 4"});
  // with fewer classes, 9 is out of range too
  expect_input_error([&] { zf::load_idx_pair(ip, lp, 0, 5); }, {lp, "label 9 at index 2", "[0, 5)"});
}

TEST_P(IdxFiles, EmptySet) {
  auto ip = put("img", images_idx(0, 28, 28));
  auto lp = put("lab", labels_idx(0));
  expect_input_error([&] { zf::load_idx_pair(ip, lp, 0, 10); }, {ip, "empty"});
  auto ip2 = put("img2", images_idx(3, 0, 28));
  auto lp2 = put("lab2", labels_idx(3));
  expect_input_error([&] { zf::load_idx_pair(ip2, lp2, 0, 10); }, {ip2, "empty"});
}

// Dimensions whose product overflows 64 bits (2^22 * 2^21 * 2^21 = 2^64) must not pass the size
// check as "0 bytes of data".
TEST_P(IdxFiles, DimensionOverflow) {
  auto ip = put("img", idx(0x00000803u, {1u << 22, 1u << 21, 1u << 21}, {}));
  auto lp = put("lab", labels_idx(1u << 22));
  expect_input_error([&] { zf::load_idx_pair(ip, lp, 0, 10); }, {ip});
}

TEST_P(IdxFiles, MissingFile) {
  auto lp = put("lab", labels_idx(5));
  std::string ip = dir_.path("no-such-images.gz");
  expect_input_error([&] { zf::load_idx_pair(ip, lp, 0, 10); }, {ip, "not found"});
  auto ip2 = put("img", images_idx(5, 2, 3));
  std::string lp2 = dir_.path("no-such-labels");
  expect_input_error([&] { zf::load_idx_pair(ip2, lp2, 0, 10); }, {lp2, "not found"});
}

INSTANTIATE_TEST_SUITE_P(PlainAndGzip, IdxFiles, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "gzip" : "plain"; });

// A valid .gz of a labels file large enough that its deflate stream spans many blocks.
class GzipDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    n_ = 60000;
    Bytes data(n_);
    uint32_t x = 12345;
    for (auto& v : data) {
      x = x * 1664525u + 1013904223u;
      v = (uint8_t)((x >> 24) % 10);
    }
    raw_ = idx(0x00000801u, {n_}, data);
    good_ = dir_.path("good-labels.gz");
    write_gz(good_, raw_);
    gz_ = read_file(good_);
    ASSERT_GT(gz_.size(), 1000u);
    ip_ = dir_.path("images");
    write_plain(ip_, images_idx(n_, 1, 1));
  }
  std::string variant(const std::string& name, const Bytes& b) {
    std::string p = dir_.path(name);
    write_plain(p, b);
    return p;
  }
  uint32_t n_ = 0;
  Bytes raw_, gz_;
  std::string good_, ip_;
  TempDir dir_;
};

TEST_F(GzipDamage, IntactLoads) {
  zf::ImageSet s = zf::load_idx_pair(ip_, good_, 0, 10);
  EXPECT_EQ(s.rows, n_);
  EXPECT_EQ(s.labels, Bytes(raw_.begin() + 8, raw_.end()));
}

TEST_F(GzipDamage, CutInHalf) {
  auto p = variant("half-labels.gz", Bytes(gz_.begin(), gz_.begin() + gz_.size() / 2));
  expect_input_error([&] { zf::load_idx_pair(ip_, p, 0, 10); }, {p, "gzip"});
}

TEST_F(GzipDamage, TrailerMissing) {
  // all the deflate data is there; the CRC32 and length trailer (8 bytes) are not
  auto p = variant("no-trailer-labels.gz", Bytes(gz_.begin(), gz_.end() - 8));
  expect_input_error([&] { zf::load_idx_pair(ip_, p, 0, 10); }, {p, "gzip"});
}

TEST_F(GzipDamage, CorruptCrc) {
  Bytes b = gz_;
  b[b.size() - 6] ^= 0xff;  // inside the CRC32 of the trailer
  auto p = variant("bad-crc-labels.gz", b);
  expect_input_error([&] { zf::load_idx_pair(ip_, p, 0, 10); }, {p, "gzip"});
}

TEST_F(GzipDamage, CorruptStream) {
  Bytes b = gz_;
  for (size_t i = b.size() / 3; i < b.size() / 3 + 64; ++i) b[i] ^= 0x5a;
  auto p = variant("garbled-labels.gz", b);
  expect_input_error([&] { zf::load_idx_pair(ip_, p, 0, 10); }, {p});
}

TEST(FashionMnistDir, MissingDirectory) {
  TempDir d;
  std::string p = d.path("nowhere");
  expect_input_error([&] { zf::load_fashion_mnist(p, 0, 0); }, {p, "not a directory", "data.dir"});
}

TEST(FashionMnistDir, EmptyDirNamesTheField) {
  expect_input_error([&] { zf::load_fashion_mnist("", 0, 0); }, {"data.dir", "not a directory"});
}

TEST(FashionMnistDir, MissingFileInDirectory) {
  TempDir d;
  std::string dir = d.path("fm");
  fs::create_directory(dir);
  write_gz(dir + "/train-images-idx3-ubyte.gz", images_idx(4, 28, 28));
  write_gz(dir + "/train-labels-idx1-ubyte.gz", labels_idx(4));
  write_gz(dir + "/t10k-images-idx3-ubyte.gz", images_idx(2, 28, 28));
  expect_input_error([&] { zf::load_fashion_mnist(dir, 0, 0); }, {"t10k-labels-idx1-ubyte.gz", "not found"});
  write_gz(dir + "/t10k-labels-idx1-ubyte.gz", labels_idx(2));
  zf::FashionMnist f = zf::load_fashion_mnist(dir, 0, 0);
  EXPECT_EQ(f.train.rows, 4);
  EXPECT_EQ(f.test.rows, 2);
  // train and test images of different sizes
  write_gz(dir + "/t10k-images-idx3-ubyte.gz", images_idx(2, 14, 14));
  expect_input_error([&] { zf::load_fashion_mnist(dir, 0, 0); },
                     {dir + "/t10k-images-idx3-ubyte.gz", "images of 196 pixels", "train-images-idx3-ubyte.gz has 784"});
}

class FashionMnistReal : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_directory(kFashionDir)) GTEST_SKIP() << kFashionDir << " not installed";
  }
};

TEST_F(FashionMnistReal, LoadsFullSets) {
  zf::FashionMnist f = zf::load_fashion_mnist(kFashionDir, 0, 0);
  EXPECT_EQ(f.train.rows, 60000);
  EXPECT_EQ(f.test.rows, 10000);
  EXPECT_EQ(f.train.cols, 784);
  EXPECT_EQ(f.test.cols, 784);
  EXPECT_EQ(f.train.images.size(), size_t(60000) * 784);
  EXPECT_EQ(f.test.images.size(), size_t(10000) * 784);
  ASSERT_EQ(f.train.labels.size(), 60000u);
  ASSERT_EQ(f.test.labels.size(), 10000u);
  for (const zf::ImageSet* s : {&f.train, &f.test}) {
    std::vector<int> count(10, 0);
    for (uint8_t l : s->labels) {
      ASSERT_LT(l, 10);
      ++count[l];
    }
    // Fashion-MNIST is balanced: 6000 / 1000 of each class
    for (int c = 0; c < 10; ++c) EXPECT_EQ(count[c], s->rows / 10) << "class " << c;
  }
}

TEST_F(FashionMnistReal, TrainLimitKeepsTheFirstRows) {
  zf::FashionMnist full = zf::load_fashion_mnist(kFashionDir, 0, 0);
  zf::FashionMnist lim = zf::load_fashion_mnist(kFashionDir, 1000, 500);
  EXPECT_EQ(lim.train.rows, 1000);
  EXPECT_EQ(lim.test.rows, 500);
  EXPECT_EQ(lim.train.cols, 784);
  ASSERT_EQ(lim.train.images.size(), size_t(1000) * 784);
  ASSERT_EQ(lim.train.labels.size(), 1000u);
  ASSERT_EQ(lim.test.labels.size(), 500u);
  EXPECT_TRUE(std::equal(lim.train.images.begin(), lim.train.images.end(), full.train.images.begin()));
  EXPECT_TRUE(std::equal(lim.train.labels.begin(), lim.train.labels.end(), full.train.labels.begin()));
  EXPECT_TRUE(std::equal(lim.test.labels.begin(), lim.test.labels.end(), full.test.labels.begin()));
  // a limit larger than the set keeps the whole set
  EXPECT_EQ(zf::load_fashion_mnist(kFashionDir, 100000, 0).train.rows, 60000);
}

}  // namespace
