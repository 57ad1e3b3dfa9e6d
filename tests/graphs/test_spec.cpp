// Spec validation (graphs/schema/spec.hpp): defaults, the shipped specs, and every class of bad input
// (unknown key, wrong type, impossible value, bad --set override, invalid or missing file) must
// be a zf::InputError whose message names the source file and the field path (style.md, Errors).
#include <gtest/gtest.h>
#include <hwloc.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "graphs/schema/machine_check.hpp"
#include "graphs/schema/spec.hpp"
#include "runtime/error.hpp"
#include "runtime/runtime.hpp"
#include "test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace zf::test;  // TempDir, expect_input_error (test_helpers.hpp)

constexpr const char* kSrc = "my-run.json";

// parse_spec and check_machine on j, expecting an InputError naming kSrc, `field` and `what`.
void expect_spec_error(const json& j, const std::string& field, const std::string& what) {
  SCOPED_TRACE(j.dump());
  expect_input_error([&] { zf::check_machine(zf::parse_spec(j, kSrc)); }, {std::string(kSrc) + ": " + field, what});
}

TEST(Spec, DefaultsParse) {
  zf::Spec d;
  zf::Spec s = zf::parse_spec(json::object(), kSrc);
  EXPECT_EQ(s.source, kSrc);
  EXPECT_EQ(s.to_json(), d.to_json());
  EXPECT_EQ(s.strategy, "device-adam");
  EXPECT_EQ(s.model.hidden, (std::vector<int>{256, 128}));
  EXPECT_EQ(s.train.batch_size, 128);
  EXPECT_EQ(s.runtime.sched, "zf-deadline");
  EXPECT_FLOAT_EQ(s.optimizer.beta2, 0.999f);
}

// zero_optimization.stage (docs/data-parallel.md): 0 to 3 (what stage 3 supports is checked by
// make_strategy); in to_json when not 0
TEST(Spec, ZeroStage) {
  EXPECT_EQ(zf::parse_spec(json::object(), kSrc).zero_stage, 0);
  EXPECT_FALSE(zf::parse_spec(json::object(), kSrc).to_json().contains("zero_optimization"));
  for (int st : {1, 2, 3}) {
    const json j{{"strategy", "zero-offload"}, {"zero_optimization", {{"stage", st}}}};
    const zf::Spec s = zf::parse_spec(j, kSrc);
    EXPECT_EQ(s.zero_stage, st);
    EXPECT_EQ(zf::parse_spec(s.to_json(), kSrc).zero_stage, st);
  }
  // the strategy's rules are decided where the spec is read (graphs/strategies/registry.cpp):
  // device-adam (the default) partitions its device state at stages 1 and 2, not its parameters
  for (int st : {1, 2}) EXPECT_EQ(zf::parse_spec(json{{"zero_optimization", {{"stage", st}}}}, kSrc).zero_stage, st);
  expect_spec_error(json{{"zero_optimization", {{"stage", 3}}}}, "zero_optimization.stage", "use stage 1 or 2");
  expect_spec_error(json{{"zero_optimization", {{"stage", 4}}}}, "zero_optimization.stage", "");
  expect_spec_error(json{{"zero_optimization", {{"stage", -1}}}}, "zero_optimization.stage", "");
  expect_spec_error(json{{"zero_optimization", {{"stage", "2"}}}}, "zero_optimization.stage", "integer");
  expect_spec_error(json{{"zero_optimization", {{"stages", 2}}}}, "zero_optimization.stages", "");
}

TEST(Spec, ToJsonRoundTrips) {
  zf::Spec s = zf::parse_spec(json::object(), kSrc);
  s.strategy = "zero-offload";
  s.model.hidden = {32, 16, 8};
  s.train.batch_size = 64;
  s.runtime.tile_elems = 4096;
  zf::Spec t = zf::parse_spec(s.to_json(), kSrc);
  EXPECT_EQ(t.to_json(), s.to_json());
}

TEST(Spec, ShippedSpecsParse) {
  int n = 0;
  for (auto& e : fs::directory_iterator(fs::path(ZF_SOURCE_DIR) / "graphs" / "specs")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    // DeepSpeed configs shipped beside the specs (zenflow-run --deepspeed) are not graph specs
    const json raw = zf::read_json_file(e.path().string());
    if (raw.is_object() && (raw.contains("zero_optimization") || raw.contains("train_batch_size"))) continue;
    ++n;
    zf::Spec s;
    ASSERT_NO_THROW(s = zf::load_spec(e.path().string(), {}));
    EXPECT_EQ(s.source, e.path().string());
    EXPECT_FALSE(s.model.hidden.empty());
  }
  EXPECT_GE(n, 1) << "no graphs/specs/*.json found";
}

TEST(Spec, PartialSectionsKeepDefaults) {
  zf::Spec s = zf::parse_spec(json{{"train", {{"batch_size", 32}}}, {"model", {{"hidden", {8}}}}}, kSrc);
  EXPECT_EQ(s.train.batch_size, 32);
  EXPECT_EQ(s.train.eval_batch_size, 1000);
  EXPECT_EQ(s.model.hidden, std::vector<int>{8});
  EXPECT_EQ(s.model.activation, "relu");
}

TEST(Spec, UnknownKeyTopLevel) {
  expect_spec_error(json{{"nmae", "x"}}, "nmae", "unknown key");
  expect_spec_error(json{{"name", "x"}, {"optimiser", json::object()}}, "optimiser", "unknown key");
}

TEST(Spec, UnknownKeyNested) {
  expect_spec_error(json{{"model", {{"hiden", {8}}}}}, "model.hiden", "unknown key");
  expect_spec_error(json{{"train", {{"batchsize", 8}}}}, "train.batchsize", "unknown key");
  expect_spec_error(json{{"optimizer", {{"beta1", 0.9}}}}, "optimizer.beta1", "unknown key");
  expect_spec_error(json{{"runtime", {{"scheduler", "lws"}}}}, "runtime.scheduler", "unknown key");
  expect_spec_error(json{{"data", {{"dri", "/x"}}}}, "data.dri", "unknown key");
  expect_spec_error(json{{"log", {{"evry", 1}}}}, "log.evry", "unknown key");
  // the message lists the keys that are known there
  expect_input_error([] { zf::parse_spec(json{{"model", {{"hiden", {8}}}}}, kSrc); }, {"hidden", "activation"});
}

TEST(Spec, WrongType) {
  expect_spec_error(json::array(), "(top level)", "expected an object");
  expect_spec_error(json{{"name", 3}}, "name", "expected a string");
  expect_spec_error(json{{"strategy", true}}, "strategy", "expected a string");
  expect_spec_error(json{{"model", {8, 4}}}, "model", "expected an object");
  expect_spec_error(json{{"train", "fast"}}, "train", "expected an object");
  expect_spec_error(json{{"train", {{"batch_size", "128"}}}}, "train.batch_size", "expected an integer, got a string");
  expect_spec_error(json{{"train", {{"batch_size", 12.5}}}}, "train.batch_size", "expected an integer");
  expect_spec_error(json{{"train", {{"steps", nullptr}}}}, "train.steps", "expected an integer, got null");
  expect_spec_error(json{{"optimizer", {{"lr", "0.1"}}}}, "optimizer.lr", "expected a number, got a string");
  expect_spec_error(json{{"optimizer", {{"betas", 0.9}}}}, "optimizer.betas", "expected [beta1, beta2]");
  expect_spec_error(json{{"optimizer", {{"betas", {0.9}}}}}, "optimizer.betas", "expected [beta1, beta2]");
  expect_spec_error(json{{"optimizer", {{"betas", {"0.9", 0.999}}}}}, "optimizer.betas", "expected [beta1, beta2]");
  expect_spec_error(json{{"model", {{"hidden", 8}}}}, "model.hidden", "expected an array");
  expect_spec_error(json{{"model", {{"hidden", {8, "4"}}}}}, "model.hidden[1]", "expected an integer width");
  expect_spec_error(json{{"runtime", {{"sched", 1}}}}, "runtime.sched", "expected a string");
  expect_spec_error(json{{"runtime", {{"device_workers", 1.0}}}}, "runtime.device_workers", "expected an integer");
  expect_spec_error(json{{"data", {{"dir", {"a"}}}}}, "data.dir", "expected a string, got an array");
  expect_spec_error(json{{"log", {{"every", false}}}}, "log.every", "expected an integer, got a boolean");
}

// zenflow.dp_selection (docs/data-parallel.md): "exact" by default and not written then; "local-sum"
// round-trips; anything else names the field
TEST(Spec, ZenflowDpSelection) {
  const zf::Spec d = zf::parse_spec(json{{"strategy", "zenflow"}}, kSrc);
  EXPECT_EQ(d.zenflow.dp_selection, "exact");
  EXPECT_FALSE(d.zenflow.local_sum());
  EXPECT_FALSE(d.to_json()["zenflow"].contains("dp_selection"));
  const zf::Spec s = zf::parse_spec(json{{"strategy", "zenflow"}, {"zenflow", {{"dp_selection", "local-sum"}}}}, kSrc);
  EXPECT_TRUE(s.zenflow.local_sum());
  EXPECT_TRUE(zf::parse_spec(s.to_json(), kSrc).zenflow.local_sum());
  expect_spec_error(json{{"strategy", "zenflow"}, {"zenflow", {{"dp_selection", "gather"}}}}, "zenflow.dp_selection",
                    "'gather' is not one of: exact, local-sum");
  expect_spec_error(json{{"strategy", "zenflow"}, {"zenflow", {{"dp_selection", 1}}}}, "zenflow.dp_selection", "string");
}

// zenflow.accumulate_on (docs/zenflow.md, "Where the accumulation runs"): "host" by default and not
// written then; "device" round-trips, from a DeepSpeed zenflow block too; anything else names the field
TEST(Spec, ZenflowAccumulateOn) {
  const zf::Spec d = zf::parse_spec(json{{"strategy", "zenflow"}}, kSrc);
  EXPECT_EQ(d.zenflow.accumulate_on, "host");
  EXPECT_TRUE(d.zenflow.accumulate_on_host());
  EXPECT_FALSE(d.to_json()["zenflow"].contains("accumulate_on"));
  const zf::Spec s = zf::parse_spec(json{{"strategy", "zenflow"}, {"zenflow", {{"accumulate_on", "device"}}}}, kSrc);
  EXPECT_FALSE(s.zenflow.accumulate_on_host());
  EXPECT_EQ(zf::parse_spec(s.to_json(), kSrc).zenflow.accumulate_on, "device");
  expect_spec_error(json{{"strategy", "zenflow"}, {"zenflow", {{"accumulate_on", "gpu"}}}}, "zenflow.accumulate_on",
                    "'gpu' is not one of: host, device");
  expect_spec_error(json{{"strategy", "zenflow"}, {"zenflow", {{"accumulate_on", true}}}}, "zenflow.accumulate_on",
                    "string");
}

TEST(Spec, ImpossibleValues) {
  expect_spec_error(json{{"train", {{"batch_size", 0}}}}, "train.batch_size", "outside [1,");
  expect_spec_error(json{{"train", {{"batch_size", -4}}}}, "train.batch_size", "outside");
  expect_spec_error(json{{"train", {{"epochs", 0}}}}, "train.epochs", "outside");
  expect_spec_error(json{{"train", {{"steps", -1}}}}, "train.steps", "outside");
  expect_spec_error(json{{"train", {{"eval_batch_size", 0}}}}, "train.eval_batch_size", "outside");
  expect_spec_error(json{{"optimizer", {{"lr", -0.001}}}}, "optimizer.lr", "outside (0,");
  expect_spec_error(json{{"optimizer", {{"lr", 0}}}}, "optimizer.lr", "outside (0,");
  expect_spec_error(json{{"optimizer", {{"eps", 0.0}}}}, "optimizer.eps", "outside");
  expect_spec_error(json{{"optimizer", {{"weight_decay", -0.1}}}}, "optimizer.weight_decay", "outside");
  expect_spec_error(json{{"optimizer", {{"betas", {1.0, 0.999}}}}}, "optimizer.betas[0]", "[0, 1)");
  expect_spec_error(json{{"optimizer", {{"betas", {-0.1, 0.999}}}}}, "optimizer.betas[0]", "[0, 1)");
  expect_spec_error(json{{"optimizer", {{"betas", {0.9, 1.5}}}}}, "optimizer.betas[1]", "[0, 1)");
  expect_spec_error(json{{"model", {{"hidden", {8, 0}}}}}, "model.hidden[1]", "outside [1,");
  expect_spec_error(json{{"model", {{"activation", "tanh"}}}}, "model.activation", "'tanh' is not one of: relu, gelu");
  expect_spec_error(json{{"model", {{"type", "resnet"}}}}, "model.type", "'resnet' is not one of");
  expect_spec_error(json{{"data", {{"dataset", "imagenet"}}}}, "data.dataset", "'imagenet' is not one of");
  expect_spec_error(json{{"data", {{"train_limit", -1}}}}, "data.train_limit", "outside");
  expect_spec_error(json{{"runtime", {{"tile_elems", 1000}}}}, "runtime.tile_elems", "multiple of 16");
  expect_spec_error(json{{"runtime", {{"tile_elems", 8}}}}, "runtime.tile_elems", "outside");
  expect_spec_error(json{{"runtime", {{"lookahead", 0}}}}, "runtime.lookahead", "outside");
  expect_spec_error(json{{"runtime", {{"crossings", "dma"}}}}, "runtime.crossings", "'dma' is not one of: device, host");
  expect_spec_error(json{{"runtime", {{"device_workers", -1}}}}, "runtime.device_workers", "outside");
  expect_spec_error(json{{"runtime", {{"priorities", "yes"}}}}, "runtime.priorities", "expected true or false, got a string");
  expect_spec_error(json{{"log", {{"every", -1}}}}, "log.every", "outside");
}

TEST(Spec, OurPolicyAndPrioritiesParse) {
  zf::Spec s = zf::parse_spec(json{{"runtime", {{"sched", "zf-deadline"}, {"priorities", false}}}}, kSrc);
  EXPECT_EQ(s.runtime.sched, "zf-deadline");
  EXPECT_FALSE(s.runtime.priorities);
  EXPECT_TRUE(zf::parse_spec(json::object(), kSrc).runtime.priorities);
  EXPECT_FALSE(zf::parse_spec(s.to_json(), kSrc).runtime.priorities);  // round trip
}

TEST(Spec, UnknownSchedPolicy) {
  expect_spec_error(json{{"runtime", {{"sched", "fastest"}}}}, "runtime.sched",
                    "unknown StarPU scheduling policy 'fastest'");
  // the message lists the known policies
  expect_input_error([] { zf::check_machine(zf::parse_spec(json{{"runtime", {{"sched", "fastest"}}}}, kSrc)); },
                     {"lws", "dmda"});
  for (const char* p : {"lws", "eager", "prio", "dmda", "dmdas", "ws"}) {
    SCOPED_TRACE(p);
    EXPECT_EQ(zf::parse_spec(json{{"runtime", {{"sched", p}}}}, kSrc).runtime.sched, p);
  }
}

TEST(Spec, UnknownStrategy) {
  expect_spec_error(json{{"strategy", "zero"}}, "strategy", "'zero' is not one of: device-adam, zero-offload");
  EXPECT_EQ(zf::parse_spec(json{{"strategy", "zero-offload"}}, kSrc).strategy, "zero-offload");
  expect_spec_error(json{{"precision", "fp8"}}, "precision", "'fp8' is not one of: fp32, bf16, fp16");
  EXPECT_EQ(zf::parse_spec(json{{"precision", "bf16"}}, kSrc).precision, "bf16");
}

TEST(Spec, Fp16Block) {
  const zf::Spec d = zf::parse_spec(json{{"precision", "fp16"}}, kSrc);
  EXPECT_EQ(d.precision, "fp16");
  EXPECT_EQ(d.fp16.loss_scale, 0.0);  // DeepSpeed's defaults
  EXPECT_EQ(d.fp16.initial_scale_power, 16);
  EXPECT_EQ(d.fp16.loss_scale_window, 1000);
  EXPECT_EQ(d.fp16.hysteresis, 2);
  EXPECT_EQ(d.fp16.min_loss_scale, 1);
  const zf::Spec s = zf::parse_spec(
      json{{"precision", "fp16"}, {"fp16", {{"loss_scale", 64.0}, {"hysteresis", 1}, {"consecutive_hysteresis", true}}}},
      kSrc);
  EXPECT_EQ(s.fp16.loss_scale, 64.0);
  EXPECT_EQ(s.fp16.hysteresis, 1);
  EXPECT_TRUE(s.fp16.consecutive_hysteresis);
  expect_spec_error(json{{"fp16", {{"loss_scale", 64.0}}}}, "fp16", "needs precision \"fp16\"");
  expect_spec_error(json{{"precision", "fp16"}, {"fp16", {{"loss_scale", -2}}}}, "fp16.loss_scale", "outside");
  expect_spec_error(json{{"precision", "fp16"}, {"fp16", {{"loss_scale_window", 0}}}}, "fp16.loss_scale_window", "outside");
  expect_spec_error(json{{"precision", "fp16"}, {"fp16", {{"hysteresis", 0}}}}, "fp16.hysteresis", "outside");
  expect_spec_error(json{{"precision", "fp16"}, {"fp16", {{"min_loss_scale", 0}}}}, "fp16.min_loss_scale", "outside");
  expect_spec_error(json{{"precision", "fp16"}, {"fp16", {{"initial_scale_power", 200}}}}, "fp16.initial_scale_power", "outside");
  expect_spec_error(json{{"precision", "fp16"}, {"fp16", {{"enabled", true}}}}, "fp16.enabled", "unknown key");
  // the effective spec carries the block (checkpoints compare it)
  EXPECT_EQ(s.to_json()["fp16"]["loss_scale"], 64.0);
  EXPECT_FALSE(zf::parse_spec(json::object(), kSrc).to_json().contains("fp16"));
}

TEST(Spec, WorkersExceedMaxCpus) {
  const int max = zf::Runtime::max_cpu_workers();
  expect_spec_error(json{{"runtime", {{"device_workers", max}, {"host_workers", 1}}}}, "runtime.device_workers",
                    "STARPU_MAXCPUS");
  expect_spec_error(json{{"runtime", {{"host_workers", max + 1}}}}, "runtime.host_workers", "outside");
  if (max >= 2) {
    zf::Spec s = zf::parse_spec(json{{"runtime", {{"device_workers", max - 1}, {"host_workers", 1}}}}, kSrc);
    EXPECT_EQ(s.runtime.device_workers + s.runtime.host_workers, max);
  }
}

// The automatic worker split (docs/spec.md, "Worker split"): on CPU workers the device side gets
// pt_reserved_cores_perc of the cores; with CUDA workers driving the device, the host gets every
// core they leave, or those outside the reserved share where the spec gives one.
TEST(Spec, WorkerSplitWithAndWithoutCudaWorkers) {
  using P = std::pair<int, int>;
  const zf::Spec zen = zf::parse_spec(json{{"strategy", "zenflow"}}, kSrc);
  const zf::Spec off = zf::parse_spec(json{{"strategy", "zero-offload"}}, kSrc);
  const zf::Spec dev = zf::parse_spec(json{{"strategy", "device-adam"}}, kSrc);
  const zf::Spec given =
      zf::parse_spec(json{{"strategy", "zenflow"}, {"zenflow", {{"pt_reserved_cores_perc", 0.25}}}}, kSrc);
  EXPECT_EQ(zf::split_cores(zen, 32, 0), P(16, 16));  // CPU device: the default 0.5
  EXPECT_EQ(zf::split_cores(given, 32, 0), P(8, 24));
  EXPECT_EQ(zf::split_cores(dev, 32, 0), P(31, 1));
  EXPECT_EQ(zf::split_cores(zen, 32, 1), P(1, 31));  // one GPU: 31 host workers, not 16
  EXPECT_EQ(zf::split_cores(off, 32, 1), P(1, 31));
  EXPECT_EQ(zf::split_cores(off, 32, 2), P(2, 30));
  EXPECT_EQ(zf::split_cores(given, 32, 1), P(8, 24));  // the reserved share, as DeepSpeed's ZenFlow
  EXPECT_EQ(zf::split_cores(dev, 32, 1), P(31, 1));    // no host work: one host worker
  EXPECT_EQ(zf::split_cores(zen, 1, 1), P(1, 1));      // one core: both share it
}

// A rank's cores: the node's, shared by the unbound ranks on it; its binding's where it is bound.
TEST(Spec, RankCoresFromTheBindingOrTheNodesShare) {
  const int all = zf::Runtime::hwloc_cores();
  ASSERT_FALSE(zf::Runtime::process_bound()) << "run unbound (the test binds itself below)";
  EXPECT_EQ(zf::Runtime::rank_cores(1), all);
  EXPECT_EQ(zf::Runtime::rank_cores(2), std::max(1, all / 2));
  if (all < 2) GTEST_SKIP() << "one core: no binding to a part of the machine";
  // the whole process bound to its first core, as mpirun --bind-to core binds a rank
  hwloc_topology_t topo;
  hwloc_topology_init(&topo);
  hwloc_topology_load(topo);
  hwloc_bitmap_t old = hwloc_bitmap_alloc();
  ASSERT_EQ(hwloc_get_cpubind(topo, old, HWLOC_CPUBIND_PROCESS), 0);
  hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, 0);
  ASSERT_NE(core, nullptr);
  ASSERT_EQ(hwloc_set_cpubind(topo, core->cpuset, HWLOC_CPUBIND_PROCESS), 0);
  const bool bound = zf::Runtime::process_bound();
  const int cores = zf::Runtime::rank_cores(4);
  EXPECT_EQ(hwloc_set_cpubind(topo, old, HWLOC_CPUBIND_PROCESS), 0);
  hwloc_bitmap_free(old);
  hwloc_topology_destroy(topo);
  EXPECT_TRUE(bound);
  EXPECT_EQ(cores, 1);  // the binding's one core, whatever the node's ranks
}

TEST(SpecOverride, NestedPathCreatesObjects) {
  json j = json::object();
  zf::apply_override(j, "train.batch_size=256", kSrc);
  zf::apply_override(j, "model.hidden=[8,4]", kSrc);
  zf::apply_override(j, "optimizer.lr=1e-2", kSrc);
  EXPECT_EQ(j["train"]["batch_size"], 256);
  EXPECT_TRUE(j["train"]["batch_size"].is_number_integer());
  EXPECT_EQ(j["model"]["hidden"], json({8, 4}));
  zf::Spec s = zf::parse_spec(j, kSrc);
  EXPECT_EQ(s.train.batch_size, 256);
  EXPECT_EQ(s.model.hidden, (std::vector<int>{8, 4}));
  EXPECT_FLOAT_EQ(s.optimizer.lr, 1e-2f);
}

TEST(SpecOverride, KeepsSiblings) {
  json j = {{"train", {{"batch_size", 32}, {"seed", 7}}}};
  zf::apply_override(j, "train.batch_size=64", kSrc);
  EXPECT_EQ(j["train"]["batch_size"], 64);
  EXPECT_EQ(j["train"]["seed"], 7);
}

TEST(SpecOverride, JsonValueVersusBareString) {
  json j = json::object();
  zf::apply_override(j, "strategy=zero-offload", kSrc);  // not JSON: taken as a string
  EXPECT_EQ(j["strategy"], "zero-offload");
  zf::apply_override(j, "name=\"42\"", kSrc);  // a JSON string
  EXPECT_EQ(j["name"], "42");
  zf::apply_override(j, "runtime.sched=\"dmda\"", kSrc);
  EXPECT_EQ(j["runtime"]["sched"], "dmda");
  zf::apply_override(j, "data.dir=/tmp/some dir", kSrc);
  EXPECT_EQ(j["data"]["dir"], "/tmp/some dir");
  zf::apply_override(j, "data.train_limit=100", kSrc);
  EXPECT_TRUE(j["data"]["train_limit"].is_number_integer());
  // 42 is JSON: a number, which the spec then rejects for a string field
  zf::apply_override(j, "name=42", kSrc);
  EXPECT_TRUE(j["name"].is_number());
  expect_spec_error(j, "name", "expected a string, got a number");
  // a quoted number stays a string, which an integer field rejects
  json k = json::object();
  zf::apply_override(k, "train.batch_size=\"64\"", kSrc);
  expect_spec_error(k, "train.batch_size", "expected an integer, got a string");
}

TEST(SpecOverride, IntoNonObjectIsAnError) {
  json j = {{"name", "x"}, {"model", {{"hidden", {8}}}}};
  expect_input_error([&] { zf::apply_override(j, "name.first=1", kSrc); },
                     {"--set name.first=1", "'name' is not an object", kSrc});
  expect_input_error([&] { zf::apply_override(j, "model.hidden.width=8", kSrc); },
                     {"'model.hidden' is not an object", kSrc});
  json arr = json::array();
  expect_input_error([&] { zf::apply_override(arr, "a=1", kSrc); }, {"--set a=1", "not an object", kSrc});
}

// KEY=null removes an optional block or a field (its default): --set scheduler=null was "expected an
// object" (issue 45); a path that is not there creates nothing
TEST(SpecOverride, NullRemovesTheKey) {
  json j = {{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 10}}}}},
            {"train", {{"batch_size", 32}, {"steps", 5}}}};
  zf::apply_override(j, "scheduler=null", kSrc);
  zf::apply_override(j, "train.batch_size=null", kSrc);
  zf::apply_override(j, "zenflow.topk_ratio=null", kSrc);
  EXPECT_EQ(j, json({{"train", {{"steps", 5}}}}));
  const zf::Spec s = zf::parse_spec(j, kSrc);
  EXPECT_TRUE(s.scheduler.type.empty());
  EXPECT_EQ(s.train.batch_size, zf::Spec{}.train.batch_size);
  EXPECT_FALSE(s.zenflow.given);
}

TEST(SpecOverride, MalformedAssignment) {
  json j = json::object();
  expect_input_error([&] { zf::apply_override(j, "train.batch_size", kSrc); },
                     {"--set train.batch_size", "expected FIELD.PATH=VALUE"});
  expect_input_error([&] { zf::apply_override(j, "=5", kSrc); }, {"--set =5", "expected FIELD.PATH=VALUE"});
  expect_input_error([&] { zf::apply_override(j, "train..batch_size=5", kSrc); }, {"empty component"});
  expect_input_error([&] { zf::apply_override(j, "train.=5", kSrc); }, {"empty component"});
}

// A bare-word value or a field path that is not UTF-8 is refused naming the field (the fuzzer's
// finding: --set runtime.sched=dmda\xC6 was accepted, then could not be printed back).
TEST(SpecOverride, NotUtf8IsAnError) {
  json j = json::object();
  expect_input_error([&] { zf::apply_override(j, "runtime.sched=dmda\xC6", kSrc); },
                     {"--set \"runtime.sched\"", "not valid UTF-8"});
  expect_input_error([&] { zf::apply_override(j, "name=\"x\xC6\"", kSrc); }, {"--set \"name\"", "not valid UTF-8"});
  expect_input_error([&] { zf::apply_override(j, "na\xFFme=x", kSrc); }, {"not valid UTF-8"});
  EXPECT_TRUE(j.empty());
  zf::apply_override(j, "name=caf\xC3\xA9", kSrc);  // UTF-8 is fine
  EXPECT_EQ(j["name"], "caf\xC3\xA9");
}

TEST(SpecFile, LoadWithOverrides) {
  TempDir d;
  std::string p = d.file("base.json", R"({"name": "t", "train": {"batch_size": 32}})");
  zf::Spec s = zf::load_spec(p, {"train.batch_size=16", "strategy=zero-offload", "model.hidden=[4]"});
  EXPECT_EQ(s.source, p);
  EXPECT_EQ(s.name, "t");
  EXPECT_EQ(s.train.batch_size, 16);
  EXPECT_EQ(s.strategy, "zero-offload");
  EXPECT_EQ(s.model.hidden, std::vector<int>{4});
}

// A spec's relative paths are the spec file's folder's (it runs from any directory); absolute paths
// and the paths of --set (the shell's) are kept as given
TEST(SpecFile, RelativePathsResolveAgainstTheSpecFolder) {
  TempDir d;
  std::filesystem::create_directories(d.path("specs"));
  const std::string p = d.file("specs/s.json", R"({"model": {"type": "hf", "path": "m", "init": "random"},
    "data": {"dataset": "tokens", "path": "../data/t.bin", "eval_path": "/abs/e.bin"}})");
  const zf::Spec s = zf::load_spec(p, {});
  EXPECT_EQ(s.model.path, d.path("specs/m"));
  EXPECT_EQ(s.data.path, d.path("data/t.bin"));
  EXPECT_EQ(s.data.eval_path, "/abs/e.bin");
  const zf::Spec o = zf::load_spec(p, {"data.path=rel/t.bin"});
  EXPECT_EQ(o.data.path, "rel/t.bin");
  EXPECT_EQ(o.model.path, d.path("specs/m"));
  const zf::Spec q = zf::load_spec(std::string(ZF_SOURCE_DIR) + "/graphs/specs/llama-kjv.json", {});
  EXPECT_EQ(q.model.path, std::string(ZF_SOURCE_DIR) + "/graphs/specs/llama-kjv");
}

TEST(SpecFile, ErrorsNameTheFile) {
  TempDir d;
  std::string p = d.file("bad-key.json", R"({"model": {"hiden": [8]}})");
  expect_input_error([&] { zf::load_spec(p, {}); }, {p + ": model.hiden", "unknown key", "bad-key.json"});
  std::string q = d.file("ok.json", R"({"train": {"batch_size": 32}})");
  // an impossible value that came from --set still names the spec file and the field
  expect_input_error([&] { zf::load_spec(q, {"train.batch_size=0"}); }, {"ok.json: train.batch_size", "outside"});
  expect_input_error([&] { zf::load_spec(q, {"train.batch_size=abc"}); },
                     {"ok.json: train.batch_size", "expected an integer, got a string"});
  expect_input_error([&] { zf::check_machine(zf::load_spec(q, {"runtime.sched=nope"})); }, {"ok.json: runtime.sched", "nope"});
  expect_input_error([&] { zf::load_spec(q, {"train.batch_size.x=1"}); }, {"ok.json", "'train.batch_size' is not an object"});
  std::string r = d.file("wrong-type.json", R"({"optimizer": {"lr": "fast"}})");
  expect_input_error([&] { zf::load_spec(r, {}); }, {"wrong-type.json: optimizer.lr", "expected a number"});
}

TEST(SpecFile, InvalidJson) {
  TempDir d;
  std::string p = d.file("broken.json", "{\"name\": \"x\",\n  \"train\": {\"batch_size\": 12,}\n");
  expect_input_error([&] { zf::load_spec(p, {}); }, {p, "broken.json", "not valid JSON"});
  std::string e = d.file("empty.json", "");
  expect_input_error([&] { zf::read_json_file(e); }, {"empty.json", "not valid JSON"});
}

TEST(SpecFile, MissingFile) {
  TempDir d;
  std::string p = d.path("does-not-exist.json");
  expect_input_error([&] { zf::load_spec(p, {}); }, {p, "does-not-exist.json", "cannot open"});
}

// DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR (deepspeed/runtime/lr_schedules.py) on
// DeepSpeed's timing (runtime/engine.py steps the scheduler after the optimizer): step t runs at
// last_batch_iteration i = t - 1, and step 0 at the constructor's value (i = -1: min_lr, or 0 for
// WarmupCosineLR). Values worked out by hand: gamma = log(i + 1) / log(W) (log) or i / W (linear)
// for i < W; then 1 (WarmupLR) or max(0, (total - i) / (total - W)) (WarmupDecayLR);
// lr = min + (max - min) gamma. WarmupCosineLR: ratio = wmin + gamma (1 - wmin) in the warm-up, then
// cmin + (1 - cmin) (1 + cos(pi min(1, (i - W + 1) / (total - W)))) / 2; lr = optimizer.lr x ratio.
TEST(SpecScheduler, LearningRatesAsDeepSpeedComputesThem) {
  zf::Spec none = zf::parse_spec(json{{"optimizer", {{"lr", 0.02}}}}, kSrc);
  EXPECT_DOUBLE_EQ(none.lr_at(0), 0.02);
  EXPECT_DOUBLE_EQ(none.lr_at(12345), 0.02);

  zf::Spec w = zf::parse_spec(json::parse(R"({"optimizer": {"lr": 0.02}, "scheduler": {"type": "WarmupLR",
      "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.011, "warmup_num_steps": 100}}})"), kSrc);
  EXPECT_DOUBLE_EQ(w.lr_at(0), 0.001);                                  // i = -1: min_lr
  EXPECT_DOUBLE_EQ(w.lr_at(1), 0.001);                                  // i = 0: log(1) = 0
  EXPECT_NEAR(w.lr_at(10), 0.001 + 0.010 * 0.5, 1e-15);                 // i = 9: log(10) / log(100) = 1/2
  EXPECT_NEAR(w.lr_at(100), 0.011, 1e-15);                              // i = 99: log(100) / log(100)
  EXPECT_DOUBLE_EQ(w.lr_at(101), 0.011);
  EXPECT_DOUBLE_EQ(w.lr_at(100000), 0.011);                             // no decay
  EXPECT_DOUBLE_EQ(w.schedule_at(9), w.lr_at(10));

  zf::Spec d = zf::parse_spec(json::parse(R"({"optimizer": {"lr": 0.004}, "scheduler": {"type": "WarmupDecayLR",
      "params": {"warmup_num_steps": 10, "warmup_type": "linear", "total_num_steps": 110}}})"), kSrc);
  EXPECT_DOUBLE_EQ(d.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(d.lr_at(1), 0.0);
  EXPECT_NEAR(d.lr_at(2), 0.0004, 1e-15);        // i = 1: 1/10
  EXPECT_NEAR(d.lr_at(6), 0.002, 1e-15);         // warmup_max_lr defaults to optimizer.lr in a spec
  EXPECT_NEAR(d.lr_at(11), 0.004, 1e-15);        // i = 10: (110 - 10) / 100
  EXPECT_NEAR(d.lr_at(36), 0.003, 1e-15);        // i = 35: (110 - 35) / 100
  EXPECT_NEAR(d.lr_at(110), 0.00004, 1e-15);     // i = 109
  EXPECT_DOUBLE_EQ(d.lr_at(111), 0.0);
  EXPECT_DOUBLE_EQ(d.lr_at(500), 0.0);           // never negative

  // warmup_num_steps 1 counts as 2 (DeepSpeed: max(2, warmup_num_steps))
  zf::Spec one = zf::parse_spec(json::parse(R"({"optimizer": {"lr": 0.01}, "scheduler": {"type": "WarmupLR",
      "params": {"warmup_num_steps": 1, "warmup_type": "linear"}}})"), kSrc);
  EXPECT_DOUBLE_EQ(one.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(one.lr_at(1), 0.0);
  EXPECT_NEAR(one.lr_at(2), 0.005, 1e-15);
  EXPECT_DOUBLE_EQ(one.lr_at(3), 0.01);
  EXPECT_NE(one.describe_lr().find("WarmupLR"), std::string::npos);

  zf::Spec c = zf::parse_spec(json::parse(R"({"optimizer": {"lr": 0.01}, "scheduler": {"type": "WarmupCosineLR",
      "params": {"warmup_num_steps": 10, "warmup_type": "linear", "total_num_steps": 110,
                 "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01}}})"), kSrc);
  EXPECT_DOUBLE_EQ(c.lr_at(0), 0.0);                     // i = -1: get_lr returns 0.0
  EXPECT_NEAR(c.lr_at(1), 0.001, 1e-15);                 // i = 0: ratio 0.1
  EXPECT_NEAR(c.lr_at(6), 0.01 * (0.1 + 0.5 * 0.9), 1e-15);  // i = 5
  EXPECT_NEAR(c.lr_at(11), 0.01 * (0.01 + 0.99 * (1 + std::cos(M_PI * 0.01)) / 2), 1e-15);  // i = 10: 1/100
  EXPECT_NEAR(c.lr_at(60), 0.01 * 0.505, 1e-15);         // i = 59: progress 1/2, cos = 0
  EXPECT_NEAR(c.lr_at(110), 0.0001, 1e-15);              // i = 109: progress 1, the floor
  EXPECT_NEAR(c.lr_at(1000), 0.0001, 1e-15);             // clamped at the floor
  zf::Spec cd = zf::parse_spec(json::parse(R"({"optimizer": {"lr": 0.01}, "scheduler": {"type": "WarmupCosineLR",
      "params": {"total_num_steps": 3000}}})"), kSrc);
  EXPECT_EQ(cd.scheduler.warmup_num_steps, 1000);        // DeepSpeed's defaults
  EXPECT_EQ(cd.scheduler.warmup_type, "log");
  EXPECT_DOUBLE_EQ(cd.scheduler.warmup_min_ratio, 0.0);
  EXPECT_DOUBLE_EQ(cd.scheduler.cos_min_ratio, 0.0001);
  EXPECT_DOUBLE_EQ(cd.lr_at(1), 0.0);                    // i = 0: log(1) = 0
  EXPECT_NEAR(cd.lr_at(10), 0.01 * std::log(10.0) / std::log(1000.0), 1e-15);

  // the spec round-trips with its schedule
  EXPECT_EQ(zf::parse_spec(d.to_json(), kSrc).to_json(), d.to_json());
  EXPECT_EQ(zf::parse_spec(w.to_json(), kSrc).to_json(), w.to_json());
  EXPECT_EQ(zf::parse_spec(c.to_json(), kSrc).to_json(), c.to_json());
  EXPECT_FALSE(none.to_json().contains("scheduler"));
}

TEST(SpecScheduler, BadBlocksNameTheField) {
  expect_spec_error(json{{"scheduler", {{"params", json::object()}}}}, "scheduler.type", "required");
  expect_spec_error(json{{"scheduler", {{"type", "OneCycle"}}}}, "scheduler.type", "not supported");
  expect_spec_error(json{{"scheduler", {{"type", "WarmupCosineLR"}}}}, "scheduler.params", "total_num_steps");
  expect_spec_error(json{{"scheduler", {{"type", "WarmupCosineLR"}, {"params", {{"total_num_steps", 5}, {"warmup_min_lr", 0.1}}}}}},
                    "scheduler.params.warmup_min_lr", "unknown key");
  expect_spec_error(json{{"scheduler", {{"type", "WarmupLR"}, {"params", {{"cos_min_ratio", 0.1}}}}}},
                    "scheduler.params.cos_min_ratio", "unknown key");
  expect_spec_error(json{{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 0}}}}}},
                    "scheduler.params.warmup_num_steps", "outside");
  expect_spec_error(json{{"scheduler", {{"type", "WarmupDecayLR"}}}}, "scheduler.params", "total_num_steps");
  expect_spec_error(json{{"scheduler", {{"type", "WarmupDecayLR"}, {"params", {{"warmup_num_steps", 5}}}}}},
                    "scheduler.params.total_num_steps", "required");
  expect_spec_error(json{{"scheduler", {{"type", "WarmupLR"}, {"params", {{"total_num_steps", 5}}}}}},
                    "scheduler.params.total_num_steps", "unknown key");
  expect_spec_error(json{{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_type", "cosine"}}}}}},
                    "scheduler.params.warmup_type", "not one of");
  expect_spec_error(json{{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", -1}}}}}},
                    "scheduler.params.warmup_max_lr", "outside");
  expect_spec_error(json{{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 2.5}}}}}},
                    "scheduler.params.warmup_num_steps", "expected an integer");
  expect_spec_error(json{{"scheduler", "WarmupLR"}}, "scheduler", "expected an object");
}

// gradient_clipping and gradient accumulation (DeepSpeed's keys; docs/spec.md)
TEST(Spec, ClippingAndAccumulationFields) {
  zf::Spec s = zf::parse_spec(json::parse(R"({"gradient_clipping": 1.0,
      "train": {"batch_size": 16, "gradient_accumulation_steps": 4}})"), kSrc);
  EXPECT_DOUBLE_EQ(s.gradient_clipping, 1.0);
  EXPECT_EQ(s.train.gradient_accumulation_steps, 4);
  EXPECT_EQ(zf::parse_spec(s.to_json(), kSrc).to_json(), s.to_json());
  zf::Spec d = zf::parse_spec(json::object(), kSrc);  // defaults: off, 1, and absent from to_json
  EXPECT_EQ(d.gradient_clipping, 0.0);
  EXPECT_EQ(d.train.gradient_accumulation_steps, 1);
  EXPECT_FALSE(d.to_json().contains("gradient_clipping"));
  EXPECT_FALSE(d.to_json()["train"].contains("gradient_accumulation_steps"));
  expect_spec_error(json{{"gradient_clipping", -1}}, "gradient_clipping", "outside");
  expect_spec_error(json{{"gradient_clipping", "1"}}, "gradient_clipping", "expected a number");
  expect_spec_error(json{{"train", {{"batch_size", 10}, {"gradient_accumulation_steps", 4}}}},
                    "train.gradient_accumulation_steps", "does not divide");
  expect_spec_error(json{{"train", {{"gradient_accumulation_steps", 0}}}}, "train.gradient_accumulation_steps", "outside");
  expect_spec_error(json{{"strategy", "zenflow"}, {"train", {{"batch_size", 16}, {"gradient_accumulation_steps", 2}}}},
                    "train.gradient_accumulation_steps", "update_interval");
}

TEST(Spec, StepsArithmetic) {
  zf::Spec s = zf::parse_spec(json{{"train", {{"batch_size", 100}, {"epochs", 3}}}}, kSrc);
  EXPECT_EQ(zf::steps_per_epoch(s, 1050), 10);
  EXPECT_EQ(zf::total_steps(s, 1050), 30);
  EXPECT_EQ(zf::steps_per_epoch(s, 50), 1);  // never zero
  s.train.steps = 7;
  EXPECT_EQ(zf::total_steps(s, 1050), 7);
}

}  // namespace
