#include "capsim/core/posttrain.hpp"

#include <algorithm>
#include <cmath>

#include "capsim/core/diagnostics.hpp"
#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/model.hpp"
#include "capsim/core/serving.hpp"
#include "capsim/core/step.hpp"

namespace capsim {

namespace {

double dbl(int64_t v) { return static_cast<double>(v); }

/// Bytes per parameter the refit moves: the trainer's bf16 weights (Megatron keeps bf16
/// parameters under FP8 training too; the engine quantizes on load).
constexpr double kRefitBytesPerParam = 2.0;

/// NeMo RL's measured refit against its speed of light, the weights at every NIC of a node
/// (8 x 50 GB/s on DGX H100, the posts' own figure):
/// - colocated ("NeMo-RL: Journey of Optimizing Weight Transfer in Large MoE Models by
///   10x", NeMo RL blog 2025-08-12, Table 1: DeepSeek-V3, training EP64 PP8, generation
///   TP64, NeMo RL v0.3): policy parameter gather 12.2 s against 3.3 s at speed of light,
///   IPC handle transfer 33.5 s, generation parameter update 1.5 s, for the 671e9 bf16
///   parameters (1.342e12 bytes);
/// - split ("NeMo-RL: Optimizing Non-Colocated Refit for Asynchronous RL", 2026-02-26,
///   after PRs #1264, #1313, #1379: topology-aware broadcast of the whole model to every
///   generation worker, coalesced, overlapped with the gather): Qwen3-235B-A22B 5 s,
///   DeepSeek-V3 14 s on DGX H100; as t0 + bytes / rate through those two points, the rate
///   is 0.242 of the 400 GB/s and t0 0.15 s (Qwen3-30B-A3B's 1.5 s reads 0.8 s so: small
///   models carry more fixed cost than the line gives).
constexpr double kRefitDsv3Bytes = 671e9 * kRefitBytesPerParam;
constexpr double kRefitGatherShare = 3.3 / 12.2;
constexpr double kRefitIpcSecondsPerByte = 33.5 / kRefitDsv3Bytes;
constexpr double kRefitUpdateSecondsPerByte = 1.5 / kRefitDsv3Bytes;
constexpr double kRefitBroadcastShare = 0.242;
constexpr double kRefitBroadcastFixedS = 0.15;

/// The model a role runs: the actor's for "model", its own config otherwise.
const ModelSpec& role_model(const RlModel& r, const ModelSpec& actor) {
  return r.kind == RlModel::Kind::other && r.config ? *r.config : actor;
}

/// A training evaluation's fail reason after "... does not fit: ", without saying it twice.
std::string why_not(const std::string& reason) {
  const std::string lead = "does not fit: ";
  return reason.rfind(lead, 0) == 0 ? reason.substr(lead.size()) : reason;
}

bool has_network(const RlModel& r) { return r.kind == RlModel::Kind::actor || r.kind == RlModel::Kind::other; }

/// The actor's (or critic's) update step: the case's layout on the training GPUs, trained
/// as full-parameter fine-tuning on packed sequences of `seq_len` tokens.
TrainEvaluation update_step(const Scenario& s, const ModelSpec& m, int64_t seq_len, const CostModel& cost) {
  Scenario ts;
  ts.id = s.id;
  ts.model = m;
  ts.system = s.system;
  ts.system.num_gpus = s.rl->train_gpus;
  ts.training = *s.training;
  ts.training->seq_len = seq_len;
  ts.training->mode = TrainMode::sft;
  if (&m != &s.model) ts.training->stage_layers.clear();
  return evaluate_training(ts, &cost);
}

/// The rollout: every sample as a request arriving at once, on rollout GPUs / (tp * pp)
/// replicas of the engine. The group_size samples of a prompt share it, and the engine's
/// prefix cache serves it to all but the first of them: NeMo RL builds its vLLM engine
/// with enable_prefix_caching on every GPU of compute capability 8.0 and up
/// (nemo_rl/models/generation/vllm/vllm_worker.py at v0.5.0) and repeats each prompt
/// group_size times before generation (grpo.py, repeat_interleave of the batch).
ServingResult rollout(const Scenario& s, const RlIteration& it, const std::vector<int64_t>& lengths,
                      const CostModel& cost) {
  const RlSpec& rl = *s.rl;
  Scenario gs;
  gs.id = s.id;
  gs.model = s.model;
  gs.system = s.system;
  gs.system.num_gpus = rl.rollout_gpus;
  InferencePlan p = rl.rollout;
  p.replicas = it.rollout_replicas;
  // RL frameworks drive the engine in-process through its library class, not a server
  // (NeMo RL v0.5.0 nemo_rl/models/generation/vllm/vllm_worker.py: `vllm.LLM(**llm_kwargs)`),
  // so the engine's defaults for that usage context apply. Asynchronous rollouts run the
  // engine's asynchronous class built from engine arguments instead (NeMo RL's
  // VllmAsyncGenerationWorker._create_engine: `AsyncLLM.from_engine_args(AsyncEngineArgs(
  // **llm_kwargs))`, the async_engine its asynchronous GRPO recipes set), which no usage
  // context's defaults reach.
  p.llm_class = true;
  p.engine_context = rl_asynchronous(rl);
  p.workload = ServingWorkload{};
  p.workload.mode = ServingWorkload::Mode::trace;
  p.workload.num_requests = static_cast<int64_t>(lengths.size());
  const int64_t prompt = std::max<int64_t>(1, std::llround(it.prompt_tokens));
  p.workload.trace = rl_rollout_trace(rl, prompt, lengths);
  gs.inference = p;
  // Only the makespan and counters are read: no per-token gaps.
  return simulate_serving(gs, cost, kServingSeed, /*record_timeline=*/false, TokenGaps::none);
}

}  // namespace

double forward_pass_seconds(const ModelSpec& m, const SystemSpec& sys, TrainingPlan t, int64_t sequences,
                            const CostModel& cost) {
  if (t.stage_layers.size() != static_cast<size_t>(t.pp * t.vpp.value_or(1))) t.stage_layers.clear();
  const StepOptions opt = plan_step_options(t);
  const PipelineCosts pc = pipeline_costs(m, sys, t, cost, opt);
  double rank_s = 0;
  for (const auto& rank : pc.chunks) {
    double s = 0;
    for (const ChunkCost& c : rank) s += c.fwd_s;
    rank_s = std::max(rank_s, s);
  }
  const int64_t per_micro = std::max<int64_t>(1, t.micro_batch.value_or(1)) * std::max<int64_t>(1, t.dp);
  const int64_t micro = (sequences + per_micro - 1) / per_micro;
  const double hop = t.pp > 1 ? pc.p2p_s : 0.0;
  return dbl(micro + t.pp - 1) * (rank_s + hop);
}

double rl_prompt_tokens(const RlSpec& rl) { return rl.prompt_tokens.value_or(kRlAutoPromptTokens); }

double rl_response_cap(const RlSpec& rl) {
  double cap = rl.response_max;
  if (rl.max_total_tokens > 0) {
    const double room = dbl(rl.max_total_tokens) - rl_prompt_tokens(rl);
    cap = cap > 0 ? std::min(cap, room) : room;
  }
  return std::max(cap, 0.0);
}

double rl_response_scale(const RlSpec& rl) {
  const double cap = rl_response_cap(rl), mean = rl.response_mean;
  if (rl.response_fixed || cap <= 0 || mean >= cap) return 0.0;
  auto capped_mean = [&](double theta) { return theta * -std::expm1(-cap / theta); };
  double lo = mean, hi = mean;  // capped_mean(theta) < theta, so theta > mean
  while (capped_mean(hi) < mean) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-9 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (capped_mean(mid) < mean ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::vector<int64_t> rl_response_lengths(const RlSpec& rl, int64_t n) {
  const double cap = rl_response_cap(rl), theta = rl_response_scale(rl);
  /// 1 / phi, the golden ratio's fractional part: the Weyl sequence with the most even
  /// spread of any rotation (Kuipers and Niederreiter, Uniform Distribution of Sequences, 1974).
  constexpr double kInvPhi = 0.6180339887498949;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(0, n)));
  for (int64_t i = 1; i <= n; ++i) {
    double len = rl.response_mean;
    if (!rl.response_fixed && cap > 0) {
      const double u = dbl(i) * kInvPhi - std::floor(dbl(i) * kInvPhi);
      len = theta > 0 ? std::min(cap, -theta * std::log1p(-u)) : cap;
    }
    out.push_back(std::max<int64_t>(1, std::llround(len)));
  }
  return out;
}

std::vector<TraceRequest> rl_rollout_trace(const RlSpec& rl, int64_t prompt_tokens, const std::vector<int64_t>& lengths) {
  std::vector<TraceRequest> trace;
  trace.reserve(lengths.size());
  const int64_t group = std::max<int64_t>(1, rl.group_size);
  for (size_t i = 0; i < lengths.size(); ++i)
    trace.push_back({0.0, prompt_tokens, lengths[i], "prompt-" + std::to_string(static_cast<int64_t>(i) / group), prompt_tokens});
  return trace;
}

bool rl_asynchronous(const RlSpec& rl) { return rl.placement == RlSpec::Placement::split && rl.async_staleness >= 1; }

int64_t rl_rollout_inflight_iterations(const RlSpec& rl) {
  return rl_asynchronous(rl) && rl.async_staleness > 1 ? rl.async_staleness : 1;
}

double rl_offload_bytes_per_gpu(double optimizer_bytes, double trainer_weight_bytes, double engine_weight_bytes) {
  return 2.0 * optimizer_bytes + 2.0 * trainer_weight_bytes + 2.0 * engine_weight_bytes;
}

double rl_offload_seconds(double optimizer_bytes, double trainer_weight_bytes, double engine_weight_bytes,
                          double host_link) {
  const double pinned = 2.0 * trainer_weight_bytes + 2.0 * engine_weight_bytes;
  return (host_link > 0 ? pinned / host_link : 0.0) + 2.0 * optimizer_bytes / kRlPageableCopyBytesPerS;
}

void combine_rl_phases(RlIteration& it, const RlSpec& rl) {
  if (rl_asynchronous(rl)) {
    const double trainer = it.scoring_s + it.training_s;
    it.step_time_s = std::max(it.generation_s, trainer) + it.resharding_s;
    it.bottleneck = it.generation_s >= trainer ? "generation" : it.scoring_s > it.training_s ? "scoring" : "training";
  } else {
    it.step_time_s = it.generation_s + it.scoring_s + it.training_s + it.resharding_s + it.offload_s;
    const std::pair<double, const char*> phases[] = {{it.generation_s, "generation"},
                                                     {it.scoring_s, "scoring"},
                                                     {it.training_s, "training"},
                                                     {it.resharding_s, "resharding"},
                                                     {it.offload_s, "offload"}};
    it.bottleneck = std::max_element(std::begin(phases), std::end(phases),
                                     [](const auto& a, const auto& b) { return a.first < b.first; })
                        ->second;
  }
  it.throughput_tokens_per_s = it.step_time_s > 0 ? it.tokens_per_step / it.step_time_s : 0;
}

RlIteration evaluate_rl_iteration(const Scenario& s, const CostModel& cost) {
  // Pools left to choose are chosen first (evaluate_rl; callers that report the pools use it).
  if (s.rl && s.rl->pools_auto) return evaluate_rl(s, cost).iteration;
  const RlSpec& rl = *s.rl;
  RlIteration it;
  it.samples = rl.prompts_per_step * rl.group_size;
  it.prompt_tokens = rl_prompt_tokens(rl);
  it.prompt_auto = !rl.prompt_tokens;
  it.response_cap = rl_response_cap(rl);
  it.response_scale = rl_response_scale(rl);
  it.tokens_per_step = dbl(it.samples) * (it.prompt_tokens + rl.response_mean);
  it.rollout_replicas = rl.rollout_gpus / std::max<int64_t>(1, rl.rollout.tp * rl.rollout.pp);
  it.mini_batches = rl.mini_batches.value_or(std::max<int64_t>(1, it.samples / std::max<int64_t>(1, s.training->global_batch)));
  it.train_seq_len = std::max<int64_t>(1, std::llround(it.prompt_tokens + rl.response_mean));

  // (c) updates: ppo_epochs x mini_batches steps of global_batch packed sequences.
  it.update = update_step(s, s.model, it.train_seq_len, cost);
  if (!it.update.feasible || !it.update.step) {
    it.feasible = false;
    it.fail_reason = "the actor's update step does not fit: " + why_not(it.update.fail_reason);
    return it;
  }
  it.update_step_s = it.update.step->step_s;
  const double steps = dbl(rl.ppo_epochs * it.mini_batches);
  it.training_s = steps * it.update_step_s;
  if (has_network(rl.critic)) {
    const TrainEvaluation critic = update_step(s, role_model(rl.critic, s.model), it.train_seq_len, cost);
    if (!critic.feasible || !critic.step) {
      it.feasible = false;
      it.fail_reason = "the critic's update step does not fit: " + why_not(critic.fail_reason);
      return it;
    }
    it.training_s += steps * critic.step->step_s;
  }

  // (b) scoring: the actor's log-probs under the policy that generated (the old policy),
  // then the reference, critic and reward networks; a rule reward costs no GPU time.
  SystemSpec train_sys = s.system;
  train_sys.num_gpus = rl.train_gpus;
  TrainingPlan fwd = it.update.plan;
  it.forward_pass_s = forward_pass_seconds(s.model, train_sys, fwd, it.samples, cost);
  it.scoring_s = it.forward_pass_s;
  for (const RlModel* r : {&rl.reference, &rl.critic, &rl.reward})
    if (has_network(*r))
      it.scoring_s += r->kind == RlModel::Kind::actor
                          ? it.forward_pass_s
                          : forward_pass_seconds(role_model(*r, s.model), train_sys, fwd, it.samples, cost);
  // The trainer's largest per-GPU weights and optimizer state (the slowest rank sets the pace).
  double trainer_weights = 0, trainer_optimizer = 0;
  for (const StageMemory& st : it.update.memory.stages) {
    trainer_weights = std::max(trainer_weights, st.weights_bytes);
    trainer_optimizer = std::max(trainer_optimizer, st.optimizer_bytes);
  }
  const double host_link = pcie_bytes_per_s(s.system);
  if (rl.reference.kind == RlModel::Kind::actor) {
    // NeMo RL use_reference_model: the policy's weights down, the reference's up, the
    // policy's up again.
    it.reference_swap_bytes_per_gpu = 3.0 * trainer_weights;
    it.reference_swap_s = it.reference_swap_bytes_per_gpu / host_link;
    it.scoring_s += it.reference_swap_s;
  }

  // (a) generation through the serving simulator: the in-flight iterations' samples at
  // once, the makespan shared among them (rl_rollout_inflight_iterations).
  it.rollout_inflight_iterations = rl_rollout_inflight_iterations(rl);
  const std::vector<int64_t> lengths = rl_response_lengths(rl, it.samples * it.rollout_inflight_iterations);
  it.longest_response = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  try {
    const ServingResult r = rollout(s, it, lengths, cost);
    it.generation_s = r.duration_s / dbl(it.rollout_inflight_iterations);
    it.rollout_iterations = r.iterations;
    it.rollout_preemptions = r.preemptions;
    it.rollout_peak_kv_utilization = r.peak_kv_utilization;
  } catch (const ServingDoesNotFit& e) {
    it.feasible = false;
    it.fail_reason = std::string("the rollout does not fit: ") + e.what();
    return it;
  }

  // (d) refit (see the header for the sources). Split: each rollout GPU receives its shard
  // of the weights over the scale-out network. Colocated: each GPU receives the whole
  // exported model less the trainer's own shard, over the network when the trainer's
  // model-parallel group spans nodes. Megatron-LM orders ranks "tp-cp-ep-dp-pp"
  // (megatron/core/parallel_state.py, initialize_model_parallel's default order): pipeline
  // stages are the outermost dimension, so pp > 1 spans nodes once the pool does, and the
  // tp and ep groups are runs of consecutive ranks.
  const FrozenParams fp = frozen_model_params(s.model);
  const double model_bytes = (fp.dense + fp.expert) * kRefitBytesPerParam;
  const double engine_ways = dbl(std::max<int64_t>(1, rl.rollout.tp * rl.rollout.pp));
  const TrainingPlan& up = it.update.plan;
  const int64_t node = std::max<int64_t>(1, s.system.gpus_per_node);
  // A node's NICs together: the speed of light of NeMo RL's gather and broadcast across
  // nodes; within one node a GPU's NVLink line rate.
  const double node_nic = dbl(node) * s.system.nic_gbps_per_gpu / 8.0 * 1e9;
  const double nvlink = s.system.gpu.nvlink_bw_unidir_gbps * 1e9;
  if (rl.placement == RlSpec::Placement::split) {
    // Every generation worker receives the whole model and keeps its shard.
    it.refit_bytes_per_gpu = model_bytes;
    const bool one_node = rl.rollout_gpus + rl.train_gpus <= node;
    const double sol_bw = one_node ? nvlink : node_nic;
    it.resharding_s = sol_bw > 0 ? kRefitBroadcastFixedS + model_bytes / (kRefitBroadcastShare * sol_bw)
                                 : cost.p2p(Bytes(model_bytes), !one_node).value;
  } else {
    const double own = (fp.dense / dbl(up.tp * up.pp) + fp.expert / dbl(up.ep * up.etp.value_or(1) * up.pp)) *
                       kRefitBytesPerParam;
    it.refit_bytes_per_gpu = std::max(0.0, model_bytes - own);
    const bool spans_nodes =
        rl.train_gpus > node && (up.pp > 1 || up.tp > node || up.ep * up.etp.value_or(1) > node);
    // The gather at NeMo RL's measured share of its speed of light: a node's NICs when the
    // trainer's model-parallel group spans nodes, else a GPU's NVLink line rate; then the
    // IPC hand-over and the engine's load_weights, per byte as measured.
    const double sol_bw = spans_nodes && node_nic > 0 ? node_nic : nvlink;
    const double gather = sol_bw > 0 ? it.refit_bytes_per_gpu / (kRefitGatherShare * sol_bw)
                                     : cost.p2p(Bytes(it.refit_bytes_per_gpu), spans_nodes).value;
    it.resharding_s = gather + model_bytes * (kRefitIpcSecondsPerByte + kRefitUpdateSecondsPerByte);
    // Time-sharing the GPUs: optimizer state, trainer weights and engine weights each go
    // down to the host and come back once per iteration.
    const double engine_weights = dbl(count_params(s.model).total) * dtype_bytes(rl.rollout.weight_dtype) / engine_ways;
    it.offload_bytes_per_gpu = rl_offload_bytes_per_gpu(trainer_optimizer, trainer_weights, engine_weights);
    it.offload_s = rl_offload_seconds(trainer_optimizer, trainer_weights, engine_weights, host_link);
  }

  combine_rl_phases(it, rl);
  return it;
}

int64_t rl_auto_rollout_tp(const ModelSpec& m, const SystemSpec& sys, InferencePlan p, int64_t pool_gpus) {
  int64_t chosen = 1;
  for (int64_t tp = 1; tp <= pool_gpus; tp *= 2) {
    if (pool_gpus % (tp * p.pp) != 0) continue;
    chosen = p.tp = tp;
    if (inference_memory(m, sys, p).fits) break;
  }
  return chosen;
}

std::vector<Scenario> rl_pool_candidates(const Scenario& s, std::string* why) {
  std::vector<Scenario> out;
  if (!s.rl || !s.training) return out;
  const int64_t n = s.system.num_gpus;
  const int64_t node = std::max<int64_t>(1, s.system.gpus_per_node);
  std::vector<int64_t> rollouts;
  if (n <= node) {
    for (int64_t r = 1; r < n; ++r) rollouts.push_back(r);
  } else {
    for (int64_t r = node; r < n; r += node) rollouts.push_back(r);
  }
  if (rollouts.empty() && why) *why = std::to_string(n) + " GPU(s) cannot hold two pools";
  for (int64_t r : rollouts) {
    Scenario c = s;
    RlSpec& rl = *c.rl;
    rl.pools_auto = false;
    rl.placement = RlSpec::Placement::split;
    rl.rollout_gpus = r;
    rl.train_gpus = n - r;
    const std::string pools = std::to_string(r) + " rollout + " + std::to_string(n - r) + " train: ";
    auto reject = [&](const std::string& reason) {
      if (why && why->empty()) *why = pools + reason;
    };
    InferencePlan& p = rl.rollout;
    if (rl.rollout_tp_auto) p.tp = rl_auto_rollout_tp(s.model, s.system, p, r);
    if (p.tp < 1 || p.pp < 1 || r % (p.tp * p.pp) != 0) {
      reject("the rollout engine's tp*pp = " + std::to_string(p.tp * p.pp) + " does not divide its pool");
      continue;
    }
    // The update layout on the training pool: a dp left to resolve is what the pool leaves
    // the model-parallel degrees.
    TrainingPlan& t = *c.training;
    const int64_t mp = t.tp * t.pp * t.cp;
    if ((t.auto_layout & kAutoDp) && !(t.auto_layout & (kAutoTp | kAutoPp | kAutoCp)) && mp > 0) {
      if (rl.train_gpus % mp != 0) {
        reject("tp*pp*cp = " + std::to_string(mp) + " does not divide the training pool");
        continue;
      }
      t.dp = rl.train_gpus / mp;
      t.auto_layout &= ~kAutoDp;
    }
    Scenario trainer = c;
    trainer.system.num_gpus = rl.train_gpus;
    if (t.auto_layout != 0) {
      if (layout_candidates(trainer).empty()) {
        reject("no training layout of the case fits the training pool");
        continue;
      }
    } else if (const std::vector<Issue> issues = check_training_layout(trainer); !issues.empty()) {
      reject(format_issue(issues.front()));
      continue;
    }
    out.push_back(std::move(c));
  }
  return out;
}

Issue rl_no_split_issue(int64_t num_gpus, const std::string& why) {
  return {"/training/rl/gpus", "\"auto\"",
          "no split of the " + std::to_string(num_gpus) + " GPUs leaves both pools a valid layout (" + why + ")",
          "state {\"rollout\": n, \"train\": n}, or placement \"colocated\""};
}

RlEvaluation evaluate_rl(const Scenario& s, const CostModel& cost) {
  if (!s.rl || !s.rl->pools_auto) return {s, evaluate_rl_iteration(s, cost)};
  std::string why;
  std::vector<Scenario> candidates = rl_pool_candidates(s, &why);
  if (candidates.empty()) throw InputError({rl_no_split_issue(s.system.num_gpus, why)});
  std::vector<RlPoolTry> tries;
  size_t best = 0;
  RlIteration kept;
  for (size_t i = 0; i < candidates.size(); ++i) {
    RlIteration it = evaluate_rl_iteration(candidates[i], cost);
    tries.push_back({candidates[i].rl->rollout_gpus, candidates[i].rl->train_gpus, it.step_time_s, it.feasible,
                     it.fail_reason});
    // The first candidate stands until one that fits is faster (or fits where it does not).
    const bool faster = it.feasible && (!kept.feasible || it.step_time_s < kept.step_time_s);
    if (i == 0 || faster) {
      best = i;
      kept = std::move(it);
    }
  }
  kept.pool_search = std::move(tries);
  return {std::move(candidates[best]), std::move(kept)};
}

Scenario resolve_rl_pools(const Scenario& s, const CostModel& cost, std::vector<RlPoolTry>* tries) {
  RlEvaluation e = evaluate_rl(s, cost);
  if (tries) *tries = std::move(e.iteration.pool_search);
  return std::move(e.scenario);
}

}  // namespace capsim
