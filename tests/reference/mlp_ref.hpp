// A sequential, StarPU-free driver for the MLP of models/nets/mlp.cpp: same initialisation, same
// batches (graphs/train/step_graph.cpp's per-epoch permutation), same float kernels called in the same
// order on the same inputs, so its gradients are bitwise those of the engine. The optimizer is
// not here: tests/reference/zenflow_ref.hpp drives the parameters.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "codelets/kernels/cpu/gemm.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/parallel.hpp"
#include "graphs/schema/spec.hpp"
#include "models/data/idx.hpp"
#include "models/rng.hpp"

namespace zf::ref {

struct RefParam {
  std::string name;            // "fc1.weight"
  std::vector<int64_t> shape;  // (N, K) for a weight, (N) for a bias
  std::vector<float> value;
  bool is_matrix() const { return shape.size() == 2; }
  int rows() const { return (int)shape[0]; }
  int cols() const { return is_matrix() ? (int)shape[1] : 1; }
};

class MlpRef {
 public:
  explicit MlpRef(const Spec& s) : spec_(s) {
    blas_single_thread();
    FashionMnist d = load_fashion_mnist(s.data.dir, s.data.train_limit, s.data.eval_limit);
    train_ = std::move(d.train);
    gelu_ = s.model.activation == "gelu";
    B_ = s.train.batch_size;
    // precision bf16 on a CPU device: the matmuls multiply bf16 operands where the CPU can
    // (graphs/train/precision.cpp), so do ours
    bf16_ = s.precision == "bf16" && kernels::cpu::native_bf16();
    sizes_.push_back(train_.cols);
    for (int h : s.model.hidden) sizes_.push_back(h);
    sizes_.push_back(train_.num_classes);
    Rng rng(s.model.init_seed);
    const size_t L = sizes_.size() - 1;
    for (size_t l = 0; l < L; ++l) {
      const int64_t in = sizes_[l], out = sizes_[l + 1];
      const std::string pre = "fc" + std::to_string(l + 1);
      const float bound = 1.0f / std::sqrt((float)in);
      RefParam w{pre + ".weight", {out, in}, std::vector<float>((size_t)(out * in))};
      RefParam b{pre + ".bias", {out}, std::vector<float>((size_t)out)};
      for (float& x : w.value) x = rng.uniform(-bound, bound);
      for (float& x : b.value) x = rng.uniform(-bound, bound);
      params_.push_back(std::move(w));
      params_.push_back(std::move(b));
    }
    for (auto& p : params_) grads_.emplace_back(p.value.size());
    steps_per_epoch_ = std::max<int64_t>(1, train_.rows / B_);
  }

  std::vector<RefParam>& params() { return params_; }
  const std::vector<RefParam>& params() const { return params_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  double last_loss() const { return last_loss_; }

  // Gradients of step t at the current parameters, in params() order (overwritten each call).
  const std::vector<std::vector<float>>& grads(int64_t t) {
    const int64_t e = t / steps_per_epoch_;
    if (e != epoch_) {
      epoch_ = e;
      perm_ = permutation(train_.rows, spec_.train.seed * 1000003ull + (uint64_t)e);
    }
    const int64_t base = (t % steps_per_epoch_) * B_;
    const int D = (int)train_.cols;
    std::vector<float> x((size_t)B_ * D);  // (B, D)
    std::vector<int32_t> labels(B_);       // (B)
    const float inv = 1.0f / 255.0f;
    for (int i = 0; i < B_; ++i) {
      const int64_t r = perm_[base + i];
      for (int j = 0; j < D; ++j) x[(size_t)i * D + j] = (float)train_.images[r * D + j] * inv;
      labels[i] = train_.labels[r];
    }
    namespace k = kernels::cpu;
    const size_t L = sizes_.size() - 1;
    std::vector<std::vector<float>> z(L), a(L), dz(L), da(L);  // (B, sizes[l+1])
    // the engine's MLP stores its weights (in, out) (Param::in_out, docs/zenflow.md) and calls the
    // matmul kernels that way: so does the reference, on transposed copies of its (out, in) weights
    std::vector<std::vector<float>> wt(L);  // (in, out)
    for (size_t l = 0; l < L; ++l) {
      const int in = (int)sizes_[l], out = (int)sizes_[l + 1];
      wt[l].resize((size_t)in * out);
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i) wt[l][(size_t)i * out + o] = params_[2 * l].value[(size_t)o * in + i];
    }
    for (size_t l = 0; l < L; ++l) {
      const int in = (int)sizes_[l], out = (int)sizes_[l + 1];
      const float* xin = l == 0 ? x.data() : a[l - 1].data();
      z[l].assign((size_t)B_ * out, 0.0f);
      k::matmul_fwd(xin, wt[l].data(), z[l].data(), B_, in, out, true, bf16_);
      k::bias_add(z[l].data(), params_[2 * l + 1].value.data(), B_, out);
      if (l + 1 < L) {
        a[l].assign(z[l].size(), 0.0f);
        if (gelu_)
          k::gelu_fwd(z[l].data(), a[l].data(), z[l].size());
        else
          k::relu_fwd(z[l].data(), a[l].data(), z[l].size());
      }
    }
    const int C = (int)sizes_.back();
    std::vector<float> probs((size_t)B_ * C);  // (B, C)
    int64_t correct = 0;
    last_loss_ = k::softmax_xent_fwd(z[L - 1].data(), labels.data(), probs.data(), B_, C, &correct) / B_;
    dz[L - 1].assign(probs.size(), 0.0f);
    k::softmax_xent_bwd(probs.data(), labels.data(), dz[L - 1].data(), B_, C, 1.0f / (float)B_);
    for (size_t l = L; l-- > 0;) {
      const int in = (int)sizes_[l], out = (int)sizes_[l + 1];
      const float* xin = l == 0 ? x.data() : a[l - 1].data();
      std::vector<float> gt((size_t)in * out);  // (in, out), then the (out, in) gradient
      k::matmul_bwd_weight(dz[l].data(), xin, gt.data(), B_, in, out, false, true, bf16_);
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i) grads_[2 * l][(size_t)o * in + i] = gt[(size_t)i * out + o];
      k::bias_grad(dz[l].data(), grads_[2 * l + 1].data(), B_, out);
      if (l > 0) {
        da[l - 1].assign((size_t)B_ * in, 0.0f);
        dz[l - 1].assign((size_t)B_ * in, 0.0f);
        k::matmul_bwd_data(dz[l].data(), wt[l].data(), da[l - 1].data(), B_, in, out, true, bf16_);
        if (gelu_)
          k::gelu_bwd(z[l - 1].data(), da[l - 1].data(), dz[l - 1].data(), z[l - 1].size());
        else
          k::relu_bwd(z[l - 1].data(), da[l - 1].data(), dz[l - 1].data(), z[l - 1].size());
      }
    }
    return grads_;
  }

 private:
  Spec spec_;
  ImageSet train_;
  bool gelu_ = false;
  int B_ = 0;
  bool bf16_ = false;
  std::vector<int64_t> sizes_;
  std::vector<RefParam> params_;
  std::vector<std::vector<float>> grads_;
  int64_t steps_per_epoch_ = 1;
  int64_t epoch_ = -1;
  std::vector<int32_t> perm_;
  double last_loss_ = 0.0;
};

}  // namespace zf::ref
