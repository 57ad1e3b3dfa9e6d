// safetensors files (huggingface/safetensors format): 8-byte little-endian header length N, N bytes
// of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the little-endian data. The engine's own files hold F32 (plus I64/F64/U8 for training state);
// Hugging Face checkpoints (models/hf/) also BF16 and F16, read through read_safetensors_table.
// Writes are atomic: temporary file in the same directory, fsync, rename.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/atomic_file.hpp"

namespace zf {

struct StTensor {
  std::string dtype;            // "F32", "F64", "I64", "I32", "U8", "BF16", "F16"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;   // little-endian raw data
  size_t numel() const;
  std::vector<float> as_f32() const;  // dtype must be F32
};

struct StFile {
  std::map<std::string, std::string> metadata;
  std::map<std::string, StTensor> tensors;
};

// One entry of a file's tensor table: where its data lies, relative to the data section.
struct StEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets
};
struct StTable {
  std::map<std::string, std::string> metadata;
  std::map<std::string, StEntry> entries;
  uint64_t data_start = 0;  // file offset of the data section (8 + header length)
  uint64_t file_size = 0;
};

// Bytes per element of a safetensors dtype; 0 for one not supported here.
size_t dtype_size(const std::string& dtype);

// The header alone, every entry checked (a supported dtype, shape x dtype size = its span, inside the
// data section, no two overlapping; the header checksum when there is one); no tensor data is read.
StTable read_safetensors_table(const std::string& path);

// Throws zf::InputError naming the file and the tensor/field on any malformed content.
StFile read_safetensors(const std::string& path);
// Only the __metadata__ of a file (its header checksum verified when it has one); the data is not read.
StFile read_safetensors_metadata(const std::string& path);
// checksum: store the CRC-32 of the data section as __metadata__["zf_crc32"] and the CRC-32 of the
// header (metadata and tensor table, canonically dumped, without this entry) as
// __metadata__["zf_header_crc32"]; readers verify each when present, so a corrupted (not only
// truncated) file is refused.
void write_safetensors(const std::string& path, const StFile& f, bool checksum = false);
// The bytes write_safetensors writes (`path` names the file in errors).
std::vector<uint8_t> encode_safetensors(const std::string& path, const StFile& f, bool checksum = false);

StTensor st_f32(const std::vector<int64_t>& shape, const float* data);


}  // namespace zf
