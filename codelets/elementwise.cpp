// Bias add and its gradient; ReLU and GELU forward/backward (kernels/cpu/elementwise.cpp).
#include <starpu.h>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct BiasArgs {
  int B, N;
};
struct ActArgs {
  Activation act;
};

// (the CPU implementations read and write precision bf16's 2-byte activations as they are:
// CodeletDef::cpu_bf16_as_is, kernels::cpu's *_mixed)
void bias_add_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<BiasArgs*>(a);
  kernels::cpu::bias_add_mixed(ew_of(b[0]), vec_ptr(b[1]), p->B, p->N);
}
void bias_grad_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<BiasArgs*>(a);
  kernels::cpu::bias_grad_mixed(ew_of(b[0]), vec_ptr(b[1]), p->B, p->N);
}
void act_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ActArgs*>(a);
  if (any_2byte(b, 2))
    kernels::cpu::act_fwd_mixed(p->act == Activation::Gelu, ew_of(b[0]), ew_of(b[1]), vec_n(b[0]));
  else if (p->act == Activation::Relu)
    kernels::cpu::relu_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_n(b[0]));
  else
    kernels::cpu::gelu_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_n(b[0]));
}
void act_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ActArgs*>(a);
  if (any_2byte(b, 3))
    kernels::cpu::act_bwd_mixed(p->act == Activation::Gelu, ew_of(b[0]), ew_of(b[1]), ew_of(b[2]), vec_n(b[0]));
  else if (p->act == Activation::Relu)
    kernels::cpu::relu_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_n(b[0]));
  else
    kernels::cpu::gelu_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_n(b[0]));
}
#ifdef ZF_USE_CUDA
void bias_add_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<BiasArgs*>(a);
  cuda_check(kernels::cuda::bias_add(vec_ptr(b[0]), vec_ptr(b[1]), p->B, p->N, cuda_stream()));
}
void bias_grad_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<BiasArgs*>(a);
  cuda_check(kernels::cuda::bias_grad(vec_ptr(b[0]), vec_ptr(b[1]), p->B, p->N, cuda_stream()));
}
void act_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ActArgs*>(a);
  if (p->act == Activation::Relu)
    cuda_check(kernels::cuda::relu_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_n(b[0]), cuda_stream()));
  else
    cuda_check(kernels::cuda::gelu_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_n(b[0]), cuda_stream()));
}
void act_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ActArgs*>(a);
  if (p->act == Activation::Relu)
    cuda_check(kernels::cuda::relu_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_n(b[0]), cuda_stream()));
  else
    cuda_check(kernels::cuda::gelu_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_n(b[0]), cuda_stream()));
}
#endif

starpu_codelet& bias_add_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is({"zf_bias_add", bias_add_cpu, ZF_CUDA_FUNC(bias_add_cuda), 2, {STARPU_RW, STARPU_R}}, 0b1), &m);
  return c;
}
starpu_codelet& bias_grad_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is({"zf_bias_grad", bias_grad_cpu, ZF_CUDA_FUNC(bias_grad_cuda), 2, {STARPU_R, STARPU_W}}, 0b01),
      &m);  // dy as stored (CPU)
  return c;
}
starpu_codelet& act_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is(writes_whole({"zf_act_fwd", act_fwd_cpu, ZF_CUDA_FUNC(act_fwd_cuda), 2, {STARPU_R, STARPU_W}}, 0b10),
                     0b11),
      &m);
  return c;
}
starpu_codelet& act_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is({"zf_act_bwd", act_bwd_cpu, ZF_CUDA_FUNC(act_bwd_cuda), 3, {STARPU_R, STARPU_R, STARPU_W}}, 0b111),
      &m);
  return c;
}

BiasArgs bias_dims(const SubmitOptions& opt, const Tensor& y, const Tensor& b) {
  int N = (int)b.numel();
  expect(y.numel() % N == 0, opt, shape_str(y) + " is not a multiple of " + shape_str(b));
  return {(int)(y.numel() / N), N};
}

}  // namespace

void insert_bias_add(const SubmitOptions& opt, const Tensor& y, const Tensor& b) {
  TaskBuilder(bias_add_cl(), opt).rw(y).r(b).args(bias_dims(opt, y, b)).submit();
}

void insert_bias_grad(const SubmitOptions& opt, const Tensor& dy, const Tensor& db) {
  TaskBuilder(bias_grad_cl(), opt).r(dy).w(db).args(bias_dims(opt, dy, db)).submit();
}

void insert_act_fwd(const SubmitOptions& opt, Activation a, const Tensor& x, const Tensor& y) {
  expect(x.numel() == y.numel(), opt, shape_str(x) + " vs " + shape_str(y));
  TaskBuilder(act_fwd_cl(), opt).r(x).w(y).args(ActArgs{a}).submit();
}

void insert_act_bwd(const SubmitOptions& opt, Activation a, const Tensor& x, const Tensor& dy,
                    const Tensor& dx) {
  expect(x.numel() == dy.numel() && x.numel() == dx.numel(), opt,
         shape_str(x) + " vs " + shape_str(dy) + " vs " + shape_str(dx));
  TaskBuilder(act_bwd_cl(), opt).r(x).r(dy).w(dx).args(ActArgs{a}).submit();
}

}  // namespace zf
