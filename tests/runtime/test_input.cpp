// Input reliability (issue 17): user files that are not regular files (FIFOs, directories,
// symbolic link loops) are refused without blocking; JSON numbers out of range and other JSON
// errors name the file and the field, with short excerpts; spec values that would overflow or that
// the build cannot honour are refused; DeepSpeed-config errors name the DeepSpeed file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <initializer_list>
#include <string>

#include "codelets/codelets.hpp"
#include "graphs/train/memory_estimate.hpp"
#include "graphs/schema/spec.hpp"
#include "models/data/idx.hpp"
#include "models/data/text.hpp"
#include "runtime/calibration.hpp"
#include "runtime/error.hpp"
#include "runtime/input_file.hpp"
#include "runtime/json_input.hpp"
#include "test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using zf::test::TempDir;
using zf::test::expect_input_error;


// ---- files that are not regular files: an error at once, never a blocked open() or read()
TEST(InputFile, FifoIsRefusedWithoutBlocking) {
  TempDir d;
  const std::string p = d.path("pipe");
  ASSERT_EQ(mkfifo(p.c_str(), 0600), 0);
  // without the checks, open() of a FIFO with no writer blocks forever (the test would hang)
  expect_input_error([&] { zf::read_input_file(p, p); }, {p, "FIFO", "expected a regular file"});
  expect_input_error([&] { zf::load_text_split(p, "spec.json: data.path"); }, {"data.path", p, "FIFO"});
  expect_input_error([&] { zf::load_kjv(p, "spec.json: data.path"); }, {"data.path", p, "FIFO"});
  const std::string lab = d.file("labels", "");
  expect_input_error([&] { zf::load_idx_pair(p, lab, 0, 10); }, {p, "FIFO"});
}

TEST(InputFile, DirectoryAndSymlinkLoop) {
  TempDir d;
  fs::create_directory(d.path("dir"));
  expect_input_error([&] { zf::read_input_file(d.path("dir"), d.path("dir")); }, {"a directory"});
  fs::create_symlink(d.path("loop-a"), d.path("loop-b"));
  fs::create_symlink(d.path("loop-b"), d.path("loop-a"));
  // std::filesystem::exists() throws filesystem_error on a loop (an internal error, exit 1)
  expect_input_error([&] { zf::load_text_split(d.path("loop-a"), "s.json: data.path"); }, {"loop-a", "symbolic links"});
  expect_input_error([&] { zf::load_idx_pair(d.path("loop-a"), d.path("loop-b"), 0, 10); }, {"loop-a", "symbolic links"});
  expect_input_error([&] { zf::read_input_file(d.path("none"), d.path("none")); }, {"none", "file not found"});
}

TEST(InputFile, RegularFileReads) {
  TempDir d;
  const std::string p = d.file("t.txt", "hello\n");
  auto v = zf::read_input_file(p, p);
  EXPECT_EQ(std::string(v.begin(), v.end()), "hello\n");
}

// ---- JSON: field paths, numbers out of range, short excerpts, depth
TEST(JsonInput, NumberOutOfRangeNamesFileAndField) {
  expect_input_error([] { zf::parse_json_input(R"({"optimizer": {"lr": 1e400}})", "a.json"); },
                     {"a.json: optimizer.lr", "1e400", "out of range"});
  expect_input_error([] { zf::parse_json_input(R"({"o": {"betas": [0.9, -1e999]}})", "b.json"); },
                     {"b.json: o.betas[1]", "out of range"});
  expect_input_error([] { zf::parse_json_input(R"([1, [2, 3], {"x": [4, 1e400]}])", "c.json"); },
                     {"c.json: [2].x[1]"});
}

TEST(JsonInput, SpecFileWithOutOfRangeNumber) {
  TempDir d;
  const std::string p = d.file("s.json", R"({"optimizer": {"lr": 1e400}})");
  expect_input_error([&] { zf::load_spec(p, {}); }, {"s.json: optimizer.lr", "out of range"});
}

TEST(JsonInput, LongInputIsNotEchoed) {
  const std::string text = "{\"name\": \"" + std::string(1 << 20, 'a');  // unterminated string
  try {
    zf::parse_json_input(text, "long.json");
    ADD_FAILURE() << "no error";
  } catch (const zf::InputError& e) {
    const std::string m = e.what();
    EXPECT_LT(m.size(), 600u) << m.substr(0, 600);
    EXPECT_NE(m.find("long.json: name"), std::string::npos) << m;
    EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;
  }
  EXPECT_EQ(zf::excerpt("abc", 80), "abc");
  EXPECT_EQ(zf::excerpt(std::string(100, 'x'), 10), std::string(10, 'x') + "... (100 characters)");
}

// A key or token with control characters: the message shows them as \xNN, whole (what() is a C
// string, so a raw NUL would end it) and without raw terminal escapes.
TEST(JsonInput, ControlCharactersAreWrittenOut) {
  try {
    zf::parse_json_input("{\"k\\u0000\\u001b[31m\": {\"x\": tru}}", "ctl.json");
    ADD_FAILURE() << "no error";
  } catch (const zf::InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ctl.json: k\\x00\\x1b[31m.x"), std::string::npos) << m;
    EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;
    EXPECT_EQ(m, e.where() + ": " + e.message());
    for (const char c : m) EXPECT_FALSE((unsigned char)c < 0x20 && c != '\n' && c != '\t') << m;
  }
  EXPECT_EQ(zf::printable(std::string("a\0b\x7f\n\t", 6)), "a\\x00b\\x7f\n\t");
}

TEST(JsonInput, DepthLimit) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_input_error([&] { zf::parse_json_input(deep, "deep.json"); }, {"deep.json", "nested deeper than 256"});
  EXPECT_NO_THROW(zf::parse_json_input(std::string(200, '[') + std::string(200, ']'), "ok.json"));
}

TEST(JsonInput, ValidDocumentParses) {
  json j = zf::parse_json_input(R"({"a": [1, 2.5, "x", null, true, {"b": {}}], "c": -3})", "ok.json");
  EXPECT_EQ(j["a"][1].get<double>(), 2.5);
  EXPECT_EQ(j["c"].get<int>(), -3);
  EXPECT_TRUE(j["a"][5]["b"].is_object());
}

// ---- spec values
TEST(SpecInput, CudaWorkersOnCpuBuild) {
#ifdef ZF_USE_CUDA
  GTEST_SKIP() << "a CUDA build accepts runtime.cuda_workers > 0";
#else
  expect_input_error([] { zf::parse_spec(json{{"runtime", {{"cuda_workers", 1}}}}, "s.json"); },
                     {"s.json: runtime.cuda_workers", "no CUDA"});
  EXPECT_NO_THROW(zf::parse_spec(json{{"runtime", {{"cuda_workers", -1}}}}, "s.json"));
  EXPECT_NO_THROW(zf::parse_spec(json{{"runtime", {{"cuda_workers", 0}}}}, "s.json"));
#endif
}

TEST(SpecInput, HugeIntervalsAreRefusedNotOverflowed) {
  const json base = {{"strategy", "zenflow"}};
  for (const char* k : {"select_interval", "update_interval"}) {
    json j = base;
    j["zenflow"] = {{"select_strategy", "epoch"}, {k, 4611686018427387904ull}};
    if (std::string(k) == "update_interval") j["zenflow"]["select_interval"] = 1;
    expect_input_error([&] { zf::parse_spec(j, "s.json"); }, {std::string("s.json: zenflow.") + k, "outside [1, 2147483647]"});
  }
  json ok = base;
  ok["zenflow"] = {{"select_strategy", "epoch"}, {"select_interval", 2147483647}};
  zf::Spec s = zf::parse_spec(ok, "s.json");
  // the largest interval times a large epoch still fits an int64
  EXPECT_EQ(zf::select_interval_steps(s, 1 << 30), int64_t(2147483647) << 30);
}

// zenflow.semantics: "zenflow" or "deepspeed"; "deepspeed" refused where it is not implemented
// (update_interval "auto", reset_host_moments, fp16), accepted with gradient_clipping
TEST(SpecInput, ZenFlowSemantics) {
  const json base = {{"strategy", "zenflow"},
                     {"zenflow", {{"update_interval", 4}, {"select_strategy", "step"}, {"select_interval", 8}}}};
  EXPECT_EQ(zf::parse_spec(base, "s.json").zenflow.semantics, "zenflow");
  json ds = base;
  ds["zenflow"]["semantics"] = "deepspeed";
  const zf::Spec s = zf::parse_spec(ds, "s.json");
  EXPECT_TRUE(s.zenflow.deepspeed_rules());
  EXPECT_EQ(s.to_json()["zenflow"]["semantics"], "deepspeed");  // a checkpoint's spec keeps it
  EXPECT_FALSE(zf::parse_spec(base, "s.json").to_json()["zenflow"].contains("semantics"));
  json bad = base;
  bad["zenflow"]["semantics"] = "pytorch";
  expect_input_error([&] { zf::parse_spec(bad, "s.json"); }, {"s.json: zenflow.semantics", "zenflow, deepspeed"});
  json au = ds;
  au["zenflow"]["update_interval"] = "auto";
  expect_input_error([&] { zf::parse_spec(au, "s.json"); }, {"s.json: zenflow.semantics", "update_interval"});
  json rh = ds;
  rh["zenflow"]["reset_host_moments"] = true;
  expect_input_error([&] { zf::parse_spec(rh, "s.json"); }, {"s.json: zenflow.semantics", "reset_host_moments"});
  json cl = ds;  // clipping: DeepSpeed's rule (docs/zenflow.md), accepted
  cl["gradient_clipping"] = 1.0;
  EXPECT_DOUBLE_EQ(zf::parse_spec(cl, "s.json").gradient_clipping, 1.0);
  json fp = ds;
  fp["precision"] = "fp16";
  expect_input_error([&] { zf::parse_spec(fp, "s.json"); }, {"s.json: zenflow.semantics", "fp16"});
}

// A DeepSpeed config's zenflow block may ask for DeepSpeed's rules; --set may too
TEST(DeepSpeedInput, ZenFlowSemanticsFromTheConfigOrSet) {
  TempDir d;
  const std::string spec = std::string(ZF_SOURCE_DIR) + "/graphs/specs/mlp-fashion.json";
  json ds = json::parse(R"({"train_batch_size": 16, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"}, "zenflow": {"topk_ratio": 0.1, "update_interval": 4}}})");
  const std::string plain = d.file("plain.json", ds.dump());
  EXPECT_EQ(zf::load_spec(spec, {}, plain).zenflow.semantics, "zenflow");
  EXPECT_EQ(zf::load_spec(spec, {"zenflow.semantics=deepspeed"}, plain).zenflow.semantics, "deepspeed");
  ds["zero_optimization"]["zenflow"]["semantics"] = "deepspeed";
  EXPECT_EQ(zf::load_spec(spec, {}, d.file("ds.json", ds.dump())).zenflow.semantics, "deepspeed");
  ds["zero_optimization"]["zenflow"]["semantics"] = "torch";
  const std::string bad = d.file("bad.json", ds.dump());
  expect_input_error([&] { zf::load_spec(spec, {}, bad); }, {bad + ": zero_optimization.zenflow.semantics"});
}

// ---- DeepSpeed: errors about its values name the DeepSpeed file
TEST(DeepSpeedInput, BetasNameTheDeepSpeedFile) {
  TempDir d;
  const std::string spec = d.file("spec.json", R"({"name": "x"})");
  const std::string ds = d.file("ds.json", R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.5]}}})");
  expect_input_error([&] { zf::load_spec(spec, {}, ds); }, {"ds.json: optimizer.params.betas[1]", "[0, 1)"});
  const std::string ds2 = d.file("ds2.json", R"({"optimizer": {"type": "AdamW", "params": {"betas": "x"}}})");
  expect_input_error([&] { zf::load_spec(spec, {}, ds2); }, {"ds2.json: optimizer.params.betas"});
}

TEST(DeepSpeedInput, BatchSizeOriginIsTheDeepSpeedFile) {
  TempDir d;
  const std::string spec = d.file("spec.json", R"({"name": "x"})");
  const std::string ds = d.file("ds.json", R"({"train_batch_size": 4096})");
  zf::Spec s = zf::load_spec(spec, {}, ds);
  EXPECT_EQ(s.train.batch_size, 4096);
  EXPECT_EQ(s.where("train.batch_size"), ds + ": train_batch_size (train.batch_size)");
  EXPECT_EQ(s.where("train.steps"), spec + ": train.steps");
  // a --set of the field makes the spec file its origin again
  zf::Spec o = zf::load_spec(spec, {"train.batch_size=8"}, ds);
  EXPECT_EQ(o.where("train.batch_size"), spec + ": train.batch_size");
}

// ---- the memory estimate: absurd sizes are refused before anything is allocated
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TEST(MemoryEstimate, ShippedSpecsAreSmall) {
  for (const char* name : {"mlp-fashion.json", "gpt-kjv.json", "gpt-kjv-main.json", "gpt-kjv-testament.json"}) {
    zf::Spec s = zf::load_spec(std::string(ZF_SOURCE_DIR) + "/graphs/specs/" + name, {});
    zf::MemoryEstimate e = zf::estimate_memory(s, 100000);
    EXPECT_LT(e.total(), 4 * kGiB) << name << ": " << e.describe();
    EXPECT_GT(e.params, 0) << name;
    EXPECT_GT(e.activations, 0) << name;
  }
}

TEST(MemoryEstimate, CountsParametersExactly) {
  zf::Spec mlp = zf::parse_spec(json{{"model", {{"hidden", {8}}}}}, "s.json");
  EXPECT_EQ(zf::estimate_memory(mlp, -1).param_count, 784 * 8 + 8 + 8 * 10 + 10);
  zf::Spec gpt = zf::parse_spec(json{{"model", {{"type", "gpt"}, {"n_layer", 2}, {"n_embd", 16}, {"n_head", 2}, {"context", 8}}},
                                     {"data", {{"dataset", "kjv"}}}},
                                "s.json");
  // wte, wpe, per block 12 C^2 + 13 C, ln_f, lm_head
  EXPECT_EQ(zf::estimate_memory(gpt, -1).param_count, 256 * 16 + 8 * 16 + 2 * (12 * 16 * 16 + 13 * 16) + 2 * 16 + 256 * 16);
}

// gradient accumulation: one more gradient-sized buffer, and the activations of a micro-batch
// (batch / accumulation steps), not of the whole batch
TEST(MemoryEstimate, GradientAccumulation) {
  const json model = {{"hidden", {64}}};
  zf::Spec one = zf::parse_spec(json{{"model", model}, {"train", {{"batch_size", 16}}}}, "s.json");
  zf::Spec four = zf::parse_spec(json{{"model", model}, {"train", {{"batch_size", 16}, {"gradient_accumulation_steps", 4}}}},
                                 "s.json");
  zf::Spec micro = zf::parse_spec(json{{"model", model}, {"train", {{"batch_size", 4}}}}, "s.json");
  const zf::MemoryEstimate e1 = zf::estimate_memory(one, -1), e4 = zf::estimate_memory(four, -1),
                           em = zf::estimate_memory(micro, -1);
  EXPECT_DOUBLE_EQ(e4.params, 1.5 * e1.params);  // values, gradients, accumulated gradients
  EXPECT_DOUBLE_EQ(e4.activations, em.activations);
  EXPECT_LT(e4.activations, e1.activations);
}

// train.activation_checkpointing: the block buffers of min(N, L) blocks and the segments' outputs,
// exactly: every block's buffers less (L - 1) blocks' plus 8 outputs (every block; L = 8), less
// (L - 3) blocks' plus 3 outputs (every 3); the rest of the estimate unchanged
TEST(MemoryEstimate, ActivationCheckpointingHoldsFewerBlocks) {
  auto est = [](const json& ck) {
    json j = {{"model", {{"type", "gpt"}, {"n_layer", 8}, {"n_embd", 16}, {"n_head", 2}, {"context", 8}}},
              {"data", {{"dataset", "kjv"}}}, {"train", {{"batch_size", 4}, {"eval_batch_size", 4}}}};
    if (!ck.is_null()) j["train"]["activation_checkpointing"] = ck;
    return zf::estimate_memory(zf::parse_spec(j, "s.json"), -1);
  };
  const zf::MemoryEstimate none = est(nullptr), every = est("every_layer"), three = est(3);
  // floats of a block per sequence (T 8 positions of 16 C, H = 2 log-sum-exps of the attention's
  // rows, 4 statistics), of an output per sequence (T C); 4 bytes; 4 sequences (batch 4; the
  // evaluation batch of 4 shares its buffers)
  const double C = 16, T = 8, block = T * (16 * C + 2 + 4), out = T * C, seqs = 4;
  EXPECT_DOUBLE_EQ(none.activations - every.activations, 4 * seqs * (7 * block - 8 * out));
  EXPECT_DOUBLE_EQ(none.activations - three.activations, 4 * seqs * (5 * block - 3 * out));
  EXPECT_DOUBLE_EQ(every.params + every.optimizer, none.params + none.optimizer);
}

// The attention keeps no (T, T) matrix: a GPT's and a Llama's activation buffers are linear in
// the context (twice the context, twice the bytes), and the attention's scratch per thread is a
// 64-row block's P and dS (2 H 64 T floats) plus the sequence's operands, linear in T too.
TEST(MemoryEstimate, ActivationsAreLinearInTheContext) {
  auto est = [](int T) {
    json j = {{"model", {{"type", "gpt"}, {"n_layer", 4}, {"n_embd", 64}, {"n_head", 4}, {"context", T}}},
              {"data", {{"dataset", "kjv"}}}, {"train", {{"batch_size", 2}, {"eval_batch_size", 2}}}};
    return zf::estimate_memory(zf::parse_spec(j, "s.json"), -1);
  };
  const zf::MemoryEstimate a = est(1024), b = est(2048);
  EXPECT_DOUBLE_EQ(b.activations, 2 * a.activations);
  EXPECT_DOUBLE_EQ(b.device_activations, 2 * a.device_activations);
  const double H = 4, T = 2048, hs = 16;
  const double per_thread = (double)zf::attention_workspace_bytes(2, 2048, 4, 4, 16, true, false, false);
  // P and dS in fp32, at most their bf16 copies and 44 bytes per element of a (T, H hs) operand
  // (fp32: q, k, v and dout packed, their block copies, and dq, dk, dv)
  EXPECT_GE(per_thread, 2 * 4 * H * 64 * T);
  EXPECT_LE(per_thread, 2 * 4 * H * 64 * T + 2 * 2 * H * 64 * T + 44 * T * H * hs);
  EXPECT_GT(b.workspace, 0.0);
  EXPECT_DOUBLE_EQ(b.total(), b.params + b.optimizer + b.activations + b.workspace + b.records + b.data);
}

// zero_optimization.stage >= 1 on R ranks: each rank holds 1/R of the host optimizer state
TEST(MemoryEstimate, ZeroStagePartitionsTheHostState) {
  const json model = {{"hidden", {64}}};
  for (const char* strategy : {"zero-offload", "zenflow"}) {
    SCOPED_TRACE(strategy);
    json j = {{"model", model}, {"strategy", strategy}, {"train", {{"batch_size", 16}}}};
    const zf::Spec s0 = zf::parse_spec(j, "s.json");
    j["zero_optimization"] = {{"stage", 2}};
    const zf::Spec s2 = zf::parse_spec(j, "s.json");
    const double P = (double)zf::estimate_memory(s0, -1).param_count;
    const double whole = zf::estimate_memory(s0, -1, 4).optimizer;
    const double part = zf::estimate_memory(s2, -1, 4).optimizer;
    // the selected columns' moments: 2 x topk_ratio floats per parameter
    const double device = std::string(strategy) == "zenflow" ? 4 * P * 2 * s0.zenflow.topk_ratio : 0;
    EXPECT_DOUBLE_EQ(part - device, (whole - device) / 4);
    EXPECT_DOUBLE_EQ(zf::estimate_memory(s2, -1, 1).optimizer, whole);  // one process: stage 0
  }
}

// Twin-Flow (offload_optimizer.ratio): the device's sub-groups count device-adam's state, the
// host's zero-offload's; ratio 1 is zero-offload, ratio 0 device-adam
TEST(MemoryEstimate, TwinFlowSplitsTheOptimizerState) {
  const json model = {{"hidden", {64}}};  // 4 parameter tensors
  auto optimizer = [&](const char* strategy, double ratio, int64_t sub_group_size) {
    json j = {{"model", model}, {"strategy", strategy}, {"train", {{"batch_size", 16}}}};
    if (ratio >= 0) j["zero_optimization"] = {{"sub_group_size", sub_group_size}, {"offload_optimizer", {{"ratio", ratio}}}};
    return zf::estimate_memory(zf::parse_spec(j, "s.json"), -1).optimizer;
  };
  const double P = (double)zf::estimate_memory(zf::parse_spec(json{{"model", model}}, "s.json"), -1).param_count;
  EXPECT_DOUBLE_EQ(optimizer("zero-offload", 1.0, 0), optimizer("zero-offload", -1, 0));
  EXPECT_DOUBLE_EQ(optimizer("zero-offload", 1.0, 0), 4 * P * 4);  // master, gradient, moments
  EXPECT_DOUBLE_EQ(optimizer("zero-offload", 0.0, 0), optimizer("device-adam", -1, 0));
  // 4 sub-groups (sub_group_size 0: one per tensor), ratio 0.5: 2 on the device
  EXPECT_DOUBLE_EQ(optimizer("zero-offload", 0.5, 0), 4 * P * (0.5 * 4 + 0.5 * 2));
  // DeepSpeed's default sub_group_size (1e9) makes this model one sub-group: int(0.5 x 1) = 0 on the device
  EXPECT_DOUBLE_EQ(optimizer("zero-offload", 0.5, 1000000000), optimizer("zero-offload", 1.0, 0));
}

// the estimate exceeds what any machine here has; the check names the fields behind it
void expect_refused(const zf::Spec& s, int64_t steps, std::initializer_list<std::string> parts) {
  zf::MemoryEstimate e = zf::estimate_memory(s, steps);
  ASSERT_GT(e.total(), 100 * kGiB) << e.describe();
  ASSERT_LT((double)zf::available_memory(), e.total()) << "a machine with more memory than " << e.describe();
  expect_input_error([&] { zf::check_memory(s, e); }, parts);
}

TEST(MemoryEstimate, AbsurdSpecsAreRefused) {
  zf::Spec gpt = zf::parse_spec(json{{"model", {{"type", "gpt"}, {"n_layer", 64}, {"n_embd", 8192}, {"n_head", 64}, {"context", 8192}}},
                                     {"data", {{"dataset", "kjv"}}}},
                                "big.json");
  // its activations (the attention's B x H x T x T per layer) are the largest part
  expect_refused(gpt, -1, {"big.json: ", "model.n_layer", "model.n_embd", "model.context", "GiB", "MemAvailable"});
  zf::Spec mlp = zf::parse_spec(json{{"model", {{"hidden", {65536, 65536, 65536}}}}}, "wide.json");
  expect_refused(mlp, -1, {"wide.json: model.hidden", "parameters"});
  zf::Spec steps = zf::parse_spec(json{{"train", {{"steps", 2147483647}}}}, "long.json");
  expect_refused(steps, 2147483647, {"long.json: train.steps", "2147483647 steps", "per-step records"});
  zf::Spec acts = zf::parse_spec(json{{"model", {{"type", "gpt"}, {"n_layer", 8}, {"n_embd", 64}, {"n_head", 64}, {"context", 8192}}},
                                      {"data", {{"dataset", "kjv"}}},
                                      {"train", {{"batch_size", 1 << 20}}}},
                                 "acts.json");
  expect_refused(acts, -1, {"acts.json: train.batch_size", "model.context"});
}

TEST(MemoryEstimate, SkipVariable) {
  zf::Spec mlp = zf::parse_spec(json{{"model", {{"hidden", {65536, 65536, 65536}}}}}, "wide.json");
  setenv("ZF_SKIP_MEMORY_CHECK", "1", 1);
  EXPECT_NO_THROW(zf::check_memory(mlp, zf::estimate_memory(mlp, -1)));
  unsetenv("ZF_SKIP_MEMORY_CHECK");
  EXPECT_THROW(zf::check_memory(mlp, zf::estimate_memory(mlp, -1)), zf::InputError);
}

// every test process has a StarPU calibration home of its own (tests/test_main.cpp)
TEST(TestMain, PrivateStarpuHome) {
  const char* shared = std::getenv("ZF_TEST_SHARED_STARPU_HOME");
  if (shared && std::string(shared) == "1") GTEST_SKIP() << "ZF_TEST_SHARED_STARPU_HOME=1";
  const char* home = std::getenv("STARPU_HOME");
  ASSERT_NE(home, nullptr);
  EXPECT_NE(std::string(home).find("/starpu-home-"), std::string::npos) << home;
  EXPECT_TRUE(fs::is_directory(home)) << home;
  EXPECT_EQ(std::getenv("STARPU_PERF_MODEL_DIR"), nullptr);
}

// ---- StarPU's calibration files: damaged ones are removed before starpu_init (which aborts on them)
class Calibration : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(d_.path("s/bus"));
    fs::create_directories(d_.path("s/codelets/45"));
    put("bus/vm.affinity", "# GPU\tNUMA0\t\n");
    put("bus/vm.config", "# Current configuration\n2 # Number of CPUs\n1 # NUMA\n0 # CUDA\n0 # OpenCL\n0 # MIC\n0 # MPI\n");
    put("bus/vm.bandwidth", "# to 0\t\tto 1\n0.000000e+00\tnan\nnan\tnan\n");
    put("bus/vm.latency", "# to 0\t\tto 1\n0.000000e+00\tnan\nnan\tnan\n");
    put("bus/vm.platform.xml", "<?xml version='1.0'?>\n<platform/>\n");
    put("bus/other.config", "# Current configuration\n4\n1\n0\n0\n0\n0\n");
    put("codelets/45/zf_matmul_fwd.vm", "##################\n# Performance Model Version\n45\n\n# COMBs\n1\n");
  }
  void put(const std::string& rel, const std::string& text) { d_.file("s/" + rel, text); }
  bool has(const std::string& rel) const { return fs::exists(d_.path("s/" + rel)); }
  int repair(std::string* log = nullptr) {
    std::ostringstream os;
    const int n = zf::repair_calibration(d_.path("s"), os);
    if (log) *log = os.str();
    return n;
  }
  TempDir d_;
};

TEST_F(Calibration, IntactFilesAreKept) {
  EXPECT_EQ(repair(), 0);
  EXPECT_TRUE(has("bus/vm.affinity") && has("bus/vm.config") && has("codelets/45/zf_matmul_fwd.vm"));
  EXPECT_EQ(zf::repair_calibration(d_.path("no-such-dir"), std::cerr), 0);
}

TEST_F(Calibration, EmptyAffinityRemovesThatHostsBusFiles) {
  put("bus/vm.affinity", "");  // StarPU: check_bus_affinity_file assertion, exit 134
  std::string log;
  EXPECT_EQ(repair(&log), 5);
  for (const char* f : {"vm.affinity", "vm.config", "vm.bandwidth", "vm.latency", "vm.platform.xml"})
    EXPECT_FALSE(has(std::string("bus/") + f)) << f;
  EXPECT_TRUE(has("bus/other.config"));  // another host's set stays
  EXPECT_NE(log.find("vm.affinity is damaged (empty)"), std::string::npos) << log;
}

TEST_F(Calibration, GarbledFilesAreFound) {
  for (auto [file, text] : std::vector<std::pair<std::string, std::string>>{
           {"bus/vm.config", "garbage xyz\n"},   // StarPU: check_bus_config_file assertion
           {"bus/vm.config", "2\n1\n"},          // cut short
           {"bus/vm.affinity", "0 1\n"},         // no header
           {"bus/vm.affinity", "# GPU\nx y\n"},
           {"bus/vm.bandwidth", "# to 0\n0.1 zz\n"},
           {"bus/vm.latency", std::string("# to 0\n\0\0", 10)},
           {"bus/vm.platform.xml", "junk"},
       }) {
    SetUp();
    put(file, text);
    EXPECT_GE(repair(), 1) << file << ": " << text;
    EXPECT_FALSE(has(file)) << file;
  }
}

TEST_F(Calibration, PerformanceModelOfAnotherVersionOrEmpty) {
  put("codelets/45/zf_matmul_fwd.vm", "xx yy\n");  // StarPU: parse_model_file version assertion
  put("codelets/45/zf_adam_step.vm", "");
  put("codelets/45/zf_softmax.vm", "# Performance Model Version\n45\n");
  EXPECT_EQ(repair(), 2);
  EXPECT_FALSE(has("codelets/45/zf_matmul_fwd.vm"));
  EXPECT_FALSE(has("codelets/45/zf_adam_step.vm"));
  EXPECT_TRUE(has("codelets/45/zf_softmax.vm"));
  EXPECT_TRUE(has("bus/vm.affinity"));
}

}  // namespace
