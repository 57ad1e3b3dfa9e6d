// bf16 and fp16 on the GPU (docs/gpu.md): rounding, packing and the merges from the 2-byte formats,
// bitwise equal to the CPU kernels. Skipped, with a message, where cudaGetDeviceCount sees no GPU.
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
#include "models/rng.hpp"
#include "test_helpers.hpp"
#include "tests/cuda/cuda_helpers.hpp"
namespace zf::test {
namespace {
TEST_F(Bf16, CudaBitwiseEqualsCpu) {
  for (size_t n : sizes()) {
    SCOPED_TRACE(n);
    // random bit patterns: every exponent, NaNs and infinities included
    Rng r(40 + n);
    std::vector<float> x(n);
    for (auto& v : x) {
      const uint32_t u = (uint32_t)r.below(uint64_t(1) << 32);
      std::memcpy(&v, &u, 4);
    }
    std::vector<uint16_t> h(n);
    cpu::pack_bf16(x.data(), h.data(), n);
    std::vector<float> back(n), rounded = x;
    cpu::unpack_bf16(h.data(), back.data(), n);
    cpu::round_bf16(rounded.data(), n);
    Dev<float> gx(x), gback(n), grounded(x);
    Dev<uint16_t> gh(n);
    ok(gpu::pack_bf16(gx.p(), gh.p(), n, s));
    EXPECT_EQ(gh.get(), h) << "pack";
    ok(gpu::unpack_bf16(gh.p(), gback.p(), n, s));
    EXPECT_TRUE(bitwise(gback.get(), back)) << "unpack";
    ok(gpu::round_bf16(grounded.p(), n, s));
    EXPECT_TRUE(bitwise(grounded.get(), rounded)) << "round";
  }
  // the merge from a bf16 source: a tile starting mid-row, with and without selected columns
  const int R = 7, C = 1000;
  const std::vector<int32_t> sel{2, 500, 999};
  auto w = randv((size_t)R * C, 41), src = randv(5003, 42);
  std::vector<uint16_t> packed(src.size());
  cpu::pack_bf16(src.data(), packed.data(), src.size());
  Dev<uint16_t> gsrc(packed);
  Dev<int32_t> gsel(sel);
  for (int k : {0, 3}) {
    std::vector<float> want = w;
    cpu::merge_unselected_bf16(want.data(), C, packed.data(), 1001, src.size(), sel.data(), k);
    Dev<float> gw(w);
    ok(gpu::merge_unselected_bf16(gw.p(), C, gsrc.p(), 1001, src.size(), gsel.p(), k, s));
    EXPECT_TRUE(bitwise(gw.get(), want)) << "merge k=" << k;
  }
}

TEST_F(Fp16, CudaBitwiseEqualsCpu) {
  for (size_t n : sizes()) {
    SCOPED_TRACE(n);
    // random bit patterns: every exponent (fp16 subnormals and overflows), NaNs and infinities
    Rng r(50 + n);
    std::vector<float> x(n);
    for (auto& v : x) {
      const uint32_t u = (uint32_t)r.below(uint64_t(1) << 32);
      std::memcpy(&v, &u, 4);
    }
    std::vector<uint16_t> h(n);
    cpu::pack_fp16(x.data(), h.data(), n);
    std::vector<float> back(n), rounded = x;
    cpu::unpack_fp16(h.data(), back.data(), n);
    const size_t bad = cpu::round_fp16(rounded.data(), n);
    Dev<float> gx(x), gback(n), grounded(x);
    Dev<uint16_t> gh(n);
    Dev<uint32_t> flag(std::vector<uint32_t>{0});
    ok(gpu::pack_fp16(gx.p(), gh.p(), n, s));
    EXPECT_EQ(gh.get(), h) << "pack";
    ok(gpu::unpack_fp16(gh.p(), gback.p(), n, s));
    EXPECT_TRUE(bitwise(gback.get(), back)) << "unpack";
    ok(gpu::round_fp16(grounded.p(), n, flag.p(), s));
    EXPECT_TRUE(bitwise(grounded.get(), rounded)) << "round";
    EXPECT_EQ(flag.get()[0], bad ? 1u : 0u) << "the overflow flag";
  }
  // the flag stays 0 on finite fp16 values and is raised by one overflow anywhere
  std::vector<float> fin(1000, 1.5f);
  Dev<float> gf(fin);
  Dev<uint32_t> flag(std::vector<uint32_t>{0});
  ok(gpu::round_fp16(gf.p(), fin.size(), flag.p(), s));
  EXPECT_EQ(flag.get()[0], 0u);
  fin[777] = 70000.0f;
  Dev<float> go(fin);
  ok(gpu::round_fp16(go.p(), fin.size(), flag.p(), s));
  EXPECT_EQ(flag.get()[0], 1u);
  ok(gpu::scale(go.p(), fin.size(), 0.5f, s));
  EXPECT_EQ(go.get()[0], 0.75f);
  // the merge from an fp16 source: a tile starting mid-row, with and without selected columns
  const int R = 7, C = 1000;
  const std::vector<int32_t> sel{2, 500, 999};
  auto w = randv((size_t)R * C, 51), src = randv(5003, 52);
  std::vector<uint16_t> packed(src.size());
  cpu::pack_fp16(src.data(), packed.data(), src.size());
  Dev<uint16_t> gsrc(packed);
  Dev<int32_t> gsel(sel);
  for (int k : {0, 3}) {
    std::vector<float> want = w;
    cpu::merge_unselected_fp16(want.data(), C, packed.data(), 1001, src.size(), sel.data(), k);
    Dev<float> gw(w);
    ok(gpu::merge_unselected_fp16(gw.p(), C, gsrc.p(), 1001, src.size(), gsel.p(), k, s));
    EXPECT_TRUE(bitwise(gw.get(), want)) << "merge k=" << k;
  }
}

}  // namespace
}  // namespace zf::test
