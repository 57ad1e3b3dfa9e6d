#include "graphs/train/memory_estimate.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "codelets/codelets.hpp"
#include "graphs/schema/spec.hpp"
#include "graphs/strategies/registry.hpp"
#include "graphs/train/grad_stream.hpp"
#include "models/hf/config.hpp"
#include "models/hf/tensors.hpp"
#include "runtime/error.hpp"
#include "runtime/runtime.hpp"
#include "runtime/simulation.hpp"

namespace zf {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string gib(double b) {
  char s[32];
  std::snprintf(s, sizeof s, b >= 10 * kGiB ? "%.1f" : "%.2f", b / kGiB);
  return s;
}

double file_size(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0.0 : (double)n;
}

// Precision bf16 with bf16 matmuls (Precision: a CUDA device, or a CPU with native bf16; every
// device in simulation): the linear layers' inputs are stored in 2 bytes (Runtime::
// matmul_inputs_bf16).
bool cuda_device(const Spec& s) { return s.runtime.cuda_workers >= 0 && Runtime::cuda_devices() > 0; }
bool matmul_inputs_bf16(const Spec& s) {
  return s.precision == "bf16" && (kSimulated || cpu_native_bf16() || cuda_device(s));
}
// Precision bf16 on every device: the residual stream and the matmuls' outputs in 2 bytes
// (Runtime::activations_bf16), and the GPT's activation gradients (Runtime::activation_grads_bf16)
bool activations_bf16(const Spec& s) { return s.precision == "bf16"; }

// train.activation_checkpointing N: the sets of block buffers the step graphs hold (min(N, L) of
// them; L without checkpointing) and the segments' kept outputs, ceil(L / N) of C floats a
// position, in 2 bytes under activations_bf16 (models/nets/gpt.cpp, llama.cpp)
double held_blocks(const Spec& s, double L) {
  const int n = s.train.activation_checkpointing;
  return n ? std::min<double>(n, L) : L;
}
double kept_outputs(const Spec& s, double L, double C) {
  const int n = s.train.activation_checkpointing;
  return n ? std::ceil(L / n) * C * (activations_bf16(s) ? 0.5 : 1.0) : 0.0;
}

// model.type hf (models/nets/llama.cpp's buffers): parameters from config.json's tensor list; per
// position and layer xn1, res1, xn2, res2 (C each), q and atty (H hs), k and v (Hkv hs), gate, up
// and h (F), two rstd and the attention rows' log-sum-exp (H); then the shared gradients and the
// head; in floats, the matmuls' inputs xn1, atty, xn2, h (and the final norm's xf) at half a float
// under matmul_inputs_bf16, and x0, q, k, v, res1, gate, up and res2 and the activation
// gradients between the layers under activations_bf16. Nothing when the directory has no config.json (the workload reports it).
// Activation floats per batch row: `rows(held, kept)` with the spec's activation checkpointing,
// without it; and the attention's scratch, bytes per thread that runs an attention tile
// (codelets' attention_workspace_bytes: a row block's probabilities, no (T, T) matrix)
struct ActRows {
  double held = 0, unchecked = 0;
  double workspace_cpu = 0, workspace_cuda = 0;
  double head_scratch = 0;  // bytes: the chunked LM head's buffers while its task runs (hf_estimate)
  // attention tiles a sequence has on a CPU device, at most: 1 for the GPT's path, the KV heads
  // for the grouped-query path (kernels/cpu/attention.cpp's kv_per_tile: a few heads a tile)
  double tiles_per_seq = 1;
};
// (gpt: the GPT's attention, whose CPU kernels multiply in bf16 under precision bf16; the
// grouped-query one's multiply in fp32)
template <class Rows>
ActRows act_rows(const Spec& s, double L, double C, int B, int T, int H, int Hkv, int hs, bool gpt, Rows rows) {
  const bool bf16 = s.precision == "bf16";
  return {rows(held_blocks(s, L), kept_outputs(s, L, C)), rows(L, 0.0),
          (double)attention_workspace_bytes(B, T, H, Hkv, hs, gpt, bf16, false),
          (double)attention_workspace_bytes(B, T, H, Hkv, hs, gpt, bf16, true), 0.0,
          gpt ? 1.0 : (double)Hkv};
}

// group_max: the largest layer group's parameters (a block, the embeddings, the norm and head;
// Workload::layer_groups), 0 when the head is tied (no groups)
void hf_estimate(const Spec& s, int B, double& P, double& tensors, double& block_params, double& group_max,
                 double& layers, ActRows& act) {
  const std::string path = (std::filesystem::path(s.model.path) / "config.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return;
  const hf::Config c = hf::read_config(path);
  for (const hf::TensorSpec& t : hf::expected_tensors(c)) {
    P += (double)t.numel();
    tensors += 1;
    if (t.name.rfind("model.layers.0.", 0) == 0 || t.name.rfind("transformer.h.0.", 0) == 0)
      block_params += (double)t.numel();
  }
  // the embeddings, or the final norm and the head, are a group of V C (and a few C) parameters
  layers = (double)c.num_layers;
  group_max = c.tie_word_embeddings ? 0 : std::max(block_params, (double)c.vocab_size * c.hidden_size + 2.0 * c.hidden_size);
  const double C = (double)c.hidden_size, F = (double)c.intermediate_size, T = s.model.context;
  const double Q = (double)(c.num_heads * c.head_dim), KV = (double)(c.num_kv_heads * c.head_dim);
  const double H = (double)c.num_heads, V = (double)c.vocab_size;
  // the head: the logits and their gradient (V each; the evaluation's probabilities go into the
  // gradient's buffer) and the gradient's kept bf16 copy (matmul_keeps_bf16_operands: V / 2); or
  // on a CPU device above runtime.logits_chunk_elems none of them (LlamaLanguageModel::head_chunk)
  // but, while the head's task runs, a chunk's logits, dx's partial sum and a bf16 dw's chunk
  const double N = (double)B * T, most = (double)s.runtime.logits_chunk_elems;
  const bool gpu = kSimulated || cuda_device(s);
  const double Vc = gpu ? 0.0 : (double)lm_head_chunk_cols((int64_t)N, (int64_t)V, (int64_t)most);
  const double head = Vc > 0 ? 0.0 : 2 * V + (matmul_inputs_bf16(s) && !gpu ? V / 2 : 0.0);
  if (Vc > 0) act.head_scratch = 4 * (N * Vc + N * C + (s.precision == "bf16" ? Vc * C : 0.0));
  const double scratch = act.head_scratch;
  act = act_rows(s, (double)c.num_layers, C, B, s.model.context, c.num_heads, c.num_kv_heads, c.head_dim,
                 c.model_type == "gpt2", [&](double L, double kept) {
    double r = T * (L * (4 * C + 2 * Q + 2 * KV + 3 * F + 2 + H) + 7 * C + 2 * Q + 2 * KV + 3 * F + head + kept);
    if (matmul_inputs_bf16(s)) r -= T * (L * (2 * C + Q + F) + C) / 2;
    if (activations_bf16(s)) r -= T * (L * (2 * C + Q + 2 * KV + 2 * F) + C) / 2;
    // ... and the activation gradients dres_a, dres_b, dxn, dxn_b, datty, dq, dk, dv, dh, dgate, dup
    if (activations_bf16(s)) r -= T * (4 * C + 2 * Q + 2 * KV + 3 * F) / 2;
    return r;
  });
  act.head_scratch = scratch;
}

}  // namespace

std::string MemoryEstimate::describe() const {
  return gib(total()) + " GiB (parameters " + gib(params) + ", optimizer state " + gib(optimizer) + ", activations " +
         gib(activations) + ", attention scratch " + gib(workspace) + ", per-step records " + (steps < 0 ? "not counted yet" : gib(records)) + ", data " +
         gib(data) + ")";
}

MemoryEstimate estimate_memory(const Spec& s, int64_t steps, int ranks) {
  MemoryEstimate e;
  e.steps = steps;
  // the micro-batch of one rank (graphs/train/trainer.cpp rank_spec: batch = micro x accumulation x ranks)
  const int A = std::max(1, s.train.gradient_accumulation_steps);
  const double B = std::max<double>(1.0, (double)s.train.batch_size / std::max(1, ranks) / A);
  const double Be = (double)s.train.eval_batch_size;
  double P = 0;        // parameters (floats)
  double tensors = 0;  // parameter tensors (tasks per step scale with them)
  double block_params = 0;  // one block's (ZeRO stage 3 holds one whole)
  double group_max = 0;     // the largest layer group's (0: no groups)
  double layers = 0;        // blocks of block_params (the MLP: none alike)
  ActRows act;  // activation floats per batch row
  if (s.model.type == "mlp") {
    const double in = 784, out = 10;  // Fashion-MNIST
    double prev = in, widths = 0;
    for (int h : s.model.hidden) {
      P += prev * h + h;
      prev = h;
      widths += h;
      tensors += 2;
    }
    P += prev * out + out;
    tensors += 2;
    double p0 = in;  // the largest layer's weight and bias
    for (int h : s.model.hidden) {
      group_max = std::max(group_max, p0 * h + h);
      p0 = h;
    }
    group_max = std::max(group_max, p0 * out + out);
    act.held = act.unchecked = in + 4 * widths + 3 * out;  // x; z, dz, a, da per layer; probs
    e.data = (double)(s.data.train_limit > 0 ? std::min<int64_t>(s.data.train_limit, 60000) : 60000) * in +
             10000.0 * in;
  } else if (s.model.type == "hf") {
    hf_estimate(s, (int)B, P, tensors, block_params, group_max, layers, act);
    e.data = file_size(s.data.path) + file_size(s.data.eval_path);
  } else {
    const double C = s.model.n_embd, T = s.model.context, L = s.model.n_layer, H = s.model.n_head, V = s.model.vocab;
    block_params = 12 * C * C + 13 * C;
    P = V * C + T * C + L * block_params + 2 * C + V * C;  // embeddings, blocks, ln_f, lm_head
    tensors = 3 + 12 * L + 2;
    group_max = std::max(block_params, V * C + T * C);  // a block; wte and wpe; ln_f and lm_head
    layers = L;
    // per layer: ln1, qkv (3), atty, res1, ln2, fch (4), fcg (4), res2 = 16 x C per position,
    // the attention rows' log-sum-exp H per position; then the shared gradients and the head.
    // Under matmul_inputs_bf16 ln1, atty, ln2 and fcg (7 C) in 2 bytes; under activations_bf16
    // qkv, res1, fch and res2 (9 C) and x0 (C) in 2 bytes, and the activation gradients between
    // the layers dres_a, dres_b, dln, datty (4 C), dqkv (3 C), dfch and dfcg (8 C): 15 C
    // (models/nets/gpt.cpp; the output gradients' kept bf16 copies, for fp32 gradients, are not
    // made).
    const double in16 = matmul_inputs_bf16(s) ? 7 * C / 2 : 0;
    const double act16 = activations_bf16(s) ? 9 * C / 2 : 0;
    const double grad16 = activations_bf16(s) ? 15 * C / 2 : 0;
    // (Lh: the blocks whose buffers are held, kept: the segments' outputs; activation checkpointing)
    act = act_rows(s, L, C, (int)B, s.model.context, s.model.n_head, s.model.n_head, s.model.n_embd / std::max(1, s.model.n_head), true,
                   [&](double Lh, double kept) {
      return T * (Lh * (16 * C - in16 - act16 + H + 4) + 18 * C - (act16 ? C / 2 : 0) - grad16 + 3 * V + kept);
    });
    // text: the file and its split copies; kjv: about 4 MB of verses, parsed; tokens: the two
    // files' ids at their width (about the files' sizes)
    e.data = s.data.dataset == "tokens" ? file_size(s.data.path) + file_size(s.data.eval_path)
                                        : 3.0 * (s.data.dataset == "text" ? file_size(s.data.path) : 5.0 * 1024 * 1024);
  }
  e.param_count = (int64_t)P;
  // values (2-byte storage under bf16/fp16, Precision::store_params) and gradients (fp32, or 2
  // bytes where two_byte_gradients holds), and with gradient accumulation one more fp32
  // gradient-sized buffer (grad_acc: the micro-batches' sum)
  const bool half = s.precision == "bf16" || s.precision == "fp16";
  const double vb = half ? 2 : 4, gb = (two_byte_gradients(s, ranks) ? 2 : 4) + (A > 1 ? 4 : 0);
  e.params = (vb + gb) * P;
  // on the device: whole, or at ZeRO stage 3 on several ranks this rank's shards and one block
  // whole (stage3_max_live_parameters' default: graphs/strategies/stage3.hpp)
  const double on_device = s.zero_stage == 3 && ranks > 1 ? P / ranks + block_params : P;
  e.device_params = vb * on_device;
  e.device_grads = gb * on_device;
  // the strategy's streamed share (OptimizerFootprint::streamed: zero-offload's host part,
  // zenflow's 2-D weights) leaves the device during the backward; the blocks' share buffers,
  // S blocks' worth (graphs/train/grad_stream.hpp), the embeddings and the head keep theirs
  const OptimizerFootprint f = strategy_def(s.strategy).footprint(s, P, tensors, ranks);
  if (f.streamed > 0 && grad_stream_off(s, ranks, group_max > 0).empty()) {
    const double r = f.streamed;
    const int S = grad_stream_slots(s.reduce_bucket_size, (int64_t)group_max);
    const double streamed = r * (P - layers * block_params + std::min<double>(layers, S) * block_params);
    e.device_grads = gb * (on_device - r * P + streamed);
  }
  // optimizer state beyond the device's values and gradients, in floats per parameter and rank,
  // as the strategy allocates it (its entry in graphs/strategies/registry.cpp; docs/spec.md
  // "Size"). The 1-D parameters' few extra buffers are not counted (they are a small share of any
  // model large enough for this to matter).
  const double opt = f.host + f.device;
  e.optimizer = 4 * opt * P;
  e.device_optimizer = 4 * f.device * P;
  // the training and the evaluation batch sizes each have their buffers, one set where they are
  // the same size (the models key their buffer sets by the batch's shape: GptBody::acts_for,
  // LlamaLanguageModel::acts_for); an evaluation set never writes its gradients, which are lazy
  // buffers, so counting them is an upper bound
  e.activations = 4 * act.held * (B + (Be == B ? 0.0 : Be)) + act.head_scratch;
  const double Bd = kSimulated ? B : std::max(B, Be);  // the device's batch (MemoryEstimate)
  e.device_activations = 4 * act.held * Bd + act.head_scratch;
  e.device_activations_unchecked = 4 * act.unchecked * Bd + act.head_scratch;
  // the attention's scratch: a CUDA worker's one stream's, or on a CPU device each thread's that
  // may run an attention tile (at most the cores, at most the larger batch's tiles)
  const bool gpu = kSimulated || cuda_device(s);
  const double threads =
      std::min<double>(std::max(1u, std::thread::hardware_concurrency()), std::max(B, Be) * act.tiles_per_seq);
  e.device_attention = gpu ? act.workspace_cuda : act.workspace_cpu * threads;
  e.workspace = act.workspace_cpu * threads;
  if (steps >= 0) {
    // per step: the step record (24 B), a step aggregate (~96 B in a hash map), and per task a
    // 48-byte record (x 2: vector growth); about 6 tasks per parameter tensor and step
    const double tasks = 6 * tensors + 10;
    e.records = (double)steps * (24 + 96 + tasks * 48 * 2);
  }
  return e;
}

double device_memory(const Spec& s) {
#ifdef ZF_SIMGRID
  if (const char* m = std::getenv("ZF_SIM_GPU_MEM"); m && *m && Runtime::cuda_devices() > 0 && s.runtime.cuda_workers != 0)
    return std::atof(m);
  return -1;
#else
  return cuda_device(s) ? Runtime::cuda_device_memory() : -1;
#endif
}

std::string memory_estimate_json(const Spec& s, const MemoryEstimate& e, int ranks) {
  using J = nlohmann::ordered_json;
  auto b = [](double x) { return (int64_t)std::llround(x); };  // bytes
  J device = {{"params", b(e.device_params)},
              {"grads", b(e.device_grads)},
              {"optimizer", b(e.device_optimizer)},
              {"activations", b(e.device_activations)},
              {"attention", b(e.device_attention)}};
  if (s.train.activation_checkpointing)
    device["activations_without_checkpointing"] = b(e.device_activations_unchecked);
  device["total"] = b(e.device_total());
  const J host = {{"optimizer", b(e.optimizer - e.device_optimizer)},
                  {"records", b(e.records)},
                  {"data", b(e.data)},
                  {"total", b(e.host_total())}};
  const double mem = device_memory(s);
  const J j = {{"ranks", ranks},
               {"parameters", e.param_count},
               {"device", device},
               {"host", host},
               {"device_memory", mem > 0 ? J(b(mem)) : J()},
               {"device_fits", mem > 0 ? J(e.device_total() <= 0.9 * mem) : J()}};
  return j.dump(2);
}

void check_device_memory(const Spec& s, const MemoryEstimate& e) {
  if (const char* v = std::getenv("ZF_SKIP_MEMORY_CHECK"); v && std::string(v) == "1") return;
  const double mem = device_memory(s);
  if (mem <= 0 || e.device_total() <= 0.9 * mem) return;
  const bool hf = s.model.type == "hf";
  const std::string size = hf ? s.model.path + "/config.json: hidden_size, intermediate_size, num_hidden_layers, "
                                               "vocab_size (the model's size; " + s.where("model.path") + ")"
                              : s.where("model.n_layer") + ", model.n_embd, model.context";
  std::string part, fields;
  const double m = std::max({e.device_params, e.device_grads, e.device_optimizer, e.device_activations});
  if (m == e.device_activations) {
    part = "activations";
    fields = s.where("train.batch_size") + ", train.eval_batch_size, model.context, train.activation_checkpointing";
  } else {
    part = m == e.device_optimizer ? "optimizer state" : m == e.device_grads ? "gradients" : "parameters";
    fields = size + " (or strategy, zero_optimization.stage)";
  }
  throw InputError(fields, "the device part of the run would need about " + gib(e.device_total()) +
                               " GiB per rank (parameters " + gib(e.device_params) + ", gradients " +
                               gib(e.device_grads) + ", optimizer state " + gib(e.device_optimizer) +
                               ", activations " + gib(e.device_activations) + ", attention scratch " +
                               gib(e.device_attention) + "; the largest: " + part + "), but " +
                               gib(0.9 * mem) + " GiB of the device's " + gib(mem) +
                               " GiB are StarPU's to use (90 %); zenflow-run SPEC --estimate-memory shows the parts "
                               "(ZF_SKIP_MEMORY_CHECK=1 skips this check)");
}

int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream ls(line.substr(13));
      int64_t kb = -1;
      if (ls >> kb && kb >= 0) return kb * 1024;
    }
  const long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (int64_t)pages * size : -1;
}

void check_memory(const Spec& s, const MemoryEstimate& e) {
  if (const char* v = std::getenv("ZF_SKIP_MEMORY_CHECK"); v && std::string(v) == "1") return;
  if (kSimulated) return;  // a simulated run's buffers are folded (docs/simulation.md): no model-sized memory
  const int64_t avail = available_memory();
  if (avail < 0 || e.total() <= (double)avail) return;
  // the fields behind the largest component
  const bool gpt = s.model.type != "mlp", hf = s.model.type == "hf";
  // an hf model's sizes are its config.json's, not the GPT's model.n_layer, model.n_embd
  const std::string config = s.model.path + "/config.json";
  std::string fields;
  const double m = std::max({e.params + e.optimizer, e.activations, e.records, e.data});
  if (m == e.records)
    fields = s.train.steps > 0 ? s.where("train.steps") + " (" + std::to_string(s.train.steps) + " steps)"
                               : s.where("train.epochs") + " (" + std::to_string(e.steps) + " steps)";
  else if (m == e.activations && hf)
    fields = s.where("train.batch_size") + ", train.eval_batch_size, model.context (and " + config +
             ": hidden_size, num_hidden_layers, vocab_size)";
  else if (m == e.activations)
    fields = gpt ? s.where("train.batch_size") + ", train.eval_batch_size, model.context, model.n_embd, model.n_layer, model.n_head"
                 : s.where("train.batch_size") + ", train.eval_batch_size, model.hidden";
  else if (m == e.data)
    fields = s.where("data.path");
  else if (hf)
    fields = config + ": hidden_size, intermediate_size, num_hidden_layers, vocab_size (the model's size; " +
             s.where("model.path") + ")";
  else
    fields = gpt ? s.where("model.n_layer") + ", model.n_embd, model.context" : s.where("model.hidden");
  throw InputError(fields, "the run would need about " + e.describe() + " of memory for " +
                               std::to_string(e.param_count) + " parameters, but " + gib((double)avail) +
                               " GiB are available (MemAvailable); make the model, batch or run smaller "
                               "(ZF_SKIP_MEMORY_CHECK=1 skips this check)");
}

}  // namespace zf
