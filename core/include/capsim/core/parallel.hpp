#pragma once
/// Independent jobs on worker threads: each job writes only its own result slot, so the
/// outcome does not depend on the thread count or the order the jobs finish in.

#include <cstddef>
#include <functional>

namespace capsim {

/// Runs job(i) for every i in [0, n) on up to `threads` threads (the calling thread is one
/// of them). A thread that cannot be started leaves its share to the others. The first
/// exception a job throws stops the remaining jobs and is rethrown here once every thread
/// has stopped (an exception must never leave a worker thread).
void parallel_for(size_t n, unsigned threads, const std::function<void(size_t)>& job);

}  // namespace capsim
