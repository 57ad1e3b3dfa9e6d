// Causal multi-head self-attention forward (saving each row's log-sum-exp, no (T, T) matrix) and
// backward (recomputing the probabilities block by block: kernels/cpu/attention.cpp): the GPT's on a fused qkv, and grouped-query attention (Llama,
// Qwen2: docs/llama.md) on q, k, v held apart with n_kv_head <= n_head KV heads. Under precision
// bf16 (Runtime::matmul_bf16) the products multiply bf16 operands, as the matmul codelets': the
// GPT's CPU kernels where the CPU has native bf16 (the CPU's grouped-query attention stays fp32),
// both CUDA kernels on the tensor cores (kernels/cuda/attention.cu). The GPT's CPU kernels read a
// bf16-stored qkv and write a bf16-stored out as they are (kernels::cpu::attention_*_mixed), the
// grouped-query ones their q, k, v, out and gradients (kernels::cpu::gqa_attention_*_mixed).
#include <starpu.h>

#include <algorithm>
#include <string>
#include <vector>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct AttentionArgs {
  int B, T, C, NH;
  StepStatus* status;
  bool bf16;  // bf16 operands
};

void attention_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<AttentionArgs*>(a);
  kernels::cpu::attention_fwd_mixed(ew_of(b[0]), ew_of(b[1]), vec_ptr(b[2]), p->B, p->T, p->C, p->NH, p->bf16);
}
void attention_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<AttentionArgs*>(a);
  kernels::cpu::attention_bwd_mixed(ew_of(b[0]), ew_of(b[1]), vec_ptr(b[2]), ew_of(b[3]), p->B, p->T, p->C, p->NH,
                                    p->bf16);
}
#ifdef ZF_USE_CUDA
void attention_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<AttentionArgs*>(a);
  cuda_check(kernels::cuda::attention_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), p->B, p->T, p->C, p->NH,
                                          cublas_handle(), cuda_stream(), p->bf16));
}
void attention_bwd_cuda(void* b[], void* a) noexcept {  // row blocks' scratch from the stream's pool
  auto* p = static_cast<AttentionArgs*>(a);
  cuda_check(kernels::cuda::attention_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]), p->B, p->T,
                                          p->C, p->NH, cublas_handle(), cuda_stream(), p->bf16));
}
#endif

struct GqaArgs {
  int B, T, H, Hkv, hs;
  StepStatus* status;
  bool bf16;  // bf16 operands (CUDA; the CPU kernel multiplies fp32)
};

void gqa_attention_fwd_cpu(void* b[], void* a) noexcept {  // q, k, v, out, lse
  auto* p = static_cast<GqaArgs*>(a);
  kernels::cpu::gqa_attention_fwd_mixed(ew_of(b[0]), ew_of(b[1]), ew_of(b[2]), ew_of(b[3]), vec_ptr(b[4]), p->B,
                                        p->T, p->H, p->Hkv, p->hs);
}
void gqa_attention_bwd_cpu(void* b[], void* a) noexcept {  // dout, q, k, v, lse, dq, dk, dv
  auto* p = static_cast<GqaArgs*>(a);
  kernels::cpu::gqa_attention_bwd_mixed(ew_of(b[0]), ew_of(b[1]), ew_of(b[2]), ew_of(b[3]), vec_ptr(b[4]),
                                        ew_of(b[5]), ew_of(b[6]), ew_of(b[7]), p->B, p->T, p->H, p->Hkv, p->hs);
}
#ifdef ZF_USE_CUDA
void gqa_attention_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<GqaArgs*>(a);
  cuda_check(kernels::cuda::gqa_attention_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]),
                                              vec_ptr(b[4]), p->B, p->T, p->H, p->Hkv, p->hs, cublas_handle(),
                                              cuda_stream(), p->bf16));
}
void gqa_attention_bwd_cuda(void* b[], void* a) noexcept {  // row blocks' scratch from the stream's pool
  auto* p = static_cast<GqaArgs*>(a);
  cuda_check(kernels::cuda::gqa_attention_bwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]),
                                              vec_ptr(b[4]), vec_ptr(b[5]), vec_ptr(b[6]), vec_ptr(b[7]), p->B, p->T,
                                              p->H, p->Hkv, p->hs, cublas_handle(), cuda_stream(), p->bf16));
}
#endif

// The simulation's roofline (runtime/simulation.hpp): two products of 2 T T hs FLOPs per head and
// sequence forward (S = q k^T, out = P v), five backward (S again, dP, dq, dk, dv); the softmax is
// memory-bound. (The kernels compute the causal half and a little more; the rates are fitted to
// these counts.)
double attention_fwd_flops(const void* a) {
  auto* p = static_cast<const AttentionArgs*>(a);
  return 4.0 * p->B * p->T * p->T * p->C;
}
double attention_bwd_flops(const void* a) { return 2.5 * attention_fwd_flops(a); }
double gqa_fwd_flops(const void* a) {
  auto* p = static_cast<const GqaArgs*>(a);
  return 4.0 * p->B * p->T * p->T * p->H * p->hs;
}
double gqa_bwd_flops(const void* a) { return 2.5 * gqa_fwd_flops(a); }
// The elements a CUDA worker rounds to bf16 before bf16 products (0: fp32), for the roofline:
// forward q, k, v and P; backward q, k, v, dout, P and dS
double attention_fwd_bf16_operands(const void* a) {
  auto* p = static_cast<const AttentionArgs*>(a);
  return p->bf16 ? 3.0 * p->B * p->T * p->C + (double)p->B * p->NH * p->T * p->T : -1.0;
}
double attention_bwd_bf16_operands(const void* a) {
  auto* p = static_cast<const AttentionArgs*>(a);
  return p->bf16 ? 4.0 * p->B * p->T * p->C + 2.0 * p->B * p->NH * p->T * p->T : -1.0;
}
double gqa_fwd_bf16_operands(const void* a) {
  auto* p = static_cast<const GqaArgs*>(a);
  return p->bf16 ? (double)p->B * p->T * (p->H + 2.0 * p->Hkv) * p->hs + (double)p->B * p->H * p->T * p->T : -1.0;
}
double gqa_bwd_bf16_operands(const void* a) {
  auto* p = static_cast<const GqaArgs*>(a);
  return p->bf16 ? (double)p->B * p->T * (2.0 * p->H + 2.0 * p->Hkv) * p->hs + 2.0 * p->B * p->H * p->T * p->T
                 : -1.0;
}

starpu_codelet& attention_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is(writes_whole({"zf_attention_fwd", attention_fwd_cpu, ZF_CUDA_FUNC(attention_fwd_cuda), 3,
                                   {STARPU_R, STARPU_W, STARPU_W}, attention_fwd_flops, Collective::None, 0, nullptr,
                                   nullptr, attention_fwd_bf16_operands},
                                  0b110),  // out and lse
                     0b011),               // qkv and out as stored (CPU)
      &m);
  return c;
}
starpu_codelet& attention_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is({"zf_attention_bwd", attention_bwd_cpu, ZF_CUDA_FUNC(attention_bwd_cuda), 4,
                      {STARPU_R, STARPU_R, STARPU_R, STARPU_W}, attention_bwd_flops, Collective::None, 0, nullptr,
                      nullptr, attention_bwd_bf16_operands},
                     0b1011),  // dout, qkv and dqkv as stored (CPU)
      &m);
  return c;
}

// lse (B, NH, T), qkv (B*T, 3C), out (B*T, C)
AttentionArgs dims(const SubmitOptions& opt, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                   StepStatus* status) {
  expect(lse.shape().size() == 3, opt, "lse must be (B, NH, T): " + shape_str(lse));
  expect(qkv.shape().size() == 2 && qkv.dim(1) % 3 == 0, opt, "qkv must be (B*T, 3C): " + shape_str(qkv));
  AttentionArgs a{(int)lse.dim(0), (int)lse.dim(2), (int)(qkv.dim(1) / 3), (int)lse.dim(1), status,
                  opt.rt && opt.rt->matmul_bf16()};
  expect(a.C % a.NH == 0, opt, "C = " + std::to_string(a.C) + " is not a multiple of the heads " + std::to_string(a.NH));
  expect(qkv.dim(0) == (int64_t)a.B * a.T, opt, shape_str(qkv) + " does not match " + shape_str(lse));
  expect(out.numel() == (size_t)a.B * a.T * a.C, opt, shape_str(out) + " must be (B*T, C)");
  return a;
}

starpu_codelet& gqa_attention_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet(cpu_bf16_as_is(writes_whole({"zf_gqa_attention_fwd", gqa_attention_fwd_cpu,
                                                ZF_CUDA_FUNC(gqa_attention_fwd_cuda), 5,
                                                {STARPU_R, STARPU_R, STARPU_R, STARPU_W, STARPU_W}, gqa_fwd_flops,
                                                Collective::None, 0, nullptr, nullptr, gqa_fwd_bf16_operands},
                                               0b11000),  // out and lse
                                  0b01111),               // q, k, v and atty as stored (CPU)
                   &m);
  return c;
}
starpu_codelet& gqa_attention_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet(cpu_bf16_as_is({"zf_gqa_attention_bwd", gqa_attention_bwd_cpu, ZF_CUDA_FUNC(gqa_attention_bwd_cuda),
                                   8, {STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_W, STARPU_W, STARPU_W},
                                   gqa_bwd_flops, Collective::None, 0, nullptr, nullptr, gqa_bwd_bf16_operands},
                                  0b11101111),  // all but lse as stored (CPU)
                   &m);
  return c;
}

// lse (B, H, T), q and out (B*T, H*hs), k and v (B*T, Hkv*hs)
GqaArgs gqa_dims(const SubmitOptions& opt, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, int n_kv_head, StepStatus* status) {
  expect(lse.shape().size() == 3, opt, "lse must be (B, H, T): " + shape_str(lse));
  const int B = (int)lse.dim(0), H = (int)lse.dim(1), T = (int)lse.dim(2);
  expect(n_kv_head > 0 && H % n_kv_head == 0, opt,
         "the " + std::to_string(H) + " query heads are not a multiple of the " + std::to_string(n_kv_head) +
             " KV heads");
  expect(q.shape().size() == 2 && q.dim(0) == (int64_t)B * T && q.dim(1) % H == 0, opt,
         shape_str(q) + " must be (B*T, H*hs) for " + shape_str(lse));
  const int hs = (int)(q.dim(1) / H);
  const std::vector<int64_t> kv{(int64_t)B * T, (int64_t)n_kv_head * hs};
  expect(k.shape() == kv && v.shape() == kv, opt,
         shape_str(k) + " and " + shape_str(v) + " must be (" + std::to_string(kv[0]) + "," + std::to_string(kv[1]) +
             ") = (B*T, n_kv_head*hs)");
  expect(out.shape() == q.shape(), opt, shape_str(out) + " must be shaped as " + shape_str(q));
  return {B, T, H, n_kv_head, hs, status, opt.rt && opt.rt->matmul_bf16()};
}

}  // namespace

size_t attention_workspace_bytes(int B, int T, int H, int Hkv, int hs, bool gpt, bool bf16, bool cuda) {
  if (!cuda) return kernels::cpu::attention_workspace_bytes(T, H, Hkv, hs, gpt, gpt && bf16);
  // kernels/cuda/attention.cu: the backward's scores and dS, 8 bytes each (12 under bf16), for
  // row blocks of at most 64 MiB (at least 64 rows); bf16's copies of q, k, v, dout and dq
  // (a block of R rows of every head's T columns: R W bytes, the whole batch's at most)
  const double W = (bf16 ? 12.0 : 8.0) * H * T, cap = 64.0 * 1024 * 1024;
  const double copies = bf16 ? 2.0 * B * T * (2.0 * H + 2.0 * Hkv) * hs : 0.0;
  return (size_t)(std::min((double)B * T * W, std::max(cap, 64 * W)) + copies);
}

void insert_attention_fwd(const SubmitOptions& opt, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          StepStatus* status) {
  TaskBuilder(attention_fwd_cl(), opt).r(qkv).w(out).w(lse).args(dims(opt, qkv, out, lse, status)).submit();
}

void insert_attention_bwd(const SubmitOptions& opt, const Tensor& dout, const Tensor& qkv, const Tensor& lse,
                          const Tensor& dqkv, StepStatus* status) {
  AttentionArgs a = dims(opt, qkv, dout, lse, status);
  expect(dqkv.numel() == qkv.numel(), opt, shape_str(dqkv) + " vs " + shape_str(qkv));
  TaskBuilder(attention_bwd_cl(), opt).r(dout).r(qkv).r(lse).w(dqkv).args(a).submit();
}

void insert_gqa_attention_fwd(const SubmitOptions& opt, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, int n_kv_head, StepStatus* status) {
  TaskBuilder(gqa_attention_fwd_cl(), opt)
      .r(q).r(k).r(v).w(out).w(lse)
      .args(gqa_dims(opt, q, k, v, out, lse, n_kv_head, status))
      .submit();
}

void insert_gqa_attention_bwd(const SubmitOptions& opt, const Tensor& dout, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, int n_kv_head, StepStatus* status) {
  const GqaArgs a = gqa_dims(opt, q, k, v, dout, lse, n_kv_head, status);
  expect(dq.shape() == q.shape() && dk.shape() == k.shape() && dv.shape() == v.shape(), opt,
         shape_str(dq) + ", " + shape_str(dk) + ", " + shape_str(dv) + " must be shaped as q, k, v");
  TaskBuilder(gqa_attention_bwd_cl(), opt).r(dout).r(q).r(k).r(v).r(lse).w(dq).w(dk).w(dv).args(a).submit();
}

}  // namespace zf
