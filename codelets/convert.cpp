// Data-movement codelets: copies between tensors or slices of them (the device <-> host crossings),
// conversions between fp32 and a 2-byte format (bf16 or fp16; one implementation over the format),
// bf16 and fp16 rounding (the latter with the loss scaler's overflow flag), gradient accumulation,
// scaling and zeroing.
#include <starpu.h>

#include <algorithm>
#include <cstring>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/parallel.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct MoveArgs {
  size_t dst_off, src_off, n;
  float scale;
};
// Memory traffic for the simulation's roofline (CodeletDef::bytes): the n elements touched.
// acc read and written, g read
double accumulate_bytes(const void* a) { return 12.0 * (double)static_cast<const MoveArgs*>(a)->n; }
// src read, dst written, of the given element sizes
template <int SRC, int DST>
double move_bytes(const void* a) {
  return (double)(SRC + DST) * (double)static_cast<const MoveArgs*>(a)->n;
}
// the least elements a helper takes of a crossing (accumulation, merge): 256 KiB of fp32
constexpr size_t kCrossingRange = 65536;

// ---- the conversions, one implementation over the 2-byte format H
template <Half H>
void pack_cpu(void* b[], void* a) noexcept {  // buffers: src (fp32), dst (2-byte)
  auto* p = static_cast<MoveArgs*>(a);
  const float* src = vec_ptr(b[0]) + p->src_off;
  uint16_t* dst = vec_as<uint16_t>(b[1]) + p->dst_off;
  if constexpr (H == Half::Bf16)
    kernels::cpu::pack_bf16(src, dst, p->n);
  else
    kernels::cpu::pack_fp16(src, dst, p->n);
}
template <Half H>
void unpack_cpu(void* b[], void* a) noexcept {  // buffers: src (2-byte), dst (fp32)
  auto* p = static_cast<MoveArgs*>(a);
  const uint16_t* src = vec_as<uint16_t>(b[0]) + p->src_off;
  float* dst = vec_ptr(b[1]) + p->dst_off;
  if constexpr (H == Half::Bf16)
    kernels::cpu::unpack_bf16(src, dst, p->n);
  else
    kernels::cpu::unpack_fp16(src, dst, p->n);
}
#ifdef ZF_USE_CUDA
template <Half H>
void pack_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  const float* src = vec_ptr(b[0]) + p->src_off;
  uint16_t* dst = vec_as<uint16_t>(b[1]) + p->dst_off;
  if constexpr (H == Half::Bf16)
    cuda_check(kernels::cuda::pack_bf16(src, dst, p->n, cuda_stream()));
  else
    cuda_check(kernels::cuda::pack_fp16(src, dst, p->n, cuda_stream()));
}
template <Half H>
void unpack_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  const uint16_t* src = vec_as<uint16_t>(b[0]) + p->src_off;
  float* dst = vec_ptr(b[1]) + p->dst_off;
  if constexpr (H == Half::Bf16)
    cuda_check(kernels::cuda::unpack_bf16(src, dst, p->n, cuda_stream()));
  else
    cuda_check(kernels::cuda::unpack_fp16(src, dst, p->n, cuda_stream()));
}
#endif

// Conversions between fp32 and H buffers (insert_copy picks them by element size); as the copies,
// a W variant for a whole destination and an RW one for a slice of it.
template <Half H>
starpu_codelet& convert_cl(bool pack, bool whole_dst) {
  constexpr const char* f = H == Half::Bf16 ? "bf16" : "fp16";
  static const std::string names[4] = {std::string("zf_unpack_") + f + "_into", std::string("zf_unpack_") + f,
                                       std::string("zf_pack_") + f + "_into", std::string("zf_pack_") + f};
  static starpu_perfmodel m[4]{};
  auto make = [&](int i) {
    const bool packs = i >= 2;
    // unpack: 2-byte source, fp32 destination; pack: the reverse
    return make_codelet({names[i].c_str(), packs ? pack_cpu<H> : unpack_cpu<H>,
                         packs ? ZF_CUDA_FUNC(pack_cuda<H>) : ZF_CUDA_FUNC(unpack_cuda<H>), 2,
                         {STARPU_R, (i & 1) ? STARPU_W : STARPU_RW}, nullptr, Collective::None, 0, nullptr,
                         packs ? move_bytes<4, 2> : move_bytes<2, 4>, nullptr, true},
                        &m[i]);
  };
  static starpu_codelet c[4] = {make(0), make(1), make(2), make(3)};
  return c[(pack ? 2 : 0) + (whole_dst ? 1 : 0)];
}

// ---- the rest, CPU then CUDA
// ZenFlow's per-step crossing of the whole gradient: in ranges that idle workers help with
// (elementwise: the same result however many run them)
void accumulate_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  // precision bf16's 2-byte tensors as they are (CodeletDef::cpu_bf16_as_is)
  if (any_2byte(b, 2)) return kernels::cpu::accumulate_mixed(ew_of(b[0], p->dst_off), ew_of(b[1], p->src_off), p->n, p->scale);
  float* acc = vec_ptr(b[0]) + p->dst_off;
  const float* g = vec_ptr(b[1]) + p->src_off;
  parallel_ranges(p->n, 16, kCrossingRange,
                  [&](size_t lo, size_t hi) { kernels::cpu::accumulate(acc + lo, g + lo, hi - lo, p->scale); });
}
// ZenFlow's accumulation on the host (zenflow.accumulate_on "host" under bf16/fp16): the gradient
// that crossed (2-byte, of format H) unpacked, times s1 then s2, each an fp32 product as
// insert_scale's, then stored (first) or added into the fp32 accumulator: the values the device's
// scale, scale and accumulate tasks give, bitwise.
struct WireArgs {
  size_t n;
  float s1, s2;
  bool first;
};
double wire_bytes(const void* a) {  // the source read, the accumulator written (and read unless first)
  const auto* p = static_cast<const WireArgs*>(a);
  return (double)p->n * (p->first ? 6.0 : 10.0);
}
template <Half H>
void accumulate_wire_cpu(void* b[], void* a) noexcept {  // buffers: acc (fp32), src (2-byte)
  auto* p = static_cast<WireArgs*>(a);
  float* acc = vec_ptr(b[0]);
  const uint16_t* src = vec_as<uint16_t>(b[1]);
  parallel_ranges(p->n, 16, kCrossingRange, [&](size_t lo, size_t hi) {
    float g[1024];
    for (size_t i = lo; i < hi; i += 1024) {
      const size_t m = std::min<size_t>(1024, hi - i);
      if constexpr (H == Half::Bf16)
        kernels::cpu::unpack_bf16(src + i, g, m);
      else
        kernels::cpu::unpack_fp16(src + i, g, m);
      if (p->s1 != 1.0f) kernels::cpu::scale(g, m, p->s1);
      if (p->s2 != 1.0f) kernels::cpu::scale(g, m, p->s2);
      if (p->first)
        kernels::cpu::copy(acc + i, g, m);
      else
        kernels::cpu::accumulate(acc + i, g, m, 1.0f);
    }
  });
}
void copy_cpu(void* b[], void* a) noexcept {  // buffers: src, dst
  auto* p = static_cast<MoveArgs*>(a);
  kernels::cpu::copy(vec_ptr(b[1]) + p->dst_off, vec_ptr(b[0]) + p->src_off, p->n);
}
// Between two 2-byte buffers of one format (a stored-half tensor and a crossing buffer): the bits.
void copy_half_cpu(void* b[], void* a) noexcept {  // buffers: src, dst
  auto* p = static_cast<MoveArgs*>(a);
  std::memcpy(vec_as<uint16_t>(b[1]) + p->dst_off, vec_as<uint16_t>(b[0]) + p->src_off, p->n * sizeof(uint16_t));
}
void round_bf16_cpu(void* b[], void*) noexcept { kernels::cpu::round_bf16(vec_ptr(b[0]), vec_n(b[0])); }
void round_fp16_cpu(void* b[], void*) noexcept {  // buffers: x, overflow flag (uint32)
  if (kernels::cpu::round_fp16(vec_ptr(b[0]), vec_n(b[0])) != 0) vec_as<uint32_t>(b[1])[0] = 1;
}
void scale_cpu(void* b[], void* a) noexcept {
  kernels::cpu::scale(vec_ptr(b[0]), vec_n(b[0]), static_cast<MoveArgs*>(a)->scale);
}
void zero_cpu(void* b[], void*) noexcept {  // any element type: zero all bytes
  std::memset(vec_ptr(b[0]), 0, STARPU_VECTOR_GET_NX(b[0]) * STARPU_VECTOR_GET_ELEMSIZE(b[0]));
}
#ifdef ZF_USE_CUDA
void accumulate_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  cuda_check(kernels::cuda::accumulate(vec_ptr(b[0]) + p->dst_off, vec_ptr(b[1]) + p->src_off, p->n, p->scale,
                                       cuda_stream()));
}
void copy_cuda(void* b[], void* a) noexcept {  // buffers: src, dst
  auto* p = static_cast<MoveArgs*>(a);
  cuda_check(kernels::cuda::copy(vec_ptr(b[1]) + p->dst_off, vec_ptr(b[0]) + p->src_off, p->n, cuda_stream()));
}
void copy_half_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  if (cudaMemcpyAsync(vec_as<uint16_t>(b[1]) + p->dst_off, vec_as<uint16_t>(b[0]) + p->src_off,
                      p->n * sizeof(uint16_t), cudaMemcpyDeviceToDevice, cuda_stream()) != cudaSuccess)
    record_task_failure("cudaMemcpyAsync of a 2-byte copy failed");
}
void round_bf16_cuda(void* b[], void*) noexcept {
  cuda_check(kernels::cuda::round_bf16(vec_ptr(b[0]), vec_n(b[0]), cuda_stream()));
}
void round_fp16_cuda(void* b[], void*) noexcept {
  cuda_check(kernels::cuda::round_fp16(vec_ptr(b[0]), vec_n(b[0]), vec_as<uint32_t>(b[1]), cuda_stream()));
}
void scale_cuda(void* b[], void* a) noexcept {
  cuda_check(kernels::cuda::scale(vec_ptr(b[0]), vec_n(b[0]), static_cast<MoveArgs*>(a)->scale, cuda_stream()));
}
void zero_cuda(void* b[], void*) noexcept {
  cuda_check(kernels::cuda::zero_bytes(vec_ptr(b[0]), STARPU_VECTOR_GET_NX(b[0]) * STARPU_VECTOR_GET_ELEMSIZE(b[0]),
                                       cuda_stream()));
}
#endif

starpu_codelet& accumulate_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is({"zf_accumulate", accumulate_cpu, ZF_CUDA_FUNC(accumulate_cuda), 2, {STARPU_RW, STARPU_R},
                      nullptr, Collective::None, 0, nullptr, accumulate_bytes},
                     0b11),
      &m);
  return c;
}
// first: W (the accumulator is stored whole), else RW. CPU only: a host task.
starpu_codelet& accumulate_wire_cl(Half h, bool first) {
  static starpu_perfmodel m[4]{};
  auto make = [&](int i, starpu_cpu_func_t f, const char* name) {
    return make_codelet({name, f, nullptr, 2, {(i & 1) ? STARPU_W : STARPU_RW, STARPU_R}, nullptr, Collective::None,
                         0, nullptr, wire_bytes, nullptr, true},
                        &m[i]);
  };
  static starpu_codelet c[4] = {
      make(0, accumulate_wire_cpu<Half::Bf16>, "zf_accumulate_host_bf16"),
      make(1, accumulate_wire_cpu<Half::Bf16>, "zf_accumulate_host_bf16_first"),
      make(2, accumulate_wire_cpu<Half::Fp16>, "zf_accumulate_host_fp16"),
      make(3, accumulate_wire_cpu<Half::Fp16>, "zf_accumulate_host_fp16_first"),
  };
  return c[(h == Half::Bf16 ? 0 : 2) + (first ? 1 : 0)];
}
// whole_dst: a W copy over the whole destination; else RW, into a slice of it
starpu_codelet& copy_cl(bool whole_dst) {
  static starpu_perfmodel m[2]{};
  static starpu_codelet c[2] = {
      make_codelet({"zf_copy_into", copy_cpu, ZF_CUDA_FUNC(copy_cuda), 2, {STARPU_R, STARPU_RW}, nullptr,
                    Collective::None, 0, nullptr, move_bytes<4, 4>}, &m[0]),
      make_codelet({"zf_copy", copy_cpu, ZF_CUDA_FUNC(copy_cuda), 2, {STARPU_R, STARPU_W}, nullptr,
                    Collective::None, 0, nullptr, move_bytes<4, 4>}, &m[1]),
  };
  return c[whole_dst ? 1 : 0];
}
starpu_codelet& copy_half_cl(bool whole_dst) {
  static starpu_perfmodel m[2]{};
  auto make = [&](int i) {
    return make_codelet({i ? "zf_copy_half" : "zf_copy_half_into", copy_half_cpu, ZF_CUDA_FUNC(copy_half_cuda), 2,
                         {STARPU_R, i ? STARPU_W : STARPU_RW}, nullptr, Collective::None, 0, nullptr,
                         move_bytes<2, 2>, nullptr, true},
                        &m[i]);
  };
  static starpu_codelet c[2] = {make(0), make(1)};
  return c[whole_dst ? 1 : 0];
}
starpu_codelet& round_fp16_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_round_fp16", round_fp16_cpu, ZF_CUDA_FUNC(round_fp16_cuda), 2, {STARPU_RW, STARPU_RW}}, &m);
  return c;
}
starpu_codelet& scale_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_scale", scale_cpu, ZF_CUDA_FUNC(scale_cuda), 1, {STARPU_RW}}, &m);
  return c;
}
starpu_codelet& round_bf16_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet({"zf_round_bf16", round_bf16_cpu, ZF_CUDA_FUNC(round_bf16_cuda), 1, {STARPU_RW}}, &m);
  return c;
}
starpu_codelet& zero_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_zero", zero_cpu, ZF_CUDA_FUNC(zero_cuda), 1, {STARPU_W}, nullptr,
                                          Collective::None, 0, nullptr, nullptr, nullptr, true},
                                         &m);
  return c;
}

}  // namespace

void insert_accumulate(const SubmitOptions& opt, const Tensor& acc, Slice as, const Tensor& g,
                       Slice gs, float scale) {
  check_slice(opt, acc, as);
  check_slice(opt, g, gs);
  expect(as.n == gs.n, opt, "accumulate: slices differ in length");
  TaskBuilder(accumulate_cl(), opt).rw(acc).r(g).args(MoveArgs{as.offset, gs.offset, as.n, scale}).submit();
}

void insert_accumulate_host(const SubmitOptions& opt, const Tensor& acc, const Tensor& src, float s1, float s2,
                            bool first) {
  expect(acc.elem_size() == 4, opt, "accumulate_host: the accumulator " + shape_str(acc) + " is not fp32");
  expect(src.elem_size() == 2, opt, "accumulate_host: the source " + shape_str(src) + " is not bf16 or fp16");
  expect(acc.numel() == src.numel(), opt, "accumulate_host: the accumulator and the source differ in length");
  TaskBuilder(accumulate_wire_cl(src.half(), first), opt)
      .add(acc, first ? STARPU_W : STARPU_RW)
      .r(src)
      .args(WireArgs{acc.numel(), s1, s2, first})
      .submit();
}

void insert_copy(const SubmitOptions& opt, const Tensor& src, Slice ss, const Tensor& dst, Slice ds) {
  check_slice(opt, src, ss);
  check_slice(opt, dst, ds);
  expect(ss.n == ds.n, opt, "copy: slices differ in length");
  const bool whole_dst = ds.offset == 0 && ds.n == dst.numel();
  const size_t es = src.elem_size(), ed = dst.elem_size();
  expect((es == 4 || es == 2) && (ed == 4 || ed == 2), opt, "copy: fp32, bf16 or fp16 tensors only");
  // two 2-byte tensors: one of them stored-half (a parameter to or from its crossing buffer), one format
  expect(es == 4 || ed == 4 || ((src.stored_half() || dst.stored_half()) && src.half() == dst.half()), opt,
         "copy: between two 2-byte tensors only of one format, one of them a stored-half tensor");
  const Half half = es == 2 ? src.half() : dst.half();
  starpu_codelet& cl = es == 2 && ed == 2      ? copy_half_cl(whole_dst)
                       : es == ed              ? copy_cl(whole_dst)
                       : half == Half::Fp16 ? convert_cl<Half::Fp16>(ed == 2, whole_dst)
                                            : convert_cl<Half::Bf16>(ed == 2, whole_dst);
  TaskBuilder(cl, opt)
      .r(src)
      .add(dst, whole_dst ? STARPU_W : STARPU_RW)
      .args(MoveArgs{ds.offset, ss.offset, ss.n, 1.0f})
      .submit();
}

void insert_round_bf16(const SubmitOptions& opt, const Tensor& x) {
  expect(fp32_values(x), opt, "round_bf16: " + shape_str(x) + " is not fp32");
  TaskBuilder(round_bf16_cl(), opt).rw(x).submit();
}

void insert_round_fp16(const SubmitOptions& opt, const Tensor& x, const Tensor& overflow) {
  expect(fp32_values(x), opt, "round_fp16: " + shape_str(x) + " is not fp32");
  expect(overflow.elem_size() == 4 && overflow.numel() == 1, opt, "round_fp16: the flag is one 4-byte word");
  TaskBuilder(round_fp16_cl(), opt).rw(x).rw(overflow).submit();
}

void insert_scale(const SubmitOptions& opt, const Tensor& x, float s) {
  expect(fp32_values(x), opt, "scale: " + shape_str(x) + " is not fp32");
  TaskBuilder(scale_cl(), opt).rw(x).args(MoveArgs{0, 0, x.numel(), s}).submit();
}

void insert_zero(const SubmitOptions& opt, const Tensor& x) {
  TaskBuilder(zero_cl(), opt).w(x).submit();
}

}  // namespace zf
