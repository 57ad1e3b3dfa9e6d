// ZenFlow's column kernels on the GPU: importance (a deterministic column sum), top-k by rank
// counting (column j is selected when fewer than k columns beat it: larger value first, lower
// index on ties, NaN smallest, exactly cpu::topk_columns' order) then an in-order compaction,
// gather/scatter, the merge of host results into unselected columns (of a whole weight or of a
// ZeRO stage 3 shard from its base element), the gradient mass, and stage 3's segment kernels
// (selected_before, column_importance_segment: the CPU kernels' order, bitwise).
#include <cmath>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/fp16.hpp"
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

struct Importance {
  const float* g;
  int C;
  bool l2;
  int in_out_rows;  // > 0: g stored (C, R), R = in_out_rows
  __device__ float operator()(int i, int j) const {
    const float x = in_out_rows > 0 ? g[(size_t)j * in_out_rows + i] : g[(size_t)i * C + j];
    return l2 ? x * x : fabsf(x);
  }
};

__device__ inline float topk_key(float x) { return isnan(x) ? -INFINITY : x; }

constexpr int kTopkTile = 1024;

// flag[j] = 1 when fewer than k columns beat column j
__global__ void topk_rank_k(const float* imp, int C, int k, int* flag) {
  __shared__ float tile[kTopkTile];
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const float kj = j < C ? topk_key(imp[j]) : 0.0f;
  int better = 0;
  for (int t0 = 0; t0 < C; t0 += kTopkTile) {
    __syncthreads();
    for (int t = threadIdx.x; t < kTopkTile && t0 + t < C; t += blockDim.x) tile[t] = topk_key(imp[t0 + t]);
    __syncthreads();
    const int tn = min(kTopkTile, C - t0);
    if (j < C)
      for (int t = 0; t < tn; ++t) {
        const float ki = tile[t];
        const int i = t0 + t;
        better += (ki > kj) || (ki == kj && i < j);
      }
  }
  if (j < C) flag[j] = better < k;
}

// sel = the flagged columns in ascending order (one block, chunked prefix sums)
__global__ void topk_compact_k(const int* flag, int C, int32_t* sel) {
  __shared__ int sh[32];
  __shared__ int base;
  if (threadIdx.x == 0) base = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int c0 = 0; c0 < C; c0 += blockDim.x) {
    const int j = c0 + threadIdx.x;
    const int f = j < C ? flag[j] : 0;
    int x = f;  // inclusive scan in the warp
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    if (lane == 31) sh[warp] = x;
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 1; w < nw; ++w) sh[w] += sh[w - 1];
    __syncthreads();
    const int before = base + (warp ? sh[warp - 1] : 0) + x - f;
    if (f) sel[before] = j;
    __syncthreads();
    if (threadIdx.x == 0) base += sh[nw - 1];
    __syncthreads();
  }
}

__global__ void gather_k(const float* w, int C, const int32_t* sel, int k, float* out, size_t n) {
  ZF_GRID_STRIDE(e, n) {
    const size_t i = e / (size_t)k;
    out[e] = w[i * C + sel[e - i * k]];
  }
}
__global__ void scatter_k(const float* in, int C, const int32_t* sel, int k, float* w, size_t n) {
  ZF_GRID_STRIDE(e, n) {
    const size_t i = e / (size_t)k;
    w[i * C + sel[e - i * k]] = in[e];
  }
}

__device__ inline bool selected(const int32_t* sel, int k, int col) {
  const int lo = lower_bound_sel(sel, k, col);
  return lo < k && sel[lo] == col;
}

__device__ inline float load(const float* src, size_t e) { return src[e]; }
__device__ inline float load(const uint16_t* src, size_t e) { return bf16::to_float(src[e]); }
struct F16 {  // an fp16 source element (uint16_t is bf16)
  uint16_t bits;
};
__device__ inline float load(const F16* src, size_t e) { return fp16::to_float(src[e].bits); }

template <class Src>  // float, uint16_t for a bf16 source, F16 for an fp16 one
__global__ void merge_k(float* dst, int C, const Src* src, size_t off, size_t n, const int32_t* sel, int k,
                        int in_out_rows, size_t base) {
  ZF_GRID_STRIDE(e, n) {
    const size_t d = off + e;  // the element of the whole weight; dst holds [base, ...)
    const int col = in_out_rows > 0 ? (int)(d / (size_t)in_out_rows) : (int)(d % (size_t)C);
    if (k == 0 || !selected(sel, k, col)) dst[d - base] = load(src, e);
  }
}

__global__ void selected_before_k(size_t e, int R, int C, const int32_t* sel, int k, bool in_out, size_t* out) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *out = selected_before_at(e, R, C, sel, k, in_out);
}

// imp[j] <- the sum over the rows i, in order from 0, of |g| or g^2 at the elements of column j
// inside [lo, hi) (0.0f first: cpu::column_importance_segment's order, one thread per column)
__global__ void importance_segment_k(const float* g, size_t lo, size_t hi, int R, int C, bool l2, float* imp,
                                     bool in_out) {
  ZF_GRID_STRIDE(j, (size_t)C) {
    float s = 0.0f;
    if (in_out) {  // column j: elements [j R, (j + 1) R)
      const size_t a = max(lo, j * (size_t)R), b = min(hi, (j + 1) * (size_t)R);
      for (size_t e = a; e < b; ++e) {
        const float x = g[e - lo];
        s = s + (l2 ? __fmul_rn(x, x) : fabsf(x));
      }
    } else {  // rows whose element j lies inside [lo, hi)
      for (size_t i = lo / (size_t)C; i * (size_t)C < hi; ++i) {
        const size_t e = i * (size_t)C + j;
        if (e < lo || e >= hi) continue;
        const float x = g[e - lo];
        s = s + (l2 ? __fmul_rn(x, x) : fabsf(x));
      }
    }
    imp[j] = s;
  }
}

constexpr int kMassBlocks = 256, kMassThreads = 256;

// part[b] = {sum |g|, selected sum} of block b's fixed share; deterministic for given sizes
__global__ void mass_part_k(const float* g, int R, int C, const int32_t* sel, int k, double* part, bool in_out) {
  __shared__ double sh[32];
  const size_t n = (size_t)R * C, nk = (size_t)R * k;
  double t = 0.0, s = 0.0;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
    t += fabs((double)g[e]);
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < nk; e += (size_t)gridDim.x * blockDim.x) {
    if (in_out) {  // g stored (C, R): element e = (c, i) of the selected columns
      const size_t c = e / (size_t)R;
      s += fabs((double)g[(size_t)sel[c] * R + (e - c * R)]);
    } else {
      const size_t i = e / (size_t)k;
      s += fabs((double)g[i * C + sel[e - i * k]]);
    }
  }
  t = block_sum(t, sh);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    part[2 * blockIdx.x] = t;
    part[2 * blockIdx.x + 1] = s;
  }
}
__global__ void mass_finish_k(const double* part, int nb, double* out) {
  if (threadIdx.x != 0) return;
  double t = 0.0, s = 0.0;
  for (int b = 0; b < nb; ++b) {
    t += part[2 * b];
    s += part[2 * b + 1];
  }
  out[0] = t;
  out[1] = s;
}

}  // namespace

Status column_importance(const float* g, int R, int C, bool l2, float* imp, cudaStream_t s, bool in_out) {
  return colsum(R, C, Importance{g, C, l2, in_out ? R : 0}, imp, s);
}

Status topk_columns(const float* imp, int C, int k, int32_t* sel, cudaStream_t s) {
  void* flag = nullptr;
  if (Status e = scratch_alloc(&flag, (size_t)C * sizeof(int), s)) return e;
  topk_rank_k<<<blocks_for((size_t)C), kThreads, 0, s>>>(imp, C, k, (int*)flag);
  topk_compact_k<<<1, 1024, 0, s>>>((const int*)flag, C, sel);
  Status st = launched();
  scratch_free(flag, s);
  return st;
}

Status gather_columns(const float* w, int R, int C, const int32_t* sel, int k, float* out, cudaStream_t s) {
  const size_t n = (size_t)R * k;
  if (!n) return nullptr;
  gather_k<<<blocks_for(n), kThreads, 0, s>>>(w, C, sel, k, out, n);
  return launched();
}

Status scatter_columns(const float* in, int R, int C, const int32_t* sel, int k, float* w, cudaStream_t s) {
  const size_t n = (size_t)R * k;
  if (!n) return nullptr;
  scatter_k<<<blocks_for(n), kThreads, 0, s>>>(in, C, sel, k, w, n);
  return launched();
}

Status merge_unselected(float* dst, int C, const float* src, size_t off, size_t n, const int32_t* sel, int k,
                        cudaStream_t s, int in_out_rows, size_t base) {
  if (!n) return nullptr;
  merge_k<<<blocks_for(n), kThreads, 0, s>>>(dst, C, src, off, n, sel, k, in_out_rows, base);
  return launched();
}

Status merge_unselected_bf16(float* dst, int C, const uint16_t* src, size_t off, size_t n, const int32_t* sel,
                             int k, cudaStream_t s, int in_out_rows, size_t base) {
  if (!n) return nullptr;
  merge_k<<<blocks_for(n), kThreads, 0, s>>>(dst, C, src, off, n, sel, k, in_out_rows, base);
  return launched();
}

Status merge_unselected_fp16(float* dst, int C, const uint16_t* src, size_t off, size_t n, const int32_t* sel,
                             int k, cudaStream_t s, int in_out_rows, size_t base) {
  if (!n) return nullptr;
  merge_k<<<blocks_for(n), kThreads, 0, s>>>(dst, C, reinterpret_cast<const F16*>(src), off, n, sel, k,
                                             in_out_rows, base);
  return launched();
}

Status grad_mass(const float* g, int R, int C, const int32_t* sel, int k, double* out, cudaStream_t s,
                 bool in_out) {
  void* part = nullptr;
  if (Status e = scratch_alloc(&part, 2 * kMassBlocks * sizeof(double), s)) return e;
  mass_part_k<<<kMassBlocks, kMassThreads, 0, s>>>(g, R, C, sel, k, (double*)part, in_out);
  mass_finish_k<<<1, 32, 0, s>>>((const double*)part, kMassBlocks, out);
  Status st = launched();
  scratch_free(part, s);
  return st;
}

Status selected_before(size_t e, int R, int C, const int32_t* sel, int k, bool in_out, size_t* out,
                       cudaStream_t s) {
  selected_before_k<<<1, 32, 0, s>>>(e, R, C, sel, k, in_out, out);
  return launched();
}

Status column_importance_segment(const float* g, size_t lo, size_t hi, int R, int C, bool l2, float* imp,
                                 cudaStream_t s, bool in_out) {
  if (C <= 0) return nullptr;
  importance_segment_k<<<blocks_for((size_t)C), kThreads, 0, s>>>(g, lo, hi, R, C, l2, imp, in_out);
  return launched();
}

}  // namespace zf::kernels::cuda
