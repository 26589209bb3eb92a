// Discrete-event engine speed: building and running one training step's task graph.
#include <benchmark/benchmark.h>

#include "capsim/core/pipeline_sim.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/presets.hpp"

namespace {

using namespace capsim;

struct Setup {
  ModelSpec model = io::load_model("gpt3-175b");
  SystemSpec sys;
  Setup() {
    sys.gpu = io::load_gpu("a100-sxm4-80gb");
    sys.gpus_per_node = 8;
    sys.nic_gbps_per_gpu = 200;
  }
};

// 1F1B, pp = 16, 256 microbatches, with data-parallel bucket overlap (dp 8).
void BM_Des_1F1B_pp16_m256(benchmark::State& state) {
  static const Setup s;
  SystemSpec sys = s.sys;
  TrainingPlan t;
  t.tp = 8;
  t.pp = 16;
  t.vpp = static_cast<int64_t>(state.range(0));
  t.dp = 8;
  t.sp = true;
  t.zero = 1;
  t.micro_batch = 1;
  t.global_batch = 256 * t.dp;
  t.seq_len = 2048;
  t.recompute = Recompute::full;
  t.precision = DType::fp16;
  sys.num_gpus = t.tp * t.pp * t.dp;
  const hw::RooflineCostModel cost(sys);
  for (auto _ : state) {
    DesStep d = des_step(s.model, sys, t, cost);
    benchmark::DoNotOptimize(d.step.step_s);
  }
}
BENCHMARK(BM_Des_1F1B_pp16_m256)->Arg(1)->Arg(4)->ArgName("vpp")->Unit(benchmark::kMillisecond);

}  // namespace
