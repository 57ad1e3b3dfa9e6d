// CPU kernels: plain C++ on pointers and sizes. No StarPU, no exceptions; inputs are trusted
// (shapes are validated when a graph is built). Layouts are row-major; shapes are written
// llm.c style on every buffer. A weight W has shape (N = out_features, K = in_features);
// "column j" of W is W[:, j], the weights that read input feature j (ZenFlow's unit of selection).
#pragma once
#include <cstddef>
#include <cstdint>

namespace zf::kernels::cpu {

// Pin BLAS to one thread: StarPU workers are the parallelism (call once at start-up).
void blas_single_thread();

// y (B, N) = x (B, K) * w (N, K)^T
void matmul_fwd(const float* x, const float* w, float* y, int B, int K, int N);
// dw (N, K) = dy (B, N)^T * x (B, K)   (accumulate: dw += ...)
void matmul_bwd_weight(const float* dy, const float* x, float* dw, int B, int K, int N, bool accumulate);
// dx (B, K) = dy (B, N) * w (N, K)
void matmul_bwd_data(const float* dy, const float* w, float* dx, int B, int K, int N);

// y (B, N) += b (N)
void bias_add(float* y, const float* b, int B, int N);
// db (N) = sum_i dy (B, N)[i, :]
void bias_grad(const float* dy, float* db, int B, int N);

// y = max(x, 0); dx = dy * (x > 0)
void relu_fwd(const float* x, float* y, size_t n);
void relu_bwd(const float* x, const float* dy, float* dx, size_t n);
// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_fwd(const float* x, float* y, size_t n);
void gelu_bwd(const float* x, const float* dy, float* dx, size_t n);

// Row-wise softmax + cross-entropy over logits (B, C) with integer labels (B).
// probs (B, C) receives the softmax; returns the SUM of per-row losses (double accumulator)
// and writes the number of rows whose argmax (lowest index on ties) equals the label.
double softmax_xent_fwd(const float* logits, const int32_t* labels, float* probs, int B, int C,
                        int64_t* correct);
// dlogits (B, C) = (probs - onehot(labels)) * scale   (scale = 1/B for a mean loss)
void softmax_xent_bwd(const float* probs, const int32_t* labels, float* dlogits, int B, int C,
                      float scale);

struct AdamParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
};
// AdamW as in PyTorch's torch.optim.AdamW (decoupled weight decay, bias correction):
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// g is multiplied by grad_scale first. step t is 1-based. Elementwise: any split of [0, n)
// into pieces gives bitwise the same result as one call.
void adam_step(float* p, const float* g, float* m, float* v, size_t n, const AdamParams& hp,
               int64_t step, float grad_scale);

// acc += scale * g
void accumulate(float* acc, const float* g, size_t n, float scale);
// dst = src
void copy(float* dst, const float* src, size_t n);
// x = 0
void zero(float* x, size_t n);

}  // namespace zf::kernels::cpu
