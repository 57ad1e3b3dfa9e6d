// Optimizer and data-movement codelets: AdamW (kernels/cpu/adam.cpp) and its fused
// accumulate + AdamW + clear variant (ZenFlow's last accumulation and host update), gradient accumulation,
// copies between tensors or slices of them (device <-> host crossings, fp32, bf16 or fp16), bf16 and
// fp16 rounding (the latter with the loss scaler's overflow flag), scaling, zeroing.
#include <starpu.h>

#include <cstring>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/parallel.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct AdamArgs {
  AdamParams hp;
  int64_t step;
  float grad_scale;
  size_t p_off, g_off, n;
};
struct AdamAccArgs {
  AdamParams hp;
  int64_t step;
  float grad_scale;
  size_t p_off, a_off, g_off, n;
};
struct MoveArgs {
  size_t dst_off, src_off, n;
  float scale;
};
// Memory traffic of the range codelets for the simulation's roofline (CodeletDef::bytes): the n
// elements they touch, not their buffers' whole sizes. AdamW: p read and written, g read, m and v
// read and written (28 bytes per fp32 parameter); with the accumulator also read and written.
double adam_bytes(const void* a) { return kAdamBytesPerElement * (double)static_cast<const AdamArgs*>(a)->n; }
double adam_acc_bytes(const void* a) {
  return (kAdamBytesPerElement + 8.0) * (double)static_cast<const AdamAccArgs*>(a)->n;
}
// the device AdamW of a group of parameters (insert_adam_group): fp32, or bf16's fused form with
// the parameter written too, and the gradient when rounded
struct AdamGroupArgs {
  AdamParams hp;
  int64_t step;
  float grad_scale;
  AdamGroupMode mode;
  size_t n;  // elements of all the parts
};
double adam_group_bytes(const void* a) {
  auto* p = static_cast<const AdamGroupArgs*>(a);
  const double extra = p->mode == AdamGroupMode::Fp32 ? 0.0 : p->mode == AdamGroupMode::Bf16 ? 4.0 : 8.0;
  const double per = kAdamBytesPerElement + extra;
  return per * (double)p->n;
}
// acc read and written, g read
double accumulate_bytes(const void* a) { return 12.0 * (double)static_cast<const MoveArgs*>(a)->n; }
// src read, dst written, of the given element sizes
template <int SRC, int DST>
double move_bytes(const void* a) {
  return (double)(SRC + DST) * (double)static_cast<const MoveArgs*>(a)->n;
}
// the least elements a helper takes of a crossing (accumulation, merge): 256 KiB of fp32
constexpr size_t kCrossingRange = 65536;

void adam_step_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<AdamArgs*>(a);
  kernels::cpu::adam_step(vec_ptr(b[0]) + p->p_off, vec_ptr(b[1]) + p->g_off, vec_ptr(b[2]),
                          vec_ptr(b[3]), p->n, p->hp, p->step, p->grad_scale);
}
// buffers, per part: fp32 (x, grad, m, v); bf16 modes (master, grad, m, v, param). Each part in
// ranges that idle device workers help with (elementwise: the same result however many run them).
constexpr size_t kAdamRange = 65536;
void adam_group_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<AdamGroupArgs*>(a);
  const int per = p->mode == AdamGroupMode::Fp32 ? 4 : 5;
  const int nb = STARPU_TASK_GET_NBUFFERS(starpu_task_get_current());
  for (int i = 0; i + per <= nb; i += per) {
    float *x = vec_ptr(b[i]), *g = vec_ptr(b[i + 1]), *m = vec_ptr(b[i + 2]), *v = vec_ptr(b[i + 3]);
    float* out = per == 5 ? vec_ptr(b[i + 4]) : nullptr;
    parallel_ranges(vec_n(b[i]), 16, kAdamRange, [&](size_t lo, size_t hi) {
      if (!out)
        kernels::cpu::adam_step(x + lo, g + lo, m + lo, v + lo, hi - lo, p->hp, p->step, p->grad_scale);
      else
        kernels::cpu::adam_step_bf16(x + lo, g + lo, m + lo, v + lo, out + lo, hi - lo, p->hp, p->step,
                                     p->grad_scale, p->mode == AdamGroupMode::Bf16RoundGrad);
    });
  }
}
void adam_step_accumulate_cpu(void* b[], void* a) noexcept {  // buffers: param, acc, grad, m, v
  auto* p = static_cast<AdamAccArgs*>(a);
  kernels::cpu::adam_step_accumulate(vec_ptr(b[0]) + p->p_off, vec_ptr(b[1]) + p->a_off,
                                     vec_ptr(b[2]) + p->g_off, vec_ptr(b[3]), vec_ptr(b[4]), p->n, p->hp,
                                     p->step, p->grad_scale);
}
void adam_step_result_cpu(void* b[], void* a) noexcept {  // buffers: param, grad (then the result), m, v
  auto* p = static_cast<AdamArgs*>(a);
  kernels::cpu::adam_step_result(vec_ptr(b[0]) + p->p_off, vec_ptr(b[1]) + p->g_off, vec_ptr(b[2]),
                                 vec_ptr(b[3]), p->n, p->hp, p->step, p->grad_scale);
}
// ZenFlow's per-step crossing of the whole gradient: in ranges that idle workers help with
// (elementwise: the same result however many run them)
void accumulate_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  float* acc = vec_ptr(b[0]) + p->dst_off;
  const float* g = vec_ptr(b[1]) + p->src_off;
  parallel_ranges(p->n, 16, kCrossingRange,
                  [&](size_t lo, size_t hi) { kernels::cpu::accumulate(acc + lo, g + lo, hi - lo, p->scale); });
}
void copy_cpu(void* b[], void* a) noexcept {  // buffers: src, dst
  auto* p = static_cast<MoveArgs*>(a);
  kernels::cpu::copy(vec_ptr(b[1]) + p->dst_off, vec_ptr(b[0]) + p->src_off, p->n);
}
void pack_bf16_cpu(void* b[], void* a) noexcept {  // buffers: src (fp32), dst (bf16)
  auto* p = static_cast<MoveArgs*>(a);
  kernels::cpu::pack_bf16(vec_ptr(b[0]) + p->src_off, vec_as<uint16_t>(b[1]) + p->dst_off, p->n);
}
void unpack_bf16_cpu(void* b[], void* a) noexcept {  // buffers: src (bf16), dst (fp32)
  auto* p = static_cast<MoveArgs*>(a);
  kernels::cpu::unpack_bf16(vec_as<uint16_t>(b[0]) + p->src_off, vec_ptr(b[1]) + p->dst_off, p->n);
}
void round_bf16_cpu(void* b[], void*) noexcept { kernels::cpu::round_bf16(vec_ptr(b[0]), vec_n(b[0])); }
void pack_fp16_cpu(void* b[], void* a) noexcept {  // buffers: src (fp32), dst (fp16)
  auto* p = static_cast<MoveArgs*>(a);
  kernels::cpu::pack_fp16(vec_ptr(b[0]) + p->src_off, vec_as<uint16_t>(b[1]) + p->dst_off, p->n);
}
void unpack_fp16_cpu(void* b[], void* a) noexcept {  // buffers: src (fp16), dst (fp32)
  auto* p = static_cast<MoveArgs*>(a);
  kernels::cpu::unpack_fp16(vec_as<uint16_t>(b[0]) + p->src_off, vec_ptr(b[1]) + p->dst_off, p->n);
}
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
void adam_step_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<AdamArgs*>(a);
  cuda_check(kernels::cuda::adam_step(vec_ptr(b[0]) + p->p_off, vec_ptr(b[1]) + p->g_off, vec_ptr(b[2]),
                                      vec_ptr(b[3]), p->n, p->hp, p->step, p->grad_scale, cuda_stream()));
}
void adam_step_accumulate_cuda(void* b[], void* a) noexcept {  // buffers: param, acc, grad, m, v
  auto* p = static_cast<AdamAccArgs*>(a);
  cuda_check(kernels::cuda::adam_step_accumulate(vec_ptr(b[0]) + p->p_off, vec_ptr(b[1]) + p->a_off,
                                                 vec_ptr(b[2]) + p->g_off, vec_ptr(b[3]), vec_ptr(b[4]), p->n,
                                                 p->hp, p->step, p->grad_scale, cuda_stream()));
}
void accumulate_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  cuda_check(kernels::cuda::accumulate(vec_ptr(b[0]) + p->dst_off, vec_ptr(b[1]) + p->src_off, p->n, p->scale,
                                       cuda_stream()));
}
void copy_cuda(void* b[], void* a) noexcept {  // buffers: src, dst
  auto* p = static_cast<MoveArgs*>(a);
  cuda_check(kernels::cuda::copy(vec_ptr(b[1]) + p->dst_off, vec_ptr(b[0]) + p->src_off, p->n, cuda_stream()));
}
void pack_bf16_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  cuda_check(kernels::cuda::pack_bf16(vec_ptr(b[0]) + p->src_off, vec_as<uint16_t>(b[1]) + p->dst_off, p->n,
                                      cuda_stream()));
}
void unpack_bf16_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  cuda_check(kernels::cuda::unpack_bf16(vec_as<uint16_t>(b[0]) + p->src_off, vec_ptr(b[1]) + p->dst_off, p->n,
                                        cuda_stream()));
}
void round_bf16_cuda(void* b[], void*) noexcept {
  cuda_check(kernels::cuda::round_bf16(vec_ptr(b[0]), vec_n(b[0]), cuda_stream()));
}
void pack_fp16_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  cuda_check(kernels::cuda::pack_fp16(vec_ptr(b[0]) + p->src_off, vec_as<uint16_t>(b[1]) + p->dst_off, p->n,
                                      cuda_stream()));
}
void unpack_fp16_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MoveArgs*>(a);
  cuda_check(kernels::cuda::unpack_fp16(vec_as<uint16_t>(b[0]) + p->src_off, vec_ptr(b[1]) + p->dst_off, p->n,
                                        cuda_stream()));
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

starpu_codelet& adam_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet({"zf_adam_step", adam_step_cpu, ZF_CUDA_FUNC(adam_step_cuda), 4,
                    {STARPU_RW, STARPU_R, STARPU_RW, STARPU_RW}, nullptr, Collective::None, 0, nullptr, adam_bytes},
                   &m);
  return c;
}
starpu_codelet& adam_group_cl() {  // CPU devices only
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_adam_group", adam_group_cpu, nullptr, -1, {}, nullptr, Collective::None, 0, nullptr, adam_group_bytes}, &m);
  return c;
}
starpu_codelet& adam_accumulate_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet({"zf_adam_step_accumulate", adam_step_accumulate_cpu, ZF_CUDA_FUNC(adam_step_accumulate_cuda), 5,
                    {STARPU_RW, STARPU_RW, STARPU_R, STARPU_RW, STARPU_RW}, nullptr, Collective::None, 0, nullptr, adam_acc_bytes},
                   &m);
  return c;
}
starpu_codelet& adam_result_cl() {  // host side only (a host context has no CUDA workers)
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_adam_step_result", adam_step_result_cpu, nullptr, 4, {STARPU_RW, STARPU_RW, STARPU_RW, STARPU_RW},
       nullptr, Collective::None, 0, nullptr, adam_bytes}, &m);
  return c;
}
starpu_codelet& accumulate_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_accumulate", accumulate_cpu, ZF_CUDA_FUNC(accumulate_cuda), 2, {STARPU_RW, STARPU_R},
       nullptr, Collective::None, 0, nullptr, accumulate_bytes}, &m);
  return c;
}
starpu_codelet& copy_cl() {  // whole destination
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet({"zf_copy", copy_cpu, ZF_CUDA_FUNC(copy_cuda), 2, {STARPU_R, STARPU_W}, nullptr, Collective::None, 0, nullptr, move_bytes<4, 4>}, &m);
  return c;
}
starpu_codelet& copy_into_cl() {  // a slice of the destination
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet({"zf_copy_into", copy_cpu, ZF_CUDA_FUNC(copy_cuda), 2, {STARPU_R, STARPU_RW}, nullptr, Collective::None, 0, nullptr, move_bytes<4, 4>}, &m);
  return c;
}
// Conversions between fp32 and bf16 buffers (insert_copy picks them by element size); as the
// copies, a W variant for a whole destination and an RW one for a slice of it.
starpu_codelet& convert_bf16_cl(bool pack, bool whole_dst) {
  static starpu_perfmodel m[4]{};
  auto make = [&](int i, const char* name, starpu_cpu_func_t cpu, starpu_cuda_func_t cuda) {
    // unpack: 2-byte source, fp32 destination; pack: the reverse
    return make_codelet({name, cpu, cuda, 2, {STARPU_R, (i & 1) ? STARPU_W : STARPU_RW}, nullptr, Collective::None, 0,
                         nullptr, i < 2 ? move_bytes<2, 4> : move_bytes<4, 2>},
                        &m[i]);
  };
  static starpu_codelet c[4] = {
      make(0, "zf_unpack_bf16_into", unpack_bf16_cpu, ZF_CUDA_FUNC(unpack_bf16_cuda)),
      make(1, "zf_unpack_bf16", unpack_bf16_cpu, ZF_CUDA_FUNC(unpack_bf16_cuda)),
      make(2, "zf_pack_bf16_into", pack_bf16_cpu, ZF_CUDA_FUNC(pack_bf16_cuda)),
      make(3, "zf_pack_bf16", pack_bf16_cpu, ZF_CUDA_FUNC(pack_bf16_cuda)),
  };
  return c[(pack ? 2 : 0) + (whole_dst ? 1 : 0)];
}
// The same between fp32 and fp16 buffers.
starpu_codelet& convert_fp16_cl(bool pack, bool whole_dst) {
  static starpu_perfmodel m[4]{};
  auto make = [&](int i, const char* name, starpu_cpu_func_t cpu, starpu_cuda_func_t cuda) {
    // unpack: 2-byte source, fp32 destination; pack: the reverse
    return make_codelet({name, cpu, cuda, 2, {STARPU_R, (i & 1) ? STARPU_W : STARPU_RW}, nullptr, Collective::None, 0,
                         nullptr, i < 2 ? move_bytes<2, 4> : move_bytes<4, 2>},
                        &m[i]);
  };
  static starpu_codelet c[4] = {
      make(0, "zf_unpack_fp16_into", unpack_fp16_cpu, ZF_CUDA_FUNC(unpack_fp16_cuda)),
      make(1, "zf_unpack_fp16", unpack_fp16_cpu, ZF_CUDA_FUNC(unpack_fp16_cuda)),
      make(2, "zf_pack_fp16_into", pack_fp16_cpu, ZF_CUDA_FUNC(pack_fp16_cuda)),
      make(3, "zf_pack_fp16", pack_fp16_cpu, ZF_CUDA_FUNC(pack_fp16_cuda)),
  };
  return c[(pack ? 2 : 0) + (whole_dst ? 1 : 0)];
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
  static starpu_codelet c =
      make_codelet({"zf_zero", zero_cpu, ZF_CUDA_FUNC(zero_cuda), 1, {STARPU_W}}, &m);
  return c;
}

void check_slice(const SubmitOptions& opt, const Tensor& t, Slice s) {
  expect(s.offset + s.n <= t.numel() && s.n > 0, opt,
         "slice [" + std::to_string(s.offset) + ", +" + std::to_string(s.n) + ") outside " +
             shape_str(t));
}

}  // namespace

void insert_adam_step(const SubmitOptions& opt, const AdamParams& hp, int64_t step, float grad_scale,
                      const Tensor& param, Slice ps, const Tensor& grad, Slice gs, const Tensor& m,
                      const Tensor& v) {
  check_slice(opt, param, ps);
  check_slice(opt, grad, gs);
  expect(ps.n == gs.n && m.numel() == ps.n && v.numel() == ps.n, opt,
         "adam: param, grad and moments must have the same length");
  expect(step >= 1, opt, "adam: step counts from 1");
  TaskBuilder(adam_cl(), opt)
      .rw(param).r(grad).rw(m).rw(v)
      .args(AdamArgs{hp, step, grad_scale, ps.offset, gs.offset, ps.n})
      .submit();
}

void insert_adam_group(const SubmitOptions& opt, const AdamParams& hp, int64_t step, float grad_scale,
                       const std::vector<AdamGroupPart>& parts, AdamGroupMode mode) {
  const bool fp32 = mode == AdamGroupMode::Fp32;
  expect(!parts.empty(), opt, "adam_group: no parameters");
  expect(step >= 1, opt, "adam_group: step counts from 1");
  expect(!(opt.rt && opt.rt->device_is_cuda()), opt, "adam_group: CPU devices only (no CUDA implementation)");
  TaskBuilder tb(adam_group_cl(), opt);
  size_t total = 0;
  for (const AdamGroupPart& q : parts) {
    const size_t n = q.x->numel();
    expect(q.grad->numel() == n && q.m->numel() == n && q.v->numel() == n && (fp32 || q.param->numel() == n), opt,
           "adam_group: " + q.x->name() + ": weights, gradient, moments (and parameter) must have the same length");
    expect(q.x->elem_size() == 4 && q.grad->elem_size() == 4 && (fp32 || q.param->elem_size() == 4), opt,
           "adam_group: " + q.x->name() + ": fp32 tensors expected");
    expect(fp32 || (q.param->handle() != q.x->handle() && q.param->handle() != q.grad->handle()), opt,
           "adam_group: " + q.x->name() + ": the master and the parameter must be separate tensors");
    tb.rw(*q.x);
    if (mode == AdamGroupMode::Bf16RoundGrad)
      tb.rw(*q.grad);
    else
      tb.r(*q.grad);
    tb.rw(*q.m).rw(*q.v);
    if (!fp32) tb.w(*q.param);
    total += n;
  }
  tb.args(AdamGroupArgs{hp, step, grad_scale, mode, total}).submit();
}

void insert_adam_step_accumulate(const SubmitOptions& opt, const AdamParams& hp, int64_t step,
                                 float grad_scale, const Tensor& param, Slice ps, const Tensor& acc,
                                 Slice as, const Tensor& grad, Slice gs, const Tensor& m, const Tensor& v) {
  check_slice(opt, param, ps);
  check_slice(opt, acc, as);
  check_slice(opt, grad, gs);
  expect(ps.n == as.n && ps.n == gs.n && m.numel() == ps.n && v.numel() == ps.n, opt,
         "adam_accumulate: param, acc, grad and moments must have the same length");
  expect(acc.handle() != param.handle() && acc.handle() != grad.handle(), opt,
         "adam_accumulate: the accumulator must be its own tensor");
  expect(step >= 1, opt, "adam_accumulate: step counts from 1");
  TaskBuilder(adam_accumulate_cl(), opt)
      .rw(param).rw(acc).r(grad).rw(m).rw(v)
      .args(AdamAccArgs{hp, step, grad_scale, ps.offset, as.offset, gs.offset, ps.n})
      .submit();
}

void insert_adam_step_result(const SubmitOptions& opt, const AdamParams& hp, int64_t step, float grad_scale,
                             const Tensor& param, Slice ps, const Tensor& grad, Slice gs, const Tensor& m,
                             const Tensor& v) {
  check_slice(opt, param, ps);
  check_slice(opt, grad, gs);
  expect(ps.n == gs.n && m.numel() == ps.n && v.numel() == ps.n, opt,
         "adam_result: param, grad and moments must have the same length");
  expect(grad.handle() != param.handle(), opt, "adam_result: the gradient must be its own tensor");
  expect(grad.elem_size() == 4, opt, "adam_result: the gradient (and result) buffer must be fp32");
  expect(step >= 1, opt, "adam_result: step counts from 1");
  expect(opt.side == Side::Host, opt, "adam_result: host side only (no CUDA implementation)");
  TaskBuilder(adam_result_cl(), opt)
      .rw(param).rw(grad).rw(m).rw(v)
      .args(AdamArgs{hp, step, grad_scale, ps.offset, gs.offset, ps.n})
      .submit();
}

void insert_accumulate(const SubmitOptions& opt, const Tensor& acc, Slice as, const Tensor& g,
                       Slice gs, float scale) {
  check_slice(opt, acc, as);
  check_slice(opt, g, gs);
  expect(as.n == gs.n, opt, "accumulate: slices differ in length");
  TaskBuilder(accumulate_cl(), opt).rw(acc).r(g).args(MoveArgs{as.offset, gs.offset, as.n, scale}).submit();
}

void insert_copy(const SubmitOptions& opt, const Tensor& src, Slice ss, const Tensor& dst, Slice ds) {
  check_slice(opt, src, ss);
  check_slice(opt, dst, ds);
  expect(ss.n == ds.n, opt, "copy: slices differ in length");
  const bool whole_dst = ds.offset == 0 && ds.n == dst.numel();
  const size_t es = src.elem_size(), ed = dst.elem_size();
  expect((es == 4 || es == 2) && (ed == 4 || ed == 2), opt, "copy: fp32, bf16 or fp16 tensors only");
  expect(es == 4 || ed == 4, opt, "copy: between two 2-byte tensors is not a conversion this engine needs");
  const Half half = es == 2 ? src.half() : dst.half();
  starpu_codelet& cl = es == ed                ? (whole_dst ? copy_cl() : copy_into_cl())
                       : half == Half::Fp16 ? convert_fp16_cl(ed == 2, whole_dst)
                                            : convert_bf16_cl(ed == 2, whole_dst);
  TaskBuilder(cl, opt)
      .r(src)
      .add(dst, whole_dst ? STARPU_W : STARPU_RW)
      .args(MoveArgs{ds.offset, ss.offset, ss.n, 1.0f})
      .submit();
}

void insert_round_bf16(const SubmitOptions& opt, const Tensor& x) {
  expect(x.elem_size() == 4, opt, "round_bf16: " + shape_str(x) + " is not fp32");
  TaskBuilder(round_bf16_cl(), opt).rw(x).submit();
}

void insert_round_fp16(const SubmitOptions& opt, const Tensor& x, const Tensor& overflow) {
  expect(x.elem_size() == 4, opt, "round_fp16: " + shape_str(x) + " is not fp32");
  expect(overflow.elem_size() == 4 && overflow.numel() == 1, opt, "round_fp16: the flag is one 4-byte word");
  TaskBuilder(round_fp16_cl(), opt).rw(x).rw(overflow).submit();
}

void insert_scale(const SubmitOptions& opt, const Tensor& x, float s) {
  expect(x.elem_size() == 4, opt, "scale: " + shape_str(x) + " is not fp32");
  TaskBuilder(scale_cl(), opt).rw(x).args(MoveArgs{0, 0, x.numel(), s}).submit();
}

void insert_zero(const SubmitOptions& opt, const Tensor& x) {
  TaskBuilder(zero_cl(), opt).w(x).submit();
}

}  // namespace zf
