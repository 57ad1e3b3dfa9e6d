// Shared helpers of codelet files: shape checks at graph-build time and the CUDA slot.
#pragma once
#include <string>

#include "runtime/error.hpp"
#include "runtime/runtime.hpp"

// The CUDA implementation of an operation, or null when built without CUDA (then the codelet
// has only its CPU implementation and StarPU never places it on a CUDA worker).
#ifdef ZF_USE_CUDA
#define ZF_CUDA_FUNC(f) f
#else
#define ZF_CUDA_FUNC(f) nullptr
#endif

namespace zf {

inline void expect(bool ok, const SubmitOptions& opt, const std::string& what) {
  if (!ok) throw Error(std::string("graph build: task ") + opt.name + ": " + what);
}
inline std::string shape_str(const Tensor& t) {
  std::string s = t.name() + "(";
  for (size_t i = 0; i < t.shape().size(); ++i) s += (i ? "," : "") + std::to_string(t.shape()[i]);
  return s + ")";
}

}  // namespace zf
