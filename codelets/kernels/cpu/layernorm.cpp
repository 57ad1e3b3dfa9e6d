// LayerNorm over the last dimension (torch.nn.LayerNorm, biased variance), forward and backward
// as in llm.c's layernorm_forward/backward. Row statistics are accumulated in double, in the fixed
// order of lanes.hpp (vectorized), so the result does not depend on the worker; the backward's
// formula:
//   dx = rstd * (dy w - mean(dy w) - xhat * mean(dy w xhat)),  dw = sum dy xhat,  db = sum dy.
// Rows are tiles of parallel.hpp (kRowElems elements a tile, shapes only). The forward's rows are
// each computed alone; the backward's tiles write their dx rows and their own partial dw and db
// (rows in order), which the caller then adds in tile order: independent of who runs which tile.
// With one tile (N * C <= kRowElems) that is the plain sum over the rows in order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cpu/lanes.hpp"
#include "runtime/parallel.hpp"

namespace zf::kernels::cpu {

namespace {
constexpr int kRowElems = 16384;
int rows_per_tile(int C) { return std::max(1, kRowElems / std::max(1, C)); }
}  // namespace

void layernorm_fwd(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                   int N, int C, float eps) {
  const int rows = rows_per_tile(C);
  parallel_tiles((N + rows - 1) / rows, [&](int t) {
    for (int i = t * rows; i < std::min(N, (t + 1) * rows); ++i) {
      const float* xi = x + (size_t)i * C;  // (C)
      float* yi = y + (size_t)i * C;
      const float m = (float)(lane_sum<double>(C, [&](size_t c) { return xi[c]; }) / C);
      const double v = lane_sum<double>(C, [&](size_t c) {
        const double d = (double)xi[c] - m;
        return d * d;
      });
      const float r = (float)(1.0 / std::sqrt(v / C + (double)eps));
      for (int c = 0; c < C; ++c) yi[c] = (xi[c] - m) * r * w[c] + b[c];
      mean[i] = m;
      rstd[i] = r;
    }
  });
}

void layernorm_bwd(const float* dy, const float* x, const float* mean, const float* rstd, const float* w,
                   float* dx, float* dw, float* db, int N, int C) {
  const int rows = rows_per_tile(C), tiles = (N + rows - 1) / rows;
  std::vector<float> part((size_t)std::max(tiles, 1) * 2 * C, 0.0f);  // per tile: dw (C), db (C)
  parallel_tiles(tiles, [&](int t) {
    float* pw = part.data() + (size_t)t * 2 * C;
    float* pb = pw + C;
    for (int i = t * rows; i < std::min(N, (t + 1) * rows); ++i) {
      const float* dyi = dy + (size_t)i * C;  // (C)
      const float* xi = x + (size_t)i * C;
      float* dxi = dx + (size_t)i * C;
      const float m = mean[i], r = rstd[i];
      const double s1 = lane_sum<double>(C, [&](size_t c) { return dyi[c] * w[c]; });
      const double s2 = lane_sum<double>(C, [&](size_t c) {
        const float xhat = (xi[c] - m) * r;
        return (double)(dyi[c] * w[c]) * xhat;
      });
      const float mg = (float)(s1 / C), mgx = (float)(s2 / C);
      for (int c = 0; c < C; ++c) {
        const float xhat = (xi[c] - m) * r;
        dxi[c] = (dyi[c] * w[c] - mg - xhat * mgx) * r;
        pw[c] += dyi[c] * xhat;
        pb[c] += dyi[c];
      }
    }
  });
  for (int c = 0; c < C; ++c) dw[c] = db[c] = 0.0f;
  for (int t = 0; t < tiles; ++t)
    for (int c = 0; c < C; ++c) {
      dw[c] += part[(size_t)t * 2 * C + c];
      db[c] += part[(size_t)t * 2 * C + C + c];
    }
}

}  // namespace zf::kernels::cpu
