// CUDA kernels: launchers on device pointers and sizes, queued on the caller's stream (StarPU's
// starpu_cuda_get_local_stream() in the codelets) and never synchronizing. No StarPU, no
// exceptions. Same names, argument order, layouts and semantics as kernels::cpu
// (codelets/kernels/cpu/kernels.hpp), with the stream (and cuBLAS handle) appended. Every
// launcher returns nullptr, or a static error text when a launch or library call failed.
// Bitwise equal to the CPU kernel (built with --fmad=false, IEEE div/sqrt): the elementwise
// operations (bias add, ReLU, GELU, SwiGLU, rotary embeddings, softmax-xent backward, AdamW,
// selective AdamW, accumulate, copy, gather/scatter, merge, embedding, mean, max and last pooling) and, for at most 64 rows, the column sums
// (bias grad, column importance, LayerNorm dw/db). Matmuls (cuBLAS), attention, softmax and the
// row statistics differ by rounding only. Scratch memory comes from the stream-ordered pool
// (cudaMallocAsync). bf16 (the matmuls and attentions, precision bf16): the products' operands are
// rounded to bf16 (kernels/bf16.hpp) into scratch and multiplied on the tensor cores with fp32 sums
// into the fp32 outputs, what the CPU kernels' bf16 flag computes (products of bf16 values are
// exact in fp32), up to the order of the sums.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cuda {

using cpu::AdamParams;
using Status = const char*;  // nullptr: launched

// ---- dense layers: y (B, N) = x (B, K) w (N, K)^T; dw (N, K) = dy^T x; dx (B, K) = dy w
// w_in_out / dw_in_out: the weight stored (K, N), as kernels::cpu::matmul_*. bf16: both operands
// rounded to bf16 (scratch of 2 bytes per operand element), cublasGemmEx; else cublasSgemm.
Status matmul_fwd(const float* x, const float* w, float* y, int B, int K, int N, cublasHandle_t h,
                  cudaStream_t s, bool w_in_out = false, bool bf16 = false);
Status matmul_bwd_weight(const float* dy, const float* x, float* dw, int B, int K, int N, bool accumulate,
                         cublasHandle_t h, cudaStream_t s, bool dw_in_out = false, bool bf16 = false);
Status matmul_bwd_data(const float* dy, const float* w, float* dx, int B, int K, int N, cublasHandle_t h,
                       cudaStream_t s, bool w_in_out = false, bool bf16 = false);
// The same with each operand fp32 or bf16 bits (cpu::MatOperand: a stored bf16 tensor read as it
// is): bf16 products convert only the fp32 operands; fp32 products widen the bf16 ones.
Status matmul_fwd_mixed(cpu::MatOperand x, cpu::MatOperand w, float* y, int B, int K, int N, cublasHandle_t h,
                        cudaStream_t s, bool w_in_out, bool bf16);
Status matmul_bwd_weight_mixed(cpu::MatOperand dy, cpu::MatOperand x, float* dw, int B, int K, int N, bool accumulate,
                               cublasHandle_t h, cudaStream_t s, bool dw_in_out, bool bf16);
Status matmul_bwd_data_mixed(cpu::MatOperand dy, cpu::MatOperand w, float* dx, int B, int K, int N, cublasHandle_t h,
                             cudaStream_t s, bool w_in_out, bool bf16);
Status bias_add(float* y, const float* b, int B, int N, cudaStream_t s);
Status bias_grad(const float* dy, float* db, int B, int N, cudaStream_t s);

// ---- activations
Status relu_fwd(const float* x, float* y, size_t n, cudaStream_t s);
Status relu_bwd(const float* x, const float* dy, float* dx, size_t n, cudaStream_t s);
Status gelu_fwd(const float* x, float* y, size_t n, cudaStream_t s);
Status gelu_bwd(const float* x, const float* dy, float* dx, size_t n, cudaStream_t s);

// ---- loss. stats (3 doubles, device) = {sum of row losses, correct rows, rows counted}, overwritten
// or (accumulate) added to. A label outside [0, C) makes the loss NaN (the host sees a non-finite
// loss), except a negative label with ignore_negative: that row is skipped (padded targets).
Status softmax_xent_fwd(const float* logits, const int32_t* labels, float* probs, int B, int C, double* stats,
                        bool accumulate, cudaStream_t s, bool ignore_negative = false);
Status softmax_xent_bwd(const float* probs, const int32_t* labels, float* dlogits, int B, int C, float scale,
                        cudaStream_t s);
// out[b] (device doubles) = sum over t with targets[b*T + t] >= 0 of log softmax(logits row)[target]
Status sequence_logprob(const float* logits, const int32_t* targets, int B, int T, int V, double* out,
                        cudaStream_t s);
// The generative classifier's training loss (cpu::gen_class_loss; labels and log_prior on the
// device): dlogits written, stats {sum of chunk losses, correct chunks, B} overwritten.
Status gen_class_loss(const float* logits, const int32_t* targets, const int32_t* labels, const double* log_prior,
                      int K, int B, int T, int V, float lm_weight, float* dlogits, double* stats, cudaStream_t s);

// ---- optimizer and data movement
Status adam_step(float* p, const float* g, float* m, float* v, size_t n, const AdamParams& hp, int64_t step,
                 float grad_scale, cudaStream_t s);
Status accumulate(float* acc, const float* g, size_t n, float scale, cudaStream_t s);
Status copy(float* dst, const float* src, size_t n, cudaStream_t s);
Status zero_bytes(void* x, size_t bytes, cudaStream_t s);
Status zero(float* x, size_t n, cudaStream_t s);
// bf16 (kernels/bf16.hpp), element by element as the CPU kernels
Status pack_bf16(const float* x, uint16_t* y, size_t n, cudaStream_t s);
Status unpack_bf16(const uint16_t* x, float* y, size_t n, cudaStream_t s);
Status round_bf16(float* x, size_t n, cudaStream_t s);
// ---- gradient clipping (clip.cu; cpu::sumsq writes its result to *out here)
Status sumsq(const float* x, size_t n, double* out, cudaStream_t s);
Status clip_factor(const double* partial, size_t parts, double sq_div, float clip, float loss_scale, float extra,
                   float* out, cudaStream_t s);
Status scale_by(float* x, size_t n, const float* factor, cudaStream_t s);
// fp16 (kernels/fp16.hpp), element by element as the CPU kernels; round_fp16 sets *flag (device,
// uint32) to 1 when a rounded value is inf or NaN and leaves it unchanged otherwise
Status pack_fp16(const float* x, uint16_t* y, size_t n, cudaStream_t s);
Status unpack_fp16(const uint16_t* x, float* y, size_t n, cudaStream_t s);
Status round_fp16(float* x, size_t n, uint32_t* flag, cudaStream_t s);
// x *= f
Status scale(float* x, size_t n, float f, cudaStream_t s);

// ---- ZenFlow column operations (sel: k sorted column indices, device). in_out / in_out_rows: the
// weight stored (C, R), m and v (k, R), as kernels::cpu's column operations.
Status column_importance(const float* g, int R, int C, bool l2, float* imp, cudaStream_t s, bool in_out = false);
Status topk_columns(const float* imp, int C, int k, int32_t* sel, cudaStream_t s);
Status gather_columns(const float* w, int R, int C, const int32_t* sel, int k, float* out, cudaStream_t s);
Status scatter_columns(const float* in, int R, int C, const int32_t* sel, int k, float* w, cudaStream_t s);
// g is the whole gradient (R, C); m, v are (R, k)
Status selective_adam(float* w, int R, int C, const int32_t* sel, int k, const float* g, float* m, float* v,
                      const AdamParams& hp, int64_t step, cudaStream_t s, bool in_out = false);
// As cpu::selective_adam_master: x the fp32 master of the selected elements, (R, k) or (k, R)
Status selective_adam_master(float* w, int R, int C, const int32_t* sel, int k, const float* g, float* x, bool fill,
                             float* m, float* v, const AdamParams& hp, int64_t step, cudaStream_t s,
                             bool in_out = false);
// As cpu::merge_unselected, without the count of elements written (base: dst holds the weight's
// elements from base on, a ZeRO stage 3 shard).
Status merge_unselected(float* dst, int C, const float* src, size_t off, size_t n, const int32_t* sel, int k,
                        cudaStream_t s, int in_out_rows = 0,
                        size_t base = 0);
Status merge_unselected_bf16(float* dst, int C, const uint16_t* src, size_t off, size_t n, const int32_t* sel,
                             int k, cudaStream_t s, int in_out_rows = 0,
                        size_t base = 0);
Status merge_unselected_fp16(float* dst, int C, const uint16_t* src, size_t off, size_t n, const int32_t* sel,
                             int k, cudaStream_t s, int in_out_rows = 0,
                        size_t base = 0);
// ZeRO stage 3 (codelets/select_shard.cpp), as kernels::cpu's: g, w hold the weight's elements
// [lo, hi). out (one size_t, device) <- selected_before(e); imp (C) <- each column's importance
// over the segment, the CPU kernel's order (bitwise); the selective AdamW of the segment's
// selected elements, m and v from selected_before(lo) on (bitwise, as selective_adam).
Status selected_before(size_t e, int R, int C, const int32_t* sel, int k, bool in_out, size_t* out, cudaStream_t s);
Status column_importance_segment(const float* g, size_t lo, size_t hi, int R, int C, bool l2, float* imp,
                                 cudaStream_t s, bool in_out = false);
Status selective_adam_segment(float* w, size_t lo, size_t hi, int R, int C, const int32_t* sel, int k,
                              const float* g, float* m, float* v, const AdamParams& hp, int64_t step, cudaStream_t s,
                              bool in_out = false);
Status selective_adam_segment_master(float* w, size_t lo, size_t hi, int R, int C, const int32_t* sel, int k,
                                     const float* g, float* x, bool fill, float* m, float* v, const AdamParams& hp,
                                     int64_t step, cudaStream_t s, bool in_out = false);
// out (2 doubles, device) = {sum |g|, sum over the selected columns of |g|}; deterministic.
Status grad_mass(const float* g, int R, int C, const int32_t* sel, int k, double* out, cudaStream_t s,
                 bool in_out = false);

// ---- GPT layers
Status embedding_fwd(const int32_t* tok, const float* wte, const float* wpe, float* x, int B, int T, int C,
                     cudaStream_t s);
Status embedding_bwd(const int32_t* tok, const float* dx, float* dwte, float* dwpe, int B, int T, int C, int V,
                     cudaStream_t s);
// x (B, T, C) [b, t] += table[ids[b]]; dtable (K, C) = per-class sums of dx over sequences and
// positions, in the CPU kernel's order (one thread per (k, c)), overwritten
Status class_embedding_fwd(float* x, const float* table, const int32_t* ids, int B, int T, int C, cudaStream_t s);
Status class_embedding_bwd(const float* dx, const int32_t* ids, float* dtable, int B, int T, int C, int K,
                           cudaStream_t s);
Status layernorm_fwd(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd, int N,
                     int C, float eps, cudaStream_t s);
Status layernorm_bwd(const float* dy, const float* x, const float* mean, const float* rstd, const float* w,
                     float* dx, float* dw, float* db, int N, int C, cudaStream_t s);
// Causal attention without a T x T matrix between the passes (attention.cu): lse (B, NH, T) holds
// each row's log-sum-exp of its scaled scores (natural log), from which the backward recomputes
// the probabilities row block by row block. Scratch from the stream-ordered pool, bounded
// independently of T^2 (about 64 MiB; attention.cu's head comment has the formula). bf16: the
// products' operands rounded to bf16 as cpu::attention_*'s bf16 (q, k, v and dout; P and dS after
// the fp32 softmax and its backward), 2 bytes per element of qkv and dout besides.
Status attention_fwd(const float* qkv, float* out, float* lse, int B, int T, int C, int NH, cublasHandle_t h,
                     cudaStream_t s, bool bf16 = false);
Status attention_bwd(const float* dout, const float* qkv, const float* lse, float* dqkv, int B, int T, int C,
                     int NH, cublasHandle_t h, cudaStream_t s, bool bf16 = false);
Status mean_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C, cudaStream_t s);
Status mean_pool_bwd(const float* dy, const int32_t* len, float* dx, int B, int T, int C, cudaStream_t s);
Status max_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C, cudaStream_t s);
Status max_pool_bwd(const float* x, const float* dy, const int32_t* len, float* dx, int B, int T, int C,
                    cudaStream_t s);
Status last_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C, cudaStream_t s);
Status last_pool_bwd(const float* dy, const int32_t* len, float* dx, int B, int T, int C, cudaStream_t s);

// ---- Llama / Qwen2 layers (llama.cu, attention.cu; cpu:: semantics). The rotary tables cos and
// sin, (Tmax, hs/2) each, are on the device.
Status rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int N, int C, float eps, cudaStream_t s);
Status rmsnorm_bwd(const float* dy, const float* x, const float* rstd, const float* w, float* dx, float* dw, int N,
                   int C, cudaStream_t s);
Status rope_fwd(float* x, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0,
                cudaStream_t s);
Status rope_bwd(float* dx, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0,
                cudaStream_t s);
Status swiglu_fwd(const float* gate, const float* up, float* out, size_t n, cudaStream_t s);
Status swiglu_bwd(const float* gate, const float* up, const float* dout, float* dgate, float* dup, size_t n,
                  cudaStream_t s);
// lse (B, H, T) and scratch as attention_*'s. bf16: as attention_*'s (the CPU kernels have no bf16
// grouped-query attention: with H == Hkv it is attention_*'s bf16).
Status gqa_attention_fwd(const float* q, const float* k, const float* v, float* out, float* lse, int B, int T, int H,
                         int Hkv, int hs, cublasHandle_t h, cudaStream_t s, bool bf16 = false);
Status gqa_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* lse,
                         float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int hs, cublasHandle_t h,
                         cudaStream_t s, bool bf16 = false);

}  // namespace zf::kernels::cuda
