#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "capsim/core/diagnostics.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/validation.hpp"

namespace capsim::io {

using nlohmann::json;

namespace {

constexpr const char* kReportSchema = "capsim-validation-report/1";

/// A case is known by its file and id: ids are unique within a validation file only.
using CaseKey = std::pair<std::string, std::string>;

/// The problems that keep `baseline` from being read as a validation report, each with its
/// place in the file.
std::vector<Issue> report_problems(const json& baseline, const std::string& origin) {
  std::vector<Issue> issues;
  const std::string hint = "give a report written by `capsim validate --format json`";
  if (!baseline.is_object()) return {{origin, brief(baseline), "must be a validation report (a JSON object)", hint}};
  // Another kind of file (a validation file, a scenario): one problem, not one per case.
  if (!baseline.contains("schema") || baseline["schema"] != kReportSchema)
    return {{origin + "#/schema", baseline.contains("schema") ? brief(baseline["schema"]) : "",
             std::string("must be \"") + kReportSchema + "\"",
             baseline.value("schema", json()) == "capsim-validation/1"
                 ? "this is a validation file; give the report `capsim validate FILE --format json -o REPORT` writes"
                 : hint}};
  if (!baseline.contains("cases") || !baseline["cases"].is_array()) {
    issues.push_back({origin + "#/cases", baseline.contains("cases") ? brief(baseline["cases"]) : "",
                      "must be an array of cases", hint});
    return issues;
  }
  std::set<CaseKey> seen;
  const json& cases = baseline["cases"];
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string at = origin + "#/cases/" + std::to_string(i);
    const json& c = cases[i];
    if (!c.is_object()) {
      issues.push_back({at, brief(c), "must be an object", {}});
      continue;
    }
    bool named = true;
    for (const char* k : {"id", "file", "status"})
      if (!c.contains(k) || !c[k].is_string()) {
        issues.push_back({at + "/" + k, c.contains(k) ? brief(c[k]) : "", "must be a string", {}});
        named = false;
      }
    if (!named) continue;
    if (!seen.insert({c["file"].get<std::string>(), c["id"].get<std::string>()}).second)
      issues.push_back({at + "/id", brief(c["id"]), "appears twice in the same file", {}});
    if (c["status"] != "ok") continue;
    if (!c.contains("groups") || !c["groups"].is_object())
      issues.push_back({at + "/groups", c.contains("groups") ? brief(c["groups"]) : "",
                        "must be an object of group names (source, engine, gpu, gpus, model, mode)", hint});
    else
      for (auto g = c["groups"].begin(); g != c["groups"].end(); ++g)
        if (!g.value().is_string()) issues.push_back({at + "/groups/" + g.key(), brief(g.value()), "must be a string", {}});
    if (!c.contains("error") || !c["error"].is_object()) {
      issues.push_back({at + "/error", c.contains("error") ? brief(c["error"]) : "", "must be an object of metric: error", {}});
      continue;
    }
    for (auto it = c["error"].begin(); it != c["error"].end(); ++it)
      if (!it.value().is_number() || !std::isfinite(it.value().get<double>()))
        issues.push_back({at + "/error/" + it.key(), brief(it.value()), "must be a finite number", {}});
  }
  return issues;
}

/// One statistic row of group_errors' shape, before or after: n, |error| median and signed
/// median.
json group_stats(const json& g) {
  return {{"n", g["n"]}, {"median_abs_error", g["median_abs_error"]}, {"signed_median_error", g["signed_median_error"]}};
}

/// Two group_errors tables side by side: per group and metric, the row before and after
/// (null on a side without cases); `pooled` keeps each group's "(all)" row.
json side_by_side(const json& before, const json& after, bool pooled) {
  json out = json::object();
  for (const auto& [side, table] : {std::pair<const char*, const json*>{"before", &before}, {"after", &after}})
    for (auto g = table->begin(); g != table->end(); ++g)
      for (auto m = g.value().begin(); m != g.value().end(); ++m) {
        if (!pooled && m.key() == "(all)") continue;
        json& row = out[g.key()][m.key()];
        if (row.is_null()) row = {{"before", nullptr}, {"after", nullptr}};
        row[side] = group_stats(m.value());
      }
  return out;
}

}  // namespace

void check_validation_report(const json& report, const std::string& origin) {
  if (auto issues = report_problems(report, origin); !issues.empty()) throw InputError(std::move(issues));
}

json compare_reports(const json& report, const json& baseline, const std::vector<std::string>& group_by,
                     const std::string& origin) {
  check_validation_report(baseline, origin);

  json out = json::object();
  // Per file and metric, from the cases themselves (a report's own summary is not trusted),
  // and per group of each grouping.
  out["metrics"] = side_by_side(group_errors(baseline, "file"), group_errors(report, "file"), false);
  json groups = json::object();
  for (const std::string& by : group_by) groups[by] = side_by_side(group_errors(baseline, by), group_errors(report, by), true);
  out["groups"] = groups;

  // Case by case, in the report's order.
  std::map<CaseKey, const json*> old_cases;
  for (const json& c : baseline["cases"]) old_cases[{c["file"].get<std::string>(), c["id"].get<std::string>()}] = &c;
  std::set<CaseKey> in_report;
  json moved = json::array(), added = json::array(), removed = json::array(), status = json::array();
  for (const json& c : report["cases"]) {
    const CaseKey key{c["file"].get<std::string>(), c["id"].get<std::string>()};
    in_report.insert(key);
    const auto it = old_cases.find(key);
    if (it == old_cases.end()) {
      added.push_back({{"file", key.first}, {"id", key.second}});
      continue;
    }
    const json& old = *it->second;
    if (old["status"] != c["status"]) {
      status.push_back({{"file", key.first}, {"id", key.second}, {"before", old["status"]}, {"after", c["status"]}});
      continue;
    }
    if (c["status"] != "ok") continue;
    std::set<std::string> names;
    for (auto m = old["error"].begin(); m != old["error"].end(); ++m) names.insert(m.key());
    for (auto m = c["error"].begin(); m != c["error"].end(); ++m) names.insert(m.key());
    for (const std::string& m : names) {
      const json b = old["error"].contains(m) ? old["error"][m] : json(nullptr);
      const json a = c["error"].contains(m) ? c["error"][m] : json(nullptr);
      if (!b.is_null() && !a.is_null() && b.get<double>() == a.get<double>()) continue;
      moved.push_back({{"file", key.first}, {"id", key.second}, {"metric", m}, {"before", b}, {"after", a}});
    }
  }
  for (const json& c : baseline["cases"]) {
    const CaseKey key{c["file"].get<std::string>(), c["id"].get<std::string>()};
    if (!in_report.count(key)) removed.push_back({{"file", key.first}, {"id", key.second}});
  }
  out["moved"] = moved;
  out["added"] = added;
  out["removed"] = removed;
  out["status_changed"] = status;
  return out;
}

namespace {

/// "18.0% -> 17.5%", "-" for a side without cases.
std::string change(const json& before, const json& after, const char* key, bool sign) {
  auto cell = [&](const json& s) -> std::string {
    if (s.is_null()) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, sign ? "%+.1f%%" : "%.1f%%", 100.0 * s[key].get<double>());
    return buf;
  };
  return cell(before) + " -> " + cell(after);
}

std::string count_cell(const json& before, const json& after) {
  const std::string b = before.is_null() ? "0" : before["n"].dump(), a = after.is_null() ? "0" : after["n"].dump();
  return b == a ? b : b + "->" + a;
}

std::string percent(const json& v) {
  if (v.is_null()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * v.get<double>());
  return buf;
}

}  // namespace

std::string comparison_table(const json& cmp, const std::string& baseline_name) {
  std::ostringstream out;
  char line[640];
  out << "\nagainst " << baseline_name << ": " << cmp["moved"].size() << " case metrics moved, "
      << cmp["added"].size() << " cases added, " << cmp["removed"].size() << " removed, "
      << cmp["status_changed"].size() << " changed status\n";
  // One block of rows per level: a heading, then each name's metrics before and after.
  auto block = [&](const std::string& heading, const json& rows) {
    std::snprintf(line, sizeof line, "  %-34s %-24s %7s  %-20s %s\n", heading.c_str(), "metric", "n", "|error| median",
                  "signed median");
    out << line;
    for (const std::string& name : ordered_group_names(rows))
      for (auto m = rows[name].begin(); m != rows[name].end(); ++m) {
        const json& b = m.value()["before"];
        const json& a = m.value()["after"];
        std::snprintf(line, sizeof line, "  %-34s %-24s %7s  %-20s %s\n", name.c_str(), m.key().c_str(),
                      count_cell(b, a).c_str(), change(b, a, "median_abs_error", false).c_str(),
                      change(b, a, "signed_median_error", true).c_str());
        out << line;
      }
  };
  block("file", cmp["metrics"]);
  for (auto by = cmp["groups"].begin(); by != cmp["groups"].end(); ++by) {
    out << "\n";
    block(by.key(), by.value());
  }
  if (!cmp["moved"].empty()) {
    out << "\nmoved (error before -> after)\n";
    for (const json& m : cmp["moved"]) {
      std::snprintf(line, sizeof line, "  %-58s %-24s %8s -> %s\n", m["id"].get<std::string>().c_str(),
                    m["metric"].get<std::string>().c_str(), percent(m["before"]).c_str(), percent(m["after"]).c_str());
      out << line;
    }
  }
  for (const auto& [key, label] : {std::pair<const char*, const char*>{"added", "only in this run"}, {"removed", "only in the baseline"}}) {
    if (cmp[key].empty()) continue;
    out << "\n" << label << "\n";
    for (const json& c : cmp[key]) out << "  " << c["file"].get<std::string>() << "  " << c["id"].get<std::string>() << "\n";
  }
  if (!cmp["status_changed"].empty()) {
    out << "\nchanged status\n";
    for (const json& c : cmp["status_changed"])
      out << "  " << c["id"].get<std::string>() << ": " << c["before"].get<std::string>() << " -> "
          << c["after"].get<std::string>() << "\n";
  }
  return out.str();
}

}  // namespace capsim::io
