#pragma once
/// A scenario: model + system + training or serving plan. Shaped like a validation case
/// (see data/validation/SCHEMA.md) without `measured`. `std::nullopt` in a field that the
/// schema allows to be "auto" means auto: the evaluator resolves it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/engine.hpp"
#include "capsim/core/gpu.hpp"
#include "capsim/core/model.hpp"

namespace capsim {

enum class Recompute { none, selective, full };
/// Pipeline schedule; interleaving (vpp > 1) is the interleaved variant of 1F1B.
enum class Schedule { one_f_one_b, gpipe, zb_h1, dualpipe };
enum class Optimizer { adamw, sgd, adafactor, lion, adam8bit };
/// ppo / grpo: an RL iteration (Scenario::rl) whose updates are full-parameter training
/// steps of this plan; the other modes are one optimizer step. dpo / simpo / orpo: one step
/// of preference optimisation on chosen and rejected sequences (Scenario::preference);
/// distill: one step of the student beside a teacher (Scenario::distill).
enum class TrainMode { pretrain, sft, lora, qlora, ppo, grpo, dpo, simpo, orpo, distill };

/// Whether the mode trains LoRA adapters on a frozen base (lora, qlora).
inline bool trains_adapters(TrainMode m) { return m == TrainMode::lora || m == TrainMode::qlora; }
/// Whether the mode trains on preference pairs (dpo, simpo, orpo).
inline bool is_preference(TrainMode m) {
  return m == TrainMode::dpo || m == TrainMode::simpo || m == TrainMode::orpo;
}
/// The training stack whose conventions decide what "selective" recompute keeps and how
/// the loss holds the logits: Megatron-LM (core-attention recompute, fused vocab-parallel
/// cross entropy) or PyTorch-native FSDP stacks such as torchtitan (op-level selective
/// checkpointing, F.cross_entropy on fp32 logits).
enum class Framework { megatron, pytorch };
/// How routed tokens travel between expert-parallel ranks. alltoall: every routed copy on
/// its own in one all-to-all (Megatron-Core's `alltoall` dispatcher over NCCL, DeepSpeed-MoE,
/// torchtitan). hierarchical: a token crosses the network once per destination node and
/// fans out to that node's experts over NVLink (DeepEP's normal kernels and HybridEP behind
/// Megatron-Core's `flex` dispatcher; DeepSeek-V3 report, arXiv 2412.19437, Sec. 3.2.2).
enum class MoeDispatcher { alltoall, hierarchical };

std::string_view to_string(Recompute r);
std::string_view to_string(Schedule s);
std::string_view to_string(Optimizer o);
std::string_view to_string(TrainMode m);
std::string_view to_string(Framework f);
std::string_view to_string(MoeDispatcher d);

/// The cluster the scenario runs on.
struct SystemSpec {
  GpuSpec gpu;
  int64_t num_gpus = 1;
  int64_t gpus_per_node = 8;
  double nic_gbps_per_gpu = 0;  ///< scale-out line rate per GPU, one direction, Gb/s
  /// The scenario said "auto" (not published): nic_gbps_per_gpu is the GPU's reference
  /// node's (GpuSpec::reference_nic_gbps_per_gpu), reported as resolved.
  bool nic_auto = false;
  /// Host-device link per GPU, one direction, GB/s; nullopt = auto (the GPU's PCIe
  /// generation, pcie_gbps_of). Read only with offload.
  std::optional<double> pcie_gbps_per_gpu;
  /// NVMe read bandwidth per node, GB/s; nullopt = not published.
  std::optional<double> nvme_gbps_per_node;
  bool operator==(const SystemSpec&) const = default;
};

/// LoRA adapters (mode "lora").
struct LoraSpec {
  std::optional<int64_t> rank = 16;  ///< nullopt = auto: the framework's default (lora_defaults)
  /// HF module names, e.g. q_proj, v_proj; nullopt = auto: the framework's default.
  std::optional<std::vector<std::string>> targets = std::vector<std::string>{};
  /// Bytes per parameter of the frozen base's linear weights (embeddings, head and norms
  /// stay 16-bit). 2 for a bf16/fp16 base. QLoRA (Dettmers et al. 2023, Sec. 2-3): NF4 at
  /// 0.5 B plus one fp32 absmax per 64-weight block (4/64 B); with double quantization the
  /// absmax is 8-bit with one fp32 constant per 256 blocks: 1/64 + 4/(64*256) B.
  double base_bytes_per_param = 2.0;
  /// Dropout on each adapter's input (Hu et al. 2021, Sec. 4: the A projection reads
  /// dropout(x)); nullopt = auto: the framework's default (lora_defaults).
  std::optional<double> dropout = std::nullopt;
  bool operator==(const LoraSpec&) const = default;
};

/// Memory accounting knobs that are not part of the published case shape.
struct MemoryOptions {
  /// CUDA context and runtime kernels resident on each GPU, outside the allocator: about
  /// 300 MiB with lazy module loading (CUDA >= 11.7), as PyTorch's maintainers measure it
  /// (pytorch/pytorch#107667); the serving memory model counts the same figure.
  double cuda_context_bytes = 300.0 * 1024 * 1024;
  /// Extra fraction of allocated bytes the caching allocator holds (fragmentation).
  double allocator_reserve_fraction = 0;
  /// Optimizer states (and fp32 master weights) live in host memory (ZeRO-Offload).
  bool offload_optimizer = false;
  /// A frozen copy of the trained model's weights beside it (DPO's reference model):
  /// 16-bit, laid out and ZeRO-3-sharded as the trained weights, no gradients, no
  /// optimizer state, no activations kept for a backward.
  bool reference_weights = false;
  /// A frozen model of its own on the same GPUs (a colocated distillation teacher): its
  /// dense (non-expert) and routed-expert parameter counts, held in 16-bit with the
  /// trained model's tp / pp / ep split (frozen_model_params).
  double frozen_dense_params = 0, frozen_expert_params = 0;
  bool operator==(const MemoryOptions&) const = default;
};

/// What a run costs beyond time: a token budget, a price and a power model.
struct TrainingBudget {
  double tokens = 0;            ///< tokens to train on (0: not given)
  double usd_per_gpu_hour = 0;  ///< price (0: not given)
  double pue = 1.0;             ///< facility power over IT power; GPUs drawn at their TDP
  /// Share of the wall-clock time that trains (the rest lost to interruptions, restarts and
  /// recomputed work); nullopt = auto: effective_training_fraction(num_gpus).
  std::optional<double> effective_fraction;
  bool operator==(const TrainingBudget&) const = default;
};

/// What Megatron-LM's selective recompute reruns (TransformerConfig.recompute_modules):
/// core attention (its default), the two RMSNorms, MLA's up-projections with RoPE, the
/// routed experts' activation function, and the dense MLP. The norms, up-projections and
/// expert activation discard their outputs and rerun them in the backward (DeepSeek-V3
/// report, Sec. 3.2.3 and 3.3); "mlp" checkpoints the dense MLP block, keeping its input
/// and rerunning fc1, the activation and fc2 (MaxText's save_dot_except_mlp policy keeps
/// the same).
enum RecomputeModule : unsigned {
  kRecomputeCoreAttn = 1,
  kRecomputeLayernorm = 2,
  kRecomputeMlaUpProj = 4,
  kRecomputeMoeAct = 8,
  kRecomputeMlp = 16,
};

/// Layout fields a run did not publish ("auto"), as bits of TrainingPlan::auto_layout.
enum AutoLayoutField : unsigned {
  kAutoTp = 1,
  kAutoPp = 2,
  kAutoDp = 4,
  kAutoCp = 8,
  kAutoEp = 16,
  kAutoSp = 32,
};

/// The scenario keys of the AutoLayoutField bits, bit i at index i.
inline constexpr const char* kAutoLayoutNames[] = {"tp", "pp", "dp", "cp", "ep", "sp"};

struct TrainingPlan {
  int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;
  /// AutoLayoutField bits: the fields the scenario left "auto". They hold 1 (sp: false)
  /// until evaluate_training tries every layout the fixed fields and the GPU count allow
  /// (layout_candidates) and keeps the fastest that fits.
  unsigned auto_layout = 0;
  std::optional<int64_t> vpp = 1;   ///< virtual stages per pipeline rank; nullopt = auto
  std::optional<int64_t> etp = 1;   ///< expert tensor parallel; nullopt = auto
  bool sp = false;
  std::optional<int> zero = 0;      ///< 0..3; nullopt = auto
  std::optional<int64_t> micro_batch;  ///< sequences; nullopt = auto
  int64_t global_batch = 1;
  int64_t seq_len = 2048;
  /// Packed sequences: mean tokens of the documents a sequence is packed from, each
  /// attending only within itself (a block-diagonal causal mask: Transformer Engine's THD
  /// format with cu_seqlens under Megatron-LM/NeMo packed fine-tuning, document masking).
  /// nullopt: the sequence is one document. See attention_span.
  std::optional<int64_t> document_tokens;
  std::optional<Recompute> recompute = Recompute::none;  ///< nullopt = auto
  /// With full recompute: the fraction of each stage's layers recomputed (Megatron-LM
  /// --recompute-method block --recompute-num-layers); the rest keep all activations.
  double recompute_fraction = 1.0;
  /// With selective recompute under Megatron-LM: RecomputeModule bits.
  unsigned recompute_modules = kRecomputeCoreAttn;
  DType precision = DType::bf16;    ///< fp16, bf16 or fp8 (mixed precision)
  /// "auto" (a source that did not publish it): the faster of bf16 and, on a GPU with FP8
  /// tensor cores, fp8 that fits (evaluate_training, search_training); `precision` is then
  /// a placeholder.
  bool precision_auto = false;
  /// nullopt = auto: the framework's kernel (see attention_of).
  std::optional<AttentionKernel> attention;
  Schedule schedule = Schedule::one_f_one_b;
  /// "auto": evaluate_training picks the fastest fitting schedule (1F1B with any vpp,
  /// ZB-H1, DualPipe where its divisibility rules hold); `schedule` is then a placeholder.
  bool schedule_auto = false;
  Optimizer optimizer = Optimizer::adamw;
  bool optimizer_auto = false;  ///< the scenario said "auto": AdamW, reported as resolved
  /// FP8 scaling recipe (precision fp8): tensorwise (Transformer Engine's delayed or
  /// current scaling, torchao's Float8Linear; the default) or blockwise (1x128 activation
  /// and 128x128 weight tiles, DeepSeek-V3 report Sec. 3.3: GEMMs at the block-scaled
  /// kernels' rate, and the MoE SwiGLU inputs cached in FP8). nullopt = auto (tensorwise).
  std::optional<bool> fp8_blockwise;
  /// Adam/Lion/SGD moments kept in BF16 instead of FP32 (DeepSeek-V3 report Sec. 3.3.2);
  /// master weights and gradients stay FP32.
  bool bf16_moments = false;
  /// Scenario key "optimizer_moments" absent or "auto": under the Megatron stack the search
  /// may keep the moments (and the gradient reduction, when grad_reduce_dtype is auto too)
  /// in 16 bits where full-precision states would cost recomputation or not fit
  /// (evaluate_training).
  bool moments_auto = true;
  /// Gradients accumulated and reduced in fp32 (Megatron-LM forces it for bf16,
  /// `--accumulate-allreduce-grads-in-fp32`; Megatron-Core DDP's main_grad buffer follows
  /// `grad_reduce_in_fp32`, True in Megatron-Bridge's and NeMo 2's bf16_mixed; FSDP2's
  /// reduce_dtype float32 in torchtitan) or in the 16-bit training dtype (NeMo 2's
  /// performance recipes set grad_reduce_in_fp32 = False). nullopt = auto: fp32 unless the
  /// run trains in fp16. Scenario key "grad_reduce_dtype"; grad_bytes().
  std::optional<bool> grad_reduce_fp32;
  /// FP8 training keeps the transformer layers' GEMM weights as FP8 tensors and gathers
  /// them in FP8 across data-parallel ranks (Megatron-Core `fp8_param_gather`, NeMo
  /// `fp8_params`), instead of 16-bit weights that Transformer Engine casts once a step.
  /// nullopt = auto: on for per-tensor FP8 under the Megatron stack, as the FP8 recipes of
  /// NeMo 2 (`bf16_with_fp8_mixed`: fp8_params = True), Megatron-Bridge
  /// (`bf16_with_fp8_*_mixed`: fp8_param_gather = True) and NVIDIA's DGX Cloud benchmarks
  /// (+model.fp8_params=True) set it; off otherwise. Scenario key "fp8_param_gather";
  /// fp8_params().
  std::optional<bool> fp8_param_gather;
  TrainMode mode = TrainMode::pretrain;
  std::optional<LoraSpec> lora;
  /// Explicit transformer layers per virtual pipeline stage (size pp*vpp); empty = split
  /// as Megatron-LM does.
  std::vector<int64_t> stage_layers;
  MemoryOptions memory;
  TrainingBudget budget;
  /// Fraction of tensor-parallel communication hidden behind GEMMs in [0, 1] (0 =
  /// synchronous collectives); nullopt = auto: Transformer Engine's userbuffers overlap
  /// where the Megatron stack runs it (userbuffers_tp_overlap), else none.
  std::optional<double> tp_comm_overlap;
  /// Tokens at the busiest expert over the mean; 1 = balanced routing.
  double moe_imbalance = 1.0;
  /// nullopt = auto: hierarchical where the model's routing is node-limited (n_group and
  /// topk_group, designed with it: DeepSeek-V3 report Sec. 2.1.2), else alltoall
  /// (Megatron-Core's `alltoall` dispatcher). Scenario key "moe_dispatcher"; dispatcher_of().
  std::optional<MoeDispatcher> moe_dispatcher;
  /// Expert-parallel all-to-all of one microbatch overlapped with the computation of
  /// another: Megatron-Core's batch-level overlap (`overlap_moe_expert_parallel_comm`,
  /// megatron/core/pipeline_parallel/combined_1f1b.py, v0.14), which pairs each forward with
  /// the backward of an earlier microbatch layer by layer, one unpaired forward and backward
  /// at the ends (PP 1) or the interleaved schedule's warm-up and cool-down (PP > 1 with
  /// vpp > 1). nullopt = auto: off, as in Megatron-Core's TransformerConfig. Scenario key
  /// "ep_overlap"; ep_overlap_possible().
  std::optional<bool> ep_overlap;
  /// Gradient reduction and parameter gathering overlapped with compute.
  bool overlap_dp = true;
  /// nullopt = auto: PyTorch-native under ZeRO-3 (FSDP) and for adapters on a 4-bit base
  /// or on one GPU, Megatron-LM otherwise (its distributed optimizer is ZeRO-1).
  std::optional<Framework> framework;
  /// Norms, rotary embedding and the gated activation run as PyTorch eager code, one kernel
  /// per operator with fp32 intermediates (torchtitan without torch.compile), instead of
  /// fused kernels (Transformer Engine, XLA, torch.compile). Scenario key "elementwise":
  /// "fused" (default) or "eager"; LoweringOptions::eager_elementwise.
  bool eager_elementwise = false;
  /// The PyTorch stack's cross entropy compiled into fused kernels (torch.compile, as
  /// torchtitan compiles its loss under --training.compile since PR #1033, April 2025)
  /// instead of eager F.cross_entropy on an fp32 copy of the logits. nullopt = auto: eager,
  /// the PyTorch default. Scenario key "loss": "auto", "eager" or "compiled"; the Megatron
  /// stack always runs its fused vocab-parallel cross entropy.
  std::optional<bool> compiled_loss;
  bool operator==(const TrainingPlan&) const = default;
};

/// The framework in force: the plan's, or the auto rule on its ZeRO stage and adapters.
Framework framework_of(const TrainingPlan& t);

/// Bytes of one gradient element as accumulated and reduced across data-parallel ranks:
/// 4 in fp32, 2 in the 16-bit training dtype (TrainingPlan::grad_reduce_fp32).
double grad_bytes(const TrainingPlan& t);

/// Whether the transformer layers' GEMM weights are FP8 tensors (TrainingPlan::fp8_param_gather).
bool fp8_params(const TrainingPlan& t);

/// The dispatcher in force: the plan's, or the auto rule on the model's routing.
MoeDispatcher dispatcher_of(const TrainingPlan& t, const ModelSpec& m);

/// Why Megatron-Core's batch-level expert-parallel overlap cannot run with this plan (its
/// TransformerConfig checks: expert parallelism, no full recompute, vpp > 1 under a
/// pipeline; the Megatron stack; not DualPipe, which overlaps on its own), every reason
/// that holds, or empty.
std::string ep_overlap_blocker(const TrainingPlan& t);

/// Whether the batch-level expert-parallel overlap runs (TrainingPlan::ep_overlap).
bool ep_overlap_on(const TrainingPlan& t);

/// LoRA rank and targets a framework uses when a run does not set them: the fastest of its
/// published defaults. Megatron-LM stacks: NeMo 1.x's dim 32 on the fused query-key-value
/// projection alone (nemo/collections/nlp/parts/peft_config.py, get_target_modules default
/// ("attention_qkv",)); NeMo 2.0 and Megatron-Bridge `LoRA` add linear_proj, linear_fc1
/// and linear_fc2. PyTorch stacks (Hugging Face PEFT `LoraConfig`, LitGPT): r 8 on q_proj
/// and v_proj for llama-style models (peft/utils/constants.py,
/// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
LoraSpec lora_defaults(Framework f);

/// The plan's LoRA spec with auto fields replaced by `lora_defaults` of its framework.
LoraSpec resolved_lora(const TrainingPlan& t);

/// The attention kernel the framework runs on a GPU architecture: Transformer Engine's
/// fused kernel (cuDNN) under Megatron-LM on Hopper and later, FlashAttention-2 before
/// (Transformer Engine prefers FusedAttention from compute capability 9.0 on, FlashAttention
/// below); PyTorch's scaled_dot_product_attention flash backend (FlashAttention-2) under
/// PyTorch stacks. evaluate_training and search_training resolve an auto plan with it.
AttentionKernel default_attention(const TrainingPlan& t, GpuArch arch);
/// The precisions a plan is priced in: its own, or with precision "auto" bf16 and, on a
/// GPU with FP8 tensor cores, fp8 (in that order).
std::vector<DType> precision_candidates(const TrainingPlan& t, const GpuSpec& gpu);
/// The attention kernel in force: the plan's (resolved), else default_attention on Hopper.
AttentionKernel attention_of(const TrainingPlan& t);

/// Tokens one attention problem spans: the sequence, or the documents it is packed from
/// (TrainingPlan::document_tokens), never more than the sequence.
int64_t attention_span(const TrainingPlan& t);

/// A token-length distribution for serving workloads.
struct LengthDist {
  enum class Kind { fixed, uniform, sharegpt };
  Kind kind = Kind::fixed;
  double mean = 0;
  double min = 0, max = 0;  ///< uniform bounds
  bool operator==(const LengthDist&) const = default;
};

struct EngineOptions {
  std::optional<int64_t> max_num_seqs;
  /// max_num_seqs given as "auto": what the people who ran it did: the engine's default,
  /// or, where its launcher sizes the batch for the workload (EngineDefaults::
  /// batch_limits_from_trtllm_bench), the launcher's choice.
  bool max_num_seqs_auto = false;
  std::optional<int64_t> max_num_batched_tokens;
  std::optional<int64_t> block_size;
  std::optional<bool> chunked_prefill;
  std::optional<double> gpu_memory_utilization;
  /// A KV pool of this many tokens on each GPU (each attention-DP rank) instead of the
  /// memory-share rule: vLLM --num-gpu-blocks-override x block size, SGLang
  /// --max-total-tokens, TurboMind cache_max_entry_count >= 1 x its block length,
  /// TensorRT-LLM max_tokens_in_paged_kv_cache.
  std::optional<int64_t> kv_cache_tokens;
  std::optional<bool> cuda_graphs;                 ///< replay steps as CUDA graphs
  std::optional<int64_t> cuda_graph_max_tokens;    ///< largest step (tokens) captured
  std::optional<double> step_overhead_ms;          ///< host time per step not hidden by the GPU
  std::optional<double> eager_host_us_per_layer;   ///< host time per layer of an eager step
  std::optional<int64_t> scheduler_steps;          ///< decode passes per scheduling round
  std::optional<Preemption> preemption;            ///< what a sequence that runs out of KV blocks does
  std::optional<double> swap_space_gib;            ///< host swap space per GPU
  /// The longest sequence the server admits (vLLM's --max-model-len); unset = the model's
  /// context (max_position_embeddings), as vLLM derives it.
  std::optional<int64_t> max_model_len;
  bool operator==(const EngineOptions&) const = default;
};

/// One request of a recorded trace.
struct TraceRequest {
  double arrival_s = 0;
  int64_t input_tokens = 1, output_tokens = 1;
  std::string prefix_id;      ///< requests sharing an id share their first prefix_tokens
  int64_t prefix_tokens = 0;
  bool operator==(const TraceRequest&) const = default;
};

/// Requests of a serving benchmark whose count was not published: the default --num-prompts
/// of vLLM's benchmarks/benchmark_serving.py ("By default <num_prompts> is 1000"; argparse
/// default=1000) and of SGLang's bench_serving, the clients the published runs use.
inline constexpr int64_t kBenchmarkDefaultPrompts = 1000;

struct ServingWorkload {
  enum class Mode { offline, poisson, concurrency, trace };
  Mode mode = Mode::offline;
  double qps = 0;
  int64_t concurrency = 0;
  int64_t num_requests = 0;
  /// num_requests left "auto" (not published): kBenchmarkDefaultPrompts, reported under
  /// resolved.
  bool num_requests_auto = false;
  LengthDist input_tokens;
  LengthDist output_tokens;
  /// Share of each prompt found in the prefix cache (block-aligned); 0 = no reuse.
  double prefix_hit_rate = 0;
  std::vector<TraceRequest> trace;  ///< mode trace: the requests, in arrival order
  /// Whether requests arrive on their own clock (Poisson arrivals or a trace's timestamps)
  /// rather than all at once or from a closed loop of clients: a load only a serving front
  /// end takes (an offline benchmark launcher such as trtllm-bench issues requests all at
  /// once or from a fixed concurrency, `throughput --concurrency`, and has no arrival rate).
  bool rate_driven() const { return mode == Mode::poisson || mode == Mode::trace; }
  bool operator==(const ServingWorkload&) const = default;
};

/// Speculative decoding: a draft proposes k tokens, the target verifies k + 1 positions
/// per sequence, and each verification yields (1 - a^(k+1)) / (1 - a) tokens on average
/// for per-token acceptance rate a (Leviathan et al. 2023, Eq. 1).
struct SpeculativeSpec {
  int64_t k = 0;            ///< 0 = off
  double acceptance = 0.0;  ///< per-token acceptance rate a in [0, 1)
  /// Draft cost per proposed token as a fraction of one target decode step at the same
  /// batch (e.g. 1/layers for a one-layer MTP head); the draft model's own iteration
  /// time when `draft_model` is given.
  double draft_cost_fraction = 0.0;
  std::optional<ModelSpec> draft_model;
  bool operator==(const SpeculativeSpec&) const = default;
};

struct InferencePlan {
  int64_t tp = 1, pp = 1;
  std::optional<int64_t> ep = 1;  ///< nullopt = auto
  /// Attention data parallelism over the tp GPUs (TensorRT-LLM enable_attention_dp,
  /// SGLang --enable-dp-attention): each GPU runs attention and dense layers with whole
  /// weights for its own share of the sequences and keeps their KV cache; the routed
  /// experts are spread over the same GPUs (ep = tp). nullopt = auto: considered with
  /// ep "auto" where the engine has it, else off.
  std::optional<bool> attention_dp;
  /// GPUs attention runs data-parallel over: tp with attention DP on, else 1.
  int64_t attention_dp_degree() const { return attention_dp.value_or(false) && tp > 1 ? tp : 1; }
  int64_t replicas = 1;
  /// The scenario said "auto" (not published): as many replicas as the GPUs hold,
  /// num_gpus / (tp * pp), reported as resolved.
  bool replicas_auto = false;
  /// The scenario said "auto" for tp or pp: what the GPUs leave once the other degrees and
  /// the replicas are stated, num_gpus / (replicas x the other), reported as resolved.
  bool tp_auto = false, pp_auto = false;
  DType weight_dtype = DType::bf16;
  DType activation_dtype = DType::bf16;
  /// The scenario said "auto" (not published) for the weights or the activations: the
  /// checkpoint's own, resolved once the model and the GPU are read (resolve_auto_dtypes)
  /// and reported as resolved.
  bool weight_dtype_auto = false, activation_dtype_auto = false;
  std::optional<DType> kv_dtype = DType::bf16;  ///< nullopt = auto
  /// The KV-cache dtype in force: as given, or for "auto" the checkpoint's: FP8 beside FP8
  /// weights (the FP8 checkpoints' kv_cache_quant_algo), else 16-bit.
  DType resolved_kv_dtype() const { return kv_dtype.value_or(weight_dtype == DType::fp8 ? DType::fp8 : DType::bf16); }
  EngineOptions engine;
  /// The serving engine's profile (data/engines/): the defaults of every knob `engine`
  /// leaves unset, its host time per step and its CUDA-graph capture.
  EngineProfile profile;
  /// The engine driven in-process through its library class (vLLM's `LLM`, as RL
  /// frameworks and offline benchmarks use it) rather than as an API server: some
  /// engines default their batch limits by this usage context (DeploymentKnob).
  bool llm_class = false;
  /// Driven through the engine's asynchronous class built from engine arguments (vLLM's
  /// AsyncLLM.from_engine_args, usage context ENGINE_CONTEXT), which no usage context's
  /// batch defaults reach: the engine's scheduler defaults apply
  /// (EngineDefaults::engine_context_*). Set by asynchronous RL rollouts.
  bool engine_context = false;
  ServingWorkload workload;
  SpeculativeSpec speculative;
  enum class Router { round_robin, least_outstanding };
  Router router = Router::round_robin;
  /// Prefill/decode disaggregation: separate pools of replicas (each tp GPUs); the KV
  /// cache of a finished prefill moves to a decode replica. 0 = colocated.
  int64_t prefill_replicas = 0, decode_replicas = 0;
  bool kv_transfer_over_network = true;  ///< false: the pools share an NVLink domain
  /// 2:4 structured sparsity on the weight GEMMs (Ampere/Hopper sparse tensor cores).
  bool sparse_24 = false;
  /// Per-request latency objectives for goodput (vLLM benchmark_serving --goodput): a
  /// request is good when its TTFT and its TPOT are both within them.
  double slo_ttft_ms = 500, slo_tpot_ms = 50;
  /// FP8 weights with 128x128 block scales and activations quantized per 1x128 group (the
  /// DeepSeek-V3/R1 checkpoints) rather than per-tensor scales; unset ("auto") = the
  /// scaling of the model's published FP8 checkpoint (ModelSpec::fp8_weight_block).
  std::optional<bool> fp8_block_scaling;
  bool operator==(const InferencePlan&) const = default;
};

/// A model an RL iteration runs besides the actor (SCHEMA.md, `rl.models`).
struct RlModel {
  enum class Kind {
    none,   ///< absent (null)
    actor,  ///< "model": the case's model
    rule,   ///< a program (a verifier): no network, no GPU time
    other,  ///< a model of its own (an HF config object)
  };
  Kind kind = Kind::none;
  std::optional<ModelSpec> config;  ///< for Kind::other
  bool operator==(const RlModel&) const = default;
};

/// One PPO/GRPO iteration (SCHEMA.md, "Post-training cases", `rl`): rollout generation on
/// a serving engine, scoring forwards, `ppo_epochs` x `mini_batches` updates of the
/// training plan, and the weights moved from the training layout to the engine.
struct RlSpec {
  enum class Placement { colocated, split };
  int64_t prompts_per_step = 1;
  int64_t group_size = 1;  ///< samples per prompt (1 for PPO)
  std::optional<double> prompt_tokens;  ///< per sample; nullopt = auto
  /// Response tokens per sample: mean, and the longest a sample may run (0: none given).
  double response_mean = 1;
  double response_max = 0;
  bool response_fixed = false;  ///< every response exactly `response_mean` long
  int64_t max_total_tokens = 0;  ///< cap on prompt + response (0: none)
  int64_t ppo_epochs = 1;
  std::optional<int64_t> mini_batches;  ///< nullopt = auto: samples / global_batch
  int64_t async_staleness = 0;
  Placement placement = Placement::colocated;
  int64_t rollout_gpus = 1, train_gpus = 1;
  /// Split pools whose sizes the case left "auto" and its layout does not imply: the
  /// evaluation takes the fastest of rl_pool_candidates (resolve_rl_pools).
  bool pools_auto = false;
  /// The rollout engine's tp was left "auto": the smallest power of two dividing the rollout
  /// pool whose replica fits (resolved again for each candidate pool).
  bool rollout_tp_auto = false;
  /// The rollout engine: tp, pp, ep, weight/activation dtype, engine profile and knobs;
  /// replicas and workload are filled in per iteration.
  InferencePlan rollout;
  RlModel critic, reward, reference;
  /// Keys the scenario left "auto", sorted; the reader resolved them (SCHEMA.md: "auto" is
  /// what the source did not publish) and the report names them.
  std::vector<std::string> auto_keys;
  bool operator==(const RlSpec&) const = default;
};

/// Preference optimisation (SCHEMA.md, `preference`): each pair is a chosen and a rejected
/// sequence of the plan's seq_len, so the plan's global_batch (sequences) is 2 x pairs.
struct PreferenceSpec {
  enum class Reference {
    model,        ///< a frozen reference model's forward each step (DPO)
    precomputed,  ///< reference log-probs computed before training: no cost in the step
    none,         ///< no reference (SimPO, ORPO)
  };
  int64_t pairs_per_step = 1;
  std::optional<double> prompt_tokens, response_tokens;  ///< mean per sequence, where given
  Reference reference = Reference::model;
  std::vector<std::string> auto_keys;  ///< keys the case left "auto", for the report
  bool operator==(const PreferenceSpec&) const = default;
};

/// Knowledge distillation (SCHEMA.md, `distill`): a frozen teacher scores the sequences
/// the student trains on.
struct DistillSpec {
  enum class Placement {
    colocated,    ///< teacher weights on the student's GPUs, its forward in the step
    split,        ///< teacher on teacher_gpus GPUs of its own, scoring the next batch
    precomputed,  ///< teacher logits read from disk
  };
  ModelSpec teacher;
  Placement placement = Placement::colocated;
  int64_t teacher_gpus = 0;  ///< split only
  std::vector<std::string> auto_keys;  ///< keys the case left "auto", for the report
  bool operator==(const DistillSpec&) const = default;
};

struct Scenario {
  std::string id;
  ModelSpec model;
  SystemSpec system;
  std::optional<TrainingPlan> training;
  std::optional<InferencePlan> inference;
  /// Mode ppo/grpo: the RL iteration around `training` (the actor's update layout).
  std::optional<RlSpec> rl;
  /// Modes dpo/simpo/orpo: the pairs and the reference.
  std::optional<PreferenceSpec> preference;
  /// Mode distill: the teacher and where it runs.
  std::optional<DistillSpec> distill;
  bool operator==(const Scenario&) const = default;
};

}  // namespace capsim
