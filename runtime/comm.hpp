// Data parallelism across processes (docs/data-parallel.md): the ranks of an MPI job, host-side
// collectives (MPI), and under ZF_USE_NCCL the NCCL communicator that the GPU codelets all-reduce
// with (codelets/allreduce.cpp). A process not started by an MPI launcher is a world of one rank
// and never initialises MPI, so a plain `zenflow-run` behaves exactly as without this file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zf {

// The format the gradients' reduce-scatters and all-reduces cross the wire in (DeepSpeed's
// communication_data_type; docs/data-parallel.md, "The gradients' wire"): fp32 words, or 2-byte
// bf16 / fp16 words that each rank rounds its values to and each owner sums in rank order.
enum class Wire : uint8_t { Fp32, Bf16, Fp16 };
inline size_t wire_bytes(Wire w) { return w == Wire::Fp32 ? 4 : 2; }
inline const char* wire_name(Wire w) { return w == Wire::Fp32 ? "fp32" : w == Wire::Bf16 ? "bf16" : "fp16"; }

class Comm {
 public:
  // Initialises MPI (MPI_THREAD_MULTIPLE: collectives run inside StarPU worker threads while the
  // main thread may call MPI too) when the environment says an MPI launcher started us (mpirun);
  // else a single rank. Throws zf::Error when the MPI library gives a lower thread level, or when
  // launched with several ranks by a build without MPI.
  Comm(int* argc, char*** argv);
  // A world of one rank, no MPI (tests, library use).
  Comm() = default;
  // The simulation build (docs/simulation.md, "Data parallelism"): this process is rank 0 of
  // `ranks` simulated ones, no MPI. Its collectives are tasks the simulation times with the ring
  // formula and never runs; called outside a task (the report's gathers, the losses' all-reduce)
  // they do nothing, and gather() returns rank 0's value for every rank (the simulated ranks are
  // replicas of rank 0 by construction).
  static Comm simulated_world(int ranks) {
    Comm c;
    c.size_ = c.local_size_ = ranks < 1 ? 1 : ranks;
    c.simulated_ = true;
    return c;
  }
  bool simulated() const { return simulated_; }
  ~Comm();  // NCCL communicator, then MPI_Finalize (when this object initialised MPI)
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& o) noexcept
      : rank_(o.rank_), size_(o.size_), local_size_(o.local_size_), mpi_(o.mpi_), simulated_(o.simulated_),
        nccl_(o.nccl_) {
    o.mpi_ = false;
    o.nccl_ = nullptr;
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The ranks on this process's node (MPI_COMM_TYPE_SHARED), this one included: they share its
  // cores (docs/data-parallel.md, "A rank's cores"). The simulated world: all of them.
  int local_size() const { return local_size_; }

  // In place, on host memory, SUM over the ranks. Return an MPI error code (0: success) instead of
  // throwing: they are called from codelets (noexcept).
  int allreduce_sum(float* x, size_t n) const;
  int allreduce_sum(double* x, size_t n) const;
  // In place, bitwise OR over the ranks (the fp16 overflow flag under ZeRO stage 2).
  int allreduce_or(uint32_t* x, size_t n) const;
  // ZeRO partitions (docs/data-parallel.md): `bounds` holds size()+1 element offsets into x, rank r
  // owning [bounds[r], bounds[r+1]). reduce_scatter_sum: x[bounds[rank]..bounds[rank+1]) <- the SUM
  // over the ranks of that segment (the other segments keep this rank's values). allgather: every
  // segment <- its owner's (in place). gather_to_root: rank 0's `full` (bounds.back() elements)
  // receives every rank's `mine` (its segment) at its offset; the others pass null.
  int reduce_scatter_sum(float* x, const std::vector<size_t>& bounds) const;
  int allgather(float* x, const std::vector<size_t>& bounds) const;
  // The same on 2-byte elements (a parameter stored in bf16/fp16: its bits, moved as they are)
  int allgather(uint16_t* x, const std::vector<size_t>& bounds) const;
  // Each rank's segment r of `send` (2-byte words, bounds as above) to its owner r: recv (size()
  // x this rank's segment) <- every rank's copy of this rank's segment, rank q's at q x segment
  // (MPI_Alltoallv). One rank, or the simulated world: recv <- send's own segment.
  int alltoall_segments(const uint16_t* send, const std::vector<size_t>& bounds, uint16_t* recv) const;
  int gather_to_root(const float* mine, float* full, const std::vector<size_t>& bounds) const;
  // Rank 0 receives every rank's value (index = rank); the others get an empty vector.
  std::vector<uint64_t> gather(uint64_t v) const;
  // Ends the whole job with `code` (after an error on one rank: MPI_Finalize would wait for the
  // others, which may be blocked in a collective this rank never reaches).
  [[noreturn]] void abort(int code) const;

  // NCCL (builds with ZF_USE_NCCL): a communicator over the ranks on this process's GPU `device`,
  // from an ncclUniqueId broadcast by MPI. nccl() is the ncclComm_t (null before init_nccl).
  void init_nccl(int device);
  void* nccl() const { return nccl_; }

 private:
  int rank_ = 0, size_ = 1, local_size_ = 1;
  bool mpi_ = false;      // this object called MPI_Init_thread
  bool simulated_ = false;  // simulated_world: no MPI, collectives are no-ops
  void* nccl_ = nullptr;  // ncclComm_t
};

// FNV-1a, 64 bits, over n bytes, continuing from h (start with kFnvOffset).
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
uint64_t fnv1a64(const void* p, size_t n, uint64_t h = kFnvOffset);

}  // namespace zf
