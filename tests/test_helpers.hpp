// Helpers shared by the engine tests (zf_engine_tests, zf_cuda_tests): a temporary directory,
// whole-file reads and writes, the expected zf::InputError, small specs, runs that capture the
// final weights, and comparisons of captured weights.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "codelets/kernels/cpu/kernels.hpp"
#include "graphs/schema/spec.hpp"
#include "graphs/train/trainer.hpp"
#include "models/workload.hpp"
#include "runtime/error.hpp"
#include "runtime/runtime.hpp"

namespace zf::test {

// A private temporary directory, removed with everything in it when the test ends.
struct TempDir {
  std::filesystem::path p;
  explicit TempDir(const std::string& prefix = "zf_test") {
    std::string t = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    p = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path(const std::string& name) const { return (p / name).string(); }
  // Writes `content` to `name` in the directory; returns its path.
  std::string file(const std::string& name, const std::string& content) const {
    std::ofstream(path(name), std::ios::binary) << content;
    return path(name);
  }
  std::string write(const std::string& name, const std::string& content) const { return file(name, content); }
  const std::filesystem::path& root() const { return p; }
  // Names of the entries in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (auto& e : std::filesystem::directory_iterator(p)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

using Bytes = std::vector<uint8_t>;

inline Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

inline void write_plain(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), (std::streamsize)b.size());
  ASSERT_TRUE(out.good()) << path;
}

// Runs f, expects a zf::InputError whose message contains every one of `parts`.
inline void expect_input_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no InputError thrown (expected a message with '" << *parts.begin() << "')";
  } catch (const zf::InputError& e) {
    const std::string msg = e.what();
    for (auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "message '" << msg << "' lacks '" << part << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected zf::InputError, got another exception: " << e.what();
  }
}

// The message of the zf::InputError f throws, "" if it throws none.
inline std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const zf::InputError& e) {
    return e.what();
  }
  return "";
}

// A small MLP on a Fashion-MNIST subset: fast enough for many runs per test.
inline Spec tiny_spec(int64_t steps, const std::string& strategy = "device-adam",
                      const std::string& sched = "lws") {
  Spec s;
  s.source = "tiny-spec";
  s.strategy = strategy;
  s.model.hidden = {32, 16};
  s.data.train_limit = 2048;
  s.data.eval_limit = 500;
  s.train.batch_size = 64;
  s.train.steps = steps;
  s.runtime.sched = sched;
  s.log.every = 0;
  s.log.warmup_steps = 0;
  return s;
}

using Weights = std::map<std::string, std::vector<float>>;

// RunOptions::inspect that copies the final device-side weights into w.
inline std::function<void(Runtime&, Workload&)> capture_weights(Weights& w) {
  return [&w](Runtime&, Workload& wl) {
    for (Param* p : wl.params()) w[p->name] = logical_values(*p);  // (out, in) for a weight stored in_out
  };
}

// "fc1.weight[123]: a vs b" for the first element where a and b differ bitwise, "" if equal.
inline std::string first_difference(const Weights& a, const Weights& b) {
  for (auto& [name, v] : b) {
    auto it = a.find(name);
    if (it == a.end() || it->second.size() != v.size()) return name + " (missing or resized)";
    for (size_t i = 0; i < v.size(); ++i)
      if (std::memcmp(&it->second[i], &v[i], sizeof(float)) != 0) {
        std::ostringstream o;
        o.precision(9);
        o << name << "[" << i << "]: " << it->second[i] << " vs " << v[i];
        return o.str();
      }
  }
  return "";
}

// Runs the spec quietly with the options o and returns the final device-side weights (and the
// run's metrics).
inline Weights run_capturing(const Spec& s, RunOptions o, nlohmann::json* metrics) {
  Weights w;
  o.quiet = true;
  o.inspect = capture_weights(w);
  nlohmann::json m = run_training(s, o);
  if (metrics) *metrics = m;
  return w;
}

// run_capturing without evaluation, with matmul_keep_bf16_operands = keep, counting in *kept_calls
// the matmul calls that ran on kept bf16 operands (the tests of the kept path, bf16 on a CPU
// device).
inline Weights run_counting_kept(const Spec& s, RunOptions o, bool keep, uint64_t* kept_calls) {
  o.evaluate = false;
  o.matmul_keep_bf16_operands = keep;
  const uint64_t c0 = kernels::cpu::matmul_kept_bf16_calls();
  Weights w = run_capturing(s, o, nullptr);
  *kept_calls = kernels::cpu::matmul_kept_bf16_calls() - c0;
  return w;
}

// Runs the spec and returns the final device-side weights.
inline Weights train_and_capture(const Spec& s, nlohmann::json* metrics = nullptr, bool evaluate = false) {
  RunOptions o;
  o.evaluate = evaluate;
  return run_capturing(s, o, metrics);
}

// The spec under zf-deadline trains to bitwise the same weights with one device worker and two
// host workers, two device workers, and one of each (the host worker lending its core to the
// device's tiles): the engine fixes the order of every sum, whoever runs the tiles.
inline void expect_same_weights_on_any_worker_split(Spec s) {
  s.runtime.sched = "zf-deadline";
  auto with = [&](int dev, int host) {
    Spec t = s;
    t.runtime.device_workers = dev;
    t.runtime.host_workers = host;
    return train_and_capture(t);
  };
  const Weights one = with(1, 2);
  ASSERT_FALSE(one.empty());
  EXPECT_EQ(first_difference(with(2, 1), one), "") << "two device workers";
  EXPECT_EQ(first_difference(with(1, 1), one), "") << "the host worker lending";
}

// Activation checkpointing (train.activation_checkpointing) on the spec's model: without it, every
// block and every 2 blocks, in fp32 and bf16, under device-adam and zenflow: the same weights
// bitwise, and fewer activation buffers (device_state_bytes.activations: every block < every 2 <
// none).
inline void expect_checkpointing_changes_no_weight(Spec s) {
  for (const char* precision : {"fp32", "bf16"})
    for (const char* strategy : {"device-adam", "zenflow"}) {
      SCOPED_TRACE(std::string(precision) + " " + strategy);
      s.precision = precision;
      s.strategy = strategy;
      int64_t bytes[3] = {0, 0, 0};
      Weights w[3];
      for (int n : {0, 1, 2}) {
        s.train.activation_checkpointing = n;
        nlohmann::json m;
        RunOptions o;
        o.evaluate = false;
        w[n] = run_capturing(s, o, &m);
        bytes[n] = m["device_state_bytes"]["activations"].get<int64_t>();
      }
      ASSERT_FALSE(w[0].empty());
      EXPECT_EQ(first_difference(w[1], w[0]), "") << "every block";
      EXPECT_EQ(first_difference(w[2], w[0]), "") << "every 2 blocks";
      EXPECT_GT(bytes[1], 0);
      EXPECT_LT(bytes[1], bytes[2]);
      EXPECT_LT(bytes[2], bytes[0]);
    }
}

// Runs the spec without evaluation, with optional checkpoints (every N steps into ckdir) or a
// resume, and returns the final device-side weights (and the run's metrics).
inline Weights run_with(const Spec& s, const std::string& ckdir, int64_t every, const std::string& resume,
                        nlohmann::json* metrics = nullptr) {
  RunOptions o;
  o.evaluate = false;
  o.checkpoint_dir = ckdir;
  o.checkpoint_every = every;
  o.resume_path = resume;
  return run_capturing(s, o, metrics);
}

// Largest relative difference |a-b| / max(|b|, 1e-30) over all weights; +inf on shape mismatch.
inline double max_rel_diff(const Weights& a, const Weights& b) {
  double worst = 0;
  for (auto& [k, v] : b) {
    auto it = a.find(k);
    if (it == a.end() || it->second.size() != v.size()) return INFINITY;
    for (size_t i = 0; i < v.size(); ++i) {
      double d = std::fabs((double)it->second[i] - v[i]) / std::max(std::fabs((double)v[i]), 1e-30);
      if (std::fabs((double)it->second[i] - v[i]) > 0 && d > worst) worst = d;
    }
  }
  return worst;
}

}  // namespace zf::test
