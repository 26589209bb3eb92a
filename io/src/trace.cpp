#include "capsim/io/trace.hpp"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "capsim/io/json_read.hpp"

namespace capsim::io {

using nlohmann::json;

namespace {

int stream_order(des::StreamKind k) {
  switch (k) {
    case des::StreamKind::compute: return 0;
    case des::StreamKind::tp_comm: return 1;
    case des::StreamKind::pp_comm: return 2;
    case des::StreamKind::dp_comm: return 3;
    case des::StreamKind::ep_comm: return 4;
  }
  return 5;
}

}  // namespace

std::string chrome_trace(const DesStep& d) {
  const des::Simulation& sim = d.sim;
  const auto& tasks = sim.tasks();
  const auto& times = d.result.times;
  json events = json::array();
  const int32_t ranks = sim.num_ranks();
  for (int32_t r = 0; r < ranks; ++r) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", r},
                      {"args", {{"name", "stage " + std::to_string(r) + " (GPU " + std::to_string(r) + ")"}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", r}, {"args", {{"sort_index", r}}}});
  }
  // Slices of one stream that overlap in time (concurrent transfers) go to extra lanes so
  // that slices on one thread nest strictly.
  std::vector<size_t> order(tasks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return times[a].start < times[b].start; });
  std::map<std::pair<int32_t, int>, std::vector<double>> lanes;  // (rank, stream order) -> lane end times
  std::map<std::pair<int32_t, int>, std::string> lane_names;
  std::vector<int> tid(tasks.size(), 0);
  for (size_t i : order) {
    const des::Task& t = tasks[i];
    const des::Stream& st = sim.streams()[static_cast<size_t>(t.stream)];
    const int base = stream_order(st.kind) * 16;
    auto& ends = lanes[{st.rank, base}];
    size_t lane = 0;
    while (lane < ends.size() && ends[lane] > times[i].start) ++lane;
    if (lane == ends.size()) ends.push_back(0);
    ends[lane] = times[i].end;
    tid[i] = base + static_cast<int>(lane);
    std::string name(des::to_string(st.kind));
    if (lane > 0) name += " (" + std::to_string(lane + 1) + ")";
    lane_names[{st.rank, tid[i]}] = name;
  }
  for (const auto& [key, name] : lane_names) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", key.first}, {"tid", key.second}, {"args", {{"name", name}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", key.first}, {"tid", key.second},
                      {"args", {{"sort_index", key.second}}}});
  }
  int64_t flow = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const des::Task& t = tasks[i];
    const des::Stream& st = sim.streams()[static_cast<size_t>(t.stream)];
    std::string name(des::to_string(t.kind));
    if (t.microbatch >= 0) name += " mb" + std::to_string(t.microbatch);
    if (t.chunk >= 0) name += " c" + std::to_string(t.chunk);
    json args = {{"chunk", t.chunk}, {"microbatch", t.microbatch}};
    if (t.flops > 0) args["flops"] = t.flops;
    if (t.bytes > 0) args["bytes"] = t.bytes;
    events.push_back({{"ph", "X"},
                      {"name", name},
                      {"cat", std::string(des::to_string(st.kind))},
                      {"pid", st.rank},
                      {"tid", tid[i]},
                      {"ts", times[i].start * 1e6},
                      {"dur", (times[i].end - times[i].start) * 1e6},
                      {"args", args}});
    if (t.kind == des::TaskKind::send) {
      for (int32_t to : sim.successors(static_cast<int32_t>(i))) {
        const des::Stream& ts = sim.streams()[static_cast<size_t>(tasks[static_cast<size_t>(to)].stream)];
        events.push_back({{"ph", "s"}, {"name", "p2p"}, {"cat", "p2p"}, {"id", flow}, {"pid", st.rank}, {"tid", tid[i]},
                          {"ts", times[i].start * 1e6}});
        events.push_back({{"ph", "f"}, {"bp", "e"}, {"name", "p2p"}, {"cat", "p2p"}, {"id", flow}, {"pid", ts.rank},
                          {"tid", tid[static_cast<size_t>(to)]}, {"ts", times[static_cast<size_t>(to)].start * 1e6}});
        ++flow;
      }
    }
  }
  for (int32_t r = 0; r < ranks; ++r)
    for (const auto& [time, bytes] : d.result.memory[static_cast<size_t>(r)])
      events.push_back({{"ph", "C"}, {"name", "activation memory"}, {"pid", r}, {"ts", time * 1e6},
                        {"args", {{"bytes", bytes}}}});
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"},
              {"otherData", {{"generator", "capsim"}, {"schedule", std::string(to_string(d.schedule))}}}};
  return dump_text(doc) + "\n";
}

std::string serving_trace(const ServingResult& r) {
  json events = json::array();
  int32_t replicas = 0;
  for (const auto& it : r.timeline) replicas = std::max(replicas, it.replica + 1);
  for (int32_t k = 0; k < replicas; ++k) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", k}, {"args", {{"name", "replica " + std::to_string(k)}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", k}, {"args", {{"sort_index", k}}}});
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", k}, {"tid", 0}, {"args", {{"name", "engine iterations"}}}});
  }
  for (const auto& it : r.timeline) {
    const std::string name = it.prefill_tokens > 0 ? (it.decodes > 0 ? "mixed" : "prefill") : "decode";
    events.push_back({{"ph", "X"}, {"name", name}, {"cat", "iteration"}, {"pid", it.replica}, {"tid", 0},
                      {"ts", it.start * 1e6}, {"dur", (it.end - it.start) * 1e6},
                      {"args", {{"decodes", it.decodes}, {"prefill_tokens", it.prefill_tokens}}}});
    events.push_back({{"ph", "C"}, {"name", "KV cache in use"}, {"pid", it.replica}, {"ts", it.start * 1e6},
                      {"args", {{"fraction", it.kv_utilization}}}});
    events.push_back({{"ph", "C"}, {"name", "batch"}, {"pid", it.replica}, {"ts", it.start * 1e6},
                      {"args", {{"decodes", it.decodes}, {"prefill_tokens", it.prefill_tokens}}}});
  }
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", {{"generator", "capsim"}}}};
  return dump_text(doc) + "\n";
}

json des_json(const DesStep& d) {
  json j;
  j["schedule"] = std::string(to_string(d.schedule));
  json stages = json::array();
  for (size_t r = 0; r < d.busy_s.size(); ++r)
    stages.push_back({{"stage", r},
                      {"busy_s", d.busy_s[r]},
                      {"idle_s", d.idle_s[r]},
                      {"peak_activation_bytes", d.peak_activation_bytes[r]}});
  j["stages"] = stages;
  json cp = json::object();
  for (const auto& [k, v] : d.critical_path_s) cp[k] = v;
  j["critical_path_s"] = cp;
  j["critical_path_bound_s"] = d.critical_path_bound_s;
  j["tasks"] = d.sim.tasks().size();
  return j;
}

}  // namespace capsim::io
