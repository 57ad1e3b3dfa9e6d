// ZeRO stage 3 (docs/data-parallel.md): a parameter's whole device value is gathered from the
// ranks' shards before a layer uses it, and its gradient reduce-scattered into this rank's shard
// after the layer's backward. Like every collective, each task takes the runtime's comm token
// (codelets/allreduce.cpp says why). CPU workers: MPI (MPI_Allgatherv, MPI_Reduce_scatter); CUDA
// workers: NCCL on the worker's stream, as stage 2's reduce-scatter and all-gather
// (codelets/kernels/cuda/allreduce.hpp: one rooted call per uneven segment, grouped).
#include <starpu.h>

#include <algorithm>

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "codelets/wire.hpp"
#include "runtime/comm.hpp"
#include "runtime/task.hpp"
#ifdef ZF_USE_NCCL
#include "codelets/kernels/cuda/allreduce.hpp"
#endif

namespace zf {
namespace {

struct ShardArgs {
  const Comm* comm;
  const std::vector<size_t>* bounds;
  float scale;
  Wire wire;  // reduce_scatter_shard: the values' format on the wire
  size_t n;   // reduce_scatter_shard: x's elements (the simulation's bytes)
};

// buffers: shard (R), x (W), comm token. A parameter stored in 2 bytes (bf16/fp16, shard and x
// alike) is gathered as its 2-byte bits: half the bytes of its fp32 widening, the same values.
template <class T>
void gather_shards_as(void* b[], const ShardArgs* p) noexcept {
  const std::vector<size_t>& bd = *p->bounds;
  const size_t r = (size_t)p->comm->rank();
  const T* s = reinterpret_cast<const T*>(STARPU_VECTOR_GET_PTR(b[0]));
  T* x = reinterpret_cast<T*>(STARPU_VECTOR_GET_PTR(b[1]));
  std::copy(s, s + (bd[r + 1] - bd[r]), x + bd[r]);
  if (p->comm->allgather(x, bd) != 0) record_task_failure("MPI_Allgatherv of a parameter's shards failed");
}
bool two_bytes(void* buf) { return STARPU_VECTOR_GET_ELEMSIZE(buf) == sizeof(uint16_t); }
void gather_shards_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ShardArgs*>(a);
  if (two_bytes(b[1]))
    gather_shards_as<uint16_t>(b, p);
  else
    gather_shards_as<float>(b, p);
}

// buffers: x (RW), shard (W), comm token. The same reduction and scaling as stage 2's
// reduce-scatter (codelets/allreduce.cpp), so a shard holds what stage 2's segment holds.
void reduce_scatter_shard_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<ShardArgs*>(a);
  const std::vector<size_t>& bd = *p->bounds;
  const size_t r = (size_t)p->comm->rank();
  float* x = vec_ptr(b[0]);
  float* s = vec_ptr(b[1]);
  const bool two = p->wire != Wire::Fp32;  // a 2-byte wire: scaled by the owner's fold
  if ((two ? wire::reduce_scatter(*p->comm, x, bd, p->wire, p->scale) : p->comm->reduce_scatter_sum(x, bd)) != 0) {
    record_task_failure("MPI_Reduce_scatter of a gradient into its shards failed");
    return;
  }
  for (size_t i = bd[r]; i < bd[r + 1]; ++i) s[i - bd[r]] = !two && p->scale != 1.0f ? x[i] * p->scale : x[i];
  // a rank without elements of the parameter: its one-element placeholder holds 0, not whatever the
  // fresh buffer held (the precision rounding reads it, and fp16's overflow check would see garbage)
  std::fill(s + (bd[r + 1] - bd[r]), s + vec_n(b[1]), 0.0f);
}

#ifdef ZF_USE_CUDA
void gather_shards_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ShardArgs*>(a);
#ifdef ZF_USE_NCCL
  const auto comm = static_cast<ncclComm_t>(p->comm->nccl());
  if (two_bytes(b[1]))
    cuda_check(kernels::cuda::gather_shards_2byte(reinterpret_cast<const uint16_t*>(STARPU_VECTOR_GET_PTR(b[0])),
                                                  reinterpret_cast<uint16_t*>(STARPU_VECTOR_GET_PTR(b[1])),
                                                  *p->bounds, p->comm->rank(), comm, cuda_stream()));
  else
    cuda_check(kernels::cuda::gather_shards(vec_ptr(b[0]), vec_ptr(b[1]), *p->bounds, p->comm->rank(), comm,
                                            cuda_stream()));
#else
  (void)p;
  record_task_failure("a stage-3 gather on a CUDA worker: this build has no NCCL");
#endif
}
void reduce_scatter_shard_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<ShardArgs*>(a);
#ifdef ZF_USE_NCCL
  cuda_check(kernels::cuda::reduce_scatter_shard(vec_ptr(b[0]), vec_ptr(b[1]), vec_n(b[1]), *p->bounds,
                                                 p->comm->rank(), p->scale,
                                                 p->wire == Wire::Fp32 ? -1 : p->wire == Wire::Fp16,
                                                 static_cast<ncclComm_t>(p->comm->nccl()), cuda_stream()));
#else
  (void)p;
  record_task_failure("a stage-3 reduce-scatter on a CUDA worker: this build has no NCCL");
#endif
}
#endif

// the bytes the simulation's ring formula counts: x's values in the wire's format
double shard_reduce_bytes(const void* a) {
  const auto* p = static_cast<const ShardArgs*>(a);
  return (double)p->n * (double)wire_bytes(p->wire);
}

starpu_codelet& gather_shards_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_gather_shards", gather_shards_cpu, ZF_CUDA_FUNC(gather_shards_cuda), 3, {STARPU_R, STARPU_W, STARPU_RW},
       nullptr, Collective::AllGather, 1 /* x, the whole parameter */, nullptr, nullptr, nullptr,
       true /* moves 2-byte bits as they are */},
      &m);
  return c;
}
starpu_codelet& reduce_scatter_shard_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_reduce_scatter_shard", reduce_scatter_shard_cpu, ZF_CUDA_FUNC(reduce_scatter_shard_cuda), 3, {STARPU_RW, STARPU_W, STARPU_RW},
       nullptr, Collective::ReduceScatter, 0, shard_reduce_bytes}, &m);
  return c;
}

void check(const SubmitOptions& opt, const Tensor& x, const Tensor& shard, const std::vector<size_t>& bd,
           const Comm& comm) {
  expect(fp32_values(x) && fp32_values(shard), opt,
         shape_str(x) + " and its shard must hold fp32 values");
  expect(opt.rt != nullptr, opt, "a collective needs the runtime's comm token");
  expect(bd.size() == (size_t)comm.size() + 1 && bd.front() == 0 && bd.back() == x.numel(), opt,
         "partition bounds do not cover " + shape_str(x) + " over " + std::to_string(comm.size()) + " ranks");
  const size_t r = (size_t)comm.rank();
  expect(shard.numel() >= bd[r + 1] - bd[r], opt, "the shard " + shape_str(shard) + " is shorter than the segment");
}

}  // namespace

void insert_gather_shards(const SubmitOptions& opt, const Tensor& shard, const Tensor& x,
                          const std::vector<size_t>& bounds, const Comm& comm) {
  check(opt, x, shard, bounds, comm);
  expect(x.elem_size() == shard.elem_size() && x.stored_half() == shard.stored_half() &&
             (!x.stored_half() || x.half() == shard.half()),
         opt, shape_str(x) + " and its shard must be stored alike (fp32, or the same 2-byte format)");
  ShardArgs a{&comm, &bounds, 1.0f, Wire::Fp32, x.numel()};
  TaskBuilder(gather_shards_cl(), opt).r(shard).w(x).add_handle(opt.rt->comm_token(), STARPU_RW).args(a).submit();
}

void insert_reduce_scatter_shard(const SubmitOptions& opt, const Tensor& x, const Tensor& shard, float scale,
                                 const std::vector<size_t>& bounds, const Comm& comm, Wire wire) {
  check(opt, x, shard, bounds, comm);
  ShardArgs a{&comm, &bounds, scale, wire, x.numel()};
  TaskBuilder(reduce_scatter_shard_cl(), opt).rw(x).w(shard).add_handle(opt.rt->comm_token(), STARPU_RW).args(a).submit();
}

}  // namespace zf
