#pragma once
/// Reading a serving benchmark's saved per-request timings and reporting the engine steps
/// recovered from them (capsim calibrate serving-steps; docs/calibration.md).

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/step_timeline.hpp"

namespace capsim::io {

/// The requests of a benchmark_serving.py --save-result file (vLLM's or SGLang's client):
/// `ttfts` (seconds), `itls` (per request, the gaps between streamed tokens, seconds) and
/// `input_lens` (prompt tokens), one entry per request in each. Other keys are the client's
/// and are ignored. Every problem is an InputError at its JSON pointer.
struct BenchmarkRequests {
  std::vector<StreamedRequest> requests;
  std::optional<double> duration_s;  ///< `duration`, where the file has it
};
/// A file of several runs, one JSON object per line (SGLang's bench_serving appends each
/// run to its --output-file), needs `run` (1-based) to pick one; a single run takes none.
BenchmarkRequests read_benchmark_requests(const std::filesystem::path& path, std::optional<size_t> run = std::nullopt);

/// The same from parsed JSON; `origin` names it in errors.
BenchmarkRequests benchmark_requests_from_json(const nlohmann::json& doc, const std::string& origin);

/// Report of the recovered steps: totals, decode-only steps by running requests in buckets
/// of `bucket`, and steps that finished prompts by how many. `predicted_s`, where given, is
/// the model's time of each step (NaN where it does not predict one) and adds its median per
/// row beside the measured one.
nlohmann::json serving_steps_report(const BenchmarkRequests& b, const StepTimeline& t, int64_t bucket,
                                    const std::vector<double>* predicted_s = nullptr);

/// The whole analysis of `capsim calibrate serving-steps`: the steps recovered from `b`, the
/// report of them in rows of `bucket`, and with a scenario `s` (an inference scenario of the
/// same deployment, priced with `cost`) each step's predicted time beside them, the step
/// budget's split prompts named and the host time that fits (`fit`). A deployment that does
/// not fit is a note, not an error.
nlohmann::json analyze_serving_steps(const BenchmarkRequests& b, int64_t bucket, const Scenario* s = nullptr,
                                     const CostModel* cost = nullptr, ProgressCounter* progress = nullptr);

/// The host time per step that makes the model's decode-only steps match the recovered ones:
/// the median over those steps of the measured time less the model's GPU time (`gpu_s`),
/// at least 0, in the units of a scenario's `engine.step_overhead_ms` (a measured host time
/// added to every step's GPU time, in place of the profile's host model). With it, the
/// median |error| of those steps before (`predicted_s`, the profile's host model) and after.
/// Null where no decode-only step has both figures.
///
/// With `eager_s` (each step's host time for running without a CUDA graph, StepParts::
/// eager_host; 0 for a replayed step) and the model's `layers`, it also fits that host time
/// per layer over the steps that produced first tokens and ran eagerly: the median of the
/// measured time less the fitted host time less the rest of the model's GPU time, over the
/// layers, at least 0, as a scenario's `engine.eager_host_us_per_layer`, with those steps'
/// median |error| before and after (`eager_host_us_per_layer`, `eager_steps`,
/// `eager_median_abs_error_before`, `eager_median_abs_error_after`; absent where no such
/// step has a prediction).
nlohmann::json fit_step_overhead(const StepTimeline& t, const std::vector<double>& gpu_s,
                                 const std::vector<double>& predicted_s, const std::vector<double>* eager_s = nullptr,
                                 int64_t layers = 0);

}  // namespace capsim::io
