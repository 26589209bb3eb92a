#include "capsim/core/search.hpp"

#include <algorithm>
#include <thread>
#include <tuple>

#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"

namespace capsim {

namespace {

/// One layout to cost: the searched fields only, applied to the base plan when costed.
struct Job {
  int64_t gpus, tp, cp, pp, dp, vpp, ep, etp, micro_batch;
  int zero;
  Recompute recompute;
  Schedule schedule;
  bool ep_overlap = false;
  DType precision = DType::bf16;
  void apply(TrainingPlan& t) const {
    t.precision = precision;
    t.precision_auto = false;
    t.tp = tp;
    t.cp = cp;
    t.pp = pp;
    t.dp = dp;
    t.vpp = vpp;
    t.ep = ep;
    t.etp = etp;
    t.sp = tp > 1;
    t.zero = zero;
    t.micro_batch = micro_batch;
    t.recompute = recompute;
    t.recompute_fraction = 1.0;
    t.schedule = schedule;
    t.ep_overlap = ep_overlap;
  }
  auto key() const {
    return std::make_tuple(tp, pp, vpp, dp, cp, ep, etp, zero, micro_batch, static_cast<int>(recompute),
                           static_cast<int>(schedule), ep_overlap, static_cast<int>(precision));
  }
};

/// What costing one job yields.
struct Costed {
  double step_s = 0, tokens_per_s = 0, mfu = 0, peak_bytes = 0, capacity_bytes = 0;
  bool fits = false;
};

}  // namespace

SearchResult search_training(const Scenario& base, const CostModel& cost, const SearchOptions& opt) {
  SearchResult res;
  const ModelSpec& m = base.model;
  // One software stack for every candidate: the searched ZeRO stage must not switch the
  // framework conventions (and with them attention kernel and recompute semantics).
  TrainingPlan b = *base.training;
  if (!b.framework) b.framework = framework_of(b);
  if (!b.attention) b.attention = default_attention(b, base.system.gpu.arch);
  // Precision "auto": the layouts of every candidate precision are searched.
  const std::vector<DType> precisions = precision_candidates(b, base.system.gpu);
  std::vector<int64_t> counts = opt.gpu_counts.empty() ? std::vector<int64_t>{base.system.num_gpus} : opt.gpu_counts;
  const int64_t gpn = base.system.gpus_per_node;
  const int64_t max_tp = opt.max_tp > 0 ? opt.max_tp : gpn;

  auto cancelled = [&] { return opt.cancel && opt.cancel->load(std::memory_order_relaxed); };
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
        if (b.seq_len % (cp * tp) != 0 || b.seq_len / cp < 1024 || !cp_fits_documents(b, cp)) {
          ++res.pruned_divisibility;
          continue;
        }
        for (int64_t pp : divisors(n / (tp * cp))) {
          if (cancelled()) throw SearchCancelled();
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
                      for (Schedule sch : schedules)
                        for (DType pr : precisions) {
                          jobs.push_back({n, tp, cp, pp, dp, v, ep, etp, mb, z, rc, sch, false, pr});
                          // With the schedules: Megatron-Core's batch-level expert-parallel
                          // overlap (combined 1F1B) where it can run.
                          if (opt.schedules && m.moe && !b.ep_overlap) {
                            TrainingPlan probe = b;
                            jobs.back().apply(probe);
                            probe.ep_overlap = true;
                            if (ep_overlap_on(probe)) jobs.push_back({n, tp, cp, pp, dp, v, ep, etp, mb, z, rc, sch, true, pr});
                          }
                        }
                }
            }
          }
        }
      }
    }
  }
  if (cancelled()) throw SearchCancelled();
  res.enumerated = static_cast<int64_t>(jobs.size()) + res.pruned_divisibility;
  progress_total(opt.progress, static_cast<int64_t>(jobs.size()));

  // Cost in parallel; each worker writes only its own slots. The inner loop allocates
  // nothing once the worker's cache is warm: the plan, system and memory result are reused.
  std::vector<Costed> out(jobs.size());
  auto work = [&](size_t begin, size_t end) {
    EvalCache cache;  // per worker: layouts sharing TP, CP, micro batch, ... share a lowering
    SystemSpec sys = base.system;
    TrainingPlan t = b;
    t.stage_layers.clear();
    TrainingMemory mem;
    StepOptions so;
    so.tp_overlap = b.tp_comm_overlap;
    so.moe_imbalance = b.moe_imbalance;
    so.overlap_dp = b.overlap_dp;
    // Progress in batches: one relaxed atomic add per kProgressBatch layouts.
    constexpr size_t kProgressBatch = 256;
    size_t counted = begin;
    for (size_t i = begin; i < end; ++i) {
      if (cancelled()) return;  // the search throws once every worker is back
      if (opt.progress && i - counted == kProgressBatch) {
        opt.progress->add(static_cast<int64_t>(kProgressBatch));
        counted = i;
      }
      sys.num_gpus = jobs[i].gpus;
      jobs[i].apply(t);
      training_memory(m, sys, t, mem, &cache);
      Costed& c = out[i];
      c.peak_bytes = mem.peak().total_bytes;
      c.capacity_bytes = mem.peak().capacity_bytes;
      if (!mem.fits()) continue;
      c.fits = true;
      const StepBreakdown st = analytical_step(m, sys, t, cost, so, &cache);
      c.step_s = st.step_s;
      c.tokens_per_s = st.tokens_per_s;
      c.mfu = st.mfu;
    }
    progress_add(opt.progress, static_cast<int64_t>(end - counted));
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
  if (cancelled()) throw SearchCancelled();
  std::vector<uint32_t> feasible;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (out[i].fits) feasible.push_back(static_cast<uint32_t>(i));
    else ++res.pruned_memory;
  }
  res.evaluated = static_cast<int64_t>(feasible.size());
  res.feasible = res.evaluated;
  auto gpu_s = [&](uint32_t i) { return out[i].step_s * static_cast<double>(jobs[i].gpus); };
  auto better = [&](uint32_t x, uint32_t y) {
    const double kx = opt.rank_by_cost ? gpu_s(x) : out[x].step_s;
    const double ky = opt.rank_by_cost ? gpu_s(y) : out[y].step_s;
    if (kx != ky) return kx < ky;
    if (jobs[x].gpus != jobs[y].gpus) return jobs[x].gpus < jobs[y].gpus;
    return jobs[x].key() < jobs[y].key();
  };
  auto candidate = [&](uint32_t i) {
    SearchCandidate c;
    c.plan = b;
    c.plan.stage_layers.clear();
    jobs[i].apply(c.plan);
    c.num_gpus = jobs[i].gpus;
    c.step_s = out[i].step_s;
    c.tokens_per_s = out[i].tokens_per_s;
    c.mfu = out[i].mfu;
    c.peak_memory_bytes = out[i].peak_bytes;
    c.capacity_bytes = out[i].capacity_bytes;
    c.gpu_seconds_per_step = gpu_s(i);
    return c;
  };
  std::sort(feasible.begin(), feasible.end(), better);
  for (size_t k = 0; k < std::min(opt.top_k, feasible.size()); ++k) res.top.push_back(candidate(feasible[k]));
  // Pareto front over (fewer GPUs, more tokens/s, more headroom); feasible is sorted by
  // step time, so a candidate is dominated only by one already on the front.
  for (uint32_t i : feasible) {
    const double head = out[i].capacity_bytes - out[i].peak_bytes;
    bool dominated = false;
    for (const SearchCandidate& f : res.pareto) {
      const double fh = f.capacity_bytes - f.peak_memory_bytes;
      if (f.num_gpus <= jobs[i].gpus && f.tokens_per_s >= out[i].tokens_per_s && fh >= head) {
        dominated = true;
        break;
      }
    }
    if (!dominated) res.pareto.push_back(candidate(i));
  }
  return res;
}

}  // namespace capsim
