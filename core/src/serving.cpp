#include "capsim/core/serving.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "serving_internal.hpp"

namespace capsim {

using detail::ceil_div;
using detail::dbl;

std::vector<double> percentiles(std::vector<double> v, const std::vector<double>& qs) {
  std::vector<double> out(qs.size(), 0.0);
  if (v.empty()) return out;
  // Quantiles in rising order: each selection leaves the elements above its rank at the
  // back, so the next one selects among those alone.
  std::vector<size_t> order(qs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return qs[a] < qs[b]; });
  size_t from = 0;
  for (size_t i : order) {
    const double pos = qs[i] * dbl(static_cast<int64_t>(v.size()) - 1);
    const size_t lo = std::min(static_cast<size_t>(std::floor(pos)), v.size() - 1);
    std::nth_element(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
    // The next order statistic is the smallest element behind the selected one.
    const double a = v[lo];
    const double b = lo + 1 < v.size() ? *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end()) : a;
    out[i] = a + (pos - dbl(static_cast<int64_t>(lo))) * (b - a);
    from = lo;
  }
  return out;
}

double percentile(std::vector<double> v, double q) { return percentiles(std::move(v), {q}).front(); }

void GapTally::compact() {
  finish();
  compact_at_ = std::max(compact_at_, 2 * runs.size());
}

void GapTally::finish() {
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t out = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (out > 0 && runs[out - 1].first == runs[i].first) runs[out - 1].second += runs[i].second;
    else runs[out++] = runs[i];
  }
  runs.resize(out);
}

std::vector<double> percentiles(const GapTally& t, double scale, const std::vector<double>& qs) {
  std::vector<double> out(qs.size(), 0.0);
  if (t.total <= 0) return out;
  // The value of rank `r` (0-based) among all counted gaps, scaled.
  const auto at = [&](int64_t r) {
    for (const auto& [gap, count] : t.runs) {
      if (r < count) return gap * scale;
      r -= count;
    }
    return t.runs.back().first * scale;
  };
  for (size_t i = 0; i < qs.size(); ++i) {
    // percentiles()'s rule: linear between the order statistics around q (n - 1).
    const double pos = qs[i] * dbl(t.total - 1);
    const int64_t lo = std::min(static_cast<int64_t>(std::floor(pos)), t.total - 1);
    const double a = at(lo);
    const double b = lo + 1 < t.total ? at(lo + 1) : a;
    out[i] = a + (pos - dbl(lo)) * (b - a);
  }
  return out;
}

std::pair<double, double> p99_latencies(const ServingResult& r) {
  std::vector<double> ttft, tpot;
  for (const auto& q : r.requests) {
    ttft.push_back(q.ttft() * 1e3);
    if (q.output > 1) tpot.push_back(q.tpot() * 1e3);
  }
  return {percentile(ttft, 0.99), percentile(tpot, 0.99)};
}

std::pair<double, double> p99_latencies(const std::vector<ServingResult>& runs) {
  std::vector<double> ttft, tpot;
  for (const auto& r : runs) {
    const auto [a, b] = p99_latencies(r);
    ttft.push_back(a);
    tpot.push_back(b);
  }
  return {percentile(ttft, 0.5), percentile(tpot, 0.5)};
}

int64_t serving_replications(const ServingWorkload& w) {
  using Mode = ServingWorkload::Mode;
  const bool random = w.mode == Mode::poisson || (w.mode != Mode::trace && (w.input_tokens.kind != LengthDist::Kind::fixed ||
                                                                              w.output_tokens.kind != LengthDist::Kind::fixed));
  if (!random || w.num_requests <= 0) return 1;
  return std::clamp<int64_t>(ceil_div(2000, w.num_requests), 1, 16);
}

void throw_if_cancelled(const std::atomic<bool>* cancel) {
  if (cancel && cancel->load(std::memory_order_relaxed)) throw ServingCancelled();
}

namespace {

/// The scenario with the choices a first run made for "auto" (max_num_seqs, ep, the
/// launcher's step budget) written in, so that every replication runs the same engine.
Scenario with_choices_of(const Scenario& s, const ServingResult& first) {
  Scenario same = s;
  same.inference->engine.max_num_seqs = first.engine.max_num_seqs;
  same.inference->ep = first.ep;
  same.inference->attention_dp = first.attention_dp;
  if (first.launcher_max_num_batched_tokens > 0)
    same.inference->engine.max_num_batched_tokens = first.launcher_max_num_batched_tokens;
  return same;
}

}  // namespace

std::vector<ServingResult> simulate_serving_runs(const Scenario& s, const CostModel& cost, uint64_t seed, bool record_timeline,
                                                 const std::atomic<bool>* cancel) {
  if (!s.inference) throw std::logic_error("simulate_serving_runs needs an inference plan");
  const int64_t n = serving_replications(s.inference->workload);
  std::vector<ServingResult> runs;
  throw_if_cancelled(cancel);
  runs.push_back(simulate_serving(s, cost, seed, record_timeline, TokenGaps::tally, cancel));
  // Every run uses the engine the first one resolved ("auto" knobs are chosen once).
  const Scenario same = with_choices_of(s, runs.front());
  for (int64_t i = 1; i < n; ++i) {
    throw_if_cancelled(cancel);
    runs.push_back(simulate_serving(same, cost, seed + static_cast<uint64_t>(i), false, TokenGaps::tally, cancel));
  }
  return runs;
}

bool meets_sla(const Scenario& s, const CostModel& cost, const ServingSla& sla, uint64_t seed,
               const std::atomic<bool>* cancel) {
  // The same decision as comparing the medians over all runs of simulate_serving_runs()
  // with the SLA, stopping as soon as the remaining runs cannot change it: once more than
  // half of the runs fall on one side of a bound, both middle values (and so the median)
  // do too. Only an even split needs the middle values themselves.
  const int64_t n = serving_replications(s.inference->workload);
  const int64_t majority = n / 2 + 1;
  throw_if_cancelled(cancel);
  // The decision reads TTFT and TPOT only: the runs skip the per-token gaps.
  ServingResult first = simulate_serving(s, cost, seed, false, TokenGaps::none, cancel);
  const Scenario same = with_choices_of(s, first);
  std::vector<double> ttft, tpot;
  int64_t ttft_ok = 0, tpot_ok = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) throw_if_cancelled(cancel);
    const auto [a, b] = p99_latencies(i == 0 ? first : simulate_serving(same, cost, seed + static_cast<uint64_t>(i), false, TokenGaps::none, cancel));
    ttft.push_back(a);
    tpot.push_back(b);
    ttft_ok += a <= sla.ttft_p99_ms ? 1 : 0;
    tpot_ok += b <= sla.tpot_p99_ms ? 1 : 0;
    const int64_t runs = i + 1;
    const bool ttft_fail = runs - ttft_ok >= majority, tpot_fail = runs - tpot_ok >= majority;
    if (ttft_fail || tpot_fail) return false;
    if (ttft_ok >= majority && tpot_ok >= majority) return true;
  }
  return percentile(ttft, 0.5) <= sla.ttft_p99_ms && percentile(tpot, 0.5) <= sla.tpot_p99_ms;
}

double max_qps(const Scenario& s, const CostModel& cost, const ServingSla& sla, uint64_t seed, ProgressCounter* progress,
               const std::atomic<bool>* cancel) {
  Scenario probe = s;
  probe.inference->workload.mode = ServingWorkload::Mode::poisson;
  int64_t probes = 0;
  auto meets = [&](double qps) {
    probe.inference->workload.qps = qps;
    const bool ok = meets_sla(probe, cost, sla, seed, cancel);
    ++probes;
    progress_add(progress);
    return ok;
  };
  // Bisection halves the bracket until it is within 0.1% of its top (which stays above
  // lo): at most this many steps.
  constexpr int kMaxBisections = 24;
  auto bisections = [&](double lo, double hi) {
    int n = 0;
    for (double w = hi - lo; n < kMaxBisections && w > 1e-3 * (lo > 0 ? lo : hi); w *= 0.5) ++n;
    return n;
  };
  double lo = 0, hi = 0.25;
  // While doubling: one more doubling probe, then a bisection from [hi, 2 hi].
  progress_total(progress, 1 + bisections(0.5, 1.0));
  while (meets(hi) && hi < 1e6) {
    lo = hi;
    hi *= 2;
    progress_total(progress, probes + 1 + bisections(0.5, 1.0));
  }
  progress_total(progress, probes + bisections(lo, hi));
  for (int i = 0; i < kMaxBisections && hi - lo > 1e-3 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (meets(mid) ? lo : hi) = mid;
  }
  progress_total(progress, probes);
  return lo;
}


namespace {

using detail::DrawnWorkload;
using detail::ReplicaScheduler;
using detail::Router;
using detail::SchedulerContext;
using detail::Seq;
using detail::Transfer;

/// Expected tokens per verification: (1 - a^(k+1)) / (1 - a); 1 without speculative decoding.
double tokens_per_verification(const SpeculativeSpec& spec) {
  return spec.k > 0 ? (spec.acceptance >= 1.0 ? dbl(spec.k + 1)
                                              : (1.0 - std::pow(spec.acceptance, dbl(spec.k + 1))) /
                                                    (1.0 - spec.acceptance))
                    : 1.0;
}

/// The request-level event loop of one run: arrivals are routed to replicas, idle replicas
/// start iterations, a prefill pool hands finished prompts' KV to the decode pool.
class EventLoop {
 public:
  /// A loop over the scenario's replicas for the requests, engine and memory in `out`.
  EventLoop(const Scenario& s, const CostModel& cost, ServingResult& out, bool record_timeline, TokenGaps token_gaps);
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  /// Runs until every request has finished; with `cancel`, the flag is read every
  /// kCancelCheckEvents events and ServingCancelled thrown once it is set.
  void run(const std::atomic<bool>* cancel);

 private:
  /// Routes the requests that have arrived by now, starting an iteration on an idle
  /// replica as they come; whether one started.
  bool deliver_arrivals();
  /// Hands the KV caches that have arrived by now to decode replicas with room for them.
  void deliver_transfers();
  /// Starts an iteration on replica `i` when it is idle and has work; whether it did.
  bool start_iteration(size_t i);
  /// Seconds of the iteration `R` planned as `batch` (verifying drafts sets its `verify`);
  /// `passes` receives its forward passes; with `busy`, its parts, drafts and swap wait are
  /// added there.
  double iteration_seconds(ReplicaScheduler& R, IterationBatch& batch, int64_t& passes, BusyByPart* busy) const;
  /// Appends the iteration replica `i` starts now to the timeline.
  void record(size_t i, const IterationBatch& batch, double dt, int64_t passes);
  /// When the next iteration ends, request arrives or transfer lands; infinity when none.
  double next_event() const;
  /// Ends the iterations due by now; a closed loop issues a request per completion.
  void finish_iterations();

  const ServingWorkload& w_;             ///< the workload served
  ServingResult& out_;                   ///< the run's requests and results
  bool record_timeline_;                 ///< record every iteration
  const IterationModel model_;           ///< the target model's iteration time
  std::optional<IterationModel> draft_;  ///< the draft model's, when speculation has one
  const SpeculativeSpec& spec_;          ///< speculative decoding (k = 0: off)
  int64_t bs_;                           ///< tokens per KV block
  int64_t total_blocks_;                 ///< KV blocks per replica
  bool closed_;                          ///< a closed loop issues the requests
  SchedulerContext ctx_;                 ///< what the replicas share
  std::vector<ReplicaScheduler> reps_;   ///< every replica, prefill pool first
  Router router_;                        ///< picks the replica in a pool
  /// Prefix-cache state for traces: prefix ids already seen.
  std::unordered_set<std::string> seen_prefixes_;  ///< trace prefix ids already prefilled
  size_t next_arrival_ = 0;          ///< the next request to arrive, in arrival order
  size_t issued_ = 0;                ///< requests issued (all but a closed loop's pending ones)
  size_t total_;                     ///< requests in the run
  std::vector<Transfer> transfers_;  ///< KV caches in flight to the decode pool
  double t_ = 0;                     ///< the simulated time
  size_t done_ = 0;                  ///< requests finished
};

EventLoop::EventLoop(const Scenario& s, const CostModel& cost, ServingResult& out, bool record_timeline,
                     TokenGaps token_gaps)
    : w_(s.inference->workload),
      out_(out),
      record_timeline_(record_timeline),
      model_(s.model, s.system, *s.inference, cost),
      spec_(s.inference->speculative),
      bs_(out.memory.block_size),
      total_blocks_(std::max<int64_t>(1, out.memory.num_blocks)),
      closed_(w_.mode == ServingWorkload::Mode::concurrency),
      ctx_{.engine = out.engine,
           .spec = spec_,
           .per_verify = tokens_per_verification(spec_),
           .prefix_hit_rate = w_.prefix_hit_rate,
           .block_size = bs_,
           .sliding_window = s.model.sliding_window,
           .window_layer_share = out.engine.sliding_window_kv_bounded && s.model.layers > 0
                                     ? dbl(s.model.sliding_layers()) / dbl(s.model.layers)
                                     : 0.0,
           .total_blocks = total_blocks_,
           .rank_tokens = std::max<int64_t>(1, out.engine.max_num_batched_tokens / s.inference->attention_dp_degree()),
           .dp_ranks = s.inference->attention_dp_degree(),
           .kv_bytes_per_token = out.memory.kv_bytes_per_token,  // per token, per GPU
           // Swapping moves each GPU's shard of the blocks over its own PCIe x16 link at the
           // datasheet payload rate (no host-copy efficiency is measured).
           .block_bytes = dbl(bs_) * out.memory.kv_bytes_per_token,
           .pcie_bytes_per_s = std::max(1.0, s.system.gpu.pcie_bw_unidir_gbps * 1e9),
           .cost = cost,
           .kv_transfer_over_network = s.inference->kv_transfer_over_network,
           .requests = out.requests,
           .token_gaps = token_gaps,
           .gap_tally = out.token_gaps,
           .preemptions = out.preemptions,
           .requeue_for_prefill = [this](const Seq& q) { reps_[router_.route(false)].requeue(q); }},
      router_(s.inference->router, reps_),
      total_(out.requests.size()) {
  const InferencePlan& p = *s.inference;
  if (spec_.k > 0 && spec_.draft_model) draft_.emplace(*spec_.draft_model, s.system, p, cost);
  // Replicas: colocated, or a prefill pool feeding a decode pool.
  const bool disagg = p.prefill_replicas > 0 && p.decode_replicas > 0;
  if (disagg) {
    for (int64_t i = 0; i < p.prefill_replicas; ++i) reps_.emplace_back(ctx_, ReplicaScheduler::Role::prefill);
    for (int64_t i = 0; i < p.decode_replicas; ++i) reps_.emplace_back(ctx_, ReplicaScheduler::Role::decode);
  } else {
    const int64_t replicas = std::max<int64_t>(1, p.replicas);
    for (int64_t i = 0; i < replicas; ++i) reps_.emplace_back(ctx_, ReplicaScheduler::Role::both);
  }
  // Arrivals in time order; a closed loop releases the next request on each completion.
  issued_ = closed_ ? std::min<size_t>(total_, static_cast<size_t>(std::max<int64_t>(1, w_.concurrency))) : total_;
  if (closed_)
    for (size_t k = 0; k < issued_; ++k) out_.requests[k].arrival = 0.0;
}

void EventLoop::run(const std::atomic<bool>* cancel) {
  /// Events between two reads of the cancel flag: each event routes, plans and times at
  /// least one iteration, so a thousand of them are a small slice of any long run, and one
  /// relaxed load per thousand adds no measurable time to it.
  constexpr uint32_t kCancelCheckEvents = 1024;
  uint32_t events = 0;
  while (done_ < total_) {
    if (cancel && ++events % kCancelCheckEvents == 0) throw_if_cancelled(cancel);
    deliver_transfers();
    // A replica whose iteration ended now starts the next with the work it holds: an
    // engine's loop goes from one step to the next without waiting for the clients its
    // completions release, so their requests reach the step after.
    bool started = false;
    for (size_t i = 0; i < reps_.size(); ++i)
      if (start_iteration(i)) started = true;
    if (deliver_arrivals()) started = true;
    // Advance to the next event.
    const double next = next_event();
    if (!std::isfinite(next)) {
      if (!started) {
        // The longest request (prompt and output) is the one that cannot be placed.
        int64_t longest = 0;
        for (const RequestResult& r : out_.requests) longest = std::max(longest, r.input + r.output);
        const int64_t need = reps_.empty() ? (longest + bs_ - 1) / bs_ : reps_.front().blocks_for(longest);
        const std::string has = std::to_string(total_blocks_) + " blocks of " + std::to_string(bs_) + " tokens";
        throw ServingDoesNotFit(need > total_blocks_ ? "a request cannot be scheduled: the longest, " +
                                                           std::to_string(longest) + " tokens with its output, needs " +
                                                           std::to_string(need) + " KV-cache blocks and a replica has " + has
                                                     : "a request cannot be scheduled: it needs more KV-cache blocks than "
                                                       "a replica has free (" + has + ")");
      }
      continue;
    }
    t_ = std::max(t_, next);
    finish_iterations();
  }
}

bool EventLoop::deliver_arrivals() {
  // Online clients' requests reach the engine one by one, however close together: an idle
  // engine starts a step on the first it receives (vLLM's and SGLang's engine loops and
  // TurboMind's LlamaBatch block on an empty queue and run as soon as it holds a request)
  // and the others wait for the next step. An offline run queues every request before the
  // engine's first step (vLLM LLM.generate adds them all, then runs the engine).
  const bool online = w_.mode != ServingWorkload::Mode::offline;
  bool started = false;
  while (next_arrival_ < issued_ && out_.requests[next_arrival_].arrival + out_.engine.request_overhead_s <= t_) {
    const RequestResult& r = out_.requests[next_arrival_];
    Seq q;
    q.req = next_arrival_;
    q.prompt = r.input;
    q.target = r.output;
    if (w_.mode == ServingWorkload::Mode::trace) {
      const TraceRequest& tr = w_.trace[next_arrival_];
      if (!tr.prefix_id.empty()) {
        if (!seen_prefixes_.insert(tr.prefix_id).second)
          q.prefilled = std::min(q.prompt - 1, (std::min(tr.prefix_tokens, q.prompt) / bs_) * bs_);
      }
    }
    const size_t rep = router_.route(false);
    reps_[rep].enqueue(q, t_);
    ++next_arrival_;
    if (online && start_iteration(rep)) started = true;
  }
  if (!online)
    for (size_t i = 0; i < reps_.size(); ++i)
      if (start_iteration(i)) started = true;
  return started;
}

void EventLoop::deliver_transfers() {
  for (size_t k = 0; k < transfers_.size();) {
    if (transfers_[k].at <= t_) {
      if (reps_[router_.route(true)].accept_transfer(transfers_[k].seq)) {
        transfers_.erase(transfers_.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      transfers_[k].at = t_;  // waits for blocks on the decode side
    }
    ++k;
  }
}

bool EventLoop::start_iteration(size_t i) {
  ReplicaScheduler& R = reps_[i];
  if (R.busy() || !R.has_work()) return false;
  IterationBatch batch = R.plan(t_);
  if (batch.decodes == 0 && batch.prefills.empty()) return false;
  int64_t passes = 1;
  const double dt = iteration_seconds(R, batch, passes, record_timeline_ ? &out_.busy : nullptr);
  if (record_timeline_) out_.busy.busy_s += dt;
  R.start(t_, t_ + dt);
  if (record_timeline_) record(i, batch, dt, passes);
  out_.iterations += passes;
  out_.peak_kv_utilization = std::max(out_.peak_kv_utilization, R.kv_utilization());
  return true;
}

namespace {

/// Adds one forward pass's parts to a run's sums; a pass after the first of a multi-step
/// round pays no scheduling time (its GPU time is the whole of it).
void add_parts(StepParts& sum, const StepParts& p, bool gpu_only) {
  for (const auto& [name, part] : kStepParts) sum.*part += p.*part;
  sum.gpu += p.gpu;
  if (gpu_only) {
    sum.seconds += p.gpu;
  } else {
    sum.host += p.host;
    sum.seconds += p.seconds;
  }
  sum.host_overlaps_gpu = p.host_overlaps_gpu;
}

}  // namespace

double EventLoop::iteration_seconds(ReplicaScheduler& R, IterationBatch& batch, int64_t& passes,
                                    BusyByPart* busy) const {
  // The step waits for the blocks it swaps out and in.
  double dt = R.take_swap_seconds();
  if (busy) busy->swaps_s += dt;
  if (spec_.k > 0 && batch.decodes > 0) {
    // Drafting proposes k tokens per decoding sequence, then the target verifies k + 1.
    IterationBatch proposal;
    proposal.decodes = batch.decodes;
    proposal.decode_context = batch.decode_context;
    proposal.decode_window_context = batch.decode_window_context;
    proposal.context_window = batch.context_window;
    const double one = draft_ ? draft_->seconds(proposal) : spec_.draft_cost_fraction * model_.seconds(proposal);
    dt += dbl(spec_.k) * one;
    if (busy) busy->drafts_s += dbl(spec_.k) * one;
    batch.verify = spec_.k + 1;
  }
  if (R.steps() > 1) {
    passes = 0;
    // Each pass of a multi-step round runs the sequences that still have tokens to make,
    // their contexts one token longer than in the pass before.
    for (int64_t step = 0; step < R.steps(); ++step) {
      const IterationBatch pass = R.pass(step);
      if (pass.decodes == 0) break;
      // The round is scheduled once: the per-step host overhead is paid once.
      const StepParts p = model_.parts(pass);
      dt += passes > 0 ? p.gpu : p.seconds;
      if (busy) add_parts(busy->steps, p, passes > 0);
      ++passes;
    }
  } else {
    const StepParts p = model_.parts(batch);
    dt += p.seconds;
    if (busy) add_parts(busy->steps, p, false);
  }
  return dt;
}

void EventLoop::record(size_t i, const IterationBatch& batch, double dt, int64_t passes) {
  const ReplicaScheduler& R = reps_[i];
  int64_t pre = 0;
  for (const auto& pf : batch.prefills) pre += pf.tokens;
  // Tokens the decodes make: each sequence's share of a multi-step round, or the
  // expected accepted drafts plus the bonus token per verification.
  int64_t made = batch.decodes;
  if (R.steps() > 1) made = R.round_tokens();
  if (spec_.k > 0) made = std::llround(dbl(batch.decodes) * ctx_.per_verify);
  IterationRecord rec;
  rec.replica = static_cast<int32_t>(i);
  rec.start = t_;
  rec.end = t_ + dt;
  rec.decodes = batch.decodes;
  rec.decode_tokens = made;
  rec.prefill_tokens = pre;
  rec.passes = static_cast<int32_t>(passes);
  rec.kv_utilization = R.kv_utilization();
  out_.timeline.push_back(rec);
}

double EventLoop::next_event() const {
  double next = std::numeric_limits<double>::infinity();
  for (const auto& R : reps_)
    if (R.busy()) next = std::min(next, R.busy_until());
  if (next_arrival_ < issued_) next = std::min(next, out_.requests[next_arrival_].arrival + out_.engine.request_overhead_s);
  for (const auto& tr : transfers_)
    if (tr.at > t_) next = std::min(next, tr.at);
  return next;
}

void EventLoop::finish_iterations() {
  for (auto& R : reps_)
    if (R.busy() && R.busy_until() <= t_) {
      const size_t completed = R.finish(t_, transfers_);
      done_ += completed;
      for (size_t c = 0; c < completed; ++c)
        if (closed_ && issued_ < total_) {
          out_.requests[issued_].arrival = t_;
          ++issued_;
        }
    }
}

ServingResult simulate_once(const Scenario& s, const CostModel& cost, uint64_t seed, bool record_timeline,
                            TokenGaps token_gaps, const std::atomic<bool>* cancel) {
  const InferencePlan& p = *s.inference;
  ServingResult out;
  DrawnWorkload drawn = detail::generate_requests(p.workload, seed);
  out.requests = std::move(drawn.requests);
  out.engine = engine_defaults(p, s.model, s.system.gpu, drawn.longest);
  out.ep = p.ep.value_or(1);
  out.attention_dp = p.attention_dp.value_or(false);
  out.chunked_prefill = out.engine.chunked_prefill;
  out.slo_ttft_s = p.slo_ttft_ms * 1e-3;
  out.slo_tpot_s = p.slo_tpot_ms * 1e-3;
  out.memory = inference_memory(s.model, s.system, p, &out.engine);
  if (!out.memory.fits) {
    // Nothing is left for the KV cache: say what takes the memory.
    const double gib = 1024.0 * 1024.0 * 1024.0;
    char buf[320];
    if (out.memory.fixed_pool)
      std::snprintf(buf, sizeof buf,
                    "no room for the KV cache: a pool of %lld tokens (kv_cache_tokens) takes %.2f GiB a GPU beside "
                    "%.2f GiB of weights and %.2f GiB of activation peak and runtime, more than the %.2f GiB there is",
                    static_cast<long long>(out.memory.max_cached_tokens / std::max<int64_t>(1, p.attention_dp_degree())),
                    out.memory.kv_budget_bytes / gib, out.memory.weights_bytes / gib,
                    out.memory.runtime_bytes() / gib, out.memory.capacity_bytes / gib);
    else if (out.engine.memory_fraction_of_free)
      std::snprintf(buf, sizeof buf,
                    "no room for the KV cache: the weights take %.2f GiB a GPU and the activation peak and runtime "
                    "%.2f GiB, against the %.2f GiB there is (the KV cache takes gpu_memory_utilization %.2f of "
                    "what they leave)",
                    out.memory.weights_bytes / gib, out.memory.runtime_bytes() / gib,
                    out.memory.capacity_bytes / gib, out.engine.gpu_memory_utilization);
    else
      std::snprintf(buf, sizeof buf,
                    "no room for the KV cache: the weights take %.2f GiB a GPU and the activation peak and runtime "
                    "%.2f GiB, against %.2f GiB usable (gpu_memory_utilization %.2f of %.2f GiB)",
                    out.memory.weights_bytes / gib, out.memory.runtime_bytes() / gib,
                    out.memory.capacity_bytes * out.engine.gpu_memory_utilization / gib, out.engine.gpu_memory_utilization,
                    out.memory.capacity_bytes / gib);
    throw ServingDoesNotFit(buf);
  }
  EventLoop loop(s, cost, out, record_timeline, token_gaps);
  loop.run(cancel);
  out.token_gaps.finish();
  double first = 1e300, last = 0;
  for (const auto& r : out.requests) {
    first = std::min(first, r.arrival);
    last = std::max(last, r.finish);
  }
  out.duration_s = !out.requests.empty() ? last - first : 0.0;
  return out;
}

double output_tokens_per_s(const ServingResult& r) {
  double tokens = 0;
  for (const auto& q : r.requests) tokens += static_cast<double>(q.output);
  return r.duration_s > 0 ? tokens / r.duration_s : 0.0;
}

}  // namespace

namespace {

/// The batch limits trtllm-bench runs with when its user sets neither (TensorRT-LLM
/// tensorrt_llm/bench/build/tuning.py calc_engine_setting and finetune_setting, called by
/// bench/benchmark/utils/general.py get_settings): the KV room of every GPU (NVML's total
/// memory less the weights at 1 byte a parameter for FP8, 0.5 for FP4, 2 unquantized,
/// times the KV fraction it hands the engine) over a request of the dataset's mean prompt
/// plus mean output, at 2 x layers x max(tp, KV heads) x head size bytes a token; the batch
/// cap is that count (at most 4096, over pp) rounded up to 32, 128 or 256, the token budget
/// the cap times 1 + ISL/OSL (at most 32768) rounded up to 256, 512 or 1024 and at least
/// 2048, and without chunked prefill at least the longest prompt plus the cap. Other
/// quantizations take the library's defaults (get_benchmark_engine_settings), as does a
/// model that leaves no KV room (trtllm-bench stops there; the memory check says why).
/// Under attention DP every rank's executor runs with these limits.
struct BatchLimits {
  int64_t max_num_seqs = 0, max_num_batched_tokens = 0;
};
std::optional<BatchLimits> trtllm_bench_batch_limits(const Scenario& s, const EngineDefaults& d,
                                                     const std::vector<RequestResult>& dataset) {
  const InferencePlan& p = *s.inference;
  const ModelSpec& m = s.model;
  double weight_bytes = 0;
  switch (p.weight_dtype) {
    case DType::fp8: weight_bytes = 1.0; break;
    case DType::fp4: weight_bytes = 0.5; break;
    case DType::bf16:
    case DType::fp16: weight_bytes = 2.0; break;
    default: return std::nullopt;
  }
  if (dataset.empty()) return std::nullopt;
  const DType kv = p.resolved_kv_dtype();
  const double kv_bytes = kv == DType::fp8 ? 1.0 : (kv == DType::fp4 ? 0.5 : 2.0);
  double isl = 0, osl = 0;
  int64_t max_isl = 0;
  for (const auto& r : dataset) {
    isl += dbl(r.input);
    osl += dbl(r.output);
    max_isl = std::max(max_isl, r.input);
  }
  isl /= dbl(static_cast<int64_t>(dataset.size()));
  osl /= dbl(static_cast<int64_t>(dataset.size()));
  const double bytes_per_token = 2.0 * dbl(m.layers) * dbl(std::max(p.tp, m.kv_heads)) * dbl(m.head_dim) * kv_bytes;
  const double room = (s.system.gpu.hbm_capacity_bytes * dbl(p.tp * p.pp) - dbl(count_params(m).total) * weight_bytes) *
                      d.gpu_memory_utilization;
  const double requests = room / (bytes_per_token * (isl + osl));
  if (!(requests >= 1.0) || osl <= 0) return std::nullopt;
  const double raw_seqs = std::min(requests, 4096.0) / dbl(p.pp);
  const double raw_tokens = std::min(raw_seqs * (1.0 + isl / osl), 32768.0);
  auto round_up = [](double v, int64_t step) { return static_cast<int64_t>(std::ceil(v / dbl(step))) * step; };
  BatchLimits out;
  out.max_num_seqs = raw_seqs < 256    ? std::max<int64_t>(64, round_up(raw_seqs, 32))
                     : raw_seqs < 1024 ? round_up(raw_seqs, 128)
                                       : round_up(raw_seqs, 256);
  out.max_num_batched_tokens = raw_tokens < 4096   ? std::max<int64_t>(2048, round_up(raw_tokens, 256))
                               : raw_tokens < 8192 ? round_up(raw_tokens, 512)
                                                   : round_up(raw_tokens, 1024);
  if (!d.chunked_prefill) out.max_num_batched_tokens = std::max(out.max_num_batched_tokens, max_isl + out.max_num_seqs);
  out.max_num_seqs *= p.attention_dp_degree();
  return out;
}

/// The prefill budget Hugging Face TGI 3's launcher sets when its user gives no
/// --max-batch-prefill-tokens (launcher/src/main.rs, v3.0.0-v3.3), from the config's keys as
/// they stand (ModelSpec::ConfigKeys; Config::from reads an absent num_experts_per_tok as 1,
/// n_shared_experts as 0, num_local_experts as 1, num_key_value_heads as the heads, head_dim
/// as hidden / heads): compute_optimal, the card's fp16 FLOP/s from its own table times the
/// GPUs over its own FLOP count a token (Config::flop: 2 x heads x head_dim x hidden for q, o
/// and the attention term, 2 x KV heads x head_dim x hidden for k and v, 2 x 3 x hidden x
/// intermediate_size x (experts a token + shared experts) for the MLP, times layers), where
/// that exceeds 100 tokens, else 4096; at most max_position_embeddings; and at most the
/// tokens its memory estimate allows (vram_maximum: the GPUs' memory x 0.95 less
/// Config::model_vram, 2 bytes x (layers x (3 x intermediate_size x experts x hidden + (heads
/// + 2 x KV heads) x head_dim + heads x head_dim x hidden) + 2 x hidden x vocab), over
/// Config::token_vram, the KV bytes a token plus (intermediate_size + intermediate_size / 2)
/// x experts x 2 x 3), which it skips for a quantized checkpoint. Without heads, layers,
/// intermediate_size or a head size the launcher estimates nothing and the budget is 4096
/// (capped by the positions); a card the table lacks keeps the engine's default.
std::optional<int64_t> tgi_launcher_prefill_budget(const Scenario& s, const EngineDefaults& d) {
  const ModelSpec& m = s.model;
  const ModelSpec::ConfigKeys& k = m.config_keys;
  const InferencePlan& p = *s.inference;
  if (d.launcher_card_tflops <= 0) return std::nullopt;
  const auto count = static_cast<double>(p.tp);
  const double h = dbl(m.hidden), heads = dbl(k.num_attention_heads), layers = dbl(k.num_hidden_layers);
  const double kv = k.num_key_value_heads > 0 ? dbl(k.num_key_value_heads) : heads;
  const double hd = k.head_dim > 0                                                       ? dbl(k.head_dim)
                    : k.num_attention_heads > 0 && m.hidden % k.num_attention_heads == 0 ? h / heads
                                                                                         : 0.0;
  const double inter = dbl(k.intermediate_size);
  const double per_token = dbl(k.num_experts_per_tok > 0 ? k.num_experts_per_tok : 1) + dbl(k.n_shared_experts);
  const double experts = dbl(k.num_local_experts > 0 ? k.num_local_experts : 1);
  const bool sized = heads > 0 && layers > 0 && inter > 0 && hd > 0;
  double value = 4096.0;
  if (sized) {
    const double attn_flops = 2.0 * heads * hd * h * 3.0 + 2.0 * kv * hd * h * 2.0;  // q, attention, o; k, v
    const double flop = (attn_flops + 2.0 * 3.0 * h * inter * per_token) * layers;
    const double optimal = std::floor(dbl(d.launcher_card_tflops) * 1e12 * count / flop);
    if (optimal > 100.0) value = optimal;
  }
  if (m.max_position > 0) value = std::min(value, dbl(m.max_position));
  const bool quantized = p.weight_dtype != DType::bf16 && p.weight_dtype != DType::fp16;
  if (sized && !quantized) {
    const double available = std::floor(s.system.gpu.hbm_capacity_bytes * count * 0.95);
    const double model =
        2.0 * (layers * (3.0 * inter * experts * h + (heads + 2.0 * kv) * hd + heads * hd * h) + 2.0 * h * dbl(m.vocab));
    const double token = kv * 2.0 * hd * 2.0 * layers + (inter + std::floor(inter / 2.0)) * experts * 2.0 * 3.0;
    if (available >= model) value = std::min(value, std::floor((available - model) / token));
  }
  return static_cast<int64_t>(value);
}

/// The scenario with the batch limits its engine's launcher sizes: as given; the engine's
/// defaults; or, for max_num_seqs "auto" on an engine whose launcher sizes them for the
/// workload (EngineDefaults::batch_limits_from_trtllm_bench), the launcher's; or, for an
/// absent max_num_batched_tokens on an engine whose launcher sizes the prefill budget
/// (EngineDefaults::prefill_budget_from_tgi_launcher), that. `launcher_budget` is the step
/// budget the launcher set, 0 where the scenario or the engine's default set it.
struct LauncherSized {
  Scenario s;
  int64_t launcher_budget = 0;
};
LauncherSized launcher_sized(const Scenario& s, uint64_t seed) {
  const InferencePlan& p = *s.inference;
  LauncherSized out{s, 0};
  // The launcher's step budget, unless the scenario gives one.
  auto set_budget = [&](int64_t budget) {
    if (p.engine.max_num_batched_tokens) return;
    out.s.inference->engine.max_num_batched_tokens = budget;
    out.launcher_budget = budget;
  };
  if (!p.engine.max_num_batched_tokens && p.profile.knobs.prefill_budget_from_tgi_launcher) {
    if (const std::optional<int64_t> budget = tgi_launcher_prefill_budget(s, engine_defaults(p, s.model, s.system.gpu, 0))) {
      set_budget(*budget);
      return out;
    }
  }
  // trtllm-bench sizes the limits for the dataset it is given; requests arriving at a rate
  // reach a server (trtllm-serve, Triton), which runs the library's defaults unless told.
  if (!p.engine.max_num_seqs_auto || p.engine.max_num_seqs || !p.profile.knobs.batch_limits_from_trtllm_bench ||
      p.workload.rate_driven())
    return out;
  const DrawnWorkload drawn = detail::generate_requests(p.workload, seed);
  const EngineDefaults d = engine_defaults(p, s.model, s.system.gpu, drawn.longest);
  const std::optional<BatchLimits> limits = trtllm_bench_batch_limits(s, d, drawn.requests);
  if (!limits) return out;
  out.s.inference->engine.max_num_seqs = limits->max_num_seqs;
  set_budget(limits->max_num_batched_tokens);
  return out;
}

/// The run with the batch limits the engine's launcher sizes (launcher_sized).
ServingResult simulate_limits_resolved(const Scenario& s, const CostModel& cost, uint64_t seed, bool record_timeline,
                                       TokenGaps token_gaps, const std::atomic<bool>* cancel) {
  const LauncherSized sized = launcher_sized(s, seed);
  ServingResult r = simulate_once(sized.s, cost, seed, record_timeline, token_gaps, cancel);
  r.launcher_max_num_batched_tokens = sized.launcher_budget;
  return r;
}

}  // namespace

namespace {

/// Whether the run picks the expert layout: ep "auto" on an MoE model whose experts divide
/// over the tensor-parallel group.
bool ep_left_to_the_run(const Scenario& s) {
  const InferencePlan& p = *s.inference;
  return !p.ep && s.model.moe && p.tp > 1 && s.model.moe->num_experts % p.tp == 0;
}

}  // namespace

ServingResult simulate_serving(const Scenario& s, const CostModel& cost, uint64_t seed, bool record_timeline,
                               TokenGaps token_gaps, const std::atomic<bool>* cancel) {
  if (!s.inference) throw std::logic_error("simulate_serving needs an inference plan");
  const InferencePlan& p = *s.inference;
  if (!ep_left_to_the_run(s)) {
    Scenario fixed = s;
    fixed.inference->attention_dp = p.attention_dp.value_or(false);
    return simulate_limits_resolved(fixed, cost, seed, record_timeline, token_gaps, cancel);
  }
  // ep "auto" (SCHEMA.md: what the people who ran it did, the fastest setting that fits):
  // experts split inside each expert over the tp group, or whole experts spread over it
  // (ep = tp), and where the engine has it, attention data-parallel over the same GPUs
  // with the experts spread (unless the scenario turns it off); the higher output
  // throughput wins, the earlier candidate on a tie within 0.1%.
  // A layout whose requests cannot fit is skipped; when neither fits, that is the answer.
  Scenario probe = s;
  ServingResult best;
  double best_rate = -1;
  std::exception_ptr none_fit;
  struct Layout {
    int64_t ep;
    bool dp;
  };
  std::vector<Layout> layouts;
  if (!p.attention_dp.value_or(false)) layouts.push_back({1, false}), layouts.push_back({p.tp, false});
  if (p.attention_dp.value_or(p.profile.knobs.attention_dp)) layouts.push_back({p.tp, true});
  for (const Layout& l : layouts) {
    probe.inference->ep = l.ep;
    probe.inference->attention_dp = l.dp;
    ServingResult r;
    try {
      r = simulate_limits_resolved(probe, cost, seed, record_timeline, token_gaps, cancel);
    } catch (const ServingDoesNotFit&) {
      none_fit = std::current_exception();
      continue;
    }
    const double rate = output_tokens_per_s(r);
    if (best_rate >= 0 && rate <= best_rate * 1.001) continue;
    best = std::move(r);
    best_rate = rate;
  }
  if (best_rate < 0) std::rethrow_exception(none_fit);
  return best;
}

std::vector<ServingStep> serving_steps(const Scenario& s, const CostModel& cost, const std::vector<IterationBatch>& batches,
                                       uint64_t seed) {
  if (!s.inference) throw std::logic_error("serving_steps needs an inference plan");
  Scenario resolved = s;
  InferencePlan& p = *resolved.inference;
  if (ep_left_to_the_run(s)) {
    // The layout simulate_serving picks for the workload.
    const ServingResult r = simulate_serving(s, cost, seed);
    p.ep = r.ep;
    p.attention_dp = r.attention_dp;
  }
  p.attention_dp = p.attention_dp.value_or(false);
  // The batch limits the run works under: a launcher's sizing caps the CUDA graphs too.
  resolved = launcher_sized(resolved, seed).s;
  const InferencePlan& sized = *resolved.inference;
  const IterationModel im(resolved.model, resolved.system, sized, cost);
  std::vector<ServingStep> out;
  out.reserve(batches.size());
  for (const IterationBatch& b : batches) {
    ServingStep st;
    st.ep = sized.ep.value_or(1);
    st.attention_dp = *sized.attention_dp;
    st.parts = im.parts(b);
    st.graph_replay = im.replays_graph(b);
    st.graph_max_tokens = im.graph_max_tokens();
    st.graph_prefill_steps = im.captures_prefill_steps();
    st.max_batched_tokens = im.max_batched_tokens();
    out.push_back(st);
  }
  return out;
}

ServingStep serving_step(const Scenario& s, const CostModel& cost, const IterationBatch& b, uint64_t seed) {
  return serving_steps(s, cost, {b}, seed).front();
}

}  // namespace capsim
