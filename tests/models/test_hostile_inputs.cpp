// Hostile inputs (issue 46): a tokenizer.model whose normalizer tries libsentencepiece would walk
// out of bounds is refused at load, naming the field (models/tokenizer/sp_charsmap.hpp), while a
// valid hand-built trie still normalizes as the library does; a NUL byte in every JSON input is
// refused, not taken for the end of the input.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "graphs/schema/spec.hpp"
#include "models/data/instructions.hpp"
#include "models/formats/safetensors.hpp"
#include "models/hf/config.hpp"
#include "models/tokenizer/sp_charsmap.hpp"
#include "models/tokenizer/tokenizer.hpp"
#include "runtime/input_file.hpp"
#include "test_helpers.hpp"

using namespace zf;
using zf::test::expect_input_error;
using zf::test::TempDir;

namespace {

const std::string kSpModel = std::string(ZF_SOURCE_DIR) + "/tests/tokenizer/fixtures/sp-kjv/tokenizer.model";

std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  return out + static_cast<char>(v);
}
std::string field(uint32_t number, const std::string& bytes) {  // a length-delimited protobuf field
  return varint(number << 3 | 2) + varint(bytes.size()) + bytes;
}

// A darts-clone double array of 3 blocks mapping "A" to "a": the root's children at 256 ^ byte, the
// leaf of "A" at unit 512. Unused units carry a label no byte reaching them has (as darts-clone
// fills them).
struct Trie {
  std::vector<uint32_t> units = std::vector<uint32_t>(768);
  std::string strings = std::string("a\0", 2);
  Trie() {
    for (uint32_t i = 0; i < units.size(); ++i) units[i] = (i & 0xFF) ^ 1;
    units[0] = 256u << 10;                                   // root: children at 256 ^ byte
    units[256 ^ 'A'] = 'A' | 1u << 8 | (((256 ^ 'A') ^ 512u) << 10);  // "A", has a leaf, at 512
    units[512] = 1u << 31 | 0;                               // the leaf: replacement at byte 0
  }
  std::string blob() const {
    const uint32_t bytes = static_cast<uint32_t>(units.size() * 4);
    std::string b(4 + bytes, '\0');
    std::memcpy(b.data(), &bytes, 4);
    std::memcpy(b.data() + 4, units.data(), bytes);
    return b + strings;
  }
};

// The KJV fixture (identity normalization) with `blob` as the precompiled_charsmap of
// normalizer_spec (3) or denormalizer_spec (5): protobuf merges a repeated message field.
std::string model_dir(const TempDir& dir, const std::string& blob, uint32_t spec = 3) {
  const std::vector<uint8_t> base = test::read_file(kSpModel);
  std::string model(base.begin(), base.end());
  model += field(spec, field(2, blob));
  std::filesystem::create_directories(dir.path("m"));
  dir.write("m/tokenizer.model", model);
  return dir.path("m");
}

}  // namespace

TEST(SentencePieceCharsmap, AValidTrieNormalizesAsTheLibrary) {
  TempDir dir;
  const auto plain = tok::load_tokenizer(std::string(ZF_SOURCE_DIR) + "/tests/tokenizer/fixtures/sp-kjv");
  ASSERT_NE(plain->encode("And God"), plain->encode("and God")) << "the test needs a text the rule changes";
  const auto t = tok::load_tokenizer(model_dir(dir, Trie().blob()));
  EXPECT_EQ(t->encode("And God"), plain->encode("and God"));
  EXPECT_EQ(t->encode(std::string("A\0A", 3)), plain->encode(std::string("a\0a", 3)));
}

TEST(SentencePieceCharsmap, RefusesWhatTheLibraryWouldReadOutOfBounds) {
  const std::string field_name = "tokenizer.model: normalizer_spec.precompiled_charsmap";
  auto refused = [&](const std::string& blob, std::initializer_list<std::string> parts, uint32_t spec = 3) {
    TempDir dir;
    const std::string m = model_dir(dir, blob, spec);
    expect_input_error([&] { tok::load_tokenizer(m); }, parts);
  };
  Trie t;
  // trie size 0: the library reads unit 0 of an empty array
  refused(std::string("\0\0\0\0a\0", 6), {field_name, "trie size 0", "at least one unit"});
  // a root offset near 2^30 units (4 GiB): the search reads far outside the array
  t.units[0] = 0xFFFFFE00u;
  refused(t.blob(), {field_name, "beyond its 768 units"});
  // a child's offset out of the array (bit 31 clear: a set one would make the label no byte's)
  t = Trie();
  t.units[256 ^ 'A'] = 'A' | 1u << 8 | (0x1FFFFFu << 10);
  refused(t.blob(), {field_name, "beyond its 768 units"});
  // a replacement past the strings, or not NUL-terminated
  t = Trie();
  t.units[512] = 1u << 31 | 7;
  refused(t.blob(), {field_name, "byte 7 of the 2 bytes"});
  t = Trie();
  t.strings = "a";
  refused(t.blob(), {field_name, "NUL-terminated"});
  // a cycle back to the root through a leaf: matches without end on "AAAA..."
  t = Trie();
  t.units[256 ^ 'A'] = 'A' | 1u << 8 | (((256 ^ 'A') ^ 256u) << 10);
  t.units[256] = 1u << 31 | 1;
  refused(t.blob(), {field_name, "leads back into its own path"});
  // the trie size not below the blob: the library's own load refuses it
  std::string big = Trie().blob();
  const uint32_t huge = 0xFFFFFFF0u;
  std::memcpy(big.data(), &huge, 4);
  refused(big, {"tokenizer.model", "not a sentencepiece model", "Blob for normalization rule is broken"});
  // a trie size the library accepts (below the blob's size) that still reaches past the blob, as
  // the size's own 4 bytes come first (fuzz_sentencepiece's first finding)
  std::string near = Trie().blob();
  const uint32_t past = static_cast<uint32_t>(near.size() - 2);
  std::memcpy(near.data(), &past, 4);
  refused(near, {field_name, "trie size " + std::to_string(past) + " is more than the"});
  // the denormalizer (used by decode) is checked the same way
  t = Trie();
  t.units[512] = 1u << 31 | 7;
  refused(t.blob(), {"tokenizer.model: denormalizer_spec.precompiled_charsmap", "byte 7"}, 5);
}

// More than 32 matches on one path (NormalizePrefix's stack buffer): a chain of 33 "A" nodes,
// each with a leaf, is refused; 32 are accepted.
TEST(SentencePieceCharsmap, RefusesMoreMatchesThanTheLibrarysBuffer) {
  for (uint32_t depth : {32u, 33u}) {
    // node k's children in block k + 1; its leaf in the last block
    const uint32_t blocks = depth + 2, leaf = (depth + 1) * 256;
    std::vector<uint32_t> u(blocks * 256);
    for (uint32_t i = 0; i < u.size(); ++i) u[i] = (i & 0xFF) ^ 1;
    u[0] = 256u << 10;
    for (uint32_t k = 0; k < depth; ++k) {
      const uint32_t pos = (k + 1) * 256 ^ 'A', next = k + 1 < depth ? (k + 2) * 256 : leaf;
      u[pos] = 'A' | 1u << 8 | ((pos ^ next) << 10);
    }
    u[leaf] = 1u << 31;
    std::string blob(4 + u.size() * 4, '\0');
    const uint32_t bytes = static_cast<uint32_t>(u.size() * 4);
    std::memcpy(blob.data(), &bytes, 4);
    std::memcpy(blob.data() + 4, u.data(), bytes);
    blob += std::string("a\0", 2);
    if (depth == 32) {
      EXPECT_NO_THROW(tok::check_precompiled_charsmap(blob, "x"));
    } else {
      expect_input_error([&] { tok::check_precompiled_charsmap(blob, "x"); }, {"x", "more than 32 rules"});
    }
  }
}

// NUL bytes: nlohmann's parser alone stops at one, so what follows was ignored (a JSONL line
// "{a}\0{b}" lost {b}). Every JSON reader refuses it, naming the file, the byte and, inside a
// value, the field.
TEST(JsonNul, EveryJsonInputRefusesIt) {
  TempDir dir;
  const std::string nul(1, '\0');
  // a spec, a --deepspeed file
  const std::string spec = dir.write("s.json", "{\"model\": {\"type\": \"mlp\"}}" + nul + "garbage");
  expect_input_error([&] { zf::load_spec(spec, {}); }, {"s.json", "not valid JSON at byte 26", "a NUL byte"});
  const std::string ds = dir.write("ds.json", "{\"train_batch_size\": 4}" + nul + "garbage");
  expect_input_error([&] { zf::read_json_file(ds); }, {"ds.json", "byte 23", "a NUL byte"});
  // config.json: a NUL inside a string names the field
  expect_input_error([&] { hf::parse_config("{\"model_type\": \"lla" + nul + "ma\"}", "c/config.json"); },
                     {"c/config.json: model_type", "byte 19", "a NUL byte"});
  // tokenizer.json
  const std::string tj = dir.write("tokenizer.json", "{}" + nul + "{}");
  expect_input_error([&] { tok::load_tokenizer_json(tj); }, {"tokenizer.json", "byte 2", "a NUL byte"});
  // instruction records: a JSON array, and a JSONL line holding two records
  const std::string rec = "{\"instruction\": \"a\", \"output\": \"b\"}";
  const std::string arr = dir.write("r.json", "[" + rec + "]" + nul + "[" + rec + "]");
  expect_input_error([&] { read_instruction_records(arr, "spec.json: data.path"); }, {"r.json", "a NUL byte"});
  const std::string lines = dir.write("r.jsonl", rec + "\n" + rec + nul + rec + "\n");
  expect_input_error([&] { read_instruction_records(lines, "spec.json: data.path"); },
                     {"r.jsonl", "record 1 (line 2)", "a NUL byte"});
  // a safetensors header: 8-byte length, then the header with a NUL after its object
  const std::string header =
      "{\"t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}" + nul + "  ";
  std::string st(8, '\0');
  for (int i = 0; i < 8; ++i) st[(size_t)i] = (char)((header.size() >> (8 * i)) & 0xFF);
  const std::string stp = dir.write("w.safetensors", st + header + std::string(4, '\0'));
  expect_input_error([&] { read_safetensors(stp); }, {"w.safetensors", "a NUL byte"});
  // without the NUL, the same inputs are read
  EXPECT_EQ(zf::read_json_file(dir.write("ok.json", "{\"train_batch_size\": 4}"))["train_batch_size"], 4);
  EXPECT_EQ(read_instruction_records(dir.write("ok.jsonl", rec + "\n" + rec + "\n"), "w").size(), 2u);
}

// A normalizer Sequence of 40 Replace "e" -> "ee" doubles the text 40 times (bad_alloc after 45 s):
// refused at the step that passes 64 times the input plus 1 MiB, naming it; 3 of them still run.
TEST(TokenizerJson, NormalizerGrowthIsBounded) {
  TempDir dir;
  const std::vector<uint8_t> raw =
      test::read_file(std::string(ZF_SOURCE_DIR) + "/graphs/tokenizers/kjv-bpe/tokenizer.json");
  auto with_replaces = [&](int n) {
    nlohmann::json j = nlohmann::json::parse(raw.begin(), raw.end());
    nlohmann::json seq = nlohmann::json::array();
    for (int i = 0; i < n; ++i)
      seq.push_back({{"type", "Replace"}, {"pattern", {{"String", "e"}}}, {"content", "ee"}});
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", seq}};
    return tok::load_tokenizer_json(dir.write("t" + std::to_string(n) + ".json", j.dump()));
  };
  const auto three = with_replaces(3);
  EXPECT_EQ(three->decode(three->encode("e"), false), "eeeeeeee");
  const auto forty = with_replaces(40);
  // 2^21 bytes after the 21st step pass 64 x 1 + 2^20
  expect_input_error([&] { forty->encode("e"); }, {"t40.json: normalizer.normalizers[20]", "64 times the input"});
}

// Sizes the reader must not believe: a sparse config.json of 1 TiB (more than the memory) is refused
// before a byte is read; a file with more bytes than its size (a /proc file reports 0) is refused,
// as one being appended to would be, instead of read without end.
TEST(InputFiles, SizeIsTheSizeWhenOpened) {
  TempDir dir;
  const std::string big = dir.path("config.json");
  {
    std::ofstream(big) << "{}";
    std::filesystem::resize_file(big, uint64_t(1) << 40);
  }
  expect_input_error([&] { hf::read_config(big); }, {big, "is 1099511627776 bytes, more than the", "MemAvailable"});
  expect_input_error([&] { zf::read_input_file("/proc/self/status", "/proc/self/status"); },
                     {"/proc/self/status", "has more bytes than its size when it was opened (0)"});
  EXPECT_EQ(zf::read_input_file(dir.write("small.json", "{}"), "x").size(), 2u);
}
