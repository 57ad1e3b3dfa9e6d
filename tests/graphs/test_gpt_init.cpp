// GPT runs (graphs/train, graphs/schema): --init of a classifier from a language model's checkpoint
// (the body loaded, the head fresh, mismatches refused) and the GPT fields of the spec.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "graphs/schema/spec.hpp"
#include "graphs/train/trainer.hpp"
#include "models/formats/weights.hpp"
#include "models/nets/gpt.hpp"
#include "models/nets/gpt_classifier.hpp"
#include "models/formats/safetensors.hpp"
#include "models/data/text.hpp"
#include "runtime/error.hpp"
#include "test_helpers.hpp"
#include "tests/models/gpt_helpers.hpp"
#include "tests/reference/gpt_ref.hpp"
namespace zf::test {
namespace {

namespace fs = std::filesystem;

// ------------------------------------------------------------------ --init from an LM checkpoint

TEST(GptInit, ClassifierLoadsLanguageModelBody) {
  TempDir dir;
  const std::string kjv = dir.write("kjv.txt", fixture_kjv());
  Spec lm = tiny_gpt_spec("gpt", "kjv", kjv);
  lm.train.steps = 2;
  RunOptions o;
  o.quiet = true;
  o.evaluate = false;
  o.save_path = dir.path("lm.safetensors");
  run_training(lm, o);
  StFile f = read_safetensors(o.save_path);
  ASSERT_TRUE(f.tensors.count("lm_head.weight"));

  Spec cs = tiny_gpt_spec("gpt-classifier", "kjv", kjv);
  Runtime rt(rt_config());
  auto wl = make_workload(cs, &rt.tracker().status());
  std::vector<float> head_before;
  for (Param* p : wl->params())
    if (p->name == "classifier.weight") head_before.assign(p->value.data(), p->value.data() + p->value.numel());
  load_weights(*wl, o.save_path);
  int body = 0;
  for (Param* p : wl->params()) {
    p->value.acquire_read();
    std::vector<float> v(p->value.data(), p->value.data() + p->value.numel());
    p->value.release();
    if (p->name.rfind("classifier.", 0) == 0) {
      if (p->name == "classifier.weight") {
        EXPECT_EQ(v, head_before) << "the head keeps its initialisation";
      }
      continue;
    }
    EXPECT_EQ(v, f.tensors.at(p->name).as_f32()) << p->name;
    ++body;
  }
  EXPECT_EQ(body, 2 + 12 * 2 + 2);

  // a body tensor missing, or of another shape: refused, naming it
  StFile broken = f;
  broken.tensors.erase("h.1.mlp.c_fc.weight");
  write_safetensors(dir.path("broken.safetensors"), broken);
  expect_input_error([&] { load_weights(*wl, dir.path("broken.safetensors")); },
                     {"broken.safetensors", "h.1.mlp.c_fc.weight", "missing"});
  Spec wide = cs;
  wide.model.n_embd = 32;
  auto wl2 = make_workload(wide, &rt.tracker().status());
  expect_input_error([&] { load_weights(*wl2, o.save_path); }, {"wte", "shape"});
  // the language model itself accepts no head-less file
  auto lmw = make_workload(lm, &rt.tracker().status());
  StFile headless = f;
  headless.tensors.erase("lm_head.weight");
  write_safetensors(dir.path("headless.safetensors"), headless);
  expect_input_error([&] { load_weights(*lmw, dir.path("headless.safetensors")); }, {"lm_head.weight", "missing"});
}

// ------------------------------------------------------------------ spec

TEST(GptSpec, FieldsAndErrors) {
  using nlohmann::json;
  Spec s = parse_spec(json::parse(R"({"model": {"type": "gpt", "n_layer": 3, "n_head": 2, "n_embd": 64,
      "context": 32}, "data": {"dataset": "kjv"}})"), "x.json");
  EXPECT_EQ(s.model.n_layer, 3);
  EXPECT_EQ(s.model.context, 32);
  EXPECT_EQ(s.data.path, kKjvDefaultPath);
  Spec r = parse_spec(s.to_json(), "round-trip");
  EXPECT_EQ(r.to_json(), s.to_json());
  expect_input_error([] { parse_spec(nlohmann::json::parse(R"({"model": {"type": "gpt", "n_embd": 10, "n_head": 4}, "data": {"dataset": "kjv"}})"), "x.json"); },
                     {"x.json: model.n_embd", "multiple of model.n_head"});
  expect_input_error([] { parse_spec(nlohmann::json::parse(R"({"model": {"type": "gpt"}})"), "x.json"); },
                     {"x.json: data.dataset", "kjv, text or tokens"});
  expect_input_error([] { parse_spec(nlohmann::json::parse(R"({"model": {"type": "gpt"}, "data": {"dataset": "text"}})"), "x.json"); },
                     {"x.json: data.path", "required"});
  expect_input_error([] { parse_spec(nlohmann::json::parse(R"({"data": {"dataset": "kjv"}})"), "x.json"); },
                     {"x.json: data.dataset", "mlp"});
  expect_input_error([] { parse_spec(nlohmann::json::parse(R"({"model": {"type": "gpt-classifier"}, "data": {"dataset": "text", "path": "a"}})"), "x.json"); },
                     {"x.json: data.dataset", "kjv"});
  expect_input_error([] { parse_spec(nlohmann::json::parse(R"({"model": {"type": "gpt-classifier"}, "data": {"dataset": "kjv", "labels": "book"}})"), "x.json"); },
                     {"x.json: data.labels", "testament"});
  expect_input_error([] { parse_spec(nlohmann::json::parse(R"({"model": {"type": "gpt", "context": 0}, "data": {"dataset": "kjv"}})"), "x.json"); },
                     {"x.json: model.context"});
  // model.weight_layout: absent from the JSON at its default, round-trips otherwise
  EXPECT_EQ(s.model.weight_layout, "auto");
  EXPECT_FALSE(s.to_json()["model"].contains("weight_layout"));
  Spec l = parse_spec(json::parse(R"({"model": {"type": "gpt", "weight_layout": "in_out"}, "data": {"dataset": "kjv"}})"), "x.json");
  EXPECT_EQ(l.model.weight_layout, "in_out");
  EXPECT_EQ(parse_spec(l.to_json(), "round-trip").model.weight_layout, "in_out");
  expect_input_error([] { parse_spec(nlohmann::json::parse(R"({"model": {"type": "gpt", "weight_layout": "transposed"}, "data": {"dataset": "kjv"}})"), "x.json"); },
                     {"x.json: model.weight_layout", "out_in"});
}

}  // namespace
}  // namespace zf::test
