// Fine-tuning task: classify a KJV verse (its text, without the reference) by testament (Old /
// New) or by section (Law, History, Poetry, Prophets, Gospels and Acts, Epistles, Revelation)
// with a GPT body (models/nets/gpt.hpp) and a head on the final LayerNorm's output pooled over the
// verse's bytes (model.pool: "last", the output at the verse's last byte, which the causal
// attention lets see the whole verse; "max", per feature; "mean"):
// logits = pool_t(ln_f(x)_t) W^T + b, classifier.weight (n_classes, C).
// Verses are truncated to the context and padded with zero bytes (the causal attention never
// lets a padded position reach a real one; the pooling skips them).
// The generative head (model.head "generative", GptGenerativeClassifier) has no classification
// layer: the language model itself, conditioned on the class (a class byte first and a class
// embedding added at every position), is fine-tuned on the training verses, and a verse is
// classified by Bayes' rule over its whole text. docs/gpt.md.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/nets/gpt.hpp"

namespace zf {

// A padded table of byte sequences with lengths and labels (SequenceTable's storage).
struct SequenceData {
  int T = 0;
  int64_t rows = 0;
  std::vector<uint8_t> table;  // (rows, T)
  std::vector<int32_t> lengths, labels;
  std::vector<int32_t> verse;  // index of the verse each row came from
  void add(const std::string& text, int32_t label, int32_t verse_index);
};

struct VerseTask {
  std::string labels;  // testament | section
  std::vector<std::string> class_names;
  SequenceData train, eval;
  std::vector<int32_t> train_verses, eval_verses;  // indices into the verse list, in order
  int32_t majority = 0;            // most frequent training class
  double majority_baseline = 0.0;  // share of the evaluation set in that class
  std::string description;
};

// labels "testament" | "section"; split "book" (evaluate on the held-out books of text.cpp,
// train on the others) | "verse" (evaluate on every 10th verse, index % 10 == 9, of all books).
int32_t verse_label(const Verse& v, const std::string& labels);
VerseTask make_verse_task(const std::vector<Verse>& verses, const std::string& labels, const std::string& split,
                          int context);

class GptClassifier : public Workload {
 public:
  // pool: "last" | "max" | "mean" over the verse's positions
  GptClassifier(const GptConfig& cfg, VerseTask task, const std::string& pool, StepStatus* status);
  ~GptClassifier() override;
  std::string describe() const override;
  std::vector<Param*> params() override;
  int64_t epoch_size() const override { return task_.train.rows; }
  int batch_size() const override { return cfg_.batch_size; }
  void submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices,
                   const Tensor& stats) override;
  EvalResult evaluate(Runtime& rt) override;
  // A language-model checkpoint initialises the body: the head may be missing, lm_head ignored.
  bool optional_on_init(const std::string& name) const override;
  bool ignorable_on_init(const std::string& name) const override;
  // ZeRO stage 3: the body's groups, the classification layer with ln_f (as the language model's head)
  std::vector<std::vector<Param*>> layer_groups() override;
  int64_t activation_bytes() const override { return body_->activation_bytes(); }  // the body's
  const VerseTask& task() const { return task_; }

 private:
  struct Head;
  Head& head_for(int B);
  void run_batch(const SubmitOptions& o, int slot, const std::vector<int32_t>& rows, const SequenceTable* table,
                 const Tensor& stats, bool accumulate, bool backward);

  GptConfig cfg_;
  VerseTask task_;
  enum class Pool { Mean, Max, Last } pool_;
  SequenceTable train_table_{}, eval_table_{};
  StepStatus* status_;
  Rng rng_;
  std::unique_ptr<GptBody> body_;
  Param weight_, bias_;
  std::vector<std::unique_ptr<Head>> heads_;
  int64_t submitted_ = 0;
};

// The generative head's data: whole verses, each as its bytes and the closing '\n' (the language
// model's verse separator), cut into chunks of at most T scored bytes. Chunk j of a verse of n
// bytes scores bytes [j T, min(n, (j + 1) T)), each predicted from the class byte and the bytes
// of the chunk before it (the context restarts at every chunk).
struct VerseChunks {
  std::vector<uint8_t> text;  // the verses one after another
  std::vector<int64_t> offset;
  std::vector<int32_t> size, labels;           // per verse: bytes (with '\n'), class
  std::vector<kernels::cpu::ChunkRef> chunks;  // class: the verse's (the evaluation sets each class in turn)
  std::vector<int32_t> chunk_verse;            // the verse (index into offset) of each chunk
  std::vector<int32_t> first_chunk;            // verse v's chunks: [first_chunk[v], first_chunk[v + 1])
};
VerseChunks make_verse_chunks(const std::vector<Verse>& verses, const std::vector<int32_t>& which,
                              const std::string& labels, int T);

class GptGenerativeClassifier : public Workload {
 public:
  GptGenerativeClassifier(const GptConfig& cfg, VerseTask task, const std::vector<Verse>& verses, StepStatus* status);
  ~GptGenerativeClassifier() override;
  std::string describe() const override;
  // the body, lm_head.weight and class_embedding (K, C)
  std::vector<Param*> params() override;
  // a language-model checkpoint lacks class_embedding: it starts at zero (the pretrained model)
  bool optional_on_init(const std::string& name) const override { return name == class_emb_.name; }
  // ZeRO stage 3: the body's groups, class_embedding with the embeddings, lm_head with ln_f
  std::vector<std::vector<Param*>> layer_groups() override;
  int64_t activation_bytes() const override { return body_->activation_bytes(); }  // the body's
  // A sampling unit is a chunk of a training verse. A step of B chunks runs K*B sequences, each
  // chunk under every class, for the loss kernels::cpu::gen_class_loss: the cross-entropy of the
  // chunk's class posterior (Bayes' rule over its K likelihoods) plus kLmWeight times the
  // language-model loss of the true-class sequences.
  static constexpr float kLmWeight = 1.0f;
  int64_t epoch_size() const override { return (int64_t)train_.chunks.size(); }
  int batch_size() const override { return cfg_.batch_size; }
  void submit_step(Runtime& rt, int64_t step, const std::vector<int32_t>& indices,
                   const Tensor& stats) override;
  // Every held-out verse scored under every class: log p(verse | class) summed over its chunks,
  // plus log prior(class) (training frequencies); accuracy of the argmax and the cross-entropy of
  // the posterior (the classification loss, per verse).
  EvalResult evaluate(Runtime& rt) override;
  const VerseTask& task() const { return task_; }
  const VerseChunks& train_chunks() const { return train_; }
  const VerseChunks& eval_chunks() const { return eval_; }
  // The log-likelihoods of the last evaluate(): (classes, held-out verses evaluated), row-major.
  const std::vector<double>& last_scores() const { return scores_; }

 private:
  struct Head;
  Head& head_for(int B);
  // stats: training (loss, backward); nullptr: evaluation (log-likelihoods into out[offset ..])
  void run_batch(const SubmitOptions& o, int slot, const std::vector<kernels::cpu::ChunkRef>& refs,
                 const TextSource* src, const Tensor* stats, const Tensor* out, int64_t offset);

  GptConfig cfg_;
  VerseTask task_;
  VerseChunks train_, eval_;
  TextSource train_src_{}, eval_src_{};
  std::vector<double> log_prior_;
  Tensor prior_;  // log_prior_ for the loss codelet (K doubles)
  StepStatus* status_;
  Rng rng_;
  std::unique_ptr<GptBody> body_;
  Param lm_head_, class_emb_;
  std::vector<std::unique_ptr<Head>> heads_;
  int64_t submitted_ = 0;
  std::vector<double> scores_;
  std::vector<int32_t> scored_;
};

}  // namespace zf
