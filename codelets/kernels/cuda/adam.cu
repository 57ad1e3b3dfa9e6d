// AdamW (torch.optim.AdamW) on the GPU, the CPU kernel's operation sequence element for element
// (coefficients computed on the host in double and rounded to float once, as cpu/adam.cpp;
// no FMA, IEEE sqrt and division): bitwise equal to kernels::cpu::adam_step. Also the fused
// accumulate + AdamW + clear pass and selective AdamW on the selected columns of a weight.
#include <cmath>

#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

struct Coef {
  float gs, b1, ob1, b2, ob2, inv_sqrt_bc2, eps, lr_wd, step_size;
};

Coef coef(const AdamParams& hp, int64_t step, float grad_scale) {
  const double bc1 = 1.0 - std::pow((double)hp.beta1, (double)step);
  const double bc2 = 1.0 - std::pow((double)hp.beta2, (double)step);
  return {grad_scale,
          hp.beta1,
          1.0f - hp.beta1,
          hp.beta2,
          1.0f - hp.beta2,
          (float)(1.0 / std::sqrt(bc2)),
          hp.eps,
          hp.lr * hp.weight_decay,
          (float)(hp.lr / bc1)};
}

__device__ inline void update(float& p, float gi, float& m, float& v, const Coef& c) {
  gi = gi * c.gs;
  const float mi = c.b1 * m + c.ob1 * gi;
  const float vi = c.b2 * v + c.ob2 * (gi * gi);
  m = mi;
  v = vi;
  const float denom = __fsqrt_rn(vi) * c.inv_sqrt_bc2 + c.eps;
  p = (p - c.lr_wd * p) - c.step_size * __fdiv_rn(mi, denom);
}

__global__ void adam_k(float* p, const float* g, float* m, float* v, size_t n, Coef c) {
  ZF_GRID_STRIDE(i, n) {
    float pi = p[i], mi = m[i], vi = v[i];
    update(pi, g[i], mi, vi, c);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

// (R, k) elements: w[i, sel[c]] with g[i, sel[c]] and m, v [i, c]; in_out (R = rows): w, g stored
// (C, R), m, v (k, R), element e = (c, i)
// x: null, in place on w; else the fp32 master of the selected elements (indexed as m and v; fill:
// first taken from w), whose result is also written into w (cpu::selective_adam_master)
__global__ void selective_adam_k(float* w, int C, const int32_t* sel, int k, const float* g, float* x, bool fill,
                                 float* m, float* v, size_t n, Coef c, int in_out_rows) {
  ZF_GRID_STRIDE(e, n) {
    size_t at;
    if (in_out_rows > 0) {
      const size_t cc = e / (size_t)in_out_rows;
      at = (size_t)sel[cc] * in_out_rows + (e - cc * in_out_rows);
    } else {
      const size_t i = e / (size_t)k;
      at = i * C + sel[e - i * k];
    }
    float* pw = w + at;
    float pi = x && !fill ? x[e] : *pw, mi = m[e], vi = v[e];
    update(pi, g[at], mi, vi, c);
    if (x) x[e] = pi;
    *pw = pi;
    m[e] = mi;
    v[e] = vi;
  }
}

// ZeRO stage 3: the selected elements of the weight's segment [lo, hi) (w, g hold that segment),
// m and v indexed from selected_before(lo). Thread t: in_out, selected column t / R, row t % R;
// else row lo / C + t / k, selected column t % k.
__global__ void selective_adam_segment_k(float* w, size_t lo, size_t hi, int R, int C, const int32_t* sel, int k,
                                         const float* g, float* x, bool fill, float* m, float* v, size_t n, Coef c,
                                         bool in_out) {
  const size_t m0 = selected_before_at(lo, R, C, sel, k, in_out);
  ZF_GRID_STRIDE(t, n) {
    size_t e, mi;
    if (in_out) {
      const size_t q = t / (size_t)R, i = t - q * (size_t)R;
      e = (size_t)sel[q] * R + i;
      mi = t;
    } else {
      const size_t r = lo / (size_t)C + t / (size_t)k, q = t % (size_t)k;
      e = r * C + (size_t)sel[q];
      mi = r * k + q;
    }
    if (e < lo || e >= hi) continue;
    float pi = x && !fill ? x[mi - m0] : w[e - lo], mv = m[mi - m0], vv = v[mi - m0];
    update(pi, g[e - lo], mv, vv, c);
    if (x) x[mi - m0] = pi;
    w[e - lo] = pi;
    m[mi - m0] = mv;
    v[mi - m0] = vv;
  }
}

}  // namespace

Status adam_step(float* p, const float* g, float* m, float* v, size_t n, const AdamParams& hp, int64_t step,
                 float grad_scale, cudaStream_t s) {
  if (!n) return nullptr;
  adam_k<<<blocks_for(n), kThreads, 0, s>>>(p, g, m, v, n, coef(hp, step, grad_scale));
  return launched();
}

Status selective_adam(float* w, int R, int C, const int32_t* sel, int k, const float* g, float* m, float* v,
                      const AdamParams& hp, int64_t step, cudaStream_t s, bool in_out) {
  return selective_adam_master(w, R, C, sel, k, g, nullptr, false, m, v, hp, step, s, in_out);
}

Status selective_adam_master(float* w, int R, int C, const int32_t* sel, int k, const float* g, float* x, bool fill,
                             float* m, float* v, const AdamParams& hp, int64_t step, cudaStream_t s, bool in_out) {
  const size_t n = (size_t)R * k;
  if (!n) return nullptr;
  selective_adam_k<<<blocks_for(n), kThreads, 0, s>>>(w, C, sel, k, g, x, fill, m, v, n, coef(hp, step, 1.0f),
                                                      in_out ? R : 0);
  return launched();
}

Status selective_adam_segment(float* w, size_t lo, size_t hi, int R, int C, const int32_t* sel, int k,
                              const float* g, float* m, float* v, const AdamParams& hp, int64_t step, cudaStream_t s,
                              bool in_out) {
  return selective_adam_segment_master(w, lo, hi, R, C, sel, k, g, nullptr, false, m, v, hp, step, s, in_out);
}

Status selective_adam_segment_master(float* w, size_t lo, size_t hi, int R, int C, const int32_t* sel, int k,
                                     const float* g, float* x, bool fill, float* m, float* v, const AdamParams& hp,
                                     int64_t step, cudaStream_t s, bool in_out) {
  if (hi <= lo || k <= 0) return nullptr;
  const size_t n = in_out ? (size_t)k * R : ((hi - 1) / (size_t)C - lo / (size_t)C + 1) * (size_t)k;
  selective_adam_segment_k<<<blocks_for(n), kThreads, 0, s>>>(w, lo, hi, R, C, sel, k, g, x, fill, m, v, n,
                                                              coef(hp, step, 1.0f), in_out);
  return launched();
}

}  // namespace zf::kernels::cuda
