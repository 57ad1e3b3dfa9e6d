// Naive double-precision reference of the Llama family's layers (codelets/kernels/cpu/llama.cpp,
// the SwiGLU of elementwise.cpp, the grouped-query attention of attention.cpp; docs/llama.md):
// Hugging Face's formulas (LlamaRMSNorm, apply_rotary_pos_emb with rotate_half, the llama3
// rope_scaling of _compute_llama3_parameters, repeat_kv, the SiLU-gated MLP) as textbook loops,
// every intermediate in double. tests/kernels/test_kernels_llama.cpp checks the backward functions
// here by finite differences and the float kernels against them.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace zf::ref {

// y (N, C) = w * x / sqrt(mean(x^2) + eps); rstd (N)
inline void rmsnorm_fwd(const double* x, const double* w, double* y, double* rstd, int N, int C, double eps) {
  for (int i = 0; i < N; ++i) {
    double ss = 0.0;
    for (int c = 0; c < C; ++c) ss += x[(size_t)i * C + c] * x[(size_t)i * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) y[(size_t)i * C + c] = w[c] * x[(size_t)i * C + c] * r;
    rstd[i] = r;
  }
}

// dx (N, C), dw (C) overwritten: dy_c w_c r - x_j r^3 / C sum_c dy_c w_c x_c; dw = sum dy x r
inline void rmsnorm_bwd(const double* dy, const double* x, const double* rstd, const double* w, double* dx,
                        double* dw, int N, int C) {
  for (int c = 0; c < C; ++c) dw[c] = 0.0;
  for (int i = 0; i < N; ++i) {
    const double r = rstd[i];
    const double* xi = x + (size_t)i * C;
    const double* dyi = dy + (size_t)i * C;
    double dot = 0.0;  // sum_c dy_c w_c x_c
    for (int c = 0; c < C; ++c) dot += dyi[c] * w[c] * xi[c];
    for (int c = 0; c < C; ++c) {
      dx[(size_t)i * C + c] = dyi[c] * w[c] * r - xi[c] * r * r * r * dot / C;
      dw[c] += dyi[c] * xi[c] * r;
    }
  }
}

struct RopeRef {
  double theta = 10000.0;
  bool llama3 = false;
  double factor = 8.0, low = 1.0, high = 4.0, old_ctx = 8192.0;
};

// inv_freq[i] = 1 / theta^(2i / hs), i < hs/2; llama3: by wavelength 2 pi / f, above old_ctx/low
// f / factor, below old_ctx/high f, else the blend (1 - s) f / factor + s f with
// s = (old_ctx / wavelength - low) / (high - low).
inline std::vector<double> rope_inv_freq(const RopeRef& p, int hs) {
  std::vector<double> f(hs / 2);
  for (int i = 0; i < hs / 2; ++i) {
    const double base = 1.0 / std::pow(p.theta, 2.0 * i / hs);
    if (!p.llama3) {
      f[i] = base;
      continue;
    }
    const double wl = 2.0 * M_PI / base;
    if (wl < p.old_ctx / p.high) {
      f[i] = base;
    } else if (wl > p.old_ctx / p.low) {
      f[i] = base / p.factor;
    } else {
      const double s = (p.old_ctx / wl - p.low) / (p.high - p.low);
      f[i] = (1.0 - s) * base / p.factor + s * base;
    }
  }
  return f;
}

// HF's q * cos + rotate_half(q) * sin, cos and sin repeated over both halves (cat(freqs, freqs)),
// rotate_half(x) = cat(-x[d:], x[:d]); x, y (B, T, NH*hs), positions pos0 + t.
inline void rope_fwd(const double* x, double* y, const std::vector<double>& inv_freq, int B, int T, int NH, int hs,
                     int pos0) {
  const int d = hs / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        const size_t o = ((size_t)b * T + t) * NH * hs + (size_t)h * hs;
        for (int i = 0; i < hs; ++i) {
          const double ang = (double)(pos0 + t) * inv_freq[i % d];
          const double rot = i < d ? -x[o + i + d] : x[o + i - d];
          y[o + i] = x[o + i] * std::cos(ang) + rot * std::sin(ang);
        }
      }
}

// dx = R^T dy: the rotation by minus the angle
inline void rope_bwd(const double* dy, double* dx, const std::vector<double>& inv_freq, int B, int T, int NH, int hs,
                     int pos0) {
  const int d = hs / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        const size_t o = ((size_t)b * T + t) * NH * hs + (size_t)h * hs;
        for (int i = 0; i < hs; ++i) {
          const double ang = (double)(pos0 + t) * inv_freq[i % d];
          const double rot = i < d ? dy[o + i + d] : -dy[o + i - d];
          dx[o + i] = dy[o + i] * std::cos(ang) + rot * std::sin(ang);
        }
      }
}

// out = g sigma(g) u
inline void swiglu_fwd(const double* g, const double* u, double* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
}
inline void swiglu_bwd(const double* g, const double* u, const double* dout, double* dg, double* du, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-g[i]));
    dg[i] = dout[i] * u[i] * (s + g[i] * s * (1.0 - s));
    du[i] = dout[i] * g[i] * s;
  }
}

// Grouped-query causal attention: q, out (B, T, H*hs), k, v (B, T, Hkv*hs); head h uses KV head
// h / (H / Hkv) (repeat_kv); att (B, H, T, T) = softmax_j<=i(q_i . k_j / sqrt(hs)), 0 for j > i;
// lse (B, H, T), if given: each row's log-sum-exp of the scores.
inline void gqa_attention_fwd(const double* q, const double* k, const double* v, double* out, double* att, int B,
                              int T, int H, int Hkv, int hs, double* lse = nullptr) {
  const int G = H / Hkv;
  const double scale = 1.0 / std::sqrt((double)hs);
  auto qi = [&](int b, int t, int h, int d) { return q[((size_t)b * T + t) * H * hs + (size_t)h * hs + d]; };
  auto kv = [&](const double* m, int b, int t, int g, int d) {
    return m[((size_t)b * T + t) * Hkv * hs + (size_t)g * hs + d];
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        double* a = att + (((size_t)b * H + h) * T + i) * T;
        double mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double s = 0.0;
          for (int d = 0; d < hs; ++d) s += qi(b, i, h, d) * kv(k, b, j, h / G, d);
          a[j] = s * scale;
          if (a[j] > mx) mx = a[j];
        }
        double sum = 0.0;
        for (int j = 0; j <= i; ++j) sum += std::exp(a[j] - mx);
        if (lse) lse[((size_t)b * H + h) * T + i] = mx + std::log(sum);
        for (int j = 0; j <= i; ++j) a[j] = std::exp(a[j] - mx) / sum;
        for (int j = i + 1; j < T; ++j) a[j] = 0.0;
        for (int d = 0; d < hs; ++d) {
          double o = 0.0;
          for (int j = 0; j <= i; ++j) o += a[j] * kv(v, b, j, h / G, d);
          out[((size_t)b * T + i) * H * hs + (size_t)h * hs + d] = o;
        }
      }
}

// dq (B, T, H*hs), dk, dv (B, T, Hkv*hs) overwritten from dout and the saved att; a KV head
// collects the gradients of all its query heads.
inline void gqa_attention_bwd(const double* dout, const double* q, const double* k, const double* v,
                              const double* att, double* dq, double* dk, double* dv, int B, int T, int H, int Hkv,
                              int hs) {
  const int G = H / Hkv;
  const double scale = 1.0 / std::sqrt((double)hs);
  auto iq = [&](int b, int t, int h, int d) { return ((size_t)b * T + t) * H * hs + (size_t)h * hs + d; };
  auto ikv = [&](int b, int t, int g, int d) { return ((size_t)b * T + t) * Hkv * hs + (size_t)g * hs + d; };
  for (size_t i = 0; i < (size_t)B * T * H * hs; ++i) dq[i] = 0.0;
  for (size_t i = 0; i < (size_t)B * T * Hkv * hs; ++i) dk[i] = dv[i] = 0.0;
  std::vector<double> datt(T), ds(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int g = h / G;
      for (int i = 0; i < T; ++i) {
        const double* a = att + (((size_t)b * H + h) * T + i) * T;
        double dot = 0.0;
        for (int j = 0; j <= i; ++j) {
          datt[j] = 0.0;
          for (int d = 0; d < hs; ++d) datt[j] += dout[iq(b, i, h, d)] * v[ikv(b, j, g, d)];
          dot += a[j] * datt[j];
        }
        for (int j = 0; j <= i; ++j) {
          ds[j] = a[j] * (datt[j] - dot);
          for (int d = 0; d < hs; ++d) {
            dv[ikv(b, j, g, d)] += a[j] * dout[iq(b, i, h, d)];
            dq[iq(b, i, h, d)] += ds[j] * k[ikv(b, j, g, d)] * scale;
            dk[ikv(b, j, g, d)] += ds[j] * q[iq(b, i, h, d)] * scale;
          }
        }
      }
    }
}

}  // namespace zf::ref
