#include "graphs/schema/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "graphs/schema/fields.hpp"

namespace zf {

using json = nlohmann::json;

// DeepSpeed's three warm-up schedulers, with the params, defaults and checks of their constructors
// (a param the class does not take is an unknown key, as DeepSpeed's constructor would raise a
// TypeError).
LrSchedule LrSchedule::parse(Fields& f) {
  LrSchedule c;
  if (!f.find("type")) f.fail(f.at("type"), "required: WarmupLR, WarmupDecayLR or WarmupCosineLR");
  f.str("type", c.type);
  if (c.type != "WarmupLR" && c.type != "WarmupDecayLR" && c.type != "WarmupCosineLR")
    f.fail(f.at("type"), "'" + c.type + "' is not supported: WarmupLR, WarmupDecayLR or WarmupCosineLR (DeepSpeed's, same params)");
  const bool cosine = c.type == "WarmupCosineLR", needs_total = c.type != "WarmupLR";
  if (auto* p = f.object("params")) {
    Fields q(*p, f.at("params"), f.source());
    if (cosine) {
      q.number("warmup_min_ratio", c.warmup_min_ratio, 0.0, 1.0);
      q.number("cos_min_ratio", c.cos_min_ratio, 0.0, 1.0);
    } else {
      q.number("warmup_min_lr", c.warmup_min_lr, 0.0, 10.0);
      q.number("warmup_max_lr", c.warmup_max_lr, 0.0, 10.0);
    }
    // DeepSpeed: "warmup_num_steps must be a positive integer" (then max(2, it))
    q.integer("warmup_num_steps", c.warmup_num_steps, 1, INT32_MAX);
    q.str("warmup_type", c.warmup_type, {"log", "linear"});
    if (needs_total) {
      if (!q.find("total_num_steps"))
        q.fail(q.at("total_num_steps"), "required with " + c.type + " (the step at which the decay ends)");
      q.integer("total_num_steps", c.total_num_steps, 1, INT32_MAX);
    }
    q.finish();
  } else if (needs_total) {
    f.fail(f.at("params"), "required with " + c.type + " (at least total_num_steps)");
  }
  f.finish();
  return c;
}

json LrSchedule::to_json(double max_lr) const {
  json p = {{"warmup_num_steps", warmup_num_steps}, {"warmup_type", warmup_type}};
  if (type == "WarmupCosineLR") {
    p["warmup_min_ratio"] = warmup_min_ratio;
    p["cos_min_ratio"] = cos_min_ratio;
  } else {
    p["warmup_min_lr"] = warmup_min_lr;
    const double mx = warmup_max_lr < 0 ? max_lr : warmup_max_lr;
    if (mx >= 0) p["warmup_max_lr"] = mx;
  }
  if (type != "WarmupLR") p["total_num_steps"] = total_num_steps;
  return {{"type", type}, {"params", p}};
}

double LrSchedule::schedule_at(int64_t it, double optimizer_lr) const {
  if (type.empty()) return optimizer_lr;
  const int64_t W = std::max<int64_t>(2, warmup_num_steps);  // as DeepSpeed: at least 2
  auto warm = [&] {  // the warm-up's fraction at it < W
    return warmup_type == "log" ? (1.0 / std::log((double)W)) * std::log((double)it + 1.0) : (double)it / (double)W;
  };
  if (type == "WarmupCosineLR") {
    if (it < 0) return 0.0;  // get_lr before the first step(): [0.0 for each group]
    double ratio;
    if (it < W) {
      ratio = warmup_min_ratio + warm() * (1.0 - warmup_min_ratio);
    } else {
      const double real_last = (double)(it - W + 1), real_total = (double)std::max<int64_t>(1, total_num_steps - W);
      const double progress = std::min(1.0, real_last / real_total);
      ratio = std::max(0.0, cos_min_ratio + (1.0 - cos_min_ratio) * ((1.0 + std::cos(M_PI * progress)) / 2.0));
    }
    return optimizer_lr * ratio;
  }
  const double lo = warmup_min_lr, hi = peak_lr(optimizer_lr);
  if (it < 0) return lo;  // get_lr before the first step(): min_lrs
  double gamma = 1.0;
  if (it < W)
    gamma = warm();
  else if (type == "WarmupDecayLR")
    gamma = std::max(0.0, (double)(total_num_steps - it) / std::max(1.0, (double)(total_num_steps - W)));
  return lo + (hi - lo) * gamma;
}

std::string LrSchedule::describe(double optimizer_lr) const {
  std::ostringstream os;
  if (type.empty()) {
    os << "lr " << optimizer_lr << " (constant)";
    return os.str();
  }
  const int64_t W = std::max<int64_t>(2, warmup_num_steps);
  if (type == "WarmupCosineLR") {
    os << "lr WarmupCosineLR: " << warmup_min_ratio << " to 1 x " << optimizer_lr << " over " << W << " steps ("
       << warmup_type << "), then cosine to " << cos_min_ratio << " x at step " << total_num_steps;
  } else {
    os << "lr " << type << ": " << warmup_min_lr << " to " << peak_lr(optimizer_lr) << " over " << W << " steps ("
       << warmup_type << ")";
    if (type == "WarmupDecayLR") os << ", then linear to " << warmup_min_lr << " at step " << total_num_steps;
  }
  os << "; step t runs at the scheduler's iteration t - 1 (DeepSpeed's timing)";
  return os.str();
}

}  // namespace zf
