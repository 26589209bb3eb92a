// Post-training steps beside a frozen model: preference optimisation (DPO, SimPO, ORPO)
// and distillation. Closed-form oracles against a plain training step of the same layout,
// and the input errors of bad `preference` and `distill` blocks word for word.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "capsim/core/diagnostics.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/model.hpp"
#include "capsim/core/posttrain.hpp"
#include "capsim/core/step.hpp"
#include "capsim/core/train.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/scenario_io.hpp"

namespace capsim {
namespace {

using nlohmann::json;

/// Llama 2 7B on one H100 node, every field fixed, so that two modes share one layout.
json base_case(const std::string& mode, int64_t global_batch) {
  return json{{"id", "posttrain-step"},
              {"kind", "training"},
              {"model", "llama2-7b"},
              {"system", {{"gpu", "h100-sxm5-80gb"}, {"num_gpus", 8}, {"gpus_per_node", 8}}},
              {"training",
               {{"tp", 1}, {"pp", 1}, {"dp", 8}, {"zero", 1}, {"micro_batch", 1}, {"recompute", "selective"},
                {"global_batch", global_batch}, {"seq_len", 2048}, {"precision", "bf16"}, {"mode", mode}}}};
}

Scenario read(const json& c) { return io::scenario_from_json(c, {}, io::EngineKeys::ignore_unknown); }

TrainEvaluation sft(const json& c) {
  const Scenario s = read(c);
  const hw::RooflineCostModel cost(s.system);
  return evaluate_training(s, &cost);
}

FrozenModelStep preference(const json& c) {
  const Scenario s = read(c);
  const hw::RooflineCostModel cost(s.system);
  return evaluate_preference_step(s, cost);
}

// DPO on N pairs: the policy's forward and backward over 2N sequences (3 forwards each) and
// the reference's forward over the same 2N: (2 x 3 + 2 x 1) / 3 = 8/3 of an SFT step's
// FLOPs on N sequences of the same length (Rafailov et al. 2023, Eq. 7).
TEST(PostTrainStep, DpoFlopsAreEightThirdsOfSft) {
  const TrainEvaluation one = sft(base_case("sft", 32));
  const FrozenModelStep dpo = preference(base_case("dpo", 64));
  ASSERT_TRUE(one.feasible && dpo.feasible) << dpo.fail_reason;
  EXPECT_EQ(dpo.pairs, 32);
  EXPECT_EQ(dpo.sequences, 64);
  EXPECT_EQ(dpo.frozen_role, "reference");
  EXPECT_NEAR(dpo.model_flops_per_step / one.step->model_flops_per_step, 8.0 / 3.0, 1e-9);
  // The step is its two parts: the policy's training step on 2N sequences and the
  // reference's forward over them on the same layout.
  EXPECT_DOUBLE_EQ(dpo.step_time_s, dpo.trained_s + dpo.frozen_s);
  const Scenario s = read(base_case("dpo", 64));
  const hw::RooflineCostModel cost(s.system);
  EXPECT_DOUBLE_EQ(dpo.frozen_s, forward_pass_seconds(s.model, s.system, dpo.trained.plan, 64, cost));
  const TrainEvaluation two = sft(base_case("sft", 64));
  EXPECT_DOUBLE_EQ(dpo.trained_s, two.step->step_s);
  // Time follows FLOPs within the cost model's kernel efficiencies.
  EXPECT_NEAR(dpo.step_time_s / one.step->step_s, 8.0 / 3.0, 0.15 * 8.0 / 3.0);
}

// SimPO and ORPO have no reference: twice the sequences of an SFT step, nothing else.
TEST(PostTrainStep, SimpoAndOrpoAreTwiceSft) {
  const TrainEvaluation one = sft(base_case("sft", 32)), two = sft(base_case("sft", 64));
  for (const char* mode : {"simpo", "orpo"}) {
    const FrozenModelStep p = preference(base_case(mode, 64));
    ASSERT_TRUE(p.feasible) << mode << ": " << p.fail_reason;
    EXPECT_EQ(p.frozen_role, "") << mode;
    EXPECT_EQ(p.frozen_s, 0) << mode;
    EXPECT_NEAR(p.model_flops_per_step / one.step->model_flops_per_step, 2.0, 1e-12) << mode;
    EXPECT_DOUBLE_EQ(p.step_time_s, two.step->step_s) << mode;
    EXPECT_DOUBLE_EQ(p.trained.memory.peak().total_bytes, two.memory.peak().total_bytes) << mode;
    EXPECT_EQ(p.trained.memory.peak().reference_weights_bytes, 0) << mode;
  }
}

// DPO's memory is the SFT step's on the same 2N sequences plus the reference's frozen
// 16-bit weights: 2 bytes per parameter, sharded as the policy's weights are.
TEST(PostTrainStep, DpoMemoryIsSftPlusReferenceWeights) {
  for (int zero : {1, 3}) {
    json d = base_case("dpo", 64), f = base_case("sft", 64);
    d["training"]["zero"] = zero;
    f["training"]["zero"] = zero;
    const FrozenModelStep dpo = preference(d);
    const TrainEvaluation two = sft(f);
    ASSERT_TRUE(dpo.feasible) << dpo.fail_reason;
    const StageMemory& m = dpo.trained.memory.peak();
    const double params = static_cast<double>(count_params(read(d).model).total);
    EXPECT_NEAR(m.reference_weights_bytes, 2.0 * params / (zero == 3 ? 8.0 : 1.0), 1e-6 * params) << zero;
    EXPECT_DOUBLE_EQ(m.total_bytes, two.memory.peak().total_bytes + m.reference_weights_bytes) << zero;
    EXPECT_DOUBLE_EQ(m.gradients_bytes, two.memory.peak().gradients_bytes) << zero;
    EXPECT_DOUBLE_EQ(m.optimizer_bytes, two.memory.peak().optimizer_bytes) << zero;
  }
}

// Reference log-probs computed before training: neither the reference's weights nor its
// forward are in the step, which is then SimPO's.
TEST(PostTrainStep, PrecomputedReferenceCostsNothing) {
  json c = base_case("dpo", 64);
  c["training"]["preference"] = {{"pairs_per_step", 32}, {"reference", "precomputed"}};
  const FrozenModelStep pre = preference(c), simpo = preference(base_case("simpo", 64));
  ASSERT_TRUE(pre.feasible);
  EXPECT_EQ(pre.frozen_s, 0);
  EXPECT_EQ(pre.trained.memory.peak().reference_weights_bytes, 0);
  EXPECT_DOUBLE_EQ(pre.step_time_s, simpo.step_time_s);
  EXPECT_FALSE(pre.notes.empty());
}

// An automatic micro batch is chosen with the reference's weights in memory: a layout that
// fits without them may not fit with them.
TEST(PostTrainStep, AutoFieldsResolveWithTheReferenceInMemory) {
  json c = base_case("dpo", 64);
  c["training"]["micro_batch"] = "auto";
  c["training"]["recompute"] = "auto";
  const FrozenModelStep dpo = preference(c);
  ASSERT_TRUE(dpo.feasible);
  EXPECT_TRUE(dpo.trained.memory.fits());
  EXPECT_GT(dpo.trained.memory.peak().reference_weights_bytes, 0);
}

std::vector<Issue> issues_of(const json& doc) {
  try {
    (void)read(doc);
  } catch (const InputError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "expected an InputError";
  return {};
}

void expect_issue(const json& doc, const std::string& pointer, const std::string& rule) {
  const std::vector<Issue> issues = issues_of(doc);
  const bool found =
      std::any_of(issues.begin(), issues.end(), [&](const Issue& i) { return i.pointer == pointer && i.rule == rule; });
  std::string all;
  for (const Issue& i : issues) all += i.pointer + ": " + i.rule + "\n";
  EXPECT_TRUE(found) << "want " << pointer << ": " << rule << "\ngot\n" << all;
}

TEST(PostTrainStep, BadPreferenceBlocksAreReportedWordForWord) {
  json c = base_case("dpo", 64);
  c["training"]["preference"] = {{"pairs_per_step", 64}};
  expect_issue(c, "/training/preference/pairs_per_step",
               "must be half of training.global_batch (64 sequences: a chosen and a rejected sequence per pair)");

  c = base_case("dpo", 63);
  expect_issue(c, "/training/global_batch", "must be even in mode \"dpo\": each pair is a chosen and a rejected sequence");

  c = base_case("dpo", 64);
  c["training"]["preference"] = {{"reference", "none"}};
  expect_issue(c, "/training/preference/reference",
               "must be \"model\" or \"precomputed\" in mode \"dpo\": its loss compares the policy's log-probs with the "
               "reference's");

  c = base_case("simpo", 64);
  c["training"]["preference"] = {{"reference", "model"}};
  expect_issue(c, "/training/preference/reference", "must be \"none\" in mode \"simpo\": its objective has no reference model");

  c = base_case("dpo", 64);
  c["training"]["preference"] = {{"reference", "frozen"}};
  expect_issue(c, "/training/preference/reference", "must be one of \"model\", \"precomputed\", \"none\"");

  c = base_case("dpo", 64);
  c["training"]["preference"] = {{"response_tokens", {{"mean", 900}, {"max", 512}}}};
  expect_issue(c, "/training/preference/response_tokens", "mean must not exceed max");

  c = base_case("dpo", 64);
  c["training"]["preference"] = {{"prompt_tokens", "long"}};
  expect_issue(c, "/training/preference/prompt_tokens", "must be a number >= 1 or {\"mean\", \"dist\", \"max\"}");

  c = base_case("dpo", 64);
  c["training"]["preference"] = 3;
  expect_issue(c, "/training/preference", "must be an object or \"auto\"");

  c = base_case("sft", 64);
  c["training"]["preference"] = {{"pairs_per_step", 32}};
  expect_issue(c, "/training/preference", "is read only when mode is \"dpo\", \"simpo\" or \"orpo\"");

  c = base_case("dpo", 64);
  c["training"]["preference"] = {{"pairs", 32}};
  const std::vector<Issue> issues = issues_of(c);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues.front().pointer, "/training/preference/pairs");
}

json distill_case(const std::string& placement) {
  json c = base_case("distill", 64);
  c["training"]["zero"] = 2;  // room for a 13B teacher beside a 7B student on 80 GB
  c["training"]["distill"] = {{"teacher", "llama2-13b"}, {"placement", placement}};
  if (placement == "split") {
    c["training"]["distill"]["teacher_gpus"] = 4;
    c["training"]["dp"] = 4;
  }
  return c;
}

FrozenModelStep distill(const json& c) {
  const Scenario s = read(c);
  const hw::RooflineCostModel cost(s.system);
  return evaluate_distill_step(s, cost);
}

// Colocated: the student's SFT step plus the teacher's forward over the same sequences on
// the student's layout; FLOPs 3 x student + 1 x teacher forward; memory the SFT step's plus
// the teacher's 16-bit weights (tp = pp = 1: every teacher parameter, 2 bytes).
TEST(PostTrainStep, ColocatedDistillIsStudentPlusTeacherForward) {
  const json c = distill_case("colocated");
  const FrozenModelStep d = distill(c);
  json f = base_case("sft", 64);
  f["training"]["zero"] = 2;
  const TrainEvaluation plain = sft(f);
  ASSERT_TRUE(d.feasible) << d.fail_reason;
  const Scenario s = read(c);
  const hw::RooflineCostModel cost(s.system);
  EXPECT_DOUBLE_EQ(d.trained_s, plain.step->step_s);
  EXPECT_DOUBLE_EQ(d.frozen_s, forward_pass_seconds(s.distill->teacher, s.system, d.trained.plan, 64, cost));
  EXPECT_DOUBLE_EQ(d.step_time_s, d.trained_s + d.frozen_s);
  const double student = forward_flops_per_token(s.model, 2048), teacher = forward_flops_per_token(s.distill->teacher, 2048);
  EXPECT_NEAR(d.model_flops_per_step / plain.step->model_flops_per_step, 1.0 + teacher / (3.0 * student), 1e-9);
  const StageMemory& m = d.trained.memory.peak();
  const double teacher_params = static_cast<double>(count_params(s.distill->teacher).total);
  EXPECT_NEAR(m.frozen_weights_bytes, 2.0 * teacher_params, 1e-6 * teacher_params);
  EXPECT_DOUBLE_EQ(m.total_bytes, plain.memory.peak().total_bytes + m.frozen_weights_bytes);
  // The larger teacher's forward costs more than a third of the smaller student's step.
  EXPECT_GT(d.frozen_s, d.trained_s / 3.0);
}

// Precomputed logits: no teacher on the GPUs; the 16-bit logits of the whole vocabulary
// are read from NVMe beside the step (step = max), and not counted without a read rate.
TEST(PostTrainStep, PrecomputedDistillReadsLogits) {
  json c = distill_case("precomputed");
  json f = base_case("sft", 64);
  f["training"]["zero"] = 2;
  const TrainEvaluation plain = sft(f);
  const FrozenModelStep unknown = distill(c);
  ASSERT_TRUE(unknown.feasible);
  EXPECT_EQ(unknown.frozen_s, 0);
  EXPECT_EQ(unknown.logits_s, 0);
  EXPECT_FALSE(unknown.notes.empty());
  EXPECT_DOUBLE_EQ(unknown.step_time_s, plain.step->step_s);
  EXPECT_EQ(unknown.trained.memory.peak().frozen_weights_bytes, 0);
  EXPECT_DOUBLE_EQ(unknown.logits_bytes, 64.0 * 2048 * 32000 * 2);
  c["system"]["nvme_gbps_per_node"] = 1.0;  // slow enough that the read sets the pace
  const FrozenModelStep slow = distill(c);
  EXPECT_DOUBLE_EQ(slow.logits_s, slow.logits_bytes / 1e9);
  EXPECT_DOUBLE_EQ(slow.step_time_s, std::max(slow.trained_s, slow.logits_s));
  EXPECT_DOUBLE_EQ(slow.step_time_s, slow.logits_s);
}

// Split: the student trains on the GPUs the teacher leaves while the teacher scores the next
// batch on its own: step = max(student, teacher forward + logits transfer).
TEST(PostTrainStep, SplitDistillOverlapsTheTeacher) {
  const FrozenModelStep d = distill(distill_case("split"));
  ASSERT_TRUE(d.feasible) << d.fail_reason;
  EXPECT_TRUE(d.overlapped);
  EXPECT_EQ(d.trained.plan.dp, 4);
  EXPECT_EQ(d.trained.memory.peak().frozen_weights_bytes, 0);
  EXPECT_GT(d.frozen_s, 0);
  EXPECT_GT(d.logits_s, 0);
  EXPECT_DOUBLE_EQ(d.step_time_s, std::max(d.trained_s, d.frozen_s + d.logits_s));
}

TEST(PostTrainStep, BadDistillBlocksAreReportedWordForWord) {
  json c = base_case("distill", 64);
  expect_issue(c, "/training/distill", "is required when mode is \"distill\" (teacher, placement)");

  c = distill_case("colocated");
  c["training"]["distill"].erase("teacher");
  expect_issue(c, "/training/distill/teacher", "is required (an HF config object or a model preset)");

  c = distill_case("colocated");
  c["training"]["distill"]["placement"] = "remote";
  expect_issue(c, "/training/distill/placement", "must be one of \"colocated\", \"split\", \"precomputed\"");

  c = distill_case("split");
  c["training"]["distill"].erase("teacher_gpus");
  expect_issue(c, "/training/distill/teacher_gpus", "is required (an integer)");

  c = distill_case("split");
  c["training"]["distill"]["teacher_gpus"] = 8;
  expect_issue(c, "/training/distill/teacher_gpus", "must be less than num_gpus (8): the student needs GPUs of its own");

  c = distill_case("split");
  c["training"]["tp"] = 2;
  c["training"]["dp"] = 2;
  c["training"]["distill"]["teacher_gpus"] = 3;
  c["system"]["num_gpus"] = 7;
  expect_issue(c, "/training/distill/teacher_gpus", "must be a multiple of tp*pp*cp = 2 (the teacher runs with the student's tp, pp and cp)");

  c = distill_case("colocated");
  c["training"]["distill"]["teacher_gpus"] = 4;
  expect_issue(c, "/training/distill/teacher_gpus", "is read only when placement is \"split\"");

  c = distill_case("colocated");
  c["training"]["distill"]["online"] = true;
  expect_issue(c, "/training/distill/online",
               "is not simulated: the student's own generations (on-policy distillation) need a rollout");

  c = distill_case("colocated");
  c["training"]["tp"] = 2;
  c["training"]["dp"] = 4;
  c["training"]["distill"]["teacher"] = "gpt2-xl";
  expect_issue(c, "/training/distill/teacher",
               "the teacher's attention heads (25) must be divisible by tp (2): it runs with the student's tensor parallelism");

  c = base_case("sft", 64);
  c["training"]["distill"] = {{"teacher", "llama2-13b"}, {"placement", "colocated"}};
  expect_issue(c, "/training/distill", "is read only when mode is \"distill\"");
}

// ZeRO-Offload: the optimizer states leave the GPU, so its memory drops by exactly their
// bytes and by nothing else.
TEST(PostTrainStep, OffloadDropsExactlyTheOptimizerBytes) {
  json c = base_case("sft", 64);
  const TrainEvaluation on_gpu = sft(c);
  c["training"]["offload"] = {{"optimizer", "cpu"}, {"params", "none"}, {"gradients", "none"}, {"activations", "none"}};
  const TrainEvaluation off = sft(c);
  const StageMemory &a = on_gpu.memory.peak(), &b = off.memory.peak();
  EXPECT_GT(a.optimizer_bytes, 0);
  EXPECT_EQ(b.optimizer_bytes, 0);
  EXPECT_DOUBLE_EQ(a.total_bytes - b.total_bytes, a.optimizer_bytes);
  EXPECT_DOUBLE_EQ(a.weights_bytes, b.weights_bytes);
  EXPECT_DOUBLE_EQ(a.gradients_bytes, b.gradients_bytes);
  EXPECT_DOUBLE_EQ(a.activations_bytes, b.activations_bytes);
}

// The offloaded step moves this rank's 16-bit gradients down and 16-bit parameters up over
// PCIe (Gen5 x16, 63 GB/s on an H100 when "auto"), and the step is at least those transfers.
TEST(PostTrainStep, OffloadStepCoversThePcieTransfers) {
  json c = base_case("sft", 64);
  c["training"]["offload"] = {{"optimizer", "cpu"}};
  const TrainEvaluation off = sft(c);
  ASSERT_TRUE(off.step);
  // This rank's ZeRO-1 shard: the parameters over dp 8 (to the 1e-6 the per-layer count
  // differs from the model total by).
  const double local = static_cast<double>(count_params(read(c).model).total) / 8.0;
  const double transfer = 2.0 * local * 2.0 / 63e9;
  EXPECT_NEAR(off.step->offload_d2h_s + off.step->offload_h2d_s, transfer, 1e-5 * transfer);
  EXPECT_DOUBLE_EQ(off.step->offload_d2h_s, off.step->offload_h2d_s);
  EXPECT_GE(off.step->step_s, off.step->offload_d2h_s + off.step->offload_h2d_s);
  const double cpu = local / (kCpuAdamParamsPerSecondPerNode / 8.0);
  EXPECT_NEAR(off.step->offload_cpu_s, cpu, 1e-5 * cpu);
  EXPECT_DOUBLE_EQ(off.step->optimizer_s, off.step->offload_d2h_s + off.step->offload_cpu_s + off.step->offload_h2d_s);
  // A stated, slower link: the transfers scale with it.
  c["system"]["pcie_gbps_per_gpu"] = 31.5;
  const TrainEvaluation slow = sft(c);
  EXPECT_NEAR(slow.step->offload_d2h_s, 2.0 * off.step->offload_d2h_s, 1e-12);
  EXPECT_GT(slow.step->step_s, off.step->step_s);
  EXPECT_GE(slow.step->step_s, slow.step->offload_d2h_s + slow.step->offload_h2d_s);
}

TEST(PostTrainStep, BadOffloadBlocksAreReportedWordForWord) {
  json c = base_case("sft", 64);
  c["training"]["offload"] = {{"optimizer", "nvme"}};
  expect_issue(c, "/training/offload/optimizer", "is not simulated: only the optimizer offloads, to \"cpu\" (ZeRO-Offload)");
  c["training"]["offload"] = {{"params", "cpu"}};
  expect_issue(c, "/training/offload/params", "is not simulated: only the optimizer offloads, to \"cpu\" (ZeRO-Offload)");
  c["training"]["offload"] = {{"optimizer", "gpu"}};
  expect_issue(c, "/training/offload/optimizer", "must be one of \"none\", \"cpu\", \"nvme\", \"auto\"");
  c["training"]["offload"] = "cpu";
  expect_issue(c, "/training/offload", "must be an object or \"auto\"");
  c = base_case("sft", 64);
  c["system"]["pcie_gbps_per_gpu"] = -1;
  expect_issue(c, "/system/pcie_gbps_per_gpu", "must be a number > 0 (GB/s) or \"auto\"");
  c["system"]["pcie_gbps_per_gpu"] = "auto";
  EXPECT_NO_THROW((void)read(c));
}

// "auto" where a post-training block or key was not published (SCHEMA.md): what the rest of
// the case and the mode imply, the same prediction as writing that out.
TEST(PostTrainStep, AutoBlocksAndKeysResolveAsWrittenOut) {
  // Preference: pairs from global_batch, the mode's reference, lengths unused by the step.
  json given = base_case("dpo", 64);
  given["training"]["preference"] = {{"pairs_per_step", 32}, {"reference", "model"}};
  json c = base_case("dpo", 64);
  c["training"]["preference"] = {{"pairs_per_step", "auto"}, {"prompt_tokens", "auto"}, {"response_tokens", "auto"},
                                 {"reference", "auto"}};
  EXPECT_DOUBLE_EQ(preference(c).step_time_s, preference(given).step_time_s);
  EXPECT_EQ(read(c).preference->auto_keys,
            (std::vector<std::string>{"pairs_per_step", "prompt_tokens", "response_tokens", "reference"}));
  c["training"]["preference"] = "auto";
  EXPECT_EQ(read(c).preference->auto_keys, std::vector<std::string>{"preference"});
  EXPECT_DOUBLE_EQ(preference(c).step_time_s, preference(given).step_time_s);
  json simpo = base_case("simpo", 64);
  simpo["training"]["preference"] = {{"reference", "auto"}};
  EXPECT_EQ(read(simpo).preference->reference, PreferenceSpec::Reference::none);

  // Distillation: colocated (torchtune's KD recipe), offline; split with the pool the
  // student's layout leaves.
  c = distill_case("colocated");
  c["training"]["distill"]["placement"] = "auto";
  c["training"]["distill"]["online"] = "auto";
  EXPECT_DOUBLE_EQ(distill(c).step_time_s, distill(distill_case("colocated")).step_time_s);
  EXPECT_EQ(read(c).distill->auto_keys, (std::vector<std::string>{"placement", "online"}));
  c = distill_case("split");
  c["training"]["distill"]["teacher_gpus"] = "auto";
  EXPECT_EQ(read(c).distill->teacher_gpus, 4);
  EXPECT_DOUBLE_EQ(distill(c).step_time_s, distill(distill_case("split")).step_time_s);
  c["training"]["micro_batch"] = "auto";  // a micro batch left open does not hide the pool
  EXPECT_EQ(read(c).distill->teacher_gpus, 4);
  c["training"]["dp"] = 8;
  expect_issue(c, "/training/distill/teacher_gpus",
               "needs the student's layout stated (tp, pp, cp, dp) with GPUs left over for the teacher");
  c["training"].erase("dp");  // nor does an absent dp say it
  expect_issue(c, "/training/distill/teacher_gpus",
               "needs the student's layout stated (tp, pp, cp, dp) with GPUs left over for the teacher");
  // A stated pool the student's layout does not match: the rule names the pool.
  c = distill_case("split");
  c["training"]["dp"] = 8;
  expect_issue(c, "/system/num_gpus",
               "tp*pp*dp*cp = 1*1*8*1 = 8 must equal the student's GPUs (num_gpus 8 less distill.teacher_gpus 4 = 4)");

  // Offload: nothing offloaded.
  const double plain = sft(base_case("sft", 64)).step->step_s;
  c = base_case("sft", 64);
  c["training"]["offload"] = "auto";
  EXPECT_DOUBLE_EQ(sft(c).step->step_s, plain);
  c["training"]["offload"] = {{"optimizer", "auto"}, {"params", "auto"}, {"gradients", "auto"}, {"activations", "auto"}};
  EXPECT_DOUBLE_EQ(sft(c).step->step_s, plain);

  // LoRA: the framework's defaults; QLoRA's base in NF4.
  c = base_case("lora", 64);
  c["training"]["lora"] = "auto";
  json keys = base_case("lora", 64);
  keys["training"]["lora"] = {{"rank", "auto"}, {"targets", "auto"}};
  EXPECT_EQ(read(c).training->lora, read(keys).training->lora);
  c["training"]["mode"] = "qlora";
  keys["training"]["mode"] = "qlora";
  EXPECT_EQ(read(c).training->lora, read(keys).training->lora);
  EXPECT_LT(read(c).training->lora->base_bytes_per_param, 1.0);
}

}  // namespace
}  // namespace capsim
