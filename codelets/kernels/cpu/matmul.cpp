// Matmul forward and backward, single-threaded per call, cut into tiles of the output
// (parallel.hpp) that the device side's idle cores help with: from kCoarseRows rows of batch
// through oneDNN's matmul primitives (kernels/cpu/gemm.hpp; fp32, or bf16 inputs with fp32 sums
// and output for a bf16 call where the CPU has native bf16), below through CBLAS (OpenBLAS) and
// our own loops. The tiles depend on the shapes only: each output element is computed by the same
// call however many threads run the tiles, so results are bitwise independent of the thread count.
// y = x w^T, dw = dy^T x, dx = dy w; matches tests/reference/reference.hpp. A weight stored
// (in, out) (w_in_out: w^T row-major, ZenFlow's column-contiguous layout, docs/zenflow.md) only
// changes the BLAS transpose flags and the leading dimension.
#include "codelets/kernels/cpu/kernels.hpp"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/cpu/gemm.hpp"
#include "runtime/parallel.hpp"

namespace zf::kernels::cpu {

// Small batches: OpenBLAS's SGEMM packs the whole weight matrix first, which costs more than the
// multiply for 1-4 rows; SGEMV (B = 1) and a row-by-row rank-B update of dw (B <= 4) stream the
// weights once (memory-bound either way). The measurements behind every choice of this file:
// docs/architecture.md, "Matmul tiles and code paths".
constexpr int kSmallBatch = 4;

namespace {
// Tiles, on shapes only. From kCoarseRows rows of batch up, each tile's SGEMM packs its own copy of
// the operand the tiles share (all of w for tiles of rows, all of x when dw is cut by output
// features): about kTileFlops of work a tile, a power of two of them (2 as soon as there are
// kSplitFlops: an even split over two cores), since fewer, larger tiles pack less and run closer
// to the kernel's peak. Below kCoarseRows the shared operand is a few rows (or nothing is packed:
// the streaming loops, SGEMV), and the tiles stay fine, kFineFlops each, so that a late helper
// leaves little to wait for. At most kMaxTiles; each a multiple of
// `align` long (the SGEMM kernel's register block) along the dimension cut.
constexpr double kTileFlops = 32e6, kSplitFlops = 8e6, kFineFlops = 4e6;
constexpr int kCoarseRows = kMatmulBf16Rows, kMaxTiles = 16;
struct Cut {
  int n, len;  // tiles, elements per tile (the last may be shorter)
};
Cut cut(int extent, double flops, int align, int rows) {
  int n;
  if (rows < kCoarseRows) {
    n = (int)std::clamp<double>(flops / kFineFlops, 1.0, (double)kMaxTiles);
  } else {
    n = (int)std::clamp<double>(flops / kTileFlops, 1.0, (double)kMaxTiles);
    if (flops >= kSplitFlops) n = std::max(n, 2);
    n = 1 << (31 - __builtin_clz((unsigned)n));  // a power of two, rounded down
  }
  n = std::min(n, (extent + align - 1) / align);
  if (n <= 1) return {1, extent};
  int len = (extent + n - 1) / n;
  len = (len + align - 1) / align * align;
  return {(extent + len - 1) / len, len};
}
template <class F>
void over(Cut c, int extent, F&& f) {  // f(begin, count) for each tile
  parallel_tiles(c.n, [&](int t) {
    const int b = t * c.len;
    f(b, std::min(c.len, extent - b));
  });
}

// The two operands of a call's oneDNN tiles: as given (fp32), or, for a bf16 call where the CPU
// has native bf16, converted once (kernels/bf16.hpp's rounding) into the calling thread's buffers,
// which the tiles (on any thread) read until the call returns.
struct Operands {
  const void* a;
  const void* b;
  bool bf16;
  // the GEMM of one tile: C (M, N) = op(A) op(B), A and B at element offsets ao, bo
  void gemm(size_t ao, size_t bo, float* C, GemmShape s) const {
    s.bf16 = bf16;
    const size_t e = bf16 ? 2 : 4;
    dnnl_gemm(s, (const char*)a + ao * e, (const char*)b + bo * e, C);
  }
  // the same with a bf16 C, rounded once by the primitive (gemm.hpp), bias (fp32, N) added before
  void gemm_bf16_out(size_t ao, size_t bo, uint16_t* C, GemmShape s, const float* bias) const {
    s.bf16 = s.c_bf16 = true;
    s.bias = bias != nullptr;
    dnnl_gemm(s, (const uint16_t*)a + ao, (const uint16_t*)b + bo, C, bias);
  }
};
// Below kCoarseRows a bf16 call runs the fp32 paths on operands rounded to bf16 (into the calling
// thread's buffers): a product of two bf16 values is exact in fp32, so these multiply what the
// oneDNN tiles multiply and sum in fp32 as they do; the precision does not depend on the batch
// (the rows of a data-parallel rank's share, say), only the order of the sums.
void round_operands(const float*& a, size_t na, const float*& b, size_t nb, bool bf16) {
  if (!bf16 || !native_bf16()) return;
  thread_local std::vector<float> ra, rb;
  ra.resize(na);
  rb.resize(nb);
  for (size_t i = 0; i < na; ++i) ra[i] = zf::kernels::bf16::round(a[i]);
  for (size_t i = 0; i < nb; ++i) rb[i] = zf::kernels::bf16::round(b[i]);
  a = ra.data();
  b = rb.data();
}
Operands operands(const float* a, size_t na, const float* b, size_t nb, bool bf16) {
  if (!bf16 || !native_bf16()) return {a, b, false};
  thread_local std::vector<uint16_t> ha, hb;
  ha.resize(na);
  hb.resize(nb);
  pack_bf16(a, ha.data(), na);
  pack_bf16(b, hb.data(), nb);
  return {ha.data(), hb.data(), true};
}
// One operand converted into the calling thread's buffer (the other one kept, or given, in bf16).
const uint16_t* packed(const float* a, size_t n) {
  thread_local std::vector<uint16_t> h;
  h.resize(n);
  pack_bf16(a, h.data(), n);
  return h.data();
}

// The oneDNN paths (B >= kCoarseRows) on operands as given: fp32, or bf16 (op.bf16).
// prep(b0, bb), where given, runs in each tile of rows before its product, on the tile's thread (the
// kept-operand paths convert the tile's rows of x or dy there: in parallel, and still in cache).
struct NoPrep {
  void operator()(int, int) const {}
};
template <class Prep = NoPrep>
void fwd_coarse(const void* x, const void* w, bool bf16, float* y, int B, int K, int N, bool w_in_out,
                Prep&& prep = {}) {
  const double flops = 2.0 * B * K * N;
  const Operands op{x, w, bf16};
  if (N > B) {
    // w larger than x (a language model's head: N the vocabulary): tiles of output features,
    // y[:, n0:n1] = x w[n0:n1]^T (or x w[:, n0:n1]), each tile packing x and its slice of w, where
    // tiles of rows would each pack the whole of w (2 MB for a 4096 x 128 head, 16 times a call)
    prep(0, B);  // every tile reads all of x
    over(cut(N, flops, 16, B), N, [&](int n0, int nn) {
      op.gemm(0, w_in_out ? (size_t)n0 : (size_t)n0 * K, y + n0,
              {B, nn, K, false, !w_in_out, K, w_in_out ? N : K, N, false, false});
    });
    return;
  }
  // tiles of rows: y[b0:b1] = x[b0:b1] w^T (w (N, K)) or x[b0:b1] w (w (K, N))
  over(cut(B, flops, 16, B), B, [&](int b0, int bb) {
    prep(b0, bb);
    op.gemm((size_t)b0 * K, 0, y + (size_t)b0 * N, {bb, N, K, false, !w_in_out, K, w_in_out ? N : K, N, false, false});
  });
}

void bwd_weight_coarse(const void* dy, const void* x, bool bf16, float* dw, int B, int K, int N, bool accumulate,
                       bool dw_in_out) {
  const double flops = 2.0 * B * K * N;
  if (!dw_in_out && N > B) {
    // a language model's head (N the vocabulary): tiles of dw's rows as below, each computed as
    // x^T dy[:, n0:n1] (K, nn) into the thread's scratch and transposed into dw[n0:n1] (+=): oneDNN
    // with the transposed dy slice as A ran the head's weight gradient (1024 x 128 x 4096) 1.3x
    // slower (docs/architecture.md, "Matmul tiles and code paths")
    const Operands op{x, dy, bf16};
    over(cut(N, flops, 16, B), N, [&](int n0, int nn) {
      thread_local std::vector<float> t;
      t.resize((size_t)K * nn);
      op.gemm(0, n0, t.data(), {K, nn, B, true, false, K, N, nn, false, false});
      for (int j = 0; j < nn; ++j) {
        float* d = dw + (size_t)(n0 + j) * K;
        if (accumulate)
          for (int k = 0; k < K; ++k) d[k] += t[(size_t)k * nn + j];
        else
          for (int k = 0; k < K; ++k) d[k] = t[(size_t)k * nn + j];
      }
    });
    return;
  }
  if (!dw_in_out) {  // tiles of dw's rows: dw[n0:n1] (+)= dy[:, n0:n1]^T x
    const Operands op{dy, x, bf16};
    over(cut(N, flops, 16, B), N, [&](int n0, int nn) {
      op.gemm(n0, 0, dw + (size_t)n0 * K, {nn, K, B, true, false, N, K, K, accumulate, false});
    });
    return;
  }
  // dw (K, N) = x^T dy
  const Operands op{x, dy, bf16};
  if (N > K)
    // in tiles of its columns (output features), as the (N, K) call's tiles of rows: each tile
    // copies x and a slice of dy, where tiles of rows would each copy the whole of dy; the rows
    // stay better where N <= K
    over(cut(N, flops, 16, B), N, [&](int n0, int nn) {
      op.gemm(0, n0, dw + n0, {K, nn, B, true, false, K, N, N, accumulate, false});
    });
  else
    over(cut(K, flops, 16, B), K, [&](int k0, int kk) {
      op.gemm(k0, 0, dw + (size_t)k0 * N, {kk, N, B, true, false, K, N, N, accumulate, false});
    });
}

template <class Prep = NoPrep>
void bwd_data_coarse(const void* dy, const void* w, bool bf16, float* dx, int B, int K, int N, bool w_in_out,
                     Prep&& prep = {}) {
  const double flops = 2.0 * B * K * N;
  const Operands op{dy, w, bf16};
  // tiles of rows: dx[b0:b1] = dy[b0:b1] w (w (N, K)) or dy[b0:b1] w^T (w (K, N))
  over(cut(B, flops, 16, B), B, [&](int b0, int bb) {
    prep(b0, bb);
    op.gemm((size_t)b0 * N, 0, dx + (size_t)b0 * K, {bb, K, N, false, w_in_out, N, w_in_out ? N : K, K, false, false});
  });
}
}  // namespace

constexpr int kStreamMinN = 256;  // below, a row of w is too short for the streaming loop to pay
void matmul_fwd(const float* x, const float* w, float* y, int B, int K, int N, bool w_in_out, bool bf16) {
  const double flops = 2.0 * B * K * N;
  if (B >= kCoarseRows) {
    const Operands op = operands(x, (size_t)B * K, w, (size_t)N * K, bf16);
    fwd_coarse(op.a, op.b, op.bf16, y, B, K, N, w_in_out);
    return;
  }
  round_operands(x, (size_t)B * K, w, (size_t)N * K, bf16);
  if (w_in_out) {  // w (K, N): tiles of output features
    if (B <= kSmallBatch && N >= kStreamMinN) {
      // y[b, :] = sum over k of x[b, k] w[k, :], in k order: one pass over w (memory-bound, like
      // SGEMV), where OpenBLAS's SGEMM would pack w first. Column blocks keep the B rows of y in L1.
      constexpr int kCols = 2048;
      over(cut(N, flops, kCols, B), N, [&](int t0, int tn) {
        for (int n0 = t0; n0 < t0 + tn; n0 += kCols) {
          const int nn = std::min(kCols, t0 + tn - n0);
          for (int b = 0; b < B; ++b) std::fill(y + (size_t)b * N + n0, y + (size_t)b * N + n0 + nn, 0.0f);
          for (int k = 0; k < K; ++k) {
            const float* wr = w + (size_t)k * N + n0;
            for (int b = 0; b < B; ++b) {
              const float xb = x[(size_t)b * K + k];
              float* yr = y + (size_t)b * N + n0;
              for (int n = 0; n < nn; ++n) yr[n] += xb * wr[n];
            }
          }
        }
      });
      return;
    }
    over(cut(N, flops, 16, B), N, [&](int n0, int nn) {
      if (B == 1)
        cblas_sgemv(CblasRowMajor, CblasTrans, K, nn, 1.0f, w + n0, N, x, 1, 0.0f, y + n0, 1);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, nn, K, 1.0f, x, K, w + n0, N, 0.0f, y + n0, N);
    });
    return;
  }
  // tiles of output features: y[:, n0:n1] = x w[n0:n1, :]^T
  over(cut(N, flops, 16, B), N, [&](int n0, int nn) {
    if (B == 1)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, nn, K, 1.0f, w + (size_t)n0 * K, K, x, 1, 0.0f, y + n0, 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, nn, K, 1.0f, x, K, w + (size_t)n0 * K, K, 0.0f, y + n0,
                  N);
  });
}

static void small_batch_weight(const float* dy, const float* x, float* dw, int B, int K, int N, int n_begin, int n_end,
                        bool accumulate) {
  {  // dw[n, :] (+)= sum over b of dy[b, n] x[b, :], one pass over dw
    for (int n = n_begin; n < n_end; ++n) {
      float* row = dw + (size_t)n * K;
      const float d0 = dy[n];
      if (accumulate)
        for (int k = 0; k < K; ++k) row[k] += d0 * x[k];
      else
        for (int k = 0; k < K; ++k) row[k] = d0 * x[k];
      for (int b = 1; b < B; ++b) {
        const float d = dy[(size_t)b * N + n];
        const float* xb = x + (size_t)b * K;
        for (int k = 0; k < K; ++k) row[k] += d * xb[k];
      }
    }
  }
}

void matmul_bwd_weight(const float* dy, const float* x, float* dw, int B, int K, int N, bool accumulate, bool dw_in_out,
                       bool bf16) {
  const double flops = 2.0 * B * K * N;
  if (B >= kCoarseRows) {
    const Operands op = operands(dy, (size_t)B * N, x, (size_t)B * K, bf16);
    bwd_weight_coarse(op.a, op.b, op.bf16, dw, B, K, N, accumulate, dw_in_out);
    return;
  }
  round_operands(dy, (size_t)B * N, x, (size_t)B * K, bf16);
  if (dw_in_out) {  // dw (K, N) = x^T dy
    over(cut(K, flops, 16, B), K, [&](int k0, int kk) {  // tiles of its rows (input features)
      if (B > kSmallBatch) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kk, N, B, 1.0f, x + k0, K, dy, N,
                    accumulate ? 1.0f : 0.0f, dw + (size_t)k0 * N, N);
        return;
      }
      // dw[k, :] (+)= sum over b of x[b, k] dy[b, :]: the same products and sums, in the same
      // order, as the (N, K) loop above
      for (int k = k0; k < k0 + kk; ++k) {
        float* row = dw + (size_t)k * N;
        const float x0 = x[k];
        if (accumulate)
          for (int n = 0; n < N; ++n) row[n] += dy[n] * x0;
        else
          for (int n = 0; n < N; ++n) row[n] = dy[n] * x0;
        for (int b = 1; b < B; ++b) {
          const float xb = x[(size_t)b * K + k];
          const float* d = dy + (size_t)b * N;
          for (int n = 0; n < N; ++n) row[n] += d[n] * xb;
        }
      }
    });
    return;
  }
  const Cut c = cut(N, flops, 16, B);  // tiles of output features (rows of dw)
  over(c, N, [&](int n0, int nn) {
    if (B > kSmallBatch)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nn, K, B, 1.0f, dy + n0, N, x, K,
                  accumulate ? 1.0f : 0.0f, dw + (size_t)n0 * K, K);
    else
      small_batch_weight(dy, x, dw, B, K, N, n0, n0 + nn, accumulate);
  });
}

void matmul_bwd_data(const float* dy, const float* w, float* dx, int B, int K, int N, bool w_in_out, bool bf16) {
  const double flops = 2.0 * B * K * N;
  if (B >= kCoarseRows) {
    const Operands op = operands(dy, (size_t)B * N, w, (size_t)N * K, bf16);
    bwd_data_coarse(op.a, op.b, op.bf16, dx, B, K, N, w_in_out);
    return;
  }
  round_operands(dy, (size_t)B * N, w, (size_t)N * K, bf16);
  if (w_in_out) {  // w (K, N): tiles of input features (rows of w)
    const Cut c = cut(K, flops, 16, B);
    if (B == 1) {
      over(c, K, [&](int k0, int kk) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, kk, N, 1.0f, w + (size_t)k0 * N, N, dy, 1, 0.0f, dx + k0, 1);
      });
      return;
    }
    // dx^T (K, B) = w (K, N) dy^T (N, B), through B x N and B x K scratch transposes: OpenBLAS's
    // no-transpose SGEMM, which the (N, K) layout takes, is faster than its no-transpose /
    // transpose one at these batch sizes
    std::vector<float> dyt((size_t)N * B), dxt((size_t)K * B);
    for (int b = 0; b < B; ++b)
      for (int n = 0; n < N; ++n) dyt[(size_t)n * B + b] = dy[(size_t)b * N + n];
    over(c, K, [&](int k0, int kk) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kk, B, N, 1.0f, w + (size_t)k0 * N, N, dyt.data(), B,
                  0.0f, dxt.data() + (size_t)k0 * B, B);
    });
    for (int k = 0; k < K; ++k)
      for (int b = 0; b < B; ++b) dx[(size_t)b * K + k] = dxt[(size_t)k * B + b];
    return;
  }
  // tiles of input features: dx[:, k0:k1] = dy w[:, k0:k1]
  over(cut(K, flops, 16, B), K, [&](int k0, int kk) {
    if (B == 1)
      cblas_sgemv(CblasRowMajor, CblasTrans, N, kk, 1.0f, w + k0, K, dy, 1, 0.0f, dx + k0, 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, kk, N, 1.0f, dy, N, w + k0, K, 0.0f, dx + k0, K);
  });
}

// Precision bf16 with the activations and output gradients converted once (kernels.hpp)
std::atomic<uint64_t> kept_bf16_calls{0};
uint64_t matmul_kept_bf16_calls() { return kept_bf16_calls.load(std::memory_order_relaxed); }

void matmul_fwd_keep_x_wh(const float* x, const uint16_t* wh, float* y, uint16_t* xh, int B, int K, int N,
                          bool w_in_out) {
  // x's rows converted by the tile that multiplies them (the same values as one pass over x)
  fwd_coarse(xh, wh, true, y, B, K, N, w_in_out,
             [&](int b0, int bb) { pack_bf16(x + (size_t)b0 * K, xh + (size_t)b0 * K, (size_t)bb * K); });
  kept_bf16_calls.fetch_add(1, std::memory_order_relaxed);
}
void matmul_fwd_keep_x(const float* x, const float* w, float* y, uint16_t* xh, int B, int K, int N, bool w_in_out) {
  matmul_fwd_keep_x_wh(x, packed(w, (size_t)N * K), y, xh, B, K, N, w_in_out);
}
void matmul_bwd_data_keep_dy_wh(const float* dy, const uint16_t* wh, float* dx, uint16_t* dyh, int B, int K, int N,
                                bool w_in_out) {
  bwd_data_coarse(dyh, wh, true, dx, B, K, N, w_in_out,
                  [&](int b0, int bb) { pack_bf16(dy + (size_t)b0 * N, dyh + (size_t)b0 * N, (size_t)bb * N); });
  kept_bf16_calls.fetch_add(1, std::memory_order_relaxed);
}
void matmul_bwd_data_keep_dy(const float* dy, const float* w, float* dx, uint16_t* dyh, int B, int K, int N,
                             bool w_in_out) {
  matmul_bwd_data_keep_dy_wh(dy, packed(w, (size_t)N * K), dx, dyh, B, K, N, w_in_out);
}
void matmul_bwd_weight_bf16(const uint16_t* dyh, const uint16_t* xh, float* dw, int B, int K, int N, bool accumulate,
                            bool dw_in_out) {
  bwd_weight_coarse(dyh, xh, true, dw, B, K, N, accumulate, dw_in_out);
  kept_bf16_calls.fetch_add(1, std::memory_order_relaxed);
}

// Mixed fp32 / bf16 operands (kernels.hpp): slot 0 and 1 are the calling thread's buffers for the
// first and the second operand.
namespace {
const float* widened(MatOperand a, size_t n, int slot) {
  if (!a.bf16) return static_cast<const float*>(a.p);
  thread_local std::vector<float> buf[2];
  buf[slot].resize(n);
  unpack_bf16(static_cast<const uint16_t*>(a.p), buf[slot].data(), n);
  return buf[slot].data();
}
const uint16_t* as_bf16(MatOperand a, size_t n, int slot) {
  if (a.bf16) return static_cast<const uint16_t*>(a.p);
  thread_local std::vector<uint16_t> buf[2];
  buf[slot].resize(n);
  pack_bf16(static_cast<const float*>(a.p), buf[slot].data(), n);
  return buf[slot].data();
}
bool bf16_products(bool bf16, int B) { return bf16 && native_bf16() && B >= kMatmulBf16Rows; }
}  // namespace

void matmul_fwd_mixed(MatOperand x, MatOperand w, float* y, int B, int K, int N, bool w_in_out, bool bf16) {
  const size_t nx = (size_t)B * K, nw = (size_t)N * K;
  if (bf16_products(bf16, B))
    fwd_coarse(as_bf16(x, nx, 0), as_bf16(w, nw, 1), true, y, B, K, N, w_in_out);
  else
    matmul_fwd(widened(x, nx, 0), widened(w, nw, 1), y, B, K, N, w_in_out, bf16);
}
void matmul_bwd_weight_mixed(MatOperand dy, MatOperand x, float* dw, int B, int K, int N, bool accumulate,
                             bool dw_in_out, bool bf16) {
  const size_t ndy = (size_t)B * N, nx = (size_t)B * K;
  if (bf16_products(bf16, B))
    bwd_weight_coarse(as_bf16(dy, ndy, 0), as_bf16(x, nx, 1), true, dw, B, K, N, accumulate, dw_in_out);
  else
    matmul_bwd_weight(widened(dy, ndy, 0), widened(x, nx, 1), dw, B, K, N, accumulate, dw_in_out, bf16);
}
void matmul_bwd_data_mixed(MatOperand dy, MatOperand w, float* dx, int B, int K, int N, bool w_in_out, bool bf16) {
  const size_t ndy = (size_t)B * N, nw = (size_t)N * K;
  if (bf16_products(bf16, B))
    bwd_data_coarse(as_bf16(dy, ndy, 0), as_bf16(w, nw, 1), true, dx, B, K, N, w_in_out);
  else
    matmul_bwd_data(widened(dy, ndy, 0), widened(w, nw, 1), dx, B, K, N, w_in_out, bf16);
}


// The forward and the data gradient with their outputs as stored, the forward's bias in the tile
// (kernels.hpp)
namespace {
struct Out {
  Ew y;            // (B, N), fp32 or bf16
  const float* b;  // (N) fp32, or null
  // a tile's fp32 product t (rows x cols, leading dimension ldt) at (r0, c0) of y: the bias added
  // and, for a bf16 y, rounded into it (for an fp32 y, t is y's own tile)
  void finish(float* t, int ldt, int r0, int rows, int c0, int cols, int N) const {
    for (int r = 0; r < rows; ++r) {
      float* tr = t + (size_t)r * ldt;
      if (b)
        for (int j = 0; j < cols; ++j) tr[j] += b[c0 + j];
      if (y.bf16) pack_bf16(tr, static_cast<uint16_t*>(y.p) + (size_t)(r0 + r) * N + c0, (size_t)cols);
    }
  }
  float* f32() const { return static_cast<float*>(y.p); }
};
// A bias as fp32: as given, or widened into the calling thread's buffer (exact)
const float* bias_f32(MatOperand b, int N) {
  if (!b.p || !b.bf16) return static_cast<const float*>(b.p);
  thread_local std::vector<float> w;
  w.resize((size_t)N);
  unpack_bf16(static_cast<const uint16_t*>(b.p), w.data(), (size_t)N);
  return w.data();
}
// fwd_coarse's tiles and products (bf16 operands), each tile finished while in cache: an fp32 y's
// tile by Out::finish (the separate bias add's bits); a bf16 y's tile rounded by the primitive itself,
// the bias added to its fp32 sums first (gemm.hpp: PyTorch's addmm, one rounding)
void fwd_coarse_out(const void* x, const void* w, const Out& out, int B, int K, int N, bool w_in_out) {
  const double flops = 2.0 * B * K * N;
  const Operands op{x, w, true};
  uint16_t* yh = static_cast<uint16_t*>(out.y.p);
  if (N > B) {  // tiles of output features, as fwd_coarse
    over(cut(N, flops, 16, B), N, [&](int n0, int nn) {
      const GemmShape s{B, nn, K, false, !w_in_out, K, w_in_out ? N : K, N, false, true};
      const size_t wo = w_in_out ? (size_t)n0 : (size_t)n0 * K;
      if (out.y.bf16) return op.gemm_bf16_out(0, wo, yh + n0, s, out.b ? out.b + n0 : nullptr);
      op.gemm(0, wo, out.f32() + n0, s);
      out.finish(out.f32() + n0, N, 0, B, n0, nn, N);
    });
    return;
  }
  over(cut(B, flops, 16, B), B, [&](int b0, int bb) {
    const GemmShape s{bb, N, K, false, !w_in_out, K, w_in_out ? N : K, N, false, true};
    if (out.y.bf16) return op.gemm_bf16_out((size_t)b0 * K, 0, yh + (size_t)b0 * N, s, out.b);
    op.gemm((size_t)b0 * K, 0, out.f32() + (size_t)b0 * N, s);
    out.finish(out.f32() + (size_t)b0 * N, N, b0, bb, 0, N, N);
  });
}

// bwd_data_coarse's tiles of rows into a bf16 dx, each rounded by the primitive (gemm.hpp)
void bwd_data_coarse_out(const void* dy, const void* w, const Out& out, int B, int K, int N, bool w_in_out) {
  const double flops = 2.0 * B * K * N;
  const Operands op{dy, w, true};
  over(cut(B, flops, 16, B), B, [&](int b0, int bb) {
    op.gemm_bf16_out((size_t)b0 * N, 0, static_cast<uint16_t*>(out.y.p) + (size_t)b0 * K,
                     {bb, K, N, false, w_in_out, N, w_in_out ? N : K, K, false, true}, nullptr);
  });
}
}  // namespace

void matmul_fwd_out(MatOperand x, MatOperand w, MatOperand b, Ew y, int B, int K, int N, bool w_in_out, bool bf16) {
  const Out out{y, bias_f32(b, N)};
  if (!out.b && !y.bf16) return matmul_fwd_mixed(x, w, out.f32(), B, K, N, w_in_out, bf16);
  const size_t nx = (size_t)B * K, nw = (size_t)N * K;
  if (bf16_products(bf16, B)) return fwd_coarse_out(as_bf16(x, nx, 0), as_bf16(w, nw, 1), out, B, K, N, w_in_out);
  // the other paths: the whole product (into y, or the calling thread's fp32 buffer), then the
  // bias and the rounding in tiles of rows
  thread_local std::vector<float> t;
  float* p = out.f32();
  if (y.bf16) {
    t.resize((size_t)B * N);
    p = t.data();
  }
  matmul_fwd_mixed(x, w, p, B, K, N, w_in_out, bf16);
  const int rows = std::max(1, (1 << 14) / std::max(1, N));
  parallel_tiles((B + rows - 1) / rows, [&](int i) {
    const int r0 = i * rows;
    out.finish(p + (size_t)r0 * N, N, r0, std::min(rows, B - r0), 0, N, N);
  });
}

void matmul_bwd_data_out(MatOperand dy, MatOperand w, Ew dx, int B, int K, int N, bool w_in_out, bool bf16) {
  if (!dx.bf16) return matmul_bwd_data_mixed(dy, w, static_cast<float*>(dx.p), B, K, N, w_in_out, bf16);
  const Out out{dx, nullptr};
  if (bf16_products(bf16, B))
    return bwd_data_coarse_out(as_bf16(dy, (size_t)B * N, 0), as_bf16(w, (size_t)N * K, 1), out, B, K, N, w_in_out);
  thread_local std::vector<float> t;  // the other paths: the whole product, then rounded
  t.resize((size_t)B * K);
  matmul_bwd_data_mixed(dy, w, t.data(), B, K, N, w_in_out, bf16);
  pack_bf16(t.data(), static_cast<uint16_t*>(dx.p), t.size());
}

}  // namespace zf::kernels::cpu
