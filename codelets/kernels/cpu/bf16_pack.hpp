// fp32 -> bf16 rounding of a run of values, inline for the kernels' operand packing (kernels/cpu/
// attention.cpp, bf16.cpp): bf16::from_float's bits for every input (round to nearest even, NaN
// kept a quiet NaN, subnormals rounded as any other value), 16 values an AVX-512 instruction where
// the build targets AVX-512 (ZF_NATIVE on such a CPU), the scalar rounding elsewhere and for the
// tail. Not VCVTNEPS2BF16 (AVX512_BF16): that one flushes subnormal inputs to zero.
#pragma once
#include <cstddef>
#include <cstdint>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "codelets/kernels/bf16.hpp"

namespace zf::kernels::cpu {

#if defined(__AVX512F__)
// bf16::from_float on 16 lanes of fp32 bits: the bf16 bits in the low half of each 32-bit lane,
// (u + 0x7fff + lowest kept bit) >> 16; a NaN: its upper half with the quiet bit set. Shared by
// to_bf16 and the fused bf16 AdamW (kernels/cpu/adam.cpp).
inline __m512i bf16_bits(__m512i u) {
  // the maskz forms with all lanes set: GCC 12's unmasked ones warn of an uninitialised operand
  const __mmask16 all = 0xffff;
  const __m512i hi = _mm512_maskz_srli_epi32(all, u, 16);
  const __m512i r = _mm512_maskz_srli_epi32(
      all, _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)))),
      16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
}
#endif

inline void to_bf16(const float* x, uint16_t* y, size_t n) {
  size_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const __mmask16 all = 0xffff;
  for (; i + 16 <= n; i += 16) {
    const __m512i r = bf16_bits(_mm512_loadu_si512(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_maskz_cvtepi32_epi16(all, r));  // truncating
  }
#endif
  for (; i < n; ++i) y[i] = bf16::from_float(x[i]);
}

}  // namespace zf::kernels::cpu
