// The graph spec: one JSON file describing a run (model, data, training, optimizer, strategy,
// runtime). Every field has a default; an unknown key, a wrong type or an impossible value is an
// InputError naming the file and the field path. Documented in docs/spec.md. The fields' reading,
// writing and resume rules are one table (graphs/schema/field_table.hpp); the checks against the
// machine are graphs/schema/machine_check.hpp; the DeepSpeed translator graphs/schema/deepspeed.cpp.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graphs/schema/lr_schedule.hpp"

namespace zf {

// zenflow.update_interval: every `steps` steps (DeepSpeed's fixed interval), or "auto", the
// adaptive rule (docs/zenflow.md). A plain integer converts to a fixed interval.
struct UpdateInterval {
  bool is_auto = true;
  int64_t steps = 0;  // >= 1 when !is_auto
  UpdateInterval() = default;
  UpdateInterval(int64_t every) : is_auto(false), steps(every) {}  // NOLINT: a fixed interval
  static UpdateInterval automatic() { return {}; }
  bool operator==(const UpdateInterval&) const = default;
  // "auto" or the number of steps, as the spec writes it.
  nlohmann::json to_json() const { return is_auto ? nlohmann::json("auto") : nlohmann::json(steps); }
};

struct Spec {
  std::string source = "<defaults>";  // file the spec came from (for messages)
  std::string name = "run";
  // device-adam | zero-offload | zero-offload-dpu | zenflow
  std::string strategy = "device-adam";
  // fp32 | bf16 | fp16: bf16 (fp16) device parameters and gradients (values rounded on the device
  // side, 2-byte crossings) with fp32 master weights (docs/spec.md, "precision"); fp16 with
  // DeepSpeed's loss scaling (the fp16 block below)
  std::string precision = "fp32";
  // DeepSpeed's communication_data_type: the format the gradients' reduce-scatters and all-reduces
  // cross the wire in on several ranks (docs/data-parallel.md, "The gradients' wire"): fp32 | bf16
  // | fp16; empty (the default, as DeepSpeed's): the precision's format. grad_wire() reads it.
  std::string communication_data_type;
  const std::string& grad_wire() const {
    return communication_data_type.empty() ? precision : communication_data_type;
  }
  // DeepSpeed's gradient_clipping: the global L2 norm of the step's gradients is clipped to it,
  // with DeepSpeed's coefficient (graphs/strategies/clip.hpp, docs/spec.md); 0: off
  double gradient_clipping = 0.0;
  // DeepSpeed's zero_optimization.stage (docs/data-parallel.md): 0 replicates the host optimizer
  // state on every rank; 1 partitions it over the ranks (each rank's host AdamW / ZenFlow host
  // update runs on its partition, the updated partitions are all-gathered into the device
  // weights); 2 also reduce-scatters the gradients that go to the host. Offloading strategies only.
  int zero_stage = 0;
  // DeepSpeed's zero_optimization.stage3_max_live_parameters: at stage 3 the most elements of
  // whole (gathered) parameters on a rank at once (graphs/strategies/stage3.hpp, LiveGroups), at
  // least the largest layer group's; 0 (the default): the largest layer group's, one layer.
  int64_t stage3_max_live_parameters = 0;
  // DeepSpeed's Twin-Flow (ZeRO-Offload++; graphs/strategies/twin_flow.hpp, docs/spec.md):
  // zero_optimization.offload_optimizer.ratio, the fraction of zero-offload's optimizer state
  // sub-groups kept on the host (1: all, as zero-offload; 0: none, as device-adam), and
  // zero_optimization.sub_group_size, DeepSpeed's sub-group size in elements (its default 1e9).
  double offload_ratio = 1.0;
  int64_t sub_group_size = 1000000000;
  // DeepSpeed's zero_optimization.reduce_bucket_size (its default 5e8 elements): here the most
  // elements of the gradients that leave the device during the backward (graphs/train/
  // grad_stream.hpp) held on the device at once, at least two layer groups' worth.
  int64_t reduce_bucket_size = 500000000;

  // DeepSpeed's "fp16" block without "enabled" (precision "fp16" is that): same keys, types and
  // defaults (deepspeed/runtime/precision_config.py); the scaler is graphs/train/loss_scaler.hpp.
  struct Fp16 {
    double loss_scale = 0.0;        // 0: dynamic loss scaling; > 0: this static scale
    int initial_scale_power = 16;   // dynamic: the first scale is 2^this
    int64_t loss_scale_window = 1000;  // good steps before the scale doubles
    int hysteresis = 2;             // overflows tolerated before the scale halves (DeepSpeed's delayed_shift)
    bool consecutive_hysteresis = false;  // refill the hysteresis after every good step
    int64_t min_loss_scale = 1;     // the scale never goes below this
    bool given = false;             // the spec had an fp16 block
  } fp16;

  struct Model {
    std::string type = "mlp";
    std::vector<int> hidden{256, 128};
    std::string activation = "relu";  // relu | gelu
    uint64_t init_seed = 1;
    // mlp | gpt | gpt-classifier (docs/gpt.md) | hf (Llama, Mistral, Qwen2 directories: docs/llama.md)
    int n_layer = 4, n_head = 4, n_embd = 128, context = 128;
    // gpt: the vocabulary (wte and lm_head rows); text datasets need the 256 byte values, token
    // files ids below it (docs/gpt.md, "Token files")
    int vocab = 256;
    std::string pool = "mean";  // gpt-classifier: mean | max | last (the verse's last byte)
    // gpt-classifier: linear (a classification layer on the pooled output) | generative (Bayes'
    // rule over the language model conditioned on a class byte; docs/gpt.md)
    std::string head = "linear";
    // How 2-D weights are stored (docs/zenflow.md, "Weight layout"): in_out (transposed, a column
    // contiguous for ZenFlow's selective step) | out_in | auto (the MLP in_out; the GPT's block
    // weights in_out under zenflow, out_in otherwise). Storage only: saved weights, checkpoints
    // and --init files keep the logical (out, in) layout, and a checkpoint resumes under any value.
    std::string weight_layout = "auto";
    // hf: a Hugging Face model directory (config.json, and model.safetensors or an index with its
    // shards; none: initialised from init_seed); context is the training window T (docs/llama.md)
    std::string path;
    // hf: "weights" (read from model.path; none there is an error) | "random" (Hugging Face's init
    // from init_seed, as from_config: the directory's weights are not read)
    std::string init = "weights";
  } model;

  struct Data {
    std::string dataset = "fashion-mnist";
    std::string dir = "/usr/share/datasets/fashion-mnist";
    int64_t train_limit = 0;  // 0: all examples
    int64_t eval_limit = 0;
    // kjv | text | tokens (docs/gpt.md): the text or training token file; for kjv "" means kKjvDefaultPath
    std::string path;
    std::string eval_path;  // tokens: the evaluation token file (required)
    // The training units' order (docs/spec.md): "random", a permutation per epoch seeded by
    // train.seed, or "sequential": row b of step t's global batch is unit (t B + b) mod U
    std::string order = "random";
    std::string labels = "testament";  // gpt-classifier: testament | section
    std::string split = "book";        // gpt-classifier: book | verse
    // instructions: whole records packed into rows of model.context + 1 tokens, not one a row
    bool pack = false;
  } data;

  struct Train {
    // the global batch of one optimizer step (DeepSpeed's train_batch_size); with
    // gradient_accumulation_steps A and R ranks, each rank runs A micro-batches of batch_size / (A R)
    int batch_size = 128;
    int gradient_accumulation_steps = 1;
    int64_t epochs = 1;
    int64_t steps = 0;  // > 0 overrides epochs
    uint64_t seed = 42;
    int eval_batch_size = 1000;
    // evaluate every N steps during the run (printed, and the metrics' "evals"); 0: at the end only
    int64_t eval_every = 0;
    // Activation checkpointing (Hugging Face's gradient_checkpointing, docs/spec.md): 0 "none"; N
    // ("every_layer" is 1): the forward keeps the residual stream every N layers and the backward
    // recomputes each segment's forward before its backward. The same values, bitwise.
    int activation_checkpointing = 0;
  } train;

  struct Optimizer {
    std::string type = "adamw";
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  } optimizer;

  // DeepSpeed's "scheduler" block (graphs/schema/lr_schedule.hpp); no block: the constant optimizer.lr.
  using Scheduler = LrSchedule;
  LrSchedule scheduler;
  // The rate DeepSpeed's scheduler holds at last_batch_iteration `it` (>= -1).
  double schedule_at(int64_t it) const { return scheduler.schedule_at(it, optimizer.lr); }
  // The learning rate of optimizer step t (0-based): schedule_at(t - 1).
  double lr_at(int64_t t) const { return scheduler.lr_at(t, optimizer.lr); }
  // The schedule's rate after the warm-up (LrSchedule::peak_lr).
  double peak_lr() const { return scheduler.peak_lr(optimizer.lr); }
  // One line for the run header: "constant 0.001" or the schedule with its numbers.
  std::string describe_lr() const { return scheduler.describe(optimizer.lr); }

  // DeepSpeed's zero_optimization.zenflow block: same keys, types, defaults and constraints
  // (docs/zenflow.md), plus max_staleness, importance, reset_host_moments and semantics.
  struct ZenFlow {
    double topk_ratio = 0.1;
    std::string select_strategy = "auto";  // auto | step | epoch
    int64_t select_interval = -1;          // -1: "auto"
    UpdateInterval update_interval;        // default "auto"
    bool overlap_step = false;
    bool offload = false;
    double auto_ratio = 0.99;
    int64_t full_warm_up_rounds = 0;
    double pt_reserved_cores_perc = 0.5;
    int max_staleness = -1;                // -1: 1 with overlap_step, else 0
    std::string importance = "l1";         // l1 | l2 (squared L2 norm)
    // ours: at the end of full_warm_up_rounds the host AdamW's moments restart from zero, with
    // bias correction counting host updates from there (docs/zenflow.md)
    bool reset_host_moments = false;
    // ours: whose update rules: "zenflow" (docs/zenflow.md's, the default) or "deepspeed"
    // (DeepSpeed's where they differ: docs/zenflow.md, "semantics: deepspeed")
    std::string semantics = "zenflow";
    bool deepspeed_rules() const { return semantics == "deepspeed"; }
    // ours: how data-parallel ranks select columns (docs/data-parallel.md): "exact" (the importance
    // of the reduced gradient, as one process) or "local-sum" (the sum of the ranks' importances of
    // their local gradients, the proxy)
    std::string dp_selection = "exact";
    bool local_sum() const { return dp_selection == "local-sum"; }
    // ours: where the per-step accumulation of the gradient into the host buffer runs (issue 43):
    // "host" (DeepSpeed's way: the gradient crosses every step, 2 bytes per value under bf16/fp16,
    // and a host task sums it in fp32) or "device" (a crossing task adds the fp32 gradient into the
    // host-homed accumulator: on a CUDA worker StarPU keeps the accumulator's replica on the GPU for
    // the interval; docs/zenflow.md, "Where the accumulation runs")
    std::string accumulate_on = "host";
    bool accumulate_on_host() const { return accumulate_on == "host"; }
    bool given = false;                    // the spec had a zenflow block
    bool cores_perc_given = false;
    int staleness() const { return max_staleness >= 0 ? max_staleness : (overlap_step ? 1 : 0); }
  } zenflow;

  struct Runtime {
    std::string sched = "zf-deadline";
    // CPU workers of each context. 0: from zenflow.pt_reserved_cores_perc of the cores hwloc
    // sees (at most STARPU_MAXCPUS): device = clamp(floor(perc * n), 1, n - 1), host = the rest.
    int device_workers = 0;
    int host_workers = 0;
    // CUDA workers of the device context in a CUDA build: 0 = one per GPU seen (none seen: the CPU
    // device workers above), N = N GPUs, -1 = none (docs/gpu.md).
    int cuda_workers = 0;
    int64_t tile_elems = 1 << 20;  // host-side tile size (elements, multiple of 16)
    int lookahead = 2;             // steps submitted ahead of the oldest unfinished one
    std::string crossings = "device";  // who runs the per-step crossings: "device" | "host"
    // the offloaded gradients cross to the host during the backward, layer group by layer group,
    // and their device buffers are reused (graphs/train/grad_stream.hpp); false: kept whole for the step
    bool stream_gradients = true;
    // a language model's logits (rows x vocabulary) above this many elements: on a CPU device the
    // head and the loss run in vocabulary chunks of at most this many logits, the (N, V) logits
    // and their gradient never held (the head's product computed twice; docs/llama.md); 0: never
    int64_t logits_chunk_elems = int64_t(1) << 24;
    bool priorities = true;  // task priorities from the graph's structure (RuntimeConfig::priorities)
  } runtime;

  struct Log {
    int every = 50;         // progress line every N steps (0: none)
    int warmup_steps = 5;   // excluded from step-time and stall metrics
  } log;

  // Fields that came from another file than `source` (a --deepspeed config): field path ->
  // "ds.json: train_batch_size". Not part of the spec's identity (to_json leaves it out).
  std::map<std::string, std::string> field_origin;
  // "FILE: FIELD" for error messages about a field: the file the value came from.
  std::string where(const std::string& field) const {
    auto it = field_origin.find(field);
    return it != field_origin.end() ? it->second + " (" + field + ")" : source + ": " + field;
  }

  nlohmann::json to_json() const;
  // to_json() less the fields that do not apply to this model and data (an hf model's GPT and MLP
  // sizes, the KJV classifier's labels for a language model, the zenflow block under another
  // strategy, ...): --print-spec. to_json() stays the spec's identity (checkpoints, metrics).
  nlohmann::json applicable_json() const;
};

// Where `bash tools/zf setup` writes bible(1)'s output (data.dataset "kjv" without data.path).
inline constexpr const char* kKjvDefaultPath = "/var/tmp/zenflow/kjv.txt";

// Parses and validates, the strategy's rules for `ranks` data-parallel ranks included
// (graphs/strategies/registry.hpp); `source` names the file in errors.
Spec parse_spec(const nlohmann::json& j, const std::string& source, int ranks = 1);
// Reads a JSON file, resolves its relative paths (model.path, data.path, data.eval_path, data.dir)
// against the file's folder, applies "a.b=value" overrides (value parsed as JSON, else taken as a
// string; their paths are left as given: the shell's), then parses and validates. Throws InputError.
// ranks: the data-parallel world size (docs/data-parallel.md), for DeepSpeed's batch arithmetic
// and the strategy's rules.
Spec load_spec(const std::string& path, const std::vector<std::string>& overrides,
               const std::string& deepspeed_config = "", int ranks = 1);
// load_spec of a spec's JSON built elsewhere (zenflow-run finetune); `source` names it in errors.
Spec load_spec_json(nlohmann::json j, const std::string& source, const std::vector<std::string>& overrides,
                    const std::string& deepspeed_config = "", int ranks = 1);

// A DeepSpeed config (train_batch_size, optimizer, gradient_clipping, zero_optimization with
// offload_optimizer and zenflow) as a patch to a spec's JSON. What the engine cannot honour is an
// InputError naming the config file and the field; keys that only tune DeepSpeed's own
// communication are listed in `notes` (accepted, no effect here). With `ranks` data-parallel
// ranks, train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x ranks.
nlohmann::json deepspeed_patch(const nlohmann::json& ds, const std::string& source,
                               std::vector<std::string>* notes, int ranks = 1);
nlohmann::json read_json_file(const std::string& path);
// "a.b=value"; a value of null removes the key (--set scheduler=null: no schedule; a field: its default).
void apply_override(nlohmann::json& j, const std::string& assignment, const std::string& source);

int64_t steps_per_epoch(const Spec& s, int64_t epoch_size);
// The select interval in steps (0: never reselect).
int64_t select_interval_steps(const Spec::ZenFlow& z, int64_t steps_per_epoch);
inline int64_t select_interval_steps(const Spec& s, int64_t steps_per_epoch) {
  return select_interval_steps(s.zenflow, steps_per_epoch);
}
int64_t total_steps(const Spec& s, int64_t epoch_size);

}  // namespace zf
