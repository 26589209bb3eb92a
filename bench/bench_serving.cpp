// Serving simulator speed: 10,000 ShareGPT-like requests on one 8-GPU replica.
#include <benchmark/benchmark.h>

#include "capsim/core/serving.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/presets.hpp"

namespace {

using namespace capsim;

void BM_Serving_10k_ShareGPT_8xH100(benchmark::State& state) {
  Scenario s;
  s.model = io::load_model("llama3-70b");
  s.system.gpu = io::load_gpu("h100-sxm5-80gb");
  s.system.num_gpus = 8;
  s.system.gpus_per_node = 8;
  s.system.nic_gbps_per_gpu = 400;
  InferencePlan p;
  p.tp = 8;
  p.workload.mode = ServingWorkload::Mode::poisson;
  p.workload.qps = 20;
  p.workload.num_requests = 10000;
  p.workload.input_tokens = {LengthDist::Kind::sharegpt, 227, 0, 0};
  p.workload.output_tokens = {LengthDist::Kind::sharegpt, 194, 0, 0};
  s.inference = p;
  const hw::RooflineCostModel cost(s.system);
  for (auto _ : state) {
    const ServingResult r = simulate_serving(s, cost);
    benchmark::DoNotOptimize(r.duration_s);
  }
}
BENCHMARK(BM_Serving_10k_ShareGPT_8xH100)->Unit(benchmark::kMillisecond);

}  // namespace
