#pragma once
// Layouts for the evaluation-cache tests: a deterministic spread over TP, PP, VPP, CP, EP,
// ETP, ZeRO, micro batch, recompute and schedule for one model and GPU count.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "capsim/core/scenario.hpp"
#include "capsim/io/presets.hpp"

namespace capsim::testing {

/// A model preset on `gpus` GPUs of a preset, 8 per node, with `nic_gbps` per GPU.
inline Scenario on_cluster(const std::string& model, const std::string& gpu, int64_t gpus, double nic_gbps) {
  Scenario s;
  s.model = io::load_model(model);
  s.system.gpu = io::load_gpu(gpu);
  s.system.num_gpus = gpus;
  s.system.gpus_per_node = 8;
  s.system.nic_gbps_per_gpu = nic_gbps;
  return s;
}

inline std::vector<TrainingPlan> spread_layouts(const ModelSpec& m, const TrainingPlan& base, int64_t gpus,
                                                size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](const std::vector<int64_t>& v) { return v[rng() % v.size()]; };
  std::vector<TrainingPlan> out;
  for (size_t tries = 0; out.size() < count && tries < 100 * count; ++tries) {
    TrainingPlan t = base;
    t.tp = pick({1, 2, 4, 8});
    t.pp = pick({1, 2, 4, 8});
    t.cp = pick({1, 1, 2});
    if (gpus % (t.tp * t.pp * t.cp) != 0 || m.heads % t.tp != 0 || m.layers < t.pp) continue;
    t.dp = gpus / (t.tp * t.pp * t.cp);
    t.sp = t.tp > 1;
    t.micro_batch = pick({1, 2, 4});
    if (t.global_batch % (*t.micro_batch * t.dp) != 0) continue;
    const int64_t micro = t.global_batch / (*t.micro_batch * t.dp);
    t.vpp = t.pp > 1 && micro % t.pp == 0 && m.layers % (t.pp * 2) == 0 ? pick({1, 2}) : 1;
    t.ep = 1;
    t.etp = 1;
    if (m.moe) {
      t.ep = pick({1, 2, 4, 8});
      if (m.moe->num_experts % t.ep != 0 || (t.tp * t.cp * t.dp) % t.ep != 0) continue;
      t.etp = t.tp > 1 && (t.tp * t.cp * t.dp) % (t.ep * t.tp) == 0 ? pick({1, t.tp}) : 1;
    }
    t.zero = static_cast<int>(rng() % 4);
    t.recompute = static_cast<Recompute>(rng() % 3);
    t.schedule = t.pp > 1 && *t.vpp == 1 && rng() % 2 ? Schedule::zb_h1 : Schedule::one_f_one_b;
    out.push_back(t);
  }
  return out;
}

inline std::string describe(const TrainingPlan& t) {
  return "tp" + std::to_string(t.tp) + " pp" + std::to_string(t.pp) + " vpp" + std::to_string(t.vpp.value_or(1)) +
         " cp" + std::to_string(t.cp) + " dp" + std::to_string(t.dp) + " ep" + std::to_string(t.ep) + " etp" +
         std::to_string(t.etp.value_or(1)) + " zero" + std::to_string(t.zero.value_or(0)) + " mb" +
         std::to_string(t.micro_batch.value_or(1)) + " rc" + std::to_string(static_cast<int>(*t.recompute)) +
         " sched" + std::to_string(static_cast<int>(t.schedule));
}

}  // namespace capsim::testing
