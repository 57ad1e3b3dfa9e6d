#include "runtime/calibration.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace zf {
namespace {

namespace fs = std::filesystem;

// The lines that are not comments ('#' to the end of a line is a comment in StarPU's files).
std::vector<std::string> data_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (auto h = line.find('#'); h != std::string::npos) line.erase(h);
    if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(line);
  }
  return out;
}

bool all_numbers(const std::string& line, bool integers) {
  std::istringstream in(line);
  std::string tok;
  bool any = false;
  while (in >> tok) {
    char* end = nullptr;
    if (integers)
      (void)std::strtoll(tok.c_str(), &end, 10);
    else
      (void)std::strtod(tok.c_str(), &end);  // "nan" is a number here, as StarPU writes it
    if (end == tok.c_str() || *end != '\0') return false;
    any = true;
  }
  return any;
}

// Why a calibration file is damaged ("" when it looks as StarPU writes it).
std::string bus_file_problem(const fs::path& p, const std::string& text) {
  if (text.empty()) return "empty";
  for (unsigned char c : text)
    if (c == 0 || (c < 32 && c != '\n' && c != '\t' && c != '\r') || c > 126) return "not text";
  const std::string ext = p.extension().string();
  const std::vector<std::string> lines = data_lines(text);
  if (ext == ".xml") return text.rfind("<?xml", 0) == 0 ? "" : "not XML";
  if (ext == ".config") {  // CPUs, NUMA nodes, CUDA, OpenCL, MIC, MPI devices: one integer a line
    if (lines.size() < 6) return "holds " + std::to_string(lines.size()) + " of its 6 counts";
    for (auto& l : lines)
      if (!all_numbers(l, true)) return "a count is not an integer";
    return "";
  }
  if (ext == ".affinity") {  // a header comment, then one line of NUMA node numbers per GPU
    if (text[0] != '#') return "lacks its header line";
    for (auto& l : lines)
      if (!all_numbers(l, true)) return "a line is not a list of integers";
    return "";
  }
  if (ext == ".bandwidth" || ext == ".latency") {  // a header comment, then a matrix of numbers
    if (text[0] != '#' || lines.empty()) return "lacks its matrix";
    for (auto& l : lines)
      if (!all_numbers(l, false)) return "a line is not a list of numbers";
    return "";
  }
  return "";  // a file we do not know: StarPU's business
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string calibration_dir() {
  if (const char* d = std::getenv("STARPU_PERF_MODEL_DIR"); d && *d) return d;
  if (const char* h = std::getenv("STARPU_HOME"); h && *h) return std::string(h) + "/.starpu/sampling";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.starpu/sampling";
  return "";
}

int repair_calibration(const std::string& sampling_dir, std::ostream& log) {
  if (sampling_dir.empty()) return 0;
  std::error_code ec;
  int removed = 0;
  auto remove = [&](const fs::path& p, const std::string& why) {
    if (fs::remove(p, ec)) {
      ++removed;
      log << "zenflow: StarPU calibration file " << p.string() << " is damaged (" << why
          << "): removed, StarPU calibrates again\n";
    }
  };
  // the bus: one damaged file makes the whole set of that host suspect; all of them go
  const fs::path bus = fs::path(sampling_dir) / "bus";
  if (fs::is_directory(bus, ec)) {
    std::vector<fs::path> files;
    for (auto& e : fs::directory_iterator(bus, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
    for (const fs::path& p : files) {
      const std::string why = bus_file_problem(p, read_text(p));
      if (why.empty()) continue;
      const std::string host = p.filename().string().substr(0, p.filename().string().find('.'));
      for (const fs::path& q : files)
        if (q.filename().string().rfind(host + ".", 0) == 0 && fs::exists(q, ec))
          remove(q, q == p ? why : "the bus files of host '" + host + "' are measured together; " +
                                       p.filename().string() + " is " + why);
    }
  }
  // performance models: codelets/VERSION/NAME.HOST start with the model version
  const fs::path cod = fs::path(sampling_dir) / "codelets";
  if (fs::is_directory(cod, ec))
    for (auto& v : fs::directory_iterator(cod, ec)) {
      if (!v.is_directory(ec)) continue;
      const std::string version = v.path().filename().string();
      for (auto& e : fs::directory_iterator(v.path(), ec)) {
        if (!e.is_regular_file(ec)) continue;
        const std::string text = read_text(e.path());
        const std::vector<std::string> lines = data_lines(text);
        if (text.empty())
          remove(e.path(), "empty");
        else if (lines.empty() || lines[0].find_first_not_of(" \t") == std::string::npos ||
                 std::to_string(std::strtoll(lines[0].c_str(), nullptr, 10)) != version)
          remove(e.path(), "does not start with the model version " + version);
      }
    }
  return removed;
}

}  // namespace zf
