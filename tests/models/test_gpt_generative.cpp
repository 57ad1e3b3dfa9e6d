// The GPT classifier's generative head (models/nets/gpt_classifier.hpp): chunks of hand-checked verses,
// one step and the evaluation against the double reference (tests/reference/gpt_ref.hpp), a tiny
// model learns two styles, a resume under zenflow is bitwise.
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

// ------------------------------------------------------------------ the generative head

// make_verse_chunks on hand-checked verses at context 16: Genesis 1:1 (54 bytes + '\n') is four
// chunks, the last of 7 bytes; "Jesus wept." + '\n' one padded chunk of 12.
TEST(GptGenerative, ChunksOfHandCheckedVerses) {
  TempDir dir;
  const auto verses = load_kjv(dir.write("kjv.txt", fixture_kjv()), "x.json: data.path");
  VerseChunks c = make_verse_chunks(verses, {0, 10}, "testament", 16);
  ASSERT_EQ(c.offset.size(), 2u);
  EXPECT_EQ(c.size, (std::vector<int32_t>{55, 12}));
  EXPECT_EQ(c.labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(c.first_chunk, (std::vector<int32_t>{0, 4, 5}));  // and the end: 5 chunks
  ASSERT_EQ(c.chunks.size(), 5u);
  const std::vector<int32_t> n = {16, 16, 16, 7, 12}, v = {0, 0, 0, 0, 1};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(c.chunks[i].n, n[i]) << i;
    EXPECT_EQ(c.chunk_verse[i], v[i]) << i;
    EXPECT_EQ(c.chunks[i].cls, v[i]) << i;
  }
  const std::string text(c.text.begin(), c.text.end());
  auto chunk = [&](int i) { return text.substr((size_t)c.chunks[i].start, (size_t)c.chunks[i].n); };
  EXPECT_EQ(chunk(1), " God created the");
  EXPECT_EQ(chunk(3), "earth.\n");
  EXPECT_EQ(chunk(4), "Jesus wept.\n");
}

// Tokens, targets and classes of a chunk, built here from the verse text (the reference's input).
struct RefChunk {
  std::vector<int32_t> tok, tgt;
};
RefChunk ref_chunk(const std::string& verse_nl, int j, int T, int cls) {
  RefChunk r{std::vector<int32_t>(T, 0), std::vector<int32_t>(T, -1)};
  const std::string part = verse_nl.substr((size_t)j * T, (size_t)T);
  r.tok[0] = 1 + cls;
  for (size_t t = 0; t < part.size(); ++t) {
    if (t + 1 < part.size()) r.tok[t + 1] = (uint8_t)part[t];
    r.tgt[t] = (uint8_t)part[t];
  }
  return r;
}

// One training step of the generative head through StarPU (each chunk under every class: class
// byte and class embedding, padded targets ignored; the posterior's cross-entropy plus the
// language-model loss), then the evaluation's scores and Bayes' rule, all against the double
// reference on the same parameters.
TEST(GptGenerative, StepAndEvaluationMatchDoubleReference) {
  TempDir dir;
  const std::string kjv = dir.write("kjv.txt", fixture_kjv());
  Spec s = tiny_gpt_spec("gpt-classifier", "kjv", kjv);
  s.model.head = "generative";
  s.model.context = 16;
  s.data.labels = "section";
  s.data.split = "book";
  s.train.eval_batch_size = 3;  // several evaluation batches per class
  Runtime rt(rt_config());
  auto wl = make_workload(s, &rt.tracker().status());
  auto* gen = dynamic_cast<GptGenerativeClassifier*>(wl.get());
  ASSERT_NE(gen, nullptr);
  ref::GptRef model({2, 2, 16, 256}, randomize(*wl, 14));  // class_embedding random too
  ASSERT_EQ(model.params().at("class_embedding").size(), 7u * 16);
  const auto verses = load_kjv(kjv, "x.json: data.path");
  auto text_nl = [&](int32_t verse) { return verses[(size_t)verse].text + "\n"; };

  // training chunks: Genesis 1:1's first and last (7 bytes), John 11:35 (12), Exodus 20:3's first
  const VerseChunks& tc = gen->train_chunks();
  const auto& tv = gen->task().train_verses;
  std::vector<int32_t> idx;
  for (size_t i = 0; i < tc.chunks.size(); ++i) {
    const int32_t v = tv[(size_t)tc.chunk_verse[i]];
    const int j = (int)i - tc.first_chunk[(size_t)tc.chunk_verse[i]];
    if ((v == 0 && (j == 0 || j == 3)) || v == 10 || (v == 2 && j == 0)) idx.push_back((int32_t)i);
  }
  ASSERT_EQ(idx.size(), 4u);
  Tensor stats = Tensor::home({3}, "stats", sizeof(double));
  wl->submit_step(rt, 0, idx, stats);
  auto grads = read_grads(rt, *wl);
  rt.tracker().status().rethrow_if_failed();
  // the reference's batch: every chunk under each of the 7 classes, row k*B + b
  std::vector<int32_t> tok, tgt, cls, labels;
  int scored = 0;
  for (int k = 0; k < 7; ++k)
    for (int32_t i : idx) {
      const int32_t v = tv[(size_t)tc.chunk_verse[(size_t)i]];
      const int j = i - tc.first_chunk[(size_t)tc.chunk_verse[(size_t)i]];
      RefChunk r = ref_chunk(text_nl(v), j, 16, k);
      tok.insert(tok.end(), r.tok.begin(), r.tok.end());
      tgt.insert(tgt.end(), r.tgt.begin(), r.tgt.end());
      cls.push_back(k);
      if (k == 0) {
        labels.push_back(verse_label(verses[(size_t)v], "section"));
        for (int32_t y : r.tgt) scored += y >= 0;
      }
    }
  EXPECT_EQ(scored, 16 + 7 + 12 + 16);
  EXPECT_EQ(labels, (std::vector<int32_t>{0, 0, 0, 4}));  // Law, Law, Law, Gospels and Acts
  std::vector<double> count(7, 0.0), log_prior(7);
  for (int32_t v : tv) count[(size_t)verse_label(verses[(size_t)v], "section")] += 1.0;
  // classes without training verses (Revelation here) get the prior of a single verse
  for (int k = 0; k < 7; ++k) log_prior[(size_t)k] = std::log(std::max(count[(size_t)k], 1.0) / (double)tv.size());
  ref::GptRef::Params g;
  double ce_sum = 0.0;
  model.gen_cls_loss(tok, tgt, cls, labels, log_prior, 16, GptGenerativeClassifier::kLmWeight, &g, &ce_sum);
  const double* st = stats.as<double>();
  EXPECT_EQ(st[2], 4.0) << "the training loss is per chunk";
  EXPECT_NEAR(st[0], ce_sum, 1e-5 * ce_sum);
  expect_grads_match(grads, g);

  // evaluation: every held-out verse (Ruth, Eccl, Jonah, Phi, Jas) under each of the 7 classes
  const EvalResult ev = wl->evaluate(rt);
  rt.tracker().status().rethrow_if_failed();
  const auto& held = gen->task().eval_verses;
  ASSERT_EQ(held.size(), 5u);
  ASSERT_EQ(ev.count, 5);
  const std::vector<double>& got = gen->last_scores();
  ASSERT_EQ(got.size(), 7u * 5);
  double want_loss = 0.0;
  int want_ok = 0;
  for (size_t i = 0; i < held.size(); ++i) {
    const std::string t = text_nl(held[i]);
    std::vector<double> z(7);
    for (int k = 0; k < 7; ++k) {
      double ll = 0.0;
      for (int j = 0; j * 16 < (int)t.size(); ++j) {
        RefChunk r = ref_chunk(t, j, 16, k);
        std::vector<double> seq;
        model.gen_loss(r.tok, r.tgt, {k}, 1, 16, nullptr, &seq);
        ll += seq[0];
      }
      EXPECT_NEAR(got[(size_t)k * 5 + i], ll, 1e-5 * std::fabs(ll)) << "verse " << held[i] << " class " << k;
      z[(size_t)k] = ll + log_prior[(size_t)k];
    }
    const int y = verse_label(verses[(size_t)held[i]], "section");
    const double mx = *std::max_element(z.begin(), z.end());
    double sum = 0.0;
    for (double q : z) sum += std::exp(q - mx);
    want_loss += -(z[(size_t)y] - mx - std::log(sum));
    want_ok += std::max_element(z.begin(), z.end()) - z.begin() == y;
  }
  EXPECT_NEAR(ev.loss, want_loss / 5, 1e-4 * want_loss / 5);
  EXPECT_EQ(ev.accuracy, want_ok / 5.0);
}

// A tiny generative classifier tells two made-up "testaments" apart on held-out verses: the Old
// verses use a's and e's, the New ones o's and u's.
TEST(GptGenerative, TinyModelLearnsTwoStyles) {
  TempDir dir;
  std::string kjv;
  Rng r(5);
  const char* old_words[] = {"aa", "ea", "ae", "eee", "aea"};
  const char* new_words[] = {"oo", "uo", "ou", "uuu", "ouo"};
  const char* books[] = {"Ge", "Exo", "Ruth", "Mat", "Rom", "Phi"};  // Ruth and Phi held out
  for (int b = 0; b < 6; ++b)
    for (int v = 1; v <= 12; ++v) {
      kjv += std::string(books[b]) + "1:" + std::to_string(v) + " ";
      for (int w = 0; w < 6; ++w) kjv += std::string(b < 3 ? old_words[r.below(5)] : new_words[r.below(5)]) + " ";
      kjv += "x.\n";
    }
  Spec s = tiny_gpt_spec("gpt-classifier", "kjv", dir.write("kjv.txt", kjv));
  s.model.head = "generative";
  s.model.context = 16;
  s.data.split = "book";
  s.train.steps = 80;
  s.train.batch_size = 8;
  nlohmann::json m;
  train_and_capture(s, &m, true);
  EXPECT_EQ(m["final"]["eval_examples"].get<int64_t>(), 24) << "evaluation counts verses";
  EXPECT_EQ(m["final"]["eval_accuracy"].get<double>(), 1.0);
  EXPECT_LT(m["final"]["eval_loss"].get<double>(), 0.1);
}

// Checkpoint and resume of the generative head under zenflow with host updates in flight: the
// class embedding and every other state resume bitwise (the head keeps no state of its own).
TEST(GptGenerative, ResumeBitwiseUnderZenflow) {
  TempDir dir;
  Spec s = tiny_gpt_spec("gpt-classifier", "kjv", dir.write("kjv.txt", fixture_kjv()));
  s.model.head = "generative";
  s.strategy = "zenflow";
  s.zenflow.update_interval = 2;
  s.zenflow.overlap_step = true;
  s.zenflow.full_warm_up_rounds = 2;
  s.zenflow.given = true;
  s.train.steps = 13;
  auto run = [&](int64_t steps, const std::string& ck, int64_t every, const std::string& resume) {
    Spec r = s;
    r.train.steps = steps;
    return run_with(r, ck, every, resume);
  };
  const Weights full = run(13, "", 0, "");
  ASSERT_TRUE(full.count("class_embedding"));
  bool moved = false;
  for (float v : full.at("class_embedding")) moved = moved || v != 0.0f;
  EXPECT_TRUE(moved) << "the class embedding is trained";
  const std::string ck = dir.path("ck");
  run(7, ck, 0, "");  // the last step's checkpoint: step 6, with a host update in flight
  EXPECT_EQ(run(13, "", 0, ck), full);
}

}  // namespace
}  // namespace zf::test
