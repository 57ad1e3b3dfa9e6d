// The roofline perfmodel of the simulation build (runtime/simulation.hpp, docs/simulation.md).
#include "runtime/simulation.hpp"

#include <starpu.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "runtime/error.hpp"

namespace zf {
namespace {

// Effective rates (peak x the stated efficiency, tools/sim_machine.py) of one worker.
struct Rates {
  double flops = 0;                  // FLOP/s (fp32: the CUDA matmuls are cuBLAS SGEMM at any precision)
  double bytes = 0;                  // B/s
  double overhead_us = 0;            // per task
};
Rates cpu_rates, cuda_rates;
std::mutex mu;
std::unordered_map<const starpu_perfmodel*, FlopsFn> flops_of;

double positive(const std::map<std::string, double>& kv, const std::string& file, const std::string& key) {
  auto it = kv.find(key);
  if (it == kv.end() || !(it->second >= 0))
    throw InputError(file + ": " + key, "expected a number >= 0 (the file tools/sim_machine.py writes)");
  return it->second;
}

}  // namespace

void sim_load_roofline() {
  const char* path = std::getenv("ZF_SIM_ROOFLINE");
  if (!path || !*path)
    throw InputError("ZF_SIM_ROOFLINE", "not set: the simulated machine's roofline file (bash tools/zf simulate sets it)");
  std::ifstream in(path);
  if (!in) throw InputError(path, "cannot read the roofline file");
  std::map<std::string, double> kv;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string key;
    double v;
    if (!(ls >> key >> v)) throw InputError(path, "bad line '" + line + "', expected KEY NUMBER");
    kv[key] = v;
  }
  for (auto [rates, dev] : {std::pair{&cpu_rates, "cpu"}, {&cuda_rates, "cuda"}}) {
    const std::string d = dev;
    rates->flops = positive(kv, path, d + ".flops");
    rates->bytes = positive(kv, path, d + ".bytes");
    rates->overhead_us = positive(kv, path, d + ".overhead_us");
  }
}

void sim_register(const starpu_perfmodel* model, FlopsFn flops) {
  std::lock_guard<std::mutex> lk(mu);
  flops_of[model] = flops;
}

void sim_cuda_placeholder(void*[], void*) noexcept {}

double sim_task_cost_us(starpu_task* task, starpu_perfmodel_arch* arch, unsigned) {
  const Rates& r = arch->devices[0].type == STARPU_CUDA_WORKER ? cuda_rates : cpu_rates;
  // memory traffic: a buffer read counts once, written once, read and written twice (AdamW's
  // p, g, m, v: 28 bytes per parameter, as measured in performance-limits.md)
  double bytes = 0;
  for (unsigned i = 0; i < STARPU_TASK_GET_NBUFFERS(task); ++i) {
    const starpu_data_access_mode mode = STARPU_TASK_GET_MODE(task, i);
    const double size = (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, i));
    bytes += size * (((mode & STARPU_R) ? 1 : 0) + ((mode & STARPU_W) ? 1 : 0));
  }
  double flops = 0;
  {
    std::lock_guard<std::mutex> lk(mu);
    auto it = flops_of.find(task->cl->model);
    if (it != flops_of.end() && it->second && task->cl_arg) flops = it->second(task->cl_arg);
  }
  const double t_flops = r.flops > 0 ? flops / r.flops : 0, t_bytes = r.bytes > 0 ? bytes / r.bytes : 0;
  return std::max(t_flops, t_bytes) * 1e6 + r.overhead_us;
}

}  // namespace zf
