// insert_<op>(): the only way graph builders submit work. Each call validates shapes (graph
// build time, throws zf::Error), then submits one task in the context and step of `opt`.
// Handles are passed in the order of the codelet's modes. Shapes: a weight w is (N, K) =
// (out_features, in_features); activations are (B, features).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "runtime/comm.hpp"
#include "runtime/runtime.hpp"

namespace zf {

using kernels::cpu::AdamParams;

// ---- dense layers. A weight w is (N = out, K = in); in_out: it is stored transposed, a (K, N)
// tensor (Param::in_out, docs/zenflow.md), and so is dw.
void insert_matmul_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& y,
                       bool in_out = false);
// y = x w^T + b in one task: the bias added to the product's fp32 sums before y's one rounding
// where y is stored in bf16 (PyTorch's addmm); bitwise insert_matmul_fwd then insert_bias_add
// where y is fp32.
void insert_matmul_bias_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& b,
                           const Tensor& y, bool in_out = false);
void insert_matmul_bwd_weight(const SubmitOptions& opt, const Tensor& dy, const Tensor& x,
                              const Tensor& dw, bool in_out = false);
void insert_matmul_bwd_data(const SubmitOptions& opt, const Tensor& dy, const Tensor& w,
                            const Tensor& dx, bool in_out = false);
// Precision bf16 with each activation and output gradient converted to bf16 once a step instead of
// in each task that multiplies it (models/nets/gpt.cpp): the forward writes x's bf16 copy xh (a tensor
// of x.numel() values of 2 bytes), the data gradient dy's copy dyh, and the weight gradient reads
// the two copies (dy and x name what they were made from, for the shape checks); the same bits as
// the three calls above. Only where matmul_keeps_bf16_operands(opt, rows of x): Runtime::matmul_bf16
// (the CPU device, native bf16), at least kernels::cpu::kMatmulBf16Rows rows, and not turned off
// by Runtime::set_matmul_keep_bf16_operands(false) (RunOptions; the tests compare both paths).
bool matmul_keeps_bf16_operands(const SubmitOptions& opt, int64_t rows);
void insert_matmul_fwd_kept(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& y,
                            const Tensor& xh, bool in_out = false);
void insert_matmul_bwd_data_kept(const SubmitOptions& opt, const Tensor& dy, const Tensor& w, const Tensor& dx,
                                 const Tensor& dyh, bool in_out = false);
void insert_matmul_bwd_weight_kept(const SubmitOptions& opt, const Tensor& dyh, const Tensor& xh, const Tensor& dy,
                                   const Tensor& x, const Tensor& dw, bool in_out = false);
// The CPU multiplies bf16 natively (AVX512_BF16 or AMX, as oneDNN sees it): where not, precision
// bf16's matmuls run in fp32 (Runtime::matmul_bf16, kernels/cpu/kernels.hpp).
bool cpu_native_bf16();
void insert_bias_add(const SubmitOptions& opt, const Tensor& y, const Tensor& b);
void insert_bias_grad(const SubmitOptions& opt, const Tensor& dy, const Tensor& db);

// ---- activations (y = f(x); dx = f'(x) dy)
enum class Activation { Relu, Gelu };
void insert_act_fwd(const SubmitOptions& opt, Activation a, const Tensor& x, const Tensor& y);
void insert_act_bwd(const SubmitOptions& opt, Activation a, const Tensor& x, const Tensor& dy,
                    const Tensor& dx);

// ---- loss. stats is a home tensor of 3 doubles {sum of losses, correct, rows}; with
// accumulate=false they are overwritten, else added to (evaluation over many batches). With
// ignore_negative a negative label marks a row to skip (padded targets): not counted in stats,
// a zero gradient; otherwise a label outside [0, C) fails the run.
void insert_softmax_xent_fwd(const SubmitOptions& opt, const Tensor& logits, const Tensor& labels,
                             const Tensor& probs, const Tensor& stats, bool accumulate,
                             StepStatus* status, bool ignore_negative = false);
// dlogits = (probs - onehot) * scale
void insert_softmax_xent_bwd(const SubmitOptions& opt, const Tensor& probs, const Tensor& labels,
                             const Tensor& dlogits, float scale);
// Both in one task (a training step): stats as the forward's, dlogits = (softmax - onehot) * scale,
// bitwise what the two tasks give; no probabilities written.
void insert_softmax_xent_fwd_bwd(const SubmitOptions& opt, const Tensor& logits, const Tensor& labels,
                                 const Tensor& dlogits, const Tensor& stats, float scale, bool accumulate,
                                 StepStatus* status, bool ignore_negative = false);
// The LM head y = x w^T and its softmax cross-entropy in vocabulary chunks of `chunk` columns
// (kernels::cpu::lm_head_xent): the (N, V) logits are never held; each chunk's are computed once
// for the loss and, with dx and dw, again for the gradients (the head's product twice). stats as
// insert_softmax_xent_fwd's; dx (N, C) fp32 and dw (V, C) (fp32 or stored bf16) written: the
// gradients of the loss times scale. x and w may be stored in bf16. CPU devices only.
void insert_lm_head_xent(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& labels,
                         const Tensor* dx, const Tensor* dw, const Tensor& stats, int chunk, float scale,
                         bool accumulate, StepStatus* status, bool ignore_negative = false);
// The chunk's columns for N rows of a V-id head when the logits may hold at most `most` elements
// (runtime.logits_chunk_elems): chunks of equal width, the last one shorter, N x width <= most
// where one column allows it; 0 when no chunking is needed (most <= 0, or N V <= most)
int lm_head_chunk_cols(int64_t N, int64_t V, int64_t most);
// out[offset + b] = log-likelihood of sequence b of B: the sum over its T rows of logits (B*T, V)
// with targets >= 0 of log softmax(row)[target] (out: a tensor of doubles, updated in place).
void insert_sequence_logprob(const SubmitOptions& opt, const Tensor& logits, const Tensor& targets, const Tensor& out,
                             int64_t offset, int B);
// The generative classifier's training loss (kernels::cpu::gen_class_loss) over B chunks scored
// under K classes (K*B rows of T positions): labels (>= B int32, the first B are the chunks' true
// classes), log_prior (K doubles); dlogits (K*B*T, V) written; stats {sum of chunk losses,
// correct chunks, B} overwritten.
void insert_gen_class_loss(const SubmitOptions& opt, const Tensor& logits, const Tensor& targets, const Tensor& labels,
                           const Tensor& log_prior, const Tensor& dlogits, const Tensor& stats, int K, float lm_weight,
                           StepStatus* status);

// ---- optimizer and data movement. A Slice is [offset, offset + n) of a tensor's elements.
struct Slice {
  size_t offset = 0, n = 0;
};
inline Slice whole(const Tensor& t) { return {0, t.numel()}; }
// AdamW on param[ps] with grad[gs] (* grad_scale), moments m, v (whole tensors of ps.n elements).
void insert_adam_step(const SubmitOptions& opt, const AdamParams& hp, int64_t step, float grad_scale,
                      const Tensor& param, Slice ps, const Tensor& grad, Slice gs, const Tensor& m,
                      const Tensor& v);
// AdamW on param[ps] with grad[gs] (* grad_scale), moments m, v; then grad[gs] = param[ps], the
// updated weights (kernels::cpu::adam_step_result): bitwise insert_adam_step + insert_copy(param ->
// grad) in one pass and one task. Host side only: ZenFlow's host update whose result goes into
// the accumulator it read (graphs/strategies/zenflow/update.cpp).
void insert_adam_step_result(const SubmitOptions& opt, const AdamParams& hp, int64_t step, float grad_scale,
                             const Tensor& param, Slice ps, const Tensor& grad, Slice gs, const Tensor& m,
                             const Tensor& v);
// The device AdamW of several whole parameters in one task (CPU devices only), each part in ranges
// that idle device workers help with. Fp32: bitwise insert_adam_step on each part (x the
// parameter). Bf16 (kernels::cpu::adam_step_bf16): AdamW on the fp32 master x, param = x rounded to
// bf16; Bf16RoundGrad: the gradient rounded to bf16 first (in place). Bitwise [insert_round_bf16(grad)]
// + insert_adam_step(master) + insert_copy(master -> param) + insert_round_bf16(param) on each part.
enum class AdamGroupMode : int { Fp32, Bf16, Bf16RoundGrad };
struct AdamGroupPart {
  const Tensor *x, *grad, *m, *v;
  const Tensor* param = nullptr;  // the bf16 modes: the device parameter written
};
void insert_adam_group(const SubmitOptions& opt, const AdamParams& hp, int64_t step, float grad_scale,
                       const std::vector<AdamGroupPart>& parts, AdamGroupMode mode);
// acc[as] += scale * g[gs]
void insert_accumulate(const SubmitOptions& opt, const Tensor& acc, Slice as, const Tensor& g,
                       Slice gs, float scale);
// ZenFlow's accumulation on the host: acc = s2 * (s1 * src) (first) or acc += s2 * (s1 * src), each
// product rounded to fp32 as insert_scale's; src is what crossed (bf16 or fp16, whole, acc's
// length). A CPU task (submit it to the host context); bitwise what insert_scale twice then
// insert_copy / insert_accumulate give on the fp32 gradient.
void insert_accumulate_host(const SubmitOptions& opt, const Tensor& acc, const Tensor& src, float s1, float s2,
                            bool first);
// dst[ds] = src[ss]; when ds is all of dst the task writes (W) it, else updates it (RW). Between an
// fp32 and a 2-byte tensor the copy converts by the latter's Tensor::half() (bf16 or fp16: round to
// nearest even; back to fp32 exact).
void insert_copy(const SubmitOptions& opt, const Tensor& src, Slice ss, const Tensor& dst, Slice ds);
// x = fp32(bf16(x)) (precision "bf16": device parameters and gradients hold bf16 values)
void insert_round_bf16(const SubmitOptions& opt, const Tensor& x);
// x = fp32(fp16(x)) (precision "fp16"); overflow (one uint32, RW) is set to 1 when a rounded value is
// inf or NaN, else left as it is (the loss scaler's overflow check, graphs/train/loss_scaler.hpp)
void insert_round_fp16(const SubmitOptions& opt, const Tensor& x, const Tensor& overflow);
// x *= s
void insert_scale(const SubmitOptions& opt, const Tensor& x, float s);
// x = 0
void insert_zero(const SubmitOptions& opt, const Tensor& x);

// ---- ZenFlow column operations (kernels/cpu/select.cpp). A weight is (R, C); sel is an int32
// tensor of k sorted column indices. in_out: the weight and its gradient are (C, R) tensors (stored
// transposed, Param::in_out: a column is contiguous) and the selective moments are stored (k, R).
void insert_column_importance(const SubmitOptions& opt, const Tensor& g, const Tensor& imp, bool l2,
                              bool in_out = false);
void insert_topk(const SubmitOptions& opt, const Tensor& imp, const Tensor& sel);
// AdamW on the selected columns of w with the same columns of its gradient g (w's shape); m, v (R, k).
// master != null (precision bf16/fp16, semantics zenflow): AdamW on that fp32 master of the selected
// elements (m's shape; fill: first taken from w, at a selection), written into w's selected elements
// (kernels::cpu::selective_adam_master)
void insert_selective_adam(const SubmitOptions& opt, const AdamParams& hp, int64_t step, const Tensor& w,
                           const Tensor& sel, const Tensor& g, const Tensor& m, const Tensor& v,
                           bool in_out = false, const Tensor* master = nullptr, bool fill = false);
// Merge of a host result tile into the device weight: w[ws] = src except selected columns
// (sel == nullptr: every column). src is fp32, bf16 or fp16 (then unpacked exactly). When log != nullptr the execution is recorded there.
struct MergeEvent {
  int64_t job;          // host update index
  int64_t newest_step;  // last step whose gradient the update contains
  int64_t merge_step;   // step at whose end it is applied
  double start_us, end_us;
};
class MergeLog {
 public:
  void add(const MergeEvent& e) noexcept;
  std::vector<MergeEvent> events() const;

 private:
  mutable std::mutex mu_;
  std::vector<MergeEvent> ev_;
};
// ZeRO stage 3 (docs/zenflow.md, "ZeRO stage 3"): a 1-D tensor holding the flat elements
// [base, base + n) of a weight's storage (logical (R, C), stored (C, R) with in_out).
struct WeightShard {
  size_t base = 0, n = 0;
  int R = 0, C = 0;
  bool in_out = false;
};
// shard != null: w is that shard (ws stays in the whole weight's offsets; in_out is the shard's)
void insert_merge(const SubmitOptions& opt, const Tensor& src, const Tensor& w, Slice ws, const Tensor* sel,
                  MergeLog* log, const MergeEvent& ev, bool in_out = false, const WeightShard* shard = nullptr);
// ZeRO stage 3 (select_shard.cpp, CPU workers): the shard's part of ZenFlow's column operations.
// imp (C) = the column importance of the shard g's elements (the others count as zeros).
void insert_column_importance_shard(const SubmitOptions& opt, const Tensor& g, const WeightShard& s, const Tensor& imp,
                                    bool l2);
// AdamW on the selected elements of the shard w with the shard g; m, v hold the shard's part of the
// whole weight's selective moments, from selected_elements_before(s.base) on (at least
// selective_moments_capacity(s, k) elements). master != null: the shard's part of the fp32 master of
// the selected elements, indexed as m (insert_selective_adam).
void insert_selective_adam_shard(const SubmitOptions& opt, const AdamParams& hp, int64_t step, const Tensor& w,
                                 const WeightShard& s, const Tensor& sel, const Tensor& g, const Tensor& m,
                                 const Tensor& v, const Tensor* master = nullptr, bool fill = false);
// Selected elements of the whole weight before flat element e (sel: k sorted columns): the shard
// [a, b) owns the selective moments [before(a), before(b)) of the whole (R, k) or (k, R) ones.
size_t selected_elements_before(size_t e, const WeightShard& s, const int32_t* sel, int k);
// The most selected elements the shard can hold, over every selection of k columns (at least 1).
size_t selective_moments_capacity(const WeightShard& s, int k);
// out (2 doubles) = {sum |g|, sum over selected columns of |g|}
void insert_grad_mass(const SubmitOptions& opt, const Tensor& g, const Tensor& sel, const Tensor& out,
                      bool in_out = false);

// ---- gradient clipping (clip.cpp, docs/spec.md "gradient_clipping", graphs/strategies/clip.hpp)
// partial[slot] (doubles) = sum of x[xs]^2
void insert_sumsq(const SubmitOptions& opt, const Tensor& x, Slice xs, const Tensor& partial, size_t slot);
// One clip point's result, logged by the CPU factor task (a CUDA one is read back instead).
struct ClipRecord {
  int64_t step;
  float norm, factor;
  bool clipped;
};
class ClipLog {
 public:
  void add(const ClipRecord& r) noexcept;
  std::vector<ClipRecord> records() const;

 private:
  mutable std::mutex mu_;
  std::vector<ClipRecord> rec_;
};
// out (3 floats) = {factor, norm, clipped} from every double of `partials` (in order) divided by
// sq_div: kernels::cpu::clip_factor. On a CUDA worker: one partial tensor. log: where a CPU
// execution records {step, norm, factor, clipped} (null: nowhere).
void insert_clip_factor(const SubmitOptions& opt, const std::vector<const Tensor*>& partials, double sq_div,
                        float clip, float loss_scale, float extra, const Tensor& out, ClipLog* log, int64_t step);
// x[xs] *= factor[0]
void insert_scale_by(const SubmitOptions& opt, const Tensor& x, Slice xs, const Tensor& factor);

// ---- data parallelism (allreduce.cpp, docs/data-parallel.md): x <- scale * sum over the ranks of
// x (MPI on CPU workers, NCCL on CUDA workers), ordered with every other collective of this
// process through the runtime's comm token.
// wire: the format the values cross in (codelets/wire.hpp: 2-byte formats are summed in rank order
// by each segment's owner; fp32 by MPI's or NCCL's own reduction).
void insert_allreduce(const SubmitOptions& opt, const Tensor& x, float scale, const Comm& comm,
                      Wire wire = Wire::Fp32);
// ZeRO stage 1 and 2 (docs/data-parallel.md): bounds = ranks + 1 element offsets of x, rank r owning
// [bounds[r], bounds[r+1]) (the vector must outlive the task). reduce_scatter: this rank's segment
// <- scale * its sum over the ranks, the other segments <- 0. allgather: every segment <- its
// owner's. allreduce_partials: total (one double) <- the sum over the ranks of every double in
// `partials` (the clip's sums of squares).
void insert_reduce_scatter(const SubmitOptions& opt, const Tensor& x, float scale, const std::vector<size_t>& bounds,
                           const Comm& comm, Wire wire = Wire::Fp32);
// ZenFlow at stage 2: the columns `sel` (int32) of every row of the 2-D x <- their sum over the
// ranks, one all-reduce of rows x k values (CPU workers only; in_out: x stored (cols, rows), as
// Param::in_out).
void insert_allreduce_columns(const SubmitOptions& opt, const Tensor& x, const Tensor& sel, const Comm& comm,
                              bool in_out, Wire wire = Wire::Fp32);
void insert_allgather(const SubmitOptions& opt, const Tensor& x, const std::vector<size_t>& bounds, const Comm& comm);
void insert_allreduce_partials(const SubmitOptions& opt, const std::vector<const Tensor*>& partials,
                               const Tensor& total, const Comm& comm);
// ZeRO stage 3 (codelets/shard.cpp; CPU workers): shard holds this rank's segment of x, shard.numel()
// >= its length. gather_shards: x (written whole) <- every rank's shard, each at its segment.
// reduce_scatter_shard: shard <- scale * the sum over the ranks of x's segment (x is left changed).
void insert_gather_shards(const SubmitOptions& opt, const Tensor& shard, const Tensor& x,
                          const std::vector<size_t>& bounds, const Comm& comm);
void insert_reduce_scatter_shard(const SubmitOptions& opt, const Tensor& x, const Tensor& shard, float scale,
                                 const std::vector<size_t>& bounds, const Comm& comm, Wire wire = Wire::Fp32);
// flag (uint32 words) <- bitwise OR over the ranks (CPU workers): the fp16 overflow flag under stage 2
void insert_allreduce_flag(const SubmitOptions& opt, const Tensor& flag, const Comm& comm);

// ---- data: x (B, D) float = pixels/255 of the rows `indices` of a uint8 (rows, D) table;
// labels (B) int32. The table must outlive the task.
struct ByteTable {
  const uint8_t* data;
  int64_t rows, cols;
  const uint8_t* labels;  // (rows)
  int32_t num_classes;
};
void insert_load_batch(const SubmitOptions& opt, const ByteTable* table,
                       const std::vector<int32_t>& indices, const Tensor& x, const Tensor& labels,
                       StepStatus* status);

// ---- GPT layers (embedding.cpp, layernorm.cpp, attention.cpp, pool.cpp). tokens and lengths
// are int32; activations are (B*T, C) with T <= the model's context.
// x = wte[tokens] + wpe[t]; wte (V, C), wpe (T_ctx, C), tokens (B, T), x (B*T, C)
void insert_embedding_fwd(const SubmitOptions& opt, const Tensor& tokens, const Tensor& wte,
                          const Tensor& wpe, const Tensor& x);
// dwte, dwpe (overwritten) from dx (B*T, C); rows of dwpe beyond T are zero
void insert_embedding_bwd(const SubmitOptions& opt, const Tensor& tokens, const Tensor& dx,
                          const Tensor& dwte, const Tensor& dwpe);
// x (B*T, C) = wte[tokens]: the token embedding alone (Llama, Qwen2); dwte (V, C) overwritten with
// the scatter-add of dx in position order (the same kernels as above, without wpe)
void insert_token_embedding_fwd(const SubmitOptions& opt, const Tensor& tokens, const Tensor& wte, const Tensor& x);
void insert_token_embedding_bwd(const SubmitOptions& opt, const Tensor& tokens, const Tensor& dx, const Tensor& dwte);
// x (B*T, C) [b, t] += table (K, C) [ids[b]] (ids (B) int32 in [0, K)); the backward overwrites
// dtable with the sums of dx over each class's sequences and positions
void insert_class_embedding_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& table, const Tensor& ids);
void insert_class_embedding_bwd(const SubmitOptions& opt, const Tensor& dx, const Tensor& ids, const Tensor& dtable);
// y (N, C) = LayerNorm(x) * w + b, rstd = 1/sqrt(var + eps) (eps > 0: 1e-5 is GPT-2's and
// torch.nn.LayerNorm's default; a Hugging Face GPT-2 takes config.json's layer_norm_epsilon);
// mean, rstd (N) saved
void insert_layernorm_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& b,
                          const Tensor& y, const Tensor& mean, const Tensor& rstd, float eps = 1e-5f);
void insert_layernorm_bwd(const SubmitOptions& opt, const Tensor& dy, const Tensor& x, const Tensor& mean,
                          const Tensor& rstd, const Tensor& w, const Tensor& dx, const Tensor& dw,
                          const Tensor& db);
// Causal self-attention over qkv (B*T, 3C) with n_head heads: out (B*T, C), lse (B, NH, T) fp32,
// each row's log-sum-exp, saved for the backward (no (T, T) matrix). B and T come from lse's shape.
void insert_attention_fwd(const SubmitOptions& opt, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          StepStatus* status);
void insert_attention_bwd(const SubmitOptions& opt, const Tensor& dout, const Tensor& qkv, const Tensor& lse,
                          const Tensor& dqkv, StepStatus* status);
// The bytes of scratch an attention (either kind) holds at these shapes, about: on a CUDA worker,
// the kernels' stream-ordered scratch per call (row blocks of at most 64 MiB, and under bf16 the
// operands' 2-byte copies); on the CPU, per thread that runs a tile (reused; B does not enter;
// gpt: the GPT's attention, whose products are bf16 under bf16 where the grouped-query one's
// stay fp32).
size_t attention_workspace_bytes(int B, int T, int H, int Hkv, int hs, bool gpt, bool bf16, bool cuda);
// y (B, C) = mean of x (B*T, C) over the first len[b] positions of sequence b; len (B) int32
void insert_mean_pool_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& len, const Tensor& y);
void insert_mean_pool_bwd(const SubmitOptions& opt, const Tensor& dy, const Tensor& len, const Tensor& dx);
// y (B, C) = per-feature max of x over the first len[b] positions; the backward reads x again
void insert_max_pool_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& len, const Tensor& y);
void insert_max_pool_bwd(const SubmitOptions& opt, const Tensor& x, const Tensor& dy, const Tensor& len,
                         const Tensor& dx);
// y (B, C) = x at position len[b] - 1 of sequence b; the backward writes dx (B*T, C)
void insert_last_pool_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& len, const Tensor& y);
void insert_last_pool_bwd(const SubmitOptions& opt, const Tensor& dy, const Tensor& len, const Tensor& dx);

// ---- Llama / Qwen2 layers (llama.cpp, attention.cpp; docs/llama.md). Activations (B*T, C).
// y (N, C) = x * rstd * w, rstd (N) = 1/sqrt(mean(x^2) + eps) saved (config.json's rms_norm_eps, >= 0)
void insert_rmsnorm_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& y,
                        const Tensor& rstd, float eps);
void insert_rmsnorm_bwd(const SubmitOptions& opt, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                        const Tensor& w, const Tensor& dx, const Tensor& dw);
// The rotary table (2, Tmax, hs/2), cos then sin (kernels::cpu::rope_table), as a home tensor
// filled now, at graph build; throws zf::Error when p is unusable (kernels::cpu::rope_params_problem)
// or hs is odd.
Tensor make_rope_table(const kernels::cpu::RopeParams& p, int Tmax, int hs, const std::string& name);
// In place on x (B*T, n_head*hs): the rotate-half rotation of each head by the angles of
// positions pos0 .. pos0 + T - 1 (pos0 + T <= Tmax); the backward rotates dx back.
void insert_rope_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& table, int T, int n_head, int pos0 = 0);
void insert_rope_bwd(const SubmitOptions& opt, const Tensor& dx, const Tensor& table, int T, int n_head, int pos0 = 0);
// out = silu(gate) * up, elementwise (gate, up, out of one size); the backward writes dgate, dup
void insert_swiglu_fwd(const SubmitOptions& opt, const Tensor& gate, const Tensor& up, const Tensor& out);
void insert_swiglu_bwd(const SubmitOptions& opt, const Tensor& gate, const Tensor& up, const Tensor& dout,
                       const Tensor& dgate, const Tensor& dup);
// Causal grouped-query attention: q and out (B*T, H*hs), k and v (B*T, n_kv_head*hs), lse (B, H, T)
// (B, H and T from lse's shape); query head h reads KV head h / (H / n_kv_head).
void insert_gqa_attention_fwd(const SubmitOptions& opt, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, int n_kv_head, StepStatus* status);
void insert_gqa_attention_bwd(const SubmitOptions& opt, const Tensor& dout, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, int n_kv_head, StepStatus* status);

// ---- text data (data.cpp). The sources must outlive the tasks.
// A sequence of `size` token ids, `width` bytes each in host order at `data`: 1 (bytes, the text
// datasets), 2 or 4 (token files, models/data/tokens.hpp).
struct TextSource {
  const uint8_t* data;
  int64_t size;
  int32_t width = 1;
};
// tokens, targets (B, T) int32: windows text[s .. s+T] for each start s (s + T < size)
void insert_load_windows(const SubmitOptions& opt, const TextSource* text, const std::vector<int64_t>& starts,
                         const Tensor& tokens, const Tensor& targets, StepStatus* status);
// Fixed language-model rows (models/data/lm_rows.hpp): tokens and targets (rows, T) int32, a target of
// -1 carrying no loss.
struct RowTable {
  const int32_t* tokens;
  const int32_t* targets;
  int64_t rows;
  int32_t T;
};
// tokens (B, T), targets (B*T) int32 of the table rows `rows` (each in [0, rows))
void insert_load_rows(const SubmitOptions& opt, const RowTable* table, const std::vector<int32_t>& rows,
                      const Tensor& tokens, const Tensor& targets, StepStatus* status);
// A padded byte table of sequences: data (rows, T), lengths in [1, T], labels in [0, num_classes).
struct SequenceTable {
  const uint8_t* data;
  int64_t rows;
  int32_t T;
  const int32_t* lengths;
  const int32_t* labels;
  int32_t num_classes;
};
// tokens (B, T), len (B), labels (B) int32 of the table rows `rows`
void insert_load_sequences(const SubmitOptions& opt, const SequenceTable* table, const std::vector<int32_t>& rows,
                           const Tensor& tokens, const Tensor& len, const Tensor& labels, StepStatus* status);
// tokens (B, T), targets (B*T), classes (B), labels (B) int32 of class-conditioned chunks of
// `text` (kernels::cpu::gather_chunks); each chunk must lie inside the text and hold 1 to T bytes
void insert_load_chunks(const SubmitOptions& opt, const TextSource* text, const std::vector<kernels::cpu::ChunkRef>& chunks,
                        const Tensor& tokens, const Tensor& targets, const Tensor& classes, const Tensor& labels,
                        StepStatus* status);

}  // namespace zf
