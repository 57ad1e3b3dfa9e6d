// The ranks of a data-parallel run and their host-side collectives (MPI), and the NCCL
// communicator of the GPU path. docs/data-parallel.md.
#include "runtime/comm.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "runtime/error.hpp"

#ifdef ZF_USE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: the deprecated C++ bindings need libmpi_cxx
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif
#ifdef ZF_USE_NCCL
#include <cuda_runtime_api.h>

#include "runtime/nccl.hpp"  // loaded at run time
#endif

namespace zf {

namespace {
// Set by the launcher in every rank: Open MPI's mpirun, MPICH/Hydra (PMI), PMIx launchers (srun).
int launcher_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return std::getenv("PMIX_RANK") ? 1 : 0;  // launched; MPI says how many ranks
}
}  // namespace

Comm::Comm(int* argc, char*** argv) {
  const int launched = launcher_size();
  if (launched == 0) return;  // not under mpirun: one rank, MPI untouched
#ifdef ZF_USE_MPI
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw Error("MPI_Init_thread failed");
  mpi_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
  }
  if (provided < MPI_THREAD_MULTIPLE && size_ > 1)
    throw Error("the MPI library provides thread level " + std::to_string(provided) +
                ", the data-parallel mode needs MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) +
                "): collectives run in StarPU worker threads");
#else
  if (launched > 1)
    throw Error("started by an MPI launcher with " + std::to_string(launched) +
                " ranks, but this build has no MPI (install libopenmpi-dev and rebuild: docs/data-parallel.md)");
#endif
}

Comm::~Comm() {
#ifdef ZF_USE_NCCL
  if (nccl_) nccl_api(nullptr)->comm_destroy(static_cast<ncclComm_t>(nccl_));
#endif
#ifdef ZF_USE_MPI
  if (mpi_) MPI_Finalize();
#endif
}

#ifdef ZF_USE_MPI
namespace {
// In place, SUM over MPI_COMM_WORLD; MPI counts are ints: chunks of at most 2^30 elements.
template <class T>
int allreduce_in_place(T* x, size_t n, MPI_Datatype type) {
  constexpr size_t kChunk = size_t(1) << 30;
  for (size_t off = 0; off < n; off += kChunk)
    if (int rc = MPI_Allreduce(MPI_IN_PLACE, x + off, (int)std::min(kChunk, n - off), type, MPI_SUM, MPI_COMM_WORLD))
      return rc;
  return 0;
}
}  // namespace
#endif

int Comm::allreduce_sum(float* x, size_t n) const {
  if (simulated_) return 0;
#ifdef ZF_USE_MPI
  if (size_ > 1) return allreduce_in_place(x, n, MPI_FLOAT);
#endif
  return 0;
}

int Comm::allreduce_sum(double* x, size_t n) const {
  if (simulated_) return 0;
#ifdef ZF_USE_MPI
  if (size_ > 1) return allreduce_in_place(x, n, MPI_DOUBLE);
#endif
  return 0;
}

#ifdef ZF_USE_MPI
namespace {
// MPI's counts and displacements are ints: a segment beyond 2^31 elements is refused (error code).
bool int_counts(const std::vector<size_t>& bounds, std::vector<int>& counts, std::vector<int>& displs) {
  const size_t r = bounds.size() - 1;
  counts.resize(r);
  displs.resize(r);
  for (size_t i = 0; i < r; ++i) {
    if (bounds[i + 1] > (size_t)INT_MAX) return false;
    counts[i] = (int)(bounds[i + 1] - bounds[i]);
    displs[i] = (int)bounds[i];
  }
  return true;
}
}  // namespace
#endif

int Comm::reduce_scatter_sum(float* x, const std::vector<size_t>& bounds) const {
  if (simulated_) return 0;
#ifdef ZF_USE_MPI
  if (size_ == 1) return 0;
  std::vector<int> counts, displs;
  if (bounds.size() != (size_t)size_ + 1 || !int_counts(bounds, counts, displs)) return MPI_ERR_COUNT;
  // MPI_Reduce_scatter's in-place form leaves the result at the start of the buffer: through a
  // segment-sized buffer to this rank's own offset instead
  std::vector<float> mine((size_t)counts[rank_] + 1);
  if (int rc = MPI_Reduce_scatter(x, mine.data(), counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)) return rc;
  std::copy(mine.begin(), mine.begin() + counts[rank_], x + displs[rank_]);
#else
  (void)x, (void)bounds;
#endif
  return 0;
}

namespace {
#ifdef ZF_USE_MPI
int allgather_in_place(void* x, MPI_Datatype type, const std::vector<size_t>& bounds, int size) {
  std::vector<int> counts, displs;
  if (bounds.size() != (size_t)size + 1 || !int_counts(bounds, counts, displs)) return MPI_ERR_COUNT;
  return MPI_Allgatherv(MPI_IN_PLACE, 0, type, x, counts.data(), displs.data(), type, MPI_COMM_WORLD);
}
#endif
}  // namespace

int Comm::allgather(float* x, const std::vector<size_t>& bounds) const {
  if (simulated_ || size_ == 1) return 0;
#ifdef ZF_USE_MPI
  return allgather_in_place(x, MPI_FLOAT, bounds, size_);
#else
  (void)x, (void)bounds;
  return 0;
#endif
}

int Comm::allgather(uint16_t* x, const std::vector<size_t>& bounds) const {
  if (simulated_ || size_ == 1) return 0;
#ifdef ZF_USE_MPI
  return allgather_in_place(x, MPI_UINT16_T, bounds, size_);
#else
  (void)x, (void)bounds;
  return 0;
#endif
}

int Comm::alltoall_segments(const uint16_t* send, const std::vector<size_t>& bounds, uint16_t* recv) const {
  const size_t r = (size_t)rank_;
  if (bounds.size() != (size_t)size_ + 1) return -1;
  const size_t mine = bounds[r + 1] - bounds[r];
#ifdef ZF_USE_MPI
  if (!simulated_ && size_ > 1) {
    std::vector<int> counts, displs;
    if (!int_counts(bounds, counts, displs) || mine * (size_t)size_ > (size_t)INT_MAX) return MPI_ERR_COUNT;
    std::vector<int> rcounts((size_t)size_, (int)mine), rdispls((size_t)size_);
    for (size_t q = 0; q < (size_t)size_; ++q) rdispls[q] = (int)(q * mine);
    return MPI_Alltoallv(send, counts.data(), displs.data(), MPI_UINT16_T, recv, rcounts.data(), rdispls.data(),
                         MPI_UINT16_T, MPI_COMM_WORLD);
  }
#endif
  std::copy(send + bounds[r], send + bounds[r] + mine, recv);
  return 0;
}

int Comm::gather_to_root(const float* mine, float* full, const std::vector<size_t>& bounds) const {
  if (simulated_) return 0;  // nothing is gathered in simulation (--save and checkpoints are refused there)
#ifdef ZF_USE_MPI
  if (size_ > 1) {
    std::vector<int> counts, displs;
    if (bounds.size() != (size_t)size_ + 1 || !int_counts(bounds, counts, displs)) return MPI_ERR_COUNT;
    return MPI_Gatherv(mine, counts[rank_], MPI_FLOAT, full, counts.data(), displs.data(), MPI_FLOAT, 0,
                       MPI_COMM_WORLD);
  }
#endif
  if (full != mine) std::copy(mine, mine + (bounds.back() - bounds.front()), full + bounds.front());
  return 0;
}

int Comm::allreduce_or(uint32_t* x, size_t n) const {
  if (simulated_) return 0;
#ifdef ZF_USE_MPI
  if (size_ > 1) return MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_UINT32_T, MPI_BOR, MPI_COMM_WORLD);
#else
  (void)x, (void)n;
#endif
  return 0;
}

std::vector<uint64_t> Comm::gather(uint64_t v) const {
  if (size_ == 1) return {v};
  if (simulated_) return std::vector<uint64_t>((size_t)size_, v);
  std::vector<uint64_t> all(rank_ == 0 ? (size_t)size_ : 0);
#ifdef ZF_USE_MPI
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  unsigned long long mine = v;
  MPI_Gather(&mine, 1, MPI_UNSIGNED_LONG_LONG, rank_ == 0 ? all.data() : nullptr, 1, MPI_UNSIGNED_LONG_LONG, 0,
             MPI_COMM_WORLD);
#endif
  return all;
}

void Comm::abort(int code) const {
#ifdef ZF_USE_MPI
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

void Comm::init_nccl(int device) {
  if (simulated_) return;  // the simulated collectives run no NCCL
#ifdef ZF_USE_NCCL
  if (size_ == 1 || nccl_) return;
  const char* err = nullptr;
  const NcclApi* nc = nccl_api(&err);
  if (!nc) throw Error(std::string("data parallelism across GPUs: ") + err);
  ncclUniqueId id{};
  if (rank_ == 0)
    if (ncclResult_t r = nc->get_unique_id(&id); r != ncclSuccess)
      throw Error(std::string("ncclGetUniqueId: ") + nc->get_error_string(r));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    throw Error("cudaSetDevice(" + std::to_string(device) + "): " + cudaGetErrorString(e));
  ncclComm_t c = nullptr;
  if (ncclResult_t r = nc->comm_init_rank(&c, size_, id, rank_); r != ncclSuccess)
    throw Error(std::string("ncclCommInitRank: ") + nc->get_error_string(r));
  nccl_ = c;
#else
  if (size_ > 1) throw Error("data parallelism across GPUs needs NCCL: this build has none (docs/data-parallel.md)");
#endif
}

uint64_t fnv1a64(const void* p, size_t n, uint64_t h) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace zf
