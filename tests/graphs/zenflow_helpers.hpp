// Helpers shared by the ZenFlow engine tests (test_zenflow*.cpp, test_precision.cpp): the small
// ZenFlow spec, a key found anywhere in the metrics, and the first step where engine and the naive
// reference (tests/reference/zenflow_ref.hpp) part.
#pragma once
#include <functional>
#include <string>

#include "test_helpers.hpp"
#include "tests/kernels/kernel_helpers.hpp"
#include "tests/reference/zenflow_ref.hpp"

namespace zf::test {

// A zenflow spec on the tiny MLP: r = 0.25, reselection every 8 steps; K < 0: update_interval "auto".
inline Spec zen_spec(int64_t steps, int D, int64_t K, int64_t W, const std::string& sched = "lws") {
  Spec s = tiny_spec(steps, "zenflow", sched);
  s.zenflow.given = true;
  s.zenflow.topk_ratio = 0.25;
  s.zenflow.select_strategy = "step";
  s.zenflow.select_interval = 8;
  s.zenflow.update_interval = K < 0 ? UpdateInterval::automatic() : UpdateInterval(K);
  s.zenflow.overlap_step = D > 0;
  s.zenflow.max_staleness = D;
  s.zenflow.full_warm_up_rounds = W;
  return s;
}

// Finds a key anywhere in a JSON object tree (nullptr if absent).
inline const nlohmann::json* find_key(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object()) return nullptr;
  if (auto it = j.find(key); it != j.end()) return &*it;
  for (auto& [k, v] : j.items())
    if (auto* r = find_key(v, key)) return r;
  return nullptr;
}

// Reruns shorter trainings to find the first step after which engine and reference differ.
inline std::string first_divergent_step(const std::function<Spec(int64_t)>& make, int64_t steps) {
  for (int64_t s = 1; s <= steps; ++s) {
    const Spec sp = make(s);
    const std::string d = first_difference(train_and_capture(sp), ref::run_reference(sp).weights);
    if (!d.empty()) return "first differs after " + std::to_string(s) + " steps (step t=" +
                           std::to_string(s - 1) + ", flush included): engine vs reference " + d;
  }
  return "no divergence found in shorter runs";
}

}  // namespace zf::test
