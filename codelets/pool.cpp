// Mean, max and last-position pooling of a sequence's valid positions and their backward (kernels/cpu/pool.cpp).
#include <starpu.h>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct PoolArgs {
  int B, T, C;
};

void mean_pool_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  kernels::cpu::mean_pool_fwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C);
}
void mean_pool_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  kernels::cpu::mean_pool_bwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C);
}
#ifdef ZF_USE_CUDA
void mean_pool_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  cuda_check(kernels::cuda::mean_pool_fwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C,
                                          cuda_stream()));
}
void mean_pool_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  cuda_check(kernels::cuda::mean_pool_bwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C,
                                          cuda_stream()));
}
#endif

void max_pool_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  kernels::cpu::max_pool_fwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C);
}
void max_pool_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  kernels::cpu::max_pool_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_as<int32_t>(b[2]), vec_ptr(b[3]), p->B, p->T, p->C);
}

void last_pool_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  kernels::cpu::last_pool_fwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C);
}
void last_pool_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  kernels::cpu::last_pool_bwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C);
}

#ifdef ZF_USE_CUDA
void max_pool_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  cuda_check(kernels::cuda::max_pool_fwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C,
                                         cuda_stream()));
}
void max_pool_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  cuda_check(kernels::cuda::max_pool_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_as<int32_t>(b[2]), vec_ptr(b[3]), p->B,
                                         p->T, p->C, cuda_stream()));
}
void last_pool_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  cuda_check(kernels::cuda::last_pool_fwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C,
                                          cuda_stream()));
}
void last_pool_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<PoolArgs*>(a);
  cuda_check(kernels::cuda::last_pool_bwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C,
                                          cuda_stream()));
}
#endif

starpu_codelet& last_pool_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_last_pool_fwd", last_pool_fwd_cpu, ZF_CUDA_FUNC(last_pool_fwd_cuda), 3, {STARPU_R, STARPU_R, STARPU_W}}, &m);
  return c;
}
starpu_codelet& last_pool_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_last_pool_bwd", last_pool_bwd_cpu, ZF_CUDA_FUNC(last_pool_bwd_cuda), 3, {STARPU_R, STARPU_R, STARPU_W}}, &m);
  return c;
}

starpu_codelet& max_pool_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_max_pool_fwd", max_pool_fwd_cpu, ZF_CUDA_FUNC(max_pool_fwd_cuda), 3, {STARPU_R, STARPU_R, STARPU_W}}, &m);
  return c;
}
starpu_codelet& max_pool_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_max_pool_bwd", max_pool_bwd_cpu, ZF_CUDA_FUNC(max_pool_bwd_cuda), 4,
                                          {STARPU_R, STARPU_R, STARPU_R, STARPU_W}},
                                         &m);
  return c;
}

starpu_codelet& mean_pool_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_mean_pool_fwd", mean_pool_fwd_cpu, ZF_CUDA_FUNC(mean_pool_fwd_cuda), 3, {STARPU_R, STARPU_R, STARPU_W}}, &m);
  return c;
}
starpu_codelet& mean_pool_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_mean_pool_bwd", mean_pool_bwd_cpu, ZF_CUDA_FUNC(mean_pool_bwd_cuda), 3, {STARPU_R, STARPU_R, STARPU_W}}, &m);
  return c;
}

// x (B*T, C), len (B), y (B, C)
PoolArgs dims(const SubmitOptions& opt, const Tensor& x, const Tensor& len, const Tensor& y) {
  expect(y.shape().size() == 2 && x.shape().size() == 2 && x.dim(1) == y.dim(1), opt,
         "pooling needs x (B*T, C) and y (B, C): " + shape_str(x) + " " + shape_str(y));
  const int B = (int)y.dim(0), C = (int)y.dim(1);
  expect(len.numel() == (size_t)B && x.dim(0) % B == 0, opt, shape_str(len) + " / " + shape_str(x));
  return {B, (int)(x.dim(0) / B), C};
}

}  // namespace

void insert_mean_pool_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& len, const Tensor& y) {
  TaskBuilder(mean_pool_fwd_cl(), opt).r(x).r(len).w(y).args(dims(opt, x, len, y)).submit();
}

void insert_mean_pool_bwd(const SubmitOptions& opt, const Tensor& dy, const Tensor& len, const Tensor& dx) {
  TaskBuilder(mean_pool_bwd_cl(), opt).r(dy).r(len).w(dx).args(dims(opt, dx, len, dy)).submit();
}

void insert_max_pool_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& len, const Tensor& y) {
  TaskBuilder(max_pool_fwd_cl(), opt).r(x).r(len).w(y).args(dims(opt, x, len, y)).submit();
}

void insert_max_pool_bwd(const SubmitOptions& opt, const Tensor& x, const Tensor& dy, const Tensor& len,
                         const Tensor& dx) {
  expect(dx.numel() == x.numel(), opt, shape_str(dx) + " vs " + shape_str(x));
  TaskBuilder(max_pool_bwd_cl(), opt).r(x).r(dy).r(len).w(dx).args(dims(opt, x, len, dy)).submit();
}

void insert_last_pool_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& len, const Tensor& y) {
  TaskBuilder(last_pool_fwd_cl(), opt).r(x).r(len).w(y).args(dims(opt, x, len, y)).submit();
}

void insert_last_pool_bwd(const SubmitOptions& opt, const Tensor& dy, const Tensor& len, const Tensor& dx) {
  TaskBuilder(last_pool_bwd_cl(), opt).r(dy).r(len).w(dx).args(dims(opt, dx, len, dy)).submit();
}

}  // namespace zf
