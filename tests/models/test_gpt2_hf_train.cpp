// Training a Hugging Face GPT-2 directory (models/hf/gpt2_hf.hpp) with the engine's strategies: three
// AdamW steps (device-adam) equal the double reference's (tests/reference/gpt_ref.hpp and
// reference.hpp's adam_step), and under precision bf16 each step's loss, gradient and device-adam's
// bf16 update against it (tests/models/bf16_helpers.hpp); ZenFlow with the tied wte as one 2-D
// parameter: at topk 1 and update interval 1 bitwise device-adam, at topk 0.25 with a host interval
// and overlap bitwise the same under two scheduling policies; --save-hf after 0 steps gives back
// the input's tensors bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "graphs/strategies/strategy.hpp"
#include "models/hf/gpt2_hf.hpp"
#include "models/hf/load.hpp"
#include "tests/models/bf16_helpers.hpp"
#include "tests/models/gpt2_hf_helpers.hpp"
#include "tests/models/gpt_helpers.hpp"
#include "tests/models/llama_helpers.hpp"

namespace zf::test {
namespace {

using namespace gpt2;

Spec train_spec(const std::string& strategy) {
  Spec s;
  s.source = "gpt2-hf-test";
  s.strategy = strategy;
  s.optimizer.lr = 1e-2;
  s.optimizer.eps = 1e-3;  // see AdamWStepsMatchDoubleReference
  s.optimizer.weight_decay = 0.1;
  s.train.batch_size = 3;
  s.train.steps = 3;
  return s;
}

// Step t's batch: windows 3t .. 3t + 2 (mod the epoch).
std::vector<int32_t> batch(int64_t t, int64_t units) {
  return {(int32_t)((3 * t) % units), (int32_t)((3 * t + 1) % units), (int32_t)((3 * t + 2) % units)};
}

// `steps` steps of the spec's strategy on the model in `dir`; the final weights (logical layout).
Weights train(const Spec& s, const std::string& dir, bool in_out, int64_t steps) {
  Runtime rt(rt_config(s.runtime.sched));
  const hf::Config c = hf::read_config(dir + "/config.json");
  Gpt2HfModel wl(c, dir, run_config(in_out), token_split(), &rt.tracker().status());
  const int64_t units = wl.epoch_size();
  auto strat = make_strategy(s, rt, wl.params(), units / s.train.batch_size);
  Tensor stats = Tensor::home({3}, "stats", sizeof(double));
  for (int64_t t = 0; t < steps; ++t) {
    wl.submit_step(rt, t, batch(t, units), stats);
    strat->submit_update(UpdateStep{t, t, 1.0f});
  }
  strat->flush(UpdateStep{steps - 1, steps - 1, 1.0f});
  rt.wait_all();
  Weights w;
  for (Param* p : wl.params()) w[p->name] = logical_values(*p);
  return w;
}

// AdamW's step is lr * m / (sqrt(v) + eps): at eps 1e-8 a gradient element near zero turns a float
// rounding difference (~1e-6 of the tensor's largest gradient) into a step of either sign. With
// eps 1e-3 the difference of a step is at most lr / eps = 10 times the gradient's, so after three
// steps |w - ref| <= 1e-5 (about 30 x 1e-6 x max|g|, max|g| < 0.3 here) bounds a correct engine,
// while a wrong gradient or update moves weights by ~lr = 1e-2.
TEST(Gpt2HfTrain, AdamWStepsMatchDoubleReference) {
  TempDir d;
  const Tensors t = write_dir(d, "m", config(), "BF16");
  const Spec s = train_spec("device-adam");
  for (bool in_out : {true, false}) {
    SCOPED_TRACE(in_out);
    const Weights got = train(s, d.path("m"), in_out, 3);
    ref::GptRef model(ref_config(), ref_params(t));
    const TokenSplit data = token_split();
    const int64_t units = (int64_t)(data.train.u16.size() - 1) / kContext;
    const ref::AdamParams hp = bf16::adam_params(s);
    ref::GptRef::Params m, v;
    for (int64_t step = 0; step < 3; ++step) {
      std::vector<int32_t> tok, tgt;
      windows(data.train, batch(step, units), tok, tgt);
      ref::GptRef::Params g;
      model.lm_loss(tok, tgt, 3, kContext, &g);
      for (auto& [name, p] : model.params()) {
        m[name].resize(p.size(), 0.0);
        v[name].resize(p.size(), 0.0);
        ref::adam_step(p.data(), g.at(name).data(), m[name].data(), v[name].data(), p.size(), hp, step + 1, 1.0);
      }
    }
    ASSERT_EQ(got.size(), model.params().size());
    for (auto& [name, p] : model.params()) {
      SCOPED_TRACE(name);
      const std::vector<float>& w = got.at(name);
      double diff = 0, moved = 0;
      for (size_t i = 0; i < p.size(); ++i) {
        diff = std::max(diff, std::fabs((double)w[i] - p[i]));
        moved = std::max(moved, std::fabs(p[i] - ref_params(t).at(name)[i]));
      }
      EXPECT_LE(diff, 1e-5);
      EXPECT_GT(moved, 1e-3) << "the steps moved the weights";
    }
  }
}

// Three AdamW steps of zenflow-run's trainer on the directory (device-adam, precision bf16, the
// tied and the untied model), each step on its own as LlamaModel's
// Bf16ThreeAdamWStepsWithinBf16OfReference checks them: the loss against the double reference at
// the parameters the engine's forward read (bf16::loss_bound), the gradient against the
// reference's there (bf16::expect_grads_within, 52 sites: on the forward's longest chain per block
// c_attn's input, q or k, the probabilities, c_proj's, c_fc's and mlp.c_proj's inputs, 5, and the
// head's, 11; back the head's and per block the 4 linear layers' output gradients and the
// attention's dout and dS, 13; the weight gradient's 2 operands: 26, doubled; the residual stream
// and products' outputs stored in bf16 add roundings on the forward chain this count leaves out,
// and the activation gradients stored in bf16 (Runtime::activation_grads_bf16) on the backward
// one: 21 on the longest path to block 0's c_attn instead of 13, 34 sites in all; it held with
// them), and the parameters
// after each step device-adam's bf16 update of the engine's own gradients (bf16::RoundedAdamRef).
TEST(Gpt2HfTrain, Bf16ThreeAdamWStepsWithinBf16OfReference) {
  for (bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    TempDir d;
    const Tensors t = write_dir(d, "m", config(tied), "BF16");
    const std::vector<int32_t> ids = llama::write_tokens(d.path("train.bin"), 200, kVocab, 1);
    llama::write_tokens(d.path("eval.bin"), 41, kVocab, 2);
    Spec s = llama::hf_spec(d.path("m"), d.path("train.bin"), d.path("eval.bin"));
    s.precision = "bf16";
    s.train.steps = 3;
    const bf16::Capture c = bf16::run_capturing_steps(s);
    ASSERT_EQ(c.params.size(), 3u);
    ASSERT_EQ(c.losses.size(), 3u);
    const ref::GptRef::Params start = ref_params(t);
    for (auto& [n, v] : c.params[0]) EXPECT_EQ(std::vector<double>(v.begin(), v.end()), start.at(n)) << n;
    bf16::RoundedAdamRef adam(c.params[0], bf16::adam_params(s));
    for (int64_t step = 0; step < 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      if (step > 0)
        adam.expect_rounded_masters(c.params[(size_t)step], "the parameters step " + std::to_string(step) + " read");
      ref::GptRef::Params p;
      for (auto& [n, v] : c.params[(size_t)step]) p[n].assign(v.begin(), v.end());
      ref::GptRef model(ref_config(tied), p);
      std::vector<int32_t> tok, tgt;
      for (int64_t u = 3 * step; u < 3 * step + 3; ++u)  // sequential order: step t reads windows 3t .. 3t + 2
        for (int64_t i = u * kContext; i < (u + 1) * kContext; ++i)
          tok.push_back(ids[(size_t)i]), tgt.push_back(ids[(size_t)i + 1]);
      ref::GptRef::Params g;
      const double loss = model.lm_loss(tok, tgt, 3, kContext, &g);
      EXPECT_LE(std::fabs(c.losses[(size_t)step] - loss), bf16::loss_bound(loss, model.bf16_sensitivity()));
      bf16::expect_grads_within(c.grads[(size_t)step], g, 52);
      adam.step(c.grads[(size_t)step], step);
    }
    adam.expect_rounded_masters(c.final, "the final parameters");
    for (auto& [n, v] : c.final) {
      double moved = 0;
      for (size_t i = 0; i < v.size(); ++i) moved = std::max(moved, std::fabs((double)v[i] - c.params[0].at(n)[i]));
      EXPECT_GT(moved, s.optimizer.lr) << n << ": the steps moved the weights";
    }
  }
}

// ZenFlow on the tied model: wte (37, C) is one 2-D parameter whose columns are its C embedding
// dimensions; c_attn's are its C inputs (3C outputs per column).
TEST(Gpt2HfTrain, ZenFlowOnTheTiedModel) {
  TempDir d;
  const Tensors t = write_dir(d, "m", config(), "F32");
  Spec z = train_spec("zenflow");
  z.zenflow.given = true;
  z.zenflow.topk_ratio = 1.0;
  z.zenflow.update_interval = 1;
  z.zenflow.overlap_step = false;
  z.zenflow.select_strategy = "auto";  // no reselection within the run (it would reset the moments)
  const Weights dev = train(train_spec("device-adam"), d.path("m"), true, 4);
  EXPECT_EQ(first_difference(train(z, d.path("m"), true, 4), dev), "") << "topk 1, interval 1: device-adam";

  z.zenflow.topk_ratio = 0.25;
  z.zenflow.update_interval = 2;
  z.zenflow.overlap_step = true;
  z.runtime.sched = "eager";
  const Weights a = train(z, d.path("m"), true, 6);
  z.runtime.sched = "lws";
  EXPECT_EQ(first_difference(train(z, d.path("m"), true, 6), a), "") << "eager vs lws";
  double moved = 0;
  const ref::GptRef::Params w0 = ref_params(t);
  for (auto& [name, v] : a) {
    for (float x : v) ASSERT_TRUE(std::isfinite(x)) << name;
    for (size_t i = 0; i < v.size(); ++i) moved = std::max(moved, std::fabs(v[i] - w0.at(name)[i]));
  }
  EXPECT_GT(moved, 1e-3);
  EXPECT_NE(first_difference(a, dev), "") << "topk 0.25 with a host interval is not device-adam";
}

// --save-hf after 0 steps: the input's tensors bitwise, in their input dtype (BF16 here, sharded
// input), and config.json's bytes.
TEST(Gpt2HfSave, ZeroStepsGiveBackTheInputBitwise) {
  TempDir d;
  const Tensors t = write_dir(d, "m", config(), "BF16", 4096);
  const hf::Config c = hf::read_config(d.path("m/config.json"));
  for (bool in_out : {true, false}) {
    SCOPED_TRACE(in_out);
    Runtime rt(rt_config());
    Gpt2HfModel wl(c, d.path("m"), run_config(in_out), token_split(), &rt.tracker().status());
    const std::string out = d.path(in_out ? "out-io" : "out-oi");
    wl.save_hf(out, hf::SaveOptions{});
    EXPECT_EQ(read_file(out + "/config.json"), read_file(d.path("m/config.json")));
    std::map<std::string, std::vector<float>> back;
    const hf::LoadResult r = hf::load_weights(out, hf::read_config(out + "/config.json"), hf::InitFrom::files(),
                                              [&](const hf::TensorSpec& s) {
      back[s.name].assign(s.numel(), -7.0f);
      return back[s.name].data();
    });
    EXPECT_TRUE(r.from_files);
    for (const auto& [name, dt] : r.dtypes) EXPECT_EQ(dt, "BF16") << name;
    ASSERT_EQ(back.size(), t.size());
    for (const auto& [name, v] : t) EXPECT_EQ(back.at(name), v) << name;
    for (const hf::TensorSpec& s : hf::expected_tensors(c)) EXPECT_EQ(wl.hf_values(s), t.at(s.name)) << s.name;
  }
}

}  // namespace
}  // namespace zf::test
