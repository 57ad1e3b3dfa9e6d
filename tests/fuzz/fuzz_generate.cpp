// zenflow-run generate's command line (tools/generate_command.cpp): the input's lines are the
// options after --model (a tiny Llama of the KJV tokenizer, 16 positions, no weights) and --prompt
// (the first line). Exit 2 (bad input) and 0 are expected; exit 1 (a failure), an exception or a
// sanitizer report is a finding. --threads above 4 is skipped (each input would start that many
// threads; tests/generate_cli_test.sh covers 1024).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_common.hpp"
#include "tools/generate_command.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::string d = zf::fuzz::scratch("model");
    const std::string mk = "mkdir -p " + d + " && cp " + std::string(ZF_SOURCE_DIR) +
                           "/graphs/tokenizers/kjv-bpe/tokenizer.json " + d + "/";
    if (std::system(mk.c_str()) != 0) std::abort();
    const std::string cfg =
        R"({"model_type": "llama", "vocab_size": 4096, "hidden_size": 16, "intermediate_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "max_position_embeddings": 16, "bos_token_id": 4094, "eos_token_id": 4095})";
    zf::fuzz::write(d + "/config.json", reinterpret_cast<const uint8_t*>(cfg.data()), cfg.size());
    std::freopen("/dev/null", "w", stdout);  // the generated text
    return d;
  }();
  std::vector<std::string> args{"generate", "--model", dir, "--prompt"};
  std::string cur;
  bool first = true;
  for (size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      args.push_back(cur);
      if (first && cur.size() > 200) return 0;  // a long prompt only fails for the 16 positions
      first = false;
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  for (size_t i = 4; i + 1 < args.size(); ++i)
    if (args[i] == "--threads" && (args[i + 1].size() > 1 || args[i + 1][0] > '4')) return 0;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = zf::tools::generate_main((int)args.size(), argv.data());
  if (rc != 0 && rc != 2) {
    std::fprintf(stderr, "FINDING: generate exited %d\n", rc);
    std::abort();
  }
  return 0;
}
