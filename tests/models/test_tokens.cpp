// Token data for the GPT language model (models/data/tokens.hpp, data.dataset "tokens"): each file format
// read back id for id; every bad file refused naming the file and what was expected; the spec's
// fields; data.order "sequential" (BatchOrder's rows over ranks and micro-batches, and the windows a
// run's steps really train on); eval_loss over the first eval_limit windows against the double
// reference; a short training run; a bitwise resume under sequential order; tools/kjv-tokens.pl
// against the "kjv" dataset's split.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "graphs/schema/spec.hpp"
#include "graphs/train/memory_estimate.hpp"
#include "graphs/train/step_graph.hpp"
#include "graphs/train/trainer.hpp"
#include "models/nets/gpt.hpp"
#include "models/rng.hpp"
#include "models/data/text.hpp"
#include "models/data/tokens.hpp"
#include "test_helpers.hpp"
#include "tests/models/gpt_helpers.hpp"
#include "tests/reference/gpt_ref.hpp"

namespace zf::test {
namespace {

using json = nlohmann::json;

std::string le(uint64_t v, int bytes) {
  std::string s;
  for (int k = 0; k < bytes; ++k) s += (char)(uint8_t)(v >> (8 * k));
  return s;
}
std::string ids_as(const std::vector<uint32_t>& ids, int width) {
  std::string s;
  for (uint32_t x : ids) s += le(x, width);
  return s;
}
// llm.c's header: magic, version, count, then 253 zeros.
std::string llmc_header(int32_t magic, int32_t version, int32_t count) {
  return le((uint32_t)magic, 4) + le((uint32_t)version, 4) + le((uint32_t)count, 4) + std::string(1024 - 12, '\0');
}
std::vector<uint32_t> ids_of(const TokenFile& t) {
  std::vector<uint32_t> v;
  for (int64_t i = 0; i < t.size(); ++i) v.push_back(t.at(i));
  return v;
}
// n ids below vocab, deterministic
std::vector<uint32_t> random_ids(size_t n, uint32_t vocab, uint64_t seed) {
  Rng r(seed);
  std::vector<uint32_t> v(n);
  for (auto& x : v) x = (uint32_t)r.below(vocab);
  return v;
}

const std::string kW = "spec.json: data.path";

TEST(TokenData, ReadsEachFormat) {
  TempDir dir;
  const std::vector<uint32_t> small = {0, 1, 255, 256, 50256, 65535, 7};
  const std::vector<uint32_t> big = {0, 65536, 128255, 100000, 3, 131071};
  struct Case {
    std::string name, content, format;
    std::vector<uint32_t> ids;
    int width;
    int64_t header, vocab;
  } cases[] = {
      {"train.bin", ids_as(small, 2), "raw uint16", small, 2, 0, 65536},
      {"train.u32.bin", ids_as(big, 4), "raw uint32", big, 4, 0, 131072},
      {"llmc16.bin", llmc_header(20240520, 1, 7) + ids_as(small, 2), "llm.c uint16", small, 2, 1024, 65536},
      {"llmc32.bin", llmc_header(20240801, 7, 6) + ids_as(big, 4), "llm.c uint32", big, 4, 1024, 131072},
      // the header decides, whatever the path says
      {"llmc16.u32.bin", llmc_header(20240520, 1, 7) + ids_as(small, 2), "llm.c uint16", small, 2, 1024, 65536},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const TokenFile t = load_token_file(dir.write(c.name, c.content), kW, c.vocab, 2);
    EXPECT_EQ(t.format, c.format);
    EXPECT_EQ(t.width, c.width);
    EXPECT_EQ(t.header_bytes, c.header);
    EXPECT_EQ(ids_of(t), c.ids);
    // the storage the data codelet reads: width bytes per id in host order
    const uint8_t* b = t.bytes();
    uint32_t last = 0;
    std::memcpy(&last, b + (t.size() - 1) * t.width, (size_t)t.width);
    EXPECT_EQ(last, c.ids.back());
  }
}

TEST(TokenData, BadFilesNameTheFileAndWhatWasExpected) {
  TempDir dir;
  const std::vector<uint32_t> ok = random_ids(40, 256, 3);
  auto load = [&](const std::string& name, const std::string& content, int64_t vocab = 256, int64_t min = 9) {
    return [=, &dir] { load_token_file(dir.write(name, content), kW, vocab, min); };
  };
  expect_input_error([&] { load_token_file(dir.path("none.bin"), kW, 256, 9); }, {kW, "none.bin", "not found"});
  expect_input_error(load("empty.bin", ""), {kW, "empty.bin", "empty file", "uint16"});
  expect_input_error(load("odd.bin", ids_as(ok, 2) + "x"), {kW, "odd.bin", "odd byte count 81", "uint16"});
  expect_input_error(load("odd.u32.bin", ids_as(ok, 4) + "xy"), {"odd.u32.bin", "byte count 162", "multiple of 4"});
  // llm.c: a header cut short, a wrong version, a bad count, ids cut short or trailing bytes
  expect_input_error(load("hdr.bin", llmc_header(20240520, 1, 40).substr(0, 600)),
                     {"hdr.bin", "truncated llm.c header", "600 bytes", "1024-byte header"});
  expect_input_error(load("ver.bin", llmc_header(20240520, 2, 40) + ids_as(ok, 2)),
                     {"ver.bin", "bad llm.c header: version 2 at byte offset 4, expected 1"});
  expect_input_error(load("ver32.bin", llmc_header(20240801, 1, 40) + ids_as(ok, 4)),
                     {"ver32.bin", "version 1", "expected 7 (uint32 ids)"});
  expect_input_error(load("count.bin", llmc_header(20240520, 1, -5) + ids_as(ok, 2)),
                     {"count.bin", "token count -5 at byte offset 8"});
  expect_input_error(load("cut.bin", llmc_header(20240520, 1, 41) + ids_as(ok, 2)),
                     {"cut.bin", "truncated", "announces 41 uint16 ids (1106 bytes", "has 1104 bytes"});
  expect_input_error(load("tail.bin", llmc_header(20240520, 1, 39) + ids_as(ok, 2)),
                     {"tail.bin", "2 bytes after the 39 uint16 ids", "1102 bytes"});
  // ids out of range: the file, the byte offset and the id
  std::vector<uint32_t> bad = ok;
  bad[5] = 300;
  expect_input_error(load("range.bin", ids_as(bad, 2)),
                     {kW, "range.bin", "token id 300 at byte offset 10 (token 5)", "model.vocab = 256"});
  expect_input_error(load("range-llmc.bin", llmc_header(20240520, 1, 40) + ids_as(bad, 2)),
                     {"range-llmc.bin", "token id 300 at byte offset 1034"});
  bad[5] = 70000;
  expect_input_error(load("range.u32.bin", ids_as(bad, 4), 65536),
                     {"range.u32.bin", "token id 70000 at byte offset 20", "model.vocab = 65536"});
  expect_input_error(load("range32.bin", llmc_header(20240801, 7, 40) + ids_as(bad, 4), 65536),
                     {"range32.bin", "token id 70000 at byte offset 1044"});
  // fewer than context + 1 tokens
  expect_input_error(load("short.bin", ids_as(ok, 2), 256, 41), {"short.bin", "40 tokens", "model.context + 1 = 41"});
  EXPECT_NO_THROW(load("enough.bin", ids_as(ok, 2), 256, 40)());
}

// The spec: tokens needs both paths; eval_path only with tokens; model.vocab against the datasets;
// data.order and model.vocab written only when not default, and compared on --resume.
TEST(TokenData, SpecFields) {
  auto parse = [](json data, json model = json{{"type", "gpt"}}) {
    return [=] { parse_spec(json{{"model", model}, {"data", data}}, "s.json"); };
  };
  expect_input_error(parse({{"dataset", "tokens"}, {"path", "a.bin"}}), {"s.json: data.eval_path", "required"});
  expect_input_error(parse({{"dataset", "tokens"}, {"eval_path", "a.bin"}}), {"s.json: data.path", "required"});
  expect_input_error(parse({{"dataset", "text"}, {"path", "a.txt"}, {"eval_path", "b"}}),
                     {"s.json: data.eval_path", "only with data.dataset tokens"});
  // model.type hf (docs/hf.md "Data"): instructions and chat only there, with a path; no images
  expect_input_error(parse({{"dataset", "instructions"}, {"path", "a.jsonl"}}),
                     {"s.json: data.dataset", "set model.type hf"});
  const json hf{{"type", "hf"}, {"path", "dir"}};
  expect_input_error(parse({{"dataset", "instructions"}}, hf), {"s.json: data.path", "required with data.dataset instructions"});
  expect_input_error(parse({{"dataset", "fashion-mnist"}}, hf), {"s.json: data.dataset", "tokens, text, kjv, instructions or chat"});
  EXPECT_NO_THROW(parse({{"dataset", "instructions"}, {"path", "a.jsonl"}, {"eval_path", "b.jsonl"}}, hf)());
  // chat records likewise (docs/finetune.md "Chat records"); data.pack only for records
  expect_input_error(parse({{"dataset", "chat"}, {"path", "a.jsonl"}}), {"s.json: data.dataset", "chat records", "set model.type hf"});
  expect_input_error(parse({{"dataset", "chat"}}, hf), {"s.json: data.path", "required with data.dataset chat"});
  EXPECT_NO_THROW(parse({{"dataset", "chat"}, {"path", "a.jsonl"}, {"eval_path", "b.jsonl"}, {"pack", true}}, hf)());
  expect_input_error(parse({{"dataset", "text"}, {"path", "a.txt"}, {"pack", true}}, hf),
                     {"s.json: data.pack", "only with data.dataset instructions or chat"});
  EXPECT_NO_THROW(parse({{"dataset", "text"}, {"path", "a.txt"}, {"eval_path", "b.txt"}}, hf)());
  expect_input_error(parse({{"dataset", "text"}, {"path", "a.txt"}}, {{"type", "gpt"}, {"vocab", 100}}),
                     {"s.json: model.vocab", "100", "at least 256"});
  expect_input_error(parse({{"dataset", "kjv"}}, {{"type", "gpt-classifier"}, {"vocab", 300}}),
                     {"s.json: model.vocab", "vocabulary 256"});
  expect_input_error(parse({{"dataset", "tokens"}, {"path", "a"}, {"eval_path", "b"}, {"order", "shuffled"}}),
                     {"s.json: data.order", "shuffled"});
  expect_input_error(parse({{"dataset", "kjv"}}, {{"type", "gpt"}, {"vocab", 0}}), {"s.json: model.vocab"});
  const Spec s = parse_spec(json{{"model", {{"type", "gpt"}, {"vocab", 50257}}},
                                 {"data", {{"dataset", "tokens"}, {"path", "a"}, {"eval_path", "b"}, {"order", "sequential"}}}},
                            "s.json");
  EXPECT_EQ(s.model.vocab, 50257);
  const json j = s.to_json();
  EXPECT_EQ(j["data"]["order"], "sequential");
  EXPECT_EQ(j["data"]["eval_path"], "b");
  EXPECT_EQ(j["model"]["vocab"], 50257);
  EXPECT_EQ(parse_spec(j, "again.json").to_json(), j);
  const json d = Spec{}.to_json();  // defaults: not written (older checkpoints' specs compare equal)
  EXPECT_FALSE(d["data"].contains("order"));
  EXPECT_FALSE(d["data"].contains("eval_path"));
  EXPECT_FALSE(d["model"].contains("vocab"));
  // the memory estimate counts the vocabulary's rows (wte and lm_head)
  Spec a = s, b = s;
  b.model.vocab = 256;
  EXPECT_EQ(estimate_memory(a, -1, 1).param_count - estimate_memory(b, -1, 1).param_count,
            2 * (50257 - 256) * a.model.n_embd);
}

// Row b of step t is window (t B + b) mod W under "sequential", whatever the ranks and
// micro-batches; "random" takes the permutation's rows in the same places.
TEST(TokenData, SequentialRowsFollowTheFormula) {
  const int64_t W = 29;  // above the largest global batch (12 rows): at least one step per epoch
  std::vector<int32_t> perm(W);
  for (int64_t i = 0; i < W; ++i) perm[(size_t)i] = (int32_t)((i * 7 + 3) % W);
  for (int R : {1, 2, 3})
    for (int A : {1, 2}) {
      SCOPED_TRACE("ranks " + std::to_string(R) + ", micro-batches " + std::to_string(A));
      const int Bl = 2, B = Bl * R * A;
      BatchOrder seq{true, W, W / B, B, Bl, R}, rnd{false, W, W / B, B, Bl, R};
      for (int64_t t = 0; t < 9; ++t) {
        std::vector<int> seen(B, 0);
        for (int mb = 0; mb < A; ++mb)
          for (int r = 0; r < R; ++r)
            for (int i = 0; i < Bl; ++i) {
              const int64_t b = seq.row(mb, r, i);
              ASSERT_GE(b, 0);
              ASSERT_LT(b, B);
              ++seen[(size_t)b];
              EXPECT_EQ(seq.unit(perm, t, b), (t * B + b) % W) << "step " << t << " row " << b;
              EXPECT_EQ(rnd.unit(perm, t, b), perm[(size_t)((t % (W / B)) * B + b)]);
            }
        EXPECT_EQ(seen, std::vector<int>(B, 1)) << "every row of the global batch on exactly one rank";
      }
    }
}

// A tiny GPT on a token file with a vocabulary above 256 (ids up to 299).
Spec tokens_spec(const TempDir& dir, const std::vector<uint32_t>& train, const std::vector<uint32_t>& eval) {
  Spec s = tiny_gpt_spec("gpt", "tokens", dir.write("train.bin", ids_as(train, 2)));
  s.data.eval_path = dir.write("eval.u32.bin", ids_as(eval, 4));
  s.model.vocab = 300;
  s.runtime.device_workers = 1;
  s.runtime.host_workers = 1;
  return s;
}

// A run's steps under "sequential" train on windows (t B + b) mod W: the gradients of steps 0-4
// (W = 7, B = 3: steps 2 and 4 wrap around) equal a fresh model's on those windows, bitwise.
TEST(TokenData, SequentialStepsTrainOnTheFormulasWindows) {
  TempDir dir;
  Spec s = tokens_spec(dir, random_ids(7 * 8 + 1, 300, 5), random_ids(40, 300, 6));
  s.data.order = "sequential";
  s.train.steps = 5;
  std::vector<Weights> w(5), g(5);
  RunOptions o;
  o.quiet = true;
  o.evaluate = false;
  o.after_backward = [&](Runtime& rt, Workload& wl, int64_t t) {
    for (Param* p : wl.params()) w[(size_t)t][p->name] = logical_values(*p);  // the weights step t used
    g[(size_t)t] = read_grads(rt, wl);
  };
  run_training(s, o);
  Runtime rt(rt_config());
  auto wl = make_workload(s, &rt.tracker().status());
  ASSERT_EQ(wl->epoch_size(), 7);
  Tensor stats = Tensor::home({3}, "stats", sizeof(double));
  for (int64_t t = 0; t < 5; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    std::vector<int32_t> idx;
    for (int b = 0; b < 3; ++b) idx.push_back((int32_t)((t * 3 + b) % 7));
    for (Param* p : wl->params()) set_logical_values(*p, w[(size_t)t].at(p->name).data());
    wl->submit_step(rt, t, idx, stats);
    const Weights got = read_grads(rt, *wl);
    rt.tracker().status().rethrow_if_failed();
    EXPECT_EQ(first_difference(got, g[(size_t)t]), "");
  }
}

// eval_loss = the mean cross-entropy (nats per token) over every target of the eval file's first
// eval_limit windows (all when 0), against the double reference on the same float weights.
TEST(TokenData, EvalLossEqualsDoubleReference) {
  TempDir dir;
  const std::vector<uint32_t> eval = random_ids(6 * 8 + 5, 300, 9);  // 6 windows of 8 (5 ids left over)
  for (int64_t limit : {0, 4}) {
    SCOPED_TRACE("eval_limit " + std::to_string(limit));
    Spec s = tokens_spec(dir, random_ids(100, 300, 8), eval);
    s.data.eval_limit = limit;
    s.data.order = "sequential";  // evaluation does not depend on the order
    Runtime rt(rt_config());
    auto wl = make_workload(s, &rt.tracker().status());
    size_t numel = 0;
    for (Param* p : wl->params()) numel += p->value.numel();
    EXPECT_EQ((int64_t)numel, estimate_memory(s, -1, 1).param_count);
    ref::GptRef model({2, 2, 16, 300}, randomize(*wl, 21));
    const EvalResult r = wl->evaluate(rt);
    const int n = limit ? (int)limit : 6, T = 8;
    double sum = 0.0;
    for (int k = 0; k < n; ++k) {
      std::vector<int32_t> tok, tgt;
      for (int i = 0; i < T; ++i) {
        tok.push_back((int32_t)eval[(size_t)(k * T + i)]);
        tgt.push_back((int32_t)eval[(size_t)(k * T + i + 1)]);
      }
      sum += model.lm_loss(tok, tgt, 1, T, nullptr) * T;
    }
    const double want = sum / (n * T);
    EXPECT_EQ(r.count, n * T);
    // as the training step's test (test_gpt.cpp): the float path's relative error is near 1e-6
    EXPECT_NEAR(r.loss, want, 1e-5 * want);
  }
}

// A short run on a token file with a vocabulary of 300 learns its repeating sequence of ids.
TEST(TokenData, ShortTrainingRunLearns) {
  TempDir dir;
  const std::vector<uint32_t> cycle = random_ids(23, 300, 4);
  std::vector<uint32_t> train, eval;
  for (int i = 0; i < 2000; ++i) train.push_back(cycle[(size_t)i % 23]);
  for (int i = 0; i < 200; ++i) eval.push_back(cycle[(size_t)(i + 5) % 23]);
  Spec s = tokens_spec(dir, train, eval);
  s.train.batch_size = 8;
  s.train.steps = 60;
  json m;
  train_and_capture(s, &m, true);
  const double loss = m["final"]["eval_loss"];
  RecordProperty("eval_loss", std::to_string(loss));
  EXPECT_LT(loss, 1.0) << "ln 300 = 5.7 at the start";
  EXPECT_EQ(m["final"]["eval_examples"].get<int64_t>(), 24 * 8) << "all 24 windows of the eval file";
}

// Under "sequential" a resumed run continues the sequence: bitwise the uninterrupted run's weights.
TEST(TokenData, SequentialResumeIsBitwise) {
  TempDir dir;
  Spec s = tokens_spec(dir, random_ids(20 * 8 + 3, 300, 12), random_ids(40, 300, 13));
  s.data.order = "sequential";
  s.strategy = "zero-offload-dpu";
  s.train.steps = 13;  // 39 rows of 20 windows: the sequence wraps
  const Weights full = run_with(s, "", 0, "");
  const std::string ck = dir.path("ck");
  s.train.steps = 9;  // checkpoints after steps 3, 7 and 8
  run_with(s, ck, 4, "");
  s.train.steps = 13;
  EXPECT_EQ(first_difference(run_with(s, "", 0, ck), full), "") << "resumed from step 8";
  EXPECT_EQ(first_difference(run_with(s, "", 0, ck + "/step-00000003"), full), "") << "resumed from step 3";
  s.data.order = "random";  // a checkpoint of a sequential run does not resume in another order
  expect_input_error([&] { run_with(s, "", 0, ck); }, {"data.order"});
}

// tools/kjv-tokens.pl writes the "kjv" dataset's split (kjv_lm_split), a byte an id, in llm.c's format.
TEST(TokenData, KjvTokensScriptMatchesTheKjvSplit) {
  TempDir dir;
  const std::string kjv = dir.write("kjv.txt", fixture_kjv());
  const std::string cmd = "perl " + std::string(ZF_SOURCE_DIR) + "/tools/kjv-tokens.pl " + kjv + " " +
                          dir.p.string() + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const TextSplit want = kjv_lm_split(load_kjv(kjv, "w"));
  const TokenFile train = load_token_file(dir.path("kjv-train.bin"), "w", 256, 1);
  const TokenFile eval = load_token_file(dir.path("kjv-eval.bin"), "w", 256, 1);
  EXPECT_EQ(train.format, "llm.c uint16");
  EXPECT_EQ(ids_of(train), std::vector<uint32_t>(want.train.begin(), want.train.end()));
  EXPECT_EQ(ids_of(eval), std::vector<uint32_t>(want.val.begin(), want.val.end()));
  EXPECT_FALSE(want.train.empty());
  EXPECT_FALSE(want.val.empty());
}

}  // namespace
}  // namespace zf::test
