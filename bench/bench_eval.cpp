// Cost of evaluating one training configuration: GPT-3 175B on 1024 A100 80GB GPUs in the
// layout of Narayanan et al. 2021 (Table 1: tp 8, pp 16, dp 8, batch 1536).
#include <benchmark/benchmark.h>

#include "capsim/core/memory.hpp"
#include "capsim/core/step.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/presets.hpp"

namespace {

using namespace capsim;

struct Gpt3Setup {
  ModelSpec model;
  SystemSpec system;
  TrainingPlan plan;
};

/// Presets are read once (JSON parsing is not what is measured).
const Gpt3Setup& gpt3_1024_a100() {
  static const Gpt3Setup setup = [] {
    Gpt3Setup s;
    s.model = io::load_model("gpt3-175b");
    s.system.gpu = io::load_gpu("a100-sxm4-80gb");
    s.system.num_gpus = 1024;
    s.system.gpus_per_node = 8;
    s.system.nic_gbps_per_gpu = 200;
    TrainingPlan& t = s.plan;
    t.tp = 8;
    t.pp = 16;
    t.dp = 8;
    t.vpp = 1;
    t.micro_batch = 1;
    t.global_batch = 1536;
    t.seq_len = 2048;
    t.recompute = Recompute::full;
    t.precision = DType::fp16;
    t.zero = 1;
    t.sp = true;
    return s;
  }();
  return setup;
}

// One full evaluation: memory of every pipeline stage plus the step time.
void BM_TrainEval_GPT3_175B_1024xA100(benchmark::State& state) {
  const Gpt3Setup& s = gpt3_1024_a100();
  const hw::RooflineCostModel cost(s.system);
  for (auto _ : state) {
    TrainingMemory mem = training_memory(s.model, s.system, s.plan);
    StepBreakdown step = analytical_step(s.model, s.system, s.plan, cost);
    benchmark::DoNotOptimize(mem);
    benchmark::DoNotOptimize(step);
  }
}
BENCHMARK(BM_TrainEval_GPT3_175B_1024xA100)->Unit(benchmark::kMicrosecond);

void BM_MemoryOnly(benchmark::State& state) {
  const Gpt3Setup& s = gpt3_1024_a100();
  for (auto _ : state) {
    TrainingMemory mem = training_memory(s.model, s.system, s.plan);
    benchmark::DoNotOptimize(mem);
  }
}
BENCHMARK(BM_MemoryOnly)->Unit(benchmark::kMicrosecond);

void BM_StepOnly(benchmark::State& state) {
  const Gpt3Setup& s = gpt3_1024_a100();
  const hw::RooflineCostModel cost(s.system);
  for (auto _ : state) {
    StepBreakdown step = analytical_step(s.model, s.system, s.plan, cost);
    benchmark::DoNotOptimize(step);
  }
}
BENCHMARK(BM_StepOnly)->Unit(benchmark::kMicrosecond);

}  // namespace
