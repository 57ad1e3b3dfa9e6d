#include "runtime/tracker.hpp"

#include <starpu.h>

#include <set>

#include "runtime/error.hpp"

namespace zf {

void StepStatus::fail(const std::string& msg) noexcept {
  try {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_.load()) return;
    msg_ = msg;
    failed_.store(true, std::memory_order_release);
  } catch (...) {
    failed_.store(true, std::memory_order_release);
  }
}

void StepStatus::rethrow_if_failed() const {
  if (!failed()) return;
  std::lock_guard<std::mutex> lk(mu_);
  throw Error("a task failed: " + msg_);
}

void Tracker::add_pending(int64_t step, Side side) {
  if (side != Side::Device) return;
  std::lock_guard<std::mutex> lk(mu_);
  ++pending_device_[step];
}

void Tracker::complete(int64_t step, Side side, const TaskRecord* rec) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (rec) {
      records_.push_back(*rec);
      if (side == Side::Device) {
        StepAgg& a = agg_[step];
        a.busy_us += rec->end_us - rec->start_us;
        if (a.tasks == 0 || rec->start_us < a.first_start_us) a.first_start_us = rec->start_us;
        if (rec->end_us > a.last_end_us) a.last_end_us = rec->end_us;
        ++a.tasks;
      }
    }
    if (side == Side::Device) {
      auto it = pending_device_.find(step);
      if (it != pending_device_.end() && --it->second == 0) pending_device_.erase(it);
    }
  }
  cv_.notify_all();
}

void Tracker::wait_device_through(int64_t step) {
  std::unique_lock<std::mutex> lk(mu_);
  auto done = [&] {
    if (status_.failed()) return true;
    for (auto& [s, n] : pending_device_)
      if (s <= step && n > 0) return false;
    return true;
  };
#ifdef ZF_SIMGRID
  // Simulation: this thread is a SimGrid actor; a wait on a condition variable would stop the whole
  // simulation. Poll every 10 us of simulated time instead (StarPU's sleep is SimGrid's).
  while (!done()) {
    lk.unlock();
    starpu_usleep(10);
    lk.lock();
  }
#else
  cv_.wait(lk, done);
#endif
}

std::vector<TaskRecord> Tracker::records() const {
  std::lock_guard<std::mutex> lk(mu_);
  return records_;
}

Tracker::StepAgg Tracker::step_agg(int64_t step) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = agg_.find(step);
  return it == agg_.end() ? StepAgg{} : it->second;
}

const char* intern(const std::string& s) {
  static std::mutex mu;
  static std::set<std::string> pool;  // node-based: c_str() stays valid
  std::lock_guard<std::mutex> lk(mu);
  return pool.insert(s).first->c_str();
}

}  // namespace zf
