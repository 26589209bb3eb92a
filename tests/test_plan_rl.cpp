// `capsim plan` with an RL goal: the pick is the cheapest candidate meeting the deadline,
// checked against evaluating every (offer, cluster size, placement, staleness) directly;
// both placements appear; the answer does not depend on the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capsim/core/layout.hpp"
#include "capsim/core/plan.hpp"
#include "capsim/core/posttrain.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/plan_io.hpp"

namespace capsim {
namespace {

const std::filesystem::path kSmall = std::filesystem::path(CAPSIM_TEST_SOURCE_DIR) / "scenarios" / "plan-grpo-small.json";

CostModelFactory roofline() {
  return [](const SystemSpec& s) -> std::unique_ptr<CostModel> { return std::make_unique<hw::RooflineCostModel>(s); };
}

struct Direct {
  std::string gpu;
  int64_t gpus = 0, rollout = 0, staleness = 0;
  RlSpec::Placement placement = RlSpec::Placement::colocated;
  double days = 0, cost = 0;
};

/// Every candidate evaluated on its own, as a scenario with the placement, pools and
/// staleness written in, through evaluate_rl_iteration.
std::vector<Direct> evaluate_directly(const io::PlanRequest& req) {
  std::vector<Direct> out;
  const TrainingPlan& t = *req.base.training;
  for (const GpuOffer& offer : req.offers)
    for (int64_t n : req.rl_goal.gpu_counts) {
      struct P {
        RlSpec::Placement placement;
        int64_t rollout;
        std::vector<int64_t> staleness;
      };
      std::vector<P> ps = {{RlSpec::Placement::colocated, n, {0}}};
      for (auto [num, den] : req.rl_goal.rollout_shares)
        if ((n * num) % den == 0) ps.push_back({RlSpec::Placement::split, n * num / den, req.rl_goal.staleness});
      for (const P& p : ps)
        for (int64_t k : p.staleness) {
          Scenario sc = req.base;
          sc.system = offer.system;
          sc.system.num_gpus = n;
          const int64_t train = p.placement == RlSpec::Placement::split ? n - p.rollout : n;
          sc.rl->placement = p.placement;
          sc.rl->rollout_gpus = p.rollout;
          sc.rl->train_gpus = train;
          sc.rl->async_staleness = k;
          sc.training->dp = train / (t.tp * t.pp * t.cp);
          Scenario trainer = sc;
          trainer.system.num_gpus = train;
          if (!check_training_layout(trainer).empty()) continue;
          if (p.rollout % (sc.rl->rollout.tp * sc.rl->rollout.pp) != 0) continue;
          const hw::RooflineCostModel cost(sc.system);
          const RlIteration it = evaluate_rl_iteration(sc, cost);
          if (!it.feasible) continue;
          const double seconds = static_cast<double>(req.rl_goal.prompts / sc.rl->prompts_per_step) * it.step_time_s;
          out.push_back({offer.system.gpu.id, n, p.rollout, k, p.placement, seconds / 86400.0,
                         seconds / 3600.0 * static_cast<double>(n) * offer.usd_per_gpu_hour});
        }
    }
  return out;
}

TEST(PlanRl, PicksTheCheapestCandidateMeetingTheDeadline) {
  io::PlanRequest req = io::load_plan(kSmall);
  ASSERT_TRUE(req.rl);
  const std::vector<Direct> direct = evaluate_directly(req);
  ASSERT_FALSE(direct.empty());
  // A deadline between the quickest and the slowest candidate, so that it rules some out.
  std::vector<double> days;
  for (const Direct& d : direct) days.push_back(d.days);
  std::sort(days.begin(), days.end());
  req.rl_goal.deadline_days = days[days.size() / 2];

  const RlPlan plan = plan_rl(req.base, req.offers, req.rl_goal, roofline(), 2);
  ASSERT_EQ(plan.candidates.size(), direct.size());
  const Direct* cheapest = nullptr;
  for (const Direct& d : direct)
    if (d.days <= req.rl_goal.deadline_days &&
        (!cheapest || d.cost < cheapest->cost || (d.cost == cheapest->cost && d.gpus < cheapest->gpus)))
      cheapest = &d;
  ASSERT_NE(cheapest, nullptr);
  ASSERT_FALSE(plan.best.empty());
  const RlOption& pick = plan.best.front();
  EXPECT_TRUE(pick.feasible);
  EXPECT_EQ(pick.gpu, cheapest->gpu);
  EXPECT_EQ(pick.num_gpus, cheapest->gpus);
  EXPECT_EQ(pick.placement, cheapest->placement);
  EXPECT_EQ(pick.rollout_gpus, cheapest->rollout);
  EXPECT_NEAR(pick.cost_usd, cheapest->cost, 1e-9 * cheapest->cost);
  EXPECT_NEAR(pick.days, cheapest->days, 1e-9 * cheapest->days);
  // The candidates are ranked: those meeting the deadline first, by cost.
  for (size_t i = 1; i < plan.candidates.size(); ++i) {
    const RlOption &a = plan.candidates[i - 1], &b = plan.candidates[i];
    EXPECT_TRUE(a.feasible >= b.feasible);
    if (a.feasible && b.feasible) {
      EXPECT_LE(a.cost_usd, b.cost_usd);
    }
  }
  EXPECT_EQ(pick.cost_usd, plan.candidates.front().cost_usd);
}

// A staleness above 1 changes the rollout (more iterations in flight), so the planner
// evaluates it on its own; every candidate still matches its direct evaluation.
TEST(PlanRl, DeeperStalenessIsEvaluatedOnItsOwn) {
  io::PlanRequest req = io::load_plan(kSmall);
  req.rl_goal.staleness = {0, 1, 3};
  const std::vector<Direct> direct = evaluate_directly(req);
  const RlPlan plan = plan_rl(req.base, req.offers, req.rl_goal, roofline(), 2);
  ASSERT_EQ(plan.candidates.size(), direct.size());
  size_t deep = 0;
  for (const RlOption& o : plan.candidates) {
    const auto d = std::find_if(direct.begin(), direct.end(), [&](const Direct& x) {
      return x.gpu == o.gpu && x.gpus == o.num_gpus && x.placement == o.placement && x.rollout == o.rollout_gpus &&
             x.staleness == o.async_staleness;
    });
    ASSERT_NE(d, direct.end());
    EXPECT_NEAR(o.days, d->days, 1e-9 * d->days);
    if (o.async_staleness == 3) {
      ++deep;
      EXPECT_EQ(o.iteration.rollout_inflight_iterations, 3);
    }
  }
  EXPECT_GT(deep, 0u);
}

// The goal's per-placement memory fraction reaches each candidate's rollout engine, and a
// split candidate is what a direct evaluation with that fraction gives.
TEST(PlanRl, RolloutMemoryFractionPerPlacement) {
  io::PlanRequest req = io::load_plan(kSmall);
  req.rl_goal.gpu_memory_utilization_colocated = 0.6;
  req.rl_goal.gpu_memory_utilization_split = 0.8;
  const RlPlan plan = plan_rl(req.base, req.offers, req.rl_goal, roofline(), 2);
  io::PlanRequest at08 = io::load_plan(kSmall);
  at08.base.rl->rollout.engine.gpu_memory_utilization = 0.8;
  const std::vector<Direct> direct = evaluate_directly(at08);
  size_t split = 0;
  for (const RlOption& o : plan.candidates) {
    const bool is_split = o.placement == RlSpec::Placement::split;
    EXPECT_EQ(o.rollout_layout.engine.gpu_memory_utilization, is_split ? 0.8 : 0.6);
    if (!is_split) continue;
    ++split;
    const auto d = std::find_if(direct.begin(), direct.end(), [&](const Direct& x) {
      return x.gpu == o.gpu && x.gpus == o.num_gpus && x.placement == o.placement && x.rollout == o.rollout_gpus &&
             x.staleness == o.async_staleness;
    });
    ASSERT_NE(d, direct.end());
    EXPECT_NEAR(o.days, d->days, 1e-9 * d->days);
  }
  EXPECT_GT(split, 0u);
}

TEST(PlanRl, ColocatedAndSplitBothAppear) {
  const io::PlanRequest req = io::load_plan(kSmall);
  const RlPlan plan = plan_rl(req.base, req.offers, req.rl_goal, roofline(), 2);
  const auto has = [&](RlSpec::Placement p, int64_t staleness) {
    return std::any_of(plan.candidates.begin(), plan.candidates.end(),
                       [&](const RlOption& o) { return o.placement == p && o.async_staleness == staleness; });
  };
  EXPECT_TRUE(has(RlSpec::Placement::colocated, 0));
  EXPECT_TRUE(has(RlSpec::Placement::split, 0));
  EXPECT_TRUE(has(RlSpec::Placement::split, 1));  // "auto": 0 and 1 for split
  for (const RlOption& o : plan.candidates) {
    if (o.placement == RlSpec::Placement::colocated) {
      EXPECT_EQ(o.async_staleness, 0);
      EXPECT_EQ(o.rollout_idle_share, 0.0);
      EXPECT_EQ(o.train_idle_share, 0.0);
    } else {
      EXPECT_EQ(o.rollout_gpus + o.train_gpus, o.num_gpus);
      EXPECT_EQ(o.train_layout.dp, o.train_gpus);  // tp = pp = cp = 1
      EXPECT_EQ(o.rollout_layout.replicas, o.rollout_gpus);
      // One pool waits for the other unless the phases balance.
      EXPECT_GE(std::max(o.rollout_idle_share, o.train_idle_share), 0.0);
      EXPECT_LT(std::min(o.rollout_idle_share, o.train_idle_share), 1.0);
    }
    EXPECT_NEAR(o.gpu_hours, o.hours * static_cast<double>(o.num_gpus), 1e-9 * o.gpu_hours);
    EXPECT_NEAR(o.cost_usd, o.gpu_hours * o.usd_per_gpu_hour, 1e-9 * o.cost_usd);
    EXPECT_EQ(o.iterations, 80);  // 640 prompts / 8 per step
  }
}

TEST(PlanRl, LayoutsThatCannotDivideAreSkippedWithTheirReason) {
  io::PlanRequest req = io::load_plan(kSmall);
  req.rl_goal.gpu_counts = {6};  // 6/4 is no whole pool; a training pool of 3 does not divide global_batch 16
  const RlPlan plan = plan_rl(req.base, req.offers, req.rl_goal, roofline(), 1);
  ASSERT_EQ(plan.skipped.size(), 4u);
  EXPECT_EQ(plan.skipped[0].reason, "split 1/4: 6 GPUs have no whole rollout pool of 1/4");
  EXPECT_EQ(plan.skipped[0].count, 2);  // one per offer
  EXPECT_EQ(plan.skipped[1].reason, "split 3/4: 6 GPUs have no whole rollout pool of 3/4");
  EXPECT_EQ(plan.skipped[2].reason,
            "colocated on 6 GPUs: training pool of 6 GPUs: /training/global_batch: must be divisible by micro_batch*dp = "
            "1*6 = 6 (got 16)");
  EXPECT_EQ(plan.skipped[3].reason,
            "split 1/2 on 6 GPUs: training pool of 3 GPUs: /training/global_batch: must be divisible by micro_batch*dp = "
            "1*3 = 3 (got 16)");
  EXPECT_TRUE(plan.candidates.empty());
  EXPECT_TRUE(plan.best.empty());
}

TEST(PlanRl, SameAnswerOnAnyThreadCountAndRun) {
  const io::PlanRequest req = io::load_plan(kSmall);
  ProgressCounter progress;
  const RlPlan one = plan_rl(req.base, req.offers, req.rl_goal, roofline(), 1, &progress);
  EXPECT_EQ(progress.done.load(), progress.total.load());
  EXPECT_GT(progress.total.load(), 0);
  const RlPlan two = plan_rl(req.base, req.offers, req.rl_goal, roofline(), 3);
  EXPECT_EQ(io::rl_plan_json(req, one).dump(), io::rl_plan_json(req, two).dump());
}

}  // namespace
}  // namespace capsim
