// Precision bf16/fp16's 2-byte storage (Tensor::store_half) for every codelet: make_codelet wraps
// a codelet's implementations, unless it reads and writes 2-byte buffers itself
// (CodeletDef::native_half), in one that gives the kernel each stored-half buffer of the task
// widened to fp32 (exact) in scratch, and rounds what the kernel wrote back into the 2-byte buffer
// (round to nearest even: the bits of kernels/bf16.hpp's and fp16.hpp's rounding). A task without
// such a buffer calls the kernel directly: fp32 runs are unchanged. The kernels thus compute in
// fp32 on values stored in 2 bytes; the price is a widening and a rounding pass over each such
// buffer per task (a parameter's, for a kernel that reads it), and on a CPU worker its fp32 copy
// (kept by the worker thread for its next tasks up to 16 MB a buffer slot). The kept-operand bf16
// matmuls (codelets/matmul.cpp) read a bf16 weight as it is; the matmuls' CPU implementations
// read their stored bf16 operands as they are (CodeletDef::bf16_as_is).
#include <starpu.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "codelets/codelet_util.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/parallel.hpp"

namespace zf {
namespace {

struct Impl {
  starpu_cpu_func_t cpu = nullptr;
  starpu_cuda_func_t cuda = nullptr;
  unsigned bf16_as_is = 0;    // CodeletDef::bf16_as_is: the CPU implementation's own bf16 buffers
  unsigned writes_whole = 0;  // CodeletDef::writes_whole: W buffers written in full
  unsigned cpu_as_is = 0;     // CodeletDef::cpu_bf16_as_is: the CPU implementation's alone
};
// The wrapped codelets' own implementations, by their performance model (one per codelet): a
// map that is only ever replaced whole (copy on write, under impls_mu, as codelets are made), so
// that every task reads it without a lock. The replaced maps are kept (a few dozen, once each).
using ImplMap = std::unordered_map<const starpu_perfmodel*, Impl>;
std::mutex impls_mu;
std::atomic<const ImplMap*> impls{new ImplMap()};
std::vector<std::unique_ptr<const ImplMap>>& retired() {
  static std::vector<std::unique_ptr<const ImplMap>> r;
  return r;
}
void add_impl(const starpu_perfmodel* m, Impl im) {
  std::lock_guard<std::mutex> lk(impls_mu);
  const ImplMap* old = impls.load(std::memory_order_acquire);
  auto* next = new ImplMap(*old);
  (*next)[m] = im;
  impls.store(next, std::memory_order_release);
  retired().emplace_back(old);
}
Impl impl_of(const starpu_task* t) {
  const ImplMap* m = impls.load(std::memory_order_acquire);
  auto it = m->find(t->cl->model);
  return it == m->end() ? Impl{} : it->second;
}

// The task's stored-half buffers to widen: index and format; those in as_is (bit i: buffer i)
// stored in bf16 are left to the kernel.
struct HalfBuf {
  unsigned i;
  Half h;
  bool written;
  bool read;  // its old values are widened (not a W buffer the kernel writes in full)
};
bool bit(unsigned mask, unsigned i) { return i < 32 && (mask >> i & 1u); }
std::vector<HalfBuf> half_buffers(const starpu_task* t, unsigned as_is, unsigned whole) {
  std::vector<HalfBuf> out;
  const unsigned n = STARPU_TASK_GET_NBUFFERS(t);
  for (unsigned i = 0; i < n; ++i)
    if (const Half* h = stored_half_of(STARPU_TASK_GET_HANDLE(t, i)))
      if (!(*h == Half::Bf16 && bit(as_is, i))) {
        const starpu_data_access_mode m = STARPU_TASK_GET_MODE(t, i);
        const bool w = (m & STARPU_W) != 0;
        out.push_back({i, *h, w, !(w && !(m & STARPU_R) && bit(whole, i))});
      }
  return out;
}

// The CPU conversions in ranges of the device's tiles (runtime/parallel.hpp: the same values
// however many threads help)
constexpr size_t kConvertRange = size_t{1} << 16;
template <class S, class D>
void convert(const S* src, D* dst, size_t n, void (*f)(const S*, D*, size_t)) {
  parallel_ranges(n, 16, kConvertRange, [&](size_t b, size_t e) { f(src + b, dst + b, e - b); });
}
void widen(Half h, const uint16_t* src, float* dst, size_t n) {
  convert(src, dst, n, h == Half::Bf16 ? kernels::cpu::unpack_bf16 : kernels::cpu::unpack_fp16);
}
void narrow(Half h, const float* src, uint16_t* dst, size_t n) {
  convert(src, dst, n, h == Half::Bf16 ? kernels::cpu::pack_bf16 : kernels::cpu::pack_fp16);
}

// The fp32 copy of a task's k-th stored-half buffer of n values: the worker thread's buffer for
// slot k, kept for its next tasks up to kKeepBytes; a larger one is the task's own (`own`), freed
// after it.
constexpr size_t kKeepBytes = size_t{16} << 20;
float* fp32_scratch(size_t k, size_t n, std::unique_ptr<float[]>& own) {
  struct Slot {
    std::unique_ptr<float[]> p;
    size_t cap = 0;
  };
  thread_local std::vector<Slot> slots;
  if (n == 0) n = 1;
  if (n * sizeof(float) > kKeepBytes) {
    own.reset(new float[n]);
    return own.get();
  }
  if (slots.size() <= k) slots.resize(k + 1);
  Slot& s = slots[k];
  if (s.cap < n) {
    s.p.reset(new float[n]);
    s.cap = n;
  }
  return s.p.get();
}

void half_cpu(void* buffers[], void* arg) noexcept {
  const starpu_task* t = starpu_task_get_current();
  const Impl im = impl_of(t);
  if (!im.cpu) {
    record_task_failure("2-byte storage: a wrapped codelet without its CPU implementation");
    return;
  }
  std::vector<HalfBuf> hb;
  try {
    hb = half_buffers(t, im.bf16_as_is | im.cpu_as_is, im.writes_whole);
  } catch (const std::bad_alloc&) {
    record_task_failure("2-byte storage: out of memory");
    return;
  }
  if (hb.empty()) {
    im.cpu(buffers, arg);
    return;
  }
  try {
    const unsigned n = STARPU_TASK_GET_NBUFFERS(t);
    std::vector<void*> b(buffers, buffers + n);
    std::vector<starpu_vector_interface> wide(hb.size());
    std::vector<std::unique_ptr<float[]>> own(hb.size());
    std::vector<float*> scratch(hb.size());
    for (size_t k = 0; k < hb.size(); ++k) {
      auto* v = static_cast<starpu_vector_interface*>(buffers[hb[k].i]);
      scratch[k] = fp32_scratch(k, v->nx, own[k]);
      // every mode but a W buffer written in full: a kernel may write a slice of a W buffer, the
      // rest must round-trip unchanged
      if (hb[k].read) widen(hb[k].h, reinterpret_cast<const uint16_t*>(v->ptr), scratch[k], v->nx);
      wide[k] = *v;
      wide[k].ptr = reinterpret_cast<uintptr_t>(scratch[k]);
      wide[k].elemsize = sizeof(float);
      b[hb[k].i] = &wide[k];
    }
    im.cpu(b.data(), arg);
    for (size_t k = 0; k < hb.size(); ++k) {
      if (!hb[k].written) continue;
      auto* v = static_cast<starpu_vector_interface*>(buffers[hb[k].i]);
      narrow(hb[k].h, scratch[k], reinterpret_cast<uint16_t*>(v->ptr), v->nx);
    }
  } catch (const std::bad_alloc&) {
    record_task_failure("2-byte storage: out of memory for a buffer's fp32 copy");
  }
}

#ifdef ZF_USE_CUDA
// The same on a CUDA worker: the fp32 copies in stream-ordered scratch, the conversions and the
// kernel queued on the worker's stream, the scratch freed in stream order after them.
void half_cuda(void* buffers[], void* arg) noexcept {
  const starpu_task* t = starpu_task_get_current();
  const Impl im = impl_of(t);
  if (!im.cuda) {
    record_task_failure("2-byte storage: a wrapped codelet without its CUDA implementation");
    return;
  }
  std::vector<HalfBuf> hb;
  try {
    hb = half_buffers(t, im.bf16_as_is, im.writes_whole);
  } catch (const std::bad_alloc&) {
    record_task_failure("2-byte storage: out of memory");
    return;
  }
  if (hb.empty()) {
    im.cuda(buffers, arg);
    return;
  }
  const cudaStream_t s = cuda_stream();
  try {
    const unsigned n = STARPU_TASK_GET_NBUFFERS(t);
    std::vector<void*> b(buffers, buffers + n);
    std::vector<starpu_vector_interface> wide(hb.size());
    std::vector<float*> scratch(hb.size(), nullptr);
    bool ok = true;
    for (size_t k = 0; k < hb.size() && ok; ++k) {
      auto* v = static_cast<starpu_vector_interface*>(buffers[hb[k].i]);
      void* p = nullptr;
      if (cudaMallocAsync(&p, (v->nx ? v->nx : 1) * sizeof(float), s) != cudaSuccess) {
        record_task_failure("2-byte storage: cudaMallocAsync of a buffer's fp32 copy failed");
        ok = false;
        break;
      }
      scratch[k] = static_cast<float*>(p);
      const auto* src = reinterpret_cast<const uint16_t*>(v->ptr);
      if (hb[k].read)
        cuda_check(hb[k].h == Half::Bf16 ? kernels::cuda::unpack_bf16(src, scratch[k], v->nx, s)
                                         : kernels::cuda::unpack_fp16(src, scratch[k], v->nx, s));
      wide[k] = *v;
      wide[k].ptr = reinterpret_cast<uintptr_t>(scratch[k]);
      wide[k].elemsize = sizeof(float);
      b[hb[k].i] = &wide[k];
    }
    if (ok) {
      im.cuda(b.data(), arg);
      for (size_t k = 0; k < hb.size(); ++k) {
        if (!hb[k].written) continue;
        auto* v = static_cast<starpu_vector_interface*>(buffers[hb[k].i]);
        auto* dst = reinterpret_cast<uint16_t*>(v->ptr);
        cuda_check(hb[k].h == Half::Bf16 ? kernels::cuda::pack_bf16(scratch[k], dst, v->nx, s)
                                         : kernels::cuda::pack_fp16(scratch[k], dst, v->nx, s));
      }
    }
    for (float* p : scratch)
      if (p) cudaFreeAsync(p, s);
  } catch (const std::bad_alloc&) {
    record_task_failure("2-byte storage: out of memory");
  }
}
#endif

}  // namespace

starpu_codelet make_codelet(const CodeletDef& def, starpu_perfmodel* model) {
  starpu_codelet c = make_starpu_codelet(def, model);
#ifndef ZF_SIMGRID  // simulated tasks run no kernel (docs/simulation.md)
  if (!def.native_half) {
    add_impl(model, Impl{c.cpu_funcs[0], c.cuda_funcs[0], def.bf16_as_is, def.writes_whole, def.cpu_bf16_as_is});
    if (c.cpu_funcs[0]) c.cpu_funcs[0] = half_cpu;
#ifdef ZF_USE_CUDA
    if (c.cuda_funcs[0]) c.cuda_funcs[0] = half_cuda;
#endif
  }
#endif
  return c;
}

}  // namespace zf
