#include "graphs/train/loss_scaler.hpp"

#include <cmath>
#include <stdexcept>

#include "runtime/error.hpp"

namespace zf {

LossScaler::LossScaler(const Spec::Fp16& c)
    : dynamic_(c.loss_scale == 0.0),
      cur_scale_(c.loss_scale == 0.0 ? std::ldexp(1.0, c.initial_scale_power) : c.loss_scale),
      cur_hysteresis_(c.hysteresis),
      window_(c.loss_scale_window),
      delayed_shift_(c.hysteresis),
      consecutive_(c.consecutive_hysteresis),
      min_scale_((double)c.min_loss_scale) {}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;  // DeepSpeed's static LossScaler: update_scale does nothing
  if (overflow) {
    if (delayed_shift_ == 1 || cur_hysteresis_ == 1) {
      if (cur_scale_ == min_scale_)
        throw Error("fp16: gradient overflow with the loss scale already at fp16.min_loss_scale (" +
                    std::to_string((long long)min_scale_) + "); cannot decrease it (DeepSpeed stops here too)");
      cur_scale_ = std::max(cur_scale_ / 2.0, min_scale_);
    } else {
      --cur_hysteresis_;
    }
    last_overflow_iter_ = cur_iter_;
  } else {
    if (consecutive_) cur_hysteresis_ = delayed_shift_;
    const int64_t stable = cur_iter_ - last_overflow_iter_ - 1;
    if (stable > 0 && stable % window_ == 0) {
      if (!consecutive_) cur_hysteresis_ = delayed_shift_;
      cur_scale_ *= 2.0;
    }
  }
  ++cur_iter_;
}

std::vector<double> LossScaler::state() const {
  return {cur_scale_, (double)cur_iter_, (double)last_overflow_iter_, (double)cur_hysteresis_};
}

void LossScaler::set_state(const std::vector<double>& s) {
  if (s.size() != 4 || !(s[0] > 0) || !std::isfinite(s[0]) || s[1] < 0 || s[2] < -1 || s[2] >= s[1])
    throw std::invalid_argument("expected {scale > 0, iteration >= 0, last overflow in [-1, iteration), hysteresis}");
  cur_scale_ = s[0];
  cur_iter_ = (int64_t)s[1];
  last_overflow_iter_ = (int64_t)s[2];
  cur_hysteresis_ = (int64_t)s[3];
}

}  // namespace zf
