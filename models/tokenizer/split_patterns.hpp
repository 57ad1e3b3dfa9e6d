// The pre-tokenizer regexes of GPT-2, Llama 3 and Qwen2, matched by hand over Unicode properties
// (unicode.hpp) with the semantics of Hugging Face tokenizers' Oniguruma regexes: alternatives
// tried left to right, greedy quantifiers that backtrack, (?!\S) and (?i:...). tokenizer.json
// spells them as a Split pre-tokenizer's pattern.Regex (Llama 3, Qwen2) or implies GPT-2's with
// ByteLevel's use_regex; any other regex is refused when the file is read.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace zf::tok {

enum class SplitRegex { Gpt2, Llama3, Qwen2 };

// GPT-2's: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
extern const char* const kGpt2Regex;
// Llama 3's: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
extern const char* const kLlama3Regex;
// Qwen2's: Llama 3's with \p{N} for \p{N}{1,3}
extern const char* const kQwen2Regex;

// The pattern a tokenizer.json regex string is, if it is one of the three.
std::optional<SplitRegex> known_split_regex(const std::string& pattern);

// The end (a byte offset) of the match of `re` starting at byte `pos` of valid UTF-8 `s`
// (pos < s.size()). Every position starts a match of these patterns, of at least one character.
size_t match_split_regex(SplitRegex re, std::string_view s, size_t pos);

}  // namespace zf::tok
