// A Hugging Face GPT-2 directory trained as the engine's GPT (models/hf/gpt2_hf.hpp): the config's
// sizes, the tied head, n_positions rows of wpe, n_inner, layer_norm_epsilon; weights written by
// models/hf/save.hpp in F32, BF16 and F16, one file and shards, read into both weight layouts: the
// parameters equal the checkpoint's tensors bitwise, one step's loss and every gradient and the
// eval loss equal the double reference (tests/reference/gpt_ref.hpp), and under precision bf16 are
// within a bound from bf16's rounding of the products' operands (tests/models/bf16_helpers.hpp);
// fixed rows with masked targets; a directory without weights initialised as Hugging Face does.
// AdamW steps, ZenFlow and --save-hf: test_gpt2_hf_train.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "codelets/codelets.hpp"
#include "graphs/train/precision.hpp"
#include "models/hf/gpt2_hf.hpp"
#include "runtime/error.hpp"
#include "tests/models/bf16_helpers.hpp"
#include "tests/models/gpt2_hf_helpers.hpp"
#include "tests/models/gpt_helpers.hpp"

namespace zf::test {
namespace {

using namespace gpt2;

TEST(Gpt2Hf, ConfigOntoGptConfig) {
  TempDir d;
  d.write("config.json", config().dump());
  const hf::Config c = hf::read_config(d.path("config.json"));
  const GptConfig g = gpt2_config(c, run_config(true));
  EXPECT_EQ(g.n_layer, kLayers);
  EXPECT_EQ(g.n_head, kHeads);
  EXPECT_EQ(g.n_embd, kEmbd);
  EXPECT_EQ(g.vocab, kVocab);
  EXPECT_EQ(g.n_positions, kPositions);
  EXPECT_EQ(g.positions(), kPositions);
  EXPECT_EQ(g.inner(), kInner);
  EXPECT_EQ(g.ln_eps, (float)kEps);
  EXPECT_TRUE(g.tied_head);
  EXPECT_EQ(g.context, kContext);
  EXPECT_TRUE(g.weights_in_out);
  json n = config();
  n["n_inner"] = nullptr;  // GPT-2's default: 4 n_embd
  d.write("config.json", n.dump());
  EXPECT_EQ(gpt2_config(hf::read_config(d.path("config.json")), run_config(false)).inner(), 4 * kEmbd);
  GptConfig run = run_config(false);
  run.context = kPositions + 1;
  expect_input_error([&] { gpt2_config(c, run); }, {"config.json", "n_positions", "model.context = 13", "12"});
  d.write("config.json", json{{"model_type", "llama"}, {"vocab_size", 40}, {"hidden_size", 16},
                               {"intermediate_size", 24}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}}
                             .dump());  // another family: refused, naming the field
  expect_input_error([&] { gpt2_config(hf::read_config(d.path("config.json")), run_config(true)); },
                     {"config.json", "model_type", "llama"});
  EXPECT_EQ(gpt2_param_name("transformer.wte.weight"), "wte");
  EXPECT_EQ(gpt2_param_name("transformer.h.1.mlp.c_fc.weight"), "h.1.mlp.c_fc.weight");
  EXPECT_EQ(gpt2_param_name("lm_head.weight"), "lm_head.weight");
}

struct Case {
  std::string dtype;
  uint64_t shard_bytes;  // 0: one file
  bool in_out, tied;
};
// (gtest would print the bytes of the struct, a pointer among them, into the ctest names)
void PrintTo(const Case& k, std::ostream* os) {
  *os << k.dtype << " shards of " << k.shard_bytes << (k.in_out ? " in_out" : " out_in")
      << (k.tied ? " tied" : " untied");
}

// The checks have teeth: GPT's default eps (1e-5 instead of the config's 0.05) moves the loss
// beyond the tolerance; the tied head's part of wte's gradient (the same model untied, lm_head
// a copy of wte: its two gradients sum to the tied one) is far above the gradient tolerance.
void expect_checks_have_teeth(const ref::GptRef::Params& want, bool tied, const std::vector<int32_t>& tok,
                              const std::vector<int32_t>& tgt, double loss, const ref::GptRef::Params& g) {
  ref::GptRefConfig eps5 = ref_config(tied);
  eps5.eps = 1e-5;
  EXPECT_GT(std::fabs(ref::GptRef(eps5, want).lm_loss(tok, tgt, 3, kContext, nullptr) - loss), 1e-5 * loss);
  if (!tied) return;
  ref::GptRef::Params untied_p = want, ug;
  untied_p["lm_head.weight"] = want.at("wte");
  ref::GptRef(ref_config(false), untied_p).lm_loss(tok, tgt, 3, kContext, &ug);
  double head = 0, whole = 0, diff = 0;
  for (size_t i = 0; i < ug.at("wte").size(); ++i) {
    head = std::max(head, std::fabs(ug.at("lm_head.weight")[i]));
    whole = std::max(whole, std::fabs(g.at("wte")[i]));
    diff = std::max(diff, std::fabs(ug.at("wte")[i] + ug.at("lm_head.weight")[i] - g.at("wte")[i]));
  }
  EXPECT_GT(head, 0.1 * whole) << "the head's part matters";
  EXPECT_LE(diff, 1e-12 * whole) << "tied = embedding part + head part";
}

class Gpt2HfStep : public ::testing::TestWithParam<Case> {};

// The parameters equal the checkpoint's tensors (Conv1D transposed for the (out, in) layout);
// one step's loss and every gradient, and the eval loss, equal the double reference.
TEST_P(Gpt2HfStep, MatchesDoubleReference) {
  const Case k = GetParam();
  TempDir d;
  const Tensors t = write_dir(d, "m", config(k.tied), k.dtype, k.shard_bytes);
  if (k.shard_bytes) {
    ASSERT_TRUE(std::filesystem::exists(d.path("m/model.safetensors.index.json")));
    int shards = 0;
    for (const auto& e : std::filesystem::directory_iterator(d.path("m")))
      shards += e.path().filename().string().rfind("model-", 0) == 0;
    EXPECT_GE(shards, 3) << "a sharded checkpoint";
  }
  const hf::Config c = hf::read_config(d.path("m/config.json"));
  Runtime rt(rt_config());
  const TokenSplit data = token_split();
  Gpt2HfModel wl(c, d.path("m"), run_config(k.in_out), data, &rt.tracker().status());
  EXPECT_TRUE(wl.hf_load().from_files);
  for (const auto& [name, dt] : wl.hf_load().dtypes) EXPECT_EQ(dt, k.dtype) << name;
  const ref::GptRef::Params want = ref_params(t);
  ASSERT_EQ(wl.params().size(), want.size());
  for (Param* p : wl.params()) {
    SCOPED_TRACE(p->name);
    EXPECT_EQ(p->in_out, k.in_out && gpt2_conv1d("transformer." + p->name));
    const std::vector<float> v = logical_values(*p);
    const std::vector<double>& w = want.at(p->name);
    ASSERT_EQ(v.size(), w.size());
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ((double)v[i], w[i]) << i;
  }
  EXPECT_EQ(wl.params()[1]->value.shape(), (std::vector<int64_t>{kPositions, kEmbd})) << "wpe: n_positions rows";

  ref::GptRef model(ref_config(k.tied), want);
  Tensor stats = Tensor::home({3}, "stats", sizeof(double));
  const std::vector<int32_t> idx = {0, 17, 5};
  wl.submit_step(rt, 0, idx, stats);
  auto grads = read_grads(rt, wl);
  rt.tracker().status().rethrow_if_failed();
  std::vector<int32_t> tok, tgt;
  windows(data.train, idx, tok, tgt);
  ref::GptRef::Params g;
  const double loss = model.lm_loss(tok, tgt, 3, kContext, &g);
  const double* st = stats.as<double>();
  EXPECT_EQ(st[2], 3.0 * kContext);
  EXPECT_NEAR(st[0] / st[2], loss, 1e-5 * loss);  // a float sum of 24 per-token losses
  expect_grads_match(grads, g);
  expect_checks_have_teeth(want, k.tied, tok, tgt, loss, g);
  const std::vector<float>& dwpe = grads.at("wpe");
  for (size_t i = (size_t)kContext * kEmbd; i < dwpe.size(); ++i)
    ASSERT_EQ(dwpe[i], 0.0f) << "positions beyond the context get no gradient";

  // eval: every window of the eval file (70 ids: 8 windows), in batches of 4
  const EvalResult ev = wl.evaluate(rt);
  std::vector<int32_t> etok, etgt, all;
  const int W = (int)((data.val.u16.size() - 1) / kContext);
  for (int w = 0; w < W; ++w) all.push_back(w);
  windows(data.val, all, etok, etgt);
  const double eref = model.lm_loss(etok, etgt, W, kContext, nullptr);
  EXPECT_EQ(ev.count, (int64_t)W * kContext);
  EXPECT_NEAR(ev.loss, eref, 1e-5 * eref);
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoints, Gpt2HfStep,
    ::testing::Values(Case{"F32", 0, true, true}, Case{"F32", 0, false, true}, Case{"BF16", 0, true, true},
                      Case{"BF16", 0, false, true}, Case{"F32", 4096, true, true}, Case{"BF16", 2048, false, true},
                      Case{"F32", 0, true, false}, Case{"F16", 0, false, true}),
    [](const auto& i) {
      const Case& k = i.param;
      return k.dtype + (k.shard_bytes ? "Sharded" : "OneFile") + (k.in_out ? "InOut" : "OutIn") +
             (k.tied ? "Tied" : "Untied");
    });

// Precision bf16 (docs/spec.md) on a BF16 directory, so that the parameters are its values exactly:
// one step's loss and the evaluation loss against the double reference within bf16::loss_bound (u
// times the reference's sensitivity to the products' operands: the linear layers' and the head's
// inputs, the attention's q, k, v and probabilities; and to the activations stored in bf16: the
// residual stream, the products' outputs); also not the fp32 engine's losses on the same values
// (the roundings ran: where the CPU has no native bf16 only the stored activations are rounded,
// one rounding per product's output, and their errors can leave the loss within the fp32
// tolerance of the reference, 2.8e-5 against 4.6e-5 on the untied in_out model). Where the CPU
// has no native bf16 (fp32 products on the same values), with fp32 activations
// (Runtime::activations_bf16 off) bitwise the fp32 engine's losses.
TEST(Gpt2HfStep, Bf16StepAndEvalWithinBf16OfDoubleReference) {
  for (bool tied : {true, false})
    for (bool in_out : {true, false}) {
      SCOPED_TRACE(std::string(tied ? "tied " : "untied ") + (in_out ? "in_out" : "out_in"));
      TempDir d;
      const Tensors t = write_dir(d, "m", config(tied), "BF16");
      const hf::Config c = hf::read_config(d.path("m/config.json"));
      const TokenSplit data = token_split();
      const std::vector<int32_t> idx = {0, 17, 5};
      std::vector<int32_t> tok, tgt, etok, etgt, all;
      windows(data.train, idx, tok, tgt);
      const int W = (int)((data.val.u16.size() - 1) / kContext);
      for (int w = 0; w < W; ++w) all.push_back(w);
      windows(data.val, all, etok, etgt);
      ref::GptRef model(ref_config(tied), ref_params(t));
      ref::GptRef::Params g;
      const double loss = model.lm_loss(tok, tgt, 3, kContext, &g);
      const double S = model.bf16_sensitivity();
      const double eloss = model.lm_loss(etok, etgt, W, kContext, &g);
      const double eS = model.bf16_sensitivity();
      double got[3][2];  // [fp32, bf16, bf16 with fp32 activations][step, eval]
      for (int bf : {0, 1, 2}) {
        if (bf == 2 && cpu_native_bf16()) break;
        Runtime rt(rt_config());
        Gpt2HfModel wl(c, d.path("m"), run_config(in_out), data, &rt.tracker().status());
        Spec s;
        s.precision = bf ? "bf16" : "fp32";
        Precision prec(s, rt, wl);  // what run_training sets up: the bf16 products, the rounded parameters
        prec.store_params(true);  // run_training's: bf16 parameters in 2-byte storage
        if (bf == 2) rt.set_activations_bf16(false);
        for (Param* p : wl.params()) {
          const std::vector<double>& want = model.params().at(p->name);
          ASSERT_EQ(logical_values(*p), std::vector<float>(want.begin(), want.end())) << p->name;
        }
        Tensor stats = Tensor::home({3}, "stats", sizeof(double));
        wl.submit_step(rt, 0, idx, stats);
        rt.wait_all();
        got[bf][0] = stats.as<double>()[0] / stats.as<double>()[2];
        got[bf][1] = wl.evaluate(rt).loss;
      }
      const double sd = std::fabs(got[1][0] - loss), ed = std::fabs(got[1][1] - eloss);
      EXPECT_LE(sd, bf16::loss_bound(loss, S)) << "step loss " << got[1][0] << " vs " << loss;
      EXPECT_LE(ed, bf16::loss_bound(eloss, eS)) << "eval loss " << got[1][1] << " vs " << eloss;
      EXPECT_NE(got[1][0], got[0][0]) << "the bf16 roundings did not run";
      EXPECT_NE(got[1][1], got[0][1]) << "the bf16 roundings did not run";
      if (!cpu_native_bf16()) {
        EXPECT_EQ(got[2][0], got[0][0]);
        EXPECT_EQ(got[2][1], got[0][1]);
      }
    }
}

// GPT-2's own vocabulary (50257 rows of wte, ids up to 50256) and n_positions (1024 rows of wpe):
// one step's loss and every gradient equal the double reference.
TEST(Gpt2HfStep, Gpt2VocabularyAndPositions) {
  TempDir d;
  json cfg = config();
  cfg["vocab_size"] = 50257;
  cfg["n_positions"] = 1024;
  cfg["bos_token_id"] = cfg["eos_token_id"] = 50256;
  const Tensors t = write_dir(d, "m", cfg, "BF16");
  Runtime rt(rt_config());
  const TokenSplit data = token_split(400, 70, 8, 50257);
  Gpt2HfModel wl(hf::read_config(d.path("m/config.json")), d.path("m"), run_config(true), data,
                 &rt.tracker().status());
  EXPECT_EQ(wl.params()[0]->value.shape(), (std::vector<int64_t>{50257, kEmbd}));
  EXPECT_EQ(wl.params()[1]->value.shape(), (std::vector<int64_t>{1024, kEmbd}));
  ref::GptRef model(ref_config(true, 50257), ref_params(t));
  Tensor stats = Tensor::home({3}, "stats", sizeof(double));
  const std::vector<int32_t> idx = {3, 40};
  wl.submit_step(rt, 0, idx, stats);
  auto grads = read_grads(rt, wl);
  rt.tracker().status().rethrow_if_failed();
  std::vector<int32_t> tok, tgt;
  windows(data.train, idx, tok, tgt);
  ASSERT_GT(*std::max_element(tok.begin(), tok.end()), 40000) << "ids far into the vocabulary";
  ref::GptRef::Params g;
  const double loss = model.lm_loss(tok, tgt, 2, kContext, &g);
  EXPECT_NEAR(stats.as<double>()[0] / stats.as<double>()[2], loss, 1e-5 * loss);
  expect_grads_match(grads, g);
}

// Fixed rows (models/data/lm_rows.hpp): targets of -1 carry no loss; the loss is the mean over the
// others, and so is the gradient; a unit is a row.
TEST(Gpt2HfRows, MaskedTargetsMatchDoubleReference) {
  TempDir d;
  const Tensors t = write_dir(d, "m", config(), "F32");
  const hf::Config c = hf::read_config(d.path("m/config.json"));
  Rng r(4);
  LmRowSplit rows;
  for (LmRows* x : {&rows.train, &rows.eval}) {
    x->T = kContext;
    x->rows = x == &rows.train ? 6 : 5;
    for (int64_t i = 0; i < x->rows * kContext; ++i) {
      x->tokens.push_back((int32_t)r.below(kVocab));
      x->targets.push_back(i % kContext < 3 ? -1 : (int32_t)r.below(kVocab));  // a prompt of 3
    }
    x->description = "test rows";
  }
  Runtime rt(rt_config());
  Gpt2HfModel wl(c, d.path("m"), run_config(true), rows, &rt.tracker().status());
  EXPECT_EQ(wl.epoch_size(), 6);
  ref::GptRef model(ref_config(), ref_params(t));
  Tensor stats = Tensor::home({3}, "stats", sizeof(double));
  const std::vector<int32_t> idx = {4, 1, 5};
  wl.submit_step(rt, 0, idx, stats);
  auto grads = read_grads(rt, wl);
  rt.tracker().status().rethrow_if_failed();
  std::vector<int32_t> tok, tgt;
  for (int32_t u : idx)
    for (int i = 0; i < kContext; ++i) {
      tok.push_back(rows.train.tokens[(size_t)u * kContext + i]);
      tgt.push_back(rows.train.targets[(size_t)u * kContext + i]);
    }
  ref::GptRef::Params g;
  const double loss = model.lm_loss(tok, tgt, 3, kContext, &g);
  const double* st = stats.as<double>();
  EXPECT_EQ(st[2], 3.0 * (kContext - 3)) << "only the targets >= 0 count";
  EXPECT_NEAR(st[0] / st[2], loss, 1e-5 * loss);
  expect_grads_match(grads, g);
  const EvalResult ev = wl.evaluate(rt);
  const double eref = model.lm_loss(rows.eval.tokens, rows.eval.targets, 5, kContext, nullptr);
  EXPECT_EQ(ev.count, 5 * (kContext - 3));
  EXPECT_NEAR(ev.loss, eref, 1e-5 * eref);
}

// config.json alone and model.init "random": every parameter as hf::init_tensor makes it from
// model.init_seed (normal(0, initializer_range), c_proj / sqrt(2 n_layer), ones, zeros), whatever the
// layout; without model.init "random" the same directory is an error naming it.
TEST(Gpt2HfInit, DirectoryWithoutWeightsInitialisedAsHuggingFace) {
  TempDir d;
  d.write("config.json", config().dump());
  const hf::Config c = hf::read_config(d.path("config.json"));
  Runtime rt(rt_config());
  for (bool in_out : {true, false}) {
    SCOPED_TRACE(in_out);
    expect_input_error(
        [&] { Gpt2HfModel(c, d.root().string(), run_config(in_out), token_split(), &rt.tracker().status()); },
        {d.root().string() + ": no weights file the reader recognises"});
    GptConfig run = run_config(in_out);
    run.hf_random_init = true;
    Gpt2HfModel wl(c, d.root().string(), run, token_split(), &rt.tracker().status());
    EXPECT_FALSE(wl.hf_load().from_files);
    EXPECT_NE(wl.describe().find("initialised"), std::string::npos) << wl.describe();
    Tensors init;
    for (const hf::TensorSpec& s : hf::expected_tensors(c)) {
      init[s.name].resize(s.numel());
      hf::init_tensor(s, 9, init[s.name].data());
    }
    const ref::GptRef::Params want = ref_params(init);
    for (Param* p : wl.params()) {
      SCOPED_TRACE(p->name);
      const std::vector<float> v = logical_values(*p);
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ((double)v[i], want.at(p->name)[i]) << i;
    }
    double s2 = 0;  // c_proj's std: 0.02 / sqrt(2 * 2) = 0.01
    const std::vector<float> w = logical_values(*wl.params()[2 + 4]);  // h.0.attn.c_proj.weight
    for (float x : w) s2 += (double)x * x;
    EXPECT_NEAR(std::sqrt(s2 / (double)w.size()), 0.01, 0.002);
  }
}

}  // namespace
}  // namespace zf::test
