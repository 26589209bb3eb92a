#pragma once
/// Serving: the latency of one engine iteration (a mixed batch of prefill chunks and
/// decodes) from the cost model, and a request-level simulator with a vLLM-shaped
/// scheduler (continuous batching, chunked prefill, paged KV blocks, preemption by
/// recompute) that turns a workload into per-request latencies.

#include <array>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/progress.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/scenario.hpp"

namespace capsim {

/// The deployment cannot serve the workload at all: a request needs more KV-cache blocks
/// than a replica has. An answer ("does not fit"), not an input error.
struct ServingDoesNotFit : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One iteration's batch on one replica.
struct IterationBatch {
  int64_t decodes = 0;           ///< sequences generating tokens
  int64_t verify = 1;            ///< positions each decode runs (k + 1 when verifying drafts)
  double decode_context = 0;     ///< sum of their context lengths (tokens already cached)
  /// The same sum with each context capped at `context_window` tokens: what a layer with that
  /// sliding window reads (ModelSpec::sliding_window; 0: no cap was taken).
  double decode_window_context = 0;
  int64_t context_window = 0;
  struct Prefill {
    int64_t tokens = 0;   ///< prompt tokens computed this iteration
    int64_t cached = 0;   ///< prompt tokens already in the KV cache (earlier chunks)
    bool last = false;    ///< the chunk ends the prompt (samples the first token)
  };
  std::vector<Prefill> prefills;
  /// Under attention DP, where the scheduler places prompts on ranks: the most prompt tokens
  /// one rank computes this iteration (0: the tokens are taken as spread evenly).
  int64_t busiest_rank_prompt_tokens = 0;
  /// The tokens the iteration computes: every decode position and prompt chunk token.
  int64_t tokens() const {
    int64_t t = decodes * verify;
    for (const Prefill& p : prefills) t += p.tokens;
    return t;
  }
};

/// Where one iteration's time goes, seconds on the GPU that sets the step (the busiest one
/// under attention DP), summed over every layer of the model.
struct StepParts {
  double attention_projections = 0;  ///< q/k/v/o GEMMs (MLA: the down and up projections)
  double attention_kernels = 0;      ///< prompt chunks' and decodes' attention over the KV cache
  double elementwise = 0;            ///< norms, rotary, residuals
  double tp_all_reduce = 0;          ///< each layer's two tensor-parallel all-reduces
  double dense_mlp = 0;              ///< the MLPs of layers without routed experts
  double routed_experts = 0;         ///< the fused MoE kernel's grouped expert GEMMs
  double router = 0;                 ///< the router's GEMM
  double shared_experts = 0;         ///< shared experts run beside the routed ones
  double expert_exchange = 0;        ///< dispatch and combine (or gather) around the experts
  double head = 0;                   ///< output head and sampling of the sequences that emit a token
  double kernel_gaps = 0;            ///< idle GPU between dependent kernels (GpuEfficiency::graph_kernel_gap_us)
  double eager_host = 0;             ///< host work of every layer when the step is not a CUDA graph replay
  double gpu = 0;                    ///< the step's GPU time (IterationModel::gpu_seconds): the parts' sum
  double host = 0;                   ///< the engine's scheduling time (IterationModel::host_seconds)
  bool host_overlaps_gpu = false;    ///< host time runs behind the GPU (the step is the longer)
  double seconds = 0;                ///< the step (IterationModel::seconds)
};

/// Every part of a step, in the order a layer runs them, under its report name; StepParts::gpu
/// is their sum.
inline constexpr std::array<std::pair<const char*, double StepParts::*>, 12> kStepParts = {{
    {"attention_projections", &StepParts::attention_projections},
    {"attention_kernels", &StepParts::attention_kernels},
    {"elementwise", &StepParts::elementwise},
    {"tp_all_reduce", &StepParts::tp_all_reduce},
    {"dense_mlp", &StepParts::dense_mlp},
    {"router", &StepParts::router},
    {"expert_exchange", &StepParts::expert_exchange},
    {"routed_experts", &StepParts::routed_experts},
    {"shared_experts", &StepParts::shared_experts},
    {"head", &StepParts::head},
    {"kernel_gaps", &StepParts::kernel_gaps},
    {"eager_host", &StepParts::eager_host},
}};

/// HBM traffic of a decode attention kernel that loads each KV head `reads` times (once per
/// CTA of query heads it serves, EngineDefaults::decode_heads_per_kv_load), over the traffic
/// of one load: the later loads mostly hit L2.
double decode_kv_reread_cost(int64_t reads);

/// Seconds of one iteration on a replica (tp GPUs; pp stages run in sequence).
class IterationModel {
 public:
  IterationModel(const ModelSpec& m, const SystemSpec& sys, const InferencePlan& p, const CostModel& cost);
  /// GPU time plus the engine's host time for the step (their maximum when it overlaps).
  double seconds(const IterationBatch& b) const;
  /// GPU time of the step (with the host time of layers run eagerly, which the GPU waits for).
  double gpu_seconds(const IterationBatch& b) const;
  /// The step's time by part; the parts sum to gpu_seconds (up to rounding).
  StepParts parts(const IterationBatch& b) const;
  /// Bytes of weights one GPU reads per iteration at batch 1 (dense layers, all experts
  /// touched by one token, head): the decode roofline's numerator.
  double weight_bytes_per_gpu() const { return weight_bytes_; }
  /// Host seconds a step that is not replayed as a CUDA graph adds to its GPU time.
  double eager_host_seconds() const { return eager_host_s_; }
  /// Whether the step `b` replays a captured CUDA graph (no per-layer host work).
  bool replays_graph(const IterationBatch& b) const;
  /// The largest step (tokens) the engine captures as a CUDA graph; 0 where it runs none.
  int64_t graph_max_tokens() const { return engine_.cuda_graphs ? engine_.cuda_graph_max_tokens : 0; }
  /// The most tokens the engine schedules in one step (EngineDefaults::max_num_batched_tokens).
  int64_t max_batched_tokens() const { return engine_.max_num_batched_tokens; }
  /// Whether a gated MLP's activation runs in the gate-up GEMM's epilogue: the engine does so
  /// for int4 weights (EngineDefaults::int4_silu_in_gemm), over one w1||w3 GEMM.
  bool silu_in_gemm() const { return engine_.int4_silu_in_gemm && p_.weight_dtype == DType::int4 && m_.gated_mlp; }
  /// Whether the gate and up projections run as two GEMMs (EngineDefaults::mlp_gate_up_separate;
  /// never where the activation runs in their one GEMM's epilogue).
  bool gate_up_separate() const { return engine_.mlp_gate_up_separate && !silu_in_gemm(); }
  /// Whether steps with a prompt chunk are captured too (captured()'s rule for them).
  bool captures_prefill_steps() const { return engine_.graph_prefill_steps && engine_.chunked_prefill; }
  /// Host seconds the engine spends scheduling the step (EngineDefaults::step_overhead_*).
  double host_seconds(const IterationBatch& b) const;

 private:
  /// `quantized_input`: whether the GEMM's input is quantized ahead of it (per-tensor FP8 and
  /// W8A8 under EngineDefaults::activation_quant_kernel); a router's 16-bit GEMM is not.
  double gemm(int64_t m, int64_t n, int64_t k, bool quantized_input = true) const;
  /// gemm() without its memo.
  double gemm_uncached(int64_t m, int64_t n, int64_t k, bool quantized_input) const;
  /// One layer's attention block by part (its total adds them in the order the step does).
  struct AttentionParts {
    double projections = 0, prefill_kernels = 0, decode_kernel = 0, elementwise = 0, all_reduce = 0;
    double total() const { return (((projections + prefill_kernels) + decode_kernel) + elementwise) + all_reduce; }
  };
  /// One layer's attention block on `tokens` rows: projections, attention over the cache
  /// (prefill chunks and decodes), norms, the tensor-parallel all-reduces.
  AttentionParts attention_layer_parts(const IterationBatch& b, int64_t tokens, bool sliding = false) const;
  double attention_layer_seconds(const IterationBatch& b, int64_t tokens, bool sliding = false) const {
    return attention_layer_parts(b, tokens, sliding).total();
  }
  /// One routed-expert block by part (its total adds them in the order the step does).
  struct ExpertParts {
    double grouped_gemms = 0, router = 0, shared = 0, exchange = 0;
    double total() const { return ((grouped_gemms + router) + shared) + exchange; }
  };
  ExpertParts experts_parts(int64_t tokens) const;
  /// Seconds of a dense MLP of `inner` width on `tokens` rows (split over the attention's
  /// tensor-parallel ranks; under attention DP each GPU's own share of the rows).
  double dense_ffn_seconds(int64_t tokens, int64_t inner, int64_t busiest_rank_tokens = 0) const;
  /// Rows of `tokens_all` the GPU that sets the step runs: all of them, or under attention
  /// DP its even share or the busiest rank's prompt tokens where larger.
  int64_t gpu_tokens(int64_t tokens_all, int64_t busiest_rank_tokens) const;
  /// Seconds of one routed-expert block on `tokens` rows: grouped expert GEMMs, router,
  /// shared experts, the expert-parallel all-to-alls.
  double experts_seconds(int64_t tokens) const { return experts_parts(tokens).total(); }
  /// Seconds of the output head and sampling for `sampled` sequences.
  double head_seconds(int64_t sampled) const;
  /// The step's GPU time (gpu_seconds); with `parts`, its parts are written there too.
  double step_gpu_seconds(const IterationBatch& b, StepParts* parts) const;
  /// The step from its GPU and host times: their sum, or the larger when the host overlaps.
  double step_seconds(double gpu, double host) const;
  /// Whether the step runs as a CUDA graph replay (no per-layer host work).
  bool captured(const IterationBatch& b, int64_t tokens) const;
  /// Seconds of a weight-streaming GEMM kernel moving `bytes`.
  double stream(double bytes) const;
  /// Seconds of one tensor-parallel all-reduce of `bytes` (GpuEfficiency::engine_allreduce_*).
  double tp_all_reduce(double bytes) const;
  const ModelSpec& m_;
  const SystemSpec& sys_;
  const InferencePlan& p_;
  const CostModel& cost_;
  DType math_ = DType::bf16;
  double wbytes_ = 2;
  double kv_bytes_token_layer_ = 0;  ///< per GPU
  double tail_s_ = 0;  ///< fixed time of one GEMM kernel (GpuEfficiency::gemm_tail_us)
  double graph_gap_s_ = 0;  ///< idle GPU time per kernel (GpuEfficiency::graph_kernel_gap_us)
  double decode_attn_fixed_s_ = 0;  ///< fixed time of a decode attention kernel (GpuEfficiency::decode_attention_fixed_us)
  double decode_kv_reread_ = 1;  ///< decode_kv_reread_cost of the engine's kernel at this model's query group
  double stream_bytes_per_s_ = 1;  ///< the cost model's achievable HBM streaming rate
  EngineDefaults engine_;  ///< CUDA graphs and per-step host overhead
  int64_t moe_layers_ = 0;  ///< layers with routed experts
  int64_t sliding_layers_ = 0;  ///< layers with a sliding window (ModelSpec::sliding_layers)
  bool fused_shared_expert_ = false;  ///< the shared expert runs inside the routed kernel
  bool fused_down_ = false;  ///< MLA's query and key-value down projections are one GEMM
  double layer_gemm_kernels_ = 0;  ///< the GEMMs of every step, summed over the layers (each pays a gap)
  /// One layer's small kernels besides its GEMMs and attention: norms, rotary and the KV-cache
  /// write, each a floored pass over the bytes it moves per token (attention_layer_parts).
  std::vector<double> layer_small_kernel_bytes_;
  /// How many of them, from the first, the attention's tensor-parallel all-reduces run
  /// instead (EngineDefaults::residual_norm_in_all_reduce): the two residual norms, or none.
  size_t norms_in_all_reduce_ = 0;
  double ep_max_z_ = 0;     ///< expected_max_standard_normal(ep): the busiest rank's spread
  bool fp8_block_ = false;  ///< block-scaled FP8 (the plan's, or the checkpoint's)
  double eager_host_s_ = 0;  ///< host time an eager step adds (all layers)
  double weight_bytes_ = 0;
  /// Attention data parallelism: the GPUs each run attention for 1/dp_ of the batch with
  /// attn_tp_ = 1 (whole weights); without it dp_ = 1 and attn_tp_ = tp.
  int64_t dp_ = 1, attn_tp_ = 1;
  Group tp_group_, ep_group_;
  /// GEMM times already priced (gemm(), head_seconds()): the event loop asks for the same
  /// few weight shapes at every step and a run's steps repeat their token counts, so a
  /// direct-mapped memo of those pure functions spares the cost model's tile search. A hit
  /// returns the value a miss computes, so results do not depend on it; it makes a model
  /// unfit for concurrent use, and each run builds its own.
  struct GemmMemo {
    enum class Kind : uint8_t { quantized_input, bf16_input, head };
    int64_t m = -1, n = 0, k = 0;
    Kind kind = Kind::quantized_input;
    double seconds = 0;
    bool holds(Kind q, int64_t mm, int64_t nn, int64_t kk) const { return m == mm && n == nn && k == kk && kind == q; }
  };
  static constexpr size_t kGemmMemoSlots = 4096;  ///< a power of two (memo_slot)
  /// The memo's slot for a shape: multiplicative hashing, the slot from the top 12 bits.
  GemmMemo& memo_slot(GemmMemo::Kind kind, int64_t m, int64_t n, int64_t k) const;
  /// The memo's seconds for a shape, `price()` computing and storing them on a miss.
  template <class Price>
  double memoized(GemmMemo::Kind kind, int64_t m, int64_t n, int64_t k, Price price) const {
    GemmMemo& slot = memo_slot(kind, m, n, k);
    if (!slot.holds(kind, m, n, k)) slot = GemmMemo{m, n, k, kind, price()};
    return slot.seconds;
  }
  mutable std::vector<GemmMemo> gemm_memo_ = std::vector<GemmMemo>(kGemmMemoSlots);
};

/// What a run keeps of the gaps between a request's consecutive output chunks.
enum class TokenGaps : uint8_t {
  none,         ///< nothing (RL rollouts read the makespan only)
  tally,        ///< their distribution over the run (ServingResult::token_gaps), which the metrics read
  per_request,  ///< that, and every request's own list (RequestResult::itl)
};

/// The gaps of a run as (gap, how many) pairs. The sequences decoding in one step mostly share
/// their previous token's time, so consecutive gaps repeat and a run keeps about one pair a
/// step instead of one value a token; finish() sorts and merges them. Exact: the pairs list
/// every gap, so order statistics over them are those of the full list.
struct GapTally {
  std::vector<std::pair<double, int64_t>> runs;  ///< (seconds, count); ascending and distinct after finish()
  int64_t total = 0;                             ///< gaps counted
  void add(double gap) {
    if (!runs.empty() && runs.back().first == gap) ++runs.back().second;
    else {
      if (runs.size() >= compact_at_) compact();
      runs.emplace_back(gap, 1);
    }
    ++total;
  }
  /// Sorts the pairs by gap and merges equal gaps.
  void finish();

 private:
  void compact();
  size_t compact_at_ = size_t{1} << 16;  ///< pairs kept before merging (doubles with the distinct gaps)
};

struct RequestResult {
  double arrival = 0;
  int64_t input = 0, output = 0;
  double first_token = 0;  ///< absolute time of the first output token
  double finish = 0;
  std::vector<double> itl;  ///< gaps between consecutive output chunks (TokenGaps::per_request only)
  int preemptions = 0;
  double ttft() const { return first_token - arrival; }
  double e2e() const { return finish - arrival; }
  /// Time per output token after the first: (e2e - ttft) / (output - 1); 0 when output is 1.
  double tpot() const { return output > 1 ? (finish - first_token) / static_cast<double>(output - 1) : 0.0; }
};

/// One engine iteration on one replica, for timelines and utilisation over time.
struct IterationRecord {
  int32_t replica = 0;
  double start = 0, end = 0;
  int64_t decodes = 0;          ///< sequences decoding
  int64_t decode_tokens = 0;    ///< tokens they make (more than one each in a multi-step round)
  int64_t prefill_tokens = 0;
  int32_t passes = 1;           ///< forward passes (a multi-step round has several)
  double kv_utilization = 0;  ///< fraction of the replica's KV blocks in use
};

/// Where a run's engine time went, summed over the iterations of every replica (with the
/// timeline: the first run of `capsim infer`). busy_s = steps.seconds + drafts_s + swaps_s
/// = the iterations' total time; the parts of `steps` sum to steps.gpu, and steps.seconds -
/// steps.gpu is the scheduling time the steps waited for beyond the GPU.
struct BusyByPart {
  StepParts steps;      ///< the forward passes' parts, summed (host: the scheduling time charged)
  double drafts_s = 0;  ///< speculative decoding's draft proposals
  double swaps_s = 0;   ///< waiting for KV blocks swapped out and in
  double busy_s = 0;    ///< every iteration's time, summed
};

struct ServingResult {
  std::vector<IterationRecord> timeline;  ///< when requested (record_timeline)
  BusyByPart busy;                        ///< with the timeline; zero without it
  std::vector<RequestResult> requests;  ///< in arrival order
  GapTally token_gaps;                  ///< every request's output-chunk gaps (unless TokenGaps::none)
  double duration_s = 0;                ///< first arrival to last finish
  int64_t iterations = 0;
  int64_t preemptions = 0;
  double peak_kv_utilization = 0;       ///< largest fraction of KV blocks in use
  InferenceMemory memory;
  EngineDefaults engine;                ///< the engine knobs in force (defaults resolved)
  int64_t ep = 1;                       ///< expert parallelism the run used ("auto" resolved)
  bool attention_dp = false;            ///< attention data-parallel ("auto" resolved)
  /// The step budget the engine's launcher sized (a scenario's max_num_seqs "auto" on
  /// TensorRT-LLM: trtllm-bench's for the workload; an absent budget on TGI 3: its
  /// launcher's for the model and card), before any attention-DP multiple; 0 where the
  /// scenario or the engine's default set it.
  int64_t launcher_max_num_batched_tokens = 0;
  bool chunked_prefill = true;
  double slo_ttft_s = 0.5, slo_tpot_s = 0.05;  ///< the plan's goodput objectives
};

/// The engine knobs in force for a deployment: the plan's engine profile (data/engines/)
/// resolved for the GPU and the usage context (EngineDefaults::for_deployment), with every
/// knob the scenario sets on top. Without chunked prefill the step budget is the
/// larger of the profile's minimum and the longest request (prompt + output tokens), or
/// the model's context where the profile sizes it so.
EngineDefaults engine_defaults(const InferencePlan& p, const ModelSpec& m, const GpuSpec& gpu, int64_t longest_request);

/// The seed simulate_serving draws a workload with unless told otherwise.
inline constexpr uint64_t kServingSeed = 20261129;

/// Simulate the scenario's workload on its replicas (round-robin routing); lengths and
/// arrivals are drawn from a generator seeded with `seed`. `gaps` says what the run keeps of
/// the inter-token gaps (TokenGaps): every request's own list costs one value per output
/// token, the bulk of a long run's memory; nothing else in the result changes. With
/// `cancel`, the flag is read every thousand or so events; once it is set ServingCancelled
/// is thrown.
ServingResult simulate_serving(const Scenario& s, const CostModel& cost, uint64_t seed = kServingSeed,
                               bool record_timeline = false, TokenGaps gaps = TokenGaps::tally,
                               const std::atomic<bool>* cancel = nullptr);

/// Independent runs a workload's metrics are estimated from. A benchmark of a few dozen
/// Poisson arrivals is one draw of its percentiles (the P99 of 50 requests is nearly their
/// maximum, and varies +-30% from draw to draw), so the best prediction is the median
/// over draws: runs of consecutive seeds until 2,000 requests are simulated, at most 16.
/// One run when nothing is random (a trace, or offline / closed-loop with fixed lengths).
int64_t serving_replications(const ServingWorkload& w);

/// Thrown by the serving runs and searches when their `cancel` flag is set: the work
/// stopped (within a thousand or so events of a run) and there is no result.
class ServingCancelled : public std::runtime_error {
 public:
  ServingCancelled() : std::runtime_error("cancelled") {}
};

/// One engine iteration of the scenario's deployment, by part.
struct ServingStep {
  StepParts parts;
  int64_t ep = 1;                ///< expert parallelism the step ran with ("auto" resolved)
  bool attention_dp = false;     ///< attention data-parallel ("auto" resolved)
  bool graph_replay = false;     ///< the step replays a captured CUDA graph
  int64_t graph_max_tokens = 0;  ///< the largest captured step, tokens (0: the engine captures none)
  bool graph_prefill_steps = false;  ///< steps with a prompt chunk are captured too
  int64_t max_batched_tokens = 0;    ///< the most tokens the engine schedules in one step
};

/// The time of the iteration `b` on one replica of the scenario's deployment, by part, under
/// the batch limits a run of the scenario uses (a launcher's sizing included, which also
/// bounds the CUDA graphs). Where the scenario leaves the expert layout to the simulator (ep
/// "auto"), the layout a simulation of its workload (seed `seed`) picks is used; a workload
/// that cannot fit throws ServingDoesNotFit as simulate_serving does.
ServingStep serving_step(const Scenario& s, const CostModel& cost, const IterationBatch& b, uint64_t seed = kServingSeed);

/// serving_step for several iterations of the same deployment (the layout resolved once).
std::vector<ServingStep> serving_steps(const Scenario& s, const CostModel& cost, const std::vector<IterationBatch>& batches,
                                       uint64_t seed = kServingSeed);

/// Throws ServingCancelled once `cancel` is set; a null flag never is.
void throw_if_cancelled(const std::atomic<bool>* cancel);

/// The runs of serving_replications(): seeds seed, seed + 1, ...; the first records the
/// timeline when asked. With `cancel`, the flag is read before each run and during it; once
/// it is set ServingCancelled is thrown.
std::vector<ServingResult> simulate_serving_runs(const Scenario& s, const CostModel& cost, uint64_t seed = 20261129,
                                                 bool record_timeline = false,
                                                 const std::atomic<bool>* cancel = nullptr);

/// Latency targets for capacity searches (milliseconds, P99).
struct ServingSla {
  double ttft_p99_ms = 500;
  double tpot_p99_ms = 50;
};

/// P99 TTFT and TPOT of a run, milliseconds.
std::pair<double, double> p99_latencies(const ServingResult& r);
/// The median over runs of each run's P99 TTFT and TPOT, milliseconds.
std::pair<double, double> p99_latencies(const std::vector<ServingResult>& runs);

/// Whether the medians over simulate_serving_runs() of each run's P99 TTFT and TPOT meet
/// the SLA; runs stop as soon as the rest cannot change the answer. `cancel` as for
/// simulate_serving_runs().
bool meets_sla(const Scenario& s, const CostModel& cost, const ServingSla& sla, uint64_t seed = 20261129,
               const std::atomic<bool>* cancel = nullptr);

/// The highest Poisson arrival rate (requests/s) at which the scenario's deployment meets
/// the SLA, by doubling then bisection (latency grows with load); 0 when even a trickle
/// misses it. `progress` counts the probes (each a meets_sla()) against an estimate of
/// how many the search takes, exact once the doubling has bracketed the rate. `cancel` as
/// for simulate_serving_runs(), read before every simulated run.
double max_qps(const Scenario& s, const CostModel& cost, const ServingSla& sla, uint64_t seed = 20261129,
               ProgressCounter* progress = nullptr, const std::atomic<bool>* cancel = nullptr);

/// Linear-interpolated percentile (q in [0, 1]) of `v` (numpy's default).
double percentile(std::vector<double> v, double q);
/// percentile() of `v` at each of `qs`, in that order, by selection instead of a sort:
/// O(n) per quantile, the same values bit for bit.
std::vector<double> percentiles(std::vector<double> v, const std::vector<double>& qs);
/// percentiles() of a run's gaps, each times `scale`, at each of `qs`: the same values
/// percentiles() gives over the full list (t finished).
std::vector<double> percentiles(const GapTally& t, double scale, const std::vector<double>& qs);

}  // namespace capsim
