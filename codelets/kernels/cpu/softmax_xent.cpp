// Softmax cross-entropy over rows: max-subtracted softmax in float (exp through gelu_math's
// vectorized exp_poly, the row sum in lanes.hpp's fixed order), loss accumulated in double.
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
}  // namespace

double softmax_xent_fwd(const float* logits, const int32_t* labels, float* probs, int B, int C,
                        int64_t* correct, int64_t* counted) {
  // Tiles of rows (shapes only), each with its own loss and counts, added in tile order after:
  // the same result whoever runs which tile.
  const int rows = std::max(1, kRowElems / std::max(1, C)), tiles = (B + rows - 1) / rows;
  struct Part {
    double loss = 0.0;
    int64_t ok = 0, n = 0;
  };
  std::vector<Part> part((size_t)std::max(tiles, 1));
  parallel_tiles(tiles, [&](int t) {
    Part& q = part[(size_t)t];
    for (int i = t * rows; i < std::min(B, (t + 1) * rows); ++i) {
      const float* z = logits + (size_t)i * C;
      float* p = probs + (size_t)i * C;
      const float mx = lane_max(z, C);
      int arg = 0;  // the first maximum
      while (arg < C - 1 && !(z[arg] == mx)) ++arg;
      for (int j = 0; j < C; ++j) p[j] = gelu_math::exp_poly(z[j] - mx);
      const float sum = lane_sum<float>(C, [&](size_t j) { return p[j]; });
      const float inv = 1.0f / sum;
      for (int j = 0; j < C; ++j) p[j] *= inv;
      const int y = labels[i];
      if (y < 0) continue;
      // log softmax of the label, computed from the logits for accuracy when p is tiny
      q.loss += -((double)z[y] - (double)mx - std::log((double)sum));
      q.ok += (arg == y);
      ++q.n;
    }
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

void softmax_xent_bwd(const float* probs, const int32_t* labels, float* dlogits, int B, int C,
                      float scale) {
  for (int i = 0; i < B; ++i) {
    const float* p = probs + (size_t)i * C;
    float* d = dlogits + (size_t)i * C;
    if (labels[i] < 0) {
      for (int j = 0; j < C; ++j) d[j] = 0.0f;
      continue;
    }
    for (int j = 0; j < C; ++j) d[j] = p[j] * scale;
    d[labels[i]] -= scale;
  }
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
