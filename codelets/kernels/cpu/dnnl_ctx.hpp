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

// The calling thread's scratchpad (for primitives made with scratchpad_mode::user), at least
// `bytes` long; it moves when it grows
inline uint8_t* scratchpad(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

// One argument of a primitive: its id, its memory descriptor and the call's data
struct Arg {
  int id;
  const dnnl::memory::desc* md;
  const void* p;
};

// Runs prim with these arguments (and `scratch` bytes of the thread's scratchpad) on the calling
// thread. The memory objects are made once per thread and primitive and pointed at each call's
// data: making them per call cost about a third of a LayerNorm tile's time and, with malloc, 19 %
// of the attention's small products (gemm.cpp, layernorm.cpp).
template <size_t K>
void run(const dnnl::primitive& prim, size_t scratch, const Arg (&args)[K]) {
  struct Bound {
    std::unordered_map<int, dnnl::memory> map;
    const uint8_t* pad_at = nullptr;
  };
  thread_local std::unordered_map<const void*, Bound> bound;
  one_thread();
  Bound& b = bound[prim.get()];
  if (b.map.empty())
    for (const Arg& a : args) b.map.emplace(a.id, dnnl::memory(*a.md, engine(), DNNL_MEMORY_NONE));
  if (scratch) {
    uint8_t* pad = scratchpad(scratch);
    if (pad != b.pad_at) {  // first use, or the thread's scratchpad grew (moved) since
      using dims = dnnl::memory::dims;
      b.map[DNNL_ARG_SCRATCHPAD] =
          dnnl::memory(dnnl::memory::desc(dims{(dnnl::memory::dim)scratch}, dnnl::memory::data_type::u8, dims{1}),
                       engine(), pad);
      b.pad_at = pad;
    }
  }
  for (const Arg& a : args) b.map.at(a.id).set_data_handle(const_cast<void*>(a.p));
  prim.execute(stream(), b.map);
}

}  // namespace zf::kernels::cpu::dnnl_ctx
