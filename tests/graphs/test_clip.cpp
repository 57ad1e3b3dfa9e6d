// gradient_clipping (docs/spec.md): the clip arithmetic against DeepSpeed's formula worked out by
// hand, and every strategy's engine against the naive reference (tests/reference/zenflow_ref.hpp:
// ref_clip, AdamRef, ZenFlowRef), bitwise, with the clip set where some steps clip and some do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "codelets/kernels/clip_math.hpp"
#include "codelets/kernels/cpu/kernels.hpp"
#include "test_helpers.hpp"
#include "tests/reference/zenflow_ref.hpp"

namespace zf::test {
namespace {

namespace cpu = zf::kernels::cpu;

// DeepSpeed (stage_1_and_2.py): combined = max(1, (norm + 1e-6) / clip); g *= 1 / combined.
TEST(GradientClipping, FactorIsDeepSpeedsCoefficient) {
  float out[3];
  const double parts[2] = {3.0, 1.0};  // sum of squares 4: norm 2
  cpu::clip_factor(parts, 2, 1.0, 1.0f, 1.0f, 1.0f, out);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[0], 1.0f / ((2.0f + 1e-6f) / 1.0f));
  EXPECT_EQ(out[2], 1.0f);
  cpu::clip_factor(parts, 2, 1.0, 5.0f, 1.0f, 1.0f, out);  // below the clip: untouched
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[2], 0.0f);
  cpu::clip_factor(parts, 2, 4.0, 0.5f, 1.0f, 0.25f, out);  // ZenFlow's mean of n = 2: norm 1, factor x 1/4... x 1/2
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[0], (1.0f / ((1.0f + 1e-6f) / 0.5f)) * 0.25f);
  const double inf[1] = {std::numeric_limits<double>::infinity()};
  cpu::clip_factor(inf, 1, 1.0, 1.0f, 1.0f, 1.0f, out);  // DeepSpeed: a non-finite norm is -1, nothing clipped
  EXPECT_EQ(out[1], -1.0f);
  EXPECT_EQ(out[0], 1.0f);
  // the single point a loss scale joins: the norm of the scaled gradient, unscaled and clipped at once
  EXPECT_EQ(kernels::clip_math::combined_scale(2048.0f, 1.0f, 1024.0f), 1024.0f * ((2.0f + 1e-6f) / 1.0f));
  EXPECT_EQ(kernels::clip_math::combined_scale(512.0f, 1.0f, 1024.0f), 1024.0f);
  EXPECT_EQ(cpu::sumsq(std::vector<float>{3.0f, 4.0f}.data(), 2), 25.0);
}


Spec zen(int D) {
  Spec s = tiny_spec(24, "zenflow");
  s.zenflow.given = true;
  s.zenflow.topk_ratio = 0.25;
  s.zenflow.select_strategy = "step";
  s.zenflow.select_interval = 8;
  s.zenflow.update_interval = 4;
  s.zenflow.overlap_step = D > 0;
  s.zenflow.max_staleness = D;
  s.zenflow.full_warm_up_rounds = 2;
  return s;
}

// The clip set at the median norm of an unclipped reference run, so that some clip points clip
// and some do not; then the engine equals the reference bitwise (weights, every norm, the count).
void expect_clipping_matches_reference(Spec s) {
  Spec probe = s;
  probe.gradient_clipping = 1e9;  // norms recorded, nothing clipped
  const ref::RefRun unclipped = ref::run_reference(probe);
  ASSERT_FALSE(unclipped.clips.empty());
  std::vector<float> norms;
  for (auto& [t, c] : unclipped.clips) norms.push_back(c.norm);
  std::sort(norms.begin(), norms.end());
  s.gradient_clipping = norms[norms.size() / 2];
  const ref::RefRun r = ref::run_reference(s);
  int64_t clipped = 0;
  for (auto& [t, c] : r.clips) clipped += c.clipped;
  ASSERT_GT(clipped, 0);
  ASSERT_LT(clipped, (int64_t)r.clips.size());

  nlohmann::json m;
  const Weights eng = train_and_capture(s, &m);
  EXPECT_EQ(first_difference(eng, r.weights), "");
  ASSERT_TRUE(m.contains("gradient_clipping"));
  const auto& g = m["gradient_clipping"];
  EXPECT_EQ(g["clipped_steps"].get<int64_t>(), clipped);
  ASSERT_EQ(g["norms"].size(), r.clips.size());
  for (size_t i = 0; i < r.clips.size(); ++i) {
    EXPECT_EQ(g["steps"][i].get<int64_t>(), r.clips[i].first);
    EXPECT_EQ(g["norms"][i].get<float>(), r.clips[i].second.norm) << "clip point " << i;
  }
  Spec off = s;
  off.gradient_clipping = 0;
  EXPECT_NE(first_difference(eng, train_and_capture(off)), "") << "clipping changed nothing";
}

TEST(GradientClipping, DeviceAdamEqualsReference) { expect_clipping_matches_reference(tiny_spec(20, "device-adam")); }
// precision bf16: device-adam's grouped update (insert_adam_group) then leaves the gradients'
// rounding to the trainer, before the clip reads them
TEST(GradientClipping, Bf16DeviceAdamEqualsReference) {
  Spec s = tiny_spec(20, "device-adam");
  s.precision = "bf16";
  expect_clipping_matches_reference(s);
}
TEST(GradientClipping, ZeroOffloadEqualsReference) { expect_clipping_matches_reference(tiny_spec(20, "zero-offload")); }
TEST(GradientClipping, ZeroOffloadDpuEqualsReference) {
  expect_clipping_matches_reference(tiny_spec(20, "zero-offload-dpu"));
}
// ZenFlow clips where DeepSpeed's does: the host step's gradient at each interval's boundary
// (every step of the warm-up), by the norm of that gradient; the device steps are not clipped.
TEST(GradientClipping, ZenFlowSynchronousEqualsReference) { expect_clipping_matches_reference(zen(0)); }
TEST(GradientClipping, ZenFlowOverlappedEqualsReference) { expect_clipping_matches_reference(zen(1)); }

TEST(GradientClipping, ZenFlowClipsOncePerHostUpdate) {
  Spec s = zen(1);
  s.gradient_clipping = 1e9;
  nlohmann::json m;
  train_and_capture(s, &m);
  EXPECT_EQ(m["gradient_clipping"]["steps"].get<std::vector<int64_t>>(), m["host_update_steps"].get<std::vector<int64_t>>());
  EXPECT_EQ(m["gradient_clipping"]["clipped_steps"].get<int64_t>(), 0);
}

// precision fp16 with dynamic loss scaling: device-adam and zero-offload clip the still-scaled
// gradient with DeepSpeed's combined factor, 1 / (S x max(1, (norm / S + 1e-6) / clip)), and
// their AdamW then takes grad_scale 1; ZenFlow clips its host step's gradient, already unscaled
// on the device. Steps skipped for an overflow have no clip point. The first scale (2^24)
// overflows and the window of 5 grows it again, so the scale changes while clipping is active.
TEST(GradientClipping, Fp16DynamicLossScalingEqualsReference) {
  auto fp16_of = [](Spec s) {
    s.precision = "fp16";
    s.fp16.initial_scale_power = 24;
    s.fp16.loss_scale_window = 5;
    return s;
  };
  for (const Spec& base : {fp16_of(tiny_spec(24, "device-adam")), fp16_of(tiny_spec(24, "zero-offload")), fp16_of(zen(1))}) {
    SCOPED_TRACE(base.strategy);
    Spec probe = base;
    probe.gradient_clipping = 1e9;  // norms recorded, nothing clipped
    const ref::RefRun unclipped = ref::run_reference(probe);
    ASSERT_FALSE(unclipped.clips.empty());
    std::vector<float> norms;
    for (auto& [t, c] : unclipped.clips) norms.push_back(c.norm);
    std::sort(norms.begin(), norms.end());
    Spec s = base;
    s.gradient_clipping = norms[norms.size() / 2];
    const ref::RefRun r = ref::run_reference(s);
    ASSERT_FALSE(r.skipped.empty()) << "the first scale must overflow for this test to mean something";
    int64_t clipped = 0;
    for (auto& [t, c] : r.clips) clipped += c.clipped;
    ASSERT_GT(clipped, 0);
    ASSERT_LT(clipped, (int64_t)r.clips.size());

    nlohmann::json m;
    const Weights eng = train_and_capture(s, &m);
    EXPECT_EQ(first_difference(eng, r.weights), "");
    EXPECT_EQ(m["fp16"]["skipped_at"].get<std::vector<int64_t>>(), r.skipped);
    EXPECT_EQ(m["fp16"]["loss_scale"].get<double>(), r.loss_scale);
    ASSERT_TRUE(m.contains("gradient_clipping"));
    const auto& g = m["gradient_clipping"];
    EXPECT_EQ(g["clipped_steps"].get<int64_t>(), clipped);
    ASSERT_EQ(g["norms"].size(), r.clips.size());
    for (size_t i = 0; i < r.clips.size(); ++i)  // the unscaled norm, as DeepSpeed reports it
      EXPECT_EQ(g["norms"][i].get<float>(), r.clips[i].second.norm) << "clip point " << i;
    const std::vector<int64_t> steps = g["steps"].get<std::vector<int64_t>>();
    for (int64_t t : r.skipped)
      EXPECT_EQ(std::count(steps.begin(), steps.end(), t), 0) << "a clip point at skipped step " << t;
    if (base.strategy != "zenflow") {  // a clip point at every applied step
      std::vector<int64_t> applied;
      for (int64_t t = 0; t < 24; ++t)
        if (std::find(r.skipped.begin(), r.skipped.end(), t) == r.skipped.end()) applied.push_back(t);
      EXPECT_EQ(steps, applied);
    }
    Spec off = s;
    off.gradient_clipping = 0;
    EXPECT_NE(first_difference(eng, train_and_capture(off)), "") << "clipping changed nothing";
  }
}

// gradient_accumulation_steps (DeepSpeed's: each micro-batch's gradient scaled by 1/A and summed):
// 4 micro-batches of 4 rows compute the gradient of the same 16 rows as one batch of 16, up to
// the order of the float sums.
double max_abs_diff(const Weights& a, const Weights& b, double* scale) {
  double d = 0, mx = 0;
  for (auto& [k, v] : b)
    for (size_t i = 0; i < v.size(); ++i) {
      d = std::max(d, std::fabs((double)a.at(k)[i] - v[i]));
      mx = std::max(mx, std::fabs((double)v[i]));
    }
  *scale = mx;
  return d;
}

TEST(GradientAccumulation, FourMicroBatchesOfFourEqualOneBatchOfSixteen) {
  for (const char* strategy : {"device-adam", "zero-offload"}) {
    SCOPED_TRACE(strategy);
    Spec one = tiny_spec(10, strategy);
    one.train.batch_size = 16;
    // eps 1: AdamW's step is then close to lr x g (no division of a tiny gradient entry by its own
    // magnitude), so the weights compare the gradients themselves
    one.optimizer.eps = 1.0;
    one.optimizer.lr = 0.05;
    Spec four = one;
    four.train.gradient_accumulation_steps = 4;
    nlohmann::json m1, m4;
    const Weights w1 = train_and_capture(one, &m1), w4 = train_and_capture(four, &m4);
    double scale = 0;
    const double d = max_abs_diff(w4, w1, &scale);
    // float sums in another order: a few ulps of each gradient, times lr, over 10 steps
    EXPECT_LE(d, 1e-6 * scale) << "max |w4 - w1| " << d << " of max |w| " << scale;
    EXPECT_NEAR(m4["final"]["train_loss"].get<double>(), m1["final"]["train_loss"].get<double>(), 1e-5);
    EXPECT_EQ(m4["gradient_accumulation"]["steps"].get<int>(), 4);
    EXPECT_EQ(m4["gradient_accumulation"]["micro_batch_size"].get<int>(), 4);
    EXPECT_EQ(m4["batch_size"].get<int>(), 16);
    // and it is the whole batch's gradient: one micro-batch of 4 alone moves the weights elsewhere
    Spec small = one;
    small.train.batch_size = 4;
    double s2 = 0;
    EXPECT_GT(max_abs_diff(train_and_capture(small), w1, &s2), 1e3 * d);
  }
}

}  // namespace
}  // namespace zf::test
