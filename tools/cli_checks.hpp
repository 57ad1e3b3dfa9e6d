// Command-line values checked as they are parsed (zenflow-run, tokenize, generate): CLI11 2.1
// converts a number too large for its type to the type's maximum without a word, and takes an
// empty path as no path at all; both are exit 2 here, naming the option.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <exception>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/error.hpp"

namespace zf::tools {

// A decimal integer in [lo, hi] ("-" only when lo < 0); anything else, 2^64 included, is refused.
CLI::Validator integer_in(int64_t lo, int64_t hi);
// Decimal digits of a value in [0, 2^64 - 1] ("-1" would become 2^64 - 1 in a uint64_t).
CLI::Validator unsigned_64();
// A path: not the empty string.
CLI::Validator non_empty_path();

// --save-hf DIR before any training: a new directory whose parent exists and is writable, or an
// empty writable directory; not a dangling symbolic link, nothing under a file. InputError naming
// the option.
void check_output_hf_dir(const std::string& option, const std::string& dir);

// The run's outputs, (option, path) with empty paths left out, must be different places: no two
// the same path, and nothing inside `exclusive` (--save-hf: a whole directory written at the end)
// nor `exclusive` inside another (--checkpoint-dir).
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                            const std::pair<std::string, std::string>& exclusive);

// No output (option, path) may be an existing input file (option, path), the same file under
// another name (a symbolic or hard link) included: an atomic write would replace it, and the
// input be lost (tokenize --text a.txt --out a.txt). Empty paths are left out.
void check_outputs_are_not_inputs(const std::vector<std::pair<std::string, std::string>>& outputs,
                                  const std::vector<std::pair<std::string, std::string>>& inputs);

// A subcommand's parse and run (zenflow-run tokenize, generate, export): a parse error is exit 2
// (--help: 0); an InputError exit 2 as "zenflow-run NAME: error: ..."; any other failure exit 1.
template <class Run>
int parse_and_run(CLI::App& app, int argc, char** argv, const char* name, Run run) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    return run();
  } catch (const InputError& e) {
    std::cerr << "zenflow-run " << name << ": error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "zenflow-run " << name << ": failed: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace zf::tools
