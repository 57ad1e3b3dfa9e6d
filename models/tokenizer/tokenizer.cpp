#include "models/tokenizer/tokenizer.hpp"

#include <sys/stat.h>

#include "models/tokenizer/hf_tokenizer.hpp"
#include "models/tokenizer/json_field.hpp"
#include "models/tokenizer/unicode.hpp"
#include "runtime/error.hpp"
#include "runtime/input_file.hpp"
#include "runtime/json_input.hpp"

namespace zf::tok {

namespace {
// An entry of that name, whatever it is: a symbolic link loop or a dangling link, a FIFO or a
// directory is there, and reading it names the problem (open_input_file) instead of the file being
// taken as absent and its content (BOS, EOS, the tokenizer) silently as none.
bool exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}
std::string read_text(const std::string& path) {
  const std::vector<uint8_t> b = read_input_file(path, path);
  return std::string(b.begin(), b.end());
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path) {
  return std::make_unique<HfTokenizer>(read_text(path), path);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw InputError(dir, "expected a model directory (with tokenizer.json or tokenizer.model)");
  if (exists(dir + "/tokenizer.json")) return load_tokenizer_json(dir + "/tokenizer.json");
  if (exists(dir + "/tokenizer.model")) return load_sentencepiece(dir + "/tokenizer.model");
  throw InputError(dir, "no tokenizer.json and no tokenizer.model in the directory");
}

SpecialIds read_special_ids(const std::string& dir) {
  const std::string path = dir + "/config.json";
  SpecialIds ids;
  if (!exists(path)) return ids;
  const nlohmann::json j = parse_json_input(read_text(path), path);
  const JsonField root(j, path, "");
  root.object();
  auto one = [&](const char* key) -> std::optional<uint32_t> {
    if (!root.has(key)) return std::nullopt;
    const JsonField f = root.at(key);
    if (f.json().is_array()) {  // Llama 3.1's eos_token_id: [128001, 128008, 128009]: the first
      if (f.size() == 0) f.fail("expected an id or a non-empty list of ids");
      return f[0].u32();
    }
    return f.u32();
  };
  ids.bos = one("bos_token_id");
  ids.eos = one("eos_token_id");
  return ids;
}

std::vector<uint32_t> encode_with_specials(const Tokenizer& t, std::string_view text, std::optional<uint32_t> bos,
                                           std::optional<uint32_t> eos, const std::function<void(size_t)>& progress) {
  std::vector<uint32_t> ids;
  if (bos) ids.push_back(*bos);
  std::vector<uint32_t> body = t.encode(text, progress);
  ids.insert(ids.end(), body.begin(), body.end());
  if (eos) ids.push_back(*eos);
  return ids;
}

void check_utf8(std::string_view text, const std::string& where) {
  const size_t bad = invalid_utf8_at(text);
  if (bad != std::string_view::npos)
    throw InputError(where, "byte " + std::to_string(bad) + " is not valid UTF-8 (expected UTF-8 text)");
}

}  // namespace zf::tok
