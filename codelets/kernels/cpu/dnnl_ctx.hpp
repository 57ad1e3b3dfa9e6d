// What every oneDNN primitive of the CPU kernels shares (gemm.cpp, layernorm.cpp): the one CPU
// engine, each calling thread's own stream and scratchpad, and one OpenMP thread a call.
#pragma once
#include <omp.h>

#include <cstdint>
#include <dnnl.hpp>
#include <vector>

namespace zf::kernels::cpu::dnnl_ctx {

inline dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// oneDNN (Debian's, OpenMP runtime) splits a call over omp_get_max_threads() threads, a per-thread
// setting: each calling thread sets its own to 1 before creating or running a primitive
inline void one_thread() {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
}

inline dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// The calling thread's scratchpad (for primitives made with scratchpad_mode::user, gemm.cpp), at
// least `bytes` long; it moves when it grows
inline uint8_t* scratchpad(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

}  // namespace zf::kernels::cpu::dnnl_ctx
