// Trains a few steps of a spec through zenflow's public C++ API (graphs/schema/spec.hpp, graphs/train/trainer.hpp)
// and checks what it got back: the step count, a finite training loss, and an evaluation accuracy
// above chance (ten classes: 10 %), i.e. the model learned.
//   zenflow_consumer SPEC.json STEPS     exit 0 when every check holds
#include <cmath>
#include <cstdio>
#include <string>

#include "graphs/schema/machine_check.hpp"
#include "graphs/schema/spec.hpp"
#include "graphs/train/trainer.hpp"
#include "runtime/error.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: zenflow_consumer SPEC.json STEPS\n");
    return 2;
  }
  const long steps = std::stol(argv[2]);
  try {
    zf::Spec spec = zf::load_spec(argv[1], {"train.steps=" + std::to_string(steps), "strategy=\"zenflow\"",
                                           "data.eval_limit=500", "log.warmup_steps=0"});
    zf::check_machine(spec);  // the policy and worker counts against this machine
    zf::RunOptions opt;
    opt.quiet = true;
    const nlohmann::json m = zf::run_training(spec, opt);
    const long ran = m.at("steps").get<long>();
    const double loss = m.at("final").at("train_loss").get<double>();
    const double acc = m.at("final").at("eval_accuracy").get<double>();
    std::printf("zenflow_consumer: %s, %ld steps, strategy %s, train loss %.4f, eval accuracy %.2f %%\n",
                spec.name.c_str(), ran, m.at("strategy").get<std::string>().c_str(), loss, 100 * acc);
    if (ran != steps || !std::isfinite(loss) || !(acc > 0.2 && acc <= 1.0)) {
      std::fprintf(stderr, "zenflow_consumer: unexpected metrics\n");
      return 1;
    }
    return 0;
  } catch (const zf::InputError& e) {
    std::fprintf(stderr, "zenflow_consumer: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zenflow_consumer: failed: %s\n", e.what());
    return 1;
  }
}
