// Shared by the Hugging Face GPT-2 tests (test_gpt2_hf*.cpp): a tiny GPT-2 config.json (odd
// vocabulary, n_inner not 4C, eps 0.05, n_positions above the context), a model directory
// whose random weights are written by models/hf/save.hpp (F32, BF16 or F16, one file or shards), token
// data, and the double reference's parameters derived from the checkpoint's tensors independently
// of the workload (Conv1D (in, out) transposed here to the reference's (out, in)).
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/fp16.hpp"
#include "models/hf/gpt2_hf.hpp"
#include "models/hf/config.hpp"
#include "models/hf/save.hpp"
#include "models/hf/tensors.hpp"
#include "models/rng.hpp"
#include "test_helpers.hpp"
#include "tests/reference/gpt_ref.hpp"

namespace zf::test::gpt2 {

using json = nlohmann::json;
inline constexpr int kContext = 8, kPositions = 12, kVocab = 37, kEmbd = 16, kInner = 24, kLayers = 2, kHeads = 2;
// eps large enough to matter: random O(0.4) activations have a variance near 0.3, and the
// reference with GPT's 1e-5 instead is off beyond the loss and gradient tolerances
inline constexpr double kEps = 0.05;

inline json config(bool tied = true) {
  json c{{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", kVocab},
         {"n_embd", kEmbd},
         {"n_layer", kLayers},
         {"n_head", kHeads},
         {"n_positions", kPositions},
         {"n_inner", kInner},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", kEps},
         {"initializer_range", 0.02},
         {"bos_token_id", 36},
         {"eos_token_id", 36}};
  if (!tied) c["tie_word_embeddings"] = false;
  return c;
}

// The checkpoint's tensors by canonical name, as stored (Conv1D (in, out)), fp32 values exactly
// representable in `dtype` (so that what is read equals them bitwise).
using Tensors = std::map<std::string, std::vector<float>>;

inline Tensors random_tensors(const hf::Config& c, const std::string& dtype, uint64_t seed) {
  Rng r(seed);
  Tensors out;
  for (const hf::TensorSpec& t : hf::expected_tensors(c)) {
    const bool gain = t.init == hf::Init::Ones;
    std::vector<float>& v = out[t.name];
    for (size_t i = 0; i < t.numel(); ++i) {
      const float x = (float)((gain ? 1.0 : 0.0) + 0.4 * r.normal());
      v.push_back(dtype == "BF16" ? kernels::bf16::round(x) : dtype == "F16" ? kernels::fp16::round(x) : x);
    }
  }
  return out;
}

// A model directory at `out` (new): config.json from `cfg`, the tensors saved by hf::save_dir in
// `dtype`, in shards of at most `shard_bytes` (0: one file). Returns the tensors written.
inline Tensors write_dir(const TempDir& d, const std::string& out, const json& cfg, const std::string& dtype,
                         uint64_t shard_bytes = 0, uint64_t seed = 5) {
  const std::string src = d.path("src-" + out);
  std::filesystem::create_directories(src);
  std::ofstream(src + "/config.json") << cfg.dump(2);
  const hf::Config c = hf::read_config(src + "/config.json");
  Tensors t = random_tensors(c, dtype, seed);
  hf::SaveOptions o;
  o.dtype = dtype;
  if (shard_bytes) o.max_shard_bytes = shard_bytes;
  hf::save_dir(d.path(out), c, [&](const hf::TensorSpec& s) -> const float* { return t.at(s.name).data(); }, o);
  return t;
}

// The reference's parameters (logical layout, the engine's names) from the checkpoint's tensors.
inline ref::GptRef::Params ref_params(const Tensors& t) {
  ref::GptRef::Params p;
  for (const auto& [name, v] : t) {
    std::vector<double>& d = p[gpt2_param_name(name)];
    if (!gpt2_conv1d(name)) {
      d.assign(v.begin(), v.end());
      continue;
    }
    // (in, out) stored -> (out, in): in = C for c_attn, c_proj (attn) and c_fc; I for mlp.c_proj
    const int64_t in = name.find("mlp.c_proj") != std::string::npos ? kInner : kEmbd;
    const int64_t out = (int64_t)v.size() / in;
    d.resize(v.size());
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) d[(size_t)(o * in + i)] = v[(size_t)(i * out + o)];
  }
  return p;
}

inline ref::GptRefConfig ref_config(bool tied = true, int vocab = kVocab) {
  ref::GptRefConfig r{kLayers, kHeads, kEmbd, vocab};
  r.n_inner = kInner;
  r.eps = kEps;
  r.tied = tied;
  return r;
}

// Token ids below `vocab`: a training and an evaluation file of n and m ids.
inline TokenSplit token_split(int64_t n = 400, int64_t m = 70, uint64_t seed = 3, int vocab = kVocab) {
  Rng r(seed);
  TokenSplit s;
  for (TokenFile* f : {&s.train, &s.val}) {
    f->width = 2;
    f->format = "raw uint16";
    for (int64_t i = 0, k = f == &s.train ? n : m; i < k; ++i) f->u16.push_back((uint16_t)r.below((uint64_t)vocab));
  }
  s.description = "test tokens";
  return s;
}

// The inputs and targets of windows `idx` of f (window u: ids [uT, uT + T]).
inline void windows(const TokenFile& f, const std::vector<int32_t>& idx, std::vector<int32_t>& tok,
                    std::vector<int32_t>& tgt) {
  for (int32_t u : idx)
    for (int i = 0; i < kContext; ++i) {
      tok.push_back(f.u16[(size_t)u * kContext + i]);
      tgt.push_back(f.u16[(size_t)u * kContext + i + 1]);
    }
}

inline GptConfig run_config(bool in_out) {
  GptConfig g;
  g.context = kContext;
  g.batch_size = 3;
  g.eval_batch_size = 4;
  g.init_seed = 9;
  g.weights_in_out = in_out;
  return g;
}

}  // namespace zf::test::gpt2
