// Shared helpers of codelet files: shape checks at graph-build time and the CUDA slot.
#pragma once
#include <string>

#include "codelets/codelets.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/error.hpp"
#include "runtime/runtime.hpp"
#include "runtime/simulation.hpp"
#include "runtime/task.hpp"

// The CUDA implementation of an operation, or null when built without CUDA (then the codelet
// has only its CPU implementation and StarPU never places it on a CUDA worker).
#ifdef ZF_USE_CUDA
#define ZF_CUDA_FUNC(f) f
#elif defined(ZF_SIMGRID)  // simulated CUDA workers: a placeholder that never runs (docs/simulation.md)
#define ZF_CUDA_FUNC(f) ::zf::sim_cuda_placeholder
#else
#define ZF_CUDA_FUNC(f) nullptr
#endif

#ifdef ZF_USE_CUDA
#include <starpu.h>
#include <starpu_cublas_v2.h>

#include "codelets/kernels/cuda/kernels.hpp"
#include "runtime/task.hpp"

namespace zf {
// Inside a CUDA codelet: this worker's stream and cuBLAS handle (bound to that stream by
// starpu_cublas_init), and the record of a failed launch (kernels::cuda::Status).
inline cudaStream_t cuda_stream() { return starpu_cuda_get_local_stream(); }
inline cublasHandle_t cublas_handle() { return starpu_cublas_get_local_handle(); }
inline void cuda_check(kernels::cuda::Status st) noexcept {
  if (st) record_task_failure(st);
}
}  // namespace zf
#endif

namespace zf {

// The StarPU codelet of `def` (runtime/task.hpp's make_starpu_codelet) with precision bf16/fp16's
// 2-byte storage handled for it unless def.native_half: its stored-half buffers widened to fp32
// for its kernels and its writes rounded back (codelets/half_storage.cpp).
starpu_codelet make_codelet(const CodeletDef& def, starpu_perfmodel* model);

// A CPU implementation's buffer with CodeletDef::cpu_bf16_as_is, from element `offset`: fp32, or
// a stored bf16 tensor's 2 bytes (the wrapper widens every other 2-byte format)
inline kernels::cpu::Ew ew_of(void* buf, size_t offset = 0) {
  const size_t es = STARPU_VECTOR_GET_ELEMSIZE(buf);
  return {reinterpret_cast<char*>(STARPU_VECTOR_GET_PTR(buf)) + offset * es, es == 2};
}

// Whether any of a task's first n buffers holds 2-byte elements: a CPU implementation with
// CodeletDef::cpu_bf16_as_is then takes its mixed-precision path (kernels::cpu::*_mixed)
inline bool any_2byte(void* b[], int n) {
  for (int i = 0; i < n; ++i)
    if (STARPU_VECTOR_GET_ELEMSIZE(b[i]) == 2) return true;
  return false;
}

// A tensor whose values the codelets see as fp32: fp32, or stored in 2 bytes (Tensor::store_half).
inline bool fp32_values(const Tensor& t) { return t.elem_size() == 4 || t.stored_half(); }

// AdamW's memory traffic per fp32 element, for the simulation's roofline (CodeletDef::bytes): the
// parameter read and written, the gradient read, the two moments read and written (7 x 4 bytes).
constexpr double kAdamBytesPerElement = 28.0;

inline void expect(bool ok, const SubmitOptions& opt, const std::string& what) {
  if (!ok) throw Error(std::string("graph build: task ") + opt.name + ": " + what);
}
inline std::string shape_str(const Tensor& t) {
  std::string s = t.name() + "(";
  for (size_t i = 0; i < t.shape().size(); ++i) s += (i ? "," : "") + std::to_string(t.shape()[i]);
  return s + ")";
}
// A slice must lie inside its tensor and hold elements.
inline void check_slice(const SubmitOptions& opt, const Tensor& t, Slice s) {
  expect(s.offset + s.n <= t.numel() && s.n > 0, opt,
         "slice [" + std::to_string(s.offset) + ", +" + std::to_string(s.n) + ") outside " + shape_str(t));
}

}  // namespace zf
