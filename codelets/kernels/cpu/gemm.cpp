// oneDNN matmul primitives for kernels/cpu/gemm.hpp: created once per call shape, run on the
// calling thread with a scratchpad of its own.
#include "codelets/kernels/cpu/gemm.hpp"

#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "codelets/kernels/cpu/dnnl_ctx.hpp"

namespace zf::kernels::cpu {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

using dnnl_ctx::engine;
using dnnl_ctx::one_thread;

struct Entry {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias;
  size_t scratch = 0;
  std::string impl;
};

auto key_of(const GemmShape& s) {
  return std::make_tuple(s.M, s.N, s.K, s.ta, s.tb, s.lda, s.ldb, s.ldc, s.accumulate, s.bf16, s.alpha, s.batch,
                         s.sa, s.sb, s.sc, s.c_bf16, s.bias);
}

const Entry& entry(const GemmShape& s) {
  static std::mutex mu;
  // node-based: an entry's address stays valid while others are added
  static std::map<decltype(key_of(s)), std::unique_ptr<Entry>> cache;
  const auto key = key_of(s);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  one_thread();
  const dt in = s.bf16 ? dt::bf16 : dt::f32;
  auto e = std::make_unique<Entry>();
  // strides of a row-major (rows, cols) matrix with leading dimension ld, or of the transpose of
  // one; a batch: a leading dimension with the batch stride
  auto md = [&](dnnl::memory::dim r, dnnl::memory::dim c, dims st, int64_t bs, dt t) {
    if (s.batch == 1) return dnnl::memory::desc(dims{r, c}, t, st);
    return dnnl::memory::desc(dims{s.batch, r, c}, t, dims{bs, st[0], st[1]});
  };
  e->a = md(s.M, s.K, s.ta ? dims{1, s.lda} : dims{s.lda, 1}, s.sa, in);
  e->b = md(s.K, s.N, s.tb ? dims{1, s.ldb} : dims{s.ldb, 1}, s.sb, in);
  e->c = md(s.M, s.N, dims{s.ldc, 1}, s.sc, s.c_bf16 ? dt::bf16 : dt::f32);
  if (s.bias) e->bias = md(1, s.N, dims{s.N, 1}, 0, dt::f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
  if (s.accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd(
      s.bias ? dnnl::matmul::desc(e->a, e->b, e->bias, e->c) : dnnl::matmul::desc(e->a, e->b, e->c), attr, engine());
  e->scratch = pd.scratchpad_desc().get_size();
  e->impl = pd.impl_info_str();
  e->prim = dnnl::matmul(pd);
  return *cache.emplace(key, std::move(e)).first->second;
}

}  // namespace

void dnnl_gemm(const GemmShape& s, const void* A, const void* B, void* C, const float* bias) {
  const Entry& e = entry(s);
  if (s.bias)
    dnnl_ctx::run(e.prim, e.scratch,
                  {{DNNL_ARG_SRC, &e.a, A}, {DNNL_ARG_WEIGHTS, &e.b, B}, {DNNL_ARG_BIAS, &e.bias, bias},
                   {DNNL_ARG_DST, &e.c, C}});
  else
    dnnl_ctx::run(e.prim, e.scratch, {{DNNL_ARG_SRC, &e.a, A}, {DNNL_ARG_WEIGHTS, &e.b, B}, {DNNL_ARG_DST, &e.c, C}});
}

bool native_bf16() {
  // the ISA values are bit sets: avx512_core_amx holds avx512_core_bf16's bits
  const unsigned bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
  static const bool yes = ((unsigned)dnnl::get_effective_cpu_isa() & bf16) == bf16;
  return yes;
}

const char* dnnl_gemm_impl(const GemmShape& s) { return entry(s).impl.c_str(); }

}  // namespace zf::kernels::cpu
