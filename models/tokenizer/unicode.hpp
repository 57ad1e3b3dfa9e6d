// UTF-8 and the Unicode properties the tokenizers need, as Hugging Face's tokenizers library sees
// them: \p{L}, \p{N} and \s of its Oniguruma regexes (general categories L*, N* and the White_Space
// property), Rust's regex \w (the added tokens' single_word), and the NFC/NFD/NFKC/NFKD normalizers.
// Properties and normalization come from ICU (Debian's libicu-dev).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zf::tok {

// The code point starting at byte i of valid UTF-8 `s`; `len` receives its length in bytes.
char32_t decode_utf8(std::string_view s, size_t i, size_t& len);
inline char32_t decode_at(std::string_view s, size_t i) {
  size_t n;
  return decode_utf8(s, i, n);
}
inline size_t utf8_len_at(std::string_view s, size_t i) {
  size_t n;
  decode_utf8(s, i, n);
  return n;
}
// The start of the code point ending just before byte i (i > 0) of valid UTF-8.
size_t prev_utf8(std::string_view s, size_t i);
void append_utf8(std::string& out, char32_t cp);
// The offset of the first byte that is not part of valid UTF-8 (npos when all of `s` is valid).
size_t invalid_utf8_at(std::string_view s);
// `bytes` as UTF-8, each maximal invalid subsequence replaced by U+FFFD (Rust's from_utf8_lossy,
// the WHATWG decoder).
std::string utf8_lossy(std::string_view bytes);

bool is_letter(char32_t c);      // \p{L}
bool is_number(char32_t c);      // \p{N}
bool is_space(char32_t c);       // \s: the White_Space property
bool is_word_char(char32_t c);   // Rust regex \w: Alphabetic, M, Nd, Pc, Join_Control

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize_unicode(std::string_view s, NormalForm form);

}  // namespace zf::tok
