// The graph spec: one JSON file describing a run (model, data, training, optimizer, strategy,
// runtime). Every field has a default; an unknown key, a wrong type or an impossible value is an
// InputError naming the file and the field path. Documented in docs/spec.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zf {

struct Spec {
  std::string source = "<defaults>";  // file the spec came from (for messages)
  std::string name = "run";
  std::string strategy = "device-adam";  // device-adam | zero-offload

  struct Model {
    std::string type = "mlp";
    std::vector<int> hidden{256, 128};
    std::string activation = "relu";  // relu | gelu
    uint64_t init_seed = 1;
  } model;

  struct Data {
    std::string dataset = "fashion-mnist";
    std::string dir = "/usr/share/datasets/fashion-mnist";
    int64_t train_limit = 0;  // 0: all examples
    int64_t eval_limit = 0;
  } data;

  struct Train {
    int batch_size = 128;
    int64_t epochs = 1;
    int64_t steps = 0;  // > 0 overrides epochs
    uint64_t seed = 42;
    int eval_batch_size = 1000;
  } train;

  struct Optimizer {
    std::string type = "adamw";
    float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
  } optimizer;

  struct Runtime {
    std::string sched = "lws";
    int device_workers = 1;
    int host_workers = 1;
    int64_t tile_elems = 1 << 20;  // host-side tile size (elements, multiple of 16)
    int lookahead = 2;             // steps submitted ahead of the oldest unfinished one
  } runtime;

  struct Log {
    int every = 50;         // progress line every N steps (0: none)
    int warmup_steps = 5;   // excluded from step-time and stall metrics
  } log;

  nlohmann::json to_json() const;
};

// Parses and validates; `source` names the file in errors.
Spec parse_spec(const nlohmann::json& j, const std::string& source);
// Reads a JSON file, applies "a.b=value" overrides (value parsed as JSON, else taken as a
// string), then parses. Throws InputError.
Spec load_spec(const std::string& path, const std::vector<std::string>& overrides);
nlohmann::json read_json_file(const std::string& path);
void apply_override(nlohmann::json& j, const std::string& assignment, const std::string& source);

int64_t steps_per_epoch(const Spec& s, int64_t epoch_size);
int64_t total_steps(const Spec& s, int64_t epoch_size);

}  // namespace zf
