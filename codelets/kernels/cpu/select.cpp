// ZenFlow's column kernels: importance, top-k, gather/scatter, selective AdamW, merge, and
// the gradient mass of the auto update rule (zenflow-algorithm.md, docs/zenflow.md).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/parallel.hpp"

namespace zf::kernels::cpu {

void column_importance(const float* g, int R, int C, bool l2, float* imp, bool in_out) {
  if (in_out) {  // column j = row j of the (C, R) storage: each sum in the order i = 0..R-1, as below;
    constexpr int kLanes = 8;  // kLanes columns at a time (independent sums, kLanes streams)
    int j = 0;
    for (; j + kLanes <= C; j += kLanes) {
      float s[kLanes] = {};
      const float* r = g + (size_t)j * R;
      for (int i = 0; i < R; ++i)
        for (int l = 0; l < kLanes; ++l) {
          const float x = r[(size_t)l * R + i];
          s[l] += l2 ? x * x : std::fabs(x);
        }
      for (int l = 0; l < kLanes; ++l) imp[j + l] = s[l];
    }
    for (; j < C; ++j) {
      float s = 0.0f;
      const float* r = g + (size_t)j * R;
      for (int i = 0; i < R; ++i) s += l2 ? r[i] * r[i] : std::fabs(r[i]);
      imp[j] = s;
    }
    return;
  }
  for (int j = 0; j < C; ++j) imp[j] = 0.0f;
  for (int i = 0; i < R; ++i) {
    const float* row = g + (size_t)i * C;
    if (l2)
      for (int j = 0; j < C; ++j) imp[j] += row[j] * row[j];
    else
      for (int j = 0; j < C; ++j) imp[j] += std::fabs(row[j]);
  }
}

void topk_columns(const float* imp, int C, int k, int32_t* sel) {
  std::vector<int32_t> idx(C);
  for (int j = 0; j < C; ++j) idx[j] = j;
  auto key = [&](int32_t j) { return std::isnan(imp[j]) ? -INFINITY : imp[j]; };
  auto better = [&](int32_t a, int32_t b) {
    float ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  };
  std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), better);
  std::sort(idx.begin(), idx.begin() + k);  // k best (as a set), ascending column order
  std::copy(idx.begin(), idx.begin() + k, sel);
}

void gather_columns(const float* w, int R, int C, const int32_t* sel, int k, float* out) {
  for (int i = 0; i < R; ++i) {
    const float* row = w + (size_t)i * C;
    float* o = out + (size_t)i * k;
    for (int c = 0; c < k; ++c) o[c] = row[sel[c]];
  }
}

void scatter_columns(const float* in, int R, int C, const int32_t* sel, int k, float* w) {
  for (int i = 0; i < R; ++i) {
    float* row = w + (size_t)i * C;
    const float* s = in + (size_t)i * k;
    for (int c = 0; c < k; ++c) row[sel[c]] = s[c];
  }
}

// In ranges of selected columns (rows of the (R, C) storage) of at least kSelRange elements that
// idle workers help with: AdamW is elementwise, so the result does not depend on who runs which.
constexpr size_t kSelRange = 32768;

namespace {
// An element of a weight or gradient as stored: fp32, or bf16 (Ew: precision bf16's 2-byte
// tensors as they are); a write to a bf16 one is rounded (kernels/bf16.hpp, the wrapper's rounding)
inline float load(Ew e, size_t i) {
  return e.bf16 ? bf16::to_float(static_cast<const uint16_t*>(e.p)[i]) : static_cast<const float*>(e.p)[i];
}
inline void store(Ew e, size_t i, float x) {
  if (e.bf16)
    static_cast<uint16_t*>(e.p)[i] = bf16::from_float(x);
  else
    static_cast<float*>(e.p)[i] = x;
}

// selective_adam and its master variant: x null, in place on w; else AdamW on x (shaped like m and
// v; fill: x first takes the selected values of w), whose result is then written into w.
void selective_adam_impl(Ew w, int R, int C, const int32_t* sel, int k, Ew g, float* x, bool fill, float* m, float* v,
                         const AdamParams& hp, int64_t step, bool in_out) {
  if (in_out) {  // one contiguous AdamW of R elements per selected column, m and v (k, R)
    parallel_ranges((size_t)k, 1, std::max<size_t>(1, kSelRange / std::max(1, R)), [&](size_t lo, size_t hi) {
      std::vector<float> tw(!x && w.bf16 ? R : 0), tg(g.bf16 ? R : 0);  // in place on a bf16 w; a bf16 g
      for (size_t c = lo; c < hi; ++c) {
        const size_t j = (size_t)sel[c] * R;
        const float* gc = static_cast<const float*>(g.p) + j;
        if (g.bf16) {
          unpack_bf16(static_cast<const uint16_t*>(g.p) + j, tg.data(), (size_t)R);
          gc = tg.data();
        }
        float* xc = x ? x + c * R : w.bf16 ? tw.data() : static_cast<float*>(w.p) + j;
        if ((!x && w.bf16) || (x && fill))
          for (int r = 0; r < R; ++r) xc[r] = load(w, j + r);
        adam_step(xc, gc, m + c * R, v + c * R, (size_t)R, hp, step, 1.0f);
        if (x || w.bf16)
          for (int r = 0; r < R; ++r) store(w, j + r, xc[r]);
      }
    });
    return;
  }
  // Row by row: gather the row's selected weights (or take the master's row) and gradients into
  // small buffers (they stay in L1), run the vectorised adam_step on them, scatter the weights back.
  // One pass over the scattered columns instead of a gather into an (R, k) gradient buffer first.
  parallel_ranges((size_t)R, 1, std::max<size_t>(1, kSelRange / std::max(1, k)), [&](size_t lo, size_t hi) {
    std::vector<float> tw(x ? 0 : k), tg(k);
    for (size_t i = lo; i < hi; ++i) {
      const size_t row = i * C;
      float* p = x ? x + i * k : tw.data();
      for (int c = 0; c < k; ++c) {
        if (!x || fill) p[c] = load(w, row + sel[c]);
        tg[c] = load(g, row + sel[c]);
      }
      adam_step(p, tg.data(), m + i * k, v + i * k, (size_t)k, hp, step, 1.0f);
      for (int c = 0; c < k; ++c) store(w, row + sel[c], p[c]);
    }
  });
}
}  // namespace

void selective_adam(float* w, int R, int C, const int32_t* sel, int k, const float* g,
                    float* m, float* v, const AdamParams& hp, int64_t step, bool in_out) {
  selective_adam_impl({w, false}, R, C, sel, k, {const_cast<float*>(g), false}, nullptr, false, m, v, hp, step,
                      in_out);
}

void selective_adam_master(float* w, int R, int C, const int32_t* sel, int k, const float* g, float* x, bool fill,
                           float* m, float* v, const AdamParams& hp, int64_t step, bool in_out) {
  selective_adam_impl({w, false}, R, C, sel, k, {const_cast<float*>(g), false}, x, fill, m, v, hp, step, in_out);
}

void selective_adam_mixed(Ew w, int R, int C, const int32_t* sel, int k, Ew g, float* x, bool fill, float* m,
                          float* v, const AdamParams& hp, int64_t step, bool in_out) {
  selective_adam_impl(w, R, C, sel, k, g, x, fill, m, v, hp, step, in_out);
}

size_t merge_unselected(float* dst, int C, const float* src, size_t off, size_t n,
                        const int32_t* sel, int k, int in_out_rows, size_t base) {
  if (k == 0) {
    std::copy(src, src + n, dst + (off - base));
    return n;
  }
  if (in_out_rows > 0) {  // storage (C, R): runs of whole columns; a selected column is skipped
    const size_t R = (size_t)in_out_rows, end = off + n;
    size_t written = 0;
    const int32_t* q = std::lower_bound(sel, sel + k, (int32_t)(off / R));
    for (size_t e = off; e < end;) {
      const size_t col = e / R;
      const size_t run = std::min(end - e, (col + 1) * R - e);
      while (q < sel + k && (size_t)*q < col) ++q;
      if (q == sel + k || (size_t)*q != col) {
        std::memcpy(dst + (e - base), src + (e - off), run * sizeof(float));
        written += run;
      }
      e += run;
    }
    return written;
  }
  // Row by row: keep the selected values of the run, copy the whole run, put them back.
  std::vector<float> keep((size_t)k);
  size_t written = 0;
  const size_t end = off + n;
  for (size_t e = off; e < end;) {
    const size_t col = e % (size_t)C;
    const size_t run = std::min(end - e, (size_t)C - col);
    const int32_t* lo = std::lower_bound(sel, sel + k, (int32_t)col);
    const int32_t* hi = std::lower_bound(lo, sel + k, (int32_t)(col + run));
    const size_t row = e - col - base;  // the row's start in dst (wraps below a shard's start; only
                                        // selected columns >= col are indexed, at >= e - base)
    for (const int32_t* q = lo; q < hi; ++q) keep[q - lo] = dst[row + (size_t)*q];
    std::memcpy(dst + (e - base), src + (e - off), run * sizeof(float));
    for (const int32_t* q = lo; q < hi; ++q) dst[row + (size_t)*q] = keep[q - lo];
    written += run - (size_t)(hi - lo);
    e += run;
  }
  return written;
}

size_t merge_unselected_unpacked(void (*unpack)(const uint16_t*, float*, size_t), float* dst, int C,
                                 const uint16_t* src, size_t off, size_t n, const int32_t* sel, int k,
                                 int in_out_rows, size_t base) {
  // unpacked in blocks into a stack-sized buffer, then the fp32 merge (one code path for the
  // selection logic)
  constexpr size_t kBlock = 4096;
  float buf[kBlock];
  size_t written = 0;
  for (size_t done = 0; done < n;) {
    const size_t m = std::min(kBlock, n - done);
    unpack(src + done, buf, m);
    written += merge_unselected(dst, C, buf, off + done, m, sel, k, in_out_rows, base);
    done += m;
  }
  return written;
}

void grad_mass(const float* g, int R, int C, const int32_t* sel, int k, double* total,
               double* selected, bool in_out) {
  double t = 0.0, s = 0.0;
  for (size_t e = 0, n = (size_t)R * C; e < n; ++e) t += std::fabs((double)g[e]);
  if (in_out) {
    for (int c = 0; c < k; ++c) {
      const float* col = g + (size_t)sel[c] * R;
      for (int i = 0; i < R; ++i) s += std::fabs((double)col[i]);
    }
    *total = t;
    *selected = s;
    return;
  }
  for (int i = 0; i < R; ++i) {
    const float* row = g + (size_t)i * C;
    for (int c = 0; c < k; ++c) s += std::fabs((double)row[sel[c]]);
  }
  *total = t;
  *selected = s;
}

size_t selected_before(size_t e, int R, int C, const int32_t* sel, int k, bool in_out) {
  if (in_out) {  // (k, R): whole selected columns before e's column, then e's column's rows before e
    const size_t col = e / (size_t)R;
    const int32_t* q = std::lower_bound(sel, sel + k, (int32_t)std::min<size_t>(col, (size_t)C));
    size_t n = (size_t)(q - sel) * (size_t)R;
    if (q < sel + k && (size_t)*q == col) n += e % (size_t)R;
    return n;
  }
  const size_t row = e / (size_t)C, col = e % (size_t)C;  // (R, k): k per row before e's row
  return row * (size_t)k + (size_t)(std::lower_bound(sel, sel + k, (int32_t)col) - sel);
}

void column_importance_segment(const float* g, size_t lo, size_t hi, int R, int C, bool l2, float* imp,
                               bool in_out) {
  std::fill(imp, imp + C, 0.0f);
  if (in_out) {  // each column's sum over its rows in order, from 0 (column_importance's order)
    for (size_t e = lo; e < hi;) {
      const size_t col = e / (size_t)R, end = std::min(hi, (col + 1) * (size_t)R);
      float s = 0.0f;
      for (; e < end; ++e) s += l2 ? g[e - lo] * g[e - lo] : std::fabs(g[e - lo]);
      imp[col] = s;
    }
    return;
  }
  for (size_t e = lo; e < hi;) {  // row by row, each column's additions in row order
    const size_t col = e % (size_t)C, end = std::min(hi, e - col + (size_t)C);
    const float* x = g + (e - lo);
    float* out = imp + col;
    if (l2)
      for (size_t j = 0; j < end - e; ++j) out[j] += x[j] * x[j];
    else
      for (size_t j = 0; j < end - e; ++j) out[j] += std::fabs(x[j]);
    e = end;
  }
}

namespace {
void selective_adam_segment_impl(float* w, size_t lo, size_t hi, int R, int C, const int32_t* sel, int k,
                                 const float* g, float* x, bool fill, float* m, float* v, const AdamParams& hp,
                                 int64_t step, bool in_out) {
  const size_t m0 = selected_before(lo, R, C, sel, k, in_out);
  if (in_out) {  // one contiguous AdamW per selected column's run inside [lo, hi)
    const size_t Rs = (size_t)R;
    for (const int32_t* q = std::lower_bound(sel, sel + k, (int32_t)(lo / Rs)); q < sel + k && (size_t)*q * Rs < hi;
         ++q) {
      const size_t a = std::max(lo, (size_t)*q * Rs), b = std::min(hi, ((size_t)*q + 1) * Rs);
      const size_t mi = (size_t)(q - sel) * Rs + a % Rs - m0;
      if (!x) {
        adam_step(w + (a - lo), g + (a - lo), m + mi, v + mi, b - a, hp, step, 1.0f);
        continue;
      }
      if (fill) std::copy(w + (a - lo), w + (b - lo), x + mi);
      adam_step(x + mi, g + (a - lo), m + mi, v + mi, b - a, hp, step, 1.0f);
      std::copy(x + mi, x + mi + (b - a), w + (a - lo));
    }
    return;
  }
  // row by row, as selective_adam: the row's selected elements inside [lo, hi) gathered (or the
  // master's, contiguous), updated, scattered back
  std::vector<float> tw(x ? 0 : (size_t)k), tg((size_t)k);
  for (size_t rs = lo - lo % (size_t)C; rs < hi; rs += (size_t)C) {
    const size_t a = std::max(lo, rs), b = std::min(hi, rs + (size_t)C);
    const int32_t* q0 = std::lower_bound(sel, sel + k, (int32_t)(a - rs));
    const int32_t* q1 = std::lower_bound(q0, sel + k, (int32_t)(b - rs));
    const size_t n = (size_t)(q1 - q0);
    if (n == 0) continue;
    const size_t mi = rs / (size_t)C * (size_t)k + (size_t)(q0 - sel) - m0;
    float* p = x ? x + mi : tw.data();
    for (size_t c = 0; c < n; ++c) {
      if (!x || fill) p[c] = w[rs + (size_t)q0[c] - lo];
      tg[c] = g[rs + (size_t)q0[c] - lo];
    }
    adam_step(p, tg.data(), m + mi, v + mi, n, hp, step, 1.0f);
    for (size_t c = 0; c < n; ++c) w[rs + (size_t)q0[c] - lo] = p[c];
  }
}
}  // namespace

void selective_adam_segment(float* w, size_t lo, size_t hi, int R, int C, const int32_t* sel, int k,
                            const float* g, float* m, float* v, const AdamParams& hp, int64_t step, bool in_out) {
  selective_adam_segment_impl(w, lo, hi, R, C, sel, k, g, nullptr, false, m, v, hp, step, in_out);
}

void selective_adam_segment_master(float* w, size_t lo, size_t hi, int R, int C, const int32_t* sel, int k,
                                   const float* g, float* x, bool fill, float* m, float* v, const AdamParams& hp,
                                   int64_t step, bool in_out) {
  selective_adam_segment_impl(w, lo, hi, R, C, sel, k, g, x, fill, m, v, hp, step, in_out);
}

}  // namespace zf::kernels::cpu
