// Mean pooling over the valid positions of padded sequences (the classifier head's input):
// y[b] = (1/len[b]) sum_{t < len[b]} x[b, t]; positions t >= len[b] get a zero gradient.
#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

void mean_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    float* yb = y + (size_t)b * C;  // (C)
    for (int c = 0; c < C; ++c) yb[c] = 0.0f;
    const int n = len[b];
    for (int t = 0; t < n; ++t) {
      const float* xr = x + ((size_t)b * T + t) * C;
      for (int c = 0; c < C; ++c) yb[c] += xr[c];
    }
    const float inv = 1.0f / (float)n;
    for (int c = 0; c < C; ++c) yb[c] *= inv;
  }
}

void mean_pool_bwd(const float* dy, const int32_t* len, float* dx, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    const float inv = 1.0f / (float)len[b];
    const float* d = dy + (size_t)b * C;
    for (int t = 0; t < T; ++t) {
      float* o = dx + ((size_t)b * T + t) * C;
      if (t < len[b])
        for (int c = 0; c < C; ++c) o[c] = d[c] * inv;
      else
        for (int c = 0; c < C; ++c) o[c] = 0.0f;
    }
  }
}

}  // namespace zf::kernels::cpu
