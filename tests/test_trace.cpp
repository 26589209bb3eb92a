// Chrome/Perfetto trace of a discrete-event run: structure, strict nesting per thread,
// flow arrows, memory counter, byte-identical output for the same input.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "capsim/core/pipeline_sim.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/trace.hpp"

namespace capsim {
namespace {

DesStep run(int64_t pp, int64_t vpp, int64_t dp, int zero) {
  SystemSpec sys;
  sys.gpu = io::load_gpu("h100-sxm5-80gb");
  sys.num_gpus = pp * dp * 2;
  sys.gpus_per_node = 8;
  sys.nic_gbps_per_gpu = 400;
  TrainingPlan t;
  t.tp = 2;
  t.sp = true;
  t.pp = pp;
  t.vpp = vpp;
  t.dp = dp;
  t.zero = zero;
  t.micro_batch = 1;
  t.global_batch = dp * pp * 4;
  t.seq_len = 4096;
  t.recompute = Recompute::selective;
  const hw::RooflineCostModel cost(sys);
  return des_step(io::load_model("llama2-7b"), sys, t, cost);
}

// Perfetto's rule: complete slices on one thread either nest or are disjoint.
void expect_strict_nesting(const nlohmann::json& trace) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> threads;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") threads[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(e["ts"].get<double>(),
                                                                                        e["ts"].get<double>() + e["dur"].get<double>());
  ASSERT_FALSE(threads.empty());
  for (auto& [key, slices] : threads) {
    std::sort(slices.begin(), slices.end());
    for (size_t i = 1; i < slices.size(); ++i) {
      const auto& a = slices[i - 1];
      const auto& b = slices[i];
      const bool disjoint = b.first >= a.second - 1e-9;
      const bool nested = b.second <= a.second + 1e-9;
      EXPECT_TRUE(disjoint || nested) << "pid " << key.first << " tid " << key.second << " [" << a.first << ", "
                                      << a.second << ") vs [" << b.first << ", " << b.second << ")";
    }
  }
}

TEST(Trace, StructureNestingFlowsAndCounters) {
  for (const auto& [pp, vpp, dp, zero] : {std::tuple{4, 1, 2, 1}, std::tuple{4, 2, 2, 0}, std::tuple{1, 1, 4, 3}}) {
    const DesStep d = run(pp, vpp, dp, zero);
    const nlohmann::json trace = nlohmann::json::parse(io::chrome_trace(d));
    expect_strict_nesting(trace);
    int processes = 0, counters = 0, flow_starts = 0, flow_ends = 0, slices = 0;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "process_name") ++processes;
      if (e["ph"] == "C") ++counters;
      if (e["ph"] == "s") ++flow_starts;
      if (e["ph"] == "f") ++flow_ends;
      if (e["ph"] == "X") {
        ++slices;
        EXPECT_TRUE(e["args"].contains("microbatch"));
        EXPECT_TRUE(e["args"].contains("chunk"));
        EXPECT_GE(e["dur"].get<double>(), 0.0);
      }
    }
    EXPECT_EQ(processes, pp);
    EXPECT_GT(counters, 0);
    EXPECT_EQ(flow_starts, flow_ends);
    if (vpp > 1) {
      EXPECT_GT(flow_starts, 0);  // interleaving sends asynchronously
    }
    EXPECT_EQ(static_cast<size_t>(slices), d.sim.tasks().size());
  }
}

TEST(Trace, ByteIdenticalForTheSameInput) {
  EXPECT_EQ(io::chrome_trace(run(4, 2, 2, 1)), io::chrome_trace(run(4, 2, 2, 1)));
}

}  // namespace
}  // namespace capsim
