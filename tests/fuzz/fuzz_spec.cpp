// The spec parser with --set overrides: input = spec JSON, then optionally a NUL byte and
// newline-separated FIELD.PATH=VALUE overrides (as zenflow-run's --set). load_spec's steps on
// memory: parse_json_input, apply_override, parse_spec; the effective spec is printed to JSON.
#include <string>
#include <vector>

#include "graphs/schema/spec.hpp"
#include "runtime/json_input.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string text = in.substr(0, nul);
  std::vector<std::string> sets;
  if (nul != std::string::npos) {
    size_t start = nul + 1;
    while (start <= in.size()) {
      size_t nl = in.find('\n', start);
      if (nl == std::string::npos) nl = in.size();
      if (nl > start) sets.push_back(in.substr(start, nl - start));
      start = nl + 1;
    }
  }
  return zf::fuzz::expect_input_errors_only([&] {
    nlohmann::json j = zf::parse_json_input(text, "fuzz.json");
    for (auto& s : sets) zf::apply_override(j, s, "fuzz.json");
    zf::Spec s = zf::parse_spec(j, "fuzz.json");
    (void)s.to_json().dump();
    (void)s.describe_lr();
    (void)s.lr_at(0);
    (void)s.lr_at(1000000);
  });
}
