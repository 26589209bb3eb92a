// The evaluation cache is an optimisation only: results with it equal results without it,
// byte for byte, over layouts of a dense and an MoE model, whatever order they come in.
#include <gtest/gtest.h>

#include "capsim/core/eval_cache.hpp"
#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/step.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/presets.hpp"
#include "eval_layouts.hpp"

namespace capsim {
namespace {

void expect_same_step(const StepBreakdown& a, const StepBreakdown& b) {
  EXPECT_EQ(a.step_s, b.step_s);
  EXPECT_EQ(a.compute_s, b.compute_s);
  EXPECT_EQ(a.recompute_s, b.recompute_s);
  EXPECT_EQ(a.bubble_s, b.bubble_s);
  EXPECT_EQ(a.microbatch_s, b.microbatch_s);
  EXPECT_EQ(a.exposed_tp_s, b.exposed_tp_s);
  EXPECT_EQ(a.exposed_cp_s, b.exposed_cp_s);
  EXPECT_EQ(a.exposed_ep_s, b.exposed_ep_s);
  EXPECT_EQ(a.exposed_pp_s, b.exposed_pp_s);
  EXPECT_EQ(a.exposed_dp_s, b.exposed_dp_s);
  EXPECT_EQ(a.optimizer_s, b.optimizer_s);
  EXPECT_EQ(a.slowest_stage, b.slowest_stage);
  EXPECT_EQ(a.mfu, b.mfu);
  EXPECT_EQ(a.hfu, b.hfu);
}

void check_model(const std::string& model, int64_t gpus, int64_t global_batch) {
  Scenario s = testing::on_cluster(model, "h100-sxm5-80gb", gpus, 400);
  TrainingPlan base;
  base.global_batch = global_batch;
  base.seq_len = 4096;
  const hw::RooflineCostModel cost(s.system);
  const auto plans = testing::spread_layouts(s.model, base, gpus, 300, 7);
  ASSERT_GE(plans.size(), 200u);
  EvalCache cache;
  size_t checked = 0;
  // Twice through: the second pass hits every cache entry the first one made.
  for (int pass = 0; pass < 2; ++pass)
    for (const TrainingPlan& t : plans) {
      s.training = t;
      if (!check_training_layout(s).empty()) continue;
      ++checked;
      SCOPED_TRACE(testing::describe(t));
      EXPECT_EQ(training_memory(s.model, s.system, t, &cache), training_memory(s.model, s.system, t));
      TrainingMemory reused;
      training_memory(s.model, s.system, t, reused, &cache);
      EXPECT_EQ(reused, training_memory(s.model, s.system, t));
      StepOptions so;
      expect_same_step(analytical_step(s.model, s.system, t, cost, so, &cache),
                       analytical_step(s.model, s.system, t, cost, so));
    }
  EXPECT_GE(checked, 200u);
}

TEST(EvalCache, DenseModelResultsEqualUncached) { check_model("gpt3-175b", 512, 1536); }
TEST(EvalCache, MoeModelResultsEqualUncached) { check_model("mixtral-8x7b", 256, 1024); }

}  // namespace
}  // namespace capsim
