// Post-training steps with a frozen model beside the trained one: preference optimisation
// (DPO, SimPO, ORPO) and knowledge distillation. Both are training steps of the training
// engine plus the frozen model's forward, composed here.
#include <algorithm>
#include <cmath>

#include "capsim/core/memory.hpp"
#include "capsim/core/model.hpp"
#include "capsim/core/posttrain.hpp"

namespace capsim {

namespace {

double dbl(int64_t v) { return static_cast<double>(v); }

/// Bytes per logit of teacher logits stored or sent: 16-bit, the dtype the teacher's
/// bf16 forward produces them in.
constexpr double kLogitBytes = 2.0;

/// The trained model's step: the plan as a plain training step (mode sft), with the frozen
/// weights `frozen` in memory, on `num_gpus` GPUs.
TrainEvaluation trained_step(const Scenario& s, int64_t num_gpus, const MemoryOptions& frozen, const CostModel& cost) {
  Scenario ts;
  ts.id = s.id;
  ts.model = s.model;
  ts.system = s.system;
  ts.system.num_gpus = num_gpus;
  ts.training = *s.training;
  ts.training->mode = TrainMode::sft;
  ts.training->memory.reference_weights = frozen.reference_weights;
  ts.training->memory.frozen_dense_params = frozen.frozen_dense_params;
  ts.training->memory.frozen_expert_params = frozen.frozen_expert_params;
  return evaluate_training(ts, &cost);
}

/// Fill in the trained step's time, the totals and the throughput.
void finish(FrozenModelStep& out) {
  const TrainingPlan& t = out.trained.plan;
  out.trained_s = out.trained.step->step_s;
  out.step_time_s = out.overlapped ? std::max(out.trained_s, out.frozen_s + out.logits_s)
                                   : out.trained_s + out.frozen_s + out.logits_s;
  out.model_flops_per_step = out.trained.step->model_flops_per_step + out.frozen_flops_per_step;
  out.tokens_per_step = dbl(out.sequences) * dbl(t.seq_len);
  out.throughput_tokens_per_s = out.step_time_s > 0 ? out.tokens_per_step / out.step_time_s : 0;
}

}  // namespace

FrozenModelStep evaluate_preference_step(const Scenario& s, const CostModel& cost) {
  const PreferenceSpec pref = s.preference.value_or(PreferenceSpec{});
  const TrainingPlan& plan = *s.training;
  FrozenModelStep out;
  out.sequences = plan.global_batch;
  out.pairs = plan.global_batch / 2;
  const bool reference = plan.mode == TrainMode::dpo && pref.reference == PreferenceSpec::Reference::model;
  MemoryOptions frozen;
  frozen.reference_weights = reference;
  out.trained = trained_step(s, s.system.num_gpus, frozen, cost);
  if (!out.trained.feasible || !out.trained.step) {
    out.feasible = false;
    out.fail_reason = "the policy's step does not fit: " + out.trained.fail_reason;
    return out;
  }
  if (reference) {
    out.frozen_role = "reference";
    out.frozen_s = forward_pass_seconds(s.model, s.system, out.trained.plan, out.sequences, cost);
    out.frozen_flops_per_step = dbl(out.sequences) * dbl(plan.seq_len) * forward_flops_per_token(s.model, attention_span(plan));
  } else if (plan.mode == TrainMode::dpo) {
    out.notes.push_back("reference log-probs precomputed before training: not part of the step");
  }
  finish(out);
  return out;
}

FrozenModelStep evaluate_distill_step(const Scenario& s, const CostModel& cost) {
  const DistillSpec& d = *s.distill;
  const TrainingPlan& plan = *s.training;
  FrozenModelStep out;
  out.frozen_role = "teacher";
  out.sequences = plan.global_batch;
  const bool split = d.placement == DistillSpec::Placement::split;
  const int64_t student_gpus = split ? s.system.num_gpus - d.teacher_gpus : s.system.num_gpus;
  MemoryOptions frozen;
  if (d.placement == DistillSpec::Placement::colocated) {
    const FrozenParams p = frozen_model_params(d.teacher);
    frozen.frozen_dense_params = p.dense;
    frozen.frozen_expert_params = p.expert;
  }
  out.trained = trained_step(s, student_gpus, frozen, cost);
  if (!out.trained.feasible || !out.trained.step) {
    out.feasible = false;
    out.fail_reason = "the student's step does not fit: " + out.trained.fail_reason;
    return out;
  }
  const TrainingPlan& t = out.trained.plan;
  out.logits_bytes = dbl(out.sequences) * dbl(t.seq_len) * dbl(s.model.vocab) * kLogitBytes;
  const double teacher_flops = dbl(out.sequences) * dbl(t.seq_len) * forward_flops_per_token(d.teacher, attention_span(t));
  switch (d.placement) {
    case DistillSpec::Placement::colocated:
      out.frozen_s = forward_pass_seconds(d.teacher, s.system, t, out.sequences, cost);
      out.frozen_flops_per_step = teacher_flops;
      break;
    case DistillSpec::Placement::split: {
      // The teacher's pool: the student's tp, cp and pp, data parallel over the rest,
      // forward only (no ZeRO sharding of frozen weights).
      SystemSpec tsys = s.system;
      tsys.num_gpus = d.teacher_gpus;
      TrainingPlan tt = t;
      tt.dp = std::max<int64_t>(1, d.teacher_gpus / (t.tp * t.pp * t.cp));
      tt.zero = 0;
      tt.stage_layers.clear();
      const FrozenParams p = frozen_model_params(d.teacher);
      const double weights =
          (p.dense / dbl(t.tp * t.pp) + p.expert / dbl(t.ep * t.etp.value_or(1) * t.pp)) * 2.0;
      if (weights > s.system.gpu.hbm_capacity_bytes) {
        out.feasible = false;
        out.fail_reason = "the teacher's weights take " + std::to_string(weights / kGiB) + " GiB per GPU of " +
                          std::to_string(s.system.gpu.hbm_capacity_bytes / kGiB) + " GiB with tp " +
                          std::to_string(t.tp) + " and pp " + std::to_string(t.pp);
        return out;
      }
      out.frozen_s = forward_pass_seconds(d.teacher, tsys, tt, out.sequences, cost);
      out.frozen_flops_per_step = teacher_flops;
      // Each teacher GPU sends its share of the logits; the smaller pool sets the pace.
      const double senders = dbl(std::max<int64_t>(1, std::min(d.teacher_gpus, student_gpus)));
      out.logits_s = cost.p2p(Bytes(out.logits_bytes / senders), true).value;
      out.overlapped = true;
      break;
    }
    case DistillSpec::Placement::precomputed: {
      out.overlapped = true;
      if (s.system.nvme_gbps_per_node) {
        const double nodes = std::ceil(dbl(s.system.num_gpus) / dbl(std::max<int64_t>(1, s.system.gpus_per_node)));
        out.logits_s = out.logits_bytes / (*s.system.nvme_gbps_per_node * 1e9 * nodes);
      } else {
        out.notes.push_back("system.nvme_gbps_per_node not given: reading the teacher logits is not counted");
      }
      break;
    }
  }
  finish(out);
  return out;
}

}  // namespace capsim
