#include "models/formats/safetensors.hpp"

#include <fcntl.h>
#include <zlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/json_input.hpp"
#include "runtime/json_depth.hpp"

namespace zf {
namespace {

}  // namespace

size_t dtype_size(const std::string& d) {
  if (d == "F32" || d == "I32") return 4;
  if (d == "F64" || d == "I64") return 8;
  if (d == "BF16" || d == "F16") return 2;
  if (d == "U8") return 1;
  return 0;
}

size_t StTensor::numel() const {
  size_t n = 1;
  for (auto d : shape) n *= (size_t)d;
  return n;
}

std::vector<float> StTensor::as_f32() const {
  std::vector<float> out(bytes.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);  // x86-64: little-endian
  return out;
}

StTensor st_f32(const std::vector<int64_t>& shape, const float* data) {
  StTensor t;
  t.dtype = "F32";
  t.shape = shape;
  t.bytes.resize(t.numel() * 4);
  if (!t.bytes.empty()) std::memcpy(t.bytes.data(), data, t.bytes.size());
  return t;
}

// CRC-32 of the header as nlohmann::json dumps it after parsing (sorted keys, one number and
// string syntax) without the zf_header_crc32 entry itself: what the reader computes from the parsed
// header, whatever the writer's key order or spacing.
static std::string header_crc(nlohmann::json header) {
  if (header.contains("__metadata__") && header["__metadata__"].is_object())
    header["__metadata__"].erase("zf_header_crc32");
  const std::string text = header.dump();
  return std::to_string(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(text.data()), (uInt)text.size()));
}

std::vector<uint8_t> encode_safetensors(const std::string& path, const StFile& f, bool checksum) {
  nlohmann::ordered_json hdr = nlohmann::ordered_json::object();
  if (!f.metadata.empty() || checksum) {
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (auto& [k, v] : f.metadata) md[k] = v;
    if (checksum) {
      uLong crc = crc32(0L, Z_NULL, 0);
      for (auto& [name, t] : f.tensors)
        if (!t.bytes.empty()) crc = crc32(crc, t.bytes.data(), (uInt)t.bytes.size());
      md["zf_crc32"] = std::to_string(crc);
    }
    hdr["__metadata__"] = md;
  }
  size_t off = 0;
  for (auto& [name, t] : f.tensors) {
    if (dtype_size(t.dtype) == 0) throw Error(path + ": tensor " + name + ": unsupported dtype " + t.dtype);
    if (t.bytes.size() != t.numel() * dtype_size(t.dtype))
      throw Error(path + ": tensor " + name + ": data size does not match its shape");
    hdr[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  // the header's own checksum covers __metadata__ (zf_crc32 included) and the tensor table
  if (checksum) hdr["__metadata__"]["zf_header_crc32"] = header_crc(nlohmann::json::parse(hdr.dump()));
  std::string h = hdr.dump();
  while ((8 + h.size()) % 8) h.push_back(' ');  // align the data to 8 bytes, as the reference writer does
  std::vector<uint8_t> out(8 + h.size() + off);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = (uint8_t)(n >> (8 * i));
  std::memcpy(out.data() + 8, h.data(), h.size());
  size_t pos = 8 + h.size();
  for (auto& [name, t] : f.tensors) {
    if (!t.bytes.empty()) std::memcpy(out.data() + pos, t.bytes.data(), t.bytes.size());
    pos += t.bytes.size();
  }
  return out;
}

void write_safetensors(const std::string& path, const StFile& f, bool checksum) {
  const std::vector<uint8_t> out = encode_safetensors(path, f, checksum);
  write_file_atomic(path, out.data(), out.size());
}

namespace {

// The parsed header of a safetensors file, its checksum verified when it carries one.
struct Header {
  nlohmann::json j;
  uint64_t fsize = 0, hlen = 0;
};

Header read_header(const std::string& path, std::ifstream& in) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw InputError(path, "not a regular file (expected a safetensors file)");
  in.open(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot open safetensors file");
  Header hd;
  in.seekg(0, std::ios::end);
  const uint64_t fsize = (uint64_t)in.tellg();
  in.seekg(0);
  if (fsize < 8) throw InputError(path, "too short for a safetensors header (" + std::to_string(fsize) + " bytes)");
  uint8_t lenb[8];
  if (!in.read(reinterpret_cast<char*>(lenb), 8)) throw InputError(path, "cannot read the header length");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= (uint64_t)lenb[i] << (8 * i);
  if (hlen == 0 || hlen > fsize - 8 || hlen > (100u << 20))
    throw InputError(path, "header length " + std::to_string(hlen) + " is impossible for a " +
                               std::to_string(fsize) + "-byte file (truncated or not safetensors)");
  std::string h(hlen, '\0');
  if (!in.read(h.data(), (std::streamsize)hlen)) throw InputError(path, "cannot read the header");
  // a safetensors header nests 3 levels (tensor table, tensor, shape); deeper is not one, and a
  // very deep one would overflow the stack in nlohmann::json's recursive dump and comparison
  constexpr int kMaxDepth = 16;
  if (json_nesting_depth(h, kMaxDepth) > kMaxDepth)
    throw InputError(path, "header nests arrays/objects more than " + std::to_string(kMaxDepth) +
                               " levels deep (a safetensors header has 3)");
  hd.j = parse_json_input(h, path + ": header", kMaxDepth);  // a NUL byte, e.g., is refused, not an end
  if (!hd.j.is_object()) throw InputError(path, "header must be a JSON object");
  // the header's checksum (zf_header_crc32, written with checksum = true) before any of it is used
  auto md = hd.j.find("__metadata__");
  if (md != hd.j.end() && md->is_object() && md->contains("zf_header_crc32")) {
    const nlohmann::json& want = (*md)["zf_header_crc32"];
    const std::string got = header_crc(hd.j);
    if (!want.is_string() || want.get<std::string>() != got)
      throw InputError(path + ": __metadata__.zf_header_crc32",
                       "header checksum mismatch: the header (metadata or tensor table) is corrupted (CRC-32 " +
                           got + ", the header records " + (want.is_string() ? want.get<std::string>() : want.dump()) +
                           ")");
  }
  hd.fsize = fsize;
  hd.hlen = hlen;
  return hd;
}

void read_metadata(const std::string& path, const nlohmann::json& v, StFile& f) {
  if (!v.is_object()) throw InputError(path, "__metadata__ must be an object of strings");
  for (auto& [k, s] : v.items()) {
    if (!s.is_string()) throw InputError(path, "__metadata__." + k + ": expected a string");
    f.metadata[k] = s.get<std::string>();
  }
}

}  // namespace

StFile read_safetensors_metadata(const std::string& path) {
  std::ifstream in;
  const Header hd = read_header(path, in);
  StFile f;
  if (hd.j.contains("__metadata__")) read_metadata(path, hd.j["__metadata__"], f);
  return f;
}

StTable read_safetensors_table(const std::string& path) {
  std::ifstream in;
  const Header hd = read_header(path, in);
  StTable tab;
  tab.file_size = hd.fsize;
  tab.data_start = 8 + hd.hlen;
  const uint64_t data_len = hd.fsize - 8 - hd.hlen;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  StFile md;
  for (auto& [name, v] : hd.j.items()) {
    if (name == "__metadata__") {
      read_metadata(path, v, md);
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!v.is_object()) throw InputError(where, "expected an object with dtype, shape, data_offsets");
    if (!v.contains("dtype") || !v["dtype"].is_string()) throw InputError(where, "dtype: expected a string");
    if (!v.contains("shape") || !v["shape"].is_array()) throw InputError(where, "shape: expected an array");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      throw InputError(where, "data_offsets: expected [begin, end]");
    StEntry t;
    t.dtype = v["dtype"].get<std::string>();
    size_t es = dtype_size(t.dtype);
    if (es == 0) throw InputError(where, "dtype " + t.dtype + " is not supported (F32, BF16, F16, F64, I32, I64, U8)");
    uint64_t nbytes = es;  // shape * dtype size, checked: a product that wraps must not pass as small
    for (auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t)INT64_MAX)
        throw InputError(where, "shape: expected non-negative integers");
      t.shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(nbytes, d.get<uint64_t>(), &nbytes))
        throw InputError(where, "shape: " + v["shape"].dump() + " of " + t.dtype + " exceeds 2^64 bytes");
    }
    auto& o = v["data_offsets"];
    if (!o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      throw InputError(where, "data_offsets: expected non-negative integers");
    uint64_t b = o[0].get<uint64_t>(), e = o[1].get<uint64_t>();
    if (b > e || e > data_len)
      throw InputError(where, "data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                                  "] outside the " + std::to_string(data_len) + "-byte data section (truncated file?)");
    if (e - b != nbytes)
      throw InputError(where, "data_offsets span " + std::to_string(e - b) + " bytes, shape and dtype need " +
                                  std::to_string(nbytes));
    t.begin = b;
    t.end = e;
    ranges.push_back({b, e});
    tab.entries.emplace(name, std::move(t));
  }
  tab.metadata = std::move(md.metadata);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) throw InputError(path, "tensors' data_offsets overlap");
  return tab;
}

StFile read_safetensors(const std::string& path) {
  const StTable tab = read_safetensors_table(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot open safetensors file");
  StFile f;
  f.metadata = tab.metadata;
  for (auto& [name, e] : tab.entries) {
    StTensor t;
    t.dtype = e.dtype;
    t.shape = e.shape;
    t.bytes.resize(e.end - e.begin);
    in.seekg((std::streamoff)(tab.data_start + e.begin));
    in.read(reinterpret_cast<char*>(t.bytes.data()), (std::streamsize)(e.end - e.begin));
    if (!in) throw InputError(path + ": tensor '" + name + "'", "could not read its data");
    f.tensors.emplace(name, std::move(t));
  }
  if (f.metadata.count("zf_crc32")) {  // CRC-32 of the data section, tensors in file order
    std::vector<std::pair<uint64_t, std::string>> by_off;
    for (auto& [name, e] : tab.entries) by_off.push_back({e.begin, name});
    std::sort(by_off.begin(), by_off.end());
    uLong crc = crc32(0L, Z_NULL, 0);
    for (auto& [off, name] : by_off) {
      const auto& b = f.tensors.at(name).bytes;
      if (!b.empty()) crc = crc32(crc, b.data(), (uInt)b.size());
    }
    if (std::to_string(crc) != f.metadata["zf_crc32"])
      throw InputError(path, "checksum mismatch: the data section is corrupted (CRC-32 " + std::to_string(crc) +
                                 ", the header records " + f.metadata["zf_crc32"] + ")");
  }
  return f;
}

}  // namespace zf
