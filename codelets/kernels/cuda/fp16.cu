// fp16 conversions on the GPU, element by element with the CPU kernels' rounding
// (codelets/kernels/fp16.hpp), so results are bitwise equal; the rounding also raises the loss
// scaler's overflow flag when a rounded value is inf or NaN.
#include "codelets/kernels/fp16.hpp"
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

__global__ void pack_k(const float* x, uint16_t* y, size_t n) {
  ZF_GRID_STRIDE(i, n) y[i] = fp16::from_float(x[i]);
}
__global__ void unpack_k(const uint16_t* x, float* y, size_t n) {
  ZF_GRID_STRIDE(i, n) y[i] = fp16::to_float(x[i]);
}
__global__ void round_k(float* x, size_t n, uint32_t* flag) {
  bool bad = false;
  ZF_GRID_STRIDE(i, n) {
    const float r = fp16::round(x[i]);
    x[i] = r;
    bad |= !isfinite(r);
  }
  if (bad) atomicOr(flag, 1u);
}
__global__ void scale_k(float* x, size_t n, float s) {
  ZF_GRID_STRIDE(i, n) x[i] *= s;
}

}  // namespace

Status pack_fp16(const float* x, uint16_t* y, size_t n, cudaStream_t s) {
  if (!n) return nullptr;
  pack_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  return launched();
}

Status unpack_fp16(const uint16_t* x, float* y, size_t n, cudaStream_t s) {
  if (!n) return nullptr;
  unpack_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  return launched();
}

Status round_fp16(float* x, size_t n, uint32_t* flag, cudaStream_t s) {
  if (!n) return nullptr;
  round_k<<<blocks_for(n), kThreads, 0, s>>>(x, n, flag);
  return launched();
}

Status scale(float* x, size_t n, float f, cudaStream_t s) {
  if (!n) return nullptr;
  scale_k<<<blocks_for(n), kThreads, 0, s>>>(x, n, f);
  return launched();
}

}  // namespace zf::kernels::cuda
