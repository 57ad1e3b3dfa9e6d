// ZenFlow's pure calendar and staleness ring (graphs/strategies/zenflow/calendar.hpp, ring.hpp)
// against the naive references' own schedule logic (tests/reference/zenflow_ref.hpp: ZenFlowRef,
// DeepSpeedZenFlowRef), over a grid of warm-up, update interval (auto included), select interval,
// staleness and semantics, for many steps: selections, host updates, which job merges at which
// step, when a merge is due, the selective AdamW's bias-correction step.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <tuple>

#include "graphs/strategies/zenflow/calendar.hpp"
#include "graphs/strategies/zenflow/ring.hpp"
#include "runtime/error.hpp"
#include "tests/reference/zenflow_ref.hpp"

namespace zf {
namespace {

constexpr int64_t kSteps = 90;

struct Merge {
  int64_t job, newest, at;
  bool flush;
  bool operator==(const Merge& o) const {
    return std::tie(job, newest, at, flush) == std::tie(o.job, o.newest, o.at, o.flush);
  }
};

std::string describe(const CalendarConfig& c) {
  std::ostringstream s;
  s << "W=" << c.warm_up << " K=" << (c.auto_interval ? "auto" : std::to_string(c.update_interval))
    << " S=" << c.select_interval << " D=" << c.staleness << " reset=" << c.reset_host_moments
    << " deepspeed=" << c.deepspeed << " overlap=" << c.overlap_step;
  return s.str();
}

// One 2-D weight whose gradients change size from step to step, so the auto rule's votes vary.
struct RefRun {
  std::vector<ref::RefParam> params{{"w", {3, 5}, std::vector<float>(15, 0.5f)}};
  std::mt19937 rng{7};
  std::vector<std::vector<float>> gradient(int64_t t) {
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    const float size = (t % 7 < 3) ? 0.01f : 1.0f;
    std::vector<float> g(15);
    for (float& x : g) x = d(rng) * size;
    return {g};
  }
};

// The calendar and the ring driven as the strategy drives them (zenflow/update.cpp, merge.cpp),
// step for step with ZenFlowRef; the votes of the auto rule are the reference's. Counts the
// votes for (first) and against (second) a host update.
std::pair<int, int> check_against_zenflow_ref(const CalendarConfig& c) {
  std::pair<int, int> votes{0, 0};
  SCOPED_TRACE(describe(c));
  ref::ZenFlowConfig rc;
  rc.warm_up = c.warm_up;
  rc.update_interval = c.auto_interval ? -1 : c.update_interval;
  rc.select_interval = c.select_interval;
  rc.staleness = c.staleness;
  rc.reset_host_moments = c.reset_host_moments;
  rc.topk_ratio = 0.4;
  rc.auto_ratio = 1.0;  // the one weight decides (0.99 of one weight: every vote is for an update)
  rc.hp.lr = 1e-3f;
  RefRun run;
  ref::ZenFlowRef z(rc, run.params);
  const ZenFlowCalendar cal(c);
  StalenessRing ring(c.staleness);
  std::vector<Merge> merges;
  std::map<int64_t, int64_t> job_at;  // update step -> its host job
  for (int64_t t = 0; t < kSteps; ++t) {
    EXPECT_EQ(cal.is_select(t), z.is_select(t)) << "step " << t;
    EXPECT_EQ(cal.votes_before(t), z.votes().count(t - 1) == 1) << "step " << t;
    const bool vote = cal.votes_before(t) && z.vote(t - 1);
    if (cal.votes_before(t)) ++(vote ? votes.first : votes.second);
    const bool update = cal.is_update(t, vote);
    EXPECT_EQ(update, z.is_update(t)) << "step " << t;
    z.step(t, run.gradient(t));
    EXPECT_EQ(cal.reads_mass(t), z.votes().count(t) == 1) << "step " << t;
    if (t >= c.warm_up) {
      EXPECT_EQ(cal.selective_step(t), t - z.selection_steps().back() + 1) << "step " << t;
    }
    ring.accumulate();
    if (update) {
      ring.record_update(t);
      job_at[t] = ring.job();
      if (cal.synchronous(t)) {
        merges.push_back({ring.job(), t, t, false});
      } else if (std::optional<Pending> p = ring.push_async(t)) {
        EXPECT_EQ(p->slot, cal.ring_slot(p->job));
        merges.push_back({p->job, p->newest_step, t, false});
      }
      ring.end_job();
    }
  }
  z.flush();
  while (std::optional<Pending> p = ring.pop()) merges.push_back({p->job, p->newest_step, kSteps - 1, true});

  EXPECT_EQ(ring.update_steps(), z.host_update_steps());
  std::vector<Merge> want;
  for (const ref::MergeRecord& m : z.merges()) want.push_back({m.job, m.u, m.m, m.flush});
  if (merges.size() != want.size()) {
    ADD_FAILURE() << merges.size() << " merges, reference " << want.size();
    return votes;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(merges[i], want[i]) << "merge " << i << ": (job " << merges[i].job << ", step " << merges[i].newest
                                  << ", at " << merges[i].at << "), reference (job " << want[i].job << ", step "
                                  << want[i].newest << ", at " << want[i].at << ")";
    const ref::MergeRecord& m = z.merges()[i];
    if (m.flush) continue;
    if (cal.synchronous(m.u)) {
      EXPECT_EQ(m.m, m.u);
      continue;
    }
    if (!c.auto_interval || m.intervals == m.steps) {
      // fixed interval: exact; auto rule: exact when every step in between was a boundary
      EXPECT_EQ(cal.merge_due(m.u), m.m + 1) << "job " << m.job;
      EXPECT_EQ(cal.host_due(m.u + 100, m.u), m.m + 1 + 100) << "job " << m.job;
    } else {
      EXPECT_LE(cal.merge_due(m.u), m.m + 1) << "job " << m.job;  // the earliest possible
    }
    EXPECT_EQ(m.intervals, c.staleness) << "job " << m.job;
  }
  // reset_host_moments: the host bias correction counts the jobs since the warm-up
  for (auto [u, job] : job_at) {
    const bool reset = c.reset_host_moments && c.warm_up > 0 && u >= c.warm_up;
    EXPECT_EQ(cal.host_step(u, job), reset ? job - c.warm_up + 1 : u + 1);
  }
  return votes;
}

TEST(ZenFlowCalendar, MatchesZenFlowRefOverAGrid) {
  int configs = 0;
  std::pair<int, int> votes{0, 0};
  for (int64_t W : {0, 1, 3})
    for (int64_t K : {0, 1, 2, 3, 5})  // 0: auto
      for (int64_t S : {0, 5, 6, 12})
        for (int D : {0, 1, 2, 3})
          for (bool reset : {false, true}) {
            if (K > 0 && S != 0 && S < K) continue;  // refused by the spec
            CalendarConfig c;
            c.warm_up = W;
            c.auto_interval = K == 0;
            c.update_interval = K;
            c.select_interval = S;
            c.staleness = D;
            c.reset_host_moments = reset;
            const std::pair<int, int> v = check_against_zenflow_ref(c);
            votes.first += v.first;
            votes.second += v.second;
            ++configs;
          }
  EXPECT_GT(configs, 400);
  // the auto rule's votes went both ways, so its boundaries were not every step
  EXPECT_GT(votes.first, 100);
  EXPECT_GT(votes.second, 100);
}

// Semantics "deepspeed": DeepSpeedZenFlowRef's boundaries, and its moment-set parity
// (get_overlap_step_state) and step counts as that reference writes them.
TEST(ZenFlowCalendar, MatchesDeepSpeedRefOverAGrid) {
  for (int64_t W : {0, 1, 4})
    for (int64_t K : {1, 2, 3, 4})
      for (int64_t S : {0, 4, 6, 12})
        for (bool overlap : {false, true}) {
          if (S != 0 && S < K) continue;
          CalendarConfig c;
          c.warm_up = W;
          c.update_interval = K;
          c.select_interval = S;
          c.staleness = overlap ? 1 : 0;
          c.deepspeed = true;
          c.overlap_step = overlap;
          SCOPED_TRACE(describe(c));
          ref::ZenFlowConfig rc;
          rc.warm_up = W;
          rc.update_interval = K;
          rc.select_interval = S;
          rc.staleness = c.staleness;
          std::vector<ref::RefParam> none;
          ref::DeepSpeedZenFlowRef z(rc, overlap, none);
          const ZenFlowCalendar cal(c);
          std::vector<int64_t> updates;
          for (int64_t t = 0; t < kSteps; ++t) {
            z.step(t, {});
            if (cal.is_update(t, false)) updates.push_back(t);
            // is_zenflow_select_boundary; the selective optimizer's step, counted from its first
            EXPECT_EQ(cal.is_select(t), t - W >= 0 && (t - W == 0 || (S != 0 && t % S == 0))) << t;
            if (t >= W) {
              EXPECT_EQ(cal.selective_step(t), t - W + 1) << t;
            }
            EXPECT_EQ(cal.moment_set(t), !overlap ? 0 : (int)((t < W ? t : t / K) & 1)) << t;
            EXPECT_EQ(cal.host_step(t, 0), t + 1) << t;
            EXPECT_EQ(cal.vector_update(t), t < W ? VectorUpdate::HostWarmUp : VectorUpdate::Selective) << t;
          }
          EXPECT_EQ(updates, z.host_update_steps());
          EXPECT_FALSE(cal.flushes());
          EXPECT_EQ(cal.divides_gradients(), K > 1);
          EXPECT_EQ(cal.host_scale(3), 1.0f);
          EXPECT_EQ(cal.host_moment_sets(), overlap ? 2 : 1);
          EXPECT_EQ(cal.vector_warm_sets(), W > 0 ? (overlap ? 2 : 1) : 0);
        }
}

TEST(ZenFlowCalendar, ZenFlowSemanticsAnswers) {
  CalendarConfig c;
  c.warm_up = 2;
  c.update_interval = 4;
  c.overlap_step = true;
  c.staleness = 1;
  const ZenFlowCalendar cal(c);
  EXPECT_TRUE(cal.flushes());
  EXPECT_FALSE(cal.divides_gradients());
  EXPECT_EQ(cal.host_scale(4), 0.25f);
  EXPECT_EQ(cal.host_moment_sets(), 1);
  EXPECT_EQ(cal.vector_warm_sets(), 0);
  EXPECT_FALSE(cal.vector_windows(true));
  EXPECT_EQ(cal.vector_update(0), VectorUpdate::Device);
  EXPECT_EQ(cal.moment_set(9), 0);
  EXPECT_TRUE(cal.resyncs(2));
  EXPECT_FALSE(cal.resyncs(0));
  EXPECT_FALSE(cal.resets_host_moments(2));
}

// The spec's update_interval "auto" is decoded in one place; the calendar's refusals.
TEST(ZenFlowCalendar, FromSpec) {
  Spec s;
  s.zenflow.select_strategy = "step";
  s.zenflow.select_interval = 8;
  s.zenflow.update_interval = 4;
  s.zenflow.full_warm_up_rounds = 2;
  s.zenflow.overlap_step = true;
  CalendarConfig c = CalendarConfig::from_spec(s, 100);
  EXPECT_FALSE(c.auto_interval);
  EXPECT_EQ(c.update_interval, 4);
  EXPECT_EQ(c.select_interval, 8);
  EXPECT_EQ(c.staleness, 1);
  EXPECT_EQ(c.warm_up, 2);
  s.zenflow.update_interval = UpdateInterval::automatic();
  EXPECT_TRUE(CalendarConfig::from_spec(s, 100).auto_interval);
  s.zenflow.update_interval = 16;  // select interval 8 < 16
  EXPECT_THROW(CalendarConfig::from_spec(s, 100), InputError);
}

}  // namespace
}  // namespace zf
