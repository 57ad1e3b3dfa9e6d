// Shared by the record data tests (test_instructions.cpp, test_chat.cpp): the shipped KJV tokenizer
// (graphs/tokenizers/kjv-bpe, docs/tokenizers.md) and the row options for it.
#pragma once
#include <optional>
#include <string>

#include "models/data/instructions.hpp"

namespace zf::test {

constexpr uint32_t kKjvBos = 4094, kKjvEos = 4095;  // <|begin_of_text|>, <|end_of_text|>

inline const tok::Tokenizer& kjv_bpe() {
  static const auto t = tok::load_tokenizer_json(std::string(ZF_SOURCE_DIR) + "/graphs/tokenizers/kjv-bpe/tokenizer.json");
  return *t;
}

// Rows of T tokens with the KJV tokenizer's EOS and vocabulary, and `bos` when given.
inline InstructionOptions kjv_row_options(int64_t T, std::optional<uint32_t> bos) {
  InstructionOptions o;
  o.T = T;
  o.bos = bos;
  o.eos = kKjvEos;
  o.vocab = 4096;
  return o;
}

}  // namespace zf::test
