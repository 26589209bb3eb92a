#pragma once
/// Post-training: one PPO/GRPO iteration composed from the two engines. Rollout generation
/// runs through the serving simulator on the rollout layout; scoring forwards and the
/// actor's updates through the training engine on the training layout; the weights then
/// move from the training layout to the rollout engine (refit).

#include <cstdint>
#include <string>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/diagnostics.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/train.hpp"

namespace capsim {

/// Seconds of one forward (no backward, no optimizer) of `m` over `sequences` sequences of
/// the plan's seq_len, on the resolved training layout `t`: the per-microbatch forward of
/// each pipeline rank's chunks (pipeline_costs, with its exposed TP/CP/EP communication),
/// the slowest rank setting the pace, plus pp - 1 microbatches of fill and a p2p transfer
/// per boundary. This is the log-prob pass: the same kernels as the training forward.
double forward_pass_seconds(const ModelSpec& m, const SystemSpec& sys, TrainingPlan t, int64_t sequences,
                            const CostModel& cost);

/// Prompt tokens per sample when `rl.prompt_tokens` is "auto": 128, the order of a
/// chat-templated math word problem (Llama 3.1 chat header ~30 tokens, an instruction line
/// ~20, a MATH/GSM8K-style problem ~80). Not independent of the NeMo RL cases: their page
/// prints no prompt length, and its printed totals imply ~127 (posttraining-public.json,
/// caveats), so their throughput_tokens_per_s is only a check of the step time.
inline constexpr double kRlAutoPromptTokens = 128;

/// Samples per prompt of a GRPO case whose group_size is "auto" and not implied by the
/// rest of the case: NeMo RL's num_generations_per_prompt (examples/configs/grpo_math_1B.yaml
/// @ 00294d9: 16, beside num_prompts_per_step 32 and train_global_batch_size 512 = 32 x 16,
/// one optimizer step an iteration).
inline constexpr int64_t kNemoRlGenerationsPerPrompt = 16;

/// Rate at which NeMo RL's Megatron policy worker moves the optimizer state through
/// per-tensor pageable host memory, each direction (move_optimizer: `state[k] =
/// v.to("cpu")`, `.to("cuda")`; v0.5.0 megatron_policy_worker.py). An Nsight triage on an H100 (NVIDIA-NeMo/RL issue
/// #3976, comment of 2026-09-17) measured offload_before_refit's 510 device-to-pageable
/// copies of 4.94 GB at 2.75 s of copy time, ~1.8 GB/s effective, against 16.1 GB/s for one
/// 1 GiB pageable copy and 55 GB/s pinned on the same host (PR #2248: a cudaHostAlloc and
/// a synchronous memcpy per tensor). The host-to-device direction has no separate figure and
/// is taken at the same rate.
inline constexpr double kRlPageableCopyBytesPerS = 1.8e9;

/// Prompt tokens per sample in force: the spec's, or kRlAutoPromptTokens.
double rl_prompt_tokens(const RlSpec& rl);

/// The longest response a sample may run: the smaller of `response_max` and
/// `max_total_tokens` minus the prompt (either may be absent); 0 when neither is given.
double rl_response_cap(const RlSpec& rl);

/// Scale theta of the response-length distribution: an exponential (the maximum-entropy law
/// of a positive length with a given mean) truncated at the cap c, a sample that reaches it
/// stopping there, so that E[min(X, c)] = theta (1 - exp(-c / theta)) equals the published
/// mean. 0 for fixed lengths, and when the mean is at or above the cap (all at the cap).
/// Solved by bisection; the mean is increasing in theta.
double rl_response_scale(const RlSpec& rl);

/// Response lengths of the iteration's `n` samples: the quantiles of that distribution at
/// a golden-ratio (Weyl) sequence u_i = frac(i / phi), deterministic and evenly spread in
/// any prefix, so each replica of the round-robin router sees the whole distribution, and
/// the batch's longest sample sits near the cap as in a real draw of n.
std::vector<int64_t> rl_response_lengths(const RlSpec& rl, int64_t n);

/// One split resolve_rl_pools tried: its pools and its iteration's step, or why it does
/// not fit.
struct RlPoolTry {
  int64_t rollout_gpus = 0, train_gpus = 0;
  double step_time_s = 0;
  bool feasible = true;
  std::string fail_reason;
};

/// One RL iteration: per-phase seconds, the step and its throughput.
struct RlIteration {
  double generation_s = 0;   ///< rollout: the serving run's first arrival to last finish
  double scoring_s = 0;      ///< reference, actor (old-policy), critic and reward forwards
  double training_s = 0;     ///< ppo_epochs x mini_batches optimizer steps (actor, critic)
  double resharding_s = 0;   ///< weights from the training layout to the rollout engine
  /// Colocated only: host-link round trips of the time-shared GPUs (rl_offload_seconds).
  double offload_s = 0;
  double step_time_s = 0;
  /// Prompt + response tokens of the iteration's samples over the step (SCHEMA.md).
  double throughput_tokens_per_s = 0;
  std::string bottleneck;  ///< "generation", "scoring", "training", "resharding" or "offload"

  int64_t samples = 0;           ///< prompts_per_step x group_size
  double prompt_tokens = 0;      ///< per sample, in force
  bool prompt_auto = false;
  double response_cap = 0;       ///< longest response a sample may run
  double response_scale = 0;     ///< theta of rl_response_scale
  int64_t longest_response = 0;  ///< the longest of the samples drawn
  double tokens_per_step = 0;    ///< samples x (prompt + mean response)
  int64_t rollout_replicas = 0;  ///< rollout GPUs / (tp * pp)
  int64_t rollout_inflight_iterations = 1;  ///< rl_rollout_inflight_iterations
  int64_t rollout_iterations = 0;
  int64_t rollout_preemptions = 0;
  double rollout_peak_kv_utilization = 0;
  int64_t mini_batches = 0;      ///< in force
  int64_t train_seq_len = 0;     ///< packed sequence length: prompt + mean response
  double update_step_s = 0;      ///< one optimizer step of the actor
  double forward_pass_s = 0;     ///< one actor-sized forward over every sample
  /// Bytes each rollout GPU receives in the refit: its engine shard (split), or the whole
  /// exported model less the trainer's own shard (colocated, see evaluate_rl_iteration).
  double refit_bytes_per_gpu = 0;
  double offload_bytes_per_gpu = 0;    ///< colocated: bytes over the host link per iteration
  double reference_swap_s = 0;         ///< part of scoring_s: the reference weights swapped in and out
  double reference_swap_bytes_per_gpu = 0;
  TrainEvaluation update;        ///< the actor's update step (resolved plan, memory)
  /// The splits tried where the pools were left to choose (resolve_rl_pools), in order of
  /// growing rollout pool; empty otherwise.
  std::vector<RlPoolTry> pool_search;
  bool feasible = true;
  std::string fail_reason;
};

/// Evaluate one iteration of `s` (mode ppo/grpo, `s.rl` set; `s.training` is the actor's
/// update layout on rl.train_gpus GPUs). Placement colocated: the phases run in sequence on
/// the same GPUs, step = generation + scoring + training + resharding + offload. Split with
/// async_staleness >= 1: generation runs on its own GPUs for the next iteration while this
/// one's samples are scored and trained on (NeMo RL async GRPO, docs/guides/async-grpo.md:
/// trajectory collection on the generation workers concurrent with policy training, refit
/// after each update), step = max(generation, scoring + training) + resharding; split
/// on-policy (staleness 0) runs them in sequence.
///
/// What moves besides the compute follows NeMo RL's Megatron policy worker and its vLLM
/// generation at v0.5.0 (github.com/NVIDIA-NeMo/RL, nemo_rl/algorithms/grpo.py
/// refit_policy_generation and grpo_train; nemo_rl/models/policy/workers/
/// megatron_policy_worker.py; nemo_rl/models/generation/vllm/vllm_worker.py):
/// - reference log-probs (any placement, reference "model"): use_reference_model copies the
///   policy's weights to the host, loads the reference's from the host and restores the
///   policy's afterwards: three copies of the trainer's weights per GPU at the host link
///   rate (its `.to("cpu", non_blocking=True)` lands in pinned memory: PyTorch's _to_copy
///   pins the output of a non-blocking device-to-host copy, aten/src/ATen/native/
///   TensorConversions.cpp), counted in scoring_s (NeMo RL times them inside
///   policy_and_reference_logprobs);
/// - colocated refit: every training rank exports the whole model in HF layout
///   (Megatron-Bridge stream_weights_megatron_to_hf at the pinned commit 1e9a459: "All ranks
///   receive the full tensors", gathered over tp and ep and broadcast over pp) and hands it
///   to the engine on its GPU through CUDA IPC; each GPU receives the model less its own
///   shard, over the scale-out network when the trainer's model-parallel group spans nodes,
///   else over NVLink, at the share of speed of light NeMo RL measured, then the IPC
///   hand-over and load at its measured cost (resharding_s; posttrain.cpp cites the refit
///   posts). Split refit broadcasts the whole model to every generation worker (NeMo RL's
///   non-colocated refit) at its published rate;
/// - colocated time-sharing (offload_s): offload_before_refit moves the optimizer state to
///   the host and prepare_for_training brings it back; offload_after_refit moves the
///   trainer's weights to the host and prepare_for_lp_inference brings them back;
///   finish_generation puts vLLM to sleep at level 1 (weights to the host, KV cache freed)
///   and prepare_for_generation wakes it (weights back). Gradient buffers are freed, not
///   copied (Megatron-LM ParamAndGradBuffer.offload_to_cpu). Weights go through pinned
///   buffers (Megatron-LM's param_data_cpu, vLLM's sleep allocator) at the host link rate
///   pcie_bytes_per_s, the optimizer state through pageable memory at
///   kRlPageableCopyBytesPerS, one direction at a time.
/// A pure function of its inputs.
RlIteration evaluate_rl_iteration(const Scenario& s, const CostModel& cost);

/// The rollout engine's tp left "auto" on a pool of `pool_gpus` GPUs: the smallest power of
/// two dividing the pool (with the engine's pp) whose replica fits (inference_memory), else
/// the largest that divides it; 1 where none does.
int64_t rl_auto_rollout_tp(const ModelSpec& m, const SystemSpec& sys, InferencePlan p, int64_t pool_gpus);

/// The pools a split placement can take when the case leaves `gpus` "auto" and its layout
/// does not imply them (RlSpec::pools_auto): NeMo RL dedicates generation GPUs on a
/// one-node cluster and whole nodes on several (`policy.generation.colocated.resources`:
/// gpus_per_node "when there is one node in the cluster", else num_nodes; examples/configs/
/// grpo_math_1B.yaml), so rollout pools of 1 .. n-1 GPUs on one node, else of 1 .. nodes-1
/// nodes; the rest trains. A candidate is kept where the rollout engine's tp x pp divides
/// its pool (a tp left "auto" the smallest power of two that does and whose replica fits,
/// inference_memory) and the update layout passes check_training_layout on the training
/// pool. Each is the scenario with its pools set, in order of growing rollout pool; none
/// where no split works, with the first candidate's reason in `why`.
std::vector<Scenario> rl_pool_candidates(const Scenario& s, std::string* why = nullptr);

/// The input problem of a split placement whose pools left "auto" have no candidate:
/// `why` the first candidate's reason (rl_pool_candidates).
Issue rl_no_split_issue(int64_t num_gpus, const std::string& why);

/// A scenario with its split pools in force and its iteration.
struct RlEvaluation {
  Scenario scenario;
  RlIteration iteration;
};

/// One iteration of `s` with pools left to choose (RlSpec::pools_auto) chosen first: every
/// candidate of rl_pool_candidates evaluated (RlIteration::pool_search) and the fastest
/// that fits kept (the first, which then reports why it does not, where none fits); ties
/// keep the smaller rollout pool. Otherwise `s` and evaluate_rl_iteration(s). Throws
/// InputError where there is no candidate.
RlEvaluation evaluate_rl(const Scenario& s, const CostModel& cost);

/// `s` with its split pools chosen where they were left to choose (RlSpec::pools_auto): the
/// candidate whose iteration takes the least time among those that fit (the first, which
/// then reports why it does not, where none fits); `s` unchanged otherwise. Each candidate
/// evaluated goes to `tries` where given. Throws InputError where there is no candidate.
Scenario resolve_rl_pools(const Scenario& s, const CostModel& cost, std::vector<RlPoolTry>* tries = nullptr);

/// Bytes one GPU moves over its host link per colocated iteration (offload_s): the
/// trainer's optimizer state and weights each down and up, and the engine's weights each
/// down and up (vLLM sleep level 1 and wake).
double rl_offload_bytes_per_gpu(double optimizer_bytes, double trainer_weight_bytes, double engine_weight_bytes);

/// Seconds of those copies: the weights (pinned) at `host_link` bytes/s, the optimizer
/// state (pageable) at kRlPageableCopyBytesPerS.
double rl_offload_seconds(double optimizer_bytes, double trainer_weight_bytes, double engine_weight_bytes,
                          double host_link);

/// The rollout's requests, all arriving at once: `lengths` responses to prompts of
/// `prompt_tokens`, consecutive runs of rl.group_size of them answering one prompt (they
/// share a trace prefix_id, so the prefix cache serves the prompt to all but the first).
std::vector<TraceRequest> rl_rollout_trace(const RlSpec& rl, int64_t prompt_tokens, const std::vector<int64_t>& lengths);

/// Whether generation overlaps the trainer: a split placement with async_staleness >= 1
/// (its rollouts then run the engine's asynchronous class, InferencePlan::engine_context).
bool rl_asynchronous(const RlSpec& rl);

/// Iterations whose rollouts the engine holds at once: async_staleness k on a split
/// placement, else 1. NeMo RL's async trajectory collector keeps up to
/// num_prompts_per_step x max_trajectory_age_steps prompt groups in flight, generating
/// continuously (v0.6.0 nemo_rl/algorithms/async_utils.py, AsyncTrajectoryCollector
/// max_inflight), so with k > 1 the engine serves k iterations' samples together and each
/// iteration takes 1/k of their makespan: the batch's long tail is paid once per k
/// iterations, not every iteration. For k <= 1 this is the single batch's makespan.
int64_t rl_rollout_inflight_iterations(const RlSpec& rl);

/// The step of `it` from its phase seconds under the placement and async_staleness of
/// `rl` (as evaluate_rl_iteration describes): step_time_s, bottleneck and throughput.
/// The phases depend on the staleness only through rl_rollout_inflight_iterations, so one
/// evaluation serves every staleness of a split placement with the same in-flight count.
void combine_rl_phases(RlIteration& it, const RlSpec& rl);

/// One optimizer step of a trained model beside a frozen one: preference optimisation
/// (the policy beside its reference) or distillation (the student beside its teacher).
struct FrozenModelStep {
  TrainEvaluation trained;  ///< the policy's / student's step: resolved plan, memory, time
  std::string frozen_role;  ///< "reference", "teacher", or "" (none costs anything)
  double trained_s = 0;     ///< the trained model's forward + backward + optimizer step
  double frozen_s = 0;      ///< the frozen model's forward over the step's sequences
  double logits_s = 0;      ///< teacher logits moved: read from disk or sent over the network
  /// frozen_s (and logits_s) run beside the trained step instead of before it: a split
  /// teacher scores the next batch; precomputed logits are prefetched by the data loader.
  bool overlapped = false;
  double step_time_s = 0;
  int64_t sequences = 0;  ///< sequences the trained model runs per step (2 x pairs in preference modes)
  int64_t pairs = 0;      ///< preference modes: chosen/rejected pairs per step
  double model_flops_per_step = 0;   ///< the trained model's 3 x forward FLOPs plus the frozen forward's
  double frozen_flops_per_step = 0;  ///< the frozen model's forward FLOPs (0 where it costs nothing)
  double logits_bytes = 0;           ///< teacher logits per step (split, precomputed)
  double tokens_per_step = 0;        ///< sequences x seq_len, the tokens the trained model passes forward
  double throughput_tokens_per_s = 0;
  std::vector<std::string> notes;    ///< what was not counted, and why
  bool feasible = true;
  std::string fail_reason;
};

/// A dpo / simpo / orpo step of `s` (`s.preference` set). The policy runs forward and
/// backward over the chosen and the rejected sequence of every pair, i.e. a training step
/// of the plan's global_batch = 2 x pairs sequences (TRL's DPOTrainer concatenates them
/// into one batch). DPO with reference "model" adds a frozen reference forward over the same
/// sequences before it (Rafailov et al. 2023, Eq. 7: the loss needs the reference's
/// log-probs of both responses) and holds the reference's weights beside the policy's.
/// SimPO (Meng et al. 2024) and ORPO (Hong et al. 2024) are reference-free, and "precomputed"
/// reference log-probs cost nothing in the step. The auto fields of the plan are resolved
/// with the reference weights in memory. A pure function of its inputs.
FrozenModelStep evaluate_preference_step(const Scenario& s, const CostModel& cost);

/// A distill step of `s` (`s.distill` set): the student's training step on the plan's
/// sequences, and the teacher by placement. Colocated: the teacher's weights sit on the
/// student's GPUs (frozen_model_params, split as the student's tp / pp / ep) and its forward
/// over the same sequences on the student's layout runs before the student's step. Split:
/// the teacher runs on teacher_gpus GPUs of its own with the student's tp and pp, scoring
/// the next batch while the student trains on this one, its 16-bit logits sent over the
/// scale-out network: step = max(student, teacher + logits). Precomputed: the logits of the
/// whole vocabulary in 16-bit are read from the nodes' NVMe at system.nvme_gbps_per_node,
/// prefetched beside the step: step = max(student, read); not counted when that rate is not
/// given. A pure function of its inputs.
FrozenModelStep evaluate_distill_step(const Scenario& s, const CostModel& cost);

}  // namespace capsim
