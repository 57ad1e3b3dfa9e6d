// Shared by the precision bf16 tests of the Hugging Face families (test_llama.cpp, test_gpt2_hf.cpp,
// test_gpt2_hf_train.cpp; docs/spec.md, precision "bf16"): bf16's unit roundoff and the loss bound
// derived from it, a run of zenflow-run's trainer that keeps each step's parameters, gradients and
// loss, and the AdamW of device-adam's bf16 path in double on those gradients: each one rounded to
// bf16 (tests/reference/bf16_ref.hpp), a double master, the parameter the master rounded to bf16.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "graphs/train/trainer.hpp"
#include "test_helpers.hpp"
#include "tests/models/gpt_helpers.hpp"
#include "tests/reference/bf16_ref.hpp"
#include "tests/reference/reference.hpp"

namespace zf::test::bf16 {

// bf16 keeps 8 significant bits (7 stored): its spacing is 2^-7 of the binade's lower end, so
// rounding to nearest moves a value by at most 2^-8 of itself (the unit roundoff u).
inline constexpr double kU = 1.0 / 256;
// fp32's unit roundoff, 2^-24
inline constexpr double kU32 = 1.0 / 16777216;
// The fp32 engine's loss against the double reference (StepAndEvalMatchDoubleReference,
// Gpt2HfStep.MatchesDoubleReference): 1e-5 of the loss.
inline constexpr double kFp32LossTol = 1e-5;

// The bf16 engine's loss against the double reference's on the same (bf16) parameters. The bf16
// forward differs from the fp32 one by rounding each product's operands (relative error <= u each);
// to first order that changes the loss by at most u S, S the reference's sum over those operands of
// |x| |dL/dx| (llama_model_ref.hpp, gpt_ref.hpp). The terms of second order are u of the first
// ones' size (0.4 %): one eighth of u S covers them, and the fp32 arithmetic the fp32 tolerance.
inline double loss_bound(double loss, double S) { return (1.0 + 1.0 / 8) * kU * S + kFp32LossTol * std::fabs(loss); }

// The bf16 engine's gradient against the double reference's at the same (bf16) parameters, per
// tensor: |g - ref| <= sites u max|ref|. A count, not a proof: an element of a gradient is reached
// through a chain of products whose operands are rounded (on the forward's longest chain, each
// product's input; back, each product's output gradient; then the weight gradient's own two
// operands), each rounding an error of up to u relative to the magnitudes it carries; `sites` is
// twice the longest chain's count, the factor 2 for the cancellation in the sums (their terms'
// magnitudes exceed the result's). A missing or wrong term is off by a good part of max|ref|.
inline void expect_grads_within(const Weights& got, const std::map<std::string, std::vector<double>>& want,
                                double sites) {
  expect_grads_match(got, want, sites * kU);
}

inline bool is_bf16_value(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (u & 0xffffu) == 0;
}

inline Weights capture_values(Workload& wl) {
  Weights w;
  for (Param* p : wl.params()) w[p->name] = logical_values(*p);
  return w;
}

inline void set_values(Workload& wl, const Weights& w) {
  for (Param* p : wl.params()) set_logical_values(*p, w.at(p->name).data());
}

// A run of zenflow-run's trainer: each step's parameters (as its forward read them) and its
// gradients (before the bf16 rounding: RunOptions::after_backward), the step losses and the final
// parameters, all in the logical layout.
struct Capture {
  std::vector<Weights> params, grads;
  std::vector<double> losses;
  Weights final;
};
inline Capture run_capturing_steps(const Spec& s) {
  Capture c;
  RunOptions o;
  o.quiet = true;
  o.evaluate = false;
  o.after_backward = [&](Runtime& rt, Workload& wl, int64_t) {
    c.grads.push_back(read_grads(rt, wl));  // waits for the step's backward
    c.params.push_back(capture_values(wl));
  };
  o.inspect = [&](Runtime&, Workload& wl) { c.final = capture_values(wl); };
  const nlohmann::json m = run_training(s, o);
  c.losses = m.at("loss_history").at("loss").get<std::vector<double>>();
  return c;
}

// device-adam's bf16 update in double (docs/spec.md, precision "bf16"): the gradient rounded to
// bf16, AdamW (reference.hpp) on a double master that starts at the initial bf16 parameters, the
// parameter the master rounded to bf16.
class RoundedAdamRef {
 public:
  RoundedAdamRef(const Weights& start, const ref::AdamParams& hp) : hp_(hp) {
    for (auto& [n, v] : start) master_[n].assign(v.begin(), v.end()), m_[n].assign(v.size(), 0.0), v_[n] = m_[n];
  }
  // Step t (from 0) on gradients g (fp32, not rounded yet).
  void step(const Weights& g, int64_t t) {
    for (auto& [n, p] : master_) {
      std::vector<double> gb(p.size());
      for (size_t i = 0; i < p.size(); ++i) gb[i] = ref::naive_bf16(g.at(n)[i]);
      ref::adam_step(p.data(), gb.data(), m_[n].data(), v_[n].data(), p.size(), hp_, t + 1, 1.0);
    }
    ++steps_;
  }
  // Every parameter of `got` after the steps so far is the master rounded to bf16, as the fp32
  // master the engine holds rounds: that master is within e = 16 (steps + 1) u32 (|m| + lr) of the
  // double one (per step the fp32 AdamW rounds the decayed weight and the updated one, at most u32
  // |m| each, and its update of size <= ~lr through about ten operations, ~10 u32 lr; the start is
  // exact), so got lies between bf16(m - e) and bf16(m + e) (rounding is monotone): the same value
  // unless m is within e of a midpoint between two bf16 values. Returns the elements where the
  // two neighbours differ (an ambiguous rounding; e is ~1e-6, a bf16 spacing ~1e-3 here).
  int64_t expect_rounded_masters(const Weights& got, const std::string& what) const {
    int64_t ambiguous = 0;
    EXPECT_EQ(got.size(), master_.size());
    for (auto& [n, p] : master_) {
      SCOPED_TRACE(what + ": " + n);
      const std::vector<float>& e = got.at(n);
      int64_t bad = 0, first = -1;
      for (size_t i = 0; i < p.size(); ++i) {
        const double tol = 16.0 * (double)(steps_ + 1) * kU32 * (std::fabs(p[i]) + hp_.lr);
        const float lo = ref::naive_bf16((float)(p[i] - tol)), hi = ref::naive_bf16((float)(p[i] + tol));
        ambiguous += lo != hi;
        if (!(e[i] >= lo && e[i] <= hi && is_bf16_value(e[i]))) bad += 1, first = first < 0 ? (int64_t)i : first;
      }
      EXPECT_EQ(bad, 0) << "elements not the master rounded to bf16; the first, " << first << ": "
                        << (first >= 0 ? e[(size_t)first] : 0.0f) << " vs master "
                        << (first >= 0 ? p[(size_t)first] : 0.0);
    }
    return ambiguous;
  }
  const std::map<std::string, std::vector<double>>& master() const { return master_; }

 private:
  ref::AdamParams hp_;
  std::map<std::string, std::vector<double>> master_, m_, v_;
  int64_t steps_ = 0;
};

// The spec's AdamW hyperparameters for the reference (as tests/reference/zenflow_ref.hpp's
// ref::adam_params, which this header cannot include beside the kernels' AdamParams).
inline ref::AdamParams adam_params(const Spec& s) {
  return {(float)s.optimizer.lr, (float)s.optimizer.beta1, (float)s.optimizer.beta2, (float)s.optimizer.eps,
          (float)s.optimizer.weight_decay};
}

}  // namespace zf::test::bf16
