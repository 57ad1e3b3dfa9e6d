// One GEMM on the calling thread through oneDNN's matmul primitive (the CPU kernel library
// PyTorch uses), for the matmul kernels' tiles (kernels/cpu/matmul.cpp). C (M, N), row-major with
// leading dimension ldc, = A B (accumulate: C += A B); A is (M, K) row-major with leading
// dimension lda, or its transpose (K, M) stored row-major (ta), B likewise (K, N) or (N, K) (tb),
// as in CBLAS. bf16: A and B hold bf16 values (kernels/bf16.hpp), products summed in fp32, C fp32.
// alpha scales the product (C = alpha A B, an output scale of the primitive). batch > 1: that many
// independent GEMMs of the same shape in one call (a batched matmul), the i-th on A + i sa, B + i sb
// and C + i sc (strides in elements; the attention's heads, kernels/cpu/attention.cpp).
// c_bf16 (bf16 A and B, no accumulate, batch 1): C holds bf16 values, the fp32 sum rounded once by
// the primitive (VCVTNEPS2BF16: to nearest even, as kernels/bf16.hpp, but an fp32 sum below the
// smallest normal, 2^-126 in magnitude, becomes a zero of its sign); bias (then given to dnnl_gemm):
// an fp32 row of N values added to every row of the fp32 sum before that rounding.
//
// A primitive is created once per distinct call shape (layouts, leading dimensions, accumulate,
// data type) and kept for the process; creating and running are safe from concurrent threads.
// Every call runs on its caller's thread alone (one OpenMP thread, its own scratchpad), and a
// primitive's order of summation depends on its shape only: the same call gives the same bits
// however many threads run other calls at the same time.
#pragma once
#include <cstdint>

namespace zf::kernels::cpu {

struct GemmShape {
  int M, N, K;
  bool ta, tb;
  int lda, ldb, ldc;
  bool accumulate;
  bool bf16;
  float alpha = 1.0f;
  int batch = 1;
  int64_t sa = 0, sb = 0, sc = 0;
  bool c_bf16 = false, bias = false;
};
void dnnl_gemm(const GemmShape& s, const void* A, const void* B, void* C, const float* bias = nullptr);

// The CPU runs bf16 dot products natively (oneDNN's ISA at least avx512_core_bf16: AVX512_BF16
// or AMX; ONEDNN_MAX_CPU_ISA can lower it).
bool native_bf16();
// oneDNN's implementation for a call shape ("brg:avx512_core", ...), for benchmarks and docs
const char* dnnl_gemm_impl(const GemmShape& s);

}  // namespace zf::kernels::cpu
