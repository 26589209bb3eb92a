// Post-training: an RL iteration composed from the serving simulator and the training
// engine. Closed-form identities of the composition, the length distribution, and the
// input errors of bad `rl` blocks word for word.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "capsim/core/diagnostics.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/model.hpp"
#include "capsim/core/step.hpp"
#include "capsim/core/posttrain.hpp"
#include "capsim/core/serving.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"

namespace capsim {
namespace {

using nlohmann::json;

/// A case of posttraining-public.json by id.
json rl_case(const std::string& id) {
  const json doc =
      io::read_json_file(std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "validation" / "posttraining-public.json");
  for (const json& c : doc["cases"])
    if (c["id"] == id) return c;
  ADD_FAILURE() << "no case " << id;
  return json::object();
}

const char* kColocated = "nemorl-v0.5-h100-bf16-grpo-llama-3.1-8b-onpolicy-16gpu";
const char* kSplit = "nemorl-v0.5-h100-bf16-grpo-llama-3.1-8b-1off-16gpu";

Scenario read(const json& c) { return io::scenario_from_json(c, {}, io::EngineKeys::ignore_unknown); }

RlIteration run(const json& c) {
  const Scenario s = read(c);
  const hw::RooflineCostModel cost(s.system);
  return evaluate_rl_iteration(s, cost);
}

TEST(PostTrain, ColocatedStepIsTheSumOfItsPhases) {
  const RlIteration it = run(rl_case(kColocated));
  ASSERT_TRUE(it.feasible) << it.fail_reason;
  for (double p : {it.generation_s, it.scoring_s, it.training_s, it.resharding_s, it.offload_s}) EXPECT_GT(p, 0);
  EXPECT_DOUBLE_EQ(it.step_time_s, it.generation_s + it.scoring_s + it.training_s + it.resharding_s + it.offload_s);
  EXPECT_DOUBLE_EQ(it.throughput_tokens_per_s, it.tokens_per_step / it.step_time_s);
  EXPECT_EQ(it.samples, 64 * 32);
  EXPECT_EQ(it.rollout_replicas, 16);
  EXPECT_EQ(it.mini_batches, 4);
  EXPECT_DOUBLE_EQ(it.training_s, 4 * it.update_step_s);
  // GRPO: the actor's old-policy log-probs and the reference's, same model: two forwards,
  // and the reference's weights swapped in and out.
  EXPECT_DOUBLE_EQ(it.scoring_s, 2 * it.forward_pass_s + it.reference_swap_s);
  const double largest = std::max({it.generation_s, it.scoring_s, it.training_s, it.resharding_s, it.offload_s});
  EXPECT_EQ(it.bottleneck, largest == it.generation_s ? "generation" : largest == it.training_s ? "training" : "scoring");
}

// A prompt's group_size samples are consecutive requests sharing one prefix id, so the
// engine's prefix cache prefills the prompt once per group (NeMo RL enables vLLM's prefix
// caching and repeats each prompt group_size times): with long prompts the same samples
// generate sooner in groups of 32 than as 2048 distinct prompts.
TEST(PostTrain, GroupSamplesShareTheirPromptThroughThePrefixCache) {
  RlSpec rl;
  rl.group_size = 4;
  const std::vector<TraceRequest> trace = rl_rollout_trace(rl, 300, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14});
  ASSERT_EQ(trace.size(), 10u);
  for (size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(trace[i].prefix_id, "prompt-" + std::to_string(i / 4)) << i;
    EXPECT_EQ(trace[i].prefix_tokens, 300);
    EXPECT_EQ(trace[i].input_tokens, 300);
    EXPECT_EQ(trace[i].output_tokens, static_cast<int64_t>(5 + i));
    EXPECT_EQ(trace[i].arrival_s, 0.0);
  }

  json grouped = rl_case(kColocated);
  grouped["training"]["rl"]["prompt_tokens"] = 2048;
  json distinct = grouped;
  distinct["training"]["rl"]["prompts_per_step"] = 64 * 32;
  distinct["training"]["rl"]["group_size"] = 1;
  const RlIteration g = run(grouped), d = run(distinct);
  ASSERT_TRUE(g.feasible && d.feasible) << g.fail_reason << d.fail_reason;
  EXPECT_EQ(g.samples, d.samples);
  EXPECT_EQ(g.longest_response, d.longest_response);
  EXPECT_LT(g.generation_s, d.generation_s);
}

TEST(PostTrain, SplitAsyncStepIsTheSlowerPoolPlusRefit) {
  const RlIteration it = run(rl_case(kSplit));
  ASSERT_TRUE(it.feasible) << it.fail_reason;
  EXPECT_EQ(it.rollout_replicas, 8);
  EXPECT_DOUBLE_EQ(it.step_time_s, std::max(it.generation_s, it.scoring_s + it.training_s) + it.resharding_s);
  // Separate pools: nothing is offloaded between phases.
  EXPECT_EQ(it.offload_s, 0);
  EXPECT_EQ(it.offload_bytes_per_gpu, 0);
  // On-policy on split pools: nothing overlaps. The on-policy rollout runs the engine's
  // library class (vLLM's LLM: 1,024 sequences on an H100), the asynchronous one its async
  // class built from engine arguments, with the scheduler's own 128.
  json c = rl_case(kSplit);
  c["training"]["rl"]["async_staleness"] = 0;
  const RlIteration on = run(c);
  EXPECT_DOUBLE_EQ(on.step_time_s, on.generation_s + on.scoring_s + on.training_s + on.resharding_s);
  EXPECT_LT(on.generation_s, it.generation_s);
  EXPECT_GT(on.step_time_s, it.step_time_s);
}

// NeMo RL's async collector keeps k iterations' prompt groups in flight: with staleness k > 1
// the engine serves k iterations' samples together and each iteration takes 1/k of their
// makespan, which is exactly a k-times-larger batch's generation over k. Staleness 0 and 1,
// and colocated runs, keep one iteration's batch.
TEST(PostTrain, DeepStalenessSharesTheRolloutMakespan) {
  RlSpec rl;
  rl.placement = RlSpec::Placement::split;
  for (auto [k, want] : {std::pair<int64_t, int64_t>{0, 1}, {1, 1}, {2, 2}, {8, 8}}) {
    rl.async_staleness = k;
    EXPECT_EQ(rl_rollout_inflight_iterations(rl), want) << k;
  }
  rl.placement = RlSpec::Placement::colocated;
  rl.async_staleness = 8;
  EXPECT_EQ(rl_rollout_inflight_iterations(rl), 1);

  json c = rl_case(kSplit);
  c["training"]["rl"]["async_staleness"] = 3;
  const RlIteration deep = run(c);
  EXPECT_EQ(deep.rollout_inflight_iterations, 3);
  json big = rl_case(kSplit);
  big["training"]["rl"]["prompts_per_step"] = 3 * big["training"]["rl"]["prompts_per_step"].get<int64_t>();
  const RlIteration batch = run(big);
  EXPECT_DOUBLE_EQ(deep.generation_s, batch.generation_s / 3);
  EXPECT_LT(deep.generation_s, run(rl_case(kSplit)).generation_s);
}

// The rollout runs without per-token gaps (simulate_serving's record_token_gaps off). On
// random small RL configurations -- batch, group, lengths, staleness, replicas, KV room
// tight enough to preempt -- the iteration's generation phase is exactly what the
// straightforward run, recording every gap, says; and the two runs agree on every request.
TEST(PostTrain, RolloutWithoutTokenGapsIsExactlyTheFullRun) {
  std::mt19937_64 rng(20261201);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int preempted = 0, feasible = 0;
  for (int trial = 0; trial < 24; ++trial) {
    json c = rl_case(kSplit);
    json& rl = c["training"]["rl"];
    rl["prompts_per_step"] = pick(1, 12);
    rl["group_size"] = pick(1, 12);
    const int64_t mean = pick(8, 2000);
    rl["response_tokens"] = {{"mean", mean}, {"max", mean + pick(0, 2 * mean)}};
    if (pick(0, 3) == 0) rl["response_tokens"]["dist"] = "fixed";
    rl["max_total_tokens"] = pick(0, 1) ? 4096 : 1024;
    rl["async_staleness"] = pick(0, 4);
    rl["gpus"]["rollout"] = int64_t{1} << pick(0, 3);
    c["system"]["num_gpus"] = rl["gpus"]["rollout"].get<int64_t>() + rl["gpus"]["train"].get<int64_t>();
    rl["rollout"]["engine"]["gpu_memory_utilization"] = std::vector<double>{0.22, 0.3, 0.8}[pick(0, 2)];
    SCOPED_TRACE(rl.dump());
    Scenario s;
    try {
      s = read(c);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    const hw::RooflineCostModel cost(s.system);
    const RlIteration it = evaluate_rl_iteration(s, cost);
    if (!it.update.feasible) continue;

    // The rollout as posttrain.cpp builds it, run the straightforward way.
    Scenario gs;
    gs.id = s.id;
    gs.model = s.model;
    gs.system = s.system;
    gs.system.num_gpus = s.rl->rollout_gpus;
    InferencePlan p = s.rl->rollout;
    p.replicas = it.rollout_replicas;
    p.llm_class = true;  // driven through the engine's library class
    // or, asynchronous, through its async class built from engine arguments
    p.engine_context = rl_asynchronous(*s.rl);
    p.workload = ServingWorkload{};
    p.workload.mode = ServingWorkload::Mode::trace;
    const std::vector<int64_t> lengths =
        rl_response_lengths(*s.rl, it.samples * rl_rollout_inflight_iterations(*s.rl));
    p.workload.num_requests = static_cast<int64_t>(lengths.size());
    const int64_t prompt = std::max<int64_t>(1, std::llround(rl_prompt_tokens(*s.rl)));
    // A prompt's group_size samples share it through the prefix cache.
    for (size_t i = 0; i < lengths.size(); ++i)
      p.workload.trace.push_back(
          {0.0, prompt, lengths[i], "prompt-" + std::to_string(static_cast<int64_t>(i) / s.rl->group_size), prompt});
    gs.inference = p;
    ServingResult full, fast;
    try {
      full = simulate_serving(gs, cost, kServingSeed, false, TokenGaps::per_request);
    } catch (const ServingDoesNotFit& e) {
      EXPECT_FALSE(it.feasible);
      EXPECT_EQ(it.fail_reason, std::string("the rollout does not fit: ") + e.what());
      continue;
    }
    ASSERT_TRUE(it.feasible) << it.fail_reason;
    ++feasible;
    fast = simulate_serving(gs, cost, kServingSeed, false, TokenGaps::none);
    EXPECT_EQ(it.generation_s, full.duration_s / static_cast<double>(it.rollout_inflight_iterations));
    EXPECT_EQ(it.rollout_iterations, full.iterations);
    EXPECT_EQ(it.rollout_preemptions, full.preemptions);
    EXPECT_EQ(it.rollout_peak_kv_utilization, full.peak_kv_utilization);
    EXPECT_EQ(fast.duration_s, full.duration_s);
    EXPECT_EQ(fast.iterations, full.iterations);
    EXPECT_EQ(fast.preemptions, full.preemptions);
    EXPECT_EQ(fast.peak_kv_utilization, full.peak_kv_utilization);
    EXPECT_EQ(fast.ep, full.ep);
    EXPECT_EQ(fast.attention_dp, full.attention_dp);
    EXPECT_EQ(fast.engine.max_num_seqs, full.engine.max_num_seqs);
    ASSERT_EQ(fast.requests.size(), full.requests.size());
    for (size_t i = 0; i < full.requests.size(); ++i) {
      const RequestResult &a = fast.requests[i], &b = full.requests[i];
      EXPECT_EQ(a.arrival, b.arrival);
      EXPECT_EQ(a.input, b.input);
      EXPECT_EQ(a.output, b.output);
      EXPECT_EQ(a.first_token, b.first_token);
      EXPECT_EQ(a.finish, b.finish);
      EXPECT_EQ(a.preemptions, b.preemptions);
      EXPECT_TRUE(a.itl.empty());
      EXPECT_FALSE(b.output > 1 && b.itl.empty());
    }
    EXPECT_EQ(fast.token_gaps.total, 0);
    EXPECT_GT(full.token_gaps.total, 0);
    preempted += full.preemptions > 0 ? 1 : 0;
  }
  // The draw covers runs that fit, and runs whose KV cache ran out mid-rollout.
  EXPECT_GE(feasible, 12);
  EXPECT_GE(preempted, 4);
}

// Twice the prompts, everything else fixed (mini_batches auto): twice the optimizer steps
// of the same update, the forward pass over twice the microbatches, and the rollout
// exactly what the serving simulator says for the doubled batch.
TEST(PostTrain, DoublingPromptsScalesThePhasesAsTheEnginesSay) {
  json c = rl_case(kColocated);
  c["training"]["rl"]["mini_batches"] = "auto";
  const RlIteration one = run(c);
  c["training"]["rl"]["prompts_per_step"] = 128;
  const Scenario s2 = read(c);
  const hw::RooflineCostModel cost(s2.system);
  const RlIteration two = evaluate_rl_iteration(s2, cost);
  ASSERT_TRUE(one.feasible && two.feasible);
  EXPECT_EQ(two.mini_batches, 2 * one.mini_batches);
  EXPECT_DOUBLE_EQ(two.update_step_s, one.update_step_s);
  EXPECT_DOUBLE_EQ(two.training_s, 2 * one.training_s);
  // pp 2, dp 8, micro batch 1: 2048 samples are 256 microbatches, 4096 are 512.
  EXPECT_NEAR(two.forward_pass_s / one.forward_pass_s, (512.0 + 1) / (256.0 + 1), 1e-12);
  EXPECT_DOUBLE_EQ(two.tokens_per_step, 2 * one.tokens_per_step);
  Scenario g;
  g.model = s2.model;
  g.system = s2.system;
  InferencePlan p = s2.rl->rollout;
  p.replicas = 16;
  p.workload.mode = ServingWorkload::Mode::trace;
  // 128 prompts of 128 tokens, each answered 32 times through the prefix cache.
  const std::vector<int64_t> lengths = rl_response_lengths(*s2.rl, 4096);
  for (size_t i = 0; i < lengths.size(); ++i)
    p.workload.trace.push_back({0.0, 128, lengths[i], "prompt-" + std::to_string(i / 32), 128});
  p.workload.num_requests = 4096;
  g.inference = p;
  EXPECT_DOUBLE_EQ(two.generation_s, simulate_serving(g, cost).duration_s);
  EXPECT_GT(two.generation_s, one.generation_s);
}

// The truncated exponential keeps the published mean, and a batch of thousands holds a
// sample at (or next to) the cap: the rollout waits for it.
TEST(PostTrain, ResponseLengthsKeepTheMeanAndReachTheCap) {
  RlSpec rl;
  rl.response_mean = 1019;
  rl.response_max = 4096;
  rl.max_total_tokens = 4096;
  rl.prompt_tokens = 128;
  EXPECT_DOUBLE_EQ(rl_response_cap(rl), 4096 - 128);
  const double theta = rl_response_scale(rl);
  EXPECT_NEAR(theta * -std::expm1(-rl_response_cap(rl) / theta), 1019, 1e-6);
  const std::vector<int64_t> l = rl_response_lengths(rl, 2048);
  const double mean = std::accumulate(l.begin(), l.end(), 0.0) / static_cast<double>(l.size());
  EXPECT_NEAR(mean, 1019, 0.01 * 1019);
  EXPECT_EQ(*std::max_element(l.begin(), l.end()), 3968);
  // Fixed lengths and a mean at the cap: every sample alike.
  rl.response_fixed = true;
  for (int64_t x : rl_response_lengths(rl, 5)) EXPECT_EQ(x, 1019);
  rl.response_fixed = false;
  rl.response_mean = 3968;
  EXPECT_EQ(rl_response_scale(rl), 0);
  for (int64_t x : rl_response_lengths(rl, 5)) EXPECT_EQ(x, 3968);
}

TEST(PostTrain, AutoPromptIsTheDocumentedDefault) {
  const RlIteration it = run(rl_case(kColocated));
  EXPECT_TRUE(it.prompt_auto);
  EXPECT_DOUBLE_EQ(it.prompt_tokens, kRlAutoPromptTokens);
  EXPECT_EQ(it.train_seq_len, std::llround(kRlAutoPromptTokens + 1019));
}

// Split refit: each rollout GPU receives its engine shard of the bf16 weights over the
// network. Colocated refit: every trainer rank exports the whole model (Megatron-Bridge
// stream_weights_megatron_to_hf, "All ranks receive the full tensors"), so each GPU
// receives the model less its own shard: Llama 3.1 8B on pp 2 (tp 1) holds half of it.
TEST(PostTrain, RefitBytesFollowTheExportPath) {
  const json c = rl_case(kColocated);
  const Scenario s = read(c);
  const double total = static_cast<double>(count_params(s.model).total);
  const RlIteration co = run(c), sp = run(rl_case(kSplit));
  EXPECT_DOUBLE_EQ(sp.refit_bytes_per_gpu, total * 2.0 / 1.0);  // rollout tp 1
  EXPECT_NEAR(co.refit_bytes_per_gpu, total * 2.0 / 2.0, 1.0);
  // Sixteen GPUs on two nodes with pp 2: the stages sit on different nodes, so the gather
  // crosses the network; on one node (8 GPUs, dp 4) it stays on NVLink and is faster.
  json one = c;
  one["system"]["num_gpus"] = 8;
  one["training"]["dp"] = 4;
  one["training"]["rl"]["gpus"] = {{"rollout", 8}, {"train", 8}};
  const RlIteration nv = run(one);
  EXPECT_DOUBLE_EQ(nv.refit_bytes_per_gpu, co.refit_bytes_per_gpu);
  EXPECT_LT(nv.resharding_s, co.resharding_s);
}

// NeMo RL's published refit times on DGX H100 (8 x 400 Gb/s a node), bf16 weights. Split
// (the non-colocated refit post, 2026-02-26): DeepSeek-V3 14 s and Qwen3-235B-A22B 5 s,
// the two points the broadcast line goes through; Qwen3-30B-A3B's 1.5 s reads 0.8 s (the
// line leaves out a small model's fixed cost). Colocated (the refit post of 2025-08-12,
// NeMo RL v0.3): DeepSeek-V3 trained EP64 PP8 on 512 GPUs and served TP64, 47.2 s (gather
// 12.2, IPC hand-over 33.5, update 1.5).
TEST(PostTrain, RefitTakesNeMoRlsPublishedTimes) {
  auto refit = [](json c) { return run(c).resharding_s; };
  EXPECT_NEAR(refit(rl_case("nemorl-v0.5-h100-bf16-grpo-deepseek-v3-1off-512gpu")), 14.0, 0.14 * 3);
  EXPECT_NEAR(refit(rl_case("nemorl-v0.5-h100-bf16-grpo-qwen3-235b-a22b-1off-256gpu")), 5.0, 0.05 * 3);
  EXPECT_NEAR(refit(rl_case("nemorl-v0.5-h100-bf16-grpo-qwen3-30b-a3b-1off-32gpu")), 0.8, 0.1);
  // Both pools on one node: the broadcast's line is NVLink (450 GB/s a direction on H100),
  // not the node's NICs (8 x 50 GB/s).
  json one = rl_case(kSplit);
  const double across = refit(one);
  one["system"]["num_gpus"] = 8;
  one["training"]["dp"] = 4;
  one["training"]["rl"]["gpus"] = {{"rollout", 4}, {"train", 4}};
  const double within = refit(one);
  EXPECT_NEAR((within - 0.15) / (across - 0.15), 400.0 / 450.0, 1e-9);
  json c = rl_case("nemorl-v0.5-h100-bf16-grpo-deepseek-v3-onpolicy-256gpu");
  c["system"]["num_gpus"] = 512;
  c["training"]["ep"] = 64;
  c["training"]["pp"] = 8;
  c["training"]["dp"] = 64;
  c["training"]["rl"]["gpus"] = {{"rollout", 512}, {"train", 512}};
  c["training"]["rl"]["rollout"]["tp"] = 64;
  EXPECT_NEAR(refit(c), 47.2, 47.2 * 0.03);
}

// Colocated time-sharing moves the optimizer state, the trainer's weights and the engine's
// weights down to the host and back once per iteration: the weights through pinned buffers
// at the host link rate, the optimizer state through NeMo RL's per-tensor pageable copies at
// their measured rate; the reference swap moves the trainer's weights three times (down,
// reference up, policy up) at the host link rate.
TEST(PostTrain, ColocatedOffloadIsItsBytesOverTheirLinks) {
  EXPECT_DOUBLE_EQ(rl_offload_bytes_per_gpu(3, 5, 7), 30);
  EXPECT_DOUBLE_EQ(rl_offload_seconds(3.6e9, 5e9, 7e9, 12e9), 2.0 + 4.0);
  const json c = rl_case(kColocated);
  const Scenario s = read(c);
  const RlIteration it = run(c);
  double w = 0, o = 0;
  for (const StageMemory& st : it.update.memory.stages) {
    w = std::max(w, st.weights_bytes);
    o = std::max(o, st.optimizer_bytes);
  }
  const double engine = static_cast<double>(count_params(s.model).total) * 2.0;  // bf16, rollout tp 1
  EXPECT_DOUBLE_EQ(it.offload_bytes_per_gpu, 2 * o + 2 * w + 2 * engine);
  const double link = pcie_bytes_per_s(s.system);
  EXPECT_NEAR(it.offload_s, (2 * w + 2 * engine) / link + 2 * o / kRlPageableCopyBytesPerS, 1e-12 * it.offload_s);
  EXPECT_DOUBLE_EQ(it.reference_swap_bytes_per_gpu, 3 * w);
  EXPECT_DOUBLE_EQ(it.reference_swap_s, 3 * w / link);
  // A faster host link shortens exactly the pinned copies.
  json fast = c;
  fast["system"]["pcie_gbps_per_gpu"] = 2 * link / 1e9;
  const RlIteration f = run(fast);
  EXPECT_NEAR(f.offload_s, (w + engine) / link + 2 * o / kRlPageableCopyBytesPerS, 1e-12 * it.offload_s);
  EXPECT_DOUBLE_EQ(f.generation_s, it.generation_s);
  EXPECT_DOUBLE_EQ(f.training_s, it.training_s);
}

std::vector<Issue> issues_of(const json& doc) {
  try {
    (void)io::scenario_from_json(doc, {}, io::EngineKeys::ignore_unknown);
  } catch (const InputError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "expected an InputError";
  return {};
}

void expect_issue(const json& doc, const std::string& pointer, const std::string& rule) {
  const std::vector<Issue> issues = issues_of(doc);
  const bool found = std::any_of(issues.begin(), issues.end(), [&](const Issue& i) { return i.pointer == pointer && i.rule == rule; });
  std::string all;
  for (const Issue& i : issues) all += i.pointer + ": " + i.rule + "\n";
  EXPECT_TRUE(found) << "want " << pointer << ": " << rule << "\ngot\n" << all;
}

TEST(PostTrain, BadRlBlocksAreReportedWordForWord) {
  json c = rl_case(kColocated);
  c["training"].erase("rl");
  expect_issue(c, "/training/rl", "is required when mode is \"grpo\" (samples, lengths, placement, GPUs)");

  c = rl_case(kColocated);
  c["training"]["mode"] = "sft";
  expect_issue(c, "/training/rl", "is read only when mode is \"ppo\" or \"grpo\"");

  c = rl_case(kColocated);
  c["training"]["rl"]["async_staleness"] = 1;
  expect_issue(c, "/training/rl/async_staleness",
               "needs placement \"split\": colocated generation and training take turns on the same GPUs");

  c = rl_case(kColocated);
  c["training"]["rl"]["gpus"]["rollout"] = 8;
  expect_issue(c, "/training/rl/gpus", "colocated roles share every GPU: rollout and train must both equal num_gpus (16)");

  c = rl_case(kSplit);
  c["training"]["rl"]["gpus"]["rollout"] = 4;
  expect_issue(c, "/training/rl/gpus", "split pools: rollout + train must equal num_gpus (16)");

  c = rl_case(kColocated);
  c["training"]["rl"]["rollout"]["tp"] = 3;
  expect_issue(c, "/training/rl/rollout/tp", "tp*pp = 3 must divide gpus.rollout = 16");

  c = rl_case(kColocated);
  c["training"]["rl"]["response_tokens"] = {{"mean", 5000}, {"max", 4096}};
  expect_issue(c, "/training/rl/response_tokens", "mean must not exceed max");

  c = rl_case(kColocated);
  c["training"]["rl"].erase("response_tokens");
  expect_issue(c, "/training/rl/response_tokens", "is required (a number or {\"mean\", \"max\"})");

  c = rl_case(kColocated);
  c["training"]["rl"]["prompt_tokens"] = "long";
  expect_issue(c, "/training/rl/prompt_tokens", "must be a number >= 1, {\"mean\": m} or \"auto\"");

  c = rl_case(kColocated);
  c["training"]["rl"]["models"]["reference"] = "rule";
  expect_issue(c, "/training/rl/models/reference", "must be \"model\", null or an HF config object");

  c = rl_case(kColocated);
  c["training"]["rl"]["models"]["actor"] = nullptr;
  expect_issue(c, "/training/rl/models/actor", "must be \"model\" (the case's model is the actor)");

  c = rl_case(kColocated);
  c["training"]["rl"].erase("gpus");
  expect_issue(c, "/training/rl/gpus", "is required ({\"rollout\": n, \"train\": n})");

  c = rl_case(kColocated);
  c["training"]["rl"]["placement"] = "hybrid";
  const std::vector<Issue> issues = issues_of(c);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues.front().pointer, "/training/rl/placement");
}

// Every rl key the source may leave unpublished resolves from the rest of the case, else
// from NeMo RL's defaults, and the report names them.
TEST(PostTrain, AutoKeysResolveFromTheCaseOrTheDefaults) {
  const Scenario given = read(rl_case(kColocated));
  json c = rl_case(kColocated);
  for (const char* k : {"algorithm", "ppo_epochs", "async_staleness", "placement", "gpus", "models"})
    c["training"]["rl"][k] = "auto";
  const Scenario s = read(c);
  // What the case's own values were: one pass, on-policy, colocated on every GPU, GRPO's
  // rule reward and reference.
  EXPECT_EQ(s.rl->ppo_epochs, 1);
  EXPECT_EQ(s.rl->async_staleness, 0);
  EXPECT_EQ(s.rl->placement, RlSpec::Placement::colocated);
  EXPECT_EQ(s.rl->rollout_gpus, 16);
  EXPECT_EQ(s.rl->train_gpus, 16);
  EXPECT_EQ(s.rl->reward, given.rl->reward);
  EXPECT_EQ(s.rl->reference, given.rl->reference);
  EXPECT_EQ(s.rl->auto_keys,
            (std::vector<std::string>{"algorithm", "async_staleness", "gpus", "models", "placement", "ppo_epochs", "prompt_tokens"}));

  // Split pools say the placement themselves.
  c = rl_case(kSplit);
  c["training"]["rl"]["placement"] = "auto";
  EXPECT_EQ(read(c).rl->placement, RlSpec::Placement::split);

  // Prompts and group: global_batch x mini_batches samples (512 x 4 = 64 x 32 here).
  c = rl_case(kColocated);
  c["training"]["rl"]["group_size"] = "auto";
  EXPECT_EQ(read(c).rl->group_size, given.rl->group_size);
  c = rl_case(kColocated);
  c["training"]["rl"]["prompts_per_step"] = "auto";
  EXPECT_EQ(read(c).rl->prompts_per_step, given.rl->prompts_per_step);
  // Neither, nor mini_batches: NeMo RL's 16 samples a prompt, one optimizer step an iteration.
  c["training"]["rl"]["group_size"] = "auto";
  c["training"]["rl"]["mini_batches"] = "auto";
  const Scenario d = read(c);
  EXPECT_EQ(d.rl->group_size, kNemoRlGenerationsPerPrompt);
  EXPECT_EQ(d.rl->prompts_per_step, given.training->global_batch / kNemoRlGenerationsPerPrompt);

  // Response lengths: half the room the cap leaves the prompt, spread below the cap.
  c = rl_case(kColocated);
  c["training"]["rl"]["response_tokens"] = "auto";
  c["training"]["rl"]["max_total_tokens"] = "auto";
  const Scenario r = read(c);
  EXPECT_EQ(r.rl->max_total_tokens, given.training->seq_len);
  EXPECT_DOUBLE_EQ(r.rl->response_mean, (static_cast<double>(given.training->seq_len) - kRlAutoPromptTokens) / 2.0);
  EXPECT_DOUBLE_EQ(rl_response_cap(*r.rl), static_cast<double>(given.training->seq_len) - kRlAutoPromptTokens);

  // The rollout's tensor-parallel degree: the smallest whose replica fits.
  c = rl_case(kColocated);
  c["training"]["rl"]["rollout"]["tp"] = "auto";
  const Scenario t = read(c);
  EXPECT_EQ(t.rl->rollout.tp, 1);
  InferencePlan smaller = t.rl->rollout;
  EXPECT_TRUE(inference_memory(t.model, t.system, smaller).fits);
  c = rl_case("nemorl-v0.5-h100-bf16-grpo-deepseek-v3-onpolicy-256gpu");
  c["training"]["rl"]["rollout"] = "auto";
  const Scenario v3 = read(c);
  ASSERT_GT(v3.rl->rollout.tp, 1);
  EXPECT_TRUE(inference_memory(v3.model, v3.system, v3.rl->rollout).fits);
  smaller = v3.rl->rollout;
  smaller.tp /= 2;
  EXPECT_FALSE(inference_memory(v3.model, v3.system, smaller).fits);

}

// "auto" one level down (SCHEMA.md: any unpublished field): a rollout engine knob, the
// engine itself, one role of rl.models, one pool of rl.gpus, the response's mean or max.
TEST(PostTrain, AutoMembersResolveAsTheirBlocksDo) {
  const Scenario given = read(rl_case(kColocated));
  json c = rl_case(kColocated);
  c["training"]["rl"]["rollout"]["engine"]["gpu_memory_utilization"] = "auto";
  EXPECT_FALSE(read(c).rl->rollout.engine.gpu_memory_utilization.has_value());
  c["training"]["rl"]["rollout"]["engine"] = "auto";
  json whole = rl_case(kColocated);
  whole["training"]["rl"]["rollout"] = "auto";
  EXPECT_EQ(read(c).rl->rollout.profile.id, read(whole).rl->rollout.profile.id);

  c = rl_case(kColocated);
  for (const char* role : {"actor", "critic", "reward", "reference"}) c["training"]["rl"]["models"][role] = "auto";
  const Scenario m = read(c);
  EXPECT_EQ(m.rl->reward, given.rl->reward);
  EXPECT_EQ(m.rl->reference, given.rl->reference);
  EXPECT_EQ(m.rl->critic.kind, RlModel::Kind::none);  // GRPO has no critic

  // Colocated: a pool left "auto" is every GPU; split: the GPUs the stated pool leaves.
  c = rl_case(kColocated);
  c["training"]["rl"]["gpus"]["rollout"] = "auto";
  EXPECT_EQ(read(c).rl->rollout_gpus, 16);
  c = rl_case(kSplit);
  c["training"]["rl"]["gpus"]["train"] = "auto";
  const Scenario sp = read(c);
  EXPECT_EQ(sp.rl->train_gpus, 8);
  EXPECT_EQ(sp.rl->rollout_gpus, 8);
  c["training"]["rl"]["gpus"]["rollout"] = 16;
  expect_issue(c, "/training/rl/gpus", "split pools: the stated pool leaves no GPU to the one left \"auto\"");
  // Placement "auto" too: a stated pool smaller than the cluster says split.
  c = rl_case(kSplit);
  c["training"]["rl"]["placement"] = "auto";
  c["training"]["rl"]["gpus"]["rollout"] = "auto";
  const Scenario both = read(c);
  EXPECT_EQ(both.rl->placement, RlSpec::Placement::split);
  EXPECT_EQ(both.rl->rollout_gpus, 8);

  // The whole block "auto": each key as its own "auto"; the stated update layout (8 of 16
  // GPUs) leaves the rest to generation. An unnamed rollout engine is NeMo RL's, vLLM.
  c = rl_case(kSplit);
  c["training"]["rl"] = "auto";
  const Scenario all = read(c);
  EXPECT_EQ(all.rl->placement, RlSpec::Placement::split);
  EXPECT_EQ(all.rl->train_gpus, 8);
  EXPECT_EQ(all.rl->rollout_gpus, 8);
  c = rl_case(kColocated);
  c["training"]["rl"]["rollout"]["engine"]["name"] = "auto";
  EXPECT_EQ(read(c).rl->rollout.profile.name, "vllm");

  // A stated longest response with its mean unpublished: half of it, spread below it.
  c = rl_case(kColocated);
  c["training"]["rl"]["response_tokens"] = {{"mean", "auto"}, {"max", 1000}};
  c["training"]["rl"].erase("max_total_tokens");
  const Scenario r = read(c);
  EXPECT_DOUBLE_EQ(r.rl->response_mean, 500.0);
  EXPECT_DOUBLE_EQ(rl_response_cap(*r.rl), 1000.0);
  EXPECT_FALSE(r.rl->response_fixed);
  // A stated mean with its longest unpublished: the room seq_len leaves the prompt.
  c["training"]["rl"]["response_tokens"] = {{"mean", 300}, {"max", "auto"}};
  const Scenario x = read(c);
  EXPECT_DOUBLE_EQ(x.rl->response_mean, 300.0);
  EXPECT_DOUBLE_EQ(rl_response_cap(*x.rl), static_cast<double>(given.training->seq_len) - rl_prompt_tokens(*x.rl));
}

// Split pools left "auto": the update layout sizes the training pool where the case states
// it, the rollout pool taking the rest; where it does not, the evaluation takes the fastest
// of the splits NeMo RL can run (whole nodes for generation on several nodes, GPUs on one).
TEST(PostTrain, AutoSplitPoolsFollowTheLayoutElseTheFastestSplit) {
  // dp 8 x tp 1 x pp 1 on 16 GPUs: 8 train, 8 rollout, as the case states them.
  json c = rl_case(kSplit);
  c["training"]["rl"]["gpus"] = "auto";
  const Scenario implied = read(c);
  const Scenario stated = read(rl_case(kSplit));
  EXPECT_FALSE(implied.rl->pools_auto);
  EXPECT_EQ(implied.rl->train_gpus, 8);
  EXPECT_EQ(implied.rl->rollout_gpus, 8);
  const hw::RooflineCostModel cost(stated.system);
  EXPECT_DOUBLE_EQ(evaluate_rl_iteration(implied, cost).step_time_s, evaluate_rl_iteration(stated, cost).step_time_s);
  // An absent dp covers the stated training pool, not every GPU.
  json no_dp = rl_case(kSplit);
  no_dp["training"].erase("dp");
  EXPECT_EQ(read(no_dp).training->dp, 8);
  // A layout on every GPU leaves none for the rollout.
  c["training"]["dp"] = 16;
  expect_issue(c, "/training/rl/gpus",
               "the update layout (dp x tp x pp x cp = 16) leaves none of the 16 GPUs to the rollout pool");

  // dp "auto" too: on 32 GPUs (4 nodes) every whole-node rollout pool is tried (8 + 24
  // fails the batch rule: 512 sequences over dp 24) and the fastest iteration kept.
  c = rl_case(kSplit);
  c["system"]["num_gpus"] = 32;
  c["training"]["rl"]["gpus"] = "auto";
  c["training"]["dp"] = "auto";
  const Scenario open = read(c);
  ASSERT_TRUE(open.rl->pools_auto);
  std::string why;
  const std::vector<Scenario> candidates = rl_pool_candidates(open, &why);
  ASSERT_EQ(candidates.size(), 2U) << why;
  EXPECT_EQ(why, "8 rollout + 24 train: /training/global_batch: must be divisible by micro_batch*dp = 1*24 = 24 (got 512)");
  const hw::RooflineCostModel qcost(open.system);
  double fastest = std::numeric_limits<double>::infinity();
  for (const Scenario& k : candidates) {
    EXPECT_EQ(k.rl->rollout_gpus % 8, 0);
    EXPECT_EQ(k.rl->rollout_gpus + k.rl->train_gpus, 32);
    EXPECT_EQ(k.training->dp * k.training->tp * k.training->pp * k.training->cp, k.rl->train_gpus);
    const RlIteration it = evaluate_rl_iteration(k, qcost);
    if (it.feasible) fastest = std::min(fastest, it.step_time_s);
  }
  std::vector<RlPoolTry> tries;
  const Scenario chosen = resolve_rl_pools(open, qcost, &tries);
  EXPECT_FALSE(chosen.rl->pools_auto);
  EXPECT_DOUBLE_EQ(evaluate_rl_iteration(chosen, qcost).step_time_s, fastest);
  ASSERT_EQ(tries.size(), candidates.size());
  for (size_t i = 0; i < tries.size(); ++i) EXPECT_EQ(tries[i].rollout_gpus, candidates[i].rl->rollout_gpus);
  // The unresolved scenario evaluates as its resolution does, and says what it tried.
  const RlIteration searched = evaluate_rl_iteration(open, qcost);
  EXPECT_DOUBLE_EQ(searched.step_time_s, fastest);
  ASSERT_EQ(searched.pool_search.size(), tries.size());
  const json report = io::rl_train_report(chosen, searched);
  ASSERT_EQ(report["rl"]["pool_search"].size(), tries.size());
  EXPECT_EQ(report["rl"]["pool_search"][0]["rollout_gpus"], tries[0].rollout_gpus);
  EXPECT_DOUBLE_EQ(report["rl"]["pool_search"][0]["step_time_s"].get<double>(), tries[0].step_time_s);
  // Stated pools search nothing.
  EXPECT_TRUE(evaluate_rl_iteration(stated, cost).pool_search.empty());

  // One node: pools of single GPUs. Llama 3.1 8B on 4 GPUs with tp 2 training (dp auto):
  // the training pool must hold tp x dp, so the rollout pool is 2 GPUs.
  c = rl_case(kSplit);
  c["system"]["num_gpus"] = 4;
  c["training"]["rl"]["gpus"] = "auto";
  c["training"]["dp"] = "auto";
  c["training"]["tp"] = 2;
  const std::vector<Scenario> one_node = rl_pool_candidates(read(c));
  ASSERT_EQ(one_node.size(), 1U);
  EXPECT_EQ(one_node[0].rl->rollout_gpus, 2);
  EXPECT_EQ(one_node[0].training->dp, 1);

  // No split works: one GPU cannot hold two pools.
  c["system"]["num_gpus"] = 1;
  c["training"]["tp"] = 1;
  expect_issue(c, "/training/rl/gpus",
               "no split of the 1 GPUs leaves both pools a valid layout (1 GPU(s) cannot hold two pools)");
}

}  // namespace
}  // namespace capsim
