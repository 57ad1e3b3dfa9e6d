// bf16 conversions on the GPU, element by element with the CPU kernels' rounding
// (codelets/kernels/bf16.hpp), so results are bitwise equal.
#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

__global__ void pack_k(const float* x, uint16_t* y, size_t n) {
  ZF_GRID_STRIDE(i, n) y[i] = bf16::from_float(x[i]);
}
__global__ void unpack_k(const uint16_t* x, float* y, size_t n) {
  ZF_GRID_STRIDE(i, n) y[i] = bf16::to_float(x[i]);
}
__global__ void round_k(float* x, size_t n) {
  ZF_GRID_STRIDE(i, n) x[i] = bf16::round(x[i]);
}

}  // namespace

Status pack_bf16(const float* x, uint16_t* y, size_t n, cudaStream_t s) {
  if (!n) return nullptr;
  pack_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  return launched();
}

Status unpack_bf16(const uint16_t* x, float* y, size_t n, cudaStream_t s) {
  if (!n) return nullptr;
  unpack_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  return launched();
}

Status round_bf16(float* x, size_t n, cudaStream_t s) {
  if (!n) return nullptr;
  round_k<<<blocks_for(n), kThreads, 0, s>>>(x, n);
  return launched();
}

}  // namespace zf::kernels::cuda
