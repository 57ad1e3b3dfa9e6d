// The GPT workloads through StarPU (models/gpt.hpp, models/gpt_classifier.hpp) and their data
// (models/text.hpp):
// - one training step of a tiny GPT language model, and of the classifier, submitted as a task
//   graph: loss and every parameter gradient against the naive double reference
//   (tests/reference/gpt_ref.hpp) on the same float parameters and batch;
// - steps bitwise identical under several scheduling policies; a tiny model learns;
// - the text pipeline on fixture files written here (windows, splits, input errors), the KJV
//   parser and the classifier's labels on hand-checked verses, the real KJV text (skipped
//   visibly when bible-kjv is not installed); --init of a classifier from an LM checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "graphs/spec/spec.hpp"
#include "graphs/train/trainer.hpp"
#include "models/weights.hpp"
#include "models/gpt.hpp"
#include "models/gpt_classifier.hpp"
#include "models/safetensors.hpp"
#include "models/text.hpp"
#include "runtime/error.hpp"
#include "test_helpers.hpp"
#include "tests/reference/gpt_ref.hpp"

namespace zf::test {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "zf_gpt_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& content) const {
    std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// A few KB of text: deterministic, not periodic (so windows differ).
std::string fixture_text() {
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
std::string fixture_kjv() {
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

Spec tiny_gpt_spec(const std::string& type, const std::string& dataset, const std::string& path) {
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
ref::GptRef::Params randomize(Workload& wl, uint64_t seed) {
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
std::map<std::string, std::vector<float>> read_grads(Runtime& rt, Workload& wl) {
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
constexpr double kGradTol = 1e-4;

void expect_grads_match(const std::map<std::string, std::vector<float>>& got, const ref::GptRef::Params& want) {
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
    EXPECT_LE(diff, kGradTol * scale) << "max |diff| " << diff << " vs max |ref| " << scale;
  }
}

RuntimeConfig rt_config(const std::string& sched = "lws") {
  RuntimeConfig c;
  c.sched = sched;
  c.device_workers = 1;
  c.host_workers = 1;
  return c;
}

// One step of the language model against the double reference, its weights stored as `layout`
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

// pool "last": the output at the verse's last byte (models/gpt_classifier.cpp's own codelet).
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
// ones do not lend), on two device workers, and on one with the host worker lending its core.
TEST(GptEngine, WeightsBitwiseSameOnOneAndTwoDeviceCores) {
  TempDir dir;
  Spec s = tiny_gpt_spec("gpt", "text", dir.write("t.txt", fixture_text()));
  s.model.n_embd = 64;  // c_fc: 256 tokens x 64 x 256, two row tiles; attention: 16 (batch, head) tiles
  s.model.context = 32;
  s.train.batch_size = 8;
  s.train.steps = 4;
  s.runtime.sched = "zf-deadline";
  auto with = [&](int dev, int host) {
    Spec t = s;
    t.runtime.device_workers = dev;
    t.runtime.host_workers = host;
    return train_and_capture(t);
  };
  const Weights one = with(1, 2);
  ASSERT_FALSE(one.empty());
  EXPECT_EQ(first_difference(with(2, 1), one), "") << "two device workers";
  EXPECT_EQ(first_difference(with(1, 1), one), "") << "the host worker lending";
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

// ------------------------------------------------------------------ text data

TEST(GptData, TextSplitAndWindows) {
  TempDir dir;
  const std::string text = fixture_text();
  const std::string p = dir.write("t.txt", text);
  TextSplit t = load_text_split(p, "spec.json: data.path");
  const size_t cut = (size_t)(text.size() * 0.9);
  ASSERT_EQ(t.train.size(), cut);
  ASSERT_EQ(t.val.size(), text.size() - cut);
  EXPECT_EQ(std::string(t.val.begin(), t.val.end()), text.substr(cut));
  GptConfig c;
  c.n_layer = 1, c.n_head = 1, c.n_embd = 4, c.context = 32, c.eval_limit = 3;
  Runtime rt(rt_config());  // the model registers its parameters
  GptLanguageModel lm(c, t, nullptr);
  EXPECT_EQ(lm.epoch_size(), (int64_t)(cut - 1) / 32);
  const int64_t nval = ((int64_t)t.val.size() - 1) / 32;
  EXPECT_EQ(lm.eval_starts(), (std::vector<int64_t>{0, nval / 3 * 32, 2 * nval / 3 * 32}));
}

void expect_input_error_at(int line, const std::function<void()>& f, const std::vector<std::string>& parts) {
  SCOPED_TRACE("called at line " + std::to_string(line));
  try {
    f();
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    for (auto& s : parts) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << " lacks " << s;
  }
}
#define expect_input_error(...) expect_input_error_at(__LINE__, __VA_ARGS__)

TEST(GptData, BadTextFilesNameFieldAndFile) {
  TempDir dir;
  const std::string w = "spec.json: data.path";
  expect_input_error([&] { load_text_split(dir.path("nope.txt"), w); }, {"data.path", "nope.txt", "not found"});
  expect_input_error([&] { load_text_split(dir.write("e.txt", ""), w); }, {"data.path", "e.txt", "empty"});
  expect_input_error([&] { load_text_split(dir.write("b.bin", std::string("ab\xff\xfe", 4)), w); },
                     {"data.path", "b.bin", "UTF-8", "offset 2"});
  const std::string short_path = dir.write("s.txt", std::string(100, 'a'));
  expect_input_error([&] { check_split(load_text_split(short_path, w), 64, short_path, w); },
                     {"data.path", "s.txt", "model.context = 64"});
  expect_input_error([&] { load_kjv(dir.write("bad.txt", "Ge1:1 ok\nFoo1:1 what\n"), w); },
                     {"data.path", "bad.txt:2", "Foo"});
  expect_input_error([&] { load_kjv(dir.write("bad2.txt", "Ge1 no verse\n"), w); }, {"bad2.txt:1", "reference"});
  // through the trainer: the spec's file and field
  Spec s = tiny_gpt_spec("gpt", "text", dir.path("missing.txt"));
  s.source = "my-spec.json";
  Runtime rt(rt_config());
  expect_input_error([&] { make_workload(s, nullptr); }, {"my-spec.json: data.path", "missing.txt"});
  s.data.path = short_path;  // 90 + 10 bytes
  s.model.context = 64;
  expect_input_error([&] { make_workload(s, nullptr); }, {"my-spec.json: data.path", "too short"});
  s.model.context = 8;
  s.train.batch_size = 11;  // (90 - 1) / 8 = 11 windows: fine; 12 are too many
  EXPECT_NO_THROW(make_workload(s, nullptr));
  s.train.batch_size = 12;
  expect_input_error([&] { make_workload(s, nullptr); }, {"my-spec.json: train.batch_size", "11 training windows"});
}

TEST(GptData, KjvParsingAndLabels) {
  TempDir dir;
  auto verses = load_kjv(dir.write("kjv.txt", fixture_kjv()), "w");
  ASSERT_EQ(verses.size(), 16u);
  EXPECT_EQ(verse_reference(verses[0]), "Genesis 1:1");
  EXPECT_EQ(verses[0].text, "In the beginning God created the heaven and the earth.");
  EXPECT_EQ(verse_reference(verses[10]), "John 11:35");
  EXPECT_EQ(verses[10].text, "Jesus wept.");
  // hand-checked: reference -> testament, section
  const std::map<std::string, std::pair<std::string, std::string>> want = {
      {"Genesis 1:1", {"Old", "Law"}},           {"Exodus 20:3", {"Old", "Law"}},
      {"Ruth 1:16", {"Old", "History"}},         {"1 Samuel 17:4", {"Old", "History"}},
      {"Psalms 23:1", {"Old", "Poetry"}},        {"Ecclesiastes 1:2", {"Old", "Poetry"}},
      {"Isaiah 53:5", {"Old", "Prophets"}},      {"Jonah 1:17", {"Old", "Prophets"}},
      {"Matthew 1:1", {"New", "Gospels and Acts"}}, {"John 11:35", {"New", "Gospels and Acts"}},
      {"Acts 2:1", {"New", "Gospels and Acts"}}, {"Romans 8:28", {"New", "Epistles"}},
      {"Philippians 4:13", {"New", "Epistles"}}, {"James 1:5", {"New", "Epistles"}},
      {"Revelation 22:21", {"New", "Revelation"}}};
  int checked = 0;
  for (const Verse& v : verses) {
    auto it = want.find(verse_reference(v));
    if (it == want.end()) continue;
    EXPECT_EQ(bible_testaments()[verse_label(v, "testament")], it->second.first) << verse_reference(v);
    EXPECT_EQ(bible_sections()[verse_label(v, "section")], it->second.second) << verse_reference(v);
    ++checked;
  }
  EXPECT_EQ(checked, (int)want.size());
  // the LM split holds out whole books; the classifier's verse split every 10th verse
  TextSplit lm = kjv_lm_split(verses);
  const std::string val(lm.val.begin(), lm.val.end());
  EXPECT_NE(val.find("Intreat me not"), std::string::npos);  // Ruth
  EXPECT_NE(val.find("Vanity of vanities"), std::string::npos);  // Ecclesiastes
  EXPECT_NE(val.find("through Christ"), std::string::npos);  // Philippians
  EXPECT_EQ(val.find("In the beginning"), std::string::npos);
  // the verse split's held-out verses are in neither part: index 9 = Matthew 1:1
  const std::string train(lm.train.begin(), lm.train.end());
  EXPECT_NE(train.find("In the beginning"), std::string::npos);
  EXPECT_NE(train.find("Jesus wept."), std::string::npos);
  EXPECT_EQ(train.find("The book of the generation"), std::string::npos);
  EXPECT_EQ(val.find("The book of the generation"), std::string::npos);
  VerseTask book = make_verse_task(verses, "testament", "book", 32);
  EXPECT_EQ(book.eval.rows, 5);  // Ruth, Ecclesiastes, Jonah, Philippians, James
  VerseTask verse = make_verse_task(verses, "testament", "verse", 32);
  EXPECT_EQ(verse.eval.rows, 1);  // index 9 = Matthew 1:1
  EXPECT_EQ(verse.eval.verse[0], 9);
  EXPECT_EQ(verse.eval.lengths[0], 32);  // truncated to the context
}

// The real text, made by `bash tools/zf setup` from the Debian package bible-kjv.
TEST(GptData, KjvTextFromBibleKjv) {
  if (!fs::exists(kKjvDefaultPath)) {
    if (std::system("command -v bible >/dev/null 2>&1") == 0)
      FAIL() << kKjvDefaultPath << " is missing although bible-kjv is installed: run `bash tools/zf setup`";
    GTEST_SKIP() << "bible-kjv is not installed and " << kKjvDefaultPath << " is missing (bash tools/zf setup)";
  }
  auto verses = load_kjv(kKjvDefaultPath, "kjv");
  ASSERT_EQ(verses.size(), 31102u);
  EXPECT_EQ(verse_reference(verses.front()), "Genesis 1:1");
  EXPECT_EQ(verses.front().text, "In the beginning God created the heaven and the earth.");
  EXPECT_EQ(verse_reference(verses.back()), "Revelation 22:21");
  std::vector<int> per_book(66, 0);
  for (auto& v : verses) ++per_book[v.book];
  for (int b = 0; b < 66; ++b) EXPECT_GT(per_book[b], 0) << bible_books()[b].name;
  const std::map<std::string, std::pair<int, int>> want = {
      {"Genesis 1:1", {0, 0}}, {"Psalms 23:1", {0, 2}}, {"Isaiah 53:5", {0, 3}}, {"Matthew 1:1", {1, 4}},
      {"John 11:35", {1, 4}},  {"Romans 8:28", {1, 5}}, {"Revelation 1:1", {1, 6}}, {"Esther 8:9", {0, 1}}};
  int checked = 0;
  for (auto& v : verses) {
    auto it = want.find(verse_reference(v));
    if (it == want.end()) continue;
    EXPECT_EQ(verse_label(v, "testament"), it->second.first) << verse_reference(v);
    EXPECT_EQ(verse_label(v, "section"), it->second.second) << verse_reference(v);
    ++checked;
  }
  EXPECT_EQ(checked, (int)want.size());
  TextSplit lm = kjv_lm_split(verses);
  EXPECT_EQ(lm.val.size(), 113245u);  // Ruth, Ecclesiastes, Lamentations, Joel, Jonah, Philippians, James, 1 John
  EXPECT_GT(lm.train.size(), 30 * lm.val.size());
  // Genesis 1:10 (index 9) is a held-out verse of the classifier's verse split, 1:9 and 1:11 are not
  const std::string train(lm.train.begin(), lm.train.end());
  EXPECT_EQ(verses[9].text.rfind("And God called the dry land Earth", 0), 0u);
  EXPECT_EQ(train.find(verses[9].text), std::string::npos);
  EXPECT_NE(train.find(verses[8].text), std::string::npos);
  EXPECT_NE(train.find(verses[10].text), std::string::npos);
}

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
                     {"x.json: data.dataset", "kjv or text"});
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
