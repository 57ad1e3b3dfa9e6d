// A workload that is a Hugging Face model (issue 27: Llama, Qwen2, GPT-2): what --save-hf needs
// to write it back as a directory Hugging Face loads (models/hf/save.hpp). The trainer finds it
// with dynamic_cast on the Workload; a family's workload implements it.
#pragma once
#include <string>
#include <vector>

#include "models/hf/config.hpp"
#include "models/hf/load.hpp"
#include "models/hf/tensors.hpp"

namespace zf {

class HfModel {
 public:
  virtual ~HfModel() = default;
  // The config.json the model was built from (its path names the input directory).
  virtual const hf::Config& hf_config() const = 0;
  // What the weights were read from (their dtypes are --save-hf's default).
  virtual const hf::LoadResult& hf_loaded() const = 0;
  // Tensor t's current values in its checkpoint layout (TensorSpec::shape: nn.Linear's (out, in),
  // GPT-2's Conv1D (in, out)), waiting for the tasks that write them.
  virtual std::vector<float> hf_tensor(const hf::TensorSpec& t) = 0;
};

class Workload;

// --save-hf DIR: the workload (an HfModel, else an InputError naming --save-hf) written to `dir`, a new
// or empty directory (hf::save_dir): config.json and the tokenizer files of the input directory,
// the tensors in `dtype` ("f32", "bf16", "f16"; "": each tensor's input dtype, F32 when initialised).
void save_hf(Workload& wl, const std::string& dir, const std::string& dtype);

}  // namespace zf
