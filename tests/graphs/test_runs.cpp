// Whole-run behaviour: ZenFlow's accuracy parity with device-adam, checkpoint/resume (bitwise
// equal to an uninterrupted run, in-flight host updates included), refused checkpoints, and Paje
// traces accepted by pajeng's pj_dump. DeepSpeed configs: test_deepspeed_config.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "graphs/train/checkpoint.hpp"
#include "graphs/schema/spec.hpp"
#include "test_helpers.hpp"

namespace zf::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using TmpDir = TempDir;  // the name these tests were written with

// ---------------------------------------------------------------- accuracy parity
TEST(ZenFlowAccuracy, WithinOnePointOfDeviceAdamOnFashionMnist) {
  // The default spec (8 epochs of the full training set). zenflow: topk 0.1, update_interval 4,
  // overlap on (staleness 1 interval). Both accuracies are recorded (RecordProperty); tests/README.md
  // has the values of the last run.
  Spec s = load_spec(std::string(ZF_SOURCE_DIR) + "/graphs/specs/mlp-fashion.json", {"log.every=0"});
  s.strategy = "device-adam";
  json m_dev, m_zf;
  train_and_capture(s, &m_dev, true);
  s.strategy = "zenflow";
  s.zenflow.topk_ratio = 0.1;
  s.zenflow.update_interval = 4;
  s.zenflow.overlap_step = true;
  train_and_capture(s, &m_zf, true);
  const double a_dev = m_dev["final"]["eval_accuracy"], a_zf = m_zf["final"]["eval_accuracy"];
  RecordProperty("device_adam_accuracy", std::to_string(a_dev));
  RecordProperty("zenflow_accuracy", std::to_string(a_zf));
  EXPECT_GE(a_dev, 0.87);
  EXPECT_LE(std::fabs(a_zf - a_dev), 0.01) << "device-adam " << a_dev << ", zenflow " << a_zf;
  EXPECT_EQ(m_zf["staleness"]["max_intervals"].get<int64_t>(), 1);
}

// ---------------------------------------------------------------- checkpoints
struct ResumeCase {
  const char* name;
  std::function<void(Spec&)> set;
};

class Resume : public ::testing::TestWithParam<int> {};

TEST_P(Resume, BitwiseEqualToUninterruptedRun) {
  auto zenflow_overlap = [](Spec& s) {  // host updates in flight at the checkpoint (D = 2)
    s.strategy = "zenflow";
    s.zenflow.update_interval = 3;
    s.zenflow.overlap_step = true;
    s.zenflow.max_staleness = 2;
    s.zenflow.select_strategy = "step";
    s.zenflow.select_interval = 9;
  };
  const ResumeCase cases[] = {
      {"device-adam", [](Spec& s) { s.strategy = "device-adam"; }},
      {"zero-offload", [](Spec& s) { s.strategy = "zero-offload"; }},
      {"zero-offload-dpu", [](Spec& s) { s.strategy = "zero-offload-dpu"; }},
      {"zenflow-overlap", zenflow_overlap},
      {"zenflow-auto", [](Spec& s) {
         s.strategy = "zenflow";
         s.zenflow.overlap_step = true;
         s.zenflow.full_warm_up_rounds = 2;
       }},
      // bf16: device-adam's device-side master, bf16 result buffers in flight
      {"device-adam-bf16", [](Spec& s) {
         s.strategy = "device-adam";
         s.precision = "bf16";
       }},
      {"zero-offload-dpu-bf16", [](Spec& s) {
         s.strategy = "zero-offload-dpu";
         s.precision = "bf16";
       }},
      {"zenflow-overlap-decaying-lr", [&](Spec& s) {  // the schedule resumes at the checkpoint's step
         zenflow_overlap(s);
         s.scheduler.type = "WarmupDecayLR";
         s.scheduler.warmup_num_steps = 4;
         s.scheduler.warmup_type = "linear";
         s.scheduler.total_num_steps = 31;
       }},
      {"zenflow-overlap-bf16", [&](Spec& s) {
         zenflow_overlap(s);
         s.precision = "bf16";
       }},
      // bf16 with zenflow.offload: the selected columns' fp32 masters (and moments) on the host
      // between their device steps, a selection's masters held at the checkpoint of step 16
      {"zenflow-offload-bf16", [&](Spec& s) {
         zenflow_overlap(s);
         s.zenflow.offload = true;
         s.precision = "bf16";
       }},
      // gradient_clipping (norms here are 0.3 to 1.3: some steps clip) and accumulation
      {"device-adam-clip-accumulate", [](Spec& s) {
         s.gradient_clipping = 0.6;
         s.train.gradient_accumulation_steps = 4;
       }},
      {"zero-offload-dpu-clip", [](Spec& s) {
         s.strategy = "zero-offload-dpu";
         s.gradient_clipping = 0.6;
       }},
      {"zenflow-overlap-clip", [&](Spec& s) {
         zenflow_overlap(s);
         s.gradient_clipping = 0.45;
       }},
      // fp16 with a first scale that overflows (skipped steps before and after the checkpoints)
      // and growth every 5 good steps: the scaler's state and the applied-step count resume
      {"zenflow-overlap-fp16", [&](Spec& s) {
         zenflow_overlap(s);
         s.precision = "fp16";
         s.fp16.initial_scale_power = 24;
         s.fp16.loss_scale_window = 5;
       }},
      {"zero-offload-dpu-fp16", [](Spec& s) {
         s.strategy = "zero-offload-dpu";
         s.precision = "fp16";
         s.fp16.initial_scale_power = 24;
         s.fp16.loss_scale_window = 5;
       }},
      // semantics deepspeed: the 1-D warm-up moments (checkpoint at step 7, inside the warm-up),
      // the second host moment set, the selective step count, a host job in flight, no flush
      {"zenflow-deepspeed-overlap", [](Spec& s) {
         s.strategy = "zenflow";
         s.zenflow.semantics = "deepspeed";
         s.zenflow.update_interval = 3;
         s.zenflow.overlap_step = true;
         s.zenflow.full_warm_up_rounds = 10;
         s.zenflow.select_strategy = "step";
         s.zenflow.select_interval = 9;
       }},
      {"zenflow-deepspeed-sync", [](Spec& s) {
         s.strategy = "zenflow";
         s.zenflow.semantics = "deepspeed";
         s.zenflow.update_interval = 4;
         s.zenflow.full_warm_up_rounds = 2;
         s.zenflow.select_strategy = "step";
         s.zenflow.select_interval = 8;
       }},
      // semantics deepspeed with clipping: boundaries at 0, 1, 2 (warm-up), 6, 8, 10, 14, 17, 18, ...,
      // so every checkpoint (7, 15, 16) holds a partial window of the 1-D window sums; 0.45
      // clips some boundaries and not others (checked below)
      {"zenflow-deepspeed-overlap-clip", [](Spec& s) {
         s.strategy = "zenflow";
         s.zenflow.semantics = "deepspeed";
         s.zenflow.update_interval = 4;
         s.zenflow.overlap_step = true;
         s.zenflow.full_warm_up_rounds = 3;
         s.zenflow.select_strategy = "step";
         s.zenflow.select_interval = 9;
         s.gradient_clipping = 0.45;
       }},
  };
  const ResumeCase& c = cases[GetParam()];
  SCOPED_TRACE(c.name);
  Spec s = tiny_spec(31);
  s.runtime.tile_elems = 1024;
  c.set(s);
  json m_full, m_resumed;
  const Weights full = run_with(s, "", 0, "", &m_full);
  TmpDir d;
  const std::string ck = (d.p / "ck").string();
  s.train.steps = 17;  // checkpoints after steps 7 and 15 (every 8) and 16 (the last)
  run_with(s, ck, 8, "");
  ASSERT_TRUE(fs::exists(fs::path(ck) / "step-00000007"));
  ASSERT_TRUE(fs::exists(fs::path(ck) / "step-00000016"));
  s.train.steps = 31;
  EXPECT_EQ(run_with(s, "", 0, ck, &m_resumed), full) << "resumed from the latest checkpoint (step 16)";
  if (s.gradient_clipping > 0) {  // the case means something: some clip points clip, some do not
    const json& g = m_full["gradient_clipping"];
    EXPECT_GT(g["clipped_steps"].get<int64_t>(), 0);
    EXPECT_LT(g["clipped_steps"].get<int64_t>(), g["clip_points"].get<int64_t>());
    // and every clip point after the resume saw the full run's norm (a gradient window or
    // accumulator not restored changes a norm even where it does not change the clip)
    std::map<int64_t, float> full_norm;
    for (size_t i = 0; i < g["steps"].size(); ++i) full_norm[g["steps"][i].get<int64_t>()] = g["norms"][i].get<float>();
    const json& r = m_resumed["gradient_clipping"];
    ASSERT_FALSE(r["steps"].empty());
    for (size_t i = 0; i < r["steps"].size(); ++i) {
      const int64_t t = r["steps"][i].get<int64_t>();
      ASSERT_TRUE(full_norm.count(t)) << "clip point at step " << t << " only in the resumed run";
      EXPECT_EQ(r["norms"][i].get<float>(), full_norm[t]) << "clip point at step " << t;
    }
  }
  // fp16: the whole run's loss-scale history (skipped steps, scale changes, applied count)
  if (s.precision == "fp16") {
    ASSERT_FALSE(m_full["fp16"]["scale_changes"].empty()) << "the case should change the scale";
    EXPECT_EQ(m_resumed["fp16"], m_full["fp16"]);
  }
  EXPECT_EQ(run_with(s, "", 0, ck + "/step-00000007"), full) << "resumed from step 7";
}

INSTANTIATE_TEST_SUITE_P(Strategies, Resume, ::testing::Range(0, 18));

TEST(Checkpoint, CorruptTruncatedAndMismatchedAreRefused) {
  TmpDir d;
  const std::string ck = (d.p / "ck").string();
  Spec s = tiny_spec(4, "zero-offload");
  run_with(s, ck, 0, "");
  const fs::path step = fs::path(ck) / "step-00000003";
  s.train.steps = 8;
  // a different model shape
  Spec other = s;
  other.model.hidden = {16, 16};
  EXPECT_NE(input_error([&] { run_with(other, "", 0, ck); }).find("model"), std::string::npos);
  // a different strategy
  Spec dev = s;
  dev.strategy = "device-adam";
  EXPECT_NE(input_error([&] { run_with(dev, "", 0, ck); }).find("strategy"), std::string::npos);
  // a different learning-rate schedule
  Spec sch = s;
  sch.scheduler.type = "WarmupLR";
  EXPECT_NE(input_error([&] { run_with(sch, "", 0, ck); }).find("scheduler"), std::string::npos);
  // a different precision
  Spec b16 = s;
  b16.precision = "bf16";
  EXPECT_NE(input_error([&] { run_with(b16, "", 0, ck); }).find("precision"), std::string::npos);
  // one flipped byte in the data section: the CRC-32 check refuses it
  const fs::path st = step / "state.safetensors";
  {
    std::fstream f(st, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    char c;
    f.get(c);
    f.seekp(-5, std::ios::end);
    f.put((char)(c ^ 0x40));
  }
  EXPECT_NE(input_error([&] { run_with(s, "", 0, ck); }).find("checksum"), std::string::npos);
  // a truncated weights file (in an intact second checkpoint)
  const std::string ck2 = (d.p / "ck2").string();
  s.train.steps = 4;
  run_with(s, ck2, 0, "");
  s.train.steps = 8;
  const fs::path model = fs::path(ck2) / "step-00000003" / "model.safetensors";
  fs::resize_file(model, fs::file_size(model) - 100);
  EXPECT_NE(input_error([&] { run_with(s, "", 0, ck2); }).find("model.safetensors"), std::string::npos);
  // not a checkpoint
  EXPECT_NE(input_error([&] { run_with(s, "", 0, d.p.string()); }).find("not a checkpoint"), std::string::npos);
}

// ---------------------------------------------------------------- traces
TEST(Trace, PjDumpAcceptsTheTraceOfEveryStrategy) {
  if (std::system("command -v pj_dump >/dev/null 2>&1") != 0) GTEST_SKIP() << "pj_dump (Debian package pajeng) not installed";
  TmpDir d;
  for (const char* strat : {"device-adam", "zero-offload", "zero-offload-dpu", "zenflow"}) {
    SCOPED_TRACE(strat);
    Spec s = tiny_spec(12, strat);
    s.zenflow.update_interval = 4;
    s.zenflow.overlap_step = true;
    const std::string paje = (d.p / (std::string(strat) + ".paje")).string();
    RunOptions o;
    o.quiet = true;
    o.evaluate = false;
    o.trace_path = paje;
    run_training(s, o);
    const std::string dump = (d.p / "dump.txt").string();
    ASSERT_EQ(std::system(("pj_dump " + paje + " > " + dump + " 2>&1").c_str()), 0) << "pj_dump refused " << paje;
    std::ifstream in(dump);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("State, device "), std::string::npos);  // states on device workers
    EXPECT_NE(text.find("backward"), std::string::npos);
    if (std::string(strat) != "device-adam") {
      EXPECT_NE(text.find("adam.host"), std::string::npos);
    }
    if (std::string(strat) == "zenflow") {
      EXPECT_NE(text.find("merge: host update"), std::string::npos);
      EXPECT_NE(text.find("select"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace zf::test
