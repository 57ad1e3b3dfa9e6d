// ZenFlow's column kernels: importance, top-k, gather/scatter, selective AdamW, merge, and
// the gradient mass of the auto update rule (zenflow-algorithm.md, docs/zenflow.md).
#include <algorithm>
#include <cmath>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"

namespace zf::kernels::cpu {

void column_importance(const float* g, int R, int C, bool l2, float* imp) {
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

void selective_adam(float* w, int R, int C, const int32_t* sel, int k, const float* g_sel,
                    float* m, float* v, const AdamParams& hp, int64_t step) {
  std::vector<float> tmp(k);
  for (int i = 0; i < R; ++i) {
    float* row = w + (size_t)i * C;
    for (int c = 0; c < k; ++c) tmp[c] = row[sel[c]];
    adam_step(tmp.data(), g_sel + (size_t)i * k, m + (size_t)i * k, v + (size_t)i * k, (size_t)k, hp,
              step, 1.0f);
    for (int c = 0; c < k; ++c) row[sel[c]] = tmp[c];
  }
}

size_t merge_unselected(float* dst, int C, const float* src, size_t off, size_t n,
                        const int32_t* sel, int k) {
  if (k == 0) {
    std::copy(src, src + n, dst + off);
    return n;
  }
  std::vector<uint8_t> keep(C, 1);
  for (int c = 0; c < k; ++c) keep[sel[c]] = 0;
  size_t written = 0;
  size_t e = off;
  const size_t end = off + n;
  while (e < end) {  // row by row: the column of element e is e % C
    size_t col = e % (size_t)C;
    size_t run = std::min(end - e, (size_t)C - col);
    float* d = dst + e;
    const float* s = src + (e - off);
    for (size_t q = 0; q < run; ++q)
      if (keep[col + q]) {
        d[q] = s[q];
        ++written;
      }
    e += run;
  }
  return written;
}

void grad_mass(const float* g, int R, int C, const int32_t* sel, int k, double* total,
               double* selected) {
  double t = 0.0, s = 0.0;
  for (size_t e = 0, n = (size_t)R * C; e < n; ++e) t += std::fabs((double)g[e]);
  for (int i = 0; i < R; ++i) {
    const float* row = g + (size_t)i * C;
    for (int c = 0; c < k; ++c) s += std::fabs((double)row[sel[c]]);
  }
  *total = t;
  *selected = s;
}

}  // namespace zf::kernels::cpu
