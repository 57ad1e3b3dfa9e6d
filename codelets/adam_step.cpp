// AdamW codelets (kernels/cpu/adam.cpp): one parameter's update, a group of parameters' in one
// task (device-adam on a CPU device), and the host's update that writes its result in place of the
// gradient (ZenFlow). Copies, conversions and the other data movement: codelets/convert.cpp.
#include <starpu.h>

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
// Memory traffic of the range codelets for the simulation's roofline (CodeletDef::bytes): the n
// elements they touch, not their buffers' whole sizes. AdamW: p read and written, g read, m and v
// read and written (28 bytes per fp32 parameter).
double adam_bytes(const void* a) { return kAdamBytesPerElement * (double)static_cast<const AdamArgs*>(a)->n; }
// the device AdamW of a group of parameters (insert_adam_group): fp32, or bf16's fused form with
// the parameter written too, and the gradient when rounded
struct AdamGroupArgs {
  AdamParams hp;
  int64_t step;
  float grad_scale;
  AdamGroupMode mode;
  double bytes;  // the parts' traffic (insert_adam_group), for the simulation's roofline
};
double adam_group_bytes(const void* a) { return static_cast<const AdamGroupArgs*>(a)->bytes; }
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
    float *x = vec_ptr(b[i]), *m = vec_ptr(b[i + 2]), *v = vec_ptr(b[i + 3]);
    if (per == 4) {
      const float* g = vec_ptr(b[i + 1]);
      parallel_ranges(vec_n(b[i]), 16, kAdamRange, [&](size_t lo, size_t hi) {
        kernels::cpu::adam_step(x + lo, g + lo, m + lo, v + lo, hi - lo, p->hp, p->step, p->grad_scale);
      });
      continue;
    }
    // bf16: the gradient and the parameter as they are stored (2-byte bf16 or fp32 words)
    parallel_ranges(vec_n(b[i]), 16, kAdamRange, [&](size_t lo, size_t hi) {
      kernels::cpu::adam_step_bf16_mixed(x + lo, ew_of(b[i + 1], lo), m + lo, v + lo, ew_of(b[i + 4], lo), hi - lo,
                                         p->hp, p->step, p->grad_scale, p->mode == AdamGroupMode::Bf16RoundGrad);
    });
  }
}
void adam_step_result_cpu(void* b[], void* a) noexcept {  // buffers: param, grad (then the result), m, v
  auto* p = static_cast<AdamArgs*>(a);
  kernels::cpu::adam_step_result(vec_ptr(b[0]) + p->p_off, vec_ptr(b[1]) + p->g_off, vec_ptr(b[2]),
                                 vec_ptr(b[3]), p->n, p->hp, p->step, p->grad_scale);
}
#ifdef ZF_USE_CUDA
void adam_step_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<AdamArgs*>(a);
  cuda_check(kernels::cuda::adam_step(vec_ptr(b[0]) + p->p_off, vec_ptr(b[1]) + p->g_off, vec_ptr(b[2]),
                                      vec_ptr(b[3]), p->n, p->hp, p->step, p->grad_scale, cuda_stream()));
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
  // native_half: the CPU implementation reads the bf16 gradients and writes the bf16 parameters as
  // they are stored (insert_adam_group admits no other 2-byte format)
  static starpu_codelet c = make_codelet(
      [] {
        CodeletDef d{"zf_adam_group", adam_group_cpu, nullptr, -1, {}, nullptr, Collective::None, 0, nullptr,
                     adam_group_bytes};
        d.native_half = true;
        return d;
      }(),
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

// One parameter's AdamW: slices inside their tensors, of one length with the moments; steps from 1.
void check_adam(const SubmitOptions& opt, const char* what, int64_t step, const Tensor& param, Slice ps,
                const Tensor& grad, Slice gs, const Tensor& m, const Tensor& v) {
  check_slice(opt, param, ps);
  check_slice(opt, grad, gs);
  expect(ps.n == gs.n && m.numel() == ps.n && v.numel() == ps.n, opt,
         std::string(what) + ": param, grad and moments must have the same length");
  expect(step >= 1, opt, std::string(what) + ": step counts from 1");
}

}  // namespace

void insert_adam_step(const SubmitOptions& opt, const AdamParams& hp, int64_t step, float grad_scale,
                      const Tensor& param, Slice ps, const Tensor& grad, Slice gs, const Tensor& m,
                      const Tensor& v) {
  check_adam(opt, "adam", step, param, ps, grad, gs, m, v);
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
  double bytes = 0.0;
  for (const AdamGroupPart& q : parts) {
    const size_t n = q.x->numel();
    expect(q.grad->numel() == n && q.m->numel() == n && q.v->numel() == n && (fp32 || q.param->numel() == n), opt,
           "adam_group: " + q.x->name() + ": weights, gradient, moments (and parameter) must have the same length");
    expect(fp32_values(*q.x) && fp32_values(*q.grad) && (fp32 || fp32_values(*q.param)), opt,
           "adam_group: " + q.x->name() + ": fp32 tensors expected");
    // (the CPU implementation reads 2-byte bf16 as it is, adam_group_cl: no other 2-byte format)
    auto plain_or_bf16 = [](const Tensor* t) { return !t || !t->stored_half() || t->half() == Half::Bf16; };
    expect(!q.x->stored_half() && !q.m->stored_half() && !q.v->stored_half() && plain_or_bf16(q.grad) &&
               plain_or_bf16(q.param) && (!fp32 || !q.grad->stored_half()),
           opt, "adam_group: " + q.x->name() + ": only a bf16 mode's gradient and parameter may be stored in bf16");
    expect(fp32 || (q.param->handle() != q.x->handle() && q.param->handle() != q.grad->handle()), opt,
           "adam_group: " + q.x->name() + ": the master and the parameter must be separate tensors");
    tb.rw(*q.x);
    if (mode == AdamGroupMode::Bf16RoundGrad)
      tb.rw(*q.grad);
    else
      tb.r(*q.grad);
    tb.rw(*q.m).rw(*q.v);
    if (!fp32) tb.w(*q.param);
    // traffic per element: the weights (fp32, or the bf16 modes' fp32 master) and the moments read
    // and written, the gradient read (and written when rounded), the bf16 modes' parameter written;
    // the gradient and the parameter as stored (2 bytes in bf16)
    bytes += 24.0 * (double)n + (double)q.grad->bytes() * (mode == AdamGroupMode::Bf16RoundGrad ? 2 : 1) +
             (fp32 ? 0.0 : (double)q.param->bytes());
  }
  tb.args(AdamGroupArgs{hp, step, grad_scale, mode, bytes}).submit();
}

void insert_adam_step_result(const SubmitOptions& opt, const AdamParams& hp, int64_t step, float grad_scale,
                             const Tensor& param, Slice ps, const Tensor& grad, Slice gs, const Tensor& m,
                             const Tensor& v) {
  check_adam(opt, "adam_result", step, param, ps, grad, gs, m, v);
  expect(grad.handle() != param.handle(), opt, "adam_result: the gradient must be its own tensor");
  expect(fp32_values(grad), opt, "adam_result: the gradient (and result) buffer must be fp32");
  expect(opt.side == Side::Host, opt, "adam_result: host side only (no CUDA implementation)");
  TaskBuilder(adam_result_cl(), opt)
      .rw(param).rw(grad).rw(m).rw(v)
      .args(AdamArgs{hp, step, grad_scale, ps.offset, gs.offset, ps.n})
      .submit();
}

}  // namespace zf
