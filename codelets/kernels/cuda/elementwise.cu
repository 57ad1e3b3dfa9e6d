// Elementwise CUDA kernels: bias add and gradient, ReLU, GELU (the CPU kernel's tanh form through
// the same Cephes exp polynomial, so results are bitwise equal), accumulate, copy, zero.
#include "codelets/kernels/cuda/common.cuh"
#include "codelets/kernels/gelu_math.hpp"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

__global__ void bias_add_k(float* y, const float* b, size_t n, int N) {
  ZF_GRID_STRIDE(i, n) y[i] += b[i % (size_t)N];
}

struct RowsOf {  // f(i, j) = dy[i, j]
  const float* dy;
  int N;
  __device__ float operator()(int i, int j) const { return dy[(size_t)i * N + j]; }
};

__global__ void relu_fwd_k(const float* x, float* y, size_t n) {
  ZF_GRID_STRIDE(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void relu_bwd_k(const float* x, const float* dy, float* dx, size_t n) {
  ZF_GRID_STRIDE(i, n) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void gelu_fwd_k(const float* x, float* y, size_t n) {
  ZF_GRID_STRIDE(i, n) y[i] = gelu_math::gelu_fwd(x[i]);
}
__global__ void gelu_bwd_k(const float* x, const float* dy, float* dx, size_t n) {
  ZF_GRID_STRIDE(i, n) dx[i] = gelu_math::gelu_bwd(x[i], dy[i]);
}

__global__ void accumulate_k(float* acc, const float* g, size_t n, float scale) {
  ZF_GRID_STRIDE(i, n) acc[i] += scale * g[i];
}

}  // namespace

Status bias_add(float* y, const float* b, int B, int N, cudaStream_t s) {
  const size_t n = (size_t)B * N;
  bias_add_k<<<blocks_for(n), kThreads, 0, s>>>(y, b, n, N);
  return launched();
}

Status bias_grad(const float* dy, float* db, int B, int N, cudaStream_t s) {
  return colsum(B, N, RowsOf{dy, N}, db, s);
}

Status relu_fwd(const float* x, float* y, size_t n, cudaStream_t s) {
  if (!n) return nullptr;
  relu_fwd_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  return launched();
}
Status relu_bwd(const float* x, const float* dy, float* dx, size_t n, cudaStream_t s) {
  if (!n) return nullptr;
  relu_bwd_k<<<blocks_for(n), kThreads, 0, s>>>(x, dy, dx, n);
  return launched();
}
Status gelu_fwd(const float* x, float* y, size_t n, cudaStream_t s) {
  if (!n) return nullptr;
  gelu_fwd_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  return launched();
}
Status gelu_bwd(const float* x, const float* dy, float* dx, size_t n, cudaStream_t s) {
  if (!n) return nullptr;
  gelu_bwd_k<<<blocks_for(n), kThreads, 0, s>>>(x, dy, dx, n);
  return launched();
}

Status accumulate(float* acc, const float* g, size_t n, float scale, cudaStream_t s) {
  if (!n) return nullptr;
  accumulate_k<<<blocks_for(n), kThreads, 0, s>>>(acc, g, n, scale);
  return launched();
}
Status copy(float* dst, const float* src, size_t n, cudaStream_t s) {
  if (!n) return nullptr;
  return check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
}
Status zero_bytes(void* x, size_t bytes, cudaStream_t s) {
  if (!bytes) return nullptr;
  return check(cudaMemsetAsync(x, 0, bytes, s));
}
Status zero(float* x, size_t n, cudaStream_t s) { return zero_bytes(x, n * sizeof(float), s); }

}  // namespace zf::kernels::cuda
