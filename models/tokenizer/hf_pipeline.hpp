// The parts of a tokenizer.json around its model, as Hugging Face's tokenizers library runs them:
// normalizers (Sequence, Prepend, Replace with a string pattern, NFC/NFD/NFKC/NFKD), pre-tokenizers
// (Sequence, Split with GPT-2's, Llama 3's or Qwen2's regex or a string, ByteLevel, Metaspace) and
// decoders (Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip). Any other type
// is refused when the file is read, naming the field.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/tokenizer/json_field.hpp"
#include "models/tokenizer/split_patterns.hpp"

namespace zf::tok {

struct NormalizerStep {
  enum class Kind { Prepend, Replace, NFC, NFD, NFKC, NFKD } kind;
  std::string pattern, content;  // Prepend: content; Replace: pattern -> content
  std::string where;             // "tokenizer.json: normalizer.normalizers[3]", for errors
};
using Normalizer = std::vector<NormalizerStep>;  // a Sequence, flattened (empty: none)

// SplitDelimiterBehavior
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace } kind;
  // Split
  std::optional<SplitRegex> regex;  // else `literal`
  std::string literal;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false, use_regex = true;
  // Metaspace
  std::string replacement;  // one character
  enum class Prepend { Always, First, Never } prepend = Prepend::Always;
  bool split = true;
};
using PreTokenizer = std::vector<PreTokenizerStep>;

struct DecoderStep {
  enum class Kind { ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip } kind;
  std::string pattern, content;  // Replace; Strip: content (one character); Metaspace: replacement
  size_t start = 0, stop = 0;    // Strip
  bool prepend_never = false;    // Metaspace
};
using Decoder = std::vector<DecoderStep>;

Normalizer parse_normalizer(const JsonField& f);  // f may be null
PreTokenizer parse_pre_tokenizer(const JsonField& f);
Decoder parse_decoder(const JsonField& f);

// `s` through the steps. A step that would make the text longer than 64 times the input plus
// 1 MiB is an InputError naming it (40 Replace "e" -> "ee" would double it 40 times).
std::string normalize(const Normalizer& n, std::string s);

// A piece of text on its way to the model; `at_start`: it begins at the input's first byte
// (Metaspace's prepend_scheme "first").
using PieceSink = std::function<void(std::string_view piece, bool at_start)>;
void pre_tokenize(const PreTokenizer& p, std::string_view s, bool at_start, const PieceSink& sink);

// The tokens' strings decoded to text (no decoder: joined with spaces, as HF does).
std::string decode_tokens(const std::optional<Decoder>& d, std::vector<std::string> tokens);

// The 256 characters (UTF-8) that stand for the bytes in byte-level BPE (GPT-2's bytes_to_unicode).
const std::vector<std::string>& byte_level_chars();

}  // namespace zf::tok
