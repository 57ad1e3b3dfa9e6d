// tokenizer.json as Hugging Face's tokenizers library (0.22) reads and runs it: the added tokens
// split out first (aho-corasick leftmost-longest, with single_word, lstrip, rstrip; non-normalized
// ones on the raw text, normalized ones on each normalized piece), the normalizer, the
// pre-tokenizer, the BPE model; decoding through the decoder. The post-processor is not applied:
// BOS/EOS come from the model's config (tokenizer.hpp).
#pragma once
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "models/tokenizer/bpe.hpp"
#include "models/tokenizer/hf_pipeline.hpp"
#include "models/tokenizer/tokenizer.hpp"

namespace zf::tok {

struct AddedToken {
  uint32_t id;
  std::string content;
  bool single_word, lstrip, rstrip, normalized, special;
};

class HfTokenizer final : public Tokenizer {
 public:
  // `text` is the file's contents, `path` names it in errors.
  HfTokenizer(const std::string& text, const std::string& path);

  std::vector<uint32_t> encode(std::string_view text, const std::function<void(size_t)>& progress = {}) const override;
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const override;
  uint64_t vocab_size() const override;
  bool has_id(uint32_t id) const override;
  std::string describe() const override;
  // The pre-tokenizer's pieces of `text` alone (no added tokens, no normalizer), as the library's
  // PreTokenizer::pre_tokenize_string gives them: for the test of the regexes (tests/tokenizer/tokenizer_test.sh).
  std::vector<std::string> pre_tokenize_pieces(std::string_view text) const;

 private:
  // The added tokens one trie of HF's matches: patterns by first byte, longest first.
  struct Trie {
    std::vector<std::vector<std::pair<std::string, uint32_t>>> by_first_byte = std::vector<std::vector<std::pair<std::string, uint32_t>>>(256);
    bool empty = true;
  };
  struct Split {
    size_t start, end;
    std::optional<uint32_t> id;
  };
  void read_added_tokens(const JsonField& list);
  void add_to_trie(Trie& t, const std::string& pattern, uint32_t id);
  std::vector<Split> find_matches(std::string_view s, const Trie& t) const;

  std::string path_;
  BpeModel bpe_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::optional<Decoder> decoder_;
  std::unordered_map<std::string, uint32_t> added_ids_;      // content -> id
  std::unordered_map<uint32_t, AddedToken> added_by_id_;
  std::unordered_set<std::string> special_;                  // contents of the special tokens
  Trie raw_trie_, normalized_trie_;
  uint64_t vocab_size_ = 0;
};

}  // namespace zf::tok
