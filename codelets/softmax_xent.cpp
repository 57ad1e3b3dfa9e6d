// Softmax cross-entropy forward (loss sum and correct count into a stats tensor) and backward, and
// both in one task (a training step's loss: kernels::cpu::softmax_xent_fwd_bwd);
// with ignore_negative, rows with a negative label (padded targets) are skipped. The sequence
// log-likelihoods of the generative classifier's evaluation (per-row sums of log-probabilities).
#include <starpu.h>

#include <algorithm>
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
  int ignore_negative;
};

bool labels_ok(const XentArgs* p, const int32_t* labels) {
  for (int i = 0; i < p->B; ++i)
    if ((labels[i] < 0 && !p->ignore_negative) || labels[i] >= p->C) {
      if (p->status) p->status->fail("softmax_xent: label " + std::to_string(labels[i]) +
                                     " out of range [0, " + std::to_string(p->C) + ")");
      return false;
    }
  return true;
}

void add_stats(const XentArgs* p, void* stats_buf, double loss, int64_t correct, int64_t counted) {
  if (!std::isfinite(loss) && p->status) p->status->fail("softmax_xent: the loss is not finite");
  double* stats = vec_as<double>(stats_buf);
  if (!p->accumulate) stats[0] = stats[1] = stats[2] = 0.0;
  stats[0] += loss;
  stats[1] += (double)correct;
  stats[2] += (double)counted;
}

void xent_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<XentArgs*>(a);
  const int32_t* labels = vec_as<int32_t>(b[1]);
  if (!labels_ok(p, labels)) return;
  int64_t correct = 0, counted = 0;
  double loss = kernels::cpu::softmax_xent_fwd(vec_ptr(b[0]), labels, vec_ptr(b[2]), p->B, p->C,
                                               &correct, &counted);
  add_stats(p, b[3], loss, correct, counted);
}

// the forward and the backward in one pass: buffers logits, labels, dlogits (W), stats (RW)
void xent_fwd_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<XentArgs*>(a);
  const int32_t* labels = vec_as<int32_t>(b[1]);
  if (!labels_ok(p, labels)) return;
  int64_t correct = 0, counted = 0;
  double loss = kernels::cpu::softmax_xent_fwd_bwd(vec_ptr(b[0]), labels, vec_ptr(b[2]), p->B, p->C, p->scale,
                                                   &correct, &counted);
  add_stats(p, b[3], loss, correct, counted);
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
                                             vec_as<double>(b[3]), p->accumulate != 0, cuda_stream(),
                                             p->ignore_negative != 0));
}
void xent_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<XentArgs*>(a);
  cuda_check(kernels::cuda::softmax_xent_bwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->C,
                                             p->scale, cuda_stream()));
}
// the two kernels above, the probabilities written into dlogits and turned into the gradient in
// place (xent_bwd_k reads each element before it writes it)
void xent_fwd_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<XentArgs*>(a);
  cuda_check(kernels::cuda::softmax_xent_fwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->C,
                                             vec_as<double>(b[3]), p->accumulate != 0, cuda_stream(),
                                             p->ignore_negative != 0));
  cuda_check(kernels::cuda::softmax_xent_bwd(vec_ptr(b[2]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->C,
                                             p->scale, cuda_stream()));
}
#endif

struct SeqArgs {
  int B, T, V;
  int64_t offset;
};
void seq_logprob_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<SeqArgs*>(a);
  kernels::cpu::sequence_logprob(vec_ptr(b[0]), vec_as<int32_t>(b[1]), p->B, p->T, p->V,
                                 vec_as<double>(b[2]) + p->offset);
}
#ifdef ZF_USE_CUDA
void seq_logprob_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<SeqArgs*>(a);
  cuda_check(kernels::cuda::sequence_logprob(vec_ptr(b[0]), vec_as<int32_t>(b[1]), p->B, p->T, p->V,
                                             vec_as<double>(b[2]) + p->offset, cuda_stream()));
}
#endif

starpu_codelet& seq_logprob_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_sequence_logprob", seq_logprob_cpu, ZF_CUDA_FUNC(seq_logprob_cuda),
                                          3, {STARPU_R, STARPU_R, STARPU_RW}},
                                         &m);
  return c;
}

struct GenArgs {
  int K, B, T, V;
  float lm_weight;
  StepStatus* status;
};
void gen_loss_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<GenArgs*>(a);
  const int32_t* labels = vec_as<int32_t>(b[2]);
  for (int i = 0; i < p->B; ++i)
    if (labels[i] < 0 || labels[i] >= p->K) {
      if (p->status) p->status->fail("gen_class_loss: label " + std::to_string(labels[i]) + " out of range");
      return;
    }
  int64_t correct = 0;
  const double loss = kernels::cpu::gen_class_loss(vec_ptr(b[0]), vec_as<int32_t>(b[1]), labels, vec_as<double>(b[3]),
                                                   p->K, p->B, p->T, p->V, p->lm_weight, vec_ptr(b[4]), &correct);
  if (!std::isfinite(loss) && p->status) p->status->fail("gen_class_loss: the loss is not finite");
  double* stats = vec_as<double>(b[5]);
  stats[0] = loss;
  stats[1] = (double)correct;
  stats[2] = (double)p->B;
}
#ifdef ZF_USE_CUDA
void gen_loss_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<GenArgs*>(a);
  cuda_check(kernels::cuda::gen_class_loss(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_as<int32_t>(b[2]),
                                           vec_as<double>(b[3]), p->K, p->B, p->T, p->V, p->lm_weight, vec_ptr(b[4]),
                                           vec_as<double>(b[5]), cuda_stream()));
}
#endif
starpu_codelet& gen_loss_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_gen_class_loss", gen_loss_cpu, ZF_CUDA_FUNC(gen_loss_cuda), 6,
                                          {STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_W, STARPU_RW}},
                                         &m);
  return c;
}

starpu_codelet& xent_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_softmax_xent_fwd", xent_fwd_cpu, ZF_CUDA_FUNC(xent_fwd_cuda),
                                          4, {STARPU_R, STARPU_R, STARPU_W, STARPU_RW}},
                                         &m);
  return c;
}
starpu_codelet& xent_fwd_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_softmax_xent_fwd_bwd", xent_fwd_bwd_cpu, ZF_CUDA_FUNC(xent_fwd_bwd_cuda),
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

// The LM head and its loss in vocabulary chunks (kernels::cpu::lm_head_xent): buffers x, w,
// labels, stats (RW) for the forward; x, w, labels, dx (W), dw (W), stats (RW) with the backward.
// x, w and dw are read and written as stored in bf16. CPU devices only (no CUDA implementation:
// the models use it where the device has no CUDA worker).
struct HeadArgs {
  XentArgs xent;  // B: the rows, C: the vocabulary
  int C, Vc;
  bool bf16;  // bf16 products
};
kernels::cpu::MatOperand head_operand(void* buf) {
  return {reinterpret_cast<const void*>(STARPU_VECTOR_GET_PTR(buf)), STARPU_VECTOR_GET_ELEMSIZE(buf) == 2};
}
void head_xent(void* b[], void* a, bool grad) {
  auto* p = static_cast<HeadArgs*>(a);
  const int32_t* labels = vec_as<int32_t>(b[2]);
  if (!labels_ok(&p->xent, labels)) return;
  int64_t correct = 0, counted = 0;
  const double loss = kernels::cpu::lm_head_xent(
      head_operand(b[0]), head_operand(b[1]), labels, grad ? vec_ptr(b[3]) : nullptr,
      grad ? ew_of(b[4]) : kernels::cpu::Ew{nullptr, false}, p->xent.B, p->C, p->xent.C, p->Vc, p->xent.scale,
      p->bf16, &correct, &counted);
  add_stats(&p->xent, b[grad ? 5 : 3], loss, correct, counted);
}
void head_xent_fwd_cpu(void* b[], void* a) noexcept { head_xent(b, a, false); }
void head_xent_fwd_bwd_cpu(void* b[], void* a) noexcept { head_xent(b, a, true); }
double head_xent_flops(const void* a, int products) {
  auto* p = static_cast<const HeadArgs*>(a);
  return 2.0 * products * p->xent.B * (double)p->xent.C * p->C;
}
double head_fwd_flops(const void* a) { return head_xent_flops(a, 1); }
double head_fwd_bwd_flops(const void* a) { return head_xent_flops(a, 4); }  // the logits twice, dw, dx
starpu_codelet& head_xent_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is({"zf_lm_head_xent_fwd", head_xent_fwd_cpu, nullptr, 4,
                      {STARPU_R, STARPU_R, STARPU_R, STARPU_RW}, head_fwd_flops},
                     0b11),
      &m);
  return c;
}
starpu_codelet& head_xent_fwd_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is(writes_whole({"zf_lm_head_xent_fwd_bwd", head_xent_fwd_bwd_cpu, nullptr, 6,
                                   {STARPU_R, STARPU_R, STARPU_R, STARPU_W, STARPU_W, STARPU_RW}, head_fwd_bwd_flops},
                                  0b11000),
                     0b10011),
      &m);
  return c;
}

}  // namespace

void insert_softmax_xent_fwd(const SubmitOptions& opt, const Tensor& logits, const Tensor& labels,
                             const Tensor& probs, const Tensor& stats, bool accumulate,
                             StepStatus* status, bool ignore_negative) {
  expect(logits.shape().size() == 2, opt, "logits must be (B, C): " + shape_str(logits));
  int B = (int)logits.dim(0), C = (int)logits.dim(1);
  expect(labels.numel() == (size_t)B, opt, shape_str(labels) + " must hold B labels");
  expect(probs.numel() == logits.numel(), opt, shape_str(probs) + " vs " + shape_str(logits));
  expect(stats.bytes() >= 3 * sizeof(double), opt, "stats must hold 3 doubles");
  TaskBuilder(xent_fwd_cl(), opt)
      .r(logits).r(labels).w(probs).rw(stats)
      .args(XentArgs{B, C, accumulate ? 1 : 0, 0.0f, status, ignore_negative ? 1 : 0})
      .submit();
}

void insert_softmax_xent_fwd_bwd(const SubmitOptions& opt, const Tensor& logits, const Tensor& labels,
                                 const Tensor& dlogits, const Tensor& stats, float scale, bool accumulate,
                                 StepStatus* status, bool ignore_negative) {
  expect(logits.shape().size() == 2, opt, "logits must be (B, C): " + shape_str(logits));
  int B = (int)logits.dim(0), C = (int)logits.dim(1);
  expect(labels.numel() == (size_t)B, opt, shape_str(labels) + " must hold B labels");
  expect(dlogits.numel() == logits.numel(), opt, shape_str(dlogits) + " vs " + shape_str(logits));
  expect(stats.bytes() >= 3 * sizeof(double), opt, "stats must hold 3 doubles");
  TaskBuilder(xent_fwd_bwd_cl(), opt)
      .r(logits).r(labels).w(dlogits).rw(stats)
      .args(XentArgs{B, C, accumulate ? 1 : 0, scale, status, ignore_negative ? 1 : 0})
      .submit();
}

void insert_softmax_xent_bwd(const SubmitOptions& opt, const Tensor& probs, const Tensor& labels,
                             const Tensor& dlogits, float scale) {
  expect(probs.shape().size() == 2, opt, "probs must be (B, C): " + shape_str(probs));
  int B = (int)probs.dim(0), C = (int)probs.dim(1);
  expect(labels.numel() == (size_t)B && dlogits.numel() == probs.numel(), opt, "shape mismatch");
  TaskBuilder(xent_bwd_cl(), opt)
      .r(probs).r(labels).w(dlogits)
      .args(XentArgs{B, C, 0, scale, nullptr, 0})
      .submit();
}

void insert_sequence_logprob(const SubmitOptions& opt, const Tensor& logits, const Tensor& targets, const Tensor& out,
                             int64_t offset, int B) {
  expect(logits.shape().size() == 2 && B > 0 && logits.dim(0) % B == 0, opt,
         "logits must be (B*T, V): " + shape_str(logits));
  const int T = (int)(logits.dim(0) / B), V = (int)logits.dim(1);
  expect(targets.numel() == (size_t)logits.dim(0), opt, shape_str(targets) + " must hold B*T targets");
  expect(offset >= 0 && (size_t)(offset + B) * sizeof(double) <= out.bytes(), opt,
         "out must hold doubles [" + std::to_string(offset) + ", " + std::to_string(offset + B) + ")");
  TaskBuilder(seq_logprob_cl(), opt).r(logits).r(targets).rw(out).args(SeqArgs{B, T, V, offset}).submit();
}

void insert_gen_class_loss(const SubmitOptions& opt, const Tensor& logits, const Tensor& targets, const Tensor& labels,
                           const Tensor& log_prior, const Tensor& dlogits, const Tensor& stats, int K, float lm_weight,
                           StepStatus* status) {
  expect(logits.shape().size() == 2 && K > 0, opt, "logits must be (K*B*T, V): " + shape_str(logits));
  const int64_t KB = (int64_t)labels.numel();
  expect(KB % K == 0 && KB > 0 && logits.dim(0) % KB == 0, opt,
         shape_str(logits) + " must hold K*B sequences of T rows, labels " + shape_str(labels));
  const int B = (int)(KB / K), T = (int)(logits.dim(0) / KB), V = (int)logits.dim(1);
  expect(targets.numel() == (size_t)logits.dim(0) && dlogits.numel() == logits.numel(), opt,
         "targets " + shape_str(targets) + ", dlogits " + shape_str(dlogits) + " vs " + shape_str(logits));
  expect(log_prior.bytes() == (size_t)K * sizeof(double), opt, "log_prior must hold K doubles");
  expect(stats.bytes() >= 3 * sizeof(double), opt, "stats must hold 3 doubles");
  TaskBuilder(gen_loss_cl(), opt)
      .r(logits).r(targets).r(labels).r(log_prior).w(dlogits).rw(stats)
      .args(GenArgs{K, B, T, V, lm_weight, status})
      .submit();
}


int lm_head_chunk_cols(int64_t N, int64_t V, int64_t most) {
  if (most <= 0 || N * V <= most) return 0;
  const int64_t cols = std::max<int64_t>(1, most / N), chunks = (V + cols - 1) / cols;
  return (int)((V + chunks - 1) / chunks);
}

void insert_lm_head_xent(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& labels,
                         const Tensor* dx, const Tensor* dw, const Tensor& stats, int chunk, float scale,
                         bool accumulate, StepStatus* status, bool ignore_negative) {
  expect(x.shape().size() == 2 && w.shape().size() == 2 && x.dim(1) == w.dim(1), opt,
         "lm_head_xent: x (N, C) and w (V, C): " + shape_str(x) + ", " + shape_str(w));
  expect(!opt.rt || !opt.rt->device_is_cuda(), opt, "lm_head_xent runs on CPU devices only");
  const int N = (int)x.dim(0), C = (int)x.dim(1), V = (int)w.dim(0);
  expect(labels.numel() == (size_t)N, opt, shape_str(labels) + " must hold N labels");
  expect(stats.bytes() >= 3 * sizeof(double), opt, "stats must hold 3 doubles");
  expect(chunk >= 1, opt, "lm_head_xent: a chunk of at least one column");
  expect((dx == nullptr) == (dw == nullptr), opt, "lm_head_xent: dx and dw together");
  const HeadArgs a{XentArgs{N, V, accumulate ? 1 : 0, scale, status, ignore_negative ? 1 : 0}, C, chunk,
                   opt.rt && opt.rt->matmul_bf16()};
  if (!dx) {
    TaskBuilder(head_xent_fwd_cl(), opt).r(x).r(w).r(labels).rw(stats).args(a).submit();
    return;
  }
  expect(dx->numel() == x.numel() && !dx->stored_half() && dx->elem_size() == 4, opt,
         "lm_head_xent: dx must be x's shape in fp32: " + shape_str(*dx));
  expect(dw->numel() == w.numel(), opt, "lm_head_xent: dw must be w's shape: " + shape_str(*dw));
  TaskBuilder(head_xent_fwd_bwd_cl(), opt).r(x).r(w).r(labels).w(*dx).w(*dw).rw(stats).args(a).submit();
}

}  // namespace zf
