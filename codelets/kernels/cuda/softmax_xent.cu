// Softmax cross-entropy on the GPU: one block per row (max with the lowest index on ties, exp,
// sum, normalize; loss from the logits in double as the CPU kernel), then one block adds the
// per-row losses and hits in row order into the stats buffer (deterministic, no atomics).
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

constexpr int kRowThreads = 256;

__global__ void xent_rows_k(const float* logits, const int32_t* labels, float* probs, int C, double* row_loss,
                            int* row_ok) {
  __shared__ float sh[32];
  __shared__ int shi[32];
  const int i = blockIdx.x;
  const float* z = logits + (size_t)i * C;
  float* p = probs + (size_t)i * C;
  // max and its lowest index
  float mx = -INFINITY;
  int arg = C;
  for (int j = threadIdx.x; j < C; j += blockDim.x)
    if (z[j] > mx || arg == C) { mx = z[j]; arg = j; }
  for (int o = 16; o > 0; o >>= 1) {
    float om = __shfl_xor_sync(0xffffffffu, mx, o);
    int oa = __shfl_xor_sync(0xffffffffu, arg, o);
    if (oa < C && (om > mx || (om == mx && oa < arg) || arg == C)) { mx = om; arg = oa; }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) { sh[warp] = mx; shi[warp] = arg; }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < nw; ++w)
      if (shi[w] < C && (sh[w] > mx || (sh[w] == mx && shi[w] < arg) || arg == C)) { mx = sh[w]; arg = shi[w]; }
    sh[0] = mx;
    shi[0] = arg;
  }
  __syncthreads();
  mx = sh[0];
  arg = shi[0];
  __syncthreads();
  float part = 0.0f;
  for (int j = threadIdx.x; j < C; j += blockDim.x) {
    const float e = expf(z[j] - mx);
    p[j] = e;
    part += e;
  }
  const float sum = block_sum(part, sh);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < C; j += blockDim.x) p[j] *= inv;
  if (threadIdx.x == 0) {
    const int y = labels[i];
    if (y < 0 || y >= C) {
      row_loss[i] = __longlong_as_double(0x7ff8000000000000ll);  // NaN: reported as a non-finite loss
      row_ok[i] = 0;
    } else {
      row_loss[i] = -((double)z[y] - (double)mx - log((double)sum));
      row_ok[i] = arg == y;
    }
  }
}

__global__ void xent_stats_k(const double* row_loss, const int* row_ok, int B, double* stats, int accumulate) {
  if (threadIdx.x != 0) return;
  double loss = 0.0;
  long long ok = 0;
  for (int i = 0; i < B; ++i) {
    loss += row_loss[i];
    ok += row_ok[i];
  }
  if (!accumulate) stats[0] = stats[1] = stats[2] = 0.0;
  stats[0] += loss;
  stats[1] += (double)ok;
  stats[2] += (double)B;
}

__global__ void xent_bwd_k(const float* probs, const int32_t* labels, float* d, size_t n, int C, float scale) {
  ZF_GRID_STRIDE(e, n) {
    const size_t i = e / (size_t)C;
    const int j = (int)(e - i * C);
    const float v = probs[e] * scale;
    d[e] = j == labels[i] ? v - scale : v;
  }
}

}  // namespace

Status softmax_xent_fwd(const float* logits, const int32_t* labels, float* probs, int B, int C, double* stats,
                        bool accumulate, cudaStream_t s) {
  void* scratch = nullptr;
  if (Status e = scratch_alloc(&scratch, (size_t)B * (sizeof(double) + sizeof(int)), s)) return e;
  double* row_loss = (double*)scratch;
  int* row_ok = (int*)(row_loss + B);
  if (B > 0) xent_rows_k<<<B, kRowThreads, 0, s>>>(logits, labels, probs, C, row_loss, row_ok);
  xent_stats_k<<<1, 32, 0, s>>>(row_loss, row_ok, B, stats, accumulate ? 1 : 0);
  Status st = launched();
  scratch_free(scratch, s);
  return st;
}

Status softmax_xent_bwd(const float* probs, const int32_t* labels, float* dlogits, int B, int C, float scale,
                        cudaStream_t s) {
  const size_t n = (size_t)B * C;
  if (!n) return nullptr;
  xent_bwd_k<<<blocks_for(n), kThreads, 0, s>>>(probs, labels, dlogits, n, C, scale);
  return launched();
}

}  // namespace zf::kernels::cuda
