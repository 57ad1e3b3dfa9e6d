#include "runtime/json_input.hpp"

#include <algorithm>
#include <vector>

#include "runtime/error.hpp"

namespace zf {

std::string json_type_name(const nlohmann::json& v) {
  using json = nlohmann::json;
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number with a fraction";
    default: return "a number";
  }
}

std::string excerpt(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  return s.substr(0, max) + "... (" + std::to_string(s.size()) + " characters)";
}

namespace {

using json = nlohmann::json;

// nlohmann's DOM builder, plus the path of the value being read (for error messages) and a
// depth limit (deeply nested input would later overflow the stack of recursive dump()/compare).
class PathSax {
 public:
  PathSax(json& out, const std::string& source, size_t max_depth, size_t nul_at)
      : dom_(out, true), source_(source), max_depth_(max_depth), nul_at_(nul_at) {}

  bool null() { return done(dom_.null()); }
  bool boolean(bool v) { return done(dom_.boolean(v)); }
  bool number_integer(json::number_integer_t v) { return done(dom_.number_integer(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return done(dom_.number_unsigned(v)); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return done(dom_.number_float(v, s)); }
  bool string(json::string_t& v) { return done(dom_.string(v)); }
  bool binary(json::binary_t& v) { return done(dom_.binary(v)); }
  bool start_object(std::size_t n) {
    push(true);
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    stack_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() {
    stack_.pop_back();
    return done(dom_.end_object());
  }
  bool start_array(std::size_t n) {
    push(false);
    return dom_.start_array(n);
  }
  bool end_array() {
    stack_.pop_back();
    return done(dom_.end_array());
  }
  bool parse_error(std::size_t position, const std::string& last_token, const nlohmann::detail::exception& e) {
    std::string what;
    if (e.id == 406)  // out_of_range: a number that overflows a double (1e400)
      what = "number " + excerpt(last_token) + " is out of range (beyond a double's +-1.8e308)";
    else if (position > nul_at_)  // the parser stopped at the first NUL (read as \x01, below)
      what = "not valid JSON at byte " + std::to_string(nul_at_) +
             ": a NUL byte (JSON text has none; inside a string it is written \\u0000)";
    else
      what = "not valid JSON at byte " + std::to_string(position) + ": " + excerpt(message(e.what()), 160) +
             (last_token.empty() ? "" : " (near '" + excerpt(last_token, 40) + "')");
    throw InputError(where(), what);
  }

 private:
  struct Level {
    bool object;
    std::string key;
    size_t index = 0;  // arrays: the element being read
  };
  // nlohmann's message without its "[json.exception...] " prefix and its own (unbounded) echo of
  // the last token, which we append cut to size.
  static std::string message(const std::string& m) {
    std::string r = m;
    if (auto p = r.find("] "); p != std::string::npos && r.rfind("[json.exception", 0) == 0) r = r.substr(p + 2);
    if (auto p = r.find("; last read: "); p != std::string::npos) r = r.substr(0, p);
    return r;
  }
  void push(bool object) {
    if (stack_.size() >= max_depth_)
      throw InputError(where(), "nested deeper than " + std::to_string(max_depth_) + " levels");
    stack_.push_back({object, "", 0});
  }
  bool done(bool ok) {  // a value ended: the enclosing array moves to its next element
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().index;
    return ok;
  }
  std::string where() const {
    std::string p;
    for (const Level& l : stack_) {
      if (l.object) {
        if (l.key.empty()) break;
        p += (p.empty() ? "" : ".") + excerpt(l.key, 40);
      } else {
        p += "[" + std::to_string(l.index) + "]";
      }
    }
    return p.empty() ? source_ : source_ + ": " + p;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  const std::string& source_;
  size_t max_depth_;
  size_t nul_at_;  // the first NUL byte of the text, npos if none
  std::vector<Level> stack_;
};

}  // namespace

json parse_json_input(const std::string& text, const std::string& source, size_t max_depth) {
  json out;
  // nlohmann's lexer takes a NUL byte for the end of the input: "{...}\0garbage" would parse as
  // "{...}" and a JSONL line "{a}\0{b}" lose {b}. A NUL is valid nowhere in JSON text, so it is
  // read as \x01, which is invalid everywhere too (a control character in a string, no token
  // outside one): the parse fails there, with the path of the value being read.
  const size_t nul = text.find('\0');
  PathSax sax(out, source, max_depth, nul);
  if (nul == std::string::npos) {
    json::sax_parse(text, &sax);
  } else {
    std::string copy = text;
    std::replace(copy.begin() + (std::ptrdiff_t)nul, copy.end(), '\0', '\x01');
    json::sax_parse(copy, &sax);
    throw InputError(source, "not valid JSON at byte " + std::to_string(nul) + ": a NUL byte");  // not reached
  }
  return out;
}

}  // namespace zf
