// How a strategy's optimizer state goes into a checkpoint's state.safetensors and comes back
// (graphs/train/checkpoint.hpp writes and reads the files): tensors by name, weight-shaped arrays in
// their logical layout, every value validated as it is read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/formats/safetensors.hpp"
#include "runtime/runtime.hpp"

namespace zf {

struct HostTensor;

// Strategies write and read their state through these (call only while no task is in flight).
class StateWriter {
 public:
  // in_out_rows > 0: t holds a weight-shaped array stored transposed, (C, R) with R = in_out_rows
  // (Param::in_out); it is written in the logical (R, C) order
  void put(const std::string& name, const Tensor& t, int64_t in_out_rows = 0);
  void put(const std::string& name, const HostTensor& t, int64_t in_out_rows = 0);  // tiles concatenated
  void put_i64(const std::string& name, const std::vector<int64_t>& v);
  void put_f64(const std::string& name, const std::vector<double>& v);
  StFile& file() { return f_; }

 private:
  StFile f_;
};

class StateReader {
 public:
  // What a float tensor's values must be (checked value by value as they are loaded).
  enum class Values { Finite, NonNegative /* and finite: second moments */, Raw /* not floats */ };
  StateReader(const StFile& f, std::string path, int64_t step) : f_(f), path_(std::move(path)), step_(step) {}
  // in_out_rows as StateWriter::put: the file's logical (R, C) values go to a (C, R) storage
  void get(const std::string& name, const Tensor& t, Values v = Values::Finite, int64_t in_out_rows = 0) const;
  void get(const std::string& name, const HostTensor& t, Values v = Values::Finite, int64_t in_out_rows = 0) const;
  // A tensor of int32 indices, each in [0, bound) and all distinct (ZenFlow's selected columns).
  void get_indices(const std::string& name, const Tensor& t, int64_t bound) const;
  std::vector<int64_t> i64(const std::string& name) const;
  std::vector<double> f64(const std::string& name) const;
  bool has(const std::string& name) const { return f_.tensors.count(name) != 0; }
  // The last applied update the state is the state after: the checkpoint's step, less the steps
  // skipped for an fp16 overflow (which change no optimizer state); -1 when none was applied. The
  // strategies validate their counters against it.
  int64_t step() const { return step_; }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const;

 private:
  const StTensor& find(const std::string& name, const std::string& dtype, size_t bytes) const;
  const StFile& f_;
  std::string path_;
  int64_t step_;
};

}  // namespace zf
