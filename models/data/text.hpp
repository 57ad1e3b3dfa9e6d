// Text data for the byte-level GPT: the King James Bible as printed by the Debian package
// bible-kjv (`bible -f "Genesis 1:1-Revelation 22:21"`: one verse a line, "Ge1:1 In the
// beginning ..."), its 66 books with testament and section, and the splits of docs/gpt.md:
// language-model text held out by book, or any UTF-8 file with its last 10% held out.
// Every problem with a file is an InputError naming the spec field and the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zf {

struct BibleBook {
  const char* abbrev;  // as bible(1) prints it: "Ge", "1Sm", "Mat", ...
  const char* name;    // "Genesis", "1 Samuel", "Matthew", ...
  int testament;       // 0 Old, 1 New
  int section;         // index into bible_sections()
  bool validation;     // held out (docs/gpt.md)
};
// The 66 books in canonical order.
const std::vector<BibleBook>& bible_books();
// "Law", "History", "Poetry", "Prophets", "Gospels and Acts", "Epistles", "Revelation"
const std::vector<std::string>& bible_sections();
const std::vector<std::string>& bible_testaments();  // "Old", "New"
// Index of a book by abbreviation or name (case-sensitive), -1 if unknown.
int find_book(const std::string& abbrev_or_name);

struct Verse {
  int32_t book = 0, chapter = 0, verse = 0;
  std::string text;  // without the reference
};
// Parses bible(1)'s output. `where` names the spec field ("spec.json: data.path").
std::vector<Verse> load_kjv(const std::string& path, const std::string& where);
// "Genesis 1:1"
std::string verse_reference(const Verse& v);

// Training and validation bytes of a language-model corpus.
struct TextSplit {
  std::vector<uint8_t> train, val;
  std::string description;  // for the run header
};
// The verse classifier's held-out verses of the "verse" split: every 10th verse (0-based index
// % 10 == 9, canonical order) of all 66 books. Language-model training never sees them.
inline bool kjv_held_out_verse(size_t index) { return index % 10 == 9; }
// KJV: verse texts, one a line ("\n"), in canonical order; validation = the books marked
// `validation`; training = the other books without their kjv_held_out_verse()s, so that neither
// of the classifier's held-out sets (docs/gpt.md) is in the pretraining text.
TextSplit kjv_lm_split(const std::vector<Verse>& verses);
// Any UTF-8 text file: validation = the last 10% of the bytes (the split is at floor(0.9 n)).
TextSplit load_text_split(const std::string& path, const std::string& where);
// Both parts must hold at least context + 1 bytes (one window and its targets).
void check_split(const TextSplit& s, int context, const std::string& path, const std::string& where);

}  // namespace zf
