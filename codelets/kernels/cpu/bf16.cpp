// bf16 conversions on the host (codelets/kernels/bf16.hpp holds the per-element rounding).
#include "codelets/kernels/bf16.hpp"

#include <algorithm>
#include <vector>

#include "codelets/kernels/cpu/bf16_pack.hpp"
#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

void pack_bf16(const float* x, uint16_t* y, size_t n) { to_bf16(x, y, n); }

void unpack_bf16(const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = bf16::to_float(x[i]);
}

void round_bf16(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = bf16::round(x[i]);
}

size_t merge_unselected_bf16(float* dst, int C, const uint16_t* src, size_t off, size_t n, const int32_t* sel,
                             int k, int in_out_rows, size_t base) {
  return merge_unselected_unpacked(unpack_bf16, dst, C, src, off, n, sel, k, in_out_rows, base);
}

}  // namespace zf::kernels::cpu
