// DeepSpeed config import (graphs/schema, docs/spec.md): the example configs load, bf16/fp16 and
// the scheduler block keep DeepSpeed's meaning and defaults, batch sizes count the ranks, ZeRO
// stages map, and each violated constraint gets its error naming the DeepSpeed file.
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "graphs/schema/spec.hpp"
#include "test_helpers.hpp"

namespace zf::test {
namespace {

using json = nlohmann::json;
using TmpDir = TempDir;  // the name these tests were written with

// ---------------------------------------------------------------- DeepSpeed configs
TEST(DeepSpeedConfig, ExampleConfigOfTheAlgorithmDocLoads) {
  const std::string src = std::string(ZF_SOURCE_DIR);
  Spec s = load_spec(src + "/graphs/specs/mlp-fashion.json", {}, src + "/graphs/specs/ds-zenflow-example.json");
  EXPECT_EQ(s.strategy, "zenflow");
  EXPECT_EQ(s.train.batch_size, 32);
  EXPECT_DOUBLE_EQ(s.optimizer.lr, 2e-5);
  EXPECT_DOUBLE_EQ(s.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(s.zenflow.topk_ratio, 0.1);
  EXPECT_EQ(s.zenflow.update_interval, 4);
  EXPECT_TRUE(s.zenflow.overlap_step);
  EXPECT_EQ(s.zenflow.staleness(), 1);  // DeepSpeed's intended one-interval lag
  EXPECT_EQ(s.zenflow.select_strategy, "auto");
  EXPECT_DOUBLE_EQ(s.zenflow.pt_reserved_cores_perc, 0.5);
}

// "auto" (Hugging Face Trainer's placeholders) filled from the spec with its overrides, as the Trainer
// fills them from its arguments; an "auto" with nothing to fill it from is refused naming the field
TEST(DeepSpeedConfig, AutoValuesComeFromTheSpec) {
  TmpDir d;
  const std::string spec = d.file("s.json", R"({"precision": "bf16", "train": {"batch_size": 16, "steps": 30},
      "optimizer": {"lr": 0.0002, "weight_decay": 0.05}})");
  const json ds = json::parse(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
      "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                    "warmup_num_steps": "auto", "total_num_steps": "auto"}},
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": "auto"}})");
  const std::string p = d.file("ds.json", ds.dump());
  const Spec s = load_spec(spec, {"optimizer.lr=0.0005"}, p);
  EXPECT_EQ(s.train.batch_size, 16);
  EXPECT_EQ(s.train.gradient_accumulation_steps, 1);
  EXPECT_EQ(s.precision, "bf16");
  EXPECT_DOUBLE_EQ(s.optimizer.lr, 0.0005);  // the override's
  EXPECT_DOUBLE_EQ(s.optimizer.weight_decay, 0.05);
  EXPECT_EQ(s.scheduler.type, "WarmupDecayLR");
  EXPECT_DOUBLE_EQ(s.peak_lr(), 0.0005);
  EXPECT_EQ(s.scheduler.total_num_steps, 30);
  EXPECT_EQ(s.strategy, "zero-offload");
  const std::string no_steps = d.file("n.json", R"({"train": {"batch_size": 16, "epochs": 2}})");
  expect_input_error([&] { load_spec(no_steps, {}, p); },
                     {p + ": scheduler.params.total_num_steps", "\"auto\"", "--steps"});
  EXPECT_EQ(load_spec(no_steps, {"train.steps=12"}, p).train.steps, 12);  // --steps fills it
}

TEST(DeepSpeedConfig, Bf16EnabledSelectsBf16Precision) {
  TmpDir d;
  const std::string spec = std::string(ZF_SOURCE_DIR) + "/graphs/specs/mlp-fashion.json";
  const json on = json::parse(R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"}}})");
  EXPECT_EQ(load_spec(spec, {}, d.file("on.json", on.dump())).precision, "bf16");
  json off = on;
  off["bf16"]["enabled"] = false;
  EXPECT_EQ(load_spec(spec, {}, d.file("off.json", off.dump())).precision, "fp32");
  json bad = on;
  bad["bf16"]["enabled"] = "yes";
  const std::string p = d.file("bad.json", bad.dump());
  EXPECT_NE(input_error([&] { load_spec(spec, {}, p); }).find(p + ": bf16.enabled"), std::string::npos);
}

TEST(DeepSpeedConfig, Fp16EnabledSelectsFp16WithDeepSpeedsLossScalingKeys) {
  TmpDir d;
  const std::string spec = std::string(ZF_SOURCE_DIR) + "/graphs/specs/mlp-fashion.json";
  const json on = json::parse(R"({"fp16": {"enabled": true}, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"}}})");
  const Spec a = load_spec(spec, {}, d.file("on.json", on.dump()));
  EXPECT_EQ(a.precision, "fp16");
  // DeepSpeed's defaults (deepspeed/runtime/precision_config.py): dynamic, 2^16, 1000, 2, false, 1
  EXPECT_EQ(a.fp16.loss_scale, 0.0);
  EXPECT_EQ(a.fp16.initial_scale_power, 16);
  EXPECT_EQ(a.fp16.loss_scale_window, 1000);
  EXPECT_EQ(a.fp16.hysteresis, 2);
  EXPECT_FALSE(a.fp16.consecutive_hysteresis);
  EXPECT_EQ(a.fp16.min_loss_scale, 1);
  json full = on;
  full["fp16"] = json::parse(R"({"enabled": true, "auto_cast": false, "loss_scale": 0, "initial_scale_power": 12,
      "loss_scale_window": 500, "hysteresis": 4, "consecutive_hysteresis": true, "min_loss_scale": 2})");
  const Spec b = load_spec(spec, {}, d.file("full.json", full.dump()));
  EXPECT_EQ(b.fp16.initial_scale_power, 12);
  EXPECT_EQ(b.fp16.loss_scale_window, 500);
  EXPECT_EQ(b.fp16.hysteresis, 4);
  EXPECT_TRUE(b.fp16.consecutive_hysteresis);
  EXPECT_EQ(b.fp16.min_loss_scale, 2);
  json stat = on;
  stat["fp16"]["loss_scale"] = 128.0;
  EXPECT_EQ(load_spec(spec, {}, d.file("static.json", stat.dump())).fp16.loss_scale, 128.0);
  json off = on;
  off["fp16"]["enabled"] = false;
  off["fp16"]["loss_scale"] = "ignored when disabled";
  EXPECT_EQ(load_spec(spec, {}, d.file("off.json", off.dump())).precision, "fp32");
  json both = on;
  both["bf16"]["enabled"] = true;
  const std::string p = d.file("both.json", both.dump());
  EXPECT_NE(input_error([&] { load_spec(spec, {}, p); }).find(p + ": bf16.enabled"), std::string::npos);
}

TEST(DeepSpeedConfig, SchedulerBlockKeepsDeepSpeedsDefaults) {
  TmpDir d;
  const std::string spec = std::string(ZF_SOURCE_DIR) + "/graphs/specs/mlp-fashion.json";
  // DeepSpeed's WarmupLR: warmup_max_lr None = the optimizer's rate (lr_schedules.py)
  const json ds = json::parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.02}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}})");
  const Spec s = load_spec(spec, {}, d.file("ds.json", ds.dump()));
  EXPECT_EQ(s.scheduler.type, "WarmupLR");
  EXPECT_DOUBLE_EQ(s.peak_lr(), 0.02);
  EXPECT_EQ(s.scheduler.warmup_type, "log");
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);  // i = -1: min_lr
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.0);  // log(1) = 0
  EXPECT_DOUBLE_EQ(s.lr_at(11), 0.02);
  // WarmupDecayLR's warmup_max_lr defaults to 0.001, whatever the optimizer's rate
  const json dd = json::parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.02}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10, "total_num_steps": 50}}})");
  EXPECT_DOUBLE_EQ(load_spec(spec, {}, d.file("dd.json", dd.dump())).peak_lr(), 0.001);
  // WarmupCosineLR scales the optimizer's rate
  const json dc = json::parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.02}},
      "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 50, "warmup_num_steps": 10}}})");
  const Spec c = load_spec(spec, {}, d.file("dc.json", dc.dump()));
  EXPECT_EQ(c.scheduler.type, "WarmupCosineLR");
  EXPECT_DOUBLE_EQ(c.lr_at(0), 0.0);
  EXPECT_NEAR(c.lr_at(11), 0.02 * (0.0001 + 0.9999 * (1 + std::cos(M_PI / 40)) / 2), 1e-15);
  // it replaces a scheduler block of the spec as a whole (no merge of the two params objects)
  const json spec_with = json::parse(R"({"name": "x", "scheduler": {"type": "WarmupDecayLR",
      "params": {"total_num_steps": 100, "warmup_num_steps": 5}}})");
  const Spec t = load_spec(d.file("spec.json", spec_with.dump()), {}, d.file("ds.json", ds.dump()));
  EXPECT_EQ(t.scheduler.type, "WarmupLR");
  EXPECT_EQ(t.scheduler.warmup_num_steps, 10);
}

TEST(DeepSpeedConfig, BatchSizesCountTheDataParallelRanks) {
  // DeepSpeed: train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x
  // ranks, any two giving the third (runtime/config.py)
  const json both = json::parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 16})");
  json p = deepspeed_patch(both, "ds.json", nullptr, 2);
  EXPECT_EQ(p["train"]["batch_size"], 32);
  EXPECT_FALSE(p["train"].contains("gradient_accumulation_steps"));
  p = deepspeed_patch(both, "ds.json", nullptr, 1);  // 2 micro-batches of 16
  EXPECT_EQ(p["train"]["batch_size"], 32);
  EXPECT_EQ(p["train"]["gradient_accumulation_steps"], 2);
  const std::string msg = input_error([&] { deepspeed_patch(both, "ds.json", nullptr, 3); });
  EXPECT_NE(msg.find("ds.json: train_batch_size"), std::string::npos) << msg;
  const json micro = json::parse(R"({"train_micro_batch_size_per_gpu": 16})");
  EXPECT_EQ(deepspeed_patch(micro, "ds.json", nullptr, 4)["train"]["batch_size"], 64);
  const json mg = json::parse(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4})");
  p = deepspeed_patch(mg, "ds.json", nullptr, 2);
  EXPECT_EQ(p["train"]["batch_size"], 32);
  EXPECT_EQ(p["train"]["gradient_accumulation_steps"], 4);
  const json tg = json::parse(R"({"train_batch_size": 64, "gradient_accumulation_steps": 4})");
  EXPECT_EQ(deepspeed_patch(tg, "ds.json", nullptr, 2)["train"]["gradient_accumulation_steps"], 4);
  const json all3 = json::parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4})");
  EXPECT_NE(input_error([&] { deepspeed_patch(all3, "ds.json", nullptr, 1); }).find("ds.json: train_batch_size"), std::string::npos);
  EXPECT_EQ(deepspeed_patch(all3, "ds.json", nullptr, 2)["train"]["batch_size"], 32);
  const json gas_only = json::parse(R"({"gradient_accumulation_steps": 4})");
  EXPECT_NE(input_error([&] { deepspeed_patch(gas_only, "ds.json", nullptr, 1); }).find("gradient_accumulation_steps"),
            std::string::npos);
  // ZenFlow: DeepSpeed's engine replaces the accumulation steps by update_interval, so a step is
  // one micro-batch per rank (runtime/zenflow/engine.py), said in a note
  const json zf = json::parse(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4,
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"update_interval": 4}}})");
  std::vector<std::string> notes;
  p = deepspeed_patch(zf, "ds.json", &notes, 1);
  EXPECT_EQ(p["train"]["batch_size"], 4);
  EXPECT_FALSE(p["train"].contains("gradient_accumulation_steps"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("update_interval"), std::string::npos);
}

// zero_optimization.stage: mapped with the optimizer offloaded (zero-offload, zenflow), and at stages 1
// and 2 without it (device-adam's partitioned state); stage 3 without an offload noted and left at
// 0 (device-adam's state stays on the device, replicated); 4 is out of range
TEST(DeepSpeedConfig, ZeroStageMapsForOffloadedOptimizers) {
  auto cfg = [](int stage, bool offload) {
    json c = json::parse(R"({"train_batch_size": 16})");
    c["zero_optimization"]["stage"] = stage;
    if (offload) c["zero_optimization"]["offload_optimizer"]["device"] = "cpu";
    return c;
  };
  for (int st : {1, 2, 3}) {
    const json p = deepspeed_patch(cfg(st, true), "ds.json", nullptr, 1);
    EXPECT_EQ(p["strategy"], "zero-offload");
    EXPECT_EQ(p["zero_optimization"]["stage"], st);
    // without an offload: device-adam, partitioned at stages 1 and 2 (DeepSpeed's ZeRO-1/2), replicated
    // at stage 3 with a note (device-adam does not partition its parameters)
    std::vector<std::string> notes;
    const json q = deepspeed_patch(cfg(st, false), "ds.json", &notes, 1);
    EXPECT_EQ(q["strategy"], "device-adam");
    if (st < 3) {
      EXPECT_EQ(q["zero_optimization"]["stage"], st);
      EXPECT_TRUE(notes.empty());
      continue;
    }
    EXPECT_FALSE(q.contains("zero_optimization"));
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("zero_optimization.stage 3"), std::string::npos) << notes[0];
  }
  EXPECT_FALSE(deepspeed_patch(cfg(0, true), "ds.json", nullptr, 1).contains("zero_optimization"));
  const std::string msg = input_error([&] { deepspeed_patch(cfg(4, true), "ds.json", nullptr, 1); });
  EXPECT_NE(msg.find("ds.json: zero_optimization.stage"), std::string::npos) << msg;
}

// stage3_max_live_parameters: the spec's at stage 3 with an offload (the bound on gathered values,
// docs/data-parallel.md), a note otherwise; not an integer >= 0: exit 2 naming it
TEST(DeepSpeedConfig, Stage3MaxLiveParametersMapsAtStage3) {
  auto cfg = [](int stage) {
    json c = json::parse(R"({"train_batch_size": 16, "zero_optimization": {"offload_optimizer": {"device": "cpu"},
                             "stage3_max_live_parameters": 1000000000}})");
    c["zero_optimization"]["stage"] = stage;
    return c;
  };
  std::vector<std::string> notes;
  EXPECT_EQ(deepspeed_patch(cfg(3), "ds.json", &notes, 1)["zero_optimization"]["stage3_max_live_parameters"],
            1000000000);
  EXPECT_TRUE(notes.empty());
  const json p = deepspeed_patch(cfg(2), "ds.json", &notes, 1);
  EXPECT_FALSE(p["zero_optimization"].contains("stage3_max_live_parameters"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("stage3_max_live_parameters"), std::string::npos) << notes[0];
  json bad = cfg(3);
  bad["zero_optimization"]["stage3_max_live_parameters"] = -1;
  const std::string msg = input_error([&] { deepspeed_patch(bad, "ds.json", nullptr, 1); });
  EXPECT_NE(msg.find("ds.json: zero_optimization.stage3_max_live_parameters"), std::string::npos) << msg;
}

// reduce_bucket_size: an integer becomes the spec's (the bound on the gradients in flight,
// docs/architecture.md), at any stage; "auto" is a note; below 1: exit 2 naming it
TEST(DeepSpeedConfig, ReduceBucketSizeBoundsTheGradientsInFlight) {
  auto cfg = [](const json& v) {
    json c = json::parse(R"({"train_batch_size": 16, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})");
    c["zero_optimization"]["reduce_bucket_size"] = v;
    return c;
  };
  std::vector<std::string> notes;
  EXPECT_EQ(deepspeed_patch(cfg(200000000), "ds.json", &notes, 1)["zero_optimization"]["reduce_bucket_size"], 200000000);
  EXPECT_TRUE(notes.empty());
  const json p = deepspeed_patch(cfg("auto"), "ds.json", &notes, 1);
  EXPECT_FALSE(p["zero_optimization"].contains("reduce_bucket_size"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("reduce_bucket_size"), std::string::npos) << notes[0];
  const std::string msg = input_error([&] { deepspeed_patch(cfg(0), "ds.json", nullptr, 1); });
  EXPECT_NE(msg.find("ds.json: zero_optimization.reduce_bucket_size"), std::string::npos) << msg;
}

// DeepSpeedExamples' ZenFlow fine-tuning config (training/DeepSpeed-ZenFlow/finetuning/zf_config.json,
// its keys in graphs/specs/ds-zenflow-finetune.json) on the GPT spec: accepted unchanged
TEST(DeepSpeedConfig, DeepSpeedExamplesZenFlowConfigLoadsOnTheGptSpec) {
  const std::string src = ZF_SOURCE_DIR;
  const Spec s = load_spec(src + "/graphs/specs/gpt-kjv.json", {}, src + "/graphs/specs/ds-zenflow-finetune.json");
  EXPECT_EQ(s.strategy, "zenflow");
  EXPECT_EQ(s.precision, "bf16");
  EXPECT_DOUBLE_EQ(s.gradient_clipping, 1.0);
  EXPECT_EQ(s.train.batch_size, 32);
  EXPECT_EQ(s.train.gradient_accumulation_steps, 1);
  EXPECT_DOUBLE_EQ(s.optimizer.lr, 2e-5);
  EXPECT_EQ(s.zenflow.update_interval, 4);
  EXPECT_TRUE(s.zenflow.overlap_step);
  EXPECT_EQ(s.zenflow.full_warm_up_rounds, 0);
  EXPECT_DOUBLE_EQ(s.zenflow.topk_ratio, 0.1);
}

TEST(DeepSpeedConfig, EachViolatedConstraintGetsItsError) {
  TmpDir d;
  const std::string spec = std::string(ZF_SOURCE_DIR) + "/graphs/specs/mlp-fashion.json";
  const json ok = json::parse(R"({"train_batch_size": 16, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"}, "zenflow": {"topk_ratio": 0.1, "update_interval": 4}}})");
  ASSERT_EQ(input_error([&] { load_spec(spec, {}, d.file("ok.json", ok.dump())); }), "");
  struct Case {
    const char* pointer;  // JSON pointer into the config
    json value;
    const char* field;    // expected in the message
  };
  const Case cases[] = {
      {"/zero_optimization/offload_optimizer/device", "none", "zero_optimization.offload_optimizer.device"},
      {"/zero_optimization/stage", 0, "zero_optimization.stage"},
      {"/zero_optimization/zenflow/topk_ratio", 1.5, "zero_optimization.zenflow.topk_ratio"},
      {"/zero_optimization/zenflow/select_strategy", "sometimes", "zero_optimization.zenflow.select_strategy"},
      {"/zero_optimization/zenflow/select_interval", 3, "zero_optimization.zenflow.select_interval"},  // int with "auto"
      {"/zero_optimization/zenflow/update_interval", "often", "zero_optimization.zenflow.update_interval"},
      {"/zero_optimization/zenflow/pt_reserved_cores_perc", 1, "zero_optimization.zenflow.pt_reserved_cores_perc"},
      {"/zero_optimization/zenflow/full_warm_up_rounds", 1.5, "zero_optimization.zenflow.full_warm_up_rounds"},
      {"/zero_optimization/zenflow/auto_ratio", -0.1, "zero_optimization.zenflow.auto_ratio"},
      {"/zero_optimization/zenflow/typo_key", 1, "zero_optimization.zenflow.typo_key"},
      {"/gradient_clipping", -1.0, "gradient_clipping"},
      {"/gradient_accumulation_steps", 3, "train_batch_size"},  // 16 is not 3 micro-batches
      {"/gradient_accumulation_steps", 0, "gradient_accumulation_steps"},
      {"/fp16", json{{"enabled", true}, {"loss_scale", -1}}, "fp16.loss_scale"},
      {"/fp16", json{{"enabled", true}, {"loss_scale", true}}, "fp16.loss_scale"},
      {"/fp16", json{{"enabled", true}, {"loss_scale_window", 0}}, "fp16.loss_scale_window"},
      {"/fp16", json{{"enabled", true}, {"hysteresis", 0}}, "fp16.hysteresis"},
      {"/fp16", json{{"enabled", true}, {"min_loss_scale", 0}}, "fp16.min_loss_scale"},
      {"/fp16", json{{"enabled", true}, {"initial_scale_power", 1.5}}, "fp16.initial_scale_power"},
      {"/fp16", json{{"enabled", true}, {"consecutive_hysteresis", 1}}, "fp16.consecutive_hysteresis"},
      {"/fp16", json{{"enabled", true}, {"auto_cast", true}}, "fp16.auto_cast"},
      {"/fp16", json{{"enabled", true}, {"fp16_master_weights_and_grads", true}}, "fp16.fp16_master_weights_and_grads"},
      {"/fp16", json{{"enabled", true}, {"typo_key", 1}}, "fp16.typo_key"},
      {"/optimizer", json{{"type", "Lamb"}}, "optimizer.type"},
      {"/scheduler", json{{"type", "OneCycle"}}, "scheduler.type"},
      {"/scheduler", json{{"type", "WarmupDecayLR"}, {"params", {{"warmup_num_steps", 10}}}}, "scheduler.params.total_num_steps"},
      {"/scheduler", json{{"type", "WarmupLR"}, {"params", {{"warmup_type", "cosine"}}}}, "scheduler.params.warmup_type"},
      {"/unknown_top_level", 1, "unknown_top_level"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pointer);
    json bad = ok;
    bad[json::json_pointer(c.pointer)] = c.value;
    const std::string path = d.file("bad.json", bad.dump());
    const std::string msg = input_error([&] { load_spec(spec, {}, path); });
    EXPECT_NE(msg.find(path + ": " + c.field), std::string::npos) << msg;
  }
  // S >= K with select_strategy "step" (DeepSpeed: "Select interval must be greater or equal to update interval")
  json sk = ok;
  sk["zero_optimization"]["zenflow"]["select_strategy"] = "step";
  sk["zero_optimization"]["zenflow"]["select_interval"] = 2;
  const std::string p = d.file("sk.json", sk.dump());
  EXPECT_NE(input_error([&] { load_spec(spec, {}, p); }).find("select_interval"), std::string::npos);
}

// Issue 30's audit: keys that would change training are refused, not noted: another gradient
// predivide factor, prescaling on several ranks, bf16 masters or moments.
TEST(DeepSpeedConfig, KeysThatChangeTrainingAreNotNoted) {
  auto refused = [](const json& c, int ranks, const std::string& field) {
    const std::string msg = input_error([&] { deepspeed_patch(c, "ds.json", nullptr, ranks); });
    EXPECT_NE(msg.find("ds.json: " + field), std::string::npos) << c.dump() << ": " << msg;
  };
  refused({{"train_batch_size", 16}, {"gradient_predivide_factor", 2.0}}, 1, "gradient_predivide_factor");
  refused({{"train_batch_size", 16}, {"prescale_gradients", true}}, 2, "prescale_gradients");
  refused({{"train_batch_size", 16}, {"prescale_gradients", 1}}, 1, "prescale_gradients");
  for (const char* k : {"bf16_master_weights_and_grads", "bf16_optimizer_states"})
    refused({{"train_batch_size", 16}, {"bf16", {{"enabled", true}, {k, true}}}}, 1, std::string("bf16.") + k);
  std::vector<std::string> notes;  // the defaults, and prescaling in one process, are accepted
  const json ok = {{"train_batch_size", 16}, {"gradient_predivide_factor", 1.0}, {"prescale_gradients", true},
                   {"bf16", {{"enabled", true}, {"bf16_master_weights_and_grads", false}}}};
  EXPECT_EQ(deepspeed_patch(ok, "ds.json", &notes, 1)["precision"], "bf16");
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("bf16.bf16_master_weights_and_grads"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("prescale_gradients"), std::string::npos) << notes[1];
}

// Issue 47: DeepSpeed's communication_data_type, read as DeepSpeed reads it (any case; null: the
// precision's), becomes the spec's; other values and types are refused naming the key.
TEST(DeepSpeedConfig, CommunicationDataTypeIsTheSpecsOrRefused) {
  for (const char* v : {"fp32", "FP32", "bf16", "Fp16"}) {
    const json p = deepspeed_patch({{"train_batch_size", 16}, {"communication_data_type", v}}, "ds.json", nullptr, 2);
    std::string lower = v;
    for (char& c : lower) c = (char)std::tolower((unsigned char)c);
    EXPECT_EQ(p.value("communication_data_type", ""), lower) << v;
  }
  EXPECT_FALSE(deepspeed_patch({{"train_batch_size", 16}, {"communication_data_type", nullptr}}, "ds.json", nullptr, 2)
                   .contains("communication_data_type"));
  for (const json& bad : {json("bf8"), json(16), json(true)}) {
    const std::string msg = input_error(
        [&] { deepspeed_patch({{"train_batch_size", 16}, {"communication_data_type", bad}}, "ds.json", nullptr, 2); });
    EXPECT_NE(msg.find("ds.json: communication_data_type"), std::string::npos) << bad.dump() << ": " << msg;
  }
}

// Issue 44: DeepSpeed's activation_checkpointing block is accepted (it turns nothing on, as in
// DeepSpeed: train.activation_checkpointing does); what the engine cannot honour is refused by name;
// train.activation_checkpointing takes "none", "every_layer" or N and refuses anything else.
TEST(DeepSpeedConfig, ActivationCheckpointingBlockIsAcceptedOrRefusedByName) {
  std::vector<std::string> notes;
  const json ok = {{"train_batch_size", 16},
                   {"activation_checkpointing",
                    {{"partition_activations", false}, {"contiguous_memory_optimization", false},
                     {"cpu_checkpointing", false}, {"number_checkpoints", nullptr},
                     {"synchronize_checkpoint_boundary", true}, {"profile", false}}}};
  const json patch = deepspeed_patch(ok, "ds.json", &notes, 1);
  EXPECT_FALSE(patch.contains("train") && patch["train"].contains("activation_checkpointing")) << patch.dump();
  EXPECT_EQ(notes.size(), 3u);
  for (const char* k : {"partition_activations", "contiguous_memory_optimization", "cpu_checkpointing"}) {
    json bad = ok;
    bad["activation_checkpointing"][k] = true;
    const std::string msg = input_error([&] { deepspeed_patch(bad, "ds.json", nullptr, 1); });
    EXPECT_NE(msg.find(std::string("ds.json: activation_checkpointing.") + k), std::string::npos) << msg;
  }
  for (const auto& [k, v] : {std::pair<const char*, json>{"number_checkpoints", 0}, {"number_checkpoints", "4"},
                             {"profile", 1}, {"typo_key", true}}) {
    json bad = ok;
    bad["activation_checkpointing"][k] = v;
    const std::string msg = input_error([&] { deepspeed_patch(bad, "ds.json", nullptr, 1); });
    EXPECT_NE(msg.find(std::string("ds.json: activation_checkpointing.") + k), std::string::npos) << msg;
  }
  // the spec's field
  const json base = json::parse(R"({"model": {"type": "gpt"}, "data": {"dataset": "kjv"}})");
  for (const auto& [v, n] : {std::pair<json, int>{"none", 0}, {"every_layer", 1}, {1, 1}, {4, 4}}) {
    json j = base;
    j["train"]["activation_checkpointing"] = v;
    EXPECT_EQ(parse_spec(j, "s.json").train.activation_checkpointing, n) << v.dump();
  }
  for (const json& v : {json("all"), json(0), json(-2), json(1.5), json(true)}) {
    json j = base;
    j["train"]["activation_checkpointing"] = v;
    const std::string msg = input_error([&] { parse_spec(j, "s.json"); });
    EXPECT_NE(msg.find("s.json: train.activation_checkpointing"), std::string::npos) << v.dump() << ": " << msg;
  }
}

}  // namespace
}  // namespace zf::test
