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
#include "runtime/parallel.hpp"

namespace zf::kernels::cpu {

namespace {
constexpr int kRowElems = 16384;
int rows_per_tile(int C) { return std::max(1, kRowElems / std::max(1, C)); }
constexpr double kPi = 3.14159265358979323846;
}  // namespace

void rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int N, int C, float eps) {
  const int rows = rows_per_tile(C);
  parallel_tiles((N + rows - 1) / rows, [&](int t) {
    for (int i = t * rows; i < std::min(N, (t + 1) * rows); ++i) {
      const float* xi = x + (size_t)i * C;  // (C)
      float* yi = y + (size_t)i * C;
      const double ss = lane_sum<double>(C, [&](size_t c) { return (double)xi[c] * xi[c]; });
      const float r = (float)(1.0 / std::sqrt(ss / C + (double)eps));
      for (int c = 0; c < C; ++c) yi[c] = (xi[c] * r) * w[c];
      rstd[i] = r;
    }
  });
}

void rmsnorm_bwd(const float* dy, const float* x, const float* rstd, const float* w, float* dx, float* dw, int N,
                 int C) {
  const int rows = rows_per_tile(C), tiles = (N + rows - 1) / rows;
  std::vector<float> part((size_t)std::max(tiles, 1) * C, 0.0f);  // per tile: dw (C)
  parallel_tiles(tiles, [&](int t) {
    float* pw = part.data() + (size_t)t * C;
    for (int i = t * rows; i < std::min(N, (t + 1) * rows); ++i) {
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
  });
  for (int c = 0; c < C; ++c) dw[c] = 0.0f;
  for (int t = 0; t < tiles; ++t)
    for (int c = 0; c < C; ++c) dw[c] += part[(size_t)t * C + c];
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
// sign +1: the forward rotation, -1: its transpose. Tiles of rows (B*T rows of NH*hs).
void rope_apply(float* x, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0, float sign) {
  const int d = hs / 2, C = NH * hs, N = B * T;
  const int rows = rows_per_tile(C);
  parallel_tiles((N + rows - 1) / rows, [&](int tile) {
    for (int r = tile * rows; r < std::min(N, (tile + 1) * rows); ++r) {
      const size_t pos = (size_t)pos0 + r % T;
      const float* c = cos + pos * d;  // (d)
      const float* s = sin + pos * d;
      for (int h = 0; h < NH; ++h) {
        float* a = x + (size_t)r * C + (size_t)h * hs;  // first half
        float* b = a + d;                               // second half
        for (int i = 0; i < d; ++i) {
          const float ai = a[i], bi = b[i], si = sign * s[i];
          a[i] = ai * c[i] - bi * si;
          b[i] = bi * c[i] + ai * si;
        }
      }
    }
  });
}
}  // namespace

void rope_fwd(float* x, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0) {
  rope_apply(x, cos, sin, B, T, NH, hs, pos0, 1.0f);
}

void rope_bwd(float* dx, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0) {
  rope_apply(dx, cos, sin, B, T, NH, hs, pos0, -1.0f);
}

}  // namespace zf::kernels::cpu
