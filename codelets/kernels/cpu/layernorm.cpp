// LayerNorm over the last dimension (torch.nn.LayerNorm, biased variance), forward and backward,
// through oneDNN's layer_normalization primitive (fp32 statistics; the backward's formula
//   dx = rstd * (dy w - mean(dy w) - xhat * mean(dy w xhat)),  dw = sum dy xhat,  db = sum dy).
// Rows are tiles of parallel.hpp (kRowElems elements a tile, shapes only); each tile is one
// primitive call on the thread that runs it (one OpenMP thread, dnnl_ctx.hpp), primitives made
// once per (rows, C) and kept. A call's order of summation depends on its shape only, so a row's
// results do not depend on who runs it. The backward's tiles write their dx rows and their own
// partial dw and db (the primitive's diff_scale and diff_shift over the tile's rows), which the
// caller then adds in tile order: independent of the number of threads. With one tile
// (N * C <= kRowElems) dw and db are the primitive's.
//
// Saved statistics: mean and rstd = 1/sqrt(var + eps) (what the codelets and the CUDA kernels
// read). The forward converts oneDNN's variance to rstd as oneDNN does in fp32; the backward hands
// oneDNN variance = 1/rstd^2 with eps = 0, so it needs no eps.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "codelets/kernels/cpu/dnnl_ctx.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cpu/mixed.hpp"
#include "runtime/parallel.hpp"

namespace zf::kernels::cpu {

namespace {
constexpr int kRowElems = 16384;
int rows_per_tile(int C) { return std::max(1, kRowElems / std::max(1, C)); }

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Prims {
  dnnl::memory::desc x, stat, wv;
  dnnl::layer_normalization_forward fwd;
  dnnl::layer_normalization_backward bwd;
  size_t fwd_scratch = 0, bwd_scratch = 0;
};

// forward with eps; backward with eps 0 (its variance input is 1/rstd^2)
const Prims& prims(int rows, int C, float eps) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, float>, std::unique_ptr<Prims>> cache;  // node-based
  const auto key = std::make_tuple(rows, C, eps);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  dnnl_ctx::one_thread();
  auto& eng = dnnl_ctx::engine();
  auto p = std::make_unique<Prims>();
  p->x = dnnl::memory::desc({rows, C}, dt::f32, tag::ab);
  p->stat = dnnl::memory::desc({rows}, dt::f32, tag::a);
  p->wv = dnnl::memory::desc({C}, dt::f32, tag::a);
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  using fwd_t = dnnl::layer_normalization_forward;
  fwd_t::primitive_desc fpd({dnnl::prop_kind::forward_training, p->x, eps, flags}, attr, eng);
  fwd_t::primitive_desc hint({dnnl::prop_kind::forward_training, p->x, 0.0f, flags}, attr, eng);
  dnnl::layer_normalization_backward::primitive_desc bpd({dnnl::prop_kind::backward, p->x, p->x, 0.0f, flags}, attr,
                                                         eng, hint);
  p->fwd = fwd_t(fpd);
  p->bwd = dnnl::layer_normalization_backward(bpd);
  p->fwd_scratch = fpd.scratchpad_desc().get_size();
  p->bwd_scratch = bpd.scratchpad_desc().get_size();
  return *cache.emplace(key, std::move(p)).first->second;
}

using dnnl_ctx::run;
}  // namespace

void layernorm_fwd(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                   int N, int C, float eps) {
  layernorm_fwd_mixed({const_cast<float*>(x), false}, {const_cast<float*>(w), false}, {const_cast<float*>(b), false},
                      {y, false}, mean, rstd, N, C, eps);
}

void layernorm_fwd_mixed(Ew x, Ew w, Ew b, Ew y, float* mean, float* rstd, int N, int C, float eps) {
  if (N <= 0 || C <= 0) return;
  const int rows = rows_per_tile(C);
  std::vector<float> wb, bb;
  const float* wf = view(w, 0, (size_t)C, wb, true);
  const float* bf = view(b, 0, (size_t)C, bb, true);
  parallel_tiles((N + rows - 1) / rows, [&](int t) {
    thread_local std::vector<float> xb, yb;
    const int i0 = t * rows, n = std::min(N, i0 + rows) - i0;
    const Prims& p = prims(n, C, eps);
    const size_t off = (size_t)i0 * C, m = (size_t)n * C;
    float* yv = view(y, off, m, yb, false);
    // the variance lands in rstd, then becomes rstd there
    run(p.fwd, p.fwd_scratch,
        {{DNNL_ARG_SRC, &p.x, view(x, off, m, xb, true)}, {DNNL_ARG_DST, &p.x, yv}, {DNNL_ARG_SCALE, &p.wv, wf},
         {DNNL_ARG_SHIFT, &p.wv, bf}, {DNNL_ARG_MEAN, &p.stat, mean + i0}, {DNNL_ARG_VARIANCE, &p.stat, rstd + i0}});
    store_view(y, off, m, yv);
    for (int i = i0; i < i0 + n; ++i) rstd[i] = 1.0f / std::sqrt(rstd[i] + eps);
  });
}

void layernorm_bwd(const float* dy, const float* x, const float* mean, const float* rstd, const float* w,
                   float* dx, float* dw, float* db, int N, int C) {
  layernorm_bwd_mixed({const_cast<float*>(dy), false}, {const_cast<float*>(x), false}, mean, rstd,
                      {const_cast<float*>(w), false}, {dx, false}, {dw, false}, {db, false}, N, C);
}

void layernorm_bwd_mixed(Ew dy, Ew x, const float* mean, const float* rstd, Ew w, Ew dx, Ew dw, Ew db, int N, int C) {
  if (C <= 0) return;
  const int rows = rows_per_tile(C), tiles = (N + rows - 1) / rows;
  std::vector<float> part((size_t)std::max(tiles, 1) * 2 * C, 0.0f);  // per tile: dw (C), db (C)
  std::vector<float> wb, dwb, dbb;
  const float* wf = view(w, 0, (size_t)C, wb, true);
  parallel_tiles(tiles, [&](int t) {
    thread_local std::vector<float> dyb, xb, dxb;
    const int i0 = t * rows, n = std::min(N, i0 + rows) - i0;
    const Prims& p = prims(n, C, 0.0f);
    const size_t off = (size_t)i0 * C, m = (size_t)n * C;
    thread_local std::vector<float> var;
    var.resize((size_t)n);
    for (int i = 0; i < n; ++i) var[i] = 1.0f / (rstd[i0 + i] * rstd[i0 + i]);
    float* pw = part.data() + (size_t)t * 2 * C;
    float* dxv = view(dx, off, m, dxb, false);
    // the primitive reads no shift in the backward; w stands in for its (C) descriptor
    run(p.bwd, p.bwd_scratch,
        {{DNNL_ARG_SRC, &p.x, view(x, off, m, xb, true)}, {DNNL_ARG_DIFF_DST, &p.x, view(dy, off, m, dyb, true)},
         {DNNL_ARG_MEAN, &p.stat, mean + i0}, {DNNL_ARG_VARIANCE, &p.stat, var.data()}, {DNNL_ARG_SCALE, &p.wv, wf},
         {DNNL_ARG_SHIFT, &p.wv, wf}, {DNNL_ARG_DIFF_SRC, &p.x, dxv}, {DNNL_ARG_DIFF_SCALE, &p.wv, pw},
         {DNNL_ARG_DIFF_SHIFT, &p.wv, pw + C}});
    store_view(dx, off, m, dxv);
  });
  float* dwv = view(dw, 0, (size_t)C, dwb, false);
  float* dbv = view(db, 0, (size_t)C, dbb, false);
  for (int c = 0; c < C; ++c) dwv[c] = dbv[c] = 0.0f;
  for (int t = 0; t < tiles; ++t)
    for (int c = 0; c < C; ++c) {
      dwv[c] += part[(size_t)t * 2 * C + c];
      dbv[c] += part[(size_t)t * 2 * C + C + c];
    }
  store_view(dw, 0, (size_t)C, dwv);
  store_view(db, 0, (size_t)C, dbv);
}

}  // namespace zf::kernels::cpu
