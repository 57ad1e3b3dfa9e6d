// A Hugging Face config.json (models/hf/config.hpp): input = the file's text, parsed, then the
// tensor list it implies and a few checkpoint names matched against it (models/hf/tensors.hpp).
#include <string>

#include "models/hf/config.hpp"
#include "models/hf/tensors.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return zf::fuzz::expect_input_errors_only([&] {
    const zf::hf::Config c = zf::hf::parse_config(text, "config.json");
    const auto ts = zf::hf::expected_tensors(c);
    size_t total = 0;
    for (const auto& t : ts) total += t.numel();
    (void)total;
    for (const char* n : {"lm_head.weight", "h.0.attn.bias", "layers.0.mlp.up_proj.weight", "model.norm.weight"})
      (void)zf::hf::match_name(c, ts, n);
  });
}
