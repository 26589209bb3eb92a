#include "capsim/io/validation.hpp"

#include "capsim/io/calibration_io.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <stdexcept>

#include "capsim/core/model.hpp"
#include "capsim/core/parallel.hpp"
#include "capsim/core/train.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"

namespace capsim::io {

using nlohmann::json;

ErrorSummary summarize_errors(std::vector<double> e) {
  ErrorSummary s;
  s.n = e.size();
  if (e.empty()) return s;
  std::sort(e.begin(), e.end());
  auto pct = [&](double q) {
    const double pos = q * static_cast<double>(e.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, e.size() - 1);
    return e[lo] + (pos - static_cast<double>(lo)) * (e[hi] - e[lo]);
  };
  s.median_abs = pct(0.5);
  s.p90_abs = pct(0.9);
  s.max_abs = e.back();
  return s;
}

namespace {

/// A case of a kind the simulator does not model (a reason, not an input error).
struct NotSimulated : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Predict every training metric the case measured.
json predict_training(const Scenario& sc, const json& measured, json& resolved, std::string& reason,
                      const CalibrationProfile* calibration) {
  const CostModels costs(sc.system, calibration);
  const TrainEvaluation ev = evaluate_training(sc, &costs.get());
  json out = json::object();
  const json report = train_report(sc, ev);
  resolved = report["resolved"];
  if (!ev.feasible) reason = ev.fail_reason;
  for (auto it = measured.begin(); it != measured.end(); ++it) {
    if (it.key() == "step_time_s" && ev.step) out["step_time_s"] = ev.step->step_s;
    else if (it.key() == "peak_memory_gib")
      out["peak_memory_gib"] = (ev.memory.peak().total_bytes - ev.memory.peak().cuda_context_bytes) / kGiB;
  }
  return out;
}

/// Predict every metric of an RL iteration (SCHEMA.md, "Post-training cases") the case
/// measured: the step, its throughput, the phases, and the update step's peak memory.
json predict_rl(const Scenario& given, const json& measured, json& resolved, std::string& reason,
                const CalibrationProfile* calibration) {
  const CostModels costs(given.system, calibration);
  const RlEvaluation e = evaluate_rl(given, costs.get());
  const Scenario& sc = e.scenario;
  const RlIteration& it = e.iteration;
  const json report = rl_train_report(sc, it);
  resolved = report["resolved"];
  resolved["rl"] = report["rl"];
  json out = json::object();
  if (!it.feasible) {
    reason = it.fail_reason;
    return out;
  }
  const json& phases = report["rl"];
  for (auto m = measured.begin(); m != measured.end(); ++m) {
    if (m.key() == "peak_memory_gib")
      out[m.key()] = (it.update.memory.peak().total_bytes - it.update.memory.peak().cuda_context_bytes) / kGiB;
    else if (phases.contains(m.key()) && phases[m.key()].is_number())
      out[m.key()] = phases[m.key()];
  }
  return out;
}

/// Predict every metric of a preference (dpo/simpo/orpo) or distill step the case measured:
/// the step, its throughput, the trained model's part (training_s), the frozen model's
/// forward (scoring_s), and the peak memory with the frozen weights.
json predict_frozen_step(const Scenario& sc, const json& measured, json& resolved, std::string& reason,
                         const CalibrationProfile* calibration) {
  const CostModels costs(sc.system, calibration);
  const FrozenModelStep st = sc.distill ? evaluate_distill_step(sc, costs.get()) : evaluate_preference_step(sc, costs.get());
  const json report = frozen_step_report(sc, st);
  resolved = report["resolved"];
  json out = json::object();
  if (!st.feasible) {
    reason = st.fail_reason;
    return out;
  }
  for (auto m = measured.begin(); m != measured.end(); ++m) {
    if (m.key() == "step_time_s") out[m.key()] = st.step_time_s;
    else if (m.key() == "throughput_tokens_per_s") out[m.key()] = st.throughput_tokens_per_s;
    else if (m.key() == "training_s") out[m.key()] = st.trained_s;
    else if (m.key() == "scoring_s" && !st.frozen_role.empty()) out[m.key()] = st.frozen_s;
    else if (m.key() == "peak_memory_gib")
      out[m.key()] = (st.trained.memory.peak().total_bytes - st.trained.memory.peak().cuda_context_bytes) / kGiB;
  }
  return out;
}

/// The scale group of a job of `n` GPUs: one GPU, one 8-GPU node, then each factor of 8
/// ("1", "2-8", "9-64", "65-512", "513-4096", "4097+"), so that an error that grows with
/// the job's size shows apart from one that does not.
std::string scale_group(int64_t n) {
  if (n <= 1) return "1";
  int64_t lo = 2, hi = 8;
  while (n > hi && hi < 4096) {
    lo = hi + 1;
    hi *= 8;
  }
  if (n > hi) return std::to_string(hi + 1) + "+";
  return std::to_string(lo) + "-" + std::to_string(hi);
}

/// What a case is grouped by: its source family (the id up to its first "-"), engine
/// (name and version, or the training framework), GPU, GPU count (scale_group), model and
/// mode.
json case_groups(const json& c) {
  auto str = [](const json& j, std::initializer_list<const char*> path) -> std::string {
    const json* v = &j;
    for (const char* k : path) {
      if (!v->is_object() || !v->contains(k)) return "";
      v = &(*v)[k];
    }
    return v->is_string() ? v->get<std::string>() : "";
  };
  const std::string id = c.is_object() && c.contains("id") && c["id"].is_string() ? c["id"].get<std::string>() : "";
  json g;
  g["source"] = id.substr(0, id.find('-'));
  const bool serving = c.is_object() && c.contains("inference");
  if (serving) {
    const std::string name = str(c, {"inference", "engine", "name"});
    const std::string version = str(c, {"inference", "engine", "version"});
    g["engine"] = name.empty() ? "-" : version.empty() ? name : name + " " + version;
    g["mode"] = str(c, {"inference", "workload", "mode"});
  } else {
    const std::string fw = str(c, {"training", "framework"});
    g["engine"] = fw.empty() ? "-" : fw;
    const std::string mode = str(c, {"training", "mode"});
    g["mode"] = mode.empty() ? "pretrain" : mode;
  }
  g["gpu"] = str(c, {"system", "gpu"});
  const json* n = c.is_object() && c.contains("system") && c["system"].is_object() && c["system"].contains("num_gpus")
                      ? &c["system"]["num_gpus"]
                      : nullptr;
  g["gpus"] = n && n->is_number_integer() ? scale_group(n->get<int64_t>()) : "?";
  g["model"] = str(c, {"model", "model_type"});
  return g;
}

/// A model as a group: its family and size, "llama 70B".
std::string model_group(const ModelSpec& m) {
  const double b = static_cast<double>(count_params(m).total) / 1e9;
  char buf[96];
  const std::string family(to_string(m.family));
  std::snprintf(buf, sizeof buf, b >= 10 ? "%s %.0fB" : "%s %.1fB", family.c_str(), b);
  return buf;
}

}  // namespace

std::vector<std::string> ordered_group_names(const json& groups) {
  std::vector<std::string> names;
  for (auto g = groups.begin(); g != groups.end(); ++g) names.push_back(g.key());
  // A name that starts with a count ("9-64") sorts by that count, before the others.
  auto count = [](const std::string& s) {
    size_t digits = 0;
    while (digits < s.size() && digits < 18 && s[digits] >= '0' && s[digits] <= '9') ++digits;
    return digits == 0 ? std::numeric_limits<int64_t>::max() : std::stoll(s.substr(0, digits));
  };
  std::stable_sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) { return count(a) < count(b); });
  return names;
}

json group_errors(const json& report, const std::string& by) {
  // Signed errors per group and metric, and all metrics of a group pooled.
  std::map<std::string, std::map<std::string, std::vector<double>>> signed_errors;
  for (const json& c : report["cases"]) {
    if (c["status"] != "ok") continue;
    const std::string g = by == "file" ? c["file"].get<std::string>() : c["groups"].value(by, std::string("?"));
    for (auto it = c["error"].begin(); it != c["error"].end(); ++it) {
      signed_errors[g][it.key()].push_back(it.value().get<double>());
      signed_errors[g]["(all)"].push_back(it.value().get<double>());
    }
  }
  json out = json::object();
  for (const auto& [group, metrics] : signed_errors) {
    json gm = json::object();
    for (const auto& [metric, e] : metrics) {
      std::vector<double> abs_e;
      for (double x : e) abs_e.push_back(std::abs(x));
      const ErrorSummary s = summarize_errors(abs_e);
      std::vector<double> sorted = e;
      std::sort(sorted.begin(), sorted.end());
      const double pos = 0.5 * static_cast<double>(sorted.size() - 1);
      const size_t lo = static_cast<size_t>(pos);
      const size_t hi = std::min(lo + 1, sorted.size() - 1);
      const double signed_median = sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
      gm[metric] = {{"n", s.n},
                    {"median_abs_error", s.median_abs},
                    {"p90_abs_error", s.p90_abs},
                    {"signed_median_error", signed_median},
                    {"max_abs_error", s.max_abs}};
    }
    out[group] = gm;
  }
  return out;
}

std::string group_table(const json& groups, const std::string& by) {
  std::ostringstream out;
  char line[512];
  out << "\nerrors by " << by << " (|error| median, p90; signed median)\n";
  std::snprintf(line, sizeof line, "  %-34s %-24s %5s %8s %8s %8s\n", by.c_str(), "metric", "n", "median", "p90", "signed");
  out << line;
  for (const std::string& name : ordered_group_names(groups))
    for (auto m = groups[name].begin(); m != groups[name].end(); ++m) {
      std::snprintf(line, sizeof line, "  %-34s %-24s %5zu %7.1f%% %7.1f%% %+7.1f%%\n", name.c_str(), m.key().c_str(),
                    m.value()["n"].get<size_t>(), 100 * m.value()["median_abs_error"].get<double>(),
                    100 * m.value()["p90_abs_error"].get<double>(), 100 * m.value()["signed_median_error"].get<double>());
      out << line;
    }
  return out.str();
}

namespace {

/// The measured metrics of a case: an object, or empty when the case has none.
json measured_of(const json& c) {
  return c.is_object() && c.contains("measured") && c["measured"].is_object() ? c["measured"] : json::object();
}

/// Why the measurements of a case cannot be compared with a prediction ("" when they can):
/// each must be a positive number (a relative error divides by it).
std::string measured_problem(const json& c) {
  if (!c.is_object()) return "a case must be a JSON object (got " + brief(c) + ")";
  if (!c.contains("measured")) return "";
  if (!c["measured"].is_object()) return "/measured: must be an object of metric: value (got " + brief(c["measured"]) + ")";
  std::vector<Issue> issues;
  for (auto it = c["measured"].begin(); it != c["measured"].end(); ++it)
    if (!it.value().is_number() || !(it.value().get<double>() > 0))
      issues.push_back({"/measured/" + pointer_escape(it.key()), brief(it.value()), "must be a positive number", {}});
  return issues.empty() ? "" : InputError(std::move(issues)).what();
}

/// One case: its prediction of every metric it measured, the errors, and why not where it
/// could not be simulated.
json evaluate_case(const json& c, const std::string& file, const std::filesystem::path& dir,
                   const CalibrationProfile* calibration) {
  json r;
  r["id"] = c.is_object() && c.contains("id") && c["id"].is_string() ? c["id"].get<std::string>() : std::string();
  r["file"] = file;
  const json measured = measured_of(c);
  r["measured"] = measured;
  json predicted = json::object(), resolved = json::object();
  std::string reason;
  r["groups"] = case_groups(c);
  // What this simulator does not model is reported as not simulated, with the reason
  // (SCHEMA.md, "Post-training cases"): on-policy distillation, where the student generates.
  const json* training = c.is_object() && c.contains("training") && c["training"].is_object() ? &c["training"] : nullptr;
  const json* distill = training && training->contains("distill") ? &(*training)["distill"] : nullptr;
  const bool online_distill = distill && distill->is_object() && distill->contains("online") &&
                              (*distill)["online"].is_boolean() && (*distill)["online"].get<bool>();
  const std::string problem = measured_problem(c);
  if (!problem.empty()) reason = "cannot read the case: " + problem;
  else try {
    if (online_distill)
      throw NotSimulated("online distillation (the student generates the sequences the teacher scores) is not simulated");
    if (training && training->contains("offload") && (*training)["offload"].is_object())
      for (const auto& [key, v] : (*training)["offload"].items())
        if (v.is_string() && v != "none" && v != "auto" && !(key == "optimizer" && v == "cpu"))
          throw NotSimulated("offload." + key + " \"" + v.get<std::string>() +
                             "\" is not simulated (only the optimizer offloads, to \"cpu\")");
    const Scenario sc = scenario_from_json(c, dir, EngineKeys::ignore_unknown);
    r["groups"]["model"] = model_group(sc.model);
    if (sc.rl) {
      predicted = predict_rl(sc, measured, resolved, reason, calibration);
    } else if (sc.preference || sc.distill) {
      predicted = predict_frozen_step(sc, measured, resolved, reason, calibration);
    } else if (sc.training) {
      predicted = predict_training(sc, measured, resolved, reason, calibration);
    } else {
      const CostModels costs(sc.system, calibration);
      const std::vector<ServingResult> runs = simulate_serving_runs(sc, costs.get());
      const json all = serving_metrics(runs);
      resolved = serving_report(sc, runs.front())["resolved"];
      for (auto it = measured.begin(); it != measured.end(); ++it)
        if (all.contains(it.key())) predicted[it.key()] = all[it.key()];
      if (predicted.empty()) reason = "no measured metric is one the serving simulator reports";
    }
  } catch (const NotSimulated& e) {
    reason = e.what();
  } catch (const InputError& e) {
    reason = std::string("cannot read the case: ") + e.what();
  } catch (const std::runtime_error& e) {
    reason = e.what();
  }
  json err = json::object();
  for (auto it = measured.begin(); it != measured.end(); ++it) {
    if (!predicted.contains(it.key())) continue;
    const double m = it.value().get<double>(), p = predicted[it.key()].get<double>();
    err[it.key()] = (p - m) / m;
  }
  r["predicted"] = predicted;
  r["error"] = err;
  r["resolved"] = resolved;
  if (predicted.empty()) {
    r["status"] = "unsupported";
    r["reason"] = reason;
  } else {
    r["status"] = "ok";
    if (!reason.empty()) r["reason"] = reason;
  }
  return r;
}

}  // namespace

namespace {

/// Whether a case reads as a scenario (`why`: the reader's message where it does not).
bool readable(const json& c, const std::filesystem::path& dir, std::string* why = nullptr) {
  try {
    (void)scenario_from_json(c, dir, EngineKeys::ignore_unknown);
    return true;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative matching with one backtrack point for the last `*`.
  size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

/// A what-if (ValidationWhatIf) applied to the files' cases as they are read, and what was
/// wrong with it, reported at once when every file is read.
class WhatIfCases {
 public:
  explicit WhatIfCases(const ValidationWhatIf& w)
      : w_(w), only_hits_(w.only.size(), 0), set_hits_(w.sets.size(), 0), malformed_(w.sets.size(), false) {
    for (size_t i = 0; i < w_.sets.size(); ++i) {
      const std::string& s = w_.sets[i];
      malformed_[i] = s.find('=') == std::string::npos || s.front() == '=';
      if (malformed_[i]) problems_.push_back({"--set", s, "must look like path=value (e.g. training.attention=flash2)", {}});
    }
  }

  /// Keep the cases of `doc` the globs select, each changed by the overrides.
  void apply(json& doc, const std::filesystem::path& dir) {
    if (w_.empty()) return;
    json kept = json::array();
    for (json& c : doc["cases"]) {
      const std::string id = c.is_object() && c.contains("id") && c["id"].is_string() ? c["id"].get<std::string>() : "";
      bool selected = w_.only.empty();
      for (size_t i = 0; i < w_.only.size(); ++i)
        if (glob_match(w_.only[i], id)) {
          selected = true;
          ++only_hits_[i];
        }
      if (!selected) continue;
      const json before = c;
      bool changed = false;
      for (size_t i = 0; i < w_.sets.size(); ++i) {
        if (malformed_[i]) continue;
        const std::string& s = w_.sets[i];
        const std::string top = s.substr(0, std::min(s.find('.'), s.find('=')));
        if (!c.is_object() || !c.contains(top) || !c[top].is_object()) continue;
        apply_overrides(c, {s});
        ++set_hits_[i];
        changed = true;
      }
      // Cases the overrides make unreadable are counted, so that overrides no case can take
      // (a value outside a key's choices) are an input error, not a report of unsupported
      // cases; overrides only some cases cannot take leave those unsupported.
      if (changed && readable(before, dir)) {
        ++changed_readable_;
        std::string why;
        if (!readable(c, dir, &why)) {
          ++broken_;
          if (first_broken_.empty()) first_broken_ = id + ": " + why;
        }
      }
      kept.push_back(std::move(c));
    }
    doc["cases"] = std::move(kept);
  }

  /// Every problem at once: malformed overrides, globs that select nothing, overrides that
  /// change nothing, overrides that leave no selected case readable.
  void check() {
    for (size_t i = 0; i < w_.only.size(); ++i)
      if (only_hits_[i] == 0) problems_.push_back({"--only", w_.only[i], "matches no case id in the files", {}});
    for (size_t i = 0; i < w_.sets.size(); ++i)
      if (!malformed_[i] && set_hits_[i] == 0)
        problems_.push_back({"--set", w_.sets[i], "applies to no selected case (none has the path's first key)", {}});
    if (changed_readable_ > 0 && broken_ == changed_readable_) {
      std::string all;
      for (size_t i = 0; i < w_.sets.size(); ++i)
        if (!malformed_[i]) all += (all.empty() ? "" : " ") + w_.sets[i];
      problems_.push_back({"--set", all, "leaves no selected case readable; the first, " + first_broken_, {}});
    }
    if (!problems_.empty()) throw InputError(std::move(problems_));
  }

 private:
  const ValidationWhatIf& w_;
  std::vector<size_t> only_hits_, set_hits_;
  std::vector<bool> malformed_;
  std::vector<Issue> problems_;
  size_t changed_readable_ = 0, broken_ = 0;
  std::string first_broken_;
};

}  // namespace

json run_validation(const std::vector<std::filesystem::path>& files, const CalibrationProfile* calibration,
                    unsigned threads, const ValidationProgress& progress, const ValidationWhatIf& what_if) {
  json cases = json::array();
  json summary = json::object();
  WhatIfCases what(what_if);
  std::vector<std::pair<std::filesystem::path, json>> docs;
  for (const auto& path : files) {
    json doc = read_json_file(path);
    if (!doc.is_object() || !doc.contains("cases") || !doc["cases"].is_array())
      throw InputError({{path.string(), "", "not a capsim-validation/1 file (no \"cases\" array)", {}}});
    what.apply(doc, path.parent_path());
    docs.emplace_back(path, std::move(doc));
  }
  what.check();
  for (const auto& entry : docs) {
    // Named, not a structured binding: the worker lambda below captures the path.
    const std::filesystem::path& path = entry.first;
    const json& doc = entry.second;
    const std::string file = path.filename().string();
    // Cases are independent: evaluated on worker threads, each into its own slot, so the
    // report is the same for any thread count.
    const json& list = doc["cases"];
    std::vector<json> results(list.size());
    std::mutex progress_mu;
    size_t done = 0;
    parallel_for(results.size(), threads, [&](size_t i) {
      results[i] = evaluate_case(list[i], file, path.parent_path(), calibration);
      if (progress) {
        const std::lock_guard<std::mutex> lock(progress_mu);
        progress(file, ++done, results.size());
      }
    });
    std::map<std::string, std::vector<double>> errors;
    for (json& r : results) {
      for (auto it = r["error"].begin(); it != r["error"].end(); ++it) errors[it.key()].push_back(std::abs(it.value().get<double>()));
      cases.push_back(std::move(r));
    }
    json per_metric = json::object();
    std::vector<std::string> metrics;
    for (const json& c : list) {
      const json meas = measured_of(c);
      for (auto it = meas.begin(); it != meas.end(); ++it)
        if (std::find(metrics.begin(), metrics.end(), it.key()) == metrics.end()) metrics.push_back(it.key());
    }
    for (const auto& metric : metrics) {
      const ErrorSummary s = summarize_errors(errors[metric]);
      json u = json::array();
      for (const json& c : cases)
        if (c["file"] == file && c["measured"].contains(metric) && !c["predicted"].contains(metric))
          u.push_back(c["id"]);
      // No simulated case: the statistics are absent (null), not zero.
      auto stat = [&](double v) { return s.n == 0 ? json(nullptr) : json(v); };
      per_metric[metric] = {{"n", s.n},
                            {"median_abs_error", stat(s.median_abs)},
                            {"p90_abs_error", stat(s.p90_abs)},
                            {"max_abs_error", stat(s.max_abs)},
                            {"unsupported", u.size()},
                            {"unsupported_ids", u}};
    }
    summary[file] = per_metric;
  }
  json report{{"schema", "capsim-validation-report/1"}, {"cases", cases}, {"summary", summary}};
  if (!what_if.empty()) report["what_if"] = {{"only", what_if.only}, {"set", what_if.sets}};
  return report;
}

std::string validation_table(const json& r) {
  std::ostringstream out;
  char line[512];
  std::string file;
  if (r.contains("what_if")) {
    // A what-if is not the published configuration: say so before any figure.
    out << "what-if, not the published configurations:";
    for (const json& o : r["what_if"]["only"]) out << " --only " << o.get<std::string>();
    for (const json& s : r["what_if"]["set"]) out << " --set " << s.get<std::string>();
    out << "\n";
  }
  for (const json& c : r["cases"]) {
    if (c["file"] != file) {
      file = c["file"].get<std::string>();
      out << "\n" << file << "\n";
      std::snprintf(line, sizeof line, "  %-58s %-16s %12s %12s %8s\n", "case", "metric", "predicted", "measured", "error");
      out << line;
    }
    if (c["status"] != "ok") {
      std::snprintf(line, sizeof line, "  %-58s unsupported: %s\n", c["id"].get<std::string>().c_str(),
                    c["reason"].get<std::string>().c_str());
      out << line;
      continue;
    }
    for (auto it = c["measured"].begin(); it != c["measured"].end(); ++it) {
      if (!c["predicted"].contains(it.key())) continue;
      std::snprintf(line, sizeof line, "  %-58s %-16s %12.4g %12.4g %+7.1f%%\n", c["id"].get<std::string>().c_str(),
                    it.key().c_str(), c["predicted"][it.key()].get<double>(), it.value().get<double>(),
                    100.0 * c["error"][it.key()].get<double>());
      out << line;
    }
  }
  out << "\nsummary (|error|)\n";
  std::snprintf(line, sizeof line, "  %-34s %-16s %5s %8s %8s %8s %12s\n", "file", "metric", "n", "median", "p90", "max",
                "unsupported");
  out << line;
  for (auto f = r["summary"].begin(); f != r["summary"].end(); ++f)
    for (auto m = f.value().begin(); m != f.value().end(); ++m) {
      if (m.value()["n"].get<size_t>() == 0) {
        std::snprintf(line, sizeof line, "  %-34s %-16s %5d %8s %8s %8s %12zu\n", f.key().c_str(), m.key().c_str(), 0,
                      "-", "-", "-", m.value()["unsupported"].get<size_t>());
        out << line;
        continue;
      }
      std::snprintf(line, sizeof line, "  %-34s %-16s %5zu %7.1f%% %7.1f%% %7.1f%% %12zu\n", f.key().c_str(),
                    m.key().c_str(), m.value()["n"].get<size_t>(), 100 * m.value()["median_abs_error"].get<double>(),
                    100 * m.value()["p90_abs_error"].get<double>(), 100 * m.value()["max_abs_error"].get<double>(),
                    m.value()["unsupported"].get<size_t>());
      out << line;
    }
  return out.str();
}

}  // namespace capsim::io
