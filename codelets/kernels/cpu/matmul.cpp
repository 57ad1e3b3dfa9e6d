// Matmul forward and backward through CBLAS (OpenBLAS), single-threaded per call.
// y = x w^T, dw = dy^T x, dx = dy w; matches tests/reference/reference.hpp. A weight stored
// (in, out) (w_in_out: w^T row-major, ZenFlow's column-contiguous layout, docs/zenflow.md) only
// changes the BLAS transpose flags and the leading dimension.
#include "codelets/kernels/cpu/kernels.hpp"

#include <cblas.h>

#include <algorithm>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace zf::kernels::cpu {

void blas_single_thread() { openblas_set_num_threads(1); }

// Small batches: OpenBLAS's SGEMM packs the whole weight matrix first, which made a batch of 1-4
// rows 3-4x slower than SGEMV (B = 1) and a row-by-row rank-B update of dw (B <= 4), both of which
// stream the weights once (memory-bound either way).
constexpr int kSmallBatch = 4;
constexpr int kStreamMinN = 256;  // below, a row of w is too short for the streaming loop to pay
void matmul_fwd(const float* x, const float* w, float* y, int B, int K, int N, bool w_in_out) {
  if (w_in_out) {  // w (K, N)
    if (B <= kSmallBatch && N >= kStreamMinN) {
      // y[b, :] = sum over k of x[b, k] w[k, :], in k order: one pass over w (memory-bound, like
      // SGEMV); OpenBLAS's SGEMM took 1.6x as long here for the headline's first layer (2 x 784 x
      // 16384), packing w first. Column blocks keep the B rows of y in L1.
      constexpr int kCols = 2048;
      for (int n0 = 0; n0 < N; n0 += kCols) {
        const int nn = std::min(kCols, N - n0);
        for (int b = 0; b < B; ++b) std::fill(y + (size_t)b * N + n0, y + (size_t)b * N + n0 + nn, 0.0f);
        for (int k = 0; k < K; ++k) {
          const float* wr = w + (size_t)k * N + n0;
          for (int b = 0; b < B; ++b) {
            const float xb = x[(size_t)b * K + k];
            float* yr = y + (size_t)b * N + n0;
            for (int n = 0; n < nn; ++n) yr[n] += xb * wr[n];
          }
        }
      }
      return;
    }
    if (B == 1) return cblas_sgemv(CblasRowMajor, CblasTrans, K, N, 1.0f, w, N, x, 1, 0.0f, y, 1);
    return cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, N, K, 1.0f, x, K, w, N, 0.0f, y, N);
  }
  if (B == 1) return cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, w, K, x, 1, 0.0f, y, 1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
}

void matmul_bwd_weight(const float* dy, const float* x, float* dw, int B, int K, int N,
                       bool accumulate, bool dw_in_out) {
  if (dw_in_out) {  // dw (K, N) = x^T dy
    if (B <= kSmallBatch) {  // dw[k, :] (+)= sum over b of x[b, k] dy[b, :]: the same products and
      for (int k = 0; k < K; ++k) {  // sums, in the same order, as the (N, K) loop below
        float* row = dw + (size_t)k * N;
        const float x0 = x[k];
        if (accumulate)
          for (int n = 0; n < N; ++n) row[n] += dy[n] * x0;
        else
          for (int n = 0; n < N; ++n) row[n] = dy[n] * x0;
        for (int b = 1; b < B; ++b) {
          const float xb = x[(size_t)b * K + k];
          const float* d = dy + (size_t)b * N;
          for (int n = 0; n < N; ++n) row[n] += d[n] * xb;
        }
      }
      return;
    }
    return cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, B, 1.0f, x, K, dy, N,
                       accumulate ? 1.0f : 0.0f, dw, N);
  }
  if (B <= kSmallBatch) {  // dw[n, :] (+)= sum over b of dy[b, n] x[b, :], one pass over dw
    for (int n = 0; n < N; ++n) {
      float* row = dw + (size_t)n * K;
      const float d0 = dy[n];
      if (accumulate)
        for (int k = 0; k < K; ++k) row[k] += d0 * x[k];
      else
        for (int k = 0; k < K; ++k) row[k] = d0 * x[k];
      for (int b = 1; b < B; ++b) {
        const float d = dy[(size_t)b * N + n];
        const float* xb = x + (size_t)b * K;
        for (int k = 0; k < K; ++k) row[k] += d * xb[k];
      }
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, B, 1.0f, dy, N, x, K,
              accumulate ? 1.0f : 0.0f, dw, K);
}

void matmul_bwd_data(const float* dy, const float* w, float* dx, int B, int K, int N, bool w_in_out) {
  if (w_in_out) {  // w (K, N)
    if (B == 1) return cblas_sgemv(CblasRowMajor, CblasNoTrans, K, N, 1.0f, w, N, dy, 1, 0.0f, dx, 1);
    // dx^T (K, B) = w (K, N) dy^T (N, B), through B x N and B x K scratch transposes: OpenBLAS's
    // no-transpose SGEMM, which the (N, K) layout takes, ran 1.6-2.4x faster than its
    // no-transpose / transpose one for the batch-8 MLP's shapes (K = N = 1024)
    std::vector<float> dyt((size_t)N * B), dxt((size_t)K * B);
    for (int b = 0; b < B; ++b)
      for (int n = 0; n < N; ++n) dyt[(size_t)n * B + b] = dy[(size_t)b * N + n];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, K, B, N, 1.0f, w, N, dyt.data(), B, 0.0f, dxt.data(), B);
    for (int k = 0; k < K; ++k)
      for (int b = 0; b < B; ++b) dx[(size_t)b * K + k] = dxt[(size_t)k * B + b];
    return;
  }
  if (B == 1) return cblas_sgemv(CblasRowMajor, CblasTrans, N, K, 1.0f, w, K, dy, 1, 0.0f, dx, 1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, K, N, 1.0f, dy, N, w, K, 0.0f, dx, K);
}

}  // namespace zf::kernels::cpu
