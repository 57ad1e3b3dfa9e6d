// Chat templates (chat_template.hpp): a lexer that follows jinja2 3.1's (trim_blocks, lstrip_blocks,
// `-`/`+` whitespace control, one trailing newline dropped), a recursive-descent parser with
// jinja2's precedence (parser.py: if-else < or < and < not < comparisons < + - < ~ < * / // % < **
// < unary - < filters and tests), and a renderer over Python-like values (Python's ==, truthiness,
// str() and repr()). Every bound against hostile templates is an InputError, never a crash: nesting
// (256), string size and output (64 MiB), loop iterations (1e7), evaluation steps (1e8), memory held
// (512 MiB) and made (4 GiB).
#include "models/tokenizer/chat_template.hpp"

#include <sys/stat.h>
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unordered_map>
#include <utility>

#include "models/tokenizer/json_field.hpp"
#include "runtime/error.hpp"
#include "runtime/input_file.hpp"
#include "runtime/json_input.hpp"

namespace zf::tok {

namespace {

constexpr int kMaxDepth = 256;                    // blocks, expressions and values nested
constexpr size_t kMaxString = size_t(64) << 20;   // the output, and any one string made
constexpr uint64_t kMaxIterations = 10'000'000;   // loop iterations of one render, all loops
constexpr uint64_t kMaxSteps = 100'000'000;       // statements and expressions evaluated
constexpr int64_t kMaxLive = int64_t(512) << 20;  // bytes of strings and lists held at once
constexpr uint64_t kMaxMade = uint64_t(4) << 30;  // bytes of strings and lists made: bounds the time
constexpr int64_t kMaxRange = 100000;             // jinja2's sandbox MAX_RANGE

// A template error without its line: the parser and the renderer add the line and `where`.
struct Failure {
  std::string what;
};
[[noreturn]] void fail(const std::string& what) { throw Failure{what}; }

// ---------------------------------------------------------------------------------------------
// UTF-8, leniently: a byte that is not a continuation byte starts a code point, so invalid input
// never makes an index run off the string.
bool cont_byte(unsigned char c) { return (c & 0xC0) == 0x80; }
size_t cp_count(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += !cont_byte(c);
  return n;
}
std::vector<size_t> cp_starts(std::string_view s) {  // with s.size() appended
  std::vector<size_t> v;
  for (size_t i = 0; i < s.size(); ++i)
    if (!cont_byte((unsigned char)s[i])) v.push_back(i);
  v.push_back(s.size());
  return v;
}
char32_t decode_at(std::string_view s, size_t i, size_t& n) {
  const unsigned char c = s[i];
  n = 1;
  if (c < 0x80) return c;
  const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (len == 1 || i + len > s.size()) return 0xFFFD;
  char32_t cp = c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    if (!cont_byte((unsigned char)s[i + k])) return 0xFFFD;
    cp = (cp << 6) | (s[i + k] & 0x3F);
  }
  n = len;
  return cp;
}
void append_cp(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}
// Python's str.isspace().
bool py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
// Python's str.strip/lstrip/rstrip: `chars` null strips whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars)
    for (size_t i = 0, n = 0; i < chars->size(); i += n) set.push_back(decode_at(*chars, i, n));
  auto strip = [&](char32_t c) { return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_space(c); };
  size_t b = 0, e = s.size(), n = 0;
  if (left)
    while (b < e && strip(decode_at(s, b, n))) b += n;
  if (right)
    while (e > b) {
      size_t p = e - 1;
      while (p > b && cont_byte((unsigned char)s[p])) --p;
      if (!strip(decode_at(s, p, n))) break;
      e = p;
    }
  return std::string(s.substr(b, e - b));
}
std::string icu_case(std::string_view s, bool upper) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), (int32_t)s.size()));
  if (upper)
    u.toUpper(icu::Locale::getRoot());
  else
    u.toLower(icu::Locale::getRoot());
  std::string out;
  return u.toUTF8String(out);
}
// Python's str.title() (cased runs) or str.capitalize() (first upper, the rest lower).
std::string py_title(std::string_view s, bool capitalize) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const char32_t c = decode_at(s, i, n);
    if (capitalize) {
      append_cp(out, i == 0 ? (char32_t)u_totitle(c) : (char32_t)u_tolower(c));
      continue;
    }
    const bool cased = u_hasBinaryProperty(c, UCHAR_CASED);
    append_cp(out, !cased ? c : prev_cased ? (char32_t)u_tolower(c) : (char32_t)u_totitle(c));
    prev_cased = cased;
  }
  return out;
}
// Substring search in linear time (KMP): `x in s`, replace and split on hostile sizes stay fast.
class Finder {
 public:
  explicit Finder(std::string_view n) : n_(n), fail_(n.size() + 1, 0) {
    for (size_t i = 1, k = 0; i < n.size(); ++i) {
      while (k > 0 && n[i] != n[k]) k = fail_[k];
      if (n[i] == n[k]) ++k;
      fail_[i + 1] = k;
    }
  }
  size_t find(std::string_view h, size_t from) const {
    if (n_.empty()) return from <= h.size() ? from : std::string_view::npos;
    for (size_t i = from, k = 0; i < h.size(); ++i) {
      while (k > 0 && h[i] != n_[k]) k = fail_[k];
      if (h[i] == n_[k]) ++k;
      if (k == n_.size()) return i + 1 - k;
    }
    return std::string_view::npos;
  }

 private:
  std::string_view n_;
  std::vector<size_t> fail_;
};

// ---------------------------------------------------------------------------------------------
// Values: Python's, as the templates see them. Lists, dicts and strings are immutable and shared;
// namespaces and loop objects are the only mutable ones, and may not be stored inside a list, dict
// or namespace, so values form no cycles and their nesting (depth) is bounded.
enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, Str, List, Dict, Namespace, Loop, Method };
struct Value;
using ValueList = std::vector<Value>;
struct DictData;
struct NamespaceData;
struct LoopData;

struct Value {
  Kind kind = Kind::Undefined;
  bool tuple = false;  // a List that Python holds as a tuple: (1, 2)
  bool b = false;
  int depth = 0;  // containers: how deep values nest inside
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // Str; Undefined: why (for its error); Method: the name
  std::shared_ptr<const ValueList> list;
  std::shared_ptr<const DictData> dict;
  std::shared_ptr<NamespaceData> ns;
  std::shared_ptr<LoopData> loop;
  std::shared_ptr<const Value> self;  // Method: its object
};
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  std::unordered_map<std::string, size_t> index;  // by key_of
};
struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
};
struct LoopData {
  std::shared_ptr<const ValueList> items;
  size_t index0 = 0;
};

Value undefined(std::string why) {
  Value v;
  v.s = std::make_shared<const std::string>(std::move(why));
  return v;
}
Value none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value boolean(bool b) {
  Value v;
  v.kind = Kind::Bool;
  v.b = b;
  return v;
}
Value integer(int64_t i) {
  Value v;
  v.kind = Kind::Int;
  v.i = i;
  return v;
}
Value real(double f) {
  Value v;
  v.kind = Kind::Float;
  v.f = f;
  return v;
}
Value method(const Value& self, const char* name) {
  Value v;
  v.kind = Kind::Method;
  v.s = std::make_shared<const std::string>(name);
  v.self = std::make_shared<const Value>(self);
  return v;
}
bool is_num(const Value& v) { return v.kind == Kind::Bool || v.kind == Kind::Int || v.kind == Kind::Float; }
bool is_intlike(const Value& v) { return v.kind == Kind::Bool || v.kind == Kind::Int; }
int64_t as_int(const Value& v) { return v.kind == Kind::Bool ? v.b : v.i; }
double as_double(const Value& v) { return v.kind == Kind::Float ? v.f : (double)as_int(v); }

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::List: return v.tuple ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Loop: return "LoopContext";
    case Kind::Method: return "method";
  }
  return "?";
}
[[noreturn]] void fail_undefined(const Value& v) { fail(v.s ? *v.s : "undefined value"); }

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0;
    case Kind::Str: return !v.s->empty();
    case Kind::List: return !v.list->empty();
    case Kind::Dict: return !v.dict->items.empty();
    default: return true;
  }
}

// Python's float repr: the shortest digits that read back, exponent form below 1e-4 and from 1e16.
std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*e", p - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string m(buf);
  const size_t e = m.find('e');
  const int exp = std::atoi(m.c_str() + e + 1);
  std::string sign, digits;
  for (size_t k = 0; k < e; ++k) {
    if (m[k] == '-') sign = "-";
    if (m[k] >= '0' && m[k] <= '9') digits += m[k];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exp >= -4 && exp < 16) {
    std::string r;
    if (exp < 0) {
      r = "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else {
      if (digits.size() <= size_t(exp) + 1) digits += std::string(size_t(exp) + 1 - digits.size(), '0');
      r = digits.substr(0, size_t(exp) + 1) + "." + (digits.size() > size_t(exp) + 1 ? digits.substr(size_t(exp) + 1) : "0");
    }
    return sign + r;
  }
  std::string r = sign + digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + "e";
  r += exp < 0 ? "-" : "+";
  const std::string x = std::to_string(std::abs(exp));
  return r + (x.size() < 2 ? "0" : "") + x;
}

void check_size(const std::string& s) {
  if (s.size() > kMaxString) fail("a string or the output would be larger than 64 MiB");
}
std::string py_repr_str(const std::string& s) {
  const bool sq = s.find('\'') != std::string::npos, dq = s.find('"') != std::string::npos;
  const char q = sq && !dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == (unsigned char)q || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  return out + q;
}
void append_str(const Value& v, std::string& out, bool repr);
// Python's str(v) (repr for the items of containers); Undefined is "" (jinja2's Undefined).
void append_str(const Value& v, std::string& out, bool repr) {
  switch (v.kind) {
    case Kind::Undefined:
      if (repr) out += "Undefined";
      break;
    case Kind::None: out += "None"; break;
    case Kind::Bool: out += v.b ? "True" : "False"; break;
    case Kind::Int: out += std::to_string(v.i); break;
    case Kind::Float: out += py_float(v.f); break;
    case Kind::Str: out += repr ? py_repr_str(*v.s) : *v.s; break;
    case Kind::List: {
      out += v.tuple ? '(' : '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        append_str((*v.list)[k], out, true);
        check_size(out);
      }
      if (v.tuple && v.list->size() == 1) out += ',';
      out += v.tuple ? ')' : ']';
      break;
    }
    case Kind::Dict: {
      out += '{';
      bool first = true;
      for (auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        append_str(k, out, true);
        out += ": ";
        append_str(x, out, true);
        check_size(out);
      }
      out += '}';
      break;
    }
    case Kind::Namespace: {
      out += "<Namespace {";
      bool first = true;
      for (auto& [k, x] : v.ns->attrs) {
        if (!first) out += ", ";
        first = false;
        out += py_repr_str(k) + ": ";
        append_str(x, out, true);
        check_size(out);
      }
      out += "}>";
      break;
    }
    case Kind::Loop:
      out += "<LoopContext " + std::to_string(v.loop->index0 + 1) + "/" + std::to_string(v.loop->items->size()) + ">";
      break;
    case Kind::Method: out += "<built-in method " + *v.s + " of " + type_name(*v.self) + " object>"; break;
  }
  check_size(out);
}
std::string to_str(const Value& v) {
  if (v.kind == Kind::Str) return *v.s;
  std::string out;
  append_str(v, out, false);
  return out;
}

// A dict key as Python hashes it: 1, 1.0 and True are one key.
std::string key_of(const Value& k) {
  switch (k.kind) {
    case Kind::Str: return "s" + *k.s;
    case Kind::None: return "z";
    case Kind::Bool:
    case Kind::Int: return "n" + std::to_string(as_int(k));
    case Kind::Float:
      if (std::floor(k.f) == k.f && std::fabs(k.f) < 9e18) return "n" + std::to_string((int64_t)k.f);
      return "f" + py_float(k.f);
    case Kind::List:
      if (k.tuple) {
        std::string r = "t";
        for (auto& x : *k.list) {
          const std::string p = key_of(x);
          r += std::to_string(p.size()) + ":" + p;
        }
        return r;
      }
      break;
    default: break;
  }
  fail("unhashable type: '" + type_name(k) + "'");
}

bool equals(const Value& a, const Value& b) {
  if (is_num(a) && is_num(b)) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return as_double(a) == as_double(b);
    return as_int(a) == as_int(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::Str: return *a.s == *b.s;
    case Kind::List:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equals((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Kind::Dict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (auto& [k, x] : a.dict->items) {
        auto it = b.dict->index.find(key_of(k));
        if (it == b.dict->index.end() || !equals(x, b.dict->items[it->second].second)) return false;
      }
      return true;
    case Kind::Namespace: return a.ns == b.ns;
    case Kind::Loop: return a.loop == b.loop;
    default: return false;
  }
}
// <0, 0, >0 as Python orders numbers, strings (by code point: UTF-8's byte order) and sequences.
int compare(const Value& a, const Value& b, const char* op) {
  if (is_num(a) && is_num(b)) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) {
      const double x = as_double(a), y = as_double(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b) ? 1 : 0;
  }
  if (a.kind == Kind::Str && b.kind == Kind::Str) return a.s->compare(*b.s);
  if (a.kind == Kind::List && b.kind == Kind::List && a.tuple == b.tuple) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k)
      if (!equals((*a.list)[k], (*b.list)[k])) return compare((*a.list)[k], (*b.list)[k], op);
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  if (a.kind == Kind::Undefined) fail_undefined(a);
  if (b.kind == Kind::Undefined) fail_undefined(b);
  fail(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// json.dumps as HF's tojson filter calls it (ensure_ascii=False unless asked, ", " and ": ").
struct JsonOptions {
  bool ensure_ascii = false, sort_keys = false;
  int indent = -1;  // none
  std::string item_sep = ", ", key_sep = ": ";
};
void json_str(const std::string& s, std::string& out, bool ascii) {
  out += '"';
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    const char32_t c = decode_at(s, i, n);
    char b[16];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            std::snprintf(b, sizeof b, "\\u%04x\\u%04x", unsigned(0xD800 + ((c - 0x10000) >> 10)),
                          unsigned(0xDC00 + ((c - 0x10000) & 0x3FF)));
          } else {
            std::snprintf(b, sizeof b, "\\u%04x", unsigned(c));
          }
          out += b;
        } else {
          out.append(s, i, n);
        }
    }
  }
  out += '"';
}
std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return py_float(f);
}
void to_json(const Value& v, std::string& out, const JsonOptions& o, int level) {
  auto newline = [&](int l) {
    if (o.indent >= 0) out += "\n" + std::string(size_t(o.indent) * size_t(l), ' ');
  };
  switch (v.kind) {
    case Kind::None: out += "null"; break;
    case Kind::Bool: out += v.b ? "true" : "false"; break;
    case Kind::Int: out += std::to_string(v.i); break;
    case Kind::Float: out += json_float(v.f); break;
    case Kind::Str: json_str(*v.s, out, o.ensure_ascii); break;
    case Kind::List:
      if (v.list->empty()) {
        out += "[]";
        break;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += o.item_sep;
        newline(level + 1);
        to_json((*v.list)[k], out, o, level + 1);
        check_size(out);
      }
      newline(level);
      out += ']';
      break;
    case Kind::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        break;
      }
      std::vector<std::pair<std::string, const Value*>> items;
      for (auto& [k, x] : v.dict->items) {
        std::string key;
        if (k.kind == Kind::Str) key = *k.s;
        else if (k.kind == Kind::Float) key = json_float(k.f);
        else if (k.kind == Kind::Bool) key = k.b ? "true" : "false";
        else if (k.kind == Kind::None) key = "null";
        else if (k.kind == Kind::Int) key = std::to_string(k.i);
        else fail("keys must be str, int, float, bool or None, not " + type_name(k));
        items.emplace_back(std::move(key), &x);
      }
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += o.item_sep;
        newline(level + 1);
        json_str(items[k].first, out, o.ensure_ascii);
        out += o.key_sep;
        to_json(*items[k].second, out, o, level + 1);
        check_size(out);
      }
      newline(level);
      out += '}';
      break;
    }
    default: fail("Object of type " + type_name(v) + " is not JSON serializable");
  }
  check_size(out);
}

// ---------------------------------------------------------------------------------------------
// The lexer: jinja2's rules for the root text, comments, tags and the tokens inside tags.
enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Str, Int, Float, Op, End };
struct Token {
  Tok type;
  std::string text;  // Data, Name, Str (unescaped), Op
  int line;
  int64_t i = 0;
  double f = 0;
};

// A Python string literal's escapes (jinja2 decodes them with "unicode-escape").
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] != '\\' || k + 1 == s.size()) {
      out += s[k];
      continue;
    }
    const char c = s[++k];
    auto hex = [&](size_t n) -> char32_t {
      if (k + n >= s.size()) fail("truncated \\x, \\u or \\U escape in a string");
      char32_t v = 0;
      for (size_t j = 1; j <= n; ++j) {
        const char h = s[k + j];
        const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) fail("bad \\x, \\u or \\U escape in a string");
        v = v * 16 + char32_t(d);
      }
      k += n;
      if (v > 0x10FFFF) fail("escape beyond U+10FFFF in a string");
      return v;
    };
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\n': break;  // a line continuation
      case 'x': append_cp(out, hex(2)); break;
      case 'u': append_cp(out, hex(4)); break;
      case 'U': append_cp(out, hex(8)); break;
      default:
        if (c >= '0' && c <= '7') {
          char32_t v = char32_t(c - '0');
          for (int j = 0; j < 2 && k + 1 < s.size() && s[k + 1] >= '0' && s[k + 1] <= '7'; ++j) v = v * 8 + char32_t(s[++k] - '0');
          append_cp(out, v);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

std::vector<Token> lex(std::string src) {
  {  // jinja2 reads \r\n and \r as \n and drops one trailing newline (keep_trailing_newline=False)
    std::string n;
    n.reserve(src.size());
    for (size_t k = 0; k < src.size(); ++k) {
      if (src[k] == '\r') {
        n += '\n';
        if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
      } else {
        n += src[k];
      }
    }
    if (!n.empty() && n.back() == '\n') n.pop_back();
    src = std::move(n);
  }
  std::vector<Token> toks;
  const size_t n = src.size();
  size_t pos = 0;
  int line = 1;
  bool line_starting = true;
  auto newlines = [&](size_t a, size_t b) { line += (int)std::count(src.begin() + (long)a, src.begin() + (long)b, '\n'); };
  auto is_ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  auto skip_ws = [&](size_t p) {
    while (p < n && is_ws(src[p])) ++p;
    return p;
  };
  while (pos < n) {
    size_t t = pos;
    while ((t = src.find('{', t)) != std::string::npos && !(t + 1 < n && (src[t + 1] == '{' || src[t + 1] == '%' || src[t + 1] == '#'))) ++t;
    if (t == std::string::npos) {
      toks.push_back({Tok::Data, src.substr(pos), line});
      break;
    }
    const char kind = src[t + 1];
    const char sign = t + 2 < n && (src[t + 2] == '-' || src[t + 2] == '+') ? src[t + 2] : 0;
    std::string text = src.substr(pos, t - pos);
    if (sign == '-') {
      text = py_strip(text, nullptr, false, true);
    } else if (sign != '+' && kind != '{') {  // lstrip_blocks: a tag alone after a line's indent
      const size_t l = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if ((l > 0 || line_starting) && l < text.size() &&
          std::all_of(text.begin() + (long)l, text.end(), [&](char c) { return is_ws(c); }))
        text.resize(l);
    }
    if (!text.empty()) toks.push_back({Tok::Data, text, line});
    newlines(pos, t);
    const int tag_line = line;
    pos = t + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      size_t q = pos;
      while ((q = src.find("#}", q)) != std::string::npos && q < pos) ++q;
      if (q == std::string::npos) fail("line " + std::to_string(tag_line) + ": missing end of comment tag '#}'");
      size_t end = q + 2;
      if (q > pos && src[q - 1] == '-') end = skip_ws(end);
      else if (!(q > pos && src[q - 1] == '+') && end < n && src[end] == '\n') ++end;  // trim_blocks
      newlines(pos, end);
      pos = end;
      line_starting = src[end - 1] == '\n';
      continue;
    }
    const bool block = kind == '%';
    toks.push_back({block ? Tok::BlockBegin : Tok::VarBegin, "", tag_line});
    std::vector<char> balance;
    for (;;) {
      if (pos >= n) fail("line " + std::to_string(tag_line) + ": missing end of tag '" + (block ? "%}" : "}}") + "'");
      if (balance.empty()) {
        const char* close = block ? "%}" : "}}";
        size_t end = 0;
        if (src.compare(pos, 3, std::string("-") + close) == 0) end = skip_ws(pos + 3);
        else if (block && src.compare(pos, 3, "+%}") == 0) end = pos + 3;
        else if (src.compare(pos, 2, close) == 0) end = pos + 2 + (block && pos + 2 < n && src[pos + 2] == '\n');
        if (end) {
          toks.push_back({block ? Tok::BlockEnd : Tok::VarEnd, "", line});
          newlines(pos, end);
          pos = end;
          line_starting = src[end - 1] == '\n';
          break;
        }
      }
      const char c = src[pos];
      if (is_ws(c)) {
        const size_t e = skip_ws(pos);
        newlines(pos, e);
        pos = e;
        continue;
      }
      if (c >= '0' && c <= '9') {
        size_t e = pos;
        std::string digits;
        auto run = [&] {
          while (e < n && ((src[e] >= '0' && src[e] <= '9') || (src[e] == '_' && e + 1 < n && src[e + 1] >= '0' && src[e + 1] <= '9')))
            if (src[e++] != '_') digits += src[e - 1];
        };
        run();
        bool is_float = false;
        if (!(pos > 0 && src[pos - 1] == '.')) {
          if (e + 1 < n && src[e] == '.' && src[e + 1] >= '0' && src[e + 1] <= '9') {
            digits += src[e++];
            run();
            is_float = true;
          }
          size_t x = e + 1;
          if (e < n && src[e] == 'e' && x < n && (src[x] == '+' || src[x] == '-')) ++x;
          if (e < n && src[e] == 'e' && x < n && src[x] >= '0' && src[x] <= '9') {
            digits += src.substr(e, x - e);
            e = x;
            run();
            is_float = true;
          }
        }
        Token tk{is_float ? Tok::Float : Tok::Int, digits, line};
        if (is_float) {
          tk.f = std::strtod(digits.c_str(), nullptr);
        } else {
          errno = 0;
          tk.i = std::strtoll(digits.c_str(), nullptr, 10);
          if (errno == ERANGE) fail("line " + std::to_string(line) + ": integer " + excerpt(digits, 40) + " beyond 64 bits");
        }
        toks.push_back(tk);
        pos = e;
        continue;
      }
      if (std::isalpha((unsigned char)c) || c == '_') {
        size_t e = pos;
        while (e < n && (std::isalnum((unsigned char)src[e]) || src[e] == '_')) ++e;
        toks.push_back({Tok::Name, src.substr(pos, e - pos), line});
        pos = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t e = pos + 1;
        while (e < n && src[e] != c) e += src[e] == '\\' ? 2 : 1;
        if (e >= n) fail("line " + std::to_string(line) + ": unterminated string");
        try {
          toks.push_back({Tok::Str, unescape(std::string_view(src).substr(pos + 1, e - pos - 1)), line});
        } catch (const Failure& f) {
          fail("line " + std::to_string(line) + ": " + f.what);
        }
        newlines(pos, e);
        pos = e + 1;
        continue;
      }
      static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                         "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
      const char* op = nullptr;
      for (const char* o : kOps)
        if (src.compare(pos, std::strlen(o), o) == 0) {
          op = o;
          break;
        }
      if (!op) fail("line " + std::to_string(line) + ": unexpected character '" + excerpt(std::string(1, c)) + "'");
      if (*op == '(' || *op == '[' || *op == '{') balance.push_back(*op);
      if (*op == ')' || *op == ']' || *op == '}') {
        const char want = *op == ')' ? '(' : *op == ']' ? '[' : '{';
        if (balance.empty() || balance.back() != want) fail("line " + std::to_string(line) + ": unexpected '" + op + "'");
        balance.pop_back();
      }
      toks.push_back({Tok::Op, op, line});
      pos += std::strlen(op);
    }
  }
  toks.push_back({Tok::End, "", line});
  return toks;
}

// ---------------------------------------------------------------------------------------------
// The syntax tree.
enum class Op : uint8_t { Const, Name, List, Tuple, Dict, Attr, Item, Slice, Call, Filter, Test, Neg, Pos, Not, Bin, Compare, And, Or, Cond };
enum class Bin : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Concat };
enum class Cmp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };
struct Expr;
using ExprP = std::unique_ptr<Expr>;
struct Expr {
  Op op;
  int line;
  int depth = 1;
  Value value;        // Const
  std::string name;   // Name, Attr, Filter, Test
  Bin bin{};          // Bin
  std::vector<Cmp> cmps;  // Compare: one per operand after the first
  std::vector<ExprP> args;  // operands; Filter/Test: the value first; Slice: object, start, stop, step (or null)
  std::vector<std::pair<std::string, ExprP>> kwargs;
};

enum class SOp : uint8_t { Text, Print, If, For, Set, SetAttr, SetBlock, Break, Continue, Generation };
struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;
struct Stmt {
  SOp op;
  int line;
  std::string text;                  // Text
  ExprP expr;                        // Print, Set, SetAttr: the value; For: the sequence
  ExprP cond;                        // For: its `if` filter
  std::vector<std::string> targets;  // For, Set, SetBlock: the names; SetAttr: {namespace, attribute}
  std::vector<std::pair<ExprP, Body>> branches;  // If: condition (null for else) and body
  Body body, else_body;              // For, SetBlock, Generation
};

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse() {
    std::string end;
    return body({}, "", 0, &end);
  }
  int line() const { return t_[p_].line; }

 private:
  std::vector<Token> t_;
  size_t p_ = 0;
  int nest_ = 0;     // recursion of blocks and expressions
  int in_loop_ = 0;  // for break/continue

  struct Nest {
    int& n;
    explicit Nest(int& n_) : n(n_) {
      if (++n > kMaxDepth) fail("blocks or expressions nested deeper than " + std::to_string(kMaxDepth));
    }
    ~Nest() { --n; }
  };

  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool is_op(const char* o) const { return cur().type == Tok::Op && cur().text == o; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* o) {
    if (!is_op(o)) return false;
    ++p_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++p_;
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Data: return "text";
      case Tok::VarBegin: return "'{{'";
      case Tok::VarEnd: return "'}}'";
      case Tok::BlockBegin: return "'{%'";
      case Tok::BlockEnd: return "'%}'";
      case Tok::Name: return "'" + excerpt(t.text, 40) + "'";
      case Tok::Str: return "a string";
      case Tok::Int:
      case Tok::Float: return "a number";
      case Tok::Op: return "'" + t.text + "'";
      case Tok::End: return "the end of the template";
    }
    return "?";
  }
  [[noreturn]] void unexpected(const std::string& wanted) const { fail("expected " + wanted + ", got " + describe(cur())); }
  void expect_op(const char* o) {
    if (!skip_op(o)) unexpected(std::string("'") + o + "'");
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) unexpected(what);
    ++p_;
  }
  std::string name() {
    if (cur().type != Tok::Name) unexpected("a name");
    return t_[p_++].text;
  }
  ExprP node(Op op, int line) {
    auto e = std::make_unique<Expr>();
    e->op = op;
    e->line = line;
    return e;
  }
  // Depth of the tree: a chain such as a+a+a+... nests without recursion in the parser.
  ExprP done(ExprP e) {
    for (auto& a : e->args)
      if (a) e->depth = std::max(e->depth, a->depth + 1);
    for (auto& [k, a] : e->kwargs) e->depth = std::max(e->depth, a->depth + 1);
    if (e->depth > kMaxDepth) fail("expression nested deeper than " + std::to_string(kMaxDepth));
    return e;
  }
  ExprP binary(Op op, ExprP a, ExprP b, int line) {
    auto e = node(op, line);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return done(std::move(e));
  }

  // Statements up to one of `ends` (the tag's name is left in *end, the parser after it).
  Body body(std::initializer_list<const char*> ends, const std::string& opener, int open_line, std::string* end) {
    Nest guard(nest_);
    Body out;
    for (;;) {
      const Token& tk = cur();
      if (tk.type == Tok::End) {
        if (ends.size() == 0) return out;
        std::string want;
        for (const char* e : ends) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
        fail("unexpected end of template: the '" + opener + "' of line " + std::to_string(open_line) +
             " is not closed (expected " + want + ")");
      }
      auto s = std::make_unique<Stmt>();
      s->line = tk.line;
      if (tk.type == Tok::Data) {
        s->op = SOp::Text;
        s->text = tk.text;
        ++p_;
      } else if (tk.type == Tok::VarBegin) {
        ++p_;
        s->op = SOp::Print;
        s->expr = tuple(true);
        expect(Tok::VarEnd, "'}}'");
      } else if (tk.type == Tok::BlockBegin) {
        ++p_;
        const std::string tag = name();
        if (std::find_if(ends.begin(), ends.end(), [&](const char* e) { return tag == e; }) != ends.end()) {
          *end = tag;
          return out;
        }
        statement(tag, *s);
      } else {
        unexpected("text, '{{' or '{%'");
      }
      out.push_back(std::move(s));
    }
  }

  void statement(const std::string& tag, Stmt& s) {
    std::string end;
    if (tag == "if") {
      s.op = SOp::If;
      ExprP c = tuple(true);
      for (;;) {
        expect(Tok::BlockEnd, "'%}'");
        Body b = body({"elif", "else", "endif"}, "if", s.line, &end);
        s.branches.emplace_back(std::move(c), std::move(b));
        if (end == "elif") {
          c = tuple(true);
        } else if (end == "else") {
          expect(Tok::BlockEnd, "'%}'");
          s.branches.emplace_back(nullptr, body({"endif"}, "if", s.line, &end));
          break;
        } else {
          break;
        }
      }
    } else if (tag == "for") {
      s.op = SOp::For;
      const bool paren = skip_op("(");
      do s.targets.push_back(name());
      while (skip_op(","));
      if (paren) expect_op(")");
      if (!skip_name("in")) unexpected("'in'");
      s.expr = tuple(false);
      if (skip_name("if")) s.cond = expression(true);
      if (is_name("recursive")) fail("recursive loops are outside the supported subset");
      expect(Tok::BlockEnd, "'%}'");
      ++in_loop_;
      s.body = body({"endfor", "else"}, "for", s.line, &end);
      --in_loop_;
      if (end == "else") {
        expect(Tok::BlockEnd, "'%}'");
        s.else_body = body({"endfor"}, "for", s.line, &end);
      }
    } else if (tag == "set") {
      s.targets.push_back(name());
      if (skip_op(".")) {
        s.op = SOp::SetAttr;
        s.targets.push_back(name());
        expect_op("=");
        s.expr = tuple(true);
      } else {
        while (skip_op(",")) s.targets.push_back(name());
        if (skip_op("=")) {
          s.op = SOp::Set;
          s.expr = tuple(true);
        } else {
          if (s.targets.size() != 1) unexpected("'='");
          if (cur().type != Tok::BlockEnd) unexpected("'=' or '%}'");
          s.op = SOp::SetBlock;
          ++p_;
          const int saved = std::exchange(in_loop_, 0);
          s.body = body({"endset"}, "set", s.line, &end);
          in_loop_ = saved;
        }
      }
    } else if (tag == "break" || tag == "continue") {
      if (in_loop_ == 0) fail("'" + tag + "' outside a loop");
      s.op = tag == "break" ? SOp::Break : SOp::Continue;
    } else if (tag == "generation") {
      s.op = SOp::Generation;
      expect(Tok::BlockEnd, "'%}'");
      s.body = body({"endgeneration"}, "generation", s.line, &end);
    } else if (tag == "elif" || tag == "else" || tag.rfind("end", 0) == 0) {
      fail("unexpected '" + excerpt(tag, 40) + "' (no open block that it closes)");
    } else {
      fail("unknown tag '" + excerpt(tag, 40) + "' (outside the supported subset: if, for, set, break, continue, generation)");
    }
    expect(Tok::BlockEnd, "'%}'");
  }

  bool at_tuple_end() const {
    return cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")") || cur().type == Tok::End;
  }
  // `a, b` is a tuple where jinja2 reads one (outputs, set values, loop sequences, parentheses).
  ExprP tuple(bool condexpr) {
    const int line = cur().line;
    ExprP first = condexpr ? expression(true) : or_();
    if (!is_op(",")) return first;
    auto t = node(Op::Tuple, line);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (at_tuple_end()) break;
      t->args.push_back(condexpr ? expression(true) : or_());
    }
    return done(std::move(t));
  }
  ExprP expression(bool condexpr) {
    Nest guard(nest_);
    ExprP e = or_();
    if (!condexpr) return e;
    while (is_name("if")) {
      const int line = cur().line;
      ++p_;
      auto c = node(Op::Cond, line);
      ExprP test = or_();
      ExprP other = skip_name("else") ? expression(true) : nullptr;
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(other));
      e = done(std::move(c));
    }
    return e;
  }
  ExprP or_() {
    ExprP e = and_();
    while (is_name("or")) {
      const int line = cur().line;
      ++p_;
      e = binary(Op::Or, std::move(e), and_(), line);
    }
    return e;
  }
  ExprP and_() {
    ExprP e = not_();
    while (is_name("and")) {
      const int line = cur().line;
      ++p_;
      e = binary(Op::And, std::move(e), not_(), line);
    }
    return e;
  }
  ExprP not_() {
    if (is_name("not")) {
      Nest guard(nest_);
      auto e = node(Op::Not, cur().line);
      ++p_;
      e->args.push_back(not_());
      return done(std::move(e));
    }
    return compare();
  }
  ExprP compare() {
    const int line = cur().line;
    ExprP first = math1();
    ExprP c;
    for (;;) {
      Cmp op;
      if (skip_op("==")) op = Cmp::Eq;
      else if (skip_op("!=")) op = Cmp::Ne;
      else if (skip_op("<")) op = Cmp::Lt;
      else if (skip_op("<=")) op = Cmp::Le;
      else if (skip_op(">")) op = Cmp::Gt;
      else if (skip_op(">=")) op = Cmp::Ge;
      else if (skip_name("in")) op = Cmp::In;
      else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        p_ += 2;
        op = Cmp::NotIn;
      } else {
        break;
      }
      if (!c) {
        c = node(Op::Compare, line);
        c->args.push_back(std::move(first));
      }
      c->cmps.push_back(op);
      c->args.push_back(math1());
    }
    return c ? done(std::move(c)) : std::move(first);
  }
  ExprP bin(Bin b, ExprP l, ExprP r, int line) {
    ExprP e = binary(Op::Bin, std::move(l), std::move(r), line);
    e->bin = b;
    return e;
  }
  ExprP math1() {
    ExprP e = concat();
    for (;;) {
      const int line = cur().line;
      if (skip_op("+")) e = bin(Bin::Add, std::move(e), concat(), line);
      else if (skip_op("-")) e = bin(Bin::Sub, std::move(e), concat(), line);
      else return e;
    }
  }
  ExprP concat() {
    ExprP e = math2();
    while (is_op("~")) {
      const int line = cur().line;
      ++p_;
      e = bin(Bin::Concat, std::move(e), math2(), line);
    }
    return e;
  }
  ExprP math2() {
    ExprP e = pow();
    for (;;) {
      const int line = cur().line;
      if (skip_op("*")) e = bin(Bin::Mul, std::move(e), pow(), line);
      else if (skip_op("/")) e = bin(Bin::Div, std::move(e), pow(), line);
      else if (skip_op("//")) e = bin(Bin::FloorDiv, std::move(e), pow(), line);
      else if (skip_op("%")) e = bin(Bin::Mod, std::move(e), pow(), line);
      else return e;
    }
  }
  ExprP pow() {
    ExprP e = unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      ++p_;
      e = bin(Bin::Pow, std::move(e), unary(true), line);
    }
    return e;
  }
  ExprP unary(bool with_filter) {
    Nest guard(nest_);
    const int line = cur().line;
    ExprP e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? Op::Neg : Op::Pos, line);
      ++p_;
      e->args.push_back(unary(false));
      e = done(std::move(e));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }
  ExprP constant(Value v, int line) {
    auto e = node(Op::Const, line);
    e->value = std::move(v);
    return e;
  }
  ExprP primary() {
    const Token& tk = cur();
    const int line = tk.line;
    if (tk.type == Tok::Name) {
      ++p_;
      const std::string& n = tk.text;
      if (n == "true" || n == "True") return constant(boolean(true), line);
      if (n == "false" || n == "False") return constant(boolean(false), line);
      if (n == "none" || n == "None") return constant(none(), line);
      auto e = node(Op::Name, line);
      e->name = n;
      return e;
    }
    if (tk.type == Tok::Str) {
      std::string s;
      while (cur().type == Tok::Str) s += t_[p_++].text;  // adjacent literals join, as in Python
      Value v;
      v.kind = Kind::Str;
      v.s = std::make_shared<const std::string>(std::move(s));
      return constant(std::move(v), line);
    }
    if (tk.type == Tok::Int) return ++p_, constant(integer(tk.i), line);
    if (tk.type == Tok::Float) return ++p_, constant(real(tk.f), line);
    if (skip_op("(")) {
      if (skip_op(")")) return done(node(Op::Tuple, line));
      ExprP first = expression(true);
      if (skip_op(")")) return first;
      auto t = node(Op::Tuple, line);
      t->args.push_back(std::move(first));
      while (skip_op(",")) {
        if (is_op(")")) break;
        t->args.push_back(expression(true));
      }
      expect_op(")");
      return done(std::move(t));
    }
    if (skip_op("[")) {
      auto l = node(Op::List, line);
      while (!skip_op("]")) {
        if (!l->args.empty()) expect_op(",");
        if (skip_op("]")) break;
        l->args.push_back(expression(true));
      }
      return done(std::move(l));
    }
    if (skip_op("{")) {
      auto d = node(Op::Dict, line);
      while (!skip_op("}")) {
        if (!d->args.empty()) expect_op(",");
        if (skip_op("}")) break;
        d->args.push_back(expression(true));
        expect_op(":");
        d->args.push_back(expression(true));
      }
      return done(std::move(d));
    }
    unexpected("an expression");
  }
  ExprP postfix(ExprP e) {
    for (;;) {
      const int line = cur().line;
      if (skip_op(".")) {
        if (cur().type == Tok::Int) {
          auto it = node(Op::Item, line);
          it->args.push_back(std::move(e));
          it->args.push_back(constant(integer(t_[p_++].i), line));
          e = done(std::move(it));
        } else {
          auto a = node(Op::Attr, line);
          a->name = name();
          a->args.push_back(std::move(e));
          e = done(std::move(a));
        }
      } else if (skip_op("[")) {
        e = subscript(std::move(e), line);
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }
  ExprP subscript(ExprP obj, int line) {
    Nest guard(nest_);
    ExprP first;
    if (!is_op(":")) {
      first = expression(true);
      if (skip_op("]")) {
        auto it = node(Op::Item, line);
        it->args.push_back(std::move(obj));
        it->args.push_back(std::move(first));
        return done(std::move(it));
      }
    }
    if (is_op(",")) fail("subscripts with a comma (tuples) are outside the supported subset");
    auto sl = node(Op::Slice, line);
    sl->args.push_back(std::move(obj));
    sl->args.push_back(std::move(first));
    expect_op(":");
    sl->args.push_back(is_op(":") || is_op("]") ? nullptr : expression(true));
    ExprP step;
    if (skip_op(":") && !is_op("]")) step = expression(true);
    sl->args.push_back(std::move(step));
    expect_op("]");
    return done(std::move(sl));
  }
  // Arguments after '(' into e->args / e->kwargs.
  void arguments(Expr& e) {
    Nest guard(nest_);
    const size_t base = e.args.size();  // the callee, or the filtered or tested value
    expect_op("(");
    while (!skip_op(")")) {
      if (e.args.size() > base || !e.kwargs.empty()) {
        expect_op(",");
        if (skip_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are outside the supported subset");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string k = name();
        ++p_;
        e.kwargs.emplace_back(std::move(k), expression(true));
      } else {
        if (!e.kwargs.empty()) fail("a positional argument after keyword arguments");
        e.args.push_back(expression(true));
      }
    }
  }
  ExprP call(ExprP callee) {
    auto c = node(Op::Call, cur().line);
    c->args.push_back(std::move(callee));
    arguments(*c);
    return done(std::move(c));
  }
  std::string dotted_name() {
    std::string n = name();
    while (skip_op(".")) n += "." + name();
    return n;
  }
  ExprP filters(ExprP e) {
    for (;;) {
      const int line = cur().line;
      if (skip_op("|")) {
        auto f = node(Op::Filter, line);
        f->name = dotted_name();
        f->args.push_back(std::move(e));
        if (is_op("(")) arguments(*f);
        e = done(std::move(f));
      } else if (skip_name("is")) {
        const bool negated = skip_name("not");
        auto t = node(Op::Test, line);
        t->name = dotted_name();
        t->args.push_back(std::move(e));
        const Token& c = cur();
        if (is_op("(")) {
          arguments(*t);
        } else if ((c.type == Tok::Name || c.type == Tok::Str || c.type == Tok::Int || c.type == Tok::Float || is_op("[") ||
                    is_op("{")) &&
                   !(c.type == Tok::Name && (c.text == "else" || c.text == "or" || c.text == "and"))) {
          Nest guard(nest_);
          t->args.push_back(postfix(primary()));  // `x is divisibleby 3`, jinja2's one bare argument
        }
        e = done(std::move(t));
        if (negated) {
          auto n = node(Op::Not, line);
          n->args.push_back(std::move(e));
          e = done(std::move(n));
        }
      } else if (is_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The renderer.
class Renderer {
 public:
  std::string out;
  int line = 0;

  explicit Renderer(std::unordered_map<std::string, Value> globals) { frames_.push_back(std::move(globals)); }

  Value str(std::string s) {
    check_size(s);
    const int64_t n = charge(s.size());
    Value v;
    v.kind = Kind::Str;
    v.s = std::shared_ptr<const std::string>(new std::string(std::move(s)), Release<std::string>{&live_, n});
    return v;
  }
  Value list(ValueList items, bool tuple = false) {
    const int64_t n = charge(items.size() * sizeof(Value));
    Value v;
    v.kind = Kind::List;
    v.tuple = tuple;
    for (auto& x : items) {
      storable(x);
      v.depth = std::max(v.depth, x.depth + 1);
    }
    if (v.depth > kMaxDepth) fail("values nested deeper than " + std::to_string(kMaxDepth));
    v.list = std::shared_ptr<const ValueList>(new ValueList(std::move(items)), Release<ValueList>{&live_, n});
    return v;
  }
  Value dict(std::vector<std::pair<Value, Value>> items) {
    const int64_t n = charge(items.size() * 2 * sizeof(Value));
    std::shared_ptr<DictData> d(new DictData, Release<DictData>{&live_, n});
    Value v;
    v.kind = Kind::Dict;
    for (auto& [k, x] : items) {
      storable(k);
      storable(x);
      v.depth = std::max({v.depth, k.depth + 1, x.depth + 1});
      auto [it, fresh] = d->index.emplace(key_of(k), d->items.size());
      if (fresh) d->items.emplace_back(std::move(k), std::move(x));
      else d->items[it->second].second = std::move(x);
    }
    if (v.depth > kMaxDepth) fail("values nested deeper than " + std::to_string(kMaxDepth));
    v.dict = std::move(d);
    return v;
  }

  enum class Flow { Next, Break, Continue };
  Flow exec(const Body& body) {
    for (const auto& sp : body) {
      const Stmt& s = *sp;
      step();
      line = s.line;
      switch (s.op) {
        case SOp::Text: emit(s.text); break;
        case SOp::Print: {
          const Value v = eval(*s.expr);
          if (v.kind == Kind::Str) emit(*v.s);
          else emit(to_str(v));
          break;
        }
        case SOp::If:
          for (const auto& [cond, b] : s.branches) {
            if (cond && !truthy(eval(*cond))) continue;
            const Flow f = exec(b);
            if (f != Flow::Next) return f;
            break;
          }
          break;
        case SOp::For: {
          const Flow f = loop(s);
          if (f != Flow::Next) return f;
          break;
        }
        case SOp::Set: assign(s.targets, eval(*s.expr)); break;
        case SOp::SetAttr: {
          const Value* ns = lookup(s.targets[0]);
          if (!ns || ns->kind != Kind::Namespace)
            fail("'" + s.targets[0] + "' is not a namespace: `set x.attr = ...` assigns only namespace() attributes");
          const Value v = eval(*s.expr);
          line = s.line;
          storable(v);
          set_attr(*ns->ns, s.targets[1], v);
          break;
        }
        case SOp::SetBlock: {
          std::string saved = std::move(out);
          out.clear();
          exec(s.body);
          std::swap(saved, out);
          assign(s.targets, str(std::move(saved)));
          break;
        }
        case SOp::Break: return Flow::Break;
        case SOp::Continue: return Flow::Continue;
        case SOp::Generation: {
          const Flow f = exec(s.body);
          if (f != Flow::Next) return f;
          break;
        }
      }
    }
    return Flow::Next;
  }

 private:
  // Declared before frames_: the values release their bytes into live_ as they go.
  uint64_t iterations_ = 0, steps_ = 0, made_ = 0;
  int64_t live_ = 0;
  std::vector<std::unordered_map<std::string, Value>> frames_;

  // The deleter of strings, lists and dicts a render makes: live_ counts what is held.
  template <class T>
  struct Release {
    int64_t* live;
    int64_t n;
    void operator()(const T* p) const {
      *live -= n;
      delete p;
    }
  };
  int64_t charge(uint64_t n) {
    made_ += n;
    live_ += (int64_t)n;
    if (live_ > kMaxLive) {
      live_ -= (int64_t)n;
      fail("the template holds more than 512 MiB of strings and lists");
    }
    if (made_ > kMaxMade) fail("the template made more than 4 GiB of strings and lists");
    return (int64_t)n;
  }
  // Before building a list of n items: refused while it is still cheap to refuse.
  void can_hold(uint64_t n) const {
    if (n > (uint64_t)(kMaxLive - live_) / sizeof(Value)) fail("the template holds more than 512 MiB of strings and lists");
  }
  void step() {
    if (++steps_ > kMaxSteps) fail("more than " + std::to_string(kMaxSteps) + " evaluation steps");
  }
  void emit(const std::string& s) {
    if (out.size() + s.size() > kMaxString) fail("the output would be larger than 64 MiB");
    out += s;
  }
  static void storable(const Value& v) {
    if (v.kind == Kind::Namespace || v.kind == Kind::Loop || v.kind == Kind::Method)
      fail("a " + type_name(v) + " cannot be stored in a list, dict or namespace (outside the supported subset)");
  }
  static void set_attr(NamespaceData& ns, const std::string& k, const Value& v) {
    for (auto& [n, x] : ns.attrs)
      if (n == k) {
        x = v;
        return;
      }
    ns.attrs.emplace_back(k, v);
  }
  const Value* lookup(const std::string& n) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
      auto it = f->find(n);
      if (it != f->end()) return &it->second;
    }
    return nullptr;
  }
  void assign(const std::vector<std::string>& targets, const Value& v) {
    auto& frame = frames_.back();
    if (targets.size() == 1) {
      frame[targets[0]] = v;
      return;
    }
    const ValueList items = unpack(v, targets.size());
    for (size_t k = 0; k < targets.size(); ++k) frame[targets[k]] = items[k];
  }
  ValueList unpack(const Value& v, size_t n) {
    ValueList items = iterate(v);
    if (items.size() != n)
      fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(n) + " names");
    return items;
  }
  // The items a for loop sees: a string's characters, a dict's keys; Undefined is empty.
  ValueList iterate(const Value& v) {
    if (v.kind == Kind::List) return *v.list;
    return *items_of(v);
  }
  std::shared_ptr<const ValueList> items_of(const Value& v) {
    if (v.kind == Kind::List) return v.list;
    return std::make_shared<const ValueList>(make_items(v));
  }
  ValueList make_items(const Value& v) {
    switch (v.kind) {
      case Kind::Undefined: return {};
      case Kind::Dict: {
        ValueList keys;
        for (auto& [k, x] : v.dict->items) keys.push_back(k);
        charge(keys.size() * sizeof(Value));
        return keys;
      }
      case Kind::Str: {
        ValueList chars;
        const std::vector<size_t> st = cp_starts(*v.s);
        for (size_t k = 0; k + 1 < st.size(); ++k) chars.push_back(str(v.s->substr(st[k], st[k + 1] - st[k])));
        charge(chars.size() * sizeof(Value));
        return chars;
      }
      default: fail("'" + type_name(v) + "' object is not iterable");
    }
  }

  Flow loop(const Stmt& s) {
    const Value seq = eval(*s.expr);
    line = s.line;
    std::shared_ptr<const ValueList> items = items_of(seq);
    if (s.cond) {  // `for x in xs if c`: filtered first, so loop.length counts what is left
      ValueList kept;
      for (auto& x : *items) {
        count_iteration();
        frames_.emplace_back();
        bind(s.targets, x);
        if (truthy(eval(*s.cond))) kept.push_back(x);
        frames_.pop_back();
      }
      items = std::make_shared<const ValueList>(std::move(kept));
    }
    if (items->empty()) return exec(s.else_body);
    auto state = std::make_shared<LoopData>();
    state->items = items;
    Value lv;
    lv.kind = Kind::Loop;
    lv.loop = state;
    frames_.emplace_back();
    for (size_t k = 0; k < items->size(); ++k) {
      count_iteration();
      state->index0 = k;
      // Each iteration its own scope: a set inside does not outlive it (the frame is emptied
      // only when the body set names, to spare the allocations).
      if (frames_.back().size() > s.targets.size() + 1) frames_.back().clear();
      bind(s.targets, (*items)[k]);
      frames_.back()["loop"] = lv;
      const Flow f = exec(s.body);
      if (f == Flow::Break) break;
    }
    frames_.pop_back();
    return Flow::Next;
  }
  void count_iteration() {
    if (++iterations_ > kMaxIterations) fail("more than " + std::to_string(kMaxIterations) + " loop iterations");
  }
  void bind(const std::vector<std::string>& targets, const Value& item) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = item;
      return;
    }
    const ValueList parts = unpack(item, targets.size());
    for (size_t k = 0; k < targets.size(); ++k) frames_.back()[targets[k]] = parts[k];
  }

  // ---- expressions
  Value eval(const Expr& e) {
    step();
    switch (e.op) {
      case Op::Const: return e.value;
      case Op::Name: {
        const Value* v = lookup(e.name);
        return v ? *v : undefined("'" + e.name + "' is undefined");
      }
      case Op::List:
      case Op::Tuple: {
        ValueList items;
        for (auto& a : e.args) items.push_back(eval(*a));
        line = e.line;
        return list(std::move(items), e.op == Op::Tuple);
      }
      case Op::Dict: {
        std::vector<std::pair<Value, Value>> items;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) items.emplace_back(eval(*e.args[k]), eval(*e.args[k + 1]));
        line = e.line;
        return dict(std::move(items));
      }
      case Op::Attr: {
        const Value obj = eval(*e.args[0]);
        line = e.line;
        return getattr(obj, e.name);
      }
      case Op::Item: {
        const Value obj = eval(*e.args[0]);
        const Value key = eval(*e.args[1]);
        line = e.line;
        return getitem(obj, key);
      }
      case Op::Slice: return slice(e);
      case Op::Call: return call(e);
      case Op::Filter: return filter(e);
      case Op::Test: return boolean(test(e));
      case Op::Neg:
      case Op::Pos: {
        const Value v = eval(*e.args[0]);
        line = e.line;
        if (v.kind == Kind::Undefined) fail_undefined(v);
        if (v.kind == Kind::Float) return real(e.op == Op::Neg ? -v.f : v.f);
        if (!is_intlike(v)) fail(std::string("bad operand type for unary ") + (e.op == Op::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
        if (e.op == Op::Pos) return integer(as_int(v));
        if (as_int(v) == INT64_MIN) fail("integer overflow (beyond 64 bits)");
        return integer(-as_int(v));
      }
      case Op::Not: return boolean(!truthy(eval(*e.args[0])));
      case Op::And: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? eval(*e.args[1]) : l;
      }
      case Op::Or: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? l : eval(*e.args[1]);
      }
      case Op::Cond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : undefined("the inline if has no else");
      case Op::Bin: {
        const Value a = eval(*e.args[0]);
        const Value b = eval(*e.args[1]);
        line = e.line;
        return binop(e.bin, a, b);
      }
      case Op::Compare: {
        Value a = eval(*e.args[0]);
        for (size_t k = 0; k < e.cmps.size(); ++k) {
          Value b = eval(*e.args[k + 1]);
          line = e.line;
          bool r = false;
          switch (e.cmps[k]) {
            case Cmp::Eq: r = equals(a, b); break;
            case Cmp::Ne: r = !equals(a, b); break;
            case Cmp::Lt: r = compare(a, b, "<") < 0; break;
            case Cmp::Le: r = compare(a, b, "<=") <= 0; break;
            case Cmp::Gt: r = compare(a, b, ">") > 0; break;
            case Cmp::Ge: r = compare(a, b, ">=") >= 0; break;
            case Cmp::In: r = contains(b, a); break;
            case Cmp::NotIn: r = !contains(b, a); break;
          }
          if (!r) return boolean(false);
          a = std::move(b);
        }
        return boolean(true);
      }
    }
    fail("unknown expression");
  }

  bool contains(const Value& c, const Value& x) {
    switch (c.kind) {
      case Kind::Undefined: return false;
      case Kind::Str:
        if (x.kind != Kind::Str) fail("'in <string>' requires string as left operand, not " + type_name(x));
        return Finder(*x.s).find(*c.s, 0) != std::string::npos;
      case Kind::List:
        for (auto& y : *c.list)
          if (equals(x, y)) return true;
        return false;
      case Kind::Dict: return c.dict->index.count(key_of(x)) > 0;
      default: fail("argument of type '" + type_name(c) + "' is not iterable");
    }
  }

  Value getattr(const Value& obj, const std::string& n) {
    static const char* const kStrMethods[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "split", "upper", "lower",
                                              "replace", "title", "capitalize", "join", "find", "count"};
    static const char* const kDictMethods[] = {"get", "items", "keys", "values"};
    auto in = [&](const auto& names) -> const char* {
      for (const char* m : names)
        if (n == m) return m;
      return nullptr;
    };
    switch (obj.kind) {
      case Kind::Undefined: fail_undefined(obj);
      case Kind::Str:
        if (const char* m = in(kStrMethods)) return method(obj, m);
        break;
      case Kind::Dict: {
        if (const char* m = in(kDictMethods)) return method(obj, m);
        Value k;
        k.kind = Kind::Str;
        k.s = std::make_shared<const std::string>(n);
        auto it = obj.dict->index.find(key_of(k));
        if (it != obj.dict->index.end()) return obj.dict->items[it->second].second;
        break;
      }
      case Kind::Namespace:
        for (auto& [k, x] : obj.ns->attrs)
          if (k == n) return x;
        break;
      case Kind::Loop: {
        const LoopData& l = *obj.loop;
        const int64_t i0 = (int64_t)l.index0, len = (int64_t)l.items->size();
        if (n == "index0") return integer(i0);
        if (n == "index") return integer(i0 + 1);
        if (n == "revindex") return integer(len - i0);
        if (n == "revindex0") return integer(len - i0 - 1);
        if (n == "first") return boolean(i0 == 0);
        if (n == "last") return boolean(i0 == len - 1);
        if (n == "length") return integer(len);
        if (n == "depth") return integer(1);
        if (n == "depth0") return integer(0);
        if (n == "previtem") return i0 > 0 ? (*l.items)[size_t(i0 - 1)] : undefined("there is no previous item");
        if (n == "nextitem") return i0 + 1 < len ? (*l.items)[size_t(i0 + 1)] : undefined("there is no next item");
        if (n == "cycle") return method(obj, "cycle");
        break;
      }
      default: break;
    }
    return undefined("'" + type_name(obj) + " object' has no attribute '" + n + "'");
  }
  Value getitem(const Value& obj, const Value& key) {
    if (obj.kind == Kind::Undefined) fail_undefined(obj);
    if ((obj.kind == Kind::List || obj.kind == Kind::Str) && is_intlike(key)) {
      int64_t i = as_int(key);
      if (obj.kind == Kind::List) {
        const int64_t n = (int64_t)obj.list->size();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return undefined("'" + type_name(obj) + " object' has no element " + std::to_string(as_int(key)));
        return (*obj.list)[size_t(i)];
      }
      const std::vector<size_t> st = cp_starts(*obj.s);
      const int64_t n = (int64_t)st.size() - 1;
      if (i < 0) i += n;
      if (i < 0 || i >= n) return undefined("'str object' has no element " + std::to_string(as_int(key)));
      return str(obj.s->substr(st[size_t(i)], st[size_t(i) + 1] - st[size_t(i)]));
    }
    if (obj.kind == Kind::Dict) {
      const bool hashable = key.kind != Kind::List || key.tuple;
      if (hashable && key.kind != Kind::Dict && key.kind != Kind::Undefined && key.kind != Kind::Namespace &&
          key.kind != Kind::Loop && key.kind != Kind::Method) {
        auto it = obj.dict->index.find(key_of(key));
        if (it != obj.dict->index.end()) return obj.dict->items[it->second].second;
      }
    }
    if (key.kind == Kind::Str) return getattr(obj, *key.s);
    return undefined("'" + type_name(obj) + " object' has no element " + to_str(key));
  }
  // Python's slice indices for a sequence of n items.
  Value slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    Value b[3];
    for (int k = 0; k < 3; ++k) b[k] = e.args[size_t(k) + 1] ? eval(*e.args[size_t(k) + 1]) : none();
    line = e.line;
    for (auto& x : b)
      if (x.kind != Kind::None && !is_intlike(x)) fail("slice indices must be integers or none, not " + type_name(x));
    if (obj.kind == Kind::Undefined) fail_undefined(obj);
    if (obj.kind != Kind::List && obj.kind != Kind::Str) fail("'" + type_name(obj) + "' object cannot be sliced");
    std::vector<size_t> st;
    int64_t n;
    if (obj.kind == Kind::Str) {
      st = cp_starts(*obj.s);
      n = (int64_t)st.size() - 1;
    } else {
      n = (int64_t)obj.list->size();
    }
    const int64_t stepv = b[2].kind == Kind::None ? 1 : as_int(b[2]);
    if (stepv == 0) fail("slice step cannot be zero");
    auto bound = [&](const Value& x, int64_t def) {
      if (x.kind == Kind::None) return def;
      int64_t i = as_int(x);
      if (i < 0) i += n;
      if (stepv > 0) return std::clamp<int64_t>(i, 0, n);
      return std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t start = bound(b[0], stepv > 0 ? 0 : n - 1), stop = bound(b[1], stepv > 0 ? n : -1);
    std::vector<int64_t> idx;
    for (int64_t i = start; stepv > 0 ? i < stop : i > stop; i += stepv) idx.push_back(i);
    if (obj.kind == Kind::Str) {
      std::string s;
      for (int64_t i : idx) s.append(*obj.s, st[size_t(i)], st[size_t(i) + 1] - st[size_t(i)]);
      return str(std::move(s));
    }
    ValueList items;
    for (int64_t i : idx) items.push_back((*obj.list)[size_t(i)]);
    return list(std::move(items), obj.tuple);
  }

  Value binop(Bin op, const Value& a, const Value& b) {
    if (a.kind == Kind::Undefined && op != Bin::Concat) fail_undefined(a);
    if (b.kind == Kind::Undefined && op != Bin::Concat) fail_undefined(b);
    const char* sym[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    auto unsupported = [&]() -> Value {
      if (op == Bin::Add && a.kind == Kind::Str)
        fail("can only concatenate str (not \"" + type_name(b) + "\") to str");
      fail(std::string("unsupported operand type(s) for ") + sym[int(op)] + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
    };
    if (op == Bin::Concat) return str(to_str(a) + to_str(b));
    if (is_num(a) && is_num(b)) {
      const bool fl = a.kind == Kind::Float || b.kind == Kind::Float;
      if (op == Bin::Div) {
        if (as_double(b) == 0) fail("division by zero");
        return real(as_double(a) / as_double(b));
      }
      if (fl) {
        const double x = as_double(a), y = as_double(b);
        switch (op) {
          case Bin::Add: return real(x + y);
          case Bin::Sub: return real(x - y);
          case Bin::Mul: return real(x * y);
          case Bin::FloorDiv:
            if (y == 0) fail("float floor division by zero");
            return real(std::floor(x / y));
          case Bin::Mod: {
            if (y == 0) fail("float modulo by zero");
            double r = std::fmod(x, y);
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            return real(r);
          }
          case Bin::Pow: return real(std::pow(x, y));
          default: break;
        }
      }
      const int64_t x = as_int(a), y = as_int(b);
      int64_t r = 0;
      bool over = false;
      switch (op) {
        case Bin::Add: over = __builtin_add_overflow(x, y, &r); break;
        case Bin::Sub: over = __builtin_sub_overflow(x, y, &r); break;
        case Bin::Mul: over = __builtin_mul_overflow(x, y, &r); break;
        case Bin::FloorDiv:
        case Bin::Mod: {
          if (y == 0) fail("integer division or modulo by zero");
          if (x == INT64_MIN && y == -1) fail("integer overflow (beyond 64 bits)");
          int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) {
            --q;
            m += y;
          }
          return integer(op == Bin::FloorDiv ? q : m);
        }
        case Bin::Pow: {
          if (y < 0) return real(std::pow((double)x, (double)y));
          r = 1;
          int64_t base = x;
          for (int64_t e = y; e > 0 && !over; e >>= 1) {
            if (e & 1) over = __builtin_mul_overflow(r, base, &r);
            if (e > 1 && !over) over = __builtin_mul_overflow(base, base, &base);
          }
          break;
        }
        default: break;
      }
      if (over) fail("integer overflow (beyond 64 bits)");
      return integer(r);
    }
    if (op == Bin::Add && a.kind == Kind::Str && b.kind == Kind::Str) {
      if (a.s->size() + b.s->size() > kMaxString) check_size(std::string(kMaxString + 1, ' '));
      return str(*a.s + *b.s);
    }
    if (op == Bin::Add && a.kind == Kind::List && b.kind == Kind::List && a.tuple == b.tuple) {
      can_hold(a.list->size() + b.list->size());
      ValueList items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return list(std::move(items), a.tuple);
    }
    if (op == Bin::Mul && (((a.kind == Kind::Str || a.kind == Kind::List) && is_intlike(b)) ||
                           ((b.kind == Kind::Str || b.kind == Kind::List) && is_intlike(a)))) {
      const Value& seq = is_intlike(b) ? a : b;
      const int64_t times = std::max<int64_t>(0, as_int(is_intlike(b) ? b : a));
      if (seq.kind == Kind::Str) {
        if (!seq.s->empty() && (uint64_t)times > kMaxString / seq.s->size()) fail("a string or the output would be larger than 64 MiB");
        std::string s;
        s.reserve(seq.s->size() * size_t(times));
        if (times > 0) s = *seq.s;
        while (s.size() * 2 <= seq.s->size() * size_t(times)) s += s;
        s.append(s, 0, seq.s->size() * size_t(times) - s.size());
        return str(std::move(s));
      }
      if (!seq.list->empty() && (uint64_t)times > (uint64_t)kMaxLive / sizeof(Value) / seq.list->size())
        fail("the template holds more than 512 MiB of strings and lists");
      ValueList items;
      for (int64_t k = 0; k < times; ++k) items.insert(items.end(), seq.list->begin(), seq.list->end());
      return list(std::move(items), seq.tuple);
    }
    if (op == Bin::Mod && a.kind == Kind::Str) fail("string formatting with % is outside the supported subset");
    return unsupported();
  }

  // ---- calls: methods, the globals
  struct Args {
    ValueList pos;
    std::vector<std::pair<std::string, Value>> kw;
    std::string what;  // "the filter 'x'" and the like, for errors
    // Positional k, or keyword `name`, or `def` when neither.
    const Value* get(size_t k, const char* name) const {
      if (k < pos.size()) return &pos[k];
      for (auto& [n, v] : kw)
        if (n == name) return &v;
      return nullptr;
    }
    void at_most(size_t n, std::initializer_list<const char*> names) const {
      if (pos.size() > n) fail(what + " takes at most " + std::to_string(n) + " arguments");
      for (const auto& arg : kw)  // (clang 14 cannot capture a structured binding)
        if (std::find_if(names.begin(), names.end(), [&](const char* x) { return arg.first == x; }) == names.end())
          fail(what + " has no argument '" + arg.first + "'");
    }
  };
  Args args(const Expr& e, size_t from, std::string what) {
    Args a;
    for (size_t k = from; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k]));
    for (auto& [n, x] : e.kwargs) a.kw.emplace_back(n, eval(*x));
    line = e.line;
    a.what = std::move(what);
    return a;
  }
  const std::string& need_str(const Value* v, const Args& a, const char* arg) {
    if (!v || v->kind != Kind::Str) fail(a.what + ": " + arg + " must be a string");
    return *v->s;
  }
  int64_t need_int(const Value* v, const Args& a, const char* arg) {
    if (!v || !is_intlike(*v)) fail(a.what + ": " + arg + " must be an integer");
    return as_int(*v);
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.op == Op::Name && !lookup(callee.name)) {
      Args a = args(e, 1, callee.name + "()");
      return builtin(callee.name, a);
    }
    const Value f = eval(callee);
    line = e.line;
    if (f.kind == Kind::Undefined) {
      if (callee.op == Op::Attr) fail("unknown method '" + callee.name + "' (" + (f.s ? *f.s : "") + ")");
      fail_undefined(f);
    }
    if (f.kind != Kind::Method) fail("'" + type_name(f) + "' object is not callable");
    Args a = args(e, 1, "the method " + *f.s + "()");
    return call_method(*f.self, *f.s, a);
  }

  Value builtin(const std::string& n, const Args& a) {
    if (n == "raise_exception") {
      a.at_most(1, {});
      throw Failure{"raise_exception: " + (a.pos.empty() ? std::string() : to_str(a.pos[0]))};
    }
    if (n == "range") {
      a.at_most(3, {});
      if (a.pos.empty()) fail("range() expects 1 to 3 integers");
      int64_t start = 0, stop, stepv = 1;
      if (a.pos.size() == 1) {
        stop = need_int(&a.pos[0], a, "stop");
      } else {
        start = need_int(&a.pos[0], a, "start");
        stop = need_int(&a.pos[1], a, "stop");
        if (a.pos.size() == 3) stepv = need_int(&a.pos[2], a, "step");
      }
      if (stepv == 0) fail("range() arg 3 must not be zero");
      const long double len = stepv > 0 ? std::ceil((long double)(stop - (long double)start) / stepv)
                                        : std::ceil(((long double)start - stop) / -(long double)stepv);
      if (len > kMaxRange)
        fail("range too big: the sandbox blocks ranges larger than " + std::to_string(kMaxRange) + " (jinja2's MAX_RANGE)");
      ValueList items;
      items.reserve(size_t(std::max<long double>(len, 0)));
      for (int64_t i = start; stepv > 0 ? i < stop : i > stop; i += stepv) items.push_back(integer(i));
      return list(std::move(items));
    }
    if (n == "namespace" || n == "dict") {
      std::vector<std::pair<std::string, Value>> attrs;
      for (auto& p : a.pos) {
        if (p.kind != Kind::Dict) fail(n + "() takes keyword arguments or a dict");
        for (auto& [k, x] : p.dict->items) {
          if (k.kind != Kind::Str) fail(n + "(): keys must be strings");
          attrs.emplace_back(*k.s, x);
        }
      }
      for (auto& kv : a.kw) attrs.push_back(kv);
      if (n == "dict") {
        std::vector<std::pair<Value, Value>> items;
        for (auto& [k, x] : attrs) items.emplace_back(str(k), x);
        return dict(std::move(items));
      }
      Value v;
      v.kind = Kind::Namespace;
      v.ns = std::make_shared<NamespaceData>();
      for (auto& [k, x] : attrs) {
        storable(x);
        set_attr(*v.ns, k, x);
      }
      return v;
    }
    if (n == "strftime_now") {  // HF's global: the local time
      a.at_most(1, {});
      const std::string& fmt = need_str(a.get(0, "format"), a, "format");
      if (fmt.size() > 256) fail("strftime_now(): format longer than 256 bytes");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[4096];
      const size_t len = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
      return str(std::string(buf, len));
    }
    fail("unknown function '" + excerpt(n, 40) + "'");
  }

  Value call_method(const Value& self, const std::string& n, const Args& a) {
    if (self.kind == Kind::Loop) {  // cycle
      if (a.pos.empty()) fail("loop.cycle() needs at least one value");
      return a.pos[self.loop->index0 % a.pos.size()];
    }
    if (self.kind == Kind::Dict) {
      const DictData& d = *self.dict;
      if (n == "get") {
        a.at_most(2, {});
        if (a.pos.empty()) fail("get() expects a key");
        const Value& k = a.pos[0];
        auto it = d.index.find(key_of(k));
        if (it != d.index.end()) return d.items[it->second].second;
        return a.pos.size() > 1 ? a.pos[1] : none();
      }
      a.at_most(0, {});
      ValueList items;
      for (auto& [k, x] : d.items) {
        if (n == "keys") items.push_back(k);
        else if (n == "values") items.push_back(x);
        else items.push_back(list({k, x}, true));
      }
      return list(std::move(items));
    }
    const std::string& s = *self.s;  // a str method
    if (n == "strip" || n == "lstrip" || n == "rstrip") {
      a.at_most(1, {"chars"});
      const Value* c = a.get(0, "chars");
      const std::string* chars = c && c->kind != Kind::None ? &need_str(c, a, "chars") : nullptr;
      return str(py_strip(s, chars, n != "rstrip", n != "lstrip"));
    }
    if (n == "upper" || n == "lower") {
      a.at_most(0, {});
      return str(icu_case(s, n == "upper"));
    }
    if (n == "title" || n == "capitalize") {
      a.at_most(0, {});
      return str(py_title(s, n == "capitalize"));
    }
    if (n == "startswith" || n == "endswith") {
      a.at_most(1, {});
      const Value* p = a.get(0, "prefix");
      if (!p) fail(a.what + " expects a string or a tuple of strings");
      ValueList options = p->kind == Kind::List ? *p->list : ValueList{*p};
      for (auto& o : options) {
        const std::string& x = need_str(&o, a, "the prefix");
        if (x.size() <= s.size() && (n == "startswith" ? s.compare(0, x.size(), x) : s.compare(s.size() - x.size(), x.size(), x)) == 0)
          return boolean(true);
      }
      return boolean(false);
    }
    if (n == "split") {
      a.at_most(2, {"sep", "maxsplit"});
      const Value* sepv = a.get(0, "sep");
      const Value* maxv = a.get(1, "maxsplit");
      int64_t max = maxv ? need_int(maxv, a, "maxsplit") : -1;
      ValueList parts;
      if (!sepv || sepv->kind == Kind::None) {  // runs of whitespace, no empty parts
        size_t i = 0, k = 0;
        auto space_at = [&](size_t p) { return py_space(decode_at(s, p, k)); };
        for (;;) {
          while (i < s.size() && space_at(i)) i += k;
          if (i >= s.size()) break;
          if (max >= 0 && (int64_t)parts.size() == max) {
            parts.push_back(str(py_strip(s.substr(i), nullptr, false, true)));
            break;
          }
          size_t j = i;
          while (j < s.size() && !space_at(j)) j += k;
          parts.push_back(str(s.substr(i, j - i)));
          i = j;
        }
        return list(std::move(parts));
      }
      const std::string& sep = need_str(sepv, a, "sep");
      if (sep.empty()) fail("split(): empty separator");
      const Finder f(sep);
      size_t i = 0;
      for (size_t j; (max < 0 || (int64_t)parts.size() < max) && (j = f.find(s, i)) != std::string::npos; i = j + sep.size())
        parts.push_back(str(s.substr(i, j - i)));
      parts.push_back(str(s.substr(i)));
      return list(std::move(parts));
    }
    if (n == "replace") {
      a.at_most(3, {"count"});
      const Value* c = a.get(2, "count");
      return str(replace(s, need_str(a.get(0, "old"), a, "old"), need_str(a.get(1, "new"), a, "new"), c ? need_int(c, a, "count") : -1));
    }
    if (n == "join") {
      a.at_most(1, {});
      if (a.pos.empty()) fail("join() expects a sequence of strings");
      std::string r;
      const ValueList items = iterate(a.pos[0]);
      for (size_t k = 0; k < items.size(); ++k) {
        if (items[k].kind != Kind::Str) fail("join(): sequence item " + std::to_string(k) + ": expected str, got " + type_name(items[k]));
        if (k) r += s;
        r += *items[k].s;
        check_size(r);
      }
      return str(std::move(r));
    }
    if (n == "find" || n == "count") {
      a.at_most(1, {});
      const std::string& x = need_str(a.get(0, "sub"), a, "sub");
      const Finder f(x);
      if (n == "find") {
        const size_t at = f.find(s, 0);
        return integer(at == std::string::npos ? -1 : (int64_t)cp_count(std::string_view(s).substr(0, at)));
      }
      if (x.empty()) return integer((int64_t)cp_count(s) + 1);
      int64_t c = 0;
      for (size_t i = 0; (i = f.find(s, i)) != std::string::npos; i += x.size()) ++c;
      return integer(c);
    }
    fail("unknown method '" + n + "'");
  }
  std::string replace(const std::string& s, const std::string& old, const std::string& nw, int64_t count) {
    std::string r;
    if (old.empty()) {  // Python inserts `nw` around every character
      const std::vector<size_t> st = cp_starts(s);
      int64_t done = 0;
      for (size_t k = 0; k + 1 < st.size() || k == 0; ++k) {
        if (count < 0 || done < count) r += nw, ++done;
        if (k + 1 < st.size()) r.append(s, st[k], st[k + 1] - st[k]);
        check_size(r);
        if (k + 1 >= st.size()) break;
      }
      if (st.size() > 1 && (count < 0 || done < count)) r += nw;
      check_size(r);
      return r;
    }
    const Finder f(old);
    size_t i = 0;
    int64_t done = 0;
    for (size_t j; (count < 0 || done < count) && (j = f.find(s, i)) != std::string::npos; i = j + old.size(), ++done) {
      r.append(s, i, j - i);
      r += nw;
      check_size(r);
    }
    r.append(s, i, std::string::npos);
    check_size(r);
    return r;
  }

  // ---- filters and tests
  int64_t length(const Value& v) {
    switch (v.kind) {
      case Kind::Undefined: return 0;
      case Kind::Str: return (int64_t)cp_count(*v.s);
      case Kind::List: return (int64_t)v.list->size();
      case Kind::Dict: return (int64_t)v.dict->items.size();
      case Kind::Loop: return (int64_t)v.loop->items->size();
      default: fail("object of type '" + type_name(v) + "' has no len()");
    }
  }

  Value filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const std::string& n = e.name;
    const Args a = args(e, 1, "the filter '" + n + "'");
    if (n == "trim") {
      a.at_most(1, {"chars"});
      const Value* c = a.get(0, "chars");
      return str(py_strip(to_str(v), c && c->kind != Kind::None ? &need_str(c, a, "chars") : nullptr, true, true));
    }
    if (n == "length" || n == "count") return a.at_most(0, {}), integer(length(v));
    if (n == "first" || n == "last") {
      a.at_most(0, {});
      const ValueList items = iterate(v);
      if (items.empty()) return undefined("no " + n + " item, sequence was empty");
      return n == "first" ? items.front() : items.back();
    }
    if (n == "lower" || n == "upper") return a.at_most(0, {}), str(icu_case(to_str(v), n == "upper"));
    if (n == "capitalize") return a.at_most(0, {}), str(py_title(to_str(v), true));
    if (n == "title") {  // jinja2: words start after whitespace, '-', and opening brackets
      a.at_most(0, {});
      const std::string s = to_str(v);
      std::string r;
      bool start = true;
      for (size_t i = 0, k = 0; i < s.size(); i += k) {
        const char32_t c = decode_at(s, i, k);
        const bool sep = py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        if (sep) {
          append_cp(r, c);
          start = true;
        } else {
          r += icu_case(s.substr(i, k), start);
          start = false;
        }
      }
      return str(std::move(r));
    }
    if (n == "tojson") {
      a.at_most(1, {"indent", "ensure_ascii", "separators", "sort_keys"});
      JsonOptions o;
      if (const Value* x = a.get(0, "indent"); x && x->kind != Kind::None) {
        o.indent = (int)std::clamp<int64_t>(need_int(x, a, "indent"), 0, 64);
        o.item_sep = ",";
      }
      for (auto& [k, x] : a.kw) {
        if (k == "ensure_ascii") o.ensure_ascii = truthy(x);
        if (k == "sort_keys") o.sort_keys = truthy(x);
        if (k == "separators" && x.kind != Kind::None) {
          if (x.kind != Kind::List || x.list->size() != 2) fail(a.what + ": separators must be a pair of strings");
          o.item_sep = need_str(&(*x.list)[0], a, "separators");
          o.key_sep = need_str(&(*x.list)[1], a, "separators");
        }
      }
      std::string r;
      to_json(v, r, o, 0);
      return str(std::move(r));
    }
    if (n == "string" || n == "safe") return a.at_most(0, {}), v.kind == Kind::Str ? v : str(to_str(v));
    if (n == "int") {
      a.at_most(2, {"default", "base"});
      const Value* d = a.get(0, "default");
      const Value def = d ? *d : integer(0);
      if (is_intlike(v)) return integer(as_int(v));
      if (v.kind == Kind::Float) return std::isfinite(v.f) && std::fabs(v.f) < 9.2e18 ? integer((int64_t)v.f) : def;
      if (v.kind == Kind::Str) {
        const std::string t = py_strip(*v.s, nullptr, true, true);
        errno = 0;
        char* end = nullptr;
        const long long i = std::strtoll(t.c_str(), &end, 10);
        if (!t.empty() && end && *end == 0 && errno == 0) return integer(i);
        const double f = std::strtod(t.c_str(), &end);
        if (!t.empty() && end && *end == 0 && std::isfinite(f) && std::fabs(f) < 9.2e18) return integer((int64_t)f);
      }
      return def;
    }
    if (n == "float") {
      a.at_most(1, {"default"});
      const Value* d = a.get(0, "default");
      if (is_num(v)) return real(as_double(v));
      if (v.kind == Kind::Str) {
        const std::string t = py_strip(*v.s, nullptr, true, true);
        char* end = nullptr;
        const double f = std::strtod(t.c_str(), &end);
        if (!t.empty() && end && *end == 0) return real(f);
      }
      return d ? *d : real(0);
    }
    if (n == "join") {
      a.at_most(2, {"d", "attribute"});
      const Value* d = a.get(0, "d");
      const std::string sep = d ? to_str(*d) : "";
      const Value* attr = a.get(1, "attribute");
      std::string r;
      const ValueList items = iterate(v);
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) r += sep;
        r += to_str(attr ? getitem(items[k], *attr) : items[k]);
        check_size(r);
      }
      return str(std::move(r));
    }
    if (n == "default" || n == "d") {
      a.at_most(2, {"default_value", "boolean"});
      const Value* d = a.get(0, "default_value");
      const Value* b = a.get(1, "boolean");
      const bool use = v.kind == Kind::Undefined || (b && truthy(*b) && !truthy(v));
      return use ? (d ? *d : str("")) : v;
    }
    if (n == "replace") {
      a.at_most(3, {"old", "new", "count"});
      const Value* c = a.get(2, "count");
      return str(replace(to_str(v), need_str(a.get(0, "old"), a, "old"), need_str(a.get(1, "new"), a, "new"),
                         c && c->kind != Kind::None ? need_int(c, a, "count") : -1));
    }
    if (n == "list") return a.at_most(0, {}), list(iterate(v));
    if (n == "reverse") {
      a.at_most(0, {});
      if (v.kind == Kind::Str) {
        const std::vector<size_t> st = cp_starts(*v.s);
        std::string r;
        for (size_t k = st.size() - 1; k > 0; --k) r.append(*v.s, st[k - 1], st[k] - st[k - 1]);
        return str(std::move(r));
      }
      ValueList items = iterate(v);
      std::reverse(items.begin(), items.end());
      return list(std::move(items));
    }
    if (n == "items") {
      a.at_most(0, {});
      if (v.kind == Kind::Undefined) return list({});
      if (v.kind != Kind::Dict) fail(a.what + ": expected a mapping, got " + type_name(v));
      return call_method(v, "items", Args{{}, {}, a.what});
    }
    if (n == "abs") {
      a.at_most(0, {});
      if (v.kind == Kind::Float) return real(std::fabs(v.f));
      if (!is_intlike(v)) fail(a.what + ": bad operand type '" + type_name(v) + "'");
      if (as_int(v) == INT64_MIN) fail("integer overflow (beyond 64 bits)");
      return integer(std::llabs(as_int(v)));
    }
    if (n == "selectattr" || n == "rejectattr" || n == "map") {
      if (a.pos.empty() && !(n == "map" && a.get(99, "attribute"))) fail(a.what + " expects an attribute name");
      ValueList kept;
      for (const Value& x : iterate(v)) {
        if (n == "map") {
          if (const Value* attr = a.get(99, "attribute")) {
            Value r = attr_path(x, *attr);
            if (r.kind == Kind::Undefined)
              if (const Value* d = a.get(99, "default")) r = *d;
            kept.push_back(r);
          } else {
            kept.push_back(apply_filter(need_str(&a.pos[0], a, "the filter name"), x, a, 1));
          }
          continue;
        }
        const Value field = attr_path(x, a.pos[0]);
        bool ok = a.pos.size() < 2 ? truthy(field) : run_test(need_str(&a.pos[1], a, "the test name"), field, ValueList(a.pos.begin() + 2, a.pos.end()));
        if (ok == (n == "selectattr")) kept.push_back(x);
      }
      return list(std::move(kept));
    }
    fail("unknown filter '" + excerpt(n, 40) + "'");
  }
  // map('filter', args...): the simple filters on one value.
  Value apply_filter(const std::string& f, const Value& x, const Args& a, size_t from) {
    Expr e;
    e.op = Op::Filter;
    e.line = line;
    e.name = f;
    auto c = std::make_unique<Expr>();
    c->op = Op::Const;
    c->line = line;
    c->value = x;
    e.args.push_back(std::move(c));
    for (size_t k = from; k < a.pos.size(); ++k) {
      auto p = std::make_unique<Expr>();
      p->op = Op::Const;
      p->line = line;
      p->value = a.pos[k];
      e.args.push_back(std::move(p));
    }
    return filter(e);
  }
  // 'a.b' in selectattr/map: attributes, or items by integer for digits.
  Value attr_path(const Value& x, const Value& path) {
    if (is_intlike(path)) return getitem(x, path);
    const std::string p = to_str(path);
    Value cur = x;
    size_t i = 0;
    for (;;) {
      const size_t dot = p.find('.', i);
      const std::string part = p.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
      if (cur.kind == Kind::Undefined) return cur;
      if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) cur = getitem(cur, integer(std::atoll(part.c_str())));
      else cur = getitem(cur, str(part));
      if (dot == std::string::npos) return cur;
      i = dot + 1;
    }
  }

  bool test(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const Args a = args(e, 1, "the test '" + e.name + "'");
    if (!a.kw.empty()) fail(a.what + " takes no keyword arguments");
    return run_test(e.name, v, a.pos);
  }
  bool run_test(const std::string& n, const Value& v, const ValueList& p) {
    auto arg = [&]() -> const Value& {
      if (p.empty()) fail("the test '" + n + "' expects an argument");
      return p[0];
    };
    if (n == "defined") return v.kind != Kind::Undefined;
    if (n == "undefined") return v.kind == Kind::Undefined;
    if (n == "none") return v.kind == Kind::None;
    if (n == "string") return v.kind == Kind::Str;
    if (n == "mapping") return v.kind == Kind::Dict;
    if (n == "iterable") return v.kind == Kind::Str || v.kind == Kind::List || v.kind == Kind::Dict || v.kind == Kind::Undefined || v.kind == Kind::Loop;
    if (n == "sequence") return v.kind == Kind::Str || v.kind == Kind::List || v.kind == Kind::Dict || v.kind == Kind::Undefined;
    if (n == "number") return is_num(v);
    if (n == "integer") return v.kind == Kind::Int;
    if (n == "float") return v.kind == Kind::Float;
    if (n == "boolean") return v.kind == Kind::Bool;
    if (n == "true") return v.kind == Kind::Bool && v.b;
    if (n == "false") return v.kind == Kind::Bool && !v.b;
    if (n == "callable") return v.kind == Kind::Method;
    if (n == "odd" || n == "even") {
      if (!is_intlike(v)) fail("the test '" + n + "' expects an integer, got " + type_name(v));
      return (as_int(v) % 2 != 0) == (n == "odd");
    }
    if (n == "divisibleby") {
      const Value& d = arg();
      if (!is_intlike(v) || !is_intlike(d) || as_int(d) == 0) fail("the test 'divisibleby' expects integers, the divisor not 0");
      return as_int(v) % as_int(d) == 0;
    }
    if (n == "lower" || n == "upper") {
      const std::string s = to_str(v);
      return icu_case(s, n == "upper") == s;
    }
    if (n == "eq" || n == "equalto" || n == "==") return equals(v, arg());
    if (n == "ne" || n == "!=") return !equals(v, arg());
    if (n == "lt" || n == "lessthan" || n == "<") return compare(v, arg(), "<") < 0;
    if (n == "le" || n == "<=") return compare(v, arg(), "<=") <= 0;
    if (n == "gt" || n == "greaterthan" || n == ">") return compare(v, arg(), ">") > 0;
    if (n == "ge" || n == ">=") return compare(v, arg(), ">=") >= 0;
    if (n == "in") return contains(arg(), v);
    if (n == "sameas") {
      const Value& o = arg();
      if (v.kind != o.kind) return false;
      if (v.kind == Kind::None || v.kind == Kind::Undefined) return true;
      if (v.kind == Kind::Bool) return v.b == o.b;
      return equals(v, o) && (v.kind == Kind::Int || v.s == o.s || v.list == o.list || v.dict == o.dict || v.ns == o.ns);
    }
    fail("unknown test '" + excerpt(n, 40) + "'");
  }
};

}  // namespace

struct ChatTemplate::Impl {
  std::string where;
  Body body;
};

ChatTemplate::ChatTemplate(const std::string& source, const std::string& where) : impl_(std::make_unique<Impl>()) {
  impl_->where = where;
  std::vector<Token> toks;
  try {
    toks = lex(source);  // its messages carry their line
  } catch (const Failure& f) {
    throw InputError(where, f.what);
  }
  Parser p(std::move(toks));
  try {
    impl_->body = p.parse();
  } catch (const Failure& f) {
    throw InputError(where, "line " + std::to_string(p.line()) + ": " + f.what);
  }
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const std::map<std::string, std::string>& specials) const {
  std::unordered_map<std::string, Value> globals;
  auto text = [](const std::string& s) {
    Value v;
    v.kind = Kind::Str;
    v.s = std::make_shared<const std::string>(s);
    return v;
  };
  auto msgs = std::make_shared<ValueList>();
  for (const ChatMessage& m : messages) {
    auto d = std::make_shared<DictData>();
    d->items = {{text("role"), text(m.role)}, {text("content"), text(m.content)}};
    d->index = {{"srole", 0}, {"scontent", 1}};
    Value v;
    v.kind = Kind::Dict;
    v.depth = 1;
    v.dict = std::move(d);
    msgs->push_back(std::move(v));
  }
  Value list;
  list.kind = Kind::List;
  list.depth = 2;
  list.list = std::move(msgs);
  globals["messages"] = std::move(list);
  globals["add_generation_prompt"] = boolean(add_generation_prompt);
  globals["tools"] = none();  // apply_chat_template passes tools=None and documents=None
  globals["documents"] = none();
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto it = specials.find(k);
    if (it != specials.end()) globals[k] = text(it->second);
  }
  Renderer r(std::move(globals));
  try {
    r.exec(impl_->body);
  } catch (const Failure& f) {
    throw InputError(impl_->where, "line " + std::to_string(r.line) + ": " + f.what);
  }
  return std::move(r.out);
}

std::optional<ChatTemplateConfig> read_chat_template_config(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json", file = dir + "/chat_template.jinja";
  struct stat st;
  // transformers saves the template in a file of its own since 4.x; that file takes priority
  const bool own_file = ::lstat(file.c_str(), &st) == 0;  // a FIFO or a link loop is read, and refused
  if (::lstat(path.c_str(), &st) != 0 && !own_file) return std::nullopt;
  ChatTemplateConfig c;
  if (own_file) {
    const std::vector<uint8_t> b = read_input_file(file, file);
    c.source.assign(b.begin(), b.end());
    c.where = file;
  }
  if (::lstat(path.c_str(), &st) != 0) return c;  // no special tokens
  const std::vector<uint8_t> b = read_input_file(path, path);
  const nlohmann::json j = parse_json_input(std::string(b.begin(), b.end()), path);
  const JsonField root(j, path, "");
  root.object();
  if (!own_file) {
    if (!root.has("chat_template")) return std::nullopt;
    const JsonField t = root.at("chat_template");
    if (t.json().is_string()) {
      c.source = t.str();
      c.where = t.where();
    } else if (t.json().is_array()) {
      for (size_t k = 0; k < t.size(); ++k) {
        const JsonField e = t[k];
        if (e.at("name").str() == "default") {
          c.source = e.at("template").str();
          c.where = e.at("template").where();
          break;
        }
      }
      if (c.where.empty()) t.fail("no template named \"default\" in the list");
    } else {
      t.fail("expected a string or a list of {\"name\", \"template\"} objects");
    }
  }
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!root.has(k)) continue;
    const JsonField f = root.at(k);
    if (f.json().is_string()) c.specials[k] = f.str();
    else if (f.json().is_object()) c.specials[k] = f.at("content").str();
    else f.fail("expected a string or an object with \"content\"");
  }
  return c;
}

}  // namespace zf::tok
