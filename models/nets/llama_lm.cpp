// The Llama / Qwen2 workload's data and steps (models/nets/llama.hpp): token windows as the GPT's token
// path (models/nets/gpt.cpp) or fixed rows (models/data/lm_rows.hpp) loaded by a host-side gather task;
// forward, loss (mean cross-entropy over the batch's targets >= 0), backward; evaluation over the
// first eval_limit windows or rows.
#include <algorithm>
#include <cstdio>

#include "models/nets/llama.hpp"
#include "models/nets/llama_parts.hpp"
#include "runtime/error.hpp"

namespace zf {
namespace {

// Every input id in [0, V), every target in [-1, V), T ids per row.
void check_rows(const LmRows& r, int64_t T, int64_t V, const std::string& which) {
  const std::string where = "language-model rows (" + which + "): " + r.description;
  if (r.T != T) throw InputError(where, "rows of " + std::to_string(r.T) + " tokens, expected model.context = " +
                                            std::to_string(T));
  const size_t n = (size_t)r.rows * (size_t)T;
  if (r.tokens.size() != n || r.targets.size() != n)
    throw InputError(where, "expected " + std::to_string(n) + " input and target ids");
  for (size_t i = 0; i < n; ++i)
    if (r.tokens[i] < 0 || r.tokens[i] >= V || r.targets[i] < -1 || r.targets[i] >= V)
      throw InputError(where, "row " + std::to_string(i / (size_t)T) + ": id " +
                                  std::to_string(r.tokens[i] < 0 || r.tokens[i] >= V ? r.tokens[i] : r.targets[i]) +
                                  " outside the vocabulary of " + std::to_string(V));
}

}  // namespace

LlamaLanguageModel::LlamaLanguageModel(const hf::Config& c, const LlamaOptions& o, TokenSplit data,
                                       StepStatus* status)
    : cfg_(c), opt_(o), tokens_(std::move(data)), status_(status) {
  train_src_ = {tokens_.train.bytes(), tokens_.train.size(), tokens_.train.width};
  val_src_ = {tokens_.val.bytes(), tokens_.val.size(), tokens_.val.width};
  init();
}

LlamaLanguageModel::LlamaLanguageModel(const hf::Config& c, const LlamaOptions& o, LmRowSplit data,
                                       StepStatus* status)
    : cfg_(c), opt_(o), rows_(std::move(data)), row_data_(true), status_(status) {
  check_rows(rows_.train, o.context, c.vocab_size, "training");
  check_rows(rows_.eval, o.context, c.vocab_size, "evaluation");
  train_rows_ = {rows_.train.tokens.data(), rows_.train.targets.data(), rows_.train.rows, (int32_t)o.context};
  eval_rows_ = {rows_.eval.tokens.data(), rows_.eval.targets.data(), rows_.eval.rows, (int32_t)o.context};
  init();
}

LlamaLanguageModel::~LlamaLanguageModel() = default;

std::string LlamaLanguageModel::describe() const {
  size_t n = 0;
  for (const Param& p : params_) n += p.value.numel();
  char b[256];
  std::snprintf(b, sizeof b, "%s %lldx%lld (%s), %lld heads (%lld KV), context %d, vocab %lld, %zu parameters (head %s)",
                cfg_.architecture.c_str(), (long long)cfg_.num_layers, (long long)cfg_.hidden_size,
                cfg_.model_type.c_str(), (long long)cfg_.num_heads, (long long)cfg_.num_kv_heads, opt_.context,
                (long long)cfg_.vocab_size, n, cfg_.tie_word_embeddings ? "tied" : "untied");
  return std::string(b) +
         (loaded_.from_files ? "; weights from " + opt_.dir
                             : "; initialised (model.init random, seed " + std::to_string(opt_.init_seed) + ")") +
         "; " + (row_data_ ? rows_.train.description : tokens_.description);
}

int64_t LlamaLanguageModel::epoch_size() const {
  return row_data_ ? rows_.train.rows : (train_src_.size - 1) / opt_.context;
}

int64_t LlamaLanguageModel::load_batch(const SubmitOptions& o, Acts& a, int slot, const std::vector<int64_t>& units,
                                       bool eval) {
  const std::string pre = eval ? "eval." : "";
  const int64_t T = opt_.context;
  if (!row_data_) {
    std::vector<int64_t> starts(units.size());
    for (size_t i = 0; i < units.size(); ++i) starts[i] = units[i] * T;
    insert_load_windows(o.named(pre + "load_windows"), eval ? &val_src_ : &train_src_, starts, a.tokens[slot],
                        a.targets[slot], status_);
    return (int64_t)units.size() * T;
  }
  const LmRows& r = eval ? rows_.eval : rows_.train;
  std::vector<int32_t> rows(units.size());
  int64_t count = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    rows[i] = (int32_t)units[i];
    if (units[i] < 0 || units[i] >= r.rows) continue;  // the task reports it
    const int32_t* tg = r.targets.data() + (size_t)units[i] * (size_t)T;
    count += std::count_if(tg, tg + T, [](int32_t y) { return y >= 0; });
  }
  insert_load_rows(o.named(pre + "load_rows"), eval ? &eval_rows_ : &train_rows_, rows, a.tokens[slot],
                   a.targets[slot], status_);
  return count;
}

void LlamaLanguageModel::run_batch(const SubmitOptions& o, int slot, const std::vector<int64_t>& units,
                                   const Tensor& stats, bool eval) {
  Acts& a = acts_for((int)units.size(), o.rt && o.rt->activations_bf16(), o.rt && o.rt->activation_grads_bf16());
  const int64_t count = load_batch(o, a, slot, units, eval);
  LayerHook* hook = eval ? nullptr : hook_;  // evaluation: the weights are whole
  const int chunk = head_chunk(o, (int64_t)a.B * opt_.context);
  forward(o, a, a.tokens[slot], hook, chunk);
  if (eval) {
    const Tensor& xf = o.rt && o.rt->matmul_inputs_bf16() ? a.xf_h : a.xf;  // as forward's
    if (chunk)
      insert_lm_head_xent(o.named("eval.fwd.lm_head_loss"), xf, head_->value, a.targets[slot], nullptr, nullptr,
                          stats, chunk, 1.0f, true, status_, row_data_);
    else  // (the probabilities, which nothing reads, into the gradient's buffer: one (N, V) less)
      insert_softmax_xent_fwd(o.named("eval.fwd.loss"), a.logits, a.targets[slot], a.dlogits, stats, true, status_,
                              row_data_);
    return;
  }
  // the loss and its gradient in one pass over the logits; the gradient of the mean over the
  // batch's counted targets (a batch of rows without any: a zero gradient)
  const float scale = loss_scale_ / (float)std::max<int64_t>(count, 1);
  if (!chunk)
    insert_softmax_xent_fwd_bwd(o.named("fwd_bwd.loss"), a.logits, a.targets[slot], a.dlogits, stats, scale, false,
                                status_, row_data_);
  backward(o, a, a.tokens[slot], hook, HeadLoss{chunk, &a.targets[slot], &stats, scale});
}

void LlamaLanguageModel::submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices,
                                     const Tensor& stats) {
  const std::vector<int64_t> units(indices.begin(), indices.end());
  run_batch(rt.device(step), (int)(submitted_++ & 1), units, stats, false);
}

std::vector<int64_t> LlamaLanguageModel::eval_units() const {
  const int64_t n = row_data_ ? rows_.eval.rows : (val_src_.size - 1) / opt_.context;
  const int64_t m = opt_.eval_limit > 0 ? std::min(opt_.eval_limit, n) : n;
  std::vector<int64_t> u((size_t)m);
  for (int64_t i = 0; i < m; ++i) u[(size_t)i] = i;
  return u;
}

EvalResult LlamaLanguageModel::evaluate(Runtime& rt) {
  Tensor stats = Tensor::home({3}, "eval.stats", sizeof(double));
  SubmitOptions o = rt.device(-1);
  insert_zero(o.named("eval.zero"), stats);
  const std::vector<int64_t> all = eval_units();
  for (size_t i = 0; i < all.size(); i += (size_t)opt_.eval_batch_size) {
    const size_t e = std::min(all.size(), i + (size_t)opt_.eval_batch_size);
    run_batch(o, 0, std::vector<int64_t>(all.begin() + (int64_t)i, all.begin() + (int64_t)e), stats, true);
  }
  rt.wait_all();
  stats.acquire_read();
  const double* s = stats.as<double>();
  EvalResult r{s[2] > 0 ? s[0] / s[2] : 0.0, s[2] > 0 ? s[1] / s[2] : 0.0, (int64_t)s[2]};
  stats.release();
  return r;
}

}  // namespace zf
