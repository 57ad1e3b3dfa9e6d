// LayerNorm over the last dimension (torch.nn.LayerNorm, biased variance), forward and backward
// as in llm.c's layernorm_forward/backward. Row statistics are accumulated in double, in a fixed
// order, so the result does not depend on the worker; the backward's formula:
//   dx = rstd * (dy w - mean(dy w) - xhat * mean(dy w xhat)),  dw = sum dy xhat,  db = sum dy.
// The forward's rows are tiles of parallel.hpp (each row alone: independent of who runs it); the
// backward sums dw and db over the rows in order, so it runs on its caller alone.
#include <algorithm>
#include <cmath>

#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cpu/parallel.hpp"

namespace zf::kernels::cpu {

void layernorm_fwd(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                   int N, int C, float eps) {
  const int rows = std::max(1, 16384 / std::max(1, C));  // rows per tile
  parallel_tiles((N + rows - 1) / rows, [&](int t) {
  for (int i = t * rows; i < std::min(N, (t + 1) * rows); ++i) {
    const float* xi = x + (size_t)i * C;  // (C)
    float* yi = y + (size_t)i * C;
    double s = 0.0;
    for (int c = 0; c < C; ++c) s += xi[c];
    const float m = (float)(s / C);
    double v = 0.0;
    for (int c = 0; c < C; ++c) {
      const double d = (double)xi[c] - m;
      v += d * d;
    }
    const float r = (float)(1.0 / std::sqrt(v / C + (double)eps));
    for (int c = 0; c < C; ++c) yi[c] = (xi[c] - m) * r * w[c] + b[c];
    mean[i] = m;
    rstd[i] = r;
  }
  });
}

void layernorm_bwd(const float* dy, const float* x, const float* mean, const float* rstd, const float* w,
                   float* dx, float* dw, float* db, int N, int C) {
  for (int c = 0; c < C; ++c) dw[c] = db[c] = 0.0f;
  for (int i = 0; i < N; ++i) {
    const float* dyi = dy + (size_t)i * C;  // (C)
    const float* xi = x + (size_t)i * C;
    float* dxi = dx + (size_t)i * C;
    const float m = mean[i], r = rstd[i];
    double s1 = 0.0, s2 = 0.0;
    for (int c = 0; c < C; ++c) {
      const float xhat = (xi[c] - m) * r;
      const float g = dyi[c] * w[c];
      s1 += g;
      s2 += (double)g * xhat;
    }
    const float mg = (float)(s1 / C), mgx = (float)(s2 / C);
    for (int c = 0; c < C; ++c) {
      const float xhat = (xi[c] - m) * r;
      dxi[c] = (dyi[c] * w[c] - mg - xhat * mgx) * r;
      dw[c] += dyi[c] * xhat;
      db[c] += dyi[c];
    }
  }
}

}  // namespace zf::kernels::cpu
