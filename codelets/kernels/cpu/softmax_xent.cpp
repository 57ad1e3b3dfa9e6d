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

}  // namespace zf::kernels::cpu
