// The spec's field table (graphs/schema/field_table.hpp): docs/spec.md documents every field, every
// field survives to_json -> parse_spec, --resume compares the fields it always did, and parsing
// asks nothing of the machine (graphs/schema/machine_check.hpp does).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "graphs/schema/field_table.hpp"
#include "graphs/schema/machine_check.hpp"
#include "graphs/schema/spec.hpp"
#include "runtime/error.hpp"

namespace {

using json = nlohmann::json;

std::string read_docs() {
  std::ifstream in(std::string(ZF_SOURCE_DIR) + "/docs/spec.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text from the "## " heading that names `block` in backquotes to the next heading.
std::string section_of(const std::string& doc, const std::string& block) {
  for (size_t h = doc.find("\n## "); h != std::string::npos; h = doc.find("\n## ", h + 1)) {
    const size_t eol = doc.find('\n', h + 1);
    if (doc.substr(h, eol - h).find("`" + block + "`") == std::string::npos) continue;
    const size_t next = doc.find("\n## ", eol);
    return doc.substr(eol, next == std::string::npos ? std::string::npos : next - eol);
  }
  return "";
}

// Two specs that, between them, set every field to a value other than its default.
const json kRichA = json::parse(R"({
  "name": "rich-a", "strategy": "zero-offload", "precision": "fp16", "gradient_clipping": 1.5,
  "communication_data_type": "fp32",
  "zero_optimization": {"stage": 1, "offload_optimizer": {"ratio": 0.5}, "sub_group_size": 1000,
                        "reduce_bucket_size": 12345},
  "fp16": {"loss_scale": 128.0, "initial_scale_power": 8, "loss_scale_window": 50, "hysteresis": 3,
           "consecutive_hysteresis": true, "min_loss_scale": 2},
  "model": {"type": "gpt-classifier", "hidden": [32], "activation": "gelu", "init_seed": 7, "n_layer": 2,
            "n_head": 2, "n_embd": 32, "context": 16, "pool": "max", "head": "generative", "weight_layout": "out_in"},
  "data": {"dataset": "kjv", "dir": "/tmp/x", "train_limit": 100, "eval_limit": 10, "path": "/tmp/kjv.txt",
           "labels": "section", "split": "verse"},
  "train": {"batch_size": 64, "epochs": 3, "steps": 9, "seed": 5, "eval_batch_size": 20,
            "gradient_accumulation_steps": 2, "eval_every": 4, "activation_checkpointing": 2},
  "optimizer": {"lr": 0.01, "betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 0.1},
  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.0001, "warmup_max_lr": 0.02,
                "warmup_num_steps": 10, "warmup_type": "linear", "total_num_steps": 100}},
  "zenflow": {"topk_ratio": 0.2, "select_strategy": "step", "select_interval": 8, "update_interval": 4,
              "overlap_step": true, "offload": true, "auto_ratio": 0.5, "full_warm_up_rounds": 2,
              "pt_reserved_cores_perc": 0.25, "max_staleness": 2, "importance": "l2", "reset_host_moments": true},
  "runtime": {"sched": "eager", "cuda_workers": -1, "tile_elems": 4096, "lookahead": 3, "crossings": "host",
              "priorities": false, "stream_gradients": false, "logits_chunk_elems": 4096},
  "log": {"every": 5, "warmup_steps": 1}
})");
const json kRichB = json::parse(R"({
  "strategy": "zenflow", "precision": "bf16", "zero_optimization": {"stage": 2, "stage3_max_live_parameters": 5000},
  "model": {"type": "hf", "vocab": 50257, "path": "/tmp/llama", "init": "random"},
  "data": {"dataset": "instructions", "path": "/tmp/train.jsonl", "eval_path": "/tmp/eval.jsonl", "order": "sequential",
           "pack": true},
  "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.1, "cos_min_ratio": 0.01,
                "warmup_num_steps": 5, "total_num_steps": 50}},
  "zenflow": {"select_strategy": "epoch", "select_interval": 1, "update_interval": 2, "semantics": "deepspeed",
              "dp_selection": "local-sum", "accumulate_on": "device"},
  "train": {"activation_checkpointing": "every_layer"},
  "runtime": {"device_workers": 1, "host_workers": 1}
})");

TEST(SpecFields, DocsListEveryField) {
  const std::string doc = read_docs();
  ASSERT_FALSE(doc.empty()) << ZF_SOURCE_DIR << "/docs/spec.md";
  for (const zf::FieldDef& d : zf::spec_fields()) {
    SCOPED_TRACE(d.name);
    const bool in_main_table = doc.find("| `" + d.name + "` |") != std::string::npos;
    const bool in_block_table =
        !d.block().empty() && section_of(doc, d.block()).find("| `" + d.key() + "` |") != std::string::npos;
    EXPECT_TRUE(in_main_table || in_block_table) << "docs/spec.md has no table row for " << d.name;
  }
}

TEST(SpecFields, EveryFieldRoundTripsThroughToJson) {
  const zf::Spec defaults;
  const zf::Spec a = zf::parse_spec(kRichA, "a.json"), b = zf::parse_spec(kRichB, "b.json");
  for (const zf::Spec* s : {&a, &b}) {
    const zf::Spec r = zf::parse_spec(s->to_json(), "round-trip");
    EXPECT_EQ(r.to_json(), s->to_json());
    for (const zf::FieldDef& d : zf::spec_fields()) EXPECT_EQ(d.write(r), d.write(*s)) << d.name;
  }
  for (const zf::FieldDef& d : zf::spec_fields()) {  // else the round trip above proves nothing for it
    if (d.name == "optimizer.type") continue;           // "adamw", its only value
    EXPECT_TRUE(d.write(a) != d.write(defaults) || d.write(b) != d.write(defaults)) << d.name << " never set";
  }
}

TEST(SpecFields, ToJsonLeavesOutDefaultsOlderSpecsLacked) {
  const json j = zf::Spec().to_json();
  for (const char* k : {"scheduler", "gradient_clipping", "zero_optimization", "fp16"}) EXPECT_FALSE(j.contains(k)) << k;
  EXPECT_FALSE(j["model"].contains("head"));
  EXPECT_FALSE(j["model"].contains("weight_layout"));
  EXPECT_FALSE(j["train"].contains("gradient_accumulation_steps"));
  EXPECT_FALSE(j["model"].contains("vocab"));
  EXPECT_FALSE(j["data"].contains("eval_path"));
  EXPECT_FALSE(j["data"].contains("order"));
  EXPECT_EQ(j["zenflow"]["update_interval"], "auto");
  EXPECT_EQ(j["zenflow"]["max_staleness"], 0);
}

std::vector<std::string> check_names(const zf::Spec& s) {
  std::vector<std::string> names;
  for (const zf::ResumeCheck& c : zf::resume_checks(s)) names.push_back(c.name);
  return names;
}

TEST(SpecFields, ResumeComparesTheSameFieldsInTheSameOrder) {
  const std::vector<std::string> common = {"strategy", "precision", "model", "optimizer", "scheduler",
                                           "gradient_clipping", "train.gradient_accumulation_steps",
                                           "data.dataset", "data.dir", "data.train_limit", "train.batch_size",
                                           "train.seed"};
  std::vector<std::string> plain = common;
  plain.push_back("zero_optimization.offload_optimizer");  // Twin-Flow's ratio: its state's layout
  auto with_order = [](std::vector<std::string> v) {        // data.order: the batches' windows
    v.push_back("data.order");
    v.push_back("data.pack");  // the rows
    return v;
  };
  EXPECT_EQ(check_names(zf::Spec()), with_order(plain));
  std::vector<std::string> all = common;
  all.push_back("zenflow");
  all.push_back("fp16");
  all.push_back("zero_optimization.offload_optimizer");
  zf::Spec z;
  z.strategy = "zenflow";
  z.precision = "fp16";
  EXPECT_EQ(check_names(z), with_order(all));
  zf::Spec t;
  t.strategy = "zero-offload";
  t.offload_ratio = 0.5;
  plain.push_back("zero_optimization.sub_group_size");  // below 1: the split's unit
  EXPECT_EQ(check_names(t), with_order(plain));
}

TEST(SpecFields, ResumeValuesFillOldDefaultsAndSkipTheLayout) {
  zf::Spec s;
  s.model.weight_layout = "out_in";
  const json now = s.to_json();
  json old = now;  // a checkpoint written before precision, clipping and accumulation existed
  old.erase("precision");
  old["model"].erase("weight_layout");
  for (const zf::ResumeCheck& c : zf::resume_checks(s)) EXPECT_EQ(c.value(old), c.value(now)) << c.name;
  json other = now;
  other["train"]["seed"] = 43;
  bool seen = false;
  for (const zf::ResumeCheck& c : zf::resume_checks(s))
    if (c.value(other) != c.value(now)) {
      EXPECT_EQ(c.name, "train.seed");
      seen = true;
    }
  EXPECT_TRUE(seen);
}

TEST(SpecFields, UpdateIntervalIsATypeNotASentinel) {
  const zf::Spec a = zf::parse_spec(kRichA, "a.json");
  EXPECT_FALSE(a.zenflow.update_interval.is_auto);
  EXPECT_EQ(a.zenflow.update_interval.steps, 4);
  EXPECT_TRUE(zf::Spec().zenflow.update_interval.is_auto);
  EXPECT_EQ(zf::UpdateInterval(3).to_json(), 3);
}

TEST(SpecFields, ParsingAsksNothingOfTheMachine) {
  // a policy no StarPU has and more workers than any build starts: the file itself is well formed
  const zf::Spec s = zf::parse_spec(json{{"runtime", {{"sched", "no-such"}, {"device_workers", 100000},
                                                     {"host_workers", 1}}}}, "m.json");
  EXPECT_THROW(zf::check_machine(s), zf::InputError);
  zf::Spec w = s;
  w.runtime.sched = "zf-deadline";
  try {
    zf::check_machine(w);
    ADD_FAILURE() << "100000 device workers accepted";
  } catch (const zf::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("m.json: runtime.device_workers"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(zf::check_machine(zf::Spec()));
}

}  // namespace
