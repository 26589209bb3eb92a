#pragma once
/// Layout search: enumerate every valid training layout for a model, a GPU type and a GPU
/// count, prune by divisibility and memory before costing, rank by step time or cost.

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/progress.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/step.hpp"

namespace capsim {

struct SearchOptions {
  std::vector<int64_t> gpu_counts;      ///< GPU counts to try (the scenario's when empty)
  int64_t max_micro_batch = 8;
  std::vector<Recompute> recompute = {Recompute::none, Recompute::selective, Recompute::full};
  std::vector<int> zero = {0, 1, 2, 3};
  bool schedules = false;               ///< also try zb-h1 and dualpipe
  int64_t max_tp = 0;                   ///< 0: up to gpus_per_node
  size_t top_k = 10;
  bool rank_by_cost = false;            ///< cost = step time x GPUs (GPU-seconds per step)
  unsigned threads = 1;
  /// Layouts costed of those enumerated, counted in batches per worker; none when null.
  ProgressCounter* progress = nullptr;
  /// Read (relaxed) before each layout is costed; once set, search_training stops and throws
  /// SearchCancelled. None when null.
  const std::atomic<bool>* cancel = nullptr;
};

/// Thrown by search_training when its options' `cancel` flag is set: the workers stopped
/// between two layouts and there is no result.
class SearchCancelled : public std::runtime_error {
 public:
  SearchCancelled() : std::runtime_error("search cancelled") {}
};

struct SearchCandidate {
  TrainingPlan plan;
  int64_t num_gpus = 0;
  double step_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double peak_memory_bytes = 0;
  double capacity_bytes = 0;
  double gpu_seconds_per_step = 0;
  bool operator==(const SearchCandidate&) const = default;
};

struct SearchResult {
  std::vector<SearchCandidate> top;     ///< best first
  /// Pareto front: no other feasible layout is at least as fast with at most as many GPUs
  /// and at least as much memory headroom.
  std::vector<SearchCandidate> pareto;
  int64_t enumerated = 0;  ///< layouts generated
  int64_t pruned_divisibility = 0;
  int64_t pruned_memory = 0;
  int64_t evaluated = 0;   ///< layouts costed
  int64_t feasible = 0;
};

/// Every training layout of `base` (its model, GPU, global batch, sequence length,
/// precision and optimizer) over the search space, ranked. Deterministic for any thread
/// count. Throws SearchCancelled when `opt.cancel` is set before it finishes.
SearchResult search_training(const Scenario& base, const CostModel& cost, const SearchOptions& opt);

}  // namespace capsim
