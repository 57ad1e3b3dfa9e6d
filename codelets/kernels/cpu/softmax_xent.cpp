// Softmax cross-entropy over rows: max-subtracted softmax in float, loss accumulated in double.
#include <cmath>

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

double softmax_xent_fwd(const float* logits, const int32_t* labels, float* probs, int B, int C,
                        int64_t* correct) {
  double loss = 0.0;
  int64_t ok = 0;
  for (int i = 0; i < B; ++i) {
    const float* z = logits + (size_t)i * C;
    float* p = probs + (size_t)i * C;
    int arg = 0;
    float mx = z[0];
    for (int j = 1; j < C; ++j)
      if (z[j] > mx) { mx = z[j]; arg = j; }
    float sum = 0.0f;
    for (int j = 0; j < C; ++j) { p[j] = std::exp(z[j] - mx); sum += p[j]; }
    float inv = 1.0f / sum;
    for (int j = 0; j < C; ++j) p[j] *= inv;
    int y = labels[i];
    // log softmax of the label, computed from the logits for accuracy when p is tiny
    loss += -((double)z[y] - (double)mx - std::log((double)sum));
    ok += (arg == y);
  }
  if (correct) *correct = ok;
  return loss;
}

void softmax_xent_bwd(const float* probs, const int32_t* labels, float* dlogits, int B, int C,
                      float scale) {
  for (int i = 0; i < B; ++i) {
    const float* p = probs + (size_t)i * C;
    float* d = dlogits + (size_t)i * C;
    for (int j = 0; j < C; ++j) d[j] = p[j] * scale;
    d[labels[i]] -= scale;
  }
}

}  // namespace zf::kernels::cpu
