// Gradients that leave the device during the backward (docs/architecture.md, "Gradients in
// flight"), as DeepSpeed's stage 1/2 offload reduces them into the host partitions bucket by
// bucket: right after a layer group's backward (the workload's layer hook, models/workload.hpp)
// each of its gradients that the strategy only crosses (Strategy::streams_gradient) gets its
// collective (a data-parallel run) and its crossing. The device buffers are shared: a gradient of
// group g and the same-shaped one of group g + S (same position in the group, same storage) are
// one buffer (Tensor::alias), so group g's backward writes it only once group g + S's crossing
// has read it (StarPU's sequential consistency: write after read). S = max(2, zero_optimization.
// reduce_bucket_size / the largest group's streamed elements): at most S groups' gradients of a
// kind are on the device at once, one being written while the others cross. A gradient without
// a partner (the embeddings, the head) keeps its own buffer and crosses as early. Results are
// bitwise those of whole gradients: the same tasks on the same values, submitted earlier.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/workload.hpp"

namespace zf {

class Comm;
class Strategy;
struct Spec;

// Why a run keeps its streamed-capable gradients whole for the step (runtime.stream_gradients
// false, gradient accumulation, fp16's overflow check, ZeRO stage 3, no layer groups), or "" when
// it streams them. groups: the workload has layer groups.
std::string grad_stream_off(const Spec& s, int ranks, bool groups);

// S from the bucket and the largest group's streamed elements (at least 2).
int grad_stream_slots(int64_t bucket, int64_t largest_group);

class GradStream final : public LayerHook {
 public:
  // The parameters of wl.layer_groups() that strat streams (their gradients become aliases of
  // their partners'; call before any step); bucket: reduce_bucket_size in elements; round_bf16:
  // the trainer rounds 4-byte bf16 gradients after the backward (Precision::rounds_bf16_gradients).
  GradStream(Runtime& rt, Workload& wl, Strategy& strat, const Comm* comm, int64_t bucket, bool round_bf16);
  bool active() const { return streamed_ > 0; }
  int64_t streamed_params() const { return streamed_; }
  int64_t shared_params() const { return shared_; }  // those whose buffer is a partner's
  int slots() const { return S_; }
  // Bytes of the streamed gradients' buffers (each shared one once).
  int64_t peak_bytes() const { return peak_; }

  void before_forward(int64_t, int) override {}
  void after_forward(int64_t, int) override {}
  void before_backward(int64_t, int) override {}
  void after_backward(int64_t step, int g) override;

 private:
  Strategy& strat_;
  const Comm* comm_;
  std::vector<std::vector<Param*>> groups_;  // per layer group: its streamed parameters
  int S_ = 2;
  int64_t streamed_ = 0, shared_ = 0, peak_ = 0;
};

}  // namespace zf
