// Recovering a serving engine's steps from its clients' token times (capsim calibrate
// serving-steps): synthetic runs whose steps are known, and the result file's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "capsim/core/diagnostics.hpp"
#include "capsim/core/step_timeline.hpp"
#include "capsim/io/serving_steps.hpp"

using namespace capsim;

namespace {

/// A run with known steps: `steps` durations (20-60 ms, a long prompt step now and then) and
/// requests that each start at a random step and decode for a random number of them, their
/// gaps the steps' durations plus the client's jitter (uniform within `jitter_s`).
struct SyntheticRun {
  std::vector<double> step_s;
  std::vector<StreamedRequest> requests;
  std::vector<size_t> first_gap;  ///< the true step of each request's first gap
};

SyntheticRun synthetic_run(uint64_t seed, size_t steps, size_t requests, double jitter_s, size_t min_len = 2) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dur(0.020, 0.060), jit(-jitter_s, jitter_s);
  SyntheticRun r;
  for (size_t i = 0; i < steps; ++i) r.step_s.push_back(i % 37 == 5 ? 0.25 : dur(rng));
  for (size_t q = 0; q < requests; ++q) {
    const size_t len = std::uniform_int_distribution<size_t>(min_len, 200)(rng);
    const size_t start = std::uniform_int_distribution<size_t>(1, steps - len)(rng);
    StreamedRequest s;
    s.ttft_s = 0.1;
    s.prompt_tokens = std::uniform_int_distribution<int64_t>(10, 2000)(rng);
    for (size_t j = 0; j < len; ++j) s.itl_s.push_back(std::max(0.0, r.step_s[start + j] + jit(rng)));
    r.requests.push_back(s);
    r.first_gap.push_back(start);
  }
  return r;
}

}  // namespace

// Every request with enough gaps is placed where it ran, each step's duration and batch are
// the true ones (up to the jitter), over many random runs.
TEST(ServingSteps, RecoversTheStepsOfSyntheticRuns) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const SyntheticRun run = synthetic_run(seed, 600, 120, 0.3e-3, 15);
    const StepTimeline t = recover_steps(run.requests);
    ASSERT_EQ(t.placed, run.requests.size()) << "seed " << seed;
    // The recovered steps start at the earliest step any request ran.
    size_t first = run.step_s.size();
    for (size_t s : run.first_gap) first = std::min(first, s);
    for (size_t i = 0; i < run.requests.size(); ++i)
      ASSERT_EQ(t.position[i] + first, run.first_gap[i]) << "seed " << seed << " request " << i;
    for (size_t s = 0; s < t.step_s.size(); ++s) {
      EXPECT_NEAR(t.step_s[s], run.step_s[s + first], 0.3e-3) << "seed " << seed << " step " << s;
      int64_t decodes = 0, prompts = 0, prompt_tokens = 0;
      double context = 0;
      for (size_t i = 0; i < run.requests.size(); ++i) {
        const size_t a = run.first_gap[i], len = run.requests[i].itl_s.size();
        if (s + first >= a && s + first < a + len) {
          ++decodes;
          context += static_cast<double>(run.requests[i].prompt_tokens) + static_cast<double>(s + first - a);
        }
        if (a >= 1 && s + first == a - 1) ++prompts, prompt_tokens += run.requests[i].prompt_tokens;
      }
      ASSERT_EQ(t.decodes[s], decodes) << "seed " << seed << " step " << s;
      ASSERT_DOUBLE_EQ(t.decode_context[s], context) << "seed " << seed << " step " << s;
      // A request whose first gap is the first recovered step finished its prompt before it.
      if (s + 1 < t.step_s.size() || prompts > 0) {
        ASSERT_EQ(t.first_tokens[s], prompts) << "seed " << seed << " step " << s;
        ASSERT_EQ(t.prompt_tokens[s], prompt_tokens) << "seed " << seed << " step " << s;
      }
    }
  }
}

// Requests with fewer gaps than the overlap rule asks are left out, and said to be.
TEST(ServingSteps, ShortRequestsAreNotPlaced) {
  const SyntheticRun run = synthetic_run(7, 400, 80, 0.05e-3, 2);
  const StepTimeline t = recover_steps(run.requests);
  size_t long_enough = 0;
  for (size_t i = 0; i < run.requests.size(); ++i) {
    if (run.requests[i].itl_s.size() >= 15) ++long_enough;
    else EXPECT_EQ(t.position[i], StepTimeline::kUnplaced) << i;
  }
  EXPECT_EQ(t.placed, long_enough);
  io::BenchmarkRequests b{run.requests, 30.0};
  const nlohmann::json r = io::serving_steps_report(b, t, 8);
  EXPECT_EQ(r["notes"][0], std::to_string(80 - long_enough) +
                               " of 80 requests were not placed (too few gaps to match); the steps hold their tokens "
                               "without counting them");
}

// Nothing to place: no request has enough gaps, or there is none.
TEST(ServingSteps, NothingToPlace) {
  EXPECT_EQ(recover_steps({}).step_s.size(), 0u);
  StreamedRequest one;
  one.itl_s = {0.01, 0.02};
  const StepTimeline t = recover_steps({one});
  EXPECT_EQ(t.placed, 0u);
  EXPECT_EQ(t.position[0], StepTimeline::kUnplaced);
  const nlohmann::json r = io::serving_steps_report({{one}, std::nullopt}, t, 8);
  EXPECT_EQ(r["steps"], 0);
  EXPECT_EQ(r["notes"][0], "no request was placed: none has enough gaps that match another's (docs/calibration.md)");
}

// The report's rows: decode-only steps by running requests, prompt steps by prompts, and the
// model's median beside each where it predicts the steps.
TEST(ServingSteps, ReportRowsAndPredictions) {
  StepTimeline t;
  t.step_s = {0.030, 0.032, 0.050, 0.034};
  t.decodes = {3, 4, 4, 9};
  t.decode_context = {300, 400, 400, 900};
  t.first_tokens = {0, 0, 1, 0};
  t.prompt_tokens = {0, 0, 512, 0};
  t.placed = 5;
  io::BenchmarkRequests b;
  b.requests.resize(5);
  const std::vector<double> predicted = {0.027, 0.029, 0.045, std::nan("")};
  const nlohmann::json r = io::serving_steps_report(b, t, 8, &predicted);
  ASSERT_EQ(r["decode_steps"].size(), 2u);
  const auto& low = r["decode_steps"][0];
  EXPECT_EQ(low["decodes_from"], 0);
  EXPECT_EQ(low["decodes_to"], 7);
  EXPECT_EQ(low["steps"], 2);
  EXPECT_DOUBLE_EQ(low["median_ms"].get<double>(), 32.0);  // nearest rank of two: the upper
  EXPECT_DOUBLE_EQ(low["mean_decodes"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(low["mean_context"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(low["predicted_median_ms"].get<double>(), 29.0);
  EXPECT_NEAR(low["error"].get<double>(), 29.0 / 32.0 - 1.0, 1e-12);
  EXPECT_FALSE(r["decode_steps"][1].contains("predicted_median_ms"));
  ASSERT_EQ(r["prompt_steps"].size(), 1u);
  EXPECT_EQ(r["prompt_steps"][0]["prompts"], 1);
  EXPECT_DOUBLE_EQ(r["prompt_steps"][0]["median_prompt_tokens"].get<double>(), 512.0);
  EXPECT_DOUBLE_EQ(r["prompt_steps"][0]["predicted_median_ms"].get<double>(), 45.0);
}

// A client that streamed several tokens per chunk leaves gaps of zero; the report says so.
TEST(ServingSteps, BurstsAreNamed) {
  StreamedRequest q;
  q.itl_s = std::vector<double>(40, 0.0);
  for (size_t j = 0; j < 40; j += 10) q.itl_s[j] = 0.3;
  const io::BenchmarkRequests b{{q, q}, std::nullopt};
  const nlohmann::json r = io::serving_steps_report(b, recover_steps(b.requests), 8);
  EXPECT_EQ(r["notes"].back(),
            "90% of the gaps are under 0.1 ms: the server streamed several tokens at once (multi-step scheduling or a "
            "stream interval), so a recovered step is a burst of iterations, not one");
}

// Every problem of a result file at its place, at once.
TEST(ServingSteps, ResultFileErrors) {
  auto issues = [](const nlohmann::json& doc) {
    try {
      (void)io::benchmark_requests_from_json(doc, "r.json");
    } catch (const InputError& e) {
      std::vector<std::string> out;
      for (const Issue& i : e.issues()) out.push_back(format_issue(i));
      return out;
    }
    return std::vector<std::string>{};
  };
  EXPECT_EQ(issues(nlohmann::json::parse(R"({"itls": [[0.1]], "duration": -1})")),
            (std::vector<std::string>{
                "r.json#/ttfts: missing: times to first token (seconds) per request; save the run with vLLM's "
                "benchmark_serving.py --save-result (--save-detailed too in later releases) or SGLang's "
                "bench_serving.py --output-details",
                "r.json#/input_lens: missing: prompt lengths (tokens) per request; save the run with vLLM's "
                "benchmark_serving.py --save-result (--save-detailed too in later releases) or SGLang's "
                "bench_serving.py --output-details",
                "r.json#/duration: must be the benchmark's length in seconds, above 0 (got -1)"}));
  EXPECT_EQ(issues(nlohmann::json::parse(R"({"ttfts": [0.1, 0.2], "itls": [[0.01]], "input_lens": [5, 6]})")),
            (std::vector<std::string>{"r.json#/itls: must have one entry per request of /ttfts (2) (got 1 entries)"}));
  EXPECT_EQ(issues(nlohmann::json::parse(
                R"({"ttfts": [0.1, "x"], "itls": [[0.01, -2], 3], "input_lens": [5.5, 6]})")),
            (std::vector<std::string>{"r.json#/ttfts/1: must be a time in seconds, 0 or more (got \"x\")",
                                      "r.json#/itls/0/1: must be a gap in seconds, 0 or more (got -2)",
                                      "r.json#/itls/1: must be an array of gaps in seconds (got 3)",
                                      "r.json#/input_lens/0: must be a whole number of tokens, 0 or more (got 5.5)"}));
  EXPECT_EQ(issues(nlohmann::json::parse(R"([1, 2])")),
            (std::vector<std::string>{
                "r.json#: must be a JSON object (a benchmark_serving.py --save-result file) (got [1,2])"}));
  // Many bad values: the first twenty, then a count of the rest.
  nlohmann::json many = {{"ttfts", nlohmann::json::array()}, {"itls", nlohmann::json::array()}, {"input_lens", nlohmann::json::array()}};
  for (int i = 0; i < 25; ++i) many["ttfts"].push_back(-1), many["itls"].push_back({0.01}), many["input_lens"].push_back(3);
  const auto got = issues(many);
  ASSERT_EQ(got.size(), 21u);
  EXPECT_EQ(got.back(), "r.json#/ttfts: 5 more entries break the same rules");
}

// SGLang's bench_serving appends each run to its output file, one JSON object per line: such
// a file needs --run to pick one, and a single run takes no other.
TEST(ServingSteps, JsonLinesFileNeedsARun) {
  const auto dir = std::filesystem::temp_directory_path() / ("capsim-steps-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto lines = dir / "runs.jsonl";
  {
    std::ofstream out(lines);
    out << R"({"ttfts": [0.1], "itls": [[0.01]], "input_lens": [5]})" << "\n\n"
        << R"({"ttfts": [0.2, 0.3], "itls": [[0.02], [0.03]], "input_lens": [6, 7]})" << "\n";
  }
  auto error = [](const auto& f) {
    try {
      f();
    } catch (const InputError& e) {
      return format_issue(e.issues().front());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error([&] { (void)io::read_benchmark_requests(lines); }),
            lines.string() + ": holds several runs, one JSON object per line (SGLang bench_serving appends each run) "
                             "(got 2 runs); pick one with --run K (1-2)");
  EXPECT_EQ(io::read_benchmark_requests(lines, 2).requests.size(), 2u);
  EXPECT_EQ(io::read_benchmark_requests(lines, 1).requests.size(), 1u);
  EXPECT_EQ(error([&] { (void)io::read_benchmark_requests(lines, 3); }),
            lines.string() + ": holds several runs, one JSON object per line (SGLang bench_serving appends each run) "
                             "(got 2 runs); pick one with --run K (1-2)");
  // A bad value in the second run is reported in that run.
  {
    std::ofstream out(lines);
    out << R"({"ttfts": [0.1], "itls": [[0.01]], "input_lens": [5]})" << "\n"
        << R"({"ttfts": [-1], "itls": [[0.02]], "input_lens": [6]})" << "\n";
  }
  EXPECT_EQ(error([&] { (void)io::read_benchmark_requests(lines, 2); }),
            lines.string() + " run 2#/ttfts/0: must be a time in seconds, 0 or more (got -1)");
  const auto one = dir / "one.json";
  {
    std::ofstream out(one);
    out << R"({"ttfts": [0.1], "itls": [[0.01]], "input_lens": [5]})" << "\n";
  }
  EXPECT_EQ(error([&] { (void)io::read_benchmark_requests(one, 2); }),
            "--run: the file holds one run (got 2); drop --run or give --run 1");
  // Neither one document nor one per line: the whole file's parse error.
  {
    std::ofstream out(one);
    out << "{\"ttfts\": [0.1],\n \"itls\": [[0.01]\n}\n";
  }
  EXPECT_NE(error([&] { (void)io::read_benchmark_requests(one); }).find(one.string() + ": "), std::string::npos);
  std::filesystem::remove_all(dir);
}

// The host time that fits: the median of measured less the model's GPU time over the
// decode-only steps (steps that produced first tokens and steps without a prediction left
// out), never below zero, with the errors before and after.
TEST(ServingSteps, FittedHostTimeIsTheMedianResidual) {
  StepTimeline t;
  t.step_s = {0.030, 0.033, 0.090, 0.040, 0.031};
  t.decodes = {5, 6, 6, 8, 5};
  t.decode_context = {500, 600, 600, 800, 500};
  t.first_tokens = {0, 0, 1, 0, 0};
  t.prompt_tokens = {0, 0, 900, 0, 0};
  const std::vector<double> gpu = {0.026, 0.030, 0.050, 0.036, std::nan("")};
  const std::vector<double> predicted = {0.027, 0.031, 0.051, 0.037, std::nan("")};
  const nlohmann::json f = io::fit_step_overhead(t, gpu, predicted);
  EXPECT_EQ(f["steps"], 3);  // the prompt step and the unpredicted one left out
  EXPECT_NEAR(f["step_overhead_ms"].get<double>(), 4.0, 1e-9);  // residuals 4, 3, 4 ms
  // Before: |27/30 - 1|, |31/33 - 1|, |37/40 - 1|; after: 0, 1/33, 0.
  EXPECT_NEAR(f["median_abs_error_before"].get<double>(), 3.0 / 40.0, 1e-12);
  EXPECT_NEAR(f["median_abs_error_after"].get<double>(), 0.0, 1e-12);
  // A model slower than every step fits no negative host time.
  const std::vector<double> slow = {0.05, 0.05, 0.05, 0.05, 0.05};
  EXPECT_EQ(io::fit_step_overhead(t, slow, slow)["step_overhead_ms"], 0.0);
  EXPECT_TRUE(io::fit_step_overhead(t, {}, {}).is_null());
}

// Gaps all alike match everywhere and would make the search try every offset in full: it
// stops at its comparison budget, keeps what it placed, and the report says so.
TEST(ServingSteps, FlatGapsStopAtTheComparisonBudget) {
  std::vector<StreamedRequest> flat(200);
  for (auto& q : flat) q.itl_s.assign(400, 0.040);
  StepRecovery o;
  o.max_comparisons = 2'000'000;
  const StepTimeline t = recover_steps(flat, o);
  EXPECT_TRUE(t.truncated);
  EXPECT_GE(t.placed, 1u);
  EXPECT_LT(t.placed, flat.size());
  const nlohmann::json r = io::serving_steps_report({flat, std::nullopt}, t, 8);
  EXPECT_EQ(r["notes"][0],
            "the search for positions stopped at its limit of comparisons: the gaps are too alike to tell positions apart "
            "quickly, and the requests not placed by then are left out");
  // A real run's gaps stay far inside the default budget.
  EXPECT_FALSE(recover_steps(synthetic_run(3, 600, 120, 0.3e-3, 15).requests).truncated);
}

// The eager host time per layer: over the steps that finished prompts without a CUDA graph,
// the median of measured less the fitted step host time less the rest of the model's GPU
// time, over the layers; graphed prompt steps and decode-only steps left out.
TEST(ServingSteps, FittedEagerHostTimePerLayer) {
  StepTimeline t;
  t.step_s = {0.030, 0.030, 0.120, 0.040, 0.130, 0.110};
  t.decodes = {5, 5, 5, 5, 6, 6};
  t.decode_context = {500, 500, 500, 500, 600, 600};
  t.first_tokens = {0, 0, 1, 1, 1, 1};
  t.prompt_tokens = {0, 0, 1000, 100, 1000, 1000};
  // Decode-only steps: GPU 28 ms, so the step host time fits at 2 ms.
  const std::vector<double> gpu = {0.028, 0.028, 0.090, 0.036, 0.095, 0.085};
  const std::vector<double> predicted = {0.029, 0.029, 0.091, 0.037, 0.096, 0.086};
  // The eager prompt steps carry 40 ms of host time in the model; the 100-token one replays a graph.
  const std::vector<double> eager = {0, 0, 0.040, 0, 0.040, 0.040};
  const nlohmann::json f = io::fit_step_overhead(t, gpu, predicted, &eager, 10);
  EXPECT_NEAR(f["step_overhead_ms"].get<double>(), 2.0, 1e-9);
  EXPECT_EQ(f["eager_steps"], 3);
  // Per layer: (120 - 2 - 50) / 10 = 6.8 ms, (130 - 2 - 55) / 10 = 7.3, (110 - 2 - 45) / 10 = 6.3.
  EXPECT_NEAR(f["eager_host_us_per_layer"].get<double>(), 6800.0, 1e-6);
  // After: 50 + 68 + 2 = 120 (0), 55 + 68 + 2 = 125 (5/130), 45 + 68 + 2 = 115 (5/110).
  EXPECT_NEAR(f["eager_median_abs_error_after"].get<double>(), 5.0 / 130.0, 1e-12);
  // Without the eager parts or the layer count, only the step host time.
  EXPECT_FALSE(io::fit_step_overhead(t, gpu, predicted).contains("eager_host_us_per_layer"));
  EXPECT_FALSE(io::fit_step_overhead(t, gpu, predicted, &eager, 0).contains("eager_host_us_per_layer"));
}
