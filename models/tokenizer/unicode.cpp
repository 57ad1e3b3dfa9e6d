#include "models/tokenizer/unicode.hpp"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "runtime/error.hpp"

namespace zf::tok {

char32_t decode_utf8(std::string_view s, size_t i, size_t& len) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    len = 1;
    return b;
  }
  const int n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (0x7F >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  len = static_cast<size_t>(n);
  return cp;
}

size_t prev_utf8(std::string_view s, size_t i) {
  do --i;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  return i;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
// The length of the valid UTF-8 sequence at byte i, or 0; `maximal` receives the length of the
// maximal prefix of a valid sequence there (at least 1), the unit one U+FFFD replaces.
size_t valid_at(std::string_view s, size_t i, size_t& maximal) {
  const auto b = static_cast<unsigned char>(s[i]);
  maximal = 1;
  if (b < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (Unicode table 3-7)
  if (b >= 0xC2 && b <= 0xDF) n = 2;
  else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return 0;
    const auto c = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return 0;
    maximal = k + 1;
  }
  return n;
}
}  // namespace

size_t invalid_utf8_at(std::string_view s) {
  size_t m;
  for (size_t i = 0; i < s.size();) {
    const size_t n = valid_at(s, i, m);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t m;
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = valid_at(bytes, i, m);
    if (n) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += m;
    }
  }
  return out;
}

bool is_letter(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_L_MASK) != 0; }
bool is_number(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0; }
bool is_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)) != 0; }
bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  return u_isUAlphabetic(u) || (U_GET_GC_MASK(u) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL);
}

std::string normalize_unicode(std::string_view s, NormalForm form) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* n = form == NormalForm::NFC    ? icu::Normalizer2::getNFCInstance(st)
                              : form == NormalForm::NFD  ? icu::Normalizer2::getNFDInstance(st)
                              : form == NormalForm::NFKC ? icu::Normalizer2::getNFKCInstance(st)
                                                         : icu::Normalizer2::getNFKDInstance(st);
  if (U_FAILURE(st)) throw zf::Error(std::string("ICU normalizer: ") + u_errorName(st));
  const icu::UnicodeString u = n->normalize(icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), (int32_t)s.size())), st);
  if (U_FAILURE(st)) throw zf::Error(std::string("ICU normalize: ") + u_errorName(st));
  std::string out;
  u.toUTF8String(out);
  return out;
}

}  // namespace zf::tok
