// fp32 views of the mixed kernels' operands (kernels.hpp's Ew): a bf16 one widened into the
// calling thread's buffer, an fp32 one as it is; a written bf16 view packed back after
// (kernels/bf16.hpp's rounding, as codelets/half_storage.cpp's wrapper rounds).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

// Elements [s, s + n) of e as fp32: e's own memory, or buf holding them widened (read) or
// uninitialised (a view to be written whole and packed by store_view).
inline float* view(Ew e, size_t s, size_t n, std::vector<float>& buf, bool read) {
  if (!e.bf16) return static_cast<float*>(e.p) + s;
  buf.resize(n);
  if (read) unpack_bf16(static_cast<const uint16_t*>(e.p) + s, buf.data(), n);
  return buf.data();
}
// Packs a written view of elements [s, s + n) back into a bf16 e (nothing for an fp32 one).
inline void store_view(Ew e, size_t s, size_t n, const float* v) {
  if (e.bf16) pack_bf16(v, static_cast<uint16_t*>(e.p) + s, n);
}

}  // namespace zf::kernels::cpu
