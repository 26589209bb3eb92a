#pragma once
/// Serving engines as data: the knobs an engine runs with when a scenario leaves them
/// unset, its host time per step, and how it replays steps as CUDA graphs. A profile per
/// engine generation lives in data/engines/ (every figure with its source); the scheduler
/// and the iteration model read the resolved values and never branch on an engine's name.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace capsim {

/// One MoE kernel family's measured rates on one GPU preset id or architecture name
/// ("hopper"): HBM fraction at which it streams expert weights (decode), its fixed time,
/// and its grouped-GEMM compute fraction of the dense 8-bit or 16-bit peak (prefill).
/// No value = no figure: the GPU preset's moe_kernel_* figure applies.
struct MoeKernelRates {
  std::string target;         ///< GPU preset id or architecture name
  bool fp8_only = false;  ///< the figures hold for FP8 expert GEMMs only
  /// The figures hold for block-scaled FP8 expert GEMMs only (1x128 activation and 128x128
  /// weight scales, DeepSeek's recipe): a kernel for those scales says nothing of the
  /// per-tensor FP8 path, which then takes the GPU preset's figures.
  bool fp8_block_only = false;
  /// expert_us: time per expert the batch touches; a family that gives `hbm` without it
  /// has none (its line was fitted without the term), not the GPU preset's.
  std::optional<double> hbm, fixed_us, expert_us, compute_fp8, compute_bf16;
  /// compute_fp8 by the rows each expert's GEMMs get (the busiest rank's routed tokens over
  /// the experts it touches): points (rows ascending, fraction), read in log2(rows) between
  /// them and held beyond the ends. Where given it replaces compute_fp8.
  std::vector<std::pair<double, double>> compute_fp8_by_rows;
  /// compute_fp8 at `rows` rows an expert: the by-rows figure where given, else compute_fp8.
  std::optional<double> compute_fp8_at(double rows) const {
    const auto& t = compute_fp8_by_rows;
    if (t.empty()) return compute_fp8;
    if (rows <= t.front().first) return t.front().second;
    for (size_t i = 1; i < t.size(); ++i)
      if (rows <= t[i].first) {
        const double x = std::log2(rows / t[i - 1].first) / std::log2(t[i].first / t[i - 1].first);
        return t[i - 1].second + x * (t[i].second - t[i - 1].second);
      }
    return t.back().second;
  }
  bool operator==(const MoeKernelRates&) const = default;
};

/// The MoE kernel family an engine uses and its rates per GPU.
struct MoeKernel {
  /// vLLM V1's (data/engines/vllm-v1.json), without its rates, which are data only: a plan
  /// built in code runs the GPU presets' fused-MoE figures. A profile naming no family runs
  /// "triton", the presets' own figures.
  std::string family = "triton-tuned";
  std::vector<MoeKernelRates> rates;
  /// The rates for a GPU: its preset id first, else its architecture; nullptr = none.
  const MoeKernelRates* for_gpu(const std::string& id, std::string_view arch) const {
    for (const auto& r : rates)
      if (r.target == id) return &r;
    for (const auto& r : rates)
      if (r.target == arch) return &r;
    return nullptr;
  }
  bool operator==(const MoeKernel&) const = default;
};

/// A knob whose default depends on the GPU the engine finds and on how it is driven:
/// vLLM V1 picks its batch limits from the device's name or memory and from the usage
/// context (the `vllm serve` API server, or the in-process `LLM` class that offline
/// benchmarks and RL frameworks drive). The first rule that matches the GPU gives the
/// value; none matching leaves the profile's own.
struct GpuKnobRule {
  std::vector<std::string> gpus;     ///< any of these in the GPU preset id (none = every GPU)
  std::vector<std::string> except;   ///< none of these in the preset id
  double min_hbm_bytes = 0;          ///< at least this much device memory
  int64_t value = 0;                 ///< the API server's value
  std::optional<int64_t> llm_class;  ///< the in-process LLM class's value
  /// The engine releases the rule holds for, "from" inclusive, "to" exclusive ("" =
  /// unbounded); the profile reader drops the rules outside the version asked for.
  std::string from, to;
  bool matches(const std::string& gpu_id, double hbm_bytes) const;
  bool operator==(const GpuKnobRule&) const = default;
};

/// The context- and GPU-dependent part of an integer knob (see GpuKnobRule).
struct DeploymentKnob {
  std::optional<int64_t> llm_class;  ///< the LLM class's value where no rule matches
  std::vector<GpuKnobRule> by_gpu;
  /// The knob's value on this GPU in this context, `base` where nothing applies.
  int64_t resolve(int64_t base, const std::string& gpu_id, double hbm_bytes, bool llm_class_context) const;
  bool operator==(const DeploymentKnob&) const = default;
};

/// What a scheduler does with a running sequence when a block it needs is not free.
enum class Preemption {
  /// The victim drops all its blocks and recomputes its prompt and output so far when it
  /// resumes (vLLM's `--preemption-mode recompute`).
  recompute,
  /// The victim's blocks go to host memory over PCIe and come back, within
  /// `swap_space_bytes` per GPU, else it recomputes (vLLM V0 `--preemption-mode swap`).
  swap,
  /// The victim stops and keeps its cached blocks except the ones taken, its newest first;
  /// resuming, it recomputes only the tokens of the blocks it lost (TurboMind's
  /// SequenceManager: a victim's blocks are unlocked to the cache, tail blocks touched
  /// oldest, and only as many evicted as the request needs; the surviving prefix is
  /// verified and reused).
  partial,
  /// As partial, but the victim's blocks are freed into the prefix cache as its oldest
  /// eviction candidates: any block the other sequences need comes from them first, even
  /// once blocks freed later exist (vLLM V1, prefix caching on by default: the KV cache
  /// manager frees a request's blocks in reverse order, keeping their hashes, into an LRU
  /// queue, and a preempted request that resumes hits the prefix that survived).
  cached,
};

/// The knob's spelling in engine profiles, scenarios and reports, and back (nullopt for
/// another word).
std::string_view to_string(Preemption p);
std::optional<Preemption> preemption_from_string(std::string_view s);

/// An engine's memory share computed from what it reserves at start-up when the user sets
/// none (SGLang 0.5's mem_fraction_static): (GPU memory - reserve) / GPU memory, rounded to
/// three decimals, the reserve in MiB growing with the prefill chunk, the CUDA-graph batch,
/// the model's GPUs and, under attention DP, the graph batch times the DP ranks; at least
/// `min_mib` on a GPU of more than `min_above_gpu_mib`.
struct MemoryReserveRule {
  double fixed_mib = 0;                   ///< constant metadata (the attention backend's)
  double mib_per_prefill_token = 0;       ///< activations of the largest prefill chunk
  int64_t min_prefill_tokens = 0;         ///< the chunk counted at least this large
  double mib_per_graph_seq = 0;           ///< CUDA graphs, per captured batch slot
  double mib_per_model_gpu = 0;           ///< per GPU of tp x pp
  double mib_per_dp_graph_seq = 0;        ///< attention DP: per captured slot and DP rank
  double mib_per_dp_graph_seq_large = 0;  ///< attention DP: that again beyond large_graph_seqs
  int64_t large_graph_seqs = 0;
  double min_mib = 0, min_above_gpu_mib = 0;
  bool active() const { return fixed_mib > 0; }
  bool operator==(const MemoryReserveRule&) const = default;
};

/// The engine knobs in force for one deployment: the profile's defaults with the
/// scenario's own settings on top. The member initialisers are vLLM V1's defaults for an
/// API server on an H100, the values data/engines/vllm-v1.json resolves to there (a test
/// keeps the two equal): they stand for a plan built in code without a profile.
struct EngineDefaults {
  int64_t max_num_seqs = 1024;            ///< most sequences scheduled at once
  int64_t max_num_batched_tokens = 16384;  ///< token budget of one step with chunked prefill
  /// Without chunked prefill the budget is the larger of this and the longest request (and
  /// the model's context where unchunked_budget_is_model_context: vLLM V0's SchedulerConfig
  /// takes max(max_model_len, 2048)).
  int64_t unchunked_min_batched_tokens = 2048;
  /// Without chunked prefill, whether the budget covers the model's whole context: vLLM V0's
  /// SchedulerConfig takes max(max_model_len, 2048), max_model_len defaulting to the
  /// model's max_position_embeddings, so a 1,000-token prompt shares a prefill step with up
  /// to seven others on an 8K-context model. Otherwise the longest request stands in.
  bool unchunked_budget_is_model_context = false;
  /// Where the scenario leaves chunked prefill unset: on when the model's context exceeds
  /// this many tokens (vLLM V0 from PR #6666, "to avoid OOM errors in the initial memory
  /// profiling phase"; not for sliding-window models, and not for MLA, which V0 runs
  /// without chunked prefill); 0 = the profile's default for every model.
  int64_t chunked_prefill_above_context = 0;
  /// Without chunked prefill, whether one step prefills every waiting prompt that the KV
  /// blocks and max_num_seqs admit, the token budget only splitting it into kernel
  /// launches (LMDeploy TurboMind up to 0.1.0a1: LlamaBatch::ContextDecode runs all
  /// admitted prompts in sub-batches before the step's decode), instead of stopping at
  /// the budget.
  bool unchunked_prefill_unbounded = false;
  /// Without chunked prefill, whether a step that prefills whole prompts also carries the
  /// running sequences' decodes (LMDeploy TurboMind: one Forward over context and decode
  /// sequences) or the decodes wait for a prompt-only step (vLLM V0's scheduler).
  bool unchunked_prefill_with_decodes = false;
  /// KV admission: blocks for the prompt now and for each token as it comes, preempting
  /// when they run out (vLLM, SGLang, LMDeploy), or, when true, blocks for the prompt and
  /// every output token reserved before a request is admitted, so nothing is ever
  /// preempted (TensorRT-LLM's default GUARANTEED_NO_EVICT capacity scheduler).
  bool reserve_to_completion = false;
  /// Whether the engine can run attention data-parallel for MoE models (see
  /// InferencePlan::attention_dp); "auto" layouts consider it only where it can.
  bool attention_dp = false;
  /// Under attention DP, whether max_num_batched_tokens is the whole group's budget that
  /// the engine divides among its DP ranks (SGLang: chunked_prefill_size // dp_size) or
  /// each rank's own (vLLM, TensorRT-LLM: every rank's scheduler has the full budget).
  /// A prompt runs on one rank, so its chunk is at most that rank's share either way.
  bool dp_attention_divides_batched_tokens = false;
  /// What a scenario's `max_num_seqs: "auto"` runs: the engine's default at that release
  /// (false: vLLM, SGLang and LMDeploy run theirs unless told), or, when true, the batch
  /// limits trtllm-bench computes for the model, the GPUs and the dataset when its user sets
  /// none (tensorrt_llm/bench/build/tuning.py calc_engine_setting): the max batch size from
  /// the KV-cache room for requests of the dataset's mean length, and the token budget from
  /// it (also for `max_num_batched_tokens` unless the scenario gives one).
  bool batch_limits_from_trtllm_bench = false;
  /// Whether the engine's launcher captures CUDA graphs for every batch up to the batch cap
  /// it runs with (trtllm-bench: get_settings sets cuda_graph_max_batch_size to its
  /// max_batch_size, with padding), so that steps up to max_num_seqs decode tokens replay a
  /// graph unless the scenario gives its own capture size.
  bool cuda_graphs_follow_max_num_seqs = false;
  /// Which kernel runs the block-scaled FP8 linear layers (1x128 activation, 128x128 weight
  /// scales): false, a fixed-tile kernel (vLLM's CUTLASS blockwise GEMM, one 128x128 tile
  /// shape), whose few tiles leave SMs idle at decode sizes as the cost model's tile model
  /// says; true, DeepGEMM, whose launcher picks the tile width per shape to fill the SMs
  /// (SGLang's default on Hopper; vLLM's from 0.11, TensorRT-LLM's from 0.19), so that only
  /// its measured rate and the weight stream bound it. The built-in defaults are vLLM V1's
  /// newest release's.
  bool block_fp8_gemm_fills_sms = true;
  /// Whether an MLA model's query and key-value down projections (DeepSeek V3/R1's q_a_proj
  /// and kv_a_proj_with_mqa, which read the same hidden states) run as one GEMM, as SGLang
  /// (from 0.4.6) and TensorRT-LLM run them, instead of two as in the reference model code.
  bool mla_fused_down_projections = false;
  /// How a layer rotates the new queries and keys and writes the keys and values into the
  /// paged KV cache: `separate`, two kernels (a rotary kernel, then the cache write, as the
  /// reference model code and vLLM run them: rotary_embedding, reshape_and_cache_flash);
  /// `fused`, one kernel doing both; `in_attention`, inside the attention kernel, with no
  /// kernel of their own.
  enum class RopeKvWrite { separate, fused, in_attention };
  RopeKvWrite rope_kv_write = RopeKvWrite::separate;
  /// Whether, under tensor parallelism, the layer's residual add and norm run inside its
  /// all-reduce kernel (LMDeploy TurboMind from 0.7.2: AllreduceResidualBiasRMSnorm) instead of
  /// as kernels of their own after it.
  bool residual_norm_in_all_reduce = false;
  /// The model families (Hugging Face model_type) that fusion applies to; empty: every
  /// model (SGLang from 0.5.7 turns it on for DeepSeek-V3, gpt-oss and Qwen3-MoE only).
  std::vector<std::string> residual_norm_families;
  /// Whether a gated MLP's gate and up projections run as two GEMMs (LMDeploy TurboMind's
  /// 16-bit weights up to 0.4: w1, w3, then the activation) instead of one over both weights.
  bool mlp_gate_up_separate = false;
  /// Whether int4 (AWQ/GPTQ) weights run the gated MLP as one w1||w3 GEMM with the SiLU and
  /// the product in its epilogue (LMDeploy TurboMind's kFusedSiluFfn), with no activation
  /// kernel.
  bool int4_silu_in_gemm = false;
  /// Whether a linear layer with per-tensor FP8 or W8A8 (int8) weights and activations
  /// quantizes its 16-bit input in a kernel of its own ahead of the GEMM (vLLM's
  /// apply_fp8_linear / apply_int8_linear: scaled_fp8_quant, scaled_int8_quant), instead of
  /// in the kernel that produced it. The plan built in code is vLLM V1's; a profile without
  /// the knob fuses it.
  bool activation_quant_kernel = true;
  /// Whether a model's one shared expert runs inside the routed-expert kernel as one more
  /// expert every token picks (SGLang's shared-experts fusion for DeepSeek V3/R1 without
  /// expert parallelism: E+1 experts, top-(k+1)), instead of as a separate dense MLP.
  bool fused_shared_expert = false;
  /// How routed tokens reach the experts behind attention DP: false, with expert
  /// parallelism, dispatch and combine all-to-alls (each token to the ranks of its top-k
  /// experts and back), and with the experts split over the group, about one all-reduce;
  /// true, every rank gathers all ranks' tokens (all-gather, after quantizing them to FP8
  /// under per-tensor FP8), runs its own experts or expert slices on them and
  /// reduce-scatters the outputs back (TensorRT-LLM's CutlassFusedMoE: allgather before
  /// fused_moe, reducescatter after, with attention DP on).
  bool moe_dp_gathers_tokens = false;
  /// Whether the engine's tensor-parallel all-reduce is always NCCL's (LMDeploy TurboMind up
  /// to 0.7.1: ftNcclAllReduceSum in every layer) or, inside one NVLink domain, the faster of
  /// NCCL and its own one-shot kernel where the GPU has that measured (vLLM's custom
  /// all-reduce, which SGLang runs too; TensorRT-LLM's own kernels).
  bool tp_all_reduce_nccl_only = false;
  /// Whether the engine's NCCL all-reduces may use NVLink SHARP (NCCL's default,
  /// NCCL_NVLS_ENABLE=2); SGLang sets NCCL_NVLS_ENABLE=0 unless --enable-nccl-nvls.
  bool nccl_nvls = true;
  /// Whether prompts' attention runs a FlashAttention-2-class kernel (Ampere-style mma.sync
  /// code, also on Hopper: vLLM before 0.7, FlashInfer 0.1 under SGLang and TGI, TurboMind's
  /// own kernel), priced at the GPU preset's attention_fa2 figures, instead of a
  /// Hopper-native one (FlashAttention-3, FlashInfer 0.2's FA3 template, TensorRT-LLM's
  /// warp-specialized fmha), priced at attention_fwd. The same on Ampere, where both are FA2.
  bool prefill_attention_fa2 = false;
  /// Whether the KV cache of a layer with a sliding window (ModelSpec::sliding_window) holds
  /// only the keys and values inside the window (vLLM's hybrid KV cache manager, TensorRT-LLM's
  /// per-window pools) instead of every token's, as a full-attention layer does.
  bool sliding_window_kv_bounded = true;
  /// While sequences decode, whether a new prefill batch waits for a queue long enough or
  /// for enough decode steps (Hugging Face TGI's router before prefill chunking,
  /// router/src/infer.rs batching_task: a batch is added only if the queue holds at least
  /// floor(running x waiting_served_ratio) requests, or once max_waiting_tokens decode
  /// steps counted from 1 after the last prefill have run). 0 turns either test off; both
  /// 0 (the default) prefill as soon as a prompt fits.
  double prefill_wait_ratio = 0;
  int64_t prefill_wait_steps = 0;
  int64_t block_size = 16;                ///< KV-cache page, tokens
  double gpu_memory_utilization = 0.9;    ///< fraction of GPU memory the engine may use
  /// gpu_memory_utilization by tensor-parallel degree where the engine picks it so: (from
  /// tp, value) ascending, the last whose degree the deployment reaches applying (SGLang
  /// 0.3-0.4's mem_fraction_static); empty = the one figure.
  std::vector<std::pair<int64_t, double>> gpu_memory_utilization_by_tp;
  /// Where active, gpu_memory_utilization when the scenario sets none is computed from the
  /// engine's reserve for this deployment (MemoryReserveRule).
  MemoryReserveRule memory_reserve;
  /// The CUDA-graph capture from tensor parallelism 4 up, where the engine captures more
  /// there (SGLang 0.5: cuda_graph_max_bs 512 at tp_size >= 4, 256 below on 60-160 GB
  /// GPUs); 0 = cuda_graph_max_tokens at every degree.
  int64_t cuda_graph_max_tokens_tp4 = 0;
  /// What gpu_memory_utilization is a fraction of: the GPU's whole memory, from which the
  /// weights, the activation peak and the CUDA context come off before the KV cache takes
  /// the rest (vLLM; false), or the memory still free once those are in place, all of it
  /// for the KV cache (true: TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction).
  bool memory_fraction_of_free = false;
  /// Whether the KV cache's share leaves the activation peak to the headroom outside it
  /// (SGLang: mem_fraction_static of the memory free before the weights, less the weights,
  /// with activations and graphs in the rest) instead of taking it off (vLLM's profiling run).
  bool activation_in_headroom = false;
  /// The memory the engine's start-up profiling run sets aside beside the weights, which the
  /// KV cache does not get. When `profile_logits_bytes_per_entry` is above 0 the activation
  /// peak is the larger of the forward pass's working set over max_num_batched_tokens and
  /// `profile_activation_fixed_bytes` + that many bytes per entry of a max_num_seqs x
  /// vocabulary logits matrix (vLLM V1's dummy sampler run, whatever the tensor parallelism);
  /// at 0, the forward pass plus one fp32 copy of the logits shard.
  double profile_logits_bytes_per_entry = 14.07;
  double profile_activation_fixed_bytes = 0.20 * 1024 * 1024 * 1024;
  /// Memory outside PyTorch's allocator the profiling run adds (CUDA libraries' workspaces;
  /// with tensor parallelism the collectives' buffers), on one GPU and on a tensor-parallel
  /// rank.
  double non_torch_bytes = 0.25 * 1024 * 1024 * 1024;
  double non_torch_tp_bytes = 2.1 * 1024 * 1024 * 1024;
  /// CUDA-graph memory the engine takes off the KV cache's share before sizing it (vLLM's
  /// estimate from 0.21.0); 0 where the graphs are captured in the headroom left outside it.
  double cudagraph_reserved_bytes = 1.04 * 1024 * 1024 * 1024;
  /// The batch limits of an engine built from its engine arguments with no usage context
  /// (InferencePlan::engine_context); 0 where the engine has no such defaults of its own.
  int64_t engine_context_max_num_seqs = 128;
  int64_t engine_context_max_num_batched_tokens = 2048;
  bool chunked_prefill = true;            ///< prompts split across steps, mixed with decodes
  bool cuda_graphs = true;                ///< steps replayed as CUDA graphs
  /// Steps of more tokens than this run eagerly (the largest capture size).
  int64_t cuda_graph_max_tokens = 512;
  /// Whether steps that carry prompt tokens are captured too (vLLM V1's piecewise graphs)
  /// or only decode-only steps (vLLM V0's CUDAGraphRunner, SGLang's decode graphs).
  bool graph_prefill_steps = true;
  /// GPU time per layer that a step replayed as CUDA graphs pays where the engine captures
  /// each layer in pieces and runs its attention between them (vLLM V1's piecewise graphs):
  /// the launches and ramps at the pieces' boundaries. 0: the step is one whole graph.
  double piecewise_graph_s_per_layer = 15.0 * 1e-6;  // us to s, as the profile reader converts it
  /// The same for a layer with multi-head latent attention, whose attention between the
  /// pieces dispatches more operations from Python (the absorbed up-projections around
  /// the kernel): vLLM PR #42885, 61-layer MLA decode at TP8, 3.1 ms of TPOT a step.
  double piecewise_graph_s_per_mla_layer = 50.8 * 1e-6;
  /// Device time a routed-expert layer's group-limited top-k routing (DeepSeek's n_group /
  /// topk_group) takes beyond the one fused top-k kernel the fused-MoE figures include, a
  /// fixed part and a part per token: an engine that runs it as compiled PyTorch ops pays
  /// both, one with a fused routing kernel neither. Models without group-limited routing
  /// never pay it.
  double grouped_topk_s = 0;
  double grouped_topk_s_per_token = 0;
  /// Whether decode-only steps are captured whole all the same (vLLM's FULL_AND_PIECEWISE,
  /// its default from 0.11.0), so that only steps with prompt tokens pay the boundaries.
  bool full_graph_decode_steps = true;
  /// Whether a step carries prompt chunks and decodes together (vLLM, TensorRT-LLM's
  /// in-flight batching) or the engine runs a prompt-only batch whenever it can form one
  /// and the decodes wait (SGLang, enable_mixed_chunk off by default).
  bool mixed_prefill_decode = true;
  /// Host work per scheduled step (scheduling, input preparation, sampling bookkeeping,
  /// detokenisation): a fixed part and a part per sequence in the step.
  double step_overhead_s = 0;
  double step_overhead_per_seq_s = 12.8 * 1e-6;  // us to s, as the profile reader converts it
  /// Whether that host work runs while the GPU computes the previous step (SGLang's
  /// overlap scheduler, TensorRT-LLM's overlap scheduler, vLLM's asynchronous scheduling,
  /// on by default from 0.14.0): the step then takes the longer of the two instead of
  /// their sum, and a request arriving mid-step joins the step after next.
  bool host_overlaps_gpu = true;
  /// Host time on each request's path outside the engine's steps (HTTP, tokenising, the
  /// hand-offs between processes, the first streamed chunk): it delays the first token but
  /// occupies no GPU.
  double request_overhead_s = 7.0e-3;  // ms to s, as the profile reader converts it
  /// Host time per layer that a step not replayed as a CUDA graph adds to its GPU time
  /// (eager minus graphed time of the same step), for dense and routed-expert layers.
  double eager_host_s_dense_layer = 47e-6;
  double eager_host_s_moe_layer = 975e-6;
  /// A measured figure for every layer, when the scenario gives one.
  std::optional<double> eager_host_s_per_layer;
  /// Forward passes per scheduling round when only decodes are scheduled (vLLM
  /// --num-scheduler-steps; 1 = every step is scheduled).
  int64_t scheduler_steps = 1;
  /// Query heads one CTA of the decode attention kernel serves from one load of a KV head:
  /// 0 = the whole query group (FlashAttention, FlashInfer, TensorRT-LLM's XQA, TurboMind
  /// from 0.3); k > 0 = the largest power of two up to k that divides the group (vLLM's
  /// PagedAttention kernels: 1; TurboMind 0.1-0.2: 4). Each KV head is read group / that
  /// many times over.
  int64_t decode_heads_per_kv_load = 0;
  /// Preemption when KV blocks run out (Preemption).
  Preemption preemption = Preemption::cached;
  /// Which running sequence a preemption stops: the most recently admitted (false), or
  /// the one that has made the fewest tokens, the longer prompt first among equals (true;
  /// SGLang's retract_decode).
  bool preempt_fewest_outputs = false;
  /// Admission by estimated future tokens (SGLang's PrefillAdder; 0: off, a prompt is
  /// admitted when its blocks are free). A prompt joins only if its tokens and all its
  /// output tokens (at most `admission_output_clip`) fit in the free KV tokens less, for
  /// each running sequence, its outstanding output tokens (clipped likewise) times the
  /// ratio. The ratio starts at `admission_output_ratio_init`, falls by
  /// (init - min) / `admission_output_ratio_decay_steps` with every decode step down to
  /// `admission_output_ratio_min`, returns to the start when the replica idles, and after
  /// a preemption becomes (tokens made + `retract_decode_steps` a sequence) / outputs
  /// asked of the sequences left running, at most 1.
  double admission_output_ratio_init = 0;
  double admission_output_ratio_min = 0;
  double admission_output_ratio_decay_steps = 600;
  int64_t admission_output_clip = 4096;
  int64_t retract_decode_steps = 20;
  double swap_space_bytes = 4.0 * 1024 * 1024 * 1024;
  /// The MoE kernel family the engine runs its routed experts with (data/moe_kernels.json)
  /// and that family's measured rates; a rate it lacks for a GPU is the GPU preset's
  /// fused-MoE (Triton) figure.
  MoeKernel moe_kernel;
  /// What a scenario's absent `max_num_batched_tokens` runs: the engine's default, or, when
  /// true, the prefill budget Hugging Face TGI 3's launcher computes for the model and the
  /// card (launcher/src/main.rs, see tgi_launcher_prefill_budget in serving.cpp), which
  /// needs the card in `launcher_card_tflops`.
  bool prefill_budget_from_tgi_launcher = false;
  /// The fp16 TFLOP/s the engine's launcher assigns the GPU (TGI's own card table; 0 for a
  /// card it does not know), resolved per GPU by `launcher_card_tflops_by`.
  int64_t launcher_card_tflops = 0;
  /// GPU- and context-dependent defaults of max_num_seqs and max_num_batched_tokens, and
  /// the launcher's card figure.
  DeploymentKnob max_num_seqs_by, max_num_batched_tokens_by, launcher_card_tflops_by;
  /// These knobs for one deployment: the two batch limits resolved for the GPU (preset
  /// id, device memory) and the usage context, their rules cleared.
  EngineDefaults for_deployment(const std::string& gpu_id, double hbm_bytes, bool llm_class_context,
                                bool engine_context = false) const;
  bool operator==(const EngineDefaults&) const = default;
};

/// One engine generation (data/engines/ID.json) as chosen for a scenario.
struct EngineProfile {
  std::string id = "vllm-v1";  ///< file stem of the profile
  std::string name = "vllm";   ///< engine name as cases write it
  std::string label = "vLLM V1 engine";
  std::string version;         ///< the version the scenario asked for ("" = none named)
  /// How the profile was chosen: in its version range, the nearest one, or the newest
  /// one for a version that is not a release number.
  std::string match;
  /// The knobs whose value came from one of their release ranges rather than the
  /// profile's own value: "tp_all_reduce (releases -0.7.2)".
  std::vector<std::string> release_values;
  EngineDefaults knobs;
  bool operator==(const EngineProfile&) const = default;
};

}  // namespace capsim
