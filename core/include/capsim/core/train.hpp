#pragma once
/// Training evaluation: resolve "auto" fields, then memory (and, with a step-time model,
/// time) for one scenario.

#include <functional>
#include <string>
#include <vector>

#include "capsim/core/memory.hpp"
#include "capsim/core/scenario.hpp"

namespace capsim {

/// Estimated seconds per optimizer step of a fully resolved plan; used to choose among
/// "auto" candidates. Empty: candidates are ranked by a work proxy (see resolve_training).
using StepTimeFn = std::function<double(const ModelSpec&, const SystemSpec&, const TrainingPlan&)>;

struct TrainEvaluation {
  ParamCounts params;
  TrainingPlan plan;                     ///< with every auto field resolved
  std::vector<std::string> auto_fields;  ///< names of the fields that were auto
  TrainingMemory memory;
  std::vector<std::string> warnings;
  bool feasible = true;                  ///< false when no candidate fits in memory
  std::string fail_reason;
};

/// Resolve auto fields to the fastest setting that fits in memory: every combination of
/// the auto fields' candidates (micro_batch: divisors of global/dp; recompute: none,
/// selective, full; vpp: divisors of layers/pp with microbatches divisible by pp; zero:
/// 0..3; etp: divisors of tp) is tried. With `step_time` the fastest fitting candidate
/// wins; without, the least work (recompute FLOPs and pipeline bubble), then the larger
/// micro batch, then lower ZeRO stage. When nothing fits, the smallest-memory candidate is
/// returned with feasible = false.
TrainEvaluation evaluate_training(const Scenario& s, const StepTimeFn& step_time = {});

}  // namespace capsim
