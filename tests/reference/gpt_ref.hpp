// Naive double-precision reference of the GPT layers (codelets/kernels/cpu/{embedding,
// layernorm,attention,pool}.cpp) and of the whole model of models/nets/gpt.hpp and
// models/nets/gpt_classifier.hpp: same shapes and formulas, textbook loops, every intermediate in
// double. Gradient checks (tests/kernels/test_kernels_gpt.cpp) verify the backward functions here
// by finite differences; the kernels and the StarPU step graph are compared against this file.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/reference/reference.hpp"

namespace zf::ref {

using Vec = std::vector<double>;

// x (B, T, C) = wte (V, C)[tok] + wpe (T, C)[t]
inline void embedding_fwd(const int32_t* tok, const double* wte, const double* wpe, double* x, int B, int T, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        x[((size_t)b * T + t) * C + c] = wte[(size_t)tok[b * T + t] * C + c] + wpe[(size_t)t * C + c];
}

// dwte (V, C), dwpe (T, C) overwritten
inline void embedding_bwd(const int32_t* tok, const double* dx, double* dwte, double* dwpe, int B, int T, int C,
                          int V) {
  for (size_t i = 0; i < (size_t)V * C; ++i) dwte[i] = 0.0;
  for (size_t i = 0; i < (size_t)T * C; ++i) dwpe[i] = 0.0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const double d = dx[((size_t)b * T + t) * C + c];
        dwte[(size_t)tok[b * T + t] * C + c] += d;
        dwpe[(size_t)t * C + c] += d;
      }
}

// y (N, C) = (x - mean) / sqrt(var + eps) * w + b (biased variance); mean, rstd (N)
inline void layernorm_fwd(const double* x, const double* w, const double* b, double* y, double* mean, double* rstd,
                          int N, int C, double eps) {
  for (int i = 0; i < N; ++i) {
    double m = 0.0;
    for (int c = 0; c < C; ++c) m += x[(size_t)i * C + c];
    m /= C;
    double v = 0.0;
    for (int c = 0; c < C; ++c) v += (x[(size_t)i * C + c] - m) * (x[(size_t)i * C + c] - m);
    v /= C;
    const double r = 1.0 / std::sqrt(v + eps);
    for (int c = 0; c < C; ++c) y[(size_t)i * C + c] = (x[(size_t)i * C + c] - m) * r * w[c] + b[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

// dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)); dw = sum dy xhat; db = sum dy
inline void layernorm_bwd(const double* dy, const double* x, const double* mean, const double* rstd,
                          const double* w, double* dx, double* dw, double* db, int N, int C) {
  for (int c = 0; c < C; ++c) dw[c] = db[c] = 0.0;
  for (int i = 0; i < N; ++i) {
    double s1 = 0.0, s2 = 0.0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[(size_t)i * C + c] - mean[i]) * rstd[i];
      s1 += dy[(size_t)i * C + c] * w[c];
      s2 += dy[(size_t)i * C + c] * w[c] * xhat;
    }
    s1 /= C;
    s2 /= C;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[(size_t)i * C + c] - mean[i]) * rstd[i];
      dx[(size_t)i * C + c] = (dy[(size_t)i * C + c] * w[c] - s1 - xhat * s2) * rstd[i];
      dw[c] += dy[(size_t)i * C + c] * xhat;
      db[c] += dy[(size_t)i * C + c];
    }
  }
}

// Causal attention: qkv (B, T, 3C) = [q | k | v], head h uses columns h*hs .. h*hs+hs-1 of each;
// att (B, NH, T, T) = softmax_j<=i(q_i . k_j / sqrt(hs)), 0 for j > i; out (B, T, C) = att v;
// lse (B, NH, T), if given: each row's log-sum-exp of the scores.
inline void attention_fwd(const double* qkv, double* out, double* att, int B, int T, int C, int NH,
                          double* lse = nullptr) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt((double)hs);
  auto at = [&](int b, int t, int part, int h, int d) { return qkv[((size_t)b * T + t) * 3 * C + part * C + h * hs + d]; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        double* a = att + (((size_t)b * NH + h) * T + i) * T;
        double mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double s = 0.0;
          for (int d = 0; d < hs; ++d) s += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          a[j] = s * scale;
          if (a[j] > mx) mx = a[j];
        }
        double sum = 0.0;
        for (int j = 0; j <= i; ++j) sum += std::exp(a[j] - mx);
        if (lse) lse[((size_t)b * NH + h) * T + i] = mx + std::log(sum);
        for (int j = 0; j <= i; ++j) a[j] = std::exp(a[j] - mx) / sum;
        for (int j = i + 1; j < T; ++j) a[j] = 0.0;
        for (int d = 0; d < hs; ++d) {
          double o = 0.0;
          for (int j = 0; j <= i; ++j) o += a[j] * at(b, j, 2, h, d);
          out[((size_t)b * T + i) * C + h * hs + d] = o;
        }
      }
}

// dqkv (B, T, 3C) overwritten, from dout (B, T, C) and the saved att
inline void attention_bwd(const double* dout, const double* qkv, const double* att, double* dqkv, int B, int T,
                          int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt((double)hs);
  auto idx = [&](int b, int t, int part, int h, int d) { return ((size_t)b * T + t) * 3 * C + part * C + h * hs + d; };
  for (size_t i = 0; i < (size_t)B * T * 3 * C; ++i) dqkv[i] = 0.0;
  std::vector<double> datt(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const double* a = att + (((size_t)b * NH + h) * T + i) * T;
        const double* dO = dout + ((size_t)b * T + i) * C + h * hs;
        // out_i = sum_j a_ij v_j
        for (int j = 0; j <= i; ++j) {
          double s = 0.0;
          for (int d = 0; d < hs; ++d) {
            s += dO[d] * qkv[idx(b, j, 2, h, d)];
            dqkv[idx(b, j, 2, h, d)] += a[j] * dO[d];
          }
          datt[j] = s;
        }
        // softmax backward: dS_ij = a_ij (datt_ij - sum_k a_ik datt_ik)
        double dot = 0.0;
        for (int j = 0; j <= i; ++j) dot += a[j] * datt[j];
        for (int j = 0; j <= i; ++j) {
          const double ds = a[j] * (datt[j] - dot) * scale;
          for (int d = 0; d < hs; ++d) {
            dqkv[idx(b, i, 0, h, d)] += ds * qkv[idx(b, j, 1, h, d)];
            dqkv[idx(b, j, 1, h, d)] += ds * qkv[idx(b, i, 0, h, d)];
          }
        }
      }
}

// y (B, C) = mean over t < len[b] of x (B, T, C)
inline void mean_pool_fwd(const double* x, const int32_t* len, double* y, int B, int T, int C) {
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < C; ++c) {
      double s = 0.0;
      for (int t = 0; t < len[b]; ++t) s += x[((size_t)b * T + t) * C + c];
      y[(size_t)b * C + c] = s / len[b];
    }
}

inline void mean_pool_bwd(const double* dy, const int32_t* len, double* dx, int B, int T, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) dx[((size_t)b * T + t) * C + c] = t < len[b] ? dy[(size_t)b * C + c] / len[b] : 0.0;
}

// y (B, C) = max over t < len[b] of x (B, T, C), feature by feature
inline void max_pool_fwd(const double* x, const int32_t* len, double* y, int B, int T, int C) {
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < C; ++c) {
      double m = x[((size_t)b * T) * C + c];
      for (int t = 1; t < len[b]; ++t) m = std::max(m, x[((size_t)b * T + t) * C + c]);
      y[(size_t)b * C + c] = m;
    }
}

// the gradient goes to the first position holding the maximum
inline void max_pool_bwd(const double* x, const double* dy, const int32_t* len, double* dx, int B, int T, int C) {
  for (size_t i = 0; i < (size_t)B * T * C; ++i) dx[i] = 0.0;
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < C; ++c) {
      int arg = 0;
      for (int t = 1; t < len[b]; ++t)
        if (x[((size_t)b * T + t) * C + c] > x[((size_t)b * T + arg) * C + c]) arg = t;
      dx[((size_t)b * T + arg) * C + c] = dy[(size_t)b * C + c];
    }
}

// The generative classifier's training loss (kernels::cpu::gen_class_loss), in double: rows
// (k*B + b)*T .. of logits (K*B*T, V) are chunk b under class k. Returns the whole loss
// L = (1/B) sum_b -log softmax_k(s[k, b] + log_prior[k])[y_b] + lm_weight * mean over the scored
// bytes of the true-class rows of -log p(byte); *cls_sum = the sum of the chunks' cross-entropies
// (what the kernel returns); dlogits = dL/dlogits (if not null).
inline double gen_class_loss(const double* logits, const int32_t* targets, const int32_t* labels,
                             const double* log_prior, int K, int B, int T, int V, double lm_weight, double* dlogits,
                             double* cls_sum) {
  std::vector<double> s((size_t)K * B, 0.0);
  std::vector<double> lse((size_t)K * B * T, 0.0);
  int scored = 0;
  for (int i = 0; i < B * T; ++i) scored += targets[i] >= 0;
  for (int r = 0; r < K * B * T; ++r) {
    if (targets[r] < 0) continue;
    const double* z = logits + (size_t)r * V;
    double mx = z[0], sum = 0.0;
    for (int j = 1; j < V; ++j) mx = std::max(mx, z[j]);
    for (int j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
    lse[(size_t)r] = mx + std::log(sum);
    s[(size_t)(r / T)] += z[targets[r]] - lse[(size_t)r];
  }
  double ce = 0.0, lm = 0.0;
  std::vector<double> w((size_t)K * B);
  for (int b = 0; b < B; ++b) {
    double mx = -INFINITY, sum = 0.0;
    for (int k = 0; k < K; ++k) mx = std::max(mx, s[(size_t)k * B + b] + log_prior[k]);
    for (int k = 0; k < K; ++k) sum += std::exp(s[(size_t)k * B + b] + log_prior[k] - mx);
    const int y = labels[b];
    ce += -(s[(size_t)y * B + b] + log_prior[y] - mx - std::log(sum));
    lm += -s[(size_t)y * B + b];
    for (int k = 0; k < K; ++k)
      w[(size_t)k * B + b] = ((k == y) - std::exp(s[(size_t)k * B + b] + log_prior[k] - mx) / sum) / B +
                             (k == y) * lm_weight / scored;
  }
  if (dlogits)
    for (int r = 0; r < K * B * T; ++r)
      for (int j = 0; j < V; ++j) {
        const size_t i = (size_t)r * V + j;
        dlogits[i] = targets[r] < 0 ? 0.0
                                    : w[(size_t)(r / T)] * (std::exp(logits[i] - lse[(size_t)r]) - (j == targets[r]));
      }
  if (cls_sum) *cls_sum = ce;
  return ce / B + lm_weight * lm / scored;
}

// ---- the whole model, in double. Parameters by GPT-2 name; shapes as models/nets/gpt.hpp.
// A Hugging Face GPT-2 (models/hf/gpt2_hf.hpp) adds: the MLP's width n_inner (0: 4 n_embd), the
// LayerNorms' eps, and the head tied to wte (lm_loss reads wte and adds the head's weight gradient
// to wte's). wpe may have more rows than T: positions 0 .. T-1 are used, the rest get zero gradient.
struct GptRefConfig {
  int n_layer, n_head, n_embd, vocab = 256;
  int n_inner = 0;
  double eps = 1e-5;
  bool tied = false;
  int inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
};

class GptRef {
 public:
  using Params = std::map<std::string, Vec>;
  GptRef(const GptRefConfig& c, Params p) : c_(c), p_(std::move(p)) {}
  Params& params() { return p_; }
  // After lm_loss() with grads: the sum over the operands of every product (the inputs of the
  // linear layers and the head; the attention's q, k, v and probabilities) of |x| |dL/dx|
  // (reference.hpp's abs_dot). A bf16 forward that rounds those operands (relative error <= 2^-8
  // each) is within 2^-8 of this of the loss, to first order. Precision bf16 also stores the
  // residual stream and the matmuls' outputs in bf16 (Runtime::activations_bf16), each rounded
  // where it is written: the embedding's output (and again after the class embedding's add), each
  // product's output with its bias (one rounding: the bias is added in the product's task, as
  // PyTorch's addmm) and again after the residual add; their |x| |dL/dx| are counted too (the qkv
  // is the attention's operand, counted once).
  double bf16_sensitivity() const { return sens_; }

  // Mean next-token cross-entropy over (B, T) tokens and the targets >= 0 (on fixed rows,
  // models/data/lm_rows.hpp, a target of -1 carries no loss); fills grads (same keys). The head is
  // lm_head.weight, or wte when tied. (cls_loss: a mean-pooled classifier.{weight,bias}.)
  double lm_loss(const std::vector<int32_t>& tok, const std::vector<int32_t>& targets, int B, int T,
                        Params* grads) {
    return run(tok, B, T, grads, [&](const Vec& x, Vec& dx, Params* g) {
      const int V = c_.vocab, C = c_.n_embd, N = B * T;
      const Vec& W = p_.at(c_.tied ? "wte" : "lm_head.weight");
      Vec logits((size_t)N * V), dl(logits.size(), 0.0);
      matmul_fwd(x.data(), W.data(), logits.data(), N, C, V);
      int n = 0;
      for (int32_t y : targets) n += y >= 0;
      double loss = 0.0;
      for (int r = 0; r < N; ++r) {
        const int y = targets[r];
        if (y < 0) continue;
        const double* z = logits.data() + (size_t)r * V;
        double mx = z[0], sum = 0.0;
        for (int j = 1; j < V; ++j) mx = std::max(mx, z[j]);
        for (int j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
        loss -= z[y] - mx - std::log(sum);
        for (int j = 0; j < V; ++j) dl[(size_t)r * V + j] = (std::exp(z[j] - mx) / sum - (j == y)) / n;
      }
      if (g) {
        Vec& dW = (*g)[c_.tied ? kTiedHead : "lm_head.weight"];
        dW.assign(W.size(), 0.0);
        matmul_bwd_weight(dl.data(), x.data(), dW.data(), N, C, V, false);
        matmul_bwd_data(dl.data(), W.data(), dx.data(), N, C, V);
      }
      return loss / n;
    });
  }

  // The generative classifier's training loss: the mean over the targets >= 0 (padding is -1) of
  // -log softmax(lm_head(x))[target]; fills grads. seq_ll (B), if given, receives each sequence's
  // log-likelihood (the sum over its targets), the evaluation's score.
  // cls (B): each sequence's class, whose row of class_embedding (K, C) is added to the embedding
  // of all its positions.
  double gen_loss(const std::vector<int32_t>& tok, const std::vector<int32_t>& targets, const std::vector<int32_t>& cls,
                  int B, int T, Params* grads, std::vector<double>* seq_ll = nullptr) {
    cls_ = &cls;
    return run(tok, B, T, grads, [&](const Vec& x, Vec& dx, Params* g) {
      const int V = c_.vocab, C = c_.n_embd, N = B * T;
      const Vec& W = p_.at("lm_head.weight");
      Vec logits((size_t)N * V), dl(logits.size(), 0.0);
      matmul_fwd(x.data(), W.data(), logits.data(), N, C, V);
      int n = 0;
      for (int32_t y : targets) n += y >= 0;
      double loss = 0.0;
      if (seq_ll) seq_ll->assign(B, 0.0);
      for (int r = 0; r < N; ++r) {
        const int y = targets[r];
        if (y < 0) continue;
        const double* z = logits.data() + (size_t)r * V;
        double mx = z[0], sum = 0.0;
        for (int j = 1; j < V; ++j) mx = std::max(mx, z[j]);
        for (int j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
        const double lp = z[y] - mx - std::log(sum);
        loss -= lp;
        if (seq_ll) (*seq_ll)[r / T] += lp;
        for (int j = 0; j < V; ++j) dl[(size_t)r * V + j] = (std::exp(z[j] - mx) / sum - (j == y)) / n;
      }
      if (g) {
        Vec& dW = (*g)["lm_head.weight"];
        dW.assign(W.size(), 0.0);
        matmul_bwd_weight(dl.data(), x.data(), dW.data(), N, C, V, false);
        matmul_bwd_data(dl.data(), W.data(), dx.data(), N, C, V);
      }
      return loss / n;
    });
  }

  // The generative classifier's training step: K*B sequences (chunk b under class k at row k*B + b,
  // cls (K*B) their classes), labels (B) the chunks' classes; the loss of gen_class_loss above.
  double gen_cls_loss(const std::vector<int32_t>& tok, const std::vector<int32_t>& targets, const std::vector<int32_t>& cls,
                      const std::vector<int32_t>& labels, const std::vector<double>& log_prior, int T, double lm_weight,
                      Params* grads, double* cls_sum = nullptr) {
    const int K = (int)log_prior.size(), B = (int)labels.size(), KB = K * B;
    cls_ = &cls;
    return run(tok, KB, T, grads, [&](const Vec& x, Vec& dx, Params* g) {
      const int V = c_.vocab, C = c_.n_embd, N = KB * T;
      const Vec& W = p_.at("lm_head.weight");
      Vec logits((size_t)N * V), dl(logits.size());
      matmul_fwd(x.data(), W.data(), logits.data(), N, C, V);
      const double loss = gen_class_loss(logits.data(), targets.data(), labels.data(), log_prior.data(), K, B, T, V,
                                         lm_weight, dl.data(), cls_sum);
      if (g) {
        Vec& dW = (*g)["lm_head.weight"];
        dW.assign(W.size(), 0.0);
        matmul_bwd_weight(dl.data(), x.data(), dW.data(), N, C, V, false);
        matmul_bwd_data(dl.data(), W.data(), dx.data(), N, C, V);
      }
      return loss;
    });
  }

  double cls_loss(const std::vector<int32_t>& tok, const std::vector<int32_t>& len, const std::vector<int32_t>& labels,
                  int B, int T, Params* grads, bool max_pool = false) {
    return run(tok, B, T, grads, [&](const Vec& x, Vec& dx, Params* g) {
      const int C = c_.n_embd;
      const Vec& W = p_.at("classifier.weight");
      const Vec& bias = p_.at("classifier.bias");
      const int K = (int)bias.size();
      Vec pooled((size_t)B * C), logits((size_t)B * K), probs(logits.size());
      if (max_pool)
        max_pool_fwd(x.data(), len.data(), pooled.data(), B, T, C);
      else
        mean_pool_fwd(x.data(), len.data(), pooled.data(), B, T, C);
      matmul_fwd(pooled.data(), W.data(), logits.data(), B, C, K);
      bias_add(logits.data(), bias.data(), B, K);
      double loss = softmax_xent_fwd(logits.data(), labels.data(), probs.data(), B, K, nullptr) / B;
      if (g) {
        Vec dl(logits.size()), dp(pooled.size());
        softmax_xent_bwd(probs.data(), labels.data(), dl.data(), B, K, 1.0 / B);
        Vec& dW = (*g)["classifier.weight"];
        Vec& db = (*g)["classifier.bias"];
        dW.assign(W.size(), 0.0);
        db.assign(K, 0.0);
        matmul_bwd_weight(dl.data(), pooled.data(), dW.data(), B, C, K, false);
        bias_grad(dl.data(), db.data(), B, K);
        matmul_bwd_data(dl.data(), W.data(), dp.data(), B, C, K);
        if (max_pool)
          max_pool_bwd(x.data(), dp.data(), len.data(), dx.data(), B, T, C);
        else
          mean_pool_bwd(dp.data(), len.data(), dx.data(), B, T, C);
      }
      return loss;
    });
  }

 private:
  static constexpr const char* kTiedHead = "lm_head.tied";  // the tied head's part of wte's gradient
  const Vec& P(const std::string& n) const { return p_.at(n); }

  // Forward of the body (to ln_f's output), the head's loss and d(ln_f output), then the body's
  // backward into grads.
  template <class HeadFn>
  double run(const std::vector<int32_t>& tok, int B, int T, Params* g, HeadFn head) {
    const int C = c_.n_embd, N = B * T, NH = c_.n_head, L = c_.n_layer, I = c_.inner();
    const size_t NC = (size_t)N * C, NI = (size_t)N * I;
    const double eps = c_.eps;
    struct Layer {
      Vec in, ln1, m1, r1, qkv, atty, att, res1, ln2, m2, r2, fch, fcg, res2;
      Vec o, d;  // the projections' outputs with their bias, before the residual add
    };
    std::vector<Layer> ls(L);
    Vec x0(NC);
    embedding_fwd(tok.data(), P("wte").data(), P("wpe").data(), x0.data(), B, T, C);
    const Vec emb = x0;  // before the class embedding
    const std::vector<int32_t>* cls = cls_;
    cls_ = nullptr;
    if (cls)
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t)
          for (int c = 0; c < C; ++c) x0[((size_t)b * T + t) * C + c] += P("class_embedding")[(size_t)(*cls)[b] * C + c];
    Vec r = x0;
    for (int l = 0; l < L; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      Layer& Y = ls[l];
      Y.in = r;
      Y.ln1.resize(NC), Y.m1.resize(N), Y.r1.resize(N);
      layernorm_fwd(r.data(), P(h + "ln_1.weight").data(), P(h + "ln_1.bias").data(), Y.ln1.data(), Y.m1.data(),
                    Y.r1.data(), N, C, eps);
      Y.qkv.resize(3 * NC);
      matmul_fwd(Y.ln1.data(), P(h + "attn.c_attn.weight").data(), Y.qkv.data(), N, C, 3 * C);
      bias_add(Y.qkv.data(), P(h + "attn.c_attn.bias").data(), N, 3 * C);
      Y.atty.resize(NC), Y.att.resize((size_t)B * NH * T * T);
      attention_fwd(Y.qkv.data(), Y.atty.data(), Y.att.data(), B, T, C, NH);
      Y.res1.resize(NC);
      matmul_fwd(Y.atty.data(), P(h + "attn.c_proj.weight").data(), Y.res1.data(), N, C, C);
      bias_add(Y.res1.data(), P(h + "attn.c_proj.bias").data(), N, C);
      Y.o = Y.res1;
      for (size_t i = 0; i < NC; ++i) Y.res1[i] += r[i];
      Y.ln2.resize(NC), Y.m2.resize(N), Y.r2.resize(N);
      layernorm_fwd(Y.res1.data(), P(h + "ln_2.weight").data(), P(h + "ln_2.bias").data(), Y.ln2.data(),
                    Y.m2.data(), Y.r2.data(), N, C, eps);
      Y.fch.resize(NI), Y.fcg.resize(NI);
      matmul_fwd(Y.ln2.data(), P(h + "mlp.c_fc.weight").data(), Y.fch.data(), N, C, I);
      bias_add(Y.fch.data(), P(h + "mlp.c_fc.bias").data(), N, I);
      gelu_fwd(Y.fch.data(), Y.fcg.data(), NI);
      Y.res2.resize(NC);
      matmul_fwd(Y.fcg.data(), P(h + "mlp.c_proj.weight").data(), Y.res2.data(), N, I, C);
      bias_add(Y.res2.data(), P(h + "mlp.c_proj.bias").data(), N, C);
      Y.d = Y.res2;
      for (size_t i = 0; i < NC; ++i) Y.res2[i] += Y.res1[i];
      r = Y.res2;
    }
    Vec lnf(NC), mf(N), rf(N), dlnf(NC);
    layernorm_fwd(r.data(), P("ln_f.weight").data(), P("ln_f.bias").data(), lnf.data(), mf.data(), rf.data(), N, C,
                  eps);
    const double loss = head(lnf, dlnf, g);
    if (!g) return loss;
    sens_ = abs_dot(lnf.data(), dlnf.data(), NC);
    auto G = [&](const std::string& n) -> Vec& {
      Vec& v = (*g)[n];
      v.assign(P(n).size(), 0.0);
      return v;
    };
    Vec dr(NC);
    layernorm_bwd(dlnf.data(), r.data(), mf.data(), rf.data(), P("ln_f.weight").data(), dr.data(),
                  G("ln_f.weight").data(), G("ln_f.bias").data(), N, C);
    // the bf16 activations' roundings: each of xs rounded once, with dx the gradient of each
    auto stored = [&](std::initializer_list<const Vec*> xs, const Vec& dx) {
      for (const Vec* x : xs) sens_ += abs_dot(x->data(), dx.data(), dx.size());
    };
    for (int l = L - 1; l >= 0; --l) {
      const std::string h = "h." + std::to_string(l) + ".";
      Layer& Y = ls[l];
      stored({&Y.d, &Y.res2}, dr);
      Vec dfcg(NI), dfch(NI), dln(NC), dres1(NC), datty(NC), dqkv(3 * NC), din(NC);
      matmul_bwd_weight(dr.data(), Y.fcg.data(), G(h + "mlp.c_proj.weight").data(), N, I, C, false);
      bias_grad(dr.data(), G(h + "mlp.c_proj.bias").data(), N, C);
      matmul_bwd_data(dr.data(), P(h + "mlp.c_proj.weight").data(), dfcg.data(), N, I, C);
      sens_ += abs_dot(Y.fcg.data(), dfcg.data(), NI);
      gelu_bwd(Y.fch.data(), dfcg.data(), dfch.data(), NI);
      stored({&Y.fch}, dfch);
      matmul_bwd_weight(dfch.data(), Y.ln2.data(), G(h + "mlp.c_fc.weight").data(), N, C, I, false);
      bias_grad(dfch.data(), G(h + "mlp.c_fc.bias").data(), N, I);
      matmul_bwd_data(dfch.data(), P(h + "mlp.c_fc.weight").data(), dln.data(), N, C, I);
      sens_ += abs_dot(Y.ln2.data(), dln.data(), NC);
      layernorm_bwd(dln.data(), Y.res1.data(), Y.m2.data(), Y.r2.data(), P(h + "ln_2.weight").data(), dres1.data(),
                    G(h + "ln_2.weight").data(), G(h + "ln_2.bias").data(), N, C);
      for (size_t i = 0; i < NC; ++i) dres1[i] += dr[i];
      stored({&Y.o, &Y.res1}, dres1);
      matmul_bwd_weight(dres1.data(), Y.atty.data(), G(h + "attn.c_proj.weight").data(), N, C, C, false);
      bias_grad(dres1.data(), G(h + "attn.c_proj.bias").data(), N, C);
      matmul_bwd_data(dres1.data(), P(h + "attn.c_proj.weight").data(), datty.data(), N, C, C);
      attention_bwd(datty.data(), Y.qkv.data(), Y.att.data(), dqkv.data(), B, T, C, NH);
      sens_ += abs_dot(Y.atty.data(), datty.data(), NC) + abs_dot(Y.qkv.data(), dqkv.data(), 3 * NC) +
               attention_prob_sensitivity(datty, Y, B, T);
      matmul_bwd_weight(dqkv.data(), Y.ln1.data(), G(h + "attn.c_attn.weight").data(), N, C, 3 * C, false);
      bias_grad(dqkv.data(), G(h + "attn.c_attn.bias").data(), N, 3 * C);
      matmul_bwd_data(dqkv.data(), P(h + "attn.c_attn.weight").data(), dln.data(), N, C, 3 * C);
      sens_ += abs_dot(Y.ln1.data(), dln.data(), NC);
      layernorm_bwd(dln.data(), Y.in.data(), Y.m1.data(), Y.r1.data(), P(h + "ln_1.weight").data(), din.data(),
                    G(h + "ln_1.weight").data(), G(h + "ln_1.bias").data(), N, C);
      for (size_t i = 0; i < NC; ++i) dr[i] = din[i] + dres1[i];
    }
    stored({&x0}, dr);
    if (cls) stored({&emb}, dr);
    Vec dwpe(P("wpe").size(), 0.0);
    Vec dwpe_t((size_t)T * C);
    embedding_bwd(tok.data(), dr.data(), G("wte").data(), dwpe_t.data(), B, T, C, c_.vocab);
    for (size_t i = 0; i < dwpe_t.size(); ++i) dwpe[i] = dwpe_t[i];
    (*g)["wpe"] = dwpe;
    if (auto it = g->find(kTiedHead); it != g->end()) {  // the tied head: wte's gradient gains its part
      Vec& dwte = (*g)["wte"];
      for (size_t i = 0; i < dwte.size(); ++i) dwte[i] += it->second[i];
      g->erase(it);
    }
    if (cls) {
      Vec& de = G("class_embedding");
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t)
          for (int c = 0; c < C; ++c) de[(size_t)(*cls)[b] * C + c] += dr[((size_t)b * T + t) * C + c];
    }
    return loss;
  }

  // sum over b, h, i, j <= i of |att_ij| |dL/datt_ij|, dL/datt_ij = dout_i . v_j (attention_bwd)
  template <class Layer>
  double attention_prob_sensitivity(const Vec& dout, const Layer& Y, int B, int T) const {
    const int C = c_.n_embd, NH = c_.n_head, hs = C / NH;
    double s = 0.0;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < T; ++i)
          for (int j = 0; j <= i; ++j) {
            double d = 0.0;
            for (int e = 0; e < hs; ++e)
              d += dout[((size_t)b * T + i) * C + h * hs + e] * Y.qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + e];
            s += std::fabs(Y.att[(((size_t)b * NH + h) * T + i) * T + j] * d);
          }
    return s;
  }

  GptRefConfig c_;
  Params p_;
  double sens_ = 0.0;
  const std::vector<int32_t>* cls_ = nullptr;  // gen_loss's classes, read by the next run()
};

}  // namespace zf::ref
