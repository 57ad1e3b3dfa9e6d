// Mean, max or last-position pooling over the valid positions of padded sequences (the classifier
// head's input): y[b] = (1/len[b]) sum_{t < len[b]} x[b, t], the per-feature maximum (its gradient
// goes to the first position holding it), or x[b, len[b] - 1]; other positions get a zero gradient.
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

void max_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    float* yb = y + (size_t)b * C;  // (C)
    const float* x0 = x + (size_t)b * T * C;
    for (int c = 0; c < C; ++c) yb[c] = x0[c];
    for (int t = 1; t < len[b]; ++t) {
      const float* xr = x0 + (size_t)t * C;
      for (int c = 0; c < C; ++c) yb[c] = xr[c] > yb[c] ? xr[c] : yb[c];
    }
  }
}

void max_pool_bwd(const float* x, const float* dy, const int32_t* len, float* dx, int B, int T, int C) {
  for (size_t i = 0; i < (size_t)B * T * C; ++i) dx[i] = 0.0f;
  for (int b = 0; b < B; ++b) {
    const float* x0 = x + (size_t)b * T * C;
    for (int c = 0; c < C; ++c) {
      int arg = 0;
      for (int t = 1; t < len[b]; ++t)
        if (x0[(size_t)t * C + c] > x0[(size_t)arg * C + c]) arg = t;
      dx[((size_t)b * T + arg) * C + c] = dy[(size_t)b * C + c];
    }
  }
}

void last_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    const float* xr = x + ((size_t)b * T + (size_t)(len[b] - 1)) * C;
    for (int c = 0; c < C; ++c) y[(size_t)b * C + c] = xr[c];
  }
}

void last_pool_bwd(const float* dy, const int32_t* len, float* dx, int B, int T, int C) {
  for (size_t i = 0; i < (size_t)B * T * C; ++i) dx[i] = 0.0f;
  for (int b = 0; b < B; ++b) {
    float* o = dx + ((size_t)b * T + (size_t)(len[b] - 1)) * C;
    for (int c = 0; c < C; ++c) o[c] = dy[(size_t)b * C + c];
  }
}

}  // namespace zf::kernels::cpu
