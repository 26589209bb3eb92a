#include "capsim/io/sweep.hpp"

#include "capsim/io/calibration_io.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <thread>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <unistd.h>

#include "capsim/core/serving.hpp"
#include "capsim/core/train.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/progress.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"

namespace capsim::io {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/// A JSON value of a report at a dotted path, or null.
json at_path(const json& j, const std::string& path) {
  const json* cur = &j;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!cur->is_object() || !cur->contains(key)) return nullptr;
    cur = &(*cur)[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return *cur;
}

const std::vector<std::string> kTrainOutputs = {"time.step_s", "throughput.tokens_per_s", "mfu",
                                                "memory.per_gpu.total_bytes", "memory.per_gpu.fits", "resolved"};
const std::vector<std::string> kServeOutputs = {"metrics.ttft_p99_ms", "metrics.tpot_p99_ms", "metrics.throughput_tokens_per_s",
                                                "metrics.requests_per_s"};

/// The "inputs" of row `index`: each axis path with its value.
json row_inputs(const std::vector<std::string>& sets) {
  json inputs = json::object();
  for (const auto& s : sets) {
    const auto eq = s.find('=');
    const std::string text = s.substr(eq + 1);
    json v;
    try {
      v = json::parse(text);
    } catch (const json::parse_error&) {
      v = text;
    }
    inputs[s.substr(0, eq)] = v;
  }
  return inputs;
}

json evaluate_row(const SweepSpec& spec, size_t index, const CalibrationProfile* calibration) {
  json row;
  row["index"] = index;
  const auto sets = spec.overrides(index);
  row["inputs"] = row_inputs(sets);
  try {
    json doc = parse_json(spec.base_text, "base");
    apply_overrides(doc, sets);
    const Scenario sc = scenario_from_json(doc, spec.base_dir);
    const CostModels costs(sc.system, calibration);
    const CostModel& cost = costs.get();
    if (calibration) row["calibrated"] = costs.calibrated();
    json report;
    if (sc.training) {
      report = train_report(sc, evaluate_training(sc, &cost));
      row["status"] = report["status"];
    } else {
      try {
        report = serving_report(sc, simulate_serving_runs(sc, cost));
        row["status"] = "ok";
      } catch (const ServingDoesNotFit& e) {
        // An answer, as for training: the row says so with the reason.
        report = serving_does_not_fit_report(sc, e.what());
        row["status"] = "does_not_fit";
        row["reason"] = e.what();
      }
    }
    const auto& outputs = spec.outputs.empty() ? (sc.training ? kTrainOutputs : kServeOutputs) : spec.outputs;
    json outs = json::object();
    for (const auto& p : outputs) outs[p] = at_path(report, p);
    row["outputs"] = outs;
  } catch (const InputError& e) {
    row["status"] = "error";
    row["error"] = e.what();
  } catch (const std::exception& e) {
    row["status"] = "error";
    row["error"] = std::string("internal error: ") + e.what();
  }
  return row;
}

/// Whether `row` has the shape evaluate_row gives every row of a grid of `rows_total`
/// (what the rows writer relies on); journals and parts are checked with it.
bool is_row(const json& row, size_t rows_total) {
  return row.is_object() && row.contains("index") && row["index"].is_number_unsigned() &&
         row["index"].get<uint64_t>() < rows_total && row.contains("inputs") && row["inputs"].is_object() &&
         row.contains("status") && row["status"].is_string() && (!row.contains("outputs") || row["outputs"].is_object()) &&
         (!row.contains("error") || row["error"].is_string());
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string cell(const json& v) { return v.is_string() ? v.get<std::string>() : v.is_null() ? std::string() : dump_text(v); }

std::string rows_text(const std::vector<json>& rows, bool csv) {
  std::string out;
  if (!csv) {
    for (const auto& r : rows) out += dump_text(r) + "\n";
    return out;
  }
  std::vector<std::string> in_cols, out_cols;
  for (const auto& r : rows) {
    for (auto it = r["inputs"].begin(); it != r["inputs"].end(); ++it)
      if (std::find(in_cols.begin(), in_cols.end(), it.key()) == in_cols.end()) in_cols.push_back(it.key());
    if (r.contains("outputs"))
      for (auto it = r["outputs"].begin(); it != r["outputs"].end(); ++it)
        if (std::find(out_cols.begin(), out_cols.end(), it.key()) == out_cols.end()) out_cols.push_back(it.key());
  }
  out += "index";
  for (const auto& c : in_cols) out += "," + csv_escape(c);
  out += ",status";
  for (const auto& c : out_cols) out += "," + csv_escape(c);
  out += ",error\n";
  for (const auto& r : rows) {
    out += std::to_string(r["index"].get<size_t>());
    for (const auto& c : in_cols) out += "," + csv_escape(r["inputs"].contains(c) ? cell(r["inputs"][c]) : "");
    out += "," + r["status"].get<std::string>();
    for (const auto& c : out_cols)
      out += "," + csv_escape(r.contains("outputs") && r["outputs"].contains(c) ? cell(r["outputs"][c]) : "");
    out += "," + csv_escape(r.value("error", std::string())) + "\n";
  }
  return out;
}

}  // namespace

size_t SweepSpec::rows() const {
  size_t n = 1;
  for (const auto& a : axes) n *= a.size();
  return axes.empty() ? 0 : n;
}

std::vector<std::string> SweepSpec::overrides(size_t index) const {
  std::vector<std::string> out;
  std::vector<size_t> digit(axes.size());
  for (size_t k = axes.size(); k-- > 0;) {
    digit[k] = index % axes[k].size();
    index /= axes[k].size();
  }
  for (size_t k = 0; k < axes.size(); ++k)
    for (size_t p = 0; p < axes[k].paths.size(); ++p) out.push_back(axes[k].paths[p] + "=" + axes[k].values[p][digit[k]]);
  return out;
}

SweepSpec load_sweep(const fs::path& path) {
  const json doc = read_json_file(path);
  std::vector<Issue> issues;
  SweepSpec spec;
  spec.base_dir = path.parent_path();
  ObjectReader r(doc, "", issues);
  r.allow("schema");
  r.allow("description");
  if (const json* b = r.get("base")) {
    if (b->is_string()) {
      fs::path bp(b->get<std::string>());
      if (bp.is_relative()) bp = spec.base_dir / bp;
      try {
        spec.base_text = read_text_file(bp);
        (void)parse_json(spec.base_text, bp.string());
        spec.base_dir = bp.parent_path();
      } catch (const InputError& e) {
        issues.insert(issues.end(), e.issues().begin(), e.issues().end());
      }
    } else if (b->is_object()) {
      spec.base_text = b->dump();
    } else {
      issues.push_back({"/base", brief(*b), "must be a scenario path or object", {}});
    }
  } else {
    issues.push_back({"/base", "", "is required (a scenario path or object)", {}});
  }
  // Values of one axis; a range is expanded only when its count is within the row limit.
  auto read_values = [&](const json& a, const std::string& ptr, std::vector<std::string>& out) {
    if (a.contains("values")) {
      if (!a["values"].is_array() || a["values"].empty()) {
        issues.push_back({ptr + "/values", brief(a["values"]), "must be a non-empty array", {}});
        return;
      }
      for (const auto& v : a["values"]) out.push_back(v.dump());
    } else if (a.contains("range")) {
      const json& g = a["range"];
      const bool numbers = g.is_object() && g.contains("start") && g.contains("stop") && g["start"].is_number() &&
                           g["stop"].is_number() && (!g.contains("step") || g["step"].is_number());
      if (!numbers) {
        issues.push_back({ptr + "/range", brief(g), "must be {start, stop[, step]} numbers (stop inclusive)", {}});
        return;
      }
      const double start = g["start"].get<double>(), stop = g["stop"].get<double>();
      const double step = g.contains("step") ? g["step"].get<double>() : 1.0;
      if (!(step > 0) || stop < start) {
        issues.push_back({ptr + "/range", brief(g), "needs step > 0 and stop >= start", {}});
        return;
      }
      const std::string too_many = "has more than " + std::to_string(kMaxSweepRows) + " values (the row limit)";
      const bool integral = g["start"].is_number_integer() && g["stop"].is_number_integer() &&
                            (!g.contains("step") || g["step"].is_number_integer());
      if (integral) {
        // Counted in integers: doubles stop telling neighbours apart above 2^53.
        const auto as_int = [&](const char* k, int64_t& v) {
          if (g[k].is_number_unsigned() && g[k].get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
          v = g[k].get<int64_t>();
          return true;
        };
        int64_t i0 = 0, i1 = 0, di = 1;
        if (!as_int("start", i0) || !as_int("stop", i1) || (g.contains("step") && !as_int("step", di))) {
          issues.push_back({ptr + "/range", brief(g), "integer ranges must stay within -2^63..2^63-1", {}});
          return;
        }
        const uint64_t count = (static_cast<uint64_t>(i1) - static_cast<uint64_t>(i0)) / static_cast<uint64_t>(di) + 1;
        if (count > kMaxSweepRows) {
          issues.push_back({ptr + "/range", brief(g), too_many, "raise the step"});
          return;
        }
        for (uint64_t k = 0; k < count; ++k)
          out.push_back(std::to_string(static_cast<int64_t>(static_cast<uint64_t>(i0) + k * static_cast<uint64_t>(di))));
        return;
      }
      // Values start + k*step (not a running sum, which stalls once step is below the
      // spacing of doubles); the stop is inclusive within a relative 1e-9.
      const double count = std::floor((stop - start) / step + 1e-9) + 1;
      if (!(count <= static_cast<double>(kMaxSweepRows))) {
        issues.push_back({ptr + "/range", brief(g), too_many, "raise the step"});
        return;
      }
      const auto n = static_cast<size_t>(count);
      for (size_t k = 0; k < n; ++k) {
        const double v = start + static_cast<double>(k) * step;
        if (k > 0 && !(v > start + static_cast<double>(k - 1) * step)) {
          out.clear();
          issues.push_back({ptr + "/range", brief(g), "step is too small to tell neighbouring values apart", {}});
          return;
        }
        out.push_back(json(v).dump());
      }
    } else {
      issues.push_back({ptr, "", "needs \"values\" or \"range\"", {}});
    }
  };
  // The key path of an axis (or of one path of a zip).
  auto read_path = [&](const json& a, const std::string& ptr) {
    if (a.is_object() && a.contains("path") && a["path"].is_string()) return a["path"].get<std::string>();
    if (a.is_object() && a.contains("path"))
      issues.push_back({ptr + "/path", brief(a["path"]), "must be a key path (e.g. training.tp)", {}});
    return std::string();
  };
  if (const json* axes = r.get("axes")) {
    if (!axes->is_array() || axes->empty()) {
      issues.push_back({"/axes", brief(*axes), "must be a non-empty array of axes", {}});
    } else {
      for (size_t i = 0; i < axes->size(); ++i) {
        const json& a = (*axes)[i];
        const std::string ptr = "/axes/" + std::to_string(i);
        SweepAxis axis;
        if (a.contains("zip")) {
          if (!a["zip"].is_array() || a["zip"].empty()) {
            issues.push_back({ptr + "/zip", brief(a["zip"]), "must be a non-empty array of axes", {}});
            continue;
          }
          for (size_t k = 0; k < a["zip"].size(); ++k) {
            const json& z = a["zip"][k];
            axis.paths.push_back(read_path(z, ptr + "/zip/" + std::to_string(k)));
            axis.values.emplace_back();
            read_values(z, ptr + "/zip/" + std::to_string(k), axis.values.back());
          }
          for (const auto& v : axis.values)
            if (v.size() != axis.values.front().size())
              issues.push_back({ptr + "/zip", "", "zipped axes must have the same number of values", {}});
        } else {
          axis.paths.push_back(read_path(a, ptr));
          axis.values.emplace_back();
          read_values(a, ptr, axis.values.back());
        }
        for (size_t k = 0; k < axis.paths.size(); ++k)
          if (axis.paths[k].empty()) issues.push_back({ptr, "", "every axis needs a \"path\" (e.g. training.tp)", {}});
        if (axis.size() == 0) issues.push_back({ptr, "", "the axis has no values: the grid would be empty", {}});
        spec.axes.push_back(axis);
      }
    }
  } else {
    issues.push_back({"/axes", "", "is required", {}});
  }
  if (const json* o = r.get("outputs")) {
    if (!o->is_array()) issues.push_back({"/outputs", brief(*o), "must be an array of report key paths", {}});
    else
      for (const auto& v : *o) spec.outputs.push_back(v.is_string() ? v.get<std::string>() : v.dump());
  }
  r.finish();
  if (issues.empty()) {
    // The grid size, checked before any row list is allocated.
    size_t rows = 1;
    for (const auto& a : spec.axes) {
      if (a.size() > kMaxSweepRows / rows) {
        issues.push_back({"/axes", "", "the grid has more than " + std::to_string(kMaxSweepRows) + " rows (the limit)",
                          "split it into several sweeps"});
        break;
      }
      rows *= a.size();
    }
  }
  if (issues.empty()) {
    // Every axis path must name a scenario key: apply the first value of each and read.
    json base = parse_json(spec.base_text, "base");
    std::vector<std::string> first;
    for (const auto& a : spec.axes)
      for (size_t k = 0; k < a.paths.size(); ++k) first.push_back(a.paths[k] + "=" + a.values[k].front());
    try {
      apply_overrides(base, first);
      (void)scenario_from_json(base, spec.base_dir);
    } catch (const InputError& e) {
      for (const auto& i : e.issues())
        if (i.rule == "unknown key") issues.push_back({"/axes", i.pointer, "names a key scenarios do not have", i.hint});
    }
  }
  if (!issues.empty()) throw InputError(std::move(issues));
  std::string h = spec.base_text;
  for (const auto& a : spec.axes)
    for (size_t k = 0; k < a.paths.size(); ++k) {
      h += "|" + a.paths[k];
      for (const auto& v : a.values[k]) h += "," + v;
    }
  spec.grid_hash = fnv1a(h);
  return spec;
}

ShardSpec resolve_shard(const std::string& flag) {
  ShardSpec s;
  auto parse = [&](const std::string& i, const std::string& n, const std::string& origin) {
    try {
      size_t pos = 0;
      const long long a = std::stoll(i, &pos);
      if (pos != i.size()) throw std::invalid_argument(i);
      const long long b = std::stoll(n, &pos);
      if (pos != n.size()) throw std::invalid_argument(n);
      if (b < 1 || a < 0 || a >= b)
        throw InputError({{origin, i + "/" + n, "shard index must be in 0..count-1 and count >= 1", {}}});
      s.index = static_cast<size_t>(a);
      s.count = static_cast<size_t>(b);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception&) {
      throw InputError({{origin, i + "/" + n, "must be two integers, index/count", {}}});
    }
  };
  if (!flag.empty()) {
    const auto slash = flag.find('/');
    if (slash == std::string::npos) throw InputError({{"--shard", flag, "must look like index/count (e.g. 3/16)", {}}});
    parse(flag.substr(0, slash), flag.substr(slash + 1), "--shard");
    return s;
  }
  const char* sid = std::getenv("SLURM_ARRAY_TASK_ID");
  const char* scount = std::getenv("SLURM_ARRAY_TASK_COUNT");
  if (sid && scount) {
    parse(sid, scount, "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT");
    return s;
  }
  const char* kid = std::getenv("JOB_COMPLETION_INDEX");
  const char* kcount = std::getenv("CAPSIM_SHARD_COUNT");
  if (kid) {
    if (!kcount) throw InputError({{"JOB_COMPLETION_INDEX", kid, "needs CAPSIM_SHARD_COUNT (the Job's completions)", {}}});
    parse(kid, kcount, "JOB_COMPLETION_INDEX/CAPSIM_SHARD_COUNT");
  }
  return s;
}

namespace {

std::string journal_header(uint64_t grid_hash) { return json{{"grid_hash", hex(grid_hash)}}.dump(); }

/// The first characters of a line, for messages.
std::string line_brief(const std::string& line) { return line.size() > 60 ? line.substr(0, 57) + "..." : line; }

struct JournalScan {
  std::map<size_t, json> rows;
  std::uintmax_t keep = 0;  ///< bytes up to the end of the last whole line
  bool header = false;      ///< the grid's header is there
};

/// Read a journal as run_sweep appends to it: a header line, then one row per line, each
/// written whole with its newline. A last line without its newline was cut short by a kill:
/// it is dropped (its row runs again) and `keep` says where it starts, so it can be cut off
/// before new lines are appended.
JournalScan scan_journal(const fs::path& journal, uint64_t grid_hash, size_t rows_total, const SweepSpec* spec) {
  JournalScan scan;
  std::error_code ec;
  const fs::file_status st = fs::status(journal, ec);
  if (ec || !fs::exists(st)) return scan;
  const std::string name = journal.string();
  if (!fs::is_regular_file(st))
    throw InputError({{name, "", "is not a regular file (a folder, FIFO or device)", "remove it, or write the rows elsewhere with -o"}});
  std::ifstream in(journal, std::ios::binary);
  if (!in) throw InputError({{name, "", "cannot read the journal", {}}});
  const std::string want = journal_header(grid_hash);
  const std::string start_over = "remove the journal to start over";
  std::string line;
  size_t no = 0;
  std::uintmax_t pos = 0;
  while (std::getline(in, line)) {
    ++no;
    const std::string where = name + ":" + std::to_string(no);
    if (in.eof()) {
      // Cut short. Before the header: a header of this grid cut short holds no rows, and
      // anything else is another grid's.
      if (!scan.header && !line.empty() && want.compare(0, line.size(), line) != 0)
        throw InputError({{where, line_brief(line), "belongs to a different grid (its first line, cut short, is not this grid's header)",
                           start_over}});
      break;
    }
    pos += line.size() + 1;
    if (line.empty()) {
      scan.keep = pos;
      continue;
    }
    json j;
    try {
      j = parse_json(line, where);
    } catch (const InputError& e) {
      // Earlier releases appended after a line cut short: a header cut short followed by
      // the whole header, or a row cut short followed by a whole row (dropped: it runs
      // again). Any other line that does not parse is named.
      const bool header_after_cut = !scan.header && line.size() > want.size() &&
                                    line.compare(line.size() - want.size(), want.size(), want) == 0;
      const bool row_after_cut = scan.header && line.find("{\"index\":", 1) != std::string::npos;
      if (!header_after_cut && !row_after_cut) {
        std::vector<Issue> issues = e.issues();
        for (auto& i : issues) i.hint = start_over;
        throw InputError(std::move(issues));
      }
      scan.header = true;
      scan.keep = pos;
      continue;
    }
    if (j.is_object() && j.contains("grid_hash") && !j.contains("index")) {
      // A header again is harmless when it is this grid's (earlier releases wrote one on
      // every resume of a journal without rows); another grid's means two grids are mixed.
      if (j["grid_hash"] != hex(grid_hash)) {
        if (!scan.header)
          throw InputError({{name, brief(j["grid_hash"]), "belongs to a different grid (this grid's hash is " + hex(grid_hash) + ")",
                             start_over}});
        throw InputError({{where, brief(j["grid_hash"]),
                           "a second header, of another grid: rows of two grids are mixed in the journal", start_over}});
      }
      scan.header = true;
      scan.keep = pos;
      continue;
    }
    if (!scan.header) throw InputError({{where, brief(j), "is not a sweep journal header", start_over}});
    if (!is_row(j, rows_total)) throw InputError({{where, brief(j), "is not a row of this grid", start_over}});
    const size_t index = j["index"].get<size_t>();
    if (spec && j["inputs"] != row_inputs(spec->overrides(index)))
      throw InputError({{where, brief(j["inputs"]),
                         "is not a row of this grid: row " + std::to_string(index) + " of this grid has the inputs " +
                             brief(row_inputs(spec->overrides(index))),
                         start_over}});
    scan.rows[index] = std::move(j);
    scan.keep = pos;
  }
  return scan;
}

}  // namespace

std::map<size_t, json> read_journal(const fs::path& journal, uint64_t grid_hash, size_t rows_total, const SweepSpec* spec) {
  return scan_journal(journal, grid_hash, rows_total, spec).rows;
}

JournalAppender::JournalAppender(fs::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int e = errno;
    throw InputError({{path_.string(), "", std::string("cannot write the journal (") + std::strerror(e) + ")", {}}});
  }
}

JournalAppender::~JournalAppender() {
  if (fd_ >= 0) ::close(fd_);
}

void JournalAppender::append(std::string_view line) {
  // One write of the line with its newline: a kill leaves at most this line cut short.
  std::string text(line);
  text += '\n';
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      throw InputError({{path_.string(), "", std::string("cannot append to the journal: ") + std::strerror(e),
                         "free space (or write the rows elsewhere with -o), then run the same command again to resume"}});
    }
    done += static_cast<size_t>(n);
  }
}

SweepSummary run_sweep(const SweepSpec& spec, const SweepRun& run) {
  SweepSummary sum;
  sum.rows_total = spec.rows();
  std::vector<size_t> mine;
  for (size_t i = run.shard.index; i < sum.rows_total; i += run.shard.count) mine.push_back(i);
  sum.rows_this_shard = mine.size();
  const bool csv = run.out.extension() == ".csv";
  fs::path rows_file = run.out;
  if (run.shard.count > 1) {
    rows_file = run.out.parent_path() /
                (run.out.stem().string() + ".part-" + std::to_string(run.shard.index) + "-of-" +
                 std::to_string(run.shard.count) + run.out.extension().string());
  }
  sum.rows_file = rows_file;
  sum.summary_file = fs::path(rows_file.string() + ".summary.json");
  const fs::path journal = fs::path(rows_file.string() + ".journal");

  // Resume: rows already journaled by an earlier run of the same grid are kept; a last
  // line cut short by a kill is cut off so that new rows start on a line of their own.
  JournalScan scan = scan_journal(journal, spec.grid_hash, sum.rows_total, &spec);
  std::map<size_t, json> done = std::move(scan.rows);
  sum.skipped_resumed = done.size();
  {
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(journal, ec);  // fails when there is no journal yet
    if (!ec && size != scan.keep) fs::resize_file(journal, scan.keep, ec);
    else ec.clear();
    if (ec) throw InputError({{journal.string(), "", "cannot cut off the line a kill left unfinished: " + ec.message(), {}}});
  }
  JournalAppender jout(journal);
  if (!scan.header) jout.append(journal_header(spec.grid_hash));

  std::vector<size_t> todo;
  for (size_t i : mine)
    if (!done.count(i)) todo.push_back(i);
  std::mutex mu;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};  // a journal write failed: every worker stops
  std::exception_ptr failure;
  // Rows resumed from the journal count as done but not in the rate.
  ProgressReporter::Options popt;
  popt.terminal = run.progress;
  ProgressReporter progress("sweep", "rows", popt);
  progress.phase("sweep " + rows_file.filename().string(), "rows", static_cast<int64_t>(sum.rows_this_shard),
                 static_cast<int64_t>(sum.skipped_resumed));
  auto worker = [&]() {
    while (true) {
      if ((run.stop && run.stop->load()) || failed.load()) return;
      const size_t k = next.fetch_add(1);
      if (k >= todo.size()) return;
      json row = evaluate_row(spec, todo[k], run.calibration);
      std::lock_guard<std::mutex> lock(mu);
      if (failed.load()) return;
      try {
        jout.append(dump_text(row));
      } catch (const InputError&) {
        // A row that is not in the journal would be lost to a resume: stop and say so.
        failure = std::current_exception();
        failed.store(true);
        return;
      }
      done[todo[k]] = std::move(row);
      progress_add(progress.counter());
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, run.threads); ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      if (pool.empty()) throw;
      break;  // fewer threads than asked: the others take the work
    }
  }
  for (auto& t : pool) t.join();
  progress.finish();
  if (failure) std::rethrow_exception(failure);
  // Stopped before the rows file is written: the journal holds every row, a rerun writes it.
  sum.interrupted = done.size() < mine.size() || (run.stop && run.stop->load());
  for (const auto& [i, row] : done) {
    if (row["status"] == "error") ++sum.failed;
    else if (row["status"] == "does_not_fit") ++sum.does_not_fit;
    else ++sum.ok;
  }
  if (sum.interrupted) return sum;  // the journal keeps what finished; rerun to resume

  std::vector<json> rows;
  for (const auto& [i, row] : done) rows.push_back(row);
  write_file_atomic(rows_file, rows_text(rows, csv));
  json summary = {{"schema", "capsim-sweep-summary/1"},
                        {"grid_hash", hex(spec.grid_hash)},
                        {"rows_total", sum.rows_total},
                        {"shard", {{"index", run.shard.index}, {"count", run.shard.count}}},
                        {"rows", sum.rows_this_shard},
                        {"ok", sum.ok},
                        {"does_not_fit", sum.does_not_fit},
                        {"failed", sum.failed},
                        {"format", csv ? "csv" : "jsonl"}};
  if (run.calibration) summary["calibration"] = calibration_json(*run.calibration);
  write_file_atomic(sum.summary_file, dump_text(summary, 2) + "\n");
  std::error_code ec;
  fs::remove(journal, ec);
  return sum;
}

void merge_parts(const std::vector<fs::path>& parts, const fs::path& out) {
  std::vector<Issue> issues;
  std::string hash;
  size_t count = 0, total = 0;
  std::vector<char> shard_seen;
  std::map<size_t, json> rows;
  bool csv = false;
  for (const auto& part : parts) {
    const fs::path sp(part.string() + ".summary.json");
    json s;
    try {
      s = read_json_file(sp);
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
      continue;
    }
    // The summary as `capsim sweep` writes it; anything else is named, not trusted.
    std::string h, format;
    int64_t c = 0, idx = 0, rows_total = 0, part_rows_expected = -1;
    const size_t before = issues.size();
    ObjectReader sr(s, sp.string() + "#", issues);
    sr.string("grid_hash", h, true);
    sr.integer("rows_total", rows_total, true, 0);
    sr.integer("rows", part_rows_expected, false, 0);
    sr.string("format", format);
    if (const json* sh = sr.get("shard")) {
      ObjectReader shr(*sh, sr.at("shard"), issues);
      shr.integer("index", idx, true, 0);
      shr.integer("count", c, true, 1);
    } else {
      issues.push_back({sr.at("shard"), "", "is required", {}});
    }
    if (issues.size() > before) continue;
    if (hash.empty()) {
      hash = h;
      count = static_cast<size_t>(c);
      total = static_cast<size_t>(rows_total);
      if (count > kMaxSweepRows || total > kMaxSweepRows) {
        issues.push_back({sp.string(), std::to_string(std::max(count, total)),
                          "counts more rows or shards than a sweep may have (" + std::to_string(kMaxSweepRows) + ")", {}});
        break;
      }
      shard_seen.assign(count, 0);
      csv = format == "csv";
    }
    // A part of another grid, or of another sharding, is named and its rows not read.
    if (h != hash) {
      issues.push_back({part.string(), h,
                        "comes from a different grid than " + parts.front().string() + " (grid hash " + hash + ")",
                        "merge only the parts of one sweep"});
      continue;
    }
    if (static_cast<size_t>(c) != count) {
      issues.push_back({part.string(), std::to_string(c), "has a different shard count (" + std::to_string(count) + " expected)", {}});
      continue;
    }
    if (static_cast<size_t>(idx) >= count || shard_seen[static_cast<size_t>(idx)]) {
      issues.push_back({part.string(), std::to_string(idx), "duplicates a shard", {}});
      continue;
    }
    shard_seen[static_cast<size_t>(idx)] = 1;
    if (csv) {
      issues.push_back({part.string(), "", "merge reads JSON Lines parts; run the sweep with a .jsonl output", {}});
      continue;
    }
    std::istringstream in(read_text_file(part, kMaxDataFileBytes));
    std::string line;
    size_t no = 0, part_rows = 0;
    while (std::getline(in, line)) {
      ++no;
      if (line.empty()) continue;
      const std::string where = part.string() + ":" + std::to_string(no);
      try {
        json row = parse_json(line, where);
        if (!is_row(row, total)) {
          issues.push_back({where, brief(row), "is not a row of this grid", "run the shard again"});
          continue;
        }
        const size_t index = row["index"].get<size_t>();
        if (index % count != static_cast<size_t>(idx)) {
          issues.push_back({where, std::to_string(index),
                            "row belongs to shard " + std::to_string(index % count) + ", not to this part's shard " +
                                std::to_string(idx),
                            "run the shard again"});
          continue;
        }
        if (!rows.emplace(index, std::move(row)).second)
          issues.push_back({where, std::to_string(index), "row appears twice", "run the shard again"});
        ++part_rows;
      } catch (const InputError& e) {
        issues.insert(issues.end(), e.issues().begin(), e.issues().end());
      }
    }
    if (part_rows_expected >= 0 && part_rows != static_cast<size_t>(part_rows_expected))
      issues.push_back({part.string(), std::to_string(part_rows) + " rows",
                        "holds other rows than its summary counts (" + std::to_string(part_rows_expected) + ")",
                        "run the shard again"});
  }
  for (size_t i = 0; i < shard_seen.size(); ++i)
    if (!shard_seen[i]) issues.push_back({"shard " + std::to_string(i) + " of " + std::to_string(count), "", "is missing", {}});
  if (issues.empty() && rows.size() != total)
    issues.push_back({out.string(), std::to_string(rows.size()), "the parts hold " + std::to_string(rows.size()) +
                                                                      " rows of " + std::to_string(total), {}});
  if (!issues.empty()) throw InputError(std::move(issues));
  std::vector<json> ordered;
  for (const auto& [i, r] : rows) ordered.push_back(r);
  write_file_atomic(out, rows_text(ordered, out.extension() == ".csv"));
}

}  // namespace capsim::io
