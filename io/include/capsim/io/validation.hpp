#pragma once
/// `capsim validate`: run published measurements (data/validation/*.json, format in
/// data/validation/SCHEMA.md) through the models and report the error per case, per file
/// and per metric.

#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "capsim/core/calibration.hpp"

namespace capsim::io {

/// Median, 90th percentile and largest of |errors| (linear interpolation between ranks).
struct ErrorSummary {
  size_t n = 0;
  double median_abs = 0, p90_abs = 0, max_abs = 0;
};
ErrorSummary summarize_errors(std::vector<double> abs_errors);

/// Run every case of the given files. JSON: `cases[]` (id, file, status, predicted,
/// measured, error, resolved, reason) and `summary` keyed by file then metric
/// (n, median_abs_error, p90_abs_error, max_abs_error, unsupported).
/// Called as each case of a file completes (file name, cases done, cases in the file), one
/// call at a time.
using ValidationProgress = std::function<void(const std::string& file, size_t done, size_t total)>;

/// A what-if over published cases (`capsim validate --only ... --set ...`): only the cases
/// whose id matches one of `only` (globs: `*` any run of characters, `?` one; empty = every
/// case), each with the `sets` overrides applied (`path=value` as `--set` on a scenario,
/// the path from the case's root, e.g. `training.attention=flash-triton`). An override
/// whose first key a case lacks (a `training.` key on a serving case) leaves that case as
/// it is. A glob that matches no case, or an override that applies to none, is an input
/// error. The report says what was changed (`what_if`).
struct ValidationWhatIf {
  std::vector<std::string> only;
  std::vector<std::string> sets;
  bool empty() const { return only.empty() && sets.empty(); }
};

/// Whether `text` matches the glob `pattern` (`*`: any run of characters, `?`: one).
bool glob_match(std::string_view pattern, std::string_view text);

/// Cases run on `threads` worker threads; the report does not depend on the count.
nlohmann::json run_validation(const std::vector<std::filesystem::path>& files,
                              const CalibrationProfile* calibration = nullptr, unsigned threads = 1,
                              const ValidationProgress& progress = {}, const ValidationWhatIf& what_if = {});

/// Error statistics per group of a validation report: `by` is "source" (the case id up to
/// its first "-"), "engine", "gpu", "gpus" (the job's GPU count: "1", "2-8", "9-64",
/// "65-512", "513-4096", "4097+"), "model", "mode" or "file" (the validation file). Keyed by group then metric (and
/// "(all)", every metric of the group pooled): n, median_abs_error, p90_abs_error,
/// signed_median_error, max_abs_error.
nlohmann::json group_errors(const nlohmann::json& report, const std::string& by);
std::string group_table(const nlohmann::json& groups, const std::string& by);
/// The group names of a group_errors (or side-by-side) table in the order tables print them:
/// names that start with a count ("2-8", "9-64") by that count, then the rest by name.
std::vector<std::string> ordered_group_names(const nlohmann::json& groups);

/// The table a person reads: per case predicted, measured, error; per metric the summary.
std::string validation_table(const nlohmann::json& report);

/// A validation report set against an earlier one (`capsim validate --baseline`): per file
/// and metric (`metrics`), and per group of each of `group_by` (`groups`), the case count,
/// |error| median and signed median before and after (null for a side without cases);
/// every case metric whose error differs (`moved`, in the report's order, a metric one side
/// lacks as null); the cases only this run has (`added`), only the baseline has
/// (`removed`), and those one side simulated and the other could not (`status_changed`).
/// Cases are matched by file name and id. Throws InputError with every problem that keeps
/// `baseline` from being read as a `capsim validate --format json` report, each under
/// `origin` (the baseline's file name).
/// Throws InputError with every problem that keeps `report` from being read as a
/// `capsim validate --format json` report (checked before a long run, then by
/// compare_reports).
void check_validation_report(const nlohmann::json& report, const std::string& origin);
nlohmann::json compare_reports(const nlohmann::json& report, const nlohmann::json& baseline,
                               const std::vector<std::string>& group_by, const std::string& origin);
std::string comparison_table(const nlohmann::json& comparison, const std::string& baseline_name);

}  // namespace capsim::io
