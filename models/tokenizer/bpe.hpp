// Hugging Face tokenizers' BPE model (models/bpe in its Rust source): a word's characters (with
// byte fallback to <0xNN> tokens, or the unknown token) merged by rank, lowest first and leftmost
// among equal ranks, exactly as its Word::merge_all does (the same priority queue, the same
// stale-entry rule), so the ids equal the library's for every input.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zf::tok {

struct BpeModel {
  std::unordered_map<std::string, uint32_t> vocab;
  std::unordered_map<uint32_t, std::string> vocab_r;
  // (left id, right id) -> (rank, merged id); a pair listed twice keeps its last rank, as HF does
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> merges;
  std::optional<std::string> unk_token, continuing_subword_prefix, end_of_word_suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::optional<uint32_t> unk_id;
  std::vector<std::optional<uint32_t>> byte_ids;  // 256 entries: the ids of <0x00>..<0xFF>

  static uint64_t pair_key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }
  // Fills unk_id and byte_ids from the vocabulary (after vocab is set).
  void finish();
  // Appends the ids of one pre-tokenized word (valid UTF-8, not empty).
  void encode_word(std::string_view word, std::vector<uint32_t>& out) const;
};

}  // namespace zf::tok
