#include "capsim/core/search.hpp"

#include <algorithm>
#include <thread>
#include <tuple>

#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"

namespace capsim {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      out.push_back(i);
      if (i != n / i) out.push_back(n / i);
    }
  std::sort(out.begin(), out.end());
  return out;
}

/// A total order on plans, for deterministic ties.
auto plan_key(const TrainingPlan& t) {
  return std::make_tuple(t.tp, t.pp, t.vpp.value_or(1), t.dp, t.cp, t.ep, t.etp.value_or(1), t.zero.value_or(0),
                         t.micro_batch.value_or(1), static_cast<int>(t.recompute.value_or(Recompute::none)),
                         static_cast<int>(t.schedule));
}

struct Job {
  TrainingPlan plan;
  int64_t gpus;
};

}  // namespace

SearchResult search_training(const Scenario& base, const CostModel& cost, const SearchOptions& opt) {
  SearchResult res;
  const ModelSpec& m = base.model;
  const TrainingPlan& b = *base.training;
  std::vector<int64_t> counts = opt.gpu_counts.empty() ? std::vector<int64_t>{base.system.num_gpus} : opt.gpu_counts;
  const int64_t gpn = base.system.gpus_per_node;
  const int64_t max_tp = opt.max_tp > 0 ? opt.max_tp : gpn;

  // Enumerate; cheap divisibility rules prune before any costing.
  std::vector<Job> jobs;
  for (int64_t n : counts) {
    for (int64_t tp = 1; tp <= std::min(max_tp, n); tp *= 2) {
      if (n % tp != 0) continue;
      if (m.heads % tp != 0 || (!m.mla && m.kv_heads % tp != 0 && tp % m.kv_heads != 0)) {
        ++res.pruned_divisibility;
        continue;
      }
      for (int64_t cp = 1; cp <= n / tp; cp *= 2) {
        if ((n / tp) % cp != 0) continue;
        if (b.seq_len % (cp * tp) != 0 || b.seq_len / cp < 1024) {
          ++res.pruned_divisibility;
          continue;
        }
        for (int64_t pp : divisors(n / (tp * cp))) {
          if (pp > m.layers) continue;
          const int64_t dp = n / (tp * cp * pp);
          std::vector<int64_t> vpps = {1};
          if (pp > 1)
            for (int64_t v : divisors(m.layers / pp))
              if (v > 1 && pp * v <= m.layers) vpps.push_back(v);
          std::vector<int64_t> eps = {1};
          if (m.moe) {
            eps.clear();
            for (int64_t e : divisors(m.moe->num_experts))
              if ((tp * cp * dp) % e == 0) eps.push_back(e);
          }
          for (int64_t mb = 1; mb <= opt.max_micro_batch; ++mb) {
            if (b.global_batch % (mb * dp) != 0) {
              ++res.pruned_divisibility;
              continue;
            }
            const int64_t micro = b.global_batch / (mb * dp);
            for (int64_t v : vpps) {
              if (v > 1 && micro % pp != 0) {
                ++res.pruned_divisibility;
                continue;
              }
              std::vector<Schedule> schedules = {Schedule::one_f_one_b};
              if (opt.schedules && pp > 1 && v == 1) {
                schedules.push_back(Schedule::zb_h1);
                if (pp % 2 == 0 && micro % 2 == 0 && micro >= 2 * pp) schedules.push_back(Schedule::dualpipe);
              }
              for (int64_t ep : eps)
                for (int64_t etp : (tp > 1 && m.moe ? std::vector<int64_t>{1, tp} : std::vector<int64_t>{1})) {
                  if ((tp * cp * dp) % (ep * etp) != 0) continue;
                  for (int z : opt.zero)
                    for (Recompute rc : opt.recompute)
                      for (Schedule sch : schedules) {
                        TrainingPlan t = b;
                        t.tp = tp;
                        t.cp = cp;
                        t.pp = pp;
                        t.dp = dp;
                        t.vpp = v;
                        t.ep = ep;
                        t.etp = etp;
                        t.sp = tp > 1;
                        t.zero = z;
                        t.micro_batch = mb;
                        t.recompute = rc;
                        t.recompute_fraction = 1.0;
                        t.schedule = sch;
                        t.stage_layers.clear();
                        jobs.push_back({t, n});
                      }
                }
            }
          }
        }
      }
    }
  }
  res.enumerated = static_cast<int64_t>(jobs.size()) + res.pruned_divisibility;

  // Cost in parallel; each worker writes only its own slots.
  std::vector<SearchCandidate> out(jobs.size());
  std::vector<char> fits(jobs.size(), 0);
  auto work = [&](size_t begin, size_t end) {
    EvalCache cache;  // per worker: layouts sharing TP, CP, micro batch, ... share a lowering
    SystemSpec sys = base.system;
    for (size_t i = begin; i < end; ++i) {
      sys.num_gpus = jobs[i].gpus;
      const TrainingMemory mem = training_memory(m, sys, jobs[i].plan, &cache);
      SearchCandidate& c = out[i];
      c.plan = jobs[i].plan;
      c.num_gpus = jobs[i].gpus;
      c.peak_memory_bytes = mem.peak().total_bytes;
      c.capacity_bytes = mem.peak().capacity_bytes;
      if (!mem.fits()) continue;
      fits[i] = 1;
      StepOptions so;
      so.tp_overlap = jobs[i].plan.tp_comm_overlap;
      so.moe_imbalance = jobs[i].plan.moe_imbalance;
      so.overlap_dp = jobs[i].plan.overlap_dp;
      const StepBreakdown st = analytical_step(m, sys, jobs[i].plan, cost, so, &cache);
      c.step_s = st.step_s;
      c.tokens_per_s = st.tokens_per_s;
      c.mfu = st.mfu;
      c.gpu_seconds_per_step = st.step_s * static_cast<double>(jobs[i].gpus);
    }
  };
  const unsigned threads = std::max(1u, opt.threads);
  if (threads == 1 || jobs.size() < 64) {
    work(0, jobs.size());
  } else {
    std::vector<std::thread> pool;
    const size_t per = (jobs.size() + threads - 1) / threads;
    for (unsigned k = 0; k < threads; ++k) {
      const size_t begin = std::min(jobs.size(), k * per), end = std::min(jobs.size(), begin + per);
      pool.emplace_back(work, begin, end);
    }
    for (auto& th : pool) th.join();
  }
  std::vector<SearchCandidate> feasible;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (fits[i]) feasible.push_back(out[i]);
    else ++res.pruned_memory;
  }
  res.evaluated = static_cast<int64_t>(feasible.size());
  res.feasible = res.evaluated;
  auto better = [&](const SearchCandidate& x, const SearchCandidate& y) {
    const double kx = opt.rank_by_cost ? x.gpu_seconds_per_step : x.step_s;
    const double ky = opt.rank_by_cost ? y.gpu_seconds_per_step : y.step_s;
    if (kx != ky) return kx < ky;
    if (x.num_gpus != y.num_gpus) return x.num_gpus < y.num_gpus;
    return plan_key(x.plan) < plan_key(y.plan);
  };
  std::sort(feasible.begin(), feasible.end(), better);
  res.top.assign(feasible.begin(), feasible.begin() + static_cast<std::ptrdiff_t>(std::min(opt.top_k, feasible.size())));
  // Pareto front over (fewer GPUs, more tokens/s, more headroom); feasible is sorted by
  // step time, so a candidate is dominated only by one already on the front.
  for (const SearchCandidate& c : feasible) {
    const double head = c.capacity_bytes - c.peak_memory_bytes;
    bool dominated = false;
    for (const SearchCandidate& f : res.pareto) {
      const double fh = f.capacity_bytes - f.peak_memory_bytes;
      if (f.num_gpus <= c.num_gpus && f.tokens_per_s >= c.tokens_per_s && fh >= head) {
        dominated = true;
        break;
      }
    }
    if (!dominated) res.pareto.push_back(c);
  }
  return res;
}

}  // namespace capsim
