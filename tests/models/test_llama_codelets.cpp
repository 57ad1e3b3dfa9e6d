// The Llama family's codelets through StarPU (codelets/llama.cpp, the grouped-query attention of
// codelets/attention.cpp; docs/llama.md), the operations a Llama workload submits: a chain of
// RMSNorm, rotary embeddings, grouped-query attention and SwiGLU, forward and backward, as tasks
// gives the kernels' own bits (the buffers reach the kernels in the codelets' order), the same bits
// on one device core and on two (zf-deadline's idle workers helping with the tiles), and shapes
// that do not fit are refused when the graph is built.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "codelets/codelets.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/error.hpp"
#include "runtime/parallel.hpp"
#include "test_helpers.hpp"
#include "tests/kernels/kernel_helpers.hpp"

namespace zf::test {
namespace {

namespace cpu = kernels::cpu;
using FVec = std::vector<float>;

constexpr int B = 2, T = 80, H = 6, Hkv = 2, hs = 16, C = H * hs, F = 160;  // F: the MLP's width

cpu::RopeParams llama3() {
  cpu::RopeParams p;
  p.theta = 500000.0;
  p.llama3 = true;
  p.original_max_position_embeddings = 64.0;
  return p;
}

// Inputs of the chain: x (B*T, C), the RMSNorm weight, q's and k's pre-rotation values, v, the
// attention's output gradient, gate and up (B*T, F) and the MLP's output gradient.
struct Inputs {
  FVec x = uniform_f((size_t)B * T * C, -2, 2, 1), w = uniform_f(C, 0.5f, 1.5f, 2);
  FVec q = uniform_f((size_t)B * T * C, -1, 1, 3), k = uniform_f((size_t)B * T * Hkv * hs, -1, 1, 4);
  FVec v = uniform_f((size_t)B * T * Hkv * hs, -1, 1, 5), dout = uniform_f((size_t)B * T * C, -1, 1, 6);
  FVec gate = uniform_f((size_t)B * T * F, -6, 6, 7), up = uniform_f((size_t)B * T * F, -2, 2, 8);
  FVec dy = uniform_f((size_t)B * T * F, -1, 1, 9);
};

// The results in a fixed order: y, rstd, dx, dw, q and k rotated, out, lse, dq, dk, dv (dq, dk
// rotated back), swiglu out, dgate, dup.
std::vector<FVec> direct(const Inputs& in) {
  std::vector<FVec> r;
  FVec y(in.x.size()), rstd((size_t)B * T), dx(in.x.size()), dw(C);
  cpu::rmsnorm_fwd(in.x.data(), in.w.data(), y.data(), rstd.data(), B * T, C, 1e-5f);
  cpu::rmsnorm_bwd(in.dout.data(), in.x.data(), rstd.data(), in.w.data(), dx.data(), dw.data(), B * T, C);
  FVec table((size_t)2 * T * hs / 2);
  cpu::rope_table(llama3(), T, hs, table.data());
  const float* cs = table.data();
  const float* sn = cs + (size_t)T * hs / 2;
  FVec q = in.q, k = in.k;
  cpu::rope_fwd(q.data(), cs, sn, B, T, H, hs, 0);
  cpu::rope_fwd(k.data(), cs, sn, B, T, Hkv, hs, 0);
  FVec out(q.size()), lse((size_t)B * H * T), dq(q.size()), dk(k.size()), dv(k.size());
  cpu::gqa_attention_fwd(q.data(), k.data(), in.v.data(), out.data(), lse.data(), B, T, H, Hkv, hs);
  cpu::gqa_attention_bwd(in.dout.data(), q.data(), k.data(), in.v.data(), lse.data(), dq.data(), dk.data(), dv.data(),
                         B, T, H, Hkv, hs);
  cpu::rope_bwd(dq.data(), cs, sn, B, T, H, hs, 0);
  cpu::rope_bwd(dk.data(), cs, sn, B, T, Hkv, hs, 0);
  FVec s(in.gate.size()), dg(s.size()), du(s.size());
  cpu::swiglu_fwd(in.gate.data(), in.up.data(), s.data(), s.size());
  cpu::swiglu_bwd(in.gate.data(), in.up.data(), in.dy.data(), dg.data(), du.data(), s.size());
  return {y, rstd, dx, dw, q, k, out, lse, dq, dk, dv, s, dg, du};
}

Tensor filled(const FVec& v, std::vector<int64_t> shape, const std::string& name) {
  Tensor t = Tensor::home(std::move(shape), name);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}
FVec values(const Tensor& t) { return FVec(t.data(), t.data() + t.numel()); }

std::vector<FVec> through_starpu(const Inputs& in, int device_workers, int host_workers) {
  RuntimeConfig c;
  c.sched = "zf-deadline";
  c.device_workers = device_workers;
  c.host_workers = host_workers;
  Runtime rt(c);
  StepStatus* st = &rt.tracker().status();
  const SubmitOptions o = rt.device(0);
  const int64_t N = (int64_t)B * T;
  Tensor x = filled(in.x, {N, C}, "x"), w = filled(in.w, {C}, "w"), dout = filled(in.dout, {N, C}, "dout");
  Tensor y = Tensor::home({N, C}, "y"), rstd = Tensor::home({N}, "rstd"), dx = Tensor::home({N, C}, "dx"),
         dw = Tensor::home({C}, "dw");
  insert_rmsnorm_fwd(o, x, w, y, rstd, 1e-5f);
  insert_rmsnorm_bwd(o, dout, x, rstd, w, dx, dw);
  Tensor table = make_rope_table(llama3(), T, hs, "rope");
  Tensor q = filled(in.q, {N, C}, "q"), k = filled(in.k, {N, Hkv * hs}, "k"), v = filled(in.v, {N, Hkv * hs}, "v");
  insert_rope_fwd(o, q, table, T, H);
  insert_rope_fwd(o, k, table, T, Hkv);
  Tensor out = Tensor::home({N, C}, "out"), lse = Tensor::home({B, H, T}, "lse"), dq = Tensor::home({N, C}, "dq"),
         dk = Tensor::home({N, Hkv * hs}, "dk"), dv = Tensor::home({N, Hkv * hs}, "dv");
  insert_gqa_attention_fwd(o, q, k, v, out, lse, Hkv, st);
  insert_gqa_attention_bwd(o, dout, q, k, v, lse, dq, dk, dv, Hkv, st);
  insert_rope_bwd(o, dq, table, T, H);
  insert_rope_bwd(o, dk, table, T, Hkv);
  Tensor gate = filled(in.gate, {N, F}, "gate"), up = filled(in.up, {N, F}, "up"), dy = filled(in.dy, {N, F}, "dy");
  Tensor s = Tensor::home({N, F}, "s"), dg = Tensor::home({N, F}, "dg"), du = Tensor::home({N, F}, "du");
  insert_swiglu_fwd(o, gate, up, s);
  insert_swiglu_bwd(o, gate, up, dy, dg, du);
  rt.wait_all();
  return {values(y),   values(rstd), values(dx), values(dw), values(q), values(k),  values(out),
          values(lse), values(dq),   values(dk), values(dv), values(s), values(dg), values(du)};
}

TEST(LlamaCodelets, TasksGiveTheKernelsBitsOnOneAndTwoDeviceCores) {
  blas_single_thread();
  const Inputs in;
  const std::vector<FVec> want = direct(in);
  // one device core (two host workers: more workers than this machine's cores lend nothing), then
  // two device workers, then one with the host worker lending its core
  for (auto [dev, host] : {std::pair{1, 2}, std::pair{2, 1}, std::pair{1, 1}}) {
    SCOPED_TRACE(std::to_string(dev) + " device and " + std::to_string(host) + " host workers");
    const std::vector<FVec> got = through_starpu(in, dev, host);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(bits_equal(got[i], want[i])) << "result " << i;
  }
}

TEST(LlamaCodelets, ShapesThatDoNotFitAreRefusedAtGraphBuild) {
  RuntimeConfig c;
  c.device_workers = 1;
  c.host_workers = 1;
  Runtime rt(c);
  StepStatus* st = &rt.tracker().status();
  const SubmitOptions o = rt.device(0);
  Tensor q = Tensor::home({8, 24}, "q"), k = Tensor::home({8, 8}, "k"), v = Tensor::home({8, 8}, "v");
  Tensor out = Tensor::home({8, 24}, "out"), lse = Tensor::home({2, 6, 4}, "lse");
  EXPECT_THROW(insert_gqa_attention_fwd(o, q, k, v, out, lse, 4, st), Error);  // 6 heads, 4 KV heads
  Tensor k3 = Tensor::home({8, 12}, "k3");  // 3 KV heads of 4 where 2 were given
  EXPECT_THROW(insert_gqa_attention_fwd(o, q, k3, v, out, lse, 2, st), Error);
  Tensor table = make_rope_table(cpu::RopeParams{}, 4, 4, "rope");  // (2, 4, 2)
  EXPECT_THROW(insert_rope_fwd(o, q, table, 4, 6, 1), Error);  // positions 1..4 outside 4
  EXPECT_THROW(insert_rope_fwd(o, q, table, 3, 6), Error);     // 8 rows are not batches of 3
  EXPECT_THROW(insert_rope_fwd(o, q, table, 4, 5), Error);     // 24 features are not 5 heads of 4
  cpu::RopeParams bad = llama3();
  bad.high_freq_factor = bad.low_freq_factor;
  try {
    make_rope_table(bad, 4, 4, "rope");
    ADD_FAILURE() << "high_freq_factor == low_freq_factor accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_scaling.high_freq_factor"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_rope_table(cpu::RopeParams{}, 4, 5, "rope"), Error);  // an odd head size
  Tensor w = Tensor::home({24}, "w"), y = Tensor::home({8, 24}, "y"), r7 = Tensor::home({7}, "r7");
  EXPECT_THROW(insert_rmsnorm_fwd(o, q, w, y, r7, 1e-5f), Error);  // rstd holds 7 of 8 rows
  Tensor r8 = Tensor::home({8}, "r8");
  EXPECT_THROW(insert_rmsnorm_fwd(o, q, w, y, r8, -1e-5f), Error);  // a negative eps
  Tensor s = Tensor::home({8, 23}, "s");
  EXPECT_THROW(insert_swiglu_fwd(o, q, y, s), Error);
  rt.wait_all();
}

}  // namespace
}  // namespace zf::test
