// Matmul codelets: forward y = x w^T, backward dw = dy^T x and dx = dy w (kernels/cpu/matmul.cpp);
// a weight stored (in, out) (in_out) is passed through to the kernels' transpose flags. Under
// precision bf16 (Runtime::matmul_bf16) the kernels multiply bf16 operands: the CPU ones where the
// CPU has native bf16 (kernels/cpu/kernels.hpp), the CUDA ones on the tensor cores (cublasGemmEx,
// kernels/cuda/matmul.cu). On a CPU device, from kMatmulBf16Rows rows, a model can have each
// activation and output gradient converted once instead of in each of the two tasks that multiply
// it (insert_matmul_*_kept, CPU-only codelets): the forward keeps x's bf16 copy and the data
// gradient dy's, which the weight gradient multiplies.
#include <starpu.h>


#include "codelets/codelet_util.hpp"
#include "codelets/codelets.hpp"
#include "codelets/kernels/cpu/gemm.hpp"
#include "runtime/task.hpp"

namespace zf {
namespace {

struct MatmulArgs {
  int B, K, N;
  bool in_out;  // w / dw stored (K, N)
  bool bf16;    // bf16 operands
  // the first and the second operand stored in bf16 (read as they are, not converted: the
  // simulation's conversion count; the kernels see it in the buffers' element size)
  bool a16 = false, b16 = false;
};

// An operand buffer as stored: fp32, or a stored bf16 tensor's 2 bytes (CodeletDef::bf16_as_is:
// the plain products, CPU and CUDA, read precision bf16's weights and the activations only a
// matmul reads as they are: kernels::cpu and kernels::cuda's *_mixed)
kernels::cpu::MatOperand operand(void* buf) {
  return {reinterpret_cast<const void*>(STARPU_VECTOR_GET_PTR(buf)),
          STARPU_VECTOR_GET_ELEMSIZE(buf) == sizeof(uint16_t)};
}
constexpr unsigned kOperandsAsIs = 0b011;  // buffers 0 and 1
// (each plain product writes its whole output, buffer 2: CodeletDef::writes_whole 0b100)

// The CPU forward writes a bf16 output as stored (CodeletDef::cpu_bf16_as_is: rounded by the
// product's tiles, kernels::cpu::matmul_fwd_out), and the bias codelet adds its bias in the tile
void matmul_fwd_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<MatmulArgs*>(a);
  kernels::cpu::matmul_fwd_out(operand(b[0]), operand(b[1]), {nullptr, false}, ew_of(b[2]), p->B, p->K, p->N,
                               p->in_out, p->bf16);
}
void matmul_bias_fwd_cpu(void* b[], void* a) noexcept {  // x, w, bias, y
  auto* p = static_cast<MatmulArgs*>(a);
  kernels::cpu::matmul_fwd_out(operand(b[0]), operand(b[1]), operand(b[2]), ew_of(b[3]), p->B, p->K, p->N,
                               p->in_out, p->bf16);
}
void matmul_bwd_weight_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<MatmulArgs*>(a);
  kernels::cpu::matmul_bwd_weight_mixed(operand(b[0]), operand(b[1]), vec_ptr(b[2]), p->B, p->K, p->N, false,
                                        p->in_out, p->bf16);
}
void matmul_bwd_data_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<MatmulArgs*>(a);
  kernels::cpu::matmul_bwd_data_out(operand(b[0]), operand(b[1]), ew_of(b[2]), p->B, p->K, p->N, p->in_out,
                                    p->bf16);
}
// the kept-operand variants (bf16 copies in buffers of uint16_t bf16 bits)
uint16_t* bf16_ptr(void* buf) { return reinterpret_cast<uint16_t*>(STARPU_VECTOR_GET_PTR(buf)); }
// The weight (buffer 1) as it is stored: a bf16 parameter's 2 bytes multiplied as they are (these
// two codelets are native_half: only the weight can be a stored-half tensor among their buffers),
// an fp32 one converted in the call.
bool weight_is_bf16(void* buf) { return STARPU_VECTOR_GET_ELEMSIZE(buf) == sizeof(uint16_t); }
void matmul_fwd_keep_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<MatmulArgs*>(a);
  if (weight_is_bf16(b[1]))
    kernels::cpu::matmul_fwd_keep_x_wh(vec_ptr(b[0]), bf16_ptr(b[1]), vec_ptr(b[2]), bf16_ptr(b[3]), p->B, p->K,
                                       p->N, p->in_out);
  else
    kernels::cpu::matmul_fwd_keep_x(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), bf16_ptr(b[3]), p->B, p->K, p->N,
                                    p->in_out);
}
void matmul_bwd_data_keep_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<MatmulArgs*>(a);
  if (weight_is_bf16(b[1]))
    kernels::cpu::matmul_bwd_data_keep_dy_wh(vec_ptr(b[0]), bf16_ptr(b[1]), vec_ptr(b[2]), bf16_ptr(b[3]), p->B,
                                             p->K, p->N, p->in_out);
  else
    kernels::cpu::matmul_bwd_data_keep_dy(vec_ptr(b[0]), vec_ptr(b[1]), vec_ptr(b[2]), bf16_ptr(b[3]), p->B, p->K,
                                          p->N, p->in_out);
}
void matmul_bwd_weight_kept_cpu(void* b[], void* a) noexcept {
  auto* p = static_cast<MatmulArgs*>(a);
  kernels::cpu::matmul_bwd_weight_bf16(bf16_ptr(b[0]), bf16_ptr(b[1]), vec_ptr(b[2]), p->B, p->K, p->N, false,
                                       p->in_out);
}
#ifdef ZF_USE_CUDA
void matmul_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MatmulArgs*>(a);
  cuda_check(kernels::cuda::matmul_fwd_mixed(operand(b[0]), operand(b[1]), vec_ptr(b[2]), p->B, p->K, p->N,
                                             cublas_handle(), cuda_stream(), p->in_out, p->bf16));
}
// the product into y's fp32 copy (the wrapper's, for a bf16 y), then the bias: one rounding after both
void matmul_bias_fwd_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MatmulArgs*>(a);
  cuda_check(kernels::cuda::matmul_fwd_mixed(operand(b[0]), operand(b[1]), vec_ptr(b[3]), p->B, p->K, p->N,
                                             cublas_handle(), cuda_stream(), p->in_out, p->bf16));
  cuda_check(kernels::cuda::bias_add(vec_ptr(b[3]), vec_ptr(b[2]), p->B, p->N, cuda_stream()));
}
void matmul_bwd_weight_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MatmulArgs*>(a);
  cuda_check(kernels::cuda::matmul_bwd_weight_mixed(operand(b[0]), operand(b[1]), vec_ptr(b[2]), p->B, p->K, p->N,
                                                    false, cublas_handle(), cuda_stream(), p->in_out, p->bf16));
}
void matmul_bwd_data_cuda(void* b[], void* a) noexcept {
  auto* p = static_cast<MatmulArgs*>(a);
  cuda_check(kernels::cuda::matmul_bwd_data_mixed(operand(b[0]), operand(b[1]), vec_ptr(b[2]), p->B, p->K, p->N,
                                                  cublas_handle(), cuda_stream(), p->in_out, p->bf16));
}
#endif

// 2 B K N FLOPs, every product (the simulation's roofline, runtime/simulation.hpp)
double matmul_flops(const void* a) {
  auto* p = static_cast<const MatmulArgs*>(a);
  return 2.0 * p->B * p->K * p->N;
}
// The elements a CUDA worker rounds to bf16 before a bf16 product (negative: fp32 products), for
// the roofline: the two operands, x and w (forward), dy and x (weight gradient), dy and w (data
// gradient), but those stored in bf16 (a16, b16)
double converted(const MatmulArgs* p, double first, double second) {
  return p->bf16 ? (p->a16 ? 0.0 : first) + (p->b16 ? 0.0 : second) : -1.0;
}
double fwd_bf16_operands(const void* a) {
  auto* p = static_cast<const MatmulArgs*>(a);
  return converted(p, (double)p->B * p->K, (double)p->N * p->K);
}
double bwd_weight_bf16_operands(const void* a) {
  auto* p = static_cast<const MatmulArgs*>(a);
  return converted(p, (double)p->B * p->N, (double)p->B * p->K);
}
double bwd_data_bf16_operands(const void* a) {
  auto* p = static_cast<const MatmulArgs*>(a);
  return converted(p, (double)p->B * p->N, (double)p->N * p->K);
}

starpu_codelet& matmul_fwd_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is(writes_whole({"zf_matmul_fwd", matmul_fwd_cpu, ZF_CUDA_FUNC(matmul_fwd_cuda), 3,
                                   {STARPU_R, STARPU_R, STARPU_W}, matmul_flops, Collective::None, 0, nullptr, nullptr,
                                   fwd_bf16_operands, false, kOperandsAsIs},
                                  0b100),
                     0b100),  // y (CPU)
      &m);
  return c;
}
starpu_codelet& matmul_bias_fwd_cl() {  // x, w, bias, y
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is(writes_whole({"zf_matmul_bias_fwd", matmul_bias_fwd_cpu, ZF_CUDA_FUNC(matmul_bias_fwd_cuda), 4,
                                   {STARPU_R, STARPU_R, STARPU_R, STARPU_W}, matmul_flops, Collective::None, 0,
                                   nullptr, nullptr, fwd_bf16_operands, false, kOperandsAsIs},
                                  0b1000),
                     0b1100),  // the bias and y (CPU)
      &m);
  return c;
}
starpu_codelet& matmul_bwd_weight_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(writes_whole({"zf_matmul_bwd_weight", matmul_bwd_weight_cpu,
                                          ZF_CUDA_FUNC(matmul_bwd_weight_cuda), 3, {STARPU_R, STARPU_R, STARPU_W},
                                          matmul_flops, Collective::None, 0, nullptr, nullptr,
                                          bwd_weight_bf16_operands, false, kOperandsAsIs}, 0b100),
                                         &m);
  return c;
}
starpu_codelet& matmul_bwd_data_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      cpu_bf16_as_is(writes_whole({"zf_matmul_bwd_data", matmul_bwd_data_cpu, ZF_CUDA_FUNC(matmul_bwd_data_cuda), 3,
                                   {STARPU_R, STARPU_R, STARPU_W}, matmul_flops, Collective::None, 0, nullptr,
                                   nullptr, bwd_data_bf16_operands, false, kOperandsAsIs},
                                  0b100),
                     0b100),  // dx (CPU)
      &m);
  return c;
}

starpu_codelet& matmul_fwd_keep_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet(
      {"zf_matmul_fwd_keep", matmul_fwd_keep_cpu, nullptr, 4, {STARPU_R, STARPU_R, STARPU_W, STARPU_W}, matmul_flops,
       Collective::None, 0, nullptr, nullptr, nullptr, true},
      &m);
  return c;
}
starpu_codelet& matmul_bwd_data_keep_cl() {
  static starpu_perfmodel m{};
  static starpu_codelet c = make_codelet({"zf_matmul_bwd_data_keep", matmul_bwd_data_keep_cpu, nullptr, 4,
                                          {STARPU_R, STARPU_R, STARPU_W, STARPU_W}, matmul_flops, Collective::None, 0,
                                          nullptr, nullptr, nullptr, true},
                                         &m);
  return c;
}
starpu_codelet& matmul_bwd_weight_kept_cl() {
  static starpu_perfmodel m{};
  // xh (buffer 1) is a stored bf16 activation where the model keeps the matmul's input in bf16
  static starpu_codelet c = make_codelet({"zf_matmul_bwd_weight_kept", matmul_bwd_weight_kept_cpu, nullptr, 3,
                                          {STARPU_R, STARPU_R, STARPU_W}, matmul_flops, Collective::None, 0, nullptr,
                                          nullptr, nullptr, false, 0b010},
                                         &m);
  return c;
}

// x (B, K), w (N, K) (in_out: (K, N)) -> args; checks y/dy (B, N)
MatmulArgs dims(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& y, bool in_out) {
  expect(w.shape().size() == 2, opt, "weight must be 2-D: " + shape_str(w));
  int N = (int)w.dim(in_out ? 1 : 0), K = (int)w.dim(in_out ? 0 : 1);
  expect(x.numel() % K == 0, opt, shape_str(x) + " does not match " + shape_str(w));
  int B = (int)(x.numel() / K);
  expect(y.numel() == (size_t)B * N, opt, shape_str(y) + " must hold " + std::to_string(B) + "x" +
                                              std::to_string(N));
  return {B, K, N, in_out, opt.rt && opt.rt->matmul_bf16()};
}
// ... with the operands a and b's storage (MatmulArgs::a16, b16)
MatmulArgs with_operands(MatmulArgs m, const Tensor& a, const Tensor& b) {
  auto bf16 = [](const Tensor& t) { return t.stored_half() && t.half() == Half::Bf16; };
  m.a16 = bf16(a);
  m.b16 = bf16(b);
  return m;
}

}  // namespace

bool cpu_native_bf16() { return kernels::cpu::native_bf16(); }

namespace {
void expect_bf16_copy(const SubmitOptions& opt, const Tensor& copy, const Tensor& of) {
  expect(copy.bytes() == of.numel() * 2, opt, "bf16 copy " + shape_str(copy) + " must hold " + shape_str(of));
}
}  // namespace
bool matmul_keeps_bf16_operands(const SubmitOptions& opt, int64_t rows) {  // CPU devices only
  return opt.rt && opt.rt->matmul_bf16() && !opt.rt->device_is_cuda() && opt.rt->matmul_keep_bf16_operands() &&
         rows >= kernels::cpu::kMatmulBf16Rows;
}

void insert_matmul_fwd_kept(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& y,
                            const Tensor& xh, bool in_out) {
  const MatmulArgs a = dims(opt, x, w, y, in_out);
  expect(a.bf16 && a.B >= kernels::cpu::kMatmulBf16Rows, opt, "kept bf16 operands need bf16 matmuls of 64+ rows");
  expect_bf16_copy(opt, xh, x);
  expect(!x.stored_half() && !y.stored_half() && (!w.stored_half() || w.half() == Half::Bf16), opt,
         "kept bf16 operands: only the weight may be stored in 2 bytes, in bf16");
  TaskBuilder(matmul_fwd_keep_cl(), opt).r(x).r(w).w(y).w(xh).args(a).submit();
}

void insert_matmul_bwd_data_kept(const SubmitOptions& opt, const Tensor& dy, const Tensor& w, const Tensor& dx,
                                 const Tensor& dyh, bool in_out) {
  const MatmulArgs a = dims(opt, dx, w, dy, in_out);
  expect(a.bf16 && a.B >= kernels::cpu::kMatmulBf16Rows, opt, "kept bf16 operands need bf16 matmuls of 64+ rows");
  expect_bf16_copy(opt, dyh, dy);
  expect(!dy.stored_half() && !dx.stored_half() && (!w.stored_half() || w.half() == Half::Bf16), opt,
         "kept bf16 operands: only the weight may be stored in 2 bytes, in bf16");
  TaskBuilder(matmul_bwd_data_keep_cl(), opt).r(dy).r(w).w(dx).w(dyh).args(a).submit();
}

void insert_matmul_bwd_weight_kept(const SubmitOptions& opt, const Tensor& dyh, const Tensor& xh, const Tensor& dy,
                                   const Tensor& x, const Tensor& dw, bool in_out) {
  const MatmulArgs a = dims(opt, x, dw, dy, in_out);
  expect(a.bf16 && a.B >= kernels::cpu::kMatmulBf16Rows, opt, "kept bf16 operands need bf16 matmuls of 64+ rows");
  expect_bf16_copy(opt, xh, x);
  expect_bf16_copy(opt, dyh, dy);
  TaskBuilder(matmul_bwd_weight_kept_cl(), opt).r(dyh).r(xh).w(dw).args(a).submit();
}

void insert_matmul_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& y, bool in_out) {
  const MatmulArgs a = with_operands(dims(opt, x, w, y, in_out), x, w);
  TaskBuilder(matmul_fwd_cl(), opt).r(x).r(w).w(y).args(a).submit();
}

void insert_matmul_bias_fwd(const SubmitOptions& opt, const Tensor& x, const Tensor& w, const Tensor& b,
                           const Tensor& y, bool in_out) {
  const MatmulArgs a = with_operands(dims(opt, x, w, y, in_out), x, w);
  expect(b.numel() == (size_t)a.N, opt, "bias " + shape_str(b) + " must hold the " + std::to_string(a.N) + " outputs");
  TaskBuilder(matmul_bias_fwd_cl(), opt).r(x).r(w).r(b).w(y).args(a).submit();
}

void insert_matmul_bwd_weight(const SubmitOptions& opt, const Tensor& dy, const Tensor& x,
                              const Tensor& dw, bool in_out) {
  const MatmulArgs a = with_operands(dims(opt, x, dw, dy, in_out), dy, x);
  TaskBuilder(matmul_bwd_weight_cl(), opt).r(dy).r(x).w(dw).args(a).submit();
}

void insert_matmul_bwd_data(const SubmitOptions& opt, const Tensor& dy, const Tensor& w,
                            const Tensor& dx, bool in_out) {
  const MatmulArgs a = with_operands(dims(opt, dx, w, dy, in_out), dy, w);
  TaskBuilder(matmul_bwd_data_cl(), opt).r(dy).r(w).w(dx).args(a).submit();
}

}  // namespace zf
