// Internal helpers of the CUDA kernels: launch geometry, error texts, the bf16 GEMMs, stream-ordered
// scratch and a deterministic column sum (fixed row chunks, then the chunks in order).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "codelets/kernels/cuda/kernels.hpp"

namespace zf::kernels::cuda::detail {

constexpr int kThreads = 256;
// Rows per chunk of a column sum: up to this many rows, a column is summed in row order exactly
// as the CPU kernel does (bitwise equal); beyond, chunk sums are added in chunk order.
constexpr int kColChunk = 64;

inline unsigned blocks_for(size_t n, int threads = kThreads) {
  size_t b = (n + threads - 1) / threads;
  if (b == 0) b = 1;
  return b > 0x7fffffffu ? 0x7fffffffu : (unsigned)b;  // grid-stride loops cover the rest
}

// The launch status of the kernels just queued (no synchronization).
inline Status launched() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}
inline Status check(cudaError_t e) { return e == cudaSuccess ? nullptr : cudaGetErrorString(e); }
Status check(cublasStatus_t st);

// Precision bf16's products (matmul.cu, attention.cu): C (m, n) col-major (fp32) = alpha op(A) op(B)
// + beta C on bf16 operands (bits as kernels/bf16.hpp's), products summed in fp32 (cublasGemmEx /
// cublasGemmStridedBatchedEx, CUDA_R_16BF operands, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT: the
// tensor cores of sm_80 and later). On the handle's stream.
Status gemm_bf16(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                 const uint16_t* A, int lda, const uint16_t* B, int ldb, float beta, float* C, int ldc);
Status gemm_strided_bf16(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         float alpha, const uint16_t* A, int lda, long long sa, const uint16_t* B, int ldb,
                         long long sb, float beta, float* C, int ldc, long long sc, int batch);

// Scratch from the stream's pool; freed in stream order with scratch_free.
inline Status scratch_alloc(void** p, size_t bytes, cudaStream_t s) {
  return check(cudaMallocAsync(p, bytes ? bytes : 16, s));
}
inline void scratch_free(void* p, cudaStream_t s) {
  if (p) cudaFreeAsync(p, s);
}

#define ZF_GRID_STRIDE(i, n) \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// out[j] = sum over rows i of f(i, j) for an (R, C) problem, deterministic: row order inside
// chunks of kColChunk rows, chunks in order. f: __device__ float (int i, int j).
template <class F>
__global__ void colsum_chunks(int R, int C, F f, float* part) {  // part (nchunk, C)
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int ch = blockIdx.y;
  if (j >= C) return;
  const int i0 = ch * kColChunk, i1 = min(R, i0 + kColChunk);
  float acc = 0.0f;
  for (int i = i0; i < i1; ++i) acc += f(i, j);
  part[(size_t)ch * C + j] = acc;
}
__global__ void colsum_finish(const float* part, int nchunk, int C, float* out);

template <class F>
Status colsum(int R, int C, F f, float* out, cudaStream_t s) {
  const int nchunk = (R + kColChunk - 1) / kColChunk;
  const dim3 grid(blocks_for((size_t)C), nchunk > 0 ? nchunk : 1);
  if (nchunk <= 1) {  // one chunk: straight into out
    colsum_chunks<<<grid, kThreads, 0, s>>>(R, C, f, out);
    return launched();
  }
  void* part = nullptr;
  if (Status e = scratch_alloc(&part, (size_t)nchunk * C * sizeof(float), s)) return e;
  colsum_chunks<<<grid, kThreads, 0, s>>>(R, C, f, (float*)part);
  colsum_finish<<<blocks_for((size_t)C), kThreads, 0, s>>>((const float*)part, nchunk, C, out);
  Status st = launched();
  scratch_free(part, s);
  return st;
}

// Block-wide sum / max (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
template <class T>
__device__ T block_sum(T v, T* shared /* 32 */) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int nw = blockDim.x >> 5;
  T r = lane < nw ? shared[lane] : T(0);
  for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  return r;
}
__device__ inline float block_max(float v, float* shared /* 32 */) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int nw = blockDim.x >> 5;
  float r = lane < nw ? shared[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, o));
  return r;
}

// ZenFlow's selections (sel: k sorted column indices): the first index q with sel[q] >= col, and
// cpu::selected_before's count (the index into m and v of a selected element e of the weight)
__device__ inline int lower_bound_sel(const int32_t* sel, int k, int col) {
  int lo = 0, hi = k;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (sel[mid] < col) lo = mid + 1; else hi = mid;
  }
  return lo;
}
__device__ inline size_t selected_before_at(size_t e, int R, int C, const int32_t* sel, int k, bool in_out) {
  if (in_out) {  // (k, R): whole selected columns before e's column, then e's column's rows before e
    const size_t col = e / (size_t)R;
    const int q = lower_bound_sel(sel, k, (int)min(col, (size_t)C));
    size_t n = (size_t)q * (size_t)R;
    if (q < k && (size_t)sel[q] == col) n += e % (size_t)R;
    return n;
  }
  const size_t row = e / (size_t)C, col = e % (size_t)C;  // (R, k): k per row before e's row
  return row * (size_t)k + (size_t)lower_bound_sel(sel, k, (int)col);
}

}  // namespace zf::kernels::cuda::detail
