// Search speed: the exhaustive layout search for GPT-3 175B on 1,024 A100s, on one core
// (configurations per second as items_per_second).
#include <benchmark/benchmark.h>

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

}  // namespace
