// A Hugging Face model directory written back (issue 27's --save-hf; docs/hf.md): the input's
// config.json byte for byte, model.safetensors (or shards model-0000i-of-0000n.safetensors with
// model.safetensors.index.json when the tensors exceed the shard size), the tokenizer files copied,
// every file written atomically. Tensors in each one's input dtype unless one is asked for; each is
// converted as it is written (no file whole in memory).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "models/hf/config.hpp"
#include "models/hf/tensors.hpp"

namespace zf::hf {

// A tensor's fp32 values, numel() of them, in the checkpoint's layout.
using Source = std::function<const float*(const TensorSpec&)>;

struct SaveOptions {
  std::string dtype;                         // "F32", "BF16", "F16", or "" for each tensor's input dtype
  std::map<std::string, std::string> input;  // canonical name -> input dtype (LoadResult::dtypes); F32 if absent
  uint64_t max_shard_bytes = uint64_t(2) << 30;  // Hugging Face's limit for one file (2 GiB)
};

// --save-dtype's value: "f32", "bf16" or "f16" -> "F32", "BF16", "F16"; anything else an InputError
// naming `where`.
std::string save_dtype(const std::string& value, const std::string& where);

// Writes the model `c` (read from `c.path`'s directory) to `out_dir`: a new or empty directory (an
// InputError otherwise: nothing is overwritten). Tokenizer files copied when present:
// tokenizer.json, tokenizer_config.json, special_tokens_map.json, tokenizer.model,
// generation_config.json, vocab.json, merges.txt, added_tokens.json, chat_template.jinja.
void save_dir(const std::string& out_dir, const Config& c, const Source& src, const SaveOptions& o);

}  // namespace zf::hf
