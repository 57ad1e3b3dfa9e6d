// The tokenizer test's C++ side (tests/tokenizer_test.sh): for each text file, the ids of
// zf::tok's tokenizer of MODEL_DIR and the decoded text, written as the reference scripts write
// Hugging Face's and sentencepiece's (hf_reference.js, sp_reference.py), so that the files compare
// byte for byte: OUT/NAME.ids (the ids, one line, space-separated), OUT/NAME.dec (decode),
// OUT/NAME.decskip (decode skipping special tokens), and for a tokenizer.json with a pre-tokenizer
// OUT/NAME.pieces (its pieces of the raw text, a JSON array of strings).
//   zf_tokenizer_tool MODEL_DIR OUT_DIR TEXT_FILE...
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/tokenizer/hf_tokenizer.hpp"
#include "models/tokenizer/tokenizer.hpp"
#include "runtime/error.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: zf_tokenizer_tool MODEL_DIR OUT_DIR TEXT_FILE...\n";
    return 2;
  }
  try {
    const auto tok = zf::tok::load_tokenizer(argv[1]);
    const std::filesystem::path out = argv[2];
    std::filesystem::create_directories(out);
    for (int i = 3; i < argc; ++i) {
      std::ifstream in(argv[i], std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<uint32_t> ids = tok->encode(ss.str());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string name = std::filesystem::path(argv[i]).filename().string();
      std::ofstream f(out / (name + ".ids"), std::ios::binary);
      for (size_t k = 0; k < ids.size(); ++k) f << (k ? " " : "") << ids[k];
      f << "\n";
      std::ofstream(out / (name + ".dec"), std::ios::binary) << tok->decode(ids, false);
      std::ofstream(out / (name + ".decskip"), std::ios::binary) << tok->decode(ids, true);
      if (auto* hf = dynamic_cast<const zf::tok::HfTokenizer*>(tok.get()))
        std::ofstream(out / (name + ".pieces"), std::ios::binary) << nlohmann::json(hf->pre_tokenize_pieces(ss.str())).dump();
      std::cerr << "zf_tokenizer_tool: " << name << ": " << ids.size() << " ids in " << s << " s\n";
    }
  } catch (const zf::InputError& e) {
    std::cerr << "zf_tokenizer_tool: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "zf_tokenizer_tool: failed: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
