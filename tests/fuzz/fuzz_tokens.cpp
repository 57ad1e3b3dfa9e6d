// Token files (models/data/tokens.hpp): the first byte picks the path's ending (bit 0: ".u32.bin", raw
// uint32 without a header) and the vocabulary (bits 1-2: 256, 50257, 65536, 128256); the minimum
// token count is 1 + the byte's bits 3-7; the rest of the input is the file.
#include <string>

#include "models/data/tokens.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t f = data[0];
  const std::string path = zf::fuzz::scratch((f & 1) ? "tokens.u32.bin" : "tokens.bin");
  zf::fuzz::write(path, data + 1, size - 1);
  const int64_t vocabs[] = {256, 50257, 65536, 128256};
  return zf::fuzz::expect_input_errors_only([&] {
    const zf::TokenFile t = zf::load_token_file(path, "fuzz: data.path", vocabs[(f >> 1) & 3], 1 + (f >> 3));
    for (int64_t i = 0; i < t.size(); ++i)  // every id read is below the vocabulary
      if (t.at(i) >= (uint32_t)vocabs[(f >> 1) & 3]) __builtin_trap();
  });
}
