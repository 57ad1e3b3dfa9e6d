// ZeRO stage 3 (docs/data-parallel.md, "ZeRO stage 3"): the device parameters and gradients
// partitioned over the ranks. Each rank keeps persistent shards, its segment [b_r, b_{r+1}) of every
// parameter's value and gradient (the strategy's partition bounds); a layer group's whole values
// are transient StarPU-allocated tensors, gathered from the shards before the group's forward and
// its backward (one group ahead) and discarded after; its gradients are reduce-scattered into the
// shards as its backward completes (the groups in reverse order), then discarded. The strategy's
// crossings read and write the shards (resolve). Every collective is a task on the comm token.
#pragma once
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "models/workload.hpp"
#include "runtime/comm.hpp"

namespace zf {

// Which parameters' values are whole while the hooks of a step run. A group is whole while it
// runs: before_forward(g) gathers what of g is not whole, then prefetches the parameters of g + 1,
// in order, each that fits within the budget of whole elements; after_forward(g) releases g except
// the last group (its backward follows); before_backward(g) does as before_forward with g - 1;
// after_backward(g) releases g. So at most max(budget, the largest group's elements) are whole at
// once; a budget of the largest group's (Stage3's default) bounds the whole values to one layer's
// worth and still prefetches whatever of the next group fits beside the current one. Pure
// bookkeeping (no tasks): the engine's plan, tested on its own (tests/graphs/test_stage3.cpp).
class LiveGroups {
 public:
  using Item = std::pair<int, int>;  // (group, parameter index within the group)
  // numels[g][i]: elements of parameter i of group g; budget: elements whole at once, at least
  // the largest group's (a smaller one is raised to it)
  LiveGroups(std::vector<std::vector<int64_t>> numels, int64_t budget);
  // The parameters to gather (not yet whole) / to release (whole) at each hook, in order.
  std::vector<Item> before_forward(int g) { return want(g, g + 1); }
  std::vector<Item> after_forward(int g) { return g + 1 < groups() ? drop(g) : std::vector<Item>{}; }
  std::vector<Item> before_backward(int g) { return want(g, g - 1); }
  std::vector<Item> after_backward(int g) { return drop(g); }
  bool live(int g, int i) const { return live_[(size_t)g][(size_t)i]; }
  bool whole(int g) const;  // every parameter of g
  int groups() const { return (int)n_.size(); }
  int64_t budget() const { return budget_; }
  int64_t live_elems() const { return live_elems_; }

 private:
  std::vector<Item> want(int g, int next);
  std::vector<Item> drop(int g);
  std::vector<std::vector<int64_t>> n_;
  std::vector<std::vector<bool>> live_;
  int64_t budget_ = 0, live_elems_ = 0;
};

class Stage3 final : public LayerHook {
 public:
  // bounds: the strategy's partition (every parameter of `groups` partitioned; must outlive this);
  // allgather, reduce_scatter: the strategy's byte counters, which the collectives add to.
  // max_live: zero_optimization.stage3_max_live_parameters, the most elements of whole values at
  // once (LiveGroups; 0: the largest group's, one layer); accumulation: train.gradient_accumulation_steps A; above 1 each micro-batch's gradients are
  // reduce-scattered (their mean over the ranks) and accumulated, times 1 / A, into a third shard
  // per parameter (DeepSpeed's stage 3 likewise reduces every micro-batch: whole gradients never
  // outlive their layer's backward), copied into the gradient shard after the last micro-batch.
  Stage3(Runtime& rt, const Comm& comm, Workload& wl, const std::map<const Param*, std::vector<size_t>>& bounds,
         int64_t* allgather, int64_t* reduce_scatter, int64_t max_live, int accumulation, Wire wire);
  // The micro-batch (0 .. A - 1) whose forward and backward the workload submits next.
  void set_micro_batch(int mb) { mb_ = mb; }
  // The whole values (home tensors) -> this rank's shards; the values become transient and the
  // workload calls this hook. Waits for the copies.
  void shard();
  // Every rank together: the values whole again, home tensors, the hook off (checkpoints, the end
  // of the run: whatever reads the parameters outside a step). Waits for the gathers.
  void unshard();
  bool sharded() const { return sharded_; }
  // While sharded, a parameter's value or gradient -> its shard, *base = the segment's first
  // element; anything else -> dev itself, *base = 0.
  const Tensor& resolve(const Tensor& dev, size_t* base) const;

  void before_forward(int64_t step, int g) override;
  void after_forward(int64_t step, int g) override;
  void before_backward(int64_t step, int g) override;
  void after_backward(int64_t step, int g) override;

  // Device bytes of this rank (docs/metrics.md, device_state_bytes): the shards, and the most
  // whole values (gradients) the hooks keep at one time (the sum of the gathered tensors' bytes).
  int64_t param_shard_bytes() const;
  int64_t grad_shard_bytes() const { return (A_ > 1 ? 2 : 1) * param_shard_bytes(); }  // with the accumulators
  int64_t param_peak_bytes() const { return param_peak_; }
  int64_t grad_peak_bytes() const { return grad_peak_; }
  int64_t max_live_elems() const { return live_.budget(); }  // in effect

 private:
  struct Entry {
    Param* p;
    const std::vector<size_t>* b;
    int value_rank;      // this rank
    Tensor value, grad;  // the shards: this rank's segment (at least one element)
    Tensor acc;          // gradient accumulation (A > 1): the micro-batches' sum, a shard likewise
    size_t base() const;
    size_t len() const;
  };
  void gather(int64_t step, const std::vector<LiveGroups::Item>& items);
  void release(const std::vector<LiveGroups::Item>& items);
  int64_t group_bytes(int g) const;

  Runtime& rt_;
  const Comm& comm_;
  Workload& wl_;
  std::vector<std::vector<Entry>> groups_;
  std::map<const Tensor*, const Entry*> by_tensor_;  // &p->value, &p->grad -> its entry
  LiveGroups live_;
  bool sharded_ = false;
  int64_t *allgather_, *reduce_scatter_;
  int64_t live_bytes_ = 0, param_peak_ = 0, grad_peak_ = 0;
  const int A_;
  const Wire wire_;  // the gradients' reduce-scatter format (codelets/wire.hpp)
  int mb_ = 0;
};

}  // namespace zf
