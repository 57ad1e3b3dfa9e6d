// AdamW, as torch.optim.AdamW (decoupled weight decay, bias correction), ZenFlow's fused
// "last accumulation + host update" pass, and the host update that leaves its result in the
// gradient's buffer too (ZenFlow's result ring). AVX-512 or AVX2 intrinsics chosen at compile
// time, a scalar fallback otherwise. Vector lanes and the scalar head/tail run the same operation
// sequence through one template (no FMA; the project builds with -ffp-contract=off so the
// compiler fuses nothing either): results are bitwise independent of how [0, n) is tiled and of
// which of the three paths ran. Memory-bound: 28 bytes per parameter (36 fused), see
// docs/performance-limits.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "codelets/kernels/bf16.hpp"
#include "codelets/kernels/cpu/bf16_pack.hpp"
#include "codelets/kernels/cpu/kernels.hpp"

// Bitwise tiling independence needs every mul and add unfused. The project builds with
// -ffp-contract=off; these keep it so if this file is ever built without that flag.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace zf::kernels::cpu {
namespace {

// Lane types: the same named float operations on 1, 8 or 16 floats. All are IEEE round-to-nearest
// (sqrt and div correctly rounded on every path), so one element's result never depends on the
// lane type that computed it.
struct Scalar {
  using R = float;
  static R set(float x) { return x; }
  static R load(const float* p) { return *p; }
  static void store(float* p, R x) { *p = x; }
  static R add(R a, R b) { return a + b; }
  static R sub(R a, R b) { return a - b; }
  static R mul(R a, R b) { return a * b; }
  static R div(R a, R b) { return a / b; }
  static R sqrt(R a) { return std::sqrt(a); }
  static R round_bf16(R a) { return bf16::round(a); }
  static R load_bf16(const uint16_t* p) { return bf16::to_float(*p); }
  static void store_bf16(uint16_t* p, R x) { *p = bf16::from_float(x); }
};
#if defined(__AVX512F__)
struct Vec {
  using R = __m512;
  static constexpr size_t W = 16;
  static R set(float x) { return _mm512_set1_ps(x); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R x) { _mm512_storeu_ps(p, x); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  // The zero-masked form with every lane selected is _mm512_sqrt_ps exactly; the plain form passes
  // _mm512_undefined_ps() as its merge source, which GCC 12 flags as -Wmaybe-uninitialized.
  static R sqrt(R a) { return _mm512_maskz_sqrt_ps(__mmask16(0xFFFF), a); }
  // bf16::round on 16 lanes: the rounded bits (bf16_pack.hpp) back in the upper half
  static R round_bf16(R a) {
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(__mmask16(0xFFFF), bf16_bits(_mm512_castps_si512(a)), 16));
  }
  // 16 bf16 values widened (exact), and 16 floats rounded to bf16 and stored (bf16::from_float)
  static R load_bf16(const uint16_t* p) {
    const __m512i w = _mm512_maskz_cvtepu16_epi32(__mmask16(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(__mmask16(0xFFFF), w, 16));
  }
  static void store_bf16(uint16_t* p, R x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_maskz_cvtepi32_epi16(__mmask16(0xFFFF), bf16_bits(_mm512_castps_si512(x))));
  }
};
#elif defined(__AVX2__)
struct Vec {
  using R = __m256;
  static constexpr size_t W = 8;
  static R set(float x) { return _mm256_set1_ps(x); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R x) { _mm256_storeu_ps(p, x); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R sqrt(R a) { return _mm256_sqrt_ps(a); }
  static R round_bf16(R a) {  // as Vec's AVX-512 one (|u| as signed: a NaN's is above inf's)
    const __m256i u = _mm256_castps_si256(a), hi_mask = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), hi_mask);
    const __m256i nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(_mm256_and_si256(u, hi_mask), _mm256_set1_epi32(0x00400000));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(r, q, nan));
  }
  static R load_bf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static void store_bf16(uint16_t* p, R x) {  // the rounded value's upper halves
    alignas(32) uint32_t u[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(u), _mm256_castps_si256(round_bf16(x)));
    for (int i = 0; i < 8; ++i) p[i] = (uint16_t)(u[i] >> 16);
  }
};
#endif

// Per-call constants: bias corrections in double, then rounded to float once.
template <class V>
struct Coef {
  typename V::R gs, b1, ob1, b2, ob2, inv_sqrt_bc2, eps, lr_wd, step_size;
  Coef(const AdamParams& hp, int64_t step, float grad_scale) {
    const double bc1 = 1.0 - std::pow((double)hp.beta1, (double)step);
    const double bc2 = 1.0 - std::pow((double)hp.beta2, (double)step);
    gs = V::set(grad_scale);
    b1 = V::set(hp.beta1);
    ob1 = V::set(1.0f - hp.beta1);
    b2 = V::set(hp.beta2);
    ob2 = V::set(1.0f - hp.beta2);
    inv_sqrt_bc2 = V::set((float)(1.0 / std::sqrt(bc2)));
    eps = V::set(hp.eps);
    // decoupled decay as p - (lr*wd)*p: 1 - lr*wd rounded to float loses small lr*wd entirely
    lr_wd = V::set(hp.lr * hp.weight_decay);
    step_size = V::set((float)(hp.lr / bc1));
  }
};

// No __restrict here on purpose: it lets the compiler move stores above loads, which brings
// back the 4K-aliasing stalls that update() orders its accesses to avoid.
struct Ptrs {
  float* p;
  float* acc;  // Accumulate: the accumulator; Result: where the new p goes (the gradient's buffer);
               // Bf16, Bf16Grad: where p rounded to bf16 goes (the device parameter)
  float* g;    // written only by Bf16Grad
  float* m;
  float* v;
  const uint16_t* g16 = nullptr;  // Bf16Io: the bf16 gradient (g unused)
  uint16_t* p16 = nullptr;        // Bf16Io: the bf16 parameter (acc unused)
};

// What a pass does besides AdamW: Plain nothing; Accumulate: g <- acc + g (as accumulate(acc, g,
// n, 1.0f)), then acc <- 0; Result: the new p is also stored to acc, which is g (the gradient
// buffer takes the result, as adam_step then copy(g, p, n)); Bf16: p rounded to bf16 is also
// stored to acc (as adam_step, copy(acc, p, n), round_bf16(acc, n)); Bf16Grad: the same, with g
// rounded to bf16 first and stored back (as round_bf16(g, n) before all that); Bf16Io: Bf16 with
// the gradient read from its bf16 words (g16, widened exactly) and the parameter's bf16 bits stored
// to p16 (bf16::from_float of p: the bits Bf16's rounded float holds), no fp32 copy of either.
enum class Mode { Plain, Accumulate, Result, Bf16, Bf16Grad, Bf16Io };

// Elements [i, i + U * V::W).
// Every load of the group comes before its first store. The buffers usually share their address
// modulo 4 KiB (page-aligned allocations), and a load issued after a store to the same offset of
// another buffer waits on a false store-to-load dependency (4K aliasing, which slows the fused
// pass severely). Groups cover whole 64-byte lines, so no later load hits a line offset
// stored by an earlier group still in flight.
template <class V, Mode kMode, int U>
inline __attribute__((always_inline)) void update(const Ptrs& a, size_t i, const Coef<V>& c) {
  constexpr bool kAcc = kMode == Mode::Accumulate;
  using R = typename V::R;
  constexpr size_t W = sizeof(R) / sizeof(float);
  R g[U], m[U], v[U], p[U];
  for (int u = 0; u < U; ++u) {
    const size_t j = i + u * W;
    if constexpr (kMode == Mode::Bf16Io)
      g[u] = V::load_bf16(a.g16 + j);
    else
      g[u] = V::load(a.g + j);
    if constexpr (kAcc) g[u] = V::add(V::load(a.acc + j), g[u]);
    if constexpr (kMode == Mode::Bf16Grad) g[u] = V::round_bf16(g[u]);
    m[u] = V::load(a.m + j);
    v[u] = V::load(a.v + j);
    p[u] = V::load(a.p + j);
  }
  for (int u = 0; u < U; ++u) {
    const R gi = V::mul(g[u], c.gs);
    m[u] = V::add(V::mul(c.b1, m[u]), V::mul(c.ob1, gi));
    v[u] = V::add(V::mul(c.b2, v[u]), V::mul(c.ob2, V::mul(gi, gi)));
    const R denom = V::add(V::mul(V::sqrt(v[u]), c.inv_sqrt_bc2), c.eps);
    p[u] = V::sub(V::sub(p[u], V::mul(c.lr_wd, p[u])), V::mul(c.step_size, V::div(m[u], denom)));
  }
  for (int u = 0; u < U; ++u) {
    const size_t j = i + u * W;
    if constexpr (kAcc) V::store(a.acc + j, V::set(0.0f));
    if constexpr (kMode == Mode::Result) V::store(a.acc + j, p[u]);
    if constexpr (kMode == Mode::Bf16 || kMode == Mode::Bf16Grad) V::store(a.acc + j, V::round_bf16(p[u]));
    if constexpr (kMode == Mode::Bf16Grad) V::store(a.g + j, g[u]);
    if constexpr (kMode == Mode::Bf16Io) V::store_bf16(a.p16 + j, p[u]);
    V::store(a.m + j, m[u]);
    V::store(a.v + j, v[u]);
    V::store(a.p + j, p[u]);
  }
}

template <Mode kMode>
void adam_run(Ptrs a, size_t n, const AdamParams& hp, int64_t step, float grad_scale) {
  // `a` is a local copy: stores through the float pointers cannot alias it, so the pointers stay
  // in registers.
  const Coef<Scalar> cs(hp, step, grad_scale);
  size_t i = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
  constexpr size_t W = Vec::W, line = 64 / sizeof(float);  // floats per vector, per cache line
  const Coef<Vec> cv(hp, step, grad_scale);
  // scalar head up to a line-aligned p (tiles of one tensor then share the alignment)
  size_t head = (size_t)(-(uintptr_t)a.p / sizeof(float)) & (line - 1);
  if (head > n) head = n;
  for (; i < head; ++i) update<Scalar, kMode, 1>(a, i, cs);
  for (; i + line <= n; i += line) update<Vec, kMode, (int)(line / W)>(a, i, cv);
  for (; i + W <= n; i += W) update<Vec, kMode, 1>(a, i, cv);
#endif
  for (; i < n; ++i) update<Scalar, kMode, 1>(a, i, cs);
}

}  // namespace

void adam_step(float* __restrict p, const float* __restrict g, float* __restrict m,
               float* __restrict v, size_t n, const AdamParams& hp, int64_t step,
               float grad_scale) {
  adam_run<Mode::Plain>(Ptrs{p, nullptr, const_cast<float*>(g), m, v}, n, hp, step, grad_scale);
}

void adam_step_accumulate(float* __restrict p, float* __restrict acc, const float* __restrict g,
                          float* __restrict m, float* __restrict v, size_t n, const AdamParams& hp,
                          int64_t step, float grad_scale) {
  adam_run<Mode::Accumulate>(Ptrs{p, acc, const_cast<float*>(g), m, v}, n, hp, step, grad_scale);
}

void adam_step_result(float* __restrict p, float* __restrict g, float* __restrict m, float* __restrict v,
                      size_t n, const AdamParams& hp, int64_t step, float grad_scale) {
  adam_run<Mode::Result>(Ptrs{p, g, g, m, v}, n, hp, step, grad_scale);
}

void adam_step_bf16(float* __restrict master, float* __restrict g, float* __restrict m, float* __restrict v,
                    float* __restrict param, size_t n, const AdamParams& hp, int64_t step, float grad_scale,
                    bool round_grad) {
  const Ptrs a{master, param, g, m, v};
  if (round_grad)
    adam_run<Mode::Bf16Grad>(a, n, hp, step, grad_scale);
  else
    adam_run<Mode::Bf16>(a, n, hp, step, grad_scale);
}

void adam_step_bf16_mixed(float* master, Ew g, float* m, float* v, Ew param, size_t n, const AdamParams& hp,
                          int64_t step, float grad_scale, bool round_grad) {
  if (!g.bf16 && !param.bf16)
    return adam_step_bf16(master, static_cast<float*>(g.p), m, v, static_cast<float*>(param.p), n, hp, step,
                          grad_scale, round_grad);
  if (g.bf16 && param.bf16) {  // both as stored, in one pass (a bf16 gradient is already rounded)
    Ptrs a{master, nullptr, nullptr, m, v, static_cast<const uint16_t*>(g.p), static_cast<uint16_t*>(param.p)};
    return adam_run<Mode::Bf16Io>(a, n, hp, step, grad_scale);
  }
  constexpr size_t kBlock = 2048;  // the widened gradient and the parameter in L1
  thread_local float tg[kBlock], tp[kBlock];
  for (size_t s = 0; s < n; s += kBlock) {
    const size_t b = std::min(kBlock, n - s);
    float* gp = g.bf16 ? tg : static_cast<float*>(g.p) + s;
    float* pp = param.bf16 ? tp : static_cast<float*>(param.p) + s;
    if (g.bf16) unpack_bf16(static_cast<const uint16_t*>(g.p) + s, tg, b);
    // (rounding a bf16 gradient again changes nothing: its block is not stored back)
    adam_step_bf16(master + s, gp, m + s, v + s, pp, b, hp, step, grad_scale, round_grad);
    if (param.bf16) pack_bf16(tp, static_cast<uint16_t*>(param.p) + s, b);
  }
}

}  // namespace zf::kernels::cpu
