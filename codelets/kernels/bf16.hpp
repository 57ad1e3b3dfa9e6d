// bfloat16 (bf16): the upper 16 bits of an IEEE fp32 (sign, 8 exponent bits, 7 mantissa bits).
// Shared by the CPU kernels (kernels/cpu/bf16.cpp) and the CUDA kernels (kernels/cuda/bf16.cu) so
// both round identically: fp32 -> bf16 rounds to nearest, ties to even (finite values too large
// become +-inf, as in IEEE rounding); NaN stays NaN (quiet bit set, sign kept); bf16 -> fp32 is exact.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ZF_BF16_HD __host__ __device__
#else
#define ZF_BF16_HD
#endif

namespace zf::kernels::bf16 {

ZF_BF16_HD inline uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

ZF_BF16_HD inline float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

ZF_BF16_HD inline uint16_t from_float(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);  // NaN: keep it a NaN
  // round to nearest even: add 0x7fff plus the lowest kept bit, then truncate (carries into the
  // exponent give the next binade, and the largest finite values round to infinity)
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

ZF_BF16_HD inline float to_float(uint16_t h) { return float_of((uint32_t)h << 16); }

// x rounded to the nearest bf16 value, as an fp32
ZF_BF16_HD inline float round(float x) { return to_float(from_float(x)); }

}  // namespace zf::kernels::bf16
