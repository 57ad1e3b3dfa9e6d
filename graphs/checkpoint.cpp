#include "graphs/checkpoint.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "codelets/kernels/cpu/kernels.hpp"
#include "graphs/spec.hpp"
#include "graphs/strategy.hpp"
#include "graphs/trainer.hpp"
#include "models/workload.hpp"

namespace zf {
namespace fs = std::filesystem;
using json = nlohmann::json;

void StateWriter::put(const std::string& name, const Tensor& t) {
  t.acquire_read();
  StTensor s;
  s.dtype = t.bytes() == t.numel() * 8 ? "F64" : t.bytes() == t.numel() * 4 ? "F32" : "U8";
  s.shape = {(int64_t)(t.bytes() / (s.dtype == "F64" ? 8 : s.dtype == "F32" ? 4 : 1))};
  s.bytes.assign(t.as<uint8_t>(), t.as<uint8_t>() + t.bytes());
  t.release();
  f_.tensors[name] = std::move(s);
}

void StateWriter::put(const std::string& name, const HostTensor& h) {
  StTensor s;
  s.dtype = "F32";
  size_t n = 0;
  for (auto& t : h.tiles) n += t.numel();
  s.shape = {(int64_t)n};
  s.bytes.resize(n * 4);
  size_t off = 0;
  for (auto& t : h.tiles) {  // bf16 and fp16 tiles are saved as their exact fp32 values
    t.acquire_read();
    if (t.elem_size() == 2 && t.half() == Half::Fp16)
      kernels::cpu::unpack_fp16(t.as<uint16_t>(), reinterpret_cast<float*>(s.bytes.data() + off), t.numel());
    else if (t.elem_size() == 2)
      kernels::cpu::unpack_bf16(t.as<uint16_t>(), reinterpret_cast<float*>(s.bytes.data() + off), t.numel());
    else
      std::memcpy(s.bytes.data() + off, t.data(), t.bytes());
    t.release();
    off += t.numel() * 4;
  }
  f_.tensors[name] = std::move(s);
}

void StateWriter::put_i64(const std::string& name, const std::vector<int64_t>& v) {
  StTensor s;
  s.dtype = "I64";
  s.shape = {(int64_t)v.size()};
  s.bytes.resize(v.size() * 8);
  if (!v.empty()) std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
  f_.tensors[name] = std::move(s);
}

void StateWriter::put_f64(const std::string& name, const std::vector<double>& v) {
  StTensor s;
  s.dtype = "F64";
  s.shape = {(int64_t)v.size()};
  s.bytes.resize(v.size() * 8);
  if (!v.empty()) std::memcpy(s.bytes.data(), v.data(), s.bytes.size());
  f_.tensors[name] = std::move(s);
}

void StateReader::fail(const std::string& field, const std::string& what) const {
  throw InputError(path_ + ": " + field, what);
}

const StTensor& StateReader::find(const std::string& name, const std::string& dtype, size_t bytes) const {
  auto it = f_.tensors.find(name);
  if (it == f_.tensors.end()) fail(name, "missing from the checkpoint (written by another strategy or version?)");
  if (it->second.dtype != dtype) fail(name, "dtype " + it->second.dtype + ", expected " + dtype);
  if (bytes != (size_t)-1 && it->second.bytes.size() != bytes)
    fail(name, std::to_string(it->second.bytes.size()) + " bytes, the model needs " + std::to_string(bytes) +
                   " (a checkpoint of a different model shape?)");
  return it->second;
}

void StateReader::get(const std::string& name, const Tensor& t) const {
  const size_t es = t.numel() ? t.bytes() / t.numel() : 4;
  const StTensor& s = find(name, es == 8 ? "F64" : es == 4 ? "F32" : "U8", t.bytes());
  t.acquire_write();
  std::memcpy(t.as<uint8_t>(), s.bytes.data(), t.bytes());
  t.release();
}

void StateReader::get(const std::string& name, const HostTensor& h) const {
  size_t n = 0;
  for (auto& t : h.tiles) n += t.numel() * 4;
  const StTensor& s = find(name, "F32", n);
  size_t off = 0;
  for (auto& t : h.tiles) {
    t.acquire_write();
    if (t.elem_size() == 2 && t.half() == Half::Fp16)  // values written from fp16 tiles: packing is exact
      kernels::cpu::pack_fp16(reinterpret_cast<const float*>(s.bytes.data() + off), t.as<uint16_t>(), t.numel());
    else if (t.elem_size() == 2)  // values written from bf16 tiles: packing them is exact
      kernels::cpu::pack_bf16(reinterpret_cast<const float*>(s.bytes.data() + off), t.as<uint16_t>(), t.numel());
    else
      std::memcpy(t.data(), s.bytes.data() + off, t.bytes());
    t.release();
    off += t.numel() * 4;
  }
}

std::vector<int64_t> StateReader::i64(const std::string& name) const {
  const StTensor& s = find(name, "I64", (size_t)-1);
  std::vector<int64_t> v(s.bytes.size() / 8);
  if (!v.empty()) std::memcpy(v.data(), s.bytes.data(), v.size() * 8);
  return v;
}

std::vector<double> StateReader::f64(const std::string& name) const {
  const StTensor& s = find(name, "F64", (size_t)-1);
  std::vector<double> v(s.bytes.size() / 8);
  if (!v.empty()) std::memcpy(v.data(), s.bytes.data(), v.size() * 8);
  return v;
}

static std::string step_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%08lld", (long long)step);
  return b;
}

std::string write_checkpoint(const std::string& dir, int64_t step, const Spec& spec, Workload& wl,
                             const Strategy& strat, const std::function<void(StateWriter&)>& extra) {
  fs::create_directories(dir);
  const fs::path final_dir = fs::path(dir) / step_name(step);
  const fs::path tmp = fs::path(dir) / (".tmp-" + step_name(step) + "-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  StFile model;
  model.metadata["format"] = "zenflow-weights";
  model.metadata["model"] = wl.describe();
  for (Param* p : wl.params()) {
    p->value.acquire_read();
    model.tensors[p->name] = st_f32(p->value.shape(), p->value.data());
    p->value.release();
  }
  write_safetensors((tmp / "model.safetensors").string(), model, true);
  StateWriter w;
  strat.save_state(w);
  if (extra) extra(w);
  w.file().metadata["format"] = "zenflow-state";
  w.file().metadata["step"] = std::to_string(step);
  w.file().metadata["strategy"] = strat.name();
  w.file().metadata["spec"] = spec.to_json().dump();
  // the schedule's timing (docs/spec.md): checkpoints without this key ran step t at lr(t)
  w.file().metadata["lr_timing"] = "deepspeed";
  write_safetensors((tmp / "state.safetensors").string(), w.file(), true);
  fs::remove_all(final_dir);  // a checkpoint of the same step from an earlier run
  fs::rename(tmp, final_dir);
  const std::string latest = step_name(step) + "\n";
  write_file_atomic((fs::path(dir) / "latest").string(), latest.data(), latest.size());
  return final_dir.string();
}

CheckpointInfo find_checkpoint(const std::string& path) {
  fs::path p(path);
  if (!fs::is_directory(p)) throw InputError(path, "not a checkpoint directory");
  if (fs::exists(p / "latest")) {
    std::ifstream in(p / "latest");
    std::string name;
    std::getline(in, name);
    if (name.empty() || name.find('/') != std::string::npos)
      throw InputError((p / "latest").string(), "expected the name of a step directory");
    p /= name;
  }
  const fs::path st = p / "state.safetensors";
  if (!fs::exists(st) || !fs::exists(p / "model.safetensors"))
    throw InputError(p.string(), "no model.safetensors and state.safetensors here (not a checkpoint)");
  StFile f = read_safetensors(st.string());
  CheckpointInfo ck;
  ck.dir = p.string();
  if (f.metadata["format"] != "zenflow-state") throw InputError(st.string(), "not a zenflow state file");
  try {
    ck.step = std::stoll(f.metadata.at("step"));
    ck.spec = json::parse(f.metadata.at("spec"));
    ck.lr_timing = f.metadata.count("lr_timing") ? f.metadata.at("lr_timing") : "step";
  } catch (const std::exception&) {
    throw InputError(st.string(), "__metadata__ lacks a valid step and spec");
  }
  return ck;
}

void check_compatible(const CheckpointInfo& ck, const Spec& spec) {
  const json now = spec.to_json();
  auto same = [&](const char* key, const char* sub = nullptr) {
    const json& a = sub ? ck.spec[key][sub] : ck.spec[key];
    const json& b = sub ? now[key][sub] : now[key];
    if (a != b)
      throw InputError(ck.dir + ": " + key + (sub ? std::string(".") + sub : ""),
                       "the checkpoint was written with " + a.dump() + ", this run has " + b.dump());
  };
  same("strategy");
  // checkpoints from before the precision option are fp32
  const std::string prec = ck.spec.is_object() ? ck.spec.value("precision", std::string("fp32")) : "fp32";
  if (prec != spec.precision)
    throw InputError(ck.dir + ": precision", "the checkpoint was written with \"" + prec + "\", this run has \"" +
                                                 spec.precision + "\"");
  same("model");
  same("optimizer");
  if (ck.spec.value("gradient_clipping", 0.0) != spec.gradient_clipping)
    throw InputError(ck.dir + ": gradient_clipping", "the checkpoint was written with " +
                                                         std::to_string(ck.spec.value("gradient_clipping", 0.0)) +
                                                         ", this run has " + std::to_string(spec.gradient_clipping));
  const json none, was = ck.spec.is_object() ? ck.spec.value("scheduler", none) : none;
  if (was != now.value("scheduler", none))
    throw InputError(ck.dir + ": scheduler", "the checkpoint was written with " + was.dump() + ", this run has " +
                                                 now.value("scheduler", none).dump());
  if (!spec.scheduler.type.empty() && ck.lr_timing != "deepspeed")
    throw InputError(ck.dir + ": scheduler", "the checkpoint ran step t at the schedule's lr(t) (before 2026-12-01); "
                                             "this engine runs it at lr(t - 1) as DeepSpeed does: restart the run");
  for (const char* k : {"dataset", "dir", "train_limit"}) same("data", k);
  for (const char* k : {"batch_size", "seed"}) same("train", k);
  const int64_t ga = ck.spec.contains("train") ? ck.spec["train"].value("gradient_accumulation_steps", (int64_t)1) : 1;
  if (ga != spec.train.gradient_accumulation_steps)
    throw InputError(ck.dir + ": train.gradient_accumulation_steps",
                     "the checkpoint was written with " + std::to_string(ga) + ", this run has " +
                         std::to_string(spec.train.gradient_accumulation_steps));
  if (spec.strategy == "zenflow") same("zenflow");
  if (spec.precision == "fp16") same("fp16");  // the loss scaler's settings
}

void load_checkpoint(const CheckpointInfo& ck, Workload& wl, Strategy& strat,
                     const std::function<void(const StateReader&)>& extra) {
  load_weights(wl, ck.dir + "/model.safetensors");
  const std::string st = ck.dir + "/state.safetensors";
  StFile f = read_safetensors(st);
  if (f.metadata["strategy"] != strat.name())
    throw InputError(st, "state of strategy '" + f.metadata["strategy"] + "', this run uses '" + strat.name() + "'");
  const StateReader r(f, st);
  strat.load_state(r);
  if (extra) extra(r);
}

}  // namespace zf
