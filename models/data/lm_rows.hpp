// Fixed rows for a language model (issue 27: data.dataset "instructions"): each row is T input ids
// and T target ids, a target of -1 carrying no loss (a prompt token, padding). The loss and
// eval_loss are means over the targets >= 0 only (softmax_xent's ignore_negative). A sampling unit
// is one row. models/instructions.* makes them from Alpaca-style records; a language-model workload
// that takes rows loads batch b of a step from row indices[b] (docs/hf.md "Data").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zf {

struct LmRows {
  int64_t T = 0;                 // the training window (model.context)
  int64_t rows = 0;              // n
  std::vector<int32_t> tokens;   // (n, T) input ids
  std::vector<int32_t> targets;  // (n, T) next-token ids, -1 where no loss is taken
  std::string description;       // for the run header, e.g. "412 Alpaca records from FILE (T 256)"
};

// The training and evaluation rows of a run.
struct LmRowSplit {
  LmRows train, eval;
};

}  // namespace zf
