// The Llama / Qwen2 workload (models/nets/llama.hpp) against the double-precision whole model
// (tests/models/llama_model_ref.hpp) for a GQA Llama with an untied head, a tied one and a Qwen2
// with q/k/v biases: the weights read from the directory (F32, BF16, sharded), one step's loss and
// every gradient, the evaluation loss, and three AdamW steps of zenflow-run's trainer; under
// precision bf16 the losses within a bound from bf16's rounding of the products' operands, and
// each of three AdamW steps (loss, gradient, device-adam's bf16 update) against the reference
// (tests/models/bf16_helpers.hpp); the spec's bad inputs (model.path, model.context, a bert
// config) refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "graphs/schema/spec.hpp"
#include "graphs/train/precision.hpp"
#include "graphs/train/trainer.hpp"
#include "graphs/train/workload_factory.hpp"
#include "models/nets/llama.hpp"
#include "codelets/codelets.hpp"
#include "runtime/error.hpp"
#include "tests/models/bf16_helpers.hpp"
#include "tests/models/gpt_helpers.hpp"
#include "tests/models/llama_helpers.hpp"
#include "tests/models/llama_model_ref.hpp"
#include "tests/reference/reference.hpp"

namespace zf::test {
namespace {

using namespace llama;

struct Case {
  const char* name;
  json (*config)();
  const char* dtype;     // how the directory stores the weights
  uint64_t shard_bytes;  // 0: one file
};

std::vector<double> to_d(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// The values a directory saved in `dtype` gives back: BF16 rounds to nearest even.
std::map<std::string, std::vector<float>> as_stored(std::map<std::string, std::vector<float>> v, const std::string& dtype) {
  if (dtype == "BF16")
    for (auto& [n, x] : v)
      for (float& e : x) e = kernels::bf16::to_float(kernels::bf16::from_float(e));
  return v;
}

class LlamaModel : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    model_ = dir_.path("model");
    const hf::Config cfg = write_config(dir_.path("cfg"), c.config());
    written_ = random_values(cfg, 5);
    write_model(model_, c.config(), written_, c.dtype, c.shard_bytes);
    config_ = hf::read_config(model_ + "/config.json");
    train_ = write_tokens(dir_.path("train.bin"), 200, (int)config_.vocab_size, 1);
    eval_ = write_tokens(dir_.path("eval.bin"), 41, (int)config_.vocab_size, 2);  // 5 windows of 8
    spec_ = hf_spec(model_, dir_.path("train.bin"), dir_.path("eval.bin"));
  }
  // tokens and targets of windows `w` of ids
  static void windows(const std::vector<int32_t>& ids, const std::vector<int64_t>& w, std::vector<int32_t>& tok,
                      std::vector<int32_t>& tgt) {
    tok.clear(), tgt.clear();
    for (int64_t u : w)
      for (int t = 0; t < 8; ++t) tok.push_back(ids[(size_t)(u * 8 + t)]), tgt.push_back(ids[(size_t)(u * 8 + t + 1)]);
  }
  ref::LlamaModelRef::Params ref_params() const {
    ref::LlamaModelRef::Params p;
    for (auto& [n, v] : as_stored(written_, GetParam().dtype)) p[n] = to_d(v);
    return p;
  }
  TempDir dir_{"zf_llama"};
  std::string model_;
  std::map<std::string, std::vector<float>> written_;
  hf::Config config_;
  std::vector<int32_t> train_, eval_;
  Spec spec_;
};

// The weights as the directory holds them (BF16: rounded), the step's loss and gradients, the
// evaluation loss over the eval file's 5 windows (batches of 4 and 1).
TEST_P(LlamaModel, StepAndEvalMatchDoubleReference) {
  for (const char* layout : {"out_in", "in_out"}) {
    SCOPED_TRACE(layout);
    spec_.model.weight_layout = layout;
    Runtime rt(rt_config());
    auto wl = make_workload(spec_, &rt.tracker().status());
    const auto stored = as_stored(written_, GetParam().dtype);
    EXPECT_EQ(values(*wl), stored) << "the parameters are the directory's tensors, exactly";
    ref::LlamaModelRef model(config_, ref_params());
    Tensor stats = Tensor::home({3}, "stats", sizeof(double));
    const std::vector<int32_t> idx = {0, 17, 5};
    wl->submit_step(rt, 0, idx, stats);
    const auto grads = read_grads(rt, *wl);
    rt.tracker().status().rethrow_if_failed();
    std::vector<int32_t> tok, tgt;
    windows(train_, {0, 17, 5}, tok, tgt);
    ref::LlamaModelRef::Params g;
    const double loss = model.loss(tok, tgt, 3, 8, &g);
    EXPECT_EQ(stats.as<double>()[2], 24.0) << "the loss is per token";
    EXPECT_NEAR(stats.as<double>()[0] / 24.0, loss, 1e-5 * loss);
    expect_grads_match(grads, g);
    const EvalResult e = wl->evaluate(rt);
    windows(eval_, {0, 1, 2, 3, 4}, tok, tgt);
    EXPECT_EQ(e.count, 40);
    EXPECT_NEAR(e.loss, model.loss(tok, tgt, 5, 8, nullptr), 1e-5 * e.loss);
  }
}

// Three AdamW steps (device-adam, sequential windows: step t's row b is window 3t + b) against the
// double model and double AdamW (tests/reference/reference.hpp) on its own gradients. AdamW's
// update m / (sqrt(v) + eps) divides by the gradient's size: a gradient element near zero, whose
// float value is mostly rounding, moves its weight by up to lr either way. With eps = 1e-3 (above
// the gradients' float error of ~1e-7 of their scale, below their typical size) the update is a
// Lipschitz function of the gradient (constant lr / eps = 10): the float error of 1e-4 of a
// tensor's largest gradient (kGradTol) gives at most 1e-3 of it per step; over 3 steps, with the
// weights' own float rounding, 3e-3 of lr is the bound checked (a wrong gradient or a missed step
// is off by a whole lr).
TEST_P(LlamaModel, ThreeAdamWStepsMatchDoubleReference) {
  spec_.train.steps = 3;
  spec_.optimizer.eps = 1e-3;
  std::map<std::string, std::vector<float>> got;
  RunOptions o;
  o.quiet = true;
  o.evaluate = false;
  o.inspect = [&](Runtime&, Workload& wl) { got = values(wl); };
  run_training(spec_, o);
  ref::LlamaModelRef model(config_, ref_params());
  const ref::AdamParams hp{(float)spec_.optimizer.lr, (float)spec_.optimizer.beta1, (float)spec_.optimizer.beta2,
                           (float)spec_.optimizer.eps, (float)spec_.optimizer.weight_decay};
  ref::LlamaModelRef::Params m, v;
  for (int64_t t = 0; t < 3; ++t) {
    std::vector<int32_t> tok, tgt;
    windows(train_, {3 * t, 3 * t + 1, 3 * t + 2}, tok, tgt);
    ref::LlamaModelRef::Params g;
    model.loss(tok, tgt, 3, 8, &g);
    for (auto& [n, p] : model.params()) {
      m[n].resize(p.size()), v[n].resize(p.size());
      ref::adam_step(p.data(), g.at(n).data(), m[n].data(), v[n].data(), p.size(), hp, t + 1, 1.0);
    }
  }
  ASSERT_EQ(got.size(), model.params().size());
  for (auto& [n, p] : model.params()) {
    SCOPED_TRACE(n);
    double diff = 0.0;
    for (size_t i = 0; i < p.size(); ++i) diff = std::max(diff, std::fabs((double)got.at(n)[i] - p[i]));
    EXPECT_LE(diff, 3e-3 * spec_.optimizer.lr);
  }
}

// Precision bf16 (docs/spec.md): the parameters the directory's values rounded to bf16 (BF16
// directories: exactly theirs), one step's loss and the evaluation loss against the double reference
// on those values within loss_bound (tests/models/bf16_helpers.hpp: u times the reference's
// sensitivity to the rounded inputs of the linear layers and to the activations stored in bf16;
// the CPU's grouped-query attention stays fp32, codelets/attention.cpp). The losses must also
// differ from the reference by more than the fp32 tolerance (the roundings ran: the fp32 engine's
// loss is within 1e-8 of it here). Where the CPU has no native bf16 the products run in fp32, so
// with fp32 activations (Runtime::activations_bf16 off) the losses equal the fp32 engine's bitwise.
TEST_P(LlamaModel, Bf16StepAndEvalWithinBf16OfDoubleReference) {
  const auto rounded = as_stored(written_, "BF16");
  ref::LlamaModelRef::Params p;
  for (auto& [n, v] : rounded) p[n] = to_d(v);
  ref::LlamaModelRef model(config_, p);
  std::vector<int32_t> tok, tgt, etok, etgt;
  windows(train_, {0, 17, 5}, tok, tgt);
  windows(eval_, {0, 1, 2, 3, 4}, etok, etgt);
  ref::LlamaModelRef::Params g;
  const double loss = model.loss(tok, tgt, 3, 8, &g);
  const double S = model.bf16_sensitivity();
  const double eloss = model.loss(etok, etgt, 5, 8, &g);
  const double eS = model.bf16_sensitivity();
  for (const char* layout : {"out_in", "in_out"}) {
    SCOPED_TRACE(layout);
    double got[3][2];  // [fp32, bf16, bf16 with fp32 activations][step, eval]
    for (int bf : {0, 1, 2}) {
      if (bf == 2 && cpu_native_bf16()) break;
      Spec s = spec_;
      s.model.weight_layout = layout;
      s.precision = bf ? "bf16" : "fp32";
      Runtime rt(rt_config());
      auto wl = make_workload(s, &rt.tracker().status());
      Precision prec(s, rt, *wl);  // what run_training sets up: the bf16 products, the rounded parameters
      prec.store_params(true);  // run_training's: bf16 parameters in 2-byte storage
      if (bf == 2) rt.set_activations_bf16(false);
      if (!bf) bf16::set_values(*wl, rounded);  // the fp32 engine on the same values
      EXPECT_EQ(values(*wl), rounded);
      Tensor stats = Tensor::home({3}, "stats", sizeof(double));
      wl->submit_step(rt, 0, {0, 17, 5}, stats);
      rt.wait_all();
      got[bf][0] = stats.as<double>()[0] / stats.as<double>()[2];
      got[bf][1] = wl->evaluate(rt).loss;
    }
    const double d = std::fabs(got[1][0] - loss), ed = std::fabs(got[1][1] - eloss);
    EXPECT_LE(d, bf16::loss_bound(loss, S)) << "step loss " << got[1][0] << " vs " << loss;
    EXPECT_LE(ed, bf16::loss_bound(eloss, eS)) << "eval loss " << got[1][1] << " vs " << eloss;
    EXPECT_GT(d, bf16::kFp32LossTol * loss) << "the bf16 roundings did not run";
    EXPECT_GT(ed, bf16::kFp32LossTol * eloss) << "the bf16 roundings did not run";
    if (!cpu_native_bf16()) {
      EXPECT_EQ(got[2][0], got[0][0]);
      EXPECT_EQ(got[2][1], got[0][1]);
    }
  }
}

// Three AdamW steps of zenflow-run's trainer (device-adam, precision bf16, sequential windows),
// each step checked on its own: its loss against the double reference at the parameters the
// engine's forward read (bf16::loss_bound); its gradient against the reference's there
// (bf16::expect_grads_within, 72 sites: 9 rounded inputs on the forward's longest chain, 4 linear
// layers per block and the head; back from the head's rounded output gradient, the activation
// gradients stored in bf16 (Runtime::activation_grads_bf16) rounded 24 times on the longest path
// to layer 0's q_proj: once after the final norm; 14 times in block 1 (dh, dgate, dxn, its sum
// with up's, dres_b, its residual sum, datty, dq, dq after the rotary embedding, dxn, its sums
// with k's and v's, dres_a, its residual sum); 9 in block 0 (up to dq after the rotary
// embedding); the weight gradient's 2 operands: 36, doubled; the residual stream and products'
// outputs stored in bf16 add roundings on the forward chain this count leaves out, and it held
// with them; 40 held with fp32 activation gradients, which were rounded only as the products' 9
// operands); and the parameters after each step, which must be device-adam's bf16 update of the
// engine's own gradients (bf16::RoundedAdamRef: each gradient rounded to bf16, a
// double master, the master rounded to bf16; up to fp32's error of the master near a rounding
// midpoint). The weights move by ~lr a step, far beyond that error (~1e-6).
TEST_P(LlamaModel, Bf16ThreeAdamWStepsWithinBf16OfReference) {
  spec_.precision = "bf16";
  spec_.train.steps = 3;
  const bf16::Capture c = bf16::run_capturing_steps(spec_);
  ASSERT_EQ(c.params.size(), 3u);
  ASSERT_EQ(c.losses.size(), 3u);
  EXPECT_EQ(c.params[0], as_stored(written_, "BF16")) << "the first step reads the rounded values";
  bf16::RoundedAdamRef adam(c.params[0], bf16::adam_params(spec_));
  for (int64_t t = 0; t < 3; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    if (t > 0) adam.expect_rounded_masters(c.params[(size_t)t], "the parameters step " + std::to_string(t) + " read");
    ref::LlamaModelRef::Params p;
    for (auto& [n, v] : c.params[(size_t)t]) p[n] = to_d(v);
    ref::LlamaModelRef model(config_, p);
    std::vector<int32_t> tok, tgt;
    windows(train_, {3 * t, 3 * t + 1, 3 * t + 2}, tok, tgt);
    ref::LlamaModelRef::Params g;
    const double loss = model.loss(tok, tgt, 3, 8, &g);
    EXPECT_LE(std::fabs(c.losses[(size_t)t] - loss), bf16::loss_bound(loss, model.bf16_sensitivity()))
        << "step loss " << c.losses[(size_t)t] << " vs " << loss;
    bf16::expect_grads_within(c.grads[(size_t)t], g, 72);
    adam.step(c.grads[(size_t)t], t);
  }
  adam.expect_rounded_masters(c.final, "the final parameters");
  for (auto& [n, v] : c.final) {
    double moved = 0;
    for (size_t i = 0; i < v.size(); ++i) moved = std::max(moved, std::fabs((double)v[i] - c.params[0].at(n)[i]));
    EXPECT_GT(moved, spec_.optimizer.lr) << n << ": the steps moved the weights";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, LlamaModel,
    ::testing::Values(Case{"GqaUntied", gqa_untied, "F32", 0}, Case{"Tied", tied, "F32", 0},
                      Case{"Qwen2Biases", qwen2, "F32", 0}, Case{"GqaUntiedBf16", gqa_untied, "BF16", 0},
                      Case{"Qwen2Bf16", qwen2, "BF16", 0}, Case{"GqaUntiedSharded", gqa_untied, "F32", 3000},
                      Case{"TiedSharded", tied, "BF16", 2000}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Fixed rows (models/data/lm_rows.hpp, the instruction data's contract): targets -1 carry no loss; the
// loss and gradients are the mean over the counted targets, as the reference's; evaluation counts
// only them.
TEST(LlamaRows, MaskedTargetsMatchDoubleReference) {
  TempDir d("zf_llama");
  const hf::Config c = write_config(d.path("m"), gqa_untied());
  auto written = random_values(c, 8);
  write_model(d.path("w"), gqa_untied(), written, "F32");
  const hf::Config cw = hf::read_config(d.path("w/config.json"));
  Rng r(3);
  LmRowSplit rows;
  for (LmRows* m : {&rows.train, &rows.eval}) {
    m->T = 8, m->rows = 4, m->description = "test rows";
    for (int i = 0; i < 32; ++i) {
      m->tokens.push_back((int32_t)r.below(40));
      m->targets.push_back(i % 8 < 3 || i % 8 == 7 ? -1 : (int32_t)r.below(40));  // a prompt, then a response
    }
  }
  LlamaOptions o;
  o.dir = d.path("w"), o.context = 8, o.batch_size = 2, o.eval_batch_size = 3;
  Runtime rt(rt_config());
  LlamaLanguageModel wl(cw, o, rows, &rt.tracker().status());
  EXPECT_EQ(wl.epoch_size(), 4);
  Tensor stats = Tensor::home({3}, "stats", sizeof(double));
  wl.submit_step(rt, 0, {2, 0}, stats);
  const auto grads = read_grads(rt, wl);
  rt.tracker().status().rethrow_if_failed();
  ref::LlamaModelRef::Params p;
  for (auto& [n, v] : written) p[n] = to_d(v);
  ref::LlamaModelRef model(cw, p);
  auto pick = [](const std::vector<int32_t>& v, std::vector<int> rs) {
    std::vector<int32_t> out;
    for (int x : rs) out.insert(out.end(), v.begin() + x * 8, v.begin() + x * 8 + 8);
    return out;
  };
  ref::LlamaModelRef::Params g;
  const double loss = model.loss(pick(rows.train.tokens, {2, 0}), pick(rows.train.targets, {2, 0}), 2, 8, &g);
  EXPECT_EQ(stats.as<double>()[2], 8.0) << "4 counted targets per row";
  EXPECT_NEAR(stats.as<double>()[0] / 8.0, loss, 1e-5 * loss);
  expect_grads_match(grads, g);
  const EvalResult e = wl.evaluate(rt);
  EXPECT_EQ(e.count, 16);
  EXPECT_NEAR(e.loss, model.loss(rows.eval.tokens, rows.eval.targets, 4, 8, nullptr), 1e-5 * e.loss);
}

// ------------------------------------------------------------------ the spec's bad inputs

std::string input_error(const Spec& s) {
  Runtime rt(rt_config());
  try {
    make_workload(s, &rt.tracker().status());
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(LlamaSpec, BadInputsNameTheField) {
  TempDir d("zf_llama");
  write_config(d.path("m"), gqa_untied());
  write_tokens(d.path("t.bin"), 100, 40, 1);
  Spec s = hf_spec(d.path("m"), d.path("t.bin"), d.path("t.bin"));
  s.model.init = "random";  // config.json alone
  json j = s.to_json();
  j["model"].erase("path");
  try {
    parse_spec(j, "x.json");
    ADD_FAILURE() << "model.type hf without model.path accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("x.json: model.path"), std::string::npos) << e.what();
  }
  Spec bad = s;
  bad.model.path = d.path("nowhere");
  EXPECT_NE(input_error(bad).find("llama-test: model.path"), std::string::npos) << input_error(bad);
  bad.model.path = d.path("t.bin");  // a file, not a directory
  EXPECT_NE(input_error(bad).find("model.path"), std::string::npos);
  bad = s;
  bad.model.context = 33;  // max_position_embeddings 32
  EXPECT_NE(input_error(bad).find("llama-test: model.context"), std::string::npos) << input_error(bad);
  bad.model.context = 32;  // max_position_embeddings itself is allowed
  EXPECT_EQ(input_error(bad), "(no InputError)");
  fs::create_directories(d.path("g"));  // a family the engine does not train
  std::ofstream(d.path("g") + "/config.json") << R"({"model_type": "bert", "vocab_size": 40})";
  bad = s;
  bad.model.path = d.path("g");
  EXPECT_NE(input_error(bad).find("config.json: model_type"), std::string::npos) << input_error(bad);
}

}  // namespace
}  // namespace zf::test
