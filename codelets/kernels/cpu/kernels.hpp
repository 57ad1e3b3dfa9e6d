// CPU kernels: plain C++ on pointers and sizes. No StarPU, no exceptions; inputs are trusted
// (shapes are validated when a graph is built). Layouts are row-major; shapes are written
// llm.c style on every buffer. A weight W has shape (N = out_features, K = in_features);
// "column j" of W is W[:, j], the weights that read input feature j (ZenFlow's unit of selection).
#pragma once
#include <cstddef>
#include <cstdint>

namespace zf::kernels::cpu {

// y (B, N) = x (B, K) * w (N, K)^T. w_in_out: the weight is stored transposed, w (K, N) row-major
// (docs/zenflow.md: a column W[:, j] is then contiguous), and so is dw below. Deterministic for a
// given kernel library; from 64 rows oneDNN (the same primitive shapes in both layouts, but the
// operands' layouts differ), below OpenBLAS or our own loops: the two layouts round differently,
// both within rounding of the exact result (MatmulInOut.*), bitwise equal only for the weight
// gradient of at most 4 rows, which is our own loop in both.
// bf16, where the CPU has native bf16 (native_bf16() in kernels/cpu/gemm.hpp): the two operands
// are rounded to bf16 and multiplied with fp32 sums into the fp32 output (what PyTorch's autocast
// to bf16 does): from 64 rows by oneDNN's bf16 primitives, below by the fp32 paths on the rounded
// operands (a product of two bf16 values is exact in fp32). On other CPUs fp32 as without it.
void matmul_fwd(const float* x, const float* w, float* y, int B, int K, int N, bool w_in_out = false,
                bool bf16 = false);
// dw (N, K) = dy (B, N)^T * x (B, K)   (accumulate: dw += ...); dw_in_out: dw (K, N) = x^T dy
void matmul_bwd_weight(const float* dy, const float* x, float* dw, int B, int K, int N, bool accumulate,
                       bool dw_in_out = false, bool bf16 = false);
// dx (B, K) = dy (B, N) * w (N, K)   (w_in_out: w (K, N))
void matmul_bwd_data(const float* dy, const float* w, float* dx, int B, int K, int N, bool w_in_out = false,
                     bool bf16 = false);

// Precision bf16 with each activation and output gradient converted once (codelets/matmul.cpp's
// kept-operand codelets, models/nets/gpt.cpp): from kMatmulBf16Rows rows and where native_bf16() only.
// The forward and the data gradient compute what matmul_fwd / matmul_bwd_data with bf16 do and
// also leave their fp32 input's bf16 copy (kernels/bf16.hpp's rounding, B*K values of x into xh,
// B*N of dy into dyh); the weight gradient multiplies those copies, as matmul_bwd_weight with
// bf16 would convert them again: the same bf16 values in the same tiles, so the same bits.
constexpr int kMatmulBf16Rows = 64;
void matmul_fwd_keep_x(const float* x, const float* w, float* y, uint16_t* xh, int B, int K, int N, bool w_in_out);
void matmul_bwd_data_keep_dy(const float* dy, const float* w, float* dx, uint16_t* dyh, int B, int K, int N,
                             bool w_in_out);
void matmul_bwd_weight_bf16(const uint16_t* dyh, const uint16_t* xh, float* dw, int B, int K, int N, bool accumulate,
                            bool dw_in_out);
// The forward and the data gradient with the weight given in bf16 (its bits: a parameter stored
// in 2 bytes, Tensor::store_half) instead of converted in the call: the same bits.
void matmul_fwd_keep_x_wh(const float* x, const uint16_t* wh, float* y, uint16_t* xh, int B, int K, int N,
                          bool w_in_out);
void matmul_bwd_data_keep_dy_wh(const float* dy, const uint16_t* wh, float* dx, uint16_t* dyh, int B, int K, int N,
                                bool w_in_out);
// Calls of the kept-operand products above since the process started (the tests check that the
// kept path ran).
uint64_t matmul_kept_bf16_calls();

// The three products with each operand given either as fp32 or as bf16 bits (a tensor stored in
// 2 bytes, Tensor::store_half, read as it is: precision bf16's weights and the activations that
// only a matmul reads, models/nets/gpt.cpp and llama.cpp). bf16 from kMatmulBf16Rows rows on a
// native-bf16 CPU: the fp32 operand is converted in the call and the product runs on the two bf16
// operands; otherwise the bf16 operands are widened (exact) and the fp32 functions above run.
// Either way bitwise what those give on the widened operands (a bf16 value rounds to itself).
struct MatOperand {
  const void* p;  // const float*, or const uint16_t* (bf16 bits)
  bool bf16;
};
void matmul_fwd_mixed(MatOperand x, MatOperand w, float* y, int B, int K, int N, bool w_in_out, bool bf16);
void matmul_bwd_weight_mixed(MatOperand dy, MatOperand x, float* dw, int B, int K, int N, bool accumulate,
                             bool dw_in_out, bool bf16);
void matmul_bwd_data_mixed(MatOperand dy, MatOperand w, float* dx, int B, int K, int N, bool w_in_out, bool bf16);

// y (B, N) = x w^T (+ b): the forward with its output as stored (Ew, below: fp32, or bf16 written
// by the product's tiles, where the 2-byte wrapper would have rounded a whole fp32 copy) and an
// optional bias (b.p null: none; fp32 or bf16 bits) added in the tile, in fp32, before the one
// rounding: PyTorch's addmm (bias and product rounded to bf16 once), where a separate bias add on
// a bf16 output rounds twice. Each output element is matmul_fwd_mixed's sum, plus b in fp32, then
// rounded if y is bf16: with an fp32 y, bitwise matmul_fwd_mixed followed by bias_add.
struct Ew;
void matmul_fwd_out(MatOperand x, MatOperand w, MatOperand b, Ew y, int B, int K, int N, bool w_in_out, bool bf16);
// dx = dy w with dx as stored: fp32 (matmul_bwd_data_mixed), or bf16 rounded by the product's tiles
// (matmul_bwd_data_mixed's sums rounded once: the bits of the 2-byte wrapper's rounding)
void matmul_bwd_data_out(MatOperand dy, MatOperand w, Ew dx, int B, int K, int N, bool w_in_out, bool bf16);

// y (B, N) += b (N)
void bias_add(float* y, const float* b, int B, int N);
// db (N) = sum_i dy (B, N)[i, :]
void bias_grad(const float* dy, float* db, int B, int N);

// y = max(x, 0); dx = dy * (x > 0)
void relu_fwd(const float* x, float* y, size_t n);
void relu_bwd(const float* x, const float* dy, float* dx, size_t n);
// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_fwd(const float* x, float* y, size_t n);
void gelu_bwd(const float* x, const float* dy, float* dx, size_t n);

// The same elementwise kernels on buffers as stored: fp32, or bf16 (precision bf16's 2-byte
// tensors, CodeletDef::cpu_bf16_as_is). Each bf16 operand is widened block by block (2048
// values) in the worker's cache, the block computed in fp32 exactly as the kernels above, and
// what is written rounded to bf16 (kernels/bf16.hpp's rounding): the bits of widening the whole
// buffers, the fp32 kernel and rounding its output back, in one pass over memory. Where every
// operand is bf16 (GELU forward and backward, SwiGLU forward and backward, the accumulation),
// the values are widened and rounded in registers instead of through the blocks: the same bits.
struct Ew {
  void* p;
  bool bf16;
};
void bias_add_mixed(Ew y, const float* b, int B, int N);
// The token embedding (no positions: embedding_fwd / embedding_bwd with wpe null) on the table, x
// and their gradients as stored: the bits of widening them whole, the fp32 kernel, rounding its
// output (the backward sums each row's positions in fp32 in their order, then rounds the row once)
void token_embedding_fwd_mixed(const int32_t* tok, Ew wte, Ew x, int B, int T, int C);
void token_embedding_bwd_mixed(const int32_t* tok, Ew dx, Ew dwte, int B, int T, int C, int V);
// The LM head's product and its softmax cross-entropy in vocabulary chunks of Vc columns, never
// holding the (N, V) logits: x (N, C) and w (V, C) as stored (fp32 or bf16 bits; bf16 products as
// the matmuls' *_mixed), labels (N) as softmax_xent_fwd's (negative: ignored). The forward takes
// each row's max, sum of exp(z - max) (rescaled when a later chunk raises the max) and first
// argmax over the chunks in order; returns the loss sum and the counts as softmax_xent_fwd. With
// dx: each chunk's logits again, their gradient (softmax - onehot) * scale, dw's rows of the
// chunk written (dw (V, C), fp32 or bf16 rounded from the fp32 product) and dx (N, C) = the sum
// of the chunks' dlogits w_c in chunk order. Within rounding of the whole-logits path (the sum of
// exp is taken chunk by chunk); bitwise independent of the thread count.
double lm_head_xent(MatOperand x, MatOperand w, const int32_t* labels, float* dx, Ew dw, int N, int C, int V,
                    int Vc, float scale, bool bf16, int64_t* correct, int64_t* counted);
void bias_grad_mixed(Ew dy, float* db, int B, int N);  // bias_grad's sums, bf16 rows widened in registers
void act_fwd_mixed(bool gelu, Ew x, Ew y, size_t n);            // relu_fwd or gelu_fwd
void act_bwd_mixed(bool gelu, Ew x, Ew dy, Ew dx, size_t n);    // relu_bwd or gelu_bwd
void swiglu_fwd_mixed(Ew gate, Ew up, Ew out, size_t n);
void swiglu_bwd_mixed(Ew gate, Ew up, Ew dout, Ew dgate, Ew dup, size_t n);
void accumulate_mixed(Ew acc, Ew g, size_t n, float scale);  // acc += scale g, in parallel ranges
// The row kernels the same way, tile by tile (their tiles of rows: the bits of the whole-buffer
// widening, however the tiles are run): LayerNorm (layernorm.cpp) and RMSNorm, the rotary
// embedding (llama.cpp); the weights (C) and their gradients may be bf16 too. The statistics
// (mean, rstd) stay fp32.
void layernorm_fwd_mixed(Ew x, Ew w, Ew b, Ew y, float* mean, float* rstd, int N, int C, float eps);
void layernorm_bwd_mixed(Ew dy, Ew x, const float* mean, const float* rstd, Ew w, Ew dx, Ew dw, Ew db, int N, int C);
void rmsnorm_fwd_mixed(Ew x, Ew w, Ew y, float* rstd, int N, int C, float eps);
void rmsnorm_bwd_mixed(Ew dy, Ew x, const float* rstd, Ew w, Ew dx, Ew dw, int N, int C);
void rope_mixed(bool fwd, Ew x, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0);

// Row-wise softmax + cross-entropy over logits (B, C) with integer labels (B); a negative label
// marks a row to ignore (padded language-model targets): it adds no loss and is not counted.
// probs (B, C) receives the softmax of every row; returns the SUM of per-row losses (double
// accumulator) and writes the number of rows whose argmax (lowest index on ties) equals the
// label, and the number of rows counted (labels >= 0).
double softmax_xent_fwd(const float* logits, const int32_t* labels, float* probs, int B, int C,
                        int64_t* correct, int64_t* counted = nullptr);
// dlogits (B, C) = (probs - onehot(labels)) * scale   (scale = 1/B for a mean loss); 0 on the
// rows with a negative label
void softmax_xent_bwd(const float* probs, const int32_t* labels, float* dlogits, int B, int C,
                      float scale);
// Both in one pass over the rows (a training step's loss): the forward's loss and counts, and
// dlogits = (softmax - onehot) * scale, bitwise what softmax_xent_fwd then softmax_xent_bwd give.
double softmax_xent_fwd_bwd(const float* logits, const int32_t* labels, float* dlogits, int B, int C, float scale,
                            int64_t* correct, int64_t* counted = nullptr);
// Log-likelihood of each of B sequences: out[b] = sum over t with targets[b*T + t] >= 0 of
// log softmax(logits[b*T + t])[target] (logits (B*T, V); the same log-sum-exp as the loss above).
void sequence_logprob(const float* logits, const int32_t* targets, int B, int T, int V, double* out);
// The generative classifier's training loss. B chunks, each scored under all K classes: rows
// [(k*B + b)*T, (k*B + b + 1)*T) of logits (K*B*T, V) and targets (K*B*T, -1 = padding, the same
// bytes under every k) are chunk b conditioned on class k. With s[k, b] = log p(chunk b | k), the
// posterior p[k, b] = softmax_k(s[k, b] + log_prior[k]) and labels (B) y_b, the loss is
//   L = (1/B) sum_b -log p[y_b, b]  +  lm_weight * (mean over the scored bytes of the true-class
//       rows of -log p(byte))
// (classification by Bayes' rule, trained discriminatively, plus the language-model loss that keeps
// the likelihoods anchored). Returns the SUM over b of -log p[y_b, b]; *correct = chunks whose
// argmax (lowest class on ties) is y_b. dlogits (K*B*T, V) = dL/dlogits:
//   w[k, b] (softmax(row) - onehot(target)), w[k, b] = ([k == y_b] - p[k, b]) / B + [k == y_b]
//   lm_weight / scored, and 0 on padded rows.
double gen_class_loss(const float* logits, const int32_t* targets, const int32_t* labels, const double* log_prior,
                      int K, int B, int T, int V, float lm_weight, float* dlogits, int64_t* correct);

struct AdamParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
};
// AdamW as in PyTorch's torch.optim.AdamW (decoupled weight decay, bias correction):
//   p -= (lr*wd) p;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// g is multiplied by grad_scale first. step t is 1-based. Elementwise: any split of [0, n)
// into pieces gives bitwise the same result as one call, and the AVX-512, AVX2 and scalar
// builds give bitwise the same results (same operation order, no FMA). Memory-bound: 28 bytes
// per parameter; callers tile on multiples of 16 elements to keep tiles SIMD-aligned.
void adam_step(float* p, const float* g, float* m, float* v, size_t n, const AdamParams& hp,
               int64_t step, float grad_scale);
// The accumulation and the host update in one pass over memory (36 bytes per parameter instead
// of 12 + 28 + 4 for the three separate calls), measured by tools/bench_host_adam.cpp
// (experiments/host-adam); no step graph uses it. Per element i, exactly:
//   a = acc[i] + g[i];  adam_step on p[i], m[i], v[i] with gradient a (so a * grad_scale);  acc[i] = 0
// Bitwise equal to accumulate(acc, g, n, 1.0f); adam_step(p, acc, m, v, n, hp, step, grad_scale);
// zero(acc, n). Buffers must not overlap. Elementwise: any split of [0, n) gives the same result.
void adam_step_accumulate(float* p, float* acc, const float* g, float* m, float* v, size_t n,
                          const AdamParams& hp, int64_t step, float grad_scale);
// ZenFlow's host update with its result copy in one pass: adam_step on p with gradient g, then
// g[i] = p[i] (the gradient's buffer holds the updated weights, 4 bytes per parameter less to read
// than a copy after it). Bitwise equal to adam_step(p, g, m, v, ...); copy(g, p, n).
void adam_step_result(float* p, float* g, float* m, float* v, size_t n, const AdamParams& hp, int64_t step,
                      float grad_scale);
// Precision bf16's device AdamW in one pass (device-adam on a CPU device): AdamW on the fp32
// master with gradient g, then param[i] = the new master[i] rounded to bf16 (kernels/bf16.hpp);
// round_grad: g[i] rounded to bf16 first, and stored back so. Bitwise equal to
// [round_bf16(g, n);] adam_step(master, g, m, v, ...); copy(param, master, n); round_bf16(param, n).
// Buffers must not overlap. Elementwise: any split of [0, n) gives the same result.
void adam_step_bf16(float* master, float* g, float* m, float* v, float* param, size_t n, const AdamParams& hp,
                    int64_t step, float grad_scale, bool round_grad);
// adam_step_bf16 with the gradient and the parameter each fp32 or a bf16-stored buffer (2 bytes,
// Ew): bitwise adam_step_bf16 on the widened gradient with the parameter packed after (a bf16
// gradient is already rounded: round_grad leaves it as it is). Both bf16 (device-adam's bf16
// run): one pass, the gradient widened and the parameter rounded in registers; a mix: block by
// block in the cache.
void adam_step_bf16_mixed(float* master, Ew g, float* m, float* v, Ew param, size_t n, const AdamParams& hp,
                          int64_t step, float grad_scale, bool round_grad);

// ---- ZenFlow: column selection and selective updates. A weight g/w is (R, C) row-major;
// column j is [:, j]; sel holds k column indices, sorted ascending. in_out: the weight (and its
// gradient) is stored transposed, (C, R) row-major, so column j is the contiguous row j of the
// storage; the selective moments m, v are then stored (k, R). Every result is bitwise the same
// as the (R, C) kernel's on the same logical values, except grad_mass's double sums, which run in
// storage order.
// imp (C) = per-column importance of g: L1 sum_i |g[i,j]| (l2 = false) or squared L2 sum_i g[i,j]^2.
void column_importance(const float* g, int R, int C, bool l2, float* imp, bool in_out = false);
// sel (k) = the k columns of largest imp, ties broken by the lower index, returned sorted
// ascending. NaN counts as smallest. Requires 1 <= k <= C.
void topk_columns(const float* imp, int C, int k, int32_t* sel);
// out (R, k) = w[:, sel]
void gather_columns(const float* w, int R, int C, const int32_t* sel, int k, float* out);
// w[:, sel] = in (R, k)
void scatter_columns(const float* in, int R, int C, const int32_t* sel, int k, float* w);
// AdamW on the selected columns of w (R, C) with the same columns of the gradient g (R, C) and
// moments m, v (R, k); element by element identical to adam_step on the gathered values.
void selective_adam(float* w, int R, int C, const int32_t* sel, int k, const float* g,
                    float* m, float* v, const AdamParams& hp, int64_t step, bool in_out = false);
// selective_adam with an fp32 master x of the selected elements, shaped like m and v (precision
// bf16/fp16, semantics zenflow: docs/zenflow.md): fill (the update of a selection) first copies the
// selected values of w into x; AdamW runs on x; w's selected elements then take x's values (the
// trainer rounds them). Element by element identical to adam_step on x, then a scatter of x.
void selective_adam_master(float* w, int R, int C, const int32_t* sel, int k, const float* g, float* x, bool fill,
                           float* m, float* v, const AdamParams& hp, int64_t step, bool in_out = false);
// selective_adam (x null) or selective_adam_master (x non-null) on w and g as stored: fp32 or bf16
// (Ew; precision bf16's 2-byte weights and gradients as they are), the selected elements of a bf16
// w written rounded: bitwise the fp32 kernels on the widened buffers with w rounded back after.
void selective_adam_mixed(Ew w, int R, int C, const int32_t* sel, int k, Ew g, float* x, bool fill, float* m,
                          float* v, const AdamParams& hp, int64_t step, bool in_out);
// dst (R, C) flat elements [off, off + n) = src[0, n) except where the column is selected
// (sel may be null with k = 0: every column is merged). Returns elements written.
// in_out_rows > 0: dst is stored (C, R) with R = in_out_rows (flat element e is in column e / R).
// base > 0 (ZeRO stage 3): dst holds only the weight's flat elements from base on (a shard), so
// element e is written at dst[e - base] (off >= base).
size_t merge_unselected(float* dst, int C, const float* src, size_t off, size_t n,
                        const int32_t* sel, int k, int in_out_rows = 0, size_t base = 0);
// total = sum |g|; selected = sum over the selected columns of |g| (double accumulators, in
// storage order)
void grad_mass(const float* g, int R, int C, const int32_t* sel, int k, double* total,
               double* selected, bool in_out = false);

// ZeRO stage 3 (docs/zenflow.md, "ZeRO stage 3"): a shard holds the flat elements [lo, hi) of the
// weight's storage, (R, C) or (C, R) with in_out. The selective moments of the whole weight, (R, k)
// or (k, R), list the selected elements in storage order, so a shard's selected elements own the
// contiguous moments [selected_before(lo), selected_before(hi)).
// The number of selected elements before flat element e (e <= R x C).
size_t selected_before(size_t e, int R, int C, const int32_t* sel, int k, bool in_out);
// imp (C) = the column importance of the shard g (hi - lo elements): column_importance of the
// whole weight with every other element zero, bitwise (the same additions in the same order).
void column_importance_segment(const float* g, size_t lo, size_t hi, int R, int C, bool l2, float* imp,
                               bool in_out);
// selective_adam on the shard's selected elements: w, g the shard, m, v its moments (from
// selected_before(lo) on); element by element identical to selective_adam on the whole weight.
void selective_adam_segment(float* w, size_t lo, size_t hi, int R, int C, const int32_t* sel, int k,
                            const float* g, float* m, float* v, const AdamParams& hp, int64_t step, bool in_out);
// selective_adam_segment with the shard's part of the master x (indexed as m and v), as
// selective_adam_master.
void selective_adam_segment_master(float* w, size_t lo, size_t hi, int R, int C, const int32_t* sel, int k,
                                   const float* g, float* x, bool fill, float* m, float* v, const AdamParams& hp,
                                   int64_t step, bool in_out);

// acc += scale * g
void accumulate(float* acc, const float* g, size_t n, float scale);
// dst = src
void copy(float* dst, const float* src, size_t n);
// x = 0
void zero(float* x, size_t n);

// ---- bf16 (kernels/bf16.hpp: round to nearest even, NaN kept, bf16 -> fp32 exact)
// y (n) = bf16(x); y (n) = fp32(x); x = fp32(bf16(x)) in place
void pack_bf16(const float* x, uint16_t* y, size_t n);
void unpack_bf16(const uint16_t* x, float* y, size_t n);
void round_bf16(float* x, size_t n);

// merge_unselected from a 2-byte source, unpacked to fp32 by `unpack` in blocks (the bf16 and fp16
// variants below)
size_t merge_unselected_unpacked(void (*unpack)(const uint16_t*, float*, size_t), float* dst, int C,
                                 const uint16_t* src, size_t off, size_t n, const int32_t* sel, int k,
                                 int in_out_rows, size_t base);
// merge_unselected from a bf16 source: dst values are exactly fp32(src)
size_t merge_unselected_bf16(float* dst, int C, const uint16_t* src, size_t off, size_t n, const int32_t* sel,
                             int k, int in_out_rows = 0, size_t base = 0);

// ---- gradient clipping (clip.cpp, docs/spec.md "gradient_clipping")
// sum of x[i]^2 in double, in index order
double sumsq(const float* x, size_t n);
// out (3 floats) = {factor, norm, clipped}: the partial sums of squares added in order and divided
// by sq_div (1, or n^2 for ZenFlow's interval mean), the norm rounded as DeepSpeed rounds it,
// factor = extra / DeepSpeed's combined scale (kernels/clip_math.hpp), clipped = 1 when the clip
// coefficient is below 1
void clip_factor(const double* partial, size_t parts, double sq_div, float clip, float loss_scale, float extra,
                 float* out);
// x *= factor[0]
void scale_by(float* x, size_t n, const float* factor);
// ---- fp16 (kernels/fp16.hpp: IEEE binary16, round to nearest even with subnormals, +-inf from
// 65520 up, NaN kept; fp16 -> fp32 exact). y (n) = fp16(x); y (n) = fp32(x)
void pack_fp16(const float* x, uint16_t* y, size_t n);
void unpack_fp16(const uint16_t* x, float* y, size_t n);
// x = fp32(fp16(x)) in place; returns how many of the rounded values are inf or NaN (precision
// "fp16": the gradient overflow check of the loss scaler, docs/spec.md)
size_t round_fp16(float* x, size_t n);
// merge_unselected from an fp16 source: dst values are exactly fp32(src)
size_t merge_unselected_fp16(float* dst, int C, const uint16_t* src, size_t off, size_t n, const int32_t* sel,
                             int k, int in_out_rows = 0, size_t base = 0);
// x *= s (the loss scaler's unscale of a device gradient)
void scale(float* x, size_t n, float s);


// ---- GPT layers (embedding.cpp, layernorm.cpp, attention.cpp, pool.cpp, text.cpp). Activations
// are (B, T, C) row-major = (B*T, C); every kernel overwrites its outputs (gradients included).
// x (B, T, C) = wte (V, C)[tok (B, T)] + wpe (T, C)[t]; wpe null: wte[tok] alone (Llama)
void embedding_fwd(const int32_t* tok, const float* wte, const float* wpe, float* x, int B, int T, int C);
// dwte (V, C) = sum of dx rows over the positions holding each token; dwpe (T, C) = sum over b
// of dx[b, t] (dwpe null: none). Positions are visited in order b = 0.., t = 0.. (deterministic).
void embedding_bwd(const int32_t* tok, const float* dx, float* dwte, float* dwpe, int B, int T, int C, int V);
// LayerNorm over the rows of x (N, C): y = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps)
// (biased variance, as torch.nn.LayerNorm); mean (N) and rstd (N) are saved for the backward.
void layernorm_fwd(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                   int N, int C, float eps);
// dx (N, C), dw (C), db (C) from dy (N, C) and the saved mean/rstd.
void layernorm_bwd(const float* dy, const float* x, const float* mean, const float* rstd, const float* w,
                   float* dx, float* dw, float* db, int N, int C);
// Causal multi-head self-attention, per (b, h): q, k, v (T, hs) are column blocks h*hs of the
// thirds of qkv (B, T, 3C) = [q | k | v]; P = softmax(q k^T / sqrt(hs)) over j <= i;
// out (B, T, C)[:, :, h*hs:] = P v. Saved for the backward: lse (B, NH, T), each row's
// log-sum-exp m_i + log(sum_{j <= i} exp(s_ij - m_i)) in fp32; no (T, T) matrix is kept (the
// backward recomputes P block by block: attention.cpp).
// bf16: where the CPU has native bf16, the products' operands are rounded to bf16 (fp32 sums and
// outputs, the softmax in fp32), as the matmuls above; elsewhere fp32.
void attention_fwd(const float* qkv, float* out, float* lse, int B, int T, int C, int NH, bool bf16 = false);
// dqkv (B, T, 3C) from dout (B, T, C) and the forward's lse.
void attention_bwd(const float* dout, const float* qkv, const float* lse, float* dqkv, int B, int T, int C, int NH,
                   bool bf16 = false);
// The same with qkv, the forward's out and the backward's dout and dqkv as stored: fp32, or bf16
// bits (precision bf16's 2-byte activations and their gradients, CodeletDef::cpu_bf16_as_is). With
// bf16 products on a native-bf16 CPU the bf16 qkv's heads are copied as they are into the
// products' operands, with fp32 products widened (exact) as they are packed; out and dqkv are
// rounded as the heads are copied into place. Either way the bits of widening, the kernels above
// and rounding out back.
void attention_fwd_mixed(Ew qkv, Ew out, float* lse, int B, int T, int C, int NH, bool bf16);
void attention_bwd_mixed(Ew dout, Ew qkv, const float* lse, Ew dqkv, int B, int T, int C, int NH, bool bf16);
// The attention's causal softmax on a row block [r0, r1) of one head's scores s (r1 - r0 rows of
// r1 columns, row i - r0 holding query i), in place: softmax over j <= i, 0 for i < j < r1, and
// lse[i] = the row's log-sum-exp. Its backward on the same layout: ds = p (ds - rowsum(p ds))
// for j <= i (dP in, dS out), 0 after.
void causal_softmax(float* s, int r0, int r1, float* lse);
void causal_softmax_bwd(const float* p, float* ds, int r0, int r1);
// The bytes of scratch one thread holds for the attentions above (gpt) or the grouped-query ones
// below at these shapes: a tile's row block's P and dS, its operands widened or packed (the
// grouped-query tiles hold a few heads of a sequence; the GPT's, a whole sequence;
// bf16_products: the GPT's products in bf16). Each thread that runs an attention tile keeps them
// (thread-local buffers, reused).
size_t attention_workspace_bytes(int T, int H, int Hkv, int hs, bool gpt, bool bf16_products);
// Mean over the first len[b] positions: y (B, C) = mean_{t < len[b]} x (B, T, C)[b, t]
void mean_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C);
// dx[b, t] = dy[b] / len[b] for t < len[b], 0 after
void mean_pool_bwd(const float* dy, const int32_t* len, float* dx, int B, int T, int C);
// Max over the first len[b] positions, feature by feature: y (B, C) = max_{t < len[b]} x[b, t]
void max_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C);
// dx[b, t, c] = dy[b, c] at the first t < len[b] where x[b, t, c] is the maximum, 0 elsewhere
void max_pool_bwd(const float* x, const float* dy, const int32_t* len, float* dx, int B, int T, int C);
// y (B, C) = x[b, len[b] - 1] (the causal model's last position sees the whole sequence)
void last_pool_fwd(const float* x, const int32_t* len, float* y, int B, int T, int C);
// dx[b, len[b] - 1] = dy[b], 0 elsewhere
void last_pool_bwd(const float* dy, const int32_t* len, float* dx, int B, int T, int C);
// Language-model windows of a byte text: tokens (B, T) = text[s_b .. s_b + T), targets (B, T) =
// text[s_b + 1 .. s_b + T] for the start offsets s (B); s_b + T < n is the caller's promise.
void gather_windows(const uint8_t* text, const int64_t* starts, int B, int T, int32_t* tokens,
                    int32_t* targets);
// The same on token ids of 2 or 4 bytes (token files; the ids are below the model's vocabulary).
void gather_windows(const uint16_t* ids, const int64_t* starts, int B, int T, int32_t* tokens, int32_t* targets);
void gather_windows(const uint32_t* ids, const int64_t* starts, int B, int T, int32_t* tokens, int32_t* targets);
// Rows `rows` (B) of fixed language-model rows: tokens, targets (B, T) = src_tokens, src_targets
// (R, T) [rows[b]]
void gather_rows(const int32_t* src_tokens, const int32_t* src_targets, int T, const int32_t* rows, int B,
                 int32_t* tokens, int32_t* targets);
// Rows `rows` (B) of a padded byte table (R, T) with lengths (R) and labels (R): tokens (B, T),
// len (B), labels (B).
void gather_sequences(const uint8_t* table, const int32_t* lengths, const int32_t* labels, int T,
                      const int32_t* rows, int B, int32_t* tokens, int32_t* out_len, int32_t* out_labels);
// Class-conditioned language-model chunks (the generative classifier, models/nets/gpt_classifier.hpp):
// chunk b of class c_b scores the n_b <= T bytes text[start_b .. start_b + n_b) after the class
// byte m_b = 1 + c_b: tokens (B, T) = [m_b, text[start_b], ..., text[start_b + n_b - 2], 0, ...],
// targets (B*T) = [text[start_b], ..., text[start_b + n_b - 1], -1, ...] (-1: padding, ignored by
// the loss), classes (B) = c_b, labels (B) = the class of the chunk's verse (its true class; c_b
// may be another when a chunk is scored under every class).
struct ChunkRef {
  int64_t start;
  int32_t n, cls, label;
};
void gather_chunks(const uint8_t* text, const ChunkRef* chunks, int B, int T, int32_t* tokens, int32_t* targets,
                   int32_t* classes, int32_t* labels);
// A per-sequence vector added at every position (the generative classifier's class embedding):
// x (B, T, C) [b, t] += table (K, C) [ids[b]].
void class_embedding_fwd(float* x, const float* table, const int32_t* ids, int B, int T, int C);
// dtable (K, C) = sum over the sequences b of class k and their positions t of dx[b, t]
// (overwritten; fixed order).
void class_embedding_bwd(const float* dx, const int32_t* ids, float* dtable, int B, int T, int C, int K);

// ---- Llama / Qwen2 layers (llama.cpp, elementwise.cpp, attention.cpp; docs/llama.md).
// Activations are (B, T, C) row-major = (B*T, C); every kernel overwrites its outputs.
// RMSNorm over the rows of x (N, C) as Hugging Face's LlamaRMSNorm in fp32: rstd = 1/sqrt(mean(x^2)
// + eps) (the row sum in double, lanes.hpp's order), y = (x * rstd) * w; rstd (N) saved.
void rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int N, int C, float eps);
// dx (N, C), dw (C) from dy (N, C): with xhat = x rstd,
//   dx = rstd (dy w - xhat mean(dy w xhat)),  dw = sum over the rows of dy xhat.
void rmsnorm_bwd(const float* dy, const float* x, const float* rstd, const float* w, float* dx, float* dw, int N,
                 int C);
// Rotary embedding parameters (config.json's rope_theta and rope_scaling; llama3: Hugging Face's
// _compute_llama3_parameters).
struct RopeParams {
  double theta = 10000.0;
  bool llama3 = false;  // rope_scaling {"rope_type": "llama3", ...}; false: rope_scaling null
  double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};
// What makes p unusable (a non-positive theta or factor, high_freq_factor <= low_freq_factor,
// ...), naming the config field; empty when it is fine.
const char* rope_params_problem(const RopeParams& p);
// inv_freq (hs/2), in double: theta^(-2i/hs), then (llama3) divided by factor below the low
// frequencies' wavelength bound, kept above the high one, interpolated in between.
void rope_inv_freq(const RopeParams& p, int hs, double* inv_freq);
// table (2, Tmax, hs/2): cos, then sin, of t * inv_freq[i] for positions t < Tmax, computed in
// double and rounded to fp32 once.
void rope_table(const RopeParams& p, int Tmax, int hs, float* table);
// Rotate-half rotary embedding in place on x (B, T, NH*hs), every head alike (HF's
// apply_rotary_pos_emb): with d = hs/2, c = cos[pos][i], s = sin[pos][i], i < d,
//   x[i] <- x[i] c - x[i+d] s,   x[i+d] <- x[i+d] c + x[i] s;   pos = pos0 + t.
// cos, sin: rows of (Tmax, d) tables with pos0 + T <= Tmax.
void rope_fwd(float* x, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0);
// The transpose (the rotation by -angle), in place on dx (B, T, NH*hs):
//   dx[i] <- dx[i] c + dx[i+d] s,   dx[i+d] <- dx[i+d] c - dx[i] s.
void rope_bwd(float* dx, const float* cos, const float* sin, int B, int T, int NH, int hs, int pos0);
// SwiGLU (the Llama MLP's act_fn(gate_proj(x)) * up_proj(x), hidden_act "silu"), elementwise:
// out = silu(gate) * up, silu(g) = g sigma(g); dgate = dout up sigma(g) (1 + g (1 - sigma(g))),
// dup = dout silu(g).
void swiglu_fwd(const float* gate, const float* up, float* out, size_t n);
void swiglu_bwd(const float* gate, const float* up, const float* dout, float* dgate, float* dup, size_t n);
// Causal grouped-query attention (HF's repeat_kv): q (B, T, H*hs), k and v (B, T, Hkv*hs), H a
// multiple of Hkv; query head h reads KV head h / (H / Hkv). P = softmax over j <= i of
// q_i . k_j / sqrt(hs); out (B, T, H*hs) = P v; lse (B, H, T) saved as attention_fwd's.
// With Hkv = H it is attention_fwd on q, k, v held apart.
void gqa_attention_fwd(const float* q, const float* k, const float* v, float* out, float* lse, int B, int T, int H,
                       int Hkv, int hs);
// dq (B, T, H*hs), dk and dv (B, T, Hkv*hs) overwritten from dout (B, T, H*hs) and lse. A KV
// head's dk and dv are summed in a fixed order (attention.cpp).
void gqa_attention_bwd(const float* dout, const float* q, const float* k, const float* v, const float* lse,
                       float* dq, float* dk, float* dv, int B, int T, int H, int Hkv, int hs);
// The same with q, k, v, the forward's out and the backward's dout, dq, dk, dv as stored: fp32, or
// bf16 bits (precision bf16's 2-byte activations and their gradients, CodeletDef::cpu_bf16_as_is),
// each sequence's bf16 rows widened (exact) in the tile that computes it and its outputs rounded
// there: the bits of widening the whole buffers, the kernels above and rounding the outputs back,
// in one pass over memory.
void gqa_attention_fwd_mixed(Ew q, Ew k, Ew v, Ew out, float* lse, int B, int T, int H, int Hkv, int hs);
void gqa_attention_bwd_mixed(Ew dout, Ew q, Ew k, Ew v, const float* lse, Ew dq, Ew dk, Ew dv, int B, int T, int H,
                             int Hkv, int hs);

// Generation with a KV cache (decode_attention.cpp; docs/hf.md "Generation"): T new queries q
// (T, H*hs) at positions pos0 .. pos0+T-1 over the cache kc, vc (>= pos0+T rows, Hkv*hs), whose
// rows [pos0, pos0+T) already hold the new keys and values. out (T, H*hs): query t of head h,
// softmax over j <= pos0+t of q . kc[j] / sqrt(hs) (KV head h / (H / Hkv)), times vc[j].
// scratch holds pos0+T floats.
void cached_attention(const float* q, const float* kc, const float* vc, float* out, float* scratch, int T, int pos0,
                      int H, int Hkv, int hs);

}  // namespace zf::kernels::cpu
