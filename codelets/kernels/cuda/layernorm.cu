// LayerNorm on the GPU: one block per row for the statistics (double sums as the CPU kernel, in a
// tree order), dw and db as deterministic column sums (bitwise equal to the CPU for N <= 64 rows).
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

constexpr int kRowThreads = 256;

__global__ void layernorm_fwd_k(const float* x, const float* w, const float* b, float* y, float* mean,
                                float* rstd, int C, float eps) {
  __shared__ double sh[32];
  const size_t i = blockIdx.x;
  const float* xi = x + i * C;
  float* yi = y + i * C;
  double s = 0.0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += xi[c];
  s = block_sum(s, sh);
  const float m = (float)(s / C);
  double v = 0.0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const double d = (double)xi[c] - m;
    v += d * d;
  }
  v = block_sum(v, sh);
  const float r = (float)(1.0 / sqrt(v / C + (double)eps));
  for (int c = threadIdx.x; c < C; c += blockDim.x) yi[c] = (xi[c] - m) * r * w[c] + b[c];
  if (threadIdx.x == 0) {
    mean[i] = m;
    rstd[i] = r;
  }
}

__global__ void layernorm_bwd_dx_k(const float* dy, const float* x, const float* mean, const float* rstd,
                                   const float* w, float* dx, int C) {
  __shared__ double sh[32];
  const size_t i = blockIdx.x;
  const float* dyi = dy + i * C;
  const float* xi = x + i * C;
  float* dxi = dx + i * C;
  const float m = mean[i], r = rstd[i];
  double s1 = 0.0, s2 = 0.0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (xi[c] - m) * r;
    const float g = dyi[c] * w[c];
    s1 += g;
    s2 += (double)g * xhat;
  }
  s1 = block_sum(s1, sh);
  s2 = block_sum(s2, sh);
  const float mg = (float)(s1 / C), mgx = (float)(s2 / C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (xi[c] - m) * r;
    dxi[c] = (dyi[c] * w[c] - mg - xhat * mgx) * r;
  }
}

struct DyXhat {  // dy[i, c] * xhat[i, c]
  const float *dy, *x, *mean, *rstd;
  int C;
  __device__ float operator()(int i, int c) const {
    const size_t e = (size_t)i * C + c;
    return dy[e] * ((x[e] - mean[i]) * rstd[i]);
  }
};
struct Dy {
  const float* dy;
  int C;
  __device__ float operator()(int i, int c) const { return dy[(size_t)i * C + c]; }
};

}  // namespace

Status layernorm_fwd(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd, int N,
                     int C, float eps, cudaStream_t s) {
  if (N <= 0) return nullptr;
  layernorm_fwd_k<<<N, kRowThreads, 0, s>>>(x, w, b, y, mean, rstd, C, eps);
  return launched();
}

Status layernorm_bwd(const float* dy, const float* x, const float* mean, const float* rstd, const float* w,
                     float* dx, float* dw, float* db, int N, int C, cudaStream_t s) {
  if (N > 0) layernorm_bwd_dx_k<<<N, kRowThreads, 0, s>>>(dy, x, mean, rstd, w, dx, C);
  if (Status e = launched()) return e;
  if (Status e = colsum(N, C, DyXhat{dy, x, mean, rstd, C}, dw, s)) return e;
  return colsum(N, C, Dy{dy, C}, db, s);
}

}  // namespace zf::kernels::cuda
