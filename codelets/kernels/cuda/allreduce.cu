// Data-parallel all-reduce on the GPU: ncclAllReduce (SUM, in place) on the worker's stream, then
// a scale kernel on the same stream (ordered after the reduction, no synchronization).
#include "codelets/kernels/cuda/allreduce.hpp"

#include <string>
#include <type_traits>

#include "codelets/kernels/cuda/common.cuh"
#include "codelets/wire.hpp"

namespace zf::kernels::cuda {
namespace {
using namespace detail;

__global__ void scale_k(float* x, size_t n, float scale) {
  ZF_GRID_STRIDE(i, n) x[i] *= scale;
}

// the selected columns of x (rows, cols), stored (cols, rows) when in_out <-> buf (rows, k)
__global__ void columns_k(float* x, int rows, int cols, const int32_t* sel, int k, bool in_out, float* buf,
                          bool to_buf) {
  ZF_GRID_STRIDE(e, (size_t)rows * k) {
    const size_t r = e / (size_t)k, j = e - r * (size_t)k;
    const size_t at = in_out ? (size_t)sel[j] * rows + r : r * cols + (size_t)sel[j];
    if (to_buf)
      buf[e] = x[at];
    else
      x[at] = buf[e];
  }
}

// the wire's rounding of x (n) into w
__global__ void pack_k(const float* x, uint16_t* w, size_t n, bool fp16) {
  ZF_GRID_STRIDE(i, n) w[i] = wire::pack(fp16, x[i]);
}
__global__ void unpack_k(const uint16_t* w, float* x, size_t n, bool fp16) {
  ZF_GRID_STRIDE(i, n) x[i] = wire::unpack(fp16, w[i]);
}
// y[i] <- the fold of the R copies of element i (codelets/wire.hpp)
__global__ void fold_k(const uint16_t* copies, size_t n, int R, float scale, bool fp16, float* y) {
  ZF_GRID_STRIDE(i, n) y[i] = wire::fold(fp16, copies, n, R, i, scale);
}

}  // namespace

Status allreduce_scale(float* x, size_t n, float scale, ncclComm_t comm, cudaStream_t s) {
  if (!n) return nullptr;
  if (!comm) return "NCCL all-reduce without a communicator (Comm::init_nccl was not called)";
  const char* err = nullptr;
  const NcclApi* nc = nccl_api(&err);
  if (!nc) return err;
  ncclResult_t r = nc->all_reduce(x, x, n, ncclFloat32, ncclSum, comm, s);
  if (r != ncclSuccess) return nc->get_error_string(r);
  if (scale == 1.0f) return nullptr;
  scale_k<<<blocks_for(n), kThreads, 0, s>>>(x, n, scale);
  return launched();
}

namespace {
// One rooted NCCL call per segment (root = the segment's owner), grouped.
template <class Call>
Status per_segment(const std::vector<size_t>& bounds, ncclComm_t comm, Call call) {
  if (!comm) return "NCCL collective without a communicator (Comm::init_nccl was not called)";
  const char* err = nullptr;
  const NcclApi* nc = nccl_api(&err);
  if (!nc) return err;
  if (ncclResult_t r = nc->group_start(); r != ncclSuccess) return nc->get_error_string(r);
  ncclResult_t first = ncclSuccess;
  for (size_t root = 0; root + 1 < bounds.size(); ++root) {
    const size_t n = bounds[root + 1] - bounds[root];
    if (!n) continue;
    ncclResult_t r = call(*nc, (int)root, bounds[root], n);
    if (r != ncclSuccess && first == ncclSuccess) first = r;
  }
  ncclResult_t r = nc->group_end();
  if (first != ncclSuccess) return nc->get_error_string(first);
  if (r != ncclSuccess) return nc->get_error_string(r);
  return nullptr;
}
}  // namespace

Status reduce_scatter_scale(float* x, const std::vector<size_t>& bounds, int rank, float scale, ncclComm_t comm,
                            cudaStream_t s) {
  if (Status e = per_segment(bounds, comm, [&](const NcclApi& nc, int root, size_t off, size_t n) {
        return nc.reduce(x + off, x + off, n, ncclFloat32, ncclSum, root, comm, s);
      }))
    return e;
  const size_t off = bounds[(size_t)rank], n = bounds[(size_t)rank + 1] - off, end = bounds.back();
  // the other segments <- 0 (codelets/allreduce.cpp: the fp16 overflow check reads whole gradients)
  if (off && cudaMemsetAsync(x, 0, off * sizeof(float), s) != cudaSuccess) return "cudaMemsetAsync failed";
  if (off + n < end && cudaMemsetAsync(x + off + n, 0, (end - off - n) * sizeof(float), s) != cudaSuccess)
    return "cudaMemsetAsync failed";
  if (scale == 1.0f || !n) return nullptr;
  scale_k<<<blocks_for(n), kThreads, 0, s>>>(x + off, n, scale);
  return launched();
}

namespace {
// each segment of x broadcast from its owner, in place (elements of T moved as NCCL's `type`, bit
// for bit)
template <class T>
Status allgather_as(T* x, const std::vector<size_t>& bounds, ncclDataType_t type, ncclComm_t comm, cudaStream_t s) {
  return per_segment(bounds, comm, [&](const NcclApi& nc, int root, size_t off, size_t n) {
    return nc.broadcast(x + off, x + off, n, type, root, comm, s);
  });
}
}  // namespace

Status allgather(float* x, const std::vector<size_t>& bounds, ncclComm_t comm, cudaStream_t s) {
  return allgather_as(x, bounds, ncclFloat32, comm, s);
}
Status allgather_2byte(uint16_t* x, const std::vector<size_t>& bounds, ncclComm_t comm, cudaStream_t s) {
  return allgather_as(x, bounds, ncclFloat16, comm, s);  // any 2-byte type: a broadcast moves bits
}

namespace {
// this rank's shard into its segment of x, then x all-gathered as allgather_as does
template <class T>
Status gather_segments(const T* shard, T* x, const std::vector<size_t>& bounds, int rank, ncclDataType_t type,
                       ncclComm_t comm, cudaStream_t s) {
  const size_t off = bounds[(size_t)rank], n = bounds[(size_t)rank + 1] - off;
  if (n && cudaMemcpyAsync(x + off, shard, n * sizeof(T), cudaMemcpyDeviceToDevice, s) != cudaSuccess)
    return "cudaMemcpyAsync failed";
  return allgather_as(x, bounds, type, comm, s);
}
}  // namespace

Status gather_shards(const float* shard, float* x, const std::vector<size_t>& bounds, int rank, ncclComm_t comm,
                     cudaStream_t s) {
  return gather_segments(shard, x, bounds, rank, ncclFloat32, comm, s);
}
Status gather_shards_2byte(const uint16_t* shard, uint16_t* x, const std::vector<size_t>& bounds, int rank,
                           ncclComm_t comm, cudaStream_t s) {
  return gather_segments(shard, x, bounds, rank, ncclFloat16, comm, s);  // any 2-byte type: a broadcast
}

Status reduce_scatter_shard(float* x, float* shard, size_t shard_n, const std::vector<size_t>& bounds, int rank,
                            float scale, int wire, ncclComm_t comm, cudaStream_t s) {
  if (Status e = wire < 0 ? reduce_scatter_scale(x, bounds, rank, scale, comm, s)
                          : reduce_scatter_wire(x, bounds, rank, scale, wire == 1, comm, s))
    return e;
  const size_t off = bounds[(size_t)rank], n = bounds[(size_t)rank + 1] - off;
  if (n && cudaMemcpyAsync(shard, x + off, n * sizeof(float), cudaMemcpyDeviceToDevice, s) != cudaSuccess)
    return "cudaMemcpyAsync failed";
  if (shard_n > n && cudaMemsetAsync(shard + n, 0, (shard_n - n) * sizeof(float), s) != cudaSuccess)
    return "cudaMemsetAsync failed";
  return nullptr;
}

Status allreduce_columns(float* x, int rows, int cols, const int32_t* sel, int k, bool in_out, int wire, int rank,
                         int ranks, ncclComm_t comm, cudaStream_t s) {
  const size_t n = (size_t)rows * k;
  if (!n) return nullptr;
  void* buf = nullptr;
  if (Status e = scratch_alloc(&buf, n * sizeof(float), s)) return e;
  columns_k<<<blocks_for(n), kThreads, 0, s>>>(x, rows, cols, sel, k, in_out, (float*)buf, true);
  Status st = launched();
  if (!st)
    st = wire < 0 ? allreduce_scale((float*)buf, n, 1.0f, comm, s)
                  : allreduce_wire((float*)buf, n, 1.0f, wire == 1, rank, ranks, comm, s);
  if (!st) {
    columns_k<<<blocks_for(n), kThreads, 0, s>>>(x, rows, cols, sel, k, in_out, (float*)buf, false);
    st = launched();
  }
  scratch_free(buf, s);
  return st;
}

namespace {
// this rank's segment of x <- the fold of every rank's 2-byte copy of it (the others untouched)
Status fold_own_segment(float* x, const std::vector<size_t>& bounds, int rank, float scale, bool fp16,
                        ncclComm_t comm, cudaStream_t s) {
  if (!comm) return "NCCL collective without a communicator (Comm::init_nccl was not called)";
  const char* err = nullptr;
  const NcclApi* nc = nccl_api(&err);
  if (!nc) return err;
  const size_t n = bounds.back(), R = bounds.size() - 1, off = bounds[(size_t)rank], mine = bounds[(size_t)rank + 1] - off;
  void *w = nullptr, *copies = nullptr;
  if (Status e = scratch_alloc(&w, (n ? n : 1) * sizeof(uint16_t), s)) return e;
  if (Status e = scratch_alloc(&copies, (mine ? mine * R : 1) * sizeof(uint16_t), s)) {
    scratch_free(w, s);
    return e;
  }
  auto* wp = static_cast<uint16_t*>(w);
  auto* cp = static_cast<uint16_t*>(copies);
  Status st = nullptr;
  if (n) {
    pack_k<<<blocks_for(n), kThreads, 0, s>>>(x, wp, n, fp16);
    st = launched();
  }
  if (!st && mine && cudaMemcpyAsync(cp + (size_t)rank * mine, wp + off, mine * sizeof(uint16_t),
                                     cudaMemcpyDeviceToDevice, s) != cudaSuccess)
    st = "cudaMemcpyAsync failed";
  if (!st) {
    ncclResult_t first = nc->group_start();
    for (size_t q = 0; q < R && first == ncclSuccess; ++q) {
      if ((int)q == rank) continue;
      const size_t qn = bounds[q + 1] - bounds[q];
      ncclResult_t r = ncclSuccess;
      if (qn) r = nc->send(wp + bounds[q], qn, ncclFloat16, (int)q, comm, s);  // 2-byte bits
      if (r == ncclSuccess && mine) r = nc->recv(cp + q * mine, mine, ncclFloat16, (int)q, comm, s);
      if (r != ncclSuccess) first = r;
    }
    const ncclResult_t r = nc->group_end();
    if (first != ncclSuccess) st = nc->get_error_string(first);
    else if (r != ncclSuccess) st = nc->get_error_string(r);
  }
  if (!st && mine) {
    fold_k<<<blocks_for(mine), kThreads, 0, s>>>(cp, mine, (int)R, scale, fp16, x + off);
    st = launched();
  }
  scratch_free(copies, s);
  scratch_free(w, s);
  return st;
}
}  // namespace

Status reduce_scatter_wire(float* x, const std::vector<size_t>& bounds, int rank, float scale, bool fp16,
                           ncclComm_t comm, cudaStream_t s) {
  if (Status e = fold_own_segment(x, bounds, rank, scale, fp16, comm, s)) return e;
  const size_t off = bounds[(size_t)rank], n = bounds[(size_t)rank + 1] - off, end = bounds.back();
  if (off && cudaMemsetAsync(x, 0, off * sizeof(float), s) != cudaSuccess) return "cudaMemsetAsync failed";
  if (off + n < end && cudaMemsetAsync(x + off + n, 0, (end - off - n) * sizeof(float), s) != cudaSuccess)
    return "cudaMemsetAsync failed";
  return nullptr;
}

Status allreduce_wire(float* x, size_t n, float scale, bool fp16, int rank, int ranks, ncclComm_t comm,
                      cudaStream_t s) {
  if (!n) return nullptr;
  const std::vector<size_t> b = wire::even_bounds(n, ranks);
  if (Status e = fold_own_segment(x, b, rank, scale, fp16, comm, s)) return e;
  void* w = nullptr;
  if (Status e = scratch_alloc(&w, n * sizeof(uint16_t), s)) return e;
  auto* wp = static_cast<uint16_t*>(w);
  const size_t off = b[(size_t)rank], mine = b[(size_t)rank + 1] - off;
  Status st = nullptr;
  if (mine) {
    pack_k<<<blocks_for(mine), kThreads, 0, s>>>(x + off, wp + off, mine, fp16);  // exact: wire values
    st = launched();
  }
  if (!st) st = allgather_2byte(wp, b, comm, s);
  if (!st) {
    unpack_k<<<blocks_for(n), kThreads, 0, s>>>(wp, x, n, fp16);
    st = launched();
  }
  scratch_free(w, s);
  return st;
}

}  // namespace zf::kernels::cuda
