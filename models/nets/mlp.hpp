// A multilayer perceptron classifier on an image set (Fashion-MNIST): linear layers
// y = x W^T + b with ReLU or GELU between them, softmax cross-entropy on the logits.
// Parameters are initialised as PyTorch's nn.Linear: U(-1/sqrt(in), 1/sqrt(in)).
#pragma once
#include <memory>
#include <vector>

#include "codelets/codelets.hpp"
#include "models/data/idx.hpp"
#include "models/workload.hpp"

namespace zf {

struct MlpConfig {
  std::vector<int> hidden{256, 128};
  Activation activation = Activation::Relu;
  uint64_t init_seed = 1;
  int batch_size = 128;
  int eval_batch_size = 1000;
  // Store the weights transposed, (in, out) (Param::in_out): a column is contiguous for ZenFlow's
  // selective step (docs/zenflow.md). The same initial values, the same logical weights; every
  // strategy uses the same layout, so that their results compare bitwise (model.weight_layout
  // out_in, read by make_workload, turns it off).
  bool weights_in_out = true;
};

class MlpClassifier : public Workload {
 public:
  MlpClassifier(const MlpConfig& cfg, ImageSet train, ImageSet test, StepStatus* status);
  ~MlpClassifier() override;
  std::string describe() const override;
  std::vector<Param*> params() override;
  int64_t epoch_size() const override { return train_.rows; }
  int batch_size() const override { return cfg_.batch_size; }
  void submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices,
                   const Tensor& stats) override;
  EvalResult evaluate(Runtime& rt) override;
  std::vector<std::vector<Param*>> layer_groups() override;  // {fcN.weight, fcN.bias} per layer

  // Layer sizes, input first: {784, hidden..., classes}.
  const std::vector<int64_t>& sizes() const { return sizes_; }

 private:
  struct Acts;  // per-batch-size activation buffers
  // hook: the layer hook of a training step (null in evaluation)
  void forward(const SubmitOptions& o, Acts& a, int slot, LayerHook* hook = nullptr);
  void backward(const SubmitOptions& o, Acts& a, int slot);
  Acts& acts_for(int batch, std::vector<std::unique_ptr<Acts>>& pool);

  MlpConfig cfg_;
  ImageSet train_, test_;
  ByteTable train_table_{}, test_table_{};
  StepStatus* status_;
  std::vector<int64_t> sizes_;
  std::vector<Param> params_;  // fc1.weight, fc1.bias, fc2.weight, ...
  std::vector<std::unique_ptr<Acts>> train_acts_, eval_acts_;
  int64_t submitted_ = 0;
};

}  // namespace zf
