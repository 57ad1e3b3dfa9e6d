// Token + position embedding forward and its scatter-add backward (kernels/cpu/embedding.cpp);
// the token embedding alone (Llama, Qwen2: no learned positions), the same kernels without wpe.
#include <starpu.h>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct EmbeddingArgs {
  int B, T, C, V, T_ctx;
};

void embedding_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<EmbeddingArgs*>(a);
  kernels::cpu::embedding_fwd(vec_as<int32_t>(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]), p->B, p->T,
                              p->C);
}
void embedding_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<EmbeddingArgs*>(a);
  float* dwpe = vec_ptr(b[3]);
  kernels::cpu::embedding_bwd(vec_as<int32_t>(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), dwpe, p->B, p->T, p->C, p->V);
  kernels::cpu::zero(dwpe + (size_t)p->T * p->C, (size_t)(p->T_ctx - p->T) * p->C);
}
#ifdef ZF_USE_CUDA
void embedding_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<EmbeddingArgs*>(a);
  cuda_check(kernels::cuda::embedding_fwd(vec_as<int32_t>(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), vec_ptr(b[3]), p->B,
                                          p->T, p->C, cuda_stream()));
}
void embedding_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<EmbeddingArgs*>(a);
  float* dwpe = vec_ptr(b[3]);
  cuda_check(kernels::cuda::embedding_bwd(vec_as<int32_t>(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), dwpe, p->B, p->T,
                                          p->C, p->V, cuda_stream()));
  cuda_check(kernels::cuda::zero(dwpe + (size_t)p->T * p->C, (size_t)(p->T_ctx - p->T) * p->C, cuda_stream()));
}
#endif

// (the table, x and their gradients as stored in bf16, CodeletDef::cpu_bf16_as_is: a (V, C) table
// is not widened whole for the B T rows it gives or takes)
void token_embedding_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<EmbeddingArgs*>(a);
  kernels::cpu::token_embedding_fwd_mixed(vec_as<int32_t>(b[0]), ew_of(b[1]), ew_of(b[2]), p->B, p->T, p->C);
}
void token_embedding_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<EmbeddingArgs*>(a);
  kernels::cpu::token_embedding_bwd_mixed(vec_as<int32_t>(b[0]), ew_of(b[1]), ew_of(b[2]), p->B, p->T, p->C, p->V);
}
#ifdef ZF_USE_CUDA
void token_embedding_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<EmbeddingArgs*>(a);
  cuda_check(kernels::cuda::embedding_fwd(vec_as<int32_t>(b[0]), vec_ptr(b[1]), nullptr, vec_ptr(b[2]), p->B, p->T,
                                          p->C, cuda_stream()));
}
void token_embedding_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<EmbeddingArgs*>(a);
  cuda_check(kernels::cuda::embedding_bwd(vec_as<int32_t>(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), nullptr, p->B, p->T,
                                          p->C, p->V, cuda_stream()));
}
#endif
starpu_codelet& token_embedding_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(cpu_bf16_as_is(writes_whole({"zf_token_embedding_fwd", token_embedding_fwd_cpu,
                                          ZF_CUDA_FUNC(token_embedding_fwd_cuda), 3, {STARPU_R, STARPU_R, STARPU_W}},
                                                      0b100), 0b110),
                                         &m);
  return c;
}
starpu_codelet& token_embedding_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(cpu_bf16_as_is(writes_whole({"zf_token_embedding_bwd", token_embedding_bwd_cpu,
                                          ZF_CUDA_FUNC(token_embedding_bwd_cuda), 3, {STARPU_R, STARPU_R, STARPU_W}},
                                                                      0b100), 0b110),
                                         &m);
  return c;
}
// tokens (B, T), wte (V, C), x (B*T, C)
EmbeddingArgs token_dims(const SubmitOptions& opt, const Tensor& tokens, const Tensor& wte, const Tensor& x) {
  expect(tokens.shape().size() == 2 && wte.shape().size() == 2, opt,
         "tokens (B, T) and wte (V, C): " + shape_str(tokens) + " " + shape_str(wte));
  EmbeddingArgs a{(int)tokens.dim(0), (int)tokens.dim(1), (int)wte.dim(1), (int)wte.dim(0), 0};
  expect(x.numel() == (size_t)a.B * a.T * a.C, opt, shape_str(x) + " must hold B*T*C elements");
  return a;
}

struct ClassEmbArgs {
  int B, T, C, K;
};
void class_emb_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ClassEmbArgs*>(a);
  kernels::cpu::class_embedding_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_as<int32_t>(b[2]), p->B, p->T, p->C);
}
void class_emb_bwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ClassEmbArgs*>(a);
  kernels::cpu::class_embedding_bwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T, p->C, p->K);
}
#ifdef ZF_USE_CUDA
void class_emb_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ClassEmbArgs*>(a);
  cuda_check(kernels::cuda::class_embedding_fwd(vec_ptr(b[0]), vec_ptr(b[1]), vec_as<int32_t>(b[2]), p->B, p->T,
                                                p->C, cuda_stream()));
}
void class_emb_bwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ClassEmbArgs*>(a);
  cuda_check(kernels::cuda::class_embedding_bwd(vec_ptr(b[0]), vec_as<int32_t>(b[1]), vec_ptr(b[2]), p->B, p->T,
                                                p->C, p->K, cuda_stream()));
}
#endif
starpu_codelet& class_emb_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_class_embedding_fwd", class_emb_fwd_cpu, ZF_CUDA_FUNC(class_emb_fwd_cuda),
                                          3, {STARPU_RW, STARPU_R, STARPU_R}},
                                         &m);
  return c;
}
starpu_codelet& class_emb_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_class_embedding_bwd", class_emb_bwd_cpu, ZF_CUDA_FUNC(class_emb_bwd_cuda),
                                          3, {STARPU_R, STARPU_R, STARPU_W}},
                                         &m);
  return c;
}
ClassEmbArgs class_dims(const SubmitOptions& opt, const Tensor& x, const Tensor& table, const Tensor& ids) {
  expect(table.shape().size() == 2 && x.shape().size() == 2 && x.dim(1) == table.dim(1), opt,
         "x (B*T, C) and table (K, C): " + shape_str(x) + " " + shape_str(table));
  const int B = (int)ids.numel();
  expect(B > 0 && x.dim(0) % B == 0, opt, shape_str(x) + " must hold B*T rows for B = " + std::to_string(B));
  return {B, (int)(x.dim(0) / B), (int)table.dim(1), (int)table.dim(0)};
}

starpu_codelet& embedding_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(writes_whole({"zf_embedding_fwd", embedding_fwd_cpu,
                                                       ZF_CUDA_FUNC(embedding_fwd_cuda), 4,
                                                       {STARPU_R, STARPU_R, STARPU_R, STARPU_W}},
                                                      0b1000),
                                         &m);
  return c;
}
starpu_codelet& embedding_bwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_embedding_bwd", embedding_bwd_cpu, ZF_CUDA_FUNC(embedding_bwd_cuda), 4,
                                          {STARPU_R, STARPU_R, STARPU_W, STARPU_W}},
                                         &m);
  return c;
}

// tokens (B, T), wte (V, C), wpe (T_ctx, C), x (B*T, C)
EmbeddingArgs dims(const SubmitOptions& opt, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                   const Tensor& x) {
  expect(tokens.shape().size() == 2, opt, "tokens must be (B, T): " + shape_str(tokens));
  expect(wte.shape().size() == 2 && wpe.shape().size() == 2 && wte.dim(1) == wpe.dim(1), opt,
         "embeddings must be (V, C) and (T, C): " + shape_str(wte) + " " + shape_str(wpe));
  EmbeddingArgs a{(int)tokens.dim(0), (int)tokens.dim(1), (int)wte.dim(1), (int)wte.dim(0), (int)wpe.dim(0)};
  expect(a.T <= a.T_ctx, opt, shape_str(tokens) + " is longer than the context of " + shape_str(wpe));
  expect(x.numel() == (size_t)a.B * a.T * a.C, opt, shape_str(x) + " must hold B*T*C elements");
  return a;
}

}  // namespace

void insert_embedding_fwd(const SubmitOptions& opt, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                          const Tensor& x) {
  TaskBuilder(embedding_fwd_cl(), opt).r(tokens).r(wte).r(wpe).w(x).args(dims(opt, tokens, wte, wpe, x)).submit();
}

void insert_embedding_bwd(const SubmitOptions& opt, const Tensor& tokens, const Tensor& dx, const Tensor& dwte,
                          const Tensor& dwpe) {
  TaskBuilder(embedding_bwd_cl(), opt)
      .r(tokens).r(dx).w(dwte).w(dwpe)
      .args(dims(opt, tokens, dwte, dwpe, dx))
      .submit();
}

void insert_token_embedding_fwd(const SubmitOptions& opt, const Tensor& tokens, const Tensor& wte, const Tensor& x) {
  TaskBuilder(token_embedding_fwd_cl(), opt).r(tokens).r(wte).w(x).args(token_dims(opt, tokens, wte, x)).submit();
}

void insert_token_embedding_bwd(const SubmitOptions& opt, const Tensor& tokens, const Tensor& dx, const Tensor& dwte) {
  TaskBuilder(token_embedding_bwd_cl(), opt).r(tokens).r(dx).w(dwte).args(token_dims(opt, tokens, dwte, dx)).submit();
}

void insert_class_embedding_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& table, const Tensor& ids) {
  TaskBuilder(class_emb_fwd_cl(), opt).rw(x).r(table).r(ids).args(class_dims(opt, x, table, ids)).submit();
}

void insert_class_embedding_bwd(const SubmitOptions& opt, const Tensor& dx, const Tensor& ids, const Tensor& dtable) {
  TaskBuilder(class_emb_bwd_cl(), opt).r(dx).r(ids).w(dtable).args(class_dims(opt, dx, dtable, ids)).submit();
}

}  // namespace zf
