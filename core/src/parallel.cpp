#include "capsim/core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace capsim {

void parallel_for(size_t n, unsigned threads, const std::function<void(size_t)>& job) {
  std::atomic<size_t> next{0};
  std::mutex failed_mu;
  std::exception_ptr failed;
  auto worker = [&] {
    try {
      for (size_t i = next++; i < n; i = next++) job(i);
    } catch (...) {
      next = n;
      const std::lock_guard<std::mutex> lock(failed_mu);
      if (!failed) failed = std::current_exception();
    }
  };
  const size_t wanted = std::clamp<size_t>(threads, 1, std::max<size_t>(1, n));
  std::vector<std::thread> pool;
  for (size_t i = 1; i < wanted; ++i) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // fewer threads than asked: the others take the work
    }
  }
  worker();
  for (auto& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace capsim
