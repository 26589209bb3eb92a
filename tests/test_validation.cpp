// Accuracy against the published training measurements in data/validation: every case
// must be simulated, and the error may not grow past the figures recorded here (a
// regression fails CI). README "Accuracy" shows the current table.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "capsim/io/calibration_io.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/validation.hpp"

namespace capsim {
namespace {

const std::filesystem::path kTraining = std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "validation" / "training-public.json";

TEST(Validation, TrainingCasesAllSimulated) {
  const nlohmann::json r = io::run_validation({kTraining});
  size_t n = 0;
  for (const auto& c : r["cases"]) {
    EXPECT_EQ(c["status"], "ok") << c["id"] << ": " << c.value("reason", std::string());
    ++n;
  }
  EXPECT_GE(n, 124u);
  EXPECT_EQ(r["summary"]["training-public.json"]["step_time_s"]["unsupported"], 0);
}

TEST(Validation, TrainingErrorBounds) {
  const nlohmann::json r = io::run_validation({kTraining});
  const auto& s = r["summary"]["training-public.json"];
  // Recorded bounds (current model plus a small margin; all inside the targets of step time
  // median 15% and p90 35%, peak memory median 15%); lower them as the model improves.
  EXPECT_LE(s["step_time_s"]["median_abs_error"].get<double>(), 0.13);
  EXPECT_LE(s["step_time_s"]["p90_abs_error"].get<double>(), 0.335);
  EXPECT_LE(s["peak_memory_gib"]["median_abs_error"].get<double>(), 0.13);
  EXPECT_LE(s["peak_memory_gib"]["p90_abs_error"].get<double>(), 0.25);
}

// The shipped H100 network profile (data/calibration, fitted from published nccl-tests
// logs) applies to the H100 cases only and makes them no worse.
TEST(Validation, PublicH100NetworkProfileHelps) {
  const CalibrationProfile p =
      io::read_profile(std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "calibration" / "h100-nccl-tests-public.json");
  const nlohmann::json base = io::run_validation({kTraining}), cal = io::run_validation({kTraining}, &p);
  const auto& b = base["summary"]["training-public.json"]["step_time_s"];
  const auto& c = cal["summary"]["training-public.json"]["step_time_s"];
  EXPECT_LE(c["median_abs_error"].get<double>(), 0.13);
  EXPECT_LE(c["median_abs_error"].get<double>(), b["median_abs_error"].get<double>());
  for (size_t i = 0; i < base["cases"].size(); ++i) {
    const auto& bc = base["cases"][i];
    if (bc["id"].get<std::string>().rfind("narayanan21", 0) == 0 || bc["id"].get<std::string>().rfind("korthikanti22", 0) == 0) {
      EXPECT_EQ(bc["predicted"], cal["cases"][i]["predicted"]) << bc["id"] << ": an A100 case must not change";
    }
  }
}

// Serving: every offline-throughput and serving-percentile case is simulated, and each
// metric's median |error| stays within the figure recorded here (current model plus a
// small margin; the 20% goal is not met yet for latency percentiles).
TEST(Validation, ServingCasesAllSimulatedWithinRecordedBounds) {
  const auto dir = std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "validation";
  const nlohmann::json r = io::run_validation({dir / "inference-public.json", dir / "serving-percentiles-public.json"});
  size_t n = 0;
  for (const auto& c : r["cases"]) {
    EXPECT_EQ(c["status"], "ok") << c["id"] << ": " << c.value("reason", std::string());
    ++n;
  }
  EXPECT_GE(n, 41u);
  const std::map<std::string, std::map<std::string, double>> bounds = {
      {"inference-public.json", {{"throughput_tokens_per_s", 0.11}, {"tpot_p50_ms", 0.21}, {"ttft_p50_ms", 0.48}}},
      {"serving-percentiles-public.json",
       {{"itl_p50_ms", 0.05}, {"itl_mean_ms", 0.04}, {"itl_p99_ms", 0.13}, {"tpot_mean_ms", 0.08}, {"tpot_p50_ms", 0.02},
        {"tpot_p99_ms", 0.11}, {"throughput_tokens_per_s", 0.075}, {"requests_per_s", 0.075}, {"ttft_mean_ms", 0.06},
        {"ttft_p50_ms", 0.06}, {"ttft_p99_ms", 0.20}}},
  };
  for (const auto& [file, metrics] : bounds)
    for (const auto& [metric, bound] : metrics) {
      const auto& m = r["summary"][file][metric];
      EXPECT_EQ(m["unsupported"], 0) << file << " " << metric;
      EXPECT_LE(m["median_abs_error"].get<double>(), bound) << file << " " << metric;
    }
}

TEST(Validation, Deterministic) {
  const std::string a = io::dump(io::run_validation({kTraining}));
  const std::string b = io::dump(io::run_validation({kTraining}));
  EXPECT_EQ(a, b);
}

TEST(Validation, SummaryStatistics) {
  const io::ErrorSummary s = io::summarize_errors({0.3, 0.1, 0.2, 0.5, 0.4});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.median_abs, 0.3);
  EXPECT_DOUBLE_EQ(s.p90_abs, 0.46);  // linear between ranks: 0.4 + 0.6 * (0.5 - 0.4)
  EXPECT_DOUBLE_EQ(s.max_abs, 0.5);
}

}  // namespace
}  // namespace capsim
