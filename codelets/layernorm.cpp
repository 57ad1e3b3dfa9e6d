// LayerNorm forward (saving mean and rstd) and backward (kernels/cpu/layernorm.cpp).
#include <starpu.h>

#include <cmath>
#include <string>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct LayerNormArgs {
  int N, C;
  float eps;  // the forward's (the backward reads rstd)
};

// (precision bf16's 2-byte activations, weights and weight gradients read and written as they are
// stored, tile by tile: CodeletDef::cpu_bf16_as_is; the statistics are fp32)
void layernorm_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<LayerNormArgs*>(a);
  kernels::cpu::layernorm_fwd_mixed(ew_of(b[0]), ew_of(b[1]), ew_of(b[2]), ew_of(b[3]), vec_ptr(b[4]), vec_ptr(b[5]),
                                    p->N, p->C, p->eps);
}
void layernorm_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<LayerNormArgs*>(a);
  kernels::cpu::layernorm_bwd_mixed(ew_of(b[0]), ew_of(b[1]), vec_ptr(b[2]), vec_ptr(b[3]), ew_of(b[4]), ew_of(b[5]),
                                    ew_of(b[6]), ew_of(b[7]), p->N, p->C);
}
#ifdef ZF_USE_CUDA
void layernorm_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<LayerNormArgs*>(a);
  cuda_check(kernels::cuda::layernorm_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]), vec_ptr(b[4]),
                                          vec_ptr(b[5]), p->N, p->C, p->eps, cuda_stream()));
}
void layernorm_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<LayerNormArgs*>(a);
  cuda_check(kernels::cuda::layernorm_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]), vec_ptr(b[4]),
                                          vec_ptr(b[5]), vec_ptr(b[6]), vec_ptr(b[7]), p->N, p->C, cuda_stream()));
}
#endif

starpu_codelet& layernorm_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is(writes_whole({"zf_layernorm_fwd", layernorm_fwd_cpu, ZF_CUDA_FUNC(layernorm_fwd_cuda), 6,
                                   {STARPU_R, STARPU_R, STARPU_R, STARPU_W, STARPU_W, STARPU_W}},
                                  0b111000),
                     0b1111),
      &m);
  return c;
}
starpu_codelet& layernorm_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is({"zf_layernorm_bwd", layernorm_bwd_cpu, ZF_CUDA_FUNC(layernorm_bwd_cuda), 8,
                      {STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_W, STARPU_W, STARPU_W}},
                     0b11110011),
      &m);
  return c;
}

// x (N, C), w and b (C), mean and rstd (N)
LayerNormArgs dims(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                   const Tensor& mean, const Tensor& rstd, float eps = 0.0f) {
  const int C = (int)w.numel();
  expect(b.numel() == (size_t)C, opt, shape_str(b) + " vs " + shape_str(w));
  expect(x.numel() % C == 0 && y.numel() == x.numel(), opt,
         shape_str(x) + " / " + shape_str(y) + " must be (N, " + std::to_string(C) + ")");
  const int N = (int)(x.numel() / C);
  expect(mean.numel() == (size_t)N && rstd.numel() == (size_t)N, opt,
         shape_str(mean) + " and " + shape_str(rstd) + " must hold N = " + std::to_string(N));
  return {N, C, eps};
}

}  // namespace

void insert_layernorm_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& b,
                          const Tensor& y, const Tensor& mean, const Tensor& rstd, float eps) {
  expect(std::isfinite(eps) && eps > 0.0f, opt, "LayerNorm eps must be finite and > 0: " + std::to_string(eps));
  TaskBuilder(layernorm_fwd_cl(), opt)
      .r(x).r(w).r(b).w(y).w(mean).w(rstd)
      .args(dims(opt, x, w, b, y, mean, rstd, eps))
      .submit();
}

void insert_layernorm_bwd(const SubmitOptions& opt, const Tensor& dy, const Tensor& x, const Tensor& mean,
                          const Tensor& rstd, const Tensor& w, const Tensor& dx, const Tensor& dw,
                          const Tensor& db) {
  LayerNormArgs a = dims(opt, x, w, db, dy, mean, rstd);
  expect(dx.numel() == x.numel() && dw.numel() == w.numel(), opt, shape_str(dx) + " / " + shape_str(dw));
  TaskBuilder(layernorm_bwd_cl(), opt).r(dy).r(x).r(mean).r(rstd).r(w).w(dx).w(dw).w(db).args(a).submit();
}

}  // namespace zf
