// What every oneDNN primitive of the CPU kernels shares (gemm.cpp, layernorm.cpp): the one CPU
// engine, each calling thread's own stream and scratchpad, and one OpenMP thread a call.
#pragma once
#include <omp.h>

#include <cstdint>
#include <dnnl.hpp>
#include <unordered_map>
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

// Runs prim on the calling thread with a scratchpad of this thread's own (primitives made with
// scratchpad_mode::user) of `scratch` bytes.
inline void execute(const dnnl::primitive& prim, std::unordered_map<int, dnnl::memory> args, size_t scratch) {
  one_thread();
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < scratch) buf.resize(scratch);
  using dims = dnnl::memory::dims;
  if (scratch)
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(dnnl::memory::desc(dims{(dnnl::memory::dim)scratch}, dnnl::memory::data_type::u8, dims{1}),
                              engine(), buf.data()));
  prim.execute(stream(), args);
}

}  // namespace zf::kernels::cpu::dnnl_ctx
