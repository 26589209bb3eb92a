// Serving engines as data: profile files, version selection, and what the host model
// does to a step and to a request.
#include <gtest/gtest.h>

#include <tuple>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "capsim/core/diagnostics.hpp"
#include "capsim/core/serving.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/engines.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"
#include "serving_scenarios.hpp"

namespace capsim {
namespace {

/// The issues a profile document raises when read (none when it reads).
std::vector<Issue> profile_issues(const nlohmann::json& doc, const char* origin) {
  try {
    io::engine_profile_from_json(doc, origin);
  } catch (const InputError& e) {
    return e.issues();
  }
  return {};
}

// Every shipped profile reads (every knob has a value and a source the file lists).
TEST(ServingEngines, EveryProfileLoadsWithSources) {
  const auto ids = io::engine_profile_ids();
  EXPECT_GE(ids.size(), 9u);
  for (const auto& id : ids) {
    const auto doc = io::read_json_file(io::data_dir() / "engines" / (id + ".json"));
    EXPECT_NO_THROW(io::engine_profile_from_json(doc, id)) << id;
    EXPECT_EQ(io::engine_profile_from_json(doc, id).id, id);
  }
}

// The knobs a plan built in code uses are vLLM V1's, the same as its profile file. The MoE
// kernel family's rates live in data/moe_kernels.json only: code names the family, and a
// plan built without a profile runs the GPU presets' fused-MoE figures.
TEST(ServingEngines, BuiltInDefaultsAreTheVllmV1Profile) {
  const auto doc = io::read_json_file(io::data_dir() / "engines" / "vllm-v1.json");
  EngineDefaults knobs = io::engine_profile_from_json(doc, "vllm-v1").knobs;
  io::keep_rules_for_release(knobs, "");  // the newest release's rules
  knobs = knobs.for_deployment("h100-sxm5-80gb", 80.0 * 1024 * 1024 * 1024, false);
  EXPECT_EQ(knobs.moe_kernel.family, EngineDefaults{}.moe_kernel.family);
  knobs.moe_kernel.rates.clear();
  EXPECT_EQ(knobs, EngineDefaults{});
}

// LMDeploy picks max_batch_size by the device's name from 0.6.0 (PR #2434): A100/A800 256,
// H100/H800 512, any other GPU (an H200 too: "h100" is not in its name) 128, as before; from
// 0.10.0 A100/A800 384 and H100/H800/H200 1024.
TEST(ServingEngines, LmdeployBatchFollowsTheDeviceName) {
  auto seqs = [](const char* version, const char* gpu) {
    const EngineProfile p = io::select_engine_profile("lmdeploy", version, "/e");
    const GpuSpec g = io::load_gpu(gpu);
    return p.knobs.for_deployment(g.id, g.hbm_capacity_bytes, false).max_num_seqs;
  };
  EXPECT_EQ(seqs("0.5.3", "h100-sxm5-80gb"), 128);
  EXPECT_EQ(seqs("0.6.0", "a100-sxm4-80gb"), 256);
  EXPECT_EQ(seqs("0.6.0", "h100-sxm5-80gb"), 512);
  EXPECT_EQ(seqs("0.9.2", "h800-sxm5-80gb"), 512);
  EXPECT_EQ(seqs("0.9.2", "h200-sxm-141gb"), 128);
  EXPECT_EQ(seqs("0.10.0", "a100-sxm4-80gb"), 384);  // and from 0.10.0 (lmdeploy/utils.py)
  EXPECT_EQ(seqs("0.10.0", "h200-sxm-141gb"), 1024);
  EXPECT_EQ(seqs("0.12.0", "h100-sxm5-80gb"), 1024);
}

// vLLM V1's batch limits by release, GPU and usage context, as its arg_utils.py set them:
// by device name (H100/H200) up to 0.8.x, by memory (>= 70 GiB, not an A100) from 0.9.0;
// max_num_seqs 1024 on every GPU until the 0.8.4 revert (PRs #12369, #16158, #17885).
TEST(ServingEngines, VllmBatchDefaultsFollowTheReleaseTheGpuAndTheContext) {
  struct Row {
    const char* version;
    const char* gpu;
    bool llm_class;
    int64_t seqs, tokens;
  };
  const std::vector<Row> rows = {
      {"0.8.2", "a100-sxm4-80gb", false, 1024, 2048},  {"0.8.4", "a100-sxm4-80gb", false, 256, 2048},
      {"0.8.4", "h200-sxm-141gb", false, 1024, 8192},  {"0.8.4", "h100-sxm5-80gb", true, 1024, 16384},
      {"0.8.4", "h800-sxm5-80gb", false, 256, 2048},   {"0.8.4", "a100-sxm4-80gb", true, 256, 8192},
      {"0.10.1", "h800-sxm5-80gb", false, 1024, 8192}, {"0.10.1", "a100-sxm4-80gb", false, 256, 2048},
      {"0.11.2", "h100-sxm5-80gb", true, 1024, 16384}, {"0.11.2", "a100-sxm4-40gb", true, 256, 8192},
      {"", "b200", false, 1024, 16384},        {"0.27.1", "h200-sxm-141gb", false, 1024, 8192},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(std::string(r.version) + " " + r.gpu + (r.llm_class ? " LLM class" : " server"));
    const EngineProfile p = io::select_engine_profile(*r.version ? "vllm" : "", r.version, "/e");
    const GpuSpec g = io::load_gpu(r.gpu);
    const EngineDefaults d = p.knobs.for_deployment(g.id, g.hbm_capacity_bytes, r.llm_class);
    EXPECT_EQ(d.max_num_seqs, r.seqs);
    EXPECT_EQ(d.max_num_batched_tokens, r.tokens);
  }
}

// A scenario's own knob wins over the profile's rules; an RL rollout runs in the library
// class's context and a served scenario as an API server.
TEST(ServingEngines, ScenarioKnobsOverrideTheGpuRules) {
  InferencePlan p;
  p.profile = io::select_engine_profile("vllm", "0.11.2", "/e");
  const GpuSpec h100 = io::load_gpu("h100-sxm5-80gb");
  EXPECT_EQ(engine_defaults(p, ModelSpec{}, h100, 0).max_num_batched_tokens, 8192);
  p.llm_class = true;
  EXPECT_EQ(engine_defaults(p, ModelSpec{}, h100, 0).max_num_batched_tokens, 16384);
  p.engine.max_num_batched_tokens = 4096;
  p.engine.max_num_seqs = 64;
  EXPECT_EQ(engine_defaults(p, ModelSpec{}, h100, 0).max_num_batched_tokens, 4096);
  EXPECT_EQ(engine_defaults(p, ModelSpec{}, h100, 0).max_num_seqs, 64);
}

TEST(ServingEngines, ReleaseNumbers) {
  EXPECT_EQ(io::release_number("0.4.5.post3"), (std::vector<int>{0, 4, 5}));
  EXPECT_EQ(io::release_number("1.0.0rc2"), (std::vector<int>{1, 0, 0}));
  EXPECT_EQ(io::release_number("0.6.0"), (std::vector<int>{0, 6, 0}));
  EXPECT_TRUE(io::release_number("auto").empty());
  EXPECT_TRUE(io::release_number("main@2e669133 (source build, 2025-04-15)").empty());
}

// Pre-release tags order as PEP 440 has them: dev < a < b < rc < the release < post.
TEST(ServingEngines, ReleaseOrderRanksTags) {
  const std::vector<std::string> ordered = {"0.1.0.dev1", "0.1.0a1", "0.1.0a2", "0.1.0b1", "0.1.0rc1",
                                            "0.1.0",      "0.1.0.post1", "0.1.1a0", "0.2"};
  for (size_t i = 0; i + 1 < ordered.size(); ++i)
    EXPECT_LT(io::release_order(ordered[i]), io::release_order(ordered[i + 1])) << ordered[i] << " < " << ordered[i + 1];
  EXPECT_EQ(io::release_order("0.1.0"), io::release_order("0.1"));
  EXPECT_EQ(io::release_order("1.0.0rc2"), (std::vector<int>{1, 0, 0, 0, 3, 2}));
  EXPECT_TRUE(io::release_order("auto").empty());
}

// vLLM V0 without chunked prefill sizes its step by the model's context, max(max_model_len,
// 2048) (SchedulerConfig), max_model_len defaulting to max_position_embeddings; from the
// release after PR #6666 (0.5.4) a context over 32K tokens switches chunked prefill on by
// default, with its 512-token budget, except for sliding-window and MLA models. A scenario's
// own setting wins, and V1 is not touched.
TEST(ServingEngines, VllmV0SizesItsStepByTheModelsContext) {
  auto defaults = [](const char* model, const char* version, std::optional<bool> chunked = std::nullopt,
                     std::optional<int64_t> max_model_len = std::nullopt) {
    Scenario s = testing::on_one_node(model, "h100-sxm5-80gb", 1);
    s.inference->profile = io::select_engine_profile("vllm", version, "/e");
    s.inference->engine.chunked_prefill = chunked;
    s.inference->engine.max_model_len = max_model_len;
    return engine_defaults(*s.inference, s.model, s.system.gpu, /*longest_request=*/1000);
  };
  EXPECT_FALSE(defaults("llama3-8b", "0.6.0").chunked_prefill);
  EXPECT_EQ(defaults("llama3-8b", "0.6.0").max_num_batched_tokens, 8192);
  EXPECT_EQ(defaults("llama2-7b", "0.5.3").max_num_batched_tokens, 4096);
  for (const char* version : {"0.5.4", "0.6.3", "0.7.2"}) {
    const EngineDefaults d = defaults("llama3.1-405b", version);
    EXPECT_TRUE(d.chunked_prefill) << version;
    EXPECT_EQ(d.max_num_batched_tokens, 512) << version;
  }
  EXPECT_TRUE(defaults("qwen3-8b", "0.5.4").chunked_prefill);  // 40,960 tokens
  EXPECT_FALSE(defaults("qwen3-8b", "0.5.3").chunked_prefill);
  EXPECT_EQ(defaults("qwen3-8b", "0.5.3").max_num_batched_tokens, 40960);
  EXPECT_FALSE(defaults("gpt-oss-20b", "0.6.0").chunked_prefill);  // sliding window
  EXPECT_FALSE(defaults("deepseek-v3", "0.7.2").chunked_prefill);  // MLA
  EXPECT_EQ(defaults("deepseek-v3", "0.7.2").max_num_batched_tokens, 163840);
  const EngineDefaults off = defaults("llama3.1-405b", "0.6.0", false);
  EXPECT_FALSE(off.chunked_prefill);
  EXPECT_EQ(off.max_num_batched_tokens, 131072);
  EXPECT_EQ(defaults("llama3-8b", "0.6.0", true).max_num_batched_tokens, 512);
  // A server started with a shorter context (--max-model-len) sizes both by it.
  const EngineDefaults short_context = defaults("llama3.1-405b", "0.6.0", std::nullopt, 16384);
  EXPECT_FALSE(short_context.chunked_prefill);
  EXPECT_EQ(short_context.max_num_batched_tokens, 16384);
  // V1 budgets its chunks by usage context, whatever the model's context.
  EXPECT_EQ(defaults("llama3.1-405b", "0.8.4").max_num_batched_tokens,
            defaults("llama3-8b", "0.8.4").max_num_batched_tokens);
}

// SGLang 0.5 without --mem-fraction-static takes its share from what it reserves
// (server_args.py): 512 MiB + 1.5 MiB a prefill-chunk token + 2 MiB a graph slot + 128 MiB
// a model GPU, DP attention 3 (and beyond 300 slots 1.5 more) MiB a slot and rank, at least
// 10 GiB on a GPU above 60 GiB, over the GPU's MiB; and captures graphs up to 512 sequences
// from TP 4 (256 below).
TEST(ServingEngines, SglangSharesMemoryByWhatItReserves) {
  auto defaults = [](const char* gpu, int64_t tp, bool dp_attention) {
    Scenario s = testing::on_one_node("llama3-8b", gpu, tp);
    s.inference->profile = io::select_engine_profile("sglang", "0.5.2", "/e");
    s.inference->attention_dp = dp_attention;
    return engine_defaults(*s.inference, s.model, s.system.gpu, 1000);
  };
  const double h100_mib = 85.52e9 / 1048576.0, h200_mib = 143771;
  const EngineDefaults one = defaults("h100-sxm5-80gb", 1, false);
  EXPECT_EQ(one.cuda_graph_max_tokens, 256);
  EXPECT_DOUBLE_EQ(one.gpu_memory_utilization,
                   std::round((h100_mib - (512 + 1.5 * 8192 + 2 * 256 + 128)) / h100_mib * 1000) / 1000);  // 0.835
  EXPECT_EQ(one.max_num_batched_tokens, 8192);
  EXPECT_EQ(defaults("b200", 1, false).max_num_batched_tokens, 16384);  // chunked_prefill_size above 160 GB
  const EngineDefaults eight = defaults("h200-sxm-141gb", 8, false);
  EXPECT_EQ(eight.cuda_graph_max_tokens, 512);
  EXPECT_DOUBLE_EQ(eight.gpu_memory_utilization, 0.897);
  EXPECT_DOUBLE_EQ(defaults("h200-sxm-141gb", 8, true).gpu_memory_utilization,
                   std::round((h200_mib - (512 + 1.5 * 8192 + 2 * 512 + 128 * 8 + 3 * 512 * 8 + 1.5 * 512 * 8)) / h200_mib * 1000) /
                       1000);  // 0.769
  // The scenario's own share and capture win.
  Scenario s = testing::on_one_node("llama3-8b", "h200-sxm-141gb", 8);
  s.inference->profile = io::select_engine_profile("sglang", "0.5.2", "/e");
  s.inference->engine.gpu_memory_utilization = 0.82;
  s.inference->engine.cuda_graph_max_tokens = 160;
  const EngineDefaults set = engine_defaults(*s.inference, s.model, s.system.gpu, 1000);
  EXPECT_DOUBLE_EQ(set.gpu_memory_utilization, 0.82);
  EXPECT_EQ(set.cuda_graph_max_tokens, 160);
  // SGLang 0.4 picks its share by the tensor-parallel degree: 0.81 at TP 8, 0.88 alone.
  s.inference->profile = io::select_engine_profile("sglang", "0.4.5", "/e");
  s.inference->engine.gpu_memory_utilization.reset();
  EXPECT_DOUBLE_EQ(engine_defaults(*s.inference, s.model, s.system.gpu, 1000).gpu_memory_utilization, 0.81);
  s.inference->tp = 1;
  EXPECT_DOUBLE_EQ(engine_defaults(*s.inference, s.model, s.system.gpu, 1000).gpu_memory_utilization, 0.88);
}

// A knob's release ranges: the first range that holds the release gives the value, a
// release in none keeps the knob's own, and a version that is not a release number takes
// the first range without an upper bound (the newest release's value), else the knob's own.
TEST(ServingEngines, ReleaseRangesOfAKnob) {
  nlohmann::json e = io::read_json_file(io::data_dir() / "engines" / "vllm-v0.json");
  const nlohmann::json src = nlohmann::json::array({"vllm_pr2192"});
  e["knobs"]["block_size"]["value"] = 16;
  e["knobs"]["block_size"]["by_release"] = nlohmann::json::array(
      {{{"versions", {{"to", "0.3.0"}}}, {"value", 8}, {"source", src}},
       {{"versions", {{"from", "0.3.0"}, {"to", "0.5.0"}}}, {"value", 32}, {"source", src}},
       {{"versions", {{"from", "0.4.0"}}}, {"value", 64}, {"source", src}}});
  auto block = [&](const std::string& release) { return io::engine_profile_from_json(e, "x.json", release).knobs.block_size; };
  EXPECT_EQ(block("0.2.7"), 8);
  EXPECT_EQ(block("0.3.0"), 32);
  EXPECT_EQ(block("0.4.5"), 32);  // the first range that holds it
  EXPECT_EQ(block("0.5.0"), 64);
  EXPECT_EQ(block(""), 64);
  EXPECT_EQ(block("main@abc"), 64);
  // The profile says which knobs a range set (the serving report's engine.profile.release_values).
  // (The shipped vllm-v0 profile's own tp_all_reduce and decode_heads_per_kv_load ranges
  // count too.)
  EXPECT_EQ(io::engine_profile_from_json(e, "x.json", "0.2.7").release_values,
            (std::vector<std::string>{"block_size (releases -0.3.0)", "decode_heads_per_kv_load (releases -0.4.3)",
                                      "tp_all_reduce (releases -0.3.0)"}));
  EXPECT_EQ(io::engine_profile_from_json(e, "x.json", "").release_values,
            (std::vector<std::string>{"chunked_prefill_above_context (releases 0.5.4-)", "block_size (releases 0.4.0-)"}));
  e["knobs"]["block_size"]["by_release"].erase(2);
  EXPECT_TRUE(io::engine_profile_from_json(e, "x.json", "0.5.0").release_values.empty());
  EXPECT_EQ(block("0.5.0"), 16);  // in no range
  EXPECT_EQ(block(""), 16);       // no range without an upper bound
}

// A version picks the profile whose range holds it; other versions the nearest or newest.
TEST(ServingEngines, VersionSelectsTheGeneration) {
  EXPECT_EQ(io::select_engine_profile("vllm", "0.5.3", "/e").id, "vllm-v0");
  EXPECT_EQ(io::select_engine_profile("vllm", "0.6.0", "/e").id, "vllm-v0.6");
  EXPECT_EQ(io::select_engine_profile("vllm", "0.8.4", "/e").id, "vllm-v1");
  EXPECT_EQ(io::select_engine_profile("vllm", "0.11.0", "/e").id, "vllm-v1");
  EXPECT_EQ(io::select_engine_profile("sglang", "0.3.0", "/e").id, "sglang-0.3");
  EXPECT_EQ(io::select_engine_profile("sglang", "0.4.5.post3", "/e").id, "sglang-0.4");
  EXPECT_EQ(io::select_engine_profile("sglang", "0.5.7", "/e").id, "sglang-0.5");
  EXPECT_EQ(io::select_engine_profile("lmdeploy", "0.1.0a1", "/e").id, "lmdeploy-turbomind-0.1a");
  EXPECT_EQ(io::select_engine_profile("lmdeploy", "0.1.0a2", "/e").id, "lmdeploy-turbomind-0.1");
  EXPECT_EQ(io::select_engine_profile("lmdeploy", "0.1.0", "/e").id, "lmdeploy-turbomind-0.1");
  EXPECT_EQ(io::select_engine_profile("lmdeploy", "0.2.0", "/e").id, "lmdeploy-turbomind-0.1");
  EXPECT_EQ(io::select_engine_profile("lmdeploy", "0.2.6", "/e").id, "lmdeploy-turbomind");
  // TurboMind's SequenceManager evicts only the blocks a preemption needs, in every release.
  for (const char* v : {"0.1.0a1", "0.2.0", "0.7.0"})
    EXPECT_EQ(io::select_engine_profile("lmdeploy", v, "/e").knobs.preemption, Preemption::partial) << v;
  EXPECT_EQ(io::select_engine_profile("vllm", "0.8.4", "/e").knobs.preemption, Preemption::cached);
  EXPECT_EQ(io::select_engine_profile("vllm", "0.6.0", "/e").knobs.preemption, Preemption::recompute);
  // SGLang admits by its estimate of the running requests' future tokens and retracts the
  // request that has made the fewest; the other engines by free blocks and the newest.
  for (const char* v : {"0.3.0", "0.4.5.post3", "0.5.7"}) {
    const EngineDefaults k = io::select_engine_profile("sglang", v, "/e").knobs;
    EXPECT_EQ(k.admission_output_ratio_init, 0.7) << v;
    EXPECT_EQ(k.admission_output_ratio_min, std::string(v) == "0.3.0" ? 0.1 : 0.098) << v;
    EXPECT_TRUE(k.preempt_fewest_outputs) << v;
  }
  EXPECT_EQ(io::select_engine_profile("vllm", "0.8.4", "/e").knobs.admission_output_ratio_init, 0.0);
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.8.4", "/e").knobs.preempt_fewest_outputs);
  EXPECT_EQ(io::select_engine_profile("tgi", "1.4.5", "/e").id, "tgi-1");
  EXPECT_EQ(io::select_engine_profile("tgi", "2.0.4", "/e").id, "tgi-2");
  EXPECT_EQ(io::select_engine_profile("tgi", "3.0.1", "/e").id, "tgi-3");
  // TGI's waiting prefill batches by release: ratio 1.2 up to 2.0.x, 0.3 from 2.1.0, none
  // once prompts are chunked (3.x); the KV share of free memory 1.0, 0.95, 0.90 from 2.4.0.
  EXPECT_DOUBLE_EQ(io::select_engine_profile("tgi", "2.0.4", "/e").knobs.prefill_wait_ratio, 1.2);
  EXPECT_DOUBLE_EQ(io::select_engine_profile("tgi", "2.1.0", "/e").knobs.prefill_wait_ratio, 0.3);
  EXPECT_EQ(io::select_engine_profile("tgi", "3.0.1", "/e").knobs.prefill_wait_steps, 0);
  EXPECT_DOUBLE_EQ(io::select_engine_profile("tgi", "1.4.5", "/e").knobs.gpu_memory_utilization, 1.0);
  EXPECT_DOUBLE_EQ(io::select_engine_profile("tgi", "2.3.0", "/e").knobs.gpu_memory_utilization, 0.95);
  EXPECT_DOUBLE_EQ(io::select_engine_profile("tgi", "2.4.1", "/e").knobs.gpu_memory_utilization, 0.9);
  EXPECT_EQ(io::select_engine_profile("tgi", "2.2.0", "/e").knobs.block_size, 16);
  EXPECT_EQ(io::select_engine_profile("tgi", "2.3.0", "/e").knobs.block_size, 1);
  // vLLM schedules the next step while the current one runs by default from 0.14.0.
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.8.4", "/e").knobs.host_overlaps_gpu);
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.13.0", "/e").knobs.host_overlaps_gpu);
  EXPECT_TRUE(io::select_engine_profile("vllm", "0.14.0", "/e").knobs.host_overlaps_gpu);
  EXPECT_TRUE(io::select_engine_profile("vllm", "0.17.1", "/e").knobs.host_overlaps_gpu);
  const EngineProfile main = io::select_engine_profile("trtllm", "main@2e669133 (source build, 2025-04-15)", "/e");
  EXPECT_EQ(main.id, "trtllm");
  EXPECT_EQ(main.match, "version \"main@2e669133 (source build, 2025-04-15)\" is not a release number: the newest trtllm profile");
  // A git tag's leading "v" is the release itself.
  const EngineProfile tagged = io::select_engine_profile("vllm", "v0.6.3", "/e");
  EXPECT_EQ(tagged.id, "vllm-v0.6");
  EXPECT_EQ(tagged.match, "version v0.6.3 is in the profile's range");
  EXPECT_EQ(io::select_engine_profile("sglang", "V0.4.5.post1", "/e").id, "sglang-0.4");
  // Names are lower case in the schema; a source's own capitals name the same engine.
  EXPECT_EQ(io::select_engine_profile("SGLang", "0.4.5.post1", "/e").id, "sglang-0.4");
  EXPECT_EQ(io::select_engine_profile("vLLM", "0.8.4", "/e").id, "vllm-v1");
  const EngineProfile old = io::select_engine_profile("trtllm", "0.9.0", "/e");
  EXPECT_EQ(old.match, "version 0.9.0 is outside every trtllm profile's range: the nearest one");
  EXPECT_EQ(io::select_engine_profile("", "", "/e").id, "vllm-v1");
  // A project's repository and package names select it as its short name does.
  EXPECT_EQ(io::select_engine_profile("TensorRT-LLM", "1.0.0", "/e").id, "trtllm");
  EXPECT_EQ(io::select_engine_profile("tensorrt_llm", "1.0.0", "/e").id, "trtllm");
  EXPECT_EQ(io::select_engine_profile("text-generation-inference", "3.0.1", "/e").id, "tgi-3");
}

TEST(ServingEngines, UnknownEngineIsAnInputError) {
  try {
    io::select_engine_profile("vlm", "0.8.4", "/inference/engine");
    FAIL() << "expected an input error";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].pointer, "/inference/engine/name");
    EXPECT_EQ(e.issues()[0].hint, "did you mean \"vllm\"?");
  }
}

// A profile missing a source, or with an unknown knob, names the place.
TEST(ServingEngines, ProfileErrorsNameThePlace) {
  auto doc = io::read_json_file(io::data_dir() / "engines" / "vllm-v1.json");
  doc["knobs"]["block_size"]["source"] = nlohmann::json::array();
  doc["knobs"]["blok_size"] = {{"value", 16}, {"source", {"vllm_v0_engine_args"}}};
  const std::vector<Issue> issues = profile_issues(doc, "x.json");
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].pointer, "x.json#/knobs/block_size/source");
  EXPECT_EQ(issues[0].rule, "every knob needs a source");
  EXPECT_EQ(issues[1].pointer, "x.json#/knobs/blok_size");
  EXPECT_EQ(issues[1].hint, "did you mean \"block_size\"?");
  doc = io::read_json_file(io::data_dir() / "engines" / "trtllm.json");
  doc["aliases"] = {"TensorRT-LLM"};
  const std::vector<Issue> alias = profile_issues(doc, "t.json");
  ASSERT_EQ(alias.size(), 1u);
  EXPECT_EQ(alias[0].pointer, "t.json#/aliases");
  EXPECT_EQ(alias[0].rule, "must be an array of lower-case names");
}

// A decode kernel's re-reads of one KV head (LMDeploy PR #1258's A100 table): one load
// costs itself, 2 loads 1.04, 8 loads 3.258, between the measured counts linearly, past 8
// the last step's slope.
TEST(ServingEngines, DecodeKvRereadCostFollowsItsMeasuredTable) {
  EXPECT_DOUBLE_EQ(decode_kv_reread_cost(0), 1.0);
  EXPECT_DOUBLE_EQ(decode_kv_reread_cost(1), 1.0);
  EXPECT_DOUBLE_EQ(decode_kv_reread_cost(2), 1.04);
  EXPECT_DOUBLE_EQ(decode_kv_reread_cost(4), 1.675);
  EXPECT_DOUBLE_EQ(decode_kv_reread_cost(5), (1.675 + 2.445) / 2.0);
  EXPECT_DOUBLE_EQ(decode_kv_reread_cost(8), 3.258);
  EXPECT_DOUBLE_EQ(decode_kv_reread_cost(16), 3.258 + 8.0 * (3.258 - 2.445) / 2.0);
  for (int64_t r = 1; r < 32; ++r) EXPECT_LT(decode_kv_reread_cost(r), decode_kv_reread_cost(r + 1)) << r;
}

// The decode attention kernel by engine release: vLLM's PagedAttention (to 0.4.2) and TGI's
// copy of it (to 2.2) serve one query head a CTA, so Llama 3 70B's 8 query heads a KV head
// load each KV head 8 times (3.258x the bytes), Llama 3 8B's 4 (1.675x); vLLM 0.4.3 and TGI
// 2.3 load it once; TurboMind 0.1-0.2 serves 4 heads a CTA (2 loads at 8, 1.04x; none at 4).
TEST(ServingEngines, DecodeKernelLoadsEachKvHeadPerCtaOfQueryHeads) {
  auto bytes_part = [](const char* model, int64_t tp, const char* engine, const char* version) {
    Scenario s = testing::on_one_node(model, "h100-sxm5-80gb", tp);
    s.inference->profile = io::select_engine_profile(engine, version, "/inference/engine");
    const hw::RooflineCostModel cost(s.system);
    IterationBatch b;
    b.decodes = 64;
    b.decode_context = 64.0 * 2048.0;
    const double fixed = s.system.gpu.efficiency.decode_attention_fixed_us.value * 1e-6;
    return IterationModel(s.model, s.system, *s.inference, cost).parts(b).attention_kernels -
           static_cast<double>(s.model.layers) * fixed;
  };
  EXPECT_NEAR(bytes_part("llama3-70b", 1, "vllm", "0.4.2") / bytes_part("llama3-70b", 1, "vllm", "0.4.3"), 3.258, 1e-9);
  EXPECT_NEAR(bytes_part("llama3-8b", 1, "vllm", "0.4.2") / bytes_part("llama3-8b", 1, "vllm", "0.4.3"), 1.675, 1e-9);
  EXPECT_NEAR(bytes_part("llama3-70b", 4, "tgi", "2.2.0") / bytes_part("llama3-70b", 4, "tgi", "2.3.0"), 3.258, 1e-9);
  EXPECT_NEAR(bytes_part("llama3-70b", 4, "lmdeploy", "0.2.0") / bytes_part("llama3-70b", 4, "lmdeploy", "0.3.0"), 1.04, 1e-9);
  EXPECT_NEAR(bytes_part("llama3-8b", 1, "lmdeploy", "0.2.0") / bytes_part("llama3-8b", 1, "lmdeploy", "0.3.0"), 1.0, 1e-9);
  // Past TP 8 a KV head is replicated and each GPU holds fewer query heads of it: Llama 3
  // 70B at TP16 keeps 4 query heads a GPU for its one KV head.
  EXPECT_NEAR(bytes_part("llama3-70b", 16, "vllm", "0.4.2") / bytes_part("llama3-70b", 16, "vllm", "0.4.3"), 1.675, 1e-9);
  auto doc = io::read_json_file(io::data_dir() / "engines" / "vllm-v0.json");
  doc["knobs"]["decode_heads_per_kv_load"]["value"] = -1;
  const std::vector<Issue> issues = profile_issues(doc, "v.json");
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].pointer, "v.json#/knobs/decode_heads_per_kv_load/value");
  EXPECT_EQ(issues[0].rule, "must be an integer >= 0");
}

// SGLang 0.5.7 fuses the all-reduce with the residual add and RMSNorm for DeepSeek-V3,
// gpt-oss and Qwen3-MoE only (PR #14764), inside one node and without DP attention: the
// two norm kernels a layer go for DeepSeek-V3 at TP8, not for Llama 3 70B, not under DP
// attention, not across two nodes, and not in 0.5.6.
TEST(ServingEngines, ResidualNormFusionFollowsTheEnginesModelList) {
  auto elementwise = [](const char* model, int64_t tp, int64_t per_node, const char* version, bool dp_attention) {
    Scenario s = testing::on_one_node(model, "h200-sxm-141gb", tp);
    s.system.gpus_per_node = per_node;
    s.inference->attention_dp = dp_attention;
    s.inference->profile = io::select_engine_profile("sglang", version, "/inference/engine");
    const hw::RooflineCostModel cost(s.system);
    IterationBatch b;
    b.decodes = 8;
    b.decode_context = 8.0 * 1024.0;
    return std::pair{IterationModel(s.model, s.system, *s.inference, cost).parts(b).elementwise,
                     static_cast<double>(s.model.layers) * 2.0 *
                         cost.memory_bound(Bytes(8.0 * static_cast<double>(s.model.hidden) * 2.0 * 4.0)).value};
  };
  const auto [before, norms] = elementwise("deepseek-v3", 8, 8, "0.5.6", false);
  EXPECT_NEAR(elementwise("deepseek-v3", 8, 8, "0.5.7", false).first, before - norms, 1e-12);
  EXPECT_DOUBLE_EQ(elementwise("llama3-70b", 8, 8, "0.5.7", false).first, elementwise("llama3-70b", 8, 8, "0.5.6", false).first);
  EXPECT_DOUBLE_EQ(elementwise("deepseek-v3", 8, 8, "0.5.7", true).first, elementwise("deepseek-v3", 8, 8, "0.5.6", true).first);
  EXPECT_DOUBLE_EQ(elementwise("deepseek-v3", 16, 8, "0.5.7", false).first, elementwise("deepseek-v3", 16, 8, "0.5.6", false).first);
  auto doc = io::read_json_file(io::data_dir() / "engines" / "sglang-0.5.json");
  doc["knobs"]["residual_norm_families"]["value"] = {"deepseek_v3", "glm4_moe"};
  const std::vector<Issue> issues = profile_issues(doc, "s.json");
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].pointer, "s.json#/knobs/residual_norm_families/value");
  EXPECT_EQ(issues[0].rule,
            "must be a non-empty list of model families (gpt2, gpt_neox, llama, mistral, gemma, qwen2, qwen3, nemotron, "
            "mixtral, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss)");
}

// Behind attention DP with the experts spread over the GPUs, the dispatch and combine
// all-to-alls wait for the rank with the most routed tokens: DeepSeek-V3's measured skew
// over 8 ranks (data/moe_routing.json, 1.49 the mean) makes them about that much longer than
// the same model routing evenly (the sampling spread of 4,096 tokens adds to both).
TEST(ServingEngines, ExpertAllToAllWaitsForTheBusiestRank) {
  auto exchange = [](bool skewed) {
    Scenario s = testing::on_one_node("deepseek-v3", "h200-sxm-141gb", 8);
    s.inference->attention_dp = true;
    s.inference->ep = 8;
    s.inference->profile = io::select_engine_profile("sglang", "0.5.6", "/inference/engine");
    if (!skewed) s.model.moe->rank_imbalance.clear();
    const hw::RooflineCostModel cost(s.system);
    IterationBatch b;
    b.decodes = 4096;
    b.decode_context = 4096.0 * 1024.0;
    return IterationModel(s.model, s.system, *s.inference, cost).parts(b).expert_exchange;
  };
  const double even = exchange(false);
  ASSERT_GT(even, 0.0);
  EXPECT_GT(exchange(true) / even, 1.3);
  EXPECT_LT(exchange(true) / even, 1.49);
}

// Every MoE kernel family reads with its figures sourced; the profiles name the family
// their engine runs (TensorRT-LLM its CUTLASS backend's kernels, then DeepGEMM; vLLM and
// SGLang tuned Triton), and a profile that names none runs the GPU presets' own Triton
// figures.
TEST(ServingEngines, MoeKernelFamiliesLoadAndProfilesNameThem) {
  const auto names = io::moe_kernel_family_names();
  EXPECT_EQ(names, (std::vector<std::string>{"deepgemm", "triton", "triton-tuned", "trtllm-cutlass"}));
  for (const auto& n : names) EXPECT_NO_THROW(io::moe_kernel_family(n, "/k")) << n;
  EXPECT_TRUE(io::moe_kernel_family("triton", "/k").rates.empty());
  const MoeKernel dg = io::moe_kernel_family("deepgemm", "/k");
  const MoeKernelRates* hopper = dg.for_gpu("h200-sxm-141gb", "hopper");
  ASSERT_NE(hopper, nullptr);
  EXPECT_TRUE(hopper->fp8_block_only);  // DeepGEMM computes block-scaled FP8 only
  // The weight-read rate of DeepGEMM's M = 64 FP8 GEMMs on the two expert shapes (README,
  // H800): the bytes each row moves over its published bandwidth, weights over that time.
  const double w1 = 4096.0 * 7168, w2 = 7168.0 * 2048;
  const double t1 = (64.0 * 7168 + w1 + 64.0 * 4096 * 2) / 2320e9, t2 = (64.0 * 2048 + w2 + 64.0 * 7168 * 2) / 2470e9;
  EXPECT_NEAR(hopper->hbm.value_or(0), (w1 + w2) / (t1 + t2) / 3.35e12, 5e-4);
  EXPECT_EQ(dg.for_gpu("b200", "blackwell"), nullptr);  // no Blackwell figure: the preset's
  const MoeKernel tuned = io::moe_kernel_family("triton-tuned", "/k");
  EXPECT_EQ(tuned.for_gpu("h200-sxm-141gb", "hopper"), nullptr);  // Hopper: the preset's fit
  ASSERT_NE(tuned.for_gpu("b200", "blackwell"), nullptr);
  EXPECT_DOUBLE_EQ(tuned.for_gpu("b200", "blackwell")->fixed_us.value_or(0), 45.1);
  // TensorRT-LLM's block-scaled FP8 experts on Hopper: its own CUTLASS-style kernels up to
  // 0.18, DeepGEMM from 0.19 (on by default since PR #3341).
  EXPECT_EQ(io::select_engine_profile("trtllm", "0.18.2", "/e").knobs.moe_kernel.family, "trtllm-cutlass");
  EXPECT_EQ(io::select_engine_profile("trtllm", "1.0.0", "/e").knobs.moe_kernel.family, "deepgemm");
  EXPECT_EQ(io::select_engine_profile("sglang", "0.5.7", "/e").knobs.moe_kernel.family, "triton-tuned");
  EXPECT_EQ(io::select_engine_profile("vllm", "0.8.4", "/e").knobs.moe_kernel.family, "triton-tuned");
  EXPECT_EQ(io::select_engine_profile("lmdeploy", "0.2.6", "/e").knobs.moe_kernel.family, "triton");
}

// A grouped GEMM's FP8 rate by rows per expert: read in log2(rows) between its points and
// held beyond them; a family without the table keeps its flat figure. The two Hopper
// tables are DeepGEMM README's rates (H800; 256, 512, 1,024 rows masked, 4,096 and 8,192
// contiguous), the two expert GEMMs together (gate/up two thirds of the FLOPs, down one
// third), and TensorRT-LLM's CUTLASS backend the same rows over the README's speedups.
TEST(ServingEngines, GroupedGemmRateFollowsTheRowsPerExpert) {
  MoeKernelRates r;
  r.compute_fp8 = 0.3;
  EXPECT_EQ(r.compute_fp8_at(500), 0.3);
  r.compute_fp8_by_rows = {{256, 0.4}, {1024, 0.6}};
  EXPECT_DOUBLE_EQ(*r.compute_fp8_at(100), 0.4);
  EXPECT_DOUBLE_EQ(*r.compute_fp8_at(512), 0.5);
  EXPECT_DOUBLE_EQ(*r.compute_fp8_at(1024), 0.6);
  EXPECT_DOUBLE_EQ(*r.compute_fp8_at(1e6), 0.6);
  const double peak = 1978.9;
  auto pair = [&](double gate_up, double down) { return 3.0 / (2.0 / gate_up + 1.0 / down) / peak; };
  const MoeKernel deepgemm = io::moe_kernel_family("deepgemm", "/k");
  const MoeKernel cutlass = io::moe_kernel_family("trtllm-cutlass", "/k");
  const MoeKernelRates* dg = deepgemm.for_gpu("h200-sxm-141gb", "hopper");
  ASSERT_NE(dg, nullptr);
  EXPECT_NEAR(*dg->compute_fp8_at(256), pair(932, 815), 1e-3);
  EXPECT_NEAR(*dg->compute_fp8_at(1024), pair(1233, 925), 1e-3);
  EXPECT_NEAR(*dg->compute_fp8_at(8192), pair(1346, 1214), 1e-3);
  const MoeKernelRates* tc = cutlass.for_gpu("h100-sxm5-80gb", "hopper");
  ASSERT_NE(tc, nullptr);
  EXPECT_NEAR(*tc->compute_fp8_at(512), pair(1040 / 1.2, 916 / 1.2), 1e-3);
  EXPECT_NEAR(*tc->compute_fp8_at(4096), pair(1346 / 1.3, 1214 / 1.2), 1e-3);
  // Fewer rows an expert compute slower, in both families.
  for (const MoeKernelRates* f : {dg, tc}) EXPECT_LT(*f->compute_fp8_at(300), *f->compute_fp8_at(3000));
  // In a prefill step: DeepSeek-R1 (block-scaled FP8) on TensorRT-LLM at EP 8, where each
  // expert's rows grow with the prompt (about 380 on the busiest rank at 8,192 tokens, 1,520
  // at 32,768), 4x the tokens take less time over 4x than at one flat rate (the table's
  // 8,192-row figure), which charges the smaller step too little.
  Scenario s = testing::deepseek_on_h200();
  s.inference->ep = 8;
  s.inference->fp8_block_scaling = true;
  s.inference->profile = io::select_engine_profile("trtllm", "1.0.0", "/e");
  auto growth = [&](const Scenario& sc) {
    const hw::RooflineCostModel cost(sc.system);
    const IterationModel it(sc.model, sc.system, *sc.inference, cost);
    auto experts = [&](int64_t tokens) {
      IterationBatch b;
      b.prefills.push_back({tokens, 0, true});
      return it.parts(b).routed_experts;
    };
    return experts(32768) / experts(8192);
  };
  Scenario flat = s;
  for (auto& rate : flat.inference->profile.knobs.moe_kernel.rates) {
    rate.compute_fp8 = rate.compute_fp8_at(8192);
    rate.compute_fp8_by_rows.clear();
  }
  EXPECT_LT(growth(s), 0.95 * growth(flat));
}

// Front-end time per request and host time per sequence from published timings: TensorRT-LLM's,
// SGLang 0.4's and vLLM 0.7's front ends at most their TTFT p50 less TPOT p50 on one
// harness, the smallest over its load levels (5.71 - 1.39, 7.80 - 1.10 and 9.20 - 1.59
// ms); TGI's Python shard per running
// sequence from TGI 1.0.1's decode time per added sequence on one and four shards (batch 1
// -> 32: 30.42 -> 37.99 ms and 16.34 -> 22.09 ms), the GPU's share a quarter on four. A TGI
// step's host time grows by that much a sequence, after the GPU (its router awaits each call).
TEST(ServingEngines, HostTimesFromPublishedTimings) {
  EXPECT_NEAR(io::select_engine_profile("trtllm", "1.0.0", "/e").knobs.request_overhead_s, (5.71 - 1.39) * 1e-3, 5e-5);
  EXPECT_NEAR(io::select_engine_profile("sglang", "0.4.6", "/e").knobs.request_overhead_s, (7.80 - 1.10) * 1e-3, 5e-5);
  // vLLM's V0 engine: 0.7 releases by the same rule (9.20 - 1.59 ms on 0.7.2); the 0.6
  // releases keep the one TTFT published for them less the forward's weight read.
  EXPECT_NEAR(io::select_engine_profile("vllm", "0.7.2", "/e").knobs.request_overhead_s, (9.20 - 1.59) * 1e-3, 5e-5);
  EXPECT_DOUBLE_EQ(io::select_engine_profile("vllm", "0.6.4", "/e").knobs.request_overhead_s, 41e-3);
  const double one = (37.99 - 30.42) / 31, four = (22.09 - 16.34) / 31;  // ms a sequence
  const double gpu = (one - four) / (1.0 - 0.25), host = one - gpu;
  const EngineProfile tgi = io::select_engine_profile("tgi", "1.4.5", "/e");
  EXPECT_NEAR(tgi.knobs.step_overhead_per_seq_s, host * 1e-3, 1e-6);  // 0.166 ms
  // 2.x and 3.x run the same per-request loop after the forward (no later measurement).
  for (const char* v : {"2.0.4", "3.0.1"})
    EXPECT_EQ(io::select_engine_profile("tgi", v, "/e").knobs.step_overhead_per_seq_s, tgi.knobs.step_overhead_per_seq_s) << v;
  Scenario s = testing::on_one_node("llama2-7b", "a100-sxm4-80gb", 1);
  s.inference->profile = tgi;
  const hw::RooflineCostModel cost(s.system);
  const IterationModel it(s.model, s.system, *s.inference, cost);
  auto step = [&](int64_t n) {
    IterationBatch b;
    b.decodes = n;
    b.decode_context = 16.0 * static_cast<double>(n);
    return std::pair{it.host_seconds(b), it.seconds(b) - it.gpu_seconds(b)};
  };
  EXPECT_NEAR(step(32).first - step(1).first, 31 * tgi.knobs.step_overhead_per_seq_s, 1e-12);
  EXPECT_NEAR(step(32).second, step(32).first, 1e-12);  // not hidden behind the GPU
}

// A profile naming a kernel family that data/moe_kernels.json lacks is an input error at
// the knob that lists the valid families.
TEST(ServingEngines, UnknownMoeKernelIsAnInputErrorNamingTheValidOnes) {
  auto doc = io::read_json_file(io::data_dir() / "engines" / "trtllm.json");
  doc["knobs"]["moe_kernel"]["value"] = "cutlas";
  try {
    io::engine_profile_from_json(doc, "x.json");
    FAIL() << "expected an input error";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].pointer, "x.json#/knobs/moe_kernel/value");
    EXPECT_EQ(e.issues()[0].rule, "unknown MoE kernel family; valid: deepgemm, triton, triton-tuned, trtllm-cutlass");
  }
  doc["knobs"]["moe_kernel"]["value"] = 3;
  EXPECT_THROW(io::engine_profile_from_json(doc, "x.json"), InputError);
}

// DeepSeek's group-limited top-k routing: vLLM before 0.10.2 and SGLang before 0.4.5.post1
// ran it as compiled PyTorch ops, 28.0 us + 31.8 ns a token more a routed-expert layer than
// one fused kernel (SGLang PR #5371's H200 profile, 36 -> 8 us at decode; vLLM PR #21107's
// H200 timings at 5,000-40,000 tokens); from those releases the fused kernel costs nothing
// beyond the fused-MoE figures. Models without group-limited routing never pay it.
TEST(ServingEngines, GroupedTopkRoutingCostsUntilTheFusedKernel) {
  for (const auto& [engine, compiled, fused] : {std::tuple<const char*, const char*, const char*>{"vllm", "0.8.4", "0.10.2"},
                                                {"sglang", "0.4.5", "0.4.5.post1"}}) {
    const EngineProfile before = io::select_engine_profile(engine, compiled, "/e");
    EXPECT_DOUBLE_EQ(before.knobs.grouped_topk_s, 28.0e-6) << engine;
    EXPECT_DOUBLE_EQ(before.knobs.grouped_topk_s_per_token, 31.8e-9) << engine;
    const EngineProfile after = io::select_engine_profile(engine, fused, "/e");
    EXPECT_EQ(after.knobs.grouped_topk_s, 0.0) << engine;
    EXPECT_EQ(after.knobs.grouped_topk_s_per_token, 0.0) << engine;
  }
  for (const int64_t tokens : {8, 4096}) {
    Scenario s = testing::deepseek_on_h200();
    s.inference->profile = io::select_engine_profile("vllm", "0.8.4", "/e");
    const hw::RooflineCostModel cost(s.system);
    IterationBatch b;
    if (tokens == 8) {
      b.decodes = 8;
      b.decode_context = 8 * 1024;
    } else {
      b.prefills.push_back({tokens, 0, true});
    }
    const double with = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
    Scenario fused = s;
    fused.inference->profile.knobs.grouped_topk_s = fused.inference->profile.knobs.grouped_topk_s_per_token = 0;
    const double without = IterationModel(fused.model, fused.system, *fused.inference, cost).gpu_seconds(b);
    const double moe_layers = static_cast<double>(std::count(s.model.moe_layer.begin(), s.model.moe_layer.end(), true));
    EXPECT_NEAR(with - without, moe_layers * (28.0e-6 + 31.8e-9 * static_cast<double>(tokens)), 1e-12) << tokens;
  }
  // Qwen3-30B-A3B routes over all its experts: the knob changes nothing.
  Scenario q = testing::on_one_node("qwen3-30b-a3b", "h200-sxm-141gb", 1);
  q.inference->profile = io::select_engine_profile("vllm", "0.8.4", "/e");
  const hw::RooflineCostModel qcost(q.system);
  IterationBatch b;
  b.decodes = 8;
  b.decode_context = 8 * 1024;
  const double with = IterationModel(q.model, q.system, *q.inference, qcost).gpu_seconds(b);
  q.inference->profile.knobs.grouped_topk_s = q.inference->profile.knobs.grouped_topk_s_per_token = 0;
  EXPECT_DOUBLE_EQ(with, IterationModel(q.model, q.system, *q.inference, qcost).gpu_seconds(b));
}

// Decode of a few tokens streams the touched experts' weights and nothing else bounds the
// MoE kernel: with no fixed time and nothing unhidden, each MoE layer's expert time is
// weight bytes / (rate x HBM peak) plus the preset's time per touched expert, so the
// engine's kernel family changes the step by exactly the layers' stream time times
// (1 - preset rate / family rate) and that per-expert time: a family line that gives its own
// rate but no per-expert term was fitted without one and charges none.
TEST(ServingEngines, MoeKernelFamilyScalesTheDecodeWeightStreamByTheRateRatio) {
  Scenario s = testing::on_one_node("qwen3-30b-a3b", "h200-sxm-141gb", 1);
  InferencePlan& p = *s.inference;
  p.weight_dtype = DType::fp8;
  p.activation_dtype = DType::fp8;
  p.fp8_block_scaling = true;
  GpuEfficiency& e = s.system.gpu.efficiency;
  ASSERT_GT(e.moe_kernel_expert_us.value, 0);
  e.moe_kernel_fixed_us.value = 0;
  e.moe_kernel_unhidden.value = 0;
  const hw::RooflineCostModel cost(s.system);
  IterationBatch b;
  b.decodes = 4;
  b.decode_context = 4 * 256;
  s.inference->profile.knobs.moe_kernel = io::moe_kernel_family("triton", "/k");
  const double triton = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  MoeKernel fam = io::moe_kernel_family("deepgemm", "/k");
  ASSERT_NE(fam.for_gpu("h200-sxm-141gb", "hopper"), nullptr);
  ASSERT_FALSE(fam.for_gpu("h200-sxm-141gb", "hopper")->expert_us.has_value());
  const double rate = *fam.for_gpu("h200-sxm-141gb", "hopper")->hbm;
  s.inference->profile.knobs.moe_kernel = fam;
  const double deepgemm = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  const auto& moe = *s.model.moe;
  const double experts = static_cast<double>(moe.num_experts);
  const double touched = experts * (1.0 - std::pow(1.0 - static_cast<double>(moe.top_k) / experts, 4.0));
  const double bytes = touched * static_cast<double>(s.model.hidden * moe.expert_intermediate) * 3.0;  // fp8
  const double stream = bytes / (s.system.gpu.hbm_bandwidth().value * e.moe_kernel_hbm.value);
  const double per_expert = e.moe_kernel_expert_us.value * 1e-6 * touched;
  EXPECT_NEAR(triton - deepgemm,
              static_cast<double>(s.model.layers) * (stream * (1.0 - e.moe_kernel_hbm.value / rate) + per_expert), 1e-12);
  // Its figures are for block-scaled FP8 (fp8_block_only): per-tensor FP8 experts, and
  // TensorRT-LLM's CUTLASS family with them, run the preset's rates.
  s.inference->fp8_block_scaling = false;
  const double per_tensor_deepgemm = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  s.inference->profile.knobs.moe_kernel = io::moe_kernel_family("trtllm-cutlass", "/k");
  const double per_tensor_cutlass = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  s.inference->profile.knobs.moe_kernel = io::moe_kernel_family("triton", "/k");
  const double per_tensor_triton = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  EXPECT_DOUBLE_EQ(per_tensor_deepgemm, per_tensor_triton);
  EXPECT_DOUBLE_EQ(per_tensor_cutlass, per_tensor_triton);
  s.inference->profile.knobs.moe_kernel = io::moe_kernel_family("trtllm-cutlass", "/k");
  s.inference->fp8_block_scaling = true;
  EXPECT_DOUBLE_EQ(IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b), deepgemm);
  // The same family on 16-bit experts holds no figure (fp8_only): the preset's rates apply.
  s.inference->profile.knobs.moe_kernel = fam;
  s.inference->weight_dtype = DType::bf16;
  s.inference->activation_dtype = DType::bf16;
  const double bf16_family = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  s.inference->profile.knobs.moe_kernel = io::moe_kernel_family("triton", "/k");
  EXPECT_DOUBLE_EQ(bf16_family, IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b));
}

Scenario llama8b() {
  Scenario s = testing::on_one_node("llama3-8b", "h100-sxm5-80gb", 1);
  InferencePlan& p = *s.inference;
  p.workload.mode = ServingWorkload::Mode::offline;
  p.workload.num_requests = 1;
  p.workload.input_tokens = {LengthDist::Kind::fixed, 100, 0, 0};
  p.workload.output_tokens = {LengthDist::Kind::fixed, 20, 0, 0};
  return s;
}

// Host time per step adds to the GPU time, or hides behind it when the engine overlaps.
TEST(ServingEngines, HostTimeAddsOrOverlaps) {
  Scenario s = llama8b();
  const hw::RooflineCostModel cost(s.system);
  IterationBatch b;
  b.decodes = 8;
  b.decode_context = 8 * 500;
  const double gpu = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  s.inference->profile.knobs.step_overhead_s = 2e-3;
  s.inference->profile.knobs.step_overhead_per_seq_s = 50e-6;
  s.inference->profile.knobs.host_overlaps_gpu = false;  // vLLM before 0.14, SGLang 0.3
  const IterationModel serial(s.model, s.system, *s.inference, cost);
  EXPECT_DOUBLE_EQ(serial.host_seconds(b), 2e-3 + 8 * 50e-6);
  EXPECT_DOUBLE_EQ(serial.seconds(b), gpu + 2.4e-3);
  s.inference->profile.knobs.host_overlaps_gpu = true;
  const IterationModel overlapped(s.model, s.system, *s.inference, cost);
  EXPECT_DOUBLE_EQ(overlapped.seconds(b), std::max(gpu, 2.4e-3));
  s.inference->profile.knobs.step_overhead_s = 1.0;  // a host-bound engine
  EXPECT_DOUBLE_EQ(IterationModel(s.model, s.system, *s.inference, cost).seconds(b), 1.0 + 8 * 50e-6);
  // A measured per-step figure in the scenario replaces the profile's host model.
  s.inference->engine.step_overhead_ms = 3.0;
  const IterationModel measured(s.model, s.system, *s.inference, cost);
  EXPECT_DOUBLE_EQ(measured.seconds(b), gpu + 3e-3);
}

// The per-request host time delays every token of a lone request by exactly that much.
TEST(ServingEngines, RequestOverheadDelaysTheFirstToken) {
  Scenario s = llama8b();
  s.inference->profile.knobs.request_overhead_s = 0;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult base = simulate_serving(s, cost);
  s.inference->profile.knobs.request_overhead_s = 0.041;
  const ServingResult slow = simulate_serving(s, cost);
  ASSERT_EQ(slow.requests.size(), 1u);
  EXPECT_NEAR(slow.requests[0].ttft(), base.requests[0].ttft() + 0.041, 1e-12);
  EXPECT_NEAR(slow.requests[0].tpot(), base.requests[0].tpot(), 1e-12);
}

// Without chunked prefill a preempted sequence comes back as a prompt longer than any
// input; the step budget covers it, so a run that preempts still finishes.
TEST(ServingEngines, UnchunkedPreemptionFinishes) {
  Scenario s = llama8b();
  s.inference->engine.chunked_prefill = false;
  s.inference->engine.gpu_memory_utilization = 0.3;
  s.inference->engine.max_num_seqs = 512;
  s.inference->workload.num_requests = 200;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 4000, 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, 2000, 0, 0};
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost);
  EXPECT_GT(r.preemptions, 0);
  EXPECT_GE(r.engine.max_num_batched_tokens, 6000);
  for (const auto& q : r.requests) EXPECT_GT(q.finish, 0.0);
}

// Reserving every output token's blocks at admission (TensorRT-LLM's GUARANTEED_NO_EVICT)
// never preempts under the same pressure that makes on-demand allocation preempt, and
// never holds more sequences than the blocks of their whole lengths allow.
TEST(ServingEngines, ReservingToCompletionNeverPreempts) {
  Scenario s = llama8b();
  s.inference->engine.gpu_memory_utilization = 0.3;
  s.inference->engine.max_num_seqs = 512;
  s.inference->workload.num_requests = 200;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 4000, 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, 2000, 0, 0};
  s.inference->engine.chunked_prefill = true;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult on_demand = simulate_serving(s, cost);
  ASSERT_GT(on_demand.preemptions, 0);
  s.inference->profile.knobs.reserve_to_completion = true;
  const ServingResult reserved = simulate_serving(s, cost, 20261129, true);
  EXPECT_EQ(reserved.preemptions, 0);
  for (const auto& q : reserved.requests) EXPECT_GT(q.finish, 0.0);
  const int64_t bs = reserved.engine.block_size;
  const int64_t per_request = (4000 + 2000 + bs - 1) / bs;
  const int64_t most = reserved.memory.num_blocks / per_request;
  ASSERT_FALSE(reserved.timeline.empty());
  for (const auto& it : reserved.timeline) EXPECT_LE(it.decodes, most);
  for (const auto& it : reserved.timeline)
    EXPECT_LE(it.kv_utilization * static_cast<double>(reserved.memory.num_blocks), static_cast<double>(most * per_request) + 0.5);
}

// Attention data parallelism keeps whole attention weights and each sequence's whole KV
// on the GPU that runs it: per-token KV bytes are the model's (no head split), the
// replica's blocks are the GPUs' together, and the weights grow by the attention and
// dense weights no longer split over tp.
TEST(AttentionDp, MemoryKeepsWholeAttentionAndKvPerGpu) {
  Scenario s = testing::on_one_node("qwen3-235b-a22b", "h200-sxm-141gb", 8);
  InferencePlan& p = *s.inference;
  p.ep = 8;
  p.weight_dtype = p.activation_dtype = DType::fp8;
  p.kv_dtype = DType::fp8;
  p.attention_dp = false;
  const InferenceMemory tp_mem = inference_memory(s.model, s.system, p);
  p.attention_dp = true;
  const InferenceMemory dp_mem = inference_memory(s.model, s.system, p);
  EXPECT_DOUBLE_EQ(dp_mem.kv_bytes_per_token, kv_cache_bytes_per_token(s.model, DType::fp8));
  const double per_gpu_blocks =
      std::floor(dp_mem.kv_budget_bytes / (static_cast<double>(dp_mem.block_size) * dp_mem.kv_bytes_per_token));
  EXPECT_EQ(dp_mem.num_blocks, static_cast<int64_t>(per_gpu_blocks) * 8);
  double attention = 0;
  for (int64_t i = 0; i < s.model.layers; ++i) {
    const LayerParams lp = layer_params(s.model, i);
    attention += static_cast<double>(lp.attention + lp.dense_mlp + lp.shared_experts);
  }
  EXPECT_NEAR(dp_mem.weights_bytes - tp_mem.weights_bytes, attention * (1.0 - 1.0 / 8.0), 1e-9 * dp_mem.weights_bytes);
}

// On a dense model attention DP over 2 GPUs is two independent GPUs: a decode step of 2n
// sequences takes what one GPU with whole weights takes for n of them (the output head,
// still split over tp, within 2%).
TEST(AttentionDp, DenseDecodeStepIsOneGpuOnItsShare) {
  Scenario s = llama8b();
  s.system.num_gpus = 2;
  const hw::RooflineCostModel cost(s.system);
  IterationBatch one;
  one.decodes = 64;
  one.decode_context = 64 * 2000;
  const double single = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(one);
  s.inference->tp = 2;
  s.inference->attention_dp = true;
  IterationBatch two = one;
  two.decodes = 128;
  two.decode_context = 128 * 2000;
  EXPECT_NEAR(IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(two), single, 0.02 * single);
}

// "auto" layouts consider attention DP only with ep "auto" and where the engine has it;
// a stated ep keeps it off unless the scenario turns it on.
TEST(AttentionDp, AutoConsidersItOnlyWhereTheEngineHasIt) {
  Scenario s = testing::on_one_node("qwen3-30b-a3b", "h100-sxm5-80gb", 4);
  InferencePlan& p = *s.inference;
  p.ep = std::nullopt;
  p.workload.mode = ServingWorkload::Mode::offline;
  p.workload.num_requests = 64;
  p.workload.input_tokens = {LengthDist::Kind::fixed, 512, 0, 0};
  p.workload.output_tokens = {LengthDist::Kind::fixed, 64, 0, 0};
  p.profile = io::select_engine_profile("sglang", "0.3.0", "/e");
  const hw::RooflineCostModel cost(s.system);
  EXPECT_FALSE(simulate_serving(s, cost).attention_dp);
  s.inference->ep = 4;
  s.inference->profile = io::select_engine_profile("trtllm", "1.0", "/e");
  EXPECT_FALSE(simulate_serving(s, cost).attention_dp);
  s.inference->attention_dp = true;
  EXPECT_TRUE(simulate_serving(s, cost).attention_dp);
}

/// DeepSeek-V3 with its FP8 checkpoint on one H200 node at TP8, served by SGLang 0.5.7.
Scenario deepseek_v3_on_sglang() {
  Scenario s = testing::deepseek_on_h200();
  s.inference->profile = io::select_engine_profile("sglang", "0.5.7", "/e");
  return s;
}

/// The roofline, except that the tile model's GEMM compute takes a second a call.
class SlowTiledGemm : public CostModel {
 public:
  explicit SlowTiledGemm(const SystemSpec& sys) : base_(sys) {}
  Seconds gemm(int64_t m, int64_t n, int64_t k, DType d, int64_t b) const override { return base_.gemm(m, n, k, d, b); }
  Seconds gemm_compute(int64_t, int64_t, int64_t, DType, int64_t) const override { return Seconds(1.0); }
  Seconds attention(const AttentionShape& a, bool bwd) const override { return base_.attention(a, bwd); }
  Seconds memory_bound(Bytes b) const override { return base_.memory_bound(b); }
  Seconds collective(CollectiveKind k, Bytes b, const Group& g) const override { return base_.collective(k, b, g); }
  Seconds p2p(Bytes b, bool cross_node) const override { return base_.p2p(b, cross_node); }
  std::vector<std::pair<std::string, std::string>> provenance() const override { return base_.provenance(); }

 private:
  hw::RooflineCostModel base_;
};

// Block-FP8 linear layers: SGLang runs DeepGEMM, whose per-shape tiles fill the SMs, so its
// GEMMs never take the tile model's time; vLLM's fixed-tile CUTLASS kernel (before 0.11)
// does. Each of DeepSeek-V3's 61 layers has five MLA projections priced by the kernel.
TEST(BlockFp8Gemm, DeepGemmIsBoundByItsRateAndTheStreamNotTheTileModel) {
  Scenario s = deepseek_v3_on_sglang();
  ASSERT_TRUE(s.inference->profile.knobs.block_fp8_gemm_fills_sms);
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.8.4", "/e").knobs.block_fp8_gemm_fills_sms);
  // DeepGEMM became vLLM's default in 0.11 (PR #24462) and TensorRT-LLM's in 0.19 (PR #3341).
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.10.2", "/e").knobs.block_fp8_gemm_fills_sms);
  EXPECT_TRUE(io::select_engine_profile("vllm", "0.11.0", "/e").knobs.block_fp8_gemm_fills_sms);
  EXPECT_FALSE(io::select_engine_profile("trtllm", "0.18.2", "/e").knobs.block_fp8_gemm_fills_sms);
  EXPECT_TRUE(io::select_engine_profile("trtllm", "1.0.0", "/e").knobs.block_fp8_gemm_fills_sms);
  IterationBatch b;
  b.decodes = 64;
  b.decode_context = 64 * 1024;
  const SlowTiledGemm slow(s.system);
  // The output head (16-bit) is the one tile-model GEMM left: one second.
  const double deepgemm = IterationModel(s.model, s.system, *s.inference, slow).gpu_seconds(b);
  EXPECT_GT(deepgemm, 1.0);
  EXPECT_LT(deepgemm, 1.1);
  s.inference->profile.knobs.block_fp8_gemm_fills_sms = false;
  EXPECT_GT(IterationModel(s.model, s.system, *s.inference, slow).gpu_seconds(b), 61.0 * 5.0);
  // With the real cost model, at one decode row both stream the same weights.
  const hw::RooflineCostModel cost(s.system);
  b.decodes = 1;
  b.decode_context = 1024;
  const double fixed_one = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  s.inference->profile.knobs.block_fp8_gemm_fills_sms = true;
  EXPECT_NEAR(IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b), fixed_one, 0.02 * fixed_one);
}

// SGLang fuses DeepSeek's shared expert into the routed-expert kernel as expert 257, which
// every token picks: a decode step streams one more expert's weights instead of running a
// separate MLP. Under expert parallelism the shared expert stays separate.
TEST(SharedExpertFusion, FusedSharedExpertIsOneMoreExpertEveryTokenPicks) {
  Scenario s = deepseek_v3_on_sglang();
  ASSERT_TRUE(s.inference->profile.knobs.fused_shared_expert);
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.8.4", "/e").knobs.fused_shared_expert);
  const hw::RooflineCostModel cost(s.system);
  const double bytes_per_s = s.system.gpu.hbm_bandwidth().value * s.system.gpu.efficiency.moe_kernel_hbm.value;
  // One decode row touches its 8 routed experts; fused, the shared one streams with them
  // at the MoE kernel's rate: 3 x 7168 x 2048 / 8 fp8 bytes a layer, 58 layers with experts.
  IterationBatch b;
  b.decodes = 1;
  b.decode_context = 1024;
  const double fused = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  s.inference->profile.knobs.fused_shared_expert = false;
  const double separate = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  EXPECT_LT(fused, separate);
  // What fusing adds is the shared expert's weight stream, far less than the MLP it removes.
  const double added = 58.0 * 3.0 * 7168.0 * 2048.0 / 8.0 / bytes_per_s;
  EXPECT_GT(separate - fused, added);
  // Under expert parallelism nothing changes.
  s.inference->ep = 8;
  const double ep_separate = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  s.inference->profile.knobs.fused_shared_expert = true;
  EXPECT_DOUBLE_EQ(IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b), ep_separate);
}

// Under attention DP a prompt runs on one rank and gets at most that rank's budget a step.
// SGLang divides --chunked-prefill-size among its DP ranks (the group's budget stays
// 8192, a rank prefills 8192 / 4); an engine whose every rank has the whole budget
// prefills a 6000-token prompt in one step, its group taking 4 x 8192.
TEST(AttentionDp, EngineThatDividesTheBudgetChunksByTheRankShare) {
  Scenario s = testing::on_one_node("qwen3-30b-a3b", "h100-sxm5-80gb", 4);
  InferencePlan& p = *s.inference;
  p.ep = 4;
  p.attention_dp = true;
  p.workload.mode = ServingWorkload::Mode::offline;
  p.workload.num_requests = 1;
  p.workload.input_tokens = {LengthDist::Kind::fixed, 6000, 0, 0};
  p.workload.output_tokens = {LengthDist::Kind::fixed, 2, 0, 0};
  p.profile = io::select_engine_profile("sglang", "0.5.7", "/e");
  ASSERT_TRUE(p.profile.knobs.dp_attention_divides_batched_tokens);
  ASSERT_EQ(p.profile.knobs.max_num_batched_tokens, 8192);
  const hw::RooflineCostModel cost(s.system);
  const ServingResult divided = simulate_serving(s, cost, 20261201, true);
  EXPECT_EQ(divided.engine.max_num_batched_tokens, 8192);
  std::vector<int64_t> chunks;
  for (const auto& it : divided.timeline)
    if (it.prefill_tokens > 0) chunks.push_back(it.prefill_tokens);
  EXPECT_EQ(chunks, (std::vector<int64_t>{2048, 2048, 1904}));
  s.inference->profile.knobs.dp_attention_divides_batched_tokens = false;
  const ServingResult whole = simulate_serving(s, cost, 20261201, true);
  EXPECT_EQ(whole.engine.max_num_batched_tokens, 4 * 8192);
  ASSERT_FALSE(whole.timeline.empty());
  EXPECT_EQ(whole.timeline.front().prefill_tokens, 6000);
  // The profiling pass of a rank holds its share of the budget.
  EXPECT_LT(divided.memory.activation_peak_bytes, whole.memory.activation_peak_bytes);
}

// A request that can never fit the KV cache is a "does not fit" answer.
TEST(ServingEngines, RequestLargerThanTheCacheDoesNotFit) {
  Scenario s = llama8b();
  s.inference->engine.gpu_memory_utilization = 0.2;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 1e6, 0, 0};
  const hw::RooflineCostModel cost(s.system);
  EXPECT_THROW(simulate_serving(s, cost), ServingDoesNotFit);
}

// An engine that does not mix prompts into decode batches runs a prompt-only step when a
// prompt arrives, and the decodes wait for it: a lone decoding request's gap around a
// newcomer's prefill is the prefill step plus its own decode step, where a mixing engine
// has one mixed step.
TEST(ServingEngines, UnmixedEngineRunsPromptOnlySteps) {
  Scenario s = llama8b();
  s.inference->workload.mode = ServingWorkload::Mode::trace;
  s.inference->workload.trace = {{0.0, 100, 200, "", 0}, {0.5, 3000, 2, "", 0}};
  s.inference->profile.knobs.step_overhead_s = 0;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult mixed = simulate_serving(s, cost);
  s.inference->profile.knobs.mixed_prefill_decode = false;
  const ServingResult unmixed = simulate_serving(s, cost, kServingSeed, false, TokenGaps::per_request);
  const IterationModel im(s.model, s.system, *s.inference, cost);
  IterationBatch prompt;
  prompt.prefills.push_back({3000, 0, true});
  // The newcomer's first token comes after its prompt-only step, sooner than when it
  // shares a step with the decode.
  EXPECT_LT(unmixed.requests[1].ttft(), mixed.requests[1].ttft());
  // The decoding request's largest gap holds the prompt-only step and its own decode.
  const double gap = *std::max_element(unmixed.requests[0].itl.begin(), unmixed.requests[0].itl.end());
  EXPECT_GT(gap, im.seconds(prompt));
  EXPECT_GT(unmixed.iterations, mixed.iterations);
}

// Under attention DP an unmixed engine's ranks form their own batches (SGLang's
// prepare_mlp_sync_batch_raw): requests go to the ranks in turn, and a rank without prompt
// work decodes in the step another rank prefills, at that step's pace. A decoding request
// therefore waits for a newcomer's prompt only when the newcomer lands on its own rank.
TEST(ServingEngines, UnmixedAttentionDpRanksDecodeWhileAnotherPrefills) {
  auto largest_gap = [](const std::vector<TraceRequest>& trace, bool dp) {
    Scenario s = testing::on_one_node("llama3-8b", "h100-sxm5-80gb", 2);
    s.inference->attention_dp = dp;
    s.inference->workload.mode = ServingWorkload::Mode::trace;
    s.inference->workload.trace = trace;
    s.inference->profile.knobs.step_overhead_s = 0;
    s.inference->profile.knobs.mixed_prefill_decode = false;
    const hw::RooflineCostModel cost(s.system);
    const ServingResult r = simulate_serving(s, cost, kServingSeed, false, TokenGaps::per_request);
    const IterationModel im(s.model, s.system, *s.inference, cost);
    IterationBatch prompt, decode;
    prompt.prefills.push_back({2000, 0, true});
    prompt.busiest_rank_prompt_tokens = dp ? 2000 : 0;  // the whole prompt on one rank
    decode.decodes = 1;
    decode.decode_context = 150.0;
    return std::tuple{*std::max_element(r.requests[0].itl.begin(), r.requests[0].itl.end()), im.seconds(prompt),
                      im.seconds(decode)};
  };
  {
    // The rank that holds the whole prompt sets the step's attention-side work.
    Scenario s = testing::on_one_node("llama3-8b", "h100-sxm5-80gb", 2);
    s.inference->attention_dp = true;
    const hw::RooflineCostModel cost(s.system);
    const IterationModel im(s.model, s.system, *s.inference, cost);
    IterationBatch spread;
    spread.prefills.push_back({2000, 0, true});
    IterationBatch one_rank = spread;
    one_rank.busiest_rank_prompt_tokens = 2000;
    EXPECT_GT(im.parts(one_rank).attention_projections, 1.5 * im.parts(spread).attention_projections);
    one_rank.busiest_rank_prompt_tokens = 500;  // below the even share: the share stands
    EXPECT_DOUBLE_EQ(im.seconds(one_rank), im.seconds(spread));
  }
  // The newcomer is the second request: the other rank's.
  const std::vector<TraceRequest> other = {{0.0, 100, 400, "", 0}, {0.5, 2000, 2, "", 0}};
  const auto [gap, prompt_s, decode_s] = largest_gap(other, true);
  EXPECT_GT(gap, 2.0 * decode_s);                // the step carries the other rank's prompt
  EXPECT_LT(gap, prompt_s + 0.5 * decode_s);     // and the decode rides along in it
  // The newcomer is the third request: the decoding request's own rank.
  const std::vector<TraceRequest> same = {{0.0, 100, 400, "", 0}, {0.2, 10, 1, "", 0}, {0.5, 2000, 2, "", 0}};
  EXPECT_GT(std::get<0>(largest_gap(same, true)), prompt_s + 0.5 * decode_s);
  // Without attention DP the whole group prefills and every decode waits.
  const auto [tp_gap, tp_prompt_s, tp_decode_s] = largest_gap(other, false);
  EXPECT_GT(tp_gap, tp_prompt_s + 0.5 * tp_decode_s);
}

// An engine whose host runs one batch ahead (TensorRT-LLM's overlap scheduler, SGLang's
// overlapped event loop) prepared the next batch when it launched the one in flight: a
// request arriving mid-step joins the batch after next. Its prompt starts exactly one step
// later than on an engine that schedules when the step ends; the request already decoding
// is not delayed, and a request reaching an idle engine starts at once on both.
TEST(ServingEngines, OverlappedHostAdmitsOneBatchLate) {
  Scenario s = llama8b();
  s.inference->workload.mode = ServingWorkload::Mode::trace;
  s.inference->workload.trace = {{0.0, 100, 400, "", 0}, {0.5, 1000, 5, "", 0}};
  s.inference->profile.knobs.step_overhead_s = 0;
  s.inference->profile.knobs.step_overhead_per_seq_s = 0;
  s.inference->profile.knobs.request_overhead_s = 0;  // arrivals reach the scheduler as they come
  s.inference->profile.knobs.host_overlaps_gpu = false;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult serial = simulate_serving(s, cost, 20261201, true);
  s.inference->profile.knobs.host_overlaps_gpu = true;
  const ServingResult ahead = simulate_serving(s, cost, 20261201, true);
  auto first_prefill_after = [](const ServingResult& r, double t) {
    for (const auto& it : r.timeline)
      if (it.start >= t && it.prefill_tokens > 0) return it;
    return IterationRecord{};
  };
  auto in_flight_at = [](const ServingResult& r, double t) {
    for (const auto& it : r.timeline)
      if (it.start <= t && t < it.end) return it;
    return IterationRecord{};
  };
  // Without host time both engines run the same steps up to the arrival.
  const IterationRecord flight = in_flight_at(serial, 0.5);
  ASSERT_GT(flight.end, 0.5);
  EXPECT_DOUBLE_EQ(in_flight_at(ahead, 0.5).end, flight.end);
  // Scheduled when the step ends: the prompt starts then.
  EXPECT_DOUBLE_EQ(first_prefill_after(serial, 0.5).start, flight.end);
  // One batch ahead: the step prepared before the arrival runs first (the lone decode).
  const IterationRecord prepared = in_flight_at(ahead, flight.end);
  EXPECT_DOUBLE_EQ(prepared.start, flight.end);
  EXPECT_EQ(prepared.prefill_tokens, 0);
  EXPECT_EQ(prepared.decodes, 1);
  EXPECT_DOUBLE_EQ(first_prefill_after(ahead, 0.5).start, prepared.end);
  EXPECT_GT(ahead.requests[1].ttft(), serial.requests[1].ttft());
  // The first request reached an idle engine: the same first token on both.
  EXPECT_DOUBLE_EQ(ahead.requests[0].ttft(), serial.requests[0].ttft());
  // A batch prepared empty (the only request ends with the step in flight) leaves the host
  // loop free to take a newcomer at once: no step is lost.
  s.inference->workload.trace = {{0.0, 3000, 1, "", 0}, {0.01, 100, 5, "", 0}};
  s.inference->profile.knobs.host_overlaps_gpu = false;
  const ServingResult serial_lone = simulate_serving(s, cost);
  s.inference->profile.knobs.host_overlaps_gpu = true;
  const ServingResult ahead_lone = simulate_serving(s, cost);
  ASSERT_GT(serial_lone.requests[0].first_token, 0.01);
  EXPECT_DOUBLE_EQ(ahead_lone.requests[1].ttft(), serial_lone.requests[1].ttft());
}

// A request that arrives at the very instant a step starts reached the engine after the
// engine launched that step: an engine one batch ahead has already prepared the next batch
// without it, so its prompt runs two steps later, as for any arrival mid-step.
TEST(ServingEngines, ArrivalAsAStepStartsMissesTheBatchPreparedWithIt) {
  Scenario s = llama8b();
  s.inference->workload.mode = ServingWorkload::Mode::trace;
  s.inference->workload.trace = {{0.0, 100, 400, "", 0}};
  s.inference->profile.knobs.step_overhead_s = 0;
  s.inference->profile.knobs.step_overhead_per_seq_s = 0;
  s.inference->profile.knobs.request_overhead_s = 0;  // arrivals reach the scheduler as they come
  s.inference->profile.knobs.host_overlaps_gpu = true;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult alone = simulate_serving(s, cost, 20261201, true);
  ASSERT_GT(alone.timeline.size(), 20u);
  const double t = alone.timeline[10].start;
  s.inference->workload.trace = {{0.0, 100, 400, "", 0}, {t, 1000, 5, "", 0}};
  const ServingResult r = simulate_serving(s, cost, 20261201, true);
  size_t k = 0;
  while (k < r.timeline.size() && r.timeline[k].start < t) ++k;
  ASSERT_LT(k + 2, r.timeline.size());
  EXPECT_DOUBLE_EQ(r.timeline[k].start, t);
  EXPECT_EQ(r.timeline[k].prefill_tokens, 0);
  EXPECT_EQ(r.timeline[k + 1].prefill_tokens, 0);  // prepared while step k ran
  EXPECT_EQ(r.timeline[k + 2].prefill_tokens, 1000);
}

// TGI's router (0.9-2.x) takes a new batch while sequences decode only when the queue
// holds floor(running x waiting_served_ratio) requests, or once max_waiting_tokens decode
// steps (counted from 1 after the last prefill) have run: a lone newcomer behind one
// running sequence waits for the 19th decode after that sequence's prefill when the ratio
// asks for two, and goes at once when it asks for none.
TEST(ServingEngines, TgiPrefillWaitsForItsQueueOrItsSteps) {
  Scenario s = llama8b();
  s.inference->profile = io::select_engine_profile("tgi", "2.0.4", "/inference/engine");
  s.inference->workload.mode = ServingWorkload::Mode::trace;
  s.inference->workload.trace = {{0.0, 100, 400, "", 0}};
  const hw::RooflineCostModel cost(s.system);
  const ServingResult alone = simulate_serving(s, cost, 20261201, true);
  ASSERT_GT(alone.timeline.size(), 30u);
  ASSERT_GT(alone.timeline[0].prefill_tokens, 0);
  // The newcomer arrives while the first decode runs.
  const double t = alone.timeline[1].start;
  s.inference->workload.trace = {{0.0, 100, 400, "", 0}, {t, 100, 5, "", 0}};
  auto first_prefill_after = [&](double ratio) {
    s.inference->profile.knobs.prefill_wait_ratio = ratio;
    const ServingResult r = simulate_serving(s, cost, 20261201, true);
    for (size_t i = 1; i < r.timeline.size(); ++i)
      if (r.timeline[i].prefill_tokens > 0) return i;
    return r.timeline.size();
  };
  EXPECT_EQ(first_prefill_after(2.0), 20u);  // the prefill, then decodes 1..19
  EXPECT_EQ(first_prefill_after(0.5), 2u);   // floor(1 x 0.5) = 0 waiting are enough
  // Without the policy the engine takes it at the next step too.
  s.inference->profile.knobs.prefill_wait_steps = 0;
  EXPECT_EQ(first_prefill_after(0.0), 2u);
}

// TGI 3's launcher sizes the prefill budget when its user gives none (launcher/src/main.rs
// compute_optimal / vram_maximum). Llama-3-8B by its own count: (2 x 32 x 128 x 4096 x 3
// + 2 x 8 x 128 x 4096 x 2 + 2 x 3 x 4096 x 14336) x 32 = 15,032,385,536 FLOP a token, so
// 900e12 / that = 59,870 tokens on an H100 and 65,791 on an H200 (989, in the table from
// 3.1.0), capped by 8,192 positions; 2 x (32 x 192,944,128 + 2 x 4096 x 128256) =
// 14,449,770,496 bytes of weights and 260,096 a token cap it where memory binds.
TEST(ServingEngines, TgiLauncherPrefillBudget) {
  auto budget = [](const char* gpu, const char* release, int64_t positions, double memory) {
    Scenario s = llama8b();
    s.system.gpu = io::load_gpu(gpu);
    if (memory > 0) s.system.gpu.hbm_capacity_bytes = memory;
    s.model.max_position = positions;
    s.inference->profile = io::select_engine_profile("tgi", release, "/inference/engine");
    const hw::RooflineCostModel cost(s.system);
    return simulate_serving(s, cost).engine.max_num_batched_tokens;
  };
  EXPECT_EQ(budget("h100-sxm5-80gb", "3.0.1", 8192, 0), 8192);
  EXPECT_EQ(budget("h100-sxm5-80gb", "3.0.1", 131072, 0), 59870);
  EXPECT_EQ(budget("h200-sxm-141gb", "3.0.1", 131072, 0), 4096);  // not in 3.0's table
  EXPECT_EQ(budget("h200-sxm-141gb", "3.1.0", 131072, 0), 65791);
  // floor((floor(20e9 x 0.95) - 14,449,770,496) / 260,096)
  EXPECT_EQ(budget("h100-sxm5-80gb", "3.0.1", 131072, 20e9), 17494);
  // A budget the scenario gives wins.
  Scenario s = llama8b();
  s.inference->profile = io::select_engine_profile("tgi", "3.0.1", "/inference/engine");
  s.inference->engine.max_num_batched_tokens = 2048;
  const hw::RooflineCostModel cost(s.system);
  EXPECT_EQ(simulate_serving(s, cost).engine.max_num_batched_tokens, 2048);
}

// The launcher reads a MoE config's keys as they stand. Mixtral-8x7B states
// num_local_experts 8 and two experts a token: (2 x 32 x 128 x 4096 x 3 + 2 x 8 x 128 x 4096
// x 2 + 2 x 3 x 4096 x 14336 x 2) x 32 = 26,306,674,688 FLOP a token, 2 x 900e12 / that =
// 68,423 on two H100s, where memory binds first: (floor(2 x 85,520,809,984 x 0.95) -
// 91,792,736,256 bytes of weights with all 8 experts) / 1,163,264 bytes a token = 60,774;
// at its own 32,768 positions those cap it. Qwen3-235B-A22B names its experts num_experts,
// which the launcher does not read (one expert), and its MLP intermediate_size 12,288 is
// counted 8 times a token: (2 x 64 x 128 x 4096 x 3 + 2 x 4 x 128 x 4096 x 2 + 2 x 3 x 4096
// x 12288 x 8) x 94 = 246,809,624,576 FLOP, 8 x 989e12 / that = 32,057 on eight H200s.
TEST(ServingEngines, TgiLauncherPrefillBudgetOfMoeModels) {
  auto budget = [](const char* model, const char* gpu, int64_t tp, const char* release, int64_t positions) {
    Scenario s = testing::on_one_node(model, gpu, tp);
    InferencePlan& p = *s.inference;
    p.workload.mode = ServingWorkload::Mode::offline;
    p.workload.num_requests = 1;
    p.workload.input_tokens = {LengthDist::Kind::fixed, 100, 0, 0};
    p.workload.output_tokens = {LengthDist::Kind::fixed, 4, 0, 0};
    p.weight_dtype = p.activation_dtype = DType::bf16;
    if (positions > 0) s.model.max_position = positions;
    p.profile = io::select_engine_profile("tgi", release, "/inference/engine");
    const hw::RooflineCostModel cost(s.system);
    return simulate_serving(s, cost).engine.max_num_batched_tokens;
  };
  EXPECT_EQ(budget("mixtral-8x7b", "h100-sxm5-80gb", 2, "3.0.1", 131072), 60774);
  EXPECT_EQ(budget("mixtral-8x7b", "h100-sxm5-80gb", 2, "3.0.1", 0), 32768);
  EXPECT_EQ(budget("qwen3-235b-a22b", "h200-sxm-141gb", 8, "3.1.0", 0), 32057);
}

// TurboMind up to 0.1.0a1 prefills every admitted prompt before the step's decode: a
// burst of equal prompts gets its first tokens together, one step after the whole
// burst's prefill; an engine that stops at its token budget hands them out one budget at
// a time, the first much sooner and the last no later.
TEST(ServingEngines, WholeQueuePrefillReleasesFirstTokensTogether) {
  Scenario s = llama8b();
  s.inference->workload.mode = ServingWorkload::Mode::offline;
  s.inference->workload.num_requests = 8;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 2000, 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, 16, 0, 0};
  s.inference->engine.chunked_prefill = false;
  s.inference->profile.knobs.unchunked_min_batched_tokens = 2000;
  s.inference->profile.knobs.unchunked_prefill_with_decodes = true;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult budgeted = simulate_serving(s, cost);
  s.inference->profile.knobs.unchunked_prefill_unbounded = true;
  const ServingResult whole = simulate_serving(s, cost);
  std::vector<double> a, b;
  for (const auto& q : budgeted.requests) a.push_back(q.ttft());
  for (const auto& q : whole.requests) b.push_back(q.ttft());
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_DOUBLE_EQ(b.front(), b.back());
  EXPECT_LT(a.front() * 4, a.back());
  EXPECT_LT(a.front() * 4, b.front());
  EXPECT_LE(b.back(), a.back());
  EXPECT_GT(b.back(), 0.8 * a.back());
  // The budgeted engine's steps each hold one prompt (with the decodes of those before).
  EXPECT_GE(budgeted.iterations, whole.iterations + 7);
}

/// A vLLM deployment of `model` on `tp` H100s of one node, on the profile for `version`.
Scenario vllm_on_h100(const char* model, int64_t tp, const char* version) {
  Scenario s = testing::on_one_node(model, "h100-sxm5-80gb", tp);
  s.inference->profile = io::select_engine_profile("vllm", version, "/inference/engine");
  return s;
}

/// The serving metrics of the scenario's replicated runs.
nlohmann::json run_metrics(const Scenario& s) {
  const hw::RooflineCostModel cost(s.system);
  return io::serving_metrics(simulate_serving_runs(s, cost));
}

// The vLLM V0 host models against the vLLM blog's own benchmarks (2024-09-05) on ShareGPT,
// 500 prompts of 202 in / 179 out tokens: 0.6.0's multi-step scheduling (10 steps) gains
// 28% throughput on Llama-3-70B / 4xH100 (the 0.6 host time was fitted to it); 0.6.0 with
// multi-step against 0.5.3: throughput 2.7x for Llama-3-8B on 1xH100 and 1.8x for
// Llama-3-70B on 4xH100 (the 0.5 host figures were fitted to them, with the two low-batch
// figures below), and TPOT at 32 QPS 5x and 2x, which they were not fitted to (within 10%).
// At low batch, 0.5: "Llama3 8B can generate 1 token every 13 ms under light load" (the
// same blog, one H100; one client at a time here) and TPOT 19 ms for Llama-3-70B FP8 on
// 4xH100 at batch 1 with 128-token prompts (vLLM RFC #6913): within 5%.
TEST(ServingEngines, VllmV05HostModelMatchesTheV06Blog) {
  auto run = [](const char* model, int64_t tp, const char* version, int64_t steps, double qps) {
    Scenario s = vllm_on_h100(model, tp, version);
    InferencePlan& p = *s.inference;
    p.engine.scheduler_steps = steps;
    p.workload.mode = qps > 0 ? ServingWorkload::Mode::poisson : ServingWorkload::Mode::offline;
    p.workload.qps = qps;
    p.workload.num_requests = 500;
    p.workload.input_tokens = {LengthDist::Kind::sharegpt, 202, 0, 0};
    p.workload.output_tokens = {LengthDist::Kind::sharegpt, 179, 0, 0};
    return run_metrics(s);
  };
  struct Blog {
    const char* model;
    int64_t tp;
    double throughput, tpot;
  };
  const double multi_step = run("llama3-70b", 4, "0.6.0", 10, 0)["throughput_tokens_per_s"].get<double>() /
                            run("llama3-70b", 4, "0.6.0", 1, 0)["throughput_tokens_per_s"].get<double>();
  EXPECT_NEAR(multi_step, 1.28, 0.02);
  // vLLM V1 against V0 without multi-step scheduling: "up to 1.7x" (V1 blog, 2025-01-27,
  // vLLM 0.7.0 for both engines), the largest gain being the small model's. V1's host time
  // is the 12.8 us a sequence that asynchronous scheduling hides (vLLM PR #23914) and no
  // fixed part, the most the blog's bound leaves: 1.54x, under the blog's largest gain.
  const double v1 = run("llama3-8b", 1, "0.8.4", 1, 0)["throughput_tokens_per_s"].get<double>() /
                    run("llama3-8b", 1, "0.7.0", 1, 0)["throughput_tokens_per_s"].get<double>();
  EXPECT_LT(v1, 1.7);
  EXPECT_NEAR(v1, 1.54, 0.03);
  auto one_at_a_time = [](const char* model, int64_t tp, DType dtype, LengthDist prompt, LengthDist output) {
    Scenario s = vllm_on_h100(model, tp, "0.5.3");
    InferencePlan& p = *s.inference;
    p.weight_dtype = p.activation_dtype = dtype;
    p.workload.mode = ServingWorkload::Mode::concurrency;
    p.workload.concurrency = 1;
    p.workload.num_requests = 20;
    p.workload.input_tokens = prompt;
    p.workload.output_tokens = output;
    return run_metrics(s)["tpot_mean_ms"].get<double>();
  };
  EXPECT_NEAR(one_at_a_time("llama3-8b", 1, DType::bf16, {LengthDist::Kind::sharegpt, 202, 0, 0},
                            {LengthDist::Kind::sharegpt, 179, 0, 0}),
              13.0, 0.05 * 13.0);
  EXPECT_NEAR(one_at_a_time("llama3-70b", 4, DType::fp8, {LengthDist::Kind::fixed, 128, 0, 0},
                            {LengthDist::Kind::fixed, 128, 0, 0}),
              19.0, 0.05 * 19.0);
  for (const Blog& b : {Blog{"llama3-8b", 1, 2.7, 5.0}, Blog{"llama3-70b", 4, 1.8, 2.0}}) {
    const auto old_offline = run(b.model, b.tp, "0.5.3", 1, 0), new_offline = run(b.model, b.tp, "0.6.0", 10, 0);
    const double gain = new_offline["throughput_tokens_per_s"].get<double>() / old_offline["throughput_tokens_per_s"].get<double>();
    EXPECT_NEAR(gain, b.throughput, 0.05 * b.throughput) << b.model;
    const auto old_load = run(b.model, b.tp, "0.5.3", 1, 32), new_load = run(b.model, b.tp, "0.6.0", 10, 32);
    const double tpot = old_load["tpot_mean_ms"].get<double>() / new_load["tpot_mean_ms"].get<double>();
    EXPECT_NEAR(tpot, b.tpot, 0.1 * b.tpot) << b.model;
  }
}

// TensorRT-LLM's profile against an engine benchmark outside the validation data: DeepSeek-R1
// FP8 on 8x H200, trtllm-serve built from v0.21.0rc2, TP 8 with EP 8, measured with LLMPerf
// at 1 and 8 concurrent requests of 600 output tokens (NVIDIA/TensorRT-LLM#5929,
// 2025-07-10): ITL p50 11.00, 11.78, 16.42 ms and TTFT p50 124.11, 352.81, 477.33 ms for
// 1 x 1600, 1 x 8192 and 8 x 1600 prompt tokens. Within 15%. (The same issue's runs with
// the experts tensor-parallel, EP none, are 21-42% slower than this model predicts: its
// fused-MoE rates for 256 experts sliced 8 ways are not published.)
TEST(ServingEngines, TrtllmDeepSeekR1MatchesAPublishedLowLoadRun) {
  struct Row {
    int64_t clients, prompt;
    double itl_ms, ttft_ms;
  };
  for (const Row& r : {Row{1, 1600, 11.00, 124.11}, Row{1, 8192, 11.78, 352.81}, Row{8, 1600, 16.42, 477.33}}) {
    const nlohmann::json doc = {
        {"kind", "inference"},
        {"model", "deepseek-v3"},
        {"system", {{"gpu", "h200-sxm-141gb"}, {"num_gpus", 8}, {"gpus_per_node", 8}}},
        {"inference",
         {{"tp", 8},
          {"ep", 8},
          {"weight_dtype", "fp8"},
          {"activation_dtype", "fp8"},
          {"kv_dtype", "bf16"},
          {"engine", {{"name", "trtllm"}, {"version", "0.21.0rc2"}}},
          {"workload",
           {{"mode", "concurrency"},
            {"concurrency", r.clients},
            {"num_requests", 4 * r.clients},
            {"input_tokens", r.prompt},
            {"output_tokens", 600}}}}}};
    const nlohmann::json m = run_metrics(io::scenario_from_json(doc));
    EXPECT_NEAR(m["itl_p50_ms"].get<double>(), r.itl_ms, 0.15 * r.itl_ms) << r.clients << " x " << r.prompt;
    EXPECT_NEAR(m["ttft_p50_ms"].get<double>(), r.ttft_ms, 0.15 * r.ttft_ms) << r.clients << " x " << r.prompt;
  }
}

// vLLM 0.6's host time at one request: benchmark_latency.py with Llama-3-8B on one H100,
// batch 1, 32 in / 128 out, averaged 0.9704 s (vLLM PR #10933, the V0 engine in December
// 2024, released as 0.6.5), through the in-process LLM class, so without the API server's
// per-request time. The multi-step gain alone (7.9 ms a round, nothing a sequence, which
// 0.6.0-0.6.4 keep) reads it 1.89 s.
TEST(ServingEngines, VllmV06HostModelMatchesOneRequestsLatency) {
  Scenario s = vllm_on_h100("llama3-8b", 1, "0.6.5");
  InferencePlan& p = *s.inference;
  ASSERT_EQ(p.profile.id, "vllm-v0.6");
  p.workload.mode = ServingWorkload::Mode::offline;
  p.workload.num_requests = 1;
  p.workload.input_tokens = {LengthDist::Kind::fixed, 32, 0, 0};
  p.workload.output_tokens = {LengthDist::Kind::fixed, 128, 0, 0};
  const double e2e_s = run_metrics(s)["e2e_mean_ms"].get<double>() * 1e-3;
  const double request_s = engine_defaults(p, s.model, s.system.gpu, /*longest_request=*/32 + 128).request_overhead_s;
  EXPECT_NEAR(e2e_s - request_s, 0.9704, 0.03 * 0.9704);
}

// SGLang's overlap scheduler against its v0.3 scheduler on the SGLang v0.4 blog's benchmark
// (LMSYS, 2024-12-04: Llama-3.2-3B-Instruct, 500 random prompts of 4,096 in / 2,048 out,
// 1.1x throughput), which the v0.3 host time was fitted to on one H100.
TEST(ServingEngines, SglangOverlapSchedulerGainMatchesItsBlog) {
  // Llama-3.2-3B's config.json (meta-llama/Llama-3.2-3B-Instruct).
  const nlohmann::json config = {{"model_type", "llama"},         {"hidden_size", 3072},
                                 {"intermediate_size", 8192},      {"num_attention_heads", 24},
                                 {"num_hidden_layers", 28},        {"num_key_value_heads", 8},
                                 {"head_dim", 128},                {"vocab_size", 128256},
                                 {"tie_word_embeddings", true},    {"rms_norm_eps", 1e-5},
                                 {"max_position_embeddings", 131072}, {"hidden_act", "silu"}};
  auto run = [&](const char* version) {
    Scenario s;
    s.model = io::model_from_hf_config(config, "/model", "llama-3.2-3b");
    s.system.gpu = io::load_gpu("h100-sxm5-80gb");
    s.system.num_gpus = 1;
    s.system.gpus_per_node = 8;
    InferencePlan p;
    p.profile = io::select_engine_profile("sglang", version, "/inference/engine");
    p.workload.mode = ServingWorkload::Mode::offline;
    p.workload.num_requests = 500;
    p.workload.input_tokens = {LengthDist::Kind::fixed, 4096, 0, 0};
    p.workload.output_tokens = {LengthDist::Kind::fixed, 2048, 0, 0};
    s.inference = p;
    const hw::RooflineCostModel cost(s.system);
    return io::serving_metrics(simulate_serving_runs(s, cost))["throughput_tokens_per_s"].get<double>();
  };
  EXPECT_NEAR(run("0.4.0") / run("0.3.0"), 1.1, 0.01);
}

// Scenario files reject an unknown engine key; validation cases ignore it (SCHEMA.md).
TEST(ServingEngines, UnknownEngineKeyRejectedInScenariosIgnoredInCases) {
  nlohmann::json doc = {{"kind", "inference"},
                        {"model", "llama3-8b"},
                        {"system", {{"gpu", "h100-sxm5-80gb"}, {"num_gpus", 1}}},
                        {"inference",
                         {{"tp", 1},
                          {"engine", {{"name", "sglang"}, {"version", "0.4.5.post3"}, {"enable_dp_attention", true}}},
                          {"workload", {{"mode", "offline"}, {"num_requests", 4}, {"input_tokens", 10}, {"output_tokens", 4}}}}}};
  try {
    io::scenario_from_json(doc);
    FAIL() << "expected an input error";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].pointer, "/inference/engine/enable_dp_attention");
  }
  const Scenario s = io::scenario_from_json(doc, {}, io::EngineKeys::ignore_unknown);
  EXPECT_EQ(s.inference->profile.id, "sglang-0.4");
  EXPECT_EQ(s.inference->profile.version, "0.4.5.post3");
  EXPECT_TRUE(s.inference->profile.knobs.host_overlaps_gpu);
}

}  // namespace
}  // namespace capsim

namespace capsim {
namespace {

namespace fs = std::filesystem;

// A whole decode step of Llama-3-8B's shapes measured on an H100 SXM (calibrate/torch_probe.py
// --only decode-step; data/calibration/raw/h100-torch-probe-decode-step.json): 32 layers of
// cuBLAS GEMMs, cuDNN decode attention and unfused PyTorch elementwise kernels captured in one
// CUDA graph, 1-256 sequences of 512-4,096 cached tokens, each kernel's time from the profiler.
// The iteration model's GEMMs (projections, MLP, head) are within 8 % of the measured GEMM
// kernels at every batch, and its decode attention is never faster than the measured kernel
// and at most 45 % slower from 8 sequences (one sequence's few heads leave most SMs idle, so
// the measured kernel runs at a fifth of the bandwidth there, where the model reads it 2x
// slower). Elementwise work differs by design: the measured step runs PyTorch's unfused norms,
// rotary stand-in, copies and adds (about 10 kernels a layer), an engine fuses them, so only
// the whole step is held: within 8 % of the graph's replay time.
TEST(ServingEngines, DecodeStepAgainstAMeasuredH100Graph) {
  const nlohmann::json m = io::read_json_file(fs::path(CAPSIM_TEST_DATA_DIR) / "calibration" / "raw" /
                                              "h100-torch-probe-decode-step.json");
  ASSERT_EQ(m["cases"].size(), 12u);
  Scenario s = testing::on_one_node("llama3-8b", "h100-sxm5-80gb", 1);
  const hw::RooflineCostModel cost(s.system);
  const IterationModel it(s.model, s.system, *s.inference, cost);
  for (const auto& c : m["cases"]) {
    double gemm = 0, attn = 0;
    for (const auto& [name, v] : c["kernels"].items()) {
      const double t = v["us_per_step"].get<double>() * 1e-6;
      if (name.find("nvjet") != std::string::npos || name.find("splitKreduce") != std::string::npos) gemm += t;
      else if (name.find("sdpa") != std::string::npos || name.find("cudnn::") != std::string::npos) attn += t;
    }
    IterationBatch b;
    b.decodes = c["batch"].get<int64_t>();
    const int64_t context = c["context"].get<int64_t>();
    b.decode_context = static_cast<double>(b.decodes * context);
    const StepParts p = it.parts(b);
    const std::string at = "batch " + std::to_string(b.decodes) + ", context " + std::to_string(context);
    EXPECT_NEAR((p.attention_projections + p.dense_mlp + p.head) / gemm, 1.0, 0.08) << at;
    EXPECT_GE(p.attention_kernels / attn, 0.95) << at;
    if (b.decodes >= 8) EXPECT_LE(p.attention_kernels / attn, 1.45) << at;
    EXPECT_NEAR(p.gpu / c["time_s"].get<double>(), 1.0, 0.08) << at;
  }
}

}  // namespace
}  // namespace capsim
