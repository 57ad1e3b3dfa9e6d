// The crash-safe checkpoint directory (graphs/train/checkpoint_dir.hpp) on its own, without a model
// or StarPU: the install of a step directory and its filesystem operations (the kill points of
// tests/checkpoint_test.sh), the rewrite of the step `latest` names, and the owner check that
// refuses, or with `overwrite` replaces, another run's step directories.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "graphs/train/checkpoint_dir.hpp"
#include "runtime/error.hpp"
#include "tests/test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using zf::CrashSafeDir;
using zf::StepFile;
using zf::test::TempDir;
using zf::test::expect_input_error;

std::string contents(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> entries(const fs::path& d) {
  std::vector<std::string> v;
  for (auto& e : fs::directory_iterator(d)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(CheckpointDirInstall, WritesTheStepDirectoryThenLatest) {
  TempDir tmp;
  const fs::path dir = tmp.p / "ck";
  CrashSafeDir d(dir.string(), false, [](const std::string& probe) { ADD_FAILURE() << "nothing to check: " << probe; });
  EXPECT_TRUE(fs::exists(dir / "lock"));
  EXPECT_EQ(d.staging_dir(7), (dir / (".tmp-step-00000007-" + std::to_string(getpid()))).string());
  const int64_t before = zf::checkpoint_fs_ops();
  const std::vector<StepFile> files = {{"a.bin", {1, 2, 3}}, {"b.bin", {4, 5}}};
  EXPECT_EQ(d.install(7, files), (dir / "step-00000007").string());
  // mkdir; per file: create, two halves, fsync, close; fsync; rename; fsync of DIR; latest (its
  // five, rename, fsync); the end of the write
  EXPECT_EQ(zf::checkpoint_fs_ops() - before, 1 + 2 * 5 + 1 + 1 + 1 + 7 + 1);
  EXPECT_EQ(zf::read_latest(dir.string(), true), "step-00000007");
  EXPECT_EQ(contents(dir / "step-00000007" / "a.bin"), std::string("\x01\x02\x03", 3));
  EXPECT_EQ(contents(dir / "step-00000007" / "b.bin"), std::string("\x04\x05", 2));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"latest", "lock", "step-00000007"}));

  // the step `latest` names, written again: replaced in place, nothing else left behind
  d.install(7, {{"a.bin", {9}}, {"b.bin", {8}}});
  EXPECT_EQ(contents(dir / "step-00000007" / "a.bin"), std::string("\x09", 1));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"latest", "lock", "step-00000007"}));
  EXPECT_EQ(zf::step_of_dir_name("step-00000007"), 7);
  EXPECT_EQ(zf::step_of_dir_name(".pin-step-00000012-4242"), 12);
  EXPECT_EQ(zf::step_of_dir_name("latest"), -1);
}

TEST(CheckpointDirInstall, AnotherRunsStepsAreRefusedOrReplacedAfterTheFirstInstall) {
  TempDir tmp;
  const fs::path dir = tmp.p / "ck";
  fs::create_directories(dir / "step-00000003");
  fs::create_directories(dir / "step-00000001");
  std::vector<std::string> probes;
  auto theirs = [&](const std::string& probe) {
    probes.push_back(probe);
    throw zf::InputError(probe, "written by another run");
  };
  expect_input_error([&] { CrashSafeDir d(dir.string(), false, theirs); },
                     {"--checkpoint-dir " + dir.string(), "written by another run", "--checkpoint-overwrite"});
  // no `latest`: the newest step directory is probed
  EXPECT_EQ(probes, (std::vector<std::string>{(dir / "step-00000003").string()}));
  EXPECT_TRUE(fs::exists(dir / "step-00000003")) << "refused: nothing deleted";
  {
    CrashSafeDir d(dir.string(), true, theirs);
    EXPECT_TRUE(fs::exists(dir / "step-00000003")) << "kept until this run's first step is complete";
    d.install(5, {{"a.bin", {1}}});
  }
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"latest", "lock", "step-00000005"}));
  // the lock was released with its holder; the directory's `latest` is what is probed now
  probes.clear();
  CrashSafeDir again(dir.string(), false, [&](const std::string& probe) { probes.push_back(probe); });
  EXPECT_EQ(probes, (std::vector<std::string>{dir.string()}));
}

}  // namespace
