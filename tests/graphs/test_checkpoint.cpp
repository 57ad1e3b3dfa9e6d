// Checkpoint loading and the checkpoint directory (docs/checkpoints.md). Every bad checkpoint of
// issue 17 is built from a good one and re-signed (both CRC-32s valid, so only the value checks
// stand between it and the engine), then resumed: each must be refused with an InputError (exit 2
// in zenflow-run) naming the state file and the field. Also: the header checksum, checkpoints
// written before it, zenflow states with the former fp32 result ring, `latest`, the writer's
// lock, stale temporaries and another run's directory.
// Crashes in the middle of a write (kill -9 at every filesystem operation): tests/checkpoint_test.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <climits>
#include <functional>

#include "graphs/train/checkpoint.hpp"
#include "graphs/schema/spec.hpp"
#include "test_helpers.hpp"

namespace zf::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A one-layer byte-level GPT on a small generated text, with ZenFlow keeping two host jobs in
// flight (max_staleness 2) and reselecting: every kind of ZenFlow state is non-trivial at the
// checkpoints, and a run takes a fraction of a second.
Spec tiny_gpt(const std::string& text, int64_t steps, const std::string& strategy = "zenflow") {
  Spec s;
  s.source = "tiny-gpt";
  s.strategy = strategy;
  s.model.type = "gpt";
  s.model.n_layer = 1;
  s.model.n_head = 1;
  s.model.n_embd = 8;
  s.model.context = 8;
  s.data.dataset = "text";
  s.data.path = text;
  s.data.eval_limit = 4;
  s.train.batch_size = 4;
  s.train.eval_batch_size = 4;
  s.train.steps = steps;
  s.zenflow.topk_ratio = 0.5;
  s.zenflow.update_interval = 2;
  s.zenflow.overlap_step = true;
  s.zenflow.max_staleness = 2;
  s.zenflow.select_strategy = "step";
  s.zenflow.select_interval = 4;
  s.runtime.tile_elems = 64;
  s.log.every = 0;
  s.log.warmup_steps = 0;
  return s;
}

// One good checkpoint directory per strategy, written once: steps 2, 5 and 8 (latest).
class BadCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("zf_ckpt");
    text_ = (dir_->p / "text.txt").string();
    std::ofstream out(text_);
    for (int i = 0; i < 200; ++i) out << "verse " << i << ": and the checkpoint was written, and it was good.\n";
    out.close();
    for (const char* strat : {"zenflow", "zero-offload-dpu", "device-adam"}) {
      Spec s = tiny_gpt(text_, 9, strat);
      run_with(s, (dir_->p / strat).string(), 3, "");
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path good(const std::string& strat = "zenflow") { return dir_->p / strat; }
  static Spec resume_spec(const std::string& strat = "zenflow") { return tiny_gpt(text_, 12, strat); }

  // A copy of the good checkpoint of `strat`, its step-8 state file edited by `edit` and re-signed
  // (resign false: written back without checksums, as edited).
  fs::path bad(const std::function<void(StFile&)>& edit, const std::string& strat = "zenflow", bool resign = true) {
    const fs::path ck = tmp_.p / ("ck" + std::to_string(n_++));
    fs::copy(good(strat), ck, fs::copy_options::recursive);
    const std::string st = state(ck);
    StFile f = read_safetensors(st);
    edit(f);
    if (resign) {
      f.metadata.erase("zf_crc32");
      f.metadata.erase("zf_header_crc32");
    }
    write_safetensors(st, f, resign);
    return ck;
  }
  static std::string state(const fs::path& ck) { return (ck / "step-00000008" / "state.safetensors").string(); }

  // Resumes from `ck`; expects an InputError whose message names the state file and `field`.
  void expect_refused(const fs::path& ck, const std::string& field, const std::string& strat = "zenflow",
                      const std::string& file = "") {
    const std::string msg = input_error([&] { run_with(resume_spec(strat), "", 0, ck.string()); });
    EXPECT_NE(msg.find(file.empty() ? state(ck) : file), std::string::npos) << msg;
    EXPECT_NE(msg.find(field), std::string::npos) << "expected the field '" << field << "' in: " << msg;
  }

  static void set_i64(StFile& f, const std::string& name, size_t i, int64_t v) {
    ASSERT_EQ(f.tensors.at(name).dtype, "I64");
    ASSERT_LT(i * 8, f.tensors.at(name).bytes.size());
    std::memcpy(f.tensors.at(name).bytes.data() + i * 8, &v, 8);
  }
  template <class T>
  static void set_raw(StFile& f, const std::string& name, size_t i, T v) {
    ASSERT_LT(i * sizeof(T), f.tensors.at(name).bytes.size());
    std::memcpy(f.tensors.at(name).bytes.data() + i * sizeof(T), &v, sizeof(T));
  }
  template <class T>
  static T get_raw(const StFile& f, const std::string& name, size_t i) {
    T v;
    std::memcpy(&v, f.tensors.at(name).bytes.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  static std::string first(const StFile& f, const std::string& prefix) {
    for (auto& [n, t] : f.tensors)
      if (n.rfind(prefix, 0) == 0) return n;
    ADD_FAILURE() << "no tensor " << prefix << "*";
    return prefix;
  }
  static json spec_of(const StFile& f) { return json::parse(f.metadata.at("spec")); }

  static TempDir* dir_;
  static std::string text_;
  TempDir tmp_;
  int n_ = 0;
};
TempDir* BadCheckpoint::dir_ = nullptr;
std::string BadCheckpoint::text_;

TEST_F(BadCheckpoint, TheGoodOneResumesBitwise) {
  const Weights full = run_with(resume_spec(), "", 0, "");
  EXPECT_EQ(run_with(resume_spec(), "", 0, bad([](StFile&) {}).string()), full) << "re-signed, unchanged";
}

TEST_F(BadCheckpoint, StepMetadataIsAStrictInteger) {
  for (const char* v : {"-5", "-2", "2xyz", "+3", "", " 8", "8 ", "0x8", "8.0", "99999999999999999999"}) {
    SCOPED_TRACE(std::string("step '") + v + "'");
    expect_refused(bad([&](StFile& f) { f.metadata["step"] = v; }), "__metadata__.step");
  }
  // a valid number that is not the directory's step
  expect_refused(bad([](StFile& f) { f.metadata["step"] = "7"; }), "__metadata__.step");
  expect_refused(bad([](StFile& f) { f.metadata.erase("step"); }), "__metadata__.step");
}

TEST_F(BadCheckpoint, SpecMetadataIsValidated) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::vector<std::pair<std::string, std::function<void(json&)>>> specs = {
      {"{}", [](json& j) { j = json::object(); }},
      {"[1,2]", [](json& j) { j = json::array({1, 2}); }},
      {"null", [](json& j) { j = nullptr; }},
      {"no model", [](json& j) { j.erase("model"); }},
      {"no strategy", [](json& j) { j.erase("strategy"); }},
      {"no data", [](json& j) { j.erase("data"); }},
      {"no train", [](json& j) { j.erase("train"); }},
      {"no optimizer", [](json& j) { j.erase("optimizer"); }},
      {"no zenflow block", [](json& j) { j.erase("zenflow"); }},
      {"strategy a number", [](json& j) { j["strategy"] = 5; }},
      {"data.train_limit a string", [](json& j) { j["data"]["train_limit"] = "x"; }},
      {"train.seed missing", [](json& j) { j["train"].erase("seed"); }},
      {"precision an array", [](json& j) { j["precision"] = json::array(); }},
  };
  for (auto& [name, edit] : specs) {
    SCOPED_TRACE(name);
    expect_refused(bad([&](StFile& f) {
                     json j = spec_of(f);
                     edit(j);
                     f.metadata["spec"] = j.dump();
                   }),
                   "__metadata__.spec");
  }
  for (const std::string& text : {std::string("not json {"), deep, "{\"strategy\":\"zenflow\",\"model\":" + deep + "}",
                                  std::string("{\"model\":1e400}")}) {
    SCOPED_TRACE(text.substr(0, 40));
    expect_refused(bad([&](StFile& f) { f.metadata["spec"] = text; }), "__metadata__.spec");
  }
}

TEST_F(BadCheckpoint, FormatAndChecksums) {
  expect_refused(bad([](StFile& f) { f.metadata["format"] = "zenflow-weights"; }), "__metadata__.format");
  // no checksum at all
  expect_refused(bad([](StFile& f) { f.metadata.erase("zf_crc32"); f.metadata.erase("zf_header_crc32"); }, "zenflow", false),
                 "__metadata__.zf_crc32");
  // the header checksum covers the metadata and the tensor table: edits without re-signing
  expect_refused(bad([](StFile& f) { f.metadata["step"] = "8 "; }, "zenflow", false), "zf_header_crc32");
  expect_refused(bad([](StFile& f) { f.metadata["spec"] = "{}"; }, "zenflow", false), "zf_header_crc32");
  expect_refused(bad([&](StFile& f) { f.tensors.erase(first(f, "host.acc1.")); }, "zenflow", false), "zf_header_crc32");
}

TEST_F(BadCheckpoint, OldCheckpointsWithoutHeaderChecksumStillLoadAndAreStillValidated) {
  // as written before the header checksum: zf_crc32 of the data only
  const fs::path old = bad([](StFile& f) { f.metadata.erase("zf_header_crc32"); }, "zenflow", false);
  EXPECT_EQ(read_safetensors_metadata(state(old)).metadata.count("zf_header_crc32"), 0u);
  EXPECT_EQ(run_with(resume_spec(), "", 0, old.string()), run_with(resume_spec(), "", 0, ""));
  expect_refused(bad([](StFile& f) {
                   f.metadata.erase("zf_header_crc32");
                   f.metadata["step"] = "-5";
                 }, "zenflow", false),
                 "__metadata__.step");
}

// Written before 2026-12-02, an fp32 zenflow state kept each job's result in its own ring,
// host.resI.W, beside host.accI.W (docs/checkpoints.md): the results of the jobs in flight (jobs 2
// and 3 in slots 2 and 0 of the good state) are read from there, their acc slots, the gradient sums
// already read, ignored. Rebuilt from the good state: resumes bitwise.
TEST_F(BadCheckpoint, ResultRingOfOldZenFlowCheckpointsIsRead) {
  const fs::path old = bad([](StFile& f) {
    std::vector<std::string> accs;
    for (auto& [n, t] : f.tensors)
      if (n.rfind("host.acc", 0) == 0) accs.push_back(n);
    ASSERT_FALSE(accs.empty());
    for (const std::string& n : accs) {
      f.tensors["host.res" + n.substr(8)] = f.tensors.at(n);
      if (n[8] != '1')  // a slot in flight: its old acc held the gradient sum
        for (size_t i = 0; i < f.tensors.at(n).bytes.size() / 4; ++i) set_raw<float>(f, n, i, 0.5f);
    }
  });
  EXPECT_EQ(run_with(resume_spec(), "", 0, old.string()), run_with(resume_spec(), "", 0, ""));
}

TEST_F(BadCheckpoint, ZenFlowCountersAreValidated) {
  // the good state after step 8: host updates after steps 1, 3, 5, 7 (jobs 0-3, all asynchronous),
  // jobs 2 and 3 in flight (max_staleness 2), one gradient accumulated since, selected from step 0
  {
    const StFile f = read_safetensors(state(good()));
    std::vector<int64_t> c(7);
    for (size_t i = 0; i < 7; ++i) c[i] = get_raw<int64_t>(f, "zenflow.counters", i);
    ASSERT_EQ(c, (std::vector<int64_t>{4, 1, 0, 0, 1, 0, 2}));
  }
  const std::vector<std::tuple<size_t, int64_t, const char*>> cases = {
      {0, -3, "zenflow.counters[0]"}, {0, 10, "zenflow.counters[0]"},  // host jobs
      {0, 3, "zenflow.update_steps"},                                  // one job fewer than update steps
      {1, -3, "zenflow.counters[1]"}, {1, 5, "zenflow.counters[1]"},   // gradients since the last update
      {2, 99, "zenflow.counters[2]"}, {2, -2, "zenflow.counters[2]"}, {2, 1, "zenflow.counters[2]"},  // first async job
      {3, -1, "zenflow.counters[3]"}, {3, 100, "zenflow.counters[3]"},  // the auto rule's update count
      {4, 2, "zenflow.counters[4]"}, {4, 0, "zenflow.counters[4]"}, {4, -1, "zenflow.counters[4]"},  // selected
      {5, -1, "zenflow.counters[5]"}, {5, 7, "zenflow.counters[5]"},  // vote flag
      {6, 1, "zenflow.counters"},                                      // max_staleness
  };
  for (auto [i, v, field] : cases) {
    SCOPED_TRACE("counters[" + std::to_string(i) + "] = " + std::to_string(v));
    expect_refused(bad([&](StFile& f) { set_i64(f, "zenflow.counters", i, v); }), field);
  }
  expect_refused(bad([](StFile& f) {
                   auto& b = f.tensors.at("zenflow.counters");
                   b.bytes.resize(48);
                   b.shape = {6};
                 }),
                 "zenflow.counters");
}

TEST_F(BadCheckpoint, ZenFlowPendingJobsAndUpdateStepsAreValidated) {
  const std::vector<std::tuple<size_t, int64_t, const char*>> pending = {
      {1, 99, "slot 99"}, {1, -1, "slot -1"}, {0, 1000000000, "job 1e9"}, {0, -1, "job -1"}, {2, 9, "step 9"},
  };
  for (auto [i, v, name] : pending) {
    SCOPED_TRACE(name);
    expect_refused(bad([&](StFile& f) { set_i64(f, "zenflow.pending", i, v); }), "zenflow.pending");
  }
  expect_refused(bad([](StFile& f) {  // one job fewer in flight than the counters say
                   auto& b = f.tensors.at("zenflow.pending");
                   b.bytes.resize(b.bytes.size() - 24);
                   b.shape = {(int64_t)b.bytes.size() / 8};
                 }),
                 "zenflow.pending");
  expect_refused(bad([](StFile& f) {  // not triples
                   auto& b = f.tensors.at("zenflow.pending");
                   b.bytes.resize(b.bytes.size() - 8);
                   b.shape = {(int64_t)b.bytes.size() / 8};
                 }),
                 "zenflow.pending");
  for (int64_t v : {-5LL, 9LL, 1000000000LL}) {
    SCOPED_TRACE("update step " + std::to_string(v));
    expect_refused(bad([&](StFile& f) { set_i64(f, "zenflow.update_steps", 0, v); }), "zenflow.update_steps");
  }
  expect_refused(bad([](StFile& f) {  // not increasing
                   set_i64(f, "zenflow.update_steps", 1, get_raw<int64_t>(f, "zenflow.update_steps", 0));
                 }),
                 "zenflow.update_steps");
}

TEST_F(BadCheckpoint, SelectedColumnsAreInRangeAndDistinct) {
  for (int32_t v : {1000000000, -5, INT32_MIN}) {
    SCOPED_TRACE("index " + std::to_string(v));
    expect_refused(bad([&](StFile& f) { set_raw<int32_t>(f, first(f, "device.sel."), 0, v); }), "device.sel.");
  }
  expect_refused(bad([&](StFile& f) {
                   const std::string n = first(f, "device.sel.");
                   set_raw<int32_t>(f, n, 1, get_raw<int32_t>(f, n, 0));
                 }),
                 "selected twice");
}

TEST_F(BadCheckpoint, FloatStateIsFiniteAndSecondMomentsNonNegative) {
  const float nan = std::nanf(""), inf = INFINITY;
  expect_refused(bad([&](StFile& f) { set_raw<float>(f, first(f, "host.m."), 3, nan); }), "host.m.");
  expect_refused(bad([&](StFile& f) { set_raw<float>(f, first(f, "host.master."), 0, inf); }), "host.master.");
  expect_refused(bad([&](StFile& f) { set_raw<float>(f, first(f, "host.v."), 2, -1e-3f); }), "host.v.");
  expect_refused(bad([&](StFile& f) { set_raw<float>(f, first(f, "device.v_sel."), 0, -inf); }), "device.v_sel.");
  expect_refused(bad([&](StFile& f) { set_raw<float>(f, first(f, "host.acc0."), 0, nan); }), "host.acc0.");
  expect_refused(bad([&](StFile& f) { set_raw<double>(f, first(f, "auto.AN."), 1, std::nan("")); }), "auto.AN.");
  expect_refused(bad([&](StFile& f) { set_raw<double>(f, first(f, "auto.AN."), 0, -1.0); }), "auto.AN.");
}

TEST_F(BadCheckpoint, OtherStrategiesStateIsValidated) {
  for (int64_t v : {-1LL, 7LL, 9LL})
    expect_refused(bad([&](StFile& f) { set_i64(f, "dpu.last", 0, v); }, "zero-offload-dpu"), "dpu.last",
                   "zero-offload-dpu");
  expect_refused(bad([&](StFile& f) { set_raw<float>(f, first(f, "host.v."), 0, -1.0f); }, "zero-offload-dpu"),
                 "host.v.", "zero-offload-dpu");
  expect_refused(bad([&](StFile& f) { set_raw<float>(f, first(f, "device.v."), 0, -1.0f); }, "device-adam"),
                 "device.v.", "device-adam");
  expect_refused(bad([&](StFile& f) { set_raw<float>(f, first(f, "device.m."), 0, std::nanf("")); }, "device-adam"),
                 "device.m.", "device-adam");
}

TEST_F(BadCheckpoint, LatestIsValidated) {
  auto with_latest = [&](const std::string& text) {
    const fs::path ck = bad([](StFile&) {});
    std::ofstream(ck / "latest", std::ios::trunc) << text;
    return ck;
  };
  for (const std::string& text : {std::string("step-00000099\n"), std::string("../good\n"), std::string(""),
                                  std::string("\n"), std::string(".."), std::string(300, 'a'), std::string("a b")}) {
    SCOPED_TRACE("latest '" + text.substr(0, 20) + "'");
    const fs::path ck = with_latest(text);
    const std::string msg = input_error([&] { find_checkpoint(ck.string()); });
    EXPECT_NE(msg.find((ck / "latest").string()), std::string::npos) << msg;
  }
  // the model file of another step in the latest step directory
  const fs::path ck = bad([](StFile&) {});
  fs::copy_file(ck / "step-00000005" / "model.safetensors", ck / "step-00000008" / "model.safetensors",
                fs::copy_options::overwrite_existing);
  expect_refused(ck, "__metadata__.step", "zenflow", (ck / "step-00000008" / "model.safetensors").string());
}

// ---------------------------------------------------------------- the checkpoint directory
json run_into(const Spec& s, const std::string& dir, bool overwrite, const std::string& resume = "") {
  RunOptions o;
  o.quiet = true;
  o.evaluate = false;
  o.checkpoint_dir = dir;
  o.checkpoint_overwrite = overwrite;
  o.resume_path = resume;
  return run_training(s, o);
}

TEST_F(BadCheckpoint, OneWriterPerDirectory) {
  const std::string dir = (tmp_.p / "locked").string();
  {
    CheckpointDir first(dir, resume_spec(), false);
    const std::string msg = input_error([&] { CheckpointDir second(dir, resume_spec(), false); });
    EXPECT_NE(msg.find("in use by another run"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pid " + std::to_string(getpid())), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir), std::string::npos) << msg;
    // a whole run is refused too, before it trains
    EXPECT_NE(input_error([&] { run_into(resume_spec(), dir, false); }).find("in use"), std::string::npos);
  }
  CheckpointDir again(dir, resume_spec(), false);  // released with its holder
}

TEST_F(BadCheckpoint, AnotherRunsDirectoryNeedsCheckpointOverwrite) {
  const fs::path ck = tmp_.p / "theirs";
  fs::copy(good(), ck, fs::copy_options::recursive);
  Spec other = resume_spec();
  other.train.seed = 7;
  const std::string msg = input_error([&] { run_into(other, ck.string(), false); });
  EXPECT_NE(msg.find("another run"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.seed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--checkpoint-overwrite"), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(ck / "step-00000002")) << "refused: nothing deleted";
  // the same run (another step count) is welcome
  Spec same = resume_spec();
  same.train.steps = 3;
  run_into(same, ck.string(), false);
  EXPECT_TRUE(fs::exists(ck / "step-00000008")) << "the same run's later steps are kept";
  // another run with --checkpoint-overwrite: theirs go after our first checkpoint
  other.train.steps = 6;
  run_into(other, ck.string(), true);
  EXPECT_FALSE(fs::exists(ck / "step-00000002"));
  EXPECT_FALSE(fs::exists(ck / "step-00000008"));
  EXPECT_TRUE(fs::exists(ck / "step-00000005"));
  const CheckpointInfo info = find_checkpoint(ck.string());
  EXPECT_EQ(info.step, 5);
  check_compatible(info, other);  // ours now
  other.train.steps = 8;
  run_into(other, ck.string(), false, ck.string());  // and it resumes
}

TEST_F(BadCheckpoint, StaleTemporariesOfDeadWritersAreRemoved) {
  const fs::path ck = tmp_.p / "stale";
  fs::copy(good(), ck, fs::copy_options::recursive);
  for (const char* d : {".tmp-step-00000011-99999999", ".old-step-00000005-99999999", ".pin-step-00000002-99999999"}) {
    fs::create_directory(ck / d);
    std::ofstream(ck / d / "model.safetensors") << "partial";
  }
  std::ofstream(ck / ".latest.tmp.99999999") << "step-000";
  // a pinned copy that `latest` names (a writer died in the middle of the fallback) is the checkpoint
  fs::copy(ck / "step-00000008", ck / ".pin-step-00000008-99999998", fs::copy_options::recursive);
  std::ofstream(ck / "latest", std::ios::trunc) << ".pin-step-00000008-99999998\n";
  std::ofstream(ck / "unrelated.txt") << "the user's";
  {
    CheckpointDir d(ck.string(), resume_spec(), false);
  }
  std::vector<std::string> left;
  for (auto& e : fs::directory_iterator(ck)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{".pin-step-00000008-99999998", "latest", "lock", "step-00000002",
                                            "step-00000005", "step-00000008", "unrelated.txt"}));
  EXPECT_EQ(find_checkpoint(ck.string()).step, 8);
  // the next checkpoint moves `latest` off the pinned copy, which then goes too
  Spec s = resume_spec();
  s.train.steps = 10;
  run_into(s, ck.string(), false, ck.string());
  EXPECT_FALSE(fs::exists(ck / ".pin-step-00000008-99999998"));
  EXPECT_EQ(find_checkpoint(ck.string()).step, 9);
}

// The weight layout is storage only (model.weight_layout, docs/zenflow.md): a zenflow checkpoint
// holds the logical (out, in) layout, so one written with the blocks' weights stored (in, out)
// resumes with them stored (out, in), and the other way round. The two layouts take different
// BLAS calls (docs/zenflow.md), which round differently, so the resumed run is not bitwise the one
// that kept the layout, on any OpenBLAS kernel: it must agree with it to within what three steps
// of that rounding make (largest, relative to a tensor's largest value, on a bias that starts at 0;
// tests/README.md), so the bound 1e-4 is wider than the default, and still far below what a weight
// or moment read transposed or out of place makes (the order of the values themselves).
TEST(CheckpointLayout, ResumesUnderTheOtherWeightLayout) {
  TempDir tmp("zf_ckpt_layout");
  const std::string text = (tmp.p / "text.txt").string();
  {
    std::ofstream out(text);
    for (int i = 0; i < 200; ++i) out << "verse " << i << ": and the checkpoint was written, and it was good.\n";
  }
  for (const std::string from : {"in_out", "out_in"}) {
    const std::string to = from == "in_out" ? "out_in" : "in_out";
    SCOPED_TRACE("written " + from + ", resumed " + to);
    const std::string ck = (tmp.p / from).string();
    Spec w = tiny_gpt(text, 9);
    w.model.weight_layout = from;
    run_with(w, ck, 3, "");  // steps 2, 5, 8
    Spec r = tiny_gpt(text, 12);
    r.model.weight_layout = to;
    const Weights resumed = run_with(r, "", 0, ck);
    r.model.weight_layout = from;
    const Weights kept = run_with(r, "", 0, ck), full = run_with(r, "", 0, "");
    EXPECT_EQ(first_difference(kept, full), "") << "resumed in its own layout: bitwise";
    ASSERT_EQ(resumed.size(), full.size());
    for (auto& [name, v] : full) {
      SCOPED_TRACE(name);
      const std::vector<float>& a = resumed.at(name);
      ASSERT_EQ(a.size(), v.size());
      double scale = 0, diff = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        scale = std::max(scale, (double)std::fabs(v[i]));
        diff = std::max(diff, std::fabs((double)a[i] - v[i]));
      }
      EXPECT_LE(diff, 1e-4 * scale) << "max |diff| " << diff << " vs max |w| " << scale;
    }
  }
}

}  // namespace
}  // namespace zf::test
