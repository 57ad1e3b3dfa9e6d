// The chat-template test's C++ side (tests/tokenizer/chat_template_test.py): renders TEMPLATE_FILE
// (models/tokenizer/chat_template.hpp) for each case of CASES_JSON, a list of {"messages": [{"role",
// "content"}], "add_generation_prompt": bool, "specials": {"bos_token": ...}}, and writes OUT_JSON, a
// list of {"text": ...} or {"error": ...} (an InputError's message) in the same order.
//   zf_chat_template_tool TEMPLATE_FILE CASES_JSON OUT_JSON
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/tokenizer/chat_template.hpp"
#include "runtime/error.hpp"

namespace {
std::string slurp(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: zf_chat_template_tool TEMPLATE_FILE CASES_JSON OUT_JSON\n";
    return 2;
  }
  using json = nlohmann::json;
  const json cases = json::parse(slurp(argv[2]));
  std::optional<zf::tok::ChatTemplate> t;
  std::string parse_error;
  try {
    t.emplace(slurp(argv[1]), argv[1]);
  } catch (const zf::InputError& e) {
    parse_error = e.message();
  }
  json out = json::array();
  for (const json& c : cases) {
    if (!t) {
      out.push_back({{"error", parse_error}});
      continue;
    }
    std::vector<zf::tok::ChatMessage> m;
    for (const json& x : c.at("messages")) m.push_back({x.at("role"), x.at("content")});
    try {
      out.push_back({{"text", t->render(m, c.at("add_generation_prompt"), c.at("specials"))}});
    } catch (const zf::InputError& e) {
      out.push_back({{"error", e.message()}});
    }
  }
  std::ofstream(argv[3], std::ios::binary) << out.dump();
  return 0;
}
