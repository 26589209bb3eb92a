#include "capsim/core/plan.hpp"

#include <algorithm>
#include <cmath>

#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/parallel.hpp"

namespace capsim {

std::vector<TrainingOption> plan_training(const Scenario& base, const std::vector<GpuOffer>& offers,
                                          const TrainingGoal& goal, const CostModelFactory& costs, unsigned threads,
                                          ProgressCounter* progress) {
  std::vector<TrainingOption> out;
  progress_total(progress, static_cast<int64_t>(offers.size() * goal.gpu_counts.size()));
  for (const GpuOffer& offer : offers) {
    std::vector<TrainingOption> tried;
    for (int64_t n : goal.gpu_counts) {
      Scenario sc = base;
      sc.system = offer.system;
      sc.system.num_gpus = n;
      const auto cost = costs(sc.system);
      SearchOptions so;
      so.gpu_counts = {n};
      so.top_k = 1;
      so.threads = threads;
      const SearchResult r = search_training(sc, *cost, so);
      progress_add(progress);
      if (r.top.empty()) continue;
      TrainingOption o;
      o.gpu = offer.system.gpu.id;
      o.layout = r.top.front();
      const double seconds = goal.tokens / o.layout.tokens_per_s;
      o.days = seconds / 86400.0;
      o.gpu_hours = seconds / 3600.0 * static_cast<double>(n);
      o.cost_usd = o.gpu_hours * offer.usd_per_gpu_hour;
      /// Power model: every GPU at its TDP for the whole run, times the facility PUE.
      o.energy_mwh = o.gpu_hours * offer.system.gpu.tdp_w * goal.pue / 1e6;
      const bool in_time = goal.deadline_days <= 0 || o.days <= goal.deadline_days;
      const bool in_budget = goal.budget_usd <= 0 || o.cost_usd <= goal.budget_usd;
      o.feasible = in_time && in_budget;
      if (!in_time) o.reason = "takes " + std::to_string(o.days) + " days, past the deadline";
      else if (!in_budget) o.reason = "costs " + std::to_string(o.cost_usd) + " USD, over the budget";
      tried.push_back(o);
    }
    TrainingOption best;
    best.gpu = offer.system.gpu.id;
    best.reason = "no cluster size in the list fits the model";
    for (const auto& o : tried) {
      if (o.feasible && (!best.feasible || o.cost_usd < best.cost_usd)) best = o;
      // Nothing meets the goal yet: keep the quickest, to show how far off it is.
      else if (!best.feasible && !o.feasible && (best.days == 0 || o.days < best.days)) best = o;
    }
    out.push_back(best);
  }
  std::stable_sort(out.begin(), out.end(), [](const TrainingOption& a, const TrainingOption& b) {
    if (a.feasible != b.feasible) return a.feasible;
    return a.cost_usd < b.cost_usd;
  });
  return out;
}

std::vector<ServingOption> plan_serving(const Scenario& base, const std::vector<GpuOffer>& offers,
                                        const ServingGoal& goal, const CostModelFactory& costs, unsigned threads,
                                        ProgressCounter* progress) {
  // Enumerate the deployments first, then evaluate them (each a capacity search of many
  // simulations) on worker threads; each writes only its own slot, so the order and the
  // result do not depend on the thread count.
  std::vector<ServingOption> out;
  std::vector<Scenario> scenarios;
  std::vector<size_t> pending;
  for (const GpuOffer& offer : offers)
    for (int64_t tp : goal.tp) {
      if (tp > offer.system.gpus_per_node || base.model.heads % tp != 0) continue;
      std::vector<int64_t> eps = {1};
      if (goal.expert_parallel && base.model.moe && tp > 1 && base.model.moe->num_experts % tp == 0) eps.push_back(tp);
      std::vector<std::pair<int64_t, int64_t>> units = {{0, 0}};
      units.insert(units.end(), goal.disaggregation.begin(), goal.disaggregation.end());
      for (int64_t ep : eps)
        for (DType w : goal.weight_dtypes)
          for (auto [np, nd] : units) {
            if (w == DType::fp8 && offer.system.gpu.peak_fp8_tflops <= 0) continue;
            Scenario sc = base;
            sc.system = offer.system;
            sc.system.num_gpus = tp;
            InferencePlan& p = *sc.inference;
            p.tp = tp;
            p.pp = 1;
            p.ep = ep;
            p.replicas = np > 0 ? np + nd : 1;
            p.prefill_replicas = np;
            p.decode_replicas = nd;
            p.weight_dtype = w;
            p.activation_dtype = w == DType::fp8 ? DType::fp8 : DType::bf16;  // int4: W4A16
            p.workload.num_requests = goal.probe_requests;
            ServingOption o;
            o.gpu = offer.system.gpu.id;
            o.tp = tp;
            o.ep = ep;
            o.prefill = np;
            o.decode = nd;
            o.gpus_per_replica = tp * (np > 0 ? np + nd : 1);
            o.weight_dtype = w;
            const InferenceMemory mem = inference_memory(sc.model, sc.system, p);
            if (!mem.fits) {
              o.reason = "weights and activations leave no room for the KV cache";
              out.push_back(o);
              continue;
            }
            o.usd_per_gpu_hour = offer.usd_per_gpu_hour;
            pending.push_back(out.size());
            out.push_back(o);
            scenarios.push_back(std::move(sc));
          }
    }
  auto evaluate = [&](size_t job) {
    ServingOption& o = out[pending[job]];
    const Scenario& sc = scenarios[job];
    const auto cost = costs(sc.system);
    try {
      o.qps_per_replica = max_qps(sc, *cost, goal.sla);
    } catch (const std::exception& e) {
      o.reason = e.what();
      return;
    }
    if (o.qps_per_replica <= 0) {
      o.reason = "misses the SLA even at the lightest load";
      return;
    }
    o.replicas = static_cast<int64_t>(std::ceil(goal.qps / o.qps_per_replica));
    o.usd_per_hour = static_cast<double>(o.replicas * o.gpus_per_replica) * o.usd_per_gpu_hour;
    const double out_tokens_per_hour = goal.qps * sc.inference->workload.output_tokens.mean * 3600.0;
    o.usd_per_million_output_tokens = o.usd_per_hour / out_tokens_per_hour * 1e6;
    o.feasible = true;
  };
  progress_total(progress, static_cast<int64_t>(pending.size()));
  parallel_for(pending.size(), threads, [&](size_t job) {
    evaluate(job);
    progress_add(progress);
  });
  std::stable_sort(out.begin(), out.end(), [](const ServingOption& a, const ServingOption& b) {
    if (a.feasible != b.feasible) return a.feasible;
    return a.usd_per_hour < b.usd_per_hour;
  });
  return out;
}

}  // namespace capsim
