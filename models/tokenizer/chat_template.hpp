// Chat templates of Hugging Face tokenizers (tokenizer_config.json's chat_template): the subset of
// Jinja that real templates use (ChatML/Qwen2, Qwen2.5 with tools, Llama 2/3, Zephyr), rendered as
// transformers' apply_chat_template renders it: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and loopcontrols, HF's raise_exception and tojson (json.dumps,
// ensure_ascii=False). Outputs equal python3-jinja2's (tests/models/test_chat_template.cpp).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zf::tok {

struct ChatMessage {
  std::string role, content;
};

// A chat template as Hugging Face's tokenizer.apply_chat_template renders it (jinja2 sandbox with
// trim_blocks=True and lstrip_blocks=True, loopcontrols): parsed once, rendered per conversation.
class ChatTemplate {
 public:
  // `where` names the template in errors, e.g. "DIR/tokenizer_config.json: chat_template".
  // A syntax error or a construct outside the subset is an InputError(where, "line L: ...what...").
  ChatTemplate(const std::string& source, const std::string& where);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The text for `messages`; `specials` are the template's string variables bos_token, eos_token,
  // unk_token, pad_token (absent ones undefined). raise_exception('m') in the template, an unknown
  // filter/test/function/method reached while rendering, or an output larger than 64 MiB is an
  // InputError(where, ...) naming it (and the message, for raise_exception). As in HF, `tools` and
  // `documents` are defined and none.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::map<std::string, std::string>& specials) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// DIR/tokenizer_config.json's chat_template and its special tokens. The template: DIR/chat_template.jinja
// when there is one (transformers saves it there, and it takes priority, as in transformers), else
// tokenizer_config.json's chat_template: a string, or a list of {"name", "template"} objects (the
// one named "default" is used). bos_token / eos_token /
// unk_token / pad_token: a string or an object with "content" (AddedToken's serialisation), null or
// absent: left out. Returns nullopt when neither file has a template (chat_template absent or null);
// anything else wrong (not JSON, wrong types, a list without "default") is an InputError naming the
// file and the field.
struct ChatTemplateConfig {
  std::string source, where;
  std::map<std::string, std::string> specials;
};
std::optional<ChatTemplateConfig> read_chat_template_config(const std::string& dir);

}  // namespace zf::tok
