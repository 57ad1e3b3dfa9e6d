// Chat data (data.dataset "chat", docs/finetune.md "Chat records"): conversations as Hugging Face
// TRL's conversational format (`messages`: [{role, content}]) or ShareGPT's (`conversations`:
// [{from, value}]), one a record, from a JSON array or JSONL; rendered with the model's chat template
// (tokenizer_config.json's chat_template, models/tokenizer/chat_template.hpp) as
// apply_chat_template does, the loss on the assistants' turns only. Every problem with a file is an
// InputError naming the file, the record and the field.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/data/instructions.hpp"
#include "models/tokenizer/chat_template.hpp"

namespace zf {

struct ChatRecord {
  std::vector<tok::ChatMessage> messages;  // roles "system", "user", "assistant" (ShareGPT's mapped)
  std::string at;                          // "record 12 (line 13)", for messages
};

// The records of a file. Each holds `messages` (objects with string `role` and `content`) or
// `conversations` (objects with `from`: system, human or user, gpt or assistant; and string
// `value`), with at least one assistant message; other fields are ignored.
std::vector<ChatRecord> read_chat_records(const std::string& path, const std::string& where);

// A model's chat template and the ids its special-token strings stand for.
struct ChatFormat {
  tok::ChatTemplate tmpl;
  std::map<std::string, std::string> specials;  // bos_token, eos_token, ... as the template sees them
  // The text of bos_token / eos_token becomes config.json's bos / eos id wherever the template writes
  // it (a tokenizer.model does not split special tokens out of text; a tokenizer.json does the same)
  std::optional<uint32_t> bos, eos;
};

// DIR/tokenizer_config.json's template with config.json's BOS and EOS; an InputError naming the
// file when it has no chat_template.
ChatFormat load_chat_format(const std::string& dir);

// The ids of `text`, with the texts of f's bos_token and eos_token as their ids.
std::vector<uint32_t> encode_chat_text(const std::string& text, const tok::Tokenizer& tok, const ChatFormat& f);

// A conversation's ids and loss flags: the template's text of the whole conversation, the loss on
// each assistant turn's text, that is on render(messages[:i+1]) past render(messages[:i],
// add_generation_prompt) (the reply and what closes it, e.g. "<|im_end|>" or EOS). A template
// whose shorter renders are not prefixes of the longer ones is an InputError naming the record.
// No BOS or EOS is added: the template writes them (as apply_chat_template(tokenize=True)). The
// turns that start at or past the first `keep` ids (rows keep T + 1) are not located (no loss).
RenderedRecord render_chat(const ChatRecord& r, const tok::Tokenizer& tok, const ChatFormat& f, const std::string& w,
                           size_t keep = SIZE_MAX);

// Training and evaluation rows, as load_instruction_split (every 10th record held out without
// eval_path). o.bos/o.eos are not used; o.eos fills the inputs past a record's end when given.
LmRowSplit load_chat_split(const std::string& path, const std::string& where, const std::string& eval_path,
                           const std::string& eval_where, const tok::Tokenizer& tok, const ChatFormat& f,
                           const InstructionOptions& o);

}  // namespace zf
