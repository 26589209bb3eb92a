// Accuracy against the published training measurements in data/validation: every case
// must be simulated, and the error may not grow past the figures recorded here (a
// regression fails CI). README "Accuracy" shows the current table.
#include <gtest/gtest.h>

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
  // Recorded bounds (current model plus a small margin); lower them as the model improves.
  EXPECT_LE(s["step_time_s"]["median_abs_error"].get<double>(), 0.14);
  EXPECT_LE(s["step_time_s"]["p90_abs_error"].get<double>(), 0.44);
  EXPECT_LE(s["peak_memory_gib"]["median_abs_error"].get<double>(), 0.29);
  EXPECT_LE(s["peak_memory_gib"]["p90_abs_error"].get<double>(), 0.44);
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
