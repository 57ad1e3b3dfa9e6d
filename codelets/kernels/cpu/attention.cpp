// Causal multi-head self-attention (GPT-2), one (batch, head) at a time: the four products are
// single-threaded SGEMMs on strided views of qkv (B, T, 3C) = [q | k | v]; the causal softmax
// and its backward are plain loops. Forward: S = q k^T / sqrt(hs), att = softmax over j <= i,
// out = att v. Backward: datt = dout v^T, dv = att^T dout, dS = att * (datt - rowsum(att datt)),
// dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs). The full T x T products are computed; the
// entries above the diagonal of att are exact zeros, so they add nothing.
#include <cblas.h>

#include <cmath>

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

void attention_fwd(const float* qkv, float* out, float* att, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hs);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + (size_t)b * T * C3 + h * hs;  // (T, hs), row stride 3C
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + ((size_t)b * NH + h) * T * T;  // (T, T)
      float* o = out + (size_t)b * T * C + h * hs;    // (T, hs), row stride C
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, a, T);
      for (int i = 0; i < T; ++i) {
        float* row = a + (size_t)i * T;
        float mx = row[0];
        for (int j = 1; j <= i; ++j) mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
        for (int j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j <= i; ++j) row[j] *= inv;
        for (int j = i + 1; j < T; ++j) row[j] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, C3, 0.0f, o, C);
    }
}

void attention_bwd(const float* dout, const float* qkv, const float* att, float* dqkv, float* scratch,
                   int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt((float)hs);
  float* ds = scratch;  // (T, T): datt, then dS in place
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + (size_t)b * T * C3 + h * hs;  // (T, hs), row stride 3C
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + (size_t)b * T * C3 + h * hs;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + ((size_t)b * NH + h) * T * T;  // (T, T)
      const float* dO = dout + (size_t)b * T * C + h * hs;  // (T, hs), row stride C
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dO, C, v, C3, 0.0f, ds, T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, dO, C, 0.0f, dv, C3);
      for (int i = 0; i < T; ++i) {
        const float* ar = a + (size_t)i * T;
        float* dr = ds + (size_t)i * T;
        float dot = 0.0f;
        for (int j = 0; j <= i; ++j) dot += ar[j] * dr[j];
        for (int j = 0; j <= i; ++j) dr[j] = ar[j] * (dr[j] - dot);
        for (int j = i + 1; j < T; ++j) dr[j] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, ds, T, k, C3, 0.0f, dq, C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, ds, T, q, C3, 0.0f, dk, C3);
    }
}

}  // namespace zf::kernels::cpu
