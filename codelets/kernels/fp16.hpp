// IEEE binary16 (fp16: sign, 5 exponent bits, 10 mantissa bits; largest finite 65504, subnormals
// down to 2^-24). Shared by the CPU kernels (kernels/cpu/fp16.cpp, whose F16C path gives the same
// bits) and the CUDA kernels (kernels/cuda/fp16.cu) so both round identically: fp32 -> fp16 rounds
// to nearest, ties to even, into the subnormals too; values from 65520 up become +-inf (IEEE
// rounding); NaN stays NaN (quiet bit set, the upper payload bits kept, as x86's VCVTPS2PH);
// fp16 -> fp32 is exact (a signalling NaN comes back quiet, as VCVTPH2PS).
#pragma once

#include <cstdint>

#include "codelets/kernels/bf16.hpp"  // bits_of / float_of

namespace zf::kernels::fp16 {

ZF_BF16_HD inline uint16_t from_float(float x) {
  const uint32_t u = bf16::bits_of(x);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // >= 65520 (half-way above 65504), inf
  if (a >= 0x38800000u) {                                   // a normal fp16 (>= 2^-14)
    const uint32_t r = a - 0x38000000u;                     // exponent rebiased from 127 to 15
    return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));  // carries give the next binade
  }
  // below 2^-14: a multiple of 2^-24, rounded to nearest even (may round up to the smallest normal)
  const uint32_t e = a >> 23;
  if (e < 102) return (uint16_t)sign;  // below 2^-25: rounds to zero (fp32 subnormals too)
  const uint32_t m = (a & 0x7fffffu) | 0x800000u, s = 126 - e;  // value = m * 2^-24 / 2^s, s in [14, 24]
  uint32_t q = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u), half = 1u << (s - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return (uint16_t)(sign | q);
}

ZF_BF16_HD inline float to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return bf16::float_of(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));  // inf, NaN
  if (e == 0) {
    if (m == 0) return bf16::float_of(sign);
    e = 1;  // subnormal: normalise
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    m &= 0x3ffu;
  }
  return bf16::float_of(sign | ((e + 112u) << 23) | (m << 13));
}

// x rounded to the nearest fp16 value, as an fp32
ZF_BF16_HD inline float round(float x) { return to_float(from_float(x)); }

// the largest finite fp16
constexpr float kMax = 65504.0f;

}  // namespace zf::kernels::fp16
