// Generation with a KV cache (models/hf/causal_lm.hpp, generate.hpp; docs/hf.md "Generation"):
// (a) the logits of the cached decoding (a prefill, then one position per call) at every position
// equal the double-precision full-sequence forward of tests/reference/hf_ref.hpp, for Llama (GQA,
// llama3 rope scaling, untied; and with attention_bias and a prefill of 70 rows, oneDNN's matmul
// path), Qwen2 (q/k/v biases, tied) and GPT-2 (Conv1D, learned positions, tied and untied);
// (b) greedy generation is the reference's argmax continuation, and stops at EOS and at the
// context's end; sampled text is reproducible by seed; a save_dir copy generates the same. The
// sampler alone on known logits: test_sampler.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "models/hf/causal_lm.hpp"
#include "models/hf/generate.hpp"
#include "models/hf/sampler.hpp"
#include "models/hf/save.hpp"
#include "models/hf_helpers.hpp"
#include "models/tokenizer/tokenizer.hpp"
#include "runtime/host_helpers.hpp"
#include "runtime/parallel.hpp"
#include "tests/reference/hf_ref.hpp"

namespace {

using namespace zf::test;
using namespace zf::test::hf;
using zf::hf::CausalLM;

// A model directory with random F32 weights, loaded: the engine's config and fp32 tensors, and
// the same values in double for the reference.
struct TinyModel {
  TempDir dir{"zf_gen"};
  zf::hf::Config c;
  zf::hf::HostTensors w;
  std::map<std::string, std::vector<double>> wd;
  zf::ref::HfRefConfig rc;
  explicit TinyModel(const json& config, uint64_t seed = 7) {
    write_model_dir(dir, config, random_tensors(config, "F32", seed));
    c = zf::hf::read_config(dir.path("config.json"));
    zf::hf::LoadResult r;
    w = zf::hf::load_host_tensors(dir.root().string(), c, zf::hf::InitFrom::files(), &r);
    EXPECT_TRUE(r.from_files);
    for (auto& [n, v] : w) wd[n] = std::vector<double>(v.begin(), v.end());
    rc.gpt2 = c.family == zf::hf::Family::Gpt2;
    rc.L = (int)c.num_layers, rc.C = (int)c.hidden_size, rc.H = (int)c.num_heads, rc.Hkv = (int)c.num_kv_heads;
    rc.hs = (int)c.head_dim, rc.I = (int)c.intermediate_size, rc.V = (int)c.vocab_size, rc.eps = c.norm_eps;
    rc.qkv_bias = c.qkv_bias, rc.o_bias = c.o_bias, rc.tied = c.tie_word_embeddings;
    rc.rope.theta = c.rope_theta;
    rc.rope.llama3 = c.rope_scaling.llama3;
    rc.rope.factor = c.rope_scaling.factor, rc.rope.low = c.rope_scaling.low_freq_factor;
    rc.rope.high = c.rope_scaling.high_freq_factor;
    rc.rope.old_ctx = (double)c.rope_scaling.original_max_position_embeddings;
  }
  std::vector<int32_t> tokens(int T, uint64_t seed) const {
    zf::Rng r(seed);
    std::vector<int32_t> t(T);
    for (auto& x : t) x = (int32_t)r.below((uint64_t)c.vocab_size);
    return t;
  }
  std::vector<double> ref(const std::vector<int32_t>& tok) const { return zf::ref::hf_lm_logits(rc, wd, tok); }
};

// Largest |got - ref| over the logits, relative to the largest |ref| (at least 1).
double rel_err(const std::vector<float>& got, const std::vector<double>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double err = 0, scale = 1;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return err / scale;
}

// fp32 through two layers of width <= 24 and a softmax over <= 80 positions, against double:
// a few hundred roundings of 6e-8 at most (measured: below 1e-6 in every case here).
constexpr double kTol = 1e-5;

// Logits of T positions by a prefill of `pre` positions (all rows), then one position a call,
// against the reference; also the whole sequence in one call.
void check_cached(const TinyModel& m, int T, int pre) {
  const std::vector<int32_t> tok = m.tokens(T, 11);
  const std::vector<double> ref = m.ref(tok);
  CausalLM lm(m.c, m.w, T);
  std::vector<float> all, step;
  lm.forward(tok.data(), pre, true, all);
  for (int t = pre; t < T; ++t) {
    lm.forward(&tok[t], 1, false, step);
    all.insert(all.end(), step.begin(), step.end());
  }
  EXPECT_EQ(lm.cache_len(), T);
  const double e = rel_err(all, ref);
  EXPECT_LT(e, kTol) << zf::hf::family_name(m.c.family) << ": prefill " << pre << " of " << T;
  std::printf("[ info ] %s, %d positions, prefill %d: logits within %.2e of the double reference\n",
              m.c.model_type.c_str(), T, pre, e);
  lm.reset();
  lm.forward(tok.data(), T, true, all);
  EXPECT_LT(rel_err(all, ref), kTol) << "the whole sequence in one call";
  lm.reset();  // only the last row
  lm.forward(tok.data(), T, false, step);
  EXPECT_LT(rel_err(step, std::vector<double>(ref.end() - m.c.vocab_size, ref.end())), kTol);
}

TEST(Generate, LlamaGqaLlama3KvCacheMatchesReference) {
  TinyModel m(tiny_llama());
  ASSERT_TRUE(m.c.rope_scaling.llama3);
  ASSERT_EQ(m.c.num_kv_heads * 2, m.c.num_heads);
  check_cached(m, 32, 5);  // past original_max_position_embeddings (16): the scaled frequencies matter
  check_cached(m, 9, 1);
}

TEST(Generate, LlamaAttentionBiasLongPrefillMatchesReference) {
  json j = tiny_llama();
  j["attention_bias"] = true;
  j["num_key_value_heads"] = 1;
  j["max_position_embeddings"] = 128;
  TinyModel m(j, 9);
  ASSERT_TRUE(m.c.o_bias);
  check_cached(m, 80, 70);  // 70 rows: the matmuls' oneDNN path (from 64 rows)
}

TEST(Generate, Qwen2BiasesTiedKvCacheMatchesReference) {
  TinyModel m(tiny_qwen2());
  ASSERT_TRUE(m.c.qkv_bias && m.c.tie_word_embeddings);
  check_cached(m, 20, 4);
}

TEST(Generate, Gpt2KvCacheMatchesReference) {
  TinyModel m(tiny_gpt2());
  check_cached(m, 12, 3);  // every learned position
  json j = tiny_gpt2();
  j["tie_word_embeddings"] = false;
  j["n_inner"] = 20;
  TinyModel u(j, 5);
  ASSERT_FALSE(u.c.tie_word_embeddings);
  check_cached(u, 12, 1);
}

// The reference's greedy continuation: argmax (lowest id on ties) of the last row, appended.
std::vector<int32_t> ref_greedy(const TinyModel& m, std::vector<int32_t> seq, int n) {
  const int V = (int)m.c.vocab_size;
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const std::vector<double> l = m.ref(seq);
    const double* last = l.data() + l.size() - V;
    int best = 0;
    for (int j = 1; j < V; ++j)
      if (last[j] > last[best]) best = j;
    out.push_back(best);
    seq.push_back(best);
  }
  return out;
}

TEST(Generate, GreedyIsTheReferenceArgmaxContinuation) {
  for (const json& j : {tiny_llama(), tiny_qwen2(), tiny_gpt2()}) {
    TinyModel m(j, 21);
    const std::vector<int32_t> prompt = m.tokens(4, 3);
    CausalLM lm(m.c, m.w, 11);
    zf::hf::GenerateOptions o;
    o.max_new_tokens = 8;
    o.sampling.temperature = 0;
    std::vector<int32_t> seen;
    const auto r = zf::hf::generate(lm, prompt, o, [&](int32_t id) { seen.push_back(id); });
    const std::vector<int32_t> want = ref_greedy(m, prompt, 8);
    EXPECT_EQ(r.tokens, want) << m.c.model_type;
    EXPECT_EQ(seen, r.tokens);
    EXPECT_EQ(r.stop, zf::hf::StopReason::MaxNewTokens);
    o.eos = {want[2]};  // stops after the first EOS, which it keeps
    const auto e = zf::hf::generate(lm, prompt, o);
    const size_t first = std::find(want.begin(), want.end(), want[2]) - want.begin();
    EXPECT_EQ(e.tokens, std::vector<int32_t>(want.begin(), want.begin() + (long)first + 1)) << m.c.model_type;
    EXPECT_EQ(e.stop, zf::hf::StopReason::Eos);
  }
}

TEST(Generate, StopsWhenTheContextIsFull) {
  TinyModel m(tiny_gpt2(), 4);  // n_positions 12
  const std::vector<int32_t> prompt = m.tokens(10, 5);
  CausalLM lm(m.c, m.w, 12);
  zf::hf::GenerateOptions o;
  o.max_new_tokens = 8;
  o.sampling.temperature = 0;
  const auto r = zf::hf::generate(lm, prompt, o);
  // positions 10 and 11 are fed; the logits of position 11 give the third token
  EXPECT_EQ(r.tokens, ref_greedy(m, prompt, 3));
  EXPECT_EQ(r.stop, zf::hf::StopReason::Context);
  std::vector<float> l;
  EXPECT_THROW(lm.forward(prompt.data(), 1, false, l), std::invalid_argument);
}

TEST(Generate, SampledTextIsReproducibleBySeed) {
  TinyModel m(tiny_llama(), 2);
  const std::vector<int32_t> prompt = m.tokens(3, 1);
  CausalLM lm(m.c, m.w, 32);
  zf::hf::GenerateOptions o;
  o.max_new_tokens = 20;
  o.sampling = {1.5, 0.9};
  o.seed = 42;
  const auto a = zf::hf::generate(lm, prompt, o), b = zf::hf::generate(lm, prompt, o);
  EXPECT_EQ(a.tokens, b.tokens);
  o.seed = 43;
  EXPECT_NE(zf::hf::generate(lm, prompt, o).tokens, a.tokens);
  o.candidates = 5;  // ids below 5 only
  for (int32_t id : zf::hf::generate(lm, prompt, o).tokens) EXPECT_LT(id, 5);
}

// --model also takes a --save-hf output: the saved directory gives the same tokens and logits.
TEST(Generate, SavedDirectoryGeneratesTheSame) {
  TinyModel m(tiny_qwen2(), 13);
  TempDir out("zf_gen_saved");
  zf::hf::save_dir(out.path("m"), m.c, [&](const zf::hf::TensorSpec& t) { return m.w.at(t.name).data(); }, {});
  const zf::hf::Config c2 = zf::hf::read_config(out.path("m/config.json"));
  CausalLM a(m.c, m.w, 16), b(c2, zf::hf::load_host_tensors(out.path("m"), c2, zf::hf::InitFrom::files()), 16);
  const std::vector<int32_t> prompt = m.tokens(5, 2);
  zf::hf::GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling = {0.8, 0.95};
  o.seed = 1;
  EXPECT_EQ(zf::hf::generate(a, prompt, o).tokens, zf::hf::generate(b, prompt, o).tokens);
  std::vector<float> la, lb;
  a.reset(), b.reset();
  a.forward(prompt.data(), 5, true, la);
  b.forward(prompt.data(), 5, true, lb);
  EXPECT_EQ(la, lb);
}

// zenflow-run generate's --threads: helper threads take the kernels' tiles (runtime/host_helpers.hpp);
// the logits are the bits of the caller alone. Shapes with several tiles: a prefill of 80 rows
// (oneDNN's row tiles) and one-row calls whose head matmul (40000 x 64) is cut into column tiles.
TEST(Generate, HelperThreadsGiveTheSameBits) {
  zf::blas_single_thread();
  json j = tiny_llama();
  j["vocab_size"] = 40000;
  j["hidden_size"] = 64;
  j["intermediate_size"] = 96;
  j["max_position_embeddings"] = 96;
  TinyModel m(j, 3);
  const std::vector<int32_t> tok = m.tokens(84, 4);
  auto run = [&] {
    CausalLM lm(m.c, m.w, 84);
    std::vector<float> all, step;
    lm.forward(tok.data(), 80, true, all);
    for (int t = 80; t < 84; ++t) {
      lm.forward(&tok[t], 1, false, step);
      all.insert(all.end(), step.begin(), step.end());
    }
    return all;
  };
  const std::vector<float> alone = run();
  zf::HostHelpers helpers(2);
  EXPECT_THROW(zf::HostHelpers(1), std::logic_error);
  const unsigned long long helped0 = zf::parallel_stats().helped;
  for (int i = 0; i < 20 && zf::parallel_stats().helped == helped0; ++i)
    EXPECT_EQ(std::memcmp(run().data(), alone.data(), alone.size() * sizeof(float)), 0);
  EXPECT_GT(zf::parallel_stats().helped, helped0) << "the helpers took no tile in 20 runs";
  EXPECT_EQ(std::memcmp(run().data(), alone.data(), alone.size() * sizeof(float)), 0);
}

}  // namespace
