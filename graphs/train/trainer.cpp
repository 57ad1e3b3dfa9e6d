#include "graphs/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <string_view>
#include <tuple>

#include <sys/resource.h>

#include "graphs/train/checkpoint.hpp"
#include "graphs/train/loss_scaler.hpp"
#include "graphs/train/memory_estimate.hpp"
#include "graphs/strategies/strategy.hpp"
#include "runtime/trace.hpp"
#include "models/gpt.hpp"
#include "models/gpt_classifier.hpp"
#include "models/idx.hpp"
#include "models/mlp.hpp"
#include "models/text.hpp"
#include "models/rng.hpp"
#include "models/safetensors.hpp"
#include "models/weights.hpp"
#include "runtime/comm.hpp"
#include "runtime/runtime.hpp"

namespace zf {

using json = nlohmann::json;

std::unique_ptr<Workload> make_workload(const Spec& spec, StepStatus* status) {
  if (spec.model.type == "mlp") {
    FashionMnist d = load_fashion_mnist(spec.data.dir, spec.data.train_limit, spec.data.eval_limit);
    if (spec.train.batch_size > d.train.rows)
      throw InputError(spec.where("train.batch_size"),
                       std::to_string(spec.train.batch_size) + " exceeds the " +
                           std::to_string(d.train.rows) + " training examples");
    MlpConfig c;
    c.hidden = spec.model.hidden;
    c.activation = spec.model.activation == "gelu" ? Activation::Gelu : Activation::Relu;
    c.init_seed = spec.model.init_seed;
    c.batch_size = spec.train.batch_size;
    c.eval_batch_size = spec.train.eval_batch_size;
    c.weights_in_out = spec.model.weight_layout != "out_in";
    return std::make_unique<MlpClassifier>(c, std::move(d.train), std::move(d.test), status);
  }
  if (spec.model.type == "gpt" || spec.model.type == "gpt-classifier") {  // docs/gpt.md
    GptConfig c;
    c.n_layer = spec.model.n_layer;
    c.n_head = spec.model.n_head;
    c.n_embd = spec.model.n_embd;
    c.context = spec.model.context;
    c.init_seed = spec.model.init_seed;
    c.batch_size = spec.train.batch_size;
    c.eval_batch_size = spec.train.eval_batch_size;
    c.eval_limit = spec.data.eval_limit;
    // (in, out) where ZenFlow's selective step gains from it; the other strategies keep the (out,
    // in) layout, whose matmuls the device-adam step is tuned on (docs/zenflow.md)
    c.weights_in_out = spec.model.weight_layout == "in_out" ||
                       (spec.model.weight_layout == "auto" && spec.strategy == "zenflow");
    const std::string where = spec.source + ": data.path";
    int64_t units = 0;
    std::unique_ptr<Workload> w;
    if (spec.model.type == "gpt") {
      TextSplit t = spec.data.dataset == "kjv" ? kjv_lm_split(load_kjv(spec.data.path, where))
                                               : load_text_split(spec.data.path, where);
      check_split(t, c.context, spec.data.path, where);
      w = std::make_unique<GptLanguageModel>(c, std::move(t), status);
    } else {
      const std::vector<Verse> verses = load_kjv(spec.data.path, where);
      VerseTask t = make_verse_task(verses, spec.data.labels, spec.data.split, c.context);
      if (t.eval.rows == 0)  // nothing to evaluate: an accuracy of 0 / 0 is no result
        throw InputError(where + ": " + spec.data.path,
                         "no held-out verses for data.split \"" + spec.data.split + "\" (" +
                             (spec.data.split == "book" ? "the held-out books are absent from the file"
                                                        : "every 10th verse is held out; the file has too few") +
                             "): the run would have no evaluation rows");
      if (spec.model.head == "generative")
        w = std::make_unique<GptGenerativeClassifier>(c, std::move(t), verses, status);
      else
        w = std::make_unique<GptClassifier>(c, std::move(t), spec.model.pool, status);
    }
    units = w->epoch_size();
    if (spec.train.batch_size > units)
      throw InputError(spec.where("train.batch_size"), std::to_string(spec.train.batch_size) + " exceeds the " +
                                                               std::to_string(units) + " training " +
                                                               (spec.model.type == "gpt" ? "windows" : "verses"));
    return w;
  }
  throw InputError(spec.source + ": model.type", "unknown model type '" + spec.model.type + "'");
}


namespace {
// user + system CPU time of the process, every thread (getrusage)
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return (double)t.tv_sec + (double)t.tv_usec * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}


struct StepRecord {
  double stats[3] = {0, 0, 0};  // loss sum, correct, count (written by read_async)
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  double pos = q * (double)(v.size() - 1);
  size_t lo = (size_t)std::floor(pos), hi = (size_t)std::ceil(pos);
  return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

// ---- data parallelism (docs/data-parallel.md). The replicas are identical: rank 0 alone reports
// and writes files, the others train silently.
RunOptions rank_options(const RunOptions& o) {
  RunOptions r = o;
  if (o.comm && o.comm->rank() != 0) {
    r.quiet = true;
    r.evaluate = false;
    r.metrics_path.clear();
    r.save_path.clear();
    r.checkpoint_dir.clear();
    r.trace_path.clear();
    r.trace_csv_path.clear();
  }
  return r;
}

// Each rank's workload runs micro-batches of B / (R x A) rows of the global batch B (A = gradient
// accumulation steps; DeepSpeed: train_batch_size = micro batch x A x ranks).
Spec rank_spec(const Spec& spec, int ranks) {
  const int A = spec.train.gradient_accumulation_steps;
  if (spec.train.batch_size % (ranks * A) != 0)
    throw InputError(spec.where("train.batch_size"),
                     std::to_string(spec.train.batch_size) + " (the global batch) is not divisible by the " +
                         std::to_string(ranks) + " ranks" +
                         (A > 1 ? " x " + std::to_string(A) + " gradient accumulation steps (DeepSpeed: train_batch_size "
                                                              "= micro batch x accumulation x ranks)"
                                : std::string()));
  Spec s = spec;
  s.train.batch_size /= ranks * A;
  return s;
}

// Collective bytes per step, and whether every rank ended with the same weights (FNV-1a 64 of all
// parameter bytes, gathered on rank 0). Called by every rank.
// host_adam_us: this rank's host AdamW time per measured step (microseconds).
json data_parallel_metrics(const Comm& comm, Workload& wl, const Strategy& strat, int64_t steps, double host_adam_us) {
  uint64_t h = kFnvOffset;
  int64_t grad_bytes = 0, imp_per_selection = 0, matrix_bytes = 0;
  for (Param* p : wl.params()) {
    const std::vector<float> v = logical_values(*p);  // the same hash whatever the storage layout
    h = fnv1a64(v.data(), v.size() * sizeof(float), h);
    grad_bytes += (int64_t)p->grad.bytes();
    if (p->is_matrix()) {
      imp_per_selection += p->cols() * (int64_t)sizeof(float);  // C floats per 2-D weight
      matrix_bytes += (int64_t)p->value.numel() * (int64_t)sizeof(float);
    }
  }
  const std::vector<uint64_t> all = comm.gather(h);
  // per rank (rank 0 receives them): the host state and host AdamW time ZeRO stages 1 and 2 divide
  const std::vector<uint64_t> state = comm.gather((uint64_t)strat.host_state_bytes());
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
  const int64_t selections = imp_per_selection ? strat.bytes_allreduce() / imp_per_selection : 0;
  // what gathering every rank's 2-D gradients for the selection would cost instead (R x numel x 4)
  const int64_t gather = (int64_t)comm.size() * matrix_bytes;
  (void)grad_bytes;
  return {{"ranks", comm.size()},
          {"zero_stage", strat.zero_stage()},
          {"allreduce_bytes_per_step",
           {{"gradients", (double)strat.bytes_grad_allreduce() / (double)steps},
            {"importance", (double)strat.bytes_allreduce() / (double)steps}}},
          {"reduce_scatter_bytes_per_step", (double)strat.bytes_reduce_scatter() / (double)steps},
          {"allgather_bytes_per_step", (double)strat.bytes_allgather() / (double)steps},
          {"host_state_bytes_per_rank", state},
          {"host_adam_s_per_step_per_rank", adam_s},
          {"selections", selections},
          {"per_selection",
           {{"importance_bytes", imp_per_selection},
            {"gather_gradients_bytes", gather},
            {"ratio", imp_per_selection ? (double)gather / (double)imp_per_selection : 0.0}}},
          {"replicas_identical", same},
          {"weight_hashes", hashes}};
}

}  // namespace

json run_training(const Spec& spec, const RunOptions& opt_in) {
  const RunOptions opt = rank_options(opt_in);
  Comm* const comm = opt.comm && opt.comm->size() > 1 ? opt.comm : nullptr;  // null: one process
  const int ranks = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  const Spec local = rank_spec(spec, ranks);  // the micro-batch of one rank
  const int A = spec.train.gradient_accumulation_steps;
  std::ostream& out = opt.out ? *opt.out : std::cout;
  const auto wall0 = std::chrono::steady_clock::now();
  // the memory the run will need, checked before anything is allocated (memory_estimate.hpp); the
  // per-step records once the step count is known (train.epochs needs the data's size)
  MemoryEstimate mem = estimate_memory(spec, spec.train.steps > 0 ? spec.train.steps : -1, ranks);
  check_memory(spec, mem);
  // the checkpoint directory, locked for the whole run before anything is loaded
  // (graphs/train/checkpoint.hpp: one writer, stale temporaries, another run's checkpoints)
  std::unique_ptr<CheckpointDir> ckdir;
  if (!opt.checkpoint_dir.empty())
    ckdir = std::make_unique<CheckpointDir>(opt.checkpoint_dir, spec, opt.checkpoint_overwrite);
  RuntimeConfig rc;
  rc.sched = spec.runtime.sched;
  std::tie(rc.device_workers, rc.host_workers) = worker_split(spec);
  rc.cuda_workers = spec.runtime.cuda_workers;
  if (comm && spec.runtime.cuda_workers >= 0 && Runtime::cuda_devices() > 0)
    rc.cuda_device = rank % Runtime::cuda_devices();  // one GPU per rank
  rc.crossings_on_host = spec.runtime.crossings == "host";
  rc.priorities = spec.runtime.priorities;
  Runtime rt(rc);
  if (rc.crossings_on_host && rt.device_is_cuda())
    throw InputError(spec.source + ": runtime.crossings",
                     "\"host\" emulates a copy engine for CPU device workers; with CUDA workers the crossings "
                     "are StarPU's transfers (use \"device\", or runtime.cuda_workers = -1)");
  if (comm && rt.device_is_cuda()) comm->init_nccl(rc.cuda_device);
  StepStatus& status = rt.tracker().status();
  std::unique_ptr<Workload> wl = make_workload(local, &status);
  if ((comm || A > 1) && spec.train.batch_size > wl->epoch_size())
    throw InputError(spec.where("train.batch_size"), std::to_string(spec.train.batch_size) + " exceeds the " +
                                                             std::to_string(wl->epoch_size()) + " training units");
  if (!opt.init_path.empty() && !opt.resume_path.empty())
    throw InputError("--init", "cannot be combined with --resume (the checkpoint holds the weights)");
  if (!opt.init_path.empty()) load_weights(*wl, opt.init_path);
  // precision bf16 / fp16: device parameters and gradients hold bf16 (fp16) values; the parameters
  // are rounded after every update and the gradients after every backward (the fp32 masters are
  // the strategies': host-side for the offloading ones, device-side for device-adam)
  const bool bf16 = spec.precision == "bf16", fp16 = spec.precision == "fp16";
  // fp16: one flag word the gradient rounding raises on an inf or NaN (the overflow check)
  // (parameters that round to inf raise their own flag, which nobody reads: their next gradients
  // are then inf or NaN)
  Tensor overflow = fp16 ? Tensor::home({1}, "fp16.overflow") : Tensor();
  Tensor param_overflow = fp16 ? Tensor::home({1}, "fp16.param_overflow") : Tensor();
  auto round_params = [&](int64_t step) {
    for (Param* p : wl->params())
      if (bf16)
        insert_round_bf16(rt.device(step).named("bf16.param." + p->name), p->value);
      else if (fp16)
        insert_round_fp16(rt.device(step).named("fp16.param." + p->name), p->value, param_overflow);
  };
  round_params(-1);  // the masters start from the bf16 values
  const int64_t per_epoch = steps_per_epoch(spec, wl->epoch_size());
  std::unique_ptr<Strategy> strat = make_strategy(spec, rt, wl->params(), per_epoch, comm);
  // fp16 (graphs/train/loss_scaler.hpp): the scaler, the updates applied so far (UpdateStep::o) and the
  // steps skipped for an overflow; all three are in the checkpoints
  LossScaler scaler(spec.fp16);
  int64_t applied = 0;
  std::vector<int64_t> skipped;
  std::vector<std::pair<int64_t, double>> scale_changes;  // (step, scale from the next step on)
  auto save_trainer_state = [&](StateWriter& w) {
    if (!fp16) return;
    w.put_f64("trainer.fp16.scaler", scaler.state());
    w.put_i64("trainer.fp16.applied", {applied});
    w.put_i64("trainer.fp16.skipped", skipped);
    std::vector<double> changes;  // (step, scale) pairs, flat, so the metrics cover the whole run
    for (auto& [step, sc] : scale_changes) changes.insert(changes.end(), {(double)step, sc});
    w.put_f64("trainer.fp16.scale_changes", changes);
  };
  auto load_trainer_state = [&](const StateReader& r) {
    if (!fp16) return;
    try {
      scaler.set_state(r.f64("trainer.fp16.scaler"));
    } catch (const std::invalid_argument& e) {
      r.fail("trainer.fp16.scaler", e.what());
    }
    const std::vector<int64_t> a = r.i64("trainer.fp16.applied");
    if (a.size() != 1 || a[0] < 0) r.fail("trainer.fp16.applied", "expected one count >= 0");
    applied = a[0];
    skipped = r.i64("trainer.fp16.skipped");
    const std::vector<double> changes = r.f64("trainer.fp16.scale_changes");
    if (changes.size() % 2) r.fail("trainer.fp16.scale_changes", "expected (step, scale) pairs, got an odd count");
    scale_changes.clear();
    for (size_t i = 0; i < changes.size(); i += 2) {
      const double step = changes[i], sc = changes[i + 1];
      if (!(step >= 0 && step <= 9.0e15 && step == std::floor(step)) || !(std::isfinite(sc) && sc > 0) ||
          (!scale_changes.empty() && (int64_t)step <= scale_changes.back().first))
        r.fail("trainer.fp16.scale_changes",
               "pair " + std::to_string(i / 2) + ": expected an increasing whole step >= 0 and a finite scale > 0");
      scale_changes.push_back({(int64_t)step, sc});
    }
  };
  int64_t t0 = 0;
  if (!opt.resume_path.empty()) {
    CheckpointInfo ck = find_checkpoint(opt.resume_path);
    check_compatible(ck, spec);
    rt.wait_all();  // the strategies' initial copies
    load_checkpoint(ck, *wl, *strat, load_trainer_state);
    if (fp16 && applied + (int64_t)skipped.size() != ck.step + 1)
      throw InputError(ck.dir + "/state.safetensors: trainer.fp16.applied",
                       "applied + skipped steps differ from the checkpoint's step + 1");
    for (size_t i = 0; fp16 && i < skipped.size(); ++i)
      if (skipped[i] < 0 || skipped[i] > ck.step || (i > 0 && skipped[i] <= skipped[i - 1]))
        throw InputError(ck.dir + "/state.safetensors: trainer.fp16.skipped",
                         "entry " + std::to_string(i) + " (" + std::to_string(skipped[i]) +
                             "): expected increasing steps in [0, " + std::to_string(ck.step) + "]");
    if (fp16 && !scale_changes.empty() && scale_changes.back().first > ck.step)
      throw InputError(ck.dir + "/state.safetensors: trainer.fp16.scale_changes",
                       "a change at step " + std::to_string(scale_changes.back().first) + ", after the checkpoint's step " +
                           std::to_string(ck.step));
    t0 = ck.step + 1;
    if (!opt.quiet) out << "zenflow-run: resumed from " << ck.dir << " (step " << ck.step << ")\n";
  }

  const int64_t T = total_steps(spec, wl->epoch_size());
  // this rank's rows of one micro-batch, the global batch of one optimizer step
  const int Bl = wl->batch_size(), B = Bl * ranks * A;
  const int L = spec.runtime.lookahead;
  if (mem.steps != T) {
    mem = estimate_memory(spec, T, ranks);
    check_memory(spec, mem);
  }
  if (!opt.quiet)
    out << "zenflow-run: " << spec.name << " | " << wl->describe() << " | strategy " << strat->name()
        << (spec.strategy == "zenflow" ? " (semantics " + spec.zenflow.semantics + ")" : "") << (bf16 ? " (bf16)" : "")
        << (fp16 ? (scaler.dynamic() ? " (fp16, dynamic loss scale)" : " (fp16, static loss scale)") : "")
        << " | sched " << rt.policy() << " | workers " << rt.device_worker_count() << " device + "
        << rt.host_worker_count() << " host | " << T << " steps of " << B
        << (A > 1 ? " (" + std::to_string(A) + " micro-batches of " + std::to_string(Bl * ranks) + ")" : "") << " ("
        << per_epoch << " per epoch)\n";
  if (!opt.quiet && !spec.scheduler.type.empty()) out << "zenflow-run: " << spec.describe_lr() << "\n";
  if (!opt.quiet)
    out << "zenflow-run: memory estimate " << mem.describe() << " of " << fmt("%.1f", (double)available_memory() / (1 << 30))
        << " GiB available\n";

  // stats ring: step t writes slot t % R (micro-batch m: slot (t % R) x A + m); its read completes
  // before t+R may write it
  const int R = L + 2;
  std::vector<Tensor> stats;
  for (int i = 0; i < R * A; ++i) stats.push_back(Tensor::home({3}, "stats." + std::to_string(i), sizeof(double)));
  std::vector<StepRecord> rec(T);
  std::vector<StepRecord> micro_rec(A > 1 ? (size_t)T * (A - 1) : 0);  // micro-batches 1..A-1
  // gradient accumulation (DeepSpeed's: each micro-batch's gradient scaled by 1/A, summed in
  // micro-batch order; docs/spec.md): one device buffer per parameter
  std::vector<Tensor> grad_acc;
  if (A > 1)
    for (Param* p : wl->params()) grad_acc.push_back(Tensor::home(p->grad.shape(), p->name + ".grad_acc"));
  // the step's stats: micro-batch 0's record plus the others' (read after the step completed)
  auto step_stats = [&](int64_t s, int k) {
    double x = rec[s].stats[k];
    for (int m = 1; m < A; ++m) x += micro_rec[(size_t)s * (A - 1) + m - 1].stats[k];
    return x;
  };

  if (t0 >= T)
    throw InputError(opt.resume_path, "the checkpoint is at step " + std::to_string(t0 - 1) + ", nothing left of " +
                                          std::to_string(T) + " steps (raise train.steps)");
  std::vector<int32_t> perm, idx(Bl);
  int64_t epoch = -1;
  int64_t printed = t0;
  const double t_start = rt.now_us();
  const double cpu_start = process_cpu_seconds();
  const Runtime::TileCounts tiles_start = Runtime::tile_counts();
  // fp16: the loss scale step s ran with, and the steps skipped up to s (for the progress lines)
  std::vector<double> scale_of(T, 0.0);
  auto scale_at = [&](int64_t s) { return scale_of[s]; };
  auto skipped_through = [&](int64_t s) {
    return (int64_t)(std::upper_bound(skipped.begin(), skipped.end(), s) - skipped.begin());
  };
  // the schedule's index step s ran at: under fp16 the updates applied before it (DeepSpeed steps
  // its scheduler only on applied steps; UpdateStep::o), else s
  auto lr_index = [&](int64_t s) { return fp16 ? s - (s > 0 ? skipped_through(s - 1) : 0) : s; };
  auto progress = [&](int64_t done) {  // steps [0, done) complete
    const int every = spec.log.every;
    while (every > 0 && printed + every <= done) {
      int64_t a = printed, b = printed + every;
      double loss = 0, busy = 0;
      for (int64_t s = a; s < b; ++s) {
        loss += step_stats(s, 0) / std::max(1.0, step_stats(s, 2));
        busy += rt.tracker().step_agg(s).busy_us;
      }
      double end_b = rt.tracker().step_agg(b - 1).last_end_us;
      double end_a = a > t0 ? rt.tracker().step_agg(a - 1).last_end_us : t_start;
      double wall = std::max(1.0, end_b - end_a);
      double stall = 1.0 - busy / (wall * rt.device_worker_count());
      double elapsed = (rt.now_us() - t_start) * 1e-6;
      double eta = elapsed / (double)(b - t0) * (double)(T - b);
      if (!opt.quiet)
        out << "step " << b << "/" << T << " | loss " << fmt("%.4f", loss / every) << " | "
            << fmt("%.2f", wall / every * 1e-3) << " ms/step | stall " << fmt("%.1f", 100 * std::max(0.0, stall))
            << "% | " << (spec.scheduler.type.empty() ? "" : "lr " + fmt("%.3g", spec.lr_at(lr_index(b - 1))) + " | ")
            << (strat->grad_clip() ? "gnorm " + fmt("%.4g", strat->grad_clip()->norm_through(b - 1)) + " | " : "")
            << (fp16 ? "scale " + fmt("%.0f", scale_at(b - 1)) + ", skipped " + std::to_string(skipped_through(b - 1)) + " | "
                     : "")
            << fmt("%.1f", elapsed) << " s, eta " << fmt("%.0f", eta) << " s\n"
            << std::flush;
      printed = b;
    }
  };

  for (int64_t t = t0; t < T; ++t) {
    const int64_t e = t / per_epoch;
    if (e != epoch) {
      epoch = e;
      perm = permutation(wl->epoch_size(), spec.train.seed * 1000003ull + (uint64_t)e);
    }
    const double S = scaler.scale();  // fp16: this step's loss scale (every micro-batch's)
    if (fp16) wl->set_loss_scale((float)S);
    scale_of[t] = fp16 ? S : 1.0;
    // the micro-batches first: the fp16 overflow check below follows the last one (it reads the
    // accumulated gradient)
    for (int mb = 0; mb < A; ++mb) {
      // micro-batch mb of the step: rows [mb R Bl, (mb + 1) R Bl), rank r: its r-th Bl of them
      const int64_t base = (t % per_epoch) * B + ((int64_t)mb * ranks + rank) * Bl;
      for (int i = 0; i < Bl; ++i) idx[i] = perm[base + i];
      const Tensor& st = stats[(t % R) * A + mb];
      wl->submit_step(rt, t, idx, st);
      double* dst = mb == 0 ? rec[t].stats : micro_rec[(size_t)t * (A - 1) + mb - 1].stats;
      rt.read_async(st, dst, 3 * sizeof(double), t);
      if (A > 1) {
        const std::vector<Param*> ps = wl->params();
        for (size_t i = 0; i < ps.size(); ++i) {
          const SubmitOptions o = rt.device(t);
          const std::string& n = ps[i]->name;
          if (mb == 0) insert_zero(o.named("micro.zero." + n), grad_acc[i]);
          insert_accumulate(o.named("micro.accumulate." + n), grad_acc[i], whole(grad_acc[i]), ps[i]->grad,
                            whole(ps[i]->grad), 1.0f / (float)A);
          if (mb == A - 1)
            insert_copy(o.named("micro.result." + n), grad_acc[i], whole(grad_acc[i]), ps[i]->grad, whole(ps[i]->grad));
        }
      }
    }
    UpdateStep u{t, fp16 ? applied : t, 1.0f};
    if (comm) {  // the mean of the ranks' local-batch mean gradients: the global batch's
      strat->before_gradient_allreduce(u, *comm);
      strat->submit_gradient_collectives(u, *comm);  // all-reduce; ZeRO stage 2: reduce-scatter
    }
    if (opt.after_backward) opt.after_backward(rt, *wl, t);
    bool skip = false;
    if (bf16)
      for (Param* p : wl->params()) insert_round_bf16(rt.device(t).named("bf16.grad." + p->name), p->grad);
    if (fp16) {
      // The overflow check: the rounding to fp16 raises the flag on an inf or NaN in any gradient
      // of the step (after the all-reduce, so on every rank alike: an inf on one rank is an inf or
      // NaN in the sum). The builder waits for it here, as DeepSpeed reads its overflow flag on the
      // host every step: the step's update depends on it.
      for (Param* p : wl->params()) insert_round_fp16(rt.device(t).named("fp16.grad." + p->name), p->grad, overflow);
      // ZeRO stage 2: a rank's reduce-scattered gradients are its partition's sums and the rest
      // its local values; an inf or NaN in any rank's local gradient is one in its owner's sum, so
      // the OR over the ranks of their flags is the global gradient's (every rank agrees)
      if (comm && strat->zero_stage() == 2) insert_allreduce_flag(rt.host(t).named("fp16.overflow.allreduce"), overflow, *comm);
      // The tracker's wait first: a blocking starpu_data_acquire issued while the step's tasks
      // still run made every device task of gpt-kjv.json 4-7x slower on the 2-core machine (median
      // step 549-574 ms against 82 ms); after the wait the acquire finds the flag written (and on a
      // GPU only copies the word back).
      rt.tracker().wait_device_through(t);
      overflow.acquire_write();
      skip = overflow.as<uint32_t>()[0] != 0;
      overflow.as<uint32_t>()[0] = 0;
      overflow.release();
      status.rethrow_if_failed();
      scaler.update(skip);  // DeepSpeed's update_scale (throws at min_loss_scale)
      if (scaler.scale() != S) scale_changes.push_back({t, scaler.scale()});
      // unscale by the scale this step ran with (DeepSpeed divides by the scale update_scale has
      // just changed: docs/spec.md)
      u.grad_scale = (float)(1.0 / S);
      if (skip) skipped.push_back(t);
    }
    if (!skip) {
      strat->submit_update(u);
      round_params(t);
      ++applied;
    }
    if (t - t0 >= L) {
      rt.tracker().wait_device_through(t - L);
      status.rethrow_if_failed();
      progress(t - L + 1);
    }
    if (!opt_in.checkpoint_dir.empty() &&
        (t == T - 1 || (opt.checkpoint_every > 0 && (t + 1) % opt.checkpoint_every == 0))) {
      if (ckdir) {
        rt.wait_all();  // the state after step t, in-flight host updates included
        std::string d = ckdir->write(t, spec, *wl, *strat, save_trainer_state);
        if (!opt.quiet) out << "checkpoint: " << d << "\n" << std::flush;
      } else if (strat->zero_stage() >= 1) {
        // ZeRO stage >= 1: rank 0 gathers the partitioned host state (graphs/train/checkpoint.hpp);
        // the other ranks send theirs, in the same order (StateWriter keeps nothing here)
        rt.wait_all();
        StateWriter w;
        strat->save_state(w);
      }
    }
  }
  strat->flush(UpdateStep{T - 1, fp16 ? applied - 1 : T - 1, 1.0f});
  round_params(T - 1);
  rt.wait_all();
  progress(T);
  const double train_wall_s = (rt.now_us() - t_start) * 1e-6;
  const double train_cpu_s = process_cpu_seconds() - cpu_start;
  const Runtime::TileCounts tiles_end = Runtime::tile_counts();
  static_assert(sizeof(StepRecord) == 3 * sizeof(double));
  for (int64_t s = t0; s < T && A > 1; ++s)  // the step's whole batch in rec
    for (int k = 0; k < 3; ++k) rec[s].stats[k] = step_stats(s, k);
  if (comm && comm->allreduce_sum(rec[0].stats, 3 * rec.size()) != 0)  // global-batch losses
    throw Error("MPI_Allreduce of the step losses failed");

  // ---- metrics over the measured steps [W, T)
  const int64_t W = std::min<int64_t>(spec.log.warmup_steps, T - t0 - 1);
  std::vector<double> step_s;
  double busy = 0;
  for (int64_t s = t0 + W; s < T; ++s) {
    auto a = rt.tracker().step_agg(s);
    double prev = s > t0 ? rt.tracker().step_agg(s - 1).last_end_us : rt.tracker().step_agg(t0).first_start_us;
    step_s.push_back((a.last_end_us - prev) * 1e-6);
    busy += a.busy_us * 1e-6;
  }
  const double wall = std::accumulate(step_s.begin(), step_s.end(), 0.0);
  const int64_t M = (int64_t)step_s.size();
  const double stall = wall > 0 ? 1.0 - busy / (wall * rt.device_worker_count()) : 0.0;
  // host AdamW time of this rank per measured step (the host optimizer's tasks, adam.host.*)
  double host_adam_us = 0;
  for (const TaskRecord& r : rt.tracker().records())
    if (r.step >= t0 + W && r.step < T && Strategy::host_adam_task(r))
      host_adam_us += r.end_us - r.start_us;
  if (M) host_adam_us /= (double)M;
  double train_loss = 0;
  const int64_t tail = std::min<int64_t>(T - t0, 50);
  for (int64_t s = T - tail; s < T; ++s) train_loss += rec[s].stats[0] / std::max(1.0, rec[s].stats[2]);
  // (micro-batch records were folded into rec above)
  train_loss /= (double)tail;

  EvalResult ev;
  if (opt.evaluate) ev = wl->evaluate(rt);

  json m;
  m["strategy"] = strat->name();
  m["precision"] = spec.precision;
  if (fp16) {  // docs/metrics.md
    json changes = json::array();
    for (auto& [step, sc] : scale_changes) changes.push_back({step, sc});
    m["fp16"] = {{"dynamic", scaler.dynamic()},
                 {"loss_scale", scaler.scale()},
                 {"skipped_steps", (int64_t)skipped.size()},
                 {"skipped_at", skipped},
                 {"applied_steps", applied},
                 {"scale_changes", changes}};
  }
  m["sched"] = rt.policy();
  m["steps"] = T;
  if (t0 > 0) m["resumed_at_step"] = t0;
  m["warmup_steps_excluded"] = W;
  m["measured_steps"] = M;
  m["batch_size"] = B;
  if (A > 1) m["gradient_accumulation"] = {{"steps", A}, {"micro_batch_size", Bl * ranks}};
  m["model"] = wl->describe();
  m["workers"] = {{"device", rt.device_worker_count()}, {"host", rt.host_worker_count()}};
  m["step_time_s"] = {{"mean", M ? wall / (double)M : 0.0}, {"median", percentile(step_s, 0.5)}, {"p90", percentile(step_s, 0.9)}};
  m["device_busy_s_per_step"] = M ? busy / (double)M : 0.0;
  m["stall_fraction"] = std::max(0.0, stall);
  m["bytes"] = {{"device_to_host", (double)strat->bytes_d2h() / (double)(T - t0)},
                {"host_to_device", (double)strat->bytes_h2d() / (double)(T - t0)}};
  // host-to-device prefetches started the moment a host result was written (CUDA workers only)
  m["prefetches"] = rt.prefetches();
  m["final"] = {{"train_loss", train_loss}};
  if (opt.evaluate) {
    m["final"]["eval_loss"] = ev.loss;
    m["final"]["eval_accuracy"] = ev.accuracy;
    m["final"]["eval_examples"] = ev.count;
  }
  m["throughput"] = {{"samples_per_s", wall > 0 ? (double)(M * B) / wall : 0.0}};
  m["train_wall_s"] = train_wall_s;
  // CPU time of the whole process (every thread: workers, OpenBLAS, the submitting thread) over
  // the training loop, and per second of its wall time: the cores kept busy (docs/metrics.md)
  m["cpu_seconds"] = train_cpu_s;
  m["cpu_over_wall"] = train_wall_s > 0 ? train_cpu_s / train_wall_s : 0.0;
  m["device_tiles"] = {{"tiles", tiles_end.tiles - tiles_start.tiles}, {"by_helpers", tiles_end.helped - tiles_start.helped}};
  strat->add_metrics(m, T);
  if (const GradClip* c = strat->grad_clip()) m["gradient_clipping"] = c->metrics();
  m["host_state_bytes"] = strat->host_state_bytes();
  m["host_adam_s_per_step"] = host_adam_us * 1e-6;
  if (comm) m["data_parallel"] = data_parallel_metrics(*comm, *wl, *strat, T - t0, host_adam_us);

  if (!opt.trace_path.empty() || !opt.trace_csv_path.empty()) {
    auto recs = rt.tracker().records();
    if (opt.trace_from >= 0)
      recs.erase(std::remove_if(recs.begin(), recs.end(), [&](const TaskRecord& r) { return r.step < opt.trace_from; }),
                 recs.end());
    if (!opt.trace_csv_path.empty()) write_task_csv(opt.trace_csv_path, recs);
    if (!opt.trace_path.empty()) {
      std::vector<TraceWorker> workers;
      for (int w : rt.device_workers()) workers.push_back({w, "device " + rt.worker_name(w), Side::Device});
      for (int w : rt.host_workers()) workers.push_back({w, "host " + rt.worker_name(w), Side::Host});
      std::vector<TraceEvent> ev = strat->trace_events(recs);
      if (opt.trace_from >= 0 && !recs.empty()) {  // events of the kept window only
        double first = recs.front().start_us;
        for (auto& r : recs) first = std::min(first, r.start_us);
        ev.erase(std::remove_if(ev.begin(), ev.end(), [&](const TraceEvent& e) { return e.time_us < first; }), ev.end());
      }
      for (int64_t s = std::max(t0, opt.trace_from); s < T; ++s) {
        auto a = rt.tracker().step_agg(s);
        if (a.tasks) ev.push_back({a.last_end_us, -1, "step", "end of step " + std::to_string(s)});
      }
      write_paje(opt.trace_path, recs, workers, std::move(ev));
    }
  }
  if (!opt.save_path.empty()) save_weights(*wl, opt.save_path, wl->describe());
  if (opt.inspect) opt.inspect(rt, *wl);
  m["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  m["spec"] = spec.to_json();
  if (!opt.metrics_path.empty()) {
    std::string s = m.dump(2) + "\n";
    write_file_atomic(opt.metrics_path, s.data(), s.size());
  }
  if (!opt.quiet) {
    auto row = [&](const std::string& k, const std::string& v) {
      char b[128];
      std::snprintf(b, sizeof b, "  %-28s %s\n", k.c_str(), v.c_str());
      out << b;
    };
    out << "summary (" << M << " measured steps, " << W << " warm-up steps excluded)\n";
    row("strategy / sched", std::string(strat->name()) + " / " + rt.policy());
    row("step time median / p90", fmt("%.2f", percentile(step_s, 0.5) * 1e3) + " / " + fmt("%.2f", percentile(step_s, 0.9) * 1e3) + " ms");
    row("device busy per step", fmt("%.2f", M ? busy / (double)M * 1e3 : 0.0) + " ms");
    row("stall fraction", fmt("%.3f", std::max(0.0, stall)));
    row("bytes per step d2h / h2d", fmt("%.0f", m["bytes"]["device_to_host"].get<double>()) + " / " +
                                        fmt("%.0f", m["bytes"]["host_to_device"].get<double>()));
    if (comm) {
      const json& dp = m["data_parallel"];
      row("data parallel", std::to_string(ranks) + " ranks, replicas " +
                               (dp["replicas_identical"].get<bool>() ? "identical" : "DIFFER"));
      row("all-reduce bytes per step", fmt("%.0f", dp["allreduce_bytes_per_step"]["gradients"].get<double>()) +
                                           " gradients / " +
                                           fmt("%.0f", dp["allreduce_bytes_per_step"]["importance"].get<double>()) +
                                           " importance");
      if (strat->zero_stage() >= 1)
        row("ZeRO stage " + std::to_string(strat->zero_stage()),
            fmt("%.0f", dp["reduce_scatter_bytes_per_step"].get<double>()) + " reduce-scatter / " +
                fmt("%.0f", dp["allgather_bytes_per_step"].get<double>()) + " all-gather bytes per step, host state " +
                fmt("%.0f", (double)strat->host_state_bytes()) + " bytes on rank 0");
    }
    row("throughput", fmt("%.0f", wall > 0 ? (double)(M * B) / wall : 0.0) + " samples/s");
    if (const auto z = strat->report().zenflow)
      row("host updates / staleness", std::to_string(z->host_updates) + " / max " + fmt("%.0f", z->staleness_max) +
                                          ", mean " + fmt("%.1f", z->staleness_mean) + " steps");
    if (m.contains("gradient_clipping")) {
      const json& c = m["gradient_clipping"];
      row("gradient clipping", fmt("%g", c["max_norm"].get<double>()) + ": " + std::to_string(c["clipped_steps"].get<int64_t>()) +
                                   " of " + std::to_string(c["clip_points"].get<int64_t>()) + " clipped, norm mean " +
                                   fmt("%.4g", c["norm"]["mean"].get<double>()) + ", last " +
                                   fmt("%.4g", c["norm"]["last"].get<double>()));
    }
    if (fp16)
      row("fp16 loss scale / skipped", fmt("%.0f", scaler.scale()) + " / " + std::to_string(skipped.size()) + " steps");
    row("train loss (last steps)", fmt("%.4f", train_loss));
    if (opt.evaluate) {
      row("eval loss", fmt("%.4f", ev.loss));
      if (ev.count > 0)
        row("eval accuracy", fmt("%.2f", 100 * ev.accuracy) + " % of " + std::to_string(ev.count));
      else
        row("eval accuracy", "no evaluation rows");
    }
    row("wall time", fmt("%.1f", m["wall_s"].get<double>()) + " s");
    row("CPU time / wall (training)", fmt("%.2f", train_cpu_s) + " s / " + fmt("%.2f", m["cpu_over_wall"].get<double>()) +
                                          " cores");
    if (tiles_end.tiles > tiles_start.tiles)
      row("device tiles / by helpers", std::to_string(tiles_end.tiles - tiles_start.tiles) + " / " +
                                           std::to_string(tiles_end.helped - tiles_start.helped));
    if (!opt.metrics_path.empty()) row("metrics", opt.metrics_path);
    if (!opt.save_path.empty()) row("weights", opt.save_path);
    if (!opt.trace_path.empty()) row("trace", opt.trace_path);
  }
  return m;
}

}  // namespace zf
