// Naive double-precision reference for every CPU kernel in codelets/kernels/cpu/kernels.hpp
// (llm.c's CPU reference path). Same shapes and argument order as the kernels, on doubles.
// Deliberately naive: textbook loops, state kept in double, never optimized. Kernel tests and
// gradient checks compare against this file; change it only to fix a formula.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zf::ref {

inline constexpr double kPi = 3.14159265358979323846;

// y (B, N) = x (B, K) * w (N, K)^T
inline void matmul_fwd(const double* x, const double* w, double* y, int B, int K, int N) {
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0.0;
      for (int k = 0; k < K; ++k) s += x[(size_t)i * K + k] * w[(size_t)j * K + k];
      y[(size_t)i * N + j] = s;
    }
}

// dw (N, K) = dy (B, N)^T * x (B, K)   (accumulate: dw += ...)
inline void matmul_bwd_weight(const double* dy, const double* x, double* dw, int B, int K, int N,
                              bool accumulate) {
  for (int j = 0; j < N; ++j)
    for (int k = 0; k < K; ++k) {
      double s = 0.0;
      for (int i = 0; i < B; ++i) s += dy[(size_t)i * N + j] * x[(size_t)i * K + k];
      dw[(size_t)j * K + k] = accumulate ? dw[(size_t)j * K + k] + s : s;
    }
}

// dx (B, K) = dy (B, N) * w (N, K)
inline void matmul_bwd_data(const double* dy, const double* w, double* dx, int B, int K, int N) {
  for (int i = 0; i < B; ++i)
    for (int k = 0; k < K; ++k) {
      double s = 0.0;
      for (int j = 0; j < N; ++j) s += dy[(size_t)i * N + j] * w[(size_t)j * K + k];
      dx[(size_t)i * K + k] = s;
    }
}

// sum_i |a_i b_i|: with a an operand and b the loss's gradient with respect to it, what rounding the
// operand to a relative error <= u can change the loss by, to first order, is u times this
inline double abs_dot(const double* a, const double* b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += std::fabs(a[i] * b[i]);
  return s;
}

// y (B, N) += b (N)
inline void bias_add(double* y, const double* b, int B, int N) {
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < N; ++j) y[(size_t)i * N + j] += b[j];
}

// db (N) = sum_i dy (B, N)[i, :]
inline void bias_grad(const double* dy, double* db, int B, int N) {
  for (int j = 0; j < N; ++j) {
    double s = 0.0;
    for (int i = 0; i < B; ++i) s += dy[(size_t)i * N + j];
    db[j] = s;
  }
}

// y = max(x, 0)
inline void relu_fwd(const double* x, double* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0 ? x[i] : 0.0;
}

// dx = dy * (x > 0)
inline void relu_bwd(const double* x, const double* dy, double* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0 ? dy[i] : 0.0;
}

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
inline void gelu_fwd(const double* x, double* y, size_t n) {
  const double c = std::sqrt(2.0 / kPi);
  for (size_t i = 0; i < n; ++i) {
    double v = x[i];
    double u = c * (v + 0.044715 * v * v * v);
    y[i] = 0.5 * v * (1.0 + std::tanh(u));
  }
}

// d/dx of the above: 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx, du/dx = c (1 + 3*0.044715 x^2)
inline void gelu_bwd(const double* x, const double* dy, double* dx, size_t n) {
  const double c = std::sqrt(2.0 / kPi);
  for (size_t i = 0; i < n; ++i) {
    double v = x[i];
    double u = c * (v + 0.044715 * v * v * v);
    double t = std::tanh(u);
    double du = c * (1.0 + 3.0 * 0.044715 * v * v);
    dx[i] = dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du);
  }
}

// Row-wise softmax + cross-entropy over logits (B, C), labels (B). probs (B, C) gets the softmax.
// Returns the SUM of per-row losses -log softmax(z)[label]; *correct = rows whose argmax
// (lowest index on ties) equals the label.
inline double softmax_xent_fwd(const double* logits, const int32_t* labels, double* probs, int B,
                               int C, int64_t* correct) {
  double loss = 0.0;
  int64_t ok = 0;
  for (int i = 0; i < B; ++i) {
    const double* z = logits + (size_t)i * C;
    double* p = probs + (size_t)i * C;
    int arg = 0;
    for (int j = 1; j < C; ++j)
      if (z[j] > z[arg]) arg = j;  // strict: the first maximum wins
    double mx = z[arg];
    double sum = 0.0;
    for (int j = 0; j < C; ++j) sum += std::exp(z[j] - mx);
    for (int j = 0; j < C; ++j) p[j] = std::exp(z[j] - mx) / sum;
    int y = labels[i];
    loss += -(z[y] - mx - std::log(sum));
    if (arg == y) ++ok;
  }
  if (correct) *correct = ok;
  return loss;
}

// dlogits (B, C) = (probs - onehot(labels)) * scale
inline void softmax_xent_bwd(const double* probs, const int32_t* labels, double* dlogits, int B,
                             int C, double scale) {
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < C; ++j) {
      double onehot = (j == labels[i]) ? 1.0 : 0.0;
      dlogits[(size_t)i * C + j] = (probs[(size_t)i * C + j] - onehot) * scale;
    }
}

// AdamW hyperparameters in double (the test converts the kernel's float AdamParams field by field).
struct AdamParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

// AdamW as torch.optim.AdamW, exactly the formula of kernels.hpp, all in double:
//   g *= grad_scale;  p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)      (t is 1-based)
inline void adam_step(double* p, const double* g, double* m, double* v, size_t n,
                      const AdamParams& hp, int64_t step, double grad_scale) {
  const double bc1 = 1.0 - std::pow(hp.beta1, (double)step);
  const double bc2 = 1.0 - std::pow(hp.beta2, (double)step);
  for (size_t i = 0; i < n; ++i) {
    double gi = g[i] * grad_scale;
    p[i] = p[i] * (1.0 - hp.lr * hp.weight_decay);
    m[i] = hp.beta1 * m[i] + (1.0 - hp.beta1) * gi;
    v[i] = hp.beta2 * v[i] + (1.0 - hp.beta2) * gi * gi;
    p[i] = p[i] - (hp.lr / bc1) * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + hp.eps);
  }
}

// acc += scale * g
inline void accumulate(double* acc, const double* g, size_t n, double scale) {
  for (size_t i = 0; i < n; ++i) acc[i] += scale * g[i];
}

// dst = src
inline void copy(double* dst, const double* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}

// x = 0
inline void zero(double* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = 0.0;
}

// Widen a float buffer to double (tests feed the kernels' float inputs to the reference).
inline std::vector<double> to_double(const std::vector<float>& a) {
  return std::vector<double>(a.begin(), a.end());
}

}  // namespace zf::ref
