// The GPT's matmul shapes (B = batch * context = 1024 rows) in both weight layouts, through
// kernels::cpu (one thread, no helpers), interleaved, median of REPS calls each; the (in, out) data
// gradient also through the scratch-transpose path it took before (old_bwd_data, copied here).
//   c++ -O2 -std=c++20 -I. experiments/zenflow-layout/gpt_matmul_bench.cpp build/libzf_kernels.a build/libzf_runtime.a -lopenblas
//   ./a.out [calls (30)] [mlp]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/parallel.hpp"

namespace cpu = zf::kernels::cpu;

// codelets/kernels/cpu/matmul.cpp's (in, out) data gradient before the large-batch path, untiled
void old_bwd_data(const float* dy, const float* w, float* dx, int B, int K, int N) {
  std::vector<float> dyt((size_t)N * B), dxt((size_t)K * B);
  for (int b = 0; b < B; ++b)
    for (int n = 0; n < N; ++n) dyt[(size_t)n * B + b] = dy[(size_t)b * N + n];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, K, B, N, 1.0f, w, N, dyt.data(), B, 0.0f, dxt.data(), B);
  for (int k = 0; k < K; ++k)
    for (int b = 0; b < B; ++b) dx[(size_t)b * K + k] = dxt[(size_t)k * B + b];
}

// its (in, out) weight gradient in tiles of dw's rows (as matmul.cpp's cut(K, flops, 16)), each
// packing all of dy: what it did for every batch of more than 4 rows before the tiles of columns
void old_bwd_weight(const float* dy, const float* x, float* dw, int B, int K, int N) {
  int n = (int)std::clamp(2.0 * B * K * N / 4e6, 1.0, 16.0);
  n = std::min(n, (K + 15) / 16);
  int len = n <= 1 ? K : ((K + n - 1) / n + 15) / 16 * 16;
  for (int k0 = 0; k0 < K; k0 += len)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, std::min(len, K - k0), N, B, 1.0f, x + k0, K, dy, N, 0.0f,
                dw + (size_t)k0 * N, N);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  zf::blas_single_thread();
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  auto rnd = [&](size_t n) { std::vector<float> v(n); for (auto& x : v) x = nd(g); return v; };
  std::printf("B,K,N,op,out_in_ms,in_out_ms,in_out_over_out_in\n");
  // the GPT's layers (1024 rows); with a second argument "mlp", MLP shapes (batch 8 and 128)
  std::vector<std::tuple<int, int, int>> shapes = {{1024, 128, 384}, {1024, 128, 128}, {1024, 128, 512}, {1024, 512, 128}};
  if (argc > 2 && std::string(argv[2]) == "mlp")
    shapes = {{8, 784, 1024}, {8, 1024, 1024}, {8, 1024, 10}, {128, 784, 256}, {128, 256, 128}, {128, 128, 10}};
  for (auto [B, K, N] : shapes) {
    auto x = rnd((size_t)B * K), w = rnd((size_t)N * K), dy = rnd((size_t)B * N);
    std::vector<float> y((size_t)B * N), dx((size_t)B * K), dw((size_t)N * K);
    using F = std::function<void()>;
    struct Op { const char* name; F a, b; };
    std::vector<Op> ops = {
        {"fwd", [&] { cpu::matmul_fwd(x.data(), w.data(), y.data(), B, K, N, false); },
         [&] { cpu::matmul_fwd(x.data(), w.data(), y.data(), B, K, N, true); }},
        {"bwd_weight", [&] { cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N, false, false); },
         [&] { cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N, false, true); }},
        {"bwd_weight_old_rows", [&] { cpu::matmul_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N, false, false); },
         [&] { old_bwd_weight(dy.data(), x.data(), dw.data(), B, K, N); }},
        {"bwd_data", [&] { cpu::matmul_bwd_data(dy.data(), w.data(), dx.data(), B, K, N, false); },
         [&] { cpu::matmul_bwd_data(dy.data(), w.data(), dx.data(), B, K, N, true); }},
        {"bwd_data_old_scratch", [&] { cpu::matmul_bwd_data(dy.data(), w.data(), dx.data(), B, K, N, false); },
         [&] { old_bwd_data(dy.data(), w.data(), dx.data(), B, K, N); }},
    };
    for (auto& op : ops) {
      std::vector<double> ta, tb;
      for (int r = 0; r < reps; ++r)
        for (int s = 0; s < 2; ++s) {
          auto t0 = std::chrono::steady_clock::now();
          (s ? op.b : op.a)();
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          (s ? tb : ta).push_back(ms);
        }
      std::sort(ta.begin(), ta.end());
      std::sort(tb.begin(), tb.end());
      const double a = ta[ta.size() / 2], b = tb[tb.size() / 2];
      std::printf("%d,%d,%d,%s,%.3f,%.3f,%.2f\n", B, K, N, op.name, a, b, b / a);
    }
  }
}
