// zenflow-run: train a model from a graph spec. Exit codes: 0 ok, 2 bad input (spec, data
// file, weights file, command line), 1 engine failure, 77 no device for a codelet.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include "graphs/schema/machine_check.hpp"
#include "graphs/schema/spec.hpp"
#include "graphs/strategies/registry.hpp"
#include "graphs/train/memory_estimate.hpp"
#include "graphs/train/trainer.hpp"
#include "models/hf/save.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "runtime/runtime.hpp"
#include "runtime/simulation.hpp"
#include "tools/export_command.hpp"
#include "tools/finetune_command.hpp"
#include "tools/cli_checks.hpp"
#include "tools/generate_command.hpp"
#include "tools/tokenize_command.hpp"
#ifdef ZF_SIMGRID
// Simulation (docs/simulation.md): starpu.h renames main to starpu_main; StarPU's own main starts
// SimGrid and runs this program as one of its actors (without it, StarPU attaches this thread and
// runs about 20x slower).
#include <starpu.h>
#endif

// Outputs that cannot be written are bad input: found before the run, not after it (an output
// written at the end would otherwise lose the whole run). Files (--metrics, --save, --trace,
// --trace-csv): the directory must exist and be writable, the name must not be a directory or
// another non-regular file (an atomic write would rename over it). --checkpoint-dir: created if
// missing, must be a writable directory.
namespace {
namespace fs = std::filesystem;

void check_writable(const std::string& option, const std::string& path, const fs::path& dir) {
  // create and remove a file: catches read-only file systems and permissions, for root too
  const fs::path probe = dir / (".zf-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw zf::InputError(option + " " + path, "directory " + dir.string() + " is not writable (" +
                                                  std::strerror(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_output_file(const std::string& option, const std::string& path) {
  if (path.empty()) return;
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  const fs::file_status ds = fs::status(dir, ec);
  if (ec && !fs::exists(ds))
    throw zf::InputError(option + " " + path, "directory " + dir.string() + " does not exist");
  if (ec) throw zf::InputError(option + " " + path, "cannot access directory " + dir.string() + " (" + ec.message() + ")");
  if (!fs::is_directory(ds)) throw zf::InputError(option + " " + path, dir.string() + " is not a directory");
  const fs::file_status ps = fs::status(path, ec);
  if (fs::is_directory(ps)) throw zf::InputError(option + " " + path, "is a directory, expected a file name");
  if (fs::exists(ps) && !fs::is_regular_file(ps))
    throw zf::InputError(option + " " + path, "exists and is not a regular file (the output replaces it)");
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw zf::InputError(option + " " + path, "cannot access (" + ec.message() + ")");
  check_writable(option, path, dir);
}

void check_output_dir(const std::string& option, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    throw zf::InputError(option + " " + path, "exists and is not a directory");
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw zf::InputError(option + " " + path, "cannot access (" + ec.message() + ")");
  if (!fs::exists(st) && !fs::create_directories(path, ec) && ec)
    throw zf::InputError(option + " " + path, "cannot create the directory (" + ec.message() + ")");
  check_writable(option, path, path);
}
}  // namespace

namespace {
// zenflow-run SPEC, zenflow-run finetune (the spec from --model, --data, ...), zenflow-run eval.
enum class Mode { spec, finetune, eval };

// zenflow-run's command line, as parsed.
struct CliArgs {
  Mode mode = Mode::spec;
  zf::tools::FinetuneArgs ft;  // finetune, eval without a spec file
  std::string spec_path;
  std::vector<std::string> sets;
  std::string strategy, sched, metrics, save, init, deepspeed, ckpt_dir, resume, trace, trace_csv;
  std::string save_hf, save_dtype;
  int64_t ckpt_every = 0, trace_from = -1;
  int64_t steps = -1;
  bool quiet = false, list_policies = false, print_spec = false, ckpt_overwrite = false, estimate_memory = false;
  int estimate_ranks = 0;  // --ranks (0: the run's ranks)
};

// --save-hf DIR (and --save-dtype) before any training: a model.type hf run, a new or empty
// directory, a known dtype (hf::save_dir checks the directory again when it writes).
void check_save_hf(const CliArgs& a, const zf::Spec& spec) {
  if (a.save_hf.empty()) {
    if (!a.save_dtype.empty()) throw zf::InputError("--save-dtype", "needs --save-hf");
    return;
  }
  if (spec.model.type != "hf")
    throw zf::InputError("--save-hf", "writes a Hugging Face model: needs model.type hf (" + spec.source +
                                          " has model.type " + spec.model.type + ")");
  if (!a.save_dtype.empty()) zf::hf::save_dtype(a.save_dtype, "--save-dtype");
  zf::tools::check_output_hf_dir("--save-hf", a.save_hf);
}

void add_options(CLI::App& app, CliArgs& a) {
  app.add_option("spec", a.spec_path, "graph spec (JSON), e.g. graphs/specs/mlp-fashion.json");
  app.add_option("--set", a.sets, "override a spec field: --set train.batch_size=256 (repeatable; "
                                "the value is JSON, or a string)");
  app.add_option("--steps", a.steps, "number of training steps (overrides train.steps/epochs; 0 is train.steps 0: "
                                     "the epochs decide; zenflow-run eval runs no step)")
      ->check(CLI::Range(int64_t(0), int64_t(INT32_MAX)));  // as train.steps; negative is an error
  app.add_option("--strategy", a.strategy, zf::strategy_names() + " (overrides the spec)");
  app.add_option("--sched", a.sched, "StarPU scheduling policy for both contexts, e.g. lws, eager, "
                                   "prio, dmda, dmdas, or ours: zf-deadline (see --list-policies)");
  app.add_option("--deepspeed", a.deepspeed, "read a DeepSpeed config (train_batch_size, optimizer, "
                                           "zero_optimization with offload_optimizer and zenflow); "
                                           "what cannot be honoured is an error")
      ->check(zf::tools::non_empty_path());
  app.add_option("--metrics", a.metrics, "write the run's metrics as JSON to FILE (atomic)")
      ->check(zf::tools::non_empty_path());
  app.add_option("--save", a.save, "save the final model weights to FILE (safetensors)")
      ->check(zf::tools::non_empty_path());
  app.add_option("--save-hf", a.save_hf, "model.type hf: write the final model as a Hugging Face directory DIR "
                                       "(new or empty): config.json, model.safetensors, tokenizer files (docs/llama.md)")
      ->check(zf::tools::non_empty_path());
  app.add_option("--save-dtype", a.save_dtype, "--save-hf's tensors in f32, bf16 or f16 (default: each tensor's input "
                                             "dtype, f32 for an initialised model)");
  app.add_option("--init", a.init, "initialise the model weights from FILE (safetensors); model.type hf: "
                                 "`--init random` is model.init \"random\" (Hugging Face's init, no weights read)")
      ->check(zf::tools::non_empty_path());
  app.add_option("--checkpoint-dir", a.ckpt_dir, "write full training-state checkpoints into DIR "
                                              "(after the last step, and every --checkpoint-every steps)")
      ->check(zf::tools::non_empty_path());
  app.add_option("--checkpoint-every", a.ckpt_every, "checkpoint every N steps (needs --checkpoint-dir)")
      ->check(zf::tools::integer_in(0, INT64_MAX));
  app.add_flag("--checkpoint-overwrite", a.ckpt_overwrite,
               "write into a --checkpoint-dir that holds another run's checkpoints (other spec, strategy or "
               "seed; refused without this flag): they are deleted after this run's first checkpoint "
               "(docs/checkpoints.md)");
  app.add_option("--resume", a.resume, "resume from a checkpoint DIR (its latest step) or a step directory; "
                                     "the spec must match the checkpoint's")
      ->check(zf::tools::non_empty_path());
  app.add_option("--trace", a.trace, "write a Paje trace of every task (open it in ViTE; pj_dump reads it)")
      ->check(zf::tools::non_empty_path());
  app.add_option("--trace-from", a.trace_from, "trace only the tasks of steps >= N (skips start-up and evaluation)")
      ->check(zf::tools::integer_in(0, INT64_MAX));
  app.add_option("--trace-csv", a.trace_csv, "write one CSV line per task (name, category, step, side, worker, times)")
      ->check(zf::tools::non_empty_path());
  app.add_flag("--quiet,-q", a.quiet, "no progress lines and no summary");
  app.add_flag("--list-policies", a.list_policies, "print the StarPU policies that run zenflow, then ours (zf-deadline), and exit; StarPU's policies that cannot (a crash or a hang in StarPU 1.3) go to stderr with the reason");
  app.add_flag("--print-spec", a.print_spec, "print the effective spec (defaults, --deepspeed and overrides applied; "
                                           "the fields that apply to its model and data) and exit");
  app.add_flag("--estimate-memory", a.estimate_memory,
               "print the memory the run would hold per rank as JSON ({\"host\": {...}, \"device\": {...}}, bytes "
               "per part and each side's total; docs/spec.md, \"Size\") and exit without running");
  app.add_option("--ranks", a.estimate_ranks, "with --estimate-memory: the data-parallel ranks to estimate for "
                                              "(default: this run's, 1 without mpirun)")
      ->check(CLI::Range(1, 1 << 20));
}

// The spec with the command line applied, the output paths checked, then the run. Exit codes:
// 2 bad input, 77 no device, 1 a failure.
// eval runs no step: the options that write what a training run makes are refused, not ignored.
void check_eval_options(const CliArgs& a) {
  for (auto [opt, set] : {std::pair{"--save", !a.save.empty()}, {"--save-hf", !a.save_hf.empty()},
                          {"--checkpoint-dir", !a.ckpt_dir.empty()}, {"--trace", !a.trace.empty()},
                          {"--trace-csv", !a.trace_csv.empty()}, {"--steps", a.steps >= 0}})
    if (set)
      throw zf::InputError(opt, "not with eval, which runs no training step (zenflow-run export --resume CKPT "
                                "--save-hf OUT writes a checkpoint as a Hugging Face directory)");
}

zf::Spec effective_spec(const CliArgs& a, const std::vector<std::string>& sets, int ranks) {
  if (a.mode == Mode::spec || (a.mode == Mode::eval && !a.spec_path.empty()))
    return zf::load_spec(a.spec_path, sets, a.deepspeed, ranks);
  zf::Spec s = zf::load_spec_json(zf::tools::finetune_spec(a.ft, a.mode == Mode::eval),
                                  a.mode == Mode::eval ? "zenflow-run eval" : "zenflow-run finetune", sets,
                                  a.deepspeed, ranks);
  // later messages about these fields name the option they came from
  auto from = [&](const char* field, const char* option, bool given) {
    if (given && !s.field_origin.count(field)) s.field_origin[field] = option;
  };
  from("model.path", "--model", true);
  from("data.path", "--data", true);
  from("data.eval_path", a.mode == Mode::eval ? "--data" : "--eval-data", !s.data.eval_path.empty());
  from("model.context", "--context", true);
  return s;
}

int train(const CliArgs& a, zf::Comm& comm) {
  std::vector<std::string> sets = a.sets;
  try {
    if (a.steps >= 0) sets.push_back("train.steps=" + std::to_string(a.steps));
    if (!a.strategy.empty()) sets.push_back("strategy=\"" + a.strategy + "\"");
    if (!a.sched.empty()) sets.push_back("runtime.sched=\"" + a.sched + "\"");
    if (a.init == "random") sets.push_back("model.init=\"random\"");
    if (a.mode == Mode::eval) check_eval_options(a);
    zf::Spec spec = effective_spec(a, sets, comm.size());
    zf::check_machine(spec);
    if (a.print_spec) {
      std::cout << spec.applicable_json().dump(2) << "\n";
      return 0;
    }
    if (a.estimate_ranks && !a.estimate_memory) throw zf::InputError("--ranks", "needs --estimate-memory");
    if (a.estimate_memory) {
      const int ranks = a.estimate_ranks ? a.estimate_ranks : comm.size();
      // the spec as each of `ranks` ranks reads it (DeepSpeed's batch arithmetic counts them)
      const zf::Spec rs = a.estimate_ranks ? effective_spec(a, sets, ranks) : spec;
      const int64_t steps = rs.train.steps > 0 ? rs.train.steps : -1;
      if (comm.rank() == 0)
        std::cout << zf::memory_estimate_json(rs, zf::estimate_memory(rs, steps, ranks), ranks) << "\n";
      return 0;
    }
    check_output_file("--metrics", a.metrics);
    check_output_file("--save", a.save);
    check_save_hf(a, spec);
    check_output_file("--trace", a.trace);
    check_output_file("--trace-csv", a.trace_csv);
    if (a.ckpt_every < 0) throw zf::InputError("--checkpoint-every", "must be >= 0");
    if (a.ckpt_every > 0 && a.ckpt_dir.empty()) throw zf::InputError("--checkpoint-every", "needs --checkpoint-dir");
    if (comm.rank() == 0) check_output_dir("--checkpoint-dir", a.ckpt_dir);  // rank 0 writes the checkpoints
    zf::tools::check_distinct_outputs({{"--metrics", a.metrics}, {"--save", a.save}, {"--trace", a.trace},
                                       {"--trace-csv", a.trace_csv}, {"--checkpoint-dir", a.ckpt_dir}},
                                      {"--save-hf", a.save_hf});
    zf::tools::check_outputs_are_not_inputs(
        {{"--metrics", a.metrics}, {"--save", a.save}, {"--trace", a.trace}, {"--trace-csv", a.trace_csv}},
        {{"spec", a.spec_path}, {"--deepspeed", a.deepspeed}, {"--init", a.init},
         {spec.where("data.path"), spec.data.path}, {spec.where("data.eval_path"), spec.data.eval_path}});
    const zf::RunOptions o{.quiet = a.quiet,
                           .metrics_path = a.metrics,
                           .save_path = a.save,
                           .init_path = a.init == "random" ? std::string() : a.init,
                           .save_hf_dir = a.save_hf,
                           .save_dtype = a.save_dtype,
                           .checkpoint_dir = a.ckpt_dir,
                           .checkpoint_every = a.ckpt_every,
                           .checkpoint_overwrite = a.ckpt_overwrite,
                           .resume_path = a.resume,
                           .trace_path = a.trace,
                           .trace_csv_path = a.trace_csv,
                           .trace_from = a.trace_from,
                           .comm = &comm,
                           .inspect = nullptr,  // tests only
                           .after_backward = nullptr};
    if (a.ckpt_overwrite && a.ckpt_dir.empty()) throw zf::InputError("--checkpoint-overwrite", "needs --checkpoint-dir");
    if (a.mode == Mode::eval)
      zf::run_evaluation(spec, o);
    else
      zf::run_training(spec, o);
    return 0;
  } catch (const zf::InputError& e) {
    std::cerr << "zenflow-run: error: " << e.what() << "\n";
    return 2;
  } catch (const zf::NoDeviceError& e) {
    std::cerr << "zenflow-run: no device: " << e.what() << "\n";
    return 77;
  } catch (const std::exception& e) {
    std::cerr << "zenflow-run: failed: " << e.what() << "\n";
    return 1;
  }
}
}  // namespace

// The help of finetune and eval (zenflow-run's run options follow theirs).
const char* kFinetuneHelp =
    "zenflow-run finetune --model DIR --data FILE [--eval-data FILE] [--deepspeed ds.json] [--strategy S]\n"
    "  [--context T] [--epochs N | --steps N] [--save-hf OUT] [--set FIELD=VALUE ...] [run options]\n"
    "Fine-tunes the Hugging Face model in DIR without a spec file: the spec is built from the arguments\n"
    "(--print-spec shows it; docs/finetune.md). The data format comes from the file: Alpaca records\n"
    "(.json / .jsonl with instruction, input, output), chat records (messages with role and content,\n"
    "or ShareGPT's conversations; in the model's chat template, the loss on the assistant's turns), token\n"
    "ids (.bin, with --eval-data), or text.\n"
    "Defaults as Hugging Face's Trainer: batch 8, AdamW lr 5e-5, no weight decay, 1 epoch; a DeepSpeed\n"
    "config (train_batch_size, optimizer, scheduler, bf16/fp16, zero_optimization with offload_optimizer\n"
    "and zenflow) replaces them, and --set replaces any field.";
const char* kEvalHelp =
    "zenflow-run eval SPEC | --model DIR --data FILE [--resume CKPT] [--init FILE] [--metrics FILE]\n"
    "Evaluates without training: the eval loss and accuracy of SPEC's model on its evaluation data, or of\n"
    "the Hugging Face model in DIR on FILE (the whole file, format as finetune's --data); --resume\n"
    "evaluates a checkpoint's weights (docs/finetune.md).";

static int run(int argc, char** argv, zf::Comm& comm, Mode mode) {
  if (mode == Mode::finetune || mode == Mode::eval) {
    CLI::App app{mode == Mode::eval ? kEvalHelp : kFinetuneHelp,
                 mode == Mode::eval ? "zenflow-run eval" : "zenflow-run finetune"};
    app.get_formatter()->column_width(34);
    CliArgs a;
    a.mode = mode;
    add_options(app, a);
    app.remove_option(app.get_option("spec"));
    if (mode == Mode::eval)
      app.add_option("spec", a.spec_path, "a graph spec (JSON): its model on its evaluation data");
    add_finetune_options(app, a.ft, mode == Mode::eval);
    if (mode == Mode::eval) {  // SPEC or --model/--data
      app.get_option("--model")->required(false);
      app.get_option("--data")->required(false);
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      const int rc = app.exit(e);
      return rc == 0 ? 0 : 2;
    }
    if (mode == Mode::eval && a.spec_path.empty() == (a.ft.model.empty() || a.ft.data.empty())) {
      std::cerr << "zenflow-run eval: error: give a spec file, or --model DIR and --data FILE (not both; --help)\n";
      return 2;
    }
    return train(a, comm);
  }
  std::string strategies = "Strategies (--strategy):\n";
  for (const zf::StrategyDef& d : zf::strategy_defs())
    strategies += "  " + std::string(d.name) + std::string(18 - std::string(d.name).size(), ' ') + d.summary + "\n";
  CLI::App app{
      "zenflow-run: train a model with a StarPU task graph per step.\n" + strategies +
      "The spec format is documented in docs/spec.md; metrics in docs/metrics.md.\n"
      "Data parallel: mpirun -np R zenflow-run SPEC ... runs R replicas (one process per rank, on GPU\n"
      "r % count in a CUDA build); train.batch_size is the global batch (divisible by R); gradients\n"
      "are all-reduced, zenflow all-reduces its column importance; rank 0 prints and writes the\n"
      "files (docs/data-parallel.md).\n"
      "zenflow-run tokenize --model DIR --text FILE --out FILE.bin: token ids of a text file with a\n"
      "Hugging Face model directory's tokenizer (zenflow-run tokenize --help; docs/tokenizers.md).\n"
      "zenflow-run generate --model DIR --prompt TEXT: text sampled from a Hugging Face model directory\n"
      "with a KV cache (zenflow-run generate --help; docs/hf.md).\n"
      "zenflow-run finetune --model DIR --data FILE: fine-tunes a Hugging Face model without a spec file;\n"
      "zenflow-run eval SPEC | --model DIR --data FILE: eval loss and accuracy, no training;\n"
      "zenflow-run export --resume CKPT --save-hf OUT: a checkpoint as a Hugging Face directory\n"
      "(each: --help; docs/finetune.md)."};
  app.get_formatter()->column_width(34);
  CliArgs a;
  add_options(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (a.list_policies) {
    for (auto& p : zf::Runtime::policies()) std::cout << p << "\n";
    // StarPU's policies that cannot run a training run: on stderr, so stdout stays a list to loop over
    for (auto& p : zf::Runtime::unusable_policies())
      std::cerr << "not usable: " << p << ": " << zf::Runtime::unusable_policy(p) << "\n";
    return 0;
  }
  if (a.spec_path.empty()) {
    std::cerr << "zenflow-run: a spec file is required (e.g. graphs/specs/mlp-fashion.json), or a command: "
                 "finetune --model DIR --data FILE, eval, export, generate, tokenize (--help)\n";
    return 2;
  }
  return train(a, comm);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "tokenize") == 0) return zf::tools::tokenize_main(argc - 1, argv + 1);
  if (argc > 1 && std::strcmp(argv[1], "generate") == 0) return zf::tools::generate_main(argc - 1, argv + 1);
  if (argc > 1 && std::strcmp(argv[1], "export") == 0) return zf::tools::export_main(argc - 1, argv + 1);
  Mode mode = Mode::spec;
  if (argc > 1 && std::strcmp(argv[1], "finetune") == 0) mode = Mode::finetune;
  if (argc > 1 && std::strcmp(argv[1], "eval") == 0) mode = Mode::eval;
  std::unique_ptr<zf::Comm> comm;
  try {  // under mpirun: MPI, one process per rank (docs/data-parallel.md); else one rank, no MPI
#ifdef ZF_SIMGRID
    // simulation: rank 0 of ZF_SIM_RANKS simulated ranks (tools/zf simulate --ranks, docs/simulation.md)
    if (const char* s = std::getenv("ZF_SIM_RANKS"); s && *s) {
      char* end = nullptr;
      const long r = std::strtol(s, &end, 10);
      if (*end != '\0' || r < 1 || r > 1024) {
        std::cerr << "zenflow-run: error: ZF_SIM_RANKS: expected a number of ranks in [1, 1024], got '" << s << "'\n";
        return 2;
      }
      zf::sim_set_ranks((int)r);
      if (r > 1) comm = std::make_unique<zf::Comm>(zf::Comm::simulated_world((int)r));
    }
    if (!comm)
#endif
    comm = std::make_unique<zf::Comm>(&argc, &argv);
  } catch (const std::exception& e) {
    std::cerr << "zenflow-run: failed: " << e.what() << "\n";
    return 1;
  }
  const int rc = mode == Mode::spec ? run(argc, argv, *comm, mode) : run(argc - 1, argv + 1, *comm, mode);
  // the other ranks may wait in a collective: end the job (simulated ranks are one process: its
  // exit code as it is; std::exit inside SimGrid's actor would abort it)
  if (rc != 0 && comm->size() > 1 && !comm->simulated()) {
    std::cout.flush();
    std::cerr.flush();
    comm->abort(rc);
  }
  return rc;
}
