// Text for a Hugging Face model (data.dataset "text" or "kjv" with model.type "hf", docs/hf.md
// "Data"): the text tokenized with the model's tokenizer into a zf::TokenSplit, each part one
// document as `zenflow-run tokenize` writes it (BOS first and EOS last where config.json names
// them), ids kept as uint16 when the tokenizer has at most 65536 ids, else uint32. The evaluation
// part is data.eval_path's text, or the last 10% of the file (as load_text_split, the cut moved
// forward to the next UTF-8 character). Every problem is an InputError naming the field and file.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "models/data/text.hpp"
#include "models/tokenizer/tokenizer.hpp"
#include "models/data/tokens.hpp"

namespace zf {

struct TextTokenOptions {
  std::optional<uint32_t> bos, eos;  // tok::read_special_ids(model dir)
  int64_t vocab = 0;                 // every id must be below it (the model's vocab_size); 0: no check
  std::string vocab_where;           // names it in errors, e.g. "DIR/config.json: vocab_size" ("": the data)
  int64_t context = 0;               // each part needs at least context + 1 ids (one window)
  // A progress line ("tokenize: 1.2 M tokens so far (4 s)") every 2 s for texts of 8 MB and more;
  // the caller prints it.
  std::function<void(const std::string&)> progress;
};

// One document's ids as a TokenFile (header_bytes 0, format "tokenized uint16" or "... uint32").
// `where` names it in errors ("spec.json: data.path: FILE").
TokenFile tokenize_document(std::string_view text, const tok::Tokenizer& tok, const TextTokenOptions& o,
                            const std::string& where);

// data.path (and data.eval_path when not empty) tokenized; `where`/`eval_where` name the spec
// fields ("spec.json: data.path").
TokenSplit load_text_token_split(const std::string& path, const std::string& where, const std::string& eval_path,
                                 const std::string& eval_where, const tok::Tokenizer& tok,
                                 const TextTokenOptions& o);

// A byte split made already (kjv_lm_split for data.dataset "kjv"): each part tokenized as one
// document.
TokenSplit tokenize_text_split(const TextSplit& s, const std::string& where, const tok::Tokenizer& tok,
                               const TextTokenOptions& o);

}  // namespace zf
