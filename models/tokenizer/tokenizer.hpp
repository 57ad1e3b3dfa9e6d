// Tokenizers of Hugging Face model directories, StarPU-free: tokenizer.json (byte-level BPE as
// GPT-2, Llama 3 and Qwen2 use it; Llama 2's BPE with byte fallback), or tokenizer.model through
// libsentencepiece where there is no tokenizer.json. Ids equal Hugging Face's `tokenizers` library
// and sentencepiece on the same text (tests/tokenizer/tokenizer_test.sh); docs/tokenizers.md.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zf::tok {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of `text` (valid UTF-8), without BOS or EOS: HF's encode(text, add_special_tokens=False),
  // sentencepiece's encode(text). `progress`, when given, is called now and then with the number
  // of ids so far.
  virtual std::vector<uint32_t> encode(std::string_view text,
                                       const std::function<void(size_t)>& progress = {}) const = 0;
  // HF's decode(ids, skip_special_tokens); an id outside the vocabulary is an InputError.
  virtual std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const = 0;
  // One more than the largest id (added tokens included).
  virtual uint64_t vocab_size() const = 0;
  // Whether decode knows `id` (a tokenizer.json's vocabulary may skip ids below vocab_size()).
  virtual bool has_id(uint32_t id) const = 0;
  // "tokenizer.json (byte-level BPE)" and the like, for messages.
  virtual std::string describe() const = 0;
};

// The tokenizer of a model directory: DIR/tokenizer.json, else DIR/tokenizer.model. Bad or missing
// files are zf::InputError naming the file and the field.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path);
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path);

// The BOS and EOS ids of DIR/config.json (bos_token_id, eos_token_id; the first of a list), each
// absent when the file or the field is absent or null.
struct SpecialIds {
  std::optional<uint32_t> bos, eos;
};
SpecialIds read_special_ids(const std::string& dir);

// ids of `text` with `bos` before and `eos` after, where given.
std::vector<uint32_t> encode_with_specials(const Tokenizer& t, std::string_view text, std::optional<uint32_t> bos,
                                           std::optional<uint32_t> eos,
                                           const std::function<void(size_t)>& progress = {});

// An InputError naming `where` and the byte offset when `text` is not valid UTF-8.
void check_utf8(std::string_view text, const std::string& where);

}  // namespace zf::tok
