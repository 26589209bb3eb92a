#pragma once
/// What the window shows, computed the way `capsim train` and `capsim infer` compute it:
/// a scenario document (the CLI's file format) read by io::scenario_from_json, evaluated
/// by core, reported by the io report builders. No Qt here, so tests and workers share it.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <map>
#include <vector>

#include "capsim/core/calibration.hpp"
#include "capsim/core/diagnostics.hpp"
#include "capsim/core/pipeline_sim.hpp"
#include "capsim/core/search.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/progress.hpp"
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
  /// The step's operators for one microbatch (`capsim train --ops`), model order.
  std::vector<OperatorTime> operators;
  bool ok() const { return issues.empty() && internal_error.empty(); }
};

/// Read `doc` (relative model paths from `base_dir`) and evaluate it as `capsim train` does;
/// with `calibration`, as `capsim train --calibration FILE` does (the profile in front of the
/// default cost model where it was measured on the scenario's GPU, and the report's
/// "calibration" block).
TrainingOutcome evaluate_training_document(const nlohmann::json& doc, const std::filesystem::path& base_dir,
                                           const CalibrationProfile* calibration = nullptr);

/// One latency metric's summary over the replicated runs (milliseconds).
struct LatencyRow {
  std::string metric;  ///< ttft, tpot, itl, e2e
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0;
};

/// The most points the serving chart over time draws per series.
inline constexpr size_t kOverTimePoints = 2000;

/// One replica's iterations of a serving run, as the chart over time draws them: at each
/// iteration's start, the share of the replica's KV-cache blocks in use (percent) and the
/// running batch (sequences decoding). Longer timelines are cut into kOverTimePoints
/// buckets of consecutive iterations, each drawn at its first iteration's start with the
/// largest value in it, so that the peaks stay.
struct ServingOverTime {
  int32_t replica = 0;     ///< the replica drawn (the first)
  int32_t replicas = 1;    ///< replicas in the run
  size_t iterations = 0;   ///< the replica's iterations before downsampling
  std::vector<double> start_s, kv_percent, batch;  ///< one entry per point
};

/// The first replica's iterations of `timeline` (a run's, record_timeline) in start order,
/// downsampled to at most `max_points` points per series.
ServingOverTime serving_over_time(const std::vector<IterationRecord>& timeline, size_t max_points = kOverTimePoints);

/// A serving run as `capsim infer` makes it.
struct ServingOutcome {
  bool cancelled = false;  ///< the cancel flag stopped the run: nothing below is set
  std::string internal_error;
  std::string does_not_fit;         ///< the reason, when the deployment does not fit
  std::vector<LatencyRow> latency;  ///< ttft, tpot, itl, e2e (empty when it does not fit)
  double throughput_tokens_per_s = 0;
  double requests_per_s = 0;
  ServingOverTime over_time;  ///< the first run's timeline (serving_over_time)
  /// Where the first run's engine time went (the report's busy_by_part, io::busy_shares):
  /// part, share of the busy time, largest first.
  std::vector<std::pair<std::string, double>> time_shares;
  std::string report;  ///< io::dump of the report, as `capsim infer --format json`
};

/// Read `doc` as an inference scenario; throws InputError with every problem.
Scenario read_serving_document(const nlohmann::json& doc, const std::filesystem::path& base_dir);

/// Simulate `s` (replicated runs, the first with its timeline) and build the report, as
/// `capsim infer [--calibration FILE]` does. Pure: safe on a worker thread. Setting
/// `*cancel` stops the run before its next simulated replication (the outcome says cancelled).
ServingOutcome run_serving(const Scenario& s, uint64_t seed = kDefaultSeed,
                           const CalibrationProfile* calibration = nullptr, const std::atomic<bool>* cancel = nullptr);

/// P99 latencies of the deployment at one Poisson arrival rate.
struct QpsPoint {
  double qps = 0;
  double ttft_p99_ms = 0, tpot_p99_ms = 0;  ///< medians over the runs of each run's P99 (p99_latencies)
};

/// Latency against load, as `capsim infer --max-qps` finds the highest rate within the SLA.
struct QpsCurve {
  bool cancelled = false;  ///< the cancel flag stopped the run: nothing below is set
  std::string internal_error;
  std::string does_not_fit;  ///< the reason, when the deployment does not fit
  ServingSla sla;
  double max_qps = 0;            ///< max_qps(): the highest rate meeting the SLA; 0 when none does
  std::vector<QpsPoint> points;  ///< rising qps, max_qps among them when above 0
};

/// The fractions of max_qps the curve samples (the rate itself among them).
inline constexpr double kQpsCurveFractions[] = {0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5};

/// max_qps(s, sla) and P99 TTFT and TPOT at kQpsCurveFractions of it (of the scenario's own
/// rate, or 1 request/s, when no rate meets the SLA), each rate a Poisson probe of `s` as
/// `capsim infer --max-qps` runs it. Pure: safe on a worker thread. Setting `*cancel` stops
/// it before its next simulated run (the curve says cancelled).
/// `progress` counts the probes: max_qps's (against its estimate), then one per point of the
/// curve, the total raised by the curve's points once the rate is found.
QpsCurve run_qps_curve(const Scenario& s, const ServingSla& sla, uint64_t seed = kDefaultSeed,
                       const CalibrationProfile* calibration = nullptr, const std::atomic<bool>* cancel = nullptr,
                       ProgressCounter* progress = nullptr);

/// The latency rows of a serving report's "metrics" (io::serving_metrics): what the serving
/// table shows; a metric the runs did not state (null) shows as 0.
std::vector<LatencyRow> latency_rows(const nlohmann::json& metrics);

/// "pointer: rule (got value); hint" lines, as the CLI prints them.
std::vector<std::string> issue_lines(const std::vector<Issue>& issues);

/// "N problem(s) in the input:" and one indented issue line each: what the command line
/// prints after "capsim: " when input is rejected.
std::string input_error_text(const std::vector<Issue>& issues);

/// One GEMM dtype of a profile: each measured shape's efficiency against the default
/// model's for the same shape (fractions of the GPU's dense peak in that dtype).
struct GemmCurve {
  std::string dtype;
  std::vector<int64_t> m, n, k;
  std::vector<double> flops;     ///< 2mnk
  std::vector<double> measured;  ///< the profile's TFLOP/s over the peak
  std::vector<double> model;     ///< the default (roofline) model's FLOPs / time over the peak
};

/// One collective fit of a profile: bus bandwidth by message size, measured and default.
struct CollectiveCurve {
  std::string label;  ///< "all_reduce x8 intra-node"
  std::vector<double> bytes;
  std::vector<double> measured_gbps;  ///< bytes x busbw factor / measured time, GB/s
  std::vector<double> model_gbps;     ///< the same from the default model's time
};

/// A calibration profile read as `--calibration` reads it, beside the default model.
struct CalibrationOutcome {
  std::string error;  ///< the CLI's message when the profile does not read (input_error_text)
  std::string name, gpu;  ///< the profile's name and recorded GPU
  std::string model_gpu;  ///< the GPU preset the default model ran on
  std::string note;       ///< which system the default curves are for, and why
  std::vector<GemmCurve> gemm;
  std::vector<CollectiveCurve> collectives;
  std::shared_ptr<const CalibrationProfile> profile;  ///< the profile read; null when it did not read
  bool ok() const { return error.empty(); }
};

/// Read the profile at `path` (io::read_profile) and put its GEMM and collective
/// measurements beside the default model of `system`, or of the GPU preset the profile was
/// measured on when `system`'s GPU is another (the system's node size and NIC kept).
CalibrationOutcome load_calibration(const std::filesystem::path& path, const SystemSpec& system);

/// One predicted-vs-measured pair of a validation case.
struct ValidationPoint {
  std::string id, file, metric;
  double predicted = 0, measured = 0, error = 0;  ///< error: predicted / measured - 1
  std::map<std::string, std::string> groups;  ///< the case's group under each key (validation_group_keys)
};

/// What a validation table can be grouped by, as `capsim validate --group-by` takes it:
/// source, engine, gpu, gpus, model, mode.
const std::vector<std::string>& validation_group_keys();

/// One row of the error table: a source family's statistics over a metric (or "(all)").
struct ValidationGroupRow {
  std::string group, metric;
  int64_t n = 0;
  double median_abs = 0, p90_abs = 0, signed_median = 0;
};

/// Validation files run as `capsim validate --group-by source` runs them.
struct ValidationOutcome {
  std::string internal_error;  ///< a file that does not read, or an unexpected failure
  std::vector<ValidationPoint> points;      ///< every ok case's metrics, in report order
  /// io::group_errors(report, key) for every validation_group_keys() key, groups in the
  /// order tables print them (io::ordered_group_names), then metric.
  std::map<std::string, std::vector<ValidationGroupRow>> groups_by;
  std::vector<std::string> unsupported;     ///< ids of the cases the models cannot answer
  std::string report;                       ///< io::dump of the report with "groups_by"/"source"
};

/// The validation files in the data folder (data/validation/*.json), sorted.
std::vector<std::filesystem::path> default_validation_files();

/// Run `files` through io::run_validation on `threads` threads. Pure: safe on a worker thread.
ValidationOutcome run_validation_files(const std::vector<std::filesystem::path>& files, unsigned threads = 1);

/// A training layout search as `capsim search` runs it (its default options).
struct SearchOutcome {
  bool cancelled = false;  ///< the options' cancel flag stopped the search: nothing below is set
  std::vector<Issue> issues;
  std::string internal_error;
  Scenario scenario;
  SearchResult result;
  bool ok() const { return !cancelled && issues.empty() && internal_error.empty(); }
};

/// `capsim search`'s options: `top` layouts, GPU counts (the scenario's when empty), all cores.
SearchOptions search_options(const std::vector<int64_t>& gpu_counts, size_t top = 10);

/// Read `doc` as a training scenario and search its layouts. Pure: safe on a worker thread.
/// Setting `*opt.cancel` stops the search before its next layout (the outcome says cancelled).
SearchOutcome run_layout_search(const nlohmann::json& doc, const std::filesystem::path& base_dir,
                                const SearchOptions& opt, const CalibrationProfile* calibration = nullptr);

/// `doc` (a training document) with the layout of `c`: its GPU count and every layout key
/// the search chooses, so that the document evaluates to the candidate.
nlohmann::json apply_candidate(const nlohmann::json& doc, const SearchCandidate& c);

/// One training step run by the discrete-event engine, as `capsim train --engine des`.
struct TimelineOutcome {
  std::vector<Issue> issues;
  std::string internal_error;
  std::shared_ptr<const DesStep> des;  ///< shared: a DesStep moves but does not copy
  std::string trace;  ///< io::chrome_trace(des), as `--trace` writes it
  bool ok() const { return issues.empty() && internal_error.empty(); }
};

/// Read `doc` and run its step on the discrete-event engine. Pure: safe on a worker thread.
TimelineOutcome run_timeline(const nlohmann::json& doc, const std::filesystem::path& base_dir,
                             const CalibrationProfile* calibration = nullptr);

}  // namespace capsim::gui
