// capsim: command-line front end. Subcommands parse arguments, call io/core, and render.

#include <fmt/core.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "capsim/core/diagnostics.hpp"
#include "capsim/core/layout.hpp"
#include "capsim/core/pipeline_sim.hpp"
#include "capsim/core/search.hpp"
#include <chrono>
#include <thread>
#include "capsim/core/serving.hpp"
#include "capsim/core/posttrain.hpp"
#include "capsim/core/train.hpp"
#include "capsim/io/calibration_io.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/engines.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"
#include "capsim/io/sweep.hpp"
#include "capsim/io/plan_io.hpp"
#include "capsim/io/progress.hpp"
#include <atomic>
#include <csignal>
#include "capsim/io/trace.hpp"
#include "capsim/io/validation.hpp"
#include "capsim/hw/roofline.hpp"
#include "commands.hpp"

namespace capsim::cli {

using nlohmann::json;

namespace {

[[noreturn]] void stdout_failed() {
  const int e = errno;
  throw InputError({{"standard output", "", std::string("cannot write the report: ") + std::strerror(e),
                     "write it to a file with -o"}});
}

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / kGiB); }

std::string billions(int64_t n) { return fmt::format("{:.3f} B", static_cast<double>(n) / 1e9); }

void emit(const std::string& text, const std::string& out_path) {
  if (out_path.empty()) {
    // A report that does not reach stdout (a full disk, a closed pipe) is not an answer.
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) stdout_failed();
  } else {
    io::write_file_atomic(out_path, text);
  }
}

std::string model_table(const json& r) {
  std::string s;
  s += fmt::format("model {} ({})\n", r["name"].get<std::string>(), r["model_type"].get<std::string>());
  s += fmt::format("  parameters  total {}  active {}  embedding {}\n", billions(r["params_total"].get<int64_t>()),
                   billions(r["params_active"].get<int64_t>()), billions(r["params_embedding"].get<int64_t>()));
  const json& sh = r["shape"];
  s += fmt::format("  shape       hidden {}  layers {}  heads {} (kv {})  head_dim {}  ffn {}  vocab {}\n",
                   sh["hidden_size"].get<int64_t>(), sh["num_layers"].get<int64_t>(),
                   sh["num_attention_heads"].get<int64_t>(), sh["num_key_value_heads"].get<int64_t>(),
                   sh["head_dim"].get<int64_t>(), sh["intermediate_size"].get<int64_t>(),
                   sh["vocab_size"].get<int64_t>());
  if (sh.contains("moe"))
    s += fmt::format("  moe         {} experts, top-{}, expert ffn {}, shared {}\n", sh["moe"]["num_experts"].get<int64_t>(),
                     sh["moe"]["top_k"].get<int64_t>(), sh["moe"]["expert_intermediate_size"].get<int64_t>(),
                     sh["moe"]["shared_experts"].get<int64_t>());
  if (sh.contains("sliding_window"))
    s += fmt::format("  attention   sliding window of {} keys on {} of {} layers\n", sh["sliding_window"].get<int64_t>(),
                     sh["sliding_layers"].get<int64_t>(), sh["num_layers"].get<int64_t>());
  s += "  KV cache    bytes per token:";
  for (const char* d : {"bf16", "fp8", "int4"})
    s += fmt::format("  {} {:.0f}", d, r["kv_cache_bytes_per_token"][d].get<double>());
  s += "\n";
  s += fmt::format("  forward     {:.4g} FLOP per token at seq_len {}\n", r["forward_flops_per_token"].get<double>(),
                   r["seq_len"].get<int64_t>());
  // Layer list, runs of identical layers folded.
  s += "  layers\n";
  const json& layers = r["layers"];
  size_t i = 0;
  while (i < layers.size()) {
    size_t k = i;
    while (k + 1 < layers.size() && layers[k + 1]["kind"] == layers[i]["kind"] &&
           layers[k + 1]["params"] == layers[i]["params"])
      ++k;
    // A run's sliding-window layers (a window leaves the parameters alone).
    size_t windowed = 0;
    int64_t window = 0;
    for (size_t j = i; j <= k; ++j)
      if (layers[j].contains("sliding_window")) {
        ++windowed;
        window = layers[j]["sliding_window"].get<int64_t>();
      }
    std::string attention = layers[i]["attention"].get<std::string>();
    if (windowed == k - i + 1) attention += fmt::format(", window {} ", window);
    else if (windowed > 0) attention += fmt::format(", window {} on {} of {} ", window, windowed, k - i + 1);
    s += fmt::format("    {:>4}-{:<4} {:<5} {:<4} {:.4g} params each\n", i, k, layers[i]["kind"].get<std::string>(),
                     attention, layers[i]["params"].get<double>());
    i = k + 1;
  }
  return s;
}

/// What the layout's precision keeps apart from its default: FP8 weights, 16-bit gradients.
std::string precision_notes(const json& l) {
  std::vector<std::string> notes;
  if (l.value("fp8_param_gather", false)) notes.emplace_back("fp8 weights");
  if (const std::string g = l.value("grad_reduce_dtype", "fp32"); g != "fp32") notes.push_back(g + " gradients");
  return notes.empty() ? "" : fmt::format(" ({})", fmt::join(notes, ", "));
}

std::string train_table(const json& r) {
  std::string s;
  const json& l = r["layout"];
  s += fmt::format("scenario {}\n", r["id"].get<std::string>().empty() ? "(unnamed)" : r["id"].get<std::string>());
  s += fmt::format("  model    {}  {} total, {} active\n", r["model"]["name"].get<std::string>(),
                   billions(r["model"]["params_total"].get<int64_t>()),
                   billions(r["model"]["params_active"].get<int64_t>()));
  s += fmt::format("  system   {} x {} ({} per node)\n", r["system"]["num_gpus"].get<int64_t>(),
                   r["system"]["gpu"].get<std::string>(), r["system"]["gpus_per_node"].get<int64_t>());
  s += fmt::format(
      "  layout   tp {} pp {} vpp {} dp {} cp {} ep {} etp {} sp {} zero {}  micro_batch {} x {} microbatches  "
      "seq {}{}  {}{}  recompute {}\n",
      l["tp"].get<int64_t>(), l["pp"].get<int64_t>(), l["vpp"].get<int64_t>(), l["dp"].get<int64_t>(),
      l["cp"].get<int64_t>(), l["ep"].get<int64_t>(), l["etp"].get<int64_t>(), l["sp"].get<bool>() ? "on" : "off",
      l["zero"].get<int64_t>(), l["micro_batch"].get<int64_t>(), l["num_microbatches"].get<int64_t>(),
      l["seq_len"].get<int64_t>(),
      l.contains("document_tokens") ? fmt::format(" (packed, documents of {})", l["document_tokens"].get<int64_t>()) : "",
      l["precision"].get<std::string>(), precision_notes(l), l["recompute"].get<std::string>());
  if (l.contains("moe_dispatcher") && l["ep"].get<int64_t>() > 1)
    s += fmt::format("  experts  {} dispatch{}\n", l["moe_dispatcher"].get<std::string>(),
                     l.value("ep_overlap", false) ? ", all-to-all overlapped with another microbatch's computation" : "");
  if (!r["resolved"].empty()) {
    s += "  resolved";
    for (auto it = r["resolved"].begin(); it != r["resolved"].end(); ++it)
      s += fmt::format("  {}={}", it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
    s += "\n";
  }
  const json& m = r["memory"]["per_gpu"];
  s += fmt::format("  memory per GPU (stage {} of {}, the largest)\n", m["stage"].get<int64_t>(),
                   r["memory"]["stages"].size());
  // Frozen models' weights (a DPO reference, a colocated teacher) are lines of their own.
  for (const auto& [k, label] : {std::pair<const char*, const char*>{"weights", "weights"}, {"gradients", "gradients"},
                                 {"optimizer", "optimizer"}, {"activations", "activations"},
                                 {"reference_weights", "reference"}, {"teacher_weights", "teacher"}, {"other", "other"}})
    if (m.contains(std::string(k) + "_bytes"))
      s += fmt::format("    {:<12}{:>12}\n", label, gib(m[std::string(k) + "_bytes"].get<double>()));
  s += fmt::format("    {:<12}{:>12} of {} -> {}\n", "total", gib(m["total_bytes"].get<double>()),
                   gib(m["capacity_bytes"].get<double>()), m["fits"].get<bool>() ? "fits" : "DOES NOT FIT");
  if (r["memory"]["stages"].size() > 1) {
    s += "  stages  layers  inflight     total\n";
    for (const auto& st : r["memory"]["stages"])
      s += fmt::format("    {:>4}  {:>6}  {:>8}  {:>12}\n", st["stage"].get<int64_t>(), st["layers"].get<int64_t>(),
                       st["inflight_microbatches"].get<int64_t>(), gib(st["total_bytes"].get<double>()));
  }
  const bool fits = !r.contains("does_not_fit");
  if (!fits) {
    // No step time or MFU for a layout that cannot run: by how much it misses, and what
    // single change would make it fit.
    const json& d = r["does_not_fit"];
    s += fmt::format("  DOES NOT FIT by {} ({} of {})\n", gib(d["over_by_bytes"].get<double>()),
                     gib(d["peak_bytes"].get<double>()), gib(d["capacity_bytes"].get<double>()));
    if (d["remedies"].empty()) s += "    no single change to ZeRO, recompute, micro batch, pp, tp or dp helps\n";
    else s += "    single changes and the largest stage they leave:\n";
    for (const auto& f : d["remedies"])
      s += fmt::format("      {:<28} {:>12}  {}\n", f["change"].get<std::string>(), gib(f["peak_bytes"].get<double>()),
                       f["fits"].get<bool>() ? "fits" : "still too large");
  }
  if (fits && r.contains("time")) {
    const json& t = r["time"];
    const json& b = t["breakdown"];
    s += fmt::format("  step     {:.3f} s  ({:.0f} tokens/s/GPU, {:.0f} TFLOP/s/GPU, MFU {:.1f}%)\n", t["step_s"].get<double>(),
                     r["throughput"]["tokens_per_s_per_gpu"].get<double>(), r["model_tflops_per_gpu"].get<double>(),
                     100 * r["mfu"].get<double>());
    s += fmt::format("    compute {:.3f}  recompute {:.3f}  bubble {:.3f}  optimizer {:.3f}\n", b["compute_s"].get<double>(),
                     b["recompute_s"].get<double>(), b["bubble_s"].get<double>(), b["optimizer_s"].get<double>());
    const json& e = b["exposed_comm_s"];
    s += fmt::format("    exposed comm: tp {:.3f}  cp {:.3f}  ep {:.3f}  pp {:.3f}  dp {:.3f}\n", e["tp"].get<double>(),
                     e["cp"].get<double>(), e["ep"].get<double>(), e["pp"].get<double>(), e["dp"].get<double>());
    // Part of compute and recompute: computation slowed by the SMs communication beside it holds.
    if (const json& o = b["overlap_slowdown_s"]; o["cp"].get<double>() + o["ep"].get<double>() + o["dp"].get<double>() > 0)
      s += fmt::format("    compute slowed by overlapped comm: cp {:.3f}  ep {:.3f}  dp {:.3f}\n", o["cp"].get<double>(), o["ep"].get<double>(),
                       o["dp"].get<double>());
  }
  if (fits && r.contains("operators")) {
    // Like the step: a layout that cannot run lists no operators here (the JSON keeps them).
    const json& o = r["operators"];
    s += fmt::format("  operators  one microbatch through the model on one GPU ({} a step); ms per run, pass = runs x (fwd + bwd + recompute)\n",
                     o["microbatches_per_step"].get<int64_t>());
    s += fmt::format("    {:<10} {:<24} {:>5} {:>9} {:>9} {:>9} {:>10} {:>6} {:>8}\n", "block", "op", "runs", "fwd", "bwd",
                     "recompute", "pass", "share", "TFLOP/s");
    for (const json& x : o["rows"]) {
      const std::string share = x.contains("share") ? fmt::format("{:.1f}%", 100 * x["share"].get<double>()) : "comm";
      const std::string rate = x.contains("fwd_tflops") ? fmt::format("{:.0f}", x["fwd_tflops"].get<double>()) : "";
      s += fmt::format("    {:<10} {:<24} {:>5} {:>9.3f} {:>9.3f} {:>9.3f} {:>10.2f} {:>6} {:>8}\n", x["block"].get<std::string>(),
                       x["name"].get<std::string>(), x["count"].get<int64_t>(), 1e3 * x["fwd_s"].get<double>(),
                       1e3 * x["bwd_s"].get<double>(), 1e3 * x["recompute_s"].get<double>(), 1e3 * x["pass_s"].get<double>(),
                       share, rate);
    }
    s += fmt::format("    computation {:.2f} ms a pass, communication before overlap {:.2f} ms\n", 1e3 * o["compute_pass_s"].get<double>(),
                     1e3 * o["communication_pass_s"].get<double>());
  }
  if (r.contains("des")) {
    const json& d = r["des"];
    s += fmt::format("  des      schedule {}  {} tasks  critical path:", d["schedule"].get<std::string>(), d["tasks"].get<int64_t>());
    for (auto it = d["critical_path_s"].begin(); it != d["critical_path_s"].end(); ++it)
      s += fmt::format(" {} {:.3f}", it.key(), it.value().get<double>());
    s += "\n    stage  busy s  idle s  peak activations\n";
    for (const auto& st : d["stages"])
      s += fmt::format("    {:>5}  {:>6.3f}  {:>6.3f}  {:>12}\n", st["stage"].get<int64_t>(), st["busy_s"].get<double>(),
                       st["idle_s"].get<double>(), gib(st["peak_activation_bytes"].get<double>()));
  }
  if (r.contains("rl")) {
    const json& q = r["rl"];
    const std::string pools = q["placement"] == "split"
                                  ? fmt::format(" ({} rollout + {} train GPUs)", q["rollout"]["gpus"].get<int64_t>(),
                                                q["update"]["gpus"].get<int64_t>())
                                  : std::string();
    s += fmt::format("  rl       {} placement{}{}: {} samples of {:.0f} prompt + {:.0f} response tokens (cap {:.0f}, longest {})\n",
                     q["placement"].get<std::string>(), pools, q["overlapped"].get<bool>() ? ", generation overlapped" : "",
                     q["samples"].get<int64_t>(), q["prompt_tokens"].get<double>(),
                     q["response_tokens"]["mean"].get<double>(), q["response_tokens"]["cap"].get<double>(),
                     q["response_tokens"]["longest"].get<int64_t>());
    if (q.contains("pool_search")) {
      // The splits tried for pools left "auto": rollout + train GPUs and the step of each.
      // A long search is left to the JSON report.
      const json& search = q["pool_search"];
      std::string tried;
      if (search.size() <= 6)
        for (const json& t : search)
          tried += fmt::format("  {}+{} {}", t["rollout_gpus"].get<int64_t>(), t["train_gpus"].get<int64_t>(),
                               t["status"] == "ok" ? fmt::format("{:.2f} s", t["step_time_s"].get<double>())
                                                   : std::string("does not fit"));
      else
        tried = " each in the JSON report's rl.pool_search";
      s += fmt::format("    pools    the fastest of {} splits (rollout+train GPUs):{}\n", search.size(), tried);
    }
    s += fmt::format("    generation {:.2f} s  scoring {:.2f} s  training {:.2f} s  resharding {:.2f} s  offload {:.2f} s\n",
                     q["generation_s"].get<double>(), q["scoring_s"].get<double>(), q["training_s"].get<double>(),
                     q["resharding_s"].get<double>(), q["offload_s"].get<double>());
    s += fmt::format("    iteration {:.2f} s  {:.0f} tokens/s  bottleneck {}\n", q["step_time_s"].get<double>(),
                     q["throughput_tokens_per_s"].get<double>(), q["bottleneck"].get<std::string>());
  }
  if (r.contains("post_training")) {
    const json& q = r["post_training"];
    const bool pref = q.contains("pairs");
    if (pref)
      s += fmt::format("  {}    {} pairs ({} sequences), reference {}\n    policy {:.3f} s  reference {:.3f} s\n",
                       q["mode"].get<std::string>(), q["pairs"].get<int64_t>(), q["sequences"].get<int64_t>(),
                       q["reference"].get<std::string>(), q["policy_s"].get<double>(), q["reference_s"].get<double>());
    else
      s += fmt::format("  distill  teacher {} ({}{})\n    student {:.3f} s  teacher {:.3f} s  logits {:.3f} s{}\n",
                       q["teacher"]["name"].get<std::string>(), q["placement"].get<std::string>(),
                       q.contains("teacher_gpus") ? fmt::format(", {} GPUs", q["teacher_gpus"].get<int64_t>()) : "",
                       q["student_s"].get<double>(), q["teacher_s"].get<double>(), q["logits_s"].get<double>(),
                       q["overlapped"].get<bool>() ? "  (teacher side overlapped with the student's step)" : "");
    s += fmt::format("    step {:.3f} s  {:.0f} tokens/s\n", q["step_time_s"].get<double>(),
                     q["throughput_tokens_per_s"].get<double>());
    for (const auto& n : q["notes"]) s += fmt::format("    note: {}\n", n.get<std::string>());
  }
  if (fits && r.contains("budget")) {
    const json& b = r["budget"];
    s += fmt::format("  budget   {:.3g} tokens: {:.1f} days at {:.1f}% effective time, {:.3g} GPU-hours, {:.3g} MWh",
                     b["tokens"].get<double>(), b["days"].get<double>(),
                     100.0 * b["effective_training_fraction"].get<double>(), b["gpu_hours"].get<double>(),
                     b["energy_mwh"].get<double>());
    if (b.contains("cost_usd")) s += fmt::format(", ${:.3g}", b["cost_usd"].get<double>());
    s += "\n";
  }
  if (r.contains("fail_reason") && fits) s += fmt::format("  status   {}\n", r["fail_reason"].get<std::string>());
  for (const auto& w : r["warnings"]) s += fmt::format("  warning: {}\n", w.get<std::string>());
  return s;
}

std::string resolve_format(const std::string& f) {
  if (!f.empty()) return f;
  return ::isatty(::fileno(stdout)) ? "table" : "json";
}

}  // namespace

/// The profile named by --calibration, if any.
std::optional<CalibrationProfile> load_calibration(const std::string& path) {
  if (path.empty()) return std::nullopt;
  CalibrationProfile p = io::read_profile(path);
  return p;
}

void add_calibration(json& r, const std::optional<CalibrationProfile>& cal, const GpuSpec* gpu = nullptr) {
  if (!cal) return;
  if (!io::add_calibration(r, *cal, gpu))
    fmt::print(stderr, "warning: calibration profile {} was measured on {}, not {}; the default model answers\n", cal->name,
               cal->gpu, gpu->id);
}

int run_model(const ModelArgs& a) {
  const ModelSpec m = io::load_model(a.name, "model");
  const json r = io::model_report(m, a.seq_len);
  emit(resolve_format(a.format) == "json" ? io::dump(r) : model_table(r), a.out);
  return 0;
}

int run_train(const TrainArgs& a) {
  const Scenario s = io::load_scenario(a.scenario, a.sets);
  if (!s.training) throw InputError({{"/kind", "\"inference\"", "capsim train needs a training scenario", {}}});
  const auto cal = load_calibration(a.calibration);
  const io::CostModels costs(s.system, cal ? &*cal : nullptr);
  const CostModel& cost = costs.get();
  if (s.rl) {
    if (a.engine == "des" || !a.trace.empty())
      throw InputError({{"--engine", a.engine, "an RL iteration is evaluated with the analytical engine", "drop --engine des"}});
    if (a.ops)
      throw InputError({{"--ops", "true", "an RL iteration has no single training step to list", "drop --ops"}});
    const RlEvaluation e = evaluate_rl(s, cost);
    const RlIteration& it = e.iteration;
    json r = io::rl_train_report(e.scenario, it);
    add_calibration(r, cal, &s.system.gpu);
    for (const auto& w : it.update.warnings) fmt::print(stderr, "warning: {}\n", w);
    emit(resolve_format(a.format) == "json" ? io::dump(r) : train_table(r), a.out);
    return 0;
  }
  if (s.preference || s.distill) {
    if (a.engine == "des" || !a.trace.empty())
      throw InputError({{"--engine", a.engine, "a preference or distillation step is evaluated with the analytical engine",
                         "drop --engine des"}});
    if (a.ops)
      throw InputError({{"--ops", "true", "a preference or distillation step runs several models; --ops lists one", "drop --ops"}});
    const FrozenModelStep st = s.distill ? evaluate_distill_step(s, cost) : evaluate_preference_step(s, cost);
    json r = io::frozen_step_report(s, st);
    add_calibration(r, cal, &s.system.gpu);
    for (const auto& w : st.trained.warnings) fmt::print(stderr, "warning: {}\n", w);
    emit(resolve_format(a.format) == "json" ? io::dump(r) : train_table(r), a.out);
    return 0;
  }
  TrainEvaluation ev = evaluate_training(s, &cost);
  json r;
  if (a.engine == "des") {
    const StepOptions opt = plan_step_options(ev.plan);
    io::ProgressReporter progress("train --engine des", "tasks");
    DesOptions dopt;
    dopt.progress = progress.counter();
    const DesStep d = des_step(s.model, s.system, ev.plan, cost, opt, dopt);
    progress.finish();
    ev.step = d.step;
    r = io::train_report(s, ev);
    r["engine"] = "des";
    r["des"] = io::des_json(d);
    if (!a.trace.empty()) io::write_file_atomic(a.trace, io::chrome_trace(d));
  } else {
    if (!a.trace.empty())
      throw InputError({{"--trace", a.trace, "a timeline needs the discrete-event engine", "add --engine des"}});
    r = io::analytical_train_report(s, ev);
  }
  if (a.ops) {
    const StepOptions opt = plan_step_options(ev.plan);
    r["operators"] = io::operators_json(operator_times(s.model, s.system, ev.plan, cost, opt), num_microbatches(ev.plan));
  }
  add_calibration(r, cal, &s.system.gpu);
  for (const auto& w : ev.warnings) fmt::print(stderr, "warning: {}\n", w);
  emit(resolve_format(a.format) == "json" ? io::dump(r) : train_table(r), a.out);
  return 0;
}

int run_memory(const TrainArgs& a) {
  const Scenario s = io::load_scenario(a.scenario, a.sets);
  json r;
  std::string table;
  if (s.training) {
    const hw::RooflineCostModel cost(s.system);
    const TrainEvaluation ev = evaluate_training(s, &cost);
    for (const auto& w : ev.warnings) fmt::print(stderr, "warning: {}\n", w);
    r = io::train_report(s, ev);
    table = train_table(r);
  } else {
    const InferenceMemory mem = inference_memory(s.model, s.system, *s.inference);
    r = io::inference_memory_json(s, mem);
    const json& g = r["memory"]["per_gpu"];
    table = fmt::format(
        "scenario {}\n  serving memory per GPU (tp {} pp {})\n    weights          {:>12}\n    activation peak  {:>12}\n"
        "    non-torch        {:>12}\n    CUDA graphs      {:>12}\n    KV budget        {:>12}  ({} blocks of {} tokens, {} "
        "tokens cached; {:.0f} B per token)\n    capacity         {:>12} -> {}\n",
        s.id, s.inference->tp, s.inference->pp, gib(g["weights_bytes"].get<double>()),
        gib(g["activation_peak_bytes"].get<double>()), gib(g["non_torch_bytes"].get<double>()),
        gib(g["cudagraph_bytes"].get<double>()),
        gib(g["kv_budget_bytes"].get<double>()), g["num_blocks"].get<int64_t>(), g["block_size"].get<int64_t>(),
        g["max_cached_tokens"].get<int64_t>(), g["kv_cache_bytes_per_token"].get<double>(),
        gib(g["capacity_bytes"].get<double>()), g["fits"].get<bool>() ? "fits" : "DOES NOT FIT");
  }
  emit(resolve_format(a.format) == "json" ? io::dump(r) : table, a.out);
  return 0;
}

std::string serving_table(const json& r) {
  const json& m = r["metrics"];
  std::string s = fmt::format("scenario {}\n  deployment  tp {} pp {} ep {} x {} replica(s), weights {}, {} requests in {:.1f} s\n",
                              r["id"].get<std::string>(), r["layout"]["tp"].get<int64_t>(), r["layout"]["pp"].get<int64_t>(),
                              r["layout"]["ep"].get<int64_t>(), r["layout"]["replicas"].get<int64_t>(),
                              r["layout"]["weight_dtype"].get<std::string>(), r["run"]["requests"].get<int64_t>(),
                              r["run"]["duration_s"].get<double>());
  if (r.contains("engine") && r["engine"].contains("profile")) {
    const json& e = r["engine"];
    s += fmt::format("  engine      {} ({}; {}), host {:g} ms + {:g} us/seq per step{}, {} seqs, {} tokens/step\n",
                     e["profile"]["label"].get<std::string>(), e["profile"]["id"].get<std::string>(),
                     e["profile"]["match"].get<std::string>(), e["step_overhead_ms"].get<double>(),
                     e["step_overhead_us_per_seq"].get<double>(), e["host_overlaps_gpu"].get<bool>() ? " (overlapped)" : "",
                     e["max_num_seqs"].get<int64_t>(), e["max_num_batched_tokens"].get<int64_t>());
    // Knobs whose value this release takes from one of the profile's release ranges.
    if (const json& rv = e["profile"].value("release_values", json::array()); !rv.empty()) {
      std::string list;
      for (const auto& v : rv) list += (list.empty() ? "" : ", ") + v.get<std::string>();
      s += fmt::format("  releases    {}\n", list);
    }
  }
  if (const int64_t runs = r["run"].value("replications", int64_t{1}); runs > 1)
    s += fmt::format("  metrics     median over {} runs (seeds in a row; first run shown above)\n", runs);
  s += "  latency ms      mean      p50      p90      p99\n";
  for (const char* k : {"ttft", "tpot", "itl", "e2e"})
    s += fmt::format("    {:<8} {:>9.2f} {:>8.2f} {:>8.2f} {:>8.2f}\n", k, m[std::string(k) + "_mean_ms"].get<double>(),
                     m[std::string(k) + "_p50_ms"].get<double>(), m[std::string(k) + "_p90_ms"].get<double>(),
                     m[std::string(k) + "_p99_ms"].get<double>());
  s += fmt::format("  throughput  {:.1f} output tokens/s, {:.3f} requests/s\n", m["throughput_tokens_per_s"].get<double>(),
                   m["requests_per_s"].get<double>());
  if (r.contains("slo"))
    s += fmt::format("  goodput     {:.3f} requests/s, {:.1f} output tokens/s ({:.1f}% of requests within TTFT {:g} ms and TPOT {:g} ms)\n",
                     m["goodput_requests_per_s"].get<double>(), m["goodput_tokens_per_s"].get<double>(),
                     100.0 * m["slo_attainment"].get<double>(), r["slo"]["ttft_ms"].get<double>(), r["slo"]["tpot_ms"].get<double>());
  s += fmt::format("  KV cache    {} blocks, peak use {:.1f}%, {} preemptions\n", r["memory"]["num_blocks"].get<int64_t>(),
                   100 * r["run"]["peak_kv_utilization"].get<double>(), r["run"]["preemptions"].get<int64_t>());
  if (r.contains("over_time")) {
    // GPU busy share per window, as a row of percentages.
    std::string row;
    for (const auto& w : r["over_time"]["windows"]) row += fmt::format(" {:.0f}", 100 * w["gpu_busy"].get<double>());
    s += fmt::format("  busy %      per {:.1f} s window:{}\n", r["over_time"]["window_s"].get<double>(), row);
  }
  if (r.contains("busy_by_part")) {
    // Where the engine time went: every part above half a percent, largest first.
    std::string row;
    for (const auto& [name, share] : io::busy_shares(r["busy_by_part"]))
      if (share >= 0.005) row += fmt::format("{}{} {:.1f}%", row.empty() ? "" : ", ", name, 100.0 * share);
    s += fmt::format("  time by part {} (of {:.1f} s of engine time)\n", row, r["busy_by_part"]["busy_s"].get<double>());
  }
  if (r.contains("max_qps"))
    s += fmt::format("  max QPS     {:.3f} within TTFT p99 <= {} ms and TPOT p99 <= {} ms\n", r["max_qps"]["qps"].get<double>(),
                     r["max_qps"]["ttft_p99_ms"].get<double>(), r["max_qps"]["tpot_p99_ms"].get<double>());
  if (r.contains("warnings"))
    for (const auto& w : r["warnings"]) s += fmt::format("  warning: {}\n", w.get<std::string>());
  return s;
}

std::string serving_step_table(const json& r) {
  const json& l = r["layout"];
  const json& b = r["batch"];
  std::string batch;
  if (b["decodes"].get<int64_t>() > 0)
    batch = fmt::format("{} decodes at {} cached tokens each", b["decodes"].get<int64_t>(), b["context_tokens"].get<int64_t>());
  if (b["prompt_tokens"].get<int64_t>() > 0) {
    batch += fmt::format("{}a {}-token prompt chunk", batch.empty() ? "" : " and ", b["prompt_tokens"].get<int64_t>());
    if (b["prompt_cached_tokens"].get<int64_t>() > 0)
      batch += fmt::format(" after {} cached prompt tokens", b["prompt_cached_tokens"].get<int64_t>());
  }
  std::string s = fmt::format("scenario {}\n  step        {}\n  deployment  tp {} pp {} ep {}{}, weights {}, {} ({})\n",
                              r["id"].get<std::string>(), batch, l["tp"].get<int64_t>(), l["pp"].get<int64_t>(),
                              l["ep"].get<int64_t>(), l["attention_dp"].get<bool>() ? ", attention data-parallel" : "",
                              l["weight_dtype"].get<std::string>(), r["engine"]["label"].get<std::string>(),
                              r["engine"]["profile"].get<std::string>());
  const double gpu = r["gpu_ms"].get<double>();
  s += "  part                        ms    share of GPU time\n";
  for (const auto& p : r["parts_ms"]) {
    const double v = p["ms"].get<double>();
    if (v <= 0) continue;
    s += fmt::format("    {:<22} {:9.3f} {:6.1f}%\n", p["part"].get<std::string>(), v, gpu > 0 ? 100.0 * v / gpu : 0.0);
  }
  s += fmt::format("    {:<22} {:9.3f}\n", "GPU", gpu);
  s += fmt::format("    {:<22} {:9.3f} ({})\n", "host (scheduling)", r["host_ms"].get<double>(),
                   r["host_overlaps_gpu"].get<bool>() ? "behind the GPU" : "after the GPU");
  s += fmt::format("    {:<22} {:9.3f}\n", "step", r["step_ms"].get<double>());
  // Why eager_host is there or not: the engine's graph capture against this step.
  const json& g = r["cuda_graph"];
  const int64_t captured = g["max_tokens"].get<int64_t>();
  const int64_t tokens = b["decodes"].get<int64_t>() + b["prompt_tokens"].get<int64_t>();
  std::string why;
  if (g["replayed"].get<bool>()) why = fmt::format("replayed (steps up to {} tokens are captured)", captured);
  else if (captured == 0) why = "eager (the engine captures no CUDA graphs)";
  else if (tokens > captured) why = fmt::format("eager ({} tokens, above the {} captured)", tokens, captured);
  else why = "eager (steps with a prompt chunk are not captured)";
  s += fmt::format("  CUDA graph  {}\n", why);
  return s;
}

int run_infer_step(const InferArgs& a, const Scenario& s, const CostModel& cost) {
  std::vector<Issue> issues;
  if (a.max_qps) issues.push_back({"--max-qps", "set", "a single step has no arrival rate", "drop --max-qps or the --step options"});
  if (!a.trace.empty()) issues.push_back({"--trace", a.trace, "a single step has no timeline", "drop --trace or the --step options"});
  const int64_t decodes = std::max<int64_t>(0, a.step_decodes), context = std::max<int64_t>(0, a.step_context),
                prompt = std::max<int64_t>(0, a.step_prompt), cached = std::max<int64_t>(0, a.step_prompt_cached);
  if (decodes == 0 && prompt == 0)
    issues.push_back({"--step-decodes", std::to_string(decodes), "a step needs sequences: decodes or a prompt chunk",
                      "give --step-decodes N or --step-prompt TOKENS"});
  if (a.step_context >= 0 && decodes == 0)
    issues.push_back({"--step-context", std::to_string(context), "the cached tokens of decodes, and there are none",
                      "give --step-decodes N"});
  if (a.step_prompt_cached >= 0 && prompt == 0)
    issues.push_back({"--step-prompt-cached", std::to_string(cached), "the tokens before a prompt chunk, and there is none",
                      "give --step-prompt TOKENS"});
  if (!issues.empty()) throw InputError(issues);
  IterationBatch b;
  b.decodes = decodes;
  b.decode_context = static_cast<double>(decodes) * static_cast<double>(context);
  if (s.model.sliding_window > 0) {
    b.context_window = s.model.sliding_window;
    b.decode_window_context = static_cast<double>(decodes) * static_cast<double>(std::min(context, s.model.sliding_window));
  }
  if (prompt > 0) b.prefills.push_back({prompt, cached, true});
  json r;
  try {
    r = io::serving_step_report(s, b, serving_step(s, cost, b, a.seed));
  } catch (const ServingDoesNotFit& e) {
    r = io::serving_does_not_fit_report(s, e.what());
    emit(resolve_format(a.format) == "json" ? io::dump(r) : fmt::format("does not fit: {}\n", e.what()), a.out);
    return 0;
  }
  emit(resolve_format(a.format) == "json" ? io::dump(r) : serving_step_table(r), a.out);
  return 0;
}

int run_infer(const InferArgs& a) {
  Scenario s = io::load_scenario(a.scenario, a.sets);
  if (!s.inference) throw InputError({{"/kind", "\"training\"", "capsim infer needs an inference scenario", {}}});
  const auto cal = load_calibration(a.calibration);
  const io::CostModels costs(s.system, cal ? &*cal : nullptr);
  const CostModel& cost = costs.get();
  if (a.step_decodes >= 0 || a.step_context >= 0 || a.step_prompt >= 0 || a.step_prompt_cached >= 0)
    return run_infer_step(a, s, cost);
  json r;
  try {
  if (a.max_qps) {
    ServingSla sla;
    sla.ttft_p99_ms = a.ttft_p99_ms;
    sla.tpot_p99_ms = a.tpot_p99_ms;
    io::ProgressReporter progress("infer --max-qps", "probes");
    const double lo = max_qps(s, cost, sla, a.seed, progress.counter());
    progress.finish();
    Scenario probe = s;
    probe.inference->workload.mode = ServingWorkload::Mode::poisson;
    probe.inference->workload.qps = std::max(lo, 1e-6);
    r = io::serving_report(probe, simulate_serving_runs(probe, cost, a.seed));
    r["max_qps"] = {{"qps", lo}, {"ttft_p99_ms", a.ttft_p99_ms}, {"tpot_p99_ms", a.tpot_p99_ms}};
  } else {
    // The first run records the timeline: trace and utilisation over time.
    const std::vector<ServingResult> runs = simulate_serving_runs(s, cost, a.seed, true);
    r = io::serving_report(s, runs);
    if (!a.trace.empty()) io::write_file_atomic(a.trace, io::serving_trace(runs.front()));
  }
  } catch (const ServingDoesNotFit& e) {
    // "Does not fit" is an answer: the report says so, with the reason and the memory.
    r = io::serving_does_not_fit_report(s, e.what());
    emit(resolve_format(a.format) == "json" ? io::dump(r) : fmt::format("does not fit: {}\n", e.what()), a.out);
    return 0;
  }
  add_calibration(r, cal, &s.system.gpu);
  emit(resolve_format(a.format) == "json" ? io::dump(r) : serving_table(r), a.out);
  return 0;
}

json candidate_json(const SearchCandidate& c) {
  const TrainingPlan& t = c.plan;
  return {{"num_gpus", c.num_gpus},
          {"layout",
           {{"tp", t.tp}, {"pp", t.pp}, {"vpp", t.vpp.value_or(1)}, {"dp", t.dp}, {"cp", t.cp}, {"ep", t.ep},
            {"etp", t.etp.value_or(1)}, {"sp", t.sp}, {"zero", t.zero.value_or(0)}, {"micro_batch", t.micro_batch.value_or(1)},
            {"recompute", std::string(to_string(t.recompute.value_or(Recompute::none)))},
            {"schedule", std::string(to_string(t.schedule))},
            {"precision", std::string(to_string(t.precision))},
            {"ep_overlap", ep_overlap_on(t)},
            {"framework", std::string(to_string(framework_of(t)))},
            {"attention", std::string(to_string(attention_of(t)))}}},
          {"step_s", c.step_s},
          {"tokens_per_s", c.tokens_per_s},
          {"mfu", c.mfu},
          {"peak_memory_bytes", c.peak_memory_bytes},
          {"capacity_bytes", c.capacity_bytes},
          {"gpu_seconds_per_step", c.gpu_seconds_per_step}};
}

int run_search(const SearchArgs& a) {
  const Scenario s = io::load_scenario(a.scenario, a.sets);
  if (!s.training) throw InputError({{"/kind", "\"inference\"", "capsim search needs a training scenario", {}}});
  const auto cal = load_calibration(a.calibration);
  const io::CostModels costs(s.system, cal ? &*cal : nullptr);
  const CostModel& cost = costs.get();
  SearchOptions opt;
  opt.gpu_counts = a.gpus;
  opt.top_k = a.top;
  opt.rank_by_cost = a.rank == "cost";
  opt.schedules = a.schedules;
  opt.threads = a.threads > 0 ? a.threads : std::max(1u, std::thread::hardware_concurrency());
  io::ProgressReporter progress(s.id.empty() ? "search" : "search " + s.id, "layouts");
  opt.progress = progress.counter();
  const SearchResult r = search_training(s, cost, opt);
  json j;
  j["schema"] = "capsim-search-report/1";
  j["id"] = s.id;
  j["space"] = {{"gpu_counts", opt.gpu_counts.empty() ? std::vector<int64_t>{s.system.num_gpus} : opt.gpu_counts},
                {"tp", "powers of two up to gpus_per_node dividing heads"},
                {"cp", "powers of two keeping seq_len/cp >= 1024"},
                {"pp", "divisors of gpus/(tp*cp)"},
                {"vpp", "divisors of layers/pp"},
                {"micro_batch", "1.." + std::to_string(opt.max_micro_batch)},
                {"zero", opt.zero},
                {"recompute", {"none", "selective", "full"}},
                {"schedules", a.schedules ? json{"1f1b", "zb-h1", "dualpipe"} : json{"1f1b"}},
                {"ep_overlap", a.schedules && s.model.moe && !s.training->ep_overlap ? json{false, true}
                                                                                      : json{ep_overlap_on(*s.training)}}};
  j["counts"] = {{"enumerated", r.enumerated},
                 {"pruned_divisibility", r.pruned_divisibility},
                 {"pruned_memory", r.pruned_memory},
                 {"evaluated", r.evaluated},
                 {"feasible", r.feasible}};
  // --des-recheck N: the best N run through the discrete-event engine too, and those N
  // are ranked by its step time (it executes the schedule the analytical model prices),
  // so the table and the JSON give one answer; the rest keep the analytical order.
  const size_t recheck = std::min<size_t>(static_cast<size_t>(std::max<int64_t>(0, a.des_recheck)), r.top.size());
  std::vector<size_t> order(r.top.size());
  std::vector<double> des(r.top.size(), 0.0);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (recheck > 0) progress.phase("search: discrete-event re-check", "layouts", static_cast<int64_t>(recheck));
  for (size_t i = 0; i < recheck; ++i) {
    SystemSpec sys = s.system;
    sys.num_gpus = r.top[i].num_gpus;
    des[i] = des_step(s.model, sys, r.top[i].plan, cost).step.step_s;
    progress_add(progress.counter());
  }
  progress.finish();
  auto key = [&](size_t i) { return opt.rank_by_cost ? des[i] * static_cast<double>(r.top[i].num_gpus) : des[i]; };
  std::stable_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(recheck),
                   [&](size_t x, size_t y) { return key(x) < key(y); });
  json top = json::array();
  for (size_t i : order) {
    json c = candidate_json(r.top[i]);
    if (i < recheck) c["des_step_s"] = des[i];
    top.push_back(c);
  }
  j["top"] = top;
  if (recheck > 0)
    j["ranked_by"] = "the first " + std::to_string(recheck) + " by des_step_s" + (opt.rank_by_cost ? " x GPUs" : "") +
                     ", the rest by " + (opt.rank_by_cost ? "GPU-seconds per step" : "step_s");
  json pareto = json::array();
  for (const auto& c : r.pareto) pareto.push_back(candidate_json(c));
  j["pareto"] = pareto;
  add_calibration(j, cal, &s.system.gpu);
  std::string table = fmt::format("search {}: {} layouts enumerated, {} pruned by divisibility, {} by memory, {} costed\n",
                                  s.id, r.enumerated, r.pruned_divisibility, r.pruned_memory, r.evaluated);
  // Precision "auto": both precisions' layouts are ranked, so each row says which.
  const bool show_precision = s.training->precision_auto;
  table += std::string("  rank  gpus  tp pp vpp  dp cp ep zero mb recompute  schedule      step s   tokens/s   MFU   memory") +
           (show_precision ? "  prec" : "") + (recheck > 0 ? "    DES step s\n" : "\n");
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const size_t i = order[rank];
    const auto& c = r.top[i];
    const auto& t = c.plan;
    table += fmt::format("  {:>4} {:>5} {:>3} {:>2} {:>3} {:>3} {:>2} {:>2} {:>4} {:>2} {:<10} {:<10} {:>9.3f} {:>10.0f} {:>5.1f}% {:>8}", rank + 1,
                         c.num_gpus, t.tp, t.pp, t.vpp.value_or(1), t.dp, t.cp, t.ep, t.zero.value_or(0),
                         t.micro_batch.value_or(1), to_string(t.recompute.value_or(Recompute::none)), to_string(t.schedule),
                         c.step_s, c.tokens_per_s, 100 * c.mfu, gib(c.peak_memory_bytes));
    if (show_precision) table += fmt::format("  {:<4}", to_string(t.precision));
    table += i < recheck ? fmt::format("  {:>12.3f}\n", des[i]) : std::string(recheck > 0 ? "             -\n" : "\n");
  }
  if (recheck > 0)
    table += fmt::format("  the first {} re-checked with the discrete-event engine and ranked by its step time\n", recheck);
  table += fmt::format("  pareto front (GPUs, tokens/s, memory headroom): {} layouts\n", r.pareto.size());
  emit(resolve_format(a.format) == "json" ? io::dump(j) : table, a.out);
  return 0;
}

/// `capsim plan` with an RL goal: best per offer, every candidate, the skipped layouts.
std::string rl_plan_table(const io::PlanRequest& req, const RlPlan& plan) {
  const RlSpec& rl = *req.base.rl;
  const int64_t iterations = req.rl_goal.prompts / std::max<int64_t>(1, rl.prompts_per_step);
  std::string out = fmt::format("plan: {} on {}: {} prompts x {} samples = {} iterations of {} prompts, within {} days\n",
                                to_string(req.base.training->mode), req.base.model.name, req.rl_goal.prompts,
                                rl.group_size, iterations, rl.prompts_per_step, req.rl_goal.deadline_days);
  const std::string header = fmt::format("  {:<16} {:>5} {:<25} {:>5} {:>9} {:>7} {:>10} {:>12} {:<11} {:>10}  {}\n", "gpu", "gpus",
                                         "placement", "stale", "step s", "days", "GPU-hours", "cost USD", "bottleneck",
                                         "idle r/t", "train layout | rollout layout");
  auto row = [](const RlOption& o) {
    const TrainingPlan& t = o.train_layout;
    const InferencePlan& p = o.rollout_layout;
    const std::string placement = o.placement == RlSpec::Placement::split
                                      ? fmt::format("split {} roll + {} train", o.rollout_gpus, o.train_gpus)
                                      : std::string("colocated");
    return fmt::format("  {:<16} {:>5} {:<25} {:>5} {:>9.1f} {:>7.2f} {:>10.0f} {:>12.2f} {:<11} {:>4.0f}%/{:>3.0f}%  "
                       "tp {} pp {} dp {} cp {} zero {} mb {} {} | {} tp {} pp {} x {}{}\n",
                       o.gpu, o.num_gpus, placement, o.async_staleness, o.iteration.step_time_s, o.days, o.gpu_hours,
                       o.cost_usd, o.iteration.bottleneck, 100 * o.rollout_idle_share, 100 * o.train_idle_share, t.tp, t.pp,
                       t.dp, t.cp, t.zero.value_or(0), t.micro_batch.value_or(1),
                       to_string(t.recompute.value_or(Recompute::none)), p.profile.id, p.tp, p.pp, p.replicas,
                       o.feasible ? "" : "  (" + o.reason + ")");
  };
  if (plan.best.empty()) {
    out += "  no candidate runs: every layout was skipped\n";
  } else {
    out += plan.best.front().feasible
               ? "  best per offer, cheapest first:\n"
               : fmt::format("  no offer meets the deadline of {} days; the quickest per offer:\n", req.rl_goal.deadline_days);
    out += header;
    for (const auto& o : plan.best) out += row(o);
    out += fmt::format("  all {} candidates, those meeting the deadline first, cheapest first:\n", plan.candidates.size());
    out += header;
    for (const auto& o : plan.candidates) out += row(o);
  }
  if (!plan.skipped.empty()) {
    out += "  skipped:\n";
    for (const auto& s : plan.skipped) out += fmt::format("  {:>5} x {}\n", s.count, s.reason);
  }
  return out;
}

int run_plan(const std::string& file, const std::string& format, const std::string& out) {
  const io::PlanRequest req = io::load_plan(file);
  const CostModelFactory costs = [](const SystemSpec& s) -> std::unique_ptr<CostModel> {
    return std::make_unique<hw::RooflineCostModel>(s);
  };
  json r;
  std::string table;
  io::ProgressReporter progress("plan", req.rl ? "placements" : req.training ? "cluster searches" : "deployments");
  if (req.rl) {
    const RlPlan plan = plan_rl(req.base, req.offers, req.rl_goal, costs, std::max(1u, std::thread::hardware_concurrency()),
                                progress.counter());
    progress.finish();
    r = io::rl_plan_json(req, plan);
    table = rl_plan_table(req, plan);
  } else if (req.training) {
    const auto options = plan_training(req.base, req.offers, req.train_goal, costs, std::max(1u, std::thread::hardware_concurrency()),
                                       progress.counter());
    progress.finish();
    r = io::training_plan_json(req, options);
    table = fmt::format("plan: train {} on {:.3g} tokens\n  {:<16} {:>6} {:>9} {:>8} {:>10} {:>12} {:>10}  layout\n",
                        req.base.model.name, req.train_goal.tokens, "gpu", "gpus", "effective", "days", "GPU-hours",
                        "cost USD", "MWh");
    for (const auto& o : options) {
      if (o.layout.num_gpus == 0) {
        table += fmt::format("  {:<16} {}\n", o.gpu, o.reason);
        continue;
      }
      const auto& t = o.layout.plan;
      // Precision "auto": the layout's precision, which each offer's search chose.
      const std::string prec = req.base.training->precision_auto ? " " + std::string(to_string(t.precision)) : "";
      table += fmt::format("  {:<16} {:>6} {:>8.1f}% {:>8.1f} {:>10.3g} {:>12.3g} {:>10.3g}  tp {} pp {} dp {} cp {} zero {} mb {} {}{}{}\n",
                           o.gpu, o.layout.num_gpus, 100.0 * o.effective_fraction, o.days, o.gpu_hours, o.cost_usd,
                           o.energy_mwh, t.tp, t.pp, t.dp, t.cp,
                           t.zero.value_or(0), t.micro_batch.value_or(1), to_string(t.recompute.value_or(Recompute::none)),
                           prec, o.feasible ? "" : "  (" + o.reason + ")");
    }
  } else {
    const auto options = plan_serving(req.base, req.offers, req.serve_goal, costs,
                                      std::max(1u, std::thread::hardware_concurrency()), progress.counter());
    progress.finish();
    r = io::serving_plan_json(req, options);
    table = fmt::format("plan: serve {} at {} requests/s within P99 TTFT {} ms, TPOT {} ms\n  {:<16} {:>3} {:>3} {:>6} {:>8} {:>9} {:>8} {:>6} {:>10} {:>12}\n",
                        req.base.model.name, req.serve_goal.qps, req.serve_goal.sla.ttft_p99_ms, req.serve_goal.sla.tpot_p99_ms,
                        "gpu", "tp", "ep", "weights", "unit", "qps/unit", "units", "gpus", "USD/hour", "USD/M tokens");
    for (const auto& o : options) {
      const std::string unit = o.prefill > 0 ? fmt::format("{}P+{}D", o.prefill, o.decode) : "coloc";
      table += o.feasible ? fmt::format("  {:<16} {:>3} {:>3} {:>6} {:>8} {:>9.2f} {:>8} {:>6} {:>10.2f} {:>12.3f}\n", o.gpu, o.tp, o.ep,
                                        to_string(o.weight_dtype), unit, o.qps_per_replica, o.replicas,
                                        o.replicas * o.gpus_per_replica, o.usd_per_hour, o.usd_per_million_output_tokens)
                          : fmt::format("  {:<16} {:>3} {:>3} {:>6} {:>8}  {}\n", o.gpu, o.tp, o.ep, to_string(o.weight_dtype), unit,
                                        o.reason);
    }
  }
  emit(resolve_format(format) == "json" ? io::dump(r) : table, out);
  return 0;
}

std::atomic<bool> g_stop{false};
/// While a sweep runs its rows, the first SIGINT or SIGTERM asks it to stop after the rows
/// in flight (they are journaled); otherwise, and on a second signal, the process ends at
/// once with 128 + the signal, leaving no temporary file and no partial -o file.
std::atomic<bool> g_graceful{false};
volatile std::sig_atomic_t g_signal = SIGINT;
extern "C" void on_interrupt(int sig) {
  g_signal = sig;
  if (g_graceful.load() && !g_stop.exchange(true)) return;
  io::remove_pending_temp_file();
  if (io::progress_line_open()) (void)!::write(STDERR_FILENO, "\n", 1);
  static const char msg[] = "capsim: interrupted\n";
  (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
  ::_exit(128 + sig);
}

int run_sweep(const SweepArgs& a) {
  // Everything is checked before any row runs.
  const io::SweepSpec spec = io::load_sweep(a.file);
  const io::ShardSpec shard = io::resolve_shard(a.shard);
  io::SweepRun run;
  run.out = a.out;
  run.shard = shard;
  run.threads = a.threads > 0 ? a.threads : std::max(1u, std::thread::hardware_concurrency());
  run.progress = ::isatty(::fileno(stderr)) != 0;
  run.stop = &g_stop;
  const auto cal = load_calibration(a.calibration);
  run.calibration = cal ? &*cal : nullptr;
  struct Graceful {
    Graceful() { g_graceful.store(true); }
    ~Graceful() { g_graceful.store(false); }
  };
  const io::SweepSummary s = [&] {
    const Graceful while_rows_run;
    return io::run_sweep(spec, run);
  }();
  if (s.interrupted) {
    fmt::print(stderr, "capsim: interrupted after {} of {} rows; run the same command again to resume\n",
               s.ok + s.does_not_fit + s.failed, s.rows_this_shard);
    return 128 + g_signal;
  }
  fmt::print(stderr, "capsim: {} rows ({} ok, {} do not fit, {} failed, {} resumed) -> {}\n", s.rows_this_shard, s.ok,
             s.does_not_fit, s.failed,
             s.skipped_resumed, s.rows_file.string());
  return 0;
}

int run_merge(const std::vector<std::string>& parts, const std::string& out) {
  std::vector<std::filesystem::path> ps(parts.begin(), parts.end());
  io::merge_parts(ps, out);
  fmt::print(stderr, "capsim: merged {} parts -> {}\n", parts.size(), out);
  return 0;
}

int run_validate(const ValidateArgs& a) {
  std::vector<std::filesystem::path> files(a.files.begin(), a.files.end());
  const auto cal = load_calibration(a.calibration);
  // The baseline is read and checked before the run, so a bad one fails at once.
  json baseline;
  if (!a.baseline.empty()) {
    baseline = io::read_json_file(a.baseline);
    io::check_validation_report(baseline, a.baseline);
  }
  // Progress on a terminal: cases done of the file's, with rate and ETA; silent when piped.
  io::ProgressReporter reporter("validate", "cases");
  io::ValidationProgress progress;
  std::string current;
  if (reporter.active())
    progress = [&](const std::string& file, size_t done, size_t total) {
      // Called one case at a time (run_validation serialises the calls).
      if (file != current) {
        current = file;
        reporter.phase("validate " + file, "cases", static_cast<int64_t>(total));
      }
      reporter.counter()->done.store(static_cast<int64_t>(done));
    };
  json r = io::run_validation(files, cal ? &*cal : nullptr, std::max(1u, std::thread::hardware_concurrency()), progress,
                              io::ValidationWhatIf{a.only, a.sets});
  reporter.finish();
  add_calibration(r, cal);
  const bool as_json = resolve_format(a.format) == "json";
  std::string table = as_json ? "" : io::validation_table(r);
  for (const std::string& by : a.group_by) {
    const json g = io::group_errors(r, by);
    r["groups_by"][by] = g;
    if (!as_json) table += io::group_table(g, by);
  }
  if (!a.baseline.empty()) {
    std::string name = std::filesystem::path(a.baseline).filename().string();
    if (!a.only.empty()) {
      // Like for like: the baseline's cases that --only selects, not the whole file.
      json kept = json::array();
      for (const json& c : baseline["cases"]) {
        const std::string id = c.value("id", std::string());
        if (std::any_of(a.only.begin(), a.only.end(), [&](const std::string& g) { return io::glob_match(g, id); }))
          kept.push_back(c);
      }
      baseline["cases"] = std::move(kept);
      name += " (its cases --only selects)";
    }
    json cmp = io::compare_reports(r, baseline, a.group_by, a.baseline);
    if (!as_json) table += io::comparison_table(cmp, name);
    cmp["file"] = a.baseline;
    r["baseline"] = std::move(cmp);
  }
  emit(as_json ? io::dump(r) : table, a.out);
  return 0;
}

/// A release range as the table writes it: "releases 0.8.4-0.9.0" (an open bound empty).
std::string release_range_text(const json& versions) {
  return "releases " + versions.value("from", std::string()) + "-" + versions.value("to", std::string());
}

/// A knob's value for the table: the value, the in-process LLM class's where it differs,
/// each release range's ("releases -0.7.2: \"nccl\"") and each GPU rule ("h100/h200,
/// releases 0.8.4-0.9.0: 1024").
std::string knob_value_cell(const json& k) {
  std::string cell = k["value"].dump();
  if (k.contains("llm_class")) cell += " (LLM class " + k["llm_class"].dump() + ")";
  for (const json& r : k.value("by_release", json::array())) cell += "; " + release_range_text(r["versions"]) + ": " + r["value"].dump();
  if (!k.contains("by_gpu")) return cell;
  for (const json& r : k["by_gpu"]) {
    std::vector<std::string> when;
    std::string gpus;
    for (const json& g : r.value("gpus", json::array())) gpus += (gpus.empty() ? "" : "/") + g.get<std::string>();
    if (!gpus.empty()) when.push_back(gpus);
    if (r.contains("min_hbm_gib")) when.push_back(">= " + r["min_hbm_gib"].dump() + " GiB");
    std::string except;
    for (const json& g : r.value("except", json::array())) except += (except.empty() ? "" : "/") + g.get<std::string>();
    if (!except.empty()) when.push_back("not " + except);
    if (r.contains("versions")) when.push_back(release_range_text(r["versions"]));
    std::string w;
    for (const auto& x : when) w += (w.empty() ? "" : ", ") + x;
    cell += "; " + (w.empty() ? std::string("every GPU") : w) + ": " + r["value"].dump();
    if (r.contains("llm_class")) cell += " (LLM class " + r["llm_class"].dump() + ")";
  }
  return cell;
}

/// The engine profiles as a Markdown table: every knob, its value and its sources (the
/// table docs/engines.md carries).
std::string engines_table() {
  std::string out = "| profile | knob | value | sources | note |\n|---|---|---|---|---|\n";
  for (const auto& id : io::engine_profile_ids()) {
    const json doc = io::read_json_file(io::data_dir() / "engines" / (id + ".json"));
    io::engine_profile_from_json(doc, id);  // checked: every knob sourced
    for (auto k = doc["knobs"].begin(); k != doc["knobs"].end(); ++k) {
      // The knob's sources, then its release ranges' (each once).
      std::vector<std::string> names;
      auto add = [&](const json& list) {
        for (const auto& src : list)
          if (std::find(names.begin(), names.end(), src.get<std::string>()) == names.end()) names.push_back(src.get<std::string>());
      };
      add(k.value()["source"]);
      for (const json& r : k.value().value("by_release", json::array())) add(r["source"]);
      std::string sources;
      for (const std::string& src : names) {
        const std::string url = doc["sources"][src].value("url", std::string());
        sources += (sources.empty() ? "" : "; ") + (url.empty() ? src : "[" + src + "](" + url + ")");
      }
      std::string note = k.value().value("note", std::string());
      for (const json& r : k.value().value("by_release", json::array()))
        if (r.contains("note")) note += (note.empty() ? "" : "; ") + release_range_text(r["versions"]) + ": " + r["note"].get<std::string>();
      out += fmt::format("| {} | {} | {} | {} | {} |\n", id, k.key(), knob_value_cell(k.value()), sources, note);
    }
  }
  // The MoE kernel families the profiles name, each figure with its sources
  // (data/moe_kernels.json); a GPU or figure not listed takes the GPU preset's own.
  const json fams = io::read_json_file(io::data_dir() / "moe_kernels.json");
  out += "\n## MoE kernel families and their rates\n\nThis table is the rest of `capsim list engines` (data/moe_kernels.json). A family's "
         "figure for a GPU preset id or architecture replaces the GPU preset's fused-MoE (Triton) figure of the same "
         "kind; a figure not listed here falls back to the preset's.\n\n"
         "| family | gpu | figure | value | sources | note |\n|---|---|---|---|---|---|\n";
  for (const auto& name : io::moe_kernel_family_names()) {
    io::moe_kernel_family(name, "moe_kernels.json");  // checked: every figure sourced
    const json& fam = fams["families"][name];
    out += fmt::format("| {} | (every GPU) | label | {} |  | {} |\n", name, fam.value("label", std::string()), fam.value("note", std::string()));
    if (!fam.contains("rates")) continue;
    for (auto g = fam["rates"].begin(); g != fam["rates"].end(); ++g)
      for (auto f = g.value().begin(); f != g.value().end(); ++f) {
        if (!f.value().is_object()) {
          out += fmt::format("| {} | {} | {} | {} |  |  |\n", name, g.key(), f.key(), f.value().dump());
          continue;
        }
        std::string sources;
        for (const auto& src : f.value()["source"]) {
          const json& entry = fams["sources"][src.get<std::string>()];
          const std::string url = entry.value("url", std::string());
          sources += (sources.empty() ? "" : "; ") + (url.empty() ? src.get<std::string>() : "[" + src.get<std::string>() + "](" + url + ")");
        }
        // A figure by rows per expert lists its points: rows, then the fraction at each.
        const std::string value = f.value().contains("rows")
                                      ? "rows " + f.value()["rows"].dump() + ": " + f.value()["value"].dump()
                                      : f.value()["value"].dump();
        out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", name, g.key(), f.key(), value, sources,
                           f.value().value("note", std::string()));
      }
  }
  return out;
}

int run_list(const std::string& what) {
  if (what == "engines") {
    fmt::print("{}", engines_table());
    return 0;
  }
  const auto names = what == "gpus" ? io::gpu_preset_ids() : io::model_preset_names();
  for (const auto& n : names) fmt::print("{}\n", n);
  return 0;
}

}  // namespace capsim::cli

namespace {

/// Options several subcommands share.
void add_format(CLI::App* c, std::string& format) {
  c->add_option("--format", format, "table or json (default: table on a terminal, else json)")
      ->check(CLI::IsMember({"table", "json"}));
}
void add_out(CLI::App* c, std::string& out) {
  c->add_option("-o,--out", out, "Write the report to this file (atomically)");
}
void add_calibration_option(CLI::App* c, std::string& path) {
  c->add_option("--calibration", path, "Calibration profile (capsim calibrate fit) in front of the default cost model")
      ->check(CLI::ExistingFile);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace capsim;
  CLI::App app{"capsim: performance simulator and capacity planner for LLM training and inference on GPU clusters"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "capsim 0.1.0");

  cli::ModelArgs model_args;
  auto* model = app.add_subcommand("model", "Parameters, KV-cache bytes, FLOPs and layers of a model");
  model->add_option("model", model_args.name, "Preset name (see `capsim list models`) or path to a config.json")
      ->required();
  model->add_option("--seq-len", model_args.seq_len, "Sequence length for FLOPs per token")->check(CLI::PositiveNumber);
  add_format(model, model_args.format);
  add_out(model, model_args.out);

  cli::TrainArgs train_args;
  auto* train = app.add_subcommand("train", "Memory per GPU (and resolved layout) of a training scenario");
  add_calibration_option(train, train_args.calibration);
  train->add_option("scenario", train_args.scenario, "Scenario JSON file")->required();
  train->add_option("--set", train_args.sets, "Override a scenario key before validation: path=value")
      ->allow_extra_args(false);
  add_format(train, train_args.format);
  add_out(train, train_args.out);
  train->add_option("--engine", train_args.engine, "analytical (closed-form bubble) or des (executes the schedule)")
      ->check(CLI::IsMember({"analytical", "des"}));
  train->add_option("--trace", train_args.trace, "With --engine des: write a Chrome/Perfetto trace JSON here");
  train->add_flag("--ops", train_args.ops,
                  "Add each operator's time for one microbatch (forward, backward, recompute, share, rate)");

  cli::TrainArgs memory_args;
  auto* memory = app.add_subcommand("memory", "Memory per GPU of a training or serving scenario");
  memory->add_option("scenario", memory_args.scenario, "Scenario JSON file")->required();
  memory->add_option("--set", memory_args.sets, "Override a scenario key before validation: path=value")
      ->allow_extra_args(false);
  add_format(memory, memory_args.format);
  add_out(memory, memory_args.out);

  cli::InferArgs infer_args;
  auto* infer = app.add_subcommand("infer", "Serving latency percentiles and throughput of an inference scenario");
  add_calibration_option(infer, infer_args.calibration);
  infer->add_option("scenario", infer_args.scenario, "Scenario JSON file (kind inference)")->required();
  infer->add_option("--set", infer_args.sets, "Override a scenario key before validation: path=value")->allow_extra_args(false);
  auto* max_qps = infer->add_flag("--max-qps", infer_args.max_qps, "Find the highest Poisson arrival rate that meets the SLA");
  // The SLA only means something to --max-qps: alone it would be silently ignored.
  infer->add_option("--ttft-p99-ms", infer_args.ttft_p99_ms, "SLA for --max-qps: P99 time to first token (default 500)")
      ->check(CLI::PositiveNumber)
      ->needs(max_qps);
  infer->add_option("--tpot-p99-ms", infer_args.tpot_p99_ms, "SLA for --max-qps: P99 time per output token (default 50)")
      ->check(CLI::PositiveNumber)
      ->needs(max_qps);
  infer->add_option("--seed", infer_args.seed, "Seed for lengths and arrivals");
  infer->add_option("--trace", infer_args.trace, "Write a Chrome/Perfetto timeline of engine iterations here");
  // A count of sequences or tokens, at most a billion (far beyond any engine's batch, and
  // products of two such counts stay exact in the step's arithmetic).
  const CLI::Validator count(
      [](std::string& v) {
        const bool digits = !v.empty() && v.size() <= 10 && v.find_first_not_of("0123456789") == std::string::npos;
        return digits && std::stoll(v) <= 1000000000LL
                   ? std::string()
                   : "must be a whole number from 0 to 1000000000 (got " + v + ")";
      },
      "COUNT");
  infer->add_option("--step-decodes", infer_args.step_decodes,
                    "Instead of a run, the time of one engine iteration by part: sequences decoding in it")
      ->check(count);
  infer->add_option("--step-context", infer_args.step_context, "With --step-decodes: tokens each decode has cached")
      ->check(count);
  infer->add_option("--step-prompt", infer_args.step_prompt,
                    "Instead of a run, the time of one engine iteration by part: a prompt chunk of this many tokens")
      ->check(count);
  infer->add_option("--step-prompt-cached", infer_args.step_prompt_cached,
                    "With --step-prompt: prompt tokens already cached before the chunk (a later chunk of a long prompt)")
      ->check(count);
  add_format(infer, infer_args.format);
  add_out(infer, infer_args.out);

  cli::SearchArgs search_args;
  auto* search = app.add_subcommand("search", "Every training layout for the scenario's model, GPU and batch, ranked");
  add_calibration_option(search, search_args.calibration);
  search->add_option("scenario", search_args.scenario, "Training scenario (model, system, global batch, seq_len)")->required();
  search->add_option("--set", search_args.sets, "Override a scenario key before validation: path=value")->allow_extra_args(false);
  search->add_option("--gpus", search_args.gpus, "GPU counts to try (default: the scenario's)")->delimiter(',');
  search->add_option("--top", search_args.top, "How many layouts to list");
  search->add_option("--rank", search_args.rank, "step (time per step) or cost (GPU-seconds per step)")
      ->check(CLI::IsMember({"step", "cost"}));
  search->add_flag("--schedules", search_args.schedules, "Also try ZB-H1 and DualPipe pipeline schedules and, for MoE models, Megatron-Core's expert-parallel overlap");
  search->add_option("--threads", search_args.threads, "Worker threads, at most 1024 (default: all cores)")
      ->check(CLI::Range(0u, cli::kMaxThreads));
  search->add_option("--des-recheck", search_args.des_recheck, "Re-check the best N with the discrete-event engine");
  add_format(search, search_args.format);
  add_out(search, search_args.out);

  cli::SweepArgs sweep_args;
  auto* sweep = app.add_subcommand("sweep", "Run a grid of scenarios (a base and axes) on all cores into JSONL or CSV rows");
  add_calibration_option(sweep, sweep_args.calibration);
  sweep->add_option("file", sweep_args.file, "Sweep file (base scenario and axes)")->required()->check(CLI::ExistingFile);
  sweep->add_option("-o,--out", sweep_args.out, "Rows file, .jsonl or .csv (a .summary.json is written beside it)")->required();
  sweep->add_option("--shard", sweep_args.shard,
                    "index/count of this machine's share (default from SLURM_ARRAY_TASK_ID/COUNT or JOB_COMPLETION_INDEX "
                    "with CAPSIM_SHARD_COUNT)");
  sweep->add_option("--threads", sweep_args.threads, "Worker threads, at most 1024 (default: all cores)")
      ->check(CLI::Range(0u, cli::kMaxThreads));

  std::vector<std::string> merge_parts;
  std::string merge_out;
  auto* merge = app.add_subcommand("merge", "Join sweep parts after checking they cover one grid");
  merge->add_option("parts", merge_parts, "Part files (each with its .summary.json)")->required();
  merge->add_option("-o,--out", merge_out, "Merged rows file")->required();

  std::string plan_file, plan_format, plan_out;
  auto* plan = app.add_subcommand("plan", "Cheapest cluster to train a token budget in time, deployment to serve traffic within an SLA, or cluster and placement to run RL post-training by a deadline");
  plan->add_option("file", plan_file, "Plan file (model, GPU offers with prices, training, serving or rl goal)")->required()->check(CLI::ExistingFile);
  add_format(plan, plan_format);
  add_out(plan, plan_out);

  cli::ValidateArgs validate_args;
  auto* validate = app.add_subcommand("validate", "Predict published measurements and print the error per case and overall");
  add_calibration_option(validate, validate_args.calibration);
  validate->add_option("files", validate_args.files, "Validation files (capsim-validation/1)")->required()->check(CLI::ExistingFile);
  validate->add_option("--group-by", validate_args.group_by,
                       "Error table per group: source (case id up to its first '-'), engine, gpu, gpus (the job's GPU count: 1, 2-8, 9-64, 65-512, 513-4096, 4097+), model, mode")
      ->check(CLI::IsMember({"source", "engine", "gpu", "gpus", "model", "mode"}))
      ->delimiter(',');
  validate->add_option("--only", validate_args.only,
                       "What-if: only the cases whose id matches one of these globs (* any characters, ? one)")
      ->allow_extra_args(false);
  validate->add_option("--set", validate_args.sets,
                       "What-if: override a key of each selected case before it runs: path=value from the case's root "
                       "(training.attention=flash-triton); a case without the path's first key is left as it is")
      ->allow_extra_args(false);
  validate->add_option("--baseline", validate_args.baseline,
                       "An earlier `validate --format json` report: print what moved against it (per file and metric, per group, per case)");
  add_format(validate, validate_args.format);
  add_out(validate, validate_args.out);

  auto* calibrate = app.add_subcommand("calibrate", "Fit microbenchmark measurements into a profile; import nccl-tests logs");
  calibrate->require_subcommand(1);
  cli::CalibrateArgs fit_args, import_args, show_args, shapes_args, compare_args;
  auto* cal_fit = calibrate->add_subcommand("fit", "Fit raw measurement files into a calibration profile");
  cal_fit->add_option("raw", fit_args.inputs, "Raw measurement files (capsim-calibrate or import-nccl-tests output)")
      ->required()
      ->check(CLI::ExistingFile);
  cal_fit->add_option("-o,--out", fit_args.out, "Profile JSON to write (atomically)")->required();
  auto* cal_import = calibrate->add_subcommand("import-nccl-tests", "nccl-tests output (text or -J JSON) into a raw measurement file");
  cal_import->add_option("logs", import_args.inputs, "nccl-tests logs")->required()->check(CLI::ExistingFile);
  cal_import->add_option("-o,--out", import_args.out, "Raw measurement file to write (atomically)")->required();
  cal_import->add_option("--op", import_args.op, "The collective, when a log does not say")
      ->check(CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}));
  auto* cal_show = calibrate->add_subcommand("show", "What a profile measured, its fits and residuals, and where it extrapolates");
  cal_show->add_option("profile", show_args.inputs, "Profile JSON")->required()->check(CLI::ExistingFile);
  add_format(cal_show, show_args.format);

  auto* cal_shapes = calibrate->add_subcommand("shapes", "The GEMM shapes a scenario costs, for capsim-calibrate --gemm-shapes");
  cal_shapes->add_option("scenario", shapes_args.inputs, "Scenario JSON file")->required()->check(CLI::ExistingFile);
  cal_shapes->add_option("-o,--out", shapes_args.out, "Write the shapes here (atomically) instead of stdout");

  auto* cal_compare = calibrate->add_subcommand("compare", "How far the default (uncalibrated) model is from raw measurements");
  cal_compare->add_option("raw", compare_args.inputs, "Raw measurement files")->required()->check(CLI::ExistingFile);
  cal_compare->add_option("--gpu", compare_args.gpu, "GPU preset the measurements ran on (capsim list gpus)")->required();
  cal_compare->add_option("--gpus-per-node", compare_args.gpus_per_node, "GPUs per node (default 8)")->check(CLI::PositiveNumber);
  cal_compare->add_option("--nic-gbps", compare_args.nic_gbps, "Scale-out line rate per GPU, Gb/s (default 400)")->check(CLI::PositiveNumber);
  add_format(cal_compare, compare_args.format);

  cli::CalibrateArgs steps_args;
  auto* cal_steps = calibrate->add_subcommand(
      "serving-steps", "An engine's step times by batch, recovered from a serving benchmark's per-request token times");
  cal_steps->add_option("result", steps_args.inputs, "benchmark_serving.py --save-result JSON (ttfts, itls, input_lens)")
      ->required()
      ->expected(1)
      ->check(CLI::ExistingFile);
  cal_steps->add_option("--scenario", steps_args.scenario, "Inference scenario of the same deployment: its predicted step times beside")
      ->check(CLI::ExistingFile);
  cal_steps->add_option("--bucket", steps_args.bucket, "Running requests per row of decode-only steps (default 8)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cal_steps->add_option("--calibration", steps_args.calibration,
                        "Calibration profile (capsim calibrate fit) in front of the default model for --scenario's prices")
      ->check(CLI::ExistingFile);
  cal_steps->add_option("--run", steps_args.run, "The run to read from a file of several, one JSON object per line (1-based)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  add_format(cal_steps, steps_args.format);
  add_out(cal_steps, steps_args.out);

  std::string list_what;
  auto* list = app.add_subcommand("list", "List presets");
  list->add_option("what", list_what, "gpus, models or engines (the engine profiles' knobs with their sources)")
      ->required()
      ->check(CLI::IsMember({"gpus", "models", "engines"}));

  // An unknown subcommand is named, with the valid ones (CLI11 would only say that an
  // argument was not expected).
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      const std::string n = io::nearest(argv[1], names);
      std::string valid;
      for (const auto& name : names) valid += (valid.empty() ? "" : ", ") + name;
      fmt::print(stderr, "capsim: unknown subcommand \"{}\"; valid: {}{}\n", argv[1],
                 valid, n.empty() ? "" : "; did you mean \"" + n + "\"?");
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other command-line error is a usage error, 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  // Ctrl-C and SIGTERM end every command cleanly (see on_interrupt); a write beyond the
  // file size limit fails with EFBIG and is reported instead of killing the process.
  struct sigaction sa {};
  sa.sa_handler = cli::on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGXFSZ, SIG_IGN);
  // Messages go out with fputs: one that cannot be written must not end the process.
  const auto say = [](const std::string& text) { std::fputs(text.c_str(), stderr); };
  try {
    const int rc = [&] {
      if (*model) return cli::run_model(model_args);
      if (*train) return cli::run_train(train_args);
      if (*plan) return cli::run_plan(plan_file, plan_format, plan_out);
      if (*sweep) return cli::run_sweep(sweep_args);
      if (*merge) return cli::run_merge(merge_parts, merge_out);
      if (*search) return cli::run_search(search_args);
      if (*infer) return cli::run_infer(infer_args);
      if (*validate) return cli::run_validate(validate_args);
      if (*memory) return cli::run_memory(memory_args);
      if (*list) return cli::run_list(list_what);
      if (*cal_fit) return cli::run_calibrate_fit(fit_args);
      if (*cal_import) return cli::run_calibrate_import(import_args);
      if (*cal_show) return cli::run_calibrate_show(show_args);
      if (*cal_shapes) return cli::run_calibrate_shapes(shapes_args);
      if (*cal_compare) return cli::run_calibrate_compare(compare_args);
      if (*cal_steps) return cli::run_calibrate_serving_steps(steps_args);
      return 0;
    }();
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) cli::stdout_failed();
    return rc;
  } catch (const InputError& e) {
    say(fmt::format("capsim: {} problem{} in the input:\n", e.issues().size(), e.issues().size() == 1 ? "" : "s"));
    for (const auto& i : e.issues()) say(fmt::format("  {}\n", format_issue(i)));
    return 1;
  } catch (const std::exception& e) {
    if (std::ferror(stdout)) {
      // fmt::print to stdout throws when the write fails: the same as a failed report.
      say(fmt::format("capsim: 1 problem in the input:\n  standard output: cannot write the report: {}; write it to a file with -o\n",
                      e.what()));
      return 1;
    }
    say(fmt::format("capsim: internal error: {}\n", e.what()));
    return 70;
  }
}
