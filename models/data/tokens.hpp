// Token-id files for the GPT language model (data.dataset "tokens", docs/gpt.md "Token files"):
// nanoGPT's raw little-endian uint16 (train.bin), raw little-endian uint32 (a path ending
// ".u32.bin"), and llm.c's .bin with its 256-int32 header (magic 20240520 version 1: uint16 ids;
// magic 20240801 version 7: uint32 ids, llm.c's Llama-3 format). The ids are kept at the file's
// width (2 or 4 bytes each). Every problem with a file is an InputError naming the spec field, the
// file and what was expected; an id out of range names its byte offset and value.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zf {

// llm.c's data files (dev/data/data_common.py): 256 little-endian int32 (header[0] the magic,
// header[1] the version, header[2] the token count, the rest 0), then the ids.
inline constexpr int32_t kLlmcMagicU16 = 20240520, kLlmcVersionU16 = 1;  // GPT-2: uint16 ids
inline constexpr int32_t kLlmcMagicU32 = 20240801, kLlmcVersionU32 = 7;  // Llama 3: uint32 ids
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

struct TokenFile {
  std::vector<uint16_t> u16;  // the ids when width == 2
  std::vector<uint32_t> u32;  // the ids when width == 4
  int width = 2;              // bytes per id
  int64_t header_bytes = 0;   // 0 (raw) or kLlmcHeaderBytes: the file offset of id 0
  std::string format;         // "raw uint16", "raw uint32", "llm.c uint16", "llm.c uint32"
  int64_t size() const { return width == 2 ? (int64_t)u16.size() : (int64_t)u32.size(); }
  uint32_t at(int64_t i) const { return width == 2 ? u16[(size_t)i] : u32[(size_t)i]; }
  // The ids' storage, width() bytes each in host order (TextSource's data).
  const uint8_t* bytes() const {
    return width == 2 ? reinterpret_cast<const uint8_t*>(u16.data()) : reinterpret_cast<const uint8_t*>(u32.data());
  }
};

// Reads and validates a token file: its format (above), every id < vocab, at least min_tokens ids.
// `where` names the spec field ("spec.json: data.path"); errors read "WHERE: PATH: what".
TokenFile load_token_file(const std::string& path, const std::string& where, int64_t vocab, int64_t min_tokens);

// The language model's training and evaluation ids (data.path, data.eval_path).
struct TokenSplit {
  TokenFile train, val;
  std::string description;  // for the run header
};
// Both files need at least context + 1 ids (one window and its targets).
TokenSplit load_token_split(const std::string& train_path, const std::string& train_where,
                            const std::string& eval_path, const std::string& eval_where, int64_t vocab,
                            int context);

}  // namespace zf
