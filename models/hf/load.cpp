#include "models/hf/load.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/fp16.hpp"
#include "models/formats/safetensors.hpp"
#include "runtime/error.hpp"
#include "runtime/input_file.hpp"
#include "runtime/json_input.hpp"

namespace zf::hf {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// A tensor's place: its file (index into Files::paths) and its table entry.
struct Where {
  size_t file = 0;
  StEntry entry;
};
struct Files {
  std::vector<std::string> paths;
  std::vector<uint64_t> data_start;      // each file's data section
  std::map<std::string, Where> tensors;  // every tensor of every file, by its name in the file
};

// Whether `p` names a file. A symlink that names nothing (dangling: Hugging Face's cache links to
// blobs an interrupted download lacks) or a loop is an InputError naming it, not "no such file".
bool present(const fs::path& p) {
  std::error_code ec;
  const fs::file_status ls = fs::symlink_status(p, ec);
  if (ec || !fs::exists(ls)) return false;
  if (!fs::is_symlink(ls)) return true;
  const fs::file_status st = fs::status(p, ec);
  if (ec == std::errc::too_many_symbolic_link_levels)
    throw InputError(p.string(), "a symlink loop (it resolves to itself); expected a weights file");
  if (!fs::exists(st)) {
    std::error_code ec2;
    const fs::path target = fs::read_symlink(p, ec2);
    throw InputError(p.string(), "a dangling symlink" + (ec2 ? std::string() : " to " + target.string()) +
                                     ": the file it names does not exist (an interrupted download?)");
  }
  return true;
}

// The index's weight_map: {tensor: shard file name}; every shard read, every tensor of a shard listed
// for that shard and every listed tensor in its shard.
Files read_index(const fs::path& dir) {
  const std::string ipath = (dir / kIndex).string();
  const std::vector<uint8_t> b = read_input_file(ipath, ipath);
  const nlohmann::json j = parse_json_input(std::string(b.begin(), b.end()), ipath, 16);
  if (!j.is_object()) throw InputError(ipath, "expected a JSON object with a weight_map");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object() || wm->empty())
    throw InputError(ipath + ": weight_map", "expected an object {tensor name: shard file name}, not empty");
  if (j.contains("metadata") && !j["metadata"].is_object()) throw InputError(ipath + ": metadata", "expected an object");
  Files f;
  std::map<std::string, size_t> shard_of;  // shard file name -> index in f.paths
  for (auto& [name, v] : wm->items()) {
    const std::string where = ipath + ": weight_map." + name;
    if (!v.is_string()) throw InputError(where, "expected a shard file name (a string)");
    const std::string shard = v.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == ".." ||
        shard.size() < 12 || shard.compare(shard.size() - 12, 12, ".safetensors") != 0)
      throw InputError(where, "'" + excerpt(shard) + "': expected a file name in the directory ending in .safetensors");
    if (!shard_of.count(shard)) {
      shard_of[shard] = f.paths.size();
      f.paths.push_back((dir / shard).string());
    }
    f.tensors[name].file = shard_of[shard];
  }
  for (size_t i = 0; i < f.paths.size(); ++i) {
    if (!present(f.paths[i])) {
      std::string tensor;  // one tensor the index places in the missing shard, for the message
      for (auto& [name, w] : f.tensors)
        if (w.file == i) tensor = name;
      throw InputError(f.paths[i], "missing: " + ipath + "'s weight_map lists it (for tensor '" + tensor +
                                       "' and others), the directory has no such file");
    }
    const StTable t = read_safetensors_table(f.paths[i]);
    f.data_start.push_back(t.data_start);
    for (auto& [name, e] : t.entries) {
      auto it = f.tensors.find(name);
      if (it == f.tensors.end() || it->second.file != i)
        throw InputError(f.paths[i] + ": tensor '" + name + "'",
                         it == f.tensors.end() ? "not in " + std::string(kIndex) + "'s weight_map"
                                               : "the index places it in " + f.paths[it->second.file]);
      it->second.entry = e;
    }
    for (auto& [name, w] : f.tensors)
      if (w.file == i && !t.entries.count(name))
        throw InputError(f.paths[i] + ": tensor '" + name + "'", "missing: " + std::string(kIndex) + " places it in this shard");
  }
  return f;
}

Files weight_files(const fs::path& dir) {
  Files f;
  if (present(dir / kSingle)) {  // preferred over an index, as transformers does
    f.paths.push_back((dir / kSingle).string());
    const StTable t = read_safetensors_table(f.paths[0]);
    f.data_start.push_back(t.data_start);
    for (auto& [name, e] : t.entries) f.tensors[name] = Where{0, e};
    return f;
  }
  if (present(dir / kIndex)) return read_index(dir);
  return f;
}

// Reads one tensor (entry e of `path`) into out[numel] as fp32.
void read_tensor(const std::string& path, uint64_t data_start, const StEntry& e, const std::string& name, float* out) {
  const std::string where = path + ": tensor '" + name + "'";
  const int fd = open_input_file(path, path);
  const size_t es = dtype_size(e.dtype), n = (size_t)((e.end - e.begin) / es);
  std::vector<uint16_t> buf(e.dtype == "F32" ? 0 : std::min<size_t>(n, 1 << 16));
  size_t done = 0;  // elements converted
  while (done < n) {
    const size_t chunk = e.dtype == "F32" ? n - done : std::min(n - done, buf.size());
    char* dst = e.dtype == "F32" ? reinterpret_cast<char*>(out + done) : reinterpret_cast<char*>(buf.data());
    size_t got = 0;
    while (got < chunk * es) {
      const ssize_t r = ::pread(fd, dst + got, chunk * es - got, (off_t)(data_start + e.begin + done * es + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        const int err = errno;
        ::close(fd);
        throw InputError(where, r == 0 ? "the file ends inside its data (truncated?)" : std::string("read error: ") + std::strerror(err));
      }
      got += (size_t)r;
    }
    if (e.dtype == "BF16")
      for (size_t i = 0; i < chunk; ++i) out[done + i] = kernels::bf16::to_float(buf[i]);
    if (e.dtype == "F16")
      for (size_t i = 0; i < chunk; ++i) out[done + i] = kernels::fp16::to_float(buf[i]);
    done += chunk;
  }
  ::close(fd);
  for (size_t i = 0; i < n; ++i)  // a NaN or Inf weight would train to NaN silently
    if (!std::isfinite(out[i]))
      throw InputError(where, "element " + std::to_string(i) + " is " + (std::isnan(out[i]) ? "NaN" : "infinite") +
                                  ", expected finite weights");
}

}  // namespace

bool has_weight_files(const std::string& dir) {
  const fs::path d(dir);
  if (present(d / kSingle) || present(d / kIndex)) return true;
  for (const char* other : {"pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack",
                            "consolidated.safetensors", "model.ckpt.index"})
    if (present(d / other))
      throw InputError((d / other).string(), "weights in a format the engine does not read (expected " +
                                                 std::string(kSingle) + " or " + kIndex + ")");
  return false;
}

void throw_no_weights(const std::string& dir, const std::string& random_hint) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  std::string found, shard;
  for (size_t i = 0; i < names.size() && i < 20; ++i) found += (i ? ", " : "") + names[i];
  if (names.size() > 20) found += ", and " + std::to_string(names.size() - 20) + " more";
  for (const std::string& n : names)  // model-00001-of-00002.safetensors: a shard without its index
    if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0 && shard.empty()) shard = n;
  throw InputError(dir, "no weights file the reader recognises (found: " + (found.empty() ? "nothing" : found) +
                            "; accepted: " + kSingle + ", or " + kIndex + " with the shards it lists" +
                            (shard.empty() ? "" : "; " + shard + " is read only through an index or as " + kSingle) +
                            "). To train from a random init, as Hugging Face's from_config, set " + random_hint);
}

LoadResult load_weights(const std::string& dir, const Config& c, const InitFrom& init, const Destination& dest) {
  const std::vector<TensorSpec> specs = expected_tensors(c);
  LoadResult res;
  if (init.random) {
    for (const TensorSpec& t : specs) init_tensor(t, init.seed, dest(t));
    return res;
  }
  if (!has_weight_files(dir)) throw_no_weights(dir, "model.init \"random\" (or --init random)");
  const Files files = weight_files(dir);
  res.from_files = true;
  res.files = files.paths;
  std::map<std::string, const std::pair<const std::string, Where>*> found;  // canonical name -> file entry
  for (auto& kv : files.tensors) {
    const std::string where = files.paths[kv.second.file] + ": tensor '" + kv.first + "'";
    const NameMatch m = match_name(c, specs, kv.first);
    if (m.kind == NameKind::Ignored) continue;
    if (m.kind == NameKind::Unknown)
      throw InputError(where, std::string("not a tensor of this ") + c.architecture + " (config " + c.path + ")");
    if (found.count(m.canonical))
      throw InputError(where, "a second copy of '" + m.canonical + "' (also '" + found[m.canonical]->first + "')");
    found[m.canonical] = &kv;
  }
  for (const TensorSpec& t : specs) {
    auto it = found.find(t.name);
    if (it == found.end())
      throw InputError(files.paths.size() == 1 ? files.paths[0] : (fs::path(dir) / kIndex).string(),
                       "tensor '" + t.name + "' missing (" + c.architecture + " with config " + c.path + " needs it, shape " +
                           shape_str(t.shape) + ")");
    const Where& w = it->second->second;
    const std::string where = files.paths[w.file] + ": tensor '" + it->second->first + "'";
    if (w.entry.shape != t.shape)
      throw InputError(where, "shape " + shape_str(w.entry.shape) + ", the config (" + c.path + ") needs " + shape_str(t.shape));
    if (w.entry.dtype != "F32" && w.entry.dtype != "BF16" && w.entry.dtype != "F16")
      throw InputError(where, "dtype " + w.entry.dtype + " (expected F32, BF16 or F16)");
  }
  for (const TensorSpec& t : specs) {
    const auto& kv = *found.at(t.name);
    read_tensor(files.paths[kv.second.file], files.data_start[kv.second.file], kv.second.entry, kv.first, dest(t));
    res.dtypes[t.name] = kv.second.entry.dtype;
  }
  return res;
}

}  // namespace zf::hf
