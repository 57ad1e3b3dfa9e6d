// Token + position embedding on the GPU. The backward adds, for each output element, the
// contributions in position order (b = 0.., t = 0..), as the CPU scatter-add does: dwte row v is
// one block that scans the tokens for v; dwpe[t, c] is one thread summing over b. Bitwise equal
// to the CPU kernel, with no atomics. wpe / dwpe null: the token embedding alone (Llama). The
// class embedding (the generative classifier's) likewise.
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

__global__ void embedding_fwd_k(const int32_t* tok, const float* wte, const float* wpe, float* x, int T, int C,
                                size_t n) {
  ZF_GRID_STRIDE(e, n) {
    const size_t pos = e / (size_t)C;
    const int c = (int)(e - pos * C);
    const int t = (int)(pos % (size_t)T);
    x[e] = wpe ? wte[(size_t)tok[pos] * C + c] + wpe[(size_t)t * C + c] : wte[(size_t)tok[pos] * C + c];
  }
}

constexpr int kTokTile = 1024;

// block (v, c-chunk): dwte[v, c] = sum over positions with tok == v of dx[pos, c], in order
__global__ void embedding_bwd_wte_k(const int32_t* tok, const float* dx, float* dwte, int BT, int C) {
  __shared__ int32_t tile[kTokTile];
  const int v = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (int p0 = 0; p0 < BT; p0 += kTokTile) {
    __syncthreads();
    for (int t = threadIdx.x; t < kTokTile && p0 + t < BT; t += blockDim.x) tile[t] = tok[p0 + t];
    __syncthreads();
    const int pn = min(kTokTile, BT - p0);
    if (c < C)
      for (int t = 0; t < pn; ++t)
        if (tile[t] == v) acc += dx[(size_t)(p0 + t) * C + c];
  }
  if (c < C) dwte[(size_t)v * C + c] = acc;
}

// dwpe[t, c] = sum over b of dx[b, t, c], b in order
__global__ void embedding_bwd_wpe_k(const float* dx, float* dwpe, int B, int T, int C) {
  ZF_GRID_STRIDE(e, (size_t)T * C) {
    float acc = 0.0f;
    for (int b = 0; b < B; ++b) acc += dx[(size_t)b * T * C + e];
    dwpe[e] = acc;
  }
}

__global__ void class_emb_fwd_k(float* x, const float* table, const int32_t* ids, int T, int C, size_t n) {
  ZF_GRID_STRIDE(e, n) {
    const size_t pos = e / (size_t)C;
    const int c = (int)(e - pos * C);
    x[e] += table[(size_t)ids[pos / (size_t)T] * C + c];
  }
}

// dtable[k, c] = sum over b with ids[b] == k, then t, of dx[b, t, c] (the CPU kernel's order)
__global__ void class_emb_bwd_k(const float* dx, const int32_t* ids, float* dtable, int B, int T, int C, int K) {
  ZF_GRID_STRIDE(e, (size_t)K * C) {
    const int k = (int)(e / (size_t)C), c = (int)(e - (size_t)k * C);
    float acc = 0.0f;
    for (int b = 0; b < B; ++b)
      if (ids[b] == k)
        for (int t = 0; t < T; ++t) acc += dx[((size_t)b * T + t) * C + c];
    dtable[e] = acc;
  }
}

}  // namespace

Status class_embedding_fwd(float* x, const float* table, const int32_t* ids, int B, int T, int C, cudaStream_t s) {
  const size_t n = (size_t)B * T * C;
  if (!n) return nullptr;
  class_emb_fwd_k<<<blocks_for(n), kThreads, 0, s>>>(x, table, ids, T, C, n);
  return launched();
}

Status class_embedding_bwd(const float* dx, const int32_t* ids, float* dtable, int B, int T, int C, int K,
                           cudaStream_t s) {
  const size_t n = (size_t)K * C;
  if (!n) return nullptr;
  class_emb_bwd_k<<<blocks_for(n), kThreads, 0, s>>>(dx, ids, dtable, B, T, C, K);
  return launched();
}

Status embedding_fwd(const int32_t* tok, const float* wte, const float* wpe, float* x, int B, int T, int C,
                     cudaStream_t s) {
  const size_t n = (size_t)B * T * C;
  if (!n) return nullptr;
  embedding_fwd_k<<<blocks_for(n), kThreads, 0, s>>>(tok, wte, wpe, x, T, C, n);
  return launched();
}

Status embedding_bwd(const int32_t* tok, const float* dx, float* dwte, float* dwpe, int B, int T, int C, int V,
                     cudaStream_t s) {
  if (V > 0 && C > 0) {
    const dim3 grid(V, (C + kThreads - 1) / kThreads);
    embedding_bwd_wte_k<<<grid, kThreads, 0, s>>>(tok, dx, dwte, B * T, C);
  }
  if (dwpe && (size_t)T * C > 0) embedding_bwd_wpe_k<<<blocks_for((size_t)T * C), kThreads, 0, s>>>(dx, dwpe, B, T, C);
  return launched();
}

}  // namespace zf::kernels::cuda
