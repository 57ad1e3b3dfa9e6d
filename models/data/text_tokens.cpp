// Text tokenized with a Hugging Face model's tokenizer (models/data/text_tokens.hpp): the UTF-8 check,
// the 90/10 cut at a character boundary, BOS + encode(part) + EOS per part, the ids at 2 or 4
// bytes, the vocabulary and length checks.
#include "models/data/text_tokens.hpp"

#include <chrono>
#include <cstdio>

#include "runtime/error.hpp"
#include "runtime/input_file.hpp"

namespace zf {
namespace {

std::string read_text(const std::string& path, const std::string& w) {
  const std::vector<uint8_t> b = read_input_file(path, w);  // regular files only: a FIFO must not block
  if (b.empty()) throw InputError(w, "empty file (expected UTF-8 text)");
  std::string s(b.begin(), b.end());
  tok::check_utf8(s, w);
  return s;
}

// floor(0.9 n), moved forward past UTF-8 continuation bytes so that both parts are whole text.
size_t cut_at(const std::string& s) {
  size_t cut = (size_t)((double)s.size() * 0.9);
  while (cut < s.size() && ((unsigned char)s[cut] & 0xC0) == 0x80) ++cut;
  return cut;
}

}  // namespace

TokenFile tokenize_document(std::string_view text, const tok::Tokenizer& tok, const TextTokenOptions& o,
                            const std::string& where) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto last = t0;
  const bool show = o.progress && text.size() >= (8u << 20);  // as zenflow-run tokenize: files of 8 MB and more
  auto progress = [&](size_t n) {
    if (!show || clock::now() - last < std::chrono::seconds(2)) return;
    last = clock::now();
    char b[120];
    std::snprintf(b, sizeof b, "tokenize: %.1f M tokens so far (%.0f s)", (double)n / 1e6,
                  std::chrono::duration<double>(last - t0).count());
    o.progress(b);
  };
  tok::check_utf8(text, where);
  const std::vector<uint32_t> ids = tok::encode_with_specials(tok, text, o.bos, o.eos, progress);
  TokenFile t;
  for (size_t i = 0; i < ids.size(); ++i)
    if (o.vocab > 0 && ids[i] >= (uint64_t)o.vocab)  // the tokenizer's ids, not the text, are wrong
      throw InputError(o.vocab_where.empty() ? where : o.vocab_where,
                       std::to_string(o.vocab) + ", but the tokenizer (" + tok.describe() + ") gives id " + std::to_string(ids[i]) + " for " +
                           where + " (token " + std::to_string(i) + "): every id must be below vocab_size "
                           "(config.json and the tokenizer of different models?)");
  if (o.context > 0 && (int64_t)ids.size() < o.context + 1)
    throw InputError(where, std::to_string(ids.size()) + " tokens: fewer than model.context + 1 = " +
                                std::to_string(o.context + 1) + " (one window and its targets)");
  t.header_bytes = 0;
  if (tok.vocab_size() <= 65536) {
    t.width = 2;
    t.u16.assign(ids.begin(), ids.end());
    t.format = "tokenized uint16";
  } else {
    t.width = 4;
    t.u32 = ids;
    t.format = "tokenized uint32";
  }
  return t;
}

TokenSplit load_text_token_split(const std::string& path, const std::string& where, const std::string& eval_path,
                                 const std::string& eval_where, const tok::Tokenizer& tok,
                                 const TextTokenOptions& o) {
  const std::string w = where + ": " + path;
  const std::string text = read_text(path, w);
  TokenSplit s;
  if (!eval_path.empty()) {
    const std::string ew = eval_where + ": " + eval_path;
    s.train = tokenize_document(text, tok, o, w);
    s.val = tokenize_document(read_text(eval_path, ew), tok, o, ew);
    s.description = path + " (" + std::to_string(s.train.size()) + " ids), eval " + eval_path + " (" +
                    std::to_string(s.val.size()) + " ids), tokenized by " + tok.describe();
    return s;
  }
  const size_t cut = cut_at(text);
  s.train = tokenize_document(std::string_view(text).substr(0, cut), tok, o, w + " (the first 90%)");
  s.val = tokenize_document(std::string_view(text).substr(cut), tok, o, w + " (the last 10%, evaluation)");
  s.description = path + ", " + std::to_string(s.train.size()) + " training ids (the first " + std::to_string(cut) +
                  " bytes), " + std::to_string(s.val.size()) + " evaluation ids (the last 10%), tokenized by " +
                  tok.describe();
  return s;
}

TokenSplit tokenize_text_split(const TextSplit& s, const std::string& where, const tok::Tokenizer& tok,
                               const TextTokenOptions& o) {
  auto view = [](const std::vector<uint8_t>& b) { return std::string_view(reinterpret_cast<const char*>(b.data()), b.size()); };
  TokenSplit t;
  t.train = tokenize_document(view(s.train), tok, o, where + " (training part)");
  t.val = tokenize_document(view(s.val), tok, o, where + " (evaluation part)");
  t.description = s.description + "; tokenized by " + tok.describe() + ": " + std::to_string(t.train.size()) +
                  " training ids, " + std::to_string(t.val.size()) + " evaluation ids";
  return t;
}

}  // namespace zf
