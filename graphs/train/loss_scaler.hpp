// The loss scaler of precision "fp16": DeepSpeed's DynamicLossScaler.update_scale
// (deepspeed/runtime/fp16/loss_scaler.py) with the fp16 block's keys (docs/spec.md), or a static
// scale. The trainer multiplies the loss by scale(), checks the step's fp16 gradients for inf/NaN
// and calls update(overflow); an overflowed step is skipped (graphs/train/precision.cpp).
//
// Dynamic rule (DeepSpeed's, step by step): on an overflow, when hysteresis is 1 or the remaining
// hysteresis is down to 1, the scale halves (not below min_loss_scale; an overflow at
// min_loss_scale is an error, as DeepSpeed raises), else the remaining hysteresis drops by one;
// the step is remembered as the last overflow. On a good step, consecutive_hysteresis refills the
// hysteresis; when the good steps since the last overflow (this one excluded) are a positive
// multiple of loss_scale_window the scale doubles (and without consecutive_hysteresis the
// hysteresis is refilled). Every step, overflowed or not, advances the iteration count.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graphs/schema/spec.hpp"

namespace zf {

class LossScaler {
 public:
  explicit LossScaler(const Spec::Fp16& c);
  bool dynamic() const { return dynamic_; }
  // The loss scale of the next step.
  double scale() const { return cur_scale_; }
  // After a step's overflow check. Throws zf::Error on an overflow at min_loss_scale.
  void update(bool overflow);
  // Checkpoint state: {cur_scale, cur_iter, last_overflow_iter, cur_hysteresis}, and back.
  std::vector<double> state() const;
  void set_state(const std::vector<double>& s);  // throws std::invalid_argument on a bad vector

 private:
  bool dynamic_;
  double cur_scale_;
  int64_t cur_iter_ = 0, last_overflow_iter_ = -1;
  int64_t cur_hysteresis_;
  int64_t window_, delayed_shift_;
  bool consecutive_;
  double min_scale_;
};

}  // namespace zf
