// The training driver: builds the runtime, workload and strategy from a spec, submits one step
// graph per step (at most runtime.lookahead steps ahead of the oldest unfinished one), prints
// progress, evaluates, saves weights and computes the metrics (docs/metrics.md). The parts:
// graphs/train/workload_factory.hpp, step_graph.hpp, precision.hpp, report.hpp, checkpoint.hpp.
#pragma once
#include <functional>
#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "graphs/schema/spec.hpp"
#include "graphs/train/workload_factory.hpp"

namespace zf {

class Runtime;
class Workload;
class StepStatus;
class Comm;

struct RunOptions {
  bool quiet = false;
  std::string metrics_path;  // --metrics
  std::string save_path;     // --save (safetensors)
  std::string init_path;     // --init (safetensors)
  std::string save_hf_dir;   // --save-hf: a Hugging Face model directory (model.type hf)
  std::string save_dtype;    // --save-dtype f32 | bf16 | f16 ("": each tensor's input dtype)
  std::string checkpoint_dir;  // --checkpoint-dir: full training state
  int64_t checkpoint_every = 0; // --checkpoint-every N steps (and after the last step)
  bool checkpoint_overwrite = false;  // --checkpoint-overwrite: write into a directory holding another run's
  std::string resume_path;     // --resume DIR (a checkpoint dir or one of its step dirs)
  std::string trace_path;      // --trace: Paje trace (ViTE, pj_dump)
  std::string trace_csv_path;  // --trace-csv: one line per task
  int64_t trace_from = -1;     // --trace-from N: only tasks of steps >= N (-1: everything)
  bool evaluate = true;
  // false: precision bf16's matmuls convert their operands in every call instead of keeping a
  // step's bf16 copies (the same bits; tests compare the two paths)
  bool matmul_keep_bf16_operands = true;
  // false: precision bf16/fp16 keeps the device parameters' 2-byte values in 4-byte words, rounded
  // after every update, instead of 2-byte storage (the same bits; tests compare the two)
  bool half_storage = true;
  // false: precision bf16 keeps the residual stream and the matmuls' outputs in fp32 instead of
  // bf16 (Runtime::activations_bf16; tests compare where the two differ)
  bool bf16_activations = true;
  // false: precision bf16 keeps the activation gradients between the layers in fp32 instead of
  // bf16 (Runtime::activation_grads_bf16; off with bf16_activations too)
  bool bf16_activation_grads = true;
  std::ostream* out = nullptr;  // progress and summary (default std::cout)
  // The ranks of a data-parallel run (zenflow-run under mpirun, docs/data-parallel.md); null or one
  // rank: a single process. Other ranks than 0 print nothing and write no file.
  Comm* comm = nullptr;
  // Called after the run with the runtime still alive (tests read weights here).
  std::function<void(Runtime&, Workload&)> inspect;
  // Tests: called after step t's backward (and gradient all-reduce) is submitted, before the
  // gradients are rounded and, under precision fp16, checked for overflow; a test forces an
  // overflow by submitting a task that writes an inf into a gradient.
  std::function<void(Runtime&, Workload&, int64_t)> after_backward;
};

// Runs the spec; returns the metrics JSON (also written to metrics_path if set).
nlohmann::json run_training(const Spec& spec, const RunOptions& opt);

// zenflow-run eval: the model (its weights, --init's or --resume's) evaluated on the spec's
// evaluation data, no step run; prints the loss and accuracy and returns {"eval": {"loss",
// "accuracy", "examples"}, "checkpoint_step", "model", "spec"} (also written to metrics_path). One
// process, not in simulation; output options other than metrics_path are refused by the caller.
nlohmann::json run_evaluation(const Spec& spec, const RunOptions& opt);

// zenflow-run export: the state of opt.resume_path's checkpoint with the updates still in flight
// applied, as at the end of the run that wrote it (what its --save-hf wrote, bitwise), written to
// opt.save_hf_dir; no step run. `spec` is the checkpoint's.
void run_export(const Spec& spec, const RunOptions& opt);

}  // namespace zf
