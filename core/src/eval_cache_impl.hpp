#pragma once
// Private to core: what EvalCache holds, shared by memory.cpp and step.cpp.

#include <cstdint>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/eval_cache.hpp"
#include "capsim/core/model.hpp"
#include "capsim/core/scenario.hpp"

namespace capsim {

/// Per-microbatch costs of one layer on one GPU.
struct LayerCost {
  double fwd = 0, bwd = 0;         ///< compute
  double wgrad = 0;                ///< the weight-gradient GEMMs within bwd
  double recompute = 0;            ///< extra forward under the policy
  double attn_fwd = 0, attn_bwd = 0;
  double tp_fwd = 0, tp_bwd = 0;   ///< TP collectives (bwd includes recompute's)
  double cp_fwd = 0, cp_bwd = 0;   ///< CP exchange before overlap
  double cp_exposed_fwd = 0, cp_exposed_bwd = 0;  ///< what of it the attention does not hide
  double cp_slowed = 0;  ///< of fwd + bwd + recompute: attention slowed by the SMs the exchange holds
  double ep_fwd = 0, ep_bwd = 0;
  /// Of fwd and of bwd + recompute, the expert block's (Op::moe_block).
  double moe_block_fwd = 0, moe_block_bwd = 0;
  double fwd_flops = 0, recompute_flops = 0;
};

/// Layer costs, once per layer kind (dense, MoE), and the model's two ends.
struct KindCosts {
  LayerCost kinds[2];
  bool have[2] = {false, false};
  LayerCost head, emb;
  LayerCost mtp;  ///< one multi-token prediction module with its pass through the shared head
  int64_t count[2] = {0, 0};        ///< layers of each kind in the model
  double fwd_flops_per_token = 0;   ///< forward_flops_per_token over the plan's attention span
  const LayerCost& of(const ModelSpec& m, int64_t layer) const { return kinds[m.is_moe_layer(layer) ? 1 : 0]; }
};


/// The plan fields per-layer activation bytes depend on.
struct MemKey {
  const ModelSpec* model;
  int64_t tp, cp, etp, micro_batch, seq_len, attention_span;
  bool sp;
  int recompute;
  double recompute_fraction;
  unsigned recompute_modules;
  int precision, attention, framework;
  bool fp8_blockwise;
  /// Adapter training: rank, targeted projections, dropout and whether the base keeps its
  /// GEMM inputs (a 4-bit base) change what a layer keeps.
  int64_t lora_rank;
  unsigned lora_targets;
  double lora_dropout;
  bool base_keeps_inputs;
  bool compiled_loss;  ///< LoweringOptions::compiled_loss
  bool operator==(const MemKey&) const = default;
  template <class F>
  void visit(F f) const {
    f(model), f(tp), f(cp), f(etp), f(micro_batch), f(seq_len), f(attention_span), f(sp), f(recompute), f(recompute_fraction),
        f(recompute_modules), f(precision), f(attention), f(framework), f(fp8_blockwise), f(lora_rank),
        f(lora_targets), f(lora_dropout), f(base_keeps_inputs), f(compiled_loss);
  }
};

struct MemVal {
  double act[2] = {0, 0}, act_full[2] = {0, 0};
  bool have[2] = {false, false};
  double embedding = 0, head = 0;
  double mtp = 0;  ///< one multi-token prediction module without its head (0 when none)
};

/// The plan and system fields per-layer operator costs depend on.
struct StepKey {
  const ModelSpec* model;
  const CostModel* cost;
  int64_t tp, cp, etp, ep, micro_batch, seq_len, attention_span, gpus_per_node;
  bool sp;
  int recompute;
  double recompute_fraction;
  unsigned recompute_modules;
  int precision, attention, framework;
  double tp_overlap, moe_imbalance;
  int64_t lora_rank;      ///< 0 unless mode lora
  unsigned lora_targets;  ///< LoweringOptions::lora_targets
  bool fp8_blockwise;
  int moe_permute_passes;  ///< LoweringOptions::moe_permute_passes
  bool eager_elementwise;
  bool hierarchical_ep;  ///< MoeDispatcher::hierarchical in force
  bool compiled_loss;    ///< LoweringOptions::compiled_loss
  bool operator==(const StepKey&) const = default;
  template <class F>
  void visit(F f) const {
    f(model), f(cost), f(tp), f(cp), f(etp), f(ep), f(micro_batch), f(seq_len), f(attention_span), f(gpus_per_node), f(sp),
        f(recompute), f(recompute_fraction), f(recompute_modules), f(precision), f(attention), f(framework), f(tp_overlap),
        f(moe_imbalance),
        f(lora_rank), f(lora_targets), f(fp8_blockwise), f(moe_permute_passes), f(eager_elementwise),
        f(hierarchical_ep), f(compiled_loss);
  }
};

/// The model's two layer kinds (dense, MoE): every layer of a kind is alike, so one of each
/// stands for all. `first` is -1 for a kind the model lacks.
struct LayerKinds {
  int64_t first[2] = {-1, -1};
  int64_t count[2] = {0, 0};
  int64_t sliding[2] = {0, 0};  ///< of them, layers with a sliding window
  LayerParams params[2] = {};
};
LayerKinds layer_kinds(const ModelSpec& m);

/// Layers of each kind (dense, MoE) one pipeline rank holds.
struct RankKinds {
  int64_t n[2] = {0, 0};
  /// DualPipe: the layers of each kind in the rank's own-direction chunk (stage r); the
  /// rest are the reverse direction's stage pp-1-r.
  int64_t n_own[2] = {0, 0};
  int64_t layers() const { return n[0] + n[1]; }
};

/// The plan fields the assignment of layers to pipeline ranks depends on (an explicit
/// `stage_layers` list is never cached).
struct StageKey {
  const ModelSpec* model;
  int64_t pp, vpp;
  bool dualpipe;
  bool operator==(const StageKey&) const = default;
};

/// FNV-1a over a key's fields.
struct KeyHash {
  template <class K>
  size_t operator()(const K& k) const {
    uint64_t h = 1469598103934665603ull;
    k.visit([&](auto v) {
      uint64_t x = 0;
      static_assert(sizeof(v) <= sizeof(x));
      std::memcpy(&x, &v, sizeof(v));
      h = (h ^ x) * 1099511628211ull;
    });
    return static_cast<size_t>(h);
  }
};

struct EvalCache::Impl {
  std::unordered_map<MemKey, MemVal, KeyHash> memory;  ///< node-based: pointers stay valid
  std::unordered_map<StepKey, KindCosts, KeyHash> step;
  std::deque<std::pair<StageKey, std::vector<RankKinds>>> stages;  ///< deque: references stay valid
};

/// Dense and MoE layer counts per pipeline rank (from stage_layer_ids), through the cache
/// when one is given; `scratch` holds the result otherwise.
const std::vector<RankKinds>& rank_kinds(const ModelSpec& m, const TrainingPlan& t, EvalCache* cache,
                                         std::vector<RankKinds>& scratch);

}  // namespace capsim
