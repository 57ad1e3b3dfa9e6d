// Mean pooling over the valid positions of padded sequences, and its backward (bitwise equal to
// the CPU kernels: the same sums in the same order).
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

}  // namespace zf::kernels::cuda
