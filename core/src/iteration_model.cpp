#include "capsim/core/serving.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "serving_internal.hpp"

namespace capsim {

using detail::dbl;

double decode_kv_reread_cost(int64_t reads) {
  /// Measured by LMDeploy PR #1258 (A100 80G, batch 128, 1,024 keys, no split-KV, its
  /// tensor-core decode kernel, us): a CTA per group of CTA_H query heads, so each KV head is
  /// loaded group / CTA_H times. 32:8 heads: 509.66, 318.91, 308.35 at 4, 2, 1 loads; 48:8:
  /// 756.35, 401.28, 319.58, 309.31 at 6, 3, 2, 1; 64:8: 993.98, 517.86, 319.39, 305.12 at
  /// 8, 4, 2, 1. Over the one-load time: 2 loads 1.034-1.047 (1.04), 3 1.297, 4 1.653-1.697
  /// (1.675), 6 2.445, 8 3.258; past 8 the last step's slope (0.4065 a load). vLLM 0.2.6's
  /// PagedAttention v2 (one query head a CTA) at 8 query heads a KV head reaches about a
  /// third of its own MHA bandwidth on an H100 and an A100 (FlashInfer blog, 2024-02-02,
  /// Figs. 6 and 9), the same ratio.
  static constexpr std::array<std::pair<double, double>, 6> kCost{
      {{1, 1.0}, {2, 1.04}, {3, 1.297}, {4, 1.675}, {6, 2.445}, {8, 3.258}}};
  const double r = std::max(1.0, dbl(reads));
  for (size_t i = 1; i < kCost.size(); ++i)
    if (r <= kCost[i].first) {
      const auto& [r0, c0] = kCost[i - 1];
      const auto& [r1, c1] = kCost[i];
      return c0 + (c1 - c0) * (r - r0) / (r1 - r0);
    }
  const auto& [r0, c0] = kCost[kCost.size() - 2];
  const auto& [r1, c1] = kCost.back();
  return c1 + (c1 - c0) / (r1 - r0) * (r - r1);
}

IterationModel::IterationModel(const ModelSpec& m, const SystemSpec& sys, const InferencePlan& p, const CostModel& cost)
    : m_(m), sys_(sys), p_(p), cost_(cost) {
  // Weight-only quantization (int4/int8 weights with bf16 activations) keeps bf16 tensor
  // cores and reads fewer weight bytes; W8A8 uses int8 tensor cores; fp8 uses fp8 ones.
  wbytes_ = dtype_bytes(p.weight_dtype);
  tail_s_ = sys.gpu.efficiency.gemm_tail_us.value * 1e-6;
  graph_gap_s_ = sys.gpu.efficiency.graph_kernel_gap_us.value * 1e-6;
  decode_attn_fixed_s_ = sys.gpu.efficiency.decode_attention_fixed_us.value * 1e-6;
  // Achievable streaming rate of the cost model (calibrated where a profile says so), read
  // at a size far above any launch floor.
  const double gigabyte_s = cost.memory_bound(Bytes(1e9)).value;
  stream_bytes_per_s_ = gigabyte_s > 0 ? 1e9 / gigabyte_s : std::numeric_limits<double>::infinity();
  engine_ = engine_defaults(p, m, sys.gpu, 0);
  fp8_block_ = p.fp8_block_scaling.value_or(m.fp8_weight_block > 0);
  for (int64_t i = 0; i < m.layers; ++i) moe_layers_ += m.is_moe_layer(i) ? 1 : 0;
  sliding_layers_ = m.sliding_layers();
  // A shared expert the engine fuses into the routed kernel (EngineDefaults::
  // fused_shared_expert; one shared expert as wide as a routed one, no expert parallel) is
  // one more expert every token picks: its weights stream with the touched experts' and
  // each token brings one more routed row.
  fused_shared_expert_ = engine_.fused_shared_expert && m.moe && p.ep.value_or(1) == 1 &&
                         m.moe->shared_experts == 1 && m.moe->shared_intermediate == m.moe->expert_intermediate;
  fused_down_ = m.mla && m.mla->q_lora_rank > 0 && engine_.mla_fused_down_projections;
  // The kernels of a step priced by their own duration, each followed by the GPU's idle gap
  // (step_gpu_seconds): the weight-streaming GEMMs (gemm_tail_us is a profiler's kernel
  // time) and attention over the cache (bytes or FLOPs at a rate). The floored passes
  // (norms, quantization, activations) carry the launch in their floor, and the fused MoE
  // layer's and the all-reduces' figures were timed over back-to-back launches, gaps
  // included. Here the GEMMs every step runs: each layer's projections (MLA: the query
  // down (with the key-value one where fused) and up, key-value down, key-value up and
  // output), each dense layer's two MLP GEMMs, each routed-expert layer's router and an
  // unfused shared expert's two.
  {
    double projections = 2.0;
    if (m.mla) projections = (m.mla->q_lora_rank > 0 ? 5.0 : 4.0) - (fused_down_ ? 1.0 : 0.0);
    // A gated MLP's gate and up projections: one GEMM over both weights, or two where the
    // engine runs them apart (EngineDefaults::mlp_gate_up_separate).
    const double ffn = m.gated_mlp && gate_up_separate() ? 3.0 : 2.0;
    double experts = 0;
    if (m.moe) experts = 1.0 + (m.moe->shared_experts > 0 && !fused_shared_expert_ ? ffn : 0.0);
    layer_gemm_kernels_ = dbl(m.layers) * projections + dbl(m.layers - moe_layers_) * ffn + dbl(moe_layers_) * experts;
  }
  ep_max_z_ = expected_max_standard_normal(p.ep.value_or(1));
  eager_host_s_ = engine_.eager_host_s_per_layer
                      ? *engine_.eager_host_s_per_layer * dbl(m.layers)
                      : dbl(m.layers - moe_layers_) * engine_.eager_host_s_dense_layer +
                            dbl(moe_layers_) * engine_.eager_host_s_moe_layer;
  if (p.activation_dtype == DType::fp8 && p.weight_dtype == DType::fp8) math_ = DType::fp8;
  else if (p.activation_dtype == DType::int8 && p.weight_dtype == DType::int8) math_ = DType::int8;
  else math_ = DType::bf16;
  const DType kv = p.resolved_kv_dtype();
  dp_ = p.attention_dp_degree();
  attn_tp_ = dp_ > 1 ? 1 : p.tp;
  const double tp = dbl(p.tp);
  // KV bytes per token on the GPU that holds the sequence: KV heads split over the
  // attention's tp (MLA's latent and GQA with fewer KV heads than tp are replicated);
  // under attention DP a GPU keeps its own sequences' whole KV.
  // The GPUs a KV head's cache is split over.
  const int64_t kv_split = std::max<int64_t>(1, std::min<int64_t>(attn_tp_, m.kv_heads));
  kv_bytes_token_layer_ = kv_cache_bytes_per_token(m, kv) / dbl(m.layers);
  if (!m.mla) kv_bytes_token_layer_ /= dbl(kv_split);
  // A decode kernel that serves fewer query heads a CTA than the GPU's query group loads
  // each KV head once per CTA (EngineDefaults::decode_heads_per_kv_load). MLA's kernel
  // serves every head from the shared latent.
  if (!m.mla && engine_.decode_heads_per_kv_load > 0) {
    const int64_t kv_here = std::max<int64_t>(1, m.kv_heads / kv_split);
    const int64_t group = std::max<int64_t>(1, std::max<int64_t>(1, m.heads / attn_tp_) / kv_here);
    int64_t per_cta = 1;
    while (per_cta * 2 <= engine_.decode_heads_per_kv_load && group % (per_cta * 2) == 0) per_cta *= 2;
    decode_kv_reread_ = decode_kv_reread_cost(group / per_cta);
  }
  // The layer's small kernels, each a pass over what it reads and writes per token (16-bit
  // activations), priced as a floored stream: the reference layer's two norms, each adding
  // the residual in (read the input and the residual, write both: vLLM's fused_add_rms_norm);
  // MLA's norms of the query and key-value latents; per-head query and key norms (Qwen3: two
  // RMSNorm calls); rotary over the queries and keys and the KV-cache write (read 16-bit
  // keys and values, write them in the cache's type), two kernels, one, or none as the
  // engine runs them (EngineDefaults::rope_kv_write). Models with learned positions have no
  // rotary. The dense MLP's activation is priced with the MLP (dense_ffn_seconds).
  {
    const double h = dbl(m.hidden), heads = dbl(m.heads / attn_tp_);
    const double residual_norm = h * 2.0 * 4.0;
    layer_small_kernel_bytes_ = {residual_norm, residual_norm};
    // An engine that adds the residual and normalizes inside its tensor-parallel all-reduce
    // runs neither norm as a kernel of its own: only where attention is tensor-parallel
    // inside one node (the fused kernels are single-node NVLink all-reduces: SGLang enables
    // its FlashInfer fusion only with nnodes == 1, server_args.py) and, where the profile
    // limits it, for the model families it names.
    const auto& families = engine_.residual_norm_families;
    const bool family_fused =
        families.empty() || std::find(families.begin(), families.end(), std::string(to_string(m.family))) != families.end();
    if (engine_.residual_norm_in_all_reduce && attn_tp_ > 1 && attn_tp_ <= sys.gpus_per_node && family_fused)
      norms_in_all_reduce_ = 2;
    double kv_heads = 0, rope_width = 0;
    if (m.mla) {
      if (m.mla->q_lora_rank > 0) layer_small_kernel_bytes_.push_back(dbl(m.mla->q_lora_rank) * 2.0 * 2.0);
      layer_small_kernel_bytes_.push_back(dbl(m.mla->kv_lora_rank) * 2.0 * 2.0);
      kv_heads = 1.0;  // the shared rope key
      rope_width = dbl(m.mla->qk_rope_head_dim);
    } else {
      kv_heads = std::max(1.0, dbl(m.kv_heads) / dbl(attn_tp_));
      rope_width = dbl(m.head_dim);
    }
    if (m.qk_norm) {
      layer_small_kernel_bytes_.push_back(heads * dbl(m.head_dim) * 2.0 * 2.0);
      layer_small_kernel_bytes_.push_back(kv_heads * dbl(m.head_dim) * 2.0 * 2.0);
    }
    const double rope = m.learned_positions ? 0.0 : (heads + kv_heads) * rope_width * 2.0 * 2.0;
    const double kv_type_bytes = dtype_bytes(kv);
    const double cache_write = kv_bytes_token_layer_ / kv_type_bytes * 2.0 + kv_bytes_token_layer_;
    switch (engine_.rope_kv_write) {
      case EngineDefaults::RopeKvWrite::separate:
        if (rope > 0) layer_small_kernel_bytes_.push_back(rope);
        layer_small_kernel_bytes_.push_back(cache_write);
        break;
      case EngineDefaults::RopeKvWrite::fused: layer_small_kernel_bytes_.push_back(rope + cache_write); break;
      case EngineDefaults::RopeKvWrite::in_attention: break;
    }
  }
  tp_group_.size = p.tp;
  tp_group_.per_node = std::min<int64_t>(p.tp, sys.gpus_per_node);
  tp_group_.nvls = engine_.nccl_nvls;
  const int64_t ep = p.ep.value_or(1);
  ep_group_.size = ep;
  ep_group_.per_node = std::min<int64_t>(ep, sys.gpus_per_node);
  ep_group_.nvls = engine_.nccl_nvls;
  // Weight bytes read by one decode token on one GPU.
  for (int64_t i = 0; i < m.layers; ++i) {
    const LayerParams lp = layer_params(m, i);
    double w = dbl(lp.attention + lp.dense_mlp + lp.shared_experts) / dbl(attn_tp_);
    if (m.is_moe_layer(i)) w += dbl(m.moe->top_k * lp.routed_expert) / (ep > 1 ? 1.0 : tp) / (ep > 1 ? dbl(ep) : 1.0);
    weight_bytes_ += w * wbytes_;
  }
  weight_bytes_ += dbl(m.vocab * m.hidden) / tp * 2.0;  // head stays in 16 bits
}

double IterationModel::gemm(int64_t m, int64_t n, int64_t k, bool quantized_input) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0.0;
  const auto kind = quantized_input ? GemmMemo::Kind::quantized_input : GemmMemo::Kind::bf16_input;
  return memoized(kind, m, n, k, [&] { return gemm_uncached(m, n, k, quantized_input); });
}

IterationModel::GemmMemo& IterationModel::memo_slot(GemmMemo::Kind kind, int64_t m, int64_t n, int64_t k) const {
  static_assert(kGemmMemoSlots == size_t{1} << 12, "the slot takes the hash's top 12 bits");
  const uint64_t h = static_cast<uint64_t>(m) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(n) * 0xC2B2AE3D27D4EB4Full ^
                     static_cast<uint64_t>(k) * 0x165667B19E3779F9ull ^ static_cast<uint64_t>(kind);
  return gemm_memo_[(h * 0xD6E8FEB86659FD93ull) >> 52];
}

double IterationModel::gemm_uncached(int64_t m, int64_t n, int64_t k, bool quantized_input) const {
  // Roofline of pre-quantized weights: tensor-core time against streaming the weights
  // (and the 16-bit activations in and out) from HBM.
  double weight = dbl(k) * dbl(n) * wbytes_;
  double compute = cost_.gemm_compute(m, n, k, math_).value;
  double quantize = 0;
  if (math_ == DType::fp8 && fp8_block_) {
    // Block-scaled FP8: the blockwise kernel's measured rate, and the per-token-group
    // activation quantization ahead of it (read 16-bit, write 8-bit values and fp32 scales
    // per 128). A fixed-tile kernel also pays the cost model's tile and wave losses; DeepGEMM
    // picks its tile width per shape to fill the SMs (its README's M = 64/128 rows run at
    // the weight stream, which gemm_tail_us was fitted to), so only its rate bounds it: the
    // DeepGEMM rate of DeepSeek's own trace where the GPU has it.
    const GpuEfficiency& ge = sys_.gpu.efficiency;
    const double flops = 2.0 * dbl(m) * dbl(n) * dbl(k);
    const double fp8_peak = sys_.gpu.peak(DType::fp8).value;
    if (engine_.block_fp8_gemm_fills_sms && ge.gemm_fp8_block_large_m.value > 0)
      compute = flops / (fp8_peak * ge.gemm_fp8_block_large_m.value);
    else if (ge.gemm_fp8_block.value > 0)
      compute = std::max(compute, flops / (fp8_peak * ge.gemm_fp8_block.value));
    quantize = cost_.memory_bound(Bytes(dbl(m) * dbl(k) * (2.0 + 1.0 + 4.0 / 128.0))).value;
  } else if (math_ != DType::bf16 && engine_.activation_quant_kernel && quantized_input) {
    // Per-tensor FP8 or W8A8: the engine quantizes the 16-bit input in a kernel of its own
    // (read 16-bit, write 8-bit values; a static scale, or one per row for int8), a floored
    // pass. A dynamic per-tensor FP8 scale takes a second kernel for the maximum, not counted.
    quantize = cost_.memory_bound(Bytes(dbl(m) * dbl(k) * (2.0 + 1.0))).value;
  }
  if (p_.sparse_24) {
    // 2:4 sparsity: sparse tensor cores skip the zero half (twice the dense rate, the
    // datasheets' sparsity multiplier); weights store half the values plus 2 bits of
    // position metadata per kept value (NVIDIA Ampere architecture whitepaper).
    compute /= 2.0;
    weight = weight * 0.5 + dbl(k) * dbl(n) * 0.5 * 0.25;
  }
  const double bytes = weight + dbl(m) * (dbl(k) + dbl(n)) * 2.0;
  return std::max(compute, stream(bytes)) + quantize;
}

double IterationModel::tp_all_reduce(double bytes) const {
  const double nccl = cost_.collective(CollectiveKind::all_reduce, Bytes(bytes), tp_group_).value;
  // Inside one NVLink domain the engine's own all-reduce kernel, where the engine has one
  // and the GPU has it measured, when it beats NCCL.
  const GpuEfficiency& e = sys_.gpu.efficiency;
  if (engine_.tp_all_reduce_nccl_only || tp_group_.nodes() > 1 || e.engine_allreduce_fixed_us.value <= 0) return nccl;
  const double custom = (e.engine_allreduce_fixed_us.value + bytes / (1024.0 * 1024.0) * e.engine_allreduce_us_per_mib.value) * 1e-6;
  return std::min(nccl, custom);
}

double IterationModel::stream(double bytes) const {
  // A weight-streaming GEMM: bytes at the achievable rate plus the kernel's fixed fill and
  // drain where the GPU has it measured (above any launch floor), else the floored stream.
  if (tail_s_ > 0) return bytes / stream_bytes_per_s_ + tail_s_;
  return cost_.memory_bound(Bytes(bytes)).value;
}

namespace {

/// Keys the queries of a prompt chunk attend to on average: the chunk's `tokens` queries
/// follow `cached` prompt tokens and each attends causally to at most `window` keys, its own
/// included (0: no window): the mean over positions p = cached+1 .. cached+tokens of
/// min(p, window).
double chunk_window_keys(int64_t cached, int64_t tokens, int64_t window) {
  const double c = dbl(cached), t = dbl(tokens), w = dbl(window);
  if (cached + tokens <= window) return c + (t + 1.0) / 2.0;
  if (cached >= window) return w;
  // Positions up to the window count themselves, the rest the whole window.
  const double below = (w * (w + 1.0) - c * (c + 1.0)) / 2.0;
  return (below + (c + t - w) * w) / t;
}

}  // namespace

int64_t IterationModel::gpu_tokens(int64_t tokens_all, int64_t busiest_rank_tokens) const {
  return std::max(detail::ceil_div(tokens_all, dp_), dp_ > 1 ? busiest_rank_tokens : int64_t{0});
}

IterationModel::AttentionParts IterationModel::attention_layer_parts(const IterationBatch& b, int64_t tokens_all,
                                                                    bool sliding) const {
  // Projections of one layer (attention and norms). Under attention DP each GPU runs its
  // own 1/dp of the sequences with whole weights; the step waits for the busiest GPU (the
  // one with the largest prompt work where the scheduler placed prompts on ranks).
  const ModelSpec& m = m_;
  const int64_t tp = attn_tp_;
  const int64_t h = m.hidden;
  const int64_t tokens = gpu_tokens(tokens_all, b.busiest_rank_prompt_tokens);
  AttentionParts parts;
  double& t = parts.projections;
  if (m.mla) {
    const auto& a = *m.mla;
    const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    // The query and key-value down projections read the same hidden states: one GEMM over
    // both weights where the engine fuses them (EngineDefaults::mla_fused_down_projections).
    if (a.q_lora_rank > 0) {
      t += fused_down_ ? gemm(tokens, a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim, h)
                       : gemm(tokens, a.q_lora_rank, h);
      t += gemm(tokens, m.heads * qk / tp, a.q_lora_rank);
    } else {
      t += gemm(tokens, m.heads * qk / tp, h);
    }
    if (!fused_down_) t += gemm(tokens, a.kv_lora_rank + a.qk_rope_head_dim, h);
    t += gemm(tokens, m.heads * (a.qk_nope_head_dim + a.v_head_dim) / tp, a.kv_lora_rank);
    t += gemm(tokens, h, m.heads * a.v_head_dim / tp);
  } else {
    t += gemm(tokens, (m.heads + 2 * m.kv_heads) * m.head_dim / tp, h);
    t += gemm(tokens, h, m.heads * m.head_dim / tp);
  }
  // Attention over the cache: prefill chunks at FlashAttention efficiency (each chunk
  // attends to its cached prefix and causally to itself); decodes read every cached
  // token's K and V once. Under attention DP a chunk runs on one GPU: the busiest GPU
  // has at least the largest chunk and at least its share of all of them.
  double prefill = 0, largest = 0;
  for (const auto& pf : b.prefills) {
    AttentionShape s;
    s.batch = 1;
    s.heads = std::max<int64_t>(1, m.heads / tp);
    s.kv_heads = std::max<int64_t>(1, (m.mla ? m.heads : m.kv_heads) / tp);
    s.q_len = pf.tokens;
    s.kv_len = pf.cached + (pf.tokens + 1) / 2;  // causal: on average half the chunk
    // Within a sliding window each query attends to at most the window (a fused kernel
    // skips the key blocks outside it).
    if (sliding)
      s.kv_len = std::max<int64_t>(1, std::llround(chunk_window_keys(pf.cached, pf.tokens, m.sliding_window)));
    s.causal = false;
    s.kernel = engine_.prefill_attention_fa2 ? AttentionKernel::flash2 : AttentionKernel::fused;
    s.qk_dim = m.mla ? m.mla->qk_nope_head_dim + m.mla->qk_rope_head_dim : m.head_dim;
    s.v_dim = m.mla ? m.mla->v_head_dim : m.head_dim;
    const double c = cost_.attention(s, false).value;
    prefill += c;
    largest = std::max(largest, c);
  }
  parts.prefill_kernels = dp_ > 1 ? std::max(largest, prefill / dbl(dp_)) : prefill;
  if (b.decodes > 0) {
    // A sliding-window layer reads each decode's last `window` keys at most: the batch's
    // capped sum where the scheduler took it at this window, else a bound from the total.
    double cached = b.decode_context;
    if (sliding)
      cached = b.context_window == m.sliding_window
                   ? b.decode_window_context
                   : std::min(b.decode_context, dbl(b.decodes) * dbl(m.sliding_window));
    const double context = cached / dbl(dp_);
    const double bytes = context * kv_bytes_token_layer_ * decode_kv_reread_;
    // MLA decode attends in the compressed space: 2 x heads x (kv_lora + rope) x 2 FLOPs
    // per cached token (FlashMLA is compute-bound at large batch).
    double flops = 0;
    if (m.mla) flops = 4.0 * dbl(m.heads / tp) * dbl(m.mla->kv_lora_rank + m.mla->qk_rope_head_dim) * context;
    else flops = 4.0 * dbl(m.heads / tp) * dbl(m.head_dim) * context;
    flops *= dbl(b.verify);
    // The cache's bytes at the achievable stream rate plus the kernel's fixed time where the
    // GPU has it measured (decode_attention_fixed_us), at every batch: batched timings on an
    // H100 at 64 sequences run 14-22 us above their bytes at that rate whether the kernel
    // splits the keys or not (FlashAttention-2 paged, page 256, 64 / 8 heads, 64 sequences of
    // 128-256 keys: 28.8 and 43.6 us for 33 and 65 MiB, onnxruntime PR #21414, one split by
    // its num_splits_heuristic; that PR's paged kernel at page 16, 256-512 keys: 39.5 and
    // 61.9 us; FlashInfer's tensor-core decode at 64 sequences of 1,024 keys, 32 / 4 heads,
    // 60% of the 3.35 TB/s peak in its 2024-02-02 blog's Fig. 9). Else the floored stream.
    const double t_mem =
        decode_attn_fixed_s_ > 0 ? decode_attn_fixed_s_ + bytes / stream_bytes_per_s_ : cost_.memory_bound(Bytes(bytes)).value;
    /// Decode attention reaches 0.6 of the bf16 peak when compute-bound: FlashMLA's 660 of
    /// 989 TFLOP/s on H800 (hardware.json efficiency.attention, flashmla_readme).
    const double t_flops = flops / (sys_.gpu.peak(DType::bf16).value * 0.6);
    parts.decode_kernel = std::max(t_mem, t_flops);
  }
  // Norms, rotary and the KV-cache write: one floored pass each (layer_small_kernel_bytes_).
  for (size_t i = norms_in_all_reduce_; i < layer_small_kernel_bytes_.size(); ++i)
    parts.elementwise += cost_.memory_bound(Bytes(dbl(tokens) * layer_small_kernel_bytes_[i])).value;
  if (tp > 1) parts.all_reduce = 2.0 * tp_all_reduce(dbl(tokens) * dbl(h) * 2.0);
  return parts;
}

double IterationModel::dense_ffn_seconds(int64_t tokens_all, int64_t inner, int64_t busiest_rank_tokens) const {
  const ModelSpec& m = m_;
  const int64_t tp = attn_tp_;
  const int64_t tokens = gpu_tokens(tokens_all, busiest_rank_tokens);
  const int64_t h = m.hidden;
  const double gate_up = m.gated_mlp && gate_up_separate() ? 2.0 * gemm(tokens, inner / tp, h)
                                                           : gemm(tokens, inner * (m.gated_mlp ? 2 : 1) / tp, h);
  // The activation: a pass of its own (read the gate and up halves, write the product),
  // none where the engine applies it in the GEMM's epilogue.
  const double activation =
      silu_in_gemm() ? 0.0 : cost_.memory_bound(Bytes(dbl(tokens) * dbl(inner) / dbl(tp) * 2.0 * 3.0)).value;
  return gate_up + gemm(tokens, h, inner / tp) + activation;
}

IterationModel::ExpertParts IterationModel::experts_parts(int64_t tokens) const {
  const ModelSpec& m = m_;
  const int64_t tp = p_.tp;
  const int64_t ep = p_.ep.value_or(1);
  const int64_t h = m.hidden;
  const auto& e = *m.moe;
  // Under expert parallelism every rank waits for the busiest one (the layer's reduction
  // or combine follows): it holds `imbalance` times the mean routed tokens
  // (ep_rank_imbalance: the router's measured skew plus the sampling spread).
  const double imbalance = ep > 1 ? ep_rank_imbalance(e, dbl(tokens), ep, ep_max_z_) : 1.0;
  // Experts one iteration touches: with T tokens choosing top-k of E uniformly, each
  // expert is touched with probability p = 1 - (1 - k/E)^T, E p of them in all.
  const double p_touched = 1.0 - std::pow(1.0 - dbl(e.top_k) / dbl(e.num_experts), dbl(tokens));
  // Under expert parallelism, the busiest rank's: its L = E/ep experts' touched count (a
  // sum of L indicators, variance L p (1 - p)) lies about z_ep standard deviations above
  // the mean L p. The published skew counts tokens, not distinct experts, so it is not
  // applied here.
  const double per_rank = dbl(e.num_experts) / dbl(ep);
  const double local_experts =
      ep > 1 ? std::min(per_rank, per_rank * p_touched + ep_max_z_ * std::sqrt(per_rank * p_touched * (1.0 - p_touched)))
             : dbl(e.num_experts) * p_touched + (fused_shared_expert_ ? 1.0 : 0.0);
  const double inner = dbl(e.expert_intermediate) / (ep > 1 ? 1.0 : dbl(tp));
  const double routed_tokens = dbl(tokens * (e.top_k + (fused_shared_expert_ ? 1 : 0))) / (ep > 1 ? dbl(ep) : 1.0) * imbalance;
  const double per_expert = routed_tokens / std::max(1.0, local_experts);
  const auto pe = static_cast<int64_t>(std::ceil(per_expert));
  const auto inner_i = static_cast<int64_t>(inner);
  const double w_bytes = local_experts * dbl(h) * inner * (m.gated_mlp ? 3.0 : 2.0) * wbytes_;
  // Compute of the grouped expert GEMMs: at the fused MoE kernel's measured rate where
  // the GPU has it (8-bit or 16-bit tensor cores), else from the GEMM efficiency model.
  const GpuEfficiency& ge = sys_.gpu.efficiency;
  const bool eight_bit = math_ == DType::fp8 || math_ == DType::int8;
  // The engine's MoE kernel family: its rate where it has one for this GPU (and these
  // weights), else the GPU preset's fused-MoE (Triton) figure.
  const MoeKernelRates* fam = engine_.moe_kernel.for_gpu(sys_.gpu.id, to_string(sys_.gpu.arch));
  if (fam && fam->fp8_only && math_ != DType::fp8) fam = nullptr;
  if (fam && fam->fp8_block_only && !(math_ == DType::fp8 && fp8_block_)) fam = nullptr;
  auto rate = [&](std::optional<double> MoeKernelRates::*member, double preset) {
    return fam && ((*fam).*member).has_value() ? *((*fam).*member) : preset;
  };
  // An FP8 rate by rows per expert is read at the busiest rank's rows an expert.
  const std::optional<double> fam_fp8 = fam ? fam->compute_fp8_at(per_expert) : std::nullopt;
  const double moe_frac = eight_bit ? (math_ == DType::fp8 ? fam_fp8.value_or(ge.moe_kernel_compute_fp8.value)
                                                           : ge.moe_kernel_compute_fp8.value)
                                    : rate(&MoeKernelRates::compute_bf16, ge.moe_kernel_compute_bf16.value);
  const double routed_flops = routed_tokens * dbl(h) * inner * (m.gated_mlp ? 6.0 : 4.0);
  const double compute =
      moe_frac > 0
          ? routed_flops / (sys_.gpu.peak(eight_bit ? math_ : DType::bf16).value * moe_frac)
          : cost_.gemm_compute(pe, inner_i * (m.gated_mlp ? 2 : 1), h, math_, static_cast<int64_t>(std::ceil(local_experts))).value +
                cost_.gemm_compute(pe, h, inner_i, math_, static_cast<int64_t>(std::ceil(local_experts))).value;
  // Streaming the touched experts' weights: at the MoE kernel's measured line (a fixed
  // time, a time per touched expert, the bytes at a rate) where the GPU has it, else as two
  // weight-streaming GEMMs (gate/up, then down). 16-bit expert weights take the GPU's
  // 16-bit line where it has one. A family's own line has no per-expert term unless it
  // gives one: it was fitted without it.
  const bool bf16_line = wbytes_ == 2.0 && !eight_bit && ge.moe_kernel_hbm_bf16.value > 0;
  const double moe_hbm =
      rate(&MoeKernelRates::hbm, bf16_line ? ge.moe_kernel_hbm_bf16.value : ge.moe_kernel_hbm.value);
  const double moe_fixed_us =
      rate(&MoeKernelRates::fixed_us, bf16_line ? ge.moe_kernel_fixed_us_bf16.value : ge.moe_kernel_fixed_us.value);
  const double preset_expert_us = bf16_line ? ge.moe_kernel_expert_us_bf16.value : ge.moe_kernel_expert_us.value;
  const double moe_expert_us =
      fam && fam->hbm ? fam->expert_us.value_or(0.0) : rate(&MoeKernelRates::expert_us, preset_expert_us);
  const double weights = moe_hbm > 0
                             ? w_bytes / (sys_.gpu.hbm_bandwidth().value * moe_hbm) +
                                   (moe_fixed_us + moe_expert_us * local_experts) * 1e-6
                             : stream(w_bytes * (m.gated_mlp ? 2.0 / 3.0 : 0.5)) + stream(w_bytes * (m.gated_mlp ? 1.0 / 3.0 : 0.5));
  // The fused kernel hides part of the shorter of the two behind the longer.
  ExpertParts parts;
  parts.grouped_gemms = std::max(compute, weights) + ge.moe_kernel_unhidden.value * std::min(compute, weights);
  parts.router = gemm(tokens, e.num_experts, h, false);
  // Group-limited routing the engine does not run as one fused kernel, over every token row
  // the GPU routes.
  if (e.n_group > 1) parts.router += engine_.grouped_topk_s + engine_.grouped_topk_s_per_token * dbl(tokens);
  if (e.shared_experts > 0 && !fused_shared_expert_)
    parts.shared = dense_ffn_seconds(tokens, e.shared_experts * e.shared_intermediate);
  // Expert parallel behind tensor-parallel attention: every rank of the group already holds
  // every token, picks those routed to its own experts, and the partial outputs are summed
  // by the layer's second all-reduce (attention_layer_seconds), as vLLM's FusedMoE does
  // (layer.py: tensor_model_parallel_all_reduce(final_hidden_states) when tp or ep > 1);
  // no dispatch or combine moves tokens. Behind attention DP each rank holds only its own
  // tokens: they are dispatched to the experts' ranks and combined back (two all-to-alls).
  if (dp_ > 1 && engine_.moe_dp_gathers_tokens) {
    // Gathered instead (EngineDefaults::moe_dp_gathers_tokens), whether the experts are
    // whole on their ranks or split over the group: every rank receives all ranks' tokens,
    // 8-bit where per-tensor FP8 quantizes them before the gather (16-bit for block-scaled
    // FP8, quantized inside the fused kernel), with their top-k expert ids (int32) and
    // weights (fp32); the 16-bit outputs are reduce-scattered back.
    const double x_bytes = math_ == DType::fp8 && !fp8_block_ ? 1.0 : 2.0;
    const double gathered = dbl(tokens) * (dbl(h) * x_bytes + dbl(e.top_k) * 8.0);
    // The attention-DP ranks are the tensor-parallel group's GPUs.
    parts.exchange = cost_.collective(CollectiveKind::all_gather, Bytes(gathered), tp_group_).value +
                     cost_.collective(CollectiveKind::reduce_scatter, Bytes(dbl(tokens) * dbl(h) * 2.0), tp_group_).value;
  } else if (ep > 1 && dp_ > 1) {
    // Dispatch and combine end when the busiest rank has received its routed tokens and
    // sent their outputs back: `imbalance` times the mean.
    parts.exchange = 2.0 * cost_.collective(CollectiveKind::all_to_all,
                                            Bytes(dbl(tokens * e.top_k) * dbl(h) * 2.0 / dbl(ep) * imbalance), ep_group_)
                               .value;
  } else if (dp_ > 1) {
    // Attention DP in front of tensor-parallel experts: the GPUs' tokens are gathered
    // before the experts and their outputs reduce-scattered back (about one all-reduce).
    parts.exchange = tp_all_reduce(dbl(tokens) * dbl(h) * 2.0);
  }
  return parts;
}

double IterationModel::gpu_seconds(const IterationBatch& b) const { return step_gpu_seconds(b, nullptr); }

double IterationModel::step_gpu_seconds(const IterationBatch& b, StepParts* parts) const {
  const ModelSpec& m = m_;
  const int64_t tokens = b.tokens();
  int64_t sampled = b.decodes * b.verify;
  for (const auto& pf : b.prefills)
    if (pf.last) ++sampled;
  if (tokens == 0) return 0.0;
  const AttentionParts attn_parts = attention_layer_parts(b, tokens);
  const double attn = attn_parts.total();
  const double ffn = dense_ffn_seconds(tokens, m.intermediate, b.busiest_rank_prompt_tokens);
  const ExpertParts experts = m.moe ? experts_parts(tokens) : ExpertParts{};
  const double dense_layer = attn + ffn;
  const double moe_layer = m.moe ? attn + experts.total() : 0.0;
  double t = dbl(m.layers - moe_layers_) * dense_layer + dbl(moe_layers_) * moe_layer;
  AttentionParts windowed_parts = attn_parts;
  if (sliding_layers_ > 0) {
    // Layers with a sliding window differ from the others in their attention only.
    windowed_parts = attention_layer_parts(b, tokens, true);
    t += dbl(sliding_layers_) * (windowed_parts.total() - attn);
  }
  const double head = sampled > 0 ? head_seconds(sampled) : 0.0;
  if (sampled > 0) t += head;
  const bool eager = !captured(b, tokens);
  if (eager) t += eager_host_s_;
  // The GPU idles between two dependent kernels even when a graph launches them; an eager
  // step's launches add its layers' host time on top (eager_host_s_ was measured as eager
  // minus replayed steps, both with these gaps).
  // Besides the GEMMs: the attention kernels of the decodes and of the prompt chunks in each
  // layer, and the head where a sequence emits a token.
  const double kernels = layer_gemm_kernels_ +
                         dbl(m.layers) * ((b.decodes > 0 ? 1.0 : 0.0) + (b.prefills.empty() ? 0.0 : 1.0)) +
                         (sampled > 0 ? 1.0 : 0.0);
  // A step replayed as graphs captured in pieces idles at every layer's boundaries too
  // (EngineDefaults::piecewise_graph_s_per_layer), unless it is a decode-only step the
  // engine captures whole.
  const bool pieces = !eager && !(engine_.full_graph_decode_steps && b.prefills.empty());
  const double piece_s = m.mla ? engine_.piecewise_graph_s_per_mla_layer : engine_.piecewise_graph_s_per_layer;
  const double gaps = kernels * graph_gap_s_ + (pieces ? dbl(m.layers) * piece_s : 0.0);
  t += gaps;
  if (parts) {
    // The same layers by part: every layer's attention (windowed layers' own), dense
    // layers' MLPs, routed-expert layers' expert blocks.
    const double full = dbl(m.layers - sliding_layers_), sliding = dbl(sliding_layers_), moe = dbl(moe_layers_);
    auto per_layer = [&](double AttentionParts::*part) { return full * attn_parts.*part + sliding * windowed_parts.*part; };
    parts->attention_projections = per_layer(&AttentionParts::projections);
    parts->attention_kernels = per_layer(&AttentionParts::prefill_kernels) + per_layer(&AttentionParts::decode_kernel);
    parts->elementwise = per_layer(&AttentionParts::elementwise);
    parts->tp_all_reduce = per_layer(&AttentionParts::all_reduce);
    parts->dense_mlp = dbl(m.layers - moe_layers_) * ffn;
    parts->routed_experts = moe * experts.grouped_gemms;
    parts->router = moe * experts.router;
    parts->shared_experts = moe * experts.shared;
    parts->expert_exchange = moe * experts.exchange;
    parts->head = head;
    parts->kernel_gaps = gaps;
    parts->eager_host = eager ? eager_host_s_ : 0.0;
  }
  return t;
}

double IterationModel::head_seconds(int64_t sampled) const {
  // Output head (16-bit) and sampling for the sequences that emit a token.
  const int64_t tp = p_.tp, h = m_.hidden;
  return memoized(GemmMemo::Kind::head, sampled, m_.vocab / tp, h, [&] {
    const double head_bytes = dbl(m_.vocab) * dbl(h) / dbl(tp) * 2.0 + dbl(sampled) * dbl(m_.vocab) / dbl(tp) * 4.0;
    return std::max(cost_.gemm_compute(sampled, m_.vocab / tp, h, DType::bf16).value, stream(head_bytes));
  });
}

bool IterationModel::captured(const IterationBatch& b, int64_t tokens) const {
  // A step the engine cannot replay as a CUDA graph runs every layer's host work too.
  // Without chunked prefill (vLLM V0's scheduler) only decode batches are captured: V0's
  // CUDAGraphRunner replays decodes, prompts run eagerly.
  return engine_.cuda_graphs && tokens <= engine_.cuda_graph_max_tokens &&
         (captures_prefill_steps() || b.prefills.empty());
}

bool IterationModel::replays_graph(const IterationBatch& b) const {
  const int64_t tokens = b.tokens();
  return tokens > 0 && captured(b, tokens);
}

StepParts IterationModel::parts(const IterationBatch& b) const {
  StepParts out;
  out.host_overlaps_gpu = engine_.host_overlaps_gpu;
  out.host = host_seconds(b);
  out.gpu = step_gpu_seconds(b, &out);
  out.seconds = step_seconds(out.gpu, out.host);
  return out;
}

double IterationModel::seconds(const IterationBatch& b) const { return step_seconds(gpu_seconds(b), host_seconds(b)); }

double IterationModel::step_seconds(double gpu, double host) const {
  // The engine's host work for the step: after the GPU, or behind it when it overlaps.
  if (gpu == 0.0) return 0.0;
  return engine_.host_overlaps_gpu ? std::max(gpu, host) : gpu + host;
}

double IterationModel::host_seconds(const IterationBatch& b) const {
  return engine_.step_overhead_s + engine_.step_overhead_per_seq_s * dbl(b.decodes + static_cast<int64_t>(b.prefills.size()));
}

EngineDefaults engine_defaults(const InferencePlan& p, const ModelSpec& m, const GpuSpec& gpu, int64_t longest_request) {
  // The profile's defaults for this GPU and usage context, with every knob the scenario
  // sets on top.
  EngineDefaults d = p.profile.knobs.for_deployment(gpu.id, gpu.hbm_capacity_bytes, p.llm_class, p.engine_context);
  const EngineOptions& o = p.engine;
  // A long-context model switches chunked prefill on where the engine does so by default
  // (EngineDefaults::chunked_prefill_above_context), the scenario not saying otherwise.
  const int64_t context = o.max_model_len.value_or(m.max_position);
  if (d.chunked_prefill_above_context > 0 && context > d.chunked_prefill_above_context && m.sliding_window == 0 && !m.mla)
    d.chunked_prefill = true;
  d.chunked_prefill = o.chunked_prefill.value_or(d.chunked_prefill);
  // Without chunked prefill a step must hold a whole request; the profile says whether its
  // budget covers the model's context or the longest request the run has.
  const int64_t unchunked_span =
      std::max(longest_request, d.unchunked_budget_is_model_context ? context : int64_t{0});
  d.max_num_seqs = o.max_num_seqs.value_or(d.max_num_seqs);
  d.block_size = o.block_size.value_or(d.block_size);
  // An engine that picks its share by the tensor-parallel degree.
  for (const auto& [from_tp, share] : d.gpu_memory_utilization_by_tp)
    if (p.tp >= from_tp) d.gpu_memory_utilization = share;
  d.gpu_memory_utilization = o.gpu_memory_utilization.value_or(d.gpu_memory_utilization);
  d.max_num_batched_tokens = o.max_num_batched_tokens.value_or(
      d.chunked_prefill ? d.max_num_batched_tokens : std::max<int64_t>(d.unchunked_min_batched_tokens, unchunked_span));
  // Under attention DP every GPU schedules its own forward within its budget: the whole
  // budget each (the group's is dp times it), or, where the engine divides the budget among
  // its ranks, a share of it.
  if (!d.dp_attention_divides_batched_tokens) d.max_num_batched_tokens *= p.attention_dp_degree();
  d.cuda_graphs = o.cuda_graphs.value_or(d.cuda_graphs);
  // An engine that captures more from tensor parallelism 4 up (EngineDefaults::
  // cuda_graph_max_tokens_tp4).
  if (d.cuda_graph_max_tokens_tp4 > 0 && p.tp >= 4) d.cuda_graph_max_tokens = d.cuda_graph_max_tokens_tp4;
  d.cuda_graph_max_tokens = o.cuda_graph_max_tokens.value_or(
      d.cuda_graphs_follow_max_num_seqs ? std::max(d.cuda_graph_max_tokens, d.max_num_seqs) : d.cuda_graph_max_tokens);
  if (!o.gpu_memory_utilization && d.memory_reserve.active()) {
    // The engine's own share from what it reserves (MemoryReserveRule): its prefill chunk
    // (the group's budget), its graph capture, the model's GPUs and the attention-DP ranks.
    const MemoryReserveRule& r = d.memory_reserve;
    const double gpu_mib = gpu.hbm_capacity_bytes / (1024.0 * 1024.0);
    const double dp = static_cast<double>(p.attention_dp_degree());
    // SGLang counts its graph batch whether or not graphs are captured.
    const double graph = static_cast<double>(d.cuda_graph_max_tokens);
    const int64_t chunk = d.max_num_batched_tokens / (d.dp_attention_divides_batched_tokens ? 1 : p.attention_dp_degree());
    double reserve = r.fixed_mib + r.mib_per_prefill_token * static_cast<double>(std::max(chunk, r.min_prefill_tokens)) +
                     r.mib_per_graph_seq * graph + r.mib_per_model_gpu * static_cast<double>(p.tp * p.pp);
    if (dp > 1) {
      reserve += r.mib_per_dp_graph_seq * graph * dp;
      if (graph > static_cast<double>(r.large_graph_seqs)) reserve += r.mib_per_dp_graph_seq_large * graph * dp;
    }
    if (gpu_mib > r.min_above_gpu_mib) reserve = std::max(reserve, r.min_mib);
    d.gpu_memory_utilization = std::clamp(std::round((gpu_mib - reserve) / gpu_mib * 1000.0) / 1000.0, 0.01, 1.0);
  }
  if (o.step_overhead_ms) {
    // A measured per-step figure replaces the profile's host model.
    d.step_overhead_s = *o.step_overhead_ms * 1e-3;
    d.step_overhead_per_seq_s = 0;
    d.host_overlaps_gpu = false;
  }
  if (o.eager_host_us_per_layer) d.eager_host_s_per_layer = *o.eager_host_us_per_layer * 1e-6;
  d.scheduler_steps = o.scheduler_steps.value_or(d.scheduler_steps);
  d.preemption = o.preemption.value_or(d.preemption);
  if (o.swap_space_gib) d.swap_space_bytes = *o.swap_space_gib * 1024.0 * 1024.0 * 1024.0;
  return d;
}

}  // namespace capsim
