#pragma once
// Private to core: what EvalCache holds, shared by memory.cpp and step.cpp.

#include <cstdint>
#include <utility>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/eval_cache.hpp"
#include "capsim/core/model.hpp"

namespace capsim {

/// Per-microbatch costs of one layer on one GPU.
struct LayerCost {
  double fwd = 0, bwd = 0;         ///< compute
  double wgrad = 0;                ///< the weight-gradient GEMMs within bwd
  double recompute = 0;            ///< extra forward under the policy
  double attn_fwd = 0, attn_bwd = 0;
  double tp_fwd = 0, tp_bwd = 0;   ///< TP collectives (bwd includes recompute's)
  double cp_fwd = 0, cp_bwd = 0;   ///< CP exchange before overlap
  double ep_fwd = 0, ep_bwd = 0;
  double fwd_flops = 0, recompute_flops = 0;
};

/// Layer costs, once per layer kind (dense, MoE), and the model's two ends.
struct KindCosts {
  LayerCost kinds[2];
  bool have[2] = {false, false};
  LayerCost head, emb;
  const LayerCost& of(const ModelSpec& m, int64_t layer) const { return kinds[m.is_moe_layer(layer) ? 1 : 0]; }
};


/// The plan fields per-layer activation bytes depend on.
struct MemKey {
  const ModelSpec* model;
  int64_t tp, cp, etp, micro_batch, seq_len;
  bool sp;
  int recompute;
  double recompute_fraction;
  int precision, attention;
  bool operator==(const MemKey&) const = default;
};

struct MemVal {
  double act[2] = {0, 0}, act_full[2] = {0, 0};
  bool have[2] = {false, false};
  double embedding = 0, head = 0;
};

/// The plan and system fields per-layer operator costs depend on.
struct StepKey {
  const ModelSpec* model;
  const CostModel* cost;
  int64_t tp, cp, etp, ep, micro_batch, seq_len, gpus_per_node;
  bool sp;
  int recompute;
  double recompute_fraction;
  int precision, attention;
  double tp_overlap, moe_imbalance;
  bool operator==(const StepKey&) const = default;
};

struct EvalCache::Impl {
  std::vector<std::pair<MemKey, MemVal>> memory;
  std::vector<std::pair<StepKey, KindCosts>> step;
};

}  // namespace capsim
