// Softmax cross-entropy on the GPU: one block per row (max with the lowest index on ties, exp,
// sum, normalize; loss from the logits in double as the CPU kernel), then one block adds the
// per-row losses and hits in row order into the stats buffer (deterministic, no atomics). Rows
// with a negative label are skipped when ignore_negative is set. Sequence log-likelihoods: one
// block per sequence, its rows in order, summed in double by thread 0.
#include "codelets/kernels/class_posterior.hpp"
#include "codelets/kernels/cuda/common.cuh"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

constexpr int kRowThreads = 256;

__global__ void xent_rows_k(const float* logits, const int32_t* labels, float* probs, int C, double* row_loss,
                            int* row_ok, int* row_n, int ignore_negative) {
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
    if (y < 0 && ignore_negative) {
      row_loss[i] = 0.0;
      row_ok[i] = 0;
      row_n[i] = 0;
    } else if (y < 0 || y >= C) {
      row_loss[i] = __longlong_as_double(0x7ff8000000000000ll);  // NaN: reported as a non-finite loss
      row_ok[i] = 0;
      row_n[i] = 1;
    } else {
      row_loss[i] = -((double)z[y] - (double)mx - log((double)sum));
      row_ok[i] = arg == y;
      row_n[i] = 1;
    }
  }
}

__global__ void xent_stats_k(const double* row_loss, const int* row_ok, const int* row_n, int B, double* stats,
                             int accumulate) {
  if (threadIdx.x != 0) return;
  double loss = 0.0;
  long long ok = 0, n = 0;
  for (int i = 0; i < B; ++i) {
    loss += row_loss[i];
    ok += row_ok[i];
    n += row_n[i];
  }
  if (!accumulate) stats[0] = stats[1] = stats[2] = 0.0;
  stats[0] += loss;
  stats[1] += (double)ok;
  stats[2] += (double)n;
}

__global__ void xent_bwd_k(const float* probs, const int32_t* labels, float* d, size_t n, int C, float scale) {
  ZF_GRID_STRIDE(e, n) {
    const size_t i = e / (size_t)C;
    const int j = (int)(e - i * C);
    const float v = probs[e] * scale;
    d[e] = labels[i] < 0 ? 0.0f : j == labels[i] ? v - scale : v;
  }
}

// a row's max and sum of exp(z - max) over the block (every thread gets both)
__device__ void row_max_sum(const float* z, int V, float* sh, float* mx_out, float* sum_out) {
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, z[j]);
  mx = block_max(mx, sh);
  float part = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) part += expf(z[j] - mx);
  *sum_out = block_sum(part, sh);
  *mx_out = mx;
}

// block b: sequence b's rows in order; per row the max, the sum of exp (block reductions), then
// thread 0 adds z[y] - max - log(sum) in double
__global__ void seq_logprob_k(const float* logits, const int32_t* targets, int T, int V, double* out) {
  __shared__ float sh[32];
  const int b = blockIdx.x;
  double acc = 0.0;
  for (int t = 0; t < T; ++t) {
    const size_t row = (size_t)b * T + t;
    const int y = targets[row];
    if (y < 0) continue;  // uniform over the block
    const float* z = logits + row * V;
    float mx, sum;
    row_max_sum(z, V, sh, &mx, &sum);
    if (threadIdx.x == 0) acc += (double)z[y] - (double)mx - log((double)sum);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[b] = acc;
}

// one thread: the posteriors of the B chunks, the loss and hits into stats, each row's weight w
__global__ void gen_posterior_k(const double* sll, const int32_t* targets, const int32_t* labels,
                                const double* log_prior, int K, int B, int T, float lm_weight, float* w,
                                double* stats) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  long long scored = 0;
  for (int i = 0; i < B * T; ++i) scored += targets[i] >= 0;
  double loss = 0.0;
  long long ok = 0;
  for (int b = 0; b < B; ++b)
    posterior::chunk_loss(sll, log_prior, K, B, b, labels[b], scored, lm_weight, w, &loss, &ok);
  stats[0] = loss;
  stats[1] = (double)ok;
  stats[2] = (double)B;
}

// block per row: d = w (softmax - onehot), 0 on padded rows
__global__ void gen_dlogits_k(const float* logits, const int32_t* targets, const float* w, int T, int V,
                              float* dlogits) {
  __shared__ float sh[32];
  const size_t row = blockIdx.x;
  float* d = dlogits + row * V;
  const int y = targets[row];
  if (y < 0) {
    for (int j = threadIdx.x; j < V; j += blockDim.x) d[j] = 0.0f;
    return;
  }
  const float* z = logits + row * V;
  float mx, sum;
  row_max_sum(z, V, sh, &mx, &sum);
  const float inv = 1.0f / sum, wr = w[row / (size_t)T];
  for (int j = threadIdx.x; j < V; j += blockDim.x) d[j] = wr * expf(z[j] - mx) * inv - (j == y ? wr : 0.0f);
}

}  // namespace

Status gen_class_loss(const float* logits, const int32_t* targets, const int32_t* labels, const double* log_prior,
                      int K, int B, int T, int V, float lm_weight, float* dlogits, double* stats, cudaStream_t s) {
  const int KB = K * B;
  if (KB <= 0) return nullptr;
  void* scratch = nullptr;
  if (Status e = scratch_alloc(&scratch, (size_t)KB * (sizeof(double) + sizeof(float)), s)) return e;
  double* sll = (double*)scratch;
  float* w = (float*)(sll + KB);
  seq_logprob_k<<<KB, kRowThreads, 0, s>>>(logits, targets, T, V, sll);
  gen_posterior_k<<<1, 32, 0, s>>>(sll, targets, labels, log_prior, K, B, T, lm_weight, w, stats);
  gen_dlogits_k<<<(unsigned)((size_t)KB * T), kRowThreads, 0, s>>>(logits, targets, w, T, V, dlogits);
  Status st = launched();
  scratch_free(scratch, s);
  return st;
}

Status softmax_xent_fwd(const float* logits, const int32_t* labels, float* probs, int B, int C, double* stats,
                        bool accumulate, cudaStream_t s, bool ignore_negative) {
  void* scratch = nullptr;
  if (Status e = scratch_alloc(&scratch, (size_t)B * (sizeof(double) + 2 * sizeof(int)), s)) return e;
  double* row_loss = (double*)scratch;
  int* row_ok = (int*)(row_loss + B);
  int* row_n = row_ok + B;
  if (B > 0)
    xent_rows_k<<<B, kRowThreads, 0, s>>>(logits, labels, probs, C, row_loss, row_ok, row_n, ignore_negative ? 1 : 0);
  xent_stats_k<<<1, 32, 0, s>>>(row_loss, row_ok, row_n, B, stats, accumulate ? 1 : 0);
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

Status sequence_logprob(const float* logits, const int32_t* targets, int B, int T, int V, double* out,
                        cudaStream_t s) {
  if (B <= 0) return nullptr;
  seq_logprob_k<<<B, kRowThreads, 0, s>>>(logits, targets, T, V, out);
  return launched();
}

}  // namespace zf::kernels::cuda
