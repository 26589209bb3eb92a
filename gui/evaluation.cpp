#include "evaluation.hpp"

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>
#include <thread>

#include "capsim/hw/roofline.hpp"
#include "capsim/io/calibration_io.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/scenario_io.hpp"
#include "capsim/io/trace.hpp"
#include "capsim/io/validation.hpp"

namespace capsim::gui {

TrainingOutcome evaluate_training_document(const nlohmann::json& doc, const std::filesystem::path& base_dir,
                                           const CalibrationProfile* calibration) {
  TrainingOutcome out;
  try {
    out.scenario = io::scenario_from_json(doc, base_dir);
    if (!out.scenario.training)
      throw InputError({{"/kind", "\"inference\"", "capsim train needs a training scenario", {}}});
    const io::CostModels costs(out.scenario.system, calibration);
    out.evaluation = evaluate_training(out.scenario, &costs.get());
    out.operators = operator_times(out.scenario.model, out.scenario.system, out.evaluation.plan, costs.get(),
                                   plan_step_options(out.evaluation.plan));
    nlohmann::json r = io::analytical_train_report(out.scenario, out.evaluation);
    if (calibration) io::add_calibration(r, *calibration, &out.scenario.system.gpu);
    out.report = io::dump(r);
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

std::vector<LatencyRow> latency_rows(const nlohmann::json& metrics) {
  auto number = [&](const std::string& key) {
    const auto it = metrics.find(key);
    return it != metrics.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  std::vector<LatencyRow> rows;
  for (const char* k : {"ttft", "tpot", "itl", "e2e"}) {
    const std::string key(k);
    rows.push_back({key, number(key + "_mean_ms"), number(key + "_p50_ms"), number(key + "_p90_ms"), number(key + "_p99_ms")});
  }
  return rows;
}

ServingOverTime serving_over_time(const std::vector<IterationRecord>& timeline, size_t max_points) {
  ServingOverTime out;
  std::vector<const IterationRecord*> mine;
  for (const IterationRecord& it : timeline) {
    out.replicas = std::max(out.replicas, it.replica + 1);
    if (it.replica == out.replica) mine.push_back(&it);
  }
  std::stable_sort(mine.begin(), mine.end(),
                   [](const IterationRecord* a, const IterationRecord* b) { return a->start < b->start; });
  const size_t n = mine.size();
  out.iterations = n;
  const size_t buckets = std::min(n, std::max<size_t>(max_points, 1));
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = b * n / buckets, hi = (b + 1) * n / buckets;
    double kv = 0, batch = 0;
    for (size_t i = lo; i < hi; ++i) {
      kv = std::max(kv, mine[i]->kv_utilization * 100.0);
      batch = std::max(batch, static_cast<double>(mine[i]->decodes));
    }
    out.start_s.push_back(mine[lo]->start);
    out.kv_percent.push_back(kv);
    out.batch.push_back(batch);
  }
  return out;
}

ServingOutcome run_serving(const Scenario& s, uint64_t seed, const CalibrationProfile* calibration,
                           const std::atomic<bool>* cancel) {
  ServingOutcome out;
  try {
    const io::CostModels costs(s.system, calibration);
    try {
      const std::vector<ServingResult> runs = simulate_serving_runs(s, costs.get(), seed, true, cancel);
      // A cancel during the report (percentiles over every token gap: the longest step
      // after the runs) takes effect before and after it.
      throw_if_cancelled(cancel);
      nlohmann::json r = io::serving_report(s, runs);
      throw_if_cancelled(cancel);
      if (calibration) io::add_calibration(r, *calibration, &s.system.gpu);
      const nlohmann::json& m = r.at("metrics");
      out.latency = latency_rows(m);
      if (!runs.empty()) out.over_time = serving_over_time(runs.front().timeline);
      if (r.contains("busy_by_part")) out.time_shares = io::busy_shares(r["busy_by_part"]);
      out.throughput_tokens_per_s = m.value("throughput_tokens_per_s", 0.0);
      out.requests_per_s = m.value("requests_per_s", 0.0);
      out.report = io::dump(r);
    } catch (const ServingDoesNotFit& e) {
      out.does_not_fit = e.what();
      out.report = io::dump(io::serving_does_not_fit_report(s, e.what()));
    }
  } catch (const ServingCancelled&) {
    out = ServingOutcome{};
    out.cancelled = true;
  } catch (const std::exception& e) {
    out.internal_error = e.what();
  }
  return out;
}

QpsCurve run_qps_curve(const Scenario& s, const ServingSla& sla, uint64_t seed, const CalibrationProfile* calibration,
                       const std::atomic<bool>* cancel, ProgressCounter* progress) {
  QpsCurve out;
  out.sla = sla;
  try {
    const io::CostModels costs(s.system, calibration);
    try {
      out.max_qps = max_qps(s, costs.get(), sla, seed, progress, cancel);
      if (progress)
        progress->set_total(progress->done.load() + static_cast<int64_t>(std::size(kQpsCurveFractions)));
      const double base = out.max_qps > 0 ? out.max_qps : (s.inference->workload.qps > 0 ? s.inference->workload.qps : 1.0);
      for (double f : kQpsCurveFractions) {
        Scenario probe = s;
        probe.inference->workload.mode = ServingWorkload::Mode::poisson;
        probe.inference->workload.qps = base * f;
        const auto [ttft, tpot] = p99_latencies(simulate_serving_runs(probe, costs.get(), seed, false, cancel));
        out.points.push_back({probe.inference->workload.qps, ttft, tpot});
        progress_add(progress);
      }
    } catch (const ServingDoesNotFit& e) {
      out.does_not_fit = e.what();
    }
  } catch (const ServingCancelled&) {
    out = QpsCurve{};
    out.sla = sla;
    out.cancelled = true;
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

std::string input_error_text(const std::vector<Issue>& issues) {
  std::string text = std::to_string(issues.size()) + (issues.size() == 1 ? " problem" : " problems") + " in the input:";
  for (const auto& line : issue_lines(issues)) text += "\n  " + line;
  return text;
}

CalibrationOutcome load_calibration(const std::filesystem::path& path, const SystemSpec& system) {
  CalibrationOutcome out;
  CalibrationProfile p;
  try {
    p = io::read_profile(path);
  } catch (const InputError& e) {
    out.error = input_error_text(e.issues());
    return out;
  } catch (const std::exception& e) {
    out.error = std::string("internal error: ") + e.what();
    return out;
  }
  out.name = p.name;
  out.gpu = p.gpu;
  out.profile = std::make_shared<const CalibrationProfile>(p);
  SystemSpec sys = system;
  if (!io::profile_matches(p, sys.gpu)) {
    for (const std::string& id : io::gpu_preset_ids()) {
      const GpuSpec g = io::load_gpu(id);
      if (io::profile_matches(p, g)) {
        sys.gpu = g;
        break;
      }
    }
  }
  out.model_gpu = sys.gpu.id;
  out.note = "default model: " + sys.gpu.id + ", " + std::to_string(sys.gpus_per_node) + " GPUs per node";
  if (sys.nic_gbps_per_gpu > 0) {
    const nlohmann::json nic(sys.nic_gbps_per_gpu);
    out.note += ", NIC " + nic.dump() + " Gb/s per GPU";
  }
  if (!io::profile_matches(p, sys.gpu))
    out.note += " (the profile was measured on " + p.gpu + ", which no GPU preset matches)";
  else if (!io::profile_matches(p, system.gpu))
    out.note += " (the profile's GPU; the training scenario runs on " + system.gpu.id + ", where it does not apply)";

  const hw::RooflineCostModel model(sys);
  // Plain GEMM tables by dtype, then the grouped expert GEMM tables ("bf16 x128 experts"),
  // each point's FLOPs over all its groups and the default model's batched GEMM beside it.
  auto add_gemm = [&](const GemmTable& t) {
    GemmCurve c;
    c.dtype = std::string(to_string(t.dtype));
    if (t.groups > 0) c.dtype += " x" + std::to_string(t.groups) + " experts";
    const int64_t groups = std::max<int64_t>(1, t.groups);
    const double peak = sys.gpu.peak(t.dtype).value;
    for (size_t i = 0; i < t.tflops.size(); ++i) {
      const double flops = 2.0 * static_cast<double>(t.m[i]) * static_cast<double>(t.n[i]) * static_cast<double>(t.k[i]) *
                           static_cast<double>(groups);
      c.m.push_back(t.m[i]), c.n.push_back(t.n[i]), c.k.push_back(t.k[i]);
      c.flops.push_back(flops);
      c.measured.push_back(peak > 0 ? t.tflops[i] * 1e12 / peak : 0);
      const double secs = model.gemm(t.m[i], t.n[i], t.k[i], t.dtype, groups).value;
      c.model.push_back(peak > 0 && secs > 0 ? flops / secs / peak : 0);
    }
    out.gemm.push_back(std::move(c));
  };
  for (const GemmTable& t : p.gemm) add_gemm(t);
  for (const GemmTable& t : p.grouped_gemm) add_gemm(t);
  for (const CollectiveFit& f : p.collectives) {
    CollectiveCurve c;
    c.label = std::string(to_string(f.op)) + " x" + std::to_string(f.ranks) + (f.inter ? " inter-node" : " intra-node");
    const double factor = busbw_factor(f.op, f.ranks);
    const Group g{f.ranks, std::max<int64_t>(1, f.ranks / std::max<int64_t>(1, f.nodes))};
    for (size_t i = 0; i < f.size_bytes.size(); ++i) {
      const double bytes = f.size_bytes[i];
      double secs = 0;
      if (f.op == CalOp::send_recv) {
        secs = model.p2p(Bytes(bytes), f.inter).value;
      } else {
        const CollectiveKind k = f.op == CalOp::all_reduce       ? CollectiveKind::all_reduce
                                 : f.op == CalOp::all_gather     ? CollectiveKind::all_gather
                                 : f.op == CalOp::reduce_scatter ? CollectiveKind::reduce_scatter
                                                                 : CollectiveKind::all_to_all;
        secs = model.collective(k, Bytes(bytes), g).value;
      }
      c.bytes.push_back(bytes);
      c.measured_gbps.push_back(f.time_s[i] > 0 ? bytes * factor / f.time_s[i] / 1e9 : 0);
      c.model_gbps.push_back(secs > 0 ? bytes * factor / secs / 1e9 : 0);
    }
    out.collectives.push_back(std::move(c));
  }
  return out;
}

std::vector<std::filesystem::path> default_validation_files() {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(io::data_dir() / "validation", ec))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

const std::vector<std::string>& validation_group_keys() {
  static const std::vector<std::string> keys = {"source", "engine", "gpu", "gpus", "model", "mode"};
  return keys;
}

ValidationOutcome run_validation_files(const std::vector<std::filesystem::path>& files, unsigned threads) {
  ValidationOutcome out;
  try {
    nlohmann::json r = io::run_validation(files, nullptr, std::max(1u, threads));
    for (const nlohmann::json& c : r["cases"]) {
      const std::string id = c.value("id", std::string());
      if (c.value("status", std::string()) != "ok") {
        out.unsupported.push_back(id);
        continue;
      }
      std::map<std::string, std::string> groups;
      for (const std::string& key : validation_group_keys())
        groups[key] = c.contains("groups") ? c["groups"].value(key, std::string("?")) : "?";
      for (auto it = c["error"].begin(); it != c["error"].end(); ++it)
        out.points.push_back({id, c.value("file", std::string()), it.key(),
                              c["predicted"][it.key()].get<double>(), c["measured"][it.key()].get<double>(),
                              it.value().get<double>(), groups});
    }
    for (const std::string& key : validation_group_keys()) {
      const nlohmann::json table = io::group_errors(r, key);
      if (key == "source") r["groups_by"]["source"] = table;
      std::vector<ValidationGroupRow>& rows = out.groups_by[key];
      for (const std::string& name : io::ordered_group_names(table))
        for (auto mi = table[name].begin(); mi != table[name].end(); ++mi)
          rows.push_back({name, mi.key(), mi.value().value("n", int64_t{0}), mi.value().value("median_abs_error", 0.0),
                          mi.value().value("p90_abs_error", 0.0), mi.value().value("signed_median_error", 0.0)});
    }
    out.report = io::dump(r);
  } catch (const InputError& e) {
    for (const auto& line : issue_lines(e.issues())) out.internal_error += (out.internal_error.empty() ? "" : "\n") + line;
  } catch (const std::exception& e) {
    out.internal_error = e.what();
  }
  return out;
}

SearchOptions search_options(const std::vector<int64_t>& gpu_counts, size_t top) {
  SearchOptions opt;
  opt.gpu_counts = gpu_counts;
  opt.top_k = top;
  opt.threads = std::max(1u, std::thread::hardware_concurrency());
  return opt;
}

SearchOutcome run_layout_search(const nlohmann::json& doc, const std::filesystem::path& base_dir,
                                const SearchOptions& opt, const CalibrationProfile* calibration) {
  SearchOutcome out;
  try {
    out.scenario = io::scenario_from_json(doc, base_dir);
    if (!out.scenario.training)
      throw InputError({{"/kind", "\"inference\"", "capsim search needs a training scenario", {}}});
    const io::CostModels costs(out.scenario.system, calibration);
    out.result = search_training(out.scenario, costs.get(), opt);
  } catch (const SearchCancelled&) {
    out = SearchOutcome{};
    out.cancelled = true;
  } catch (const InputError& e) {
    out.issues = e.issues();
  } catch (const std::exception& e) {
    out.internal_error = e.what();
  }
  return out;
}

nlohmann::json apply_candidate(const nlohmann::json& doc, const SearchCandidate& c) {
  nlohmann::json d = doc;
  const TrainingPlan& t = c.plan;
  d["system"]["num_gpus"] = c.num_gpus;
  nlohmann::json& tr = d["training"];
  tr["tp"] = t.tp;
  tr["pp"] = t.pp;
  tr["vpp"] = t.vpp.value_or(1);
  tr["dp"] = t.dp;
  tr["cp"] = t.cp;
  tr["ep"] = t.ep;
  tr["etp"] = t.etp.value_or(1);
  tr["sp"] = t.sp;
  tr["zero"] = t.zero.value_or(0);
  tr["micro_batch"] = t.micro_batch.value_or(1);
  tr["recompute"] = std::string(to_string(t.recompute.value_or(Recompute::none)));
  tr["schedule"] = std::string(to_string(t.schedule));
  tr["framework"] = std::string(to_string(framework_of(t)));
  tr["attention"] = std::string(to_string(attention_of(t)));
  return d;
}

TimelineOutcome run_timeline(const nlohmann::json& doc, const std::filesystem::path& base_dir,
                             const CalibrationProfile* calibration) {
  TimelineOutcome out;
  try {
    const Scenario s = io::scenario_from_json(doc, base_dir);
    if (!s.training) throw InputError({{"/kind", "\"inference\"", "capsim train needs a training scenario", {}}});
    const io::CostModels costs(s.system, calibration);
    const TrainEvaluation ev = evaluate_training(s, &costs.get());
    // The options `capsim train --engine des` passes.
    const StepOptions opt = plan_step_options(ev.plan);
    auto d = std::make_shared<DesStep>(des_step(s.model, s.system, ev.plan, costs.get(), opt));
    out.trace = io::chrome_trace(*d);
    out.des = std::move(d);
  } catch (const InputError& e) {
    out.issues = e.issues();
  } catch (const std::exception& e) {
    out.internal_error = e.what();
  }
  return out;
}

}  // namespace capsim::gui
