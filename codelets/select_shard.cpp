// ZeRO stage 3 with ZenFlow (docs/zenflow.md, "ZeRO stage 3"): the column importance and the
// selective AdamW of a weight's shard, the segment of its storage that this rank owns. CPU and
// CUDA workers (the CUDA kernels: codelets/kernels/cuda/select.cu and adam.cu, bitwise the CPU's).
#include <starpu.h>

#include <algorithm>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct ShardColArgs {
  size_t lo, hi;
  int R, C, k, l2, in_out;
  size_t capacity;  // of the moments
  AdamParams hp;
  int64_t step;
  int fill;  // with a master: it first takes the shard's selected values
};

// buffers: g shard (R), imp (W)
void importance_shard_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ShardColArgs*>(a);
  kernels::cpu::column_importance_segment(vec_ptr(b[0]), p->lo, p->hi, p->R, p->C, p->l2 != 0, vec_ptr(b[1]),
                                          p->in_out != 0);
}

// buffers: w shard (RW), sel (R), g shard (R), m (RW), v (RW)
// Whether the shard's selected elements fit its moments (else the task fails, recorded).
bool shard_moments_hold(const ShardColArgs* p, const int32_t* sel) {
  const size_t need = kernels::cpu::selected_before(p->hi, p->R, p->C, sel, p->k, p->in_out != 0) -
                      kernels::cpu::selected_before(p->lo, p->R, p->C, sel, p->k, p->in_out != 0);
  if (need <= p->capacity) return true;
  record_task_failure("selective AdamW of a shard: more selected elements than its moments hold");
  return false;
}

void selective_adam_shard_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ShardColArgs*>(a);
  const int32_t* sel = vec_as<int32_t>(b[1]);
  if (!shard_moments_hold(p, sel)) return;
  kernels::cpu::selective_adam_segment(vec_ptr(b[0]), p->lo, p->hi, p->R, p->C, sel, p->k, vec_ptr(b[2]),
                                       vec_ptr(b[3]), vec_ptr(b[4]), p->hp, p->step, p->in_out != 0);
}

// buffers: w shard (RW), sel (R), g shard (R), master (RW), m (RW), v (RW)
void selective_adam_shard_master_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ShardColArgs*>(a);
  const int32_t* sel = vec_as<int32_t>(b[1]);
  if (!shard_moments_hold(p, sel)) return;
  kernels::cpu::selective_adam_segment_master(vec_ptr(b[0]), p->lo, p->hi, p->R, p->C, sel, p->k, vec_ptr(b[2]),
                                              vec_ptr(b[3]), p->fill != 0, vec_ptr(b[4]), vec_ptr(b[5]), p->hp,
                                              p->step, p->in_out != 0);
}

// Memory traffic for the simulation's roofline (CodeletDef::bytes): the shard's expected selected
// elements, (hi - lo) k / C, at selective AdamW's 28 bytes each (select.cpp)
double selective_adam_shard_bytes(const void* a) {
  const auto* p = static_cast<const ShardColArgs*>(a);
  return kAdamBytesPerElement * (double)(p->hi - p->lo) * (double)p->k / (double)p->C;
}

// with a master: its selected elements read and written too
double selective_adam_shard_master_bytes(const void* a) {
  const auto* p = static_cast<const ShardColArgs*>(a);
  return (kAdamBytesPerElement + 8.0) * (double)(p->hi - p->lo) * (double)p->k / (double)p->C;
}

#ifdef ZF_USE_CUDA
void importance_shard_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ShardColArgs*>(a);
  cuda_check(kernels::cuda::column_importance_segment(vec_ptr(b[0]), p->lo, p->hi, p->R, p->C, p->l2 != 0,
                                                      vec_ptr(b[1]), cuda_stream(), p->in_out != 0));
}
// sel is on the device: no run-time capacity check as on the CPU (which would synchronize); the
// moments' capacity was checked at submission (selective_moments_capacity is the most any
// selection of k columns can select inside the shard)
void selective_adam_shard_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ShardColArgs*>(a);
  cuda_check(kernels::cuda::selective_adam_segment(vec_ptr(b[0]), p->lo, p->hi, p->R, p->C, vec_as<int32_t>(b[1]),
                                                   p->k, vec_ptr(b[2]), vec_ptr(b[3]), vec_ptr(b[4]), p->hp, p->step,
                                                   cuda_stream(), p->in_out != 0));
}
void selective_adam_shard_master_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ShardColArgs*>(a);
  cuda_check(kernels::cuda::selective_adam_segment_master(vec_ptr(b[0]), p->lo, p->hi, p->R, p->C,
                                                          vec_as<int32_t>(b[1]), p->k, vec_ptr(b[2]), vec_ptr(b[3]),
                                                          p->fill != 0, vec_ptr(b[4]), vec_ptr(b[5]), p->hp, p->step,
                                                          cuda_stream(), p->in_out != 0));
}
#endif

starpu_codelet& importance_shard_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_column_importance_shard", importance_shard_cpu,
                                          ZF_CUDA_FUNC(importance_shard_cuda), 2, {STARPU_R, STARPU_W}}, &m);
  return c;
}
starpu_codelet& selective_adam_shard_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_selective_adam_shard", selective_adam_shard_cpu,
                                          ZF_CUDA_FUNC(selective_adam_shard_cuda), 5,
                                          {STARPU_RW, STARPU_R, STARPU_R, STARPU_RW, STARPU_RW}, nullptr,
                                          Collective::None, 0, nullptr, selective_adam_shard_bytes}, &m);
  return c;
}

starpu_codelet& selective_adam_shard_master_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_selective_adam_shard_master", selective_adam_shard_master_cpu,
                                          ZF_CUDA_FUNC(selective_adam_shard_master_cuda), 6,
                                          {STARPU_RW, STARPU_R, STARPU_R, STARPU_RW, STARPU_RW, STARPU_RW}, nullptr,
                                          Collective::None, 0, nullptr, selective_adam_shard_master_bytes}, &m);
  return c;
}

ShardColArgs shard_args(const SubmitOptions& opt, const Tensor& x, const WeightShard& s) {
  expect(s.R >= 1 && s.C >= 1 && s.base + s.n <= (size_t)s.R * (size_t)s.C, opt,
         "the shard [" + std::to_string(s.base) + ", +" + std::to_string(s.n) + ") is outside its weight");
  expect(fp32_values(x) && x.numel() >= s.n, opt, shape_str(x) + " is shorter than its shard");
  ShardColArgs a{};
  a.lo = s.base;
  a.hi = s.base + s.n;
  a.R = s.R;
  a.C = s.C;
  a.in_out = s.in_out ? 1 : 0;
  return a;
}

}  // namespace

void insert_column_importance_shard(const SubmitOptions& opt, const Tensor& g, const WeightShard& s, const Tensor& imp,
                                    bool l2) {
  ShardColArgs a = shard_args(opt, g, s);
  expect(imp.numel() == (size_t)s.C, opt, shape_str(imp) + " must hold one value per column");
  a.l2 = l2 ? 1 : 0;
  TaskBuilder(importance_shard_cl(), opt).r(g).w(imp).args(a).submit();
}

void insert_selective_adam_shard(const SubmitOptions& opt, const AdamParams& hp, int64_t step, const Tensor& w,
                                 const WeightShard& s, const Tensor& sel, const Tensor& g, const Tensor& m,
                                 const Tensor& v, const Tensor* master, bool fill) {
  ShardColArgs a = shard_args(opt, w, s);
  a.k = (int)sel.numel();
  expect(a.k >= 1 && a.k <= s.C, opt, "selection of " + std::to_string(a.k) + " columns of " + std::to_string(s.C));
  expect(g.numel() >= s.n, opt, "the gradient " + shape_str(g) + " is shorter than its shard");
  a.capacity = selective_moments_capacity(s, a.k);
  expect(m.numel() >= a.capacity && v.numel() >= a.capacity, opt,
         "m and v must hold " + std::to_string(a.capacity) + " elements (the shard's most selected)");
  expect(!master || (master->numel() >= a.capacity && master->elem_size() == sizeof(float)), opt,
         "the master must be fp32 and hold " + std::to_string(a.capacity) + " elements, as m and v");
  expect(step >= 1, opt, "adam: step counts from 1");
  a.hp = hp;
  a.step = step;
  a.fill = fill ? 1 : 0;
  if (master)
    TaskBuilder(selective_adam_shard_master_cl(), opt).rw(w).r(sel).r(g).rw(*master).rw(m).rw(v).args(a).submit();
  else
    TaskBuilder(selective_adam_shard_cl(), opt).rw(w).r(sel).r(g).rw(m).rw(v).args(a).submit();
}

size_t selected_elements_before(size_t e, const WeightShard& s, const int32_t* sel, int k) {
  return kernels::cpu::selected_before(e, s.R, s.C, sel, k, s.in_out);
}

// in_out: at most min(k, columns spanned) whole columns; else k per row spanned; never more than n
size_t selective_moments_capacity(const WeightShard& s, int k) {
  if (s.n == 0) return 1;
  const size_t major = s.in_out ? (size_t)s.R : (size_t)s.C;  // a storage row's length
  const size_t spanned = (s.base + s.n - 1) / major - s.base / major + 1;
  const size_t most = s.in_out ? std::min(spanned, (size_t)k) * major : spanned * (size_t)k;
  return std::max<size_t>(1, std::min(s.n, most));
}

}  // namespace zf
