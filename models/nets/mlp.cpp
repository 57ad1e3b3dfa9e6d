#include "models/nets/mlp.hpp"

#include <cmath>

#include "models/rng.hpp"

namespace zf {

// Buffers for one batch size; x and labels are double-buffered so the next batch can load
// while the current one is in use.
struct MlpClassifier::Acts {
  int batch;
  Tensor x[2], labels[2];
  std::vector<Tensor> z, a;    // z[l] (B, sizes[l+1]) pre-activation; a[l] (B, sizes[l+1]) post
  std::vector<Tensor> dz, da;  // gradients of z[l] and a[l]
  Tensor probs;
};

MlpClassifier::MlpClassifier(const MlpConfig& cfg, ImageSet train, ImageSet test, StepStatus* status)
    : cfg_(cfg), train_(std::move(train)), test_(std::move(test)), status_(status) {
  train_table_ = {train_.images.data(), train_.rows, train_.cols, train_.labels.data(), train_.num_classes};
  test_table_ = {test_.images.data(), test_.rows, test_.cols, test_.labels.data(), test_.num_classes};
  sizes_.push_back(train_.cols);
  for (int h : cfg_.hidden) sizes_.push_back(h);
  sizes_.push_back(train_.num_classes);
  Rng rng(cfg_.init_seed);
  const size_t L = sizes_.size() - 1;
  params_.reserve(2 * L);
  for (size_t l = 0; l < L; ++l) {
    const int64_t in = sizes_[l], out = sizes_[l + 1];
    const std::string pre = "fc" + std::to_string(l + 1);
    const float bound = 1.0f / std::sqrt((float)in);
    const bool t = cfg_.weights_in_out;
    const std::vector<int64_t> shape = t ? std::vector<int64_t>{in, out} : std::vector<int64_t>{out, in};
    Param w{pre + ".weight", Tensor::home(shape, pre + ".weight"), Tensor::lazy(shape, pre + ".weight.grad"), t};
    Param b{pre + ".bias", Tensor::home({out}, pre + ".bias"), Tensor::lazy({out}, pre + ".bias.grad")};
    for (size_t i = 0; i < w.value.numel(); ++i) {  // logical element (r, c) = i in (out, in) order
      const size_t r = i / (size_t)in, c = i % (size_t)in;
      w.value.data()[t ? c * (size_t)out + r : i] = rng.uniform(-bound, bound);
    }
    for (size_t i = 0; i < b.value.numel(); ++i) b.value.data()[i] = rng.uniform(-bound, bound);
    params_.push_back(std::move(w));
    params_.push_back(std::move(b));
  }
}

MlpClassifier::~MlpClassifier() = default;

std::string MlpClassifier::describe() const {
  std::string s = "MLP ";
  for (size_t i = 0; i < sizes_.size(); ++i) s += (i ? "-" : "") + std::to_string(sizes_[i]);
  size_t n = 0;
  for (auto& p : params_) n += p.value.numel();
  return s + (cfg_.activation == Activation::Relu ? " relu" : " gelu") + ", " + std::to_string(n) + " parameters";
}

std::vector<Param*> MlpClassifier::params() {
  std::vector<Param*> out;
  for (auto& p : params_) out.push_back(&p);
  return out;
}

std::vector<std::vector<Param*>> MlpClassifier::layer_groups() {
  std::vector<std::vector<Param*>> g;
  for (size_t l = 0; l + 1 < params_.size(); l += 2) g.push_back({&params_[l], &params_[l + 1]});
  return g;
}

MlpClassifier::Acts& MlpClassifier::acts_for(int batch, std::vector<std::unique_ptr<Acts>>& pool) {
  for (auto& a : pool)
    if (a->batch == batch) return *a;
  auto a = std::make_unique<Acts>();
  a->batch = batch;
  const std::string tag = "b" + std::to_string(batch);
  for (int s = 0; s < 2; ++s) {
    a->x[s] = Tensor::lazy({batch, sizes_[0]}, "x." + tag + "." + std::to_string(s));
    a->labels[s] = Tensor::lazy({batch}, "labels." + tag + "." + std::to_string(s), sizeof(int32_t));
  }
  const size_t L = sizes_.size() - 1;
  for (size_t l = 0; l < L; ++l) {
    const std::string n = std::to_string(l + 1);
    a->z.push_back(Tensor::lazy({batch, sizes_[l + 1]}, "z" + n + "." + tag));
    a->dz.push_back(Tensor::lazy({batch, sizes_[l + 1]}, "dz" + n + "." + tag));
    if (l + 1 < L) {
      a->a.push_back(Tensor::lazy({batch, sizes_[l + 1]}, "a" + n + "." + tag));
      a->da.push_back(Tensor::lazy({batch, sizes_[l + 1]}, "da" + n + "." + tag));
    }
  }
  a->probs = Tensor::lazy({batch, sizes_.back()}, "probs." + tag);
  pool.push_back(std::move(a));
  return *pool.back();
}

// z[l] = in(l) W_l^T + b_l ; a[l] = act(z[l]) for hidden layers
void MlpClassifier::forward(const SubmitOptions& o, Acts& a, int slot, LayerHook* hook) {
  const size_t L = sizes_.size() - 1;
  for (size_t l = 0; l < L; ++l) {
    if (hook) hook->before_forward(o.step, (int)l);
    const Tensor& in = l == 0 ? a.x[slot] : a.a[l - 1];
    const Param& w = params_[2 * l];
    const Param& b = params_[2 * l + 1];
    const std::string n = "fwd.fc" + std::to_string(l + 1);
    insert_matmul_fwd(o.named(n + ".matmul"), in, w.value, a.z[l], w.in_out);
    insert_bias_add(o.named(n + ".bias"), a.z[l], b.value);
    if (l + 1 < L) insert_act_fwd(o.named(n + ".act"), cfg_.activation, a.z[l], a.a[l]);
    if (hook) hook->after_forward(o.step, (int)l);
  }
}

void MlpClassifier::backward(const SubmitOptions& o, Acts& a, int slot) {
  const size_t L = sizes_.size() - 1;
  for (size_t l = L; l-- > 0;) {
    if (hook_) hook_->before_backward(o.step, (int)l);
    const Tensor& in = l == 0 ? a.x[slot] : a.a[l - 1];
    Param& w = params_[2 * l];
    Param& b = params_[2 * l + 1];
    const std::string n = "bwd.fc" + std::to_string(l + 1);
    insert_matmul_bwd_weight(o.named(n + ".dw"), a.dz[l], in, w.grad, w.in_out);
    insert_bias_grad(o.named(n + ".db"), a.dz[l], b.grad);
    if (l > 0) {
      insert_matmul_bwd_data(o.named(n + ".dx"), a.dz[l], w.value, a.da[l - 1], w.in_out);
      insert_act_bwd(o.named(n + ".act"), cfg_.activation, a.z[l - 1], a.da[l - 1], a.dz[l - 1]);
    }
    if (hook_) hook_->after_backward(o.step, (int)l);
  }
}

void MlpClassifier::submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices,
                                const Tensor& stats) {
  Acts& a = acts_for((int)indices.size(), train_acts_);
  const int slot = (int)(submitted_++ & 1);
  SubmitOptions o = rt.device(step);
  insert_load_batch(o.named("load_batch"), &train_table_, indices, a.x[slot], a.labels[slot], status_);
  forward(o, a, slot, hook_);
  const size_t L = sizes_.size() - 1;
  insert_softmax_xent_fwd(o.named("fwd.loss"), a.z[L - 1], a.labels[slot], a.probs, stats, false, status_);
  insert_softmax_xent_bwd(o.named("bwd.loss"), a.probs, a.labels[slot], a.dz[L - 1],
                          loss_scale_ / (float)indices.size());
  backward(o, a, slot);
}

EvalResult MlpClassifier::evaluate(Runtime& rt) {
  Tensor stats = Tensor::home({3}, "eval.stats", sizeof(double));
  SubmitOptions o = rt.device(-1);
  insert_zero(o.named("eval.zero"), stats);  // 3 doubles == 6 floats of zero bits
  const int64_t n = test_.rows;
  std::vector<int32_t> idx;
  for (int64_t start = 0; start < n; start += cfg_.eval_batch_size) {
    const int64_t b = std::min<int64_t>(cfg_.eval_batch_size, n - start);
    idx.resize(b);
    for (int64_t i = 0; i < b; ++i) idx[i] = (int32_t)(start + i);
    Acts& a = acts_for((int)b, eval_acts_);
    insert_load_batch(o.named("eval.load_batch"), &test_table_, idx, a.x[0], a.labels[0], status_);
    forward(o, a, 0);
    insert_softmax_xent_fwd(o.named("eval.loss"), a.z.back(), a.labels[0], a.probs, stats, true, status_);
  }
  rt.wait_all();
  stats.acquire_read();
  const double* s = stats.as<double>();
  EvalResult r{s[0] / s[2], s[1] / s[2], (int64_t)s[2]};
  stats.release();
  return r;
}

}  // namespace zf
