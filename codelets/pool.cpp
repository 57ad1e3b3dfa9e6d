// Mean pooling of a sequence's valid positions and its backward (kernels/cpu/pool.cpp).
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

starpu_codelet& mean_pool_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_mean_pool_fwd", mean_pool_fwd_cpu, ZF_CUDA_FUNC(nullptr), 3, {STARPU_R, STARPU_R, STARPU_W}}, &m);
  return c;
}
starpu_codelet& mean_pool_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_mean_pool_bwd", mean_pool_bwd_cpu, ZF_CUDA_FUNC(nullptr), 3, {STARPU_R, STARPU_R, STARPU_W}}, &m);
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

}  // namespace zf
