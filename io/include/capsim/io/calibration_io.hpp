#pragma once
/// Calibration files (docs/calibration.md): raw measurements as JSON Lines, nccl-tests logs
/// (text in the old and new column sets, or -J JSON) imported into the same form, and
/// fitted profiles as JSON.

#include <filesystem>
#include <optional>
#include <string>

#include "capsim/core/calibration.hpp"

namespace capsim::io {

/// Reads a raw measurement file; every bad line is reported (file:line, field, rule).
RawFile read_raw(const std::filesystem::path& path);
/// The raw file as JSON Lines text (header first), in a fixed key order.
std::string raw_to_text(const RawFile& raw);

/// Parses nccl-tests output. The collective comes from "# Collective test starting:",
/// the -J arguments, `op` when given, or the busbw/algbw ratio and reduction column; the
/// ranks from the "# Rank" lines; nodes from their distinct hosts. A log holding several
/// tests (one after another) gives all of them.
RawFile import_nccl_tests(const std::filesystem::path& path, std::optional<CalOp> op = std::nullopt);

std::string profile_to_json(const CalibrationProfile& p);
CalibrationProfile read_profile(const std::filesystem::path& path);

}  // namespace capsim::io

#include <memory>
#include <nlohmann/json_fwd.hpp>

#include "capsim/hw/calibrated.hpp"
#include "capsim/hw/roofline.hpp"

namespace capsim::io {

/// Whether a profile was measured on this GPU model (a100, h100, h200, ... in its recorded
/// GPU name against the preset); a profile that names no GPU matches every GPU.
bool profile_matches(const CalibrationProfile& p, const GpuSpec& gpu);

/// The cost model a command uses: the roofline, behind a calibration profile when one is
/// given and was measured on the system's GPU model.
class CostModels {
 public:
  CostModels(const SystemSpec& sys, const CalibrationProfile* profile);
  const CostModel& get() const;
  bool calibrated() const { return cal_ != nullptr; }

 private:
  std::unique_ptr<hw::RooflineCostModel> base_;
  std::unique_ptr<hw::CalibratedCostModel> cal_;
};

/// {"profile": name, "gpu": ..., "supplies": [efficiencies the profile replaces]} for reports.
nlohmann::json calibration_json(const CalibrationProfile& p);

/// Put the "calibration" block a command adds with `--calibration` into `report`:
/// calibration_json(p), and "applied" (profile_matches) when `gpu` is given. False when the
/// profile was measured on another GPU model (the default model answered), else true.
bool add_calibration(nlohmann::json& report, const CalibrationProfile& p, const GpuSpec* gpu = nullptr);

}  // namespace capsim::io
