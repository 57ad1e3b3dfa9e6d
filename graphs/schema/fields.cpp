#include "graphs/schema/fields.hpp"

#include <sstream>

#include "runtime/error.hpp"
#include "runtime/json_input.hpp"

namespace zf {

using json = nlohmann::json;

Fields::Fields(const json& j, std::string path, const std::string& source)
    : j_(j), path_(std::move(path)), source_(source) {
  if (!j.is_object()) fail(path_.empty() ? "(top level)" : path_, "expected an object, got " + json_type_name(j));
}

void Fields::fail(const std::string& field, const std::string& what) const {
  throw InputError(source_ + ": " + field, what);
}

const json* Fields::find(const std::string& key) {
  seen_.insert(key);
  auto it = j_.find(key);
  return it == j_.end() ? nullptr : &*it;
}

void Fields::str(const std::string& key, std::string& out, const std::vector<std::string>& allowed) {
  if (auto* v = find(key)) {
    if (!v->is_string()) fail(at(key), "expected a string, got " + json_type_name(*v));
    out = v->get<std::string>();
  }
  if (allowed.empty()) return;
  std::string list;
  for (const std::string& a : allowed) {
    if (out == a) return;
    list += (list.empty() ? "" : ", ") + a;
  }
  fail(at(key), "'" + out + "' is not one of: " + list);
}

void Fields::integer(const std::string& key, int64_t& out, int64_t lo, int64_t hi) {
  if (auto* v = find(key)) {
    if (!v->is_number_integer()) fail(at(key), "expected an integer, got " + json_type_name(*v));
    if (v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT64_MAX)
      fail(at(key), v->dump() + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    int64_t x = v->get<int64_t>();
    if (x < lo || x > hi)
      fail(at(key), std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    out = x;
  }
}

void Fields::number(const std::string& key, double& out, double lo, double hi, bool open_lo) {
  if (auto* v = find(key)) {
    if (!v->is_number()) fail(at(key), "expected a number, got " + json_type_name(*v));
    double x = v->get<double>();
    if (!(x >= lo && x <= hi) || (open_lo && x == lo)) {
      std::ostringstream os;
      os << x << " is outside " << (open_lo ? "(" : "[") << lo << ", " << hi << "]";
      fail(at(key), os.str());
    }
    out = x;
  }
}

void Fields::boolean(const std::string& key, bool& out) {
  if (auto* v = find(key)) {
    if (!v->is_boolean()) fail(at(key), "expected true or false, got " + json_type_name(*v));
    out = v->get<bool>();
  }
}

const json* Fields::object(const std::string& key) {
  const json* v = find(key);
  if (v && !v->is_object()) fail(at(key), "expected an object, got " + json_type_name(*v));
  return v;
}

void Fields::finish() const {
  for (auto& [k, v] : j_.items())
    if (!seen_.count(k)) {
      std::string known;
      for (auto& s : seen_) known += (known.empty() ? "" : ", ") + s;
      fail(at(k), "unknown key (known here: " + known + ")");
    }
}

}  // namespace zf
