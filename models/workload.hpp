// What a training strategy sees of a model: its parameters (device-side value and gradient
// handles) and a way to submit one step's forward, loss and backward in the device context.
// MLP-on-images and GPT-on-text both implement it; strategies never look inside.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/fp16.hpp"
#include "runtime/runtime.hpp"

namespace zf {

struct Param {
  std::string name;  // "fc1.weight": safetensors and trace names
  Tensor value;      // device-side parameter, shape (N, K) for a weight, (N) for a bias
  Tensor grad;       // device-side gradient, overwritten by every backward
  // A weight stored transposed: value and grad are (K, N) = (in, out) tensors, so that a column
  // W[:, j] (ZenFlow's unit of selection) is contiguous (docs/zenflow.md). rows() and cols() stay
  // the logical (N, K); checkpoints, safetensors export and --init use the logical layout.
  bool in_out = false;
  bool is_matrix() const { return value.shape().size() == 2; }
  int64_t rows() const { return value.dim(in_out ? 1 : 0); }
  int64_t cols() const { return is_matrix() ? value.dim(in_out ? 0 : 1) : 1; }
  std::vector<int64_t> logical_shape() const { return in_out ? std::vector<int64_t>{rows(), cols()} : value.shape(); }
};

// dst (cols, rows) = src (rows, cols)^T, both row-major
inline void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  constexpr int64_t kB = 32;  // blocks, so that both sides stream through the cache
  for (int64_t i0 = 0; i0 < rows; i0 += kB)
    for (int64_t j0 = 0; j0 < cols; j0 += kB)
      for (int64_t i = i0; i < std::min(rows, i0 + kB); ++i)
        for (int64_t j = j0; j < std::min(cols, j0 + kB); ++j) dst[j * rows + i] = src[i * cols + j];
}

// The values of a parameter's buffer in its storage layout: fp32, or widened from its 2-byte
// storage (Tensor::store_half). The caller holds it acquired.
inline std::vector<float> stored_values(const Tensor& t) {
  if (!t.stored_half()) return std::vector<float>(t.data(), t.data() + t.numel());
  std::vector<float> v(t.numel());
  const uint16_t* h = t.as<uint16_t>();
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = t.half() == Half::Bf16 ? kernels::bf16::to_float(h[i]) : kernels::fp16::to_float(h[i]);
  return v;
}

// The parameter's values in the logical layout (weights (N, K) row-major), waiting for its writers.
inline std::vector<float> logical_values(const Param& p) {
  p.value.acquire_read();
  std::vector<float> s = stored_values(p.value);
  p.value.release();
  if (!p.in_out) return s;
  std::vector<float> v(s.size());
  transpose(s.data(), p.cols(), p.rows(), v.data());
  return v;
}

// Sets the parameter from values in the logical layout (numel() of them); 2-byte storage rounds
// them (round to nearest even).
inline void set_logical_values(Param& p, const float* v) {
  std::vector<float> s;
  const float* src = v;
  if (p.in_out) {
    s.resize(p.value.numel());
    transpose(v, p.rows(), p.cols(), s.data());
    src = s.data();
  }
  p.value.acquire_write();
  if (p.value.stored_half()) {
    uint16_t* h = p.value.as<uint16_t>();
    for (size_t i = 0; i < p.value.numel(); ++i)
      h[i] = p.value.half() == Half::Bf16 ? kernels::bf16::from_float(src[i]) : kernels::fp16::from_float(src[i]);
  } else {
    std::copy(src, src + p.value.numel(), p.value.data());
  }
  p.value.release();
}

struct EvalResult {
  double loss = 0.0;      // mean per example (per token for language models)
  double accuracy = 0.0;  // fraction correct
  int64_t count = 0;      // examples (tokens) evaluated
};

// ZeRO stage 3 (docs/data-parallel.md): what a model tells the engine around the use of each of its
// layer groups (Workload::layer_groups) inside submit_step, in submission order. The engine
// (graphs/strategies/stage3.hpp) gathers a group's parameters before its forward and its backward
// (one group ahead), releases them after, and reduce-scatters its gradients after its backward.
class LayerHook {
 public:
  virtual ~LayerHook() = default;
  virtual void before_forward(int64_t step, int group) = 0;
  virtual void after_forward(int64_t step, int group) = 0;
  virtual void before_backward(int64_t step, int group) = 0;
  virtual void after_backward(int64_t step, int group) = 0;
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
  // Precision "fp16" (graphs/train/loss_scaler.hpp): the training loss of the steps submitted from now on
  // is multiplied by `scale` (the backward starts from scale / rows instead of 1 / rows), so every
  // gradient comes out multiplied by it; the reported loss is not scaled.
  void set_loss_scale(float scale) { loss_scale_ = scale; }
  // ZeRO stage 3: the parameters in layer groups, in forward order, each parameter in one group and
  // read or written by submit_step only between the hook's calls for its group. Empty: the model
  // does not support stage 3.
  virtual std::vector<std::vector<Param*>> layer_groups() { return {}; }
  // Bytes of the activation and activation-gradient buffers (training and evaluation batches) that
  // StarPU has allocated so far (device_state_bytes.activations; docs/metrics.md): a lazy buffer is
  // allocated where first written and kept, so after a step and an evaluation it is what the graphs
  // hold. -1: not counted (the MLP).
  virtual int64_t activation_bytes() const { return -1; }
  // The hook submit_step calls (null: none, the parameters are whole; evaluate never calls it).
  void set_layer_hook(LayerHook* h) { hook_ = h; }

 protected:
  float loss_scale_ = 1.0f;
  LayerHook* hook_ = nullptr;
};

}  // namespace zf
