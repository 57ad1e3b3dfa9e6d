// Chat records to masked token rows (models/data/chat.hpp): the two record shapes read and checked,
// each conversation rendered with the model's chat template, the assistant turns located by
// rendering the conversation's prefixes, the rows built as the instruction rows are.
#include "models/data/chat.hpp"

#include <algorithm>

#include "runtime/error.hpp"
#include "runtime/json_input.hpp"

namespace zf {
namespace {

using json = nlohmann::json;

const char* kExpected =
    "expected chat records: a JSON array of objects, or JSONL (one object a line), each with \"messages\" "
    "(a list of {\"role\", \"content\"}) or ShareGPT's \"conversations\" (a list of {\"from\", \"value\"}), "
    "with at least one assistant message";

// ShareGPT's speakers as the chat template's roles.
std::optional<std::string> sharegpt_role(const std::string& from) {
  if (from == "system") return "system";
  if (from == "human" || from == "user") return "user";
  if (from == "gpt" || from == "assistant") return "assistant";
  return std::nullopt;
}

ChatRecord record_of(const json& v, const std::string& w, const std::string& at) {
  if (!v.is_object()) throw InputError(w, "expected an object, got " + json_type_name(v) + " (" + kExpected + ")");
  const bool has_messages = v.contains("messages"), has_sharegpt = v.contains("conversations");
  if (has_messages == has_sharegpt)
    throw InputError(w, std::string(has_messages ? "both \"messages\" and \"conversations\"" : "neither \"messages\" "
                                                                                             "nor \"conversations\"") +
                            " (" + kExpected + ")");
  const char* list_key = has_messages ? "messages" : "conversations";
  const char* role_key = has_messages ? "role" : "from";
  const char* text_key = has_messages ? "content" : "value";
  const json& list = v.at(list_key);
  if (!list.is_array() || list.empty())
    throw InputError(w + ": " + list_key, "expected a non-empty list of messages, got " +
                                             (list.is_array() ? std::string("an empty list") : json_type_name(list)));
  ChatRecord r;
  r.at = at;
  bool assistant = false;
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string f = w + ": " + list_key + "[" + std::to_string(k) + "]";
    const json& m = list[k];
    if (!m.is_object()) throw InputError(f, "expected an object {\"" + std::string(role_key) + "\", \"" + text_key +
                                                "\"}, got " + json_type_name(m));
    auto str = [&](const char* key) {
      const auto it = m.find(key);
      if (it == m.end()) throw InputError(f + "." + key, "missing (expected a string)");
      if (!it->is_string())
        throw InputError(f + "." + key, "expected a string, got " + json_type_name(*it) +
                                            (it->is_array() ? " (content parts of multimodal records are not read)" : ""));
      return it->get<std::string>();
    };
    tok::ChatMessage msg{str(role_key), str(text_key)};
    tok::check_utf8(msg.content, f + "." + text_key);
    if (!has_messages) {
      const std::optional<std::string> role = sharegpt_role(msg.role);
      if (!role)
        throw InputError(f + ".from", "'" + excerpt(msg.role) + "': expected system, human (or user) or gpt (or "
                                                              "assistant)");
      msg.role = *role;
    } else if (msg.role.empty()) {
      throw InputError(f + ".role", "empty (expected system, user or assistant)");
    }
    assistant |= msg.role == "assistant";
    r.messages.push_back(std::move(msg));
  }
  if (!assistant)
    throw InputError(w + ": " + list_key, "no assistant message: the loss is on the assistant's turns (" +
                                              std::string(kExpected) + ")");
  return r;
}

}  // namespace

std::vector<ChatRecord> read_chat_records(const std::string& path, const std::string& where) {
  std::vector<ChatRecord> r;
  read_json_records(path, where, kExpected, [&](const json& j, const std::string& w, const std::string& at) {
    r.push_back(record_of(j, w, at));
  });
  return r;
}

ChatFormat load_chat_format(const std::string& dir) {
  std::optional<tok::ChatTemplateConfig> c = tok::read_chat_template_config(dir);
  if (!c)
    throw InputError(dir + "/tokenizer_config.json: chat_template",
                     "absent: chat records are rendered with the model's chat template (a base model has none; "
                     "train it on Alpaca records, or use a directory whose tokenizer_config.json has one)");
  const tok::SpecialIds ids = tok::read_special_ids(dir);
  return ChatFormat{tok::ChatTemplate(c->source, c->where), c->specials, ids.bos, ids.eos};
}

std::vector<uint32_t> encode_chat_text(const std::string& text, const tok::Tokenizer& tok, const ChatFormat& f) {
  std::vector<std::pair<std::string, uint32_t>> marks;  // the special texts with a known id
  for (const auto& [key, id] : {std::pair{"bos_token", f.bos}, std::pair{"eos_token", f.eos}}) {
    const auto it = f.specials.find(key);
    if (id && it != f.specials.end() && !it->second.empty()) marks.emplace_back(it->second, *id);
  }
  std::vector<uint32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = std::string::npos, len = 0;
    uint32_t id = 0;
    for (const auto& [s, i] : marks) {
      const size_t p = text.find(s, pos);
      if (p < best || (p == best && s.size() > len)) best = p, len = s.size(), id = i;
    }
    const size_t end = best == std::string::npos ? text.size() : best;
    if (end > pos) {
      const std::vector<uint32_t> part = tok.encode(std::string_view(text).substr(pos, end - pos));
      ids.insert(ids.end(), part.begin(), part.end());
    }
    if (best == std::string::npos) break;
    ids.push_back(id);
    pos = best + len;
  }
  return ids;
}

RenderedRecord render_chat(const ChatRecord& r, const tok::Tokenizer& tok, const ChatFormat& f, const std::string& w,
                           size_t keep) {
  auto render = [&](size_t n, bool generation_prompt) {
    const std::vector<tok::ChatMessage> m(r.messages.begin(), r.messages.begin() + (long)n);
    try {
      return f.tmpl.render(m, generation_prompt, f.specials);
    } catch (const InputError& e) {  // raise_exception() of the template is mostly about the record
      throw InputError(w, "the chat template (" + e.where() + ") refused the first " + std::to_string(n) +
                              " messages: " + e.message());
    }
  };
  const std::string full = render(r.messages.size(), false);
  RenderedRecord out;
  out.ids = encode_chat_text(full, tok, f);
  out.loss.assign(out.ids.size(), 0);
  bool cut = false;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    if (r.messages[i].role != "assistant") continue;
    const std::string before = render(i, true), through = render(i + 1, false);
    if (through.compare(0, before.size(), before) != 0 || full.compare(0, through.size(), through) != 0)
      throw InputError(w + ": message " + std::to_string(i),
                       "the chat template's text of the messages before this assistant turn (with the generation "
                       "prompt) is not a prefix of its text of the conversation, so the turn cannot be located "
                       "for the loss");
    // as Alpaca's prompt_len: the turn's tokens are those past encode(before), up to encode(through)
    const size_t from = encode_chat_text(before, tok, f).size();
    if (from >= keep) {  // this turn and the later ones are cut off: not tokenized again
      cut = true;
      break;
    }
    const size_t to = encode_chat_text(through, tok, f).size();
    for (size_t k = from; k < std::min(to, out.ids.size()); ++k) out.loss[k] = 1;
  }
  if (!cut && std::find(out.loss.begin(), out.loss.end(), 1) == out.loss.end())
    throw InputError(w, "the chat template writes no token for the assistant turns: nothing to train on (does it "
                        "leave the assistant's messages out?)");
  return out;
}

LmRowSplit load_chat_split(const std::string& path, const std::string& where, const std::string& eval_path,
                           const std::string& eval_where, const tok::Tokenizer& tok, const ChatFormat& f,
                           const InstructionOptions& o) {
  const std::string w = where + ": " + path;
  std::vector<ChatRecord> train = read_chat_records(path, where), eval;
  std::string eval_file = w, eval_how = "held out (every 10th) from " + path;
  if (!eval_path.empty()) {
    eval = read_chat_records(eval_path, eval_where);
    eval_file = eval_where + ": " + eval_path;
    eval_how = "from " + eval_path;
  } else {
    hold_out_every_10th(train, eval, w);
  }
  auto rows = [&](const std::vector<ChatRecord>& recs, const std::string& file, const std::string& from) {
    int64_t cut = 0;
    LmRows r = masked_rows(
        (int64_t)recs.size(),
        [&](int64_t i) { return render_chat(recs[(size_t)i], tok, f, file + ": " + recs[(size_t)i].at, (size_t)o.T + 1); },
        [&](int64_t i) { return recs[(size_t)i].at; }, tok, o, file, "chat", &cut);
    r.description = (o.pack ? std::to_string(r.rows) + " packed rows of " : std::to_string(r.rows) + " ") +
                    "chat records " + from + " (T " + std::to_string(o.T) + ", " + std::to_string(cut) +
                    " truncated to T + 1 tokens)";
    return r;
  };
  LmRowSplit s;
  s.train = rows(train, w, "from " + path);
  s.eval = rows(eval, eval_file, eval_how);
  return s;
}

}  // namespace zf
