// Naive IEEE fp16 rounding and DeepSpeed's dynamic loss scaler for the tests (the engine uses
// codelets/kernels/fp16.hpp and graphs/train/loss_scaler.hpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace zf::ref {

// x rounded to fp16 in double arithmetic: the fp16 spacing at |x| is 2^(e-10) for a normal
// exponent e >= -14 and 2^-24 below; x / spacing is rounded to the nearest integer, ties to even
// (nearbyint in the default rounding mode), and scaled back (both scalings are exact). From 65520
// up (the half-way point above the largest finite fp16, 65504, whose last mantissa bit is odd)
// the result is infinity. NaN stays NaN.
inline float naive_fp16(float x) {
  if (std::isnan(x) || std::isinf(x)) return x;
  const double a = std::fabs((double)x);
  if (a >= 65520.0) return std::copysign(INFINITY, x);
  int e = 0;
  std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1): the exponent of a is e - 1
  const int exp = a == 0.0 ? -14 : std::max(e - 1, -14);
  const double spacing = std::ldexp(1.0, exp - 10);
  const double r = std::nearbyint((double)x / spacing) * spacing;
  return (float)std::copysign(r, (double)x);  // -0 stays -0
}

// The value of an fp16 bit pattern, decoded from its fields.
inline double naive_fp16_value(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? NAN : INFINITY;
  else if (e == 0) v = std::ldexp((double)m, -24);
  else v = std::ldexp(1024.0 + m, e - 25);
  return sign ? -v : v;
}

// DeepSpeed's DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py), written out
// again from DeepSpeed's code; scale_factor 2.
struct RefLossScaler {
  double cur_scale;
  int64_t scale_window, delayed_shift, cur_hysteresis;
  bool consecutive_hysteresis;
  double min_scale;
  int64_t cur_iter = 0, last_overflow_iter = -1;
  RefLossScaler(double init, int64_t window, double min, int64_t hysteresis, bool consecutive)
      : cur_scale(init), scale_window(window), delayed_shift(hysteresis), cur_hysteresis(hysteresis),
        consecutive_hysteresis(consecutive), min_scale(min) {}
  void update_scale(bool overflow) {
    if (overflow) {
      if (delayed_shift == 1 || cur_hysteresis == 1) {
        if (cur_scale == min_scale) throw std::runtime_error("loss scale at its minimum");
        cur_scale = std::max(cur_scale / 2.0, min_scale);
      } else {
        cur_hysteresis -= 1;
      }
      last_overflow_iter = cur_iter;
    } else {
      if (consecutive_hysteresis) cur_hysteresis = delayed_shift;
      const int64_t stable_interval = (cur_iter - last_overflow_iter) - 1;
      if (stable_interval > 0 && stable_interval % scale_window == 0) {
        if (!consecutive_hysteresis) cur_hysteresis = delayed_shift;
        cur_scale *= 2.0;
      }
    }
    cur_iter += 1;
  }
};

}  // namespace zf::ref
