#pragma once
/// Analytical step-time engine: one optimizer step of a resolved training plan, from the
/// lowered operators and a CostModel, with the pipeline bubble in closed form.

#include <cstdint>
#include <string>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/eval_cache.hpp"
#include "capsim/core/scenario.hpp"

namespace capsim {

/// Knobs of the step model that frameworks set differently.
struct StepOptions {
  /// Fraction of tensor-parallel communication hidden behind GEMMs (0 = synchronous
  /// collectives); nullopt = auto: userbuffers' bulk backward overlap where
  /// userbuffers_tp_overlap() holds, synchronous collectives elsewhere.
  std::optional<double> tp_overlap;
  /// Tokens routed to the busiest expert over the mean (1 = perfectly balanced routing).
  double moe_imbalance = 1.0;
  /// Gradient reduction overlapped with the last microbatch's backward, parameter
  /// gathering with the first forward (Megatron-LM --overlap-grad-reduce/--overlap-param-gather).
  bool overlap_dp = true;
};

/// The options a resolved plan states for itself (its TP overlap, MoE imbalance and DP
/// overlap): what the step evaluated for the plan used, for any later look at the same step.
inline StepOptions plan_step_options(const TrainingPlan& t) {
  StepOptions o;
  o.tp_overlap = t.tp_comm_overlap;
  o.moe_imbalance = t.moe_imbalance;
  o.overlap_dp = t.overlap_dp;
  return o;
}

/// Whether "auto" TP overlap is Transformer Engine's userbuffers overlap, as the Megatron
/// stack's published recipes run it: Megatron-Bridge enables it in its training recipes
/// ("the most performant configurations are set in the Megatron-Bridge training recipes
/// by default", docs/performance-guide.md) and gates it on TP >= 2, sequence parallelism
/// and Transformer Engine (src/megatron/bridge/training/comm_overlap.py, whose
/// userbuffers presets are for H100 and B200 only); the Megatron-Core H100 weak-scaling
/// runs used --tp-comm-overlap (Megatron-LM README). Userbuffers needs the TP group inside
/// one NVLink domain.
bool userbuffers_tp_overlap(const SystemSpec& sys, const TrainingPlan& t);

/// Time of one step and where it goes (seconds unless named otherwise).
struct StepBreakdown {
  double step_s = 0;
  double compute_s = 0;     ///< forward + backward compute over the step (critical stage)
  double recompute_s = 0;   ///< recomputed forward under the recompute policy
  double exposed_tp_s = 0, exposed_cp_s = 0, exposed_ep_s = 0, exposed_pp_s = 0, exposed_dp_s = 0;
  double total_tp_s = 0, total_cp_s = 0, total_ep_s = 0, total_pp_s = 0, total_dp_s = 0;  ///< before overlap
  double bubble_s = 0;      ///< pipeline fill and drain
  /// Computation lengthened by the SMs the data-parallel collectives hold while they
  /// overlap it (within compute_s).
  double dp_slowed_s = 0;
  /// The same for the context-parallel exchange beside attention and the expert-parallel
  /// all-to-all beside the other microbatch's passes (within compute_s, recompute_s).
  double cp_slowed_s = 0, ep_slowed_s = 0;
  double dp_sm_share = 0;  ///< share of the SMs the data-parallel collectives hold (time-weighted)
  double optimizer_s = 0;   ///< on the GPU, or with offload the three parts below
  double offload_d2h_s = 0;  ///< offloaded optimizer: 16-bit gradients down over PCIe
  double offload_cpu_s = 0;  ///< offloaded optimizer: the CPU Adam step
  double offload_h2d_s = 0;  ///< offloaded optimizer: updated 16-bit parameters up over PCIe
  double microbatch_s = 0;  ///< forward+backward of one microbatch on the slowest stage
  int64_t slowest_stage = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double model_flops_per_step = 0;     ///< 3 x forward FLOPs (causal attention), no recompute
  double hardware_flops_per_step = 0;  ///< model FLOPs plus recompute
  double model_tflops_per_gpu = 0;
  double mfu = 0;  ///< model FLOP/s over the dense bf16 (fp16) peak of all GPUs
  double hfu = 0;  ///< hardware FLOP/s over the same peak
};

/// The communication groups of a layout placed on nodes: TP innermost, then CP, then DP,
/// PP outermost (Megatron-LM order); EP folds into the TP x CP x DP ranks after ETP.
struct LayoutGroups {
  Group tp, cp, dp, dp_expert, ep, etp;
  bool pp_cross_node = false;
};
LayoutGroups layout_groups(const TrainingPlan& t, int64_t gpus_per_node);

/// Per-microbatch costs of one model chunk (the layers of one virtual pipeline stage) on
/// the GPU that holds it, from the same operator costs as analytical_step.
struct ChunkCost {
  double fwd_s = 0;    ///< forward, with exposed TP/CP/EP communication
  double bwd_s = 0;    ///< backward input gradients, recompute and exposed communication
  double wgrad_s = 0;  ///< weight-gradient GEMMs (split out by zero-bubble schedules)
  double ep_s = 0;     ///< expert-parallel all-to-all within fwd_s + bwd_s (DualPipe hides it)
  /// Under Megatron-Core's batch-level expert-parallel overlap: what running this chunk's
  /// forward beside another microbatch's backward of it saves (ep_overlap_pair).
  double ep_pair_saved_s = 0;
  /// DualPipe: one forward overlapped with another microbatch's backward (F&B); 0 = the
  /// sum of both with this chunk's all-to-all hidden.
  double fb_s = 0;
  double activation_bytes = 0;  ///< kept for backward per microbatch (as training_memory)
  double params = 0;         ///< dense parameters on this GPU
  double expert_params = 0;  ///< routed-expert parameters on this GPU
  double fp8_params = 0;     ///< of `params`, the GEMM weights kept in FP8 (fp8_params())
  double embedding_params = 0;  ///< of `params`, the input embedding's (GradBuckets)
  /// Seconds to cast this chunk's fp8 GEMM weights once per step (Transformer Engine).
  double weight_cast_s = 0;
  int64_t layers = 0;
};

struct PipelineCosts {
  std::vector<std::vector<ChunkCost>> chunks;  ///< [pipeline rank][chunk]
  double p2p_s = 0;      ///< one boundary activation (or gradient) transfer
  double p2p_bytes = 0;
  bool p2p_cross_node = false;
};

/// One operator of the lowered model on one GPU, for one microbatch: what a run of it
/// costs forward, backward (input and weight gradients) and recomputed under the plan's
/// policy, and how many times one pass through the model runs it. Communication rows
/// (`communication`) are a layer's collectives before any overlap hides them.
struct OperatorTime {
  std::string block;   ///< "layer", "moe_layer", "embedding", "head" or "mtp"
  std::string name;    ///< the lowered op ("qkv_proj", "core_attention", ...) or "tp_collectives",
                       ///< "cp_exchange", "ep_all_to_all"
  int64_t count = 0;   ///< runs per pass through the model (layers of the block's kind)
  double fwd_s = 0, bwd_s = 0, recompute_s = 0;  ///< per run
  double fwd_flops = 0;                          ///< per run, forward
  bool communication = false;
  /// Its time in one pass through the model: count runs of forward, backward and recompute.
  double pass_s() const { return static_cast<double>(count) * (fwd_s + bwd_s + recompute_s); }
};

/// The operators analytical_step prices, in model order (layer kinds, then the embedding,
/// the head and any multi-token prediction module), from the same costs. Over a pipeline
/// the layers spread across stages; the rows cover the whole model. Without pipeline,
/// context or expert parallelism, microbatches x the sum of count x (fwd + bwd) is the
/// step's compute_s less dp_slowed_s.
std::vector<OperatorTime> operator_times(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t,
                                         const CostModel& cost, const StepOptions& opt = {});

PipelineCosts pipeline_costs(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t,
                             const CostModel& cost, const StepOptions& opt = {});

/// Parameters per second one node's CPUs update with DeepSpeed's CPU-Adam: 10 billion
/// parameters in 2.57 s on a DGX-2 host, two 24-core Xeon Platinum 8168 (Ren et al. 2021,
/// ZeRO-Offload, USENIX ATC, Table 3, "CPU-Adam", the largest model measured). The node's
/// GPUs share it: each rank's CPU-Adam runs on its share of the cores.
inline constexpr double kCpuAdamParamsPerSecondPerNode = 10e9 / 2.57;

/// Host-device link of one GPU in force, bytes/s one direction: system.pcie_gbps_per_gpu,
/// or with "auto" the GPU preset's PCIe x16 payload rate (data/gpus/, pcie_bw_unidir_gbps:
/// Gen5 x16 63 GB/s for H100/H200, Gen4 x16 31.5 GB/s for A100, PCI-SIG base specs).
double pcie_bytes_per_s(const SystemSpec& sys);

/// Bytes per parameter a fused optimizer update reads and writes.
double optimizer_traffic(Optimizer o, bool bf16_moments = false);

/// Seconds a fused optimizer step over `params` parameters takes on the GPU: its traffic at
/// the GPU's measured share of the stream rate for multi-tensor optimizer kernels
/// (GpuEfficiency::optimizer_stream; the stream rate where none is measured).
double optimizer_step_seconds(const CostModel& cost, const SystemSpec& sys, double params, Optimizer o,
                              bool bf16_moments);

/// Data-parallel buckets of one model chunk's dense parameters, as Megatron-Core lays them
/// out (megatron/core/distributed/param_and_grad_buffer.py, core_r0.8.0 to main): the
/// parameters in reverse order of the model's, a bucket closed once it holds
/// `bucket_elems` or more, a parameter never split between two. The input embedding is
/// a model's first parameter, so it lands whole in the last bucket, with what the layers
/// left below the bucket size: the last gradients the backward makes (the embedding's
/// backward is its last operation), so the one reduction nothing hides, and the first
/// bucket the next forward gathers (the distributed optimizer starts that all-gather just
/// before the forward, distrib_optimizer.py zero_grad). PyTorch DDP and DeepSpeed keep a
/// tensor whole in a bucket too. At most one bucket a layer otherwise (as before).
struct GradBuckets {
  int64_t count = 1;  ///< buckets in all
  double each = 0;    ///< parameters of each bucket but the last
  double last = 0;    ///< parameters of the last bucket to reduce (the first to gather)
};
GradBuckets grad_buckets(double params, double embedding, double bucket_elems, int64_t layers);
/// Elements a data-parallel bucket closes at: Megatron-Core's max(40M, 1M x dp)
/// (distributed_data_parallel_config.py bucket_size default); one layer's (a wrapped
/// FSDP unit) under PyTorch.
double dp_bucket_elems(const TrainingPlan& t, int64_t dp);

/// Bytes Transformer Engine moves to cast one layer's fp8 GEMM weights (on this GPU) once
/// per step; 0 unless the plan trains in fp8 with Megatron-LM conventions.
double fp8_weight_cast_bytes(const TrainingPlan& t, const LayerParams& lp);

/// A layer's dense GEMM weights on one tensor-parallel rank (what fp8_params() keeps in FP8).
double fp8_gemm_weight_params(const LayerParams& lp, int64_t tp);


/// Bytes the data-parallel parameter all-gather moves: 16-bit parameters, of which
/// `fp8_dense` dense and every routed-expert one are one byte under fp8_params().
inline double param_gather_bytes(bool fp8, double dense, double fp8_dense, double experts) {
  return fp8 ? 2.0 * dense - fp8_dense + experts : 2.0 * (dense + experts);
}

/// Step time of a fully resolved plan.
StepBreakdown analytical_step(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t,
                              const CostModel& cost, const StepOptions& opt = {}, EvalCache* cache = nullptr);

}  // namespace capsim
