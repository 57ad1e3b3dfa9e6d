// Helpers shared by the GPT tests (test_gpt*.cpp, tests/graphs/test_gpt_init.cpp): fixture texts
// (a few KB of words; verses in bible(1)'s format), the tiny GPT spec, random parameters, the
// gradients read back through the codelet layer and compared with the double reference
// (tests/reference/gpt_ref.hpp), a one-worker-each runtime.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "codelets/codelets.hpp"
#include "graphs/schema/spec.hpp"
#include "models/rng.hpp"
#include "models/workload.hpp"
#include "runtime/runtime.hpp"
#include "tests/reference/gpt_ref.hpp"

namespace zf::test {

// A few KB of text: deterministic, not periodic (so windows differ).
inline std::string fixture_text() {
  const char* words[] = {"and", "the", "LORD", "said", "unto", "Moses,", "behold", "light", "earth", "water", "of",
                         "in", "day", "night;", "good."};
  Rng r(7);
  std::string s;
  while (s.size() < 6000) {
    s += words[r.below(15)];
    s += r.below(9) == 0 ? "\n" : " ";
  }
  return s;
}

// bible(1)'s format: two verses from each of several books, the held-out ones included.
inline std::string fixture_kjv() {
  return "Ge1:1 In the beginning God created the heaven and the earth.\n"
         "Ge1:2 And the earth was without form, and void; and darkness was upon the face of the deep.\n"
         "Exo20:3 Thou shalt have no other gods before me.\n"
         "Ruth1:16 And Ruth said, Intreat me not to leave thee, or to return from following after thee.\n"
         "1Sm17:4 And there went out a champion out of the camp of the Philistines, named Goliath.\n"
         "Psa23:1 The LORD is my shepherd; I shall not want.\n"
         "Eccl1:2 Vanity of vanities, saith the Preacher, vanity of vanities; all is vanity.\n"
         "Isa53:5 But he was wounded for our transgressions, he was bruised for our iniquities.\n"
         "Jonah1:17 Now the LORD had prepared a great fish to swallow up Jonah.\n"
         "Mat1:1 The book of the generation of Jesus Christ, the son of David, the son of Abraham.\n"
         "John11:35 Jesus wept.\n"
         "Acts2:1 And when the day of Pentecost was fully come, they were all with one accord in one place.\n"
         "Rom8:28 And we know that all things work together for good to them that love God.\n"
         "Phi4:13 I can do all things through Christ which strengtheneth me.\n"
         "Jas1:5 If any of you lack wisdom, let him ask of God, that giveth to all men liberally.\n"
         "Rev22:21 The grace of our Lord Jesus Christ be with you all. Amen.\n";
}

inline Spec tiny_gpt_spec(const std::string& type, const std::string& dataset, const std::string& path) {
  Spec s;
  s.source = "tiny-gpt";
  s.model.type = type;
  s.model.n_layer = 2;
  s.model.n_head = 2;
  s.model.n_embd = 16;
  s.model.context = 8;
  s.data.dataset = dataset;
  s.data.path = path;
  s.data.split = "verse";
  s.train.batch_size = 3;
  s.train.eval_batch_size = 4;
  s.optimizer.lr = 1e-2;
  s.log.every = 0;
  s.log.warmup_steps = 0;
  return s;
}

// Parameters -> random values (LayerNorm gains around 1), returned in double for the reference.
inline ref::GptRef::Params randomize(Workload& wl, uint64_t seed) {
  Rng r(seed);
  ref::GptRef::Params out;
  for (Param* p : wl.params()) {  // in the logical layout (a weight stored (in, out) transposed in)
    std::vector<float> d(p->value.numel());
    const bool gain = p->name.find("ln_") != std::string::npos && p->name.find(".weight") != std::string::npos;
    for (size_t i = 0; i < d.size(); ++i) d[i] = (float)((gain ? 1.0 : 0.0) + 0.4 * r.normal());
    set_logical_values(*p, d.data());
    out[p->name].assign(d.begin(), d.end());
  }
  return out;
}

// Every gradient of the workload, copied into home tensors through the codelet layer, in the
// logical layout.
inline std::map<std::string, std::vector<float>> read_grads(Runtime& rt, Workload& wl) {
  std::vector<Tensor> copies;
  for (Param* p : wl.params()) {
    copies.push_back(Tensor::home(p->grad.shape(), p->name + ".gcopy"));
    insert_copy(rt.device(0).named("test.copy_grad"), p->grad, whole(p->grad), copies.back(), whole(copies.back()));
  }
  rt.wait_all();
  std::map<std::string, std::vector<float>> g;
  auto params = wl.params();
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float>& v = g[params[i]->name];
    v.assign(copies[i].data(), copies[i].data() + copies[i].numel());
    if (params[i]->in_out) transpose(copies[i].data(), params[i]->cols(), params[i]->rows(), v.data());
  }
  return g;
}

// |g - ref| <= kGradTol * max|ref| over each tensor. The float path runs through 2 blocks of
// matmuls (reductions of up to 4C = 64 terms), softmaxes and LayerNorms with O(1) random weights;
// its relative error stays near 1e-6, so 1e-4 leaves margin without hiding a wrong formula
// (a wrong term changes gradients at the 1e-1 level).
inline constexpr double kGradTol = 1e-4;

// tol: the bound relative to the tensor's largest reference value (the bf16 tests pass their own,
// tests/models/bf16_helpers.hpp).
inline void expect_grads_match(const std::map<std::string, std::vector<float>>& got, const ref::GptRef::Params& want,
                               double tol = kGradTol) {
  ASSERT_EQ(got.size(), want.size());
  for (auto& [name, r] : want) {
    SCOPED_TRACE(name);
    auto it = got.find(name);
    ASSERT_NE(it, got.end());
    ASSERT_EQ(it->second.size(), r.size());
    double scale = 0.0, diff = 0.0;
    for (size_t i = 0; i < r.size(); ++i) {
      scale = std::max(scale, std::fabs(r[i]));
      diff = std::max(diff, std::fabs((double)it->second[i] - r[i]));
    }
    EXPECT_GT(scale, 0.0) << "a gradient that is all zero tests nothing";
    EXPECT_LE(diff, tol * scale) << "max |diff| " << diff << " vs max |ref| " << scale;
  }
}

inline RuntimeConfig rt_config(const std::string& sched = "lws") {
  RuntimeConfig c;
  c.sched = sched;
  c.device_workers = 1;
  c.host_workers = 1;
  return c;
}

// One step of the language model against the double reference, its weights stored as `layout`

}  // namespace zf::test
