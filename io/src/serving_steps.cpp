#include "capsim/io/serving_steps.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "capsim/core/serving.hpp"
#include "capsim/io/json_read.hpp"

namespace capsim::io {

using nlohmann::json;

namespace {

/// Most problems reported for one key; the rest are counted in one more issue.
constexpr size_t kIssuesPerKey = 20;

/// Collects the issues of one key, up to kIssuesPerKey, counting the rest.
struct KeyIssues {
  std::vector<Issue>& out;
  std::string pointer;
  size_t count = 0;
  void add(Issue i) {
    if (++count <= kIssuesPerKey) out.push_back(std::move(i));
  }
  ~KeyIssues() {
    if (count > kIssuesPerKey)
      out.push_back({pointer, "", fmt::format("{} more entries break the same rules", count - kIssuesPerKey), ""});
  }
};

bool non_negative_number(const json& v) { return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0; }

/// Quantile q of sorted values, nearest rank.
double quantile(const std::vector<double>& sorted, double q) {
  return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5)];
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile(v, 0.5);
}

}  // namespace

BenchmarkRequests benchmark_requests_from_json(const json& doc, const std::string& origin) {
  std::vector<Issue> issues;
  const std::string at = origin + "#";
  if (!doc.is_object())
    throw InputError({{at, brief(doc), "must be a JSON object (a benchmark_serving.py --save-result file)", ""}});
  auto array_of = [&](const char* key, const char* what) -> const json* {
    const auto it = doc.find(key);
    if (it == doc.end()) {
      issues.push_back({at + "/" + key, "", fmt::format("missing: {} per request", what),
                        "save the run with vLLM's benchmark_serving.py --save-result (--save-detailed too in later "
                        "releases) or SGLang's bench_serving.py --output-details"});
      return nullptr;
    }
    if (!it->is_array()) {
      issues.push_back({at + "/" + key, brief(*it), fmt::format("must be an array of {}, one per request", what), ""});
      return nullptr;
    }
    return &*it;
  };
  const json* ttfts = array_of("ttfts", "times to first token (seconds)");
  const json* itls = array_of("itls", "arrays of inter-token gaps (seconds)");
  const json* lens = array_of("input_lens", "prompt lengths (tokens)");
  BenchmarkRequests out;
  if (const auto d = doc.find("duration"); d != doc.end()) {
    if (d->is_number() && std::isfinite(d->get<double>()) && d->get<double>() > 0) out.duration_s = d->get<double>();
    else issues.push_back({at + "/duration", brief(*d), "must be the benchmark's length in seconds, above 0", ""});
  }
  if (ttfts && ttfts->empty()) issues.push_back({at + "/ttfts", "[]", "holds no request", ""});
  const size_t n = ttfts ? ttfts->size() : 0;
  for (const auto& [key, arr] : {std::pair<const char*, const json*>{"itls", itls}, {"input_lens", lens}})
    if (ttfts && arr && arr->size() != n)
      issues.push_back({at + "/" + key, fmt::format("{} entries", arr->size()),
                        fmt::format("must have one entry per request of /ttfts ({})", n), ""});
  if (!issues.empty()) throw InputError(issues);
  out.requests.resize(n);
  {
    KeyIssues bad{issues, at + "/ttfts"};
    for (size_t i = 0; i < n; ++i) {
      const json& v = (*ttfts)[i];
      if (!non_negative_number(v)) bad.add({fmt::format("{}/ttfts/{}", at, i), brief(v), "must be a time in seconds, 0 or more", ""});
      else out.requests[i].ttft_s = v.get<double>();
    }
  }
  {
    KeyIssues bad{issues, at + "/itls"};
    for (size_t i = 0; i < n; ++i) {
      const json& r = (*itls)[i];
      if (!r.is_array()) {
        bad.add({fmt::format("{}/itls/{}", at, i), brief(r), "must be an array of gaps in seconds", ""});
        continue;
      }
      out.requests[i].itl_s.reserve(r.size());
      for (size_t j = 0; j < r.size(); ++j) {
        if (!non_negative_number(r[j])) {
          bad.add({fmt::format("{}/itls/{}/{}", at, i, j), brief(r[j]), "must be a gap in seconds, 0 or more", ""});
          continue;
        }
        out.requests[i].itl_s.push_back(r[j].get<double>());
      }
    }
  }
  {
    KeyIssues bad{issues, at + "/input_lens"};
    for (size_t i = 0; i < n; ++i) {
      const json& v = (*lens)[i];
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        bad.add({fmt::format("{}/input_lens/{}", at, i), brief(v), "must be a whole number of tokens, 0 or more", ""});
      else out.requests[i].prompt_tokens = v.get<int64_t>();
    }
  }
  if (!issues.empty()) throw InputError(issues);
  return out;
}

BenchmarkRequests read_benchmark_requests(const std::filesystem::path& path, std::optional<size_t> run) {
  const std::string text = read_text_file(path, kMaxDataFileBytes);
  const std::string origin = path.string();
  // One JSON document, or JSON Lines: every non-empty line a document of its own.
  std::vector<json> runs;
  try {
    runs.push_back(parse_json(text, origin));
  } catch (const InputError& whole) {
    size_t line_no = 0, start = 0;
    try {
      while (start <= text.size()) {
        const size_t end = std::min(text.find('\n', start), text.size());
        ++line_no;
        const std::string_view line(text.data() + start, end - start);
        if (line.find_first_not_of(" \t\r") != std::string_view::npos)
          runs.push_back(parse_json(line, fmt::format("{} line {}", origin, line_no)));
        start = end + 1;
      }
    } catch (const InputError&) {
      throw whole;  // neither one document nor one per line: the whole file's error
    }
    if (runs.size() < 2) throw whole;
  }
  if (runs.size() == 1) {
    if (run && *run != 1)
      throw InputError({{"--run", std::to_string(*run), "the file holds one run", "drop --run or give --run 1"}});
    return benchmark_requests_from_json(runs.front(), origin);
  }
  if (!run || *run < 1 || *run > runs.size())
    throw InputError({{origin, fmt::format("{} runs", runs.size()),
                       "holds several runs, one JSON object per line (SGLang bench_serving appends each run)",
                       fmt::format("pick one with --run K (1-{})", runs.size())}});
  return benchmark_requests_from_json(runs[*run - 1], fmt::format("{} run {}", origin, *run));
}

json serving_steps_report(const BenchmarkRequests& b, const StepTimeline& t, int64_t bucket,
                          const std::vector<double>* predicted_s) {
  const int64_t width = std::max<int64_t>(1, bucket);
  json r;
  r["schema"] = "capsim-serving-steps/1";
  r["requests"] = b.requests.size();
  r["placed"] = t.placed;
  r["steps"] = t.step_s.size();
  double covered = 0;
  for (double s : t.step_s) covered += s;
  r["steps_s"] = covered;
  if (b.duration_s) r["duration_s"] = *b.duration_s;
  r["bucket"] = width;
  json notes = json::array();
  size_t gaps = 0, tiny = 0;
  for (const StreamedRequest& q : b.requests)
    for (double g : q.itl_s) ++gaps, tiny += g < 1e-4 ? 1 : 0;
  if (t.placed == 0)
    notes.push_back("no request was placed: none has enough gaps that match another's (docs/calibration.md)");
  if (t.truncated)
    notes.push_back(
        "the search for positions stopped at its limit of comparisons: the gaps are too alike to tell positions apart "
        "quickly, and the requests not placed by then are left out");
  if (t.placed > 0 && t.placed < b.requests.size())
    notes.push_back(fmt::format(
        "{} of {} requests were not placed ({}); the steps hold their tokens without counting them",
        b.requests.size() - t.placed, b.requests.size(),
        t.truncated ? "the search stopped first, or too few gaps to match" : "too few gaps to match"));
  if (gaps > 0 && static_cast<double>(tiny) > 0.2 * static_cast<double>(gaps))
    notes.push_back(fmt::format(
        "{:.0f}% of the gaps are under 0.1 ms: the server streamed several tokens at once (multi-step scheduling or a "
        "stream interval), so a recovered step is a burst of iterations, not one",
        100.0 * static_cast<double>(tiny) / static_cast<double>(gaps)));
  r["notes"] = notes;

  auto predicted = [&](size_t s) { return predicted_s ? (*predicted_s)[s] : std::nan(""); };
  auto add_prediction = [&](json& row, const std::vector<size_t>& steps, double measured_median) {
    std::vector<double> p;
    for (size_t s : steps)
      if (std::isfinite(predicted(s))) p.push_back(predicted(s));
    if (p.empty()) return;
    const double m = median_of(p);
    row["predicted_median_ms"] = m * 1e3;
    row["predicted_steps"] = p.size();
    row["error"] = m / measured_median - 1.0;
  };
  // Steps that finished no placed prompt, by running requests.
  std::map<int64_t, std::vector<size_t>> by_batch;
  std::map<int64_t, std::vector<size_t>> by_prompts;
  for (size_t s = 0; s < t.step_s.size(); ++s) {
    if (t.first_tokens[s] > 0) by_prompts[t.first_tokens[s]].push_back(s);
    else if (t.decodes[s] > 0) by_batch[t.decodes[s] / width].push_back(s);
  }
  json decode_rows = json::array();
  for (const auto& [k, steps] : by_batch) {
    std::vector<double> ms;
    double decodes = 0, context = 0;
    for (size_t s : steps) {
      ms.push_back(t.step_s[s] * 1e3);
      decodes += static_cast<double>(t.decodes[s]);
      context += t.decode_context[s];
    }
    std::sort(ms.begin(), ms.end());
    json row = {{"decodes_from", k * width},
                {"decodes_to", k * width + width - 1},
                {"steps", steps.size()},
                {"median_ms", quantile(ms, 0.5)},
                {"p10_ms", quantile(ms, 0.1)},
                {"p90_ms", quantile(ms, 0.9)},
                {"mean_decodes", decodes / static_cast<double>(steps.size())},
                {"mean_context", context / decodes}};
    add_prediction(row, steps, quantile(ms, 0.5) * 1e-3);
    decode_rows.push_back(std::move(row));
  }
  r["decode_steps"] = decode_rows;
  json prompt_rows = json::array();
  for (const auto& [k, steps] : by_prompts) {
    std::vector<double> ms, tokens, decodes;
    for (size_t s : steps) {
      ms.push_back(t.step_s[s] * 1e3);
      tokens.push_back(static_cast<double>(t.prompt_tokens[s]));
      decodes.push_back(static_cast<double>(t.decodes[s]));
    }
    std::sort(ms.begin(), ms.end());
    json row = {{"prompts", k},
                {"steps", steps.size()},
                {"median_ms", quantile(ms, 0.5)},
                {"p10_ms", quantile(ms, 0.1)},
                {"p90_ms", quantile(ms, 0.9)},
                {"median_prompt_tokens", median_of(tokens)},
                {"median_decodes", median_of(decodes)}};
    add_prediction(row, steps, quantile(ms, 0.5) * 1e-3);
    prompt_rows.push_back(std::move(row));
  }
  r["prompt_steps"] = prompt_rows;
  return r;
}

json analyze_serving_steps(const BenchmarkRequests& b, int64_t bucket, const Scenario* s, const CostModel* cost,
                           ProgressCounter* progress) {
  const StepTimeline t = recover_steps(b.requests, {}, progress);
  std::vector<double> predicted, gpu, eager;
  std::string note;
  if (s && cost) {
    // Each step as the model would run it: its decodes at their cached tokens, and the
    // prompts it finished as whole prompts of equal share (where they fit one step).
    std::vector<IterationBatch> batches(t.step_s.size());
    for (size_t i = 0; i < t.step_s.size(); ++i) {
      IterationBatch& batch = batches[i];
      batch.decodes = t.decodes[i];
      batch.decode_context = t.decode_context[i];
      const int64_t k = t.first_tokens[i];
      for (int64_t j = 0; j < k; ++j) batch.prefills.push_back({(t.prompt_tokens[i] + j) / k, 0, true});
      if (batch.tokens() == 0) batch.decodes = 1;  // a step no placed request ran: priced, then dropped below
    }
    try {
      const std::vector<ServingStep> steps = serving_steps(*s, *cost, batches);
      predicted.resize(steps.size());
      gpu.resize(steps.size());
      eager.resize(steps.size());
      for (size_t i = 0; i < steps.size(); ++i) {
        const bool known = t.decodes[i] + t.first_tokens[i] > 0 && batches[i].tokens() <= steps[i].max_batched_tokens;
        predicted[i] = known ? steps[i].parts.seconds : std::nan("");
        gpu[i] = known ? steps[i].parts.gpu : std::nan("");
        eager[i] = steps[i].parts.eager_host;
      }
      // A prompt over the step budget runs in chunks: the steps of its earlier chunks
      // produce no first token and fall among the decode-only steps.
      const int64_t budget = steps.empty() ? 0 : steps.front().max_batched_tokens;
      size_t split = 0;
      for (const StreamedRequest& q : b.requests) split += budget > 0 && q.prompt_tokens > budget ? 1 : 0;
      if (split > 0)
        note = fmt::format(
            "{} prompts exceed the deployment's step budget of {} tokens and ran in chunks: the steps of their earlier "
            "chunks produced no first token and are counted among the decode-only steps (their p90 shows them), and a "
            "step that finished such a prompt is not predicted",
            split, budget);
    } catch (const ServingDoesNotFit& e) {
      note = fmt::format("the scenario's deployment does not fit: {}; no step is predicted", e.what());
    }
  }
  json r = serving_steps_report(b, t, bucket, predicted.empty() ? nullptr : &predicted);
  if (s) r["scenario"] = s->id;
  if (!note.empty()) r["notes"].push_back(note);
  if (!predicted.empty()) r["fit"] = fit_step_overhead(t, gpu, predicted, &eager, s->model.layers);
  return r;
}

json fit_step_overhead(const StepTimeline& t, const std::vector<double>& gpu_s, const std::vector<double>& predicted_s,
                       const std::vector<double>* eager_s, int64_t layers) {
  std::vector<size_t> steps;
  std::vector<double> residual;
  for (size_t s = 0; s < t.step_s.size() && s < gpu_s.size() && s < predicted_s.size(); ++s)
    if (t.first_tokens[s] == 0 && t.decodes[s] > 0 && std::isfinite(gpu_s[s]) && std::isfinite(predicted_s[s])) {
      steps.push_back(s);
      residual.push_back(t.step_s[s] - gpu_s[s]);
    }
  if (steps.empty()) return nullptr;
  const double host = std::max(0.0, median_of(residual));
  std::vector<double> before, after;
  for (size_t s : steps) {
    before.push_back(std::abs(predicted_s[s] / t.step_s[s] - 1.0));
    after.push_back(std::abs((gpu_s[s] + host) / t.step_s[s] - 1.0));
  }
  json out = {{"step_overhead_ms", host * 1e3},
              {"steps", steps.size()},
              {"median_abs_error_before", median_of(before)},
              {"median_abs_error_after", median_of(after)}};
  if (!eager_s || layers <= 0) return out;
  // Steps that finished prompts without a CUDA graph: the host time of their layers.
  std::vector<size_t> eager;
  std::vector<double> per_layer;
  for (size_t s = 0; s < t.step_s.size() && s < eager_s->size() && s < gpu_s.size(); ++s)
    if (t.first_tokens[s] > 0 && (*eager_s)[s] > 0 && std::isfinite(gpu_s[s]) && std::isfinite(predicted_s[s])) {
      eager.push_back(s);
      per_layer.push_back((t.step_s[s] - host - (gpu_s[s] - (*eager_s)[s])) / static_cast<double>(layers));
    }
  if (eager.empty()) return out;
  const double layer_s = std::max(0.0, median_of(per_layer));
  std::vector<double> e_before, e_after;
  for (size_t s : eager) {
    e_before.push_back(std::abs(predicted_s[s] / t.step_s[s] - 1.0));
    const double fitted = gpu_s[s] - (*eager_s)[s] + layer_s * static_cast<double>(layers) + host;
    e_after.push_back(std::abs(fitted / t.step_s[s] - 1.0));
  }
  out["eager_host_us_per_layer"] = layer_s * 1e6;
  out["eager_steps"] = eager.size();
  out["eager_median_abs_error_before"] = median_of(e_before);
  out["eager_median_abs_error_after"] = median_of(e_after);
  return out;
}

}  // namespace capsim::io
