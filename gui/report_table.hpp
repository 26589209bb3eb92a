#pragma once
/// A report (the CLI's JSON) as a flat list of metrics: every number and flag of the
/// report under its path, with the unit its key names. The CSV export and the compare
/// table read reports through this. No Qt here.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace capsim::gui {

/// One number or flag of a report.
struct ReportMetric {
  std::string key;     ///< path in the report, dot-separated ("time.step_s", "memory.stages.0.weights_bytes")
  nlohmann::json value;  ///< the report's number or boolean, unchanged
  std::string unit;    ///< from the key's suffix ("s", "bytes", "tokens/s"); empty when it names none
  /// The value as a double (booleans 0/1); nullopt for a JSON null.
  std::optional<double> number() const;
};

/// The unit a report key names by its last segment's suffix ("_s" seconds, "_bytes",
/// "_ms", "tokens_per_s", ...); empty when the key names none.
std::string unit_of(const std::string& key);

/// Every number and boolean of `report`, depth first in the report's key order.
std::vector<ReportMetric> report_metrics(const nlohmann::json& report);

/// `report` as CSV: the header "key,value,unit", then one row per report_metrics entry, the
/// value written as the JSON report writes it.
std::string report_csv(const nlohmann::json& report);

}  // namespace capsim::gui
