// Reading tokenizer.json and config.json: a JSON value with its field path, so that every error
// names the file, the field and what was expected (zf::InputError, zenflow-run's exit 2).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/error.hpp"

namespace zf::tok {

class JsonField {
 public:
  JsonField(const nlohmann::json& j, std::string file, std::string path)
      : j_(&j), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& json() const { return *j_; }
  const std::string& path() const { return path_; }
  // "FILE: PATH", as errors name the value
  std::string where() const { return file_ + ": " + (path_.empty() ? "(top level)" : path_); }
  [[noreturn]] void fail(const std::string& what) const { throw InputError(where(), what); }
  bool is_null() const { return j_->is_null(); }
  bool has(const char* key) const { return j_->is_object() && j_->contains(key) && !(*j_)[key].is_null(); }
  // A member that must be there (not null).
  JsonField at(const char* key) const {
    if (!j_->is_object()) fail("expected an object");
    auto it = j_->find(key);
    const std::string p = path_.empty() ? key : path_ + "." + key;
    if (it == j_->end() || it->is_null()) JsonField(*j_, file_, p).fail("missing (required)");
    return JsonField(*it, file_, p);
  }
  // A value inside this one, its path this one's and `suffix` ("[3]", ".name", "[\"key\"]").
  JsonField child(const nlohmann::json& v, const std::string& suffix) const { return JsonField(v, file_, path_ + suffix); }
  JsonField operator[](size_t i) const { return JsonField((*j_)[i], file_, path_ + "[" + std::to_string(i) + "]"); }
  size_t size() const { return j_->size(); }
  const nlohmann::json& array() const {
    if (!j_->is_array()) fail("expected an array");
    return *j_;
  }
  const nlohmann::json& object() const {
    if (!j_->is_object()) fail("expected an object");
    return *j_;
  }
  std::string str() const {
    if (!j_->is_string()) fail("expected a string");
    return j_->get<std::string>();
  }
  bool boolean() const {
    if (!j_->is_boolean()) fail("expected true or false");
    return j_->get<bool>();
  }
  uint32_t u32() const {
    if (!j_->is_number_unsigned() || j_->get<uint64_t>() > UINT32_MAX) fail("expected an integer in [0, 4294967295]");
    return static_cast<uint32_t>(j_->get<uint64_t>());
  }
  // Optional members with defaults (absent or null: the default).
  bool boolean_or(const char* key, bool def) const { return has(key) ? at(key).boolean() : def; }

 private:
  const nlohmann::json* j_;
  std::string file_, path_;
};

}  // namespace zf::tok
