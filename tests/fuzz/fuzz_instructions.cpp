// Instruction data (models/data/instructions.hpp): the first byte picks model.context (bits 0-5: T = 1 +
// them, so short rows reach the truncation and the "no response token" refusal) and BOS (bit 6); the
// rest of the input is the records' file (a JSON array or JSONL, told apart by its first byte),
// tokenized with the shipped KJV tokenizer (graphs/tokenizers/kjv-bpe). Every row the loader returns
// must keep the rows' contract: ids below the vocabulary, at least one target, targets -1 or ids.
#include <string>

#include "models/data/instructions.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = zf::tok::load_tokenizer_json(std::string(ZF_SOURCE_DIR) + "/graphs/tokenizers/kjv-bpe/tokenizer.json");
  if (size < 1) return 0;
  const uint8_t f = data[0];
  const std::string path = zf::fuzz::scratch("records.jsonl");
  zf::fuzz::write(path, data + 1, size - 1);
  zf::InstructionOptions o;
  o.T = 1 + (f & 63);
  if (f & 64) o.bos = 4094;
  o.eos = 4095;
  o.vocab = 4096;
  return zf::fuzz::expect_input_errors_only([&] {
    const zf::LmRowSplit s = zf::load_instruction_split(path, "fuzz: data.path", "", "", *tok, o);
    zf::fuzz::check_record_rows(s, o.T, 4096);
  });
}
