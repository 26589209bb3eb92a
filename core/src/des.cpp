#include "capsim/core/des.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <limits>
#include <queue>
#include <stdexcept>

namespace capsim::des {

std::string_view to_string(StreamKind k) {
  switch (k) {
    case StreamKind::compute: return "compute";
    case StreamKind::tp_comm: return "tp comm";
    case StreamKind::pp_comm: return "pp send/recv";
    case StreamKind::dp_comm: return "dp comm";
    case StreamKind::ep_comm: return "ep comm";
  }
  return "?";
}

std::string_view to_string(TaskKind k) {
  switch (k) {
    case TaskKind::forward: return "F";
    case TaskKind::backward: return "B";
    case TaskKind::weight_grad: return "W";
    case TaskKind::send: return "send";
    case TaskKind::gather: return "all-gather";
    case TaskKind::reduce: return "reduce";
    case TaskKind::optimizer: return "optimizer";
    case TaskKind::other: return "task";
  }
  return "?";
}

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

struct Simulation::Impl {
  std::vector<Stream> streams;
  std::vector<Link> links;
  std::vector<Task> tasks;
  Graph graph;
  int32_t ranks = 0;

  double fixed_duration(const Task& t) const {
    if (t.bytes <= 0) return t.duration;
    double bw = std::numeric_limits<double>::infinity();
    for (int32_t l : t.links) bw = std::min(bw, links[static_cast<size_t>(l)].bandwidth);
    return t.latency + (std::isfinite(bw) ? t.bytes / bw : 0.0);
  }

  std::vector<int32_t> topo_order() const {
    std::vector<Graph::vertex_descriptor> rev;
    rev.reserve(tasks.size());
    try {
      boost::topological_sort(graph, std::back_inserter(rev));
    } catch (const boost::not_a_dag&) {
      throw std::logic_error("task graph has a cycle");
    }
    std::vector<int32_t> order(rev.rbegin(), rev.rend());
    return order;
  }
};

Simulation::Simulation() : impl_(std::make_unique<Impl>()) {}
Simulation::~Simulation() = default;
Simulation::Simulation(Simulation&&) noexcept = default;
Simulation& Simulation::operator=(Simulation&&) noexcept = default;

int32_t Simulation::add_stream(int32_t rank, StreamKind kind) {
  impl_->streams.push_back({rank, kind});
  impl_->ranks = std::max(impl_->ranks, rank + 1);
  return static_cast<int32_t>(impl_->streams.size() - 1);
}

int32_t Simulation::add_link(double bandwidth) {
  impl_->links.push_back({bandwidth});
  return static_cast<int32_t>(impl_->links.size() - 1);
}

int32_t Simulation::add_task(Task t) {
  impl_->tasks.push_back(std::move(t));
  boost::add_vertex(impl_->graph);
  return static_cast<int32_t>(impl_->tasks.size() - 1);
}

void Simulation::add_edge(int32_t from, int32_t to) {
  boost::add_edge(static_cast<size_t>(from), static_cast<size_t>(to), impl_->graph);
}

const std::vector<Task>& Simulation::tasks() const { return impl_->tasks; }

std::vector<int32_t> Simulation::successors(int32_t task) const {
  std::vector<int32_t> out;
  for (auto [e, end] = boost::out_edges(static_cast<size_t>(task), impl_->graph); e != end; ++e)
    out.push_back(static_cast<int32_t>(boost::target(*e, impl_->graph)));
  return out;
}
const std::vector<Stream>& Simulation::streams() const { return impl_->streams; }
int32_t Simulation::num_ranks() const { return impl_->ranks; }

namespace {

struct Longest {
  std::vector<double> finish;
  std::vector<int32_t> parent;
};

Longest longest_path(const Simulation& sim, const std::vector<int32_t>& order, const Graph& g,
                     const std::function<double(const Task&)>& dur) {
  const auto& tasks = sim.tasks();
  Longest l;
  l.finish.assign(tasks.size(), 0.0);
  l.parent.assign(tasks.size(), -1);
  std::vector<double> start(tasks.size(), 0.0);
  for (int32_t v : order) {
    l.finish[static_cast<size_t>(v)] = start[static_cast<size_t>(v)] + dur(tasks[static_cast<size_t>(v)]);
    for (auto [e, end] = boost::out_edges(static_cast<size_t>(v), g); e != end; ++e) {
      const size_t w = boost::target(*e, g);
      if (l.finish[static_cast<size_t>(v)] > start[w] ||
          (l.finish[static_cast<size_t>(v)] == start[w] && l.parent[w] < 0)) {
        start[w] = l.finish[static_cast<size_t>(v)];
        l.parent[w] = v;
      }
    }
  }
  return l;
}

}  // namespace

double Simulation::critical_path() const {
  const auto order = impl_->topo_order();
  const auto l = longest_path(*this, order, impl_->graph, [this](const Task& t) { return impl_->fixed_duration(t); });
  double best = 0;
  for (double f : l.finish) best = std::max(best, f);
  return best;
}

std::vector<int32_t> Simulation::critical_tasks() const {
  const auto order = impl_->topo_order();
  const auto l = longest_path(*this, order, impl_->graph, [this](const Task& t) { return impl_->fixed_duration(t); });
  int32_t last = -1;
  double best = -1;
  for (size_t i = 0; i < l.finish.size(); ++i)
    if (l.finish[i] > best) {
      best = l.finish[i];
      last = static_cast<int32_t>(i);
    }
  std::vector<int32_t> path;
  for (int32_t v = last; v >= 0; v = l.parent[static_cast<size_t>(v)]) path.push_back(v);
  std::reverse(path.begin(), path.end());
  return path;
}

Result Simulation::run(ProgressCounter* progress) const {
  const Impl& s = *impl_;
  const size_t n = s.tasks.size();
  progress_total(progress, static_cast<int64_t>(n));
  constexpr int64_t kProgressBatch = 1024;
  int64_t uncounted = 0;  // tasks finished since the last add
  (void)s.topo_order();  // rejects cycles up front
  Result res;
  res.times.assign(n, {});
  res.peak_memory.assign(static_cast<size_t>(s.ranks), 0.0);
  res.memory.assign(static_cast<size_t>(s.ranks), {});
  std::vector<double> mem(static_cast<size_t>(s.ranks), 0.0);

  std::vector<int32_t> indeg(n, 0);
  for (size_t v = 0; v < n; ++v)
    for (auto [e, end] = boost::out_edges(v, s.graph); e != end; ++e) ++indeg[boost::target(*e, s.graph)];

  // Events: (time, priority, sequence). Finishes (0) come before flow starts (1) at one time.
  struct Event {
    double time;
    int priority;
    uint64_t seq;
    int32_t task;
    uint64_t version;  // flows: valid while it matches the flow's version
    bool operator>(const Event& o) const {
      if (time != o.time) return time > o.time;
      if (priority != o.priority) return priority > o.priority;
      return seq > o.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q;
  uint64_t seq = 0;

  struct Flow {
    int32_t task;
    double remaining;
    double rate = 0;
    uint64_t version = 0;
  };
  std::vector<Flow> flows;  // active, in arrival order
  std::vector<uint64_t> flow_version(n, 0);
  double flows_time = 0;  // time flows were last advanced to

  auto rank_of = [&](int32_t task) { return s.streams[static_cast<size_t>(s.tasks[static_cast<size_t>(task)].stream)].rank; };
  auto note_memory = [&](int32_t rank, double now) {
    auto& series = res.memory[static_cast<size_t>(rank)];
    if (!series.empty() && series.back().first == now) series.back().second = mem[static_cast<size_t>(rank)];
    else series.emplace_back(now, mem[static_cast<size_t>(rank)]);
    res.peak_memory[static_cast<size_t>(rank)] = std::max(res.peak_memory[static_cast<size_t>(rank)], mem[static_cast<size_t>(rank)]);
  };

  auto advance_flows = [&](double now) {
    const double dt = now - flows_time;
    if (dt > 0)
      for (auto& f : flows) f.remaining = std::max(0.0, f.remaining - f.rate * dt);
    flows_time = now;
  };
  // Max-min fair rates by progressive filling, then a completion event per flow.
  auto reschedule_flows = [&](double now) {
    std::vector<double> cap(s.links.size());
    for (size_t l = 0; l < s.links.size(); ++l) cap[l] = s.links[l].bandwidth;
    std::vector<char> fixed(flows.size(), 0);
    size_t left = flows.size();
    for (size_t i = 0; i < flows.size(); ++i) {
      if (s.tasks[static_cast<size_t>(flows[i].task)].links.empty()) {
        flows[i].rate = std::numeric_limits<double>::infinity();
        fixed[i] = 1;
        --left;
      }
    }
    while (left > 0) {
      std::vector<int32_t> count(s.links.size(), 0);
      for (size_t i = 0; i < flows.size(); ++i)
        if (!fixed[i])
          for (int32_t l : s.tasks[static_cast<size_t>(flows[i].task)].links) ++count[static_cast<size_t>(l)];
      size_t bottleneck = 0;
      double share = std::numeric_limits<double>::infinity();
      for (size_t l = 0; l < s.links.size(); ++l)
        if (count[l] > 0 && cap[l] / count[l] < share) {
          share = cap[l] / count[l];
          bottleneck = l;
        }
      for (size_t i = 0; i < flows.size(); ++i) {
        if (fixed[i]) continue;
        const auto& ls = s.tasks[static_cast<size_t>(flows[i].task)].links;
        if (std::find(ls.begin(), ls.end(), static_cast<int32_t>(bottleneck)) == ls.end()) continue;
        flows[i].rate = share;
        fixed[i] = 1;
        --left;
        for (int32_t l : ls) cap[static_cast<size_t>(l)] -= share;
      }
    }
    for (auto& f : flows) {
      f.version = ++flow_version[static_cast<size_t>(f.task)];
      const double t = std::isinf(f.rate) ? now : now + f.remaining / f.rate;
      q.push({t, 0, seq++, f.task, f.version});
    }
  };

  std::function<void(int32_t, double)> start_task;
  auto finish_task = [&](int32_t task, double now) {
    res.times[static_cast<size_t>(task)].end = now;
    if (progress && ++uncounted == kProgressBatch) {
      progress->add(uncounted);
      uncounted = 0;
    }
    const Task& t = s.tasks[static_cast<size_t>(task)];
    if (t.mem_free != 0) {
      mem[static_cast<size_t>(rank_of(task))] -= t.mem_free;
      note_memory(rank_of(task), now);
    }
    res.makespan = std::max(res.makespan, now);
    for (auto [e, end] = boost::out_edges(static_cast<size_t>(task), s.graph); e != end; ++e) {
      const auto w = static_cast<int32_t>(boost::target(*e, s.graph));
      if (--indeg[static_cast<size_t>(w)] == 0) start_task(w, now);
    }
  };
  start_task = [&](int32_t task, double now) {
    res.times[static_cast<size_t>(task)].start = now;
    const Task& t = s.tasks[static_cast<size_t>(task)];
    if (t.mem_alloc != 0) {
      mem[static_cast<size_t>(rank_of(task))] += t.mem_alloc;
      note_memory(rank_of(task), now);
    }
    if (t.bytes > 0) q.push({now + t.latency, 1, seq++, task, 0});
    else q.push({now + t.duration, 0, seq++, task, 0});
  };

  for (size_t v = 0; v < n; ++v)
    if (indeg[v] == 0) start_task(static_cast<int32_t>(v), 0.0);

  while (!q.empty()) {
    const Event ev = q.top();
    q.pop();
    const Task& t = s.tasks[static_cast<size_t>(ev.task)];
    if (t.bytes <= 0) {
      finish_task(ev.task, ev.time);
      continue;
    }
    if (ev.priority == 1) {  // the transfer's bytes start to flow
      advance_flows(ev.time);
      flows.push_back({ev.task, t.bytes});
      reschedule_flows(ev.time);
      continue;
    }
    if (ev.version != flow_version[static_cast<size_t>(ev.task)]) continue;  // superseded
    advance_flows(ev.time);
    flows.erase(std::find_if(flows.begin(), flows.end(), [&](const Flow& f) { return f.task == ev.task; }));
    reschedule_flows(ev.time);
    finish_task(ev.task, ev.time);
  }
  progress_add(progress, uncounted);
  for (size_t v = 0; v < n; ++v)
    if (indeg[v] > 0) throw std::logic_error("task graph did not drain");
  return res;
}

}  // namespace capsim::des
