#pragma once
/// Memory per GPU for training (every pipeline stage) and serving.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capsim/core/eval_cache.hpp"
#include "capsim/core/scenario.hpp"
#include "capsim/core/workload.hpp"

namespace capsim {

/// Bytes per parameter of optimizer state, including the fp32 master copy where the
/// optimizer keeps one (mixed precision: Micikevicius et al. 2018).
/// AdamW: master, m, v in fp32 = 12 (Rajbhandari et al. 2020, ZeRO Sec. 3.1: K = 12).
/// SGD with momentum: master + momentum = 8. Lion (Chen et al. 2023): master + momentum
/// = 8. 8-bit Adam (Dettmers et al. 2022): master 4 + m 1 + v 1 = 6, block-wise
/// quantisation statistics ignored (2 fp32 per 2048-element block). Adafactor (Shazeer &
/// Stern 2018): master 4; its factored second moments (rows + columns per matrix) are
/// under 0.1% of the parameters for these shapes and are not counted.
double optimizer_bytes_per_param(Optimizer o, bool bf16_moments = false);

/// LoRA adapter parameters of one layer (Hu et al. 2021: rank x (in + out) per adapted
/// projection), unsharded. With `experts`, only the adapters on routed experts'
/// projections (one per expert); else the rest. `moe_kind`: the layer kind asked for (a
/// model without experts has none). `l` must be resolved (resolved_lora).
double lora_layer_params(const ModelSpec& m, const LoraSpec& l, bool moe_kind, bool experts);

/// Memory on one GPU of one pipeline stage.
struct StageMemory {
  int64_t stage = 0;           ///< pipeline rank
  int64_t layers = 0;          ///< transformer layers held (over all its virtual chunks)
  int64_t inflight_microbatches = 0;  ///< chunks of activations held at the peak
  double params = 0;           ///< parameters resident on this GPU before ZeRO sharding
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;
  /// A frozen reference copy of the trained model (MemoryOptions::reference_weights).
  double reference_weights_bytes = 0;
  /// A frozen model of its own, e.g. a colocated teacher (MemoryOptions::frozen_*_params).
  double frozen_weights_bytes = 0;
  double other_bytes = 0;      ///< temporary buffers plus the stated CUDA context reserve
  double total_bytes = 0;
  double capacity_bytes = 0;
  bool fits = false;
  /// Components of other_bytes, for the report.
  double logits_bytes = 0;
  double comm_buffer_bytes = 0;
  double recompute_working_bytes = 0;
  double cuda_context_bytes = 0;
  double allocator_reserve_bytes = 0;
  bool operator==(const StageMemory&) const = default;
};

struct TrainingMemory {
  std::vector<StageMemory> stages;
  size_t peak_stage = 0;  ///< index of the stage that needs most
  const StageMemory& peak() const { return stages[peak_stage]; }
  bool fits() const { return peak().fits; }
  bool operator==(const TrainingMemory&) const = default;
};

/// Dense (everything but routed experts) and routed-expert parameters of a model.
struct FrozenParams {
  double dense = 0, expert = 0;
};
FrozenParams frozen_model_params(const ModelSpec& m);

/// Training memory per pipeline stage. `t` must be fully resolved (no auto fields).
/// Weights, gradients and optimizer states shard over data parallel ranks by ZeRO stage
/// (Rajbhandari et al. 2020: 2+2+K/N, 2+(2+K)/N, (2+2+K)/N bytes per parameter); expert
/// weights shard over the expert-data-parallel group tp*cp*dp/(ep*etp); activations come
/// from each operator's kept bytes times the microbatches in flight on that stage.
/// Frozen models (t.memory): a reference copy holds the stage's weights again at 2 bytes
/// per parameter, ZeRO-3-sharded as the trained weights; a model of its own spreads its
/// dense parameters over tp x pp and its routed experts over ep x etp x pp, 2 bytes each,
/// ZeRO-3-sharded likewise. Neither keeps activations: their forwards run under no_grad
/// before the trained model's, so their working set is not live at its peak.
TrainingMemory training_memory(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t,
                               EvalCache* cache = nullptr);
/// The same into `out`, reusing its storage: with a warm cache, no allocation once `out`
/// has held as many stages.
void training_memory(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t, TrainingMemory& out,
                     EvalCache* cache = nullptr);

/// Transformer layers held by each pipeline rank's virtual chunks: result[rank][chunk].
std::vector<std::vector<int64_t>> stage_layer_ids(const ModelSpec& m, const TrainingPlan& t);

/// Serving memory on one GPU of one replica (tp*pp GPUs), computed as vLLM does:
/// KV budget = capacity * gpu_memory_utilization - weights - activation peak of a
/// max_num_batched_tokens profiling pass - non-torch memory; blocks = budget /
/// (block_size * KV bytes per token on this GPU).
struct InferenceMemory {
  double weights_bytes = 0;
  double activation_peak_bytes = 0;
  double non_torch_bytes = 0;
  double cudagraph_bytes = 0;     ///< CUDA-graph memory taken off before the KV cache is sized
  double kv_bytes_per_token = 0;  ///< on this GPU (TP-sharded heads, PP-sharded layers)
  double kv_budget_bytes = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t max_cached_tokens = 0;
  double capacity_bytes = 0;
  bool fixed_pool = false;  ///< the pool is the scenario's kv_cache_tokens, not a memory share
  bool fits = false;
  /// What the engine sets aside beside the weights and the KV cache: the activation peak,
  /// the memory outside PyTorch and the CUDA graphs.
  double runtime_bytes() const { return activation_peak_bytes + non_torch_bytes + cudagraph_bytes; }
};


/// `defaults`: the engine knobs in force for this plan as engine_defaults resolves them (the
/// scenario's own on top); null = resolved here.
InferenceMemory inference_memory(const ModelSpec& m, const SystemSpec& sys, const InferencePlan& p,
                                 const EngineDefaults* defaults = nullptr);

}  // namespace capsim
