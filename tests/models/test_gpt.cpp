// The GPT workloads through StarPU (models/nets/gpt.hpp, models/nets/gpt_classifier.hpp): one training step
// of a tiny GPT language model, and of the classifier, submitted as a task graph: loss and every
// parameter gradient against the naive double reference (tests/reference/gpt_ref.hpp) on the same
// float parameters and batch, in both weight layouts; steps bitwise identical under several
// scheduling policies and on one or two device cores; a tiny model learns. The generative head:
// test_gpt_generative.cpp; text data: test_gpt_data.cpp; --init and the spec:
// tests/graphs/test_gpt_init.cpp.
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

// (model.weight_layout) says.
void lm_step_matches_reference(const std::string& layout) {
  TempDir dir;
  const std::string text = fixture_text();
  Spec s = tiny_gpt_spec("gpt", "text", dir.write("t.txt", text));
  s.model.weight_layout = layout;
  Runtime rt(rt_config());
  auto wl = make_workload(s, &rt.tracker().status());
  ref::GptRef model({2, 2, 16, 256}, randomize(*wl, 11));
  Tensor stats = Tensor::home({3}, "stats", sizeof(double));
  const std::vector<int32_t> idx = {0, 17, 5};
  wl->submit_step(rt, 0, idx, stats);
  auto grads = read_grads(rt, *wl);
  rt.tracker().status().rethrow_if_failed();

  const int B = 3, T = 8;
  std::vector<int32_t> tok, tgt;
  for (int32_t u : idx)
    for (int t = 0; t < T; ++t) {
      tok.push_back((uint8_t)text[(size_t)u * T + t]);
      tgt.push_back((uint8_t)text[(size_t)u * T + t + 1]);
    }
  ref::GptRef::Params g;
  const double loss = model.lm_loss(tok, tgt, B, T, &g);
  const double* st = stats.as<double>();
  EXPECT_EQ(st[2], (double)(B * T)) << "the loss is per token";
  EXPECT_NEAR(st[0] / st[2], loss, 1e-5 * loss);
  expect_grads_match(grads, g);
}

TEST(GptEngine, LanguageModelStepMatchesDoubleReference) { lm_step_matches_reference("auto"); }  // (out, in)

// ------------------------------------------------------------------ the (in, out) storage

// The blocks' four Linear weights stored (in, out) (model.weight_layout in_out, the default under
// zenflow; docs/zenflow.md): the same step, every gradient within the reference's tolerance (a
// weight or gradient read in the wrong layout is off at the 1e-1 level).
TEST(GptLayout, InOutStepMatchesDoubleReference) { lm_step_matches_reference("in_out"); }

// Which weights are stored (in, out) under each layout and strategy, and the same initial values
// in the logical layout whatever the storage (drawn in (out, in) order).
TEST(GptLayout, BlockWeightsInOutUnderZenflowSameInitialValues) {
  TempDir dir;
  const std::string text = dir.write("t.txt", fixture_text()), kjv = dir.write("kjv.txt", fixture_kjv());
  Runtime rt(rt_config());
  for (const std::string type : {"gpt", "gpt-classifier"}) {
    SCOPED_TRACE(type);
    Spec s = tiny_gpt_spec(type, type == "gpt" ? "text" : "kjv", type == "gpt" ? text : kjv);
    std::map<std::string, std::vector<float>> init[2];
    for (const char* strategy : {"device-adam", "zero-offload", "zenflow"})
      for (const char* layout : {"auto", "in_out", "out_in"}) {
        SCOPED_TRACE(std::string(strategy) + " " + layout);
        s.strategy = strategy;
        s.model.weight_layout = layout;
        const bool io = s.model.weight_layout == "in_out" || (s.model.weight_layout == "auto" && s.strategy == "zenflow");
        auto wl = make_workload(s, &rt.tracker().status());
        int stored_in_out = 0;
        for (Param* p : wl->params()) {
          SCOPED_TRACE(p->name);
          const std::string& n = p->name;
          const bool block_weight = n.rfind("h.", 0) == 0 && n.find(".ln_") == std::string::npos &&
                                    n.compare(n.size() - 7, 7, ".weight") == 0;
          EXPECT_EQ(p->in_out, io && block_weight);
          if (p->in_out) {
            ++stored_in_out;
            EXPECT_EQ(p->value.shape(), (std::vector<int64_t>{p->cols(), p->rows()}));
            EXPECT_EQ(p->grad.shape(), p->value.shape());
          }
          if (n.find("c_attn.weight") != std::string::npos) {
            EXPECT_EQ(p->logical_shape(), (std::vector<int64_t>{48, 16}));  // (out, in) = (3C, C)
          }
          if (n.find("mlp.c_proj.weight") != std::string::npos) {
            EXPECT_EQ(p->logical_shape(), (std::vector<int64_t>{16, 64}));  // (C, 4C)
          }
          std::vector<float> v = logical_values(*p);
          auto& seen = init[io][n];
          if (seen.empty()) seen = v;
          EXPECT_EQ(v, seen) << "the same initial values each time";
        }
        EXPECT_EQ(stored_in_out, io ? 4 * 2 : 0);  // 2 blocks of 4 Linear weights
      }
    EXPECT_EQ(init[0], init[1]) << "the same logical initial values in both layouts";
  }
}

class GptClassifierStep : public ::testing::TestWithParam<std::string> {};

TEST_P(GptClassifierStep, MatchesDoubleReference) {
  TempDir dir;
  Spec s = tiny_gpt_spec("gpt-classifier", "kjv", dir.write("kjv.txt", fixture_kjv()));
  s.model.pool = GetParam();
  s.model.context = 16;  // verses longer and shorter than the context: truncation and padding
  s.data.labels = "section";
  Runtime rt(rt_config());
  auto wl = make_workload(s, &rt.tracker().status());
  auto* cls = dynamic_cast<GptClassifier*>(wl.get());
  ASSERT_NE(cls, nullptr);
  ref::GptRef model({2, 2, 16, 256}, randomize(*wl, 12));
  Tensor stats = Tensor::home({3}, "stats", sizeof(double));
  const SequenceData& tr = cls->task().train;
  // Genesis 1:1 (truncated), John 11:35 "Jesus wept." (padded), Ruth 1:16, Psalms 23:1
  const std::vector<int32_t> idx = {0, 9, 3, 5};
  ASSERT_EQ(tr.rows, 15);
  ASSERT_EQ(tr.lengths[9], 11) << "the batch must contain a padded verse";
  ASSERT_EQ(tr.lengths[0], 16);
  wl->submit_step(rt, 0, idx, stats);
  auto grads = read_grads(rt, *wl);
  rt.tracker().status().rethrow_if_failed();

  std::vector<int32_t> tok, len, lab;
  for (int32_t i : idx) {
    for (int t = 0; t < 16; ++t) tok.push_back(tr.table[(size_t)i * 16 + t]);
    len.push_back(tr.lengths[i]);
    lab.push_back(tr.labels[i]);
  }
  ref::GptRef::Params g;
  const double loss = model.cls_loss(tok, len, lab, 4, 16, &g, GetParam() == "max");
  const double* st = stats.as<double>();
  EXPECT_EQ(st[2], 4.0);
  EXPECT_NEAR(st[0] / st[2], loss, 1e-5 * loss);
  expect_grads_match(grads, g);
}

INSTANTIATE_TEST_SUITE_P(Pool, GptClassifierStep, ::testing::Values("mean", "max"));

// pool "last": the output at the verse's last byte (models/nets/gpt_classifier.cpp's own codelet).
TEST(GptClassifierLastPool, KernelGathersAndScattersTheLastPosition) {
  const int B = 3, T = 5, C = 4;
  const std::vector<int32_t> len = {5, 1, 3};
  std::vector<float> x((size_t)B * T * C), y((size_t)B * C, -1.0f), dy((size_t)B * C), dx(x.size(), 7.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (float)i;
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = 100.0f + (float)i;
  kernels::cpu::last_pool_fwd(x.data(), len.data(), y.data(), B, T, C);
  kernels::cpu::last_pool_bwd(dy.data(), len.data(), dx.data(), B, T, C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const size_t i = ((size_t)b * T + t) * C + c;
        const bool last = t == len[b] - 1;
        if (last) {
          EXPECT_EQ(y[(size_t)b * C + c], x[i]) << b << " " << c;
        }
        EXPECT_EQ(dx[i], last ? dy[(size_t)b * C + c] : 0.0f) << b << " " << t << " " << c;
      }
}

// Through StarPU: on one-byte verses "last", "mean" and "max" all pool position 0, so one step
// gives bitwise the same loss and gradients (the mean and max paths match the double reference
// above); on longer verses "last" differs from both.
TEST(GptClassifierLastPool, StepWiredLikeTheOtherPools) {
  GptConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.context = 8, c.batch_size = 3;
  auto task = [](bool one_byte) {
    VerseTask t;
    t.class_names = bible_testaments();
    t.train.T = t.eval.T = 8;
    const char* texts[] = {"And God said", "Jesus wept.", "Amen"};
    for (int i = 0; i < 3; ++i) {
      const std::string s = one_byte ? std::string(1, texts[i][0]) : texts[i];
      t.train.add(s, i % 2, i);
      t.eval.add(s, i % 2, i);
    }
    return t;
  };
  auto step = [&](const std::string& pool, bool one_byte, double* loss) {
    Runtime rt(rt_config());
    GptClassifier cls(c, task(one_byte), pool, &rt.tracker().status());
    randomize(cls, 13);
    Tensor stats = Tensor::home({3}, "stats", sizeof(double));
    cls.submit_step(rt, 0, {0, 1, 2}, stats);
    auto g = read_grads(rt, cls);
    rt.tracker().status().rethrow_if_failed();
    *loss = stats.as<double>()[0];
    return g;
  };
  double l_last, l_mean, l_max;
  auto g_last = step("last", true, &l_last);
  EXPECT_EQ(step("mean", true, &l_mean), g_last);
  EXPECT_EQ(step("max", true, &l_max), g_last);
  EXPECT_EQ(l_last, l_mean);
  EXPECT_EQ(l_last, l_max);
  g_last = step("last", false, &l_last);
  auto g_mean = step("mean", false, &l_mean);
  EXPECT_NE(l_last, l_mean);
  EXPECT_NE(g_last.at("h.0.attn.c_attn.weight"), g_mean.at("h.0.attn.c_attn.weight"));
  bool all_zero = true;
  for (float v : g_last.at("h.0.attn.c_attn.weight")) all_zero = all_zero && v == 0.0f;
  EXPECT_FALSE(all_zero);
}

TEST(GptEngine, StepsBitwiseSameUnderSchedulingPolicies) {
  TempDir dir;
  Spec s = tiny_gpt_spec("gpt", "text", dir.write("t.txt", fixture_text()));
  s.train.steps = 3;
  s.runtime.sched = "eager";
  const Weights ref = train_and_capture(s);
  for (const char* pol : {"lws", "dmda", "prio"}) {
    SCOPED_TRACE(pol);
    s.runtime.sched = pol;
    EXPECT_EQ(train_and_capture(s), ref);
  }
  s.strategy = "zenflow";  // 2-D embeddings and weights take the column path, 1-D LayerNorms not
  s.zenflow.update_interval = 2;
  s.zenflow.overlap_step = true;
  s.zenflow.given = true;
  s.runtime.sched = "eager";
  const Weights zref = train_and_capture(s);
  s.runtime.sched = "lws";
  EXPECT_EQ(train_and_capture(s), zref);
}

// A GPT whose matmuls and attention are cut into tiles trains to bitwise the same weights on one
// device-side core (one device worker, two host workers: more workers than cores, so the host
// ones do not lend), on two device workers, and on one with the host worker lending its core; in
// fp32 and in bf16 (bf16 operands in the matmuls and the attention where the CPU has them).
TEST(GptEngine, WeightsBitwiseSameOnOneAndTwoDeviceCores) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    TempDir dir;
    Spec s = tiny_gpt_spec("gpt", "text", dir.write("t.txt", fixture_text()));
    s.model.n_embd = 64;  // c_fc: 256 tokens x 64 x 256, two row tiles; attention: 8 sequence tiles
    s.model.context = 32;
    s.train.batch_size = 8;
    s.train.steps = 4;
    s.precision = precision;
    expect_same_weights_on_any_worker_split(s);
  }
}

// Precision bf16 with each linear layer's input stored in bf16 by the layer before it (2-byte
// storage: LayerNorm, attention and GELU write bf16, the matmuls read it as it is) and each output
// gradient converted to bf16 once (the data gradient keeps dy's copy, the weight gradient
// multiplies the copies; models/nets/gpt.cpp) trains to bitwise the same weights as the matmuls
// converting both operands in every call, and as the 4-byte words (fp32 linear-layer inputs,
// which each call converts), in both weight layouts (out_in under device-adam, in_out under
// zenflow), and the kept path did run. With fp32 activations (RunOptions::bf16_activations off)
// the words' forward keeps its operands too (the fp32 input's bf16 copy, written by the forward's
// matmul), with the same bits as converting them in every call. The kept copies are for fp32
// output gradients (RunOptions::bf16_activation_grads off); with the gradients stored in bf16 (the
// default) the products read them as stored: no kept call, and other bits than the fp32 ones.
TEST(GptEngine, Bf16KeptOperandsBitwiseSameAsPerCallConversion) {
  if (!cpu_native_bf16()) GTEST_SKIP() << "no native bf16 on this CPU: bf16's matmuls run in fp32";
  for (const char* strategy : {"device-adam", "zenflow"}) {
    SCOPED_TRACE(strategy);
    TempDir dir;
    Spec s = tiny_gpt_spec("gpt", "text", dir.write("t.txt", fixture_text()));
    s.model.n_embd = 64;
    s.model.context = 32;
    s.train.batch_size = 8;  // 256 rows: the oneDNN tiles, where operands are kept
    s.train.steps = 4;
    s.strategy = strategy;
    s.precision = "bf16";
    auto run = [&](bool keep, bool half, bool bf16_acts, uint64_t* kept_calls, bool bf16_grads = false) {
      RunOptions o;
      o.half_storage = half;
      o.bf16_activations = bf16_acts;
      o.bf16_activation_grads = bf16_grads;
      return run_counting_kept(s, o, keep, kept_calls);
    };
    uint64_t calls = 0;
    const Weights per_call = run(false, true, true, &calls);
    ASSERT_EQ(calls, 0u) << "turned off, the kept path ran";
    const Weights kept = run(true, true, true, &calls);
    // 2 layers x 4 linear layers x 2 products (data and weight gradient) x 4 steps
    EXPECT_GE(calls, 2u * 4u * 2u * 4u) << "the kept path did not run";
    const Weights in_words = run(true, false, true, &calls);
    EXPECT_EQ(calls, 0u) << "bf16 activations: the words' forward cannot keep an fp32 output";
    ASSERT_FALSE(per_call.empty());
    EXPECT_EQ(first_difference(kept, per_call), "");
    EXPECT_EQ(first_difference(kept, in_words), "");
    // fp32 activations: the words' kept path, forward included, against converting in every call
    const Weights words_kept = run(true, false, false, &calls);
    EXPECT_GE(calls, 2u * 4u * 3u * 4u) << "the words' kept path";
    const Weights words_per_call = run(false, false, false, &calls);
    EXPECT_EQ(calls, 0u);
    EXPECT_EQ(first_difference(words_kept, words_per_call), "");
    EXPECT_NE(first_difference(words_kept, kept), "") << "bf16 activations changed nothing";
    const Weights bf16_grads = run(true, true, true, &calls, true);
    EXPECT_EQ(calls, 0u) << "bf16 output gradients: nothing to keep";
    EXPECT_NE(first_difference(bf16_grads, kept), "") << "bf16 activation gradients changed nothing";
  }
}

// Issue 44, activation checkpointing (train.activation_checkpointing): every block, or segments of
// 2 of 5 blocks (the last segment one block), recomputed before the backward: the same weights
// bitwise in fp32 and bf16, under device-adam and zenflow; the activation buffers shrink (checkpoints
// every block < every 2 < none). A model without blocks, and segments at ZeRO stage 3, are refused.
TEST(GptEngine, ActivationCheckpointingGivesTheSameWeightsWithFewerActivationBytes) {
  TempDir dir;
  Spec s = tiny_gpt_spec("gpt", "text", dir.write("t.txt", fixture_text()));
  s.model.n_layer = 5;
  s.train.steps = 4;
  expect_checkpointing_changes_no_weight(s);
  Spec mlp;
  mlp.train.activation_checkpointing = 1;
  EXPECT_NE(input_error([&] { make_workload(mlp, nullptr); }).find("train.activation_checkpointing"),
            std::string::npos);
  s.train.activation_checkpointing = 2;
  s.zero_stage = 3;
  EXPECT_NE(input_error([&] { make_workload(s, nullptr); }).find("train.activation_checkpointing"),
            std::string::npos);
}

// The recomputed forward's tasks are a state of their own in the trace (runtime/trace.cpp,
// docs/traces.md), one per block's recomputed task; pj_dump (pajeng) accepts the trace.
TEST(GptEngine, CheckpointingTraceShowsTheRecomputation) {
  if (std::system("command -v pj_dump >/dev/null 2>&1") != 0) GTEST_SKIP() << "pj_dump (Debian package pajeng) not installed";
  TempDir dir;
  Spec s = tiny_gpt_spec("gpt", "text", dir.write("t.txt", fixture_text()));
  s.train.steps = 2;
  s.train.activation_checkpointing = 1;
  RunOptions o;
  o.quiet = true;
  o.evaluate = false;
  o.trace_path = dir.path("run.paje");
  o.trace_csv_path = dir.path("run.csv");
  run_training(s, o);
  ASSERT_EQ(std::system(("pj_dump " + o.trace_path + " > " + dir.path("dump.txt") + " 2>&1").c_str()), 0);
  std::ifstream dump(dir.path("dump.txt")), csv(o.trace_csv_path);
  const std::string text((std::istreambuf_iterator<char>(dump)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("recompute"), std::string::npos) << "no recompute state in the Paje trace";
  int recomputed = 0;
  for (std::string line; std::getline(csv, line);)
    if (line.rfind("recompute.h", 0) == 0) {
      EXPECT_NE(line.find(",recompute,"), std::string::npos) << line;
      ++recomputed;
    }
  // per step and block: ln_1, c_attn, attention, attn.c_proj, residual_1, ln_2, c_fc, gelu (the
  // output projection and its residual are not recomputed): 2 steps x 2 blocks x 8
  EXPECT_EQ(recomputed, 2 * 2 * 8);
}

TEST(GptEngine, TinyModelLearnsText) {
  TempDir dir;
  Spec s = tiny_gpt_spec("gpt", "text", dir.write("t.txt", fixture_text()));
  s.train.steps = 60;
  s.train.batch_size = 8;
  nlohmann::json m;
  train_and_capture(s, &m, true);
  // uniform over 256 bytes is ln 256 = 5.55 nats; the fixture has 15 words
  EXPECT_LT(m["final"]["eval_loss"].get<double>(), 3.0);
  EXPECT_EQ(m["final"]["eval_examples"].get<int64_t>() % 8, 0) << "evaluation counts tokens";
}

// Issue 43, "no update is rounded away": under bf16, zenflow (semantics zenflow) updates every
// LayerNorm weight and bias on fp32 masters, as device-adam does. With every column selected once
// (topk_ratio 1, no reselection in the run) ZenFlow leaves nothing to its host, so its weights are
// device-adam's bitwise, at DeepSpeed's fine-tuning rate 2e-5 and at 3e-4: rates whose steps are
// below half a bf16 spacing of the gains at 1.0 (2^-9 below, 2^-8 above), which an update of the
// rounded gains in place loses every time. Every LayerNorm tensor moves (the gains' masters need
// a few hundred steps at 2e-5 to cross half a spacing).
TEST(GptEngine, ZenFlowBf16MovesLayerNormsAsDeviceAdam) {
  TempDir dir;
  const std::string text = dir.write("t.txt", fixture_text());
  for (auto [lr, steps] : {std::pair{2e-5, 400}, {3e-4, 40}}) {
    SCOPED_TRACE("lr " + std::to_string(lr));
    Spec d = tiny_gpt_spec("gpt", "text", text);
    d.model.weight_layout = "out_in";  // both strategies' matmuls on the same layout
    d.precision = "bf16";
    d.optimizer.lr = lr;
    d.train.steps = steps;
    Spec z = d;
    z.strategy = "zenflow";
    z.zenflow.given = true;
    z.zenflow.topk_ratio = 1.0;
    z.zenflow.select_strategy = "step";
    z.zenflow.select_interval = 1000;
    z.zenflow.update_interval = 4;
    Spec s0 = d;  // the start's weights, rounded: one step at a rate that moves nothing
    s0.train.steps = 1;
    s0.optimizer.lr = 0.0;
    const Weights wd = train_and_capture(d), wz = train_and_capture(z), w0 = train_and_capture(s0);
    EXPECT_EQ(first_difference(wz, wd), "");
    int norms = 0;
    for (auto& [name, v] : wz) {
      if (name.find("ln_") == std::string::npos) continue;
      ++norms;
      const std::vector<float>& a = w0.at(name);
      size_t moved = 0;
      for (size_t i = 0; i < v.size(); ++i) moved += v[i] != a[i];
      EXPECT_GT(moved, 0u) << name << " did not move";
    }
    EXPECT_EQ(norms, 2 * 2 * 2 + 2) << "ln_1, ln_2 of 2 blocks and ln_f, weight and bias each";
  }
}

}  // namespace
}  // namespace zf::test
