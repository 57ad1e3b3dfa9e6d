// tokenizer.json: the whole input as the file (parse_json_input, the BPE model, the added tokens,
// the normalizer, pre-tokenizer and decoder), then, when it loads, an encode of a short text with
// special tokens, Unicode and whitespace runs and a decode of the ids.
#include <string>

#include "models/tokenizer/tokenizer.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zf::fuzz::scratch("tokenizer.json");
  zf::fuzz::write(path, data, size);
  return zf::fuzz::expect_input_errors_only([&] {
    const auto tok = zf::tok::load_tokenizer_json(path);
    const std::string text = "Hello  world<|end_of_text|> 's\u00a0caf\u00e9 \u5929\u5730 12345\n\n\t x";
    const std::vector<uint32_t> ids = tok->encode(text);
    (void)tok->decode(ids, false);
    (void)tok->decode(ids, true);
  });
}
