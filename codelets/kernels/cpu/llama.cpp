// The Llama family's RMSNorm and rotary embeddings (docs/llama.md).
// RMSNorm as Hugging Face's LlamaRMSNorm in fp32: y = (x * rstd) * w, rstd = 1/sqrt(mean(x^2) +
// eps), the row's sum of squares in double in lanes.hpp's fixed order; backward
//   dx = rstd (dy w - xhat mean(dy w xhat)),  dw = sum over the rows of dy xhat   (xhat = x rstd).
// Rows are tiles of parallel.hpp (kRowElems elements a tile, from the shapes only); the backward's
// tiles write their own partial dw (rows in order), added in tile order after, as the LayerNorm
// backward does: bitwise independent of who runs which tile.
// Rotary embeddings in HF's rotate-half convention (apply_rotary_pos_emb): per head, the halves
// [0, d) and [d, 2d) of the head's hs = 2d features rotate pairwise (i, i + d) by the angle
// pos * inv_freq[i]; the tables are computed once, in double, and stored fp32 (rope_table).
#include <algorithm>
#include <cmath>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cpu/lanes.hpp"
#include "codelets/kernels/cpu/mixed.hpp"
#include "runtime/parallel.hpp"

namespace zf::kernels::cpu {

namespace {
constexpr int kRowElems = 16384;
int rows_per_tile(int C) { return std::max(1, kRowElems / std::max(1, C)); }
constexpr double kPi = 3.14159265358979323846;
}  // namespace

namespace {
// Rows [0, n) of x and y (from the tile's first row), rstd likewise.
void rmsnorm_fwd_rows(const float* x, const float* w, float* y, float* rstd, int n, int C, float eps) {
  for (int i = 0; i < n; ++i) {
    const float* xi = x + (size_t)i * C;  // (C)
    float* yi = y + (size_t)i * C;
    const double ss = lane_sum<double>(C, [&](size_t c) { return (double)xi[c] * xi[c]; });
    const float r = (float)(1.0 / std::sqrt(ss / C + (double)eps));
    for (int c = 0; c < C; ++c) yi[c] = (xi[c] * r) * w[c];
    rstd[i] = r;
  }
}
// Rows [0, n) likewise; pw (C) += the rows' dw in row order.
void rmsnorm_bwd_rows(const float* dy, const float* x, const float* rstd, const float* w, float* dx, float* pw,
                      int n, int C) {
  for (int i = 0; i < n; ++i) {
    const float* dyi = dy + (size_t)i * C;  // (C)
    const float* xi = x + (size_t)i * C;
    float* dxi = dx + (size_t)i * C;
    const float r = rstd[i];
    const double s = lane_sum<double>(C, [&](size_t c) { return (double)(dyi[c] * w[c]) * (xi[c] * r); });
    const float m = (float)(s / C);
    for (int c = 0; c < C; ++c) {
      const float xhat = xi[c] * r;
      dxi[c] = (dyi[c] * w[c] - xhat * m) * r;
      pw[c] += dyi[c] * xhat;
    }
  }
}
// dw (C) = the tiles' partial sums (tiles x C), added in tile order
void sum_tiles(const std::vector<float>& part, int tiles, int C, float* dw) {
  for (int c = 0; c < C; ++c) dw[c] = 0.0f;
  for (int t = 0; t < tiles; ++t)
    for (int c = 0; c < C; ++c) dw[c] += part[(size_t)t * C + c];
}
}  // namespace

void rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int N, int C, float eps) {
  rmsnorm_fwd_mixed({const_cast<float*>(x), false}, {const_cast<float*>(w), false}, {y, false}, rstd, N, C, eps);
}

void rmsnorm_fwd_mixed(Ew x, Ew w, Ew y, float* rstd, int N, int C, float eps) {
  const int rows = rows_per_tile(C);
  std::vector<float> wb;
  const float* wf = view(w, 0, (size_t)C, wb, true);
  parallel_tiles((N + rows - 1) / rows, [&](int t) {
    thread_local std::vector<float> xb, yb;
    const int i0 = t * rows, n = std::min(N, i0 + rows) - i0;
    const size_t s = (size_t)i0 * C, m = (size_t)n * C;
    float* yv = view(y, s, m, yb, false);
    rmsnorm_fwd_rows(view(x, s, m, xb, true), wf, yv, rstd + i0, n, C, eps);
    store_view(y, s, m, yv);
  });
}

void rmsnorm_bwd(const float* dy, const float* x, const float* rstd, const float* w, float* dx, float* dw, int N,
                 int C) {
  rmsnorm_bwd_mixed({const_cast<float*>(dy), false}, {const_cast<float*>(x), false}, rstd,
                    {const_cast<float*>(w), false}, {dx, false}, {dw, false}, N, C);
}

void rmsnorm_bwd_mixed(Ew dy, Ew x, const float* rstd, Ew w, Ew dx, Ew dw, int N, int C) {
  const int rows = rows_per_tile(C), tiles = (N + rows - 1) / rows;
  std::vector<float> part((size_t)std::max(tiles, 1) * C, 0.0f);  // per tile: dw (C)
  std::vector<float> wb, dwb;
  const float* wf = view(w, 0, (size_t)C, wb, true);
  parallel_tiles(tiles, [&](int t) {
    thread_local std::vector<float> dyb, xb, dxb;
    const int i0 = t * rows, n = std::min(N, i0 + rows) - i0;
    const size_t s = (size_t)i0 * C, m = (size_t)n * C;
    float* dxv = view(dx, s, m, dxb, false);
    rmsnorm_bwd_rows(view(dy, s, m, dyb, true), view(x, s, m, xb, true), rstd + i0, wf, dxv,
                     part.data() + (size_t)t * C, n, C);
    store_view(dx, s, m, dxv);
  });
  float* dwv = view(dw, 0, (size_t)C, dwb, false);
  sum_tiles(part, tiles, C, dwv);
  store_view(dw, 0, (size_t)C, dwv);
}

const char* rope_params_problem(const RopeParams& p) {
  if (!(p.theta > 0.0) || !std::isfinite(p.theta)) return "rope_theta must be a finite number > 0";
  if (!p.llama3) return "";
  if (!(p.factor > 0.0) || !std::isfinite(p.factor)) return "rope_scaling.factor must be a finite number > 0";
  if (!(p.low_freq_factor > 0.0) || !std::isfinite(p.low_freq_factor))
    return "rope_scaling.low_freq_factor must be a finite number > 0";
  if (!(p.high_freq_factor > p.low_freq_factor) || !std::isfinite(p.high_freq_factor))
    return "rope_scaling.high_freq_factor must be a finite number > low_freq_factor";
  if (!(p.original_max_position_embeddings > 0.0) || !std::isfinite(p.original_max_position_embeddings))
    return "rope_scaling.original_max_position_embeddings must be a number > 0";
  return "";
}

// HF's _compute_llama3_parameters, in double: wavelengths above old_ctx / low_freq_factor are
// slowed down by `factor`, those below old_ctx / high_freq_factor kept, those in between (bounds
// included) interpolated with s = (old_ctx / wavelen - low) / (high - low).
void rope_inv_freq(const RopeParams& p, int hs, double* inv_freq) {
  const int d = hs / 2;
  const double low_wavelen = p.original_max_position_embeddings / p.low_freq_factor;
  const double high_wavelen = p.original_max_position_embeddings / p.high_freq_factor;
  for (int i = 0; i < d; ++i) {
    const double f = 1.0 / std::pow(p.theta, (double)(2 * i) / hs);
    if (!p.llama3) {
      inv_freq[i] = f;
      continue;
    }
    const double wavelen = 2.0 * kPi / f;
    if (wavelen > low_wavelen) {
      inv_freq[i] = f / p.factor;
    } else if (wavelen < high_wavelen) {
      inv_freq[i] = f;
    } else {
      const double s = (p.original_max_position_embeddings / wavelen - p.low_freq_factor) /
                       (p.high_freq_factor - p.low_freq_factor);
      inv_freq[i] = (1.0 - s) * f / p.factor + s * f;
    }
  }
}

void rope_table(const RopeParams& p, int Tmax, int hs, float* table) {
  const int d = hs / 2;
  std::vector<double> f((size_t)std::max(d, 1));
  rope_inv_freq(p, hs, f.data());
  float* cs = table;                 // (Tmax, d)
  float* sn = table + (size_t)Tmax * d;  // (Tmax, d)
  for (int t = 0; t < Tmax; ++t)
    for (int i = 0; i < d; ++i) {
      const double a = (double)t * f[i];
      cs[(size_t)t * d + i] = (float)std::cos(a);
      sn[(size_t)t * d + i] = (float)std::sin(a);
    }
}

namespace {
// sign +1: the forward rotation, -1: its transpose. Rows [r0, r0 + n) of x, from row r0's start.
void rope_rows(float* x, const float* cos, const float* sin, int r0, int n, int T, int NH, int hs, int pos0,
               float sign) {
  const int d = hs / 2, C = NH * hs;
  for (int r = r0; r < r0 + n; ++r) {
    const size_t pos = (size_t)pos0 + r % T;
    const float* c = cos + pos * d;  // (d)
    const float* s = sin + pos * d;
    for (int h = 0; h < NH; ++h) {
      float* a = x + (size_t)(r - r0) * C + (size_t)h * hs;  // first half
      float* b = a + d;                                      // second half
      for (int i = 0; i < d; ++i) {
        const float ai = a[i], bi = b[i], si = sign * s[i];
        a[i] = ai * c[i] - bi * si;
        b[i] = bi * c[i] + ai * si;
      }
    }
  }
}
}  // namespace

// Tiles of rows (B*T rows of NH*hs).
void rope_mixed(bool fwd, Ew x, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0) {
  const int C = NH * hs, N = B * T;
  const int rows = rows_per_tile(C);
  parallel_tiles((N + rows - 1) / rows, [&](int tile) {
    thread_local std::vector<float> xb;
    const int r0 = tile * rows, n = std::min(N, r0 + rows) - r0;
    const size_t s = (size_t)r0 * C, m = (size_t)n * C;
    float* xv = view(x, s, m, xb, true);
    rope_rows(xv, cos, sin, r0, n, T, NH, hs, pos0, fwd ? 1.0f : -1.0f);
    store_view(x, s, m, xv);
  });
}

void rope_fwd(float* x, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0) {
  rope_mixed(true, {x, false}, cos, sin, B, T, NH, hs, pos0);
}

void rope_bwd(float* dx, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0) {
  rope_mixed(false, {dx, false}, cos, sin, B, T, NH, hs, pos0);
}

}  // namespace zf::kernels::cpu
