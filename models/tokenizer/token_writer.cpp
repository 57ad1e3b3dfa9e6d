#include "models/tokenizer/token_writer.hpp"

#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"

namespace zf::tok {

TokenFileFormat token_file_format(uint64_t vocab_size, bool llmc_header, const std::vector<uint32_t>& ids) {
  if (vocab_size > 65536) return TokenFileFormat::LlmcU32;
  const bool looks_like_header = ids.size() >= 2 && ids[1] == (uint32_t(kLlmcMagicU16) >> 16) &&
                                 (ids[0] == (uint32_t(kLlmcMagicU16) & 0xFFFF) || ids[0] == (uint32_t(kLlmcMagicU32) & 0xFFFF));
  return llmc_header || looks_like_header ? TokenFileFormat::LlmcU16 : TokenFileFormat::RawU16;
}

const char* format_name(TokenFileFormat f) {
  switch (f) {
    case TokenFileFormat::RawU16: return "raw uint16";
    case TokenFileFormat::LlmcU16: return "llm.c uint16 (magic 20240520, version 1)";
    case TokenFileFormat::LlmcU32: return "llm.c uint32 (magic 20240801, version 7)";
  }
  return "?";
}

namespace {
void put_le(std::vector<uint8_t>& out, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
}  // namespace

std::vector<uint8_t> token_file_bytes(const std::vector<uint32_t>& ids, TokenFileFormat f) {
  const bool wide = f == TokenFileFormat::LlmcU32;
  std::vector<uint8_t> out;
  if (f != TokenFileFormat::RawU16) {
    if (ids.size() > INT32_MAX) throw Error("token file: " + std::to_string(ids.size()) + " tokens, llm.c's header holds at most 2^31 - 1");
    std::vector<int32_t> header(256, 0);
    header[0] = wide ? kLlmcMagicU32 : kLlmcMagicU16;
    header[1] = wide ? kLlmcVersionU32 : kLlmcVersionU16;
    header[2] = static_cast<int32_t>(ids.size());
    out.reserve(1024 + ids.size() * (wide ? 4 : 2));
    for (int32_t h : header) put_le(out, static_cast<uint32_t>(h), 4);
  } else {
    out.reserve(ids.size() * 2);
  }
  for (uint32_t id : ids) {
    if (!wide && id > 0xFFFF) throw Error("token file: id " + std::to_string(id) + " does not fit uint16");
    put_le(out, id, wide ? 4 : 2);
  }
  return out;
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& ids, TokenFileFormat f) {
  const std::vector<uint8_t> bytes = token_file_bytes(ids, f);
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace zf::tok
