// Gradients that leave the device during the backward (graphs/train/grad_stream.hpp).
#include "graphs/train/grad_stream.hpp"

#include <algorithm>
#include <set>

#include "graphs/schema/spec.hpp"
#include "graphs/strategies/strategy.hpp"

namespace zf {

std::string grad_stream_off(const Spec& s, int ranks, bool groups) {
  if (!s.runtime.stream_gradients) return "runtime.stream_gradients is false";
  if (s.train.gradient_accumulation_steps > 1) return "gradient accumulation sums them on the device";
  if (s.precision == "fp16") return "fp16's overflow check reads them after the backward";
  if (s.zero_stage == 3 && ranks > 1) return "ZeRO stage 3 reduce-scatters them into shards";
  if (!groups) return "the model has no layer groups (a tied head)";
  return "";
}

int grad_stream_slots(int64_t bucket, int64_t largest_group) {
  return (int)std::max<int64_t>(2, largest_group > 0 ? bucket / largest_group : 2);
}

namespace {
bool same_kind(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.elem_size() == b.elem_size() && a.stored_half() == b.stored_half() &&
         (!a.stored_half() || a.half() == b.half());
}
}  // namespace

GradStream::GradStream(Runtime&, Workload& wl, Strategy& strat, const Comm* comm, int64_t bucket, bool round_bf16)
    : strat_(strat), comm_(comm) {
  std::set<const Param*> all;
  int64_t largest = 0;
  for (const std::vector<Param*>& g : wl.layer_groups()) {
    groups_.emplace_back();
    int64_t n = 0;
    for (Param* p : g)
      if (strat.streams_gradient(*p)) {
        groups_.back().push_back(p);
        n += (int64_t)p->grad.numel();
        all.insert(p);
      }
    largest = std::max(largest, n);
  }
  streamed_ = (int64_t)all.size();
  if (!active()) return;
  S_ = grad_stream_slots(bucket, largest);
  // from the top: a partner in group g + S is resolved (its own buffer, or its partner's) first
  const int G = (int)groups_.size();
  for (int g = G - 1 - S_; g >= 0; --g) {
    const std::vector<Param*>& mine = groups_[(size_t)g];
    const std::vector<Param*>& theirs = groups_[(size_t)(g + S_)];
    for (size_t i = 0; i < mine.size() && i < theirs.size(); ++i)
      if (same_kind(mine[i]->grad, theirs[i]->grad)) {
        mine[i]->grad = Tensor::alias(theirs[i]->grad, mine[i]->name + ".grad");
        ++shared_;
      }
  }
  for (const std::vector<Param*>& g : groups_)
    for (const Param* p : g)
      if (!p->grad.is_alias()) peak_ += (int64_t)p->grad.bytes();
  strat.set_streamed(std::move(all), peak_, round_bf16);
}

// The group's gradients are written: each one's collective, crossing and whatever else the
// strategy reads of it, submitted now, so that they run as soon as the backward has written it
// and before the group S below rewrites the shared buffer.
void GradStream::after_backward(int64_t step, int g) {
  const UpdateStep u{step, step, 1.0f};  // streaming runs have no fp16 (every step is applied)
  for (const Param* p : groups_[(size_t)g]) strat_.stream_gradient(u, *p, comm_);
}

}  // namespace zf
