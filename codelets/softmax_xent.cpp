// Softmax cross-entropy forward (loss sum and correct count into a stats tensor) and backward.
#include <starpu.h>

#include <cmath>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct XentArgs {
  int B, C;
  int accumulate;
  float scale;
  StepStatus* status;
};

void xent_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<XentArgs*>(a);
  const int32_t* labels = vec_as<int32_t>(b[1]);
  for (int i = 0; i < p->B; ++i)
    if (labels[i] < 0 || labels[i] >= p->C) {
      if (p->status) p->status->fail("softmax_xent: label " + std::to_string(labels[i]) +
                                     " out of range [0, " + std::to_string(p->C) + ")");
      return;
    }
  int64_t correct = 0;
  double loss = kernels::cpu::softmax_xent_fwd(vec_ptr(b[0]), labels, vec_ptr(b[2]), p->B, p->C,
                                               &correct);
  if (!std::isfinite(loss) && p->status) p->status->fail("softmax_xent: the loss is not finite");
  double* stats = vec_as<double>(b[3]);
  if (!p->accumulate) stats[0] = stats[1] = stats[2] = 0.0;
  stats[0] += loss;
  stats[1] += (double)correct;
  stats[2] += (double)p->B;
}

void xent_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<XentArgs*>(a);
  kernels::cpu::softmax_xent_bwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->C,
                                 p->scale);
}
#ifdef ZF_USE_CUDA
// Labels are not checked here (that would need the host to wait): a bad label makes the loss NaN.
void xent_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<XentArgs*>(a);
  cuda_check(kernels::cuda::softmax_xent_fwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->C,
                                             vec_as<double>(b[3]), p->accumulate != 0, cuda_stream()));
}
void xent_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<XentArgs*>(a);
  cuda_check(kernels::cuda::softmax_xent_bwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->C,
                                             p->scale, cuda_stream()));
}
#endif

starpu_codelet& xent_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_softmax_xent_fwd", xent_fwd_cpu, ZF_CUDA_FUNC(xent_fwd_cuda),
                                          4, {STARPU_R, STARPU_R, STARPU_W, STARPU_RW}},
                                         &m);
  return c;
}
starpu_codelet& xent_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_softmax_xent_bwd", xent_bwd_cpu, ZF_CUDA_FUNC(xent_bwd_cuda),
                                          3, {STARPU_R, STARPU_R, STARPU_W}},
                                         &m);
  return c;
}

}  // namespace

void insert_softmax_xent_fwd(const SubmitOptions& opt, const Tensor& logits, const Tensor& labels,
                             const Tensor& probs, const Tensor& stats, bool accumulate,
                             StepStatus* status) {
  expect(logits.shape().size() == 2, opt, "logits must be (B, C): " + shape_str(logits));
  int B = (int)logits.dim(0), C = (int)logits.dim(1);
  expect(labels.numel() == (size_t)B, opt, shape_str(labels) + " must hold B labels");
  expect(probs.numel() == logits.numel(), opt, shape_str(probs) + " vs " + shape_str(logits));
  expect(stats.bytes() >= 3 * sizeof(double), opt, "stats must hold 3 doubles");
  TaskBuilder(xent_fwd_cl(), opt)
      .r(logits).r(labels).w(probs).rw(stats)
      .args(XentArgs{B, C, accumulate ? 1 : 0, 0.0f, status})
      .submit();
}

void insert_softmax_xent_bwd(const SubmitOptions& opt, const Tensor& probs, const Tensor& labels,
                             const Tensor& dlogits, float scale) {
  expect(probs.shape().size() == 2, opt, "probs must be (B, C): " + shape_str(probs));
  int B = (int)probs.dim(0), C = (int)probs.dim(1);
  expect(labels.numel() == (size_t)B && dlogits.numel() == probs.numel(), opt, "shape mismatch");
  TaskBuilder(xent_bwd_cl(), opt)
      .r(probs).r(labels).w(dlogits)
      .args(XentArgs{B, C, 0, scale, nullptr})
      .submit();
}

}  // namespace zf
