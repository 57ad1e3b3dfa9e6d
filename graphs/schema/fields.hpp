// Reading one JSON object of a spec: typed, range-checked reads of its keys, and finish(), which
// refuses the keys nobody asked for. Every message names the file and the field path (style.md,
// Errors). Internal to graphs/schema (the field table, the LR schedule, the DeepSpeed translator).
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/json_input.hpp"  // json_type_name

namespace zf {


class Fields {
 public:
  using json = nlohmann::json;
  Fields(const json& j, std::string path, const std::string& source);
  std::string at(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& source() const { return source_; }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const;
  const json* find(const std::string& key);
  // `allowed` empty: any string
  void str(const std::string& key, std::string& out, const std::vector<std::string>& allowed = {});
  void integer(const std::string& key, int64_t& out, int64_t lo, int64_t hi);
  template <class I>
  void integer(const std::string& key, I& out, int64_t lo, int64_t hi) {
    int64_t x = (int64_t)out;
    integer(key, x, lo, hi);
    out = (I)x;
  }
  void number(const std::string& key, double& out, double lo, double hi, bool open_lo = false);
  void boolean(const std::string& key, bool& out);
  const json* object(const std::string& key);
  void finish() const;

 private:
  const json& j_;
  std::string path_;
  const std::string& source_;
  std::set<std::string> seen_;
};

}  // namespace zf
