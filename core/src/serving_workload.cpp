#include "serving_internal.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

namespace capsim::detail {

namespace {

/// ShareGPT prompt lengths as serving benchmarks sample them (vLLM benchmark_serving and
/// sglang.bench_serving: first human turn, 4..1024 tokens): SGLang's Prometheus histogram
/// of prompt tokens over a 1,003-request ShareGPT benchmark run with a Llama-3 tokenizer
/// (sglang PR #1853, sglang:request_prompt_tokens_bucket; cumulative counts at le = 20, 50,
/// 100, 200, 500, 1000, 2000: 244, 392, 481, 570, 846, 1001, 1003). Bin edges in tokens; the
/// first bin starts at the benchmarks' 4-token minimum, the last ends at their 1,024-token
/// cap plus the BOS token.
constexpr std::array<double, 8> kShareGptPromptEdges = {4, 20, 50, 100, 200, 500, 1000, 1025};
constexpr std::array<double, 8> kShareGptPromptCumulative = {0, 244, 392, 481, 570, 846, 1001, 1003};

/// The histogram's quantile at u in (0, 1), linear inside each bin.
double sharegpt_prompt_quantile(double u) {
  const double total = kShareGptPromptCumulative.back();
  for (size_t i = 1; i < kShareGptPromptEdges.size(); ++i) {
    const double hi = kShareGptPromptCumulative[i] / total;
    if (u <= hi || i + 1 == kShareGptPromptEdges.size()) {
      const double lo = kShareGptPromptCumulative[i - 1] / total;
      const double f = hi > lo ? std::clamp((u - lo) / (hi - lo), 0.0, 1.0) : 0.0;
      return kShareGptPromptEdges[i - 1] + f * (kShareGptPromptEdges[i] - kShareGptPromptEdges[i - 1]);
    }
  }
  return kShareGptPromptEdges.back();
}

/// Its mean (uniform inside each bin), ~242 tokens: the histogram is scaled to a case's mean.
double sharegpt_prompt_mean() {
  double sum = 0;
  for (size_t i = 1; i < kShareGptPromptEdges.size(); ++i)
    sum += (kShareGptPromptCumulative[i] - kShareGptPromptCumulative[i - 1]) * 0.5 *
           (kShareGptPromptEdges[i] + kShareGptPromptEdges[i - 1]);
  return sum / kShareGptPromptCumulative.back();
}

/// Token lengths drawn from a distribution with our own transforms of a 64-bit engine (so
/// every platform draws the same numbers). `prompt` selects the ShareGPT prompt histogram.
int64_t draw_length(const LengthDist& d, std::mt19937_64& rng, bool prompt) {
  const double u = (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // (0, 1)
  switch (d.kind) {
    case LengthDist::Kind::fixed: return std::max<int64_t>(1, std::llround(d.mean));
    case LengthDist::Kind::uniform:
      return std::max<int64_t>(1, static_cast<int64_t>(std::floor(d.min + u * (d.max - d.min + 1.0))));
    case LengthDist::Kind::sharegpt:
      // Prompts follow the benchmark histogram scaled to the requested mean. For replies
      // only means are published; we take the maximum-entropy positive distribution,
      // exponential with that mean, clipped to [4, 16 x mean] tokens.
      if (prompt) return std::max<int64_t>(4, std::llround(sharegpt_prompt_quantile(u) * d.mean / sharegpt_prompt_mean()));
      return std::clamp<int64_t>(std::llround(-d.mean * std::log(u)), 4, std::llround(16.0 * d.mean));
  }
  return 1;
}

}  // namespace

DrawnWorkload generate_requests(const ServingWorkload& w, uint64_t seed) {
  DrawnWorkload drawn;
  std::vector<RequestResult>& requests = drawn.requests;
  std::mt19937_64 rng(seed);
  const bool traced = w.mode == ServingWorkload::Mode::trace;
  const int64_t n = traced ? static_cast<int64_t>(w.trace.size()) : w.num_requests;
  requests.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < requests.size(); ++i) {
    auto& r = requests[i];
    r.input = traced ? w.trace[i].input_tokens : draw_length(w.input_tokens, rng, true);
    r.output = traced ? w.trace[i].output_tokens : draw_length(w.output_tokens, rng, false);
    // The step budget without chunked prefill covers a whole request: a preempted sequence
    // comes back as a prompt of its input and the tokens it had made (vLLM V0 sizes it by
    // max_model_len, which no request exceeds).
    drawn.longest = std::max(drawn.longest, r.input + r.output);
  }
  // Arrivals: all at once (offline), Poisson at qps, or issued by a closed loop.
  double clock = 0;
  for (auto& r : requests) {
    if (w.mode == ServingWorkload::Mode::poisson && w.qps > 0) {
      const double u = (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
      clock += -std::log(u) / w.qps;
    }
    r.arrival = w.mode == ServingWorkload::Mode::poisson ? clock : 0.0;
  }
  if (traced)
    for (size_t i = 0; i < requests.size(); ++i) requests[i].arrival = w.trace[i].arrival_s;
  return drawn;
}

}  // namespace capsim::detail
