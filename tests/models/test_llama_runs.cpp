// The Llama workload (models/nets/llama.hpp) through the trainer (graphs/train/trainer.hpp): every
// strategy, precision bf16 (its 2-byte parameters bitwise its 4-byte words), gradient clipping and
// accumulation on a tiny GQA model learning a repeating token sequence; a checkpoint resume bitwise; --save-hf's directory (models/hf/hf_model.hpp)
// bitwise the input's tensors and config.json.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "codelets/codelets.hpp"
#include "codelets/kernels/bf16.hpp"
#include "graphs/schema/spec.hpp"
#include "graphs/train/trainer.hpp"
#include "graphs/train/workload_factory.hpp"
#include "models/hf/load.hpp"
#include "models/hf/hf_model.hpp"
#include "runtime/error.hpp"
#include "tests/models/gpt_helpers.hpp"
#include "tests/models/llama_helpers.hpp"

namespace zf::test {
namespace {

using namespace llama;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A GQA Llama (F32 weights) on a repeating sequence of 23 ids (train 600 tokens, eval 120).
struct Fixture {
  TempDir dir{"zf_llama_runs"};
  Spec spec;
  explicit Fixture(const json& cfg = gqa_untied()) {
    const hf::Config c = write_config(dir.path("cfg"), cfg);
    write_model(dir.path("model"), cfg, random_values(c, 3), "F32");
    std::vector<int32_t> cycle = write_tokens(dir.path("cycle.bin"), 23, 40, 9);
    std::vector<uint16_t> train, eval;
    for (int i = 0; i < 600; ++i) train.push_back((uint16_t)cycle[(size_t)i % 23]);
    for (int i = 0; i < 120; ++i) eval.push_back((uint16_t)cycle[(size_t)(i + 4) % 23]);
    std::ofstream(dir.path("train.bin"), std::ios::binary).write((const char*)train.data(), 1200);
    std::ofstream(dir.path("eval.bin"), std::ios::binary).write((const char*)eval.data(), 240);
    spec = hf_spec(dir.path("model"), dir.path("train.bin"), dir.path("eval.bin"));
    spec.train.batch_size = 6;
    spec.train.steps = 12;
    spec.optimizer.lr = 3e-3;
  }
};

double eval_loss(const Spec& s, Weights* w = nullptr) {
  json m;
  Weights got = train_and_capture(s, &m, true);
  if (w) *w = got;
  return m["final"]["eval_loss"].get<double>();
}

// Each strategy learns (eval loss well below the start's); zero-offload's eval loss equals
// device-adam's within float rounding (1e-4 relative: the same AdamW on the host), and so does
// accumulation over 2 micro-batches of 3 windows (one batch of 6); bf16 leaves bf16 weights;
// clipping clips.
TEST(LlamaRuns, StrategiesPrecisionClippingAccumulation) {
  Fixture f;
  Spec s0 = f.spec;
  s0.train.steps = 1;
  s0.optimizer.lr = 1e-9;  // about the start's weights
  const double start = eval_loss(s0);
  const double dev_loss = eval_loss(f.spec);
  RecordProperty("start", std::to_string(start));
  RecordProperty("device_adam", std::to_string(dev_loss));
  EXPECT_LT(dev_loss, 0.8 * start) << "12 steps on a repeating sequence learn";
  for (const char* strategy : {"zero-offload", "zero-offload-dpu", "zenflow"}) {
    SCOPED_TRACE(strategy);
    Spec s = f.spec;
    s.strategy = strategy;
    const double loss = eval_loss(s);
    RecordProperty(strategy, std::to_string(loss));
    EXPECT_LT(loss, 0.8 * start);
    if (std::string(strategy) == "zero-offload") {  // the same AdamW, on the host: rounding apart
      EXPECT_NEAR(loss, dev_loss, 1e-4 * dev_loss);
    }
  }
  Spec b = f.spec;
  b.precision = "bf16";
  Weights wb;
  EXPECT_LT(eval_loss(b, &wb), 0.8 * start);
  for (auto& [n, v] : wb)
    for (float x : v) ASSERT_EQ(kernels::bf16::round(x), x) << n << " is not a bf16 value";
  Spec a = f.spec;
  a.train.gradient_accumulation_steps = 2;
  // two micro-batches of 3 windows: the mean of their means is the batch of 6's (rounding apart)
  EXPECT_NEAR(eval_loss(a), dev_loss, 1e-4 * dev_loss);
  Spec c = f.spec;
  c.gradient_clipping = 0.05;
  c.strategy = "zero-offload";
  json m;
  train_and_capture(c, &m, false);
  ASSERT_TRUE(m.contains("gradient_clipping")) << m.dump();
  EXPECT_GT(m["gradient_clipping"]["clipped_steps"].get<int64_t>(), 0) << m["gradient_clipping"].dump();
}

// Issue 43, 2-byte storage on the Llama (embedding, RMSNorm, rotary attention, SwiGLU, the untied
// head): under bf16 every parameter and its gradient is a 2-byte buffer and device-adam and zenflow
// train bitwise the weights and losses of the 4-byte words (RunOptions::half_storage false), with 2
// bytes per parameter and per gradient value on the device.
TEST(LlamaRuns, Bf16TwoByteParametersTrainTheWordsWeightsBitwise) {
  Fixture f;
  for (const char* strategy : {"device-adam", "zenflow"}) {
    SCOPED_TRACE(strategy);
    Spec s = f.spec;
    s.strategy = strategy;
    s.precision = "bf16";
    s.train.steps = 6;
    auto run = [&](bool half, json& m) {
      RunOptions o;
      o.evaluate = false;
      o.half_storage = half;
      return run_capturing(s, o, &m);
    };
    json mh, mw;
    const Weights wh = run(true, mh), ww = run(false, mw);
    EXPECT_EQ(first_difference(wh, ww), "");
    EXPECT_EQ(mh["loss_history"], mw["loss_history"]);
    double numel = 0;
    for (auto& [n, v] : wh) numel += (double)v.size();
    EXPECT_EQ(mh["device_state_bytes"]["params"].get<double>(), 2 * numel);
    EXPECT_EQ(mw["device_state_bytes"]["params"].get<double>(), 4 * numel);
    EXPECT_EQ(mh["device_state_bytes"]["grads"].get<double>(), 2 * numel);
    EXPECT_EQ(mw["device_state_bytes"]["grads"].get<double>(), 4 * numel);
  }
}

// Precision bf16 where the CPU multiplies bf16: each output gradient of a linear layer (and the
// head's) is converted to bf16 once, by the data-gradient product, and the weight-gradient product
// multiplies the copies (models/nets/llama.cpp, Acts::kept); the weights are bitwise those of
// converting dy in every call, under device-adam and zenflow, on the untied GQA model and on
// Qwen2 (q/k/v biases, tied head), and the kept path did run (96 rows a batch: oneDNN's tiles).
// The copies are for fp32 output gradients (RunOptions::bf16_activation_grads off); with the
// activation gradients stored in bf16 (the default) only the head's (dlogits, fp32) is kept, and
// the weights differ from the fp32 gradients'.
TEST(LlamaRuns, Bf16KeptGradientCopiesBitwiseSameAsPerCallConversion) {
  if (!cpu_native_bf16()) GTEST_SKIP() << "no native bf16 on this CPU: bf16's matmuls run in fp32";
  for (const json& cfg : {gqa_untied(), qwen2()}) {
    Fixture f(cfg);
    for (const char* strategy : {"device-adam", "zenflow"}) {
      SCOPED_TRACE(cfg["model_type"].get<std::string>() + " " + strategy);
      Spec s = f.spec;
      s.strategy = strategy;
      s.precision = "bf16";
      s.model.context = 16;
      s.train.batch_size = 6;
      s.train.steps = 3;
      uint64_t calls = 0;
      RunOptions fp32_grads;
      fp32_grads.bf16_activation_grads = false;
      const Weights per_call = run_counting_kept(s, fp32_grads, false, &calls);
      ASSERT_EQ(calls, 0u) << "turned off, the kept path ran";
      const Weights kept = run_counting_kept(s, fp32_grads, true, &calls);
      // (2 layers x 7 linear layers + the head) x 2 products x 3 steps
      EXPECT_GE(calls, (2u * 7u + 1u) * 2u * 3u) << "the kept path did not run";
      ASSERT_FALSE(per_call.empty());
      EXPECT_EQ(first_difference(kept, per_call), "");
      const Weights bf16_grads = run_counting_kept(s, RunOptions{}, true, &calls);
      EXPECT_EQ(calls, 2u * 3u) << "bf16 output gradients: only the head's fp32 one is kept";
      EXPECT_NE(first_difference(bf16_grads, kept), "") << "bf16 activation gradients changed nothing";
    }
  }
}

// A Llama whose matmuls and attention are cut into tiles (hidden 64, MLP 256, 256 positions a
// batch) trains to bitwise the same weights on one device core, on two device workers, and on one
// with the host worker lending its core (as GptEngine.WeightsBitwiseSameOnOneAndTwoDeviceCores);
// initialised from model.init_seed (a directory with config.json alone).
TEST(LlamaRuns, WeightsBitwiseSameOnOneAndTwoDeviceCores) {
  Fixture f;
  json c = gqa_untied();
  c["hidden_size"] = 64, c["intermediate_size"] = 256, c["max_position_embeddings"] = 64;
  write_config(f.dir.path("big"), c);
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    Spec s = f.spec;
    s.model.path = f.dir.path("big");
    s.model.init = "random";
    s.model.context = 32;
    s.train.batch_size = 8;
    s.train.steps = 4;
    s.precision = precision;
    expect_same_weights_on_any_worker_split(s);
  }
}

// Issue 44, activation checkpointing on 3 blocks: every block, and segments of 2 (the last one
// block), the same weights bitwise as without, in fp32 and bf16, under device-adam and zenflow; the
// activation buffers shrink.
TEST(LlamaRuns, ActivationCheckpointingGivesTheSameWeightsBitwise) {
  json c = gqa_untied();
  c["num_hidden_layers"] = 3;
  Fixture f(c);
  Spec s = f.spec;
  s.train.steps = 4;
  expect_checkpointing_changes_no_weight(s);
}

// The LM head and its loss in vocabulary chunks (runtime.logits_chunk_elems 700: the training
// batch's 48 x 40 logits in 3 chunks of 14, 14 and 12 columns, the evaluation's 32 x 40 in 2) train
// as the whole logits do, in fp32 and bf16, under device-adam and zenflow: the eval loss within
// 1e-5 relative and every weight within 1e-6 relative L2 after 4 steps in fp32 (the chunked sum of
// exp rounds differently; measured 4e-8), 1e-3 in bf16 (where a gradient rounding that flips moves
// an element by a bf16 step, 2^-8 of it; measured 0: no flip). The (N, V) logits and their
// gradient are not allocated; the weights are bitwise the same on any worker split.
TEST(LlamaRuns, ChunkedHeadTrainsAsTheWholeLogits) {
  Fixture f;
  Spec s = f.spec;
  s.train.steps = 4;
  const int64_t N = (int64_t)s.train.batch_size * s.model.context, V = 40;
  for (const char* precision : {"fp32", "bf16"})
    for (const char* strategy : {"device-adam", "zenflow"}) {
      SCOPED_TRACE(std::string(precision) + " " + strategy);
      s.precision = precision;
      s.strategy = strategy;
      json m[2];
      Weights w[2];
      for (int c : {0, 1}) {
        s.runtime.logits_chunk_elems = c ? 700 : 0;
        w[c] = train_and_capture(s, &m[c], true);
      }
      const double l0 = m[0]["final"]["eval_loss"].get<double>(), l1 = m[1]["final"]["eval_loss"].get<double>();
      EXPECT_NEAR(l1, l0, 1e-5 * l0);
      const double tol = std::string(precision) == "bf16" ? 1e-3 : 1e-6;
      double worst = 0;
      for (auto& [name, v] : w[0]) {
        double d = 0, n = 0;
        for (size_t i = 0; i < v.size(); ++i) {
          d += ((double)w[1][name][i] - v[i]) * ((double)w[1][name][i] - v[i]);
          n += (double)v[i] * v[i];
        }
        const double r = std::sqrt(d / std::max(n, 1e-30));
        worst = std::max(worst, r);
        EXPECT_LT(r, tol) << name;
      }
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3g", worst);
      RecordProperty(std::string("worst_rel_l2_") + precision + "_" + strategy, buf);
      const int64_t a0 = m[0]["device_state_bytes"]["activations"].get<int64_t>();
      const int64_t a1 = m[1]["device_state_bytes"]["activations"].get<int64_t>();
      EXPECT_GE(a0 - a1, 2 * N * V * 4) << "the logits and their gradient";
    }
  s.precision = "fp32";
  s.strategy = "device-adam";
  s.runtime.logits_chunk_elems = 700;
  expect_same_weights_on_any_worker_split(s);
}

// Checkpoints after steps 3 and 7 (zenflow, sequential windows): the resumed run is bitwise the
// uninterrupted one.
TEST(LlamaRuns, ResumeIsBitwise) {
  Fixture f;
  f.spec.strategy = "zenflow";
  f.spec.train.steps = 10;
  const Weights full = run_with(f.spec, "", 0, "");
  const std::string ck = f.dir.path("ck");
  f.spec.train.steps = 8;
  run_with(f.spec, ck, 4, "");
  f.spec.train.steps = 10;
  EXPECT_EQ(first_difference(run_with(f.spec, "", 0, ck + "/step-00000003"), full), "") << "resumed from step 3";
  EXPECT_EQ(first_difference(run_with(f.spec, "", 0, ck), full), "") << "resumed from step 7";
}

// Issue 43, "no update is rounded away": the frozen-norm case (every RMSNorm weight bitwise its
// initial value after fine-tuning under zenflow bf16). The norms start at a bf16 value g0 whose
// half spacing is above the rate: 0.01171875 (spacing 2^-14, half 3.1e-5) at 2e-5, 0.1875 (2^-10,
// half 4.9e-4) at 3e-4, so each AdamW step (about lr) is lost when it updates the rounded weight
// in place. On fp32 masters a few steps cross it: every norm tensor moves, under device-adam and
// under zenflow (fp16 too, whose spacing there is 8 times finer).
TEST(LlamaRuns, HalfPrecisionMovesEveryNormWeight) {
  Fixture f;
  const json cfg = gqa_untied();
  const hf::Config c = write_config(f.dir.path("cfg"), cfg);
  for (auto [lr, g0] : {std::pair{2e-5, 0.01171875f}, {3e-4, 0.1875f}}) {
    std::map<std::string, std::vector<float>> v = random_values(c, 3);
    std::vector<std::string> norms;
    for (const hf::TensorSpec& t : hf::expected_tensors(c))
      if (t.init == hf::Init::Ones) {
        std::fill(v[t.name].begin(), v[t.name].end(), g0);
        norms.push_back(t.name);
      }
    ASSERT_EQ(norms.size(), 5u) << "two per layer and the final norm";
    const std::string dir = f.dir.path("norms-" + std::to_string(lr));
    write_model(dir, cfg, v, "F32");
    for (const char* precision : {"bf16", "fp16"})
      for (const char* strategy : {"device-adam", "zenflow"}) {
        SCOPED_TRACE(std::string(strategy) + " " + precision + " lr " + std::to_string(lr));
        Spec s = f.spec;
        s.model.path = dir;
        s.strategy = strategy;
        s.precision = precision;
        s.optimizer.lr = lr;
        s.train.steps = 6;
        const Weights w = train_and_capture(s);
        for (const std::string& n : norms) {
          size_t moved = 0;
          for (float x : w.at(n)) moved += x != g0;
          EXPECT_GT(moved, 0u) << n << " stayed at its initial value";
        }
      }
  }
}

// --resume after config.json's rope_theta or rms_norm_eps was edited (no shape changes, so the
// weights load): refused naming the file and the field, both values given; restored, it resumes.
TEST(LlamaRuns, ResumeRefusesAnEditedConfig) {
  Fixture f;
  f.spec.train.steps = 2;
  const std::string ck = f.dir.path("ck");
  run_with(f.spec, ck, 0, "");
  const std::string cfg_path = f.spec.model.path + "/config.json";
  const std::string original = slurp(cfg_path);
  f.spec.train.steps = 3;
  for (const auto& [field, value] : {std::pair<std::string, double>{"rope_theta", 10000.0},
                                     std::pair<std::string, double>{"rms_norm_eps", 1e-3}}) {
    json cfg = json::parse(original);
    cfg[field] = value;
    std::ofstream(cfg_path, std::ios::trunc) << cfg.dump();
    expect_input_error([&] { run_with(f.spec, "", 0, ck); },
                       {cfg_path + ": " + field, "the checkpoint was written with", "this run has"});
  }
  std::ofstream(cfg_path, std::ios::trunc) << original;
  EXPECT_FALSE(run_with(f.spec, "", 0, ck).empty()) << "the restored config.json resumes";
}

// --save-hf (save_hf, as the trainer calls it) before any step: the same config.json bytes and,
// in each tensor's input dtype, the same tensors bitwise; --save-dtype f32 the same values.
TEST(LlamaRuns, SaveHfRoundTripsBitwise) {
  for (uint64_t shard : {uint64_t(0), uint64_t(2000)}) {
    Fixture f;
    const hf::Config qc = write_config(f.dir.path("q"), qwen2());
    write_model(f.dir.path("bf"), qwen2(), random_values(qc, 4), "BF16", shard);
    f.spec.model.path = f.dir.path("bf");
    f.spec.data.path = f.dir.path("train.bin");
    Runtime rt(rt_config());
    Spec s = f.spec;
    auto wl = make_workload(s, &rt.tracker().status());
    save_hf(*wl, f.dir.path("out"), "");
    save_hf(*wl, f.dir.path("out32"), "f32");
    EXPECT_EQ(slurp(f.dir.path("out/config.json")), slurp(f.dir.path("bf/config.json")));
    std::map<std::string, std::vector<float>> a, b, d;
    auto into = [](std::map<std::string, std::vector<float>>& m) {
      return [&m](const hf::TensorSpec& t) { return (m[t.name] = std::vector<float>(t.numel())).data(); };
    };
    const hf::Config q = hf::read_config(f.dir.path("bf/config.json"));
    const hf::LoadResult ra = hf::load_weights(f.dir.path("bf"), q, hf::InitFrom::files(), into(a));
    const hf::LoadResult rb = hf::load_weights(f.dir.path("out"), q, hf::InitFrom::files(), into(b));
    hf::load_weights(f.dir.path("out32"), q, hf::InitFrom::files(), into(d));
    EXPECT_EQ(ra.dtypes, rb.dtypes);
    EXPECT_EQ(first_difference(b, a), "");
    EXPECT_EQ(first_difference(d, a), "");
  }
  Fixture f;  // not a Hugging Face model: refused naming --save-hf
  Runtime rt(rt_config());
  Spec g = tiny_gpt_spec("gpt", "tokens", f.dir.path("train.bin"));
  g.data.eval_path = f.dir.path("eval.bin");
  g.model.vocab = 40;
  auto wl = make_workload(g, &rt.tracker().status());
  try {
    save_hf(*wl, f.dir.path("x"), "");
    ADD_FAILURE() << "a GPT saved as a Hugging Face directory";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--save-hf"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zf::test
