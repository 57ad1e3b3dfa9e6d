// The run's reports (graphs/train/report.hpp): progress lines, metrics JSON, traces, summary table.
#include "graphs/train/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <ostream>
#include <string_view>

#include <sys/resource.h>

#include "graphs/strategies/strategy.hpp"
#include "graphs/train/precision.hpp"
#include "graphs/train/step_graph.hpp"
#include "graphs/train/trainer.hpp"
#include "runtime/comm.hpp"
#include "runtime/simulation.hpp"
#include "runtime/trace.hpp"

namespace zf {

using json = nlohmann::json;

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

namespace {

// user + system CPU time of the process, every thread (getrusage)
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return (double)t.tv_sec + (double)t.tv_usec * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  double pos = q * (double)(v.size() - 1);
  size_t lo = (size_t)std::floor(pos), hi = (size_t)std::ceil(pos);
  return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

}  // namespace

void LoopClock::start(Runtime& rt) {
  t_start_us = rt.now_us();
  cpu_start = process_cpu_seconds();
  tiles_start = Runtime::tile_counts();
}

void LoopClock::stop(Runtime& rt) {
  train_wall_s = (rt.now_us() - t_start_us) * 1e-6;
  train_cpu_s = process_cpu_seconds() - cpu_start;
  tiles_end = Runtime::tile_counts();
}

// ---------------------------------------------------------------- the progress lines
Progress::Progress(const Spec& spec, Runtime& rt, const StepGraph& graph, const Precision& prec,
                   const Strategy& strat, std::ostream& out, bool quiet, int64_t t0, int64_t T, double t_start_us)
    : spec_(spec),
      rt_(rt),
      graph_(graph),
      prec_(prec),
      strat_(strat),
      out_(out),
      quiet_(quiet),
      t0_(t0),
      T_(T),
      t_start_us_(t_start_us),
      printed_(t0) {}

void Progress::operator()(int64_t done) {
  const int every = spec_.log.every;
  while (every > 0 && printed_ + every <= done) {
    int64_t a = printed_, b = printed_ + every;
    double loss = 0, busy = 0;
    for (int64_t s = a; s < b; ++s) {
      loss += graph_.step_stats(s, 0) / std::max(1.0, graph_.step_stats(s, 2));
      busy += rt_.tracker().step_agg(s).busy_us;
    }
    double end_b = rt_.tracker().step_agg(b - 1).last_end_us;
    double end_a = a > t0_ ? rt_.tracker().step_agg(a - 1).last_end_us : t_start_us_;
    double wall = std::max(1.0, end_b - end_a);
    double stall = 1.0 - busy / (wall * rt_.device_worker_count());
    double elapsed = (rt_.now_us() - t_start_us_) * 1e-6;
    double eta = elapsed / (double)(b - t0_) * (double)(T_ - b);
    const bool fp16 = prec_.fp16();
    if (!quiet_)
      out_ << "step " << b << "/" << T_ << " | " << (kSimulated ? "" : "loss " + fmt("%.4f", loss / every) + " | ")
           << fmt("%.2f", wall / every * 1e-3) << " ms/step | stall " << fmt("%.1f", 100 * std::max(0.0, stall))
           << "% | " << (spec_.scheduler.type.empty() ? "" : "lr " + fmt("%.3g", spec_.lr_at(prec_.lr_index(b - 1))) + " | ")
           << (strat_.grad_clip() ? "gnorm " + fmt("%.4g", strat_.grad_clip()->norm_through(b - 1)) + " | " : "")
           << (fp16 ? "scale " + fmt("%.0f", prec_.scale_at(b - 1)) + ", skipped " +
                          std::to_string(prec_.skipped_through(b - 1)) + " | "
                    : "")
           << fmt("%.1f", elapsed) << " s, eta " << fmt("%.0f", eta) << " s\n"
           << std::flush;
    printed_ = b;
  }
}

// ---------------------------------------------------------------- the measured steps
StepTimes measure_steps(Runtime& rt, int64_t t0, int64_t T, int64_t warmup_steps) {
  StepTimes m;
  m.W = std::min<int64_t>(warmup_steps, T - t0 - 1);
  for (int64_t s = t0 + m.W; s < T; ++s) {
    auto a = rt.tracker().step_agg(s);
    double prev = s > t0 ? rt.tracker().step_agg(s - 1).last_end_us : rt.tracker().step_agg(t0).first_start_us;
    m.step_s.push_back((a.last_end_us - prev) * 1e-6);
    m.busy += a.busy_us * 1e-6;
  }
  m.wall = std::accumulate(m.step_s.begin(), m.step_s.end(), 0.0);
  m.M = (int64_t)m.step_s.size();
  m.stall = m.wall > 0 ? 1.0 - m.busy / (m.wall * rt.device_worker_count()) : 0.0;
  return m;
}

double last_steps_loss(const StepGraph& graph, int64_t t0, int64_t T) {
  double train_loss = 0;
  const int64_t tail = std::min<int64_t>(T - t0, 50);
  for (int64_t s = T - tail; s < T; ++s)
    train_loss += graph.record(s).stats[0] / std::max(1.0, graph.record(s).stats[2]);
  train_loss /= (double)tail;
  return train_loss;
}

std::vector<double> step_losses(const StepGraph& graph, int64_t t0, int64_t T) {
  std::vector<double> out;
  for (int64_t s = t0; s < T; ++s) out.push_back(graph.record(s).stats[0] / std::max(1.0, graph.record(s).stats[2]));
  return out;
}

// ---------------------------------------------------------------- what strategies report
// The host AdamW's tasks as the strategies mark them (Strategy::host_adam_task), ZenFlow's
// figures from its typed report (StrategyReport).
double host_adam_us_per_step(const std::vector<TaskRecord>& records, int64_t from, int64_t T, int64_t M) {
  double host_adam_us = 0;
  for (const TaskRecord& r : records)
    if (r.step >= from && r.step < T && Strategy::host_adam_task(r))
      host_adam_us += r.end_us - r.start_us;
  if (M) host_adam_us /= (double)M;
  return host_adam_us;
}

namespace {

using Row = std::function<void(const std::string&, const std::string&)>;

void zenflow_rows(const Strategy& strat, const Row& row) {
  if (const auto z = strat.report().zenflow)
    row("host updates / staleness", std::to_string(z->host_updates) + " / max " + fmt("%.0f", z->staleness_max) +
                                        ", mean " + fmt("%.1f", z->staleness_mean) + " steps");
}

// Collective bytes per step, and whether every rank ended with the same weights (FNV-1a 64 of all
// parameter bytes, gathered on rank 0). Called by every rank.
// host_adam_us: this rank's host AdamW time per measured step (microseconds).
json data_parallel_metrics(const Comm& comm, Workload& wl, const Strategy& strat, int64_t steps, double host_adam_us) {
  uint64_t h = kFnvOffset;
  int64_t grad_bytes = 0, imp_per_selection = 0, matrix_bytes = 0;
  for (Param* p : wl.params()) {
    if (!comm.simulated()) {  // a simulated run has no values (and no other rank) to compare
      const std::vector<float> v = logical_values(*p);  // the same hash whatever the storage layout
      h = fnv1a64(v.data(), v.size() * sizeof(float), h);
    }
    grad_bytes += (int64_t)p->grad.bytes();
    if (p->is_matrix()) {
      imp_per_selection += p->cols() * (int64_t)sizeof(float);  // C floats per 2-D weight
      matrix_bytes += (int64_t)p->value.numel() * (int64_t)sizeof(float);
    }
  }
  const std::vector<uint64_t> all = comm.gather(h);
  // per rank (rank 0 receives them): the host state and host AdamW time ZeRO stages 1 and 2 divide
  const std::vector<uint64_t> state = comm.gather((uint64_t)strat.host_state_bytes());
  const Strategy::DeviceState ds = strat.device_state();
  const std::vector<uint64_t> dev = comm.gather((uint64_t)ds.total());
  const std::vector<uint64_t> dev_params = comm.gather((uint64_t)ds.params);
  const std::vector<uint64_t> adam_ns = comm.gather((uint64_t)std::llround(host_adam_us * 1e3));
  json adam_s = json::array();
  for (uint64_t x : adam_ns) adam_s.push_back((double)x * 1e-9);
  json hashes = json::array();
  for (uint64_t x : all) {  // hex strings: JSON numbers lose 64-bit integers in many readers
    char b[24];
    std::snprintf(b, sizeof b, "%016llx", (unsigned long long)x);
    hashes.push_back(b);
  }
  const bool same = std::all_of(all.begin(), all.end(), [&](uint64_t x) { return x == all.front(); });
  const std::optional<StrategyReport::ZenFlow> z = strat.report().zenflow;
  const int64_t selections = z ? z->selections : 0;
  // what gathering every rank's 2-D gradients for the selection would cost instead (R x numel x 4)
  const int64_t gather = (int64_t)comm.size() * matrix_bytes;
  (void)grad_bytes;
  json dp = {{"ranks", comm.size()},
          {"zero_stage", strat.zero_stage()},
          {"communication_data_type", wire_name(strat.grad_wire())},
          {"allreduce_bytes_per_step",
           {{"gradients", (double)strat.bytes_grad_allreduce() / (double)steps},
            {"importance", (double)strat.bytes_allreduce() / (double)steps}}},
          {"reduce_scatter_bytes_per_step", (double)strat.bytes_reduce_scatter() / (double)steps},
          {"allgather_bytes_per_step", (double)strat.bytes_allgather() / (double)steps},
          {"host_state_bytes_per_rank", state},
          {"device_state_bytes_per_rank", dev},
          {"device_param_bytes_per_rank", dev_params},
          {"host_adam_s_per_step_per_rank", adam_s},
          {"selections", selections},
          {"per_selection",
           {// measured: exact selection moves none at stages 0 and 1, one importance all-reduce at
            // stage 2 and with the local-sum proxy (docs/data-parallel.md)
            {"importance_bytes", selections ? strat.bytes_allreduce() / selections : 0},
            {"importance_allreduce_bytes", imp_per_selection},
            {"gather_gradients_bytes", gather},
            {"ratio", imp_per_selection ? (double)gather / (double)imp_per_selection : 0.0}}},
          {"replicas_identical", same},
          {"weight_hashes", hashes}};
  if (comm.simulated()) {  // rank 0 of R simulated ranks: the per-rank figures are rank 0's
    dp["simulated_ranks"] = true;
    dp.erase("replicas_identical");
    dp.erase("weight_hashes");
  }
  if (z) dp["dp_selection"] = z->dp_selection;
  // stage 3: the bound in effect on the elements of gathered parameters (docs/data-parallel.md)
  if (strat.zero_stage() == 3) dp["stage3_max_live_parameters"] = strat.stage3_max_live_elems();
  return dp;
}

// The data-parallel rows of the summary table.
void data_parallel_rows(const RunReport& r, const json& m, const Row& row) {
  const json& dp = m["data_parallel"];
  if (dp.contains("simulated_ranks"))
    row("data parallel", "rank 0 of " + std::to_string(r.ranks) + " simulated ranks");
  else
    row("data parallel", std::to_string(r.ranks) + " ranks, replicas " +
                             (dp["replicas_identical"].get<bool>() ? "identical" : "DIFFER"));
  row("collectives per step", fmt("%.3f", dp["collective_s_per_step"].get<double>() * 1e3) +
                                  " ms (their tasks' time on rank 0)");
  row("all-reduce bytes per step", fmt("%.0f", dp["allreduce_bytes_per_step"]["gradients"].get<double>()) +
                                       " gradients / " +
                                       fmt("%.0f", dp["allreduce_bytes_per_step"]["importance"].get<double>()) +
                                       " importance" +
                                       (dp.contains("dp_selection")
                                            ? " (selection " + dp["dp_selection"].get<std::string>() + ")"
                                            : std::string()));
  if (r.strat.zero_stage() >= 1)
    row("ZeRO stage " + std::to_string(r.strat.zero_stage()),
        fmt("%.0f", dp["reduce_scatter_bytes_per_step"].get<double>()) + " reduce-scatter / " +
            fmt("%.0f", dp["allgather_bytes_per_step"].get<double>()) + " all-gather bytes per step, host state " +
            fmt("%.0f", (double)r.strat.host_state_bytes()) + " bytes on rank 0");
  if (r.strat.zero_stage() == 3) {  // docs/data-parallel.md, "ZeRO stage 3"
    const Strategy::DeviceState d = r.strat.device_state();
    row("device parameters (rank 0)", fmt("%.0f", (double)d.params) + " bytes: shards " +
                                          fmt("%.0f", (double)d.params_shards) + " + whole layers " +
                                          fmt("%.0f", (double)d.params_transient));
  }
}

}  // namespace

// Each worker's busy time per measured step (seconds), by its name ("device CUDA 0", "host CPU 1").
static json worker_busy(const RunReport& r) {
  const int64_t from = r.t0 + r.times.W;
  std::map<int, double> busy;
  for (const TaskRecord& x : r.rt.tracker().records())
    if (x.step >= from && x.step < r.T) busy[x.worker] += (x.end_us - x.start_us) * 1e-6;
  json out = json::object();
  const double M = (double)std::max<int64_t>(1, r.times.M);
  for (int w : r.rt.device_workers()) out["device " + r.rt.worker_name(w)] = busy[w] / M;
  for (int w : r.rt.host_workers()) out["host " + r.rt.worker_name(w)] = busy[w] / M;
  return out;
}

// The collective tasks' time (all-reduce, reduce-scatter, all-gather: codelet_is_collective) per
// measured step on this rank, summed over its workers; in simulation the ring formula's
// (docs/simulation.md), in a real run including the wait for the other ranks.
static double collective_s_per_step(const RunReport& r) {
  const int64_t from = r.t0 + r.times.W;
  double s = 0;
  for (const TaskRecord& x : r.rt.tracker().records())
    if (x.step >= from && x.step < r.T && codelet_is_collective(x.codelet)) s += (x.end_us - x.start_us) * 1e-6;
  return s / (double)std::max<int64_t>(1, r.times.M);
}

// ---------------------------------------------------------------- after the run
json metrics_json(const RunReport& r) {
  const StepTimes& st = r.times;
  const int64_t M = st.M, T = r.T, t0 = r.t0;
  const Strategy& strat = r.strat;
  json m;
  m["strategy"] = strat.name();
  m["precision"] = r.spec.precision;
  m["communication_data_type"] = r.spec.grad_wire();  // the gradients' wire (docs/data-parallel.md)
  if (r.prec.fp16()) m["fp16"] = r.prec.metrics();  // docs/metrics.md
  m["sched"] = r.rt.policy();
  m["steps"] = T;
  if (t0 > 0) m["resumed_at_step"] = t0;
  m["warmup_steps_excluded"] = st.W;
  m["measured_steps"] = M;
  m["batch_size"] = r.B;
  if (r.A > 1) m["gradient_accumulation"] = {{"steps", r.A}, {"micro_batch_size", r.Bl * r.ranks}};
  m["model"] = r.wl.describe();
  m["workers"] = {{"device", r.rt.device_worker_count()}, {"host", r.rt.host_worker_count()}};
  m["step_time_s"] = {{"mean", M ? st.wall / (double)M : 0.0},
                      {"median", percentile(st.step_s, 0.5)},
                      {"p90", percentile(st.step_s, 0.9)}};
  m["device_busy_s_per_step"] = M ? st.busy / (double)M : 0.0;
  m["stall_fraction"] = std::max(0.0, st.stall);
  m["bytes"] = {{"device_to_host", (double)strat.bytes_d2h() / (double)(T - t0)},
                {"host_to_device", (double)strat.bytes_h2d() / (double)(T - t0)}};
  // host-to-device prefetches started the moment a host result was written (CUDA workers only)
  m["prefetches"] = r.rt.prefetches();
  if (kSimulated) {  // no loss is computed; the workers' busy time is the prediction's detail
    m["simulated"] = true;
    m["worker_busy_s_per_step"] = worker_busy(r);
  } else {
    m["final"] = {{"train_loss", r.train_loss}};
    if (!r.losses.empty()) m["final"]["train_loss_last_step"] = r.losses.back();
    // each step's training loss, step first_step + i at index i (docs/metrics.md)
    m["loss_history"] = {{"first_step", t0}, {"loss", r.losses}};
  }
  if (!r.evals.empty()) {
    m["evals"] = json::array();
    for (const EvalPoint& e : r.evals)
      m["evals"].push_back({{"step", e.step}, {"eval_loss", e.ev.loss}, {"eval_accuracy", e.ev.accuracy},
                            {"eval_examples", e.ev.count}});
  }
  if (r.opt.evaluate) {
    m["final"]["eval_loss"] = r.ev.loss;
    m["final"]["eval_accuracy"] = r.ev.accuracy;
    m["final"]["eval_examples"] = r.ev.count;
  }
  m["throughput"] = {{"samples_per_s", st.wall > 0 ? (double)(M * r.B) / st.wall : 0.0}};
  m["train_wall_s"] = r.clock.train_wall_s;
  // CPU time of the whole process (every thread: workers, OpenBLAS, the submitting thread) over
  // the training loop, and per second of its wall time: the cores kept busy (docs/metrics.md)
  m["cpu_seconds"] = r.clock.train_cpu_s;
  m["cpu_over_wall"] = r.clock.train_wall_s > 0 ? r.clock.train_cpu_s / r.clock.train_wall_s : 0.0;
  m["device_tiles"] = {{"tiles", r.clock.tiles_end.tiles - r.clock.tiles_start.tiles},
                       {"by_helpers", r.clock.tiles_end.helped - r.clock.tiles_start.helped}};
  strat.add_metrics(m, T);
  if (const GradClip* c = strat.grad_clip()) m["gradient_clipping"] = c->metrics();
  m["host_state_bytes"] = strat.host_state_bytes();
  const Strategy::DeviceState ds = strat.device_state();
  m["device_state_bytes"] = {{"params", ds.params},       {"params_shards", ds.params_shards},
                             {"params_transient", ds.params_transient}, {"grads", ds.grads},
                             {"optimizer", ds.optimizer}, {"accumulator", ds.accumulator}, {"total", ds.total()}};
  // the activation buffers the graphs hold (beside the state: not in total)
  if (const int64_t a = r.wl.activation_bytes(); a >= 0) m["device_state_bytes"]["activations"] = a;
  m["host_adam_s_per_step"] = r.host_adam_us * 1e-6;
  if (r.comm) {
    m["data_parallel"] = data_parallel_metrics(*r.comm, r.wl, strat, T - t0, r.host_adam_us);
    m["data_parallel"]["collective_s_per_step"] = collective_s_per_step(r);
  }
  return m;
}

void write_traces(const RunReport& r) {
  const RunOptions& opt = r.opt;
  if (opt.trace_path.empty() && opt.trace_csv_path.empty()) return;
  auto recs = r.rt.tracker().records();
  if (opt.trace_from >= 0)
    recs.erase(std::remove_if(recs.begin(), recs.end(), [&](const TaskRecord& x) { return x.step < opt.trace_from; }),
               recs.end());
  if (!opt.trace_csv_path.empty()) write_task_csv(opt.trace_csv_path, recs);
  if (opt.trace_path.empty()) return;
  std::vector<TraceWorker> workers;
  for (int w : r.rt.device_workers()) workers.push_back({w, "device " + r.rt.worker_name(w), Side::Device});
  for (int w : r.rt.host_workers()) workers.push_back({w, "host " + r.rt.worker_name(w), Side::Host});
  std::vector<TraceEvent> ev = r.strat.trace_events(recs);
  if (opt.trace_from >= 0 && !recs.empty()) {  // events of the kept window only
    double first = recs.front().start_us;
    for (auto& x : recs) first = std::min(first, x.start_us);
    ev.erase(std::remove_if(ev.begin(), ev.end(), [&](const TraceEvent& e) { return e.time_us < first; }), ev.end());
  }
  for (int64_t s = std::max(r.t0, opt.trace_from); s < r.T; ++s) {
    auto a = r.rt.tracker().step_agg(s);
    if (a.tasks) ev.push_back({a.last_end_us, -1, "step", "end of step " + std::to_string(s)});
  }
  write_paje(opt.trace_path, recs, workers, std::move(ev));
}

void print_summary(const RunReport& r, const json& m, std::ostream& out) {
  const StepTimes& st = r.times;
  const RunOptions& opt = r.opt;
  const int64_t M = st.M;
  auto row = [&](const std::string& k, const std::string& v) {
    char b[128];
    std::snprintf(b, sizeof b, "  %-28s %s\n", k.c_str(), v.c_str());
    out << b;
  };
  out << "summary (" << M << " measured steps, " << st.W << " warm-up steps excluded)\n";
  row("strategy / sched", std::string(r.strat.name()) + " / " + r.rt.policy());
  row("step time median / p90",
      fmt("%.2f", percentile(st.step_s, 0.5) * 1e3) + " / " + fmt("%.2f", percentile(st.step_s, 0.9) * 1e3) + " ms");
  row("device busy per step", fmt("%.2f", M ? st.busy / (double)M * 1e3 : 0.0) + " ms");
  row("stall fraction", fmt("%.3f", std::max(0.0, st.stall)));
  row("bytes per step d2h / h2d", fmt("%.0f", m["bytes"]["device_to_host"].get<double>()) + " / " +
                                      fmt("%.0f", m["bytes"]["host_to_device"].get<double>()));
  if (r.comm) data_parallel_rows(r, m, row);
  if (m["device_state_bytes"].contains("activations")) {
    const double a = m["device_state_bytes"]["activations"].get<double>();
    const int ck = r.spec.train.activation_checkpointing;
    row("activation buffers", fmt("%.1f", a / (1 << 20)) + " MiB" +
                                  (ck == 0   ? std::string()
                                   : ck == 1 ? std::string(" (checkpointing every layer)")
                                             : " (checkpointing every " + std::to_string(ck) + " layers)"));
  }
  row("throughput", fmt("%.0f", st.wall > 0 ? (double)(M * r.B) / st.wall : 0.0) + " samples/s");
  zenflow_rows(r.strat, row);
  if (m.contains("gradient_clipping")) {
    const json& c = m["gradient_clipping"];
    row("gradient clipping", fmt("%g", c["max_norm"].get<double>()) + ": " + std::to_string(c["clipped_steps"].get<int64_t>()) +
                                 " of " + std::to_string(c["clip_points"].get<int64_t>()) + " clipped, norm mean " +
                                 fmt("%.4g", c["norm"]["mean"].get<double>()) + ", last " +
                                 fmt("%.4g", c["norm"]["last"].get<double>()));
  }
  if (r.prec.fp16())
    row("fp16 loss scale / skipped", fmt("%.0f", r.prec.scale()) + " / " + std::to_string(r.prec.skipped_steps()) + " steps");
  if (kSimulated) {
    for (const auto& w : m["worker_busy_s_per_step"].items())
      row("busy per step: " + w.key(), fmt("%.3f", w.value().get<double>() * 1e3) + " ms");
  } else {
    row("train loss mean (last " + std::to_string(std::min<int64_t>(r.T - r.t0, 50)) + ")",
        fmt("%.4f", r.train_loss));
    if (!r.losses.empty()) row("train loss (step " + std::to_string(r.T - 1) + ")", fmt("%.4f", r.losses.back()));
  }
  if (opt.evaluate) {
    row("eval loss", fmt("%.4f", r.ev.loss));
    if (r.ev.count > 0)
      row("eval accuracy", fmt("%.2f", 100 * r.ev.accuracy) + " % of " + std::to_string(r.ev.count));
    else
      row("eval accuracy", "no evaluation rows");
  }
  row(kSimulated ? "wall time (of the simulation)" : "wall time", fmt("%.1f", m["wall_s"].get<double>()) + " s");
  if (!kSimulated)  // the simulation's CPU time says nothing of the simulated machine
    row("CPU time / wall (training)", fmt("%.2f", r.clock.train_cpu_s) + " s / " +
                                        fmt("%.2f", m["cpu_over_wall"].get<double>()) + " cores");
  const Runtime::TileCounts& t0 = r.clock.tiles_start, &t1 = r.clock.tiles_end;
  if (t1.tiles > t0.tiles)
    row("device tiles / by helpers", std::to_string(t1.tiles - t0.tiles) + " / " + std::to_string(t1.helped - t0.helped));
  if (!opt.metrics_path.empty()) row("metrics", opt.metrics_path);
  if (!opt.save_path.empty()) row("weights", opt.save_path);
  if (!opt.save_hf_dir.empty()) row("Hugging Face model", opt.save_hf_dir);
  if (!opt.checkpoint_dir.empty()) row("checkpoints", opt.checkpoint_dir);
  if (!opt.trace_path.empty()) row("trace", opt.trace_path);
}

}  // namespace zf
