// The learning-rate schedule: DeepSpeed's "scheduler" block, same form, defaults and formulas
// (deepspeed/runtime/lr_schedules.py; docs/spec.md), on DeepSpeed's timing: the engine steps the
// scheduler after the optimizer, so optimizer step t (0-based) runs at the rate the scheduler holds
// at last_batch_iteration = t - 1 (-1: the value its constructor set). No block (type ""): the
// constant optimizer.lr. The optimizer's rate is an argument: WarmupLR's default peak and
// WarmupCosineLR's scale are the optimizer's rate, which is the optimizer block's field.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace zf {

class Fields;

struct LrSchedule {
  std::string type;             // "" (none) | WarmupLR | WarmupDecayLR | WarmupCosineLR
  double warmup_min_lr = 0.0;
  // -1: optimizer.lr (WarmupLR's default, the optimizer's rate; deepspeed_patch writes
  // WarmupDecayLR's default, 0.001)
  double warmup_max_lr = -1.0;
  int64_t warmup_num_steps = 1000;
  int64_t total_num_steps = 0;  // WarmupDecayLR, WarmupCosineLR: required
  std::string warmup_type = "log";  // log | linear
  // WarmupCosineLR: ratios of optimizer.lr (its peak is the optimizer's rate)
  double warmup_min_ratio = 0.0, cos_min_ratio = 0.0001;

  // The block {"type": ..., "params": {...}} at `f` (its type, then the params that type takes).
  static LrSchedule parse(Fields& f);
  // The block with every param written out; warmup_max_lr unset (-1) becomes max_lr (-1: stays
  // unset, the optimizer's rate).
  nlohmann::json to_json(double max_lr) const;

  // The rate DeepSpeed's scheduler holds at last_batch_iteration `it` (>= -1).
  double schedule_at(int64_t it, double optimizer_lr) const;
  // The learning rate of optimizer step t (0-based): schedule_at(t - 1).
  double lr_at(int64_t t, double optimizer_lr) const { return schedule_at(t - 1, optimizer_lr); }
  // The rate after the warm-up: warmup_max_lr, or the optimizer's rate when it is unset (and for
  // WarmupCosineLR, whose peak is always the optimizer's rate).
  double peak_lr(double optimizer_lr) const {
    return warmup_max_lr < 0 || type == "WarmupCosineLR" ? optimizer_lr : warmup_max_lr;
  }
  // One line for the run header: "lr 0.001 (constant)" or the schedule with its numbers.
  std::string describe(double optimizer_lr) const;
};

}  // namespace zf
