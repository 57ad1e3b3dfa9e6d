// The Llama family's RMSNorm, rotary embeddings and SwiGLU (kernels/cpu/llama.cpp,
// kernels/cpu/elementwise.cpp; docs/llama.md), and the rotary table built at graph build. Shapes
// are validated here, when the graph is built.
#include <starpu.h>

#include <cmath>
#include <string>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct RmsNormArgs {
  int N, C;
  float eps;
};
struct RopeArgs {
  int B, T, NH, hs, pos0, Tmax;  // the table is (2, Tmax, hs/2): cos rows, then sin rows
};

// (precision bf16's 2-byte activations, weights and weight gradients read and written as they are
// stored, tile by tile: CodeletDef::cpu_bf16_as_is; rstd and the rotary table are fp32)
void rmsnorm_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<RmsNormArgs*>(a);
  kernels::cpu::rmsnorm_fwd_mixed(ew_of(b[0]), ew_of(b[1]), ew_of(b[2]), vec_ptr(b[3]), p->N, p->C, p->eps);
}
void rmsnorm_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<RmsNormArgs*>(a);
  kernels::cpu::rmsnorm_bwd_mixed(ew_of(b[0]), ew_of(b[1]), vec_ptr(b[2]), ew_of(b[3]), ew_of(b[4]), ew_of(b[5]),
                                  p->N, p->C);
}
void rope_cpu(void* b[], void* a, bool fwd) noexcept {  // buffers: x (RW), table (R)
  auto* p = static_cast<RopeArgs*>(a);
  const float* cs = vec_ptr(b[1]);
  const float* sn = cs + (size_t)p->Tmax * (p->hs / 2);
  kernels::cpu::rope_mixed(fwd, ew_of(b[0]), cs, sn, p->B, p->T, p->NH, p->hs, p->pos0);
}
void rope_fwd_cpu(void* b[], void* a) noexcept { rope_cpu(b, a, true); }
void rope_bwd_cpu(void* b[], void* a) noexcept { rope_cpu(b, a, false); }
// (precision bf16's 2-byte activations read and written as they are: CodeletDef::cpu_bf16_as_is)
void swiglu_fwd_cpu(void* b[], void*) noexcept {
  if (any_2byte(b, 3))
    kernels::cpu::swiglu_fwd_mixed(ew_of(b[0]), ew_of(b[1]), ew_of(b[2]), vec_n(b[0]));
  else
    kernels::cpu::swiglu_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_n(b[0]));
}
void swiglu_bwd_cpu(void* b[], void*) noexcept {
  if (any_2byte(b, 5))
    kernels::cpu::swiglu_bwd_mixed(ew_of(b[0]), ew_of(b[1]), ew_of(b[2]), ew_of(b[3]), ew_of(b[4]), vec_n(b[0]));
  else
    kernels::cpu::swiglu_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]), vec_ptr(b[4]),
                             vec_n(b[0]));
}
#ifdef ZF_USE_CUDA
void rmsnorm_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<RmsNormArgs*>(a);
  cuda_check(kernels::cuda::rmsnorm_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]), p->N, p->C,
                                        p->eps, cuda_stream()));
}
void rmsnorm_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<RmsNormArgs*>(a);
  cuda_check(kernels::cuda::rmsnorm_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]), vec_ptr(b[4]),
                                        vec_ptr(b[5]), p->N, p->C, cuda_stream()));
}
void rope_cuda(void* b[], void* a, bool fwd) noexcept {
  auto* p = static_cast<RopeArgs*>(a);
  const float* cs = vec_ptr(b[1]);
  const float* sn = cs + (size_t)p->Tmax * (p->hs / 2);
  cuda_check(fwd ? kernels::cuda::rope_fwd(vec_ptr(b[0]), cs, sn, p->B, p->T, p->NH, p->hs, p->pos0, cuda_stream())
                 : kernels::cuda::rope_bwd(vec_ptr(b[0]), cs, sn, p->B, p->T, p->NH, p->hs, p->pos0, cuda_stream()));
}
void rope_fwd_cuda(void* b[], void* a) noexcept { rope_cuda(b, a, true); }
void rope_bwd_cuda(void* b[], void* a) noexcept { rope_cuda(b, a, false); }
void swiglu_fwd_cuda(void* b[], void*) noexcept {
  cuda_check(kernels::cuda::swiglu_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_n(b[0]), cuda_stream()));
}
void swiglu_bwd_cuda(void* b[], void*) noexcept {
  cuda_check(kernels::cuda::swiglu_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]), vec_ptr(b[4]),
                                       vec_n(b[0]), cuda_stream()));
}
#endif

starpu_codelet& rmsnorm_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(cpu_bf16_as_is(writes_whole({"zf_rmsnorm_fwd", rmsnorm_fwd_cpu,
                                                                      ZF_CUDA_FUNC(rmsnorm_fwd_cuda), 4,
                                                                      {STARPU_R, STARPU_R, STARPU_W, STARPU_W}},
                                                                     0b1100),
                                                        0b111),
                                         &m);
  return c;
}
starpu_codelet& rmsnorm_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(cpu_bf16_as_is({"zf_rmsnorm_bwd", rmsnorm_bwd_cpu,
                                                         ZF_CUDA_FUNC(rmsnorm_bwd_cuda), 6,
                                                         {STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_W, STARPU_W}},
                                                        0b111011),
                                         &m);
  return c;
}
starpu_codelet& rope_cl(bool fwd) {
  static starpu_perfmodel mf{}, mb{};
  static starpu_codelet f = make_codelet(
      cpu_bf16_as_is({"zf_rope_fwd", rope_fwd_cpu, ZF_CUDA_FUNC(rope_fwd_cuda), 2, {STARPU_RW, STARPU_R}}, 0b1), &mf);
  static starpu_codelet b = make_codelet(
      cpu_bf16_as_is({"zf_rope_bwd", rope_bwd_cpu, ZF_CUDA_FUNC(rope_bwd_cuda), 2, {STARPU_RW, STARPU_R}}, 0b1), &mb);
  return fwd ? f : b;
}
starpu_codelet& swiglu_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is(writes_whole({"zf_swiglu_fwd", swiglu_fwd_cpu, ZF_CUDA_FUNC(swiglu_fwd_cuda), 3,
                                   {STARPU_R, STARPU_R, STARPU_W}},
                                  0b100),
                     0b111),
      &m);
  return c;
}
starpu_codelet& swiglu_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(cpu_bf16_as_is({"zf_swiglu_bwd", swiglu_bwd_cpu, ZF_CUDA_FUNC(swiglu_bwd_cuda),
                                                         5, {STARPU_R, STARPU_R, STARPU_R, STARPU_W, STARPU_W}},
                                                        0b11111),
                                         &m);
  return c;
}

// x and y (N, C), w (C), rstd (N)
RmsNormArgs rms_dims(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                     float eps) {
  const int C = (int)w.numel();
  expect(C > 0 && x.numel() % C == 0 && y.numel() == x.numel(), opt,
         shape_str(x) + " / " + shape_str(y) + " must be (N, " + std::to_string(C) + ")");
  const int N = (int)(x.numel() / C);
  expect(rstd.numel() == (size_t)N, opt, shape_str(rstd) + " must hold N = " + std::to_string(N));
  expect(eps >= 0.0f && std::isfinite(eps), opt, "rmsnorm eps must be finite and >= 0, got " + std::to_string(eps));
  return {N, C, eps};
}

// x (B*T, NH*hs), table (2, Tmax, hs/2)
RopeArgs rope_dims(const SubmitOptions& opt, const Tensor& x, const Tensor& table, int T, int n_head, int pos0) {
  expect(table.shape().size() == 3 && table.dim(0) == 2 && table.dim(2) > 0, opt,
         "the rotary table must be (2, Tmax, hs/2): " + shape_str(table));
  const int Tmax = (int)table.dim(1), hs = 2 * (int)table.dim(2);
  expect(n_head > 0 && x.shape().size() == 2 && x.dim(1) == (int64_t)n_head * hs, opt,
         shape_str(x) + " must be (B*T, " + std::to_string(n_head) + " heads x " + std::to_string(hs) + ")");
  expect(T > 0 && x.dim(0) % T == 0, opt, shape_str(x) + ": rows not a multiple of T = " + std::to_string(T));
  expect(pos0 >= 0 && pos0 + T <= Tmax, opt,
         "positions " + std::to_string(pos0) + ".." + std::to_string(pos0 + T - 1) + " outside the table's " +
             std::to_string(Tmax));
  return {(int)(x.dim(0) / T), T, n_head, hs, pos0, Tmax};
}

}  // namespace

void insert_rmsnorm_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& y,
                        const Tensor& rstd, float eps) {
  TaskBuilder(rmsnorm_fwd_cl(), opt).r(x).r(w).w(y).w(rstd).args(rms_dims(opt, x, w, y, rstd, eps)).submit();
}

void insert_rmsnorm_bwd(const SubmitOptions& opt, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                        const Tensor& w, const Tensor& dx, const Tensor& dw) {
  const RmsNormArgs a = rms_dims(opt, x, w, dy, rstd, 1.0f);
  expect(dx.numel() == x.numel() && dw.numel() == w.numel(), opt, shape_str(dx) + " / " + shape_str(dw));
  TaskBuilder(rmsnorm_bwd_cl(), opt).r(dy).r(x).r(rstd).r(w).w(dx).w(dw).args(a).submit();
}

Tensor make_rope_table(const kernels::cpu::RopeParams& p, int Tmax, int hs, const std::string& name) {
  if (const char* problem = kernels::cpu::rope_params_problem(p); *problem)
    throw Error("graph build: rotary table " + name + ": " + problem);
  if (Tmax <= 0 || hs <= 0 || hs % 2 != 0)
    throw Error("graph build: rotary table " + name + ": needs Tmax > 0 and an even head size, got Tmax = " +
                std::to_string(Tmax) + ", head size " + std::to_string(hs));
  Tensor t = Tensor::home({2, Tmax, hs / 2}, name);
  kernels::cpu::rope_table(p, Tmax, hs, t.data());
  return t;
}

void insert_rope_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& table, int T, int n_head, int pos0) {
  TaskBuilder(rope_cl(true), opt).rw(x).r(table).args(rope_dims(opt, x, table, T, n_head, pos0)).submit();
}

void insert_rope_bwd(const SubmitOptions& opt, const Tensor& dx, const Tensor& table, int T, int n_head, int pos0) {
  TaskBuilder(rope_cl(false), opt).rw(dx).r(table).args(rope_dims(opt, dx, table, T, n_head, pos0)).submit();
}

void insert_swiglu_fwd(const SubmitOptions& opt, const Tensor& gate, const Tensor& up, const Tensor& out) {
  expect(up.numel() == gate.numel() && out.numel() == gate.numel(), opt,
         shape_str(gate) + ", " + shape_str(up) + " and " + shape_str(out) + " must have the same size");
  TaskBuilder(swiglu_fwd_cl(), opt).r(gate).r(up).w(out).submit();
}

void insert_swiglu_bwd(const SubmitOptions& opt, const Tensor& gate, const Tensor& up, const Tensor& dout,
                       const Tensor& dgate, const Tensor& dup) {
  const size_t n = gate.numel();
  expect(up.numel() == n && dout.numel() == n && dgate.numel() == n && dup.numel() == n, opt,
         shape_str(gate) + ", " + shape_str(up) + ", " + shape_str(dout) + ", " + shape_str(dgate) + " and " +
             shape_str(dup) + " must have the same size");
  TaskBuilder(swiglu_bwd_cl(), opt).r(gate).r(up).r(dout).w(dgate).w(dup).submit();
}

}  // namespace zf
