// A bound on JSON nesting, checked on the text before it is parsed. nlohmann::json's dump(),
// comparison and copy recurse once per level, so a 100k-deep document from a file (a checkpoint's
// spec, a safetensors header) would overflow the stack; the scan is linear and needs no stack.
#pragma once
#include <string_view>

namespace zf {

// The deepest nesting of arrays and objects in `text` (brackets inside strings do not count).
// Stops counting at `cap` + 1: callers only compare against their limit.
inline int json_nesting_depth(std::string_view text, int cap = 1 << 20) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > cap) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace zf
