// Instruction data (data.dataset "instructions", docs/hf.md "Data"): Alpaca-style records
// (`instruction`, `input`, `output`) from a JSON array or a JSONL file, rendered in Stanford
// Alpaca's prompt templates (tatsu-lab/stanford_alpaca train.py, PROMPT_DICT), tokenized with the
// model's tokenizer as Alpaca's preprocess() does (BOS + prompt + output, EOS after the output; the
// loss on the tokens after the prompt's count only), one zf::LmRows row of T inputs/T targets each.
// Every problem with a file is an InputError naming the file, the record and the field.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/data/lm_rows.hpp"
#include "models/tokenizer/tokenizer.hpp"

namespace zf {

// Stanford Alpaca's two prompt templates, character for character (train.py, PROMPT_DICT
// "prompt_input" and "prompt_no_input"); {instruction} and {input} are replaced by the record's
// fields. The response follows "### Response:" directly (Alpaca's `source + target`).
inline constexpr const char* kAlpacaPromptInput =
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:";
inline constexpr const char* kAlpacaPromptNoInput =
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:";

// One record. `input` empty (or absent in the file) selects the no-input template, as Alpaca's
// `example.get("input", "") != ""`.
struct InstructionRecord {
  std::string instruction, input, output;
  std::string at;  // "record 12 (line 13)" (JSONL) or "record 12" (JSON array), for messages
};

// The records of a file: a JSON array of objects when its first non-blank byte is '[', else JSONL
// (one object a line; blank lines skipped). Records are numbered from 0 in file order.
// `instruction` and `output` must be non-empty strings, `input` a string when present; other
// fields are ignored. Errors read "WHERE: PATH: record N (line L): field: what".
std::vector<InstructionRecord> read_instruction_records(const std::string& path, const std::string& where);

// Alpaca's prompt for a record (without the response).
std::string alpaca_prompt(const std::string& instruction, const std::string& input);

// A line of progress for the run's output ("instructions: 12000 of 52002 records tokenized (4 s)"),
// called at most every 2 s; the caller prints it (the models layer writes nothing itself).
using ProgressLine = std::function<void(const std::string&)>;

struct InstructionOptions {
  int64_t T = 0;                     // model.context: each row holds up to T + 1 tokens
  std::optional<uint32_t> bos, eos;  // tok::read_special_ids(model dir); eos is required
  std::string specials_where;        // names them in errors, e.g. "DIR/config.json: eos_token_id"
  int64_t vocab = 0;                 // every id must be below it (the model's vocab_size); 0: no check
  std::string vocab_where;           // names it in errors, e.g. "DIR/config.json: vocab_size" ("": the data)
  ProgressLine progress;             // optional
  // data.pack: whole records (each BOS .. EOS) placed one after another into rows of T + 1 tokens
  // (a record goes to the next row when the current one cannot hold it), instead of one a row
  bool pack = false;
};

// The token ids of one record and which of them carry the loss. Alpaca: BOS (when given) +
// encode(prompt + output) + EOS, the ids from prompt_len = BOS + |encode(prompt)| on, as Alpaca's
// preprocess(); chat records (models/data/chat.hpp): `loss` marks each id (1: predicted with loss).
struct RenderedRecord {
  std::vector<uint32_t> ids;
  int64_t prompt_len = 0;      // used when `loss` is empty
  std::vector<uint8_t> loss;   // empty, or one flag per id
  bool has_loss(size_t k) const { return loss.empty() ? (int64_t)k >= prompt_len : loss[k] != 0; }
};
RenderedRecord render_record(const InstructionRecord& r, const tok::Tokenizer& tok, std::optional<uint32_t> bos,
                             uint32_t eos);

// Rows of records: row i = record i (o.pack: records packed in order, as many whole records a row
// as fit in T + 1 tokens; the loss on each record's response tokens only, attention across the
// records of a row as in Hugging Face's packing without position resets). ids longer than T + 1
// are cut to their first T + 1 (the end of the response and the EOS dropped; counted in
// *truncated); a record with no response token within T + 1 (its prompt alone is T tokens or more)
// is an InputError. Inputs past the record's end are EOS (their targets -1). `file` names the
// records' file in errors and the description.
LmRows instruction_rows(const std::vector<InstructionRecord>& records, const tok::Tokenizer& tok,
                        const InstructionOptions& o, const std::string& file, int64_t* truncated);

// What instruction_rows does, for any records: `render(i)` gives record i's ids and loss flags,
// `at(i)` names it ("record 12 (line 13)"); `kind` names the records in the progress line
// ("instructions", "chat"). The renderer places BOS and EOS; o.eos (when given) only fills the
// inputs past a record's end, 0 without it.
LmRows masked_rows(int64_t n, const std::function<RenderedRecord(int64_t)>& render,
                   const std::function<std::string(int64_t)>& at, const tok::Tokenizer& tok, const InstructionOptions& o,
                   const std::string& file, const std::string& kind, int64_t* truncated);

// The records of a JSON array (first non-blank byte '[') or JSONL file, each given to
// `each(value, w, at)` in file order (w: "WHERE: PATH: record N (line L)", at: "record N (line
// L)"). `expected` says what the file should hold, for errors (no records, not JSON).
using JsonRecordFn = std::function<void(const nlohmann::json&, const std::string&, const std::string&)>;
void read_json_records(const std::string& path, const std::string& where, const std::string& expected,
                       const JsonRecordFn& each);

[[noreturn]] void throw_too_few_records(const std::string& w, size_t n);

// Records i % 10 == 9 of `train` moved to `eval` (the held-out split without data.eval_path);
// fewer than 10 records is an InputError naming `w`.
template <class R>
void hold_out_every_10th(std::vector<R>& train, std::vector<R>& eval, const std::string& w) {
  if (train.size() < 10) throw_too_few_records(w, train.size());
  std::vector<R> kept;
  for (size_t i = 0; i < train.size(); ++i) (i % 10 == 9 ? eval : kept).push_back(std::move(train[i]));
  train = std::move(kept);
}

// Training and evaluation rows: the records of `path`, and those of `eval_path` when it is not
// empty; without it, record i of `path` is held out for evaluation when i % 10 == 9 (every 10th
// record, so at least 10 records). `where`/`eval_where` name the spec fields ("spec.json:
// data.path"). The descriptions say how many records were truncated.
LmRowSplit load_instruction_split(const std::string& path, const std::string& where, const std::string& eval_path,
                                  const std::string& eval_where, const tok::Tokenizer& tok,
                                  const InstructionOptions& o);

}  // namespace zf
