#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "capsim/core/diagnostics.hpp"
#include "capsim/io/engines.hpp"
#include "capsim/core/model.hpp"
#include "capsim/core/serving.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/report.hpp"
#include "serving_scenarios.hpp"

namespace capsim {
namespace {

using testing::deepseek_on_h200;

// Closed forms: the largest of two standard normals has mean 1/sqrt(pi), of three
// 3/(2 sqrt(pi)); of eight 1.42360 (order-statistics tables, e.g. Harter 1961).
TEST(EpRankImbalance, ExpectedMaximumOfStandardNormals) {
  EXPECT_EQ(expected_max_standard_normal(1), 0.0);
  EXPECT_NEAR(expected_max_standard_normal(2), 1.0 / std::sqrt(std::numbers::pi), 1e-9);
  EXPECT_NEAR(expected_max_standard_normal(3), 1.5 / std::sqrt(std::numbers::pi), 1e-9);
  EXPECT_NEAR(expected_max_standard_normal(8), 1.42360, 5e-5);
  for (int64_t n = 2; n < 512; n *= 2)
    EXPECT_LT(expected_max_standard_normal(n), expected_max_standard_normal(2 * n)) << n;
}

/// The busiest rank's routed tokens over the mean when every token picks k distinct
/// experts uniformly (partial Fisher-Yates on a fixed-seed Mersenne twister), averaged.
double simulated_imbalance(int64_t experts, int64_t k, int64_t ep, int64_t tokens, int trials) {
  std::mt19937_64 rng(20251202);
  std::vector<int64_t> ids(static_cast<size_t>(experts));
  double sum = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<int64_t> load(static_cast<size_t>(ep), 0);
    for (int64_t n = 0; n < tokens; ++n) {
      for (int64_t i = 0; i < experts; ++i) ids[static_cast<size_t>(i)] = i;
      for (int64_t j = 0; j < k; ++j) {
        const auto pick = j + static_cast<int64_t>(rng() % static_cast<uint64_t>(experts - j));
        std::swap(ids[static_cast<size_t>(j)], ids[static_cast<size_t>(pick)]);
        ++load[static_cast<size_t>(ids[static_cast<size_t>(j)] / (experts / ep))];
      }
    }
    const double mean = static_cast<double>(tokens * k) / static_cast<double>(ep);
    sum += static_cast<double>(*std::max_element(load.begin(), load.end())) / mean;
  }
  return sum / trials;
}

// A router with no measured skew: the busiest rank is as far above the mean as sampling
// puts it, which the normal approximation follows within 2% of a simulation (DeepSeek-V3's
// 256 experts, top-8, over 8 ranks), and which vanishes for large batches.
TEST(EpRankImbalance, UniformRoutingFollowsTheSamplingSpread) {
  MoeSpec e;
  e.num_experts = 256;
  e.top_k = 8;
  EXPECT_EQ(ep_rank_imbalance(e, 64, 1), 1.0);
  for (int64_t tokens : {32, 64, 256}) {
    const double sim = simulated_imbalance(256, 8, 8, tokens, 400);
    EXPECT_NEAR(ep_rank_imbalance(e, static_cast<double>(tokens), 8), sim, 0.02 * sim) << tokens;
  }
  EXPECT_LT(ep_rank_imbalance(e, 1e6, 8), 1.003);
  // One token on two ranks: the busiest holds at most all of it.
  e.num_experts = 2;
  e.top_k = 1;
  EXPECT_LE(ep_rank_imbalance(e, 1, 2), 2.0);
}

// A measured skew holds at its EP sizes for large batches, is interpolated in log2(EP)
// from 1 at EP 1, and beyond the largest measured size keeps the last figure.
TEST(EpRankImbalance, MeasuredSkewByExpertParallelSize) {
  const ModelSpec m = io::load_model("deepseek-v3");
  ASSERT_TRUE(m.moe.has_value());
  ASSERT_EQ(m.moe->rank_imbalance.size(), 4u);
  EXPECT_EQ(m.moe->rank_imbalance[0].ep, 8);
  const double big = 1e12;  // sampling spread below 1e-5
  EXPECT_NEAR(ep_rank_imbalance(*m.moe, big, 8), m.moe->rank_imbalance[0].max_over_mean, 1e-4);
  EXPECT_NEAR(ep_rank_imbalance(*m.moe, big, 4), 1.0 + (m.moe->rank_imbalance[0].max_over_mean - 1.0) * 2.0 / 3.0, 1e-4);
  const double at16 = m.moe->rank_imbalance[1].max_over_mean, at32 = m.moe->rank_imbalance[2].max_over_mean;
  EXPECT_NEAR(ep_rank_imbalance(*m.moe, big, 24), at16 + (at32 - at16) * (std::log2(24.0) - 4.0), 1e-4);
  EXPECT_NEAR(ep_rank_imbalance(*m.moe, big, 256), m.moe->rank_imbalance.back().max_over_mean, 1e-4);
  // Small batches add the sampling spread on top.
  EXPECT_GT(ep_rank_imbalance(*m.moe, 64, 8), ep_rank_imbalance(*m.moe, big, 8) + 0.1);
  // Models with no published skew route as uniformly as chance allows.
  EXPECT_TRUE(io::load_model("qwen3-30b-a3b").moe->rank_imbalance.empty());
  EXPECT_TRUE(io::load_model("mixtral-8x7b").moe->rank_imbalance.empty());
}

// Expert parallelism waits for the busiest rank: a prefill of 8192 tokens, compute-bound
// in the experts, takes longer with the measured skew than with a uniform router, and the
// tensor-parallel layout (every rank a slice of every expert) does not change with it.
TEST(EpRankImbalance, ExpertParallelStepsWaitForTheBusiestRank) {
  const Scenario s = deepseek_on_h200();
  const ModelSpec& skewed = s.model;
  ModelSpec uniform = skewed;
  uniform.moe->rank_imbalance.clear();
  const SystemSpec& sys = s.system;
  InferencePlan p = *s.inference;
  const hw::RooflineCostModel cost(sys);
  IterationBatch prefill;
  prefill.prefills.push_back({8192, 0, true});
  IterationBatch decode;
  decode.decodes = 64;
  decode.decode_context = 64 * 2000;
  EXPECT_DOUBLE_EQ(IterationModel(skewed, sys, p, cost).gpu_seconds(prefill),
                   IterationModel(uniform, sys, p, cost).gpu_seconds(prefill));
  p.ep = 8;
  const double skew_prefill = IterationModel(skewed, sys, p, cost).gpu_seconds(prefill);
  const double even_prefill = IterationModel(uniform, sys, p, cost).gpu_seconds(prefill);
  EXPECT_GT(skew_prefill, 1.05 * even_prefill);
  // Even a uniform router leaves the busiest rank above the mean at decode batches: EP8
  // decode is slower than the same GPUs in TP8, by less than the expert share.
  const double ep_decode = IterationModel(uniform, sys, p, cost).gpu_seconds(decode);
  p.ep = 1;
  const double tp_decode = IterationModel(uniform, sys, p, cost).gpu_seconds(decode);
  EXPECT_GT(ep_decode, tp_decode);
  EXPECT_LT(ep_decode, 1.25 * tp_decode);
}

// The serving report states the skew the busiest rank carries and where it comes from.
TEST(EpRankImbalance, ServingReportNamesTheSkewAndItsSource) {
  Scenario s = deepseek_on_h200();
  ServingWorkload& w = s.inference->workload;
  s.inference->ep = 8;
  w.mode = ServingWorkload::Mode::offline;
  w.num_requests = 2;
  w.input_tokens = {LengthDist::Kind::fixed, 100, 0, 0};
  w.output_tokens = {LengthDist::Kind::fixed, 4, 0, 0};
  const hw::RooflineCostModel cost(s.system);
  const nlohmann::json r = io::serving_report(s, simulate_serving(s, cost));
  EXPECT_DOUBLE_EQ(r["layout"]["ep_rank_skew"].get<double>(), s.model.moe->rank_imbalance[0].max_over_mean);
  EXPECT_EQ(r["layout"]["ep_rank_skew_source"], "data/moe_routing.json: lmsys_large_scale_ep");
  s.model.moe->rank_imbalance.clear();
  const nlohmann::json u = io::serving_report(s, simulate_serving(s, cost));
  EXPECT_DOUBLE_EQ(u["layout"]["ep_rank_skew"].get<double>(), 1.0);
  EXPECT_EQ(u["layout"]["ep_rank_skew_source"], "none published: routing as uniform as chance");
  s.inference->ep = 1;
  EXPECT_FALSE(io::serving_report(s, simulate_serving(s, cost))["layout"].contains("ep_rank_skew"));
}

std::vector<std::string> issues_of(const nlohmann::json& doc) {
  std::vector<std::string> out;
  try {
    (void)io::moe_routing_from_json(doc, "moe_routing.json");
  } catch (const InputError& e) {
    for (const auto& i : e.issues())
      out.push_back(i.pointer + ": " + i.rule + (i.value.empty() ? "" : " (got " + i.value + ")"));
  }
  return out;
}

// The shipped file is outside input too (CAPSIM_DATA_DIR may point anywhere): every
// problem at its place, all at once.
TEST(HostileDataFile, MoeRoutingWithBrokenEntries) {
  nlohmann::json d = io::read_json_file(io::data_dir() / "moe_routing.json");
  EXPECT_TRUE(issues_of(d).empty());
  nlohmann::json& m = d["models"][0];
  m["top_k"] = 300;
  m["source"] = "blog";
  m["rank_imbalance"][1]["ep"] = 8;
  m["rank_imbalance"][2]["max_over_mean"] = 40.0;
  m["rank_imbalance"][3]["max_over_mean"] = 0.5;
  m["colour"] = "red";
  d["models"].push_back({{"model_type", "x"}, {"num_experts", 8}, {"top_k", 2}, {"source", "trtllm_blog4"},
                         {"rank_imbalance", nlohmann::json::array()}});
  const std::vector<std::string> want = {
      "moe_routing.json#/models/0/top_k: must be at most num_experts (got 300)",
      "moe_routing.json#/models/0/source: is not a key of /sources (got \"blog\")",
      "moe_routing.json#/models/0/rank_imbalance/1/ep: must be larger than the point before (and than 1) (got 8)",
      "moe_routing.json#/models/0/rank_imbalance/2/max_over_mean: must be at most ep (the busiest rank holds at "
      "most every routed token) (got 40.0)",
      "moe_routing.json#/models/0/rank_imbalance/3/max_over_mean: must be a number >= 1 (got 0.5)",
      "moe_routing.json#/models/0/colour: unknown key",
      "moe_routing.json#/models/1/rank_imbalance: must be a non-empty list of {ep, max_over_mean} (got [])",
  };
  EXPECT_EQ(issues_of(d), want);
}

// So is the MoE kernel file: a flag that is not a boolean, a figure without a source or out
// of range, and an unknown figure, each at its place, all at once.
TEST(HostileDataFile, MoeKernelFamilyWithBrokenFigures) {
  nlohmann::json d = io::read_json_file(io::data_dir() / "moe_kernels.json");
  EXPECT_NO_THROW(io::moe_kernel_family_from_json(d, "moe_kernels.json", "trtllm-cutlass", "/k"));
  nlohmann::json& h = d["families"]["trtllm-cutlass"]["rates"]["hopper"];
  h["fp8_block_only"] = "yes";
  h["hbm"]["source"] = nlohmann::json::array();
  h["compute_fp8"] = {{"value", 1.5}, {"source", {"deepgemm_readme"}}};
  h["compute_fp8_by_rows"]["rows"] = {256, 1024, 512, 4096, 8192};
  h["tflops"] = 900;
  std::vector<std::string> got;
  try {
    (void)io::moe_kernel_family_from_json(d, "moe_kernels.json", "trtllm-cutlass", "/k");
  } catch (const InputError& e) {
    for (const auto& i : e.issues())
      got.push_back(i.pointer + ": " + i.rule + (i.value.empty() ? "" : " (got " + i.value + ")"));
  }
  const std::string at = "moe_kernels.json#/families/trtllm-cutlass/rates/hopper";
  const std::vector<std::string> want = {
      at + "/fp8_block_only: must be true or false (got \"yes\")",
      at + "/hbm/source: every figure needs a source",
      at + "/compute_fp8: must be {\"value\": a fraction in (0, 1], \"source\": [...]} (got "
           "{\"source\":[\"deepgemm_readme\"],\"value\":1.5})",
      at + "/compute_fp8_by_rows: must be {\"rows\": [ascending counts >= 1], \"value\": [a fraction in (0, 1] for "
           "each], \"source\": [...]} (got {\"note\":\"DeepGEMM's rates over the README's speedup on ea...)",
      at + "/tflops: unknown figure (hbm, fixed_us, expert_us, compute_fp8, compute_fp8_by_rows, compute_bf16, fp8_only, "
           "fp8_block_only)",
  };
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace capsim
