#pragma once
/// Post-training: one PPO/GRPO iteration composed from the two engines. Rollout generation
/// runs through the serving simulator on the rollout layout; scoring forwards and the
/// actor's updates through the training engine on the training layout; the weights then
/// move from the training layout to the rollout engine (refit).

#include <cstdint>
#include <string>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/train.hpp"

namespace capsim {

/// Prompt tokens per sample when `rl.prompt_tokens` is "auto": 128, the order of a
/// chat-templated math word problem (Llama 3.1 chat header ~30 tokens, an instruction line
/// ~20, a MATH/GSM8K-style problem ~80). Not independent of the NeMo RL cases: their page
/// prints no prompt length, and its printed totals imply ~127 (posttraining-public.json,
/// caveats), so their throughput_tokens_per_s is only a check of the step time.
inline constexpr double kRlAutoPromptTokens = 128;

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

/// One RL iteration: per-phase seconds, the step and its throughput.
struct RlIteration {
  double generation_s = 0;   ///< rollout: the serving run's first arrival to last finish
  double scoring_s = 0;      ///< reference, actor (old-policy), critic and reward forwards
  double training_s = 0;     ///< ppo_epochs x mini_batches optimizer steps (actor, critic)
  double resharding_s = 0;   ///< weights from the training layout to the rollout engine
  double step_time_s = 0;
  /// Prompt + response tokens of the iteration's samples over the step (SCHEMA.md).
  double throughput_tokens_per_s = 0;
  std::string bottleneck;  ///< "generation", "scoring", "training" or "resharding"

  int64_t samples = 0;           ///< prompts_per_step x group_size
  double prompt_tokens = 0;      ///< per sample, in force
  bool prompt_auto = false;
  double response_cap = 0;       ///< longest response a sample may run
  double response_scale = 0;     ///< theta of rl_response_scale
  int64_t longest_response = 0;  ///< the longest of the samples drawn
  double tokens_per_step = 0;    ///< samples x (prompt + mean response)
  int64_t rollout_replicas = 0;  ///< rollout GPUs / (tp * pp)
  int64_t rollout_iterations = 0;
  int64_t rollout_preemptions = 0;
  double rollout_peak_kv_utilization = 0;
  int64_t mini_batches = 0;      ///< in force
  int64_t train_seq_len = 0;     ///< packed sequence length: prompt + mean response
  double update_step_s = 0;      ///< one optimizer step of the actor
  double forward_pass_s = 0;     ///< one actor-sized forward over every sample
  double refit_bytes_per_gpu = 0;
  TrainEvaluation update;        ///< the actor's update step (resolved plan, memory)
  bool feasible = true;
  std::string fail_reason;
};

/// Evaluate one iteration of `s` (mode ppo/grpo, `s.rl` set; `s.training` is the actor's
/// update layout on rl.train_gpus GPUs). Placement colocated: the phases run in sequence on
/// the same GPUs, step = generation + scoring + training + resharding. Split with
/// async_staleness >= 1: generation runs on its own GPUs for the next iteration while this
/// one's samples are scored and trained on (NeMo RL async GRPO, docs/guides/async-grpo.md:
/// trajectory collection on the generation workers concurrent with policy training, refit
/// after each update), step = max(generation, scoring + training) + resharding; split
/// on-policy (staleness 0) runs them in sequence. A pure function of its inputs.
RlIteration evaluate_rl_iteration(const Scenario& s, const CostModel& cost);

}  // namespace capsim
