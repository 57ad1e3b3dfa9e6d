#include "models/tokenizer/hf_pipeline.hpp"

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "models/tokenizer/unicode.hpp"
#include "runtime/error.hpp"
#include "runtime/json_input.hpp"

namespace zf::tok {

const std::vector<std::string>& byte_level_chars() {
  static const std::vector<std::string> chars = [] {
    std::vector<std::string> c(256);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(c[b], printable ? char32_t(b) : char32_t(256 + n++));
    }
    return c;
  }();
  return chars;
}

namespace {

[[noreturn]] void unsupported(const JsonField& type, const std::string& what, const std::string& supported) {
  type.fail(what + " type '" + excerpt(type.str(), 40) + "' is not supported (" + supported + ")");
}

std::string pattern_string(const JsonField& f) {  // {"String": s}; {"Regex": r} is refused
  if (f.has("Regex")) f.at("Regex").fail("a regex pattern is not supported here (only {\"String\": ...})");
  std::string s = f.at("String").str();
  if (s.empty()) f.at("String").fail("expected a non-empty string");
  return s;
}

// s with every non-overlapping occurrence of `pat` (not empty), leftmost first, replaced by `with`.
std::string replace_all(std::string_view s, const std::string& pat, const std::string& with) {
  std::string out;
  size_t i = 0;
  for (size_t k; (k = s.find(pat, i)) != std::string_view::npos; i = k + pat.size()) {
    out.append(s.substr(i, k - i));
    out += with;
  }
  out.append(s.substr(i));
  return out;
}

std::string one_char(const JsonField& f) {
  const std::string s = f.str();
  size_t n = 0;
  if (s.empty() || invalid_utf8_at(s) != std::string::npos || (decode_utf8(s, 0, n), n != s.size()))
    f.fail("expected exactly one character");
  return s;
}

void parse_normalizer_into(const JsonField& f, Normalizer& out, int depth) {
  if (depth > 16) f.fail("normalizers nested deeper than 16");
  const JsonField type = f.at("type");
  const std::string t = type.str();
  using K = NormalizerStep::Kind;
  if (t == "Sequence") {
    const JsonField list = f.at("normalizers");
    list.array();
    for (size_t i = 0; i < list.size(); ++i) parse_normalizer_into(list[i], out, depth + 1);
  } else if (t == "Prepend") {
    out.push_back({K::Prepend, "", f.at("prepend").str(), f.where()});
  } else if (t == "Replace") {
    out.push_back({K::Replace, pattern_string(f.at("pattern")), f.at("content").str(), f.where()});
  } else if (t == "NFC" || t == "NFD" || t == "NFKC" || t == "NFKD") {
    out.push_back({t == "NFC" ? K::NFC : t == "NFD" ? K::NFD : t == "NFKC" ? K::NFKC : K::NFKD, "", "", f.where()});
  } else {
    unsupported(type, "normalizer", "Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD");
  }
}

// Metaspace's prepend_scheme, with the older add_prefix_space as Hugging Face reads it.
PreTokenizerStep::Prepend prepend_scheme(const JsonField& f) {
  using P = PreTokenizerStep::Prepend;
  P p = P::Always;
  if (f.has("prepend_scheme")) {
    const std::string s = f.at("prepend_scheme").str();
    if (s == "always") p = P::Always;
    else if (s == "first") p = P::First;
    else if (s == "never") p = P::Never;
    else f.at("prepend_scheme").fail("expected \"always\", \"first\" or \"never\"");
  }
  if (f.has("add_prefix_space") && !f.at("add_prefix_space").boolean()) {
    if (p != P::Never) f.at("add_prefix_space").fail("false does not match prepend_scheme (expected \"never\")");
  }
  return p;
}

SplitBehavior behavior(const JsonField& f) {
  const std::string s = f.str();
  if (s == "Removed") return SplitBehavior::Removed;
  if (s == "Isolated") return SplitBehavior::Isolated;
  if (s == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (s == "Contiguous") return SplitBehavior::Contiguous;
  f.fail("expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

void parse_pre_tokenizer_into(const JsonField& f, PreTokenizer& out, int depth) {
  if (depth > 16) f.fail("pre-tokenizers nested deeper than 16");
  const JsonField type = f.at("type");
  const std::string t = type.str();
  PreTokenizerStep s{};
  if (t == "Sequence") {
    const JsonField list = f.at("pretokenizers");
    list.array();
    for (size_t i = 0; i < list.size(); ++i) parse_pre_tokenizer_into(list[i], out, depth + 1);
    return;
  } else if (t == "Split") {
    s.kind = PreTokenizerStep::Kind::Split;
    const JsonField pat = f.at("pattern");
    if (pat.has("Regex")) {
      s.regex = known_split_regex(pat.at("Regex").str());
      if (!s.regex)
        pat.at("Regex").fail("not one of the regexes zenflow implements: GPT-2's, Llama 3's or Qwen2's (docs/tokenizers.md)");
    } else {
      s.literal = pattern_string(pat);
    }
    s.behavior = behavior(f.at("behavior"));
    s.invert = f.boolean_or("invert", false);
  } else if (t == "ByteLevel") {
    s.kind = PreTokenizerStep::Kind::ByteLevel;
    s.add_prefix_space = f.boolean_or("add_prefix_space", true);
    s.use_regex = f.boolean_or("use_regex", true);
  } else if (t == "Metaspace") {
    s.kind = PreTokenizerStep::Kind::Metaspace;
    s.replacement = one_char(f.at("replacement"));
    s.prepend = prepend_scheme(f);
    s.split = f.boolean_or("split", true);
  } else {
    unsupported(type, "pre-tokenizer", "Sequence, Split, ByteLevel, Metaspace");
  }
  out.push_back(std::move(s));
}

void parse_decoder_into(const JsonField& f, Decoder& out, int depth) {
  if (depth > 16) f.fail("decoders nested deeper than 16");
  const JsonField type = f.at("type");
  const std::string t = type.str();
  using K = DecoderStep::Kind;
  DecoderStep d{};
  if (t == "Sequence") {
    const JsonField list = f.at("decoders");
    list.array();
    for (size_t i = 0; i < list.size(); ++i) parse_decoder_into(list[i], out, depth + 1);
    return;
  } else if (t == "ByteLevel") {
    d.kind = K::ByteLevel;
  } else if (t == "Metaspace") {
    d.kind = K::Metaspace;
    d.content = one_char(f.at("replacement"));
    d.prepend_never = prepend_scheme(f) == PreTokenizerStep::Prepend::Never;
  } else if (t == "Replace") {
    d.kind = K::Replace;
    d.pattern = pattern_string(f.at("pattern"));
    d.content = f.at("content").str();
  } else if (t == "ByteFallback") {
    d.kind = K::ByteFallback;
  } else if (t == "Fuse") {
    d.kind = K::Fuse;
  } else if (t == "Strip") {
    d.kind = K::Strip;
    d.content = one_char(f.at("content"));
    d.start = f.at("start").u32();
    d.stop = f.at("stop").u32();
  } else {
    unsupported(type, "decoder", "Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip");
  }
  out.push_back(std::move(d));
}

// Real tokenizers have a handful of steps; many more are a malformed file (and would nest the
// pre-tokenizer's recursion that deep).
constexpr size_t kMaxSteps = 64;
template <class T>
T capped(const JsonField& f, T steps) {
  if (steps.size() > kMaxSteps) f.fail(std::to_string(steps.size()) + " steps, expected at most " + std::to_string(kMaxSteps));
  return steps;
}

}  // namespace

Normalizer parse_normalizer(const JsonField& f) {
  Normalizer n;
  if (!f.is_null()) parse_normalizer_into(f, n, 0);
  return capped(f, std::move(n));
}
PreTokenizer parse_pre_tokenizer(const JsonField& f) {
  PreTokenizer p;
  if (!f.is_null()) parse_pre_tokenizer_into(f, p, 0);
  return capped(f, std::move(p));
}
Decoder parse_decoder(const JsonField& f) {
  Decoder d;
  if (!f.is_null()) parse_decoder_into(f, d, 0);
  return capped(f, std::move(d));
}

std::string normalize(const Normalizer& n, std::string s) {
  using K = NormalizerStep::Kind;
  // the growth bound: each step's result size is known (Prepend, Replace) or bounded (the Unicode
  // forms, by ICU's longest decomposition) before it is built
  const size_t input = s.size(), limit = 64 * input + (size_t(1) << 20);
  auto check = [&](const NormalizerStep& st, size_t size) {
    if (size > limit)
      throw InputError(st.where, "would make a text of " + std::to_string(input) + " bytes " + std::to_string(size) +
                                     " bytes long (expected at most 64 times the input plus 1 MiB: a normalizer "
                                     "that does not blow the text up)");
  };
  for (const NormalizerStep& st : n) {
    switch (st.kind) {
      case K::Prepend:
        check(st, s.size() + st.content.size());
        if (!s.empty()) s = st.content + s;
        break;
      case K::Replace: {
        size_t count = 0;
        for (size_t k = s.find(st.pattern); k != std::string::npos; k = s.find(st.pattern, k + st.pattern.size()))
          ++count;
        if (st.content.size() > st.pattern.size())
          check(st, s.size() + count * (st.content.size() - st.pattern.size()));
        s = replace_all(s, st.pattern, st.content);
        break;
      }
      case K::NFC: s = normalize_unicode(s, NormalForm::NFC); break;
      case K::NFD: s = normalize_unicode(s, NormalForm::NFD); break;
      case K::NFKC: s = normalize_unicode(s, NormalForm::NFKC); break;
      case K::NFKD: s = normalize_unicode(s, NormalForm::NFKD); break;
    }
    check(st, s.size());
  }
  return s;
}

namespace {

struct Segment {
  size_t start, end;
  bool match;  // after apply_behavior: removed
};

// Pattern::find_matches: the matches of `re` (or of `literal`) and the text between them, in order.
std::vector<Segment> find_segments(std::optional<SplitRegex> re, const std::string& literal, std::string_view s) {
  std::vector<Segment> seg;
  size_t prev = 0;
  auto add = [&](size_t a, size_t b) {
    if (prev != a) seg.push_back({prev, a, false});
    seg.push_back({a, b, true});
    prev = b;
  };
  if (re) {
    for (size_t i = 0; i < s.size(); i = prev) add(i, match_split_regex(*re, s, i));
  } else {
    for (size_t k; (k = s.find(literal, prev)) != std::string_view::npos;) add(k, k + literal.size());
  }
  if (prev != s.size()) seg.push_back({prev, s.size(), false});
  return seg;
}

// NormalizedString::split: the segments combined as the behavior says.
std::vector<Segment> apply_behavior(const std::vector<Segment>& m, SplitBehavior b) {
  std::vector<Segment> acc;
  bool prev = false;
  switch (b) {
    case SplitBehavior::Isolated:
      for (auto& x : m) acc.push_back({x.start, x.end, false});
      break;
    case SplitBehavior::Removed:
      for (auto& x : m) acc.push_back({x.start, x.end, x.match});
      break;
    case SplitBehavior::Contiguous:
      for (auto& x : m) {
        if (x.match == prev && !acc.empty()) acc.back().end = x.end;
        else acc.push_back({x.start, x.end, false});
        prev = x.match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (auto& x : m) {
        if (x.match && !prev && !acc.empty()) acc.back().end = x.end;
        else acc.push_back({x.start, x.end, false});
        prev = x.match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        if (it->match && !prev && !acc.empty()) acc.back().start = it->start;
        else acc.push_back({it->start, it->end, false});
        prev = it->match;
      }
      std::reverse(acc.begin(), acc.end());
      break;
  }
  return acc;
}

void run_steps(const PreTokenizer& p, size_t k, std::string_view s, bool at_start, const PieceSink& sink);

void run_parts(const PreTokenizer& p, size_t k, std::string_view s, bool at_start, const std::vector<Segment>& parts,
               const PieceSink& sink) {
  for (const Segment& x : parts)
    if (!x.match) run_steps(p, k, s.substr(x.start, x.end - x.start), at_start && x.start == 0, sink);
}

void byte_level(const PreTokenizer& p, size_t k, std::string_view s, bool at_start, const PieceSink& sink) {
  const PreTokenizerStep& st = p[k];
  std::string t;
  if (st.add_prefix_space && s[0] != ' ') t = " ";
  t += s;
  const auto& chars = byte_level_chars();
  auto mapped = [&](size_t a, size_t b) {
    std::string m;
    for (size_t i = a; i < b; ++i) m += chars[static_cast<unsigned char>(t[i])];
    run_steps(p, k + 1, m, at_start && a == 0, sink);
  };
  if (!st.use_regex) return mapped(0, t.size());
  for (size_t i = 0; i < t.size();) {
    const size_t e = match_split_regex(SplitRegex::Gpt2, t, i);
    mapped(i, e);
    i = e;
  }
}

void metaspace(const PreTokenizer& p, size_t k, std::string_view s, bool at_start, const PieceSink& sink) {
  const PreTokenizerStep& st = p[k];
  std::string t = replace_all(s, " ", st.replacement);
  using P = PreTokenizerStep::Prepend;
  const bool prepend = st.prepend == P::Always || (st.prepend == P::First && at_start);
  if (prepend && t.compare(0, st.replacement.size(), st.replacement) != 0) t = st.replacement + t;
  if (!st.split) return run_steps(p, k + 1, t, at_start, sink);
  run_parts(p, k + 1, t, at_start,
            apply_behavior(find_segments(std::nullopt, st.replacement, t), SplitBehavior::MergedWithNext), sink);
}

void run_steps(const PreTokenizer& p, size_t k, std::string_view s, bool at_start, const PieceSink& sink) {
  if (s.empty()) return;
  if (k == p.size()) return sink(s, at_start);
  const PreTokenizerStep& st = p[k];
  switch (st.kind) {
    case PreTokenizerStep::Kind::Split: {
      std::vector<Segment> seg = find_segments(st.regex, st.literal, s);
      if (st.invert)
        for (auto& x : seg) x.match = !x.match;
      return run_parts(p, k + 1, s, at_start, apply_behavior(seg, st.behavior), sink);
    }
    case PreTokenizerStep::Kind::ByteLevel: return byte_level(p, k, s, at_start, sink);
    case PreTokenizerStep::Kind::Metaspace: return metaspace(p, k, s, at_start, sink);
  }
}

// Decoders, each a step of decode_chain over the token strings.
std::vector<std::string> decode_byte_level(const std::vector<std::string>& tokens) {
  static const std::unordered_map<std::string, unsigned char> to_byte = [] {
    std::unordered_map<std::string, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[byte_level_chars()[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  std::string bytes;
  for (const std::string& t : tokens) {
    std::string mine;
    bool all = true;
    for (size_t i = 0, n; i < t.size() && all; i += n) {
      decode_utf8(t, i, n);
      auto it = to_byte.find(t.substr(i, n));
      if (it == to_byte.end()) all = false;
      else mine += static_cast<char>(it->second);
    }
    bytes += all ? mine : t;
  }
  return {utf8_lossy(bytes)};
}

std::vector<std::string> decode_byte_fallback(const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string pending;
  auto flush = [&] {
    if (pending.empty()) return;
    if (invalid_utf8_at(pending) == std::string::npos) out.push_back(pending);
    else
      for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
    pending.clear();
  };
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  for (const std::string& t : tokens) {
    // Rust's u8::from_str_radix(t[3..5], 16), which also takes a leading '+'
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && (hex(t[3]) || t[3] == '+') && hex(t[4])) {
      pending += static_cast<char>(std::stoi(t.substr(t[3] == '+' ? 4 : 3, t[3] == '+' ? 1 : 2), nullptr, 16));
    } else {
      flush();
      out.push_back(t);
    }
  }
  flush();
  return out;
}

std::string strip(const std::string& t, const DecoderStep& d) {
  std::vector<std::pair<size_t, size_t>> ch;  // (offset, length) of each character
  for (size_t i = 0, n; i < t.size(); i += n) {
    decode_utf8(t, i, n);
    ch.push_back({i, n});
  }
  auto is = [&](size_t k) { return t.compare(ch[k].first, ch[k].second, d.content) == 0; };
  size_t a = 0, b = ch.size();
  for (size_t i = 0; i < d.start && i < ch.size() && is(i); ++i) a = i + 1;
  for (size_t i = 0; i < d.stop && i < ch.size() && is(ch.size() - i - 1); ++i) b = ch.size() - i - 1;
  if (a >= b) return "";
  const size_t end = b == ch.size() ? t.size() : ch[b].first;
  return t.substr(ch[a].first, end - ch[a].first);
}

std::vector<std::string> decode_step(const DecoderStep& d, std::vector<std::string> tokens) {
  using K = DecoderStep::Kind;
  switch (d.kind) {
    case K::ByteLevel: return decode_byte_level(tokens);
    case K::ByteFallback: return decode_byte_fallback(tokens);
    case K::Fuse: {
      std::string all;
      for (auto& t : tokens) all += t;
      return {all};
    }
    case K::Replace:
      for (auto& t : tokens) t = replace_all(t, d.pattern, d.content);
      return tokens;
    case K::Strip:
      for (auto& t : tokens) t = strip(t, d);
      return tokens;
    case K::Metaspace:
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_all(tokens[i], d.content, i == 0 && !d.prepend_never ? "" : " ");
      return tokens;
  }
  return tokens;
}

}  // namespace

void pre_tokenize(const PreTokenizer& p, std::string_view s, bool at_start, const PieceSink& sink) {
  run_steps(p, 0, s, at_start, sink);
}

std::string decode_tokens(const std::optional<Decoder>& d, std::vector<std::string> tokens) {
  std::string out;
  if (!d) {
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const DecoderStep& st : *d) tokens = decode_step(st, std::move(tokens));
  for (auto& t : tokens) out += t;
  return out;
}

}  // namespace zf::tok
