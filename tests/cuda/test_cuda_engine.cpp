// The engine with CUDA workers (docs/gpu.md): a few training steps of the MLP (every strategy,
// fp32 and bf16) and of a tiny GPT against the same run on CPU workers (runtime.cuda_workers = -1),
// the GPT with activation checkpointing bitwise as without;
// NCCL loaded at run time. Skipped, with a message, where no GPU is seen.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cuda/kernels.hpp"
#ifdef ZF_USE_NCCL
#include "codelets/kernels/cuda/allreduce.hpp"
#include "codelets/wire.hpp"
#include "runtime/comm.hpp"
#include "runtime/cuda_device.hpp"
#endif
#include "models/rng.hpp"
#include "test_helpers.hpp"
#include "tests/cuda/cuda_helpers.hpp"
namespace zf::test {
namespace {
#ifdef ZF_USE_NCCL
// NCCL is loaded at run time (kernels/cuda/allreduce.hpp); loading needs no GPU, so this test
// runs wherever libnccl.so.2 is on the loader's path (the CUDA 13 toolkit's lib/ is, here).
TEST(Nccl, LoadsAtRunTimeWithEverySymbol) {
  const char* err = nullptr;
  const NcclApi* nc = nccl_api(&err);
  if (!nc) GTEST_SKIP() << err;
  EXPECT_NE(nc->get_unique_id, nullptr);
  EXPECT_NE(nc->comm_init_rank, nullptr);
  EXPECT_NE(nc->comm_destroy, nullptr);
  EXPECT_NE(nc->all_reduce, nullptr);
  ASSERT_NE(nc->get_error_string, nullptr);
  EXPECT_STREQ(nc->get_error_string(ncclSuccess), "no error");
}

// ZeRO stage 3's NCCL collectives (codelets/shard.cpp) on a one-rank communicator (one GPU): the
// gather puts the shard into the rank's segment and broadcasts it; the reduce-scatter scales the
// sum into the shard and zeroes the shard's placeholder tail. The CPU (MPI) side is dp_test.sh's.
TEST(Nccl, Stage3GatherAndReduceScatterShardsOnOneRank) {
  const OneRankNccl one;
  if (!one.comm) GTEST_SKIP() << one.skip;
  const ncclComm_t comm = one.comm;
  const size_t n = 37, shard_n = n + 3;  // a shard longer than the segment: its tail a placeholder
  const std::vector<size_t> bounds = {0, n};
  std::vector<float> host(shard_n);
  for (size_t i = 0; i < shard_n; ++i) host[i] = 0.5f * (float)i + 1.0f;
  float *shard = nullptr, *x = nullptr;
  ASSERT_EQ(cudaMalloc(&shard, shard_n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&x, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(shard, host.data(), shard_n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(x, 0xff, n * sizeof(float)), cudaSuccess);  // NaN: what the gather must overwrite
  EXPECT_EQ(kernels::cuda::gather_shards(shard, x, bounds, 0, comm, nullptr), nullptr);
  std::vector<float> got(shard_n);
  ASSERT_EQ(cudaMemcpy(got.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], host[i]) << "gathered element " << i;
  EXPECT_EQ(kernels::cuda::reduce_scatter_shard(x, shard, shard_n, bounds, 0, 0.25f, -1, comm, nullptr), nullptr);
  ASSERT_EQ(cudaMemcpy(got.data(), shard, shard_n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(got[i], 0.25f * host[i]) << "shard element " << i;
  for (size_t i = n; i < shard_n; ++i) EXPECT_EQ(got[i], 0.0f) << "placeholder element " << i;
  cudaFree(shard);
  cudaFree(x);
}
#endif

#ifdef ZF_USE_NCCL
// The gradients' 2-byte wire on one rank (one GPU): allreduce_wire and reduce_scatter_wire give the
// CPU path's bits (codelets/wire.hpp, the same arithmetic), bf16 and fp16. The ranks' sums are
// dp_test.sh's (MPI); the NCCL send/recv between GPUs runs where several GPUs are.
TEST(Nccl, GradientWireOnOneRankIsTheCpuPathsBits) {
  const OneRankNccl gpu1;
  if (!gpu1.comm) GTEST_SKIP() << gpu1.skip;
  const ncclComm_t comm = gpu1.comm;
  const size_t n = 1001;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = std::sin(0.37f * (float)i) * std::exp2((float)((int)(i % 41) - 20));
  const Comm one;
  for (bool f16 : {false, true}) {
    const Wire w = f16 ? Wire::Fp16 : Wire::Bf16;
    std::vector<float> want = host;
    ASSERT_EQ(wire::allreduce(one, want.data(), n, w, 0.5f), 0);
    float* x = nullptr;
    ASSERT_EQ(cudaMalloc(&x, n * sizeof(float)), cudaSuccess);
    std::vector<float> got(n);
    for (int which = 0; which < 2; ++which) {
      ASSERT_EQ(cudaMemcpy(x, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
      const char* e = which == 0 ? kernels::cuda::allreduce_wire(x, n, 0.5f, f16, 0, 1, comm, nullptr)
                                 : kernels::cuda::reduce_scatter_wire(x, {0, n}, 0, 0.5f, f16, comm, nullptr);
      EXPECT_EQ(e, nullptr) << (e ? e : "");
      ASSERT_EQ(cudaMemcpy(got.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0)
          << wire_name(w) << (which == 0 ? " all-reduce" : " reduce-scatter");
    }
    cudaFree(x);
  }
}
#endif

// ---- the engine on CUDA workers vs the same run on CPU workers

// ||a - b|| / ||b|| over all weights
double rel_norm_diff(const Weights& a, const Weights& b) {
  double d = 0, n = 0;
  for (auto& [k, v] : b) {
    auto it = a.find(k);
    if (it == a.end() || it->second.size() != v.size()) return INFINITY;
    for (size_t i = 0; i < v.size(); ++i) {
      const double e = (double)it->second[i] - v[i];
      d += e * e;
      n += (double)v[i] * v[i];
    }
  }
  return std::sqrt(d / std::max(n, 1e-300));
}

class CudaEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::cuda_devices() == 0)
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount sees none): the engine's CUDA workers are not run here";
  }
};

// Matmul rounding (cuBLAS vs OpenBLAS) is the only difference at step 1; AdamW turns it into
// differences of up to ~lr on weights whose gradient is near zero, hence the norm tolerance.
constexpr double kEngineTol = 2e-3;

TEST_F(CudaEngine, MlpStepsOnCudaWorkersMatchCpuWorkers) {
  // ZF_FASHION_MNIST_DIR: a copy of the data where the Debian package is not installed
  // (tools/device-check.sh carries a 2048 + 500 example subset to GPU machines).
  const char* dir = std::getenv("ZF_FASHION_MNIST_DIR");
  const std::string data_dir = dir ? dir : Spec().data.dir;
  if (!std::filesystem::exists(data_dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST in " << data_dir << " (install dataset-fashion-mnist or set ZF_FASHION_MNIST_DIR)";
  for (const char* strategy : {"device-adam", "zero-offload", "zero-offload-dpu", "zenflow"}) {
    SCOPED_TRACE(strategy);
    Spec s = tiny_spec(4, strategy);
    s.data.dir = data_dir;
    if (std::string(strategy) == "zenflow") {
      s.zenflow.update_interval = 2;
      s.zenflow.overlap_step = true;
      s.zenflow.given = true;
    }
    s.runtime.cuda_workers = -1;
    nlohmann::json ref_metrics;
    const Weights ref = train_and_capture(s, &ref_metrics);
    EXPECT_EQ(ref_metrics["prefetches"].get<int64_t>(), 0) << "no prefetch without CUDA workers";
    s.runtime.cuda_workers = 1;
    nlohmann::json metrics;
    const Weights got = train_and_capture(s, &metrics);
    EXPECT_LT(rel_norm_diff(got, ref), kEngineTol);
    // every host result that crosses back is prefetched to the GPU when written
    if (std::string(strategy) != "device-adam") {
      EXPECT_GT(metrics["prefetches"].get<int64_t>(), 0);
    }
  }
}

TEST_F(CudaEngine, Bf16StepsOnCudaWorkersMatchCpuWorkers) {
  const char* dir = std::getenv("ZF_FASHION_MNIST_DIR");
  const std::string data_dir = dir ? dir : Spec().data.dir;
  if (!std::filesystem::exists(data_dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no Fashion-MNIST in " << data_dir << " (install dataset-fashion-mnist or set ZF_FASHION_MNIST_DIR)";
  for (const char* strategy : {"device-adam", "zero-offload", "zenflow"}) {
    SCOPED_TRACE(strategy);
    Spec s = tiny_spec(4, strategy);
    s.data.dir = data_dir;
    s.precision = "bf16";
    s.runtime.cuda_workers = -1;
    const Weights ref = train_and_capture(s);
    s.runtime.cuda_workers = 1;
    const Weights got = train_and_capture(s);
    // bf16 rounding can turn a last-bit matmul difference into one bf16 ulp (2^-8 relative) on a
    // few weights, hence a tolerance above kEngineTol's; the CUDA workers multiply bf16 operands
    // (tensor cores), the CPU workers too where the CPU has native bf16 and fp32 ones elsewhere
    // (about 2^-9 relative in each product: not yet run on a GPU since the CUDA workers' bf16)
    EXPECT_LT(rel_norm_diff(got, ref), 1e-2);
    for (auto& [name, v] : got)
      for (float x : v) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        ASSERT_EQ(u & 0xffffu, 0u) << name << ": a device parameter that is not a bf16 value";
      }
  }
}

TEST_F(CudaEngine, GptStepsOnCudaWorkersMatchCpuWorkers) {
  std::string text;
  Rng r(5);
  const char* words[] = {"in", "the", "beginning", "God", "created", "heaven", "and", "earth."};
  while (text.size() < 4000) text += std::string(words[r.below(8)]) + (r.below(7) ? " " : "\n");
  const std::string path = (std::filesystem::temp_directory_path() / ("zf_cuda_text_" + std::to_string(getpid()))).string();
  std::ofstream(path, std::ios::binary) << text;
  Spec s;
  s.source = "tiny-gpt-cuda";
  s.model.type = "gpt";
  s.model.n_layer = 2;
  s.model.n_head = 2;
  s.model.n_embd = 32;
  s.model.context = 16;
  s.data.dataset = "text";
  s.data.path = path;
  s.data.split = "verse";
  s.train.batch_size = 4;
  s.train.eval_batch_size = 4;
  s.train.steps = 3;
  s.optimizer.lr = 1e-3;
  s.log.every = 0;
  s.log.warmup_steps = 0;
  for (const char* strategy : {"device-adam", "zenflow"}) {
    SCOPED_TRACE(strategy);
    s.strategy = strategy;
    s.runtime.cuda_workers = -1;
    const Weights ref = train_and_capture(s);
    s.runtime.cuda_workers = 1;
    const Weights got = train_and_capture(s);
    EXPECT_LT(rel_norm_diff(got, ref), kEngineTol);
    // activation checkpointing on the CUDA worker: the recomputed forward runs the same kernels on
    // the same inputs, so the weights are bitwise those without it (as on CPU workers)
    s.train.activation_checkpointing = 1;
    const Weights ck = train_and_capture(s);
    s.train.activation_checkpointing = 0;
    EXPECT_EQ(first_difference(ck, got), "") << "activation checkpointing on the CUDA worker";
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace zf::test
