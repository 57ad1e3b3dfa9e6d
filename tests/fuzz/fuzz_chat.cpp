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
    zf::fuzz::check_record_rows(s, o.T, 4096);
  });
}
