#include "graphs/strategies/state_io.hpp"

#include <cmath>
#include <cstring>

#include "graphs/strategies/host_tensor.hpp"
#include "models/workload.hpp"
#include "runtime/error.hpp"

namespace zf {

namespace {
// A weight-shaped fp32 array stored (C, R) (Param::in_out) <-> its logical (R, C) order, in place.
void to_logical(std::vector<uint8_t>& bytes, int64_t R) {
  if (R <= 0) return;
  std::vector<float> a(bytes.size() / 4);
  std::memcpy(a.data(), bytes.data(), bytes.size());
  transpose(a.data(), (int64_t)a.size() / R, R, reinterpret_cast<float*>(bytes.data()));
}
std::vector<float> from_logical(const std::vector<uint8_t>& bytes, int64_t R) {
  std::vector<float> a(bytes.size() / 4);
  if (R > 0)
    transpose(reinterpret_cast<const float*>(bytes.data()), R, (int64_t)a.size() / R, a.data());
  else
    std::memcpy(a.data(), bytes.data(), bytes.size());
  return a;
}
}  // namespace

void StateWriter::put(const std::string& name, const Tensor& t, int64_t in_out_rows) {
  t.acquire_read();
  StTensor s;
  s.dtype = t.bytes() == t.numel() * 8 ? "F64" : t.bytes() == t.numel() * 4 ? "F32" : "U8";
  s.shape = {(int64_t)(t.bytes() / (s.dtype == "F64" ? 8 : s.dtype == "F32" ? 4 : 1))};
  s.bytes.assign(t.as<uint8_t>(), t.as<uint8_t>() + t.bytes());
  t.release();
  if (s.dtype == "F32") to_logical(s.bytes, in_out_rows);
  f_.tensors[name] = std::move(s);
}

void StateWriter::put(const std::string& name, const HostTensor& h, int64_t in_out_rows) {
  StTensor s;
  s.dtype = "F32";
  size_t n = 0;
  for (auto& t : h.tiles) n += t.numel();
  std::vector<uint8_t> mine(n * 4);
  size_t off = 0;
  for (auto& t : h.tiles) {  // bf16 and fp16 tiles are saved as their exact fp32 values
    t.acquire_read();
    if (t.elem_size() == 2 && t.half() == Half::Fp16)
      kernels::cpu::unpack_fp16(t.as<uint16_t>(), reinterpret_cast<float*>(mine.data() + off), t.numel());
    else if (t.elem_size() == 2)
      kernels::cpu::unpack_bf16(t.as<uint16_t>(), reinterpret_cast<float*>(mine.data() + off), t.numel());
    else
      std::memcpy(mine.data() + off, t.data(), t.bytes());
    t.release();
    off += t.numel() * 4;
  }
  if (h.bounds) {  // ZeRO partition: rank 0 gathers every rank's segment (every rank calls this)
    const bool root = h.comm->rank() == 0;
    if (root) s.bytes.resize(h.numel * 4);
    if (h.comm->gather_to_root(reinterpret_cast<const float*>(mine.data()),
                               root ? reinterpret_cast<float*>(s.bytes.data()) : nullptr, *h.bounds) != 0)
      throw Error("checkpoint: MPI_Gatherv of " + name + " failed");
    if (!root) return;  // only rank 0 writes the file
    s.shape = {(int64_t)h.numel};
  } else {
    s.shape = {(int64_t)n};
    s.bytes = std::move(mine);
  }
  to_logical(s.bytes, in_out_rows);
  f_.tensors[name] = std::move(s);
}

void StateWriter::put_i64(const std::string& name, const std::vector<int64_t>& v) {
  StTensor s;
  s.dtype = "I64";
  s.shape = {(int64_t)v.size()};
  s.bytes.resize(v.size() * 8);
  if (!v.empty()) std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
  f_.tensors[name] = std::move(s);
}

void StateWriter::put_f64(const std::string& name, const std::vector<double>& v) {
  StTensor s;
  s.dtype = "F64";
  s.shape = {(int64_t)v.size()};
  s.bytes.resize(v.size() * 8);
  if (!v.empty()) std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
  f_.tensors[name] = std::move(s);
}

void StateReader::fail(const std::string& field, const std::string& what) const {
  throw InputError(path_ + ": " + field, what);
}

const StTensor& StateReader::find(const std::string& name, const std::string& dtype, size_t bytes) const {
  auto it = f_.tensors.find(name);
  if (it == f_.tensors.end()) fail(name, "missing from the checkpoint (written by another strategy or version?)");
  if (it->second.dtype != dtype) fail(name, "dtype " + it->second.dtype + ", expected " + dtype);
  if (bytes != (size_t)-1 && it->second.bytes.size() != bytes)
    fail(name, std::to_string(it->second.bytes.size()) + " bytes, the model needs " + std::to_string(bytes) +
                   " (a checkpoint of a different model shape?)");
  return it->second;
}

namespace {

// Value-by-value check of a float tensor's data (little-endian, as written).
template <class T>
void check_values(const StateReader& r, const std::string& name, const uint8_t* p, size_t n, StateReader::Values v) {
  if (v == StateReader::Values::Raw) return;
  for (size_t i = 0; i < n; ++i) {
    T x;
    std::memcpy(&x, p + i * sizeof(T), sizeof(T));
    if (!std::isfinite(x))
      r.fail(name, "element " + std::to_string(i) + " is " + std::to_string(x) + " (expected a finite number)");
    if (v == StateReader::Values::NonNegative && x < 0)
      r.fail(name, "element " + std::to_string(i) + " is " + std::to_string(x) +
                       " (a second moment: expected >= 0)");
  }
}

}  // namespace

void StateReader::get(const std::string& name, const Tensor& t, Values v, int64_t in_out_rows) const {
  const size_t es = t.numel() ? t.bytes() / t.numel() : 4;
  const StTensor& s = find(name, es == 8 ? "F64" : es == 4 ? "F32" : "U8", t.bytes());
  if (es == 4) check_values<float>(*this, name, s.bytes.data(), t.numel(), v);
  if (es == 8) check_values<double>(*this, name, s.bytes.data(), t.numel(), v);
  t.acquire_write();
  if (es == 4 && in_out_rows > 0)
    std::memcpy(t.as<uint8_t>(), from_logical(s.bytes, in_out_rows).data(), t.bytes());
  else
    std::memcpy(t.as<uint8_t>(), s.bytes.data(), t.bytes());
  t.release();
}

void StateReader::get(const std::string& name, const HostTensor& h, Values v, int64_t in_out_rows) const {
  size_t n = 0;
  for (auto& t : h.tiles) n += t.numel() * 4;
  // a partitioned tensor reads its tiles at their offsets in the whole one (any partition: the
  // file is the same for every stage and rank count)
  const StTensor& s = find(name, "F32", h.bounds ? h.numel * 4 : n);
  check_values<float>(*this, name, s.bytes.data(), s.bytes.size() / 4, v);
  std::vector<float> stored;  // in_out: the storage order
  if (in_out_rows > 0) stored = from_logical(s.bytes, in_out_rows);
  const uint8_t* src = in_out_rows > 0 ? reinterpret_cast<const uint8_t*>(stored.data()) : s.bytes.data();
  size_t off = 0;
  for (size_t i = 0; i < h.tiles.size(); ++i) {
    const Tensor& t = h.tiles[i];
    if (h.bounds) off = h.slices[i].offset * 4;
    t.acquire_write();
    if (t.elem_size() == 2 && t.half() == Half::Fp16)  // values written from fp16 tiles: packing is exact
      kernels::cpu::pack_fp16(reinterpret_cast<const float*>(src + off), t.as<uint16_t>(), t.numel());
    else if (t.elem_size() == 2)  // values written from bf16 tiles: packing them is exact
      kernels::cpu::pack_bf16(reinterpret_cast<const float*>(src + off), t.as<uint16_t>(), t.numel());
    else
      std::memcpy(t.data(), src + off, t.bytes());
    t.release();
    off += t.numel() * 4;
  }
}

void StateReader::get_indices(const std::string& name, const Tensor& t, int64_t bound) const {
  if (t.elem_size() != sizeof(int32_t)) throw Error("StateReader::get_indices: " + name + " is not an int32 tensor");
  const StTensor& s = find(name, "F32", t.bytes());  // int32 data, saved by StateWriter::put as 4-byte "F32"
  std::vector<char> seen((size_t)std::max<int64_t>(bound, 0), 0);
  for (size_t i = 0; i < t.numel(); ++i) {
    int32_t x;
    std::memcpy(&x, s.bytes.data() + i * 4, 4);
    if (x < 0 || x >= bound)
      fail(name, "index " + std::to_string(i) + " is " + std::to_string(x) + ", outside [0, " + std::to_string(bound) +
                     ")");
    if (seen[(size_t)x]++) fail(name, "column " + std::to_string(x) + " is selected twice (expected distinct indices)");
  }
  t.acquire_write();
  std::memcpy(t.as<uint8_t>(), s.bytes.data(), t.bytes());
  t.release();
}

std::vector<int64_t> StateReader::i64(const std::string& name) const {
  const StTensor& s = find(name, "I64", (size_t)-1);
  std::vector<int64_t> v(s.bytes.size() / 8);
  if (!v.empty()) std::memcpy(v.data(), s.bytes.data(), v.size() * 8);
  return v;
}

std::vector<double> StateReader::f64(const std::string& name) const {
  const StTensor& s = find(name, "F64", (size_t)-1);
  std::vector<double> v(s.bytes.size() / 8);
  if (!v.empty()) std::memcpy(v.data(), s.bytes.data(), v.size() * 8);
  return v;
}

}  // namespace zf
