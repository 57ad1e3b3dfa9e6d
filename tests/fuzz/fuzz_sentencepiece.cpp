// tokenizer.model (models/tokenizer/sentencepiece.cpp, sp_charsmap.hpp). The first byte picks what
// the rest is: even, a whole tokenizer.model; odd, the precompiled_charsmap of the normalizer
// (bit 1 clear) or the denormalizer (bit 1 set) appended to the KJV fixture model, so the fuzzer
// reaches the trie walk directly. Whatever loads is then used: an encode of a text with every byte
// value the trie may see, and a decode. libsentencepiece is not instrumented: a charsmap check
// that let a bad trie through shows as a SEGV there, or, for reads that stay in the heap, as
// ASan's report on the exact-size copy check_precompiled_charsmap walks here.
#include <fstream>
#include <iterator>
#include <string>

#include "models/tokenizer/sp_charsmap.hpp"
#include "models/tokenizer/tokenizer.hpp"
#include "tests/fuzz/fuzz_common.hpp"

namespace {
std::string varint(uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
  return out + static_cast<char>(v);
}
std::string field(uint32_t number, const std::string& bytes) {
  return varint(number << 3 | 2) + varint(bytes.size()) + bytes;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string fixture = [] {
    std::ifstream in(std::string(ZF_SOURCE_DIR) + "/tests/tokenizer/fixtures/sp-kjv/tokenizer.model", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  if (size < 1 || fixture.empty()) return 0;
  const uint8_t mode = data[0];
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string model = rest;
  if (mode & 1) {
    // the blob alone first, in an exact-size heap buffer (instrumented)
    zf::fuzz::expect_input_errors_only([&] { zf::tok::check_precompiled_charsmap(rest, "fuzz"); });
    model = fixture + field(mode & 2 ? 5 : 3, field(2, rest));
  }
  const std::string dir = zf::fuzz::scratch("sp");
  static bool made = std::system(("mkdir -p " + dir).c_str()) == 0;
  (void)made;
  zf::fuzz::write(dir + "/tokenizer.model", reinterpret_cast<const uint8_t*>(model.data()), model.size());
  return zf::fuzz::expect_input_errors_only([&] {
    const auto tok = zf::tok::load_tokenizer(dir);
    std::string text = "Hello  world 's\u00a0caf\u00e9 \u5929\u5730 12345\n\n\t x ";
    for (int c = 1; c < 128; ++c) text += static_cast<char>(c);  // ASCII; the trie sees UTF-8 only
    text += std::string("A\0A", 3) + "\u00c0\u2581\U0001F600";
    const std::vector<uint32_t> ids = tok->encode(text);
    (void)tok->decode(ids, false);
  });
}
