// Causal grouped-query attention of new positions over a key/value cache (generation with a KV
// cache, models/hf/causal_lm.hpp; docs/hf.md "Generation"). The T new queries sit at positions
// pos0 .. pos0 + T - 1 and the cache already holds their keys and values in rows [pos0, pos0 + T):
// query t of head h attends to cache rows j <= pos0 + t of KV head h / (H / Hkv) (HF's repeat_kv),
// softmax(q . k_j / sqrt(hs)) in fp32 with the row maximum subtracted and the sum in double.
// With pos0 = 0 it is gqa_attention_fwd's output (tests/models/test_generate.cpp checks the whole
// model against the double reference). Plain loops: one (query, head) at a time, in order.
#include <cmath>

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

void cached_attention(const float* q, const float* kc, const float* vc, float* out, float* scratch, int T, int pos0,
                      int H, int Hkv, int hs) {
  const int G = H / Hkv;
  const size_t qrow = (size_t)H * hs, kvrow = (size_t)Hkv * hs;
  const float scale = (float)(1.0 / std::sqrt((double)hs));
  for (int t = 0; t < T; ++t) {
    const int n = pos0 + t + 1;  // cache rows this query sees
    for (int h = 0; h < H; ++h) {
      const float* qi = q + (size_t)t * qrow + (size_t)h * hs;  // (hs)
      const size_t ko = (size_t)(h / G) * hs;                    // the KV head's columns
      float mx = -INFINITY;
      for (int j = 0; j < n; ++j) {
        const float* kj = kc + (size_t)j * kvrow + ko;
        float s = 0.0f;
        for (int d = 0; d < hs; ++d) s += qi[d] * kj[d];
        scratch[j] = s * scale;
        mx = scratch[j] > mx ? scratch[j] : mx;
      }
      double sum = 0.0;
      for (int j = 0; j < n; ++j) {
        scratch[j] = std::exp(scratch[j] - mx);
        sum += scratch[j];
      }
      const float inv = (float)(1.0 / sum);
      float* o = out + (size_t)t * qrow + (size_t)h * hs;  // (hs)
      for (int d = 0; d < hs; ++d) o[d] = 0.0f;
      for (int j = 0; j < n; ++j) {
        const float p = scratch[j] * inv;
        const float* vj = vc + (size_t)j * kvrow + ko;
        for (int d = 0; d < hs; ++d) o[d] += p * vj[d];
      }
    }
  }
}

}  // namespace zf::kernels::cpu
