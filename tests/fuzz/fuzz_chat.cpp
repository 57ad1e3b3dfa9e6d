// Chat data and chat templates (models/data/chat.hpp, models/tokenizer/chat_template.hpp): the input up
// to its first NUL byte is a tokenizer_config.json's chat_template, the rest a chat records file (a
// JSON array or JSONL); the template is parsed, the records read, rendered with it (prefixes included)
// and tokenized with the shipped KJV tokenizer into rows of T = 64. A hostile template must end in an
// InputError (its recursion, output and loop bounds), never a crash or a hang; every row returned must
// have ids below the vocabulary and at least one target.
#include <cstring>
#include <string>

#include "models/data/chat.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = zf::tok::load_tokenizer_json(std::string(ZF_SOURCE_DIR) + "/graphs/tokenizers/kjv-bpe/tokenizer.json");
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  if (!nul) return 0;
  const std::string source(reinterpret_cast<const char*>(data), (size_t)(nul - data));
  const std::string path = zf::fuzz::scratch("chat.jsonl");
  zf::fuzz::write(path, nul + 1, size - (size_t)(nul - data) - 1);
  zf::InstructionOptions o;
  o.T = 64;
  o.eos = 4095;
  o.vocab = 4096;
  return zf::fuzz::expect_input_errors_only([&] {
    zf::ChatFormat f{zf::tok::ChatTemplate(source, "fuzz: chat_template"),
                     {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|end_of_text|>"}}, 4094u, 4095u};
    const zf::LmRowSplit s = zf::load_chat_split(path, "fuzz: data.path", path, "fuzz: data.eval_path", *tok, f, o);
    for (const zf::LmRows* r : {&s.train, &s.eval}) {
      if (r->T != o.T || (int64_t)r->tokens.size() != r->rows * r->T || r->targets.size() != r->tokens.size())
        __builtin_trap();
      for (int64_t i = 0; i < r->rows; ++i) {
        bool any = false;
        for (int64_t t = 0; t < r->T; ++t) {
          const int32_t tk = r->tokens[(size_t)(i * r->T + t)], tg = r->targets[(size_t)(i * r->T + t)];
          if (tk < 0 || tk >= 4096 || tg < -1 || tg >= 4096) __builtin_trap();
          any |= tg >= 0;
        }
        if (!any) __builtin_trap();  // every row has a reply token
      }
    }
  });
}
