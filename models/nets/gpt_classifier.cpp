// Verse classification on a GPT body: the padded verse tables and their split, the majority
// baseline, and one step's graph: body forward, pooling, linear head, cross-entropy, backward
// (models/nets/gpt_classifier.hpp; matches ref::GptRef::cls_loss in tests/reference/gpt_ref.hpp).
#include "models/nets/gpt_classifier.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "codelets/kernels/class_posterior.hpp"

namespace zf {

// ------------------------------------------------------------------ the verse task

void SequenceData::add(const std::string& text, int32_t label, int32_t verse_index) {
  const size_t n = std::min(text.size(), (size_t)T);
  table.resize(table.size() + (size_t)T, 0);
  std::copy(text.begin(), text.begin() + (int64_t)n, table.end() - T);
  lengths.push_back((int32_t)n);
  labels.push_back(label);
  verse.push_back(verse_index);
  ++rows;
}

int32_t verse_label(const Verse& v, const std::string& labels) {
  const BibleBook& b = bible_books().at(v.book);
  return labels == "section" ? b.section : b.testament;
}

VerseTask make_verse_task(const std::vector<Verse>& verses, const std::string& labels, const std::string& split,
                          int context) {
  VerseTask t;
  t.class_names = labels == "section" ? bible_sections() : bible_testaments();
  t.labels = labels;
  t.train.T = t.eval.T = context;
  for (size_t i = 0; i < verses.size(); ++i) {
    const Verse& v = verses[i];
    const bool held_out = split == "book" ? bible_books().at(v.book).validation : kjv_held_out_verse(i);
    (held_out ? t.eval : t.train).add(v.text, verse_label(v, labels), (int32_t)i);
    (held_out ? t.eval_verses : t.train_verses).push_back((int32_t)i);
  }
  std::vector<int64_t> count(t.class_names.size(), 0);
  for (int32_t l : t.train.labels) ++count[l];
  t.majority = (int32_t)(std::max_element(count.begin(), count.end()) - count.begin());
  int64_t hit = std::count(t.eval.labels.begin(), t.eval.labels.end(), t.majority);
  t.majority_baseline = t.eval.rows ? (double)hit / (double)t.eval.rows : 0.0;
  char b[256];
  std::snprintf(b, sizeof b,
                "KJV verses by %s, %s split: %lld training, %lld held out; majority-class baseline %.2f %% (%s)",
                labels.c_str(), split.c_str(), (long long)t.train.rows, (long long)t.eval.rows,
                100.0 * t.majority_baseline, t.class_names[t.majority].c_str());
  t.description = b;
  return t;
}

struct GptClassifier::Head {
  int B;
  Tensor tokens[2], len[2], labels[2];  // (B, T), (B), (B) int32
  Tensor pooled, dpooled;               // (B, C)
  Tensor logits, probs, dlogits;        // (B, n_classes)
};

GptClassifier::GptClassifier(const GptConfig& cfg, VerseTask task, const std::string& pool, StepStatus* status)
    : cfg_(cfg),
      task_(std::move(task)),
      pool_(pool == "max" ? Pool::Max : pool == "last" ? Pool::Last : Pool::Mean),
      status_(status),
      rng_(cfg.init_seed) {
  const int32_t nc = (int32_t)task_.class_names.size();
  train_table_ = {task_.train.table.data(), task_.train.rows, task_.train.T, task_.train.lengths.data(),
                  task_.train.labels.data(), nc};
  eval_table_ = {task_.eval.table.data(), task_.eval.rows, task_.eval.T, task_.eval.lengths.data(),
                 task_.eval.labels.data(), nc};
  body_ = std::make_unique<GptBody>(cfg_, rng_);
  weight_ = gpt_param("classifier.weight", {nc, cfg_.n_embd}, rng_, 0.02f, true);
  bias_ = gpt_param("classifier.bias", {nc}, rng_, 0.0f, false);
}

GptClassifier::~GptClassifier() = default;

std::string GptClassifier::describe() const {
  return describe_gpt(cfg_, body_->numel() + weight_.value.numel() + bias_.value.numel()) +
         (pool_ == Pool::Max ? " + max-pool classifier; " : pool_ == Pool::Last ? " + last-byte classifier; "
                             : " + mean-pool classifier; ") +
         task_.description;
}

std::vector<Param*> GptClassifier::params() {
  std::vector<Param*> out;
  for (auto& p : body_->params()) out.push_back(&p);
  out.push_back(&weight_);
  out.push_back(&bias_);
  return out;
}

bool GptClassifier::optional_on_init(const std::string& name) const {
  return name == weight_.name || name == bias_.name;
}
bool GptClassifier::ignorable_on_init(const std::string& name) const { return name == "lm_head.weight"; }

std::vector<std::vector<Param*>> GptClassifier::layer_groups() {
  std::vector<std::vector<Param*>> g = body_->groups();
  g.back().push_back(&weight_);
  g.back().push_back(&bias_);
  return g;
}

GptClassifier::Head& GptClassifier::head_for(int B) {
  for (auto& h : heads_)
    if (h->B == B) return *h;
  auto h = std::make_unique<Head>();
  h->B = B;
  const int64_t T = cfg_.context, C = cfg_.n_embd, K = (int64_t)task_.class_names.size();
  const std::string tag = ".b" + std::to_string(B);
  for (int s = 0; s < 2; ++s) {
    const std::string n = tag + "." + std::to_string(s);
    h->tokens[s] = Tensor::lazy({B, T}, "tokens" + n, sizeof(int32_t));
    h->len[s] = Tensor::lazy({B}, "len" + n, sizeof(int32_t));
    h->labels[s] = Tensor::lazy({B}, "labels" + n, sizeof(int32_t));
  }
  h->pooled = Tensor::lazy({B, C}, "pooled" + tag);
  h->dpooled = Tensor::lazy({B, C}, "dpooled" + tag);
  h->logits = Tensor::lazy({B, K}, "cls.logits" + tag);
  h->probs = Tensor::lazy({B, K}, "cls.probs" + tag);
  h->dlogits = Tensor::lazy({B, K}, "cls.dlogits" + tag);
  heads_.push_back(std::move(h));
  return *heads_.back();
}

void GptClassifier::run_batch(const SubmitOptions& o, int slot, const std::vector<int32_t>& rows,
                              const SequenceTable* table, const Tensor& stats, bool accumulate, bool backward) {
  const int B = (int)rows.size();
  Head& h = head_for(B);
  GptBody::Acts& a = body_->acts_for(B, cfg_.context, o.rt && o.rt->activations_bf16(),
                                            o.rt && o.rt->activation_grads_bf16());
  const std::string pre = backward ? "" : "eval.";
  insert_load_sequences(o.named(pre + "load_sequences"), table, rows, h.tokens[slot], h.len[slot], h.labels[slot],
                        status_);
  LayerHook* hook = backward ? hook_ : nullptr;  // evaluation: the weights are whole
  const int last = cfg_.n_layer + 1;                // {ln_f, classifier}
  body_->forward(o, a, h.tokens[slot], nullptr, hook);
  if (pool_ == Pool::Max)
    insert_max_pool_fwd(o.named(pre + "fwd.pool"), GptBody::out(a), h.len[slot], h.pooled);
  else if (pool_ == Pool::Last)
    insert_last_pool_fwd(o.named(pre + "fwd.pool"), GptBody::out(a), h.len[slot], h.pooled);
  else
    insert_mean_pool_fwd(o.named(pre + "fwd.pool"), GptBody::out(a), h.len[slot], h.pooled);
  insert_matmul_fwd(o.named(pre + "fwd.classifier"), h.pooled, weight_.value, h.logits);
  insert_bias_add(o.named(pre + "fwd.classifier.bias"), h.logits, bias_.value);
  if (hook) hook->after_forward(o.step, last);
  insert_softmax_xent_fwd(o.named(pre + "fwd.loss"), h.logits, h.labels[slot], h.probs, stats, accumulate, status_);
  if (!backward) return;
  insert_softmax_xent_bwd(o.named("bwd.loss"), h.probs, h.labels[slot], h.dlogits, loss_scale_ / (float)B);
  if (hook) hook->before_backward(o.step, last);
  insert_matmul_bwd_weight(o.named("bwd.classifier.dw"), h.dlogits, h.pooled, weight_.grad);
  insert_bias_grad(o.named("bwd.classifier.db"), h.dlogits, bias_.grad);
  insert_matmul_bwd_data(o.named("bwd.classifier.dx"), h.dlogits, weight_.value, h.dpooled);
  if (pool_ == Pool::Max)
    insert_max_pool_bwd(o.named("bwd.pool"), GptBody::out(a), h.dpooled, h.len[slot], GptBody::d_out(a));
  else if (pool_ == Pool::Last)
    insert_last_pool_bwd(o.named("bwd.pool"), h.dpooled, h.len[slot], GptBody::d_out(a));
  else
    insert_mean_pool_bwd(o.named("bwd.pool"), h.dpooled, h.len[slot], GptBody::d_out(a));
  body_->backward(o, a, h.tokens[slot], GptBody::d_out(a), nullptr, hook);
}

void GptClassifier::submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices,
                                const Tensor& stats) {
  run_batch(rt.device(step), (int)(submitted_++ & 1), indices, &train_table_, stats, false, true);
}

EvalResult GptClassifier::evaluate(Runtime& rt) {
  Tensor stats = Tensor::home({3}, "eval.stats", sizeof(double));
  SubmitOptions o = rt.device(-1);
  insert_zero(o.named("eval.zero"), stats);
  std::vector<int32_t> all;
  const int64_t n = task_.eval.rows;
  if (cfg_.eval_limit > 0 && cfg_.eval_limit < n)
    for (int64_t i = 0; i < cfg_.eval_limit; ++i) all.push_back((int32_t)(i * n / cfg_.eval_limit));
  else
    for (int64_t i = 0; i < n; ++i) all.push_back((int32_t)i);
  for (size_t i = 0; i < all.size(); i += (size_t)cfg_.eval_batch_size) {
    const size_t e = std::min(all.size(), i + (size_t)cfg_.eval_batch_size);
    std::vector<int32_t> rows(all.begin() + (int64_t)i, all.begin() + (int64_t)e);
    run_batch(o, 0, rows, &eval_table_, stats, true, false);
  }
  rt.wait_all();
  stats.acquire_read();
  const double* s = stats.as<double>();
  EvalResult r{s[0] / s[2], s[1] / s[2], (int64_t)s[2]};
  stats.release();
  return r;
}

// ------------------------------------------------------------------ the generative head

VerseChunks make_verse_chunks(const std::vector<Verse>& verses, const std::vector<int32_t>& which,
                              const std::string& labels, int T) {
  VerseChunks c;
  for (int32_t i : which) {
    const Verse& v = verses.at((size_t)i);
    const int32_t vi = (int32_t)c.offset.size();
    c.offset.push_back((int64_t)c.text.size());
    c.text.insert(c.text.end(), v.text.begin(), v.text.end());
    c.text.push_back('\n');
    const int32_t n = (int32_t)v.text.size() + 1;
    c.size.push_back(n);
    c.labels.push_back(verse_label(v, labels));
    c.first_chunk.push_back((int32_t)c.chunks.size());
    for (int32_t j = 0; j < n; j += T) {
      c.chunks.push_back({c.offset.back() + j, std::min(T, n - j), c.labels.back(), c.labels.back()});
      c.chunk_verse.push_back(vi);
    }
  }
  c.first_chunk.push_back((int32_t)c.chunks.size());
  return c;
}

struct GptGenerativeClassifier::Head : LmBuffers {
  Head(int B, int64_t T, int64_t V) : LmBuffers(B, T, V) {
    const std::string tag = ".b" + std::to_string(B);
    for (int s = 0; s < 2; ++s) {
      classes[s] = Tensor::lazy({B}, "classes" + tag + "." + std::to_string(s), sizeof(int32_t));
      labels[s] = Tensor::lazy({B}, "labels" + tag + "." + std::to_string(s), sizeof(int32_t));
    }
  }
  Tensor classes[2], labels[2];  // (B) int32: each chunk's conditioning class and true label
};

GptGenerativeClassifier::GptGenerativeClassifier(const GptConfig& cfg, VerseTask task, const std::vector<Verse>& verses,
                                                 StepStatus* status)
    : cfg_(cfg), task_(std::move(task)), status_(status), rng_(cfg.init_seed) {
  train_ = make_verse_chunks(verses, task_.train_verses, task_.labels, cfg_.context);
  eval_ = make_verse_chunks(verses, task_.eval_verses, task_.labels, cfg_.context);
  train_src_ = {train_.text.data(), (int64_t)train_.text.size()};
  eval_src_ = {eval_.text.data(), (int64_t)eval_.text.size()};
  std::vector<int64_t> count(task_.class_names.size(), 0);
  for (int32_t l : train_.labels) ++count[(size_t)l];
  for (int64_t n : count) log_prior_.push_back(std::log((double)std::max<int64_t>(n, 1) / (double)train_.labels.size()));
  prior_ = Tensor::home({(int64_t)count.size()}, "cls.log_prior", sizeof(double));
  std::copy(log_prior_.begin(), log_prior_.end(), prior_.as<double>());
  body_ = std::make_unique<GptBody>(cfg_, rng_);
  lm_head_ = gpt_param("lm_head.weight", {cfg_.vocab, cfg_.n_embd}, rng_, 0.02f, true);
  class_emb_ = gpt_param("class_embedding", {(int64_t)task_.class_names.size(), cfg_.n_embd}, rng_, 0.0f, false);
}

GptGenerativeClassifier::~GptGenerativeClassifier() = default;

std::string GptGenerativeClassifier::describe() const {
  return describe_gpt(cfg_, body_->numel() + lm_head_.value.numel() + class_emb_.value.numel()) +
         " + generative classifier (class byte and embedding, " +
         std::to_string(train_.chunks.size()) + " training chunks); " + task_.description;
}

std::vector<Param*> GptGenerativeClassifier::params() {
  std::vector<Param*> out;
  for (auto& p : body_->params()) out.push_back(&p);
  out.push_back(&lm_head_);
  out.push_back(&class_emb_);
  return out;
}

GptGenerativeClassifier::Head& GptGenerativeClassifier::head_for(int B) {
  for (auto& h : heads_)
    if (h->B == B) return *h;
  heads_.push_back(std::make_unique<Head>(B, cfg_.context, cfg_.vocab));
  return *heads_.back();
}

std::vector<std::vector<Param*>> GptGenerativeClassifier::layer_groups() {
  std::vector<std::vector<Param*>> g = body_->groups();
  g.front().push_back(&class_emb_);  // read by the embeddings' forward, written by their backward
  g.back().push_back(&lm_head_);
  return g;
}

void GptGenerativeClassifier::run_batch(const SubmitOptions& o, int slot, const std::vector<kernels::cpu::ChunkRef>& refs,
                                        const TextSource* src, const Tensor* stats, const Tensor* out, int64_t offset) {
  const bool backward = stats != nullptr;  // training: loss and backward; evaluation: log-likelihoods
  const int B = (int)refs.size();
  Head& h = head_for(B);
  GptBody::Acts& a = body_->acts_for(B, cfg_.context, o.rt && o.rt->activations_bf16(),
                                            o.rt && o.rt->activation_grads_bf16());
  const std::string pre = backward ? "" : "eval.";
  insert_load_chunks(o.named(pre + "load_chunks"), src, refs, h.tokens[slot], h.targets[slot], h.classes[slot],
                     h.labels[slot], status_);
  const GptBody::Conditioning cond{&class_emb_.value, &class_emb_.grad, &h.classes[slot]};
  LayerHook* hook = backward ? hook_ : nullptr;  // evaluation: the weights are whole
  const int last = cfg_.n_layer + 1;                // {ln_f, lm_head}
  body_->forward(o, a, h.tokens[slot], &cond, hook);
  const Tensor& x = GptBody::out(a);
  insert_matmul_fwd(o.named(pre + "fwd.lm_head"), x, lm_head_.value, h.logits);
  if (hook) hook->after_forward(o.step, last);
  if (!backward) {
    insert_sequence_logprob(o.named("eval.logprob"), h.logits, h.targets[slot], *out, offset, B);
    return;
  }
  insert_gen_class_loss(o.named("fwd.loss"), h.logits, h.targets[slot], h.labels[slot], prior_, h.dlogits, *stats,
                        (int)task_.class_names.size(), kLmWeight, status_);
  if (loss_scale_ != 1.0f)  // precision fp16: the loss scale (exact for DeepSpeed's powers of two)
    insert_scale(o.named("fwd.loss.scale"), h.dlogits, loss_scale_);
  if (hook) hook->before_backward(o.step, last);
  insert_matmul_bwd_weight(o.named("bwd.lm_head.dw"), h.dlogits, x, lm_head_.grad);
  insert_matmul_bwd_data(o.named("bwd.lm_head.dx"), h.dlogits, lm_head_.value, GptBody::d_out(a));
  body_->backward(o, a, h.tokens[slot], GptBody::d_out(a), &cond, hook);
}

void GptGenerativeClassifier::submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices,
                                          const Tensor& stats) {
  // rows k*B + b: chunk b under class k (the loss compares each chunk's likelihoods)
  const int K = (int)task_.class_names.size();
  std::vector<kernels::cpu::ChunkRef> refs;
  refs.reserve((size_t)K * indices.size());
  for (int k = 0; k < K; ++k)
    for (int32_t i : indices) {
      kernels::cpu::ChunkRef r = train_.chunks.at((size_t)i);
      r.cls = k;
      refs.push_back(r);
    }
  run_batch(rt.device(step), (int)(submitted_++ & 1), refs, &train_src_, &stats, nullptr, 0);
}

EvalResult GptGenerativeClassifier::evaluate(Runtime& rt) {
  const int64_t nv = (int64_t)eval_.offset.size();
  scored_.clear();
  if (cfg_.eval_limit > 0 && cfg_.eval_limit < nv)
    for (int64_t i = 0; i < cfg_.eval_limit; ++i) scored_.push_back((int32_t)(i * nv / cfg_.eval_limit));
  else
    for (int64_t i = 0; i < nv; ++i) scored_.push_back((int32_t)i);
  std::vector<kernels::cpu::ChunkRef> chunks;  // the scored verses' chunks, in order
  for (int32_t v : scored_)
    for (int32_t c = eval_.first_chunk[(size_t)v]; c < eval_.first_chunk[(size_t)v + 1]; ++c) chunks.push_back(eval_.chunks[(size_t)c]);
  const int K = (int)task_.class_names.size();
  const int64_t nc = (int64_t)chunks.size();
  Tensor ll = Tensor::home({K * nc}, "eval.loglik", sizeof(double));
  SubmitOptions o = rt.device(-1);
  insert_zero(o.named("eval.zero"), ll);
  for (int k = 0; k < K; ++k)
    for (int64_t i = 0; i < nc; i += cfg_.eval_batch_size) {
      const int64_t e = std::min(nc, i + (int64_t)cfg_.eval_batch_size);
      std::vector<kernels::cpu::ChunkRef> refs(chunks.begin() + i, chunks.begin() + e);
      for (auto& r : refs) r.cls = k;
      run_batch(o, 0, refs, &eval_src_, nullptr, &ll, k * nc + i);
    }
  rt.wait_all();
  ll.acquire_read();
  const double* l = ll.as<double>();
  const int64_t n = (int64_t)scored_.size();
  scores_.assign((size_t)K * n, 0.0);
  for (int k = 0; k < K; ++k) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t v = scored_[(size_t)i];
      double s = 0.0;
      for (int32_t j = eval_.first_chunk[(size_t)v]; j < eval_.first_chunk[(size_t)v + 1]; ++j) s += l[k * nc + c++];
      scores_[(size_t)k * n + i] = s;
    }
  }
  ll.release();
  double loss = 0.0;
  int64_t ok = 0;
  for (int64_t i = 0; i < n; ++i) {  // Bayes' rule as in the training loss
    const double* s = scores_.data() + i;
    const kernels::posterior::Posterior p = kernels::posterior::of(s, n, log_prior_.data(), K);
    const int32_t y = eval_.labels[(size_t)scored_[(size_t)i]];
    loss += kernels::posterior::loss(p, s, n, log_prior_.data(), y);
    ok += p.arg == y;
  }
  return EvalResult{n ? loss / (double)n : 0.0, n ? (double)ok / (double)n : 0.0, n};
}

}  // namespace zf
