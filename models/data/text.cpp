// KJV parsing (bible(1) output), the 66 books with testament, section and the held-out set,
// language-model splits of the KJV or of any UTF-8 file, and their input validation (models/data/text.hpp).
#include "models/data/text.hpp"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "runtime/error.hpp"
#include "runtime/input_file.hpp"

namespace zf {
namespace {

// Sections: 0 Law, 1 History, 2 Poetry, 3 Prophets, 4 Gospels and Acts, 5 Epistles, 6 Revelation.
// Held out (validation = true): Ruth, Ecclesiastes, Lamentations, Joel, Jonah; Philippians,
// James, 1 John (docs/gpt.md).
const std::vector<BibleBook> kBooks = {
    {"Ge", "Genesis", 0, 0, false},          {"Exo", "Exodus", 0, 0, false},
    {"Lev", "Leviticus", 0, 0, false},       {"Num", "Numbers", 0, 0, false},
    {"Deu", "Deuteronomy", 0, 0, false},     {"Josh", "Joshua", 0, 1, false},
    {"Jdgs", "Judges", 0, 1, false},         {"Ruth", "Ruth", 0, 1, true},
    {"1Sm", "1 Samuel", 0, 1, false},        {"2Sm", "2 Samuel", 0, 1, false},
    {"1Ki", "1 Kings", 0, 1, false},         {"2Ki", "2 Kings", 0, 1, false},
    {"1Chr", "1 Chronicles", 0, 1, false},   {"2Chr", "2 Chronicles", 0, 1, false},
    {"Ezra", "Ezra", 0, 1, false},           {"Neh", "Nehemiah", 0, 1, false},
    {"Est", "Esther", 0, 1, false},          {"Job", "Job", 0, 2, false},
    {"Psa", "Psalms", 0, 2, false},          {"Prv", "Proverbs", 0, 2, false},
    {"Eccl", "Ecclesiastes", 0, 2, true},    {"SSol", "Song of Solomon", 0, 2, false},
    {"Isa", "Isaiah", 0, 3, false},          {"Jer", "Jeremiah", 0, 3, false},
    {"Lam", "Lamentations", 0, 3, true},     {"Eze", "Ezekiel", 0, 3, false},
    {"Dan", "Daniel", 0, 3, false},          {"Hos", "Hosea", 0, 3, false},
    {"Joel", "Joel", 0, 3, true},            {"Amos", "Amos", 0, 3, false},
    {"Obad", "Obadiah", 0, 3, false},        {"Jonah", "Jonah", 0, 3, true},
    {"Mic", "Micah", 0, 3, false},           {"Nahum", "Nahum", 0, 3, false},
    {"Hab", "Habakkuk", 0, 3, false},        {"Zep", "Zephaniah", 0, 3, false},
    {"Hag", "Haggai", 0, 3, false},          {"Zec", "Zechariah", 0, 3, false},
    {"Mal", "Malachi", 0, 3, false},         {"Mat", "Matthew", 1, 4, false},
    {"Mark", "Mark", 1, 4, false},           {"Luke", "Luke", 1, 4, false},
    {"John", "John", 1, 4, false},           {"Acts", "Acts", 1, 4, false},
    {"Rom", "Romans", 1, 5, false},          {"1Cor", "1 Corinthians", 1, 5, false},
    {"2Cor", "2 Corinthians", 1, 5, false},  {"Gal", "Galatians", 1, 5, false},
    {"Eph", "Ephesians", 1, 5, false},       {"Phi", "Philippians", 1, 5, true},
    {"Col", "Colossians", 1, 5, false},      {"1Th", "1 Thessalonians", 1, 5, false},
    {"2Th", "2 Thessalonians", 1, 5, false}, {"1Tim", "1 Timothy", 1, 5, false},
    {"2Tim", "2 Timothy", 1, 5, false},      {"Titus", "Titus", 1, 5, false},
    {"Phmn", "Philemon", 1, 5, false},       {"Heb", "Hebrews", 1, 5, false},
    {"Jas", "James", 1, 5, true},            {"1Pet", "1 Peter", 1, 5, false},
    {"2Pet", "2 Peter", 1, 5, false},        {"1Jn", "1 John", 1, 5, true},
    {"2Jn", "2 John", 1, 5, false},          {"3Jn", "3 John", 1, 5, false},
    {"Jude", "Jude", 1, 5, false},           {"Rev", "Revelation", 1, 6, false},
};

std::vector<uint8_t> read_bytes(const std::string& path, const std::string& where) {
  const std::string w = where + ": " + path;
  std::vector<uint8_t> d = read_input_file(path, w);  // regular files only: a FIFO must not block
  if (d.empty()) throw InputError(w, "empty file");
  return d;
}

// Offset of the first byte of the first ill-formed UTF-8 sequence, or -1. Well-formed is Unicode's
// Table 3-7: no overlong forms (C0, C1; E0 80-9F; F0 80-8F), no surrogates (ED A0-BF, i.e.
// U+D800-DFFF), nothing above U+10FFFF (F4 90-BF; F5-FF), no truncated sequence.
int64_t first_invalid_utf8(const std::vector<uint8_t>& d) {
  size_t i = 0, n = d.size();
  while (i < n) {
    const uint8_t c = d[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    const size_t len = c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
    if (len == 0 || i + len > n) return (int64_t)i;
    // the second byte's range depends on the lead byte; the others are 80-BF
    const uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    const uint8_t hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (d[i + 1] < lo || d[i + 1] > hi) return (int64_t)i;
    for (size_t k = 2; k < len; ++k)
      if ((d[i + k] & 0xC0) != 0x80) return (int64_t)i;
    i += len;
  }
  return -1;
}

// Up to n bytes of d from offset i, as "0xED 0xA0 0x80".
std::string hex_bytes(const std::vector<uint8_t>& d, size_t i, size_t n) {
  std::string s;
  for (size_t k = i; k < d.size() && k < i + n; ++k) {
    char x[8];
    std::snprintf(x, sizeof x, "%s0x%02X", s.empty() ? "" : " ", d[k]);
    s += x;
  }
  return s;
}

}  // namespace

const std::vector<BibleBook>& bible_books() { return kBooks; }

const std::vector<std::string>& bible_sections() {
  static const std::vector<std::string> s = {"Law",   "History",  "Poetry",    "Prophets",
                                             "Gospels and Acts", "Epistles", "Revelation"};
  return s;
}

const std::vector<std::string>& bible_testaments() {
  static const std::vector<std::string> t = {"Old", "New"};
  return t;
}

int find_book(const std::string& s) {
  for (size_t i = 0; i < kBooks.size(); ++i)
    if (s == kBooks[i].abbrev || s == kBooks[i].name) return (int)i;
  return -1;
}

std::string verse_reference(const Verse& v) {
  return std::string(kBooks.at(v.book).name) + " " + std::to_string(v.chapter) + ":" + std::to_string(v.verse);
}

std::vector<Verse> load_kjv(const std::string& path, const std::string& where) {
  const std::vector<uint8_t> d = read_bytes(path, where);
  const std::string w = where + ": " + path;
  std::vector<Verse> out;
  out.reserve(31102);
  size_t pos = 0;
  int64_t line = 0;
  int last_book = -1;
  while (pos < d.size()) {
    size_t end = pos;
    while (end < d.size() && d[end] != '\n') ++end;
    ++line;
    std::string s(d.begin() + (int64_t)pos, d.begin() + (int64_t)end);
    pos = end + 1;
    if (!s.empty() && s.back() == '\r') s.pop_back();
    if (s.empty()) continue;
    auto bad = [&](const std::string& why) {
      throw InputError(w + ":" + std::to_string(line),
                       why + " (expected bible(1) output: \"Ge1:1 In the beginning ...\"; make it with "
                             "`bash tools/zf setup`)");
    };
    // book abbreviation: an optional digit then letters; then chapter ':' verse ' ' text
    size_t i = 0;
    if (i < s.size() && s[i] >= '1' && s[i] <= '3') ++i;
    while (i < s.size() && std::isalpha((unsigned char)s[i])) ++i;
    const std::string abbrev = s.substr(0, i);
    const int book = find_book(abbrev);
    if (abbrev.empty() || book < 0) bad("unknown book abbreviation '" + abbrev + "'");
    auto number = [&](char stop) {
      size_t j = i;
      int64_t v = 0;
      while (j < s.size() && std::isdigit((unsigned char)s[j]) && v < 100000) v = v * 10 + (s[j++] - '0');
      if (j == i || j >= s.size() || s[j] != stop) bad("malformed verse reference");
      i = j + 1;
      return (int32_t)v;
    };
    Verse v;
    v.book = book;
    v.chapter = number(':');
    v.verse = number(' ');
    v.text = s.substr(i);
    if (v.text.empty()) bad("empty verse text");
    if (book < last_book) bad("book '" + abbrev + "' out of canonical order");
    last_book = book;
    out.push_back(std::move(v));
  }
  if (out.empty()) throw InputError(w, "no verses");
  return out;
}

TextSplit kjv_lm_split(const std::vector<Verse>& verses) {
  TextSplit s;
  for (size_t i = 0; i < verses.size(); ++i) {
    const Verse& v = verses[i];
    const bool val = kBooks.at(v.book).validation;
    if (!val && kjv_held_out_verse(i)) continue;  // the classifier's held-out verses
    auto& dst = val ? s.val : s.train;
    dst.insert(dst.end(), v.text.begin(), v.text.end());
    dst.push_back('\n');
  }
  s.description = "KJV, " + std::to_string(s.train.size()) + " training bytes (every 10th verse left out), " +
                  std::to_string(s.val.size()) + " validation bytes (held-out books)";
  return s;
}

TextSplit load_text_split(const std::string& path, const std::string& where) {
  std::vector<uint8_t> d = read_bytes(path, where);
  const int64_t bad = first_invalid_utf8(d);
  if (bad >= 0)
    throw InputError(where + ": " + path, "not UTF-8 text: an ill-formed sequence at byte offset " +
                                              std::to_string(bad) + " (" + hex_bytes(d, (size_t)bad, 4) +
                                              "); data.dataset \"text\" reads UTF-8 text only");
  TextSplit s;
  const size_t cut = (size_t)((double)d.size() * 0.9);
  s.train.assign(d.begin(), d.begin() + (int64_t)cut);
  s.val.assign(d.begin() + (int64_t)cut, d.end());
  s.description = path + ", " + std::to_string(s.train.size()) + " training bytes, " +
                  std::to_string(s.val.size()) + " validation bytes (the last 10%)";
  return s;
}

void check_split(const TextSplit& s, int context, const std::string& path, const std::string& where) {
  const size_t need = (size_t)context + 1;
  if (s.train.size() < need || s.val.size() < need)
    throw InputError(where + ": " + path,
                     "too short for model.context = " + std::to_string(context) + ": the training part has " +
                         std::to_string(s.train.size()) + " bytes and the validation part " +
                         std::to_string(s.val.size()) + "; each needs at least context + 1 = " +
                         std::to_string(need));
}

}  // namespace zf
