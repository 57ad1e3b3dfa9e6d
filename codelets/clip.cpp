// Gradient clipping codelets (docs/spec.md, "gradient_clipping"): the sum of squares of a slice into
// a slot of a partial-sums tensor, the combined factor from the partial sums, and the in-place
// scaling by that factor (kernels/cpu/clip.cpp, kernels/cuda/clip.cu, kernels/clip_math.hpp).
#include <starpu.h>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct SumsqArgs {
  size_t off, n, slot;
};
struct FactorArgs {
  double sq_div;
  float clip, loss_scale, extra;
  ClipLog* log;
  int64_t step;
};
struct ScaleArgs {
  size_t off, n;
};

void sumsq_cpu(void* b[], void* a) noexcept {  // buffers: x, partial
  auto* p = static_cast<SumsqArgs*>(a);
  vec_as<double>(b[1])[p->slot] = kernels::cpu::sumsq(vec_ptr(b[0]) + p->off, p->n);
}
// buffers: the partial-sums tensors (doubles, summed in buffer and element order), then out (3 floats)
void clip_factor_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<FactorArgs*>(a);
  const int nb = STARPU_TASK_GET_NBUFFERS(starpu_task_get_current());
  std::vector<double> all;
  for (int i = 0; i + 1 < nb; ++i) {
    const double* d = vec_as<double>(b[i]);
    all.insert(all.end(), d, d + vec_n(b[i]));
  }
  float* out = vec_ptr(b[nb - 1]);
  kernels::cpu::clip_factor(all.data(), all.size(), p->sq_div, p->clip, p->loss_scale, p->extra, out);
  if (p->log) p->log->add({p->step, out[1], out[0], out[2] != 0.0f});
}
void scale_by_cpu(void* b[], void* a) noexcept {  // buffers: x, factor
  auto* p = static_cast<ScaleArgs*>(a);
  kernels::cpu::scale_by(vec_ptr(b[0]) + p->off, p->n, vec_ptr(b[1]));
}
#ifdef ZF_USE_CUDA
void sumsq_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<SumsqArgs*>(a);
  cuda_check(kernels::cuda::sumsq(vec_ptr(b[0]) + p->off, p->n, vec_as<double>(b[1]) + p->slot, cuda_stream()));
}
// one partial-sums tensor only (GradClip puts a device-side clip's partial sums in one tensor)
void clip_factor_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<FactorArgs*>(a);
  const int nb = STARPU_TASK_GET_NBUFFERS(starpu_task_get_current());
  if (nb != 2) {
    record_task_failure("clip_factor on a CUDA worker takes one partial-sums tensor");
    return;
  }
  cuda_check(kernels::cuda::clip_factor(vec_as<double>(b[0]), vec_n(b[0]), p->sq_div, p->clip, p->loss_scale, p->extra,
                                        vec_ptr(b[1]), cuda_stream()));
}
void scale_by_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ScaleArgs*>(a);
  cuda_check(kernels::cuda::scale_by(vec_ptr(b[0]) + p->off, p->n, vec_ptr(b[1]), cuda_stream()));
}
#endif

starpu_codelet& sumsq_cl(bool whole_partial) {  // W when the partial tensor is this task's alone
  static starpu_perfmodel m[2]{};
  static starpu_codelet c[2] = {
      make_codelet({"zf_sumsq_into", sumsq_cpu, ZF_CUDA_FUNC(sumsq_cuda), 2, {STARPU_R, STARPU_RW}}, &m[0]),
      make_codelet({"zf_sumsq", sumsq_cpu, ZF_CUDA_FUNC(sumsq_cuda), 2, {STARPU_R, STARPU_W}}, &m[1]),
  };
  return c[whole_partial ? 1 : 0];
}
starpu_codelet& clip_factor_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_clip_factor", clip_factor_cpu, ZF_CUDA_FUNC(clip_factor_cuda), -1, {}}, &m);
  return c;
}
starpu_codelet& scale_by_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet({"zf_scale_by", scale_by_cpu, ZF_CUDA_FUNC(scale_by_cuda), 2, {STARPU_RW, STARPU_R}}, &m);
  return c;
}

}  // namespace

void ClipLog::add(const ClipRecord& r) noexcept {
  std::lock_guard<std::mutex> g(mu_);
  rec_.push_back(r);
}
std::vector<ClipRecord> ClipLog::records() const {
  std::lock_guard<std::mutex> g(mu_);
  return rec_;
}

void insert_sumsq(const SubmitOptions& opt, const Tensor& x, Slice xs, const Tensor& partial, size_t slot) {
  expect(fp32_values(x), opt, "sumsq: " + shape_str(x) + " is not fp32");
  expect(xs.offset + xs.n <= x.numel(), opt, "sumsq: slice outside " + shape_str(x));
  expect(partial.elem_size() == sizeof(double) && slot < partial.numel(), opt,
         "sumsq: slot " + std::to_string(slot) + " outside the doubles of " + shape_str(partial));
  TaskBuilder(sumsq_cl(partial.numel() == 1), opt).r(x).add(partial, partial.numel() == 1 ? STARPU_W : STARPU_RW)
      .args(SumsqArgs{xs.offset, xs.n, slot}).submit();
}

void insert_clip_factor(const SubmitOptions& opt, const std::vector<const Tensor*>& partials, double sq_div,
                        float clip, float loss_scale, float extra, const Tensor& out, ClipLog* log, int64_t step) {
  expect(!partials.empty() && out.numel() >= 3 && out.elem_size() == 4, opt, "clip_factor: needs partials and 3 floats");
  TaskBuilder tb(clip_factor_cl(), opt);
  for (const Tensor* p : partials) {
    expect(p->elem_size() == sizeof(double), opt, "clip_factor: " + shape_str(*p) + " does not hold doubles");
    tb.r(*p);
  }
  tb.w(out).args(FactorArgs{sq_div, clip, loss_scale, extra, log, step}).submit();
}

void insert_scale_by(const SubmitOptions& opt, const Tensor& x, Slice xs, const Tensor& factor) {
  expect(fp32_values(x), opt, "scale_by: " + shape_str(x) + " is not fp32");
  expect(xs.offset + xs.n <= x.numel(), opt, "scale_by: slice outside " + shape_str(x));
  TaskBuilder(scale_by_cl(), opt).rw(x).r(factor).args(ScaleArgs{xs.offset, xs.n}).submit();
}

}  // namespace zf
