#include "models/hf/save.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/fp16.hpp"
#include "models/formats/safetensors.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"
#include "runtime/input_file.hpp"

namespace zf::hf {
namespace {

namespace fs = std::filesystem;

struct Item {
  const TensorSpec* spec;
  std::string dtype;
  uint64_t bytes;
};

// One safetensors file in Hugging Face's layout: {"__metadata__": {"format": "pt"}, tensors...},
// the header padded with spaces to a multiple of 8, then the data converted from fp32 in chunks.
void write_shard(const std::string& path, const std::vector<Item>& items, const Source& src) {
  nlohmann::ordered_json hdr = nlohmann::ordered_json::object();
  hdr["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const Item& it : items) {
    hdr[it.spec->name] = {{"dtype", it.dtype}, {"shape", it.spec->shape}, {"data_offsets", {off, off + it.bytes}}};
    off += it.bytes;
  }
  std::string h = hdr.dump();
  while ((8 + h.size()) % 8) h.push_back(' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = (uint8_t)((uint64_t)h.size() >> (8 * i));
  AtomicFileWriter w(path);
  w.write(len, 8);
  w.write(h.data(), h.size());
  std::vector<uint16_t> buf(1 << 16);
  for (const Item& it : items) {
    const float* x = src(*it.spec);
    const size_t n = it.spec->numel();
    if (it.dtype == "F32") {
      w.write(x, n * sizeof(float));  // x86-64 and aarch64: little-endian, as the format
      continue;
    }
    for (size_t done = 0; done < n; done += buf.size()) {
      const size_t k = std::min(buf.size(), n - done);
      for (size_t i = 0; i < k; ++i) {
        const float v = x[done + i];
        buf[i] = it.dtype == "BF16" ? kernels::bf16::from_float(v) : kernels::fp16::from_float(v);
      }
      w.write(buf.data(), k * sizeof(uint16_t));
    }
  }
  w.commit();
}

void copy_input(const fs::path& from, const fs::path& to) {
  const std::vector<uint8_t> b = read_input_file(from.string(), from.string());
  write_file_atomic(to.string(), b.data(), b.size());
}

std::string shard_name(size_t i, size_t n) {
  char s[64];
  std::snprintf(s, sizeof s, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return s;
}

}  // namespace

std::string save_dtype(const std::string& value, const std::string& where) {
  if (value == "f32") return "F32";
  if (value == "bf16") return "BF16";
  if (value == "f16") return "F16";
  throw InputError(where, "'" + value + "': expected f32, bf16 or f16");
}

void save_dir(const std::string& out_dir, const Config& c, const Source& src, const SaveOptions& o) {
  const fs::path out(out_dir), in = fs::path(c.path).parent_path();
  std::error_code ec;
  if (fs::exists(out, ec) && (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)))
    throw InputError(out_dir, "exists and is not an empty directory (expected a new or empty one: nothing is overwritten)");
  fs::create_directories(out, ec);
  if (ec) throw InputError(out_dir, "cannot create the directory: " + ec.message());
  if (!o.dtype.empty() && o.dtype != "F32" && o.dtype != "BF16" && o.dtype != "F16")
    throw Error("save_dir: dtype '" + o.dtype + "' (expected F32, BF16, F16 or empty)");
  if (o.max_shard_bytes == 0) throw Error("save_dir: max_shard_bytes must be > 0");

  const std::vector<TensorSpec> specs = expected_tensors(c);
  std::vector<std::vector<Item>> shards(1);
  uint64_t total = 0, in_shard = 0;
  for (const TensorSpec& t : specs) {  // in the model's order; a new shard when the next would overflow
    auto it = o.input.find(t.name);
    std::string dt = !o.dtype.empty() ? o.dtype : it != o.input.end() ? it->second : "F32";
    const uint64_t bytes = t.numel() * dtype_size(dt);
    if (in_shard > 0 && in_shard + bytes > o.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(Item{&t, dt, bytes});
    in_shard += bytes;
    total += bytes;
  }
  for (const auto& shard : shards)  // before any file is written: fp16 holds at most 65504
    for (const Item& it : shard) {
      if (it.dtype != "F16") continue;
      const float* x = src(*it.spec);
      for (size_t i = 0; i < it.spec->numel(); ++i)
        if (std::fabs(x[i]) >= 65520.0f)  // rounds to infinity (fp16.hpp)
          throw InputError(out_dir + ": tensor '" + it.spec->name + "'",
                           "element " + std::to_string(i) + " = " + std::to_string(x[i]) +
                               " exceeds float16's range (65504): save as bf16 or f32");
    }
  copy_input(c.path, out / "config.json");  // the input's values, unchanged
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                           "generation_config.json", "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja"})
    if (fs::exists(in / name, ec)) copy_input(in / name, out / name);
  if (shards.size() == 1) {
    write_shard((out / "model.safetensors").string(), shards[0], src);
    return;
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  nlohmann::json map = nlohmann::json::object();  // sorted by tensor name, as transformers writes it
  for (size_t i = 0; i < shards.size(); ++i) {
    write_shard((out / shard_name(i, shards.size())).string(), shards[i], src);
    for (const Item& it : shards[i]) map[it.spec->name] = shard_name(i, shards.size());
  }
  index["weight_map"] = map;
  const std::string text = index.dump(2) + "\n";
  write_file_atomic((out / "model.safetensors.index.json").string(), text.data(), text.size());
}

}  // namespace zf::hf
