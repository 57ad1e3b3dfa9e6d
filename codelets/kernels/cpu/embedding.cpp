// Token + position embedding (GPT-2): x[b, t] = wte[tok[b, t]] + wpe[t], and its backward, a
// scatter-add into the embedding gradients in a fixed order (llm.c's encoder_forward/backward);
// without wpe (null: Llama, Qwen2) the token embedding alone, nothing added;
// the generative classifier's class embedding, one vector per sequence added at every position.
#include <cstring>
#include <vector>

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

void token_embedding_fwd_mixed(const int32_t* tok, Ew wte, Ew x, int B, int T, int C) {
  if (!wte.bf16 && !x.bf16)
    return embedding_fwd(tok, static_cast<const float*>(wte.p), nullptr, static_cast<float*>(x.p), B, T, C);
  std::vector<float> row((size_t)C);
  for (size_t i = 0; i < (size_t)B * T; ++i) {
    const size_t r = (size_t)tok[i] * C;
    const float* e = static_cast<const float*>(wte.p) + r;
    if (wte.bf16) unpack_bf16(static_cast<const uint16_t*>(wte.p) + r, row.data(), (size_t)C), e = row.data();
    if (x.bf16)
      pack_bf16(e, static_cast<uint16_t*>(x.p) + i * C, (size_t)C);
    else
      std::memcpy(static_cast<float*>(x.p) + i * C, e, (size_t)C * sizeof(float));
  }
}

void token_embedding_bwd_mixed(const int32_t* tok, Ew dx, Ew dwte, int B, int T, int C, int V) {
  if (!dx.bf16 && !dwte.bf16)
    return embedding_bwd(tok, static_cast<const float*>(dx.p), static_cast<float*>(dwte.p), nullptr, B, T, C, V);
  // the positions of each id in order (a stable counting sort), then each used row summed in fp32
  // in that order and written once: embedding_bwd's sums, whose rows it adds in the same order
  const size_t n = (size_t)B * T;
  std::vector<size_t> start((size_t)V + 1, 0), pos(n);
  for (size_t i = 0; i < n; ++i) ++start[(size_t)tok[i] + 1];
  for (int v = 0; v < V; ++v) start[(size_t)v + 1] += start[(size_t)v];
  std::vector<size_t> fill(start.begin(), start.end() - 1);
  for (size_t i = 0; i < n; ++i) pos[fill[(size_t)tok[i]]++] = i;
  std::memset(dwte.p, 0, (size_t)V * C * (dwte.bf16 ? sizeof(uint16_t) : sizeof(float)));
  std::vector<float> acc((size_t)C), row((size_t)C);
  for (int v = 0; v < V; ++v) {
    if (start[(size_t)v] == start[(size_t)v + 1]) continue;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (size_t k = start[(size_t)v]; k < start[(size_t)v + 1]; ++k) {
      const size_t r = pos[k] * C;
      const float* d = static_cast<const float*>(dx.p) + r;
      if (dx.bf16) unpack_bf16(static_cast<const uint16_t*>(dx.p) + r, row.data(), (size_t)C), d = row.data();
      for (int c = 0; c < C; ++c) acc[(size_t)c] += d[c];
    }
    if (dwte.bf16)
      pack_bf16(acc.data(), static_cast<uint16_t*>(dwte.p) + (size_t)v * C, (size_t)C);
    else
      std::memcpy(static_cast<float*>(dwte.p) + (size_t)v * C, acc.data(), (size_t)C * sizeof(float));
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
