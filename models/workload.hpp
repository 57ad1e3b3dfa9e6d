// What a training strategy sees of a model: its parameters (device-side value and gradient
// handles) and a way to submit one step's forward, loss and backward in the device context.
// MLP-on-images and GPT-on-text both implement it; strategies never look inside.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/runtime.hpp"

namespace zf {

struct Param {
  std::string name;  // "fc1.weight": safetensors and trace names
  Tensor value;      // device-side parameter, shape (N, K) for a weight, (N) for a bias
  Tensor grad;       // device-side gradient, overwritten by every backward
  bool is_matrix() const { return value.shape().size() == 2; }
  int64_t rows() const { return value.dim(0); }
  int64_t cols() const { return is_matrix() ? value.dim(1) : 1; }
};

struct EvalResult {
  double loss = 0.0;      // mean per example (per token for language models)
  double accuracy = 0.0;  // fraction correct
  int64_t count = 0;      // examples (tokens) evaluated
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string describe() const = 0;
  virtual std::vector<Param*> params() = 0;
  virtual int64_t epoch_size() const = 0;  // sampling units per epoch (examples or windows)
  virtual int batch_size() const = 0;
  // Loads the batch of training units `indices` and submits forward, loss and backward for
  // `step` in the device context. Gradients of all params are overwritten; stats (3 doubles:
  // loss sum, correct, count) receives the batch's loss.
  virtual void submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices,
                           const Tensor& stats) = 0;
  // Forward over the whole evaluation split (blocks until done).
  virtual EvalResult evaluate(Runtime& rt) = 0;
  // --init (load_weights): a parameter the weights file may lack (it keeps its initial value),
  // e.g. a classifier head on a language-model checkpoint.
  virtual bool optional_on_init(const std::string& name) const { return false; }
  // --init: a tensor of the file this model does not have and may ignore (e.g. lm_head.weight).
  virtual bool ignorable_on_init(const std::string& name) const { return false; }
  // Precision "fp16" (graphs/loss_scaler.hpp): the training loss of the steps submitted from now on
  // is multiplied by `scale` (the backward starts from scale / rows instead of 1 / rows), so every
  // gradient comes out multiplied by it; the reported loss is not scaled.
  void set_loss_scale(float scale) { loss_scale_ = scale; }

 protected:
  float loss_scale_ = 1.0f;
};

}  // namespace zf
