#include "capsim/core/plan.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>

#include "capsim/core/diagnostics.hpp"
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
      // Wall clock: the steps plus the interruptions a run on n GPUs expects.
      o.effective_fraction = goal.effective_fraction.value_or(effective_training_fraction(n));
      const double seconds = goal.tokens / o.layout.tokens_per_s / o.effective_fraction;
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

namespace {

std::string fraction(int64_t num, int64_t den) { return std::to_string(num) + "/" + std::to_string(den); }

/// Orders candidates: meeting the deadline first; those by cost, then fewer GPUs, then
/// faster; the rest quickest first.
bool rl_better(const RlOption& a, const RlOption& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (!a.feasible) return a.hours < b.hours;
  if (a.cost_usd != b.cost_usd) return a.cost_usd < b.cost_usd;
  if (a.num_gpus != b.num_gpus) return a.num_gpus < b.num_gpus;
  return a.hours < b.hours;
}

}  // namespace

RlPlan plan_rl(const Scenario& base, const std::vector<GpuOffer>& offers, const RlGoal& goal,
               const CostModelFactory& costs, unsigned threads, ProgressCounter* progress) {
  // Enumerate the pool layouts first (the layout rules prune), then evaluate one iteration
  // of each on worker threads, each job writing only its own slot.
  struct Job {
    size_t offer = 0;
    Scenario sc;
    std::vector<int64_t> staleness;  ///< each a candidate sharing this evaluation
    RlIteration it;
    std::string error;
  };
  std::vector<Job> jobs;
  std::vector<std::string> skip_order;
  std::map<std::string, int64_t> skip_count;
  auto skip = [&](const std::string& reason) {
    if (skip_count[reason]++ == 0) skip_order.push_back(reason);
  };
  const TrainingPlan& t = *base.training;
  const RlSpec& rl = *base.rl;
  for (size_t oi = 0; oi < offers.size(); ++oi) {
    const GpuOffer& offer = offers[oi];
    for (int64_t n : goal.gpu_counts) {
      struct Pools {
        RlSpec::Placement placement;
        int64_t rollout, train;
        std::string name;
      };
      std::vector<Pools> pools = {{RlSpec::Placement::colocated, n, n, "colocated"}};
      for (auto [num, den] : goal.rollout_shares) {
        const std::string name = "split " + fraction(num, den);
        // Shares in lowest terms: whole pools exactly when den divides n (no n * num overflow).
        const int64_t rollout = n % den == 0 ? n / den * num : 0;
        if (rollout < 1 || rollout >= n) {
          skip(name + ": " + std::to_string(n) + " GPUs have no whole rollout pool of " + fraction(num, den));
          continue;
        }
        pools.push_back({RlSpec::Placement::split, rollout, n - rollout, name});
      }
      for (const Pools& pl : pools) {
        Scenario sc = base;
        sc.system = offer.system;
        sc.system.num_gpus = n;
        RlSpec& r = *sc.rl;
        r.placement = pl.placement;
        r.pools_auto = false;
        r.rollout_gpus = pl.rollout;
        r.train_gpus = pl.train;
        r.async_staleness = 0;
        const std::optional<double>& fraction = pl.placement == RlSpec::Placement::split
                                                    ? goal.gpu_memory_utilization_split
                                                    : goal.gpu_memory_utilization_colocated;
        if (fraction) r.rollout.engine.gpu_memory_utilization = *fraction;
        TrainingPlan& tr = *sc.training;
        const int64_t model_parallel = std::max<int64_t>(1, t.tp * t.pp * t.cp);
        tr.dp = pl.train / model_parallel;
        // The same rules the scenario reader applies to an RL case: the update layout on
        // the training pool, and the rollout engine's tp*pp dividing its pool.
        Scenario trainer = sc;
        trainer.system.num_gpus = pl.train;
        const std::vector<Issue> issues = check_training_layout(trainer);
        const std::string where = pl.name + " on " + std::to_string(n) + " GPUs: ";
        if (!issues.empty()) {
          skip(where + "training pool of " + std::to_string(pl.train) + " GPUs: " + format_issue(issues.front()));
          continue;
        }
        const int64_t engine_gpus = r.rollout.tp * r.rollout.pp;
        if (engine_gpus < 1 || pl.rollout % engine_gpus != 0) {
          skip(where + "rollout pool of " + std::to_string(pl.rollout) + " GPUs: tp*pp = " + std::to_string(engine_gpus) +
               " must divide gpus.rollout = " + std::to_string(pl.rollout));
          continue;
        }
        // Staleness values with the same in-flight rollout count share one evaluation
        // (rl_rollout_inflight_iterations: 1 for 0 and 1, k above).
        std::map<int64_t, std::vector<int64_t>> by_inflight;
        if (pl.placement == RlSpec::Placement::split) {
          for (int64_t k : goal.staleness) {
            RlSpec probe = r;
            probe.async_staleness = k;
            by_inflight[rl_rollout_inflight_iterations(probe)].push_back(k);
          }
        } else {
          by_inflight[1] = {0};
        }
        for (auto& [inflight, ks] : by_inflight) {
          Job job;
          job.offer = oi;
          job.sc = sc;
          job.sc.rl->async_staleness = inflight > 1 ? inflight : 0;
          job.staleness = ks;
          jobs.push_back(std::move(job));
        }
      }
    }
  }
  progress_total(progress, static_cast<int64_t>(jobs.size()));
  parallel_for(jobs.size(), threads, [&](size_t i) {
    Job& job = jobs[i];
    try {
      const auto cost = costs(job.sc.system);
      job.it = evaluate_rl_iteration(job.sc, *cost);
    } catch (const std::exception& e) {
      job.error = e.what();
    }
    progress_add(progress);
  });

  RlPlan out;
  const int64_t pps = std::max<int64_t>(1, rl.prompts_per_step);
  const int64_t iterations = goal.prompts / pps + (goal.prompts % pps != 0 ? 1 : 0);
  for (const Job& job : jobs) {
    const GpuOffer& offer = offers[job.offer];
    const RlSpec& r = *job.sc.rl;
    const std::string where =
        (r.placement == RlSpec::Placement::split
             ? "split " + std::to_string(r.rollout_gpus) + " rollout + " + std::to_string(r.train_gpus) + " train"
             : std::string("colocated")) +
        " on " + std::to_string(job.sc.system.num_gpus) + " " + offer.system.gpu.id + ": ";
    if (!job.error.empty() || !job.it.feasible) {
      skip(where + (job.error.empty() ? job.it.fail_reason : job.error));
      continue;
    }
    for (int64_t k : job.staleness) {
      RlOption o;
      o.offer = job.offer;
      o.gpu = offer.system.gpu.id;
      o.usd_per_gpu_hour = offer.usd_per_gpu_hour;
      o.num_gpus = job.sc.system.num_gpus;
      o.placement = r.placement;
      o.rollout_gpus = r.rollout_gpus;
      o.train_gpus = r.train_gpus;
      o.async_staleness = k;
      o.iteration = job.it;
      RlSpec with = r;
      with.async_staleness = k;
      combine_rl_phases(o.iteration, with);
      o.train_layout = o.iteration.update.plan;
      o.rollout_layout = r.rollout;
      o.rollout_layout.replicas = o.iteration.rollout_replicas;
      o.iterations = iterations;
      const RlIteration& it = o.iteration;
      const double seconds = static_cast<double>(iterations) * it.step_time_s;
      o.hours = seconds / 3600.0;
      o.days = seconds / 86400.0;
      o.gpu_hours = o.hours * static_cast<double>(o.num_gpus);
      o.cost_usd = o.gpu_hours * o.usd_per_gpu_hour;
      if (it.step_time_s > 0) {
        const double all = it.generation_s + it.scoring_s + it.training_s + it.resharding_s + it.offload_s;
        const bool split = r.placement == RlSpec::Placement::split;
        o.rollout_idle_share = std::max(0.0, 1.0 - (split ? it.generation_s + it.resharding_s : all) / it.step_time_s);
        o.train_idle_share =
            std::max(0.0, 1.0 - (split ? it.scoring_s + it.training_s + it.resharding_s : all) / it.step_time_s);
      }
      o.feasible = goal.deadline_days <= 0 || o.days <= goal.deadline_days;
      if (!o.feasible) o.reason = "takes " + std::to_string(o.days) + " days, past the deadline";
      out.candidates.push_back(std::move(o));
    }
  }
  std::stable_sort(out.candidates.begin(), out.candidates.end(), rl_better);
  for (size_t oi = 0; oi < offers.size(); ++oi) {
    const auto it =
        std::find_if(out.candidates.begin(), out.candidates.end(), [&](const RlOption& o) { return o.offer == oi; });
    if (it != out.candidates.end()) out.best.push_back(*it);
  }
  std::stable_sort(out.best.begin(), out.best.end(), rl_better);
  for (const std::string& reason : skip_order) out.skipped.push_back({reason, skip_count[reason]});
  return out;
}

}  // namespace capsim
