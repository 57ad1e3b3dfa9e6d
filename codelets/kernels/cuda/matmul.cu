// Matmuls through cuBLAS. Our tensors are row-major; cuBLAS is column-major, so each product is
// computed transposed (a row-major (r, c) matrix is a column-major (c, r) one):  y^T = w^T-op x^T,
// dw^T = x^T dy,  dx^T = w^T-op dy^T. in_out: the weight (and dw) is stored (K, N) row-major, a
// column-major (N, K) matrix (as kernels::cpu::matmul_*). fp32: cublasSgemm (the handle's default
// math mode). bf16 (precision bf16, as the CPU kernels' bf16 flag): both operands are rounded to
// bf16 (kernels/bf16.hpp, pack_bf16) into stream-ordered scratch and multiplied by cublasGemmEx
// with fp32 sums into the fp32 output (CUBLAS_COMPUTE_32F: tensor cores); the *_mixed launchers
// take an operand stored in bf16 (a parameter's or a linear layer's input under 2-byte storage) as
// it is, as kernels::cpu::matmul_*_mixed.
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
using namespace detail;

namespace {
using cpu::MatOperand;
MatOperand fp32(const float* p) { return {p, false}; }
// C (m, n) col-major = op(A) op(B) + beta C, A holding na and B nb elements, each fp32 or bf16 bits
// (a stored bf16 tensor as it is). bf16 products: the fp32 operands rounded into stream-ordered
// scratch, the bf16 ones read as they are; fp32 products: the bf16 operands widened into scratch.
Status gemm(bool bf16, cublasHandle_t h, cudaStream_t s, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
            int k, MatOperand A, int lda, size_t na, MatOperand B, int ldb, size_t nb, float beta, float* C, int ldc) {
  const float one = 1.0f;
  if (Status e = check(cublasSetStream(h, s))) return e;
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  // the bytes of each converted operand's copy, rounded up to 256 (each copy as aligned as an
  // allocation: the alignment cuBLAS chooses its kernels by, whichever operands are converted)
  auto bytes = [&](bool converted, size_t nx) { return converted ? (nx * elem + 255) / 256 * 256 : 0; };
  const size_t sa = bytes(A.bf16 != bf16, na), sb = bytes(B.bf16 != bf16, nb);
  void* scratch = nullptr;  // A's copy, then B's
  if (sa + sb)
    if (Status e = scratch_alloc(&scratch, sa + sb, s)) return e;
  char* next = static_cast<char*>(scratch);
  Status st = nullptr;
  auto operand = [&](MatOperand X, size_t nx, size_t copy_bytes) -> const void* {
    if (!copy_bytes || st) return X.p;
    void* out = next;
    next += copy_bytes;
    st = bf16 ? pack_bf16(static_cast<const float*>(X.p), static_cast<uint16_t*>(out), nx, s)
              : unpack_bf16(static_cast<const uint16_t*>(X.p), static_cast<float*>(out), nx, s);
    return out;
  };
  const void* a = operand(A, na, sa);
  const void* b = operand(B, nb, sb);
  if (!st)
    st = bf16 ? gemm_bf16(h, ta, tb, m, n, k, 1.0f, static_cast<const uint16_t*>(a), lda,
                          static_cast<const uint16_t*>(b), ldb, beta, C, ldc)
              : check(cublasSgemm(h, ta, tb, m, n, k, &one, static_cast<const float*>(a), lda,
                                  static_cast<const float*>(b), ldb, &beta, C, ldc));
  scratch_free(scratch, s);
  return st;
}
}  // namespace

// y (B, N) = x (B, K) w (N, K)^T  <=>  y^T (N, B) = op_T(w: col-major (K, N)) x^T (K, B)
Status matmul_fwd_mixed(MatOperand x, MatOperand w, float* y, int B, int K, int N, cublasHandle_t h, cudaStream_t s,
                        bool w_in_out, bool bf16) {
  const size_t nx = (size_t)B * K, nw = (size_t)N * K;
  if (w_in_out)  // y^T (N, B) = w (col-major (N, K)) x^T (K, B)
    return gemm(bf16, h, s, CUBLAS_OP_N, CUBLAS_OP_N, N, B, K, w, N, nw, x, K, nx, 0.0f, y, N);
  return gemm(bf16, h, s, CUBLAS_OP_T, CUBLAS_OP_N, N, B, K, w, K, nw, x, K, nx, 0.0f, y, N);
}

// dw (N, K) = dy (B, N)^T x (B, K)  <=>  dw^T (K, N) = x^T (K, B) op_T(dy^T: col-major (N, B))
Status matmul_bwd_weight_mixed(MatOperand dy, MatOperand x, float* dw, int B, int K, int N, bool accumulate,
                               cublasHandle_t h, cudaStream_t s, bool dw_in_out, bool bf16) {
  const float beta = accumulate ? 1.0f : 0.0f;
  const size_t ndy = (size_t)B * N, nx = (size_t)B * K;
  if (dw_in_out)  // dw (col-major (N, K)) = dy^T (N, B) op_T(x^T: col-major (K, B))
    return gemm(bf16, h, s, CUBLAS_OP_N, CUBLAS_OP_T, N, K, B, dy, N, ndy, x, K, nx, beta, dw, N);
  return gemm(bf16, h, s, CUBLAS_OP_N, CUBLAS_OP_T, K, N, B, x, K, nx, dy, N, ndy, beta, dw, K);
}

// dx (B, K) = dy (B, N) w (N, K)  <=>  dx^T (K, B) = w^T (K, N) dy^T (N, B)
Status matmul_bwd_data_mixed(MatOperand dy, MatOperand w, float* dx, int B, int K, int N, cublasHandle_t h,
                             cudaStream_t s, bool w_in_out, bool bf16) {
  const size_t ndy = (size_t)B * N, nw = (size_t)N * K;
  if (w_in_out)  // dx^T (K, B) = op_T(w: col-major (N, K)) dy^T (N, B)
    return gemm(bf16, h, s, CUBLAS_OP_T, CUBLAS_OP_N, K, B, N, w, N, nw, dy, N, ndy, 0.0f, dx, K);
  return gemm(bf16, h, s, CUBLAS_OP_N, CUBLAS_OP_N, K, B, N, w, K, nw, dy, N, ndy, 0.0f, dx, K);
}

Status matmul_fwd(const float* x, const float* w, float* y, int B, int K, int N, cublasHandle_t h, cudaStream_t s,
                  bool w_in_out, bool bf16) {
  return matmul_fwd_mixed(fp32(x), fp32(w), y, B, K, N, h, s, w_in_out, bf16);
}
Status matmul_bwd_weight(const float* dy, const float* x, float* dw, int B, int K, int N, bool accumulate,
                         cublasHandle_t h, cudaStream_t s, bool dw_in_out, bool bf16) {
  return matmul_bwd_weight_mixed(fp32(dy), fp32(x), dw, B, K, N, accumulate, h, s, dw_in_out, bf16);
}
Status matmul_bwd_data(const float* dy, const float* w, float* dx, int B, int K, int N, cublasHandle_t h,
                       cudaStream_t s, bool w_in_out, bool bf16) {
  return matmul_bwd_data_mixed(fp32(dy), fp32(w), dx, B, K, N, h, s, w_in_out, bf16);
}

}  // namespace zf::kernels::cuda
