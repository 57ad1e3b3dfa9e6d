// zenflow-run tokenize: reads the model directory's tokenizer (tokenizer.json, else
// tokenizer.model) and config.json's bos_token_id / eos_token_id, tokenizes the whole text file
// (BOS first and EOS last where the config names them, unless --no-bos / --no-eos) and writes the
// ids as a token file: raw uint16 when the vocabulary fits, llm.c's uint32 format otherwise
// (models/tokenizer/token_writer.hpp). A progress line on stderr for large files.
#include "tools/tokenize_command.hpp"

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "models/tokenizer/token_writer.hpp"
#include "models/tokenizer/tokenizer.hpp"
#include "runtime/error.hpp"
#include "runtime/input_file.hpp"
#include "tools/cli_checks.hpp"

namespace zf::tools {

namespace {

struct TokenizeArgs {
  std::string model, text, out;
  bool no_bos = false, no_eos = false, llmc = false, quiet = false;
};

// The output's directory must exist and be writable, the name must not be a directory or another
// non-regular file (the atomic write renames over it): found before the work.
void check_out(const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::path(out).has_parent_path() ? fs::path(out).parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw InputError("--out " + out, "directory " + dir.string() + " does not exist");
  const fs::file_status st = fs::status(out, ec);
  if (fs::is_directory(st)) throw InputError("--out " + out, "is a directory, expected a file name");
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw InputError("--out " + out, "exists and is not a regular file (the output replaces it)");
  // create and remove a file: a read-only file system, /proc, permissions (for root too)
  const fs::path probe = dir / (".zf-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw InputError("--out " + out, "directory " + dir.string() + " is not writable (" + std::strerror(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
}

int tokenize(const TokenizeArgs& a) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  check_out(a.out);
  check_outputs_are_not_inputs({{"--out", a.out}}, {{"--text", a.text},
                                                   {"--model", a.model + "/tokenizer.json"},
                                                   {"--model", a.model + "/tokenizer.model"},
                                                   {"--model", a.model + "/config.json"}});
  const auto tok = tok::load_tokenizer(a.model);
  const tok::SpecialIds sp = tok::read_special_ids(a.model);
  const std::vector<uint8_t> bytes = read_input_file(a.text, "--text " + a.text);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  tok::check_utf8(text, "--text " + a.text);
  for (auto [name, id] : {std::pair{"bos_token_id", sp.bos}, std::pair{"eos_token_id", sp.eos}})
    if (id && *id >= tok->vocab_size())
      throw InputError(a.model + "/config.json: " + name,
                       std::to_string(*id) + " is not an id of the tokenizer (" + std::to_string(tok->vocab_size()) + " ids)");
  const bool show = !a.quiet && bytes.size() >= (8u << 20);  // progress on files of 8 MB and more
  auto last = clock::now();
  auto progress = [&](size_t n) {
    if (!show || clock::now() - last < std::chrono::seconds(2)) return;
    last = clock::now();
    std::fprintf(stderr, "tokenize: %.1f M tokens so far (%.0f s)\n", n / 1e6,
                 std::chrono::duration<double>(last - t0).count());
  };
  const std::vector<uint32_t> ids = tok::encode_with_specials(*tok, text, a.no_bos ? std::nullopt : sp.bos,
                                                              a.no_eos ? std::nullopt : sp.eos, progress);
  if (ids.empty())  // the token reader refuses an empty file: none is written
    throw InputError("--text " + a.text, "no tokens: the text is empty and --no-bos --no-eos leave no BOS or EOS "
                                         "(a token file holds at least one token)");
  const tok::TokenFileFormat fmt = tok::token_file_format(tok->vocab_size(), a.llmc, ids);
  tok::write_token_file(a.out, ids, fmt);
  if (!a.quiet)
    std::printf("tokenize: %s: %zu bytes -> %zu tokens (%s%s%s) -> %s, %s, %.1f s\n", a.text.c_str(), bytes.size(),
                ids.size(), tok->describe().c_str(), !a.no_bos && sp.bos ? ", BOS" : "", !a.no_eos && sp.eos ? ", EOS" : "",
                a.out.c_str(), tok::format_name(fmt), std::chrono::duration<double>(clock::now() - t0).count());
  return 0;
}

}  // namespace

int tokenize_main(int argc, char** argv) {
  CLI::App app{"zenflow-run tokenize: a text file to token ids with a Hugging Face model directory's tokenizer\n"
               "(tokenizer.json, else tokenizer.model; BOS/EOS from its config.json). The token file is raw\n"
               "little-endian uint16 when the vocabulary has at most 65536 ids, else llm.c's format with uint32\n"
               "tokens (docs/tokenizers.md, \"Token files\").",
               "zenflow-run tokenize"};
  TokenizeArgs a;
  app.add_option("--model", a.model, "model directory (tokenizer.json or tokenizer.model; config.json)")
      ->required()
      ->check(non_empty_path());
  app.add_option("--text", a.text, "UTF-8 text file, tokenized as one document")->required()->check(non_empty_path());
  app.add_option("--out", a.out, "token file to write (atomically)")->required()->check(non_empty_path());
  app.add_flag("--no-bos", a.no_bos, "no BOS token first (default: config.json's bos_token_id, when there is one)");
  app.add_flag("--no-eos", a.no_eos, "no EOS token last (default: config.json's eos_token_id, when there is one)");
  app.add_flag("--llmc", a.llmc, "llm.c's header also for uint16 tokens (magic 20240520, version 1)");
  app.add_flag("--quiet,-q", a.quiet, "no progress and no summary line");
  return parse_and_run(app, argc, argv, "tokenize", [&] { return tokenize(a); });
}

}  // namespace zf::tools
