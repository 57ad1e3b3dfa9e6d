// fp16 conversions on the host: F16C (8 values per instruction) where the build targets it, else
// element by element with codelets/kernels/fp16.hpp. Both give the same bits for every fp32 and
// fp16 value (checked exhaustively when this was written; the tests check rounding, subnormals,
// inf and NaN against a naive reference).
#include "codelets/kernels/fp16.hpp"

#include <algorithm>
#include <cmath>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

void pack_fp16(const float* x, uint16_t* y, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i*)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) y[i] = fp16::from_float(x[i]);
}

void unpack_fp16(const uint16_t* x, float* y, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(x + i))));
#endif
  for (; i < n; ++i) y[i] = fp16::to_float(x[i]);
}

size_t round_fp16(float* x, size_t n) {
  size_t bad = 0, i = 0;
#if defined(__F16C__)
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_castsi256_ps(_mm256_set1_epi32(0x7f800000));
  for (; i + 8 <= n; i += 8) {
    const __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    _mm256_storeu_ps(x + i, r);
    // |r| >= inf as integers: inf or NaN
    const __m256 a = _mm256_and_ps(r, absmask);
    bad += (size_t)__builtin_popcount(_mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ)));
  }
#endif
  for (; i < n; ++i) {
    x[i] = fp16::round(x[i]);
    bad += !std::isfinite(x[i]);
  }
  return bad;
}

void scale(float* x, size_t n, float s) {
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

size_t merge_unselected_fp16(float* dst, int C, const uint16_t* src, size_t off, size_t n, const int32_t* sel,
                             int k, int in_out_rows, size_t base) {
  return merge_unselected_unpacked(unpack_fp16, dst, C, src, off, n, sel, k, in_out_rows, base);
}

}  // namespace zf::kernels::cpu
