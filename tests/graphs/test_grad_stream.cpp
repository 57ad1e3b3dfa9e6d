// Gradients that leave the device during the backward (graphs/train/grad_stream.hpp): the same
// weights, bitwise, as with every gradient kept whole for the step, for every strategy that
// streams (zero-offload, its delayed update, Twin-Flow's host part, with clipping, in bf16;
// zenflow's 2-D weights in its variants);
// same-shaped gradients S groups apart share one buffer, and a group's crossings end before the
// group S below writes the shared buffers; device_state_bytes counts the buffers; the runs that
// cannot stream say why.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graphs/train/grad_stream.hpp"
#include "test_helpers.hpp"
#include "tests/models/gpt_helpers.hpp"

namespace zf::test {
namespace {

// A GPT of 4 blocks: 6 layer groups (embeddings, 4 blocks, ln_f + lm_head).
Spec gpt4(const std::string& path, const std::string& strategy) {
  Spec s = tiny_gpt_spec("gpt", "text", path);
  s.model.n_layer = 4;
  s.model.n_embd = 32;
  s.model.context = 16;
  s.train.batch_size = 4;
  s.train.steps = 5;
  s.strategy = strategy;
  return s;
}

TEST(GradStream, BitwiseSameAsWholeGradients) {
  TempDir dir;
  const std::string text = dir.write("t.txt", fixture_text());
  struct Case {
    const char* name;
    Spec s;
  };
  std::vector<Case> cases;
  cases.push_back({"zero-offload", gpt4(text, "zero-offload")});
  cases.push_back({"zero-offload-dpu", gpt4(text, "zero-offload-dpu")});
  Spec c = gpt4(text, "zero-offload");
  c.gradient_clipping = 0.05;  // the clip reads the host copies
  cases.push_back({"clip", c});
  Spec b = gpt4(text, "zero-offload");
  b.precision = "bf16";  // 2-byte gradients cross as they are
  cases.push_back({"bf16", b});
  Spec t = gpt4(text, "zero-offload");
  t.offload_ratio = 0.5;  // Twin-Flow: the first half of the parameters stays on the device
  t.sub_group_size = 0;
  cases.push_back({"twin-flow", t});
  Spec r = t;
  r.precision = "bf16";
  r.gradient_clipping = 0.05;  // a clipped device part: 4-byte gradients, each rounded by its layer's hook
  cases.push_back({"bf16 twin-flow clip", r});
  // zenflow: the 2-D weights' whole step part (crossing, selection, accumulation, selective
  // AdamW, the auto rule's mass) from the hook; 8 steps, so that selections, host updates and
  // merges happen
  auto zen = [&](const char* semantics, int D, int64_t K) {
    Spec z = gpt4(text, "zenflow");
    z.train.steps = 12;
    z.zenflow.given = true;
    z.zenflow.topk_ratio = 0.25;
    z.zenflow.select_strategy = "step";
    z.zenflow.select_interval = 4;
    z.zenflow.update_interval = K < 0 ? UpdateInterval::automatic() : UpdateInterval(K);
    z.zenflow.overlap_step = D > 0;
    z.zenflow.max_staleness = D;
    z.zenflow.full_warm_up_rounds = 1;
    z.zenflow.semantics = semantics;
    return z;
  };
  cases.push_back({"zenflow", zen("zenflow", 1, 2)});
  Spec zb = zen("zenflow", 0, 2);
  zb.precision = "bf16";  // 2-byte gradients, fp32 masters of the selected columns
  cases.push_back({"zenflow bf16", zb});
  Spec zd = zen("deepspeed", 1, 2);
  zd.precision = "bf16";  // 4-byte gradients: rounded by the hook; g/K and the window sums' clip
  zd.gradient_clipping = 0.05;
  cases.push_back({"zenflow deepspeed bf16 clip", zd});
  Spec za = zen("zenflow", 1, -1);  // the auto rule: its mass read from the hook
  cases.push_back({"zenflow auto", za});
  Spec zv = zen("zenflow", 1, 2);
  zv.zenflow.accumulate_on = "device";
  zv.zenflow.offload = true;
  cases.push_back({"zenflow accumulate_on device, offload", zv});
  for (Case& k : cases) {
    SCOPED_TRACE(k.name);
    nlohmann::json mw, ms, md;
    Spec whole = k.s;
    whole.runtime.stream_gradients = false;
    const Weights w = train_and_capture(whole, &mw);
    EXPECT_EQ(mw["gradient_stream"]["off"], "runtime.stream_gradients is false");
    Spec small = k.s;
    small.reduce_bucket_size = 1;  // two groups at a time
    EXPECT_EQ(first_difference(train_and_capture(small, &ms), w), "");
    EXPECT_EQ(first_difference(train_and_capture(k.s, &md), w), "");  // DeepSpeed's 5e8: all groups at once
    EXPECT_EQ(ms["bytes"], mw["bytes"]);
    ASSERT_TRUE(ms["gradient_stream"].contains("buffer_bytes")) << ms["gradient_stream"];
    // the shared buffers' bytes in place of the streamed whole gradients: fewer with two slots
    const int64_t gw = mw["device_state_bytes"]["grads"], gs = ms["device_state_bytes"]["grads"],
                  gd = md["device_state_bytes"]["grads"];
    EXPECT_LT(gs, gw);
    EXPECT_EQ(ms["gradient_stream"]["slots"], 2);
    EXPECT_GT(ms["gradient_stream"]["shared_params"].get<int>(), 0);
    EXPECT_EQ(gd, gw);  // DeepSpeed's 5e8 elements hold the whole model: no buffer shared
    EXPECT_EQ(md["gradient_stream"]["shared_params"], 0);
  }
}

// With reduce_bucket_size 1 there are two slots: block l (group l + 1) shares its gradients
// with block l + 2 (group l + 3); each weight's crossing ends before block l writes that weight's
// gradient, in every step. Blocks 1 and 2 share with blocks 3 and 4 (12 each), and block 2's ln_1 with ln_f
// (the same shapes, C): 27 buffers for 53 parameters, against 53 without streaming.
TEST(GradStream, SharedBuffersAreRewrittenOnlyAfterTheirCrossing) {
  TempDir dir;
  Spec s = gpt4(dir.write("t.txt", fixture_text()), "zero-offload");
  s.reduce_bucket_size = 1;
  s.train.steps = 4;
  std::vector<std::set<std::string>> groups;  // parameter names per group
  std::vector<TaskRecord> recs;
  std::set<starpu_data_handle_t> buffers;  // the gradients' distinct buffers, allocated after the run
  RunOptions o;
  o.quiet = true;
  o.evaluate = false;
  o.inspect = [&](Runtime& rt, Workload& wl) {
    rt.wait_all();
    groups.clear();
    buffers.clear();
    for (const auto& g : wl.layer_groups()) {
      groups.emplace_back();
      for (const Param* p : g) {
        groups.back().insert(p->name);
        if (p->grad.allocated()) buffers.insert(p->grad.handle());
      }
    }
    if (recs.empty()) recs = rt.tracker().records();
  };
  Spec whole = s;
  whole.runtime.stream_gradients = false;
  run_training(whole, o);
  EXPECT_EQ(buffers.size(), 53u);
  recs.clear();
  nlohmann::json m = run_training(s, o);
  EXPECT_EQ(buffers.size(), 27u);
  EXPECT_EQ(m["gradient_stream"]["shared_params"], 26);
  ASSERT_EQ(groups.size(), 6u);
  // each weight's: the dw task of block l ("bwd.h<l>.<w>.dw") and the crossing of its partner in
  // block l + 2 ("d2h.grad.h.<l + 2>.<w>.weight[k]")
  const char* weights[][2] = {{"c_attn", "attn.c_attn"}, {"attn.c_proj", "attn.c_proj"}, {"c_fc", "mlp.c_fc"},
                              {"mlp.c_proj", "mlp.c_proj"}};
  int checked = 0;
  for (int64_t t = 0; t < s.train.steps; ++t)
    for (int l = 0; l < 2; ++l)
      for (const auto& w : weights) {
        const std::string dw = "bwd.h" + std::to_string(l) + "." + w[0] + ".dw";
        const std::string cross = "d2h.grad.h." + std::to_string(l + 2) + "." + w[1] + ".weight[";
        double start = -1, end = -1;
        for (const TaskRecord& r : recs) {
          if (r.step != t) continue;
          if (dw == r.name) start = start < 0 ? r.start_us : std::min(start, r.start_us);
          if (std::string(r.name).rfind(cross, 0) == 0) end = std::max(end, r.end_us);
        }
        ASSERT_GE(start, 0) << dw << " step " << t;
        ASSERT_GE(end, 0) << cross << " step " << t;
        EXPECT_LE(end, start) << dw << " step " << t << " by " << end - start << " us";
        ++checked;
      }
  EXPECT_EQ(checked, 4 * 2 * 4);
}

// What keeps them whole is named.
TEST(GradStream, RunsThatCannotStreamSayWhy) {
  Spec s;
  EXPECT_EQ(grad_stream_off(s, 1, true), "");
  EXPECT_EQ(grad_stream_off(s, 1, false), "the model has no layer groups (a tied head)");
  s.train.gradient_accumulation_steps = 2;
  EXPECT_EQ(grad_stream_off(s, 1, true), "gradient accumulation sums them on the device");
  s = Spec{};
  s.precision = "fp16";
  EXPECT_EQ(grad_stream_off(s, 1, true), "fp16's overflow check reads them after the backward");
  s = Spec{};
  s.zero_stage = 3;
  EXPECT_EQ(grad_stream_off(s, 2, true), "ZeRO stage 3 reduce-scatters them into shards");
  EXPECT_EQ(grad_stream_off(s, 1, true), "");  // one process: nothing to shard
}

}  // namespace
}  // namespace zf::test
