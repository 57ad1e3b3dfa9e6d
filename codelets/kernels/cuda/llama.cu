// The Llama family's RMSNorm, rotary embeddings and SwiGLU on the GPU (cpu/llama.cpp and
// cpu/elementwise.cpp's algorithms): RMSNorm one block per row with the row sums in double (a tree
// order: equal to the CPU within rounding), its dw a deterministic column sum (common.cuh); the
// rotary embedding one thread per rotated pair and SwiGLU one thread per element, the CPU's
// operations in the CPU's order (silu_math.hpp; --fmad=false): bitwise equal to the CPU.
#include <cmath>

#include "codelets/kernels/cuda/common.cuh"
#include "codelets/kernels/silu_math.hpp"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

constexpr int kRowThreads = 256;

__global__ void rmsnorm_fwd_k(const float* x, const float* w, float* y, float* rstd, int C, float eps) {
  __shared__ double sh[32];
  const size_t i = blockIdx.x;
  const float* xi = x + i * C;
  float* yi = y + i * C;
  double ss = 0.0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) ss += (double)xi[c] * xi[c];
  ss = block_sum(ss, sh);
  const float r = (float)(1.0 / sqrt(ss / C + (double)eps));
  for (int c = threadIdx.x; c < C; c += blockDim.x) yi[c] = (xi[c] * r) * w[c];
  if (threadIdx.x == 0) rstd[i] = r;
}

__global__ void rmsnorm_bwd_dx_k(const float* dy, const float* x, const float* rstd, const float* w, float* dx,
                                 int C) {
  __shared__ double sh[32];
  const size_t i = blockIdx.x;
  const float* dyi = dy + i * C;
  const float* xi = x + i * C;
  float* dxi = dx + i * C;
  const float r = rstd[i];
  double s = 0.0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += (double)(dyi[c] * w[c]) * (xi[c] * r);
  s = block_sum(s, sh);
  const float m = (float)(s / C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = xi[c] * r;
    dxi[c] = (dyi[c] * w[c] - xhat * m) * r;
  }
}

struct DyXhat {  // dy[i, c] * (x[i, c] * rstd[i])
  const float *dy, *x, *rstd;
  int C;
  __device__ float operator()(int i, int c) const {
    const size_t e = (size_t)i * C + c;
    return dy[e] * (x[e] * rstd[i]);
  }
};

// One thread per pair (row r, head h, i < d); sign -1: the transpose (backward).
__global__ void rope_k(float* x, const float* cos, const float* sin, size_t pairs, int T, int NH, int hs, int pos0,
                       float sign) {
  const int d = hs / 2;
  ZF_GRID_STRIDE(e, pairs) {
    const int i = (int)(e % (size_t)d);
    const size_t rh = e / (size_t)d;  // row * NH + head
    const size_t r = rh / (size_t)NH;
    const size_t pos = (size_t)pos0 + r % (size_t)T;
    float* a = x + rh * hs + i;
    float* b = a + d;
    const float c = cos[pos * d + i], si = sign * sin[pos * d + i];
    const float ai = *a, bi = *b;
    *a = ai * c - bi * si;
    *b = bi * c + ai * si;
  }
}

__global__ void swiglu_fwd_k(const float* g, const float* u, float* out, size_t n) {
  ZF_GRID_STRIDE(i, n) out[i] = silu_math::swiglu_fwd(g[i], u[i]);
}
__global__ void swiglu_bwd_k(const float* g, const float* u, const float* dout, float* dg, float* du, size_t n) {
  ZF_GRID_STRIDE(i, n) silu_math::swiglu_bwd(g[i], u[i], dout[i], dg + i, du + i);
}

Status rope(float* x, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0, float sign,
            cudaStream_t s) {
  const size_t pairs = (size_t)B * T * NH * (hs / 2);
  if (pairs == 0) return nullptr;
  rope_k<<<blocks_for(pairs), kThreads, 0, s>>>(x, cos, sin, pairs, T, NH, hs, pos0, sign);
  return launched();
}

}  // namespace

Status rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int N, int C, float eps, cudaStream_t s) {
  if (N <= 0) return nullptr;
  rmsnorm_fwd_k<<<N, kRowThreads, 0, s>>>(x, w, y, rstd, C, eps);
  return launched();
}

Status rmsnorm_bwd(const float* dy, const float* x, const float* rstd, const float* w, float* dx, float* dw, int N,
                   int C, cudaStream_t s) {
  if (N > 0) rmsnorm_bwd_dx_k<<<N, kRowThreads, 0, s>>>(dy, x, rstd, w, dx, C);
  if (Status e = launched()) return e;
  return colsum(N, C, DyXhat{dy, x, rstd, C}, dw, s);
}

Status rope_fwd(float* x, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0,
                cudaStream_t s) {
  return rope(x, cos, sin, B, T, NH, hs, pos0, 1.0f, s);
}

Status rope_bwd(float* dx, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0,
                cudaStream_t s) {
  return rope(dx, cos, sin, B, T, NH, hs, pos0, -1.0f, s);
}

Status swiglu_fwd(const float* gate, const float* up, float* out, size_t n, cudaStream_t s) {
  if (n == 0) return nullptr;
  swiglu_fwd_k<<<blocks_for(n), kThreads, 0, s>>>(gate, up, out, n);
  return launched();
}

Status swiglu_bwd(const float* gate, const float* up, const float* dout, float* dgate, float* dup, size_t n,
                  cudaStream_t s) {
  if (n == 0) return nullptr;
  swiglu_bwd_k<<<blocks_for(n), kThreads, 0, s>>>(gate, up, dout, dgate, dup, n);
  return launched();
}

}  // namespace zf::kernels::cuda
