// Writing token files (docs/tokenizers.md, "Token files"): raw little-endian uint16 (nanoGPT's
// train.bin) when every id fits, llm.c's format (a header of 256 little-endian int32: magic,
// version, token count; then the tokens) as uint16 (magic 20240520, version 1) on request, and
// as uint32 (magic 20240801, version 7) whenever the vocabulary has more than 65536 ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zf::tok {

enum class TokenFileFormat { RawU16, LlmcU16, LlmcU32 };

constexpr int32_t kLlmcMagicU16 = 20240520, kLlmcVersionU16 = 1;
constexpr int32_t kLlmcMagicU32 = 20240801, kLlmcVersionU32 = 7;

// The format for `ids` of a vocabulary of `vocab_size` ids: uint32 (llm.c) above 65536, else raw
// uint16, or llm.c's uint16 when `llmc_header` says so or when raw ids would begin with the bytes
// of an llm.c magic (ids 55432 or 55713, then 308), which a reader would take for a header.
TokenFileFormat token_file_format(uint64_t vocab_size, bool llmc_header, const std::vector<uint32_t>& ids);
const char* format_name(TokenFileFormat f);

// The file's bytes; an id that does not fit the format, or more than 2^31 - 1 tokens in an llm.c
// file, is a zf::Error.
std::vector<uint8_t> token_file_bytes(const std::vector<uint32_t>& ids, TokenFileFormat f);

// Writes the file atomically (runtime/atomic_file.hpp).
void write_token_file(const std::string& path, const std::vector<uint32_t>& ids, TokenFileFormat f);

}  // namespace zf::tok
