#pragma once
/// What the window shows, computed the way `capsim train` and `capsim infer` compute it:
/// a scenario document (the CLI's file format) read by io::scenario_from_json, evaluated
/// by core, reported by the io report builders. No Qt here, so tests and workers share it.

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "capsim/core/diagnostics.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/serving.hpp"
#include "capsim/core/train.hpp"

namespace capsim::gui {

/// The seed `capsim infer` uses when none is given.
inline constexpr uint64_t kDefaultSeed = 20261129;

/// A training document evaluated with the analytical engine.
struct TrainingOutcome {
  std::vector<Issue> issues;   ///< the input's problems; when non-empty nothing below is set
  std::string internal_error;  ///< an unexpected failure (not the user's input)
  Scenario scenario;
  TrainEvaluation evaluation;
  std::string report;  ///< io::dump of the report, as `capsim train --format json`
  bool ok() const { return issues.empty() && internal_error.empty(); }
};

/// Read `doc` (relative model paths from `base_dir`) and evaluate it as `capsim train` does.
TrainingOutcome evaluate_training_document(const nlohmann::json& doc, const std::filesystem::path& base_dir);

/// One latency metric's summary over the replicated runs (milliseconds).
struct LatencyRow {
  std::string metric;  ///< ttft, tpot, itl, e2e
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0;
};

/// A serving run as `capsim infer` makes it.
struct ServingOutcome {
  std::string internal_error;
  std::string does_not_fit;         ///< the reason, when the deployment does not fit
  std::vector<LatencyRow> latency;  ///< ttft, tpot, itl, e2e (empty when it does not fit)
  double throughput_tokens_per_s = 0;
  double requests_per_s = 0;
  std::string report;  ///< io::dump of the report, as `capsim infer --format json`
};

/// Read `doc` as an inference scenario; throws InputError with every problem.
Scenario read_serving_document(const nlohmann::json& doc, const std::filesystem::path& base_dir);

/// Simulate `s` (replicated runs, the first with its timeline) and build the report. Pure:
/// safe on a worker thread.
ServingOutcome run_serving(const Scenario& s, uint64_t seed = kDefaultSeed);

/// The latency rows of io::serving_metrics over `runs`: what the serving table shows.
std::vector<LatencyRow> latency_rows(const std::vector<ServingResult>& runs);

/// "pointer: rule (got value); hint" lines, as the CLI prints them.
std::vector<std::string> issue_lines(const std::vector<Issue>& issues);

}  // namespace capsim::gui
