// A Hugging Face model directory's weights (docs/hf.md): model.safetensors, or
// model.safetensors.index.json and the shards it names; F32, BF16 and F16 converted to fp32
// (exactly: both 16-bit formats are subsets of fp32). Each tensor is read from its file straight
// into the destination the caller gives (no copy of a whole file in memory). A random init, as
// Hugging Face's from_config (models/hf/tensors.hpp), only when asked for (model.init "random",
// --init random): a directory without a weights file the reader recognises is an InputError listing
// what it holds and the names accepted, never a silent random model. A missing, extra, mis-shaped
// or non-finite tensor, a bad index, a shard the index lists and the directory lacks, a dangling
// symlink or a symlink loop (Hugging Face's cache links to blobs), or a truncated shard is a
// zf::InputError naming the file and the tensor.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "models/hf/config.hpp"
#include "models/hf/tensors.hpp"

namespace zf::hf {

// Where a tensor's values go: numel() floats, in the checkpoint's layout (TensorSpec::shape).
using Destination = std::function<float*(const TensorSpec&)>;

// Where the weights come from: the directory's files (the default), or Hugging Face's init from
// `seed` (the directory's weight files, if any, are not read).
struct InitFrom {
  bool random = false;
  uint64_t seed = 0;
  static InitFrom files() { return {}; }
  static InitFrom random_init(uint64_t seed) { return {true, seed}; }
};

struct LoadResult {
  bool from_files = false;                    // false: initialised from the seed
  std::vector<std::string> files;             // the safetensors files read
  std::map<std::string, std::string> dtypes;  // canonical name -> "F32", "BF16" or "F16" as stored
};

// Reads (or, with InitFrom::random_init, initialises) every tensor of expected_tensors(c).
LoadResult load_weights(const std::string& dir, const Config& c, const InitFrom& init, const Destination& dest);

// Whether `dir` holds weights: model.safetensors or model.safetensors.index.json. A directory with
// only weights the engine does not read (pytorch_model.bin, tf_model.h5, ...) is an InputError; so
// is one of the two names that is a dangling symlink or a symlink loop.
bool has_weight_files(const std::string& dir);

// The InputError of a directory without a weights file the reader recognises: the files it holds
// and the names accepted, and how to ask for a random init (`random_hint`, e.g. "model.init
// \"random\"").
[[noreturn]] void throw_no_weights(const std::string& dir, const std::string& random_hint);

}  // namespace zf::hf
