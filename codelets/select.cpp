// ZenFlow's codelets: column importance, top-k, selective AdamW, the merge of
// host results into device weights, and the gradient mass read by the auto update rule.
#include <starpu.h>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/parallel.hpp"
#include "runtime/task.hpp"

namespace zf {

void MergeLog::add(const MergeEvent& e) noexcept {
  try {
    std::lock_guard<std::mutex> lk(mu_);
    ev_.push_back(e);
  } catch (...) {
  }
}

std::vector<MergeEvent> MergeLog::events() const {
  std::lock_guard<std::mutex> lk(mu_);
  return ev_;
}

namespace {

struct ColArgs {
  int R, C, k;
  int l2;
  int in_out;  // the weight is stored (C, R): a column is contiguous
  AdamParams hp;
  int64_t step;
  int fill;  // selective AdamW on a master: the master first takes the weight's selected values
};
struct MergeArgs {
  int C, k;
  int in_out_rows;  // > 0: the weight is stored (C, R), R = in_out_rows
  size_t off, n;
  size_t base;  // ZeRO stage 3: the destination shard's first element (0: the whole weight)
  MergeLog* log;
  MergeEvent ev;
  int src_half;  // 0: fp32 source; 1: bf16 (precision "bf16"); 2: fp16 (precision "fp16")
};

void importance_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ColArgs*>(a);
  kernels::cpu::column_importance(vec_ptr(b[0]), p->R, p->C, p->l2 != 0, vec_ptr(b[1]), p->in_out != 0);
}
void topk_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ColArgs*>(a);
  kernels::cpu::topk_columns(vec_ptr(b[0]), p->C, p->k, vec_as<int32_t>(b[1]));
}
// (w and g as stored, bf16 included: CodeletDef::cpu_bf16_as_is; the wrapper would widen the whole
// weight and gradient for the selected columns)
void selective_adam_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ColArgs*>(a);
  kernels::cpu::selective_adam_mixed(ew_of(b[0]), p->R, p->C, vec_as<int32_t>(b[1]), p->k, ew_of(b[2]), nullptr,
                                     false, vec_ptr(b[3]), vec_ptr(b[4]), p->hp, p->step, p->in_out != 0);
}
// buffers: w (RW), sel (R), g (R), master (RW), m (RW), v (RW)
void selective_adam_master_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ColArgs*>(a);
  kernels::cpu::selective_adam_mixed(ew_of(b[0]), p->R, p->C, vec_as<int32_t>(b[1]), p->k, ew_of(b[2]),
                                     vec_ptr(b[3]), p->fill != 0, vec_ptr(b[4]), vec_ptr(b[5]), p->hp, p->step,
                                     p->in_out != 0);
}
void grad_mass_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ColArgs*>(a);
  double* out = vec_as<double>(b[2]);
  kernels::cpu::grad_mass(vec_ptr(b[0]), p->R, p->C, vec_as<int32_t>(b[1]), p->k, &out[0], &out[1], p->in_out != 0);
}
// Memory traffic for the simulation's roofline (CodeletDef::bytes): the elements the kernels touch,
// not their buffers' whole sizes. Selective AdamW: the R x k selected elements of w (read and
// written), g (read), m and v (read and written), 28 bytes each as adam_step's; a merge: its n
// source elements read, n destination elements written (move_bytes in adam_step.cpp).
double selective_adam_bytes(const void* a) {
  const auto* p = static_cast<const ColArgs*>(a);
  return kAdamBytesPerElement * (double)p->R * (double)p->k;
}
// with a master: its selected elements read and written too
double selective_adam_master_bytes(const void* a) {
  const auto* p = static_cast<const ColArgs*>(a);
  return (kAdamBytesPerElement + 8.0) * (double)p->R * (double)p->k;
}
double merge_bytes(const void* a) {
  const auto* p = static_cast<const MergeArgs*>(a);
  return (double)((p->src_half ? 2 : 4) + 4) * (double)p->n;
}
// the least elements a helper takes of a merge: 256 KiB of fp32
constexpr size_t kMergeRange = 65536;

// In ranges of whole rows (columns of a weight stored (C, R)) that idle workers help with: every
// element is copied or kept alone, so the result does not depend on who runs which range.
void merge_common(void* b[], MergeArgs* p, const int32_t* sel) noexcept {
  double t0 = starpu_timing_now();
  float* dst = vec_ptr(b[1]);
  const int k = sel ? p->k : 0;
  const size_t unit = p->in_out_rows > 0 ? (size_t)p->in_out_rows : (size_t)p->C;
  parallel_ranges(p->n, unit, kMergeRange, [&](size_t lo, size_t hi) {
    if (p->src_half == 1)
      kernels::cpu::merge_unselected_bf16(dst, p->C, vec_as<uint16_t>(b[0]) + lo, p->off + lo, hi - lo, sel, k,
                                          p->in_out_rows, p->base);
    else if (p->src_half == 2)
      kernels::cpu::merge_unselected_fp16(dst, p->C, vec_as<uint16_t>(b[0]) + lo, p->off + lo, hi - lo, sel, k,
                                          p->in_out_rows, p->base);
    else
      kernels::cpu::merge_unselected(dst, p->C, vec_ptr(b[0]) + lo, p->off + lo, hi - lo, sel, k, p->in_out_rows,
                                     p->base);
  });
  if (p->log) {
    MergeEvent e = p->ev;
    e.start_us = t0;
    e.end_us = starpu_timing_now();
    p->log->add(e);
  }
}
void merge_all_cpu(void* b[], void* a) noexcept { merge_common(b, static_cast<MergeArgs*>(a), nullptr); }
void merge_sel_cpu(void* b[], void* a) noexcept {
  merge_common(b, static_cast<MergeArgs*>(a), vec_as<int32_t>(b[2]));
}
#ifdef ZF_USE_CUDA
void importance_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ColArgs*>(a);
  cuda_check(kernels::cuda::column_importance(vec_ptr(b[0]), p->R, p->C, p->l2 != 0, vec_ptr(b[1]), cuda_stream(),
                                              p->in_out != 0));
}
void topk_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ColArgs*>(a);
  cuda_check(kernels::cuda::topk_columns(vec_ptr(b[0]), p->C, p->k, vec_as<int32_t>(b[1]), cuda_stream()));
}
void selective_adam_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ColArgs*>(a);
  cuda_check(kernels::cuda::selective_adam(vec_ptr(b[0]), p->R, p->C, vec_as<int32_t>(b[1]), p->k, vec_ptr(b[2]),
                                           vec_ptr(b[3]), vec_ptr(b[4]), p->hp, p->step, cuda_stream(),
                                           p->in_out != 0));
}
void selective_adam_master_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ColArgs*>(a);
  cuda_check(kernels::cuda::selective_adam_master(vec_ptr(b[0]), p->R, p->C, vec_as<int32_t>(b[1]), p->k,
                                                  vec_ptr(b[2]), vec_ptr(b[3]), p->fill != 0, vec_ptr(b[4]),
                                                  vec_ptr(b[5]), p->hp, p->step, cuda_stream(), p->in_out != 0));
}
void grad_mass_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ColArgs*>(a);
  cuda_check(kernels::cuda::grad_mass(vec_ptr(b[0]), p->R, p->C, vec_as<int32_t>(b[1]), p->k, vec_as<double>(b[2]),
                                      cuda_stream(), p->in_out != 0));
}
// The kernel runs after this function returns (asynchronous): the event records the launch time
// as both start and end; the staleness fields are what the merge log is read for.
void merge_common_cuda(void* b[], MergeArgs* p, const int32_t* sel) noexcept {
  const double t0 = starpu_timing_now();
  if (p->src_half == 1)
    cuda_check(kernels::cuda::merge_unselected_bf16(vec_ptr(b[1]), p->C, vec_as<uint16_t>(b[0]), p->off, p->n, sel,
                                                    sel ? p->k : 0, cuda_stream(), p->in_out_rows, p->base));
  else if (p->src_half == 2)
    cuda_check(kernels::cuda::merge_unselected_fp16(vec_ptr(b[1]), p->C, vec_as<uint16_t>(b[0]), p->off, p->n, sel,
                                                    sel ? p->k : 0, cuda_stream(), p->in_out_rows, p->base));
  else
    cuda_check(kernels::cuda::merge_unselected(vec_ptr(b[1]), p->C, vec_ptr(b[0]), p->off, p->n, sel,
                                               sel ? p->k : 0, cuda_stream(), p->in_out_rows, p->base));
  if (p->log) {
    MergeEvent e = p->ev;
    e.start_us = e.end_us = t0;
    p->log->add(e);
  }
}
void merge_all_cuda(void* b[], void* a) noexcept { merge_common_cuda(b, static_cast<MergeArgs*>(a), nullptr); }
void merge_sel_cuda(void* b[], void* a) noexcept {
  merge_common_cuda(b, static_cast<MergeArgs*>(a), vec_as<int32_t>(b[2]));
}
#endif

starpu_codelet& importance_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_column_importance", importance_cpu, ZF_CUDA_FUNC(importance_cuda), 2,
                                          {STARPU_R, STARPU_W}}, &m);
  return c;
}
starpu_codelet& topk_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet({"zf_topk", topk_cpu, ZF_CUDA_FUNC(topk_cuda), 2, {STARPU_R, STARPU_W}}, &m);
  return c;
}
starpu_codelet& selective_adam_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet(cpu_bf16_as_is({"zf_selective_adam", selective_adam_cpu, ZF_CUDA_FUNC(selective_adam_cuda), 5,
                                   {STARPU_RW, STARPU_R, STARPU_R, STARPU_RW, STARPU_RW}, nullptr, Collective::None, 0,
                                   nullptr, selective_adam_bytes},
                                  0b101),
                   &m);
  return c;
}
starpu_codelet& selective_adam_master_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet(cpu_bf16_as_is({"zf_selective_adam_master", selective_adam_master_cpu,
                                   ZF_CUDA_FUNC(selective_adam_master_cuda), 6,
                                   {STARPU_RW, STARPU_R, STARPU_R, STARPU_RW, STARPU_RW, STARPU_RW}, nullptr,
                                   Collective::None, 0, nullptr, selective_adam_master_bytes},
                                  0b101),
                   &m);
  return c;
}
starpu_codelet& grad_mass_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_grad_mass", grad_mass_cpu, ZF_CUDA_FUNC(grad_mass_cuda), 3,
                                          {STARPU_R, STARPU_R, STARPU_W}}, &m);
  return c;
}
starpu_codelet& merge_all_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_merge", merge_all_cpu, ZF_CUDA_FUNC(merge_all_cuda), 2,
                                          {STARPU_R, STARPU_RW}, nullptr, Collective::None, 0, nullptr, merge_bytes},
                                         &m);
  return c;
}
starpu_codelet& merge_sel_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_merge_selected", merge_sel_cpu, ZF_CUDA_FUNC(merge_sel_cuda), 3,
                                          {STARPU_R, STARPU_RW, STARPU_R}, nullptr, Collective::None, 0, nullptr,
                                          merge_bytes}, &m);
  return c;
}

// w (R, C), or (C, R) stored transposed (in_out)
ColArgs dims(const SubmitOptions& opt, const Tensor& w, const Tensor* sel, bool in_out) {
  expect(w.shape().size() == 2, opt, "expected a 2-D weight: " + shape_str(w));
  ColArgs a{};
  a.R = (int)w.dim(in_out ? 1 : 0);
  a.C = (int)w.dim(in_out ? 0 : 1);
  a.in_out = in_out ? 1 : 0;
  a.k = sel ? (int)sel->numel() : 0;
  expect(!sel || (a.k >= 1 && a.k <= a.C), opt, "selection of " + std::to_string(a.k) + " columns of " + shape_str(w));
  return a;
}

}  // namespace

void insert_column_importance(const SubmitOptions& opt, const Tensor& g, const Tensor& imp, bool l2, bool in_out) {
  ColArgs a = dims(opt, g, nullptr, in_out);
  expect(imp.numel() == (size_t)a.C, opt, shape_str(imp) + " must hold one value per column");
  a.l2 = l2 ? 1 : 0;
  TaskBuilder(importance_cl(), opt).r(g).w(imp).args(a).submit();
}

void insert_topk(const SubmitOptions& opt, const Tensor& imp, const Tensor& sel) {
  ColArgs a{};
  a.C = (int)imp.numel();
  a.k = (int)sel.numel();
  expect(a.k >= 1 && a.k <= a.C, opt, "top-k of " + std::to_string(a.k) + " out of " + std::to_string(a.C));
  TaskBuilder(topk_cl(), opt).r(imp).w(sel).args(a).submit();
}

void insert_selective_adam(const SubmitOptions& opt, const AdamParams& hp, int64_t step, const Tensor& w,
                           const Tensor& sel, const Tensor& g, const Tensor& m, const Tensor& v, bool in_out,
                           const Tensor* master, bool fill) {
  ColArgs a = dims(opt, w, &sel, in_out);
  const size_t rk = (size_t)a.R * a.k;
  expect(g.shape() == w.shape(), opt, "the gradient " + shape_str(g) + " must have the weight's shape " + shape_str(w));
  expect(m.numel() == rk && v.numel() == rk, opt, in_out ? "m and v must be (k, R)" : "m and v must be (R, k)");
  expect(!master || (master->numel() == rk && master->elem_size() == sizeof(float)), opt,
         "the master must be fp32 and shaped like m and v");
  expect(step >= 1, opt, "adam: step counts from 1");
  a.hp = hp;
  a.step = step;
  a.fill = fill ? 1 : 0;
  if (master)
    TaskBuilder(selective_adam_master_cl(), opt).rw(w).r(sel).r(g).rw(*master).rw(m).rw(v).args(a).submit();
  else
    TaskBuilder(selective_adam_cl(), opt).rw(w).r(sel).r(g).rw(m).rw(v).args(a).submit();
}

void insert_merge(const SubmitOptions& opt, const Tensor& src, const Tensor& w, Slice ws, const Tensor* sel,
                  MergeLog* log, const MergeEvent& ev, bool in_out, const WeightShard* shard) {
  ColArgs d{};
  size_t base = 0;
  if (shard) {  // the shard of a (R, C) weight: ws inside [base, base + n)
    d.R = shard->R;
    d.C = shard->C;
    d.k = sel ? (int)sel->numel() : 0;
    in_out = shard->in_out;
    base = shard->base;
    expect(w.numel() >= shard->n && ws.offset >= base && ws.offset + ws.n <= base + shard->n, opt,
           "merge slice outside the shard " + shape_str(w));
  } else {
    d = dims(opt, w, sel, in_out);
    expect(ws.offset + ws.n <= w.numel(), opt, "merge slice does not match " + shape_str(w));
  }
  expect(ws.n == src.numel(), opt, "merge slice does not match " + shape_str(src));
  expect(src.elem_size() == 4 || src.elem_size() == 2, opt, "merge: the source must be fp32, bf16 or fp16");
  MergeArgs a{d.C, d.k, in_out ? d.R : 0, ws.offset, ws.n, base, log, ev,
              src.elem_size() == 4 ? 0 : src.half() == Half::Fp16 ? 2 : 1};
  if (sel)
    TaskBuilder(merge_sel_cl(), opt).r(src).rw(w).r(*sel).args(a).submit();
  else
    TaskBuilder(merge_all_cl(), opt).r(src).rw(w).args(a).submit();
}

void insert_grad_mass(const SubmitOptions& opt, const Tensor& g, const Tensor& sel, const Tensor& out, bool in_out) {
  ColArgs a = dims(opt, g, &sel, in_out);
  expect(out.bytes() >= 2 * sizeof(double), opt, "grad mass needs 2 doubles");
  TaskBuilder(grad_mass_cl(), opt).r(g).r(sel).w(out).args(a).submit();
}

}  // namespace zf
