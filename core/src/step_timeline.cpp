#include "capsim/core/step_timeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>

namespace capsim {

namespace {

struct Match {
  double mean_error = 0;
  std::ptrdiff_t at = 0;  ///< index in the steps of the request's first gap (negative: before them)
  bool found = false;
  bool stopped = false;  ///< the comparison budget ran out before every offset was tried
};

/// Where the gaps `x` fit the steps best: every offset that shares at least `need` gaps with
/// them, by mean absolute difference over the shared gaps, ties to the earliest offset. An
/// offset stops being summed once it cannot beat the best so far or the tolerance, so the
/// offsets are tried outward from `hint` (where the request is expected): a close match found
/// early cuts every later sum short. The order does not change the answer.
Match best_offset(const std::vector<double>& steps, const std::vector<double>& x, size_t need, double tolerance,
                  std::ptrdiff_t hint, uint64_t& comparisons, uint64_t max_comparisons) {
  Match best;
  const auto n = static_cast<std::ptrdiff_t>(steps.size());
  const auto len = static_cast<std::ptrdiff_t>(x.size());
  const auto shared = static_cast<std::ptrdiff_t>(need);
  const std::ptrdiff_t first = shared - len, last = n - shared;
  if (first > last) return best;
  auto try_offset = [&](std::ptrdiff_t k) {
    const std::ptrdiff_t lo = std::max<std::ptrdiff_t>(0, k), hi = std::min(n, k + len);
    const auto overlap = static_cast<double>(hi - lo);
    const double limit = overlap * std::min(tolerance, best.found ? best.mean_error : tolerance);
    double err = 0;
    std::ptrdiff_t s = lo;
    for (; s < hi; ++s) {
      err += std::abs(steps[static_cast<size_t>(s)] - x[static_cast<size_t>(s - k)]);
      if (err > limit) break;
    }
    comparisons += static_cast<uint64_t>(std::min(s + 1, hi) - lo);
    if (s < hi) return;
    const double mean = err / overlap;
    if (!best.found || mean < best.mean_error || (mean == best.mean_error && k < best.at)) best = {mean, k, true};
  };
  const std::ptrdiff_t start = std::clamp(hint, first, last);
  for (std::ptrdiff_t d = 0; start - d >= first || start + d <= last; ++d) {
    if (comparisons >= max_comparisons) {
      best.stopped = true;
      return best;
    }
    if (start + d <= last) try_offset(start + d);
    if (d > 0 && start - d >= first) try_offset(start - d);
  }
  return best;
}

}  // namespace

StepTimeline recover_steps(const std::vector<StreamedRequest>& requests, const StepRecovery& options,
                           ProgressCounter* progress) {
  progress_total(progress, static_cast<int64_t>(requests.size()));
  StepTimeline out;
  out.position.assign(requests.size(), StepTimeline::kUnplaced);
  const size_t need = std::max<size_t>(1, options.min_overlap);
  // In the order the client sent them, from the first with enough gaps: each request then
  // mostly overlaps the steps its predecessors placed, and one pass places most of them
  // (a request that overlaps none yet waits for a later pass).
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto first = std::find_if(order.begin(), order.end(), [&](size_t i) { return requests[i].itl_s.size() >= need; });
  if (first == order.end()) return out;
  std::rotate(order.begin(), first, first + 1);

  std::vector<double> steps = requests[order.front()].itl_s;
  // Positions relative to the first request's first gap; `base` steps were prepended since.
  std::vector<std::ptrdiff_t> at(requests.size(), 0);
  std::vector<bool> placed(requests.size(), false);
  std::ptrdiff_t base = 0;
  placed[order.front()] = true;
  uint64_t comparisons = 0;
  std::ptrdiff_t last_at = 0;  // where the last request placed starts, relative as `at`
  for (bool moved = true; moved && !out.truncated;) {
    moved = false;
    if (progress) progress->done.store(0, std::memory_order_relaxed);
    for (size_t i : order) {
      progress_add(progress);
      const std::vector<double>& x = requests[i].itl_s;
      if (placed[i] || x.size() < need) continue;
      // Sent in order, a request most likely starts near the last one placed.
      const Match m = best_offset(steps, x, need, options.tolerance_s, last_at + base, comparisons, options.max_comparisons);
      if (m.stopped) {
        out.truncated = true;
        break;
      }
      if (!m.found || m.mean_error > options.tolerance_s) continue;
      std::ptrdiff_t k = m.at;
      if (k < 0) {
        steps.insert(steps.begin(), x.begin(), x.begin() + (-k));
        base += -k;
        k = 0;
      }
      const auto end = k + static_cast<std::ptrdiff_t>(x.size());
      if (end > static_cast<std::ptrdiff_t>(steps.size()))
        steps.insert(steps.end(), x.end() - (end - static_cast<std::ptrdiff_t>(steps.size())), x.end());
      at[i] = k - base;
      last_at = at[i];
      placed[i] = true;
      moved = true;
    }
  }

  const size_t n = steps.size();
  // Each step's duration: the median of the placed requests' gaps over it, which evens out
  // the clients' jitter whatever order the requests were placed in.
  std::vector<std::vector<double>> seen(n);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!placed[i]) continue;
    const auto p = static_cast<size_t>(at[i] + base);
    for (size_t j = 0; j < requests[i].itl_s.size(); ++j) seen[p + j].push_back(requests[i].itl_s[j]);
  }
  for (size_t s = 0; s < n; ++s) {
    std::vector<double>& v = seen[s];
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    steps[s] = v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
  }
  out.step_s = std::move(steps);
  out.decodes.assign(n, 0);
  out.decode_context.assign(n, 0.0);
  out.first_tokens.assign(n, 0);
  out.prompt_tokens.assign(n, 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!placed[i]) continue;
    const auto p = static_cast<size_t>(at[i] + base);
    out.position[i] = p;
    ++out.placed;
    const StreamedRequest& r = requests[i];
    // In step p + j the request feeds its (j + 1)-th token: its prompt and j generated
    // tokens are cached.
    for (size_t j = 0; j < r.itl_s.size(); ++j) {
      ++out.decodes[p + j];
      out.decode_context[p + j] += static_cast<double>(r.prompt_tokens + static_cast<int64_t>(j));
    }
    if (p >= 1) {
      ++out.first_tokens[p - 1];
      out.prompt_tokens[p - 1] += r.prompt_tokens;
    }
  }
  return out;
}

}  // namespace capsim
