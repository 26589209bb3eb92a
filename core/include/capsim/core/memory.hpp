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
double optimizer_bytes_per_param(Optimizer o);

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

/// Training memory per pipeline stage. `t` must be fully resolved (no auto fields).
/// Weights, gradients and optimizer states shard over data parallel ranks by ZeRO stage
/// (Rajbhandari et al. 2020: 2+2+K/N, 2+(2+K)/N, (2+2+K)/N bytes per parameter); expert
/// weights shard over the expert-data-parallel group tp*cp*dp/(ep*etp); activations come
/// from each operator's kept bytes times the microbatches in flight on that stage.
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
  double kv_bytes_per_token = 0;  ///< on this GPU (TP-sharded heads, PP-sharded layers)
  double kv_budget_bytes = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t max_cached_tokens = 0;
  double capacity_bytes = 0;
  bool fits = false;
};

/// vLLM engine defaults used where a scenario leaves a knob unset.
struct EngineDefaults {
  int64_t max_num_seqs = 256;             ///< vllm EngineArgs.max_num_seqs (v0.6 default)
  int64_t max_num_batched_tokens = 8192;  ///< vllm V1 default with chunked prefill (serve)
  int64_t block_size = 16;                ///< vllm CacheConfig.block_size default
  double gpu_memory_utilization = 0.9;    ///< vllm CacheConfig.gpu_memory_utilization default
  bool chunked_prefill = true;            ///< on by default in vLLM V1
  bool cuda_graphs = true;                ///< vLLM V1 captures steps as (piecewise) CUDA graphs
  /// Steps of more tokens run eagerly: vLLM V1's largest default capture size is 512
  /// (CompilationConfig cudagraph_capture_sizes 1, 2, 4, 8, 16, 24, ... 512).
  int64_t cuda_graph_max_tokens = 512;
  /// Host work per step the engine does not overlap with the GPU (scheduling, sampling
  /// bookkeeping, detokenisation): 0 unless the user measured it for their engine.
  double step_overhead_s = 0;
  /// Host time per layer that a step not replayed as a CUDA graph adds to its GPU time
  /// (measured as eager minus graphed time of the same step); unset = the default for the
  /// layer's kind (eager_host_dense_layer_s / eager_host_moe_layer_s in serving.hpp).
  std::optional<double> eager_host_s_per_layer;
  /// Forward passes per scheduling round when only decodes are scheduled (vLLM
  /// --num-scheduler-steps, V0 multi-step scheduling; 1 = every step is scheduled). New
  /// prompts wait for the round to end and its tokens stream as one chunk.
  int64_t scheduler_steps = 1;
  /// Preemption when KV blocks run out: recompute (vLLM V1, the default) or swap the
  /// victim's blocks to host memory over PCIe and back (vLLM V0 --preemption-mode swap),
  /// within `swap_space_bytes` per GPU (vLLM CacheConfig.swap_space default, 4 GiB).
  bool swap_preemption = false;
  double swap_space_bytes = 4.0 * 1024 * 1024 * 1024;
};

InferenceMemory inference_memory(const ModelSpec& m, const SystemSpec& sys, const InferencePlan& p,
                                 const EngineDefaults& defaults = {});

}  // namespace capsim
