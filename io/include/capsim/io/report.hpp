#pragma once
/// Reports as JSON values with stable keys (units in key names). Documented in
/// docs/report.md.

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "capsim/core/memory.hpp"
#include "capsim/core/model.hpp"
#include "capsim/core/posttrain.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/serving.hpp"
#include "capsim/core/train.hpp"

namespace capsim::io {

/// `capsim model`: parameter counts, KV bytes per token by dtype, forward FLOPs per token
/// at `seq_len`, and the layer list.
nlohmann::json model_report(const ModelSpec& m, int64_t seq_len);

/// Memory of one stage under the documented keys.
nlohmann::json stage_memory_json(const StageMemory& s);

/// `capsim train`: model, resolved plan, memory per GPU (peak stage) and per stage.
nlohmann::json train_report(const Scenario& s, const TrainEvaluation& ev);

/// One RL iteration (evaluate_rl_iteration): per-phase seconds, step, throughput, the
/// bottleneck, and what was put in (samples, lengths, rollout replicas, update steps).
nlohmann::json rl_iteration_json(const Scenario& s, const RlIteration& it);

/// `capsim train` for a ppo/grpo scenario: train_report of the actor's update step on the
/// training GPUs, plus `rl` (rl_iteration_json); engine "analytical".
nlohmann::json rl_train_report(const Scenario& s, const RlIteration& it);

/// A preference (dpo/simpo/orpo) or distill step (FrozenModelStep): the step and its parts
/// (policy_s and reference_s, or student_s, teacher_s and logits_s), FLOPs, throughput.
nlohmann::json frozen_step_json(const Scenario& s, const FrozenModelStep& st);

/// `capsim train` for a dpo/simpo/orpo/distill scenario: train_report of the trained
/// model's step (memory with the frozen weights as lines of their own), plus
/// `post_training` (frozen_step_json); engine "analytical".
nlohmann::json frozen_step_report(const Scenario& s, const FrozenModelStep& st);

/// Serving memory of one GPU of one replica.
nlohmann::json inference_memory_json(const Scenario& s, const InferenceMemory& mem);

/// `capsim infer`: latency percentiles, throughput, KV use, the engine knobs in force.
nlohmann::json serving_report(const Scenario& s, const ServingResult& r);
/// The report of replicated runs (simulate_serving_runs): each metric is the median over
/// the runs; the run, memory and utilisation sections are the first run's.
nlohmann::json serving_report(const Scenario& s, const std::vector<ServingResult>& runs);

/// The metric names of validation cases (`ttft_p99_ms`, `throughput_tokens_per_s`, ...)
/// computed from a serving run.
nlohmann::json serving_metrics(const ServingResult& r);
/// Each metric's median over the runs.
nlohmann::json serving_metrics(const std::vector<ServingResult>& runs);

/// Engine activity in `windows` equal windows from the first iteration to the last (needs
/// the run's timeline): the share of replica time busy, KV-cache use while busy, decode and
/// prefill tokens per second. Iterations straddling a boundary count pro rata.
nlohmann::json utilization_over_time(const ServingResult& r, int windows);

/// `capsim train`'s report from the analytical engine: train_report marked
/// "engine": "analytical". Every front end builds it here, so the same scenario gives the
/// same bytes from the CLI and the GUI.
nlohmann::json analytical_train_report(const Scenario& s, const TrainEvaluation& ev);

/// `capsim train --ops`: the operators one microbatch runs (operator_times), each with
/// its time per run and per pass through the model (count x the run's forward, backward and
/// recompute), its share of the pass's computation and its forward rate.
nlohmann::json operators_json(const std::vector<OperatorTime>& rows, int64_t microbatches_per_step);

/// `capsim infer`'s answer when the deployment does not fit (ServingDoesNotFit): the
/// reason and the serving memory that rules it out. "Does not fit" is an answer, not an error.
nlohmann::json serving_does_not_fit_report(const Scenario& s, const std::string& reason);

/// The report's busy_by_part as shares of the busy time, largest first (ties in the report's
/// order): every part, "host" (scheduling time beyond the GPU), "drafts" and "swaps".
std::vector<std::pair<std::string, double>> busy_shares(const nlohmann::json& busy_by_part);

/// `capsim infer --step-*`: one engine iteration of the deployment (`b`: decodes with an equal
/// share of its cached context each, at most one prompt chunk), its time by part in
/// milliseconds (schema capsim-serving-step/1).
nlohmann::json serving_step_report(const Scenario& s, const IterationBatch& b, const ServingStep& st);

/// Serialise deterministically (sorted keys, 2-space indent, trailing newline).
std::string dump(const nlohmann::json& j);

}  // namespace capsim::io
