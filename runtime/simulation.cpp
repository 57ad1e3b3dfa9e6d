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
#include "runtime/sched_deadline.hpp"

namespace zf {
namespace {

// Effective rates (peak x the stated efficiency, tools/sim_machine.py) of one worker.
struct Rates {
  double flops = 0;                  // FLOP/s, fp32 (a CPU worker's at any precision)
  double bf16_flops = 0;             // FLOP/s of bf16 products (cuda only: tensor cores)
  double bytes = 0;                  // B/s
  double overhead_us = 0;            // per task
  // and after a task whose memory traffic exceeds the last-level cache (cpu only; 0: none)
  double overhead_cold_us = 0, cold_bytes = 0;
  double peak_flops = 0, peak_bytes = 0, peak_bf16_flops = 0;  // the peaks the rates above are a fraction of
  // the share of a tiled kernel's tiles one idle helper runs (cpu only; 0.5: an even split)
  double helper_share = 0.5;
  // the most the helpers speed up a kernel's memory traffic (cpu only; the host's memory
  // bandwidth over one core's; 0: no bound)
  double helper_bytes_speedup = 0;
  // per codelet (its symbol "zf_<op>"): the efficiency that replaces the generic ones for both of
  // its rates (peak x efficiency), from the machine file's calibrated map (tools/sim_machine.py)
  std::map<std::string, double> efficiency;
};
Rates cpu_rates, cuda_rates;
// the links a collective's ring runs over (tools/sim_machine.py): between the GPUs (NVLink or
// through the host's PCIe), and between host processes (MPI over shared memory)
struct Link {
  double bytes = 0;  // B/s per direction
  double latency_s = 0;
};
Link gpu_link, host_link;
int ranks = 1;
struct Model {
  const char* symbol = nullptr;
  bool tiled = false;                // its kernel's tiles are shared with idle helpers (tiled())
  bool resolved = false;             // cpu_eff / cuda_eff looked up in the rates' maps
  double cpu_eff = -1, cuda_eff = -1;  // < 0: the generic rates
  FlopsFn flops = nullptr;
  Collective collective = Collective::None;
  int coll_buffer = 0;
  FlopsFn coll_bytes = nullptr;
  FlopsFn bytes = nullptr;           // traffic from the args (a range of its buffers); null: sizes
  FlopsFn bf16_operands = nullptr;   // elements rounded to bf16 for bf16 products (CUDA); null, < 0: fp32
};
std::mutex mu;
std::unordered_map<const starpu_perfmodel*, Model> models;

// The codelets whose CPU kernels cut their work into tiles that zf-deadline's idle workers take
// (runtime/parallel.hpp; the list of docs/architecture.md, "Device cores"): in simulation their
// roofline time is split between the worker and the helpers idle when the task starts.
bool tiled(const std::string& sym) {
  static const char* const kTiled[] = {
      "zf_matmul_fwd", "zf_matmul_bwd_weight", "zf_matmul_bwd_data", "zf_attention_fwd", "zf_attention_bwd",
      "zf_gqa_attention_fwd", "zf_gqa_attention_bwd", "zf_bias_add", "zf_act_fwd", "zf_act_bwd",
      "zf_swiglu_fwd", "zf_swiglu_bwd", "zf_layernorm_fwd", "zf_layernorm_bwd", "zf_rmsnorm_fwd",
      "zf_rmsnorm_bwd", "zf_rope_fwd", "zf_rope_bwd", "zf_softmax_xent_fwd", "zf_softmax_xent_bwd",
      "zf_softmax_xent_fwd_bwd", "zf_accumulate", "zf_merge", "zf_merge_selected", "zf_selective_adam",
      "zf_matmul_fwd_keep", "zf_matmul_bwd_data_keep", "zf_matmul_bwd_weight_kept", "zf_adam_group"};
  for (const char* t : kTiled)
    if (sym == t) return true;
  return false;
}

double positive(const std::map<std::string, double>& kv, const std::string& file, const std::string& key) {
  auto it = kv.find(key);
  if (it == kv.end() || !(it->second >= 0))
    throw InputError(file + ": " + key, "expected a number >= 0 (the file tools/sim_machine.py writes)");
  return it->second;
}

// The per-task overhead inside a task's time: a CUDA worker's launch; a CPU worker's overhead is
// the idle gap before the task instead (sim_dispatch_gap).
double in_task_overhead_us(bool cuda) { return cuda ? cuda_rates.overhead_us : 0.0; }

}  // namespace

void sim_load_roofline(const std::string& sched) {
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
    if (const std::string per_sched = d + ".overhead_us." + sched; kv.count(per_sched))
      rates->overhead_us = positive(kv, path, per_sched);
    rates->peak_flops = positive(kv, path, d + ".peak.flops");
    rates->peak_bytes = positive(kv, path, d + ".peak.bytes");
    if (d == "cuda") {
      rates->bf16_flops = positive(kv, path, "cuda.bf16_flops");
      rates->peak_bf16_flops = positive(kv, path, "cuda.peak.bf16_flops");
    }
    if (auto it = kv.find(d + ".helper_share"); it != kv.end()) {
      if (!(it->second > 0 && it->second < 1))
        throw InputError(std::string(path) + ": " + d + ".helper_share", "expected a share in (0, 1)");
      rates->helper_share = it->second;
    }
    if (auto it = kv.find(d + ".overhead_cold_us"); it != kv.end()) {
      if (!(it->second >= 0))
        throw InputError(std::string(path) + ": " + d + ".overhead_cold_us", "expected a time >= 0");
      rates->overhead_cold_us = it->second;
      rates->cold_bytes = positive(kv, path, d + ".cold_bytes");
    }
    if (auto it = kv.find(d + ".helper_bytes_speedup"); it != kv.end()) {
      if (!(it->second >= 1))
        throw InputError(std::string(path) + ": " + d + ".helper_bytes_speedup", "expected a speed-up >= 1");
      rates->helper_bytes_speedup = it->second;
    }
    const std::string pre = d + ".efficiency.";
    for (const auto& [k, v] : kv)
      if (k.rfind(pre, 0) == 0) {
        if (!(v > 0)) throw InputError(std::string(path) + ": " + k, "expected an efficiency > 0");
        rates->efficiency[k.substr(pre.size())] = v;
      }
  }
  for (auto [link, name] : {std::pair{&gpu_link, "gpu"}, {&host_link, "host"}}) {
    const std::string l = std::string("link.") + name;
    link->bytes = positive(kv, path, l + ".bytes");
    link->latency_s = positive(kv, path, l + ".latency_us") * 1e-6;
  }
}

void sim_register(const starpu_perfmodel* model, FlopsFn flops, Collective collective, int coll_buffer,
                  FlopsFn coll_bytes, FlopsFn bytes, FlopsFn bf16_operands) {
  std::lock_guard<std::mutex> lk(mu);
  Model m;
  m.symbol = model->symbol;
  m.tiled = model->symbol && tiled(model->symbol);
  m.flops = flops;
  m.collective = collective;
  m.coll_buffer = coll_buffer;
  m.coll_bytes = coll_bytes;
  m.bytes = bytes;
  m.bf16_operands = bf16_operands;
  models[model] = m;
}

void sim_set_ranks(int r) { ranks = r < 1 ? 1 : r; }

double sim_collective_us(Collective k, double bytes, bool cuda) {
  const Link& l = cuda ? gpu_link : host_link;
  if (l.bytes <= 0) return in_task_overhead_us(cuda);  // a machine without that link: no rank to exchange with
  return ring_collective_s(k, bytes, ranks, l.bytes, l.latency_s) * 1e6 + in_task_overhead_us(cuda);
}

void sim_dispatch_gap(void* task_bytes) {
  const int me = starpu_worker_get_id();
  if (me < 0 || me >= STARPU_NMAXWORKERS || starpu_worker_get_type(me) != STARPU_CPU_WORKER) return;
  // the bytes of each worker's previous task (a worker pops one task at a time)
  static double previous[STARPU_NMAXWORKERS];
  const double b = task_bytes ? std::max(0.0, *static_cast<const double*>(task_bytes)) : 0.0;
  const double us =
      cpu_rates.overhead_us + (cpu_rates.overhead_cold_us > 0 && previous[me] > cpu_rates.cold_bytes
                                   ? cpu_rates.overhead_cold_us : 0.0);
  previous[me] = b;
  if (us > 0) starpu_sleep((float)(us * 1e-6));
}

void sim_cuda_placeholder(void*[], void*) noexcept {}

namespace {

// the task's codelet model (its efficiencies resolved from the machine's map on first use)
Model model_of(starpu_task* task) {
  std::lock_guard<std::mutex> lk(mu);
  auto it = models.find(task->cl->model);
  if (it == models.end()) return Model{};
  Model& m = it->second;
  if (!m.resolved && m.symbol) {  // the codelet's calibrated efficiencies, once
    auto c = cpu_rates.efficiency.find(m.symbol), g = cuda_rates.efficiency.find(m.symbol);
    if (c != cpu_rates.efficiency.end()) m.cpu_eff = c->second;
    if (g != cuda_rates.efficiency.end()) m.cuda_eff = g->second;
  }
  m.resolved = true;
  return m;
}

// memory traffic: a buffer read counts once, written once, read and written twice (AdamW's
// p, g, m, v: 28 bytes per parameter, as measured in performance-limits.md)
double traffic_bytes(const Model& md, starpu_task* task) {
  if (md.bytes && task->cl_arg) return md.bytes(task->cl_arg);
  double bytes = 0;
  for (unsigned i = 0; i < STARPU_TASK_GET_NBUFFERS(task); ++i) {
    const starpu_data_access_mode mode = STARPU_TASK_GET_MODE(task, i);
    const double size = (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, i));
    bytes += size * (((mode & STARPU_R) ? 1 : 0) + ((mode & STARPU_W) ? 1 : 0));
  }
  return bytes;
}

}  // namespace

double sim_task_bytes(starpu_task* task) {
  if (!task || !task->cl || !task->cl->model) return 0.0;
  const Model md = model_of(task);
  return md.collective != Collective::None ? 0.0 : traffic_bytes(md, task);
}

double sim_task_cost_us(starpu_task* task, starpu_perfmodel_arch* arch, unsigned) {
  const bool cuda = arch->devices[0].type == STARPU_CUDA_WORKER;
  const Rates& r = cuda ? cuda_rates : cpu_rates;
  const Model md = model_of(task);
  if (md.collective != Collective::None) {  // the ring formula over the links, not the roofline
    double bytes = 0;
    if (md.coll_bytes && task->cl_arg)
      bytes = md.coll_bytes(task->cl_arg);
    else if (md.coll_buffer < (int)STARPU_TASK_GET_NBUFFERS(task))
      bytes = (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, md.coll_buffer));
    return sim_collective_us(md.collective, bytes, cuda);
  }
  const double bytes = traffic_bytes(md, task);
  const double flops = md.flops && task->cl_arg ? md.flops(task->cl_arg) : 0.0;
  // bf16 products on a CUDA worker (precision bf16): the operands' conversions first (memory-bound
  // kernels: read 4 bytes, write 2 per element), then the products at the bf16 rate
  // (negative: fp32 products)
  const double converted = cuda && md.bf16_operands && task->cl_arg ? md.bf16_operands(task->cl_arg) : -1.0;
  // a calibrated codelet: both rates are the peaks x its efficiency
  const double eff = cuda ? md.cuda_eff : md.cpu_eff;
  double f_rate = eff > 0 ? r.peak_flops * eff : r.flops;
  if (converted >= 0) f_rate = eff > 0 ? r.peak_bf16_flops * eff : r.bf16_flops;
  const double b_rate = eff > 0 ? r.peak_bytes * eff : r.bytes;
  const double t_flops = f_rate > 0 ? flops / f_rate : 0, t_bytes = b_rate > 0 ? bytes / b_rate : 0;
  double t = std::max(t_flops, t_bytes) + (b_rate > 0 && converted > 0 ? 6.0 * converted / b_rate : 0);
  // zf-deadline's helpers (CPU device only): each helper idle when a tiled kernel starts runs the
  // measured share s of its tiles (one helper: the kernel takes 1 - s of its time), so h helpers
  // speed its arithmetic up 1 + h s / (1 - s), and its memory traffic as much but at most the
  // host's bandwidth over one core's (docs/simulation.md, "Helpers")
  if (!cuda && md.tiled) {
    const int me = starpu_worker_get_id();
    const double s = r.helper_share;
    if (me >= 0) {
      const double sp = 1 + deadline_policy_idle_helpers(me) * s / (1 - s);
      const double sb = r.helper_bytes_speedup > 0 ? std::min(sp, r.helper_bytes_speedup) : sp;
      t = std::max(t_flops / sp, t_bytes / sb);
    }
  }
  return t * 1e6 + in_task_overhead_us(cuda);
}

}  // namespace zf
