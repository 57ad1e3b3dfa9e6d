// Mean, max and last-position pooling over the valid positions of padded sequences, and their
// backward (bitwise equal to the CPU kernels: the same sums and comparisons in the same order; the
// max gradient goes to the first position holding the maximum, as on the CPU).
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

__global__ void mean_pool_fwd_k(const float* x, const int32_t* len, float* y, int T, int C, size_t n) {
  ZF_GRID_STRIDE(e, n) {
    const size_t b = e / (size_t)C;
    const int c = (int)(e - b * C);
    const int L = len[b];
    float acc = 0.0f;
    for (int t = 0; t < L; ++t) acc += x[(b * T + t) * C + c];
    const float inv = 1.0f / (float)L;
    y[e] = acc * inv;
  }
}

__global__ void mean_pool_bwd_k(const float* dy, const int32_t* len, float* dx, int T, int C, size_t n) {
  ZF_GRID_STRIDE(e, n) {
    const size_t bt = e / (size_t)C;
    const int c = (int)(e - bt * C);
    const size_t b = bt / (size_t)T;
    const int t = (int)(bt - b * T);
    const float inv = 1.0f / (float)len[b];
    dx[e] = t < len[b] ? dy[b * C + c] * inv : 0.0f;
  }
}

// one thread per (b, c): the CPU's scan over t, strict '>' so the first maximum wins
__global__ void max_pool_fwd_k(const float* x, const int32_t* len, float* y, int T, int C, size_t n) {
  ZF_GRID_STRIDE(e, n) {
    const size_t b = e / (size_t)C;
    const int c = (int)(e - b * C);
    const float* x0 = x + b * T * C + c;
    float m = x0[0];
    for (int t = 1; t < len[b]; ++t) m = x0[(size_t)t * C] > m ? x0[(size_t)t * C] : m;
    y[e] = m;
  }
}

__global__ void max_pool_bwd_k(const float* x, const float* dy, const int32_t* len, float* dx, int T, int C,
                               size_t n) {
  ZF_GRID_STRIDE(e, n) {
    const size_t b = e / (size_t)C;
    const int c = (int)(e - b * C);
    const float* x0 = x + b * T * C + c;
    int arg = 0;
    for (int t = 1; t < len[b]; ++t)
      if (x0[(size_t)t * C] > x0[(size_t)arg * C]) arg = t;
    float* d0 = dx + b * T * C + c;
    for (int t = 0; t < T; ++t) d0[(size_t)t * C] = t == arg ? dy[e] : 0.0f;
  }
}

__global__ void last_pool_fwd_k(const float* x, const int32_t* len, float* y, int T, int C, size_t n) {
  ZF_GRID_STRIDE(e, n) {
    const size_t b = e / (size_t)C;
    const int c = (int)(e - b * C);
    y[e] = x[(b * T + (size_t)(len[b] - 1)) * C + c];
  }
}

__global__ void last_pool_bwd_k(const float* dy, const int32_t* len, float* dx, int T, int C, size_t n) {
  ZF_GRID_STRIDE(e, n) {
    const size_t bt = e / (size_t)C;
    const int c = (int)(e - bt * C);
    const size_t b = bt / (size_t)T;
    const int t = (int)(bt - b * T);
    dx[e] = t == len[b] - 1 ? dy[b * C + c] : 0.0f;
  }
}

}  // namespace

Status mean_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C, cudaStream_t s) {
  const size_t n = (size_t)B * C;
  if (!n) return nullptr;
  mean_pool_fwd_k<<<blocks_for(n), kThreads, 0, s>>>(x, len, y, T, C, n);
  return launched();
}

Status mean_pool_bwd(const float* dy, const int32_t* len, float* dx, int B, int T, int C, cudaStream_t s) {
  const size_t n = (size_t)B * T * C;
  if (!n) return nullptr;
  mean_pool_bwd_k<<<blocks_for(n), kThreads, 0, s>>>(dy, len, dx, T, C, n);
  return launched();
}

Status max_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C, cudaStream_t s) {
  const size_t n = (size_t)B * C;
  if (!n) return nullptr;
  max_pool_fwd_k<<<blocks_for(n), kThreads, 0, s>>>(x, len, y, T, C, n);
  return launched();
}

Status max_pool_bwd(const float* x, const float* dy, const int32_t* len, float* dx, int B, int T, int C,
                    cudaStream_t s) {
  const size_t n = (size_t)B * C;
  if (!n) return nullptr;
  max_pool_bwd_k<<<blocks_for(n), kThreads, 0, s>>>(x, dy, len, dx, T, C, n);
  return launched();
}

Status last_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C, cudaStream_t s) {
  const size_t n = (size_t)B * C;
  if (!n) return nullptr;
  last_pool_fwd_k<<<blocks_for(n), kThreads, 0, s>>>(x, len, y, T, C, n);
  return launched();
}

Status last_pool_bwd(const float* dy, const int32_t* len, float* dx, int B, int T, int C, cudaStream_t s) {
  const size_t n = (size_t)B * T * C;
  if (!n) return nullptr;
  last_pool_bwd_k<<<blocks_for(n), kThreads, 0, s>>>(dy, len, dx, T, C, n);
  return launched();
}

}  // namespace zf::kernels::cuda
