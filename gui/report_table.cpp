#include "report_table.hpp"

#include <array>
#include <string_view>
#include <utility>

namespace capsim::gui {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

void flatten(const nlohmann::json& j, const std::string& prefix, std::vector<ReportMetric>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) flatten(j[i], prefix + "." + std::to_string(i), out);
  } else if (j.is_number() || j.is_boolean()) {
    out.push_back({prefix, j, unit_of(prefix)});
  }
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::optional<double> ReportMetric::number() const {
  if (value.is_boolean()) return value.get<bool>() ? 1.0 : 0.0;
  if (value.is_number()) return value.get<double>();
  return std::nullopt;
}

std::string unit_of(const std::string& key) {
  const std::string_view last = std::string_view(key).substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
  // Longest suffixes first: "tokens_per_s_per_gpu" before "_per_s" before "_s".
  static const std::array<std::pair<std::string_view, std::string_view>, 17> kSuffixes = {{
      {"tokens_per_s_per_gpu", "tokens/s/GPU"},
      {"tokens_per_s", "tokens/s"},
      {"requests_per_s", "requests/s"},
      {"_per_s", "1/s"},
      {"tflops_per_gpu", "TFLOP/s"},
      {"nic_gbps_per_gpu", "Gb/s"},
      {"_gbps", "GB/s"},
      {"_bytes_per_token", "bytes/token"},
      {"_bytes_per_gpu", "bytes"},
      {"_bytes", "bytes"},
      {"_gib", "GiB"},
      {"_ms", "ms"},
      {"_us", "us"},
      {"_s", "s"},
      {"_mwh", "MWh"},
      {"gpu_hours", "GPU hours"},
      {"days", "days"},
  }};
  for (const auto& [suffix, unit] : kSuffixes)
    if (ends_with(last, suffix)) return std::string(unit);
  // Keys that carry a unit in the middle ("eager_host_us_dense_layer", "step_overhead_us_per_seq").
  if (last.find("_us_") != std::string_view::npos) return "us";
  // FLOPs per step ("flops.model_per_step").
  if (key.rfind("flops.", 0) == 0 || key.find(".flops.") != std::string::npos) return "FLOP";
  return {};
}

std::vector<ReportMetric> report_metrics(const nlohmann::json& report) {
  std::vector<ReportMetric> out;
  flatten(report, {}, out);
  return out;
}

std::string report_csv(const nlohmann::json& report) {
  std::string csv = "key,value,unit\n";
  for (const ReportMetric& m : report_metrics(report))
    csv += csv_cell(m.key) + "," + m.value.dump() + "," + csv_cell(m.unit) + "\n";
  return csv;
}

}  // namespace capsim::gui
