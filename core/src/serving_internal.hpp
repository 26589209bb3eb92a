#pragma once
// Private to core: the parts of the serving simulator that serving.cpp (the event loop),
// serving_workload.cpp (the requests), iteration_model.cpp and replica_scheduler.cpp (the
// replicas' scheduling and routing) share.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/serving.hpp"

namespace capsim::detail {

/// An integer count as a double.
inline double dbl(int64_t v) { return static_cast<double>(v); }

/// a / b rounded up, for positive operands.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// A workload's requests as drawn, before any is served.
struct DrawnWorkload {
  /// Lengths and arrival times in arrival order (a closed loop's arrivals are 0; the event
  /// loop issues them).
  std::vector<RequestResult> requests;
  int64_t longest = 1;  ///< the longest request, prompt plus output tokens
};

/// The workload's requests: lengths (from the trace, or drawn), then arrivals (all at once
/// offline, Poisson at qps, or the trace's), from a generator seeded with `seed`.
DrawnWorkload generate_requests(const ServingWorkload& w, uint64_t seed);

/// One request's sequence on a replica.
struct Seq {
  size_t req;             ///< index into results
  double accepted = 0;    ///< speculative decoding: expected tokens not yet emitted
  int64_t prompt = 0;     ///< prompt tokens
  int64_t target = 0;     ///< output tokens to generate
  int64_t prefilled = 0;  ///< prompt tokens in the cache
  int64_t generated = 0;  ///< output tokens made
  int64_t blocks = 0;     ///< KV blocks it holds
  double last_token = 0;  ///< when it emitted its last token
  double queued_at = 0;   ///< when it joined the replica's waiting queue
  int64_t rank = 0;       ///< attention-DP rank that holds it (0 without attention DP)
};

/// A prompt's KV cache in flight from the prefill pool to the decode pool.
struct Transfer {
  double at;  ///< when it arrives (or, once it waits for blocks, when it last tried)
  Seq seq;    ///< the sequence, holding no blocks
};

/// What every replica's scheduler reads and updates besides its own queues and KV blocks.
struct SchedulerContext {
  const EngineDefaults& engine;          ///< the engine knobs in force
  const SpeculativeSpec& spec;           ///< speculative decoding (k = 0: off)
  double per_verify;                     ///< expected tokens per verification
  double prefix_hit_rate;                ///< the workload's prefix-cache hit rate
  int64_t block_size;                    ///< tokens per KV block
  int64_t sliding_window;                ///< the model's sliding window (0: none): caps decode reads
  /// Shares of the layers with and without a sliding window, for the KV blocks a sequence
  /// holds where the engine keeps only the window's tokens in the former
  /// (EngineDefaults::sliding_window_kv_bounded; 0 when it keeps every token).
  double window_layer_share;
  int64_t total_blocks;                  ///< KV blocks of one replica
  /// Most prompt tokens of one sequence in a step: the step budget of the attention-DP rank
  /// that holds it (the whole budget without attention DP).
  int64_t rank_tokens;
  int64_t dp_ranks;  ///< attention-DP ranks of a replica (1 without attention DP)
  double kv_bytes_per_token;             ///< KV-cache bytes of one token, per GPU
  double block_bytes;                    ///< KV-cache bytes of one block, per GPU
  double pcie_bytes_per_s;               ///< the host link swapping moves blocks over, per GPU
  const CostModel& cost;                 ///< prices the KV hand-off to the decode pool
  bool kv_transfer_over_network;         ///< the hand-off crosses nodes
  std::vector<RequestResult>& requests;  ///< the run's requests, indexed by Seq::req
  TokenGaps token_gaps;                  ///< what the run keeps of each output chunk's gap
  GapTally& gap_tally;                   ///< the run's gaps (TokenGaps::tally and per_request)
  int64_t& preemptions;                  ///< the run's preemption count
  /// Queues a sequence preempted on a decode-only replica at the front of a prefill replica.
  std::function<void(const Seq&)> requeue_for_prefill;
};

/// One replica's scheduler, vLLM-shaped: continuous batching, chunked prefill, paged KV
/// blocks (it owns the replica's pool), preemption (Preemption: recompute, swap, partial, cached).
class ReplicaScheduler {
 public:
  /// What a replica serves: both phases, or one pool of a disaggregated deployment.
  enum class Role { both, prefill, decode };

  /// An idle replica with every KV block free.
  ReplicaScheduler(const SchedulerContext& ctx, Role role);

  /// What the replica serves.
  Role role() const { return role_; }
  /// Requests waiting or running on it (the least-outstanding router's measure).
  size_t outstanding() const { return waiting_.size() + running_.size(); }
  /// KV blocks a sequence of `tokens` holds (see SchedulerContext::window_layer_share).
  int64_t blocks_for(int64_t tokens) const;
  /// Whether any sequence waits, runs or is swapped out.
  bool has_work() const { return !running_.empty() || !waiting_.empty() || !swapped_.empty(); }
  /// Whether an iteration is in flight.
  bool busy() const { return busy_; }
  /// When the iteration in flight ends.
  double busy_until() const { return busy_until_; }
  /// Forward passes in the planned iteration (more than one in a multi-step round).
  int64_t steps() const { return steps_; }
  /// Fraction of the replica's KV blocks in use.
  double kv_utilization() const { return 1.0 - dbl(free_blocks_) / dbl(ctx_.total_blocks); }

  /// Queues a new request, arrived at `now`, behind the waiting ones. One that arrives as
  /// the step in flight starts reached the engine after it launched that step, so an engine
  /// one batch ahead has already scheduled the next batch without it.
  /// Under attention DP the replica's dispatcher hands requests to its ranks in turn (SGLang's
  /// DataParallelController, load_balance_method "round_robin" by default).
  void enqueue(Seq q, double now) {
    q.queued_at = busy_ && now == last_start_ ? std::nextafter(now, std::numeric_limits<double>::infinity()) : now;
    q.rank = arrivals_++ % std::max<int64_t>(1, ctx_.dp_ranks);
    waiting_.push_back(q);
  }
  /// Queues a preempted sequence ahead of the waiting ones.
  void requeue(const Seq& q) { waiting_.push_front(q); }
  /// Admits a sequence whose prompt KV arrived from the prefill pool; false when its blocks
  /// do not fit yet.
  bool accept_transfer(Seq q);

  /// The next iteration's batch at `now` (decodes first, then prefill chunks), reserving its
  /// blocks and preempting where they run out; empty when nothing can run. An engine whose
  /// host runs one batch ahead of the GPU (`host_overlaps_gpu`) prepared this batch when it
  /// launched the previous one, back to back: requests queued after that launch wait for
  /// the batch after.
  IterationBatch plan(double now);
  /// Seconds of swap traffic the planned iteration waits for; none is left after.
  double take_swap_seconds();
  /// The decodes of pass `step` of a multi-step round: the sequences with tokens left to
  /// make at that pass, their contexts `step` tokens longer.
  IterationBatch pass(int64_t step) const;
  /// Tokens the planned iteration's decodes make over all its passes.
  int64_t round_tokens() const;
  /// Marks the planned iteration, started at `now`, in flight until `until`.
  void start(double now, double until);
  /// Ends the iteration in flight at `now`: emits its tokens, retires finished sequences
  /// and appends finished prefills of a prefill replica to `handoffs`. Returns the number
  /// of requests completed.
  size_t finish(double now, std::vector<Transfer>& handoffs);

 private:
  /// The batch plan() forms from the requests queued by `admit_cutoff_`.
  IterationBatch plan_batch();
  /// Whether whole waiting prompts fit a prefill-only iteration (no chunked prefill).
  bool prompts_fit(int64_t budget) const;
  /// Whether the engine takes new prompts now: always, unless it makes a prefill batch wait
  /// while sequences decode (EngineDefaults::prefill_wait_ratio / prefill_wait_steps).
  bool prefill_due() const;
  /// Blocks reserved up front for a sequence under reserve_to_completion: its prompt and
  /// every output token (at least the next one).
  int64_t completion_blocks(const Seq& q) const;
  /// Brings swapped sequences back, oldest first, while their blocks fit.
  void swap_in();
  /// Schedules the running decodes within `budget`, growing their blocks. With
  /// `rank_prompt_tokens` (each attention-DP rank's prompt tokens this step), the decodes of
  /// the ranks that prefill wait, and a decode that finds no free block waits too rather than
  /// preempting (the step's prompts hold their blocks).
  void schedule_decodes(IterationBatch& batch, int64_t& budget, const std::vector<int64_t>* rank_prompt_tokens = nullptr);
  /// Adds a decode's context, capped at the model's sliding window, to the batch.
  void add_window_context(IterationBatch& batch, int64_t context) const;

  /// Preempts the most recently admitted running sequence, or the one that has made the
  /// fewest tokens (EngineDefaults::preempt_fewest_outputs).
  void preempt_newest();
  /// Moves the decoding sequence with the fewest tokens made (the longer prompt among
  /// equals) at index `from` or later to the back of running_, where preempt_newest takes
  /// it (SGLang's retract_decode order).
  void move_fewest_outputs_last(size_t from);
  /// Updates the admission estimate (output_ratio_) after the decodes are scheduled.
  void update_output_ratio(const IterationBatch& batch);
  /// Tokens the admission estimate still leaves free (admission_output_ratio_init > 0).
  double estimated_free_tokens() const;
  /// Under partial preemption, takes the newest block of the lowest-ranked waiting sequence
  /// at index `after` or later that holds any (one a preemption stopped); false when none does.
  bool reclaim_waiting_block(size_t after);
  /// Schedules the next chunks of running prompts within `budget` (and, where set, their
  /// ranks' budgets `rank_budget_`).
  void continue_prefills(IterationBatch& batch, int64_t& budget);
  /// Admits waiting prompts within `budget` (and, where set, their ranks' budgets).
  void admit_prompts(IterationBatch& batch, int64_t& budget, bool chunked);
  /// A step of an engine that does not mix prompts into decode batches, under attention DP:
  /// every rank forms its own batch, prompt chunks where it has any, else its decodes; new
  /// prompts join where `due` (prefill_due).
  IterationBatch plan_rank_batches(int64_t budget, bool due);
  /// Emits the tokens of the iteration's decodes at `now`.
  void emit_decodes(double now);
  /// Advances the iteration's prefill chunks at `now`.
  void advance_prefills(double now);
  /// Counts one output chunk's gap for request `req` as the run keeps them (TokenGaps).
  void record_gap(size_t req, double gap) {
    if (ctx_.token_gaps == TokenGaps::none) return;
    ctx_.gap_tally.add(gap);
    if (ctx_.token_gaps == TokenGaps::per_request) ctx_.requests[req].itl.push_back(gap);
  }
  /// Retires finished sequences and hands finished prefills off; returns requests completed.
  size_t retire(double now, std::vector<Transfer>& handoffs);

  const SchedulerContext& ctx_;  ///< what the replicas share
  Role role_ = Role::both;       ///< what the replica serves
  std::deque<Seq> waiting_;      ///< queued, not yet admitted
  int64_t arrivals_ = 0;         ///< requests enqueued so far (the attention-DP rank turn)
  /// Prompt tokens each attention-DP rank may still take this step (empty: no per-rank cap).
  std::vector<int64_t> rank_budget_;
  std::vector<Seq> running_;     ///< admitted, holding KV blocks
  std::deque<Seq> swapped_;      ///< preempted by swapping: KV blocks in host memory
  double swapped_bytes_ = 0;     ///< host memory they take, per GPU
  double swap_s_ = 0;            ///< swap traffic the next iteration waits for
  int64_t free_blocks_ = 0;      ///< the KV block pool's free blocks
  bool busy_ = false;            ///< an iteration is in flight
  double busy_until_ = 0;        ///< when it ends
  bool ran_ = false;             ///< an iteration has run
  double last_start_ = 0;        ///< when the last iteration started
  double last_end_ = 0;          ///< when it ended
  double admit_cutoff_ = 0;      ///< requests queued later than this wait for the next batch
  int64_t decodes_since_prefill_ = 0;  ///< decode iterations since prompts were last admitted
  /// The estimated share of their outstanding output tokens running sequences will still
  /// make, for admission (EngineDefaults::admission_output_ratio_init; unused at 0).
  double output_ratio_ = 0;
  bool preempted_ = false;  ///< the planned iteration preempted a sequence
  /// Waiting sequences that hold KV blocks (stopped by partial or cached preemption).
  int64_t waiting_holders_ = 0;
  bool admitted_ = false;              ///< the planned iteration admits waiting prompts
  // The iteration in flight.
  std::vector<size_t> decoding_;    ///< running sequences decoding
  std::vector<size_t> prefilling_;  ///< running sequences prefilling
  std::vector<int64_t> chunk_of_;   ///< prompt tokens each prefilling sequence computes
  std::vector<int64_t> tokens_of_;  ///< tokens each decoding sequence makes this iteration
  int64_t steps_ = 1;               ///< forward passes in the iteration (multi-step decode)
};

/// Routing into a pool (colocated replicas, or the prefill / decode pool): round robin,
/// or the replica with the fewest outstanding requests (lowest index on ties).
class Router {
 public:
  /// A router over `replicas` with the plan's policy.
  Router(InferencePlan::Router policy, const std::vector<ReplicaScheduler>& replicas);
  /// The replica a sequence goes to: in the decode pool when `to_decode`, else in the prefill
  /// pool (colocated replicas belong to both).
  size_t route(bool to_decode);

 private:
  InferencePlan::Router policy_;                   ///< round robin or least outstanding
  const std::vector<ReplicaScheduler>& replicas_;  ///< every replica, both pools
  std::array<size_t, 2> cursor_ = {0, 0};          ///< round-robin position in the prefill and decode pools
};

}  // namespace capsim::detail
