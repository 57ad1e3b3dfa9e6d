// Chat records (models/data/chat.hpp, docs/finetune.md "Chat records"): a model directory with the
// shipped KJV tokenizer and a chat template; the rows' ids equal the tokenizer's encode of the
// template's text, the targets >= 0 exactly on the assistants' turns (their text and what closes
// them), ShareGPT's records the same rows as TRL's, packing, and every bad record or template refused
// naming the file, the record and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/data/chat.hpp"
#include "test_helpers.hpp"
#include "tests/models/record_helpers.hpp"

namespace zf::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint32_t kBos = kKjvBos, kEos = kKjvEos;

// Llama 3's shape: BOS once, each turn "role:\n" + content + EOS + "\n", the generation prompt "assistant:\n".
const char* kTemplate =
    "{{ bos_token }}{% for message in messages %}{{ message['role'] + ':\\n' + message['content'] | trim + "
    "eos_token + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ 'assistant:\\n' }}{% endif %}";

struct ChatDir {
  std::string dir;
  explicit ChatDir(const std::string& tmpl, const std::string& name = "chat") {
    dir = (fs::temp_directory_path() / ("zf_chat_" + name + "_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(std::string(ZF_SOURCE_DIR) + "/graphs/tokenizers/kjv-bpe/tokenizer.json", dir + "/tokenizer.json");
    write("config.json", json{{"bos_token_id", kBos}, {"eos_token_id", kEos}}.dump());
    json c = {{"bos_token", {{"content", "<|begin_of_text|>"}}}, {"eos_token", "<|end_of_text|>"}};
    if (!tmpl.empty()) c["chat_template"] = tmpl;
    write("tokenizer_config.json", c.dump());
  }
  ~ChatDir() { fs::remove_all(dir); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(dir + "/" + name) << text; }
  std::string path(const std::string& name) const { return dir + "/" + name; }
};

InstructionOptions options(int64_t T) { return kjv_row_options(T, std::nullopt); }

json conversation(int i) {
  return {{"messages",
           {{{"role", "system"}, {"content", "Answer from the King James Bible."}},
            {{"role", "user"}, {"content", "Quote verse " + std::to_string(i) + "."}},
            {{"role", "assistant"}, {"content", "In the beginning God created the heaven and the earth."}},
            {{"role", "user"}, {"content", "And the next?"}},
            {{"role", "assistant"}, {"content", "And the earth was without form, and void."}}}}};
}

// The text of the whole conversation, the ids, and the loss exactly on "content<EOS>\n" of each
// assistant turn.
TEST(Chat, RowsAreTheTemplatesTextWithTheLossOnTheAssistantTurns) {
  ChatDir d(kTemplate);
  d.write("c.jsonl", conversation(0).dump() + "\n");
  const ChatFormat f = load_chat_format(d.dir);
  const std::vector<ChatRecord> recs = read_chat_records(d.path("c.jsonl"), "spec.json: data.path");
  ASSERT_EQ(recs.size(), 1u);
  const std::string text = f.tmpl.render(recs[0].messages, false, f.specials);
  EXPECT_EQ(text,
            "<|begin_of_text|>system:\nAnswer from the King James Bible.<|end_of_text|>\nuser:\nQuote verse 0."
            "<|end_of_text|>\nassistant:\nIn the beginning God created the heaven and the earth.<|end_of_text|>\n"
            "user:\nAnd the next?<|end_of_text|>\nassistant:\nAnd the earth was without form, and void."
            "<|end_of_text|>\n");
  const RenderedRecord r = render_chat(recs[0], kjv_bpe(), f, "c");
  EXPECT_EQ(r.ids, kjv_bpe().encode(text)) << "the tokenizer splits the special tokens out the same way";
  EXPECT_EQ(r.ids.front(), kBos);
  std::vector<uint32_t> loss_ids;
  for (size_t k = 0; k < r.ids.size(); ++k)
    if (r.has_loss(k)) loss_ids.push_back(r.ids[k]);
  EXPECT_EQ(kjv_bpe().decode(loss_ids, false),
            "In the beginning God created the heaven and the earth.<|end_of_text|>\n"
            "And the earth was without form, and void.<|end_of_text|>\n");

  int64_t truncated = -1;
  const LmRows rows = masked_rows(
      1, [&](int64_t) { return r; }, [](int64_t) { return std::string("record 0"); }, kjv_bpe(), options(256), "c",
      "chat", &truncated);
  EXPECT_EQ(truncated, 0);
  for (int64_t t = 0; t < 256; ++t) {
    const size_t k = (size_t)t;
    EXPECT_EQ(rows.tokens[k], k < r.ids.size() ? (int32_t)r.ids[k] : (int32_t)kEos) << t;
    EXPECT_EQ(rows.targets[k], k + 1 < r.ids.size() && r.has_loss(k + 1) ? (int32_t)r.ids[k + 1] : -1) << t;
  }
}

// ShareGPT's conversations (human/gpt/system) give the rows of the same messages in TRL's shape; a
// JSON array the rows of JSONL.
TEST(Chat, ShareGptAndJsonArrayGiveTheSameRows) {
  ChatDir d(kTemplate, "sharegpt");
  std::string trl, sharegpt;
  json array = json::array();
  for (int i = 0; i < 12; ++i) {
    const json c = conversation(i);
    trl += c.dump() + "\n";
    array.push_back(c);
    json s = json::array();
    for (const json& m : c["messages"]) {
      const std::string role = m["role"];
      s.push_back({{"from", role == "user" ? "human" : role == "assistant" ? "gpt" : "system"}, {"value", m["content"]}});
    }
    sharegpt += json{{"conversations", s}, {"id", i}}.dump() + "\n";
  }
  d.write("trl.jsonl", trl);
  d.write("sharegpt.jsonl", sharegpt);
  d.write("trl.json", array.dump(1));
  const ChatFormat f = load_chat_format(d.dir);
  const LmRowSplit a = load_chat_split(d.path("trl.jsonl"), "w", "", "", kjv_bpe(), f, options(128));
  for (const char* other : {"sharegpt.jsonl", "trl.json"}) {
    const LmRowSplit b = load_chat_split(d.path(other), "w", "", "", kjv_bpe(), f, options(128));
    EXPECT_EQ(a.train.tokens, b.train.tokens) << other;
    EXPECT_EQ(a.train.targets, b.train.targets) << other;
    EXPECT_EQ(a.eval.targets, b.eval.targets) << other;
  }
  EXPECT_EQ(a.train.rows, 11);  // record 9 held out
  EXPECT_EQ(a.eval.rows, 1);
  EXPECT_NE(a.train.description.find("11 chat records from"), std::string::npos) << a.train.description;
}

// data.pack: whole conversations one after another in a row, the same loss tokens as one a row.
TEST(Chat, PackedRowsHoldTheSameLossTokens) {
  ChatDir d(kTemplate, "pack");
  std::string s;
  for (int i = 0; i < 10; ++i) s += conversation(i).dump() + "\n";
  d.write("c.jsonl", s);
  const ChatFormat f = load_chat_format(d.dir);
  InstructionOptions o = options(256);
  const LmRowSplit single = load_chat_split(d.path("c.jsonl"), "w", d.path("c.jsonl"), "e", kjv_bpe(), f, o);
  o.pack = true;
  const LmRowSplit packed = load_chat_split(d.path("c.jsonl"), "w", d.path("c.jsonl"), "e", kjv_bpe(), f, o);
  EXPECT_LT(packed.train.rows, single.train.rows);
  auto loss_targets = [](const LmRows& r) {
    std::vector<int32_t> v;
    for (int32_t t : r.targets)
      if (t >= 0) v.push_back(t);
    return v;
  };
  EXPECT_EQ(loss_targets(packed.train), loss_targets(single.train));
}

// A conversation longer than T + 1 is cut; one whose first reply starts past T + 1 is refused.
TEST(Chat, TruncationAndNoReplyLeft) {
  ChatDir d(kTemplate, "cut");
  d.write("c.jsonl", conversation(0).dump() + "\n");
  const ChatFormat f = load_chat_format(d.dir);
  const std::vector<ChatRecord> recs = read_chat_records(d.path("c.jsonl"), "w");
  const RenderedRecord r = render_chat(recs[0], kjv_bpe(), f, "c");
  size_t first = 0;
  while (!r.has_loss(first)) ++first;
  int64_t truncated = 0;
  auto rows = [&](int64_t T) {
    return masked_rows(1, [&](int64_t) { return r; }, [](int64_t) { return std::string("record 0"); }, kjv_bpe(),
                       options(T), "F", "chat", &truncated);
  };
  const LmRows cut = rows((int64_t)first + 1);  // ids [0, first + 1]: two reply tokens as targets
  EXPECT_EQ(truncated, 1);
  int n = 0;
  for (int32_t t : cut.targets) n += t >= 0;
  EXPECT_EQ(n, 2);
  expect_input_error([&] { rows((int64_t)first - 1); }, {"F: record 0: assistant", "no response token left"});
  // keep: the turns past the kept ids are not located, the loss within them is the same
  for (size_t keep : {first, first + 1, r.ids.size() - 3}) {
    const RenderedRecord k = render_chat(recs[0], kjv_bpe(), f, "c", keep);
    ASSERT_EQ(k.ids, r.ids);
    for (size_t i = 0; i < keep; ++i) EXPECT_EQ(k.has_loss(i), r.has_loss(i)) << "keep " << keep << ", id " << i;
  }
}

void expect_record_error(const std::string& record, const std::string& where, const std::string& what) {
  ChatDir d(kTemplate, "bad");
  d.write("c.jsonl", record + "\n");
  SCOPED_TRACE(record);
  expect_input_error([&] {
    const ChatFormat f = load_chat_format(d.dir);
    for (const ChatRecord& r : read_chat_records(d.path("c.jsonl"), "spec.json: data.path"))
      render_chat(r, kjv_bpe(), f, d.path("c.jsonl") + ": " + r.at);
  }, {d.path("c.jsonl") + ": record 0 (line 1)" + where, what});
}

TEST(Chat, BadRecordsNameTheRecordAndTheField) {
  expect_record_error(R"({"prompt": "a"})", "", "neither \"messages\" nor \"conversations\"");
  expect_record_error(R"({"messages": [], "conversations": []})", "", "both");
  expect_record_error(R"({"messages": []})", ": messages", "an empty list");
  expect_record_error(R"({"messages": {"role": "user"}})", ": messages", "got an object");
  expect_record_error(R"({"messages": [{"role": "user", "content": "hi"}]})", ": messages", "no assistant message");
  expect_record_error(R"({"messages": [{"role": "assistant"}]})", ": messages[0].content", "missing");
  expect_record_error(R"({"messages": [{"role": 3, "content": "x"}]})", ": messages[0].role", "expected a string");
  expect_record_error(R"({"messages": [{"role": "assistant", "content": [{"type": "text"}]}]})",
                      ": messages[0].content", "multimodal");
  expect_record_error(R"({"conversations": [{"from": "bot", "value": "x"}]})", ": conversations[0].from",
                      "'bot': expected system, human");
  expect_record_error(R"({"messages": ["x"]})", ": messages[0]", "expected an object");
}

// The InputError of rendering `record` with the template `tmpl`, named "F: record 0".
void expect_render_error(const std::string& tmpl, const std::string& name, const std::string& record,
                         std::initializer_list<std::string> parts) {
  ChatDir d(tmpl, name);
  d.write("c.jsonl", record + "\n");
  const ChatFormat f = load_chat_format(d.dir);
  const auto recs = read_chat_records(d.path("c.jsonl"), "w");
  expect_input_error([&] { render_chat(recs[0], kjv_bpe(), f, "F: record 0"); }, parts);
}

// The template's own refusals name the record; a template whose renders are not prefixes of one
// another names the turn; a directory without a chat template names tokenizer_config.json's field.
TEST(Chat, TemplateProblemsNameTheRecordOrTheFile) {
  const std::string user_then_assistant =
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})";
  expect_render_error("{% if messages[0]['role'] == 'assistant' %}{{ raise_exception('start with the user') }}"
                      "{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}",
                      "raise", R"({"messages": [{"role": "assistant", "content": "x"}]})",
                      {"F: record 0", "start with the user"});
  expect_render_error("{% for m in messages %}{% if loop.last %}[last]{% endif %}{{ m['content'] }}{% endfor %}",
                      "unstable", user_then_assistant, {"F: record 0: message 1", "not a prefix"});
  expect_render_error("{% for m in messages %}{% if m.role == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}",
                      "silent", user_then_assistant, {"F: record 0", "writes no token for the assistant turns"});
  ChatDir none("", "none");
  expect_input_error([&] { load_chat_format(none.dir); }, {none.dir + "/tokenizer_config.json: chat_template", "absent"});
}

}  // namespace
}  // namespace zf::test
