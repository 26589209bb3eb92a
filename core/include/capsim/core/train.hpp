#pragma once
/// Training evaluation: resolve "auto" fields, then memory (and, with a step-time model,
/// time) for one scenario.

#include <functional>
#include <string>
#include <vector>

#include <optional>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/step.hpp"

namespace capsim {

/// One change to a layout that does not fit, and the memory it then needs.
struct FitRemedy {
  std::string change;      ///< e.g. "zero 3", "recompute full", "pp 8 (dp 16)"
  double peak_bytes = 0;   ///< the largest stage with the change
  bool fits = false;
};

struct TrainEvaluation {
  ParamCounts params;
  TrainingPlan plan;                     ///< with every auto field resolved
  std::vector<std::string> auto_fields;  ///< names of the fields that were auto
  TrainingMemory memory;
  std::optional<StepBreakdown> step;    ///< with a cost model
  std::vector<std::pair<std::string, std::string>> provenance;  ///< efficiency -> source
  std::vector<std::string> warnings;
  bool feasible = true;                  ///< false when no candidate fits in memory
  std::string fail_reason;
  /// When nothing fits: single changes to the smallest candidate (higher ZeRO stage,
  /// more recompute, smaller micro batch, more pipeline or tensor parallel ranks at the
  /// same GPU count, twice the GPUs in data parallel), those that fit first, then by memory.
  std::vector<FitRemedy> remedies;
};

/// Resolve auto fields to the fastest setting that fits in memory: every combination of
/// the auto fields' candidates (micro_batch: divisors of global/dp; recompute: none,
/// selective, full; vpp: divisors of layers/pp with microbatches divisible by pp; zero:
/// 0..3; etp: divisors of tp) is tried. With a cost model the fastest fitting candidate
/// by the analytical step time wins (ties: larger micro batch, lower ZeRO stage); without
/// one, the least work (recompute FLOPs and pipeline bubble). When nothing fits, the
/// smallest-memory candidate is returned with feasible = false.
TrainEvaluation evaluate_training(const Scenario& s, const CostModel* cost = nullptr,
                                  const StepOptions& options = {});

/// Expected share of a long training run's wall-clock time that trains, on `gpus` GPUs:
/// 1 / (1 + k x gpus). Interruptions arrive in proportion to the GPUs and each costs a
/// restart and the work since the last checkpoint. k from the Llama 3 report (Dubey et al.
/// 2024, Sec. 3.3.4): 466 job interruptions (419 unexpected) in a 54-day snapshot on 16,384
/// H100s with "higher than 90% effective training time", so 1 / (1 + 16384 k) = 0.90; the
/// report's figure is a lower bound, so this errs long. 0.986 on 2,048 GPUs, 0.69 on 65,536.
double effective_training_fraction(int64_t gpus);

}  // namespace capsim
