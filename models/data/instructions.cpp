// Alpaca-style instruction records to masked token rows (models/data/instructions.hpp): the file read as
// a JSON array or JSONL, each record's fields checked, the prompt rendered in Alpaca's template,
// BOS + encode(prompt + output) + EOS with the prompt's token count masked (Alpaca's preprocess()),
// rows cut to T + 1 tokens, the held-out records.
#include "models/data/instructions.hpp"

#include <chrono>
#include <cstdio>

#include "runtime/error.hpp"
#include "runtime/input_file.hpp"
#include "runtime/json_input.hpp"

namespace zf {
namespace {

using json = nlohmann::json;

const char* kExpected =
    "expected Alpaca-style records: a JSON array of objects, or JSONL (one object a line), each with "
    "\"instruction\" and \"output\" (non-empty strings) and optionally \"input\" (a string)";

// The record's fields; `w` is "WHERE: PATH: record N (line L)".
InstructionRecord record_of(const json& v, const std::string& w, const std::string& at) {
  if (!v.is_object()) throw InputError(w, "expected an object, got " + json_type_name(v) + " (" + kExpected + ")");
  InstructionRecord r;
  r.at = at;
  auto field = [&](const char* key, bool required) -> std::string {
    const auto it = v.find(key);
    if (it == v.end()) {
      if (required) throw InputError(w + ": " + key, "missing (" + std::string(kExpected) + ")");
      return "";
    }
    if (!it->is_string()) throw InputError(w + ": " + key, "expected a string, got " + json_type_name(*it));
    std::string s = it->get<std::string>();
    if (required && s.empty()) throw InputError(w + ": " + key, "empty string (expected some text)");
    return s;
  };
  r.instruction = field("instruction", true);
  r.input = field("input", false);
  r.output = field("output", true);
  return r;
}

}  // namespace

void throw_too_few_records(const std::string& w, size_t n) {
  throw InputError(w, std::to_string(n) +
                          " records: every 10th record is held out for evaluation, so at least 10 are needed "
                          "(or give data.eval_path)");
}

void read_json_records(const std::string& path, const std::string& where, const std::string& expected,
                       const JsonRecordFn& each) {
  const std::string w = where + ": " + path;
  const std::vector<uint8_t> b = read_input_file(path, w);
  const std::string text(b.begin(), b.end());
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) throw InputError(w, "no records: the file is empty (" + expected + ")");
  size_t n = 0;
  if (text[first] == '[') {
    const json j = parse_json_input(text, w);
    if (!j.is_array()) throw InputError(w, "expected a JSON array of records (the file starts with '[')");
    for (size_t i = 0; i < j.size(); ++i, ++n) {
      const std::string at = "record " + std::to_string(i);
      each(j[i], w + ": " + at, at);
    }
  } else {  // JSONL
    size_t pos = 0;
    int64_t line = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      ++line;
      std::string s = text.substr(pos, end - pos);
      pos = end + 1;
      if (!s.empty() && s.back() == '\r') s.pop_back();
      if (s.find_first_not_of(" \t\r") == std::string::npos) continue;  // a blank line
      const std::string at = "record " + std::to_string(n) + " (line " + std::to_string(line) + ")";
      json j;
      try {
        j = parse_json_input(s, w + ": " + at);
      } catch (const InputError& e) {
        throw InputError(e.where(), e.message() +
                                        " (JSONL: each line one whole JSON object; a file of one JSON value "
                                        "holds an array of records and starts with '[')");
      }
      each(j, w + ": " + at, at);
      ++n;
    }
  }
  if (n == 0) throw InputError(w, "no records (" + expected + ")");
}

std::vector<InstructionRecord> read_instruction_records(const std::string& path, const std::string& where) {
  std::vector<InstructionRecord> r;
  read_json_records(path, where, kExpected, [&](const json& j, const std::string& w, const std::string& at) {
    r.push_back(record_of(j, w, at));
  });
  return r;
}

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  // as Python's format_map: each placeholder of the template replaced once, the values not rescanned
  const std::string t = input.empty() ? kAlpacaPromptNoInput : kAlpacaPromptInput;
  const size_t i = t.find("{instruction}"), after = i + std::string("{instruction}").size();
  std::string rest = t.substr(after);
  if (!input.empty()) {
    const size_t k = rest.find("{input}");
    rest = rest.substr(0, k) + input + rest.substr(k + std::string("{input}").size());
  }
  return t.substr(0, i) + instruction + rest;
}

RenderedRecord render_record(const InstructionRecord& r, const tok::Tokenizer& tok, std::optional<uint32_t> bos,
                             uint32_t eos) {
  const std::string prompt = alpaca_prompt(r.instruction, r.input);
  RenderedRecord out;
  if (bos) out.ids.push_back(*bos);
  const std::vector<uint32_t> p = tok.encode(prompt);
  out.prompt_len = (int64_t)out.ids.size() + (int64_t)p.size();
  const std::vector<uint32_t> all = tok.encode(prompt + r.output);
  out.ids.insert(out.ids.end(), all.begin(), all.end());
  out.ids.push_back(eos);
  return out;
}

LmRows instruction_rows(const std::vector<InstructionRecord>& records, const tok::Tokenizer& tok,
                        const InstructionOptions& o, const std::string& file, int64_t* truncated) {
  if (!o.eos)
    throw InputError(o.specials_where.empty() ? file : o.specials_where,
                     "no EOS token: instruction data appends EOS after each response (expected eos_token_id "
                     "in the model's config.json)");
  return masked_rows(
      (int64_t)records.size(), [&](int64_t i) { return render_record(records[(size_t)i], tok, o.bos, *o.eos); },
      [&](int64_t i) { return records[(size_t)i].at; }, tok, o, file, "instructions", truncated);
}

LmRows masked_rows(int64_t n, const std::function<RenderedRecord(int64_t)>& render,
                   const std::function<std::string(int64_t)>& at, const tok::Tokenizer& tok, const InstructionOptions& o,
                   const std::string& file, const std::string& kind, int64_t* truncated) {
  if (o.T < 1) throw InputError(file, "model.context must be at least 1 for " + kind + " records");
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto last = t0;
  const int64_t T = o.T;
  LmRows rows;
  rows.T = T;
  rows.rows = n;
  // inputs past a record's end: EOS where there is one (its targets -1), else 0
  rows.tokens.assign((size_t)(n * T), o.eos ? (int32_t)*o.eos : 0);
  rows.targets.assign((size_t)(n * T), -1);
  *truncated = 0;
  int64_t row = 0, used = 0;  // o.pack: the row being filled and its tokens (of T + 1)
  for (int64_t i = 0; i < n; ++i) {
    RenderedRecord rr = render(i);
    const std::string w = file + ": " + at(i);
    for (size_t k = 0; k < rr.ids.size(); ++k)
      if (o.vocab > 0 && rr.ids[k] >= (uint64_t)o.vocab)  // the tokenizer's ids, not the record, are wrong
        throw InputError(o.vocab_where.empty() ? w : o.vocab_where,
                         std::to_string(o.vocab) + ", but the tokenizer (" + tok.describe() + ") gives id " + std::to_string(rr.ids[k]) +
                             " for " + w + " (token " + std::to_string(k) + "): every id must be below vocab_size "
                             "(config.json and the tokenizer of different models?)");
    if ((int64_t)rr.ids.size() > T + 1) {
      rr.ids.resize((size_t)(T + 1));
      if (!rr.loss.empty()) rr.loss.resize((size_t)(T + 1));
      ++*truncated;
    }
    const int64_t L = (int64_t)rr.ids.size();
    bool any = false;
    for (int64_t k = 1; k < L && !any; ++k) any = rr.has_loss((size_t)k);
    if (!any)
      throw InputError(w + (kind == "chat" ? ": assistant" : ": output"),
                       "no response token left: " +
                           (rr.loss.empty() ? "the prompt is " + std::to_string(rr.prompt_len) + " tokens"
                                            : std::string("the record's tokens before its first response")) +
                           " and a row holds model.context + 1 = " + std::to_string(T + 1) +
                           " (raise model.context, or shorten or remove the record)");
    if (o.pack && used > 0 && used + L > T + 1) ++row, used = 0;  // the record whole in the next row
    const int64_t dst = o.pack ? row : i, pos = o.pack ? used : 0;
    int32_t* tk = rows.tokens.data() + dst * T + pos;
    int32_t* tg = rows.targets.data() + dst * T + pos;
    // inputs up to the row's T (the row's last target, position T, is only a target)
    for (int64_t t = 0; t < std::min(L, T - pos); ++t) tk[t] = (int32_t)rr.ids[(size_t)t];
    for (int64_t t = 0; t + 1 < L; ++t)
      if (rr.has_loss((size_t)(t + 1))) tg[t] = (int32_t)rr.ids[(size_t)(t + 1)];
    // packed: the previous record's last position (its EOS) predicts nothing of this record
    used += L;
    if (o.progress && clock::now() - last >= std::chrono::seconds(2)) {
      last = clock::now();
      char b[160];
      std::snprintf(b, sizeof b, "%s: %lld of %lld records tokenized (%.0f s)", kind.c_str(), (long long)(i + 1),
                    (long long)n, std::chrono::duration<double>(last - t0).count());
      o.progress(b);
    }
  }
  if (o.pack && n > 0) {  // rows 0 .. row
    rows.rows = row + 1;
    rows.tokens.resize((size_t)(rows.rows * T));
    rows.targets.resize((size_t)(rows.rows * T));
  }
  return rows;
}

LmRowSplit load_instruction_split(const std::string& path, const std::string& where, const std::string& eval_path,
                                  const std::string& eval_where, const tok::Tokenizer& tok,
                                  const InstructionOptions& o) {
  const std::string w = where + ": " + path;
  std::vector<InstructionRecord> train = read_instruction_records(path, where), eval;
  std::string eval_file, eval_how;
  if (!eval_path.empty()) {
    eval = read_instruction_records(eval_path, eval_where);
    eval_file = eval_where + ": " + eval_path;
    eval_how = "from " + eval_path;
  } else {
    hold_out_every_10th(train, eval, w);
    eval_file = w;
    eval_how = "held out (every 10th) from " + path;
  }
  LmRowSplit s;
  int64_t cut_train = 0, cut_eval = 0;
  s.train = instruction_rows(train, tok, o, w, &cut_train);
  s.eval = instruction_rows(eval, tok, o, eval_file, &cut_eval);
  auto describe = [&](const LmRows& r, int64_t cut, const std::string& from) {
    return (o.pack ? std::to_string(r.rows) + " packed rows of " : std::to_string(r.rows) + " ") + "Alpaca records " +
           from + " (T " + std::to_string(o.T) + ", " + std::to_string(cut) + " truncated to T + 1 tokens)";
  };
  s.train.description = describe(s.train, cut_train, "from " + path);  // "562 Alpaca records from F (T 256, ...)"
  s.eval.description = describe(s.eval, cut_eval, eval_how);
  return s;
}

}  // namespace zf
