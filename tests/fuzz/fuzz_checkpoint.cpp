// The checkpoint loader: find_checkpoint, check_compatible and load_checkpoint (--resume) of a
// zenflow MLP (784-1-10 on Fashion-MNIST, one device and one host CPU worker). At start-up a real
// checkpoint of that run is written to a scratch directory; each input replaces its
// state.safetensors. An input whose first byte is odd is used as it is (the checksum refuses
// most); an even one, if it parses as safetensors, is written back by write_safetensors with a
// fresh checksum first, so that the loader's value-by-value validation is what is exercised.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "graphs/train/checkpoint.hpp"
#include "graphs/schema/spec.hpp"
#include "graphs/strategies/strategy.hpp"
#include "graphs/train/trainer.hpp"
#include "models/formats/safetensors.hpp"
#include "models/workload.hpp"
#include "runtime/runtime.hpp"
#include "tests/fuzz/fuzz_common.hpp"

namespace {

struct Harness {
  zf::Spec spec;
  std::unique_ptr<zf::Runtime> rt;
  std::unique_ptr<zf::Workload> wl;
  std::unique_ptr<zf::Strategy> strat;
  std::string dir, state;

  Harness() {
    nlohmann::json j = {{"strategy", "zenflow"},
                        {"model", {{"type", "mlp"}, {"hidden", {1}}}},
                        {"data", {{"train_limit", 64}, {"eval_limit", 16}}},
                        {"train", {{"batch_size", 8}, {"steps", 8}}},
                        {"zenflow", {{"topk_ratio", 0.5}, {"update_interval", 2}, {"select_strategy", "step"},
                                     {"select_interval", 2}, {"overlap_step", true}}},
                        {"runtime", {{"device_workers", 1}, {"host_workers", 1}}}};
    spec = zf::parse_spec(j, "fuzz-spec.json");
    zf::RuntimeConfig rc;
    rc.sched = spec.runtime.sched;
    rc.device_workers = rc.host_workers = 1;
    rt = std::make_unique<zf::Runtime>(rc);
    wl = zf::make_workload(spec, &rt->tracker().status());
    strat = zf::make_strategy(spec, *rt, wl->params(), zf::steps_per_epoch(spec, wl->epoch_size()));
    rt->wait_all();
    dir = zf::fuzz::scratch("ck");
    std::filesystem::remove_all(dir);
    const std::string step_dir = zf::write_checkpoint(dir, 3, spec, *wl, *strat);
    state = step_dir + "/state.safetensors";
    if (const char* seed = std::getenv("ZF_FUZZ_WRITE_SEED")) {  // the corpus seed: a flag byte, the file
      std::ifstream in(state, std::ios::binary);
      std::ofstream out(seed, std::ios::binary | std::ios::trunc);
      out.put('\0');
      out << in.rdbuf();
    }
  }
};

Harness& harness() {
  static Harness h;
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  harness();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness& h = harness();
  if (size < 1) return 0;
  const bool raw = data[0] & 1;
  zf::fuzz::write(h.state, data + 1, size - 1);
  if (!raw) {
    try {
      zf::StFile f = zf::read_safetensors(h.state);
      zf::write_safetensors(h.state, f, true);
    } catch (const zf::InputError&) {
    }
  }
  return zf::fuzz::expect_input_errors_only([&] {
    zf::CheckpointInfo ck = zf::find_checkpoint(h.dir);
    zf::check_compatible(ck, h.spec);
    h.rt->wait_all();
    zf::load_checkpoint(ck, *h.wl, *h.strat);
    h.rt->wait_all();
  });
}
