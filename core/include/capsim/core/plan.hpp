#pragma once
/// Procurement and sizing: for each candidate GPU type and price, the cheapest cluster
/// and layout that trains a token budget by a deadline (or within a budget), and the
/// cheapest deployment (TP, weight format, replicas) that serves a traffic level within
/// an SLA.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "capsim/core/cost_model.hpp"
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
  std::vector<int64_t> gpu_counts;  ///< cluster sizes to consider
};

struct TrainingOption {
  std::string gpu;
  bool feasible = false;      ///< a layout fits and meets the deadline and budget
  std::string reason;         ///< why not, when infeasible
  SearchCandidate layout;
  double days = 0, gpu_hours = 0, cost_usd = 0, energy_mwh = 0;
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

}  // namespace capsim
