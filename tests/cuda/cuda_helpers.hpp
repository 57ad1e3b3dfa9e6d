// Helpers shared by the CUDA tests (zf_cuda_tests, docs/gpu.md): test sizes, random inputs, a
// device copy of a host vector, the comparisons (bitwise, elementwise, Chameleon's residual) and
// the fixture that skips, saying so, where no GPU is seen; one fixture name per operation.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "codelets/kernels/cuda/kernels.hpp"
#include "models/rng.hpp"
#include "runtime/cuda_device.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#ifdef ZF_USE_NCCL
#include "runtime/nccl.hpp"
#include "runtime/runtime.hpp"
#endif

namespace zf::test {

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;

// 1, 22, 55, 64, 1000, and 2^20 unless ZF_QUICK is set
inline std::vector<size_t> sizes() { return elementwise_sizes(); }

inline std::vector<float> randv(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = r.uniform(lo, hi);
  return v;
}

#ifdef ZF_USE_NCCL
// A one-rank NCCL communicator on the current GPU, for the collectives' kernels; `skip` says why
// there is none (NCCL not loadable, no GPU, NCCL's error), and the test skips with it.
struct OneRankNccl {
  const NcclApi* nc = nullptr;
  ncclComm_t comm = nullptr;
  std::string skip;
  OneRankNccl() {
    const char* err = nullptr;
    nc = nccl_api(&err);
    if (!nc) {
      skip = err;
      return;
    }
    if (Runtime::cuda_devices() == 0) {
      skip = "no CUDA device (cudaGetDeviceCount sees none)";
      return;
    }
    ncclUniqueId id;
    ncclResult_t r = nc->get_unique_id(&id);
    if (r == ncclSuccess) r = nc->comm_init_rank(&comm, 1, id, 0);
    if (r != ncclSuccess) skip = std::string("a one-rank NCCL communicator: ") + nc->get_error_string(r);
  }
  ~OneRankNccl() {
    if (comm) nc->comm_destroy(comm);
  }
  OneRankNccl(const OneRankNccl&) = delete;
  OneRankNccl& operator=(const OneRankNccl&) = delete;
};
#endif

inline std::vector<int32_t> randi(size_t n, uint64_t seed, int32_t hi) {
  Rng r(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = (int32_t)r.below((uint64_t)hi);
  return v;
}

// A device copy of a host vector; read back with get().
template <class T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& h) : n_(h.size()) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(n_, 1) * sizeof(T)), cudaSuccess);
    if (n_) {
      EXPECT_EQ(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  explicit Dev(size_t n) : Dev(std::vector<T>(n)) {}
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* p() const { return static_cast<T*>(p_); }
  std::vector<T> get() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n_) {
      EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
  }

 private:
  void* p_ = nullptr;
  size_t n_;
};

inline ::testing::AssertionResult bitwise(const std::vector<float>& x, const std::vector<float>& r) {
  if (x.size() != r.size()) return ::testing::AssertionFailure() << "sizes " << x.size() << " vs " << r.size();
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &r[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "first difference at [" << i << "]: got " << x[i] << " want " << r[i]
                                           << " (of " << x.size() << ")";
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult close(const std::vector<float>& x, const std::vector<float>& r, double atol,
                                 double rtol) {
  if (x.size() != r.size()) return ::testing::AssertionFailure() << "sizes " << x.size() << " vs " << r.size();
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double err = std::fabs((double)x[i] - r[i]), tol = atol + rtol * std::fabs((double)r[i]);
    if (!(err <= tol)) ++bad;
    if (!(err / tol <= worst_ratio)) worst_ratio = err / tol, worst = i;
  }
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << x.size() << " out of tolerance; worst [" << worst
                                       << "] got " << x[worst] << " want " << r[worst];
}

// ||x - r|| / (||r|| K eps) < 10 (Chameleon's residual test for products over K terms)
inline ::testing::AssertionResult residual(const std::vector<float>& x, const std::vector<float>& r, size_t K) {
  double d = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) d += ((double)x[i] - r[i]) * ((double)x[i] - r[i]), n += (double)r[i] * r[i];
  const double res = std::sqrt(d) / ((std::sqrt(n) + 1e-30) * (double)std::max<size_t>(K, 1) *
                                     std::numeric_limits<float>::epsilon());
  if (res < 10.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "residual " << res << " (K = " << K << ")";
}

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount sees none): the CUDA kernels are built but not run here";
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    if (h) cublasDestroy(h);
    if (s) cudaStreamDestroy(s);
  }
  // a launcher's status, then the stream's
  void ok(gpu::Status st) {
    ASSERT_EQ(st, nullptr) << st;
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  cudaStream_t s = nullptr;
  cublasHandle_t h = nullptr;
};

// One suite per operation (style.md: AdamStep.CudaMatchesCpu), all with the fixture above.
class Matmul : public Cuda {};
class Bias : public Cuda {};
class Activations : public Cuda {};
class SoftmaxXent : public Cuda {};
class AdamStep : public Cuda {};
class AccumulateCopyZero : public Cuda {};
class ColumnImportance : public Cuda {};
class Topk : public Cuda {};
class ColumnMovesAndSelectiveAdam : public Cuda {};
class Embedding : public Cuda {};
class LayerNorm : public Cuda {};
class Attention : public Cuda {};
class Pooling : public Cuda {};
class Bf16 : public Cuda {};
class Fp16 : public Cuda {};

}  // namespace zf::test
