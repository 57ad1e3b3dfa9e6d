// Precision (docs/spec.md: precision, fp16): bf16 and fp16 runs of every strategy against the naive reference
// (tests/reference/zenflow_ref.hpp), bitwise; DeepSpeed's dynamic loss scaler (graphs/train/
// loss_scaler.hpp) on hand-checked and random sequences; forced overflows skip exactly their step;
// crossings carry two bytes per value; 2-byte parameters train the 4-byte words' weights bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "codelets/codelets.hpp"
#include "graphs/train/loss_scaler.hpp"
#include "graphs/train/memory_estimate.hpp"
#include "test_helpers.hpp"
#include "tests/graphs/zenflow_helpers.hpp"
#include "tests/reference/fp16_ref.hpp"
#include "tests/reference/zenflow_ref.hpp"

namespace zf::test {
namespace {
// ------------------------------------------------------------------ precision bf16

bool all_bf16(const Weights& w) {
  for (auto& [name, v] : w)
    for (float x : v) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      if (u & 0xffffu) return false;
    }
  return true;
}

double bytes_of(const nlohmann::json& m, const char* dir) { return m["bytes"][dir].get<double>(); }
std::vector<int64_t> skipped_at(const nlohmann::json& m);

TEST(Bf16Engine, BaselinesEqualReferenceBitwise) {
  for (const char* strat : {"device-adam", "zero-offload"}) {
    SCOPED_TRACE(strat);
    Spec s = tiny_spec(20, strat);
    s.precision = "bf16";
    const Weights w = train_and_capture(s);
    EXPECT_EQ(first_difference(w, ref::run_reference(s).weights), "");
    EXPECT_TRUE(all_bf16(w)) << "device parameters hold bf16 values";
    Spec f = s;
    f.precision = "fp32";
    EXPECT_NE(first_difference(w, train_and_capture(f)), "") << "bf16 must change the result";
  }
}

TEST(Bf16Engine, DeviceAdamComputesWhatZeroOffloadDoes) {
  // both: fp32 master weights updated with bf16 gradients, device parameters = bf16(master)
  Spec d = tiny_spec(20, "device-adam"), z = tiny_spec(20, "zero-offload");
  d.precision = z.precision = "bf16";
  EXPECT_EQ(first_difference(train_and_capture(d), train_and_capture(z)), "");
}

TEST(Bf16Engine, ZenFlowEqualsReferenceBitwise) {
  for (auto [D, K, W] : {std::tuple<int, int64_t, int64_t>{1, 4, 0}, {0, 1, 2}, {2, 4, 2}}) {
    SCOPED_TRACE("D=" + std::to_string(D) + " K=" + std::to_string(K) + " W=" + std::to_string(W));
    auto make = [&](int64_t n) {
      Spec s = zen_spec(n, D, K, W);
      s.precision = "bf16";
      return s;
    };
    const Spec s = make(30);
    const Weights w = train_and_capture(s);
    EXPECT_EQ(first_difference(w, ref::run_reference(s).weights), "") << first_divergent_step(make, 30);
    EXPECT_TRUE(all_bf16(w));
  }
}

// Issue 43, "no update is rounded away": under bf16 and fp16 (semantics zenflow) every element
// ZenFlow updates on the device, the selected columns and the 1-D parameters, has an fp32 master.
// With every column selected once (topk_ratio 1, no reselection in the run, no warm-up) nothing is
// left to the host's merges, so ZenFlow is device-adam: bitwise its weights, at DeepSpeed's
// fine-tuning rate 2e-5 and at 3e-4, where most AdamW steps are below half a spacing of the
// rounded weights (in place they would be rounded away; device-adam keeps them on its masters).
TEST(HalfPrecisionZenFlow, EveryColumnSelectedIsDeviceAdamBitwise) {
  for (const char* precision : {"bf16", "fp16"})
    for (double lr : {2e-5, 3e-4}) {
      SCOPED_TRACE(std::string(precision) + " lr " + std::to_string(lr));
      Spec z = zen_spec(10, 0, 4, 0), d = tiny_spec(10, "device-adam");
      z.zenflow.topk_ratio = 1.0;
      z.zenflow.select_interval = 100;  // past the run: the first selection only
      z.precision = d.precision = precision;
      z.optimizer.lr = d.optimizer.lr = lr;
      const Weights wz = train_and_capture(z), wd = train_and_capture(d);
      EXPECT_EQ(first_difference(wz, wd), "");
      Spec s0 = d;  // the start's weights (rounded): a run of one step at a rate that moves nothing
      s0.train.steps = 1;
      s0.optimizer.lr = 0.0;
      const Weights w0 = train_and_capture(s0);
      for (auto& [name, v] : wz) {  // every tensor moved (the 1-D biases, every weight)
        const std::vector<float>& a = w0.at(name);
        EXPECT_NE(std::memcmp(v.data(), a.data(), v.size() * sizeof(float)), 0) << name << " did not move";
      }
    }
}

TEST(Bf16Engine, CrossingsCarryTwoBytesPerValue) {
  // zero-offload and its delayed variant: gradients down and parameters up in bf16, half the bytes;
  // zenflow: parameters up (merges) and down (resyncs) in bf16, the accumulated gradient in fp32
  // (docs/spec.md)
  for (const char* strat : {"zero-offload", "zero-offload-dpu", "zenflow"}) {
    SCOPED_TRACE(strat);
    Spec f = std::string(strat) == "zenflow" ? zen_spec(16, 1, 4, 0) : tiny_spec(16, strat);
    Spec b = f;
    b.precision = "bf16";
    nlohmann::json mf, mb;
    train_and_capture(f, &mf);
    const Weights wb = train_and_capture(b, &mb);
    EXPECT_TRUE(all_bf16(wb));
    EXPECT_EQ(mb["precision"], "bf16");
    EXPECT_GT(bytes_of(mf, "host_to_device"), 0);
    EXPECT_EQ(bytes_of(mb, "host_to_device") * 2, bytes_of(mf, "host_to_device"));
    // zenflow (accumulate_on "host", the default): the gradients accumulated on the host cross every
    // step and the resync at the reselection, both in bf16
    EXPECT_EQ(bytes_of(mb, "device_to_host") * 2, bytes_of(mf, "device_to_host"));
    if (std::string(strat) == "zenflow") {
      // accumulate_on "device": the accumulation's crossing counts the fp32 gradient in both; only
      // the one resync (the reselection at step 8: the 2-D weights' device parameters go to the
      // host masters) crosses in bf16
      f.zenflow.accumulate_on = b.zenflow.accumulate_on = "device";
      train_and_capture(f, &mf);
      train_and_capture(b, &mb);
      const double weights_2d = 784 * 32 + 32 * 16 + 16 * 10;  // tiny_spec's MLP
      EXPECT_DOUBLE_EQ(bytes_of(mf, "device_to_host") - bytes_of(mb, "device_to_host"), weights_2d * 2 / 16);
    }
  }
}

// zenflow.accumulate_on (issue 43): "host" (the default: a host task sums the gradient every step,
// under bf16/fp16 what crossed at 2 bytes, at fp32 the device gradient itself) and "device" (a crossing task adds the fp32
// gradient into the accumulator) train bitwise the same weights: the gradient crosses before the
// loss scale's and 1/K's factors, so at 2 bytes it is exact, and the host applies the factors as
// the device does. Under fp32, bf16 and fp16 (with skipped overflow steps, whose updates the
// crossing slots' parity skips too), semantics zenflow and deepspeed (with gradient clipping: the
// 1-D window sums), staleness 0 and 1. Where the tasks run and the device's accumulator bytes
// follow the option.
TEST(ZenFlowAccumulateOn, HostAndDeviceTrainTheSameWeights) {
  struct Case {
    const char* precision;
    bool deepspeed;
    int D;
  };
  for (const Case c : {Case{"fp32", false, 1}, Case{"bf16", false, 0}, Case{"bf16", false, 1}, Case{"fp16", false, 1},
                       Case{"bf16", true, 1}, Case{"fp32", true, 0}}) {
    SCOPED_TRACE(std::string(c.precision) + (c.deepspeed ? " semantics deepspeed" : "") + " D=" + std::to_string(c.D));
    Spec h = zen_spec(20, c.D, 4, 2);
    h.precision = c.precision;
    if (std::string(c.precision) == "fp16") {  // overflows in the first steps: skipped updates
      h.fp16.initial_scale_power = 24;
      h.fp16.loss_scale_window = 5;
    }
    if (c.deepspeed) {
      h.zenflow.semantics = "deepspeed";
      h.gradient_clipping = 0.05;
    }
    Spec d = h;
    d.zenflow.accumulate_on = "device";
    std::map<std::string, int> host_side, device_side;  // task name prefix -> count, steps >= 0
    nlohmann::json mh, md;
    auto run = [&](const Spec& s, nlohmann::json& m, bool count) {
      Weights w;
      RunOptions o;
      o.quiet = true;
      o.evaluate = false;
      o.inspect = [&](Runtime& rt, Workload& wl) {
        for (Param* p : wl.params()) w[p->name] = logical_values(*p);
        if (count)
          for (const TaskRecord& r : rt.tracker().records())
            for (const char* pre : {"accumulate.", "d2h.grad."})
              if (r.step >= 0 && std::string(r.name).rfind(pre, 0) == 0)
                (r.side == Side::Host ? host_side : device_side)[pre]++;
      };
      m = run_training(s, o);
      return w;
    };
    const Weights wh = run(h, mh, true);
    EXPECT_GT(host_side["accumulate."], 0);
    EXPECT_EQ(device_side["accumulate."], 0) << "the sums run on the host";
    if (std::string(c.precision) == "fp32")  // the host task reads the device gradient: StarPU's transfer
      EXPECT_EQ(device_side["d2h.grad."] + host_side["d2h.grad."], 0);
    else
      EXPECT_GT(device_side["d2h.grad."], 0) << "the gradient crosses from the device at 2 bytes";
    EXPECT_EQ(mh["device_state_bytes"]["accumulator"], 0);
    host_side.clear();
    device_side.clear();
    const Weights wd = run(d, md, true);
    EXPECT_EQ(first_difference(wh, wd), "");
    EXPECT_EQ(host_side["accumulate."], 0);
    EXPECT_GT(device_side["accumulate."], 0);
    EXPECT_EQ(device_side["d2h.grad."], 0);
    const double weights_2d = 784 * 32 + 32 * 16 + 16 * 10;  // tiny_spec's MLP
    const double biases = 32 + 16 + 10;
    EXPECT_EQ(md["device_state_bytes"]["accumulator"].get<double>(), 4 * (weights_2d + (c.deepspeed ? biases : 0)));
    EXPECT_EQ(md["device_state_bytes"]["total"].get<double>() - mh["device_state_bytes"]["total"].get<double>(),
              md["device_state_bytes"]["accumulator"].get<double>());
    if (std::string(c.precision) == "fp16") {
      EXPECT_FALSE(skipped_at(mh).empty()) << "no overflow exercised the skip";
      EXPECT_EQ(skipped_at(mh), skipped_at(md));
    }
  }
}

// Issue 43, 2-byte storage: under bf16 and fp16 every device parameter is a 2-byte buffer
// (Tensor::store_half; device_state_bytes.params 2 bytes per parameter), under bf16 the gradients
// too where two_byte_gradients allows (graphs/strategies/registry.hpp: not where the device scales
// them in place, fp16, accumulation), and every strategy trains bitwise the weights of the 4-byte
// words they replace (RunOptions::half_storage false: the values rounded in fp32 words after every
// update and every backward), with the same losses: the codelets read the 2-byte values widened
// (exact) and every write is rounded as the words' rounding did (each gradient of the MLP has one
// writer a step). Device-adam, zero-offload, zero-offload-dpu and zenflow (semantics zenflow,
// staleness 1; semantics deepspeed with clipping), clipping on the host and on the device, fp16
// with skipped overflow steps, gradient accumulation.
TEST(HalfStorage, TwoByteParametersTrainTheWordsWeightsBitwise) {
  struct Case {
    const char* strategy;
    const char* precision;
    const char* variant;
    int grad_bytes;  // the gradients' bytes per value on the device
  };
  for (const Case c : {Case{"device-adam", "bf16", "", 2}, Case{"zero-offload", "bf16", "", 2},
                       Case{"zero-offload-dpu", "bf16", "", 2}, Case{"zenflow", "bf16", "", 2},
                       Case{"zero-offload", "bf16", "clipping", 2}, Case{"device-adam", "bf16", "clipping", 4},
                       Case{"zenflow", "bf16", "deepspeed", 4}, Case{"device-adam", "fp16", "", 4},
                       Case{"zenflow", "fp16", "", 4}, Case{"zero-offload", "bf16", "accumulation", 4}}) {
    SCOPED_TRACE(std::string(c.strategy) + " " + c.precision + " " + c.variant);
    Spec s = std::string(c.strategy) == "zenflow" ? zen_spec(12, 1, 4, 2) : tiny_spec(12, c.strategy);
    s.precision = c.precision;
    if (std::string(c.precision) == "fp16") {  // overflows in the first steps: skipped updates
      s.fp16.initial_scale_power = 24;
      s.fp16.loss_scale_window = 5;
    }
    if (std::string(c.variant) == "deepspeed") {
      s.zenflow.semantics = "deepspeed";
      s.gradient_clipping = 0.05;
    }
    if (std::string(c.variant) == "accumulation") s.train.gradient_accumulation_steps = 2;
    if (std::string(c.variant) == "clipping") s.gradient_clipping = 0.05;
    auto run = [&](bool half, nlohmann::json& m) {
      RunOptions o;
      o.evaluate = false;
      o.half_storage = half;
      return run_capturing(s, o, &m);
    };
    nlohmann::json mh, mw;
    const Weights wh = run(true, mh), ww = run(false, mw);
    EXPECT_EQ(first_difference(wh, ww), "");
    EXPECT_EQ(mh["loss_history"], mw["loss_history"]);
    EXPECT_TRUE(std::string(c.precision) == "bf16" ? all_bf16(wh) : true);
    const double numel = 784 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10;  // tiny_spec's MLP
    EXPECT_EQ(mh["device_state_bytes"]["params"].get<double>(), 2 * numel) << "2 bytes per parameter";
    EXPECT_EQ(mw["device_state_bytes"]["params"].get<double>(), 4 * numel);
    EXPECT_EQ(mh["device_state_bytes"]["grads"].get<double>(), c.grad_bytes * numel);
    EXPECT_EQ(mw["device_state_bytes"]["grads"].get<double>(), 4 * numel);
    if (std::string(c.variant) == "clipping") {
      EXPECT_GT(mh["gradient_clipping"]["clipped_steps"].get<int64_t>(), 0) << "the clip did not clip";
    }
    // the memory estimate counts the 2-byte values, the gradients (and their fp32 micro-batch sum)
    const double acc = s.train.gradient_accumulation_steps > 1 ? 4 : 0;
    EXPECT_EQ(estimate_memory(s, -1).params, (2 + c.grad_bytes + acc) * numel);
    if (std::string(c.precision) == "fp16") {
      EXPECT_FALSE(skipped_at(mh).empty()) << "no overflow exercised the skip";
      EXPECT_EQ(skipped_at(mh), skipped_at(mw));
    }
  }
}

// ------------------------------------------------------------------ precision fp16

bool all_fp16(const Weights& w) {
  for (auto& [name, v] : w)
    for (float x : v) {
      const float r = ref::naive_fp16(x);
      if (std::memcmp(&r, &x, 4) != 0) return false;
    }
  return true;
}

// fp16 with a first loss scale of 2^24 (the tiny MLP's first gradients overflow fp16 at it) and a
// growth window of 5 good steps: overflows, halvings, hysteresis and growth all happen in 30 steps.
Spec fp16_of(Spec s) {
  s.precision = "fp16";
  s.fp16.initial_scale_power = 24;
  s.fp16.loss_scale_window = 5;
  return s;
}

std::vector<int64_t> skipped_at(const nlohmann::json& m) { return m["fp16"]["skipped_at"].get<std::vector<int64_t>>(); }

// Runs s with an inf written into the first gradient at the backward of each step of `steps`.
Weights train_with_overflow(const Spec& s, const std::set<int64_t>& steps, nlohmann::json* metrics = nullptr) {
  Weights w;
  RunOptions o;
  o.quiet = true;
  o.evaluate = false;
  o.after_backward = [&](Runtime& rt, Workload& wl, int64_t t) {
    if (steps.count(t))
      insert_scale(rt.device(t).named("test.overflow"), wl.params().front()->grad, INFINITY);
  };
  o.inspect = capture_weights(w);
  nlohmann::json m = run_training(s, o);
  if (metrics) *metrics = m;
  return w;
}

TEST(Fp16LossScaler, DeepSpeedsRuleOnAHandCheckedSequence) {
  // init 2^4, window 3, hysteresis 2: the expected scales were worked out by hand from
  // DeepSpeed's update_scale
  Spec::Fp16 c;
  c.initial_scale_power = 4;
  c.loss_scale_window = 3;
  c.hysteresis = 2;
  LossScaler s(c);
  const struct {
    bool overflow;
    double scale_after;
  } seq[] = {
      {true, 16},   // it 0: hysteresis 2 -> 1, scale kept
      {true, 8},    // it 1: hysteresis is 1: halves; last overflow 1
      {false, 8},   // it 2: stable 0
      {false, 8},   // it 3: stable 1
      {false, 8},   // it 4: stable 2
      {false, 16},  // it 5: stable 3 = window: doubles, hysteresis refilled to 2
      {true, 16},   // it 6: hysteresis 2 -> 1
      {false, 16},  // it 7: stable 0 (no refill without consecutive_hysteresis)
      {true, 8},    // it 8: hysteresis still 1: halves
  };
  for (size_t i = 0; i < std::size(seq); ++i) {
    s.update(seq[i].overflow);
    EXPECT_EQ(s.scale(), seq[i].scale_after) << "iteration " << i;
  }
  c.consecutive_hysteresis = true;  // a good step refills: it 8 then only uses up the hysteresis
  LossScaler t(c);
  for (size_t i = 0; i < std::size(seq); ++i) t.update(seq[i].overflow);
  EXPECT_EQ(t.scale(), 16);
}

TEST(Fp16LossScaler, MatchesDeepSpeedsCodeOnRandomSequences) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    Spec::Fp16 c;
    c.initial_scale_power = (int)(rng() % 20);
    c.loss_scale_window = 1 + rng() % 6;
    c.hysteresis = 1 + (int)(rng() % 3);
    c.consecutive_hysteresis = rng() & 1;
    c.min_loss_scale = 1 + rng() % 4;
    LossScaler s(c);
    ref::RefLossScaler r(std::ldexp(1.0, c.initial_scale_power), c.loss_scale_window, (double)c.min_loss_scale,
                         c.hysteresis, c.consecutive_hysteresis);
    const unsigned p = 1 + rng() % 4;  // overflow with probability 1/(p+1)
    for (int it = 0; it < 300; ++it) {
      const bool of = rng() % (p + 1) == 0;
      bool threw_ref = false, threw = false;
      try {
        r.update_scale(of);
      } catch (const std::runtime_error&) {
        threw_ref = true;
      }
      try {
        s.update(of);
      } catch (const Error&) {
        threw = true;
      }
      ASSERT_EQ(threw, threw_ref) << "trial " << trial << " it " << it;
      if (threw) break;  // DeepSpeed stops the run
      ASSERT_EQ(s.scale(), r.cur_scale) << "trial " << trial << " it " << it;
    }
  }
  Spec::Fp16 st;
  st.loss_scale = 96.0;  // static: never changes, even on overflows
  LossScaler s(st);
  s.update(true);
  s.update(false);
  EXPECT_FALSE(s.dynamic());
  EXPECT_EQ(s.scale(), 96.0);
}

TEST(Fp16Engine, BaselinesEqualReferenceBitwise) {
  for (const char* strat : {"device-adam", "zero-offload"}) {
    SCOPED_TRACE(strat);
    const Spec s = fp16_of(tiny_spec(30, strat));
    nlohmann::json m;
    const Weights w = train_and_capture(s, &m);
    const ref::RefRun r = ref::run_reference(s);
    EXPECT_EQ(first_difference(w, r.weights), "");
    EXPECT_TRUE(all_fp16(w)) << "device parameters hold fp16 values";
    EXPECT_EQ(skipped_at(m), r.skipped);
    EXPECT_FALSE(r.skipped.empty()) << "the first scale must overflow for this test to mean something";
    EXPECT_EQ(m["fp16"]["loss_scale"].get<double>(), r.loss_scale);
    EXPECT_EQ(m["fp16"]["applied_steps"].get<int64_t>(), 30 - (int64_t)r.skipped.size());
    bool grew = false;  // some change doubled the scale (a window of good steps)
    double before = std::ldexp(1.0, s.fp16.initial_scale_power);
    for (auto& c : m["fp16"]["scale_changes"]) {
      grew |= c[1].get<double>() == 2 * before;
      before = c[1].get<double>();
    }
    EXPECT_TRUE(grew) << "a growth after the window " << m["fp16"].dump();
    Spec b = s;
    b.precision = "bf16";
    EXPECT_NE(first_difference(w, train_and_capture(b)), "") << "fp16 must differ from bf16";
  }
}

TEST(Fp16Engine, DeviceAdamComputesWhatZeroOffloadDoes) {
  const Spec d = fp16_of(tiny_spec(20, "device-adam")), z = fp16_of(tiny_spec(20, "zero-offload"));
  EXPECT_EQ(first_difference(train_and_capture(d), train_and_capture(z)), "");
}

TEST(Fp16Engine, ZenFlowEqualsReferenceBitwise) {
  for (auto [D, K, W] : {std::tuple<int, int64_t, int64_t>{1, 4, 0}, {0, 1, 2}, {2, 4, 2}}) {
    SCOPED_TRACE("D=" + std::to_string(D) + " K=" + std::to_string(K) + " W=" + std::to_string(W));
    auto make = [&](int64_t n) { return fp16_of(zen_spec(n, D, K, W)); };
    const Spec s = make(30);
    nlohmann::json m;
    const Weights w = train_and_capture(s, &m);
    const ref::RefRun r = ref::run_reference(s);
    EXPECT_EQ(first_difference(w, r.weights), "") << first_divergent_step(make, 30);
    EXPECT_TRUE(all_fp16(w));
    EXPECT_EQ(skipped_at(m), r.skipped);
    EXPECT_FALSE(r.skipped.empty());
    EXPECT_EQ(m["host_update_steps"].get<std::vector<int64_t>>(), r.host_update_steps)
        << "ZenFlow's intervals count applied steps";
  }
}

TEST(Fp16Engine, ForcedOverflowSkipsExactlyThatStep) {
  // Seven steps whose last overflows end where six steps end: no parameter, moment, counter or
  // host accumulation changed; the next steps then continue as the reference without that step.
  auto cases = std::vector<std::pair<const char*, Spec>>{
      {"device-adam", tiny_spec(7, "device-adam")},
      {"zero-offload-dpu", tiny_spec(7, "zero-offload-dpu")},
      {"zenflow-overlap", zen_spec(7, 1, 4, 0)},
      {"zenflow-warm-up", zen_spec(7, 0, 1, 3)},
  };
  for (auto& [name, base] : cases) {
    SCOPED_TRACE(name);
    Spec s = base;
    s.precision = "fp16";
    s.fp16.initial_scale_power = 10;  // no natural overflow on this MLP
    nlohmann::json m;
    const Weights skipped_last = train_with_overflow(s, {6}, &m);
    EXPECT_EQ(skipped_at(m), std::vector<int64_t>{6});
    Spec six = s;
    six.train.steps = 6;
    EXPECT_EQ(first_difference(skipped_last, train_and_capture(six)), "");
    // a skipped step inside the run (and one inside a ZenFlow interval): engine vs reference
    Spec longer = s;
    longer.train.steps = 20;
    if (std::string(name) == "zero-offload-dpu") continue;  // no reference for the delayed update
    const Weights w = train_with_overflow(longer, {6, 9}, &m);
    const ref::RefRun r = ref::run_reference(longer, {6, 9});
    EXPECT_EQ(r.skipped, (std::vector<int64_t>{6, 9}));
    EXPECT_EQ(first_difference(w, r.weights), "");
    EXPECT_NE(first_difference(w, train_and_capture(longer)), "") << "the skips must change the result";
  }
}

TEST(Fp16Engine, ForcedOverflowHalvesTheScaleWithHysteresis) {
  struct Case {
    int hysteresis;
    bool consecutive;
    std::set<int64_t> overflow;
    std::vector<std::pair<int64_t, double>> changes;  // (step, scale after it)
  };
  const Case cases[] = {
      {1, false, {6}, {{6, 512}}},                 // halves at once
      {2, false, {6}, {}},                         // one overflow uses up the hysteresis only
      {2, false, {6, 7}, {{7, 512}}},              // the second halves
      {2, false, {6, 9}, {{9, 512}}},              // the hysteresis is not refilled by good steps
      {2, true, {6, 9}, {}},                       // consecutive_hysteresis refills it at step 7
      {3, false, {4, 6, 8, 9}, {{8, 512}, {9, 256}}},  // 3 -> 2 -> 1, then every overflow halves
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("hysteresis " + std::to_string(c.hysteresis) + (c.consecutive ? " consecutive" : ""));
    Spec s = tiny_spec(12, "device-adam");
    s.precision = "fp16";
    s.fp16.initial_scale_power = 10;
    s.fp16.hysteresis = c.hysteresis;
    s.fp16.consecutive_hysteresis = c.consecutive;
    nlohmann::json m;
    train_with_overflow(s, c.overflow, &m);
    EXPECT_EQ(skipped_at(m), std::vector<int64_t>(c.overflow.begin(), c.overflow.end()));
    std::vector<std::pair<int64_t, double>> got;
    for (auto& x : m["fp16"]["scale_changes"]) got.push_back({x[0].get<int64_t>(), x[1].get<double>()});
    EXPECT_EQ(got, c.changes) << m["fp16"].dump();
  }
}

TEST(Fp16Engine, StaticScaleSkipsOverflowsAndKeepsTheScale) {
  Spec s = tiny_spec(12, "zero-offload");
  s.precision = "fp16";
  s.fp16.loss_scale = 256;  // static
  nlohmann::json m;
  const Weights w = train_with_overflow(s, {3}, &m);
  EXPECT_EQ(skipped_at(m), std::vector<int64_t>{3});
  EXPECT_EQ(m["fp16"]["loss_scale"].get<double>(), 256.0);
  EXPECT_TRUE(m["fp16"]["scale_changes"].empty());
  EXPECT_EQ(first_difference(w, ref::run_reference(s, {3}).weights), "");
}

TEST(Fp16Engine, CrossingsCarryTwoBytesPerValue) {
  for (const char* strat : {"zero-offload", "zero-offload-dpu", "zenflow"}) {
    SCOPED_TRACE(strat);
    Spec f = std::string(strat) == "zenflow" ? zen_spec(16, 1, 4, 0) : tiny_spec(16, strat);
    Spec h = f, b = f;
    h.precision = "fp16";
    h.fp16.initial_scale_power = 10;
    b.precision = "bf16";
    nlohmann::json mh, mb;
    const Weights wh = train_and_capture(h, &mh);
    train_and_capture(b, &mb);
    EXPECT_TRUE(all_fp16(wh));
    EXPECT_EQ(mh["precision"], "fp16");
    EXPECT_TRUE(mh["fp16"]["skipped_at"].empty());
    EXPECT_EQ(bytes_of(mh, "host_to_device"), bytes_of(mb, "host_to_device"));
    EXPECT_EQ(bytes_of(mh, "device_to_host"), bytes_of(mb, "device_to_host"));
  }
}

}  // namespace
}  // namespace zf::test
