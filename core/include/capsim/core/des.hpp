#pragma once
/// A deterministic discrete-event engine for task graphs on streams and links.
///
/// Tasks form a DAG (Boost.Graph). A task starts when all its predecessors have finished;
/// the order of tasks on one stream is expressed as edges, so streams need no queue of
/// their own. Fixed tasks take their duration; transfers move bytes over links whose
/// bandwidth is shared max-min fairly among the transfers crossing them (fluid model),
/// after a fixed latency. Events are ordered by (time, priority, sequence).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "capsim/core/progress.hpp"

namespace capsim::des {

enum class StreamKind { compute, tp_comm, pp_comm, dp_comm, ep_comm };

std::string_view to_string(StreamKind k);

/// What a task is, for reports and traces.
enum class TaskKind { forward, backward, weight_grad, send, gather, reduce, optimizer, other };

std::string_view to_string(TaskKind k);

struct Stream {
  int32_t rank = 0;  ///< the GPU (pipeline rank) it belongs to
  StreamKind kind = StreamKind::compute;
};

struct Link {
  double bandwidth = 0;  ///< B/s
};

struct Task {
  TaskKind kind = TaskKind::other;
  int32_t stream = 0;
  int32_t chunk = -1, microbatch = -1;
  double duration = 0;          ///< fixed tasks: seconds
  double bytes = 0;             ///< transfers: bytes moved over `links` (0 = fixed task)
  double latency = 0;           ///< transfers: seconds before bytes start to flow
  std::vector<int32_t> links;   ///< transfers: links crossed
  double flops = 0;             ///< for the trace
  double mem_alloc = 0;         ///< bytes allocated on this task's rank when it starts
  double mem_free = 0;          ///< bytes freed when it ends
};

struct TaskTime {
  double start = 0, end = 0;
};

struct Result {
  std::vector<TaskTime> times;  ///< per task
  double makespan = 0;
  std::vector<double> peak_memory;  ///< per rank: largest sum of live allocations
  /// Memory over time per rank: (time, bytes in use) after each change, time-ordered.
  std::vector<std::vector<std::pair<double, double>>> memory;
};

/// The task graph and its resources; `run` executes it.
class Simulation {
 public:
  Simulation();
  ~Simulation();
  Simulation(Simulation&&) noexcept;
  Simulation& operator=(Simulation&&) noexcept;

  int32_t add_stream(int32_t rank, StreamKind kind);
  int32_t add_link(double bandwidth);
  int32_t add_task(Task t);
  /// `to` may not start before `from` ends.
  void add_edge(int32_t from, int32_t to);

  const std::vector<Task>& tasks() const;
  /// Tasks that wait for `task`.
  std::vector<int32_t> successors(int32_t task) const;
  const std::vector<Stream>& streams() const;
  int32_t num_ranks() const;

  /// Longest path through the DAG with fixed durations (transfers at latency + bytes over
  /// their slowest link's full bandwidth): the step time when nothing contends.
  double critical_path() const;
  /// Tasks on the critical path, in order.
  std::vector<int32_t> critical_tasks() const;

  /// Execute with fluid link sharing. Throws std::logic_error on a cycle. `progress`
  /// counts the tasks finished, in batches.
  Result run(ProgressCounter* progress = nullptr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace capsim::des
