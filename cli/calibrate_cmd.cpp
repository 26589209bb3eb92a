// capsim calibrate fit | import-nccl-tests | show
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "capsim/core/serving.hpp"
#include "capsim/core/train.hpp"
#include "capsim/hw/recording.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/calibration_io.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/progress.hpp"
#include "capsim/io/scenario_io.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/serving_steps.hpp"
#include "commands.hpp"

namespace capsim::cli {

namespace {

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  return fmt::format("{:.0f} {}", b, unit[i]);
}

}  // namespace

int run_calibrate_import(const CalibrateArgs& a) {
  std::optional<CalOp> op;
  if (!a.op.empty()) op = parse_cal_op(a.op);
  RawFile all;
  all.header.source = "nccl-tests";
  std::vector<Issue> issues;
  for (const auto& f : a.inputs) {
    try {
      RawFile r = io::import_nccl_tests(f, op);
      if (all.header.gpu.empty()) all.header.gpu = r.header.gpu;
      if (all.header.nccl.empty()) all.header.nccl = r.header.nccl;
      all.header.gpu_count = std::max(all.header.gpu_count, r.header.gpu_count);
      all.rows.insert(all.rows.end(), r.rows.begin(), r.rows.end());
      fmt::print(stderr, "{}: {} measurements\n", f, r.rows.size());
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
    }
  }
  if (!issues.empty()) throw InputError(issues);
  io::write_file_atomic(a.out, io::raw_to_text(all));
  return 0;
}

int run_calibrate_fit(const CalibrateArgs& a) {
  std::vector<RawFile> raws;
  std::vector<Issue> issues;
  for (const auto& f : a.inputs) {
    try {
      raws.push_back(io::read_raw(f));
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
    }
  }
  if (!issues.empty()) throw InputError(issues);
  const CalibrationProfile p = fit_profile(raws, std::filesystem::path(a.out).stem().string());
  if (p.gemm.empty() && p.grouped_gemm.empty() && p.attention.empty() && p.collectives.empty() && !p.hbm_gbps && !p.launch_s)
    throw InputError({{a.inputs.front(), "", "holds no measurement to fit", "see docs/calibration.md"}});
  io::write_file_atomic(a.out, io::profile_to_json(p));
  for (const auto& c : p.collectives)
    fmt::print(stderr, "{} x{} {}: alpha {:.1f} us, busbw {:.1f} GB/s, MAPE {:.1f}%, leave-one-out {:.1f}%\n", to_string(c.op),
               c.ranks, c.inter ? "inter" : "intra", c.alpha_s * 1e6, c.busbw_gbps, 100 * c.error.mape, 100 * c.error.loo_mape);
  return 0;
}

int run_calibrate_shapes(const CalibrateArgs& a) {
  const Scenario s = io::load_scenario(a.inputs.front());
  const hw::RooflineCostModel base(s.system);
  const hw::RecordingCostModel rec(base);
  if (s.training) {
    (void)evaluate_training(s, &rec);
  } else {
    (void)simulate_serving(s, rec);
  }
  const auto shapes = rec.shapes();
  std::string text = "# GEMM shapes scenario " + s.id + " costs: dtype m n k (C[m,n] = A[m,k] B[k,n])\n";
  for (const auto& [d, m, n, k] : shapes) {
    // capsim-calibrate times the tensor-core dtypes; weight-only int4/fp4 GEMMs run as a
    // dequantizing kernel it does not reproduce, so they are listed as comments.
    const bool timed = d == DType::bf16 || d == DType::fp16 || d == DType::fp8 || d == DType::int8;
    text += fmt::format("{}{} {} {} {}\n", timed ? "" : "# not timed: ", to_string(d), m, n, k);
  }
  if (a.out.empty()) fmt::print("{}", text);
  else io::write_file_atomic(a.out, text);
  fmt::print(stderr, "{} GEMM shapes\n", shapes.size());
  return 0;
}

int run_calibrate_compare(const CalibrateArgs& a) {
  SystemSpec sys;
  sys.gpu = io::load_gpu(a.gpu, "--gpu");
  sys.gpus_per_node = a.gpus_per_node;
  sys.nic_gbps_per_gpu = a.nic_gbps;
  const hw::RooflineCostModel model(sys);
  struct Group {
    std::vector<double> err;  // signed relative error of the default model
    nlohmann::json points = nlohmann::json::array();  // GEMMs: each shape, measured and modelled
  };
  std::map<std::string, Group> groups;
  std::vector<Issue> issues;
  for (const auto& f : a.inputs) {
    RawFile raw;
    try {
      raw = io::read_raw(f);
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
      continue;
    }
    for (const RawMeasurement& m : raw.rows) {
      if (m.time_s <= 0) continue;
      double pred = 0;
      std::string key;
      nlohmann::json point;  // the measurement's shape, where the report lists each point
      switch (m.kind) {
        case RawMeasurement::Kind::gemm: {
          // By rows: a few stream the weights, up to a few hundred fill part of one wave of
          // output tiles, more fill the GPU; the model is off differently in each.
          const char* rows = m.m <= 16 ? "1-16" : (m.m <= 512 ? "17-512" : "> 512");
          if (m.batch > 1) {
            // A grouped GEMM (an MoE layer's experts): one kernel over every group (PyTorch's
            // grouped matmul, as the training model prices it), or one GEMM per expert back
            // to back (`per_expert_loop`).
            pred = m.op == "per_expert_loop" ? static_cast<double>(m.batch) * model.gemm(m.m, m.n, m.k, m.dtype).value
                                             : model.gemm(m.m, m.n, m.k, m.dtype, m.batch).value;
            key = fmt::format("grouped gemm {} {}, {} rows an expert", to_string(m.dtype),
                              m.op.empty() ? "(kernel not named)" : m.op, rows);
            point = {{"groups", m.batch}, {"m", m.m}, {"n", m.n}, {"k", m.k}};
            break;
          }
          pred = model.gemm(m.m, m.n, m.k, m.dtype).value;
          key = fmt::format("gemm {}, {} rows", to_string(m.dtype), rows);
          point = {{"m", m.m}, {"n", m.n}, {"k", m.k}};
          break;
        }
        case RawMeasurement::Kind::memory:
          pred = model.memory_bound(Bytes(m.bytes)).value;
          key = "memory " + m.op;
          break;
        case RawMeasurement::Kind::attention: {
          // Fused kernels over prompt-length blocks, priced with the table of the kernel that
          // ran: cuDNN's ("cudnn", what capsim-calibrate times), FlashAttention-2's
          // ("flash2", PyTorch's flash backend) or the architecture's best (no impl). The
          // two-GEMM stand-in ("cublaslt-bmm") is not attention; decode shapes (one query
          // over a cache) are memory-bound kernels the serving model prices apart.
          AttentionKernel kernel = AttentionKernel::fused;
          if (m.op == "cudnn") kernel = AttentionKernel::cudnn;
          else if (m.op == "flash2") kernel = AttentionKernel::flash2;
          else if (!m.op.empty()) continue;
          if (m.seq_q != m.seq_kv) continue;
          AttentionShape s;
          s.batch = m.batch, s.heads = m.heads, s.kv_heads = m.kv_heads, s.q_len = m.seq_q, s.kv_len = m.seq_kv;
          s.qk_dim = s.v_dim = m.head_dim, s.causal = m.causal, s.kernel = kernel;
          pred = model.attention(s, m.backward).value;
          key = std::string("attention ") + (m.backward ? "bwd" : "fwd") + (m.op.empty() ? "" : " (" + m.op + ")");
          break;
        }
        case RawMeasurement::Kind::launch: continue;
        case RawMeasurement::Kind::collective: {
          const int64_t per_node = std::max<int64_t>(1, m.ranks / std::max<int64_t>(1, m.nodes));
          const capsim::Group g{m.ranks, per_node};
          if (m.coll == CalOp::send_recv) {
            pred = model.p2p(Bytes(m.bytes), m.nodes > 1).value;
          } else {
            const CollectiveKind k = m.coll == CalOp::all_reduce       ? CollectiveKind::all_reduce
                                     : m.coll == CalOp::all_gather     ? CollectiveKind::all_gather
                                     : m.coll == CalOp::reduce_scatter ? CollectiveKind::reduce_scatter
                                                                       : CollectiveKind::all_to_all;
            pred = model.collective(k, Bytes(m.bytes), g).value;
          }
          key = fmt::format("{} x{} on {} node(s)", to_string(m.coll), m.ranks, m.nodes);
          // Sizes under 1 MiB are latency-bound; report them apart from bandwidth-bound ones.
          key += m.bytes < 1048576.0 ? ", < 1 MiB" : ", >= 1 MiB";
          break;
        }
      }
      groups[key].err.push_back((pred - m.time_s) / m.time_s);
      if (!point.is_null()) {
        point["measured_s"] = m.time_s;
        point["model_s"] = pred;
        point["rel_err"] = (pred - m.time_s) / m.time_s;
        groups[key].points.push_back(std::move(point));
      }
    }
  }
  if (!issues.empty()) throw InputError(issues);
  nlohmann::json j = nlohmann::json::object();
  j["gpu"] = a.gpu;
  std::string t = fmt::format("default model ({}, {} GPUs/node, NIC {} Gb/s) against the measurements\n", a.gpu,
                              a.gpus_per_node, a.nic_gbps);
  // The case column as wide as its longest name (grouped GEMM cases run past 44).
  size_t width = 44;
  for (const auto& [k, g] : groups) width = std::max(width, k.size());
  t += fmt::format("  {:<{}} {:>6} {:>10} {:>10} {:>10}\n", "case", width, "points", "median|e|", "p90|e|", "bias");
  std::vector<double> all;
  for (auto& [k, g] : groups) {
    std::vector<double> abs;
    for (double e : g.err) abs.push_back(std::abs(e)), all.push_back(std::abs(e));
    std::vector<double> sorted = g.err;
    std::sort(sorted.begin(), sorted.end());
    std::sort(abs.begin(), abs.end());
    auto pct = [](const std::vector<double>& v, double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)]; };
    t += fmt::format("  {:<{}} {:>6} {:>9.1f}% {:>9.1f}% {:>+9.1f}%\n", k, width, g.err.size(), 100 * pct(abs, 0.5), 100 * pct(abs, 0.9),
                     100 * pct(sorted, 0.5));
    j["cases"][k] = {{"points", g.err.size()}, {"median_abs_rel_err", pct(abs, 0.5)}, {"p90_abs_rel_err", pct(abs, 0.9)},
                     {"median_rel_err", pct(sorted, 0.5)}};
    if (!g.points.empty()) j["cases"][k]["shapes"] = g.points;
  }
  if (!all.empty()) {
    std::sort(all.begin(), all.end());
    t += fmt::format("  overall median |error| {:.1f}% over {} points\n", 100 * all[all.size() / 2], all.size());
    j["overall_median_abs_rel_err"] = all[all.size() / 2];
  }
  const std::string format = a.format.empty() ? (::isatty(::fileno(stdout)) ? "table" : "json") : a.format;
  fmt::print("{}", format == "json" ? io::dump(j) : t);
  return 0;
}

int run_calibrate_show(const CalibrateArgs& a) {
  const CalibrationProfile p = io::read_profile(a.inputs.front());
  const std::string format = a.format.empty() ? (::isatty(::fileno(stdout)) ? "table" : "json") : a.format;
  if (format == "json") {
    fmt::print("{}", io::profile_to_json(p));
    return 0;
  }
  std::string s = fmt::format("calibration profile {} (GPU {})\n", p.name, p.gpu.empty() ? "not recorded" : p.gpu);
  for (const auto& h : p.sources)
    s += fmt::format("  source {} from {}{}{}\n", h.file, h.source, h.nccl.empty() ? "" : ", NCCL " + h.nccl,
                     h.driver.empty() ? "" : ", driver " + h.driver);
  for (const auto& g : p.gemm) {
    auto [mn, mx] = std::minmax_element(g.tflops.begin(), g.tflops.end());
    s += fmt::format("  GEMM {}: {} shapes, m {}..{}, n {}..{}, k {}..{}, {:.0f}..{:.0f} TFLOP/s; outside that box the roofline answers;"
                     " leave-one-out {:.1f}% mean, {:.1f}% largest over {} points\n",
                     to_string(g.dtype), g.tflops.size(), *std::min_element(g.m.begin(), g.m.end()),
                     *std::max_element(g.m.begin(), g.m.end()), *std::min_element(g.n.begin(), g.n.end()),
                     *std::max_element(g.n.begin(), g.n.end()), *std::min_element(g.k.begin(), g.k.end()),
                     *std::max_element(g.k.begin(), g.k.end()), *mn, *mx, 100 * g.error.loo_mape, 100 * g.error.max_abs,
                     g.error.points);
  }
  for (const auto& g : p.grouped_gemm) {
    auto [mn, mx] = std::minmax_element(g.tflops.begin(), g.tflops.end());
    s += fmt::format("  grouped GEMM {} x{} experts: {} shapes, m {}..{} an expert, {:.0f}..{:.0f} TFLOP/s; elsewhere the plain "
                     "table or the roofline answers\n",
                     to_string(g.dtype), g.groups, g.tflops.size(), *std::min_element(g.m.begin(), g.m.end()),
                     *std::max_element(g.m.begin(), g.m.end()), *mn, *mx);
  }
  for (const auto& t : p.attention)
    s += fmt::format("  attention {} {} d{}: seq {:.0f}..{:.0f}, {:.0f}..{:.0f} TFLOP/s\n", t.backward ? "bwd" : "fwd",
                     t.causal ? "causal" : "full", t.head_dim, t.seq.front(), t.seq.back(),
                     *std::min_element(t.tflops.begin(), t.tflops.end()), *std::max_element(t.tflops.begin(), t.tflops.end()));
  if (p.hbm_gbps) s += fmt::format("  HBM streaming {:.0f} GB/s\n", *p.hbm_gbps);
  if (p.launch_s) s += fmt::format("  kernel launch {:.2f} us\n", *p.launch_s * 1e6);
  for (const auto& c : p.collectives) {
    s += fmt::format("  {} over {} ranks on {} node(s): t = {:.1f} us + bytes x {:.3f}/busbw, busbw {:.1f} GB/s\n", to_string(c.op),
                     c.ranks, c.nodes, c.alpha_s * 1e6, busbw_factor(c.op, c.ranks), c.busbw_gbps);
    s += fmt::format("    measured {}..{} ({} sizes; the table answers inside, the fit extrapolates outside); fit MAPE {:.1f}%, "
                     "largest {:.1f}%, leave-one-out {:.1f}%\n",
                     human_bytes(c.size_bytes.front()), human_bytes(c.size_bytes.back()), c.size_bytes.size(),
                     100 * c.error.mape, 100 * c.error.max_abs, 100 * c.error.loo_mape);
    for (const auto& r : c.residuals)
      s += fmt::format("      {:>10}  measured {:>10.1f} us ({:>7.1f} GB/s busbw)  fit {:>10.1f} us  {:+6.1f}%\n", human_bytes(r.x),
                       r.measured * 1e6, r.x * busbw_factor(c.op, c.ranks) / r.measured / 1e9, r.predicted * 1e6,
                       100 * r.rel_err());
  }
  fmt::print("{}", s);
  return 0;
}

namespace {

std::string serving_steps_table(const nlohmann::json& r, const std::string& file, const std::string& scenario) {
  std::string s = fmt::format("serving steps recovered from {}: {} of {} requests placed on {} steps ({:.2f} s", file,
                              r["placed"].get<size_t>(), r["requests"].get<size_t>(), r["steps"].get<size_t>(),
                              r["steps_s"].get<double>());
  s += r.contains("duration_s") ? fmt::format(" of the run's {:.2f} s)\n", r["duration_s"].get<double>()) : ")\n";
  for (const auto& n : r["notes"]) s += fmt::format("  note: {}\n", n.get<std::string>());
  const bool pred = !scenario.empty();
  auto predicted = [&](const nlohmann::json& row) {
    if (!row.contains("predicted_median_ms")) return pred ? fmt::format("  {:>9} {:>7}", "-", "") : std::string();
    return fmt::format("  {:>9.2f} {:>+6.1f}%", row["predicted_median_ms"].get<double>(), 100 * row["error"].get<double>());
  };
  const std::string pred_head = pred ? fmt::format("  {:>9} {:>7}", "predicted", "error") : std::string();
  s += fmt::format("decode-only steps by running requests{}\n", pred ? fmt::format(" (predicted: {})", scenario) : "");
  s += fmt::format("  {:>9} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8}{}\n", "requests", "steps", "median ms", "p10 ms", "p90 ms",
                   "mean", "context", pred_head);
  for (const auto& row : r["decode_steps"])
    s += fmt::format("  {:>9} {:>6} {:>9.2f} {:>8.2f} {:>8.2f} {:>8.1f} {:>8.0f}{}\n",
                     fmt::format("{}-{}", row["decodes_from"].get<int64_t>(), row["decodes_to"].get<int64_t>()),
                     row["steps"].get<size_t>(), row["median_ms"].get<double>(), row["p10_ms"].get<double>(),
                     row["p90_ms"].get<double>(), row["mean_decodes"].get<double>(), row["mean_context"].get<double>(),
                     predicted(row));
  s += "steps that produced first tokens, by how many\n";
  s += fmt::format("  {:>9} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8}{}\n", "prompts", "steps", "median ms", "p10 ms", "p90 ms",
                   "tokens", "decodes", pred_head);
  for (const auto& row : r["prompt_steps"])
    s += fmt::format("  {:>9} {:>6} {:>9.2f} {:>8.2f} {:>8.2f} {:>8.0f} {:>8.0f}{}\n", row["prompts"].get<int64_t>(),
                     row["steps"].get<size_t>(), row["median_ms"].get<double>(), row["p10_ms"].get<double>(),
                     row["p90_ms"].get<double>(), row["median_prompt_tokens"].get<double>(),
                     row["median_decodes"].get<double>(), predicted(row));
  if (r.contains("fit") && !r["fit"].is_null()) {
    const auto& f = r["fit"];
    s += fmt::format(
        "host time that fits the decode-only steps: {:.2f} ms a step (--set inference.engine.step_overhead_ms={:.2f}); "
        "median |error| over {} steps {:.1f}% -> {:.1f}%\n",
        f["step_overhead_ms"].get<double>(), f["step_overhead_ms"].get<double>(), f["steps"].get<size_t>(),
        100 * f["median_abs_error_before"].get<double>(), 100 * f["median_abs_error_after"].get<double>());
    if (f.contains("eager_host_us_per_layer"))
      s += fmt::format(
          "host time per layer that fits the prompt steps run without a CUDA graph, beside it: {:.0f} us "
          "(--set inference.engine.eager_host_us_per_layer={:.0f}); median |error| over {} steps {:.1f}% -> {:.1f}%\n",
          f["eager_host_us_per_layer"].get<double>(), f["eager_host_us_per_layer"].get<double>(),
          f["eager_steps"].get<size_t>(), 100 * f["eager_median_abs_error_before"].get<double>(),
          100 * f["eager_median_abs_error_after"].get<double>());
  }
  return s;
}

}  // namespace

int run_calibrate_serving_steps(const CalibrateArgs& a) {
  // Read everything first, so that a bad scenario and a bad result file are reported together.
  std::vector<Issue> issues;
  std::optional<io::BenchmarkRequests> bench;
  std::optional<Scenario> s;
  try {
    bench = io::read_benchmark_requests(a.inputs.front(), a.run > 0 ? std::optional<size_t>(a.run) : std::nullopt);
  } catch (const InputError& e) {
    issues.insert(issues.end(), e.issues().begin(), e.issues().end());
  }
  if (!a.scenario.empty()) {
    try {
      s = io::load_scenario(a.scenario);
      if (!s->inference) issues.push_back({a.scenario + "#/kind", "\"training\"", "--scenario needs an inference scenario", ""});
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
    }
  }
  std::optional<CalibrationProfile> cal;
  if (!a.calibration.empty()) {
    if (!s) issues.push_back({"--calibration", a.calibration, "prices the steps of a scenario, and there is none", "give --scenario FILE"});
    try {
      cal = io::read_profile(a.calibration);
    } catch (const InputError& e) {
      issues.insert(issues.end(), e.issues().begin(), e.issues().end());
    }
  }
  if (!issues.empty()) throw InputError(issues);
  std::optional<io::CostModels> costs;
  if (s) costs.emplace(s->system, cal ? &*cal : nullptr);
  io::ProgressReporter progress("serving-steps", "requests");
  nlohmann::json r =
      io::analyze_serving_steps(*bench, a.bucket, s ? &*s : nullptr, costs ? &costs->get() : nullptr, progress.counter());
  progress.finish();
  r["file"] = a.inputs.front();
  if (cal && !io::add_calibration(r, *cal, &s->system.gpu))
    fmt::print(stderr, "warning: calibration profile {} was measured on {}, not {}; the default model answers\n", cal->name,
               cal->gpu, s->system.gpu.id);
  const std::string format = a.format.empty() ? (::isatty(::fileno(stdout)) ? "table" : "json") : a.format;
  const std::string text =
      format == "json" ? io::dump(r) : serving_steps_table(r, a.inputs.front(), r.value("scenario", std::string()));
  if (a.out.empty()) fmt::print("{}", text);
  else io::write_file_atomic(a.out, text);
  return 0;
}

}  // namespace capsim::cli
