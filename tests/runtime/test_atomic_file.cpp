// write_file_atomic (runtime/atomic_file.hpp): a replaced file holds the old or the new content,
// never a partial file or a temporary, also for concurrent readers and a failed write (the
// safetensors writer's overwrite: tests/models/test_safetensors.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/formats/safetensors.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"
#include "test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using namespace zf::test;  // TempDir, read_file (test_helpers.hpp)

TEST(WriteFileAtomic, ReplacesExistingFile) {
  TempDir d;
  std::string p = d.path("f.bin");
  std::string a(1000, 'a'), b(3000, 'b');
  zf::write_file_atomic(p, a.data(), a.size());
  Bytes ra = read_file(p);
  EXPECT_EQ(std::string(ra.begin(), ra.end()), a);
  zf::write_file_atomic(p, b.data(), b.size());
  Bytes rb = read_file(p);
  EXPECT_EQ(std::string(rb.begin(), rb.end()), b);
  zf::write_file_atomic(p, "", 0);
  EXPECT_EQ(fs::file_size(p), 0u);
  EXPECT_EQ(d.entries(), std::vector<std::string>{"f.bin"});
}

TEST(WriteFileAtomic, ReadersSeeOldOrNewNeverPartial) {
  TempDir d;
  std::string p = d.path("f.bin");
  const std::string a(4096, 'a'), b(3 * 4096 + 5, 'b');
  zf::write_file_atomic(p, a.data(), a.size());
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, bad{0};
  std::string bad_sample;
  std::thread reader([&] {
    while (!done.load()) {
      Bytes r = read_file(p);
      std::string s(r.begin(), r.end());
      if (s != a && s != b) {
        if (bad.fetch_add(1) == 0) bad_sample = s.substr(0, 32) + "... (" + std::to_string(s.size()) + " bytes)";
      }
      reads.fetch_add(1);
    }
  });
  for (int i = 0; i < 60; ++i) {
    const std::string& s = (i % 2) ? a : b;
    zf::write_file_atomic(p, s.data(), s.size());
  }
  done = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0) << "a reader saw a partial file: " << bad_sample;
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(d.entries(), std::vector<std::string>{"f.bin"});
}

TEST(WriteFileAtomic, FailedWriteLeavesOldContentAndNoTemporary) {
  TempDir d;
  // the target is a non-empty directory: the rename fails after the temporary was written
  std::string p = d.path("target");
  fs::create_directory(p);
  std::ofstream(p + "/keep") << "old";
  std::string s = "new content";
  EXPECT_THROW(zf::write_file_atomic(p, s.data(), s.size()), zf::Error);
  EXPECT_TRUE(fs::is_directory(p));
  EXPECT_EQ(fs::file_size(p + "/keep"), 3u);
  EXPECT_EQ(d.entries(), std::vector<std::string>{"target"});
  // the directory of the target does not exist: nothing is created
  EXPECT_THROW(zf::write_file_atomic(d.path("no/such/dir/f"), s.data(), s.size()), zf::Error);
  EXPECT_EQ(d.entries(), std::vector<std::string>{"target"});
}

}  // namespace
