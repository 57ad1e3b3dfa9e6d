// DeepSpeed's Twin-Flow (zero_optimization.offload_optimizer.ratio, graphs/strategies/twin_flow.hpp,
// docs/spec.md "Twin-Flow"): the split against DeepSpeed's rule (stage3.py), the ratio that means
// "all on the host" equal to zero-offload and "all on the device" equal to device-adam (bitwise),
// a ratio in between equal to the naive reference bitwise and to a double-precision reference of
// the split, its metrics, bad values refused naming the field, and a bitwise resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "graphs/strategies/twin_flow.hpp"
#include "test_helpers.hpp"
#include "tests/reference/mlp_ref.hpp"
#include "tests/reference/reference.hpp"

namespace zf::test {
namespace {

using json = nlohmann::json;

// The tiny MLP's parameters in model order: fc1.weight 784x32, fc1.bias, fc2.weight 32x16,
// fc2.bias, fc3.weight 16x10, fc3.bias.
const std::vector<int64_t> kTiny = {25088, 32, 512, 16, 160, 10};

Spec twin(int64_t steps, double ratio, int64_t sub_group_size) {
  Spec s = tiny_spec(steps, "zero-offload");
  s.offload_ratio = ratio;
  s.sub_group_size = sub_group_size;
  return s;
}

// stage3.py: sub-groups close at >= sub_group_size elements; the first int((1 - ratio) * N) stay
// on the device.
TEST(TwinFlow, SplitIsDeepSpeeds) {
  TwinFlowSplit a = twin_flow_split({100, 10, 100, 10, 100, 10}, 0.5, 100);
  EXPECT_EQ(a.sub_group, (std::vector<int64_t>{0, 1, 1, 2, 2, 3}));
  EXPECT_EQ(a.sub_groups, 4);
  EXPECT_EQ(a.device_sub_groups, 2);
  EXPECT_EQ(a.on_device, (std::vector<bool>{true, true, true, false, false, false}));
  EXPECT_EQ(a.device_elems, 210);
  EXPECT_EQ(a.host_elems, 120);
  // DeepSpeed's default sub_group_size (1e9): a small model is one sub-group, so any ratio above 0
  // leaves it all on the host and only 0 keeps it all on the device
  for (double r : {1.0, 0.5, 0.01}) EXPECT_EQ(twin_flow_split(kTiny, r, 1000000000).device_elems, 0) << r;
  EXPECT_EQ(twin_flow_split(kTiny, 0.0, 1000000000).host_elems, 0);
  // sub_group_size 0: one parameter per sub-group; Python's int() of a double, toward zero:
  // (1 - 0.7) * 6 = 1.8000000000000003 -> 1, (1 - 0.9) * 10 = 0.9999999999999998 -> 0
  EXPECT_EQ(twin_flow_split(kTiny, 0.7, 0).device_sub_groups, 1);
  EXPECT_EQ(twin_flow_split(std::vector<int64_t>(10, 4), 0.9, 0).device_sub_groups, 0);
  EXPECT_EQ(twin_flow_split(std::vector<int64_t>(10, 4), 0.7, 0).device_sub_groups, 3);
  EXPECT_EQ(twin_flow_split(kTiny, 0.5, 0).on_device, (std::vector<bool>{true, true, true, false, false, false}));
  // the sub-group holding a parameter never splits it
  const TwinFlowSplit b = twin_flow_split(kTiny, 0.5, 512);  // [fc1.weight] [fc1.bias fc2.weight] [the rest]
  EXPECT_EQ(b.sub_group, (std::vector<int64_t>{0, 1, 1, 2, 2, 2}));
  EXPECT_EQ(b.device_sub_groups, 1);
}

// ratio 1 (DeepSpeed's default), and a ratio whose int((1 - ratio) * N) is 0, are zero-offload.
TEST(TwinFlow, AllOnTheHostEqualsZeroOffloadBitwise) {
  json mz, mt;
  const Weights z = train_and_capture(tiny_spec(12, "zero-offload"), &mz);
  for (const Spec& s : {twin(12, 0.5, 1000000000), twin(12, 0.9, 0)}) {
    EXPECT_EQ(first_difference(train_and_capture(s, &mt), z), "");
    EXPECT_EQ(mt["host_state_bytes"], mz["host_state_bytes"]);
    EXPECT_EQ(mt["bytes"], mz["bytes"]);
    EXPECT_EQ(mt["twin_flow"]["device_elements"], 0);
  }
}

// ratio 0: every sub-group on the device, updated as device-adam updates it; nothing crosses.
// Bitwise: the same AdamW codelet on the same values in the same context, and the same clip (all
// on the device, as device-adam's).
TEST(TwinFlow, AllOnTheDeviceEqualsDeviceAdamBitwise) {
  for (const char* prec : {"fp32", "bf16"})
    for (double clip : {0.0, 0.3}) {
      SCOPED_TRACE(std::string(prec) + " clip " + std::to_string(clip));
      Spec d = tiny_spec(12, "device-adam"), t = twin(12, 0.0, 1000000000);
      d.precision = t.precision = prec;
      d.gradient_clipping = t.gradient_clipping = clip;
      json md, mt;
      const Weights dev = train_and_capture(d, &md);
      EXPECT_EQ(first_difference(train_and_capture(t, &mt), dev), "");
      EXPECT_EQ(mt["host_state_bytes"].get<int64_t>(), 0);
      EXPECT_EQ(mt["bytes"]["device_to_host"].get<double>(), 0.0);
      EXPECT_EQ(mt["bytes"]["host_to_device"].get<double>(), 0.0);
      EXPECT_EQ(mt["twin_flow"]["device_state_bytes"].get<int64_t>(), (std::string(prec) == "bf16" ? 12 : 8) * 25818);
      if (clip > 0) {
        EXPECT_EQ(mt["gradient_clipping"]["norms"], md["gradient_clipping"]["norms"]);
      }
    }
}

// The references of the split, on the reference MLP (tests/reference/mlp_ref.hpp: its gradients
// are bitwise the engine's for the same weights): each step every parameter takes AdamW, the
// device part's on the parameter itself, the host part's on an fp32 master copied back.
//   float: kernels::cpu::adam_step, as both sides of the engine (bitwise the engine's weights);
//   double: ref::adam_step (tests/reference/reference.hpp) on double parameters and moments, fed
//   the same gradients as the float one (so the two differ by AdamW's float rounding only, not by
//   gradients that drift apart with the weights).
struct SplitRefs {
  Weights f32, f64;
};
SplitRefs split_references(const Spec& s, const TwinFlowSplit& split) {
  ref::MlpRef mlp(s);
  kernels::cpu::AdamParams hf;
  hf.lr = (float)s.optimizer.lr, hf.beta1 = (float)s.optimizer.beta1, hf.beta2 = (float)s.optimizer.beta2;
  hf.eps = (float)s.optimizer.eps, hf.weight_decay = (float)s.optimizer.weight_decay;
  const ref::AdamParams hd{hf.lr, hf.beta1, hf.beta2, hf.eps, hf.weight_decay};  // the kernel's values
  std::vector<std::vector<float>> master, mf, vf;
  std::vector<std::vector<double>> x, md, vd;
  for (auto& p : mlp.params()) {
    master.push_back(p.value);
    mf.emplace_back(p.value.size(), 0.0f);
    vf.emplace_back(p.value.size(), 0.0f);
    x.push_back(ref::to_double(p.value));
    md.emplace_back(p.value.size(), 0.0);
    vd.emplace_back(p.value.size(), 0.0);
  }
  for (int64_t t = 0; t < s.train.steps; ++t) {
    const std::vector<std::vector<float>> g = mlp.grads(t);
    for (size_t i = 0; i < g.size(); ++i) {
      std::vector<float>& p = mlp.params()[i].value;
      std::vector<float>& w = split.on_device[i] ? p : master[i];  // device: in place; host: the master
      kernels::cpu::adam_step(w.data(), g[i].data(), mf[i].data(), vf[i].data(), w.size(), hf, t + 1, 1.0f);
      if (!split.on_device[i]) p = master[i];  // the host part's parameters cross back
      const std::vector<double> gd = ref::to_double(g[i]);
      ref::adam_step(x[i].data(), gd.data(), md[i].data(), vd[i].data(), gd.size(), hd, t + 1, 1.0);
    }
  }
  SplitRefs r;
  for (size_t i = 0; i < x.size(); ++i) {
    const auto& p = mlp.params()[i];
    r.f32[p.name] = p.value;
    r.f64[p.name] = std::vector<float>(x[i].begin(), x[i].end());
  }
  return r;
}

// Largest |a - b| over all weights divided by the tolerance n_ulps ulp(b) + slack: above 1, outside.
double worst_over_tolerance(const Weights& a, const Weights& b, double n_ulps, double slack, double* worst_abs) {
  double worst = 0;
  *worst_abs = 0;
  for (auto& [k, v] : b)
    for (size_t i = 0; i < v.size(); ++i) {
      const double ulp = std::nextafter(std::fabs(v[i]), INFINITY) - std::fabs(v[i]);
      const double d = std::fabs((double)a.at(k)[i] - v[i]);
      worst = std::max(worst, d / (n_ulps * ulp + slack));
      *worst_abs = std::max(*worst_abs, d);
    }
  return worst;
}

// sub_group_size 0, ratio 0.5: fc1.weight, fc1.bias, fc2.weight on the device, the rest on the host.
TEST(TwinFlow, InBetweenEqualsTheReferencesOfTheSplit) {
  const Spec s = twin(12, 0.5, 0);
  const TwinFlowSplit split = twin_flow_split(kTiny, 0.5, 0);
  ASSERT_EQ(split.host_elems, 186);
  json m;
  const Weights eng = train_and_capture(s, &m);
  const SplitRefs r = split_references(s, split);
  // bitwise: both parts run the AdamW kernel of the float reference, on the same values
  EXPECT_EQ(first_difference(eng, r.f32), "");
  // within float rounding of the double reference. Each float AdamW step rounds the parameter
  // twice (the decay, the update: up to an ulp together) and computes the update, at most about
  // 3.2 lr in size (Adam's bound (1 - b1) / sqrt(1 - b2)), to a few float roundings (2^-24
  // relative each, carried over the steps in m and v): after T steps within T ulps of the weight
  // plus T x lr x 2^-20 (1.1e-8 here). Measured: 5 ulps (fc2.weight[200], 7.5e-8); one step
  // moves a weight by up to lr.
  const double T = (double)s.train.steps;
  const double slack = T * s.optimizer.lr * std::ldexp(1.0, -20);
  double abs_diff = 0, abs_moved = 0;
  EXPECT_LE(worst_over_tolerance(eng, r.f64, T, slack, &abs_diff), 1.0) << "largest |difference| " << abs_diff;
  // the comparison is of updates: the steps moved the weights far beyond the tolerance
  Spec none = s;
  none.train.steps = 0;
  EXPECT_GT(worst_over_tolerance(split_references(none, split).f64, r.f64, T, slack, &abs_moved), 100.0);
  // only the host part's state is on the host and only it crosses: fp32 master, m, v and the
  // host gradient (16 bytes per element); 4 bytes down and up per host element and step
  EXPECT_EQ(m["host_state_bytes"].get<int64_t>(), 16 * 186);
  EXPECT_EQ(m["bytes"]["device_to_host"].get<double>(), 4.0 * 186);  // per step
  EXPECT_EQ(m["bytes"]["host_to_device"].get<double>(), 4.0 * 186);
  const json& tf = m["twin_flow"];
  EXPECT_EQ(tf["sub_groups"], 6);
  EXPECT_EQ(tf["device_sub_groups"], 3);
  EXPECT_EQ(tf["device_elements"], 25088 + 32 + 512);
  EXPECT_EQ(tf["host_elements"], 186);
  EXPECT_EQ(tf["device_state_bytes"], 8 * (25088 + 32 + 512));
}

// The split with gradient clipping: the global norm over both parts (the device part's gradients
// where they are, the host part's host copies), as zero-offload's (itself equal to the naive
// reference: test_clip.cpp), with a clip where some steps clip and some do not.
TEST(TwinFlow, InBetweenWithClippingEqualsZeroOffload) {
  Spec s = twin(16, 0.5, 0), z = tiny_spec(16, "zero-offload");
  json mz, m;
  z.gradient_clipping = 1e9;  // the norms, nothing clipped: the clip set at their median
  train_and_capture(z, &mz);
  std::vector<float> norms = mz["gradient_clipping"]["norms"].get<std::vector<float>>();
  std::sort(norms.begin(), norms.end());
  s.gradient_clipping = z.gradient_clipping = norms[norms.size() / 2];
  const Weights zw = train_and_capture(z, &mz);
  const int64_t clipped = mz["gradient_clipping"]["clipped_steps"].get<int64_t>();
  ASSERT_GT(clipped, 0);
  ASSERT_LT(clipped, mz["gradient_clipping"]["clip_points"].get<int64_t>());
  EXPECT_EQ(first_difference(train_and_capture(s, &m), zw), "");
  EXPECT_EQ(m["gradient_clipping"]["norms"], mz["gradient_clipping"]["norms"]);
  EXPECT_GT(m["twin_flow"]["device_elements"].get<int64_t>(), 0);
}

TEST(TwinFlow, BadValuesAreRefusedNamingTheField) {
  const std::string f = "zero_optimization.offload_optimizer.ratio";
  auto parse = [](const json& j) { return parse_spec(j, "s.json"); };
  for (const json& bad : {json(1.5), json(-0.1), json("half"), json(true), json(nullptr)}) {
    SCOPED_TRACE(bad.dump());
    expect_input_error([&] { parse({{"strategy", "zero-offload"}, {"zero_optimization", {{"offload_optimizer", {{"ratio", bad}}}}}}); },
                       {"s.json: " + f});
  }
  expect_input_error([&] { parse({{"zero_optimization", {{"offload_optimizer", 0.5}}}}); },
                     {"s.json: zero_optimization.offload_optimizer", "expected an object"});
  expect_input_error([&] { parse({{"zero_optimization", {{"offload_optimizer", {{"ratio", 0.5}, {"device", "cpu"}}}}}}); },
                     {"s.json: zero_optimization.offload_optimizer.device", "unknown key"});
  for (const char* st : {"device-adam", "zero-offload-dpu", "zenflow"})
    expect_input_error([&] { parse({{"strategy", st}, {"zero_optimization", {{"offload_optimizer", {{"ratio", 0.5}}}}}}); },
                       {"s.json: " + f, "zero-offload", st});
  expect_input_error([&] { parse({{"zero_optimization", {{"sub_group_size", -1}}}}); },
                     {"s.json: zero_optimization.sub_group_size"});
  const Spec ok = parse({{"strategy", "zero-offload"},
                         {"zero_optimization", {{"offload_optimizer", {{"ratio", 0.25}}}, {"sub_group_size", 4096}}}});
  EXPECT_EQ(ok.offload_ratio, 0.25);
  EXPECT_EQ(ok.sub_group_size, 4096);
  EXPECT_EQ(parse_spec(ok.to_json(), "again").to_json(), ok.to_json());
}

// DeepSpeed's checks: ratio in [0, 1]; below 1 only with stage 3 (config.py offload_ratio_check);
// stage 3 here only in one process; with the optimizer on the cpu the ratio and sub_group_size
// become the spec's, without it DeepSpeed ignores the ratio (said in a note).
TEST(TwinFlow, DeepSpeedConfigMapsTheRatio) {
  auto cfg = [](int stage, const char* dev, const json& ratio) {
    json c = {{"train_batch_size", 16}, {"zero_optimization", {{"stage", stage}}}};
    c["zero_optimization"]["offload_optimizer"] = {{"device", dev}, {"ratio", ratio}};
    return c;
  };
  const std::string f = "ds.json: zero_optimization.offload_optimizer.ratio";
  for (int st : {0, 1, 2}) {
    const std::string msg = input_error([&] { deepspeed_patch(cfg(st, "cpu", 0.5), "ds.json", nullptr, 1); });
    EXPECT_NE(msg.find(f), std::string::npos) << msg;
    EXPECT_NE(msg.find("stage 3"), std::string::npos) << msg;
    EXPECT_EQ(deepspeed_patch(cfg(st, "cpu", 1.0), "ds.json", nullptr, 1)["strategy"], "zero-offload");
  }
  for (const json& bad : {json(1.01), json(-1), json("0.5")})
    EXPECT_NE(input_error([&] { deepspeed_patch(cfg(3, "cpu", bad), "ds.json", nullptr, 1); }).find(f), std::string::npos);
  json c = cfg(3, "cpu", 0.5);
  c["zero_optimization"]["sub_group_size"] = 1000;
  std::vector<std::string> notes;
  const json p = deepspeed_patch(c, "ds.json", &notes, 1);
  EXPECT_EQ(p["strategy"], "zero-offload");
  EXPECT_EQ(p["zero_optimization"]["offload_optimizer"]["ratio"], 0.5);
  EXPECT_EQ(p["zero_optimization"]["sub_group_size"], 1000);
  // stage 3 is the spec's (in one process every stage is stage 0; on several ranks a split of the
  // partitioned state is refused when the run starts, zero_offload.cpp)
  EXPECT_EQ(p["zero_optimization"]["stage"], 3);
  EXPECT_TRUE(notes.empty());
  EXPECT_EQ(deepspeed_patch(c, "ds.json", nullptr, 2)["zero_optimization"]["stage"], 3);
  notes.clear();
  const json q = deepspeed_patch(cfg(3, "none", 0.5), "ds.json", &notes, 1);
  EXPECT_EQ(q["strategy"], "device-adam");
  EXPECT_FALSE(q.contains("zero_optimization"));
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[1].find("ratio"), std::string::npos) << notes[1];
}

// Both parts' state resumes: a run through a checkpoint equals the uninterrupted one bitwise; a
// resume under another ratio is refused naming the field.
TEST(TwinFlow, ResumeIsBitwise) {
  for (const char* prec : {"fp32", "bf16"}) {
    SCOPED_TRACE(prec);
    Spec s = twin(21, 0.5, 0);
    s.precision = prec;
    s.runtime.tile_elems = 64;  // several host tiles per host parameter
    const Weights full = run_with(s, "", 0, "");
    TempDir d;
    const std::string ck = d.path("ck");
    s.train.steps = 11;  // checkpoints after steps 4, 9 and 10
    run_with(s, ck, 5, "");
    s.train.steps = 21;
    EXPECT_EQ(first_difference(run_with(s, "", 0, ck), full), "");
    EXPECT_EQ(first_difference(run_with(s, "", 0, ck + "/step-00000004"), full), "");
    Spec other = s;
    other.offload_ratio = 1.0;
    EXPECT_NE(input_error([&] { run_with(other, "", 0, ck); }).find("zero_optimization.offload_optimizer"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace zf::test
