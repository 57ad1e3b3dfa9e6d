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

#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "runtime/comm.hpp"
#include "runtime/task.hpp"
#ifdef ZF_USE_NCCL
#include "codelets/kernels/cuda/allreduce.hpp"
#endif

namespace zf {
namespace {

struct AllreduceArgs {
  const Comm* comm;
  float scale;
};

void allreduce_cpu(void* b[], void* a) noexcept {  // buffers: x, comm token
  auto* p = static_cast<AllreduceArgs*>(a);
  float* x = vec_ptr(b[0]);
  const size_t n = vec_n(b[0]);
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
  cuda_check(kernels::cuda::allreduce_scale(vec_ptr(b[0]), vec_n(b[0]), p->scale,
                                            static_cast<ncclComm_t>(p->comm->nccl()), cuda_stream()));
#else
  record_task_failure("all-reduce on a CUDA worker: this build has no NCCL");
#endif
}
#endif

starpu_codelet& allreduce_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_allreduce", allreduce_cpu, ZF_CUDA_FUNC(allreduce_cuda), 2,
                                          {STARPU_RW, STARPU_RW}}, &m);
  return c;
}

}  // namespace

void insert_allreduce(const SubmitOptions& opt, const Tensor& x, float scale, const Comm& comm) {
  expect(x.elem_size() == sizeof(float), opt, shape_str(x) + " must hold fp32 values");
  expect(opt.rt != nullptr, opt, "all-reduce needs the runtime's comm token");
  AllreduceArgs a{&comm, scale};
  TaskBuilder(allreduce_cl(), opt).rw(x).add_handle(opt.rt->comm_token(), STARPU_RW).args(a).submit();
}

}  // namespace zf
