// The DeepSpeed importer: input = a DeepSpeed config (JSON); its patch is applied to the default
// spec and parsed, as load_spec does with --deepspeed.
#include <string>
#include <vector>

#include "graphs/schema/spec.hpp"
#include "runtime/json_input.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return zf::fuzz::expect_input_errors_only([&] {
    nlohmann::json ds = zf::parse_json_input(text, "ds.json");
    std::vector<std::string> notes;
    for (int ranks : {1, 2}) {
      nlohmann::json patch = zf::deepspeed_patch(ds, "ds.json", &notes, ranks);
      nlohmann::json spec = nlohmann::json::object();
      for (auto& [k, v] : patch.items()) spec[k] = v;
      (void)zf::parse_spec(spec, "spec.json").to_json().dump();
    }
  });
}
