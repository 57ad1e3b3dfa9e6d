#include "models/tokenizer/split_patterns.hpp"

#include "models/tokenizer/unicode.hpp"

namespace zf::tok {

const char* const kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::optional<SplitRegex> known_split_regex(const std::string& pattern) {
  if (pattern == kGpt2Regex) return SplitRegex::Gpt2;
  if (pattern == kLlama3Regex) return SplitRegex::Llama3;
  if (pattern == kQwen2Regex) return SplitRegex::Qwen2;
  return std::nullopt;
}

namespace {

// A cursor over the code points of valid UTF-8.
struct Text {
  std::string_view s;
  bool end(size_t i) const { return i >= s.size(); }
  char32_t at(size_t i) const {
    size_t n;
    return decode_utf8(s, i, n);
  }
  size_t next(size_t i) const {
    size_t n;
    decode_utf8(s, i, n);
    return i + n;
  }
};

bool is_other(char32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }  // [^\s\p{L}\p{N}]
bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }

// The end of the longest run of code points satisfying `pred` from i (i itself when none).
template <class P>
size_t run(const Text& t, size_t i, P pred) {
  while (!t.end(i) && pred(t.at(i))) i = t.next(i);
  return i;
}

// 's|'t|'re|'ve|'m|'ll|'d, case-insensitive as (?i:...) is: Oniguruma folds U+017F (long s) to s.
size_t contraction(const Text& t, size_t i, bool fold) {
  if (t.at(i) != '\'') return 0;
  const size_t j = i + 1;
  auto lower = [&](size_t k) -> char32_t {
    if (t.end(k)) return 0;
    const char32_t c = t.at(k);
    if (!fold) return c;
    if (c == 0x17F) return 's';
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  };
  const char32_t a = lower(j);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return t.next(j);
  if (a == 0) return 0;
  const size_t k = t.next(j);
  const char32_t b = lower(k);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return t.next(k);
  return 0;
}

// \s+(?!\S) then \s+: a whitespace run, less its last character when a non-space follows it
// (and the run is longer than one character).
size_t whitespace(const Text& t, size_t i) {
  const size_t e = run(t, i, is_space);
  if (e == i) return 0;
  if (t.end(e)) return e;
  const size_t last = prev_utf8(t.s, e);
  return last > i ? last : e;
}

size_t gpt2(const Text& t, size_t i) {
  if (size_t e = contraction(t, i, false)) return e;
  const size_t j = t.at(i) == ' ' ? t.next(i) : i;  // " ?"
  if (!t.end(j)) {
    const char32_t c = t.at(j);
    if (is_letter(c)) return run(t, j, is_letter);
    if (is_number(c)) return run(t, j, is_number);
    if (is_other(c)) return run(t, j, is_other);
  }
  if (size_t e = whitespace(t, i)) return e;
  return t.next(i);  // not reached: every character is a letter, a number, a space or another
}

size_t llama3(const Text& t, size_t i, size_t max_digits) {
  if (size_t e = contraction(t, i, true)) return e;
  const char32_t c = t.at(i);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!is_newline(c) && !is_letter(c) && !is_number(c)) {
    const size_t j = t.next(i);
    if (!t.end(j) && is_letter(t.at(j))) return run(t, j, is_letter);
  }
  if (is_letter(c)) return run(t, i, is_letter);
  if (is_number(c)) {  // \p{N}{1,max_digits}
    size_t e = i;
    for (size_t n = 0; n < max_digits && !t.end(e) && is_number(t.at(e)); ++n) e = t.next(e);
    return e;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  const size_t j = c == ' ' ? t.next(i) : i;
  if (!t.end(j) && is_other(t.at(j))) return run(t, run(t, j, is_other), is_newline);
  // \s*[\r\n]+: the whitespace run up to and including its last \r or \n
  const size_t e = run(t, i, is_space);
  size_t last_nl = std::string_view::npos;
  for (size_t k = i; k < e; k = t.next(k))
    if (is_newline(t.at(k))) last_nl = k;
  if (last_nl != std::string_view::npos) return last_nl + 1;
  if (size_t w = whitespace(t, i)) return w;
  return t.next(i);  // not reached
}

}  // namespace

size_t match_split_regex(SplitRegex re, std::string_view s, size_t pos) {
  const Text t{s};
  switch (re) {
    case SplitRegex::Gpt2: return gpt2(t, pos);
    case SplitRegex::Llama3: return llama3(t, pos, 3);
    case SplitRegex::Qwen2: return llama3(t, pos, 1);
  }
  return t.next(pos);
}

}  // namespace zf::tok
