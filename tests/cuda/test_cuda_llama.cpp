// The Llama family's CUDA kernels (kernels/cuda/llama.cu, the grouped-query attention of
// kernels/cuda/attention.cu; docs/llama.md) against the CPU kernels on the same inputs: the rotary
// embedding and SwiGLU bitwise (the same operations in the same order, --fmad=false), RMSNorm and
// the attention within rounding (sums in another order), RMSNorm's dw bitwise where both sum the
// rows in one pass. Skipped, with a message, where cudaGetDeviceCount sees no GPU.
#include <string>
#include <tuple>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "codelets/kernels/cuda/kernels.hpp"
#include "tests/cuda/cuda_helpers.hpp"

namespace zf::test {
namespace {

class RmsNorm : public Cuda {};
class Rope : public Cuda {};
class SwiGlu : public Cuda {};
class GqaAttention : public Cuda {};

TEST_F(RmsNorm, CudaMatchesCpu) {
  for (auto [N, C] : std::vector<std::pair<int, int>>{{1, 1}, {22, 55}, {64, 64}, {1000, 22}, {55, 1000}, {3, 4096}}) {
    SCOPED_TRACE(std::to_string(N) + "x" + std::to_string(C));
    auto x = randv((size_t)N * C, 51, -2.0f, 3.0f), w = randv(C, 52, 0.5f, 1.5f), dy = randv((size_t)N * C, 53);
    std::vector<float> y(x.size()), rstd(N), dx(x.size()), dw(C);
    cpu::rmsnorm_fwd(x.data(), w.data(), y.data(), rstd.data(), N, C, 1e-6f);
    cpu::rmsnorm_bwd(dy.data(), x.data(), rstd.data(), w.data(), dx.data(), dw.data(), N, C);
    Dev<float> gx(x), gw(w), gy(x.size()), grstd(N), gdy(dy), gdx(x.size()), gdw(C);
    ok(gpu::rmsnorm_fwd(gx.p(), gw.p(), gy.p(), grstd.p(), N, C, 1e-6f, s));
    // the double sum of squares in another order: equal after rounding to float, or 1 ulp
    EXPECT_TRUE(close(grstd.get(), rstd, 0.0, 1e-6)) << "rstd";
    EXPECT_TRUE(close(gy.get(), y, 1e-6, 1e-5)) << "y";
    Dev<float> crstd(rstd);  // backward from the CPU's saved rstd
    ok(gpu::rmsnorm_bwd(gdy.p(), gx.p(), crstd.p(), gw.p(), gdx.p(), gdw.p(), N, C, s));
    EXPECT_TRUE(close(gdx.get(), dx, 1e-5, 1e-4)) << "dx";  // mean(dy w xhat) in another order
    if (N <= 64 && (size_t)N * C <= 16384)  // one CPU row tile, one CUDA chunk: both in row order
      EXPECT_TRUE(bitwise(gdw.get(), dw)) << "dw";
    else
      EXPECT_TRUE(close(gdw.get(), dw, 1e-4, 1e-4)) << "dw";  // N terms, partial sums in other orders
  }
}

TEST_F(Rope, CudaMatchesCpuBitwise) {
  kernels::cpu::RopeParams p;
  p.theta = 500000.0;
  p.llama3 = true;
  p.original_max_position_embeddings = 64.0;
  for (auto [B, T, NH, hs, pos0] : std::vector<std::tuple<int, int, int, int, int>>{
           {1, 1, 1, 2, 0}, {2, 22, 3, 8, 0}, {2, 55, 4, 64, 9}, {1, 1000, 2, 128, 0}}) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(T) + " heads " + std::to_string(NH) + " of " +
                 std::to_string(hs));
    const int Tmax = pos0 + T, d = hs / 2;
    std::vector<float> table((size_t)2 * Tmax * d);
    cpu::rope_table(p, Tmax, hs, table.data());
    auto x = randv((size_t)B * T * NH * hs, 54, -2.0f, 2.0f);
    std::vector<float> y = x, dx = x;
    cpu::rope_fwd(y.data(), table.data(), table.data() + (size_t)Tmax * d, B, T, NH, hs, pos0);
    cpu::rope_bwd(dx.data(), table.data(), table.data() + (size_t)Tmax * d, B, T, NH, hs, pos0);
    Dev<float> gt(table), gy(x), gdx(x);
    ok(gpu::rope_fwd(gy.p(), gt.p(), gt.p() + (size_t)Tmax * d, B, T, NH, hs, pos0, s));
    ok(gpu::rope_bwd(gdx.p(), gt.p(), gt.p() + (size_t)Tmax * d, B, T, NH, hs, pos0, s));
    EXPECT_TRUE(bitwise(gy.get(), y)) << "fwd";
    EXPECT_TRUE(bitwise(gdx.get(), dx)) << "bwd";
  }
}

TEST_F(SwiGlu, CudaMatchesCpuBitwise) {
  for (size_t n : sizes()) {
    SCOPED_TRACE(n);
    auto g = randv(n, 55, -90.0f, 90.0f), u = randv(n, 56, -2.0f, 2.0f), dy = randv(n, 57);
    std::vector<float> y(n), dg(n), du(n);
    cpu::swiglu_fwd(g.data(), u.data(), y.data(), n);
    cpu::swiglu_bwd(g.data(), u.data(), dy.data(), dg.data(), du.data(), n);
    Dev<float> gg(g), gu(u), gdy(dy), gy(n), gdg(n), gdu(n);
    ok(gpu::swiglu_fwd(gg.p(), gu.p(), gy.p(), n, s));
    ok(gpu::swiglu_bwd(gg.p(), gu.p(), gdy.p(), gdg.p(), gdu.p(), n, s));
    EXPECT_TRUE(bitwise(gy.get(), y)) << "out";
    EXPECT_TRUE(bitwise(gdg.get(), dg)) << "dgate";
    EXPECT_TRUE(bitwise(gdu.get(), du)) << "dup";
  }
}

// The last two shapes exceed one block of attention.cu's scratch: row blocks (1100 rows of 16
// heads) and chunks of sequences (3 of 600), the last of each ragged.
TEST_F(GqaAttention, CudaMatchesCpu) {
  for (auto [B, T, H, Hkv, hs] : std::vector<std::tuple<int, int, int, int, int>>{
           {1, 1, 1, 1, 4}, {2, 22, 8, 2, 8}, {3, 64, 6, 3, 16}, {1, 100, 4, 1, 32}, {2, 70, 4, 4, 8},
           {2, 1100, 16, 4, 8}, {3, 600, 16, 8, 8}}) {
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(T) + " heads " + std::to_string(H) + "/" +
                 std::to_string(Hkv) + " of " + std::to_string(hs));
    const size_t nq = (size_t)B * T * H * hs, nkv = (size_t)B * T * Hkv * hs;
    auto q = randv(nq, 58, -2.0f, 2.0f), k = randv(nkv, 59, -2.0f, 2.0f), v = randv(nkv, 60), dout = randv(nq, 61);
    std::vector<float> out(nq), lse((size_t)B * H * T), dq(nq), dk(nkv), dv(nkv);
    cpu::gqa_attention_fwd(q.data(), k.data(), v.data(), out.data(), lse.data(), B, T, H, Hkv, hs);
    cpu::gqa_attention_bwd(dout.data(), q.data(), k.data(), v.data(), lse.data(), dq.data(), dk.data(), dv.data(), B,
                           T, H, Hkv, hs);
    Dev<float> gq(q), gk(k), gv(v), gout(nq), glse(lse.size()), gdout(dout), gdq(nq), gdk(nkv), gdv(nkv);
    ok(gpu::gqa_attention_fwd(gq.p(), gk.p(), gv.p(), gout.p(), glse.p(), B, T, H, Hkv, hs, h, s));
    // the scores' sums (hs terms) and each row's sum (T terms) in other orders
    EXPECT_TRUE(residual(glse.get(), lse, hs + T)) << "lse";
    EXPECT_TRUE(residual(gout.get(), out, T)) << "out";
    Dev<float> clse(lse);  // backward from the CPU's log-sum-exps
    ok(gpu::gqa_attention_bwd(gdout.p(), gq.p(), gk.p(), gv.p(), clse.p(), gdq.p(), gdk.p(), gdv.p(), B, T, H, Hkv,
                              hs, h, s));
    const size_t G = (size_t)(H / Hkv);
    EXPECT_TRUE(residual(gdq.get(), dq, 2 * T + hs)) << "dq";
    EXPECT_TRUE(residual(gdk.get(), dk, G * (2 * T + hs))) << "dk";  // G heads' sums added
    EXPECT_TRUE(residual(gdv.get(), dv, G * T)) << "dv";
  }
}

}  // namespace
}  // namespace zf::test
