#pragma once
/// The discrete-event view of one training step: one data-parallel replica's pipeline
/// lowered to a task graph (forward, backward, weight-gradient, send, gradient reduction,
/// parameter gathering, optimizer) in a schedule's order, then executed.

#include <map>
#include <string>
#include <vector>

#include "capsim/core/des.hpp"
#include "capsim/core/step.hpp"

namespace capsim {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved, zb_h1, dualpipe };

std::string_view to_string(PipelineSchedule s);

/// The schedule a plan runs: GPipe or 1F1B as chosen, interleaved when vpp > 1.
PipelineSchedule schedule_of(const TrainingPlan& t);

/// One compute operation of a pipeline rank's program.
struct PipeOp {
  des::TaskKind kind;  ///< forward, backward (input gradient, or the whole backward), weight_grad
  int64_t chunk;
  int64_t microbatch;
  bool operator==(const PipeOp&) const = default;
};

/// One operation of a DualPipe rank: a forward, a backward (whole, or input gradients
/// only with the weight gradient deferred), a deferred weight gradient, or a forward of
/// one phase overlapped with a backward of the other.
struct DualOp {
  enum class Kind { forward, backward, backward_input, weight, forward_backward } kind;
  int phase = 0;   ///< forward's phase (or the backward's when kind is backward*)
  int phase2 = 0;  ///< forward_backward: the backward's phase
};

/// DualPipe's program for `rank` of `pp` with `microbatches` (DeepSeek-V3 report Fig. 5;
/// deepseek-ai/DualPipe): eight phases from forward warm-up through overlapped
/// forward-backward pairs to deferred weight gradients. Phase 0 is the forward direction
/// on the first half of the ranks and the reverse direction on the second half.
std::vector<DualOp> dualpipe_order(int64_t pp, int64_t rank, int64_t microbatches);

/// The order of compute operations on `rank` (Huang et al. 2019 GPipe; Narayanan et al.
/// 2021 1F1B and Megatron-LM's interleaved 1F1B; Qi et al. 2023 ZB-H1, weight gradients of
/// rank r delayed by r microbatches). `extra_warmup` forwards run ahead of the 1F1B and
/// interleaved schedules' own warm-up (Megatron-Core's batch-level expert-parallel overlap
/// adds one, ep_overlap_warmup()).
std::vector<PipeOp> schedule_order(PipelineSchedule s, int64_t pp, int64_t vpp, int64_t rank, int64_t microbatches,
                                   int64_t extra_warmup = 0);

struct DesStep {
  StepBreakdown step;              ///< same keys as the analytical engine; step_s from the run
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  std::vector<double> busy_s;      ///< per pipeline rank: compute stream busy time
  std::vector<double> idle_s;      ///< per pipeline rank: step time minus busy time
  std::vector<double> peak_activation_bytes;  ///< per rank, read off the simulated timeline
  std::map<std::string, double> critical_path_s;  ///< seconds on the critical path by task kind
  double critical_path_bound_s = 0;               ///< longest path with fixed durations
  des::Simulation sim;
  des::Result result;
};

struct DesOptions {
  /// Route pipeline sends over per-direction links with fluid bandwidth sharing (else
  /// fixed-duration transfers).
  bool links = true;
  /// Tasks finished of the step's task graph; none when null.
  ProgressCounter* progress = nullptr;
};

/// Build and run the task graph of given per-chunk costs (one data-parallel replica's
/// pipeline, its gradient reduction, parameter gathering and optimizer). Only
/// `step.step_s` of the breakdown is filled.
DesStep simulate_pipeline(const PipelineCosts& pc, const SystemSpec& sys, const TrainingPlan& t, const CostModel& cost,
                          const StepOptions& opt = {}, const DesOptions& dopt = {});

/// Build and run the step's task graph for a fully resolved plan; the breakdown keys are
/// the analytical engine's with the step time, bubble and throughput from the run.
DesStep des_step(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t, const CostModel& cost,
                 const StepOptions& opt = {}, const DesOptions& dopt = {});

}  // namespace capsim
