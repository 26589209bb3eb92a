#pragma once
/// Progress of a long computation, for a caller that wants to show it. Core never prints:
/// it only advances these counters (relaxed atomics, in batches from worker threads), and
/// the caller reads them from wherever it renders (io::ProgressReporter).

#include <atomic>
#include <cstdint>

namespace capsim {

struct ProgressCounter {
  std::atomic<int64_t> done{0};
  /// Units expected in all; 0 while unknown. May be raised as the computation learns more.
  std::atomic<int64_t> total{0};

  void add(int64_t n = 1) { done.fetch_add(n, std::memory_order_relaxed); }
  void set_total(int64_t n) { total.store(n, std::memory_order_relaxed); }
};

/// `p->add(n)` when there is a counter; a no-op otherwise.
inline void progress_add(ProgressCounter* p, int64_t n = 1) {
  if (p) p->add(n);
}
inline void progress_total(ProgressCounter* p, int64_t n) {
  if (p) p->set_total(n);
}

}  // namespace capsim
