// Cost of one GRPO iteration estimate: Qwen3-30B-A3B, 8-step off-policy on 192 H100s (64
// rollout, 128 training), the posttraining-public.json case whose rollout simulates 8
// iterations' samples (8 x 64 x 32 requests) at once.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "capsim/core/posttrain.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/scenario_io.hpp"

namespace {

using namespace capsim;

/// The case is read once (JSON parsing is not what is measured).
const Scenario& qwen3_30b_8off() {
  static const Scenario s = [] {
    const auto doc = io::read_json_file(std::filesystem::path(CAPSIM_BENCH_DATA_DIR) / "validation" /
                                        "posttraining-public.json");
    for (const auto& c : doc["cases"])
      if (c["id"] == "nemorl-v0.6-h100-bf16-grpo-qwen3-30b-a3b-8off-192gpu")
        return io::scenario_from_json(c, {}, io::EngineKeys::ignore_unknown);
    throw std::runtime_error("posttraining-public.json has no qwen3-30b-a3b 8off case");
  }();
  return s;
}

void BM_Grpo_Qwen3_30B_8Off_192xH100(benchmark::State& state) {
  const Scenario& s = qwen3_30b_8off();
  const hw::RooflineCostModel cost(s.system);
  for (auto _ : state) {
    const RlIteration it = evaluate_rl_iteration(s, cost);
    benchmark::DoNotOptimize(it.step_time_s);
  }
}
BENCHMARK(BM_Grpo_Qwen3_30B_8Off_192xH100)->Unit(benchmark::kMillisecond);

}  // namespace
