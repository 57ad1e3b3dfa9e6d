// Our device kernels against oneDNN's primitives at the GPT's shapes (graphs/specs/gpt-kjv.json:
// batch 16 x context 64 = 1024 rows, width 128, MLP 512, 4 heads of 32, vocabulary 256), one thread,
// median of calls, the variants interleaved over 3 rounds (experiments/onednn, "Attention and the
// other kernels"):
// - the attention's six products (QK^T, PV; dP = dO V^T, dQ = dS K, dV = P^T dO, dK = dS^T Q) over
//   the layer's 64 (batch, head) pairs: OpenBLAS's SGEMM per pair, oneDNN fp32 per pair, oneDNN
//   batched over a sequence's heads, in fp32 and in bf16 (operands converted beforehand);
// - the whole attention forward and backward of this tree (kernels/cpu/attention.cpp), fp32 and bf16;
// - LayerNorm forward and backward (1024 x 128): ours, oneDNN's layer_normalization;
// - softmax (forward, backward): the attention's causal rows (4096 x 64, ours only the j <= i part,
//   oneDNN on full rows with the masked entries at -inf) and the vocabulary's rows (1024 x 256, ours
//   with the cross-entropy's loss on top);
// - GELU (tanh) forward and backward (1024 x 512): ours, oneDNN's eltwise_gelu_tanh.
// Prints one line per case: microseconds (of the thread's CPU time) per call of each variant, and
// the ratio first / last.
// - the linear layers' matmul kernels (forward, dx, dw; both weight layouts) of the five layers at
//   1024 rows, fp32 and bf16, as the engine calls them (tiles, conversions);
//   bench_kernels [--calls N (30)] [--only attention|linear|layernorm|softmax|gelu]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <dnnl.hpp>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codelets/kernels/cpu/gemm.hpp"
#include "codelets/kernels/cpu/kernels.hpp"

extern "C" void openblas_set_num_threads(int);
namespace cpu = zf::kernels::cpu;

namespace {

constexpr int B = 16, T = 64, C = 128, NH = 4, HS = C / NH, C3 = 3 * C, MLP = 4 * C, V = 256;

// The calling thread's CPU time: every variant runs on this thread alone, and on a machine shared
// with other processes the wall clock also counts the time they take the core away
double seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

double median_s(int calls, const std::function<void()>& f) {
  f();  // warm: primitives created, buffers touched
  std::vector<double> t;
  for (int i = 0; i < calls; ++i) {
    const double t0 = seconds();
    f();
    t.push_back(seconds() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> random_vec(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

std::vector<uint16_t> packed(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  cpu::pack_bf16(v.data(), h.data(), v.size());
  return h;
}

// Runs the named variants interleaved (3 rounds, median of `calls` each) and prints microseconds
// per call (the mean of the rounds' medians); ratio: first variant / last.
void compare(const std::string& name, int calls, const std::vector<std::pair<const char*, std::function<void()>>>& v) {
  std::vector<double> t(v.size(), 0.0);
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < v.size(); ++i) t[i] += median_s(calls, v[i].second) / 3;
  std::printf("%-26s", name.c_str());
  for (size_t i = 0; i < v.size(); ++i) std::printf("  %s %8.1f", v[i].first, t[i] * 1e6);
  std::printf("  | first/last %.2f\n", t.front() / t.back());
}

// ---- the attention's products: C (M, N) = alpha op(A) op(B) per (batch, head), strided views
struct Product {
  const char* name;
  int M, N, K;
  bool ta, tb;
  int lda, ldb, ldc;
  float alpha;
  // element offsets of the head (b, h)'s A, B, C in their buffers
  std::function<size_t(int, int)> ao, bo, co;
};

void bench_attention_products(int calls) {
  const float scale = 1.0f / std::sqrt((float)HS);
  auto qkv = random_vec((size_t)B * T * C3, 1), att = random_vec((size_t)B * NH * T * T, 2, 0.0f, 0.03f),
       dout = random_vec((size_t)B * T * C, 3);
  auto out = std::vector<float>((size_t)B * NH * T * T);
  const auto hqkv = packed(qkv), hatt = packed(att), hdout = packed(dout);
  auto q = [](int b, int h) { return (size_t)b * T * C3 + (size_t)h * HS; };  // k: + C, v: + 2C
  auto a = [](int b, int h) { return ((size_t)b * NH + h) * T * T; };
  auto o = [](int b, int h) { return (size_t)b * T * C + (size_t)h * HS; };
  // (A buffer, B buffer) per product: 0 qkv, 1 att, 2 dout
  const std::vector<std::pair<Product, std::pair<int, int>>> ps = {
      {{"fwd S = q k^T", T, T, HS, false, true, C3, C3, T, scale, q, [&](int b, int h) { return q(b, h) + C; }, a},
       {0, 0}},
      {{"fwd O = P v", T, HS, T, false, false, T, C3, C, 1.0f, a, [&](int b, int h) { return q(b, h) + 2 * C; }, o},
       {1, 0}},
      {{"bwd dP = dO v^T", T, T, HS, false, true, C, C3, T, 1.0f, o, [&](int b, int h) { return q(b, h) + 2 * C; }, a},
       {2, 0}},
      {{"bwd dQ = dS k", T, HS, T, false, false, T, C3, C3, scale, a, [&](int b, int h) { return q(b, h) + C; }, q},
       {1, 0}},
      {{"bwd dV = P^T dO", T, HS, T, true, false, T, C, C3, 1.0f, a, o, q}, {1, 2}},
      {{"bwd dK = dS^T q", T, HS, T, true, false, T, C3, C3, scale, a, q, q}, {1, 0}}};
  const float* f32[3] = {qkv.data(), att.data(), dout.data()};
  const uint16_t* h16[3] = {hqkv.data(), hatt.data(), hdout.data()};
  for (const auto& [p, bufs] : ps) {
    const float *A = f32[bufs.first], *Bm = f32[bufs.second];
    const uint16_t *Ah = h16[bufs.first], *Bh = h16[bufs.second];
    const size_t csz = std::max<size_t>(out.size(), qkv.size());
    std::vector<float> Cm(csz);
    const cpu::GemmShape one{p.M, p.N, p.K, p.ta, p.tb, p.lda, p.ldb, p.ldc, false, false, p.alpha};
    cpu::GemmShape batch = one, batch16;
    batch.batch = NH;
    batch.sa = (int64_t)(p.ao(0, 1) - p.ao(0, 0));
    batch.sb = (int64_t)(p.bo(0, 1) - p.bo(0, 0));
    batch.sc = (int64_t)(p.co(0, 1) - p.co(0, 0));
    batch16 = batch;
    batch16.bf16 = true;
    compare(p.name, calls,
            {{"OpenBLAS", [&] {
                for (int b = 0; b < B; ++b)
                  for (int h = 0; h < NH; ++h)
                    cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans, p.M,
                                p.N, p.K, p.alpha, A + p.ao(b, h), p.lda, Bm + p.bo(b, h), p.ldb, 0.0f,
                                Cm.data() + p.co(b, h), p.ldc);
              }},
             {"dnnl/head", [&] {
                for (int b = 0; b < B; ++b)
                  for (int h = 0; h < NH; ++h) cpu::dnnl_gemm(one, A + p.ao(b, h), Bm + p.bo(b, h), Cm.data() + p.co(b, h));
              }},
             {"dnnl-bf16/seq", [&] {
                for (int b = 0; b < B; ++b) cpu::dnnl_gemm(batch16, Ah + p.ao(b, 0), Bh + p.bo(b, 0), Cm.data() + p.co(b, 0));
              }},
             {"dnnl/seq", [&] {
                for (int b = 0; b < B; ++b) cpu::dnnl_gemm(batch, A + p.ao(b, 0), Bm + p.bo(b, 0), Cm.data() + p.co(b, 0));
              }}});
  }
  const cpu::GemmShape last{T, HS, T, true, false, T, C3, C3, false, false, scale, NH, T * T, HS, HS};
  cpu::GemmShape last16 = last, head = last;
  last16.bf16 = true;
  head.batch = 1;
  std::printf("  oneDNN (dK): %s per head, %s batched, %s batched bf16\n", cpu::dnnl_gemm_impl(head),
              cpu::dnnl_gemm_impl(last), cpu::dnnl_gemm_impl(last16));
}

void bench_attention_whole(int calls) {
  auto qkv = random_vec((size_t)B * T * C3, 1), dout = random_vec((size_t)B * T * C, 3);
  std::vector<float> out((size_t)B * T * C), lse((size_t)B * NH * T), dqkv(qkv.size());
  auto fwd = [&](bool bf16) { cpu::attention_fwd(qkv.data(), out.data(), lse.data(), B, T, C, NH, bf16); };
  auto bwd = [&](bool bf16) { cpu::attention_bwd(dout.data(), qkv.data(), lse.data(), dqkv.data(), B, T, C, NH, bf16); };
  compare("attention fwd (kernel)", calls, {{"fp32", [&] { fwd(false); }}, {"bf16", [&] { fwd(true); }}});
  compare("attention bwd (kernel)", calls, {{"fp32", [&] { bwd(false); }}, {"bf16", [&] { bwd(true); }}});
}

// ---- the linear layers' matmul kernels as the engine calls them (kernels/cpu/matmul.cpp: tiles,
// and under bf16 the operands' conversion), fp32 against bf16, both weight layouts: what a step's
// matmul tasks cost on one thread
void bench_linear(int calls) {
  struct Layer {
    const char* name;
    int K, N;
  };
  const int rows = B * T;
  for (const Layer& l : {Layer{"c_attn", C, C3}, Layer{"attn.c_proj", C, C}, Layer{"c_fc", C, MLP},
                         Layer{"mlp.c_proj", MLP, C}, Layer{"lm_head", C, V}}) {
    const auto x = random_vec((size_t)rows * l.K, 11), w = random_vec((size_t)l.N * l.K, 12),
               dy = random_vec((size_t)rows * l.N, 13);
    std::vector<float> y((size_t)rows * l.N), dx((size_t)rows * l.K), dw((size_t)l.N * l.K);
    for (bool io : {false, true}) {
      const std::string at = std::string(l.name) + (io ? " (in,out) " : " (out,in) ");
      compare(at + "fwd", calls,
              {{"fp32", [&] { cpu::matmul_fwd(x.data(), w.data(), y.data(), rows, l.K, l.N, io, false); }},
               {"bf16", [&] { cpu::matmul_fwd(x.data(), w.data(), y.data(), rows, l.K, l.N, io, true); }}});
      compare(at + "dx", calls,
              {{"fp32", [&] { cpu::matmul_bwd_data(dy.data(), w.data(), dx.data(), rows, l.K, l.N, io, false); }},
               {"bf16", [&] { cpu::matmul_bwd_data(dy.data(), w.data(), dx.data(), rows, l.K, l.N, io, true); }}});
      compare(at + "dw", calls,
              {{"fp32", [&] { cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), rows, l.K, l.N, false, io, false); }},
               {"bf16", [&] { cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), rows, l.K, l.N, false, io, true); }}});
    }
  }
}

// ---- oneDNN's other primitives
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
dnnl::engine& eng() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
dnnl::stream& str() {
  static dnnl::stream s(eng());
  return s;
}
dnnl::memory mem(const dnnl::memory::desc& md, void* p) { return dnnl::memory(md, eng(), p); }

void bench_layernorm(int calls) {
  const int N = B * T;
  const float eps = 1e-5f;
  auto x = random_vec((size_t)N * C, 4), w = random_vec(C, 5, 0.5f, 1.5f), b = random_vec(C, 6), dy = random_vec((size_t)N * C, 7);
  std::vector<float> y(x.size()), mean(N), rstd(N), var(N), dx(x.size()), dw(C), db(C);
  const auto md = dnnl::memory::desc({N, C}, dt::f32, tag::ab), smd = dnnl::memory::desc({N}, dt::f32, tag::a),
             wmd = dnnl::memory::desc({C}, dt::f32, tag::a);
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  dnnl::layer_normalization_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, md, eps, flags}, eng());
  dnnl::layer_normalization_backward::primitive_desc bpd({dnnl::prop_kind::backward, md, md, eps, flags}, eng(), fpd);
  dnnl::layer_normalization_forward fwd(fpd);
  dnnl::layer_normalization_backward bwd(bpd);
  compare("layernorm fwd 1024x128", calls,
          {{"ours", [&] { cpu::layernorm_fwd(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, eps); }},
           {"oneDNN", [&] {
              fwd.execute(str(), {{DNNL_ARG_SRC, mem(md, x.data())}, {DNNL_ARG_DST, mem(md, y.data())},
                                  {DNNL_ARG_SCALE, mem(wmd, w.data())}, {DNNL_ARG_SHIFT, mem(wmd, b.data())},
                                  {DNNL_ARG_MEAN, mem(smd, mean.data())}, {DNNL_ARG_VARIANCE, mem(smd, var.data())}});
            }}});
  compare("layernorm bwd 1024x128", calls,
          {{"ours", [&] {
              cpu::layernorm_bwd(dy.data(), x.data(), mean.data(), rstd.data(), w.data(), dx.data(), dw.data(), db.data(), N, C);
            }},
           {"oneDNN", [&] {
              bwd.execute(str(), {{DNNL_ARG_SRC, mem(md, x.data())}, {DNNL_ARG_DIFF_DST, mem(md, dy.data())},
                                  {DNNL_ARG_MEAN, mem(smd, mean.data())}, {DNNL_ARG_VARIANCE, mem(smd, var.data())},
                                  {DNNL_ARG_SCALE, mem(wmd, w.data())}, {DNNL_ARG_SHIFT, mem(wmd, b.data())},
                                  {DNNL_ARG_DIFF_SRC, mem(md, dx.data())},
                                  {DNNL_ARG_DIFF_SCALE, mem(wmd, dw.data())}, {DNNL_ARG_DIFF_SHIFT, mem(wmd, db.data())}});
            }}});
  std::printf("  oneDNN: %s / %s\n", fpd.impl_info_str(), bpd.impl_info_str());
}

// softmax over rows (R, L): the forward and the backward (dx = y * (dy - sum(y dy)))
void bench_softmax_onednn(const std::string& name, int calls, int R, int L, const std::function<void()>& ours_fwd,
                          const std::function<void()>& ours_bwd, std::vector<float>& x, std::vector<float>& y,
                          std::vector<float>& dy, std::vector<float>& dx) {
  const auto md = dnnl::memory::desc({R, L}, dt::f32, tag::ab);
  dnnl::softmax_forward::primitive_desc fpd({dnnl::prop_kind::forward_training, md, 1}, eng());
  dnnl::softmax_backward::primitive_desc bpd({md, md, 1}, eng(), fpd);
  dnnl::softmax_forward fwd(fpd);
  dnnl::softmax_backward bwd(bpd);
  compare(name + " fwd", calls,
          {{"ours", ours_fwd},
           {"oneDNN", [&] { fwd.execute(str(), {{DNNL_ARG_SRC, mem(md, x.data())}, {DNNL_ARG_DST, mem(md, y.data())}}); }}});
  compare(name + " bwd", calls,
          {{"ours", ours_bwd},
           {"oneDNN", [&] {
              bwd.execute(str(), {{DNNL_ARG_DST, mem(md, y.data())}, {DNNL_ARG_DIFF_DST, mem(md, dy.data())},
                                  {DNNL_ARG_DIFF_SRC, mem(md, dx.data())}});
            }}});
  std::printf("  oneDNN: %s / %s\n", fpd.impl_info_str(), bpd.impl_info_str());
}

void bench_softmax(int calls) {
  {  // the attention's causal rows: (B * NH * T, T), row i of each head sees j <= i
    const int R = B * NH * T;
    auto x = random_vec((size_t)R * T, 8), dy = random_vec((size_t)R * T, 9);
    std::vector<float> y(x.size()), dx(x.size()), s = x, lse(T);
    for (int r = 0; r < R; ++r)
      for (int j = r % T + 1; j < T; ++j) x[(size_t)r * T + j] = -std::numeric_limits<float>::infinity();
    bench_softmax_onednn(
        "causal softmax 4096x64", calls, R, T,
        [&] {
          for (int h = 0; h < B * NH; ++h) cpu::causal_softmax(s.data() + (size_t)h * T * T, 0, T, lse.data());
        },
        [&] {
          for (int h = 0; h < B * NH; ++h)
            cpu::causal_softmax_bwd(y.data() + (size_t)h * T * T, dx.data() + (size_t)h * T * T, 0, T);
        },
        x, y, dy, dx);
  }
  {  // the vocabulary's rows, ours with the loss
    const int R = B * T;
    auto x = random_vec((size_t)R * V, 10, -4.0f, 4.0f), dy = random_vec((size_t)R * V, 11);
    std::vector<float> y(x.size()), dx(x.size());
    std::vector<int32_t> labels(R);
    for (int r = 0; r < R; ++r) labels[r] = (r * 37) % V;
    bench_softmax_onednn(
        "softmax+xent 1024x256", calls, R, V,
        [&] { cpu::softmax_xent_fwd(x.data(), labels.data(), y.data(), R, V, nullptr); },
        [&] { cpu::softmax_xent_bwd(y.data(), labels.data(), dx.data(), R, V, 1.0f / R); }, x, y, dy, dx);
  }
}

void bench_gelu(int calls) {
  const int R = B * T;
  const size_t n = (size_t)R * MLP;
  auto x = random_vec(n, 12, -4.0f, 4.0f), dy = random_vec(n, 13);
  std::vector<float> y(n), dx(n);
  const auto md = dnnl::memory::desc({R, MLP}, dt::f32, tag::ab);
  dnnl::eltwise_forward::primitive_desc fpd(
      {dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_gelu_tanh, md, 0.0f, 0.0f}, eng());
  dnnl::eltwise_backward::primitive_desc bpd({dnnl::algorithm::eltwise_gelu_tanh, md, md, 0.0f, 0.0f}, eng(), fpd);
  dnnl::eltwise_forward fwd(fpd);
  dnnl::eltwise_backward bwd(bpd);
  compare("gelu fwd 1024x512", calls,
          {{"ours", [&] { cpu::gelu_fwd(x.data(), y.data(), n); }},
           {"oneDNN", [&] { fwd.execute(str(), {{DNNL_ARG_SRC, mem(md, x.data())}, {DNNL_ARG_DST, mem(md, y.data())}}); }}});
  compare("gelu bwd 1024x512", calls,
          {{"ours", [&] { cpu::gelu_bwd(x.data(), dy.data(), dx.data(), n); }},
           {"oneDNN", [&] {
              bwd.execute(str(), {{DNNL_ARG_SRC, mem(md, x.data())}, {DNNL_ARG_DIFF_DST, mem(md, dy.data())},
                                  {DNNL_ARG_DIFF_SRC, mem(md, dx.data())}});
            }}});
  std::printf("  oneDNN: %s / %s\n", fpd.impl_info_str(), bpd.impl_info_str());
  // the engine's kernels on fp32 and on bf16 as stored (precision bf16's activations)
  std::vector<uint16_t> x16(n), y16(n), dy16(n), dx16(n);
  cpu::pack_bf16(x.data(), x16.data(), n);
  cpu::pack_bf16(dy.data(), dy16.data(), n);
  compare("gelu fwd 1024x512 as stored", calls,
          {{"fp32", [&] { cpu::act_fwd_mixed(true, {x.data(), false}, {y.data(), false}, n); }},
           {"bf16", [&] { cpu::act_fwd_mixed(true, {x16.data(), true}, {y16.data(), true}, n); }}});
  compare("gelu bwd 1024x512 as stored", calls,
          {{"fp32", [&] { cpu::act_bwd_mixed(true, {x.data(), false}, {dy.data(), false}, {dx.data(), false}, n); }},
           {"bf16", [&] { cpu::act_bwd_mixed(true, {x16.data(), true}, {dy16.data(), true}, {dx16.data(), true}, n); }}});
  compare("pack / unpack 1024x512", calls,
          {{"pack", [&] { cpu::pack_bf16(x.data(), x16.data(), n); }},
           {"unpack", [&] { cpu::unpack_bf16(x16.data(), y.data(), n); }}});
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 30;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--calls" && i + 1 < argc) {
      calls = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--only" && i + 1 < argc &&
               std::set<std::string>{"attention", "linear", "layernorm", "softmax", "gelu"}.count(argv[i + 1])) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_kernels [--calls N] [--only attention|linear|layernorm|softmax|gelu]\n");
      return 2;
    }
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  openblas_set_num_threads(1);
  omp_set_num_threads(1);
  std::printf("one thread, CPU microseconds per call (mean of 3 interleaved rounds' medians of %d calls); native bf16: %s\n",
              calls, cpu::native_bf16() ? "yes" : "no");
  auto run = [&](const char* what) { return only.empty() || only == what; };
  if (run("attention")) bench_attention_products(calls);
  if (run("attention")) bench_attention_whole(calls);
  if (run("linear")) bench_linear(calls);
  if (run("layernorm")) bench_layernorm(calls);
  if (run("softmax")) bench_softmax(calls);
  if (run("gelu")) bench_gelu(calls);
  return 0;
}
