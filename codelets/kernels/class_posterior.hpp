// Bayes' rule over class log-likelihoods, shared by the generative classifier's training loss (the
// CPU kernel in kernels/cpu/softmax_xent.cpp and the CUDA kernel in kernels/cuda/softmax_xent.cu)
// and its evaluation (models/nets/gpt_classifier.cpp), so that all three compute it with the same
// operations in the same order.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ZF_POSTERIOR_HD __host__ __device__
#else
#define ZF_POSTERIOR_HD
#endif

namespace zf::kernels::posterior {

// q_k = s[k * stride] + log_prior[k] for k < K: mx = max_k q_k, arg its class (the lowest on
// ties), sum = sum_k exp(q_k - mx). Then log p(k | x) = q_k - mx - log(sum).
struct Posterior {
  double mx, sum;
  int arg;
};
ZF_POSTERIOR_HD inline Posterior of(const double* s, int64_t stride, const double* log_prior, int K) {
  Posterior p{-INFINITY, 0.0, 0};
  for (int k = 0; k < K; ++k) {
    const double q = s[k * stride] + log_prior[k];
    if (q > p.mx) {
      p.mx = q;
      p.arg = k;
    }
  }
  for (int k = 0; k < K; ++k) p.sum += exp(s[k * stride] + log_prior[k] - p.mx);
  return p;
}

// -log p(y | x)
ZF_POSTERIOR_HD inline double loss(const Posterior& p, const double* s, int64_t stride, const double* log_prior,
                                   int y) {
  return -(s[y * stride] + log_prior[y] - p.mx - log(p.sum));
}

// Chunk b of B of the training loss (kernels::cpu::gen_class_loss), s[k*B + b] = log p(chunk b |
// k), y its class, `scored` its scored bytes: adds -log p(y | chunk) to *loss_sum and the hit to
// *hits, and writes the weight of each of its K sequences' (softmax - onehot),
// w[k*B + b] = ([k == y] - p(k | chunk)) / B + [k == y] lm_weight / scored.
ZF_POSTERIOR_HD inline void chunk_loss(const double* s, const double* log_prior, int K, int B, int b, int y,
                                       int64_t scored, float lm_weight, float* w, double* loss_sum,
                                       long long* hits) {
  const Posterior p = of(s + b, B, log_prior, K);
  *loss_sum += loss(p, s + b, B, log_prior, y);
  *hits += p.arg == y;
  for (int k = 0; k < K; ++k) {
    const double pk = exp(s[(int64_t)k * B + b] + log_prior[k] - p.mx) / p.sum;
    const double lm = k == y && scored ? (double)lm_weight / (double)scored : 0.0;
    w[(int64_t)k * B + b] = (float)(((k == y ? 1.0 : 0.0) - pk) / B + lm);
  }
}

}  // namespace zf::kernels::posterior
