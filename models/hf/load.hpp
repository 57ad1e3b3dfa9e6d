// A Hugging Face model directory's weights (docs/hf.md): model.safetensors, or
// model.safetensors.index.json and the shards it names; F32, BF16 and F16 converted to fp32
// (exactly: both 16-bit formats are subsets of fp32). Each tensor is read from its file straight
// into the destination the caller gives (no copy of a whole file in memory). A directory without
// weight files is initialised as Hugging Face does (models/hf/tensors.hpp) from a seed. A missing,
// extra, mis-shaped or non-finite tensor, a bad index or a truncated shard is a zf::InputError
// naming the file and the tensor.
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

struct LoadResult {
  bool from_files = false;                    // false: initialised from the seed
  std::vector<std::string> files;             // the safetensors files read
  std::map<std::string, std::string> dtypes;  // canonical name -> "F32", "BF16" or "F16" as stored
};

// Reads (or initialises, when `dir` has no weight files) every tensor of expected_tensors(c).
LoadResult load_weights(const std::string& dir, const Config& c, uint64_t init_seed, const Destination& dest);

// Whether `dir` holds weights: model.safetensors or model.safetensors.index.json. A directory with
// only weights the engine does not read (pytorch_model.bin, tf_model.h5, ...) is an InputError, not
// a directory to initialise.
bool has_weight_files(const std::string& dir);

}  // namespace zf::hf
