// JSON from user files (specs, DeepSpeed configs, safetensors headers): every error is an
// InputError naming the file and the field being read (a number out of double's range such as
// 1e400, a syntax error, nesting deeper than max_depth), and no error message echoes more than
// a short excerpt of the input (an unterminated 100 MB string is not repeated back). A NUL byte
// anywhere is invalid JSON (nlohmann's parser alone would end the input there).
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace zf {

// Parses `text`; `source` (a file name) prefixes every error.
nlohmann::json parse_json_input(const std::string& text, const std::string& source, size_t max_depth = 256);

// `s` cut to at most `max` characters ("..." and the full length appended when cut).
std::string excerpt(const std::string& s, size_t max = 80);

// "a string", "an array", "a number with a fraction", ...: the kind of a JSON value, for messages.
std::string json_type_name(const nlohmann::json& v);

}  // namespace zf
