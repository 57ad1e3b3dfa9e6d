// Fine-tuning task: classify a KJV verse (its text, without the reference) by testament (Old /
// New) or by section (Law, History, Poetry, Prophets, Gospels and Acts, Epistles, Revelation)
// with a GPT body (models/gpt.hpp) and a head on the final LayerNorm's output pooled over the
// verse's bytes (model.pool: "last", the output at the verse's last byte, which the causal
// attention lets see the whole verse; "max", per feature; "mean"):
// logits = pool_t(ln_f(x)_t) W^T + b, classifier.weight (n_classes, C).
// Verses are truncated to the context and padded with zero bytes (the causal attention never
// lets a padded position reach a real one; the pooling skips them). docs/gpt.md.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/gpt.hpp"

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
  std::vector<std::string> class_names;
  SequenceData train, eval;
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

}  // namespace zf
