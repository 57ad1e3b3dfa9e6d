// GFLOP/s of one matmul call on one thread: OpenBLAS's SGEMM, oneDNN's matmul in fp32 and in bf16
// (kernels/cpu/gemm.hpp, bf16 inputs converted beforehand, fp32 output), at the GPT's shapes
// (graphs/specs/gpt-kjv.json: B = 16 x 64 = 1024 rows, width 128, MLP 512, vocabulary 256) in the
// three products of a layer and both weight layouts, calls interleaved, median over the calls.
// `--sgemm T`: the SGEMM yardstick instead, 2048^3 on T threads, OpenBLAS and oneDNN fp32
// (experiments/torch-peer). `--threads T`: oneDNN's own fp32 matmul (one primitive per shape,
// T OpenMP threads, no tiles of ours) at the GPT's shapes, the yardstick of the GPT step's matmul
// rate (experiments/onednn). Prints one line per case; with --json, one JSON object per line.
//   bench_matmul [--calls N (30)] [--json] [--sgemm T | --threads T]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "codelets/kernels/cpu/gemm.hpp"
#include "codelets/kernels/cpu/kernels.hpp"

extern "C" void openblas_set_num_threads(int);
namespace cpu = zf::kernels::cpu;

namespace {

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <class F>
double median_s(int calls, F&& f) {
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

std::vector<float> random_vec(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

struct Case {
  const char* op;  // fwd, bwd_data, bwd_weight
  bool in_out;
  int M, N, K;  // the GEMM: C (M, N) = A B over K
  bool ta, tb;
};

// the three products of a linear layer x (B, K) -> y (B, N), weight (N, K) or (K, N), as GEMMs
std::vector<Case> layer_cases(int B, int K, int N) {
  return {{"fwd", false, B, N, K, false, true},       {"fwd", true, B, N, K, false, false},
          {"bwd_data", false, B, K, N, false, false}, {"bwd_data", true, B, K, N, false, true},
          {"bwd_weight", false, N, K, B, true, false}, {"bwd_weight", true, K, N, B, true, false}};
}

void run_case(const Case& c, int calls, bool json, const std::string& layer) {
  const int lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
  auto a = random_vec((size_t)c.M * c.K, 1), b = random_vec((size_t)c.K * c.N, 2);
  std::vector<float> out((size_t)c.M * c.N);
  std::vector<uint16_t> ab(a.size()), bb(b.size());
  const cpu::GemmShape f32{c.M, c.N, c.K, c.ta, c.tb, lda, ldb, c.N, false, false};
  cpu::GemmShape bf = f32;
  bf.bf16 = true;
  const double flops = 2.0 * c.M * c.N * c.K;
  double tb = 0, tf = 0, th = 0, tc = 0;
  for (int round = 0; round < 3; ++round) {  // interleaved: each library in turn, 3 times
    tb += median_s(calls, [&] {
      cblas_sgemm(CblasRowMajor, c.ta ? CblasTrans : CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans, c.M, c.N, c.K,
                  1.0f, a.data(), lda, b.data(), ldb, 0.0f, out.data(), c.N);
    });
    tf += median_s(calls, [&] { cpu::dnnl_gemm(f32, a.data(), b.data(), out.data()); });
    th += median_s(calls, [&] { cpu::dnnl_gemm(bf, ab.data(), bb.data(), out.data()); });
    tc += median_s(calls, [&] {
      cpu::pack_bf16(a.data(), ab.data(), a.size());
      cpu::pack_bf16(b.data(), bb.data(), b.size());
      cpu::dnnl_gemm(bf, ab.data(), bb.data(), out.data());
    });
  }
  const double g = 3 * flops * 1e-9;  // over the sum of 3 medians
  if (json)
    std::printf("{\"layer\": \"%s\", \"op\": \"%s\", \"in_out\": %s, \"M\": %d, \"N\": %d, \"K\": %d, "
                "\"openblas\": %.1f, \"onednn_f32\": %.1f, \"onednn_bf16\": %.1f, \"onednn_bf16_with_conversion\": %.1f, "
                "\"impl_f32\": \"%s\", \"impl_bf16\": \"%s\"}\n",
                layer.c_str(), c.op, c.in_out ? "true" : "false", c.M, c.N, c.K, g / tb, g / tf, g / th, g / tc,
                cpu::dnnl_gemm_impl(f32), cpu::dnnl_gemm_impl(bf));
  else
    std::printf("%-14s %-10s %-7s %5dx%4dx%4d  %6.1f  %6.1f  %6.1f  %6.1f   %s / %s\n", layer.c_str(), c.op,
                c.in_out ? "(in,out)" : "(out,in)", c.M, c.N, c.K, g / tb, g / tf, g / th, g / tc,
                cpu::dnnl_gemm_impl(f32), cpu::dnnl_gemm_impl(bf));
}

// 2048^3 on T threads: OpenBLAS (its threads), oneDNN fp32 (T OpenMP threads)
void sgemm(int T, int calls, bool json) {
  const int n = 2048;
  auto a = random_vec((size_t)n * n, 1), b = random_vec((size_t)n * n, 2);
  std::vector<float> c((size_t)n * n);
  openblas_set_num_threads(T);
  omp_set_num_threads(T);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  using tag = dnnl::memory::format_tag;
  auto md = dnnl::memory::desc({n, n}, dnnl::memory::data_type::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), eng);
  dnnl::matmul mm(pd);
  dnnl::memory ma(md, eng, a.data()), mb(md, eng, b.data()), mc(md, eng, c.data());
  double tb = 0, td = 0;
  for (int round = 0; round < 3; ++round) {
    tb += median_s(calls, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    });
    td += median_s(calls, [&] {
      mm.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
      s.wait();
    });
  }
  const double g = 3 * 2.0 * n * n * n * 1e-9;  // over the sum of 3 medians
  if (json)
    std::printf("{\"sgemm\": %d, \"threads\": %d, \"openblas\": %.1f, \"onednn_f32\": %.1f, \"impl\": \"%s\"}\n", n, T,
                g / tb, g / td, pd.impl_info_str());
  else
    std::printf("SGEMM %d^3 on %d threads: OpenBLAS %.1f GFLOP/s, oneDNN fp32 %.1f GFLOP/s (%s)\n", n, T, g / tb,
                g / td, pd.impl_info_str());
}

// oneDNN's fp32 matmul on T threads at one of the GPT's GEMMs (transposes as memory layouts)
void dnnl_threads(const Case& c, int T, int calls, bool json, const std::string& layer) {
  omp_set_num_threads(T);
  auto a = random_vec((size_t)c.M * c.K, 1), b = random_vec((size_t)c.K * c.N, 2);
  std::vector<float> out((size_t)c.M * c.N);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  using tag = dnnl::memory::format_tag;
  const auto f32 = dnnl::memory::data_type::f32;
  dnnl::memory::desc ad({c.M, c.K}, f32, c.ta ? tag::ba : tag::ab), bd({c.K, c.N}, f32, c.tb ? tag::ba : tag::ab),
      cd({c.M, c.N}, f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), eng);
  dnnl::matmul mm(pd);
  dnnl::memory ma(ad, eng, a.data()), mb(bd, eng, b.data()), mc(cd, eng, out.data());
  double t = 0;
  for (int round = 0; round < 3; ++round)
    t += median_s(calls, [&] {
      mm.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
      s.wait();
    });
  const double g = 3 * 2.0 * c.M * c.N * c.K * 1e-9 / t;  // over the sum of 3 medians
  if (json)
    std::printf("{\"layer\": \"%s\", \"op\": \"%s\", \"in_out\": %s, \"M\": %d, \"N\": %d, \"K\": %d, "
                "\"threads\": %d, \"onednn_f32\": %.1f, \"impl\": \"%s\"}\n",
                layer.c_str(), c.op, c.in_out ? "true" : "false", c.M, c.N, c.K, T, g, pd.impl_info_str());
  else
    std::printf("%-14s %-10s %-7s %5dx%4dx%4d  %d threads  %6.1f GFLOP/s  %s\n", layer.c_str(), c.op,
                c.in_out ? "(in,out)" : "(out,in)", c.M, c.N, c.K, T, g, pd.impl_info_str());
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 30, sgemm_threads = 0, threads = 0;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--calls" && i + 1 < argc) calls = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json") json = true;
    else if (a == "--sgemm" && i + 1 < argc) sgemm_threads = std::max(1, std::atoi(argv[++i]));
    else if (a == "--threads" && i + 1 < argc) threads = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: bench_matmul [--calls N] [--json] [--sgemm THREADS | --threads THREADS]\n");
      return 2;
    }
  }
  if (sgemm_threads) {
    sgemm(sgemm_threads, std::max(3, calls / 10), json);
    return 0;
  }
  const struct {
    const char* name;
    int K, N;
  } layers[] = {{"attn.c_attn", 128, 384}, {"attn.c_proj", 128, 128}, {"mlp.c_fc", 128, 512},
                {"mlp.c_proj", 512, 128},  {"lm_head", 128, 256}};
  if (threads) {
    for (auto& l : layers)
      for (const Case& c : layer_cases(1024, l.K, l.N)) dnnl_threads(c, threads, calls, json, l.name);
    return 0;
  }
  openblas_set_num_threads(1);
  if (!json)
    std::printf("one thread, GFLOP/s (median of %d calls, 3 interleaved rounds); native bf16: %s\n"
                "%-14s %-10s %-7s %16s  %6s  %6s  %6s  %6s   %s\n",
                calls, cpu::native_bf16() ? "yes" : "no", "layer", "product", "weight", "M x N x K", "OpenBLAS",
                "f32", "bf16", "+conv", "oneDNN impl (f32 / bf16)");
  for (auto& l : layers)
    for (const Case& c : layer_cases(1024, l.K, l.N)) run_case(c, calls, json, l.name);
  return 0;
}
