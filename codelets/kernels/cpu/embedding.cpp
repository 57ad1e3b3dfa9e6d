// Token + position embedding (GPT-2): x[b, t] = wte[tok[b, t]] + wpe[t], and its backward, a
// scatter-add into the embedding gradients in a fixed order (llm.c's encoder_forward/backward);
// without wpe (null: Llama, Qwen2) the token embedding alone, nothing added;
// the generative classifier's class embedding, one vector per sequence added at every position.
#include <cstring>

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

void embedding_fwd(const int32_t* tok, const float* wte, const float* wpe, float* x, int B, int T, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const float* e = wte + (size_t)tok[(size_t)b * T + t] * C;  // (C)
      const float* p = wpe ? wpe + (size_t)t * C : nullptr;      // (C)
      float* o = x + ((size_t)b * T + t) * C;                     // (C)
      if (wpe)
        for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
      else
        for (int c = 0; c < C; ++c) o[c] = e[c];
    }
}

void embedding_bwd(const int32_t* tok, const float* dx, float* dwte, float* dwpe, int B, int T, int C, int V) {
  std::memset(dwte, 0, (size_t)V * C * sizeof(float));
  if (dwpe) std::memset(dwpe, 0, (size_t)T * C * sizeof(float));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const float* d = dx + ((size_t)b * T + t) * C;
      float* e = dwte + (size_t)tok[(size_t)b * T + t] * C;
      for (int c = 0; c < C; ++c) e[c] += d[c];
      if (!dwpe) continue;
      float* p = dwpe + (size_t)t * C;
      for (int c = 0; c < C; ++c) p[c] += d[c];
    }
}

void class_embedding_fwd(float* x, const float* table, const int32_t* ids, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    const float* e = table + (size_t)ids[b] * C;
    for (int t = 0; t < T; ++t) {
      float* o = x + ((size_t)b * T + t) * C;
      for (int c = 0; c < C; ++c) o[c] += e[c];
    }
  }
}

void class_embedding_bwd(const float* dx, const int32_t* ids, float* dtable, int B, int T, int C, int K) {
  std::memset(dtable, 0, (size_t)K * C * sizeof(float));
  for (int b = 0; b < B; ++b) {
    float* e = dtable + (size_t)ids[b] * C;
    for (int t = 0; t < T; ++t) {
      const float* d = dx + ((size_t)b * T + t) * C;
      for (int c = 0; c < C; ++c) e[c] += d[c];
    }
  }
}

}  // namespace zf::kernels::cpu
