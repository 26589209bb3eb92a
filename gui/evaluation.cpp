#include "evaluation.hpp"

#include <exception>
#include <nlohmann/json.hpp>

#include "capsim/io/calibration_io.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"

namespace capsim::gui {

TrainingOutcome evaluate_training_document(const nlohmann::json& doc, const std::filesystem::path& base_dir) {
  TrainingOutcome out;
  try {
    out.scenario = io::scenario_from_json(doc, base_dir);
    if (!out.scenario.training)
      throw InputError({{"/kind", "\"inference\"", "capsim train needs a training scenario", {}}});
    const io::CostModels costs(out.scenario.system, nullptr);
    out.evaluation = evaluate_training(out.scenario, &costs.get());
    out.report = io::dump(io::analytical_train_report(out.scenario, out.evaluation));
  } catch (const InputError& e) {
    out.issues = e.issues();
  } catch (const std::exception& e) {
    out.internal_error = e.what();
  }
  return out;
}

Scenario read_serving_document(const nlohmann::json& doc, const std::filesystem::path& base_dir) {
  Scenario s = io::scenario_from_json(doc, base_dir);
  if (!s.inference) throw InputError({{"/kind", "\"training\"", "capsim infer needs an inference scenario", {}}});
  return s;
}

std::vector<LatencyRow> latency_rows(const std::vector<ServingResult>& runs) {
  const nlohmann::json m = io::serving_metrics(runs);
  std::vector<LatencyRow> rows;
  for (const char* k : {"ttft", "tpot", "itl", "e2e"}) {
    const std::string key(k);
    rows.push_back({key, m.value(key + "_mean_ms", 0.0), m.value(key + "_p50_ms", 0.0), m.value(key + "_p90_ms", 0.0),
                    m.value(key + "_p99_ms", 0.0)});
  }
  return rows;
}

ServingOutcome run_serving(const Scenario& s, uint64_t seed) {
  ServingOutcome out;
  try {
    const io::CostModels costs(s.system, nullptr);
    try {
      const std::vector<ServingResult> runs = simulate_serving_runs(s, costs.get(), seed, true);
      const nlohmann::json r = io::serving_report(s, runs);
      out.latency = latency_rows(runs);
      const nlohmann::json& m = r.at("metrics");
      out.throughput_tokens_per_s = m.value("throughput_tokens_per_s", 0.0);
      out.requests_per_s = m.value("requests_per_s", 0.0);
      out.report = io::dump(r);
    } catch (const ServingDoesNotFit& e) {
      out.does_not_fit = e.what();
      out.report = io::dump(io::serving_does_not_fit_report(s, e.what()));
    }
  } catch (const std::exception& e) {
    out.internal_error = e.what();
  }
  return out;
}

std::vector<std::string> issue_lines(const std::vector<Issue>& issues) {
  std::vector<std::string> lines;
  lines.reserve(issues.size());
  for (const auto& i : issues) lines.push_back(format_issue(i));
  return lines;
}

}  // namespace capsim::gui
