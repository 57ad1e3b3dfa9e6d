#include "graphs/strategies/clip.hpp"

#include <algorithm>
#include <cmath>

namespace zf {

GradClip::GradClip(Runtime& rt, const std::string& name, float max_norm, bool device_side, const Comm* comm)
    : rt_(rt), name_(name), clip_(max_norm), device_(device_side), comm_(comm),
      total_(comm ? Tensor::home({1}, name + ".clip.sumsq_ranks", sizeof(double)) : Tensor()),
      factor_(Tensor::home({3}, name + ".clip.factor")) {}

void GradClip::submit(int64_t t, const SubmitOptions& ctx, const std::vector<ClipPart>& parts, double sq_div,
                      float extra, float loss_scale) {
  if (partials_.empty()) {
    if (device_)
      partials_.push_back(Tensor::home({(int64_t)parts.size()}, name_ + ".clip.sumsq", sizeof(double)));
    else
      for (size_t i = 0; i < parts.size(); ++i)
        partials_.push_back(Tensor::home({1}, name_ + ".clip.sumsq[" + std::to_string(i) + "]", sizeof(double)));
  }
  if ((device_ ? (size_t)partials_.front().numel() : partials_.size()) != parts.size())
    throw Error("graph build: clip " + name_ + ": " + std::to_string(parts.size()) + " parts, was " +
                std::to_string(device_ ? partials_.front().numel() : (int64_t)partials_.size()));
  const std::string s = "[" + std::to_string(t) + "]";
  for (size_t i = 0; i < parts.size(); ++i)
    insert_sumsq(ctx.named("clip.sumsq." + parts[i].tensor->name()), *parts[i].tensor, parts[i].slice,
                 device_ ? partials_.front() : partials_[i], device_ ? i : 0);
  std::vector<const Tensor*> ps;
  for (const Tensor& p : partials_) ps.push_back(&p);
  if (comm_) {  // this rank's partition: the global sum of squares over the ranks
    insert_allreduce_partials(ctx.named("clip.allreduce." + name_), ps, total_, *comm_);
    ps = {&total_};
  }
  const bool read_back = device_ && rt_.device_is_cuda();
  insert_clip_factor(ctx.named("clip.factor." + name_), ps, sq_div, clip_, loss_scale, extra, factor_,
                     read_back ? nullptr : &log_, t);
  if (read_back) {
    readback_.push_back({t, {0, 0, 0}});
    rt_.read_async(factor_, readback_.back().second.data(), 3 * sizeof(float), t);
  }
  for (const ClipPart& p : parts)
    if (p.scaled)
      insert_scale_by(ctx.named("clip.scale." + p.tensor->name()), *p.tensor, p.slice, factor_);
}

std::vector<ClipRecord> GradClip::records() const {
  std::vector<ClipRecord> r = log_.records();
  for (auto& [t, v] : readback_) r.push_back({t, v[1], v[0], v[2] != 0.0f});
  std::stable_sort(r.begin(), r.end(), [](const ClipRecord& a, const ClipRecord& b) { return a.step < b.step; });
  return r;
}

float GradClip::norm_through(int64_t t) const {
  float n = NAN;
  int64_t best = -1;
  for (const ClipRecord& r : log_.records())
    if (r.step <= t && r.step >= best) best = r.step, n = r.norm;
  for (auto& [s, v] : readback_)  // complete through the steps the device has finished
    if (s <= t && s >= best) best = s, n = v[1];
  return n;
}

nlohmann::json GradClip::metrics() const {
  const std::vector<ClipRecord> r = records();
  int64_t clipped = 0;
  double sum = 0, mx = 0;
  nlohmann::json steps = nlohmann::json::array(), norms = nlohmann::json::array();
  for (const ClipRecord& x : r) {
    clipped += x.clipped;
    sum += x.norm;
    mx = std::max(mx, (double)x.norm);
    steps.push_back(x.step);
    norms.push_back(x.norm);
  }
  return {{"max_norm", clip_},
          {"clip_points", (int64_t)r.size()},
          {"clipped_steps", clipped},
          {"norm", {{"mean", r.empty() ? 0.0 : sum / (double)r.size()}, {"max", mx}, {"last", r.empty() ? 0.0 : r.back().norm}}},
          {"steps", steps},
          {"norms", norms}};
}

}  // namespace zf
