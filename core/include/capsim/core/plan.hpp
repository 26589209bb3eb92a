#pragma once
/// Procurement and sizing: for each candidate GPU type and price, the cheapest cluster
/// and layout that trains a token budget by a deadline (or within a budget), and the
/// cheapest deployment (TP, weight format, replicas) that serves a traffic level within
/// an SLA, and the cheapest cluster and placement that runs an RL post-training job (PPO or
/// GRPO iterations) by a deadline.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/posttrain.hpp"
#include "capsim/core/progress.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/search.hpp"
#include "capsim/core/serving.hpp"

namespace capsim {

/// Builds the cost model of a system (hwmodels provides the default one).
using CostModelFactory = std::function<std::unique_ptr<CostModel>(const SystemSpec&)>;

/// A GPU type on offer.
struct GpuOffer {
  SystemSpec system;        ///< gpu, gpus_per_node, nic (num_gpus is chosen by the planner)
  double usd_per_gpu_hour = 0;
  std::string price_source;  ///< "plan file" or the default's source (data/prices.json)
};

struct TrainingGoal {
  double tokens = 0;          ///< tokens to train on
  double deadline_days = 0;   ///< 0: none
  double budget_usd = 0;      ///< 0: none
  double pue = 1.0;
  /// Share of the wall clock that trains; nullopt = auto: effective_training_fraction of
  /// each cluster size.
  std::optional<double> effective_fraction;
  std::vector<int64_t> gpu_counts;  ///< cluster sizes to consider
};

struct TrainingOption {
  std::string gpu;
  bool feasible = false;      ///< a layout fits and meets the deadline and budget
  std::string reason;         ///< why not, when infeasible
  SearchCandidate layout;
  double days = 0, gpu_hours = 0, cost_usd = 0, energy_mwh = 0;
  double effective_fraction = 1.0;  ///< share of the wall clock that trains
};

/// Per GPU type, the cheapest cluster size whose fastest layout meets the goal; options
/// sorted feasible first, then by cost. `progress` counts the (GPU type, cluster size)
/// searches done.
std::vector<TrainingOption> plan_training(const Scenario& base, const std::vector<GpuOffer>& offers,
                                          const TrainingGoal& goal, const CostModelFactory& costs, unsigned threads,
                                          ProgressCounter* progress = nullptr);

struct ServingGoal {
  double qps = 0;
  ServingSla sla;
  std::vector<int64_t> tp = {1, 2, 4, 8};
  std::vector<DType> weight_dtypes = {DType::bf16, DType::fp8, DType::int4};
  /// Prefill:decode replica ratios of disaggregated units to try besides colocated
  /// replicas (vLLM/SGLang disaggregated prefill with a KV transfer); empty = colocated only.
  std::vector<std::pair<int64_t, int64_t>> disaggregation = {{1, 1}, {1, 2}};
  bool expert_parallel = true;   ///< MoE models: also try EP over the TP group (ep = tp)
  int64_t probe_requests = 300;  ///< requests per simulated probe when finding a replica's rate
};

struct ServingOption {
  std::string gpu;
  int64_t tp = 1;
  int64_t ep = 1;
  int64_t prefill = 0, decode = 0;  ///< disaggregated unit (replicas of each role); 0 = colocated
  int64_t gpus_per_replica = 1;     ///< tp, or tp x (prefill + decode) for a disaggregated unit
  DType weight_dtype = DType::bf16;
  double qps_per_replica = 0;
  int64_t replicas = 0;
  double usd_per_hour = 0;
  double usd_per_million_output_tokens = 0;
  double usd_per_gpu_hour = 0;  ///< the offer's price

  bool feasible = false;
  std::string reason;
};

/// Every (GPU type, TP, EP, weight format, colocated or disaggregated) whose replica (or
/// prefill+decode unit) fits and meets the SLA at some rate:
/// replicas = ceil(qps / rate per replica); cheapest per hour first. `progress` counts
/// the deployments whose rate has been found, of those that fit.
std::vector<ServingOption> plan_serving(const Scenario& base, const std::vector<GpuOffer>& offers,
                                        const ServingGoal& goal, const CostModelFactory& costs,
                                        unsigned threads = 1, ProgressCounter* progress = nullptr);

/// An RL post-training job: `prompts` prompts, each sampled rl.group_size times, i.e.
/// prompts / rl.prompts_per_step iterations of the base scenario's `rl` block, by a deadline.
struct RlGoal {
  int64_t prompts = 0;
  double deadline_days = 0;         ///< 0: none
  std::vector<int64_t> gpu_counts;  ///< cluster sizes to consider
  /// async_staleness values tried for split placements (the scenario's, or {0, 1} for
  /// "auto"); colocated placements are always on-policy (0).
  std::vector<int64_t> staleness = {0};
  /// Split placements: the rollout pool's share of the cluster, as numerator/denominator
  /// in lowest terms.
  std::vector<std::pair<int64_t, int64_t>> rollout_shares = {{1, 4}, {1, 2}, {3, 4}};
  /// The rollout engine's memory fraction per placement, where the goal gives one (else the
  /// engine block's for both). Frameworks set them apart: NeMo RL v0.5.0 runs vLLM at 0.6
  /// beside the offloaded trainer (examples/configs/grpo_math_1B.yaml) and at 0.8 on
  /// generation-only nodes (recipes/llm/performance/*-async-1off.yaml).
  std::optional<double> gpu_memory_utilization_colocated, gpu_memory_utilization_split;
};

/// One (GPU type, cluster size, placement, staleness) candidate of plan_rl.
struct RlOption {
  size_t offer = 0;  ///< index into the offers
  std::string gpu;
  double usd_per_gpu_hour = 0;  ///< the offer's price
  int64_t num_gpus = 0;
  RlSpec::Placement placement = RlSpec::Placement::colocated;
  int64_t rollout_gpus = 0, train_gpus = 0;  ///< colocated: both num_gpus
  int64_t async_staleness = 0;
  TrainingPlan train_layout;  ///< the actor's update layout, resolved
  InferencePlan rollout_layout;  ///< the rollout engine's layout (replicas in iteration.rollout_replicas)
  RlIteration iteration;         ///< phases, step, bottleneck
  int64_t iterations = 0;        ///< ceil(prompts / prompts_per_step)
  double hours = 0, days = 0, gpu_hours = 0, cost_usd = 0;
  /// Share of the iteration each pool waits: rollout pool busy for generation and the
  /// refit, training pool for scoring, training and the refit; colocated: 0 (one pool
  /// runs every phase in turn).
  double rollout_idle_share = 0, train_idle_share = 0;
  bool feasible = false;  ///< meets the deadline
  std::string reason;     ///< why not
};

/// Candidates left out before or during evaluation, by reason.
struct RlSkip {
  std::string reason;
  int64_t count = 0;
};

struct RlPlan {
  /// Per offer: its cheapest candidate that meets the deadline (else its quickest, to show
  /// how far off it is); those meeting it first, then by cost. Empty for an offer none of
  /// whose candidates could run.
  std::vector<RlOption> best;
  /// Every candidate evaluated: those meeting the deadline first, by cost, then fewer GPUs,
  /// then faster; the rest quickest first.
  std::vector<RlOption> candidates;
  std::vector<RlSkip> skipped;  ///< in the order the reasons were first met
};

/// For each offer, each cluster size n of the goal, and each placement (colocated on all n
/// GPUs; split with the rollout pool taking each share of the goal, the rest training),
/// one RL iteration of `base` (model, the actor's update layout in `training` with dp
/// derived from the pool, `rl` with placement and GPUs set here) and the job's hours,
/// GPU-hours and cost. A pool whose layout breaks a layout rule (check_training_layout on
/// the training pool, the rollout's tp*pp dividing its pool) or whose step does not fit in
/// memory is skipped with its reason counted. Candidates are evaluated on `threads` worker
/// threads, each writing its own slot: the result does not depend on the thread count.
/// `progress` counts the evaluations done.
RlPlan plan_rl(const Scenario& base, const std::vector<GpuOffer>& offers, const RlGoal& goal,
               const CostModelFactory& costs, unsigned threads = 1, ProgressCounter* progress = nullptr);

}  // namespace capsim
