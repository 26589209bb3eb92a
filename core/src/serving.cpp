#include "capsim/core/serving.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <optional>
#include <limits>
#include <random>
#include <stdexcept>

namespace capsim {

namespace {

double dbl(int64_t v) { return static_cast<double>(v); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q * dbl(static_cast<int64_t>(v.size()) - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - dbl(static_cast<int64_t>(lo))) * (v[hi] - v[lo]);
}

IterationModel::IterationModel(const ModelSpec& m, const SystemSpec& sys, const InferencePlan& p, const CostModel& cost)
    : m_(m), sys_(sys), p_(p), cost_(cost) {
  // Weight-only quantization (int4/int8 weights with bf16 activations) keeps bf16 tensor
  // cores and reads fewer weight bytes; W8A8 uses int8 tensor cores; fp8 uses fp8 ones.
  wbytes_ = dtype_bytes(p.weight_dtype);
  tail_s_ = sys.gpu.efficiency.gemm_tail_us.value * 1e-6;
  // Achievable streaming rate of the cost model (calibrated where a profile says so), read
  // at a size far above any launch floor.
  const double gigabyte_s = cost.memory_bound(Bytes(1e9)).value;
  stream_bytes_per_s_ = gigabyte_s > 0 ? 1e9 / gigabyte_s : std::numeric_limits<double>::infinity();
  engine_ = engine_defaults(p, 0);
  fp8_block_ = p.fp8_block_scaling.value_or(m.fp8_weight_block > 0);
  for (int64_t i = 0; i < m.layers; ++i) moe_layers_ += m.is_moe_layer(i) ? 1 : 0;
  eager_host_s_ = engine_.eager_host_s_per_layer
                      ? *engine_.eager_host_s_per_layer * dbl(m.layers)
                      : dbl(m.layers - moe_layers_) * engine_.eager_host_s_dense_layer +
                            dbl(moe_layers_) * engine_.eager_host_s_moe_layer;
  if (p.activation_dtype == DType::fp8 && p.weight_dtype == DType::fp8) math_ = DType::fp8;
  else if (p.activation_dtype == DType::int8 && p.weight_dtype == DType::int8) math_ = DType::int8;
  else math_ = DType::bf16;
  const DType kv = p.kv_dtype.value_or(p.weight_dtype == DType::fp8 ? DType::fp8 : DType::bf16);
  const double tp = dbl(p.tp);
  kv_bytes_token_layer_ = kv_cache_bytes_per_token(m, kv) / dbl(m.layers);
  if (!m.mla) kv_bytes_token_layer_ /= std::min(tp, dbl(m.kv_heads));
  tp_group_.size = p.tp;
  tp_group_.per_node = std::min<int64_t>(p.tp, sys.gpus_per_node);
  const int64_t ep = p.ep.value_or(1);
  ep_group_.size = ep;
  ep_group_.per_node = std::min<int64_t>(ep, sys.gpus_per_node);
  // Weight bytes read by one decode token on one GPU.
  for (int64_t i = 0; i < m.layers; ++i) {
    const LayerParams lp = layer_params(m, i);
    double w = dbl(lp.attention + lp.dense_mlp + lp.shared_experts) / tp;
    if (m.is_moe_layer(i)) w += dbl(m.moe->top_k * lp.routed_expert) / (ep > 1 ? 1.0 : tp) / (ep > 1 ? dbl(ep) : 1.0);
    weight_bytes_ += w * wbytes_;
  }
  weight_bytes_ += dbl(m.vocab * m.hidden) / tp * 2.0;  // head stays in 16 bits
}

std::pair<double, double> p99_latencies(const ServingResult& r) {
  std::vector<double> ttft, tpot;
  for (const auto& q : r.requests) {
    ttft.push_back(q.ttft() * 1e3);
    if (q.output > 1) tpot.push_back(q.tpot() * 1e3);
  }
  return {percentile(ttft, 0.99), percentile(tpot, 0.99)};
}

std::pair<double, double> p99_latencies(const std::vector<ServingResult>& runs) {
  std::vector<double> ttft, tpot;
  for (const auto& r : runs) {
    const auto [a, b] = p99_latencies(r);
    ttft.push_back(a);
    tpot.push_back(b);
  }
  return {percentile(ttft, 0.5), percentile(tpot, 0.5)};
}

int64_t serving_replications(const ServingWorkload& w) {
  using Mode = ServingWorkload::Mode;
  const bool random = w.mode == Mode::poisson || (w.mode != Mode::trace && (w.input_tokens.kind != LengthDist::Kind::fixed ||
                                                                              w.output_tokens.kind != LengthDist::Kind::fixed));
  if (!random || w.num_requests <= 0) return 1;
  return std::clamp<int64_t>(ceil_div(2000, w.num_requests), 1, 16);
}

std::vector<ServingResult> simulate_serving_runs(const Scenario& s, const CostModel& cost, uint64_t seed, bool record_timeline) {
  if (!s.inference) throw std::logic_error("simulate_serving_runs needs an inference plan");
  const int64_t n = serving_replications(s.inference->workload);
  std::vector<ServingResult> runs;
  runs.push_back(simulate_serving(s, cost, seed, record_timeline));
  // Every run uses the engine the first one resolved (max_num_seqs "auto" is chosen once).
  Scenario same = s;
  same.inference->engine.max_num_seqs = runs.front().engine.max_num_seqs;
  for (int64_t i = 1; i < n; ++i) runs.push_back(simulate_serving(same, cost, seed + static_cast<uint64_t>(i), false));
  return runs;
}

bool meets_sla(const Scenario& s, const CostModel& cost, const ServingSla& sla, uint64_t seed) {
  // The same decision as comparing the medians over all runs of simulate_serving_runs()
  // with the SLA, stopping as soon as the remaining runs cannot change it: once more than
  // half of the runs fall on one side of a bound, both middle values (and so the median)
  // do too. Only an even split needs the middle values themselves.
  const int64_t n = serving_replications(s.inference->workload);
  const int64_t majority = n / 2 + 1;
  ServingResult first = simulate_serving(s, cost, seed, false);
  Scenario same = s;
  same.inference->engine.max_num_seqs = first.engine.max_num_seqs;
  std::vector<double> ttft, tpot;
  int64_t ttft_ok = 0, tpot_ok = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto [a, b] = p99_latencies(i == 0 ? first : simulate_serving(same, cost, seed + static_cast<uint64_t>(i), false));
    ttft.push_back(a);
    tpot.push_back(b);
    ttft_ok += a <= sla.ttft_p99_ms ? 1 : 0;
    tpot_ok += b <= sla.tpot_p99_ms ? 1 : 0;
    const int64_t runs = i + 1;
    const bool ttft_fail = runs - ttft_ok >= majority, tpot_fail = runs - tpot_ok >= majority;
    if (ttft_fail || tpot_fail) return false;
    if (ttft_ok >= majority && tpot_ok >= majority) return true;
  }
  return percentile(ttft, 0.5) <= sla.ttft_p99_ms && percentile(tpot, 0.5) <= sla.tpot_p99_ms;
}

double max_qps(const Scenario& s, const CostModel& cost, const ServingSla& sla, uint64_t seed) {
  Scenario probe = s;
  probe.inference->workload.mode = ServingWorkload::Mode::poisson;
  auto meets = [&](double qps) {
    probe.inference->workload.qps = qps;
    return meets_sla(probe, cost, sla, seed);
  };
  double lo = 0, hi = 0.25;
  while (meets(hi) && hi < 1e6) {
    lo = hi;
    hi *= 2;
  }
  for (int i = 0; i < 24 && hi - lo > 1e-3 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (meets(mid) ? lo : hi) = mid;
  }
  return lo;
}

double IterationModel::gemm(int64_t m, int64_t n, int64_t k) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0.0;
  // Roofline of pre-quantized weights: tensor-core time against streaming the weights
  // (and the 16-bit activations in and out) from HBM.
  double weight = dbl(k) * dbl(n) * wbytes_;
  double compute = cost_.gemm_compute(m, n, k, math_).value;
  double quantize = 0;
  if (math_ == DType::fp8 && fp8_block_) {
    // Block-scaled FP8: the blockwise kernel's measured rate, and the per-token-group
    // activation quantization ahead of it (read 16-bit, write 8-bit values and fp32 scales
    // per 128).
    const double block = sys_.gpu.efficiency.gemm_fp8_block.value;
    if (block > 0) compute = std::max(compute, 2.0 * dbl(m) * dbl(n) * dbl(k) / (sys_.gpu.peak(DType::fp8).value * block));
    quantize = cost_.memory_bound(Bytes(dbl(m) * dbl(k) * (2.0 + 1.0 + 4.0 / 128.0))).value;
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
  // Inside one NVLink domain the engine's own all-reduce kernel, where the GPU has it
  // measured, when it beats NCCL.
  const GpuEfficiency& e = sys_.gpu.efficiency;
  if (tp_group_.nodes() > 1 || e.engine_allreduce_fixed_us.value <= 0) return nccl;
  const double custom = (e.engine_allreduce_fixed_us.value + bytes / (1024.0 * 1024.0) * e.engine_allreduce_us_per_mib.value) * 1e-6;
  return std::min(nccl, custom);
}

double IterationModel::stream(double bytes) const {
  // A weight-streaming GEMM: bytes at the achievable rate plus the kernel's fixed fill and
  // drain where the GPU has it measured (above any launch floor), else the floored stream.
  if (tail_s_ > 0) return bytes / stream_bytes_per_s_ + tail_s_;
  return cost_.memory_bound(Bytes(bytes)).value;
}

double IterationModel::gpu_seconds(const IterationBatch& b) const {
  const ModelSpec& m = m_;
  int64_t tokens = b.decodes * b.verify;
  int64_t sampled = b.decodes * b.verify;
  for (const auto& pf : b.prefills) {
    tokens += pf.tokens;
    if (pf.last) ++sampled;
  }
  if (tokens == 0) return 0.0;
  const int64_t tp = p_.tp;
  const int64_t ep = p_.ep.value_or(1);
  const int64_t h = m.hidden;
  double dense_layer = 0, moe_layer = 0;
  // Projections of one layer (attention and norms) on `tokens` rows.
  auto attention_part = [&]() {
    double t = 0;
    if (m.mla) {
      const auto& a = *m.mla;
      const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
      if (a.q_lora_rank > 0) {
        t += gemm(tokens, a.q_lora_rank, h);
        t += gemm(tokens, m.heads * qk / tp, a.q_lora_rank);
      } else {
        t += gemm(tokens, m.heads * qk / tp, h);
      }
      t += gemm(tokens, a.kv_lora_rank + a.qk_rope_head_dim, h);
      t += gemm(tokens, m.heads * (a.qk_nope_head_dim + a.v_head_dim) / tp, a.kv_lora_rank);
      t += gemm(tokens, h, m.heads * a.v_head_dim / tp);
    } else {
      t += gemm(tokens, (m.heads + 2 * m.kv_heads) * m.head_dim / tp, h);
      t += gemm(tokens, h, m.heads * m.head_dim / tp);
    }
    // Attention over the cache: prefill chunks at FlashAttention efficiency (each chunk
    // attends to its cached prefix and causally to itself); decodes read every cached
    // token's K and V once.
    for (const auto& pf : b.prefills) {
      AttentionShape s;
      s.batch = 1;
      s.heads = std::max<int64_t>(1, m.heads / tp);
      s.kv_heads = std::max<int64_t>(1, (m.mla ? m.heads : m.kv_heads) / tp);
      s.q_len = pf.tokens;
      s.kv_len = pf.cached + (pf.tokens + 1) / 2;  // causal: on average half the chunk
      s.causal = false;
      s.qk_dim = m.mla ? m.mla->qk_nope_head_dim + m.mla->qk_rope_head_dim : m.head_dim;
      s.v_dim = m.mla ? m.mla->v_head_dim : m.head_dim;
      t += cost_.attention(s, false).value;
    }
    if (b.decodes > 0) {
      const double bytes = b.decode_context * kv_bytes_token_layer_;
      // MLA decode attends in the compressed space: 2 x heads x (kv_lora + rope) x 2 FLOPs
      // per cached token (FlashMLA is compute-bound at large batch).
      double flops = 0;
      if (m.mla) flops = 4.0 * dbl(m.heads / tp) * dbl(m.mla->kv_lora_rank + m.mla->qk_rope_head_dim) * b.decode_context;
      else flops = 4.0 * dbl(m.heads / tp) * dbl(m.head_dim) * b.decode_context;
      flops *= dbl(b.verify);
      const double t_mem = cost_.memory_bound(Bytes(bytes)).value;
      /// Decode attention reaches 0.6 of the bf16 peak when compute-bound: FlashMLA's 660 of
      /// 989 TFLOP/s on H800 (hardware.json efficiency.attention, flashmla_readme).
      const double t_flops = flops / (sys_.gpu.peak(DType::bf16).value * 0.6);
      t += std::max(t_mem, t_flops);
    }
    // Norms, rotary, residuals: a few passes over the hidden states.
    t += cost_.memory_bound(Bytes(dbl(tokens) * dbl(h) * 2.0 * 8.0)).value;
    if (tp > 1) t += 2.0 * tp_all_reduce(dbl(tokens) * dbl(h) * 2.0);
    return t;
  };
  const double attn = attention_part();
  auto dense_ffn = [&](int64_t inner) {
    return gemm(tokens, inner * (m.gated_mlp ? 2 : 1) / tp, h) + gemm(tokens, h, inner / tp) +
           cost_.memory_bound(Bytes(dbl(tokens) * dbl(inner) / dbl(tp) * 2.0 * 3.0)).value;
  };
  dense_layer = attn + dense_ffn(m.intermediate);
  if (m.moe) {
    const auto& e = *m.moe;
    // Experts one iteration touches: with T tokens choosing top-k of E uniformly, the
    // expected distinct experts are E (1 - (1 - k/E)^T).
    const double touched = dbl(e.num_experts) * (1.0 - std::pow(1.0 - dbl(e.top_k) / dbl(e.num_experts), dbl(tokens)));
    const double local_experts = ep > 1 ? touched / dbl(ep) : touched;
    const double inner = dbl(e.expert_intermediate) / (ep > 1 ? 1.0 : dbl(tp));
    const double routed_tokens = dbl(tokens * e.top_k) / (ep > 1 ? dbl(ep) : 1.0);
    const double per_expert = routed_tokens / std::max(1.0, local_experts);
    const auto pe = static_cast<int64_t>(std::ceil(per_expert));
    const auto inner_i = static_cast<int64_t>(inner);
    const double w_bytes = local_experts * dbl(h) * inner * (m.gated_mlp ? 3.0 : 2.0) * wbytes_;
    // Compute of the grouped expert GEMMs: at the fused MoE kernel's measured rate where
    // the GPU has it (8-bit or 16-bit tensor cores), else from the GEMM efficiency model.
    const GpuEfficiency& ge = sys_.gpu.efficiency;
    const bool eight_bit = math_ == DType::fp8 || math_ == DType::int8;
    const double moe_frac = eight_bit ? (math_ == DType::fp8 && engine_.moe_compute_fraction_fp8 > 0
                                             ? engine_.moe_compute_fraction_fp8
                                             : ge.moe_kernel_compute_fp8.value)
                                      : ge.moe_kernel_compute_bf16.value;
    const double routed_flops = routed_tokens * dbl(h) * inner * (m.gated_mlp ? 6.0 : 4.0);
    const double compute =
        moe_frac > 0
            ? routed_flops / (sys_.gpu.peak(eight_bit ? math_ : DType::bf16).value * moe_frac)
            : cost_.gemm_compute(pe, inner_i * (m.gated_mlp ? 2 : 1), h, math_, static_cast<int64_t>(std::ceil(local_experts))).value +
                  cost_.gemm_compute(pe, h, inner_i, math_, static_cast<int64_t>(std::ceil(local_experts))).value;
    // Streaming the touched experts' weights: at the fused MoE kernel's measured rate and
    // fixed time where the GPU has them, else as two weight-streaming GEMMs (gate/up, then
    // down).
    const double weights = ge.moe_kernel_hbm.value > 0
                               ? w_bytes / (sys_.gpu.hbm_bandwidth().value * ge.moe_kernel_hbm.value) +
                                     ge.moe_kernel_fixed_us.value * 1e-6
                               : stream(w_bytes * (m.gated_mlp ? 2.0 / 3.0 : 0.5)) + stream(w_bytes * (m.gated_mlp ? 1.0 / 3.0 : 0.5));
    // The fused kernel hides part of the shorter of the two behind the longer.
    double experts = std::max(compute, weights) + ge.moe_kernel_unhidden.value * std::min(compute, weights);
    experts += gemm(tokens, e.num_experts, h);  // router
    if (e.shared_experts > 0) experts += dense_ffn(e.shared_experts * e.shared_intermediate);
    if (ep > 1)
      experts += 2.0 * cost_.collective(CollectiveKind::all_to_all, Bytes(dbl(tokens * e.top_k) * dbl(h) * 2.0 / dbl(ep)), ep_group_).value;
    moe_layer = attn + experts;
  }
  double t = dbl(m.layers - moe_layers_) * dense_layer + dbl(moe_layers_) * moe_layer;
  // Output head (16-bit) and sampling for the sequences that emit a token.
  if (sampled > 0) {
    const double head_bytes = dbl(m.vocab) * dbl(h) / dbl(tp) * 2.0 + dbl(sampled) * dbl(m.vocab) / dbl(tp) * 4.0;
    t += std::max(cost_.gemm_compute(sampled, m.vocab / tp, h, DType::bf16).value, stream(head_bytes));
  }
  // A step the engine cannot replay as a CUDA graph runs every layer's host work too.
  // Without chunked prefill (vLLM V0's scheduler) only decode batches are captured: V0's
  // CUDAGraphRunner replays decodes, prompts run eagerly.
  const bool captured = engine_.cuda_graphs && tokens <= engine_.cuda_graph_max_tokens &&
                        ((engine_.graph_prefill_steps && engine_.chunked_prefill) || b.prefills.empty());
  if (!captured) t += eager_host_s_;
  return t;
}

double IterationModel::seconds(const IterationBatch& b) const {
  // The engine's host work for the step: after the GPU, or behind it when it overlaps.
  const double gpu = gpu_seconds(b), host = host_seconds(b);
  if (gpu == 0.0) return 0.0;
  return engine_.host_overlaps_gpu ? std::max(gpu, host) : gpu + host;
}

double IterationModel::host_seconds(const IterationBatch& b) const {
  return engine_.step_overhead_s + engine_.step_overhead_per_seq_s * dbl(b.decodes + static_cast<int64_t>(b.prefills.size()));
}

EngineDefaults engine_defaults(const InferencePlan& p, int64_t longest_request) {
  // The profile's defaults, with every knob the scenario sets on top.
  EngineDefaults d = p.profile.knobs;
  const EngineOptions& o = p.engine;
  d.chunked_prefill = o.chunked_prefill.value_or(d.chunked_prefill);
  d.max_num_seqs = o.max_num_seqs.value_or(d.max_num_seqs);
  d.block_size = o.block_size.value_or(d.block_size);
  d.gpu_memory_utilization = o.gpu_memory_utilization.value_or(d.gpu_memory_utilization);
  d.max_num_batched_tokens = o.max_num_batched_tokens.value_or(
      d.chunked_prefill ? d.max_num_batched_tokens : std::max<int64_t>(d.unchunked_min_batched_tokens, longest_request));
  d.cuda_graphs = o.cuda_graphs.value_or(d.cuda_graphs);
  d.cuda_graph_max_tokens = o.cuda_graph_max_tokens.value_or(d.cuda_graph_max_tokens);
  if (o.step_overhead_ms) {
    // A measured per-step figure replaces the profile's host model.
    d.step_overhead_s = *o.step_overhead_ms * 1e-3;
    d.step_overhead_per_seq_s = 0;
    d.host_overlaps_gpu = false;
  }
  if (o.eager_host_us_per_layer) d.eager_host_s_per_layer = *o.eager_host_us_per_layer * 1e-6;
  d.scheduler_steps = o.scheduler_steps.value_or(d.scheduler_steps);
  d.swap_preemption = o.swap_preemption.value_or(d.swap_preemption);
  if (o.swap_space_gib) d.swap_space_bytes = *o.swap_space_gib * 1024.0 * 1024.0 * 1024.0;
  return d;
}

namespace {

/// ShareGPT prompt lengths as serving benchmarks sample them (vLLM benchmark_serving and
/// sglang.bench_serving: first human turn, 4..1024 tokens): SGLang's Prometheus histogram
/// of prompt tokens over a 1,003-request ShareGPT benchmark run with a Llama-3 tokenizer
/// (sglang PR #1853, sglang:request_prompt_tokens_bucket; cumulative counts at le = 20, 50,
/// 100, 200, 500, 1000, 2000: 244, 392, 481, 570, 846, 1001, 1003). Bin edges in tokens; the
/// first bin starts at the benchmarks' 4-token minimum, the last ends at their 1,024-token
/// cap plus the BOS token.
constexpr std::array<double, 8> kShareGptPromptEdges = {4, 20, 50, 100, 200, 500, 1000, 1025};
constexpr std::array<double, 8> kShareGptPromptCumulative = {0, 244, 392, 481, 570, 846, 1001, 1003};

/// The histogram's quantile at u in (0, 1), linear inside each bin.
double sharegpt_prompt_quantile(double u) {
  const double total = kShareGptPromptCumulative.back();
  for (size_t i = 1; i < kShareGptPromptEdges.size(); ++i) {
    const double hi = kShareGptPromptCumulative[i] / total;
    if (u <= hi || i + 1 == kShareGptPromptEdges.size()) {
      const double lo = kShareGptPromptCumulative[i - 1] / total;
      const double f = hi > lo ? std::clamp((u - lo) / (hi - lo), 0.0, 1.0) : 0.0;
      return kShareGptPromptEdges[i - 1] + f * (kShareGptPromptEdges[i] - kShareGptPromptEdges[i - 1]);
    }
  }
  return kShareGptPromptEdges.back();
}

/// Its mean (uniform inside each bin), ~242 tokens: the histogram is scaled to a case's mean.
double sharegpt_prompt_mean() {
  double sum = 0;
  for (size_t i = 1; i < kShareGptPromptEdges.size(); ++i)
    sum += (kShareGptPromptCumulative[i] - kShareGptPromptCumulative[i - 1]) * 0.5 *
           (kShareGptPromptEdges[i] + kShareGptPromptEdges[i - 1]);
  return sum / kShareGptPromptCumulative.back();
}

/// Token lengths drawn from a distribution with our own transforms of a 64-bit engine (so
/// every platform draws the same numbers). `prompt` selects the ShareGPT prompt histogram.
int64_t draw_length(const LengthDist& d, std::mt19937_64& rng, bool prompt) {
  const double u = (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // (0, 1)
  switch (d.kind) {
    case LengthDist::Kind::fixed: return std::max<int64_t>(1, std::llround(d.mean));
    case LengthDist::Kind::uniform:
      return std::max<int64_t>(1, static_cast<int64_t>(std::floor(d.min + u * (d.max - d.min + 1.0))));
    case LengthDist::Kind::sharegpt:
      // Prompts follow the benchmark histogram scaled to the requested mean. For replies
      // only means are published; we take the maximum-entropy positive distribution,
      // exponential with that mean, clipped to [4, 16 x mean] tokens.
      if (prompt) return std::max<int64_t>(4, std::llround(sharegpt_prompt_quantile(u) * d.mean / sharegpt_prompt_mean()));
      return std::clamp<int64_t>(std::llround(-d.mean * std::log(u)), 4, std::llround(16.0 * d.mean));
  }
  return 1;
}

struct Seq {
  size_t req;            // index into results
  double accepted = 0;   // speculative decoding: expected tokens not yet emitted
  int64_t prompt = 0;    // prompt tokens
  int64_t target = 0;    // output tokens to generate
  int64_t prefilled = 0; // prompt tokens in the cache
  int64_t generated = 0;
  int64_t blocks = 0;
  double last_token = 0;
};

}  // namespace

namespace {

ServingResult simulate_once(const Scenario& s, const CostModel& cost, uint64_t seed, bool record_timeline) {
  const InferencePlan& p = *s.inference;
  const ServingWorkload& w = p.workload;
  ServingResult out;
  std::mt19937_64 rng(seed);
  const bool traced = w.mode == ServingWorkload::Mode::trace;
  const int64_t n = traced ? static_cast<int64_t>(w.trace.size()) : w.num_requests;
  out.requests.resize(static_cast<size_t>(n));
  int64_t longest = 1;
  for (size_t i = 0; i < out.requests.size(); ++i) {
    auto& r = out.requests[i];
    r.input = traced ? w.trace[i].input_tokens : draw_length(w.input_tokens, rng, true);
    r.output = traced ? w.trace[i].output_tokens : draw_length(w.output_tokens, rng, false);
    // The step budget without chunked prefill covers a whole request: a preempted sequence
    // comes back as a prompt of its input and the tokens it had made (vLLM V0 sizes it by
    // max_model_len, which no request exceeds).
    longest = std::max(longest, r.input + r.output);
  }
  // Arrivals: all at once (offline), Poisson at qps, or issued by a closed loop.
  double clock = 0;
  for (auto& r : out.requests) {
    if (w.mode == ServingWorkload::Mode::poisson && w.qps > 0) {
      const double u = (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
      clock += -std::log(u) / w.qps;
    }
    r.arrival = w.mode == ServingWorkload::Mode::poisson ? clock : 0.0;
  }
  if (traced)
    for (size_t i = 0; i < out.requests.size(); ++i) out.requests[i].arrival = w.trace[i].arrival_s;
  out.engine = engine_defaults(p, longest);
  out.chunked_prefill = out.engine.chunked_prefill;
  out.slo_ttft_s = p.slo_ttft_ms * 1e-3;
  out.slo_tpot_s = p.slo_tpot_ms * 1e-3;
  out.memory = inference_memory(s.model, s.system, p, &out.engine);
  const IterationModel model(s.model, s.system, p, cost);
  const SpeculativeSpec& spec = p.speculative;
  std::optional<IterationModel> draft;
  if (spec.k > 0 && spec.draft_model) draft.emplace(*spec.draft_model, s.system, p, cost);
  // Expected tokens per verification: (1 - a^(k+1)) / (1 - a).
  const double per_verify = spec.k > 0 ? (spec.acceptance >= 1.0 ? dbl(spec.k + 1)
                                                                 : (1.0 - std::pow(spec.acceptance, dbl(spec.k + 1))) /
                                                                       (1.0 - spec.acceptance))
                                       : 1.0;
  const int64_t bs = out.memory.block_size;
  const int64_t total_blocks = std::max<int64_t>(1, out.memory.num_blocks);
  const int64_t replicas = std::max<int64_t>(1, p.replicas);
  const bool closed = w.mode == ServingWorkload::Mode::concurrency;

  // Replicas: colocated, or a prefill pool feeding a decode pool.
  const bool disagg = p.prefill_replicas > 0 && p.decode_replicas > 0;
  struct Replica {
    enum class Role { both, prefill, decode } role = Role::both;
    std::deque<Seq> waiting;
    std::vector<Seq> running;
    std::deque<Seq> swapped;  ///< preempted by swapping: KV blocks in host memory
    double swapped_bytes = 0;  ///< host memory they take, per GPU
    double swap_s = 0;         ///< swap traffic the next iteration waits for
    int64_t free_blocks = 0;
    bool busy = false;
    double busy_until = 0;
    // The iteration in flight.
    std::vector<size_t> decoding, prefilling;
    std::vector<int64_t> chunk_of;
    std::vector<int64_t> tokens_of;  ///< tokens each decoding sequence makes this iteration
    int64_t steps = 1;               ///< forward passes in the iteration (multi-step decode)
    size_t outstanding() const { return waiting.size() + running.size(); }
  };
  std::vector<Replica> reps;
  if (disagg) {
    for (int64_t i = 0; i < p.prefill_replicas; ++i) reps.push_back({Replica::Role::prefill});
    for (int64_t i = 0; i < p.decode_replicas; ++i) reps.push_back({Replica::Role::decode});
  } else {
    for (int64_t i = 0; i < replicas; ++i) reps.push_back({Replica::Role::both});
  }
  for (auto& r : reps) r.free_blocks = total_blocks;
  const double kv_bytes_request_gpu = out.memory.kv_bytes_per_token;  // per token, per GPU
  // Swapping moves each GPU's shard of the blocks over its own PCIe x16 link at the
  // datasheet payload rate (no host-copy efficiency is measured).
  const double block_bytes = dbl(bs) * kv_bytes_request_gpu;
  const double pcie_bytes_per_s = std::max(1.0, s.system.gpu.pcie_bw_unidir_gbps * 1e9);

  // Prefix-cache state for traces: prefix ids already seen.
  std::vector<std::string> seen_prefixes;
  // Routing into a pool (colocated replicas, or the prefill / decode pool): round robin,
  // or the replica with the fewest outstanding requests (lowest index on ties).
  size_t rr_cursor[2] = {0, 0};
  auto route_rr = [&](bool to_decode) {
    std::vector<size_t> pool;
    for (size_t i = 0; i < reps.size(); ++i) {
      const auto role = reps[i].role;
      if (role == Replica::Role::both || (to_decode ? role == Replica::Role::decode : role == Replica::Role::prefill))
        pool.push_back(i);
    }
    if (p.router == InferencePlan::Router::least_outstanding) {
      size_t best = pool.front();
      for (size_t i : pool)
        if (reps[i].outstanding() < reps[best].outstanding()) best = i;
      return best;
    }
    return pool[rr_cursor[to_decode ? 1 : 0]++ % pool.size()];
  };

  // Arrivals in time order; a closed loop releases the next request on each completion.
  size_t next_arrival = 0;
  size_t issued = closed ? std::min<size_t>(out.requests.size(), static_cast<size_t>(std::max<int64_t>(1, w.concurrency)))
                         : out.requests.size();
  if (closed)
    for (size_t k = 0; k < issued; ++k) out.requests[k].arrival = 0.0;
  struct Transfer {
    double at;
    Seq seq;
  };
  std::vector<Transfer> transfers;  // KV caches in flight to the decode pool
  double t = 0;
  size_t done = 0;
  const size_t total = out.requests.size();

  auto plan = [&](Replica& R) -> IterationBatch {
    IterationBatch batch;
    R.decoding.clear();
    R.prefilling.clear();
    R.chunk_of.clear();
    R.tokens_of.clear();
    R.steps = 1;
    int64_t budget = out.engine.max_num_batched_tokens;
    const bool chunked = out.engine.chunked_prefill;
    const bool can_decode = R.role != Replica::Role::prefill;
    const bool can_prefill = R.role != Replica::Role::decode;
    bool prefill_only = false;
    if (!chunked && can_prefill && !R.waiting.empty()) {
      // vLLM V0 without chunked prefill: a prefill iteration when whole prompts fit.
      int64_t seqs = static_cast<int64_t>(R.running.size());
      int64_t need_tokens = 0, need_blocks = 0;
      for (const Seq& q : R.waiting) {
        const int64_t b = ceil_div(q.prompt + 1, bs);
        if (seqs + 1 > out.engine.max_num_seqs || need_tokens + q.prompt > budget || need_blocks + b > R.free_blocks) break;
        ++seqs;
        need_tokens += q.prompt;
        need_blocks += b;
      }
      prefill_only = need_tokens > 0;
    }
    // Swapped sequences come back first, oldest first, when their blocks fit again.
    while (!R.swapped.empty() && R.swapped.front().blocks <= R.free_blocks &&
           static_cast<int64_t>(R.running.size()) < out.engine.max_num_seqs) {
      Seq q = R.swapped.front();
      R.swapped.pop_front();
      R.free_blocks -= q.blocks;
      R.swapped_bytes -= dbl(q.blocks) * block_bytes;
      R.swap_s += dbl(q.blocks) * block_bytes / pcie_bytes_per_s;
      R.running.push_back(q);
    }
    // Multi-step scheduling (vLLM --num-scheduler-steps): with no prompt work to schedule,
    // the decodes run several forward passes per scheduling round, with blocks reserved
    // for every token they will make.
    const int64_t group = out.engine.scheduler_steps;
    bool multi = group > 1 && spec.k == 0 && !prefill_only && can_decode && (!chunked || !can_prefill || R.waiting.empty());
    for (const Seq& q : R.running) multi = multi && q.prefilled >= q.prompt;
    if (multi) R.steps = group;
    if (!prefill_only && can_decode) {
      // Decodes first; a sequence that needs a new block and finds none preempts the most
      // recently admitted one: swapped to host memory when the engine swaps and the swap
      // space holds it, else recomputed (its tokens rejoin the prompt, back to the queue).
      for (size_t k = 0; k < R.running.size(); ++k) {
        Seq& q = R.running[k];
        if (q.prefilled < q.prompt) continue;
        const int64_t ctx = q.prompt + q.generated;
        const int64_t make = std::min(R.steps, q.target - q.generated);
        while (ceil_div(ctx + make, bs) > q.blocks) {
          if (R.free_blocks > 0) {
            --R.free_blocks;
            ++q.blocks;
            continue;
          }
          Seq victim = R.running.back();
          R.running.pop_back();
          R.free_blocks += victim.blocks;
          out.requests[victim.req].preemptions += 1;
          ++out.preemptions;
          const double victim_bytes = dbl(victim.blocks) * block_bytes;
          if (out.engine.swap_preemption && R.swapped_bytes + victim_bytes <= out.engine.swap_space_bytes) {
            R.swapped_bytes += victim_bytes;
            R.swap_s += victim_bytes / pcie_bytes_per_s;
            R.swapped.push_back(victim);
            if (k >= R.running.size()) break;
            continue;
          }
          victim.blocks = 0;
          victim.prefilled = 0;
          victim.prompt += victim.generated;
          victim.target -= victim.generated;
          victim.generated = 0;
          // A decode-only replica cannot prefill it again: it rejoins the prefill pool.
          (R.role == Replica::Role::decode ? reps[route_rr(false)] : R).waiting.push_front(victim);
          if (k >= R.running.size()) break;
        }
        if (k >= R.running.size()) break;
        if (budget <= 0) break;
        R.decoding.push_back(k);
        R.tokens_of.push_back(make);
        batch.decodes += 1;
        batch.decode_context += dbl(ctx);
        budget -= 1;
      }
    }
    // A multi-step round runs decodes only: a sequence its block reservation preempts waits
    // for the round to end.
    if (!prefill_only && chunked && can_prefill && R.steps == 1)
      for (size_t k = 0; k < R.running.size() && budget > 0; ++k) {
        Seq& q = R.running[k];
        if (q.prefilled >= q.prompt) continue;
        const int64_t c = std::min(q.prompt - q.prefilled, budget);
        const int64_t need = ceil_div(q.prefilled + c + (q.prefilled + c == q.prompt ? 1 : 0), bs) - q.blocks;
        if (need > R.free_blocks) continue;
        R.free_blocks -= std::max<int64_t>(0, need);
        q.blocks += std::max<int64_t>(0, need);
        R.prefilling.push_back(k);
        R.chunk_of.push_back(c);
        batch.prefills.push_back({c, q.prefilled, q.prefilled + c == q.prompt});
        budget -= c;
      }
    if ((chunked || prefill_only) && can_prefill && R.steps == 1) {
      // New prompts wait while swapped sequences do (vLLM V0 schedules swapped-in first).
      while (R.swapped.empty() && !R.waiting.empty() && budget > 0 &&
             static_cast<int64_t>(R.running.size()) < out.engine.max_num_seqs) {
        Seq q = R.waiting.front();
        if (q.prefilled == 0 && w.prefix_hit_rate > 0 && out.requests[q.req].preemptions == 0)
          q.prefilled = std::min(q.prompt - 1, static_cast<int64_t>(std::floor(w.prefix_hit_rate * dbl(q.prompt) / dbl(bs))) * bs);
        const int64_t c = chunked ? std::min(q.prompt - q.prefilled, budget) : q.prompt - q.prefilled;
        if (!chunked && c > budget) break;
        const bool ends = q.prefilled + c == q.prompt;
        const int64_t need = ceil_div(q.prefilled + c + (ends ? 1 : 0), bs);
        if (need > R.free_blocks) break;
        R.waiting.pop_front();
        R.free_blocks -= need;
        q.blocks = need;
        batch.prefills.push_back({c, q.prefilled, ends});
        R.running.push_back(q);
        R.prefilling.push_back(R.running.size() - 1);
        R.chunk_of.push_back(c);
        budget -= c;
      }
    }
    return batch;
  };

  auto finish = [&](Replica& R, double now) {
    for (size_t j = 0; j < R.decoding.size(); ++j) {
      Seq& q = R.running[R.decoding[j]];
      RequestResult& r = out.requests[q.req];
      // Tokens this step: one, or the expected accepted drafts plus the bonus token,
      // emitted as whole tokens as their running sum allows (deterministic).
      int64_t emit = R.tokens_of[j];
      if (spec.k > 0) {
        q.accepted += per_verify;
        emit = std::max<int64_t>(1, static_cast<int64_t>(std::floor(q.accepted + 1e-9)));
        emit = std::min(emit, q.target - q.generated);
        q.accepted = std::max(0.0, q.accepted - dbl(emit));
      }
      // The tokens of one iteration stream as one chunk: one inter-token gap, as benchmark
      // clients (vLLM benchmark_serving, sglang.bench_serving) record it per chunk.
      r.itl.push_back(now - q.last_token);
      q.generated += emit;
      q.last_token = now;
    }
    for (size_t j = 0; j < R.prefilling.size(); ++j) {
      Seq& q = R.running[R.prefilling[j]];
      q.prefilled += R.chunk_of[j];
      if (q.prefilled == q.prompt && q.generated == 0) {
        q.generated = 1;
        RequestResult& r = out.requests[q.req];
        if (r.first_token == 0) r.first_token = now;
        else r.itl.push_back(now - q.last_token);  // resumed after a preemption
        q.last_token = now;
      }
    }
    // Retire finished sequences; hand finished prefills to the decode pool.
    for (size_t k = 0; k < R.running.size();) {
      Seq& q = R.running[k];
      const bool complete = q.prefilled == q.prompt && q.generated >= q.target;
      const bool handoff = !complete && R.role == Replica::Role::prefill && q.prefilled == q.prompt;
      if (complete || handoff) {
        R.free_blocks += q.blocks;
        if (complete) {
          out.requests[q.req].finish = now;
          ++done;
          if (closed && issued < total) {
            out.requests[issued].arrival = now;
            ++issued;
          }
        } else {
          // The prompt's KV moves to a decode replica, each GPU sending its shard.
          const double bytes = dbl(q.prompt) * kv_bytes_request_gpu;
          Seq moved = q;
          moved.blocks = 0;
          transfers.push_back({now + cost.p2p(Bytes(bytes), p.kv_transfer_over_network).value, moved});
        }
        R.running.erase(R.running.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      ++k;
    }
  };

  while (done < total) {
    // Deliver what is due at time t.
    while (next_arrival < issued && out.requests[next_arrival].arrival + out.engine.request_overhead_s <= t) {
      const RequestResult& r = out.requests[next_arrival];
      Seq q;
      q.req = next_arrival;
      q.prompt = r.input;
      q.target = r.output;
      if (w.mode == ServingWorkload::Mode::trace) {
        const TraceRequest& tr = w.trace[next_arrival];
        if (!tr.prefix_id.empty()) {
          if (std::find(seen_prefixes.begin(), seen_prefixes.end(), tr.prefix_id) != seen_prefixes.end())
            q.prefilled = std::min(q.prompt - 1, (std::min(tr.prefix_tokens, q.prompt) / bs) * bs);
          else
            seen_prefixes.push_back(tr.prefix_id);
        }
      }
      reps[route_rr(false)].waiting.push_back(q);
      ++next_arrival;
    }
    for (size_t k = 0; k < transfers.size();) {
      if (transfers[k].at <= t) {
        Seq q = transfers[k].seq;
        Replica& R = reps[route_rr(true)];
        const int64_t need = ceil_div(q.prompt + q.generated + 1, bs);
        if (need <= R.free_blocks) {
          R.free_blocks -= need;
          q.blocks = need;
          R.running.push_back(q);
          transfers.erase(transfers.begin() + static_cast<std::ptrdiff_t>(k));
          continue;
        }
        transfers[k].at = t;  // waits for blocks on the decode side
      }
      ++k;
    }
    // Start an iteration on every idle replica that has work.
    bool started = false;
    for (auto& R : reps) {
      if (R.busy) continue;
      if (R.running.empty() && R.waiting.empty() && R.swapped.empty()) continue;
      IterationBatch batch = plan(R);
      if (batch.decodes == 0 && batch.prefills.empty()) continue;
      // The step waits for the blocks it swaps out and in.
      double dt = R.swap_s;
      R.swap_s = 0;
      if (spec.k > 0 && batch.decodes > 0) {
        // Drafting proposes k tokens per decoding sequence, then the target verifies k + 1.
        IterationBatch proposal;
        proposal.decodes = batch.decodes;
        proposal.decode_context = batch.decode_context;
        const double one = draft ? draft->seconds(proposal) : spec.draft_cost_fraction * model.seconds(proposal);
        dt += dbl(spec.k) * one;
        batch.verify = spec.k + 1;
      }
      int64_t passes = 1;
      if (R.steps > 1) {
        passes = 0;
        // Each pass of a multi-step round runs the sequences that still have tokens to make,
        // their contexts one token longer than in the pass before.
        for (int64_t step = 0; step < R.steps; ++step) {
          IterationBatch pass;
          for (size_t j = 0; j < R.decoding.size(); ++j) {
            if (R.tokens_of[j] <= step) continue;
            const Seq& q = R.running[R.decoding[j]];
            pass.decodes += 1;
            pass.decode_context += dbl(q.prompt + q.generated + step);
          }
          if (pass.decodes == 0) break;
          // The round is scheduled once: the per-step host overhead is paid once.
          dt += passes > 0 ? model.gpu_seconds(pass) : model.seconds(pass);
          ++passes;
        }
      } else {
        dt += model.seconds(batch);
      }
      R.busy = true;
      R.busy_until = t + dt;
      if (record_timeline) {
        int64_t pre = 0;
        for (const auto& pf : batch.prefills) pre += pf.tokens;
        // Tokens the decodes make: each sequence's share of a multi-step round, or the
        // expected accepted drafts plus the bonus token per verification.
        int64_t made = batch.decodes;
        if (R.steps > 1) {
          made = 0;
          for (int64_t k : R.tokens_of) made += k;
        }
        if (spec.k > 0) made = std::llround(dbl(batch.decodes) * per_verify);
        IterationRecord rec;
        rec.replica = static_cast<int32_t>(&R - reps.data());
        rec.start = t;
        rec.end = t + dt;
        rec.decodes = batch.decodes;
        rec.decode_tokens = made;
        rec.prefill_tokens = pre;
        rec.passes = static_cast<int32_t>(passes);
        rec.kv_utilization = 1.0 - dbl(R.free_blocks) / dbl(total_blocks);
        out.timeline.push_back(rec);
      }
      out.iterations += passes;
      out.peak_kv_utilization = std::max(out.peak_kv_utilization, 1.0 - dbl(R.free_blocks) / dbl(total_blocks));
      started = true;
    }
    // Advance to the next event.
    double next = std::numeric_limits<double>::infinity();
    for (const auto& R : reps)
      if (R.busy) next = std::min(next, R.busy_until);
    if (next_arrival < issued) next = std::min(next, out.requests[next_arrival].arrival + out.engine.request_overhead_s);
    for (const auto& tr : transfers)
      if (tr.at > t) next = std::min(next, tr.at);
    if (!std::isfinite(next)) {
      if (!started)
        throw ServingDoesNotFit("a request cannot be scheduled: it needs more KV-cache blocks than a replica has (" +
                                std::to_string(total_blocks) + " blocks of " + std::to_string(bs) + " tokens)");
      continue;
    }
    t = std::max(t, next);
    for (auto& R : reps)
      if (R.busy && R.busy_until <= t) {
        R.busy = false;
        finish(R, t);
      }
  }
  double first = 1e300, last = 0;
  for (const auto& r : out.requests) {
    first = std::min(first, r.arrival);
    last = std::max(last, r.finish);
  }
  out.duration_s = n > 0 ? last - first : 0.0;
  return out;
}

double output_tokens_per_s(const ServingResult& r) {
  double tokens = 0;
  for (const auto& q : r.requests) tokens += static_cast<double>(q.output);
  return r.duration_s > 0 ? tokens / r.duration_s : 0.0;
}

}  // namespace

ServingResult simulate_serving(const Scenario& s, const CostModel& cost, uint64_t seed, bool record_timeline) {
  if (!s.inference) throw std::logic_error("simulate_serving needs an inference plan");
  if (!s.inference->engine.max_num_seqs_auto || s.inference->engine.max_num_seqs)
    return simulate_once(s, cost, seed, record_timeline);
  // max_num_seqs "auto": the fastest setting, from vLLM's default (256) doubling while the
  // output throughput still rises by more than 0.1% (the KV cache or the step time caps it).
  Scenario probe = s;
  ServingResult best;
  double best_rate = -1;
  for (int64_t seqs = 256; seqs <= 16384; seqs *= 2) {
    probe.inference->engine.max_num_seqs = seqs;
    ServingResult r;
    try {
      r = simulate_once(probe, cost, seed, record_timeline);
    } catch (const std::runtime_error&) {
      // A larger cap reserves more activation memory; once it leaves a prompt no KV room,
      // the last cap that ran is the fastest.
      if (best_rate < 0) throw;
      break;
    }
    const double rate = output_tokens_per_s(r);
    if (best_rate >= 0 && rate <= best_rate * 1.001) break;
    best = std::move(r);
    best_rate = rate;
  }
  return best;
}

}  // namespace capsim
