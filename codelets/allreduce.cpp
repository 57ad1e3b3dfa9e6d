// Data-parallel all-reduce of a device tensor (docs/data-parallel.md): x <- scale * sum over the
// ranks of x. CPU workers: MPI_Allreduce in place on the host buffer; CUDA workers: ncclAllReduce
// on the worker's stream followed by a scale kernel (STARPU_CUDA_ASYNC, no synchronization).
//
// Every all-reduce task also takes the runtime's comm token in RW mode. A collective is matched
// across ranks by its position in each rank's sequence of collectives: if two independent
// all-reduce tasks (say of two weights' gradients) could run in either order, rank 0 might enter
// the one of fc1 while rank 1 enters the one of fc2, and both would block forever (MPI), or sum
// mismatched buffers (NCCL, which also requires one order on all ranks). The token chains every
// collective of a rank in submission order, and every rank submits the same graph, so all ranks
// execute their collectives in one order. A blocked MPI collective occupies its CPU worker; it
// never waits for a later collective of its own rank, so no rank can deadlock on itself.
#include <starpu.h>

#include <algorithm>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/wire.hpp"
#include "runtime/comm.hpp"
#include "runtime/task.hpp"
#ifdef ZF_USE_NCCL
#include "codelets/kernels/cuda/allreduce.hpp"
#endif

namespace zf {

namespace wire {

int reduce_scatter(const Comm& comm, float* x, const std::vector<size_t>& bounds, Wire w, float scale) {
  const bool f16 = w == Wire::Fp16;
  const size_t n = bounds.back(), r = (size_t)comm.rank(), off = bounds[r], mine = bounds[r + 1] - off;
  std::vector<uint16_t> send(n), copies(mine * (size_t)comm.size());
  // the CPU kernels' vectorised rounding (F16C, AVX-512 BF16 where built), pack()'s bits
  (f16 ? kernels::cpu::pack_fp16 : kernels::cpu::pack_bf16)(x, send.data(), n);
  if (int rc = comm.alltoall_segments(send.data(), bounds, copies.data())) return rc;
  for (size_t i = 0; i < mine; ++i) x[off + i] = fold(f16, copies.data(), mine, comm.size(), i, scale);
  return 0;
}

int allreduce(const Comm& comm, float* x, size_t n, Wire w, float scale) {
  const std::vector<size_t> b = even_bounds(n, comm.size());
  if (int rc = reduce_scatter(comm, x, b, w, scale)) return rc;
  const bool f16 = w == Wire::Fp16;
  const size_t r = (size_t)comm.rank();
  std::vector<uint16_t> all(n);
  const auto pk = f16 ? kernels::cpu::pack_fp16 : kernels::cpu::pack_bf16;
  pk(x + b[r], all.data() + b[r], b[r + 1] - b[r]);  // exact: x holds wire values there
  if (int rc = comm.allgather(all.data(), b)) return rc;
  (f16 ? kernels::cpu::unpack_fp16 : kernels::cpu::unpack_bf16)(all.data(), x, n);
  return 0;
}

}  // namespace wire

namespace {

struct AllreduceArgs {
  const Comm* comm;
  float scale;
  Wire wire;
  size_t n;  // x's elements (the simulation's bytes)
};

void allreduce_cpu(void* b[], void* a) noexcept {  // buffers: x, comm token
  auto* p = static_cast<AllreduceArgs*>(a);
  float* x = vec_ptr(b[0]);
  const size_t n = vec_n(b[0]);
  if (p->wire != Wire::Fp32) {
    if (wire::allreduce(*p->comm, x, n, p->wire, p->scale) != 0)
      record_task_failure(p->wire == Wire::Fp16 ? "the fp16 all-reduce failed (MPI)" : "the bf16 all-reduce failed (MPI)");
    return;
  }
  if (p->comm->allreduce_sum(x, n) != 0) {
    record_task_failure("MPI_Allreduce failed");
    return;
  }
  if (p->scale != 1.0f)
    for (size_t i = 0; i < n; ++i) x[i] *= p->scale;
}
#ifdef ZF_USE_CUDA
void allreduce_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<AllreduceArgs*>(a);
#ifdef ZF_USE_NCCL
  const auto comm = static_cast<ncclComm_t>(p->comm->nccl());
  if (p->wire != Wire::Fp32)
    cuda_check(kernels::cuda::allreduce_wire(vec_ptr(b[0]), vec_n(b[0]), p->scale, p->wire == Wire::Fp16,
                                             p->comm->rank(), p->comm->size(), comm, cuda_stream()));
  else
    cuda_check(kernels::cuda::allreduce_scale(vec_ptr(b[0]), vec_n(b[0]), p->scale, comm, cuda_stream()));
#else
  record_task_failure("all-reduce on a CUDA worker: this build has no NCCL");
#endif
}
#endif

// the bytes the simulation's ring formula counts: x's values on the wire
double allreduce_bytes(const void* a) {
  const auto* p = static_cast<const AllreduceArgs*>(a);
  return (double)p->n * (double)wire_bytes(p->wire);
}

starpu_codelet& allreduce_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_allreduce", allreduce_cpu, ZF_CUDA_FUNC(allreduce_cuda), 2,
                                          {STARPU_RW, STARPU_RW}, nullptr, Collective::AllReduce, 0, allreduce_bytes},
                                         &m);
  return c;
}

// ---- ZeRO stage 1 and 2 (docs/data-parallel.md): reduce-scatter and all-gather over partition
// segments (bounds: ranks + 1 element offsets, owned by the strategy's Partition), chained through
// the same comm token.
struct SegmentArgs {
  const Comm* comm;
  const std::vector<size_t>* bounds;
  float scale;
  int64_t rows, cols, k;  // allreduce_columns: the gradient's logical shape and the selected columns' count
  int in_out;              // the gradient is stored (cols, rows): a column is contiguous
  Wire wire;               // reduce_scatter, allreduce_columns: the values' format on the wire
  size_t n;                // reduce_scatter: x's elements (the simulation's bytes)
  size_t at(int64_t r, int64_t j) const { return in_out ? (size_t)(j * rows + r) : (size_t)(r * cols + j); }
};

// x's own segment <- scale * the sum over the ranks of that segment, the other segments <- 0.
void reduce_scatter_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<SegmentArgs*>(a);
  float* x = vec_ptr(b[0]);
  const std::vector<size_t>& bd = *p->bounds;
  const int r = p->comm->rank();
  if (p->wire != Wire::Fp32) {
    if (wire::reduce_scatter(*p->comm, x, bd, p->wire, p->scale) != 0) {
      record_task_failure(p->wire == Wire::Fp16 ? "the fp16 reduce-scatter failed (MPI)"
                                                 : "the bf16 reduce-scatter failed (MPI)");
      return;
    }
  } else {
    if (p->comm->reduce_scatter_sum(x, bd) != 0) {
      record_task_failure("MPI_Reduce_scatter failed");
      return;
    }
    if (p->scale != 1.0f)
      for (size_t i = bd[(size_t)r]; i < bd[(size_t)r + 1]; ++i) x[i] *= p->scale;
  }
  // the other segments: zeros, not this rank's local values (the fp16 overflow check reads the
  // whole gradient: a local value beyond fp16's range whose mean is within it must not count;
  // ZenFlow's partial importances and selected columns sum over the ranks: docs/data-parallel.md)
  std::fill(x, x + bd[(size_t)r], 0.0f);
  std::fill(x + bd[(size_t)r + 1], x + bd.back(), 0.0f);
}
// buffers: x, sel, comm token: the k selected columns of every row <- their sum over the ranks,
// gathered into one rows x k buffer for one MPI_Allreduce and scattered back (ZenFlow, stage 2:
// after the reduce-scatter each element is non-zero on its owner only, so the sum is the owner's
// value exactly, on every rank; on a 2-byte wire the owner's value is a wire value, so its 2-byte
// crossing is exact too)
void allreduce_columns_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<SegmentArgs*>(a);
  float* x = vec_ptr(b[0]);
  const int32_t* sel = vec_as<int32_t>(b[1]);
  std::vector<float> cols((size_t)(p->rows * p->k));
  for (int64_t r = 0; r < p->rows; ++r)
    for (int64_t j = 0; j < p->k; ++j) cols[(size_t)(r * p->k + j)] = x[p->at(r, sel[j])];
  const int rc = p->wire != Wire::Fp32 ? wire::allreduce(*p->comm, cols.data(), cols.size(), p->wire, 1.0f)
                                        : p->comm->allreduce_sum(cols.data(), cols.size());
  if (rc != 0) {
    record_task_failure("MPI_Allreduce of the selected gradient columns failed");
    return;
  }
  for (int64_t r = 0; r < p->rows; ++r)
    for (int64_t j = 0; j < p->k; ++j) x[p->at(r, sel[j])] = cols[(size_t)(r * p->k + j)];
}
// buffers: x, comm token. A parameter stored in 2 bytes (bf16/fp16) is gathered as its bits.
void allgather_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<SegmentArgs*>(a);
  const int rc = STARPU_VECTOR_GET_ELEMSIZE(b[0]) == sizeof(uint16_t)
                     ? p->comm->allgather(reinterpret_cast<uint16_t*>(STARPU_VECTOR_GET_PTR(b[0])), *p->bounds)
                     : p->comm->allgather(vec_ptr(b[0]), *p->bounds);
  if (rc != 0) record_task_failure("MPI_Allgatherv failed");
}
// buffers: the partial sums (doubles) of this rank, total (one double), comm token: total <- the
// sum over the ranks of every partial (the global gradient norm's square under a partition)
void allreduce_partials_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<SegmentArgs*>(a);
  const int nb = STARPU_TASK_GET_NBUFFERS(starpu_task_get_current());
  double s = 0.0;
  for (int i = 0; i + 2 < nb; ++i) {
    const double* d = vec_as<double>(b[i]);
    for (size_t j = 0; j < vec_n(b[i]); ++j) s += d[j];
  }
  double* total = vec_as<double>(b[nb - 2]);
  total[0] = s;
  if (p->comm->allreduce_sum(total, 1) != 0) record_task_failure("MPI_Allreduce of the clip's sums of squares failed");
}
void allreduce_flag_cpu(void* b[], void* a) noexcept {  // buffers: flag (uint32), comm token
  auto* p = static_cast<SegmentArgs*>(a);
  if (p->comm->allreduce_or(vec_as<uint32_t>(b[0]), vec_n(b[0])) != 0) record_task_failure("MPI_Allreduce (BOR) failed");
}
#ifdef ZF_USE_CUDA
void reduce_scatter_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<SegmentArgs*>(a);
#ifdef ZF_USE_NCCL
  const auto comm = static_cast<ncclComm_t>(p->comm->nccl());
  if (p->wire != Wire::Fp32)
    cuda_check(kernels::cuda::reduce_scatter_wire(vec_ptr(b[0]), *p->bounds, p->comm->rank(), p->scale,
                                                  p->wire == Wire::Fp16, comm, cuda_stream()));
  else
    cuda_check(kernels::cuda::reduce_scatter_scale(vec_ptr(b[0]), *p->bounds, p->comm->rank(), p->scale, comm,
                                                   cuda_stream()));
#else
  (void)p;
  record_task_failure("reduce-scatter on a CUDA worker: this build has no NCCL");
#endif
}
void allreduce_columns_cuda(void* b[], void* a) noexcept {  // buffers: x, sel, comm token
  auto* p = static_cast<SegmentArgs*>(a);
#ifdef ZF_USE_NCCL
  cuda_check(kernels::cuda::allreduce_columns(vec_ptr(b[0]), (int)p->rows, (int)p->cols, vec_as<int32_t>(b[1]),
                                              (int)p->k, p->in_out != 0, p->wire == Wire::Fp32 ? -1 : p->wire == Wire::Fp16,
                                              p->comm->rank(), p->comm->size(),
                                              static_cast<ncclComm_t>(p->comm->nccl()), cuda_stream()));
#else
  (void)p;
  record_task_failure("selected columns' all-reduce on a CUDA worker: this build has no NCCL");
#endif
}
void allgather_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<SegmentArgs*>(a);
#ifdef ZF_USE_NCCL
  const auto comm = static_cast<ncclComm_t>(p->comm->nccl());
  if (STARPU_VECTOR_GET_ELEMSIZE(b[0]) == sizeof(uint16_t))
    cuda_check(kernels::cuda::allgather_2byte(reinterpret_cast<uint16_t*>(STARPU_VECTOR_GET_PTR(b[0])), *p->bounds,
                                              comm, cuda_stream()));
  else
    cuda_check(kernels::cuda::allgather(vec_ptr(b[0]), *p->bounds, comm, cuda_stream()));
#else
  (void)p;
  record_task_failure("all-gather on a CUDA worker: this build has no NCCL");
#endif
}
#endif

// the bytes the simulation's ring formula counts (CodeletDef::coll_bytes): the selected columns'
// rows x k values and a reduce-scatter's x, in the wire's format; the clip's one double
double columns_bytes(const void* a) {
  const auto* p = static_cast<const SegmentArgs*>(a);
  return (double)(p->rows * p->k) * (double)wire_bytes(p->wire);
}
double reduce_scatter_bytes(const void* a) {
  const auto* p = static_cast<const SegmentArgs*>(a);
  return (double)p->n * (double)wire_bytes(p->wire);
}
double partials_bytes(const void*) { return sizeof(double); }

starpu_codelet& reduce_scatter_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_reduce_scatter", reduce_scatter_cpu, ZF_CUDA_FUNC(reduce_scatter_cuda), 2,
                                          {STARPU_RW, STARPU_RW}, nullptr, Collective::ReduceScatter, 0,
                                          reduce_scatter_bytes},
                                         &m);
  return c;
}
starpu_codelet& allreduce_columns_cl() {  // CPU workers: MPI; CUDA workers: NCCL
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_allreduce_columns", allreduce_columns_cpu,
                                          ZF_CUDA_FUNC(allreduce_columns_cuda), 3, {STARPU_RW, STARPU_R, STARPU_RW},
                                          nullptr, Collective::AllReduce, 0, columns_bytes},
                                         &m);
  return c;
}
starpu_codelet& allgather_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c =
      make_codelet({"zf_allgather", allgather_cpu, ZF_CUDA_FUNC(allgather_cuda), 2, {STARPU_RW, STARPU_RW}, nullptr,
                    Collective::AllGather, 0, nullptr, nullptr, nullptr, true /* moves 2-byte bits as they are */},
                   &m);
  return c;
}
starpu_codelet& allreduce_flag_cl() {  // CPU workers (a 4-byte word: StarPU moves it)
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_allreduce_flag", allreduce_flag_cpu, nullptr, 2, {STARPU_RW, STARPU_RW},
                                          nullptr, Collective::AllReduce}, &m);
  return c;
}
starpu_codelet& allreduce_partials_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_allreduce_partials", allreduce_partials_cpu, nullptr, -1, {}, nullptr,
                                          Collective::AllReduce, 0, partials_bytes}, &m);
  return c;
}

void check_bounds(const SubmitOptions& opt, const Tensor& x, const std::vector<size_t>& bounds, const Comm& comm) {
  expect(fp32_values(x), opt, shape_str(x) + " must hold fp32 values");
  expect(opt.rt != nullptr, opt, "a collective needs the runtime's comm token");
  expect(bounds.size() == (size_t)comm.size() + 1 && bounds.front() == 0 && bounds.back() == x.numel(), opt,
         "partition bounds do not cover " + shape_str(x) + " over " + std::to_string(comm.size()) + " ranks");
}

}  // namespace

void insert_reduce_scatter(const SubmitOptions& opt, const Tensor& x, float scale, const std::vector<size_t>& bounds,
                           const Comm& comm, Wire wire) {
  check_bounds(opt, x, bounds, comm);
  SegmentArgs a{&comm, &bounds, scale, 0, 0, 0, 0, wire, x.numel()};
  TaskBuilder(reduce_scatter_cl(), opt).rw(x).add_handle(opt.rt->comm_token(), STARPU_RW).args(a).submit();
}

void insert_allreduce_columns(const SubmitOptions& opt, const Tensor& x, const Tensor& sel, const Comm& comm,
                              bool in_out, Wire wire) {
  expect(opt.rt != nullptr, opt, "a collective needs the runtime's comm token");
  expect(fp32_values(x) && x.shape().size() == 2 && sel.elem_size() == sizeof(int32_t), opt,
         "selected columns' all-reduce: " + shape_str(x) + " must be 2-D fp32, the selection int32");
  SegmentArgs a{&comm, nullptr, 1.0f, x.shape()[in_out ? 1 : 0], x.shape()[in_out ? 0 : 1], (int64_t)sel.numel(),
                in_out ? 1 : 0, wire, 0};
  TaskBuilder(allreduce_columns_cl(), opt).rw(x).r(sel).add_handle(opt.rt->comm_token(), STARPU_RW).args(a).submit();
}

void insert_allgather(const SubmitOptions& opt, const Tensor& x, const std::vector<size_t>& bounds, const Comm& comm) {
  check_bounds(opt, x, bounds, comm);
  SegmentArgs a{&comm, &bounds, 1.0f, 0, 0, 0, 0, Wire::Fp32, x.numel()};
  TaskBuilder(allgather_cl(), opt).rw(x).add_handle(opt.rt->comm_token(), STARPU_RW).args(a).submit();
}

void insert_allreduce_partials(const SubmitOptions& opt, const std::vector<const Tensor*>& partials,
                               const Tensor& total, const Comm& comm) {
  expect(opt.rt != nullptr, opt, "a collective needs the runtime's comm token");
  expect(total.elem_size() == sizeof(double) && total.numel() == 1, opt, "the total must be one double");
  SegmentArgs a{&comm, nullptr, 1.0f, 0, 0, 0, 0, Wire::Fp32, 0};
  TaskBuilder tb(allreduce_partials_cl(), opt);
  for (const Tensor* p : partials) {
    expect(p->elem_size() == sizeof(double), opt, shape_str(*p) + " must hold doubles");
    tb.r(*p);
  }
  tb.w(total).add_handle(opt.rt->comm_token(), STARPU_RW).args(a).submit();
}

void insert_allreduce_flag(const SubmitOptions& opt, const Tensor& flag, const Comm& comm) {
  expect(opt.rt != nullptr, opt, "a collective needs the runtime's comm token");
  expect(flag.elem_size() == sizeof(uint32_t), opt, shape_str(flag) + " must hold 4-byte words");
  SegmentArgs a{&comm, nullptr, 1.0f, 0, 0, 0, 0, Wire::Fp32, 0};
  TaskBuilder(allreduce_flag_cl(), opt).rw(flag).add_handle(opt.rt->comm_token(), STARPU_RW).args(a).submit();
}

void insert_allreduce(const SubmitOptions& opt, const Tensor& x, float scale, const Comm& comm, Wire wire) {
  expect(fp32_values(x), opt, shape_str(x) + " must hold fp32 values");
  expect(opt.rt != nullptr, opt, "all-reduce needs the runtime's comm token");
  AllreduceArgs a{&comm, scale, wire, x.numel()};
  TaskBuilder(allreduce_cl(), opt).rw(x).add_handle(opt.rt->comm_token(), STARPU_RW).args(a).submit();
}

}  // namespace zf
