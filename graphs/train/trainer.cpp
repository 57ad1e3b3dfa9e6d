// The training driver (graphs/train/trainer.hpp): setup, --resume, then the loop that submits one
// step graph per step (graphs/train/step_graph.hpp) at most runtime.lookahead steps ahead of the
// oldest unfinished one, checkpoints, and the reports (graphs/train/report.hpp).
#include "graphs/train/trainer.hpp"

#include <chrono>
#include <iostream>
#include <tuple>

#include "graphs/schema/machine_check.hpp"
#include "graphs/strategies/strategy.hpp"
#include "graphs/train/checkpoint.hpp"
#include "graphs/train/memory_estimate.hpp"
#include "graphs/train/precision.hpp"
#include "graphs/train/report.hpp"
#include "graphs/train/grad_stream.hpp"
#include "graphs/train/step_graph.hpp"
#include "models/hf/hf_model.hpp"
#include "models/formats/weights.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/comm.hpp"
#include "runtime/runtime.hpp"
#include "runtime/simulation.hpp"

namespace zf {

using json = nlohmann::json;

namespace {

// ---- data parallelism (docs/data-parallel.md). The replicas are identical: rank 0 alone reports
// and writes files, the others train silently.
RunOptions rank_options(const RunOptions& o) {
  RunOptions r = o;
  if (o.comm && o.comm->rank() != 0) {
    r.quiet = true;
    r.evaluate = false;
    r.metrics_path.clear();
    r.save_path.clear();
    r.save_hf_dir.clear();
    r.checkpoint_dir.clear();
    r.trace_path.clear();
    r.trace_csv_path.clear();
  }
  return r;
}

// ---- simulation (ZF_SIMGRID, docs/simulation.md): no kernel runs and no value is real. What reads
// values is refused (exit 2, naming the option) where the user asked for it, skipped otherwise
// (evaluation, losses).
RunOptions simulation_options(const RunOptions& o) {
  if (!kSimulated) return o;
  const char* why = "a simulated run computes no values (docs/simulation.md)";
  for (auto [opt, set] : {std::pair{"--save", !o.save_path.empty()}, {"--init", !o.init_path.empty()},
                          {"--checkpoint-dir", !o.checkpoint_dir.empty()}, {"--resume", !o.resume_path.empty()}})
    if (set) throw InputError(opt, std::string("not available in simulation: ") + why);
  if (o.comm && o.comm->size() > 1 && !o.comm->simulated())
    throw InputError("mpirun", "one simulated process only: a simulated run is one rank of R, with R given by "
                               "tools/zf simulate --ranks R (docs/simulation.md)");
  RunOptions r = o;
  r.evaluate = false;
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

// Everything one run holds, in the order it is built; destroyed in reverse (the StarPU data before
// the runtime, the checkpoint directory's lock last).
struct Run {
  Run(const Spec& s, const RunOptions& o)
      : spec(s),
        opt(o),
        comm(o.comm && o.comm->size() > 1 ? o.comm : nullptr),
        ranks(comm ? comm->size() : 1),
        rank(comm ? comm->rank() : 0),
        A(s.train.gradient_accumulation_steps),
        local(rank_spec(s, ranks)),
        out(o.out ? *o.out : std::cout) {}
  const Spec& spec;
  const RunOptions& opt;  // this rank's (rank_options)
  Comm* const comm;       // null: one process
  const int ranks, rank, A;
  const Spec local;  // the micro-batch of one rank
  std::ostream& out;
  MemoryEstimate mem;
  int64_t available_at_start = -1;  // MemAvailable before the run allocated anything (the header's)
  std::unique_ptr<CheckpointDir> ckdir;
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<Workload> wl;
  std::unique_ptr<Precision> prec;
  int64_t per_epoch = 0;
  std::unique_ptr<Strategy> strat;
  int64_t t0 = 0, T = 0;  // the first step to run (after --resume), the run's steps
  std::vector<EvalPoint> evals;  // train.eval_every's
};

// train.eval_every: after step t (not the last: the final evaluation follows), the model as it is
// evaluated with every task finished, printed and kept for the metrics.
void eval_after(Run& r, int64_t t) {
  const int64_t every = r.spec.train.eval_every;
  if (every <= 0 || !r.opt.evaluate || (t + 1) % every != 0 || t == r.T - 1) return;
  r.rt->wait_all();
  r.rt->tracker().status().rethrow_if_failed();
  r.strat->unshard_params();  // ZeRO stage 3: the weights whole
  r.evals.push_back({t + 1, r.wl->evaluate(*r.rt)});
  r.strat->shard_params();
  const EvalResult& ev = r.evals.back().ev;
  if (!r.opt.quiet)
    r.out << "eval at step " << t + 1 << "/" << r.T << ": loss " << fmt("%.4f", ev.loss) << ", accuracy "
          << fmt("%.2f", 100 * ev.accuracy) << " % of " << ev.count << "\n" << std::flush;
}

std::unique_ptr<Runtime> start_runtime(const Run& r) {
  const Spec& spec = r.spec;
  RuntimeConfig rc;
  rc.sched = spec.runtime.sched;
  rc.cuda_workers = spec.runtime.cuda_workers;
  const int gpus = spec.runtime.cuda_workers >= 0 ? Runtime::cuda_devices() : 0;
  if (r.comm && gpus > 0) rc.cuda_device = r.rank % gpus;  // one GPU per rank
  // the CUDA workers the runtime will start (Runtime::check_config): the CPU workers are the host's
  const int ncuda = gpus == 0                         ? 0
                    : rc.cuda_device >= 0               ? 1
                    : spec.runtime.cuda_workers > 0     ? spec.runtime.cuda_workers
                                                        : gpus;
  rc.local_ranks = r.comm ? r.comm->local_size() : 1;
  std::tie(rc.device_workers, rc.host_workers) = worker_split(spec, ncuda, rc.local_ranks);
  rc.crossings_on_host = spec.runtime.crossings == "host";
  rc.priorities = spec.runtime.priorities;
  auto rt = std::make_unique<Runtime>(rc);
  rt->set_matmul_keep_bf16_operands(r.opt.matmul_keep_bf16_operands);
  if (rc.crossings_on_host && rt->device_is_cuda())
    throw InputError(spec.source + ": runtime.crossings",
                     "\"host\" emulates a copy engine for CPU device workers; with CUDA workers the crossings "
                     "are StarPU's transfers (use \"device\", or runtime.cuda_workers = -1)");
  if (r.comm && rt->device_is_cuda()) r.comm->init_nccl(rc.cuda_device);
  return rt;
}

// The memory check, the checkpoint directory, the runtime, the workload (--init), the precision
// state and the strategy.
void setup(Run& r) {
  const Spec& spec = r.spec;
  const RunOptions& opt = r.opt;
  if (spec.train.eval_every > 0 && r.comm)
    throw InputError(spec.where("train.eval_every"), "evaluation during the run needs one process (under mpirun: 0, "
                                                     "the final evaluation only)");
  // the memory the run will need, checked before anything is allocated (memory_estimate.hpp); the
  // per-step records once the step count is known (train.epochs needs the data's size)
  r.mem = estimate_memory(spec, spec.train.steps > 0 ? spec.train.steps : -1, r.ranks);
  r.available_at_start = available_memory();
  check_memory(spec, r.mem);
  check_device_memory(spec, r.mem);
  // the checkpoint directory, locked for the whole run before anything is loaded
  // (graphs/train/checkpoint.hpp: one writer, stale temporaries, another run's checkpoints)
  if (!opt.checkpoint_dir.empty())
    r.ckdir = std::make_unique<CheckpointDir>(opt.checkpoint_dir, spec, opt.checkpoint_overwrite);
  r.rt = start_runtime(r);
  r.wl = make_workload(r.local, &r.rt->tracker().status());
  if ((r.comm || r.A > 1) && spec.train.batch_size > r.wl->epoch_size())
    throw InputError(spec.where("train.batch_size"), std::to_string(spec.train.batch_size) + " exceeds the " +
                                                             std::to_string(r.wl->epoch_size()) + " training units");
  if (!opt.init_path.empty() && !opt.resume_path.empty())
    throw InputError("--init", "cannot be combined with --resume (the checkpoint holds the weights)");
  if (!opt.init_path.empty()) load_weights(*r.wl, opt.init_path);
  r.prec = std::make_unique<Precision>(spec, *r.rt, *r.wl);
  if (!opt.bf16_activations) r.rt->set_activations_bf16(false);
  if (!opt.bf16_activations || !opt.bf16_activation_grads) r.rt->set_activation_grads_bf16(false);
  r.prec->store_params(opt.half_storage, r.ranks);  // the masters start from the bf16 values
  r.per_epoch = steps_per_epoch(spec, r.wl->epoch_size());
  r.strat = make_strategy(spec, *r.rt, r.wl->params(), r.per_epoch, r.comm);
}

// --resume: the weights, the strategy's and the precision's state; the first step to run.
void resume(Run& r) {
  if (r.opt.resume_path.empty()) return;
  CheckpointInfo ck = find_checkpoint(r.opt.resume_path);
  check_compatible(ck, r.spec);
  r.rt->wait_all();  // the strategies' initial copies
  load_checkpoint(ck, *r.wl, *r.strat, [&](const StateReader& s) { r.prec->load_state(s); });
  r.prec->check_resumed(ck.dir, ck.step);
  r.t0 = ck.step + 1;
  if (!r.opt.quiet) r.out << "zenflow-run: resumed from " << ck.dir << " (step " << ck.step << ")\n";
}

// The run's step count (the memory check again with it) and the run header.
void plan(Run& r) {
  const Spec& spec = r.spec;
  r.T = total_steps(spec, r.wl->epoch_size());
  // this rank's rows of one micro-batch, the global batch of one optimizer step
  const int Bl = r.wl->batch_size(), B = Bl * r.ranks * r.A;
  if (r.mem.steps != r.T) {
    r.mem = estimate_memory(spec, r.T, r.ranks);
    check_memory(spec, r.mem);
  }
  if (r.opt.quiet) return;
  r.out << "zenflow-run: " << spec.name << " | " << r.wl->describe() << " | strategy " << r.strat->describe()
        << r.prec->describe()
        << " | sched " << r.rt->policy() << " | workers " << r.rt->device_worker_count() << " device + "
        << r.rt->host_worker_count() << " host | " << r.T << " steps of " << B
        << (r.A > 1 ? " (" + std::to_string(r.A) + " micro-batches of " + std::to_string(Bl * r.ranks) + ")" : "")
        << " (" << r.per_epoch << " per epoch)\n";
  if (!spec.scheduler.type.empty()) r.out << "zenflow-run: " << spec.describe_lr() << "\n";
  r.out << "zenflow-run: memory estimate " << r.mem.describe() << " of "
        << fmt("%.1f", (double)r.available_at_start / (1 << 30)) << " GiB available at the start\n";
}

// After step t: the checkpoint, every checkpoint_every steps and after the last one. Rank 0
// writes it; under ZeRO stage >= 1 the other ranks send their partitions of the host state to it
// (graphs/train/checkpoint.hpp), in the same order (their StateWriter keeps nothing).
void checkpoint_after(Run& r, int64_t t, bool any_rank_writes) {
  if (!any_rank_writes || !(t == r.T - 1 || (r.opt.checkpoint_every > 0 && (t + 1) % r.opt.checkpoint_every == 0)))
    return;
  r.strat->unshard_params();  // ZeRO stage 3: every rank, the weights whole for the file
  if (r.ckdir) {
    r.rt->wait_all();  // the state after step t, in-flight host updates included
    std::string d = r.ckdir->write(t, r.spec, *r.wl, *r.strat, [&](StateWriter& w) { r.prec->save_state(w); });
    if (!r.opt.quiet) r.out << "checkpoint: " << d << "\n" << std::flush;
  } else if (r.strat->zero_stage() >= 1) {
    r.rt->wait_all();
    StateWriter w;
    r.strat->save_state(w);
  }
  r.strat->shard_params();
}

// After the loop: the measured steps, evaluation, metrics, traces, weights, the summary.
json finish(Run& r, const StepGraph& graph, const LoopClock& clock, std::chrono::steady_clock::time_point wall0) {
  const RunOptions& opt = r.opt;
  Runtime& rt = *r.rt;
  const StepTimes times = measure_steps(rt, r.t0, r.T, r.spec.log.warmup_steps);
  RunReport rep{r.spec, opt, rt, *r.wl, *r.strat, *r.prec, r.comm, r.t0, r.T, r.A, graph.batch_rows(),
                graph.micro_batch_rows(), r.ranks, clock, times,
                // host AdamW time of this rank per measured step (the host optimizer's tasks)
                host_adam_us_per_step(rt.tracker().records(), r.t0 + times.W, r.T, times.M),
                last_steps_loss(graph, r.t0, r.T), EvalResult{}, {}, {}};
  if (!kSimulated) rep.losses = step_losses(graph, r.t0, r.T);
  rep.evals = r.evals;
  if (opt.evaluate) rep.ev = r.wl->evaluate(rt);
  json m = metrics_json(rep);
  if (const GradStream* gs = graph.grad_stream())  // docs/metrics.md
    m["gradient_stream"] = {{"params", gs->streamed_params()},     {"shared_params", gs->shared_params()},
                            {"slots", gs->slots()},                  {"buffer_bytes", gs->peak_bytes()},
                            {"reduce_bucket_size", r.spec.reduce_bucket_size}};
  else if (!graph.stream_off().empty())
    m["gradient_stream"] = {{"off", graph.stream_off()}};
  write_traces(rep);
  if (!opt.save_path.empty()) save_weights(*r.wl, opt.save_path, r.wl->describe());
  if (!opt.save_hf_dir.empty()) save_hf(*r.wl, opt.save_hf_dir, opt.save_dtype);
  if (opt.inspect) opt.inspect(rt, *r.wl);
  m["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  m["spec"] = r.spec.to_json();
  if (!opt.metrics_path.empty()) {
    std::string s = m.dump(2) + "\n";
    write_file_atomic(opt.metrics_path, s.data(), s.size());
  }
  if (!opt.quiet) print_summary(rep, m, r.out);
  return m;
}

}  // namespace

json run_evaluation(const Spec& spec, const RunOptions& opt) {
  if (kSimulated) throw InputError("eval", "not available in simulation: a simulated run computes no values");
  if (opt.comm && opt.comm->size() > 1) throw InputError("eval", "runs as one process (not under mpirun)");
  Run r(spec, opt);
  const auto wall0 = std::chrono::steady_clock::now();
  setup(r);
  resume(r);
  r.rt->wait_all();
  if (!opt.quiet) r.out << "zenflow-run eval: " << spec.name << " | " << r.wl->describe() << "\n" << std::flush;
  const EvalResult ev = r.wl->evaluate(*r.rt);
  json m;
  m["eval"] = {{"loss", ev.loss}, {"accuracy", ev.accuracy}, {"examples", ev.count}};
  m["checkpoint_step"] = r.t0 - 1;  // -1: not from a checkpoint
  m["model"] = r.wl->describe();
  m["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  m["spec"] = spec.to_json();
  if (!opt.metrics_path.empty()) {
    const std::string s = m.dump(2) + "\n";
    write_file_atomic(opt.metrics_path, s.data(), s.size());
  }
  if (!opt.quiet)
    r.out << "zenflow-run eval: loss " << fmt("%.4f", ev.loss) << " | accuracy "
          << (ev.count ? fmt("%.2f", 100 * ev.accuracy) + " % of " + std::to_string(ev.count)
                       : std::string("(no rows)"))
          << (r.t0 > 0 ? " | weights of checkpoint step " + std::to_string(r.t0 - 1) : std::string()) << "\n";
  return m;
}

void run_export(const Spec& spec, const RunOptions& opt) {
  if (kSimulated) throw InputError("export", "not available in simulation: a simulated run computes no values");
  if (opt.resume_path.empty() || opt.save_hf_dir.empty()) throw InputError("export", "needs --resume and --save-hf");
  Run r(spec, opt);
  setup(r);
  resume(r);
  r.strat->begin_stage3(*r.wl);
  r.T = r.t0;  // no step: the end of the run that wrote the checkpoint
  r.prec->reserve_steps(r.T);
  StepGraph graph(spec, *r.rt, *r.wl, *r.strat, *r.prec, r.comm, r.rank, r.ranks, r.T, r.per_epoch, nullptr);
  graph.submit_flush(r.T);
  r.rt->wait_all();
  r.strat->unshard_params();
  save_hf(*r.wl, opt.save_hf_dir, opt.save_dtype);
}

json run_training(const Spec& spec, const RunOptions& opt_in) {
  const RunOptions opt = rank_options(simulation_options(opt_in));
  Run r(spec, opt);
  const auto wall0 = std::chrono::steady_clock::now();
  setup(r);
  resume(r);
  r.strat->begin_stage3(*r.wl);  // ZeRO stage 3: the weights final, now this rank's shards
  plan(r);
  Runtime& rt = *r.rt;
  StepGraph graph(spec, rt, *r.wl, *r.strat, *r.prec, r.comm, r.rank, r.ranks, r.T, r.per_epoch, opt.after_backward);
  if (!opt.quiet && graph.grad_stream())
    r.out << "zenflow-run: gradients of " << graph.grad_stream()->streamed_params()
          << " parameters leave the device during the backward, in "
          << fmt("%.1f", (double)graph.grad_stream()->peak_bytes() / (1 << 20)) << " MiB of buffers ("
          << graph.grad_stream()->shared_params() << " shared by the layers " << graph.grad_stream()->slots()
          << " apart)\n";
  else if (!opt.quiet && !graph.stream_off().empty())
    r.out << "zenflow-run: gradients stay on the device for the whole step (" << graph.stream_off() << ")\n";
  if (r.t0 >= r.T)
    throw InputError(opt.resume_path, "the checkpoint is at step " + std::to_string(r.t0 - 1) + ", nothing left of " +
                                          std::to_string(r.T) + " steps (raise train.steps)");
  LoopClock clock;
  clock.start(rt);
  r.prec->reserve_steps(r.T);
  Progress progress(spec, rt, graph, *r.prec, *r.strat, r.out, opt.quiet, r.t0, r.T, clock.t_start_us);
  // the lookahead: steps are submitted at most L ahead of the oldest unfinished one
  const int L = spec.runtime.lookahead;
  for (int64_t t = r.t0; t < r.T; ++t) {
    graph.submit(t);
    if (t - r.t0 >= L) {
      rt.tracker().wait_device_through(t - L);
      rt.tracker().status().rethrow_if_failed();
      progress(t - L + 1);
    }
    checkpoint_after(r, t, !opt_in.checkpoint_dir.empty());
    eval_after(r, t);
  }
  graph.submit_flush(r.T);
  rt.wait_all();
  r.strat->unshard_params();  // ZeRO stage 3: the weights whole for the reports, evaluation, --save
  progress(r.T);
  clock.stop(rt);
  graph.gather_records(r.t0, r.T, r.comm);
  return finish(r, graph, clock, wall0);
}

}  // namespace zf
