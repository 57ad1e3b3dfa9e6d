// Softmax cross-entropy over rows: max-subtracted softmax in float (exp through gelu_math's
// vectorized exp_poly, within 1 ulp of expf: tests/kernels/test_kernels.cpp ExpPoly, the row sum in
// lanes.hpp's fixed order), loss accumulated in double; in tiles of rows (parallel.hpp). The fused
// softmax_xent_fwd_bwd writes the gradient in the same pass, each row in cache from its max to its
// gradient, where the forward's probabilities and the backward's pass over them made two more
// trips through memory (issue 27: the Llama's 4096-token head, 4M logits a step).
// A negative label marks a row to ignore (padding): no loss, no count, a zero gradient.
#include <algorithm>
#include <cmath>
#include <vector>

#include "codelets/kernels/class_posterior.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cpu/lanes.hpp"
#include "runtime/parallel.hpp"
#include "codelets/kernels/gelu_math.hpp"

namespace zf::kernels::cpu {

namespace {
constexpr int kRowElems = 16384;  // elements of logits a tile of rows holds (at least one row)

struct Part {
  double loss = 0.0;
  int64_t ok = 0, n = 0;
};

// Whether the label y is the row's first maximum mx: z[y] == mx and no earlier element equals mx
// (the count over j < y is a vectorized sum, where a search for the first maximum is a scalar
// loop with an early exit; it only runs on the rows where z[y] is a maximum).
bool label_is_argmax(const float* z, int y, float mx) {
  if (!(z[y] == mx)) return false;
  return lane_sum<int>((size_t)y, [&](size_t j) { return z[j] == mx ? 1 : 0; }) == 0;
}

// One row: out[j] = exp(z[j] - max) / sum (times scale when scale != 1: the gradient's
// p[j] * scale, the same two roundings as softmax_xent_bwd's), the loss and the counts into q.
// grad: out[y] -= scale, the row of a negative label zero.
void xent_row(const float* z, int y, float* out, int C, bool grad, float scale, Part& q) {
  if (grad && y < 0) {
    std::fill(out, out + C, 0.0f);
    return;
  }
  const float mx = lane_max(z, (size_t)C);
  for (int j = 0; j < C; ++j) out[j] = gelu_math::exp_poly(z[j] - mx);
  const float sum = lane_sum<float>((size_t)C, [&](size_t j) { return out[j]; });
  const float inv = 1.0f / sum;
  if (grad) {
    for (int j = 0; j < C; ++j) out[j] = (out[j] * inv) * scale;
    out[y] -= scale;
  } else {
    for (int j = 0; j < C; ++j) out[j] *= inv;
  }
  if (y < 0) return;
  // log softmax of the label, computed from the logits for accuracy when p is tiny
  q.loss += -((double)z[y] - (double)mx - std::log((double)sum));
  q.ok += label_is_argmax(z, y, mx);
  ++q.n;
}

// Tiles of rows (shapes only), each with its own loss and counts, added in tile order after: the
// same result whoever runs which tile.
double xent_rows(const float* logits, const int32_t* labels, float* out, int B, int C, bool grad, float scale,
                 int64_t* correct, int64_t* counted) {
  const int rows = std::max(1, kRowElems / std::max(1, C)), tiles = (B + rows - 1) / rows;
  std::vector<Part> part((size_t)std::max(tiles, 1));
  parallel_tiles(tiles, [&](int t) {
    for (int i = t * rows; i < std::min(B, (t + 1) * rows); ++i)
      xent_row(logits + (size_t)i * C, labels[i], out + (size_t)i * C, C, grad, scale, part[(size_t)t]);
  });
  double loss = 0.0;
  int64_t ok = 0, n = 0;
  for (const Part& q : part) {
    loss += q.loss;
    ok += q.ok;
    n += q.n;
  }
  if (correct) *correct = ok;
  if (counted) *counted = n;
  return loss;
}
}  // namespace

double softmax_xent_fwd(const float* logits, const int32_t* labels, float* probs, int B, int C,
                        int64_t* correct, int64_t* counted) {
  return xent_rows(logits, labels, probs, B, C, false, 1.0f, correct, counted);
}

double softmax_xent_fwd_bwd(const float* logits, const int32_t* labels, float* dlogits, int B, int C, float scale,
                            int64_t* correct, int64_t* counted) {
  return xent_rows(logits, labels, dlogits, B, C, true, scale, correct, counted);
}

void softmax_xent_bwd(const float* probs, const int32_t* labels, float* dlogits, int B, int C,
                      float scale) {
  // tiles of rows as the forward's: elementwise, the same bits however many help
  const int rows = std::max(1, kRowElems / std::max(1, C)), tiles = (B + rows - 1) / rows;
  parallel_tiles(tiles, [&](int t) {
    for (int i = t * rows; i < std::min(B, (t + 1) * rows); ++i) {
      const float* p = probs + (size_t)i * C;
      float* d = dlogits + (size_t)i * C;
      if (labels[i] < 0) {
        std::fill(d, d + C, 0.0f);
        continue;
      }
      for (int j = 0; j < C; ++j) d[j] = p[j] * scale;
      d[labels[i]] -= scale;
    }
  });
}

namespace {
// out[b] = sequence b's log-likelihood; with mx_sum, each scored row's max and sum of
// exp(z - max) (in float, as the loss above) are kept there (2 floats a row) for the gradient
void logprob_rows(const float* logits, const int32_t* targets, int B, int T, int V, double* out, float* mx_sum) {
  for (int b = 0; b < B; ++b) {
    double s = 0.0;
    for (int t = 0; t < T; ++t) {
      const size_t row = (size_t)b * T + t;
      const int y = targets[row];
      if (y < 0) continue;
      const float* z = logits + row * V;
      float mx = z[0];
      for (int j = 1; j < V; ++j) mx = z[j] > mx ? z[j] : mx;
      float sum = 0.0f;
      for (int j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
      if (mx_sum) {
        mx_sum[2 * row] = mx;
        mx_sum[2 * row + 1] = sum;
      }
      s += (double)z[y] - (double)mx - std::log((double)sum);
    }
    out[b] = s;
  }
}
}  // namespace

void sequence_logprob(const float* logits, const int32_t* targets, int B, int T, int V, double* out) {
  logprob_rows(logits, targets, B, T, V, out, nullptr);
}

double gen_class_loss(const float* logits, const int32_t* targets, const int32_t* labels, const double* log_prior,
                      int K, int B, int T, int V, float lm_weight, float* dlogits, int64_t* correct) {
  const size_t rows = (size_t)K * B * T;
  std::vector<double> s((size_t)K * B);  // s[k*B + b] = log p(chunk b | class k)
  std::vector<float> mx_sum(2 * rows);
  logprob_rows(logits, targets, K * B, T, V, s.data(), mx_sum.data());
  int64_t scored = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) scored += targets[(size_t)b * T + t] >= 0;  // the same under every class
  double loss = 0.0;
  long long ok = 0;
  std::vector<float> w((size_t)K * B);  // the weight of each sequence's (softmax - onehot)
  for (int b = 0; b < B; ++b)
    posterior::chunk_loss(s.data(), log_prior, K, B, b, labels[b], scored, lm_weight, w.data(), &loss, &ok);
  for (size_t row = 0; row < rows; ++row) {
    float* d = dlogits + row * V;
    const int y = targets[row];
    if (y < 0) {
      for (int j = 0; j < V; ++j) d[j] = 0.0f;
      continue;
    }
    const float* z = logits + row * V;
    const float mx = mx_sum[2 * row], inv = 1.0f / mx_sum[2 * row + 1], wr = w[row / (size_t)T];
    for (int j = 0; j < V; ++j) d[j] = wr * std::exp(z[j] - mx) * inv;
    d[y] -= wr;
  }
  if (correct) *correct = ok;
  return loss;
}


// ---- The LM head and its loss in vocabulary chunks (lm_head_xent, kernels.hpp)
namespace {
// operand rows [r0, ...) of a (rows, C) operand
MatOperand rows_from(MatOperand m, size_t r0, int C) {
  const size_t off = r0 * (size_t)C * (m.bf16 ? sizeof(uint16_t) : sizeof(float));
  return {static_cast<const char*>(m.p) + off, m.bf16};
}
}  // namespace

double lm_head_xent(MatOperand x, MatOperand w, const int32_t* labels, float* dx, Ew dw, int N, int C, int V,
                    int Vc, float scale, bool bf16, int64_t* correct, int64_t* counted) {
  Vc = std::max(1, std::min(Vc, V));
  std::vector<float> L((size_t)N * Vc);  // a chunk's logits (N, n), then their gradient in place
  // each row's running max, sum of exp(z - max) and first argmax, and its label's logit
  std::vector<float> mx((size_t)N, 0.0f), sum((size_t)N, 0.0f), zy((size_t)N, 0.0f);
  std::vector<int> arg((size_t)N, 0);
  const int rows = std::max(1, kRowElems / Vc), tiles = (N + rows - 1) / rows;
  auto each_row = [&](auto&& f) {  // tiles of rows (shapes only): the same bits whoever runs them
    parallel_tiles(tiles, [&](int t) {
      for (int i = t * rows; i < std::min(N, (t + 1) * rows); ++i) f(i);
    });
  };
  for (int v0 = 0; v0 < V; v0 += Vc) {  // the forward: max, sum and label logit, chunk by chunk
    const int n = std::min(Vc, V - v0);
    matmul_fwd_mixed(x, rows_from(w, (size_t)v0, C), L.data(), N, C, n, false, bf16);
    each_row([&](int i) {
      const float* z = L.data() + (size_t)i * n;
      const float cm = lane_max(z, (size_t)n);
      if (v0 == 0 || cm > mx[(size_t)i]) {  // a new maximum: the sum so far rescaled to it
        if (v0 > 0) sum[(size_t)i] *= gelu_math::exp_poly(mx[(size_t)i] - cm);
        mx[(size_t)i] = cm;
        arg[(size_t)i] = v0 + (int)(std::find(z, z + n, cm) - z);
      }
      const float m = mx[(size_t)i];
      sum[(size_t)i] += lane_sum<float>((size_t)n, [&](size_t j) { return gelu_math::exp_poly(z[j] - m); });
      const int y = labels[i];
      if (y >= v0 && y < v0 + n) zy[(size_t)i] = z[y - v0];
    });
  }
  std::vector<Part> part((size_t)std::max(tiles, 1));
  parallel_tiles(tiles, [&](int t) {
    for (int i = t * rows; i < std::min(N, (t + 1) * rows); ++i) {
      if (labels[i] < 0) continue;
      Part& q = part[(size_t)t];
      q.loss += -((double)zy[(size_t)i] - (double)mx[(size_t)i] - std::log((double)sum[(size_t)i]));
      q.ok += arg[(size_t)i] == labels[i];
      ++q.n;
    }
  });
  double loss = 0.0;
  int64_t ok = 0, cnt = 0;
  for (const Part& q : part) loss += q.loss, ok += q.ok, cnt += q.n;
  if (correct) *correct = ok;
  if (counted) *counted = cnt;
  if (!dx) return loss;
  // the backward: each chunk's logits again (the same call: the same bits), their gradient
  // (softmax - onehot) * scale in place, its rows of dw written and its share of dx added (fixed
  // order: chunk 0 writes dx, the others add)
  std::vector<float> tmp(V > Vc ? (size_t)N * C : 0), dwc(dw.bf16 ? (size_t)Vc * C : 0);
  for (int v0 = 0; v0 < V; v0 += Vc) {
    const int n = std::min(Vc, V - v0);
    const MatOperand wc = rows_from(w, (size_t)v0, C);
    matmul_fwd_mixed(x, wc, L.data(), N, C, n, false, bf16);
    each_row([&](int i) {
      float* z = L.data() + (size_t)i * n;
      const int y = labels[i];
      if (y < 0) {
        std::fill(z, z + n, 0.0f);
        return;
      }
      const float m = mx[(size_t)i], inv = 1.0f / sum[(size_t)i];
      for (int j = 0; j < n; ++j) z[j] = (gelu_math::exp_poly(z[j] - m) * inv) * scale;
      if (y >= v0 && y < v0 + n) z[y - v0] -= scale;
    });
    const MatOperand g{L.data(), false};
    float* dw_rows = dw.bf16 ? dwc.data() : static_cast<float*>(dw.p) + (size_t)v0 * C;
    matmul_bwd_weight_mixed(g, x, dw_rows, N, C, n, false, false, bf16);
    if (dw.bf16) pack_bf16(dw_rows, static_cast<uint16_t*>(dw.p) + (size_t)v0 * C, (size_t)n * C);
    matmul_bwd_data_mixed(g, wc, v0 == 0 ? dx : tmp.data(), N, C, n, false, bf16);
    if (v0 > 0) accumulate_mixed({dx, false}, {tmp.data(), false}, (size_t)N * C, 1.0f);
  }
  return loss;
}

}  // namespace zf::kernels::cpu
