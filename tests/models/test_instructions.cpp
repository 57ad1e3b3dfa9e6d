// Data for the Hugging Face models (models/data/instructions.hpp, models/data/text_tokens.hpp, docs/hf.md
// "Data"): Alpaca's templates character for character; the rows' ids equal the shipped KJV
// tokenizer's encode of the rendered prompt + response, the targets >= 0 exactly on the response
// and EOS; truncation; JSON and JSONL give the same rows (from tools/kjv-instructions.py); every bad
// record refused naming the file, the record and the field; text tokenized equals `zenflow-run
// tokenize`'s file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "models/data/instructions.hpp"
#include "models/data/text_tokens.hpp"
#include "models/data/tokens.hpp"
#include "test_helpers.hpp"
#include "tests/models/gpt_helpers.hpp"
#include "tests/models/record_helpers.hpp"

namespace zf::test {
namespace {

const std::string kW = "spec.json: data.path";
constexpr uint32_t kBos = kKjvBos, kEos = kKjvEos;

InstructionOptions options(int64_t T) { return kjv_row_options(T, kBos); }

std::string jsonl(const std::vector<std::vector<std::string>>& recs) {  // {instruction, input, output}
  std::string s;
  for (auto& r : recs)
    s += nlohmann::json{{"instruction", r[0]}, {"input", r[1]}, {"output", r[2]}}.dump() + "\n";
  return s;
}

// The templates as docs/hf.md quotes them from stanford_alpaca's train.py (PROMPT_DICT).
TEST(Instructions, AlpacaTemplatesExactly) {
  EXPECT_EQ(std::string(kAlpacaPromptInput),
            "Below is an instruction that describes a task, paired with an input that provides further context. "
            "Write a response that appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n"
            "### Input:\n{input}\n\n### Response:");
  EXPECT_EQ(std::string(kAlpacaPromptNoInput),
            "Below is an instruction that describes a task. Write a response that appropriately completes the "
            "request.\n\n### Instruction:\n{instruction}\n\n### Response:");
  EXPECT_EQ(alpaca_prompt("Quote Genesis 1:3.", ""),
            "Below is an instruction that describes a task. Write a response that appropriately completes the "
            "request.\n\n### Instruction:\nQuote Genesis 1:3.\n\n### Response:");
  EXPECT_EQ(alpaca_prompt("Name the book.", "Jesus wept."),
            "Below is an instruction that describes a task, paired with an input that provides further context. "
            "Write a response that appropriately completes the request.\n\n### Instruction:\nName the book.\n\n"
            "### Input:\nJesus wept.\n\n### Response:");
  // values are not scanned for placeholders (Python's format_map)
  EXPECT_EQ(alpaca_prompt("say {input}", "x{instruction}").find("### Instruction:\nsay {input}\n\n### Input:\nx{instruction}\n"),
            std::string(kAlpacaPromptInput).find("### Instruction:"));
}

// Row i: inputs ids[0..T), targets ids[1..T] where the position is in the response (or its EOS).
TEST(Instructions, RowsMaskEverythingButTheResponse) {
  TempDir dir;
  const std::vector<std::vector<std::string>> recs = {
      {"Quote Genesis 1:3.", "", "And God said, Let there be light: and there was light."},
      {"Which book and chapter is this verse from?", "Jesus wept.", "John 11"},
      {"Say it twice.", "", " Amen. Amen.\n"},
      {"Name it.", "caf\u00e9 \u5929\u5730", "<|end_of_text|> 12345"}};  // Unicode, a special token in the text
  const std::string path = dir.write("r.jsonl", jsonl(recs));
  const auto records = read_instruction_records(path, kW);
  ASSERT_EQ(records.size(), recs.size());
  const int64_t T = 160;
  int64_t truncated = -1;
  const LmRows rows = instruction_rows(records, kjv_bpe(), options(T), path, &truncated);
  EXPECT_EQ(truncated, 0);
  ASSERT_EQ(rows.rows, 4);
  ASSERT_EQ(rows.T, T);
  for (size_t i = 0; i < recs.size(); ++i) {
    const std::string prompt = alpaca_prompt(recs[i][0], recs[i][1]);
    std::vector<uint32_t> ids = {kBos};
    for (uint32_t x : kjv_bpe().encode(prompt + recs[i][2])) ids.push_back(x);
    ids.push_back(kEos);
    const size_t prompt_len = 1 + kjv_bpe().encode(prompt).size();
    ASSERT_LT(ids.size(), (size_t)T + 1) << "record " << i << " must fit for this test";
    ASSERT_GT(ids.size(), prompt_len + 1) << "record " << i;
    int64_t loss_tokens = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t tk = rows.tokens[(size_t)(i * T + t)], tg = rows.targets[(size_t)(i * T + t)];
      EXPECT_EQ(tk, t < (int64_t)ids.size() ? (int32_t)ids[(size_t)t] : (int32_t)kEos) << "record " << i << " t " << t;
      const bool response = (size_t)t + 1 >= prompt_len && (size_t)t + 1 < ids.size();
      EXPECT_EQ(tg, response ? (int32_t)ids[(size_t)t + 1] : -1) << "record " << i << " t " << t;
      loss_tokens += tg >= 0;
    }
    EXPECT_EQ(loss_tokens, (int64_t)(ids.size() - prompt_len)) << "the response's tokens and EOS";
    EXPECT_EQ(rows.targets[(size_t)(i * T) + ids.size() - 2], (int32_t)kEos) << "the last target is EOS";
  }
}

// data.pack: the records one after another (each BOS .. EOS whole), a record that does not fit in
// the row's T + 1 tokens starting the next row; the same tokens and loss targets as one a row, at
// their offsets, and nothing else with loss (the EOS before the next record's BOS predicts nothing)
TEST(Instructions, PackedRowsHoldWholeRecordsWithTheSameTargets) {
  TempDir dir;
  const std::vector<std::vector<std::string>> recs = {
      {"Quote Genesis 1:3.", "", "And God said, Let there be light: and there was light."},
      {"Which book and chapter is this verse from?", "Jesus wept.", "John 11"},
      {"Say it twice.", "", " Amen. Amen.\n"},
      {"Name it.", "", "Selah"}};
  const auto records = read_instruction_records(dir.write("r.jsonl", jsonl(recs)), kW);
  std::vector<RenderedRecord> rr;
  for (const auto& r : records) rr.push_back(render_record(r, kjv_bpe(), kBos, kEos));
  // T + 1 holds records 0 and 1 but not 2: rows {0, 1}, {2, 3} when 2 and 3 fit together
  const int64_t T = (int64_t)(rr[0].ids.size() + rr[1].ids.size()) - 1 + 3;
  ASSERT_GT((int64_t)(rr[0].ids.size() + rr[1].ids.size() + rr[2].ids.size()), T + 1);
  ASSERT_LE((int64_t)(rr[2].ids.size() + rr[3].ids.size()), T + 1);
  InstructionOptions o = options(T);
  o.pack = true;
  int64_t truncated = -1;
  const LmRows packed = instruction_rows(records, kjv_bpe(), o, "r", &truncated);
  const LmRows single = instruction_rows(records, kjv_bpe(), options(T), "r", &truncated);
  ASSERT_EQ(packed.rows, 2);
  int64_t loss_packed = 0, loss_single = 0;
  for (int32_t t : packed.targets) loss_packed += t >= 0;
  for (int32_t t : single.targets) loss_single += t >= 0;
  EXPECT_EQ(loss_packed, loss_single);
  const std::vector<std::pair<int64_t, int64_t>> place = {{0, 0}, {0, (int64_t)rr[0].ids.size()}, {1, 0},
                                                          {1, (int64_t)rr[2].ids.size()}};
  for (size_t i = 0; i < rr.size(); ++i) {
    const auto [row, at] = place[i];
    const int64_t L = (int64_t)rr[i].ids.size();
    for (int64_t t = 0; t < L && at + t < T; ++t) {
      EXPECT_EQ(packed.tokens[(size_t)(row * T + at + t)], (int32_t)rr[i].ids[(size_t)t]) << i << " " << t;
      EXPECT_EQ(packed.targets[(size_t)(row * T + at + t)], single.targets[(size_t)(i * T + t)]) << i << " " << t;
    }
  }
}

// Longer than T + 1 ids: the first T + 1 kept (response cut, no EOS), counted; a prompt of T ids or
// more leaves no response token: refused naming the record.
TEST(Instructions, TruncatesTheResponseAndRefusesAPromptTooLong) {
  TempDir dir;
  const std::string verse = "And God said, Let there be light: and there was light.";
  const std::string path = dir.write("r.jsonl", jsonl({{"Quote Genesis 1:3.", "", verse}, {"Hi.", "", "Amen."}}));
  const auto records = read_instruction_records(path, kW);
  const RenderedRecord r0 = render_record(records[0], kjv_bpe(), kBos, kEos);
  const int64_t T = r0.prompt_len + 2;  // ids [0, T]: three response tokens as targets
  ASSERT_GT((int64_t)r0.ids.size(), T + 1);
  int64_t truncated = 0;
  const LmRows rows = instruction_rows(records, kjv_bpe(), options(T), path, &truncated);
  EXPECT_EQ(truncated, 1);
  int64_t loss_tokens = 0;
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_EQ(rows.tokens[(size_t)t], (int32_t)r0.ids[(size_t)t]);
    const int32_t tg = rows.targets[(size_t)t];
    EXPECT_EQ(tg, t + 1 >= r0.prompt_len ? (int32_t)r0.ids[(size_t)t + 1] : -1) << t;
    loss_tokens += tg >= 0;
  }
  EXPECT_EQ(loss_tokens, 3);
  const RenderedRecord r1 = render_record(records[1], kjv_bpe(), kBos, kEos);
  expect_input_error([&] { instruction_rows(records, kjv_bpe(), options(r0.prompt_len - 1), path, &truncated); },
                     {path, "record 0 (line 1)", "output", "no response token left", "model.context"});
  EXPECT_LT(r1.prompt_len, r0.prompt_len);
}

// tools/kjv-instructions.py's JSONL and JSON array files of the same records give the same rows,
// and its records are the verses'.
TEST(Instructions, JsonAndJsonlGiveTheSameRows) {
  TempDir dir;
  const std::string kjv = dir.write("kjv.txt", fixture_kjv());
  const std::string script = "python3 " + std::string(ZF_SOURCE_DIR) + "/tools/kjv-instructions.py --every 1 ";
  for (const char* flag : {"", "--json "}) {
    const std::string cmd = script + flag + kjv + " " + dir.path(*flag ? "r.json" : "r.jsonl") + " >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  EXPECT_EQ(read_file(dir.path("r.json")).front(), '[');
  const auto recs = read_instruction_records(dir.path("r.jsonl"), kW);
  ASSERT_EQ(recs.size(), 32u);  // two records for each of the fixture's 16 verses
  EXPECT_EQ(recs[0].instruction, "Quote Genesis 1:1.");
  EXPECT_EQ(recs[0].output, "In the beginning God created the heaven and the earth.");
  EXPECT_EQ(recs[21].instruction, "Which book and chapter is this verse from?");
  EXPECT_EQ(recs[21].input, "Jesus wept.");
  EXPECT_EQ(recs[21].output, "John 11");
  const LmRowSplit a = load_instruction_split(dir.path("r.jsonl"), kW, "", "", kjv_bpe(), options(256));
  const LmRowSplit b = load_instruction_split(dir.path("r.json"), kW, "", "", kjv_bpe(), options(256));
  EXPECT_EQ(a.train.rows, 29);  // records 9, 19, 29 held out
  EXPECT_EQ(a.eval.rows, 3);
  EXPECT_EQ(a.train.tokens, b.train.tokens);
  EXPECT_EQ(a.train.targets, b.train.targets);
  EXPECT_EQ(a.eval.tokens, b.eval.tokens);
  EXPECT_EQ(a.eval.targets, b.eval.targets);
  // held out: record 9 is eval row 0
  const LmRows only9 = [&] {
    int64_t cut = 0;
    return instruction_rows({recs[9]}, kjv_bpe(), options(256), "x", &cut);
  }();
  EXPECT_EQ(std::vector<int32_t>(a.eval.tokens.begin(), a.eval.tokens.begin() + 256), only9.tokens);
  // with data.eval_path, every record of data.path trains
  const LmRowSplit c = load_instruction_split(dir.path("r.jsonl"), kW, dir.path("r.json"), "spec.json: data.eval_path",
                                              kjv_bpe(), options(256));
  EXPECT_EQ(c.train.rows, 32);
  EXPECT_EQ(c.eval.rows, 32);
  EXPECT_NE(c.train.description.find("0 truncated"), std::string::npos) << c.train.description;
}

// Every bad file: an InputError naming the file, the record (and line) and the field.
TEST(Instructions, BadRecordsNameFileRecordAndField) {
  TempDir dir;
  const std::string ok = R"({"instruction": "a", "input": "", "output": "b"})";
  struct Case {
    std::string name, content;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"empty.jsonl", "  \n", {"no records", "empty"}},
      {"empty.json", "[]", {"no records"}},
      {"syntax.json", "[" + ok + ", {\"instruction\": }]", {"[1].instruction", "not valid JSON"}},
      {"syntax.jsonl", ok + "\n\n{\"instruction\": \"a\", \"output\": \"b\"\n", {"record 1 (line 3)", "not valid JSON", "JSONL"}},
      {"pretty.jsonl", "{\n  \"instruction\": \"a\",\n  \"output\": \"b\"\n}\n", {"record 0 (line 1)", "JSONL"}},
      {"not-object.json", "[" + ok + ", 3]", {"record 1", "expected an object, got a number"}},
      {"not-object.jsonl", ok + "\n\"x\"\n", {"record 1 (line 2)", "expected an object, got a string"}},
      {"no-instruction.jsonl", ok + "\n" + ok + "\n{\"input\": \"\", \"output\": \"b\"}\n", {"record 2 (line 3): instruction", "missing"}},
      {"no-output.json", "[" + ok + ", {\"instruction\": \"a\"}]", {"record 1: output", "missing"}},
      {"number-output.jsonl", "{\"instruction\": \"a\", \"output\": 5}\n", {"record 0 (line 1): output", "expected a string, got a number"}},
      {"null-input.jsonl", "{\"instruction\": \"a\", \"input\": null, \"output\": \"b\"}\n", {"record 0 (line 1): input", "expected a string, got null"}},
      {"empty-output.json", "[" + ok + "," + ok + ", {\"instruction\": \"a\", \"output\": \"\"}]", {"record 2: output", "empty string"}},
      {"empty-instruction.jsonl", "{\"instruction\": \"\", \"output\": \"b\"}\n", {"record 0 (line 1): instruction", "empty string"}},
      {"not-utf8.jsonl", "{\"instruction\": \"a\xff\", \"output\": \"b\"}\n", {"record 0 (line 1)", "not valid JSON"}},
      {"top-object.json", "[" + ok + "]x", {"not valid JSON"}},
      // a key with an escaped NUL, then a syntax error inside its object: the message (found by
      // the fuzz target, which crashed on it) names the key with the NUL written out
      {"nul-key.jsonl", "{\"a\\u0000b\": {\"c\": 8(}}\n", {"record 0 (line 1)", "a\\x00b", "not valid JSON", "JSONL"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string p = dir.write(c.name, c.content);
    std::vector<std::string> parts = {kW, p};
    parts.insert(parts.end(), c.parts.begin(), c.parts.end());
    try {
      (void)read_instruction_records(p, kW);
      ADD_FAILURE() << "no InputError";
    } catch (const InputError& e) {
      for (auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what() << " lacks " << part;
    }
  }
  // the split: too few records to hold out every 10th, no EOS, an id above the model's vocabulary
  std::string nine;
  for (int i = 0; i < 9; ++i) nine += ok + "\n";
  const std::string p9 = dir.write("nine.jsonl", nine);
  expect_input_error([&] { load_instruction_split(p9, kW, "", "", kjv_bpe(), options(64)); },
                     {kW, p9, "9 records", "every 10th", "data.eval_path"});
  InstructionOptions no_eos = options(64);
  no_eos.eos.reset();
  no_eos.specials_where = "m/config.json: eos_token_id";
  expect_input_error([&] { load_instruction_split(p9, kW, p9, "spec.json: data.eval_path", kjv_bpe(), no_eos); },
                     {"m/config.json: eos_token_id", "no EOS token"});
  InstructionOptions small = options(64);
  small.vocab = 300;
  expect_input_error([&] { load_instruction_split(p9, kW, p9, "e", kjv_bpe(), small); },
                     {p9, "record 0 (line 1)", "300, but the tokenizer", "gives id"});
  const std::string bad_eval = dir.write("bad-eval.jsonl", ok + "\n{\"instruction\": 1}\n");
  expect_input_error([&] { load_instruction_split(p9, kW, bad_eval, "spec.json: data.eval_path", kjv_bpe(), options(64)); },
                     {"spec.json: data.eval_path", bad_eval, "record 1 (line 2): instruction", "expected a string"});
}

// The text dataset with an HF model: the ids equal `zenflow-run tokenize`'s file on the same text
// (BOS and EOS from config.json), for data.eval_path and for the 90/10 cut (at a character boundary).
TEST(TextTokens, EqualsTheTokenizeCommand) {
  TempDir dir;
  const std::string model = dir.path("m");
  std::filesystem::create_directory(model);
  std::filesystem::copy_file(std::string(ZF_SOURCE_DIR) + "/graphs/tokenizers/kjv-bpe/tokenizer.json",
                             model + "/tokenizer.json");
  dir.write("m/config.json", R"({"bos_token_id": 4094, "eos_token_id": 4095})");
  // a run of 2-byte characters around 90% of the text, shifted until floor(0.9 n) falls inside one
  std::string run;
  for (int i = 0; i < 600; ++i) run += "\u00e9";
  const std::string base = fixture_text() + "\n" + run + " caf\u00e9 <|end_of_text|> \u5929\u5730\n";
  auto inside = [](const std::string& s) { return ((unsigned char)s[(size_t)((double)s.size() * 0.9)] & 0xC0) == 0x80; };
  std::string text = base;
  for (int pad = 1; pad < 8 && !inside(text); ++pad) text = std::string((size_t)pad, ' ') + base;
  const std::string path = dir.write("t.txt", text);
  auto tokenize = [&](const std::string& file, const std::string& out) {
    const std::string cmd = std::string(ZF_RUN_BINARY) + " tokenize -q --model " + model + " --text " + file + " --out " + out;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::vector<uint32_t> v;
    const TokenFile f = load_token_file(out, "t", 4096, 1);
    for (int64_t i = 0; i < f.size(); ++i) v.push_back(f.at(i));
    return v;
  };
  auto ids = [](const TokenFile& f) {
    std::vector<uint32_t> v;
    for (int64_t i = 0; i < f.size(); ++i) v.push_back(f.at(i));
    return v;
  };
  const tok::SpecialIds sp = tok::read_special_ids(model);
  TextTokenOptions o;
  o.bos = sp.bos;
  o.eos = sp.eos;
  o.vocab = 4096;
  o.context = 8;
  const std::vector<uint32_t> want = tokenize(path, dir.path("t.bin"));
  ASSERT_GT(want.size(), 100u);
  EXPECT_EQ(want.front(), kBos);
  EXPECT_EQ(want.back(), kEos);
  const TokenSplit with_eval = load_text_token_split(path, kW, path, "spec.json: data.eval_path", kjv_bpe(), o);
  EXPECT_EQ(with_eval.train.width, 2);
  EXPECT_EQ(ids(with_eval.train), want);
  EXPECT_EQ(ids(with_eval.val), want);
  // the cut: the first byte at or after floor(0.9 n) that starts a character
  size_t cut = (size_t)((double)text.size() * 0.9);
  ASSERT_EQ((unsigned char)text[cut] & 0xC0, 0x80) << "the fixture puts floor(0.9 n) inside a character";
  while (((unsigned char)text[cut] & 0xC0) == 0x80) ++cut;
  const std::string head = dir.write("head.txt", text.substr(0, cut)), tail = dir.write("tail.txt", text.substr(cut));
  const TokenSplit split = load_text_token_split(path, kW, "", "", kjv_bpe(), o);
  EXPECT_EQ(ids(split.train), tokenize(head, dir.path("head.bin")));
  EXPECT_EQ(ids(split.val), tokenize(tail, dir.path("tail.bin")));
  // refusals: not UTF-8, too short for the context, an id above the model's vocabulary
  const std::string bad = dir.write("bad.txt", "abc\xed\xa0\x80");
  expect_input_error([&] { load_text_token_split(bad, kW, "", "", kjv_bpe(), o); }, {kW, bad, "byte 3", "UTF-8"});
  TextTokenOptions big = o;
  big.context = 100000;
  expect_input_error([&] { load_text_token_split(path, kW, "", "", kjv_bpe(), big); },
                     {kW, path, "fewer than model.context + 1 = 100001"});
  TextTokenOptions small = o;
  small.vocab = 300;
  expect_input_error([&] { load_text_token_split(path, kW, "", "", kjv_bpe(), small); },
                     {kW, path, "300, but the tokenizer", "gives id"});
}

// A tokenizer with more than 65536 ids (a vocabulary entry at 70000, as the tokenizer test's
// kjv-wide): the ids are kept at 4 bytes and equal the llm.c uint32 file `zenflow-run tokenize` writes.
TEST(TextTokens, WideVocabularyKeepsFourBytes) {
  TempDir dir;
  const std::string model = dir.path("m");
  std::filesystem::create_directory(model);
  const Bytes raw = read_file(std::string(ZF_SOURCE_DIR) + "/graphs/tokenizers/kjv-bpe/tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(std::string(raw.begin(), raw.end()));
  // one more vocabulary entry: the library gives the added tokens the next ids, 4095 and 4096
  j["model"]["vocab"]["<|wide|>"] = 70000;
  j["added_tokens"][0]["id"] = 4095;
  j["added_tokens"][1]["id"] = 4096;
  j["added_tokens"].push_back({{"id", 70000}, {"content", "<|wide|>"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", false}, {"special", true}});
  dir.write("m/tokenizer.json", j.dump());
  dir.write("m/config.json", R"({"bos_token_id": 4095, "eos_token_id": 4096})");
  const auto wide = tok::load_tokenizer(model);
  ASSERT_EQ(wide->vocab_size(), 70001u);
  const std::string path = dir.write("t.txt", fixture_text() + " <|wide|> Amen.\n");
  const std::string cmd = std::string(ZF_RUN_BINARY) + " tokenize -q --model " + model + " --text " + path + " --out " + dir.path("t.bin");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const TokenFile want = load_token_file(dir.path("t.bin"), "t", 70001, 1);
  EXPECT_EQ(want.format, "llm.c uint32");
  TextTokenOptions o;
  o.bos = 4095;
  o.eos = 4096;
  o.vocab = 70001;
  o.context = 8;
  const TokenSplit s = load_text_token_split(path, kW, path, "spec.json: data.eval_path", *wide, o);
  EXPECT_EQ(s.train.width, 4);
  EXPECT_EQ(s.train.format, "tokenized uint32");
  EXPECT_EQ(s.train.u32, want.u32);
  EXPECT_NE(std::find(s.train.u32.begin(), s.train.u32.end(), 70000u), s.train.u32.end());
}

}  // namespace
}  // namespace zf::test
