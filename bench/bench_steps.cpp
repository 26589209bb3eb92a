// Recovering a serving engine's steps from a benchmark's token times (capsim calibrate
// serving-steps): a synthetic run of known steps, its requests sent in order as a benchmark
// client sends them.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>

#include "capsim/core/step_timeline.hpp"

namespace {

/// `requests` requests over `steps` steps of 20-50 ms, each decoding 20-800 tokens from a
/// random step, in the order they started, with up to 0.2 ms of client jitter on each gap.
std::vector<capsim::StreamedRequest> synthetic_requests(size_t steps, size_t requests) {
  std::mt19937_64 rng(20261205);
  std::uniform_real_distribution<double> dur(0.020, 0.050), jit(-0.2e-3, 0.2e-3);
  std::vector<double> step_s(steps);
  for (double& s : step_s) s = dur(rng);
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < requests; ++i) {
    const size_t len = std::uniform_int_distribution<size_t>(20, 800)(rng);
    spans.emplace_back(std::uniform_int_distribution<size_t>(1, steps - len - 1)(rng), len);
  }
  std::sort(spans.begin(), spans.end());
  std::vector<capsim::StreamedRequest> out;
  for (const auto& [start, len] : spans) {
    capsim::StreamedRequest q;
    q.prompt_tokens = 100;
    for (size_t j = 0; j < len; ++j) q.itl_s.push_back(step_s[start + j] + jit(rng));
    out.push_back(std::move(q));
  }
  return out;
}

void BM_RecoverSteps(benchmark::State& state) {
  const auto requests = synthetic_requests(static_cast<size_t>(state.range(0)) * 10, static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    const capsim::StepTimeline t = capsim::recover_steps(requests);
    benchmark::DoNotOptimize(t.placed);
  }
  state.counters["requests"] = static_cast<double>(requests.size());
}

}  // namespace

BENCHMARK(BM_RecoverSteps)->Arg(500)->Arg(4000)->ArgName("requests")->Unit(benchmark::kMillisecond);
