// Search speed on one core, configurations per second as items_per_second:
// - the exhaustive layout search for GPT-3 175B on 1,024 A100s (enumeration, pruning,
//   costing, ranking, Pareto front);
// - the analytical evaluation alone (memory, then step time of layouts that fit) over a
//   grid of valid layouts with a warm per-thread cache, as search workers run it.
#include <benchmark/benchmark.h>

#include "capsim/core/eval_cache.hpp"
#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/search.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/presets.hpp"

namespace {

using namespace capsim;

Scenario gpt3_1024() {
  Scenario s;
  s.model = io::load_model("gpt3-175b");
  s.system.gpu = io::load_gpu("a100-sxm4-80gb");
  s.system.num_gpus = 1024;
  s.system.gpus_per_node = 8;
  s.system.nic_gbps_per_gpu = 200;
  TrainingPlan t;
  t.global_batch = 1536;
  t.seq_len = 2048;
  t.precision = DType::fp16;
  s.training = t;
  return s;
}

void BM_Search_GPT3_175B_1024xA100(benchmark::State& state) {
  const Scenario s = gpt3_1024();
  const hw::RooflineCostModel cost(s.system);
  SearchOptions opt;
  opt.threads = static_cast<unsigned>(state.range(0));
  int64_t configs = 0;
  for (auto _ : state) {
    const SearchResult r = search_training(s, cost, opt);
    configs += r.enumerated;
    benchmark::DoNotOptimize(r.top.data());
  }
  state.SetItemsProcessed(configs);
}
BENCHMARK(BM_Search_GPT3_175B_1024xA100)->Arg(1)->ArgName("threads")->Unit(benchmark::kMillisecond);

// The same search counting its progress (what a terminal run does): batches of 256
// layouts per relaxed atomic add, so it must cost no more than the noise.
void BM_Search_GPT3_175B_1024xA100_Progress(benchmark::State& state) {
  const Scenario s = gpt3_1024();
  const hw::RooflineCostModel cost(s.system);
  SearchOptions opt;
  opt.threads = static_cast<unsigned>(state.range(0));
  ProgressCounter progress;
  opt.progress = &progress;
  int64_t configs = 0;
  for (auto _ : state) {
    const SearchResult r = search_training(s, cost, opt);
    configs += r.enumerated;
    benchmark::DoNotOptimize(r.top.data());
  }
  state.SetItemsProcessed(configs);
}
BENCHMARK(BM_Search_GPT3_175B_1024xA100_Progress)->Arg(1)->ArgName("threads")->Unit(benchmark::kMillisecond);

void BM_Evaluate_GPT3_175B_1024xA100(benchmark::State& state) {
  Scenario s = gpt3_1024();
  const hw::RooflineCostModel cost(s.system);
  std::vector<TrainingPlan> plans;
  for (int64_t tp : {1, 2, 4, 8})
    for (int64_t pp : {1, 2, 4, 8, 16, 32, 48, 96})
      for (int64_t vpp : {1, 2, 3})
        for (int64_t mb : {1, 2, 4, 8})
          for (int z = 0; z < 4; ++z)
            for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
              TrainingPlan t = *s.training;
              t.tp = tp;
              t.pp = pp;
              t.dp = 1024 / (tp * pp);
              t.vpp = vpp;
              t.sp = tp > 1;
              t.micro_batch = mb;
              t.zero = z;
              t.recompute = rc;
              if (t.dp * tp * pp != 1024 || (vpp > 1 && pp == 1)) continue;
              s.training = t;
              if (check_training_layout(s).empty()) plans.push_back(t);
            }
  EvalCache cache;
  TrainingMemory mem;
  double sink = 0;
  for (auto _ : state) {
    for (const TrainingPlan& t : plans) {
      training_memory(s.model, s.system, t, mem, &cache);
      sink += mem.peak().total_bytes;
      if (mem.fits()) sink += analytical_step(s.model, s.system, t, cost, StepOptions{}, &cache).step_s;
    }
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(plans.size()));
  state.counters["layouts"] = static_cast<double>(plans.size());
}
BENCHMARK(BM_Evaluate_GPT3_175B_1024xA100)->Unit(benchmark::kMicrosecond);

}  // namespace
