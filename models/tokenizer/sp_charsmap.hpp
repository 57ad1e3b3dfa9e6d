// What libsentencepiece will read of a tokenizer.model's normalizers, checked before it may: the
// library trusts a precompiled_charsmap (a double-array trie of darts-clone and the replacement
// strings it points into) and walks it without bounds checks on every encode and decode, so an
// offset that leaves the array, a leaf pointing past the strings or a path with more matches than
// its 32-entry result buffer is a segmentation fault in a process we cannot recover. docs/tokenizers.md.
#pragma once
#include <string>
#include <string_view>

namespace zf::tok {

// An InputError naming `where` (e.g. "x/tokenizer.model: normalizer_spec.precompiled_charsmap")
// unless every walk libsentencepiece's Normalizer can make through `blob`, on any input bytes, reads
// inside it: the 4-byte trie size, each unit reachable from the root for all 256 byte values, each
// leaf's value unit, and a NUL-terminated replacement string at each value; no cycle, and at most
// 32 matches on any path.
void check_precompiled_charsmap(std::string_view blob, const std::string& where);

// check_precompiled_charsmap on normalizer_spec and denormalizer_spec of `model`, a serialized
// sentencepiece ModelProto as the library re-serializes it after loading (each field once, so the
// charsmap it checks is the one the library uses); `path` names the file in errors. A model the
// wire format does not describe is an InputError too.
void check_sentencepiece_normalizers(std::string_view model, const std::string& path);

}  // namespace zf::tok
