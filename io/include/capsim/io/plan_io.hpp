#pragma once
/// Plan files (`capsim plan`): a model, GPU offers with prices, and a training goal or a
/// serving goal. Documented in docs/plan.md.

#include <filesystem>
#include <nlohmann/json_fwd.hpp>

#include "capsim/core/plan.hpp"

namespace capsim::io {

struct PlanRequest {
  Scenario base;  ///< model plus the training or inference plan the goal refers to
  std::vector<GpuOffer> offers;
  bool training = true;
  TrainingGoal train_goal;
  ServingGoal serve_goal;
};

/// Read a plan file; every problem is reported at once.
PlanRequest load_plan(const std::filesystem::path& path);

nlohmann::json training_plan_json(const PlanRequest& req, const std::vector<TrainingOption>& options);
nlohmann::json serving_plan_json(const PlanRequest& req, const std::vector<ServingOption>& options);

}  // namespace capsim::io
