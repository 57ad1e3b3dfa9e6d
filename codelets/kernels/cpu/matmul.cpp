// Matmul forward and backward through CBLAS (OpenBLAS), single-threaded per call.
// y = x w^T, dw = dy^T x, dx = dy w; matches tests/reference/reference.hpp.
#include "codelets/kernels/cpu/kernels.hpp"

#include <cblas.h>

extern "C" void openblas_set_num_threads(int);

namespace zf::kernels::cpu {

void blas_single_thread() { openblas_set_num_threads(1); }

void matmul_fwd(const float* x, const float* w, float* y, int B, int K, int N) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
}

void matmul_bwd_weight(const float* dy, const float* x, float* dw, int B, int K, int N,
                       bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, B, 1.0f, dy, N, x, K,
              accumulate ? 1.0f : 0.0f, dw, K);
}

void matmul_bwd_data(const float* dy, const float* w, float* dx, int B, int K, int N) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, K, N, 1.0f, dy, N, w, K, 0.0f, dx, K);
}

}  // namespace zf::kernels::cpu
