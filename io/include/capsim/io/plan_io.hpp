#pragma once
/// Plan files (`capsim plan`): a model, GPU offers with prices, and a training goal or a
/// serving goal or an RL post-training goal. Documented in docs/sweeps.md ("Plan files").

#include <filesystem>
#include <nlohmann/json_fwd.hpp>

#include "capsim/core/plan.hpp"

namespace capsim::io {

struct PlanRequest {
  Scenario base;  ///< model plus the training or inference plan the goal refers to
  std::vector<GpuOffer> offers;
  bool training = true;
  bool rl = false;  ///< an RL post-training goal (training false)
  TrainingGoal train_goal;
  ServingGoal serve_goal;
  RlGoal rl_goal;
};

/// Read a plan file; every problem is reported at once.
PlanRequest load_plan(const std::filesystem::path& path);

nlohmann::json training_plan_json(const PlanRequest& req, const std::vector<TrainingOption>& options);
nlohmann::json serving_plan_json(const PlanRequest& req, const std::vector<ServingOption>& options);
nlohmann::json rl_plan_json(const PlanRequest& req, const RlPlan& plan);

}  // namespace capsim::io
