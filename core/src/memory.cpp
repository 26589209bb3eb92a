#include "capsim/core/memory.hpp"

#include <algorithm>
#include <cmath>

#include "capsim/core/layout.hpp"
#include "capsim/core/serving.hpp"
#include "eval_cache_impl.hpp"

namespace capsim {

double optimizer_bytes_per_param(Optimizer o, bool bf16_moments) {
  // An fp32 master copy (4 B) and the moments: two for Adam, one for SGD with momentum
  // and Lion, at 4 B each or 2 B in BF16; 8-bit Adam and Adafactor keep their own formats.
  const double moment = bf16_moments ? 2.0 : 4.0;
  switch (o) {
    case Optimizer::adamw: return 4.0 + 2.0 * moment;
    case Optimizer::sgd: return 4.0 + moment;
    case Optimizer::lion: return 4.0 + moment;
    case Optimizer::adam8bit: return 6.0;
    case Optimizer::adafactor: return 4.0;
  }
  return 12.0;
}

namespace {

double dbl(int64_t v) { return static_cast<double>(v); }

/// Megatron-LM DistributedDataParallelConfig: gradient buckets of max(40M, 1M*dp) elements.
double grad_bucket_elements(int64_t dp) { return std::max(40e6, 1e6 * dbl(dp)); }

}  // namespace

double lora_layer_params(const ModelSpec& m, const LoraSpec& l, bool moe_kind, bool experts) {
  // A model without experts has no routed-expert layers, whatever kind is asked for (its
  // expert sizes must not be read).
  const bool moe = moe_kind && m.moe.has_value();
  const int64_t h = m.hidden;
  const int64_t q = m.q_width();
  const int64_t kv = m.mla ? 0 : m.kv_heads * m.head_dim;
  const int64_t o_in = m.mla ? m.heads * m.mla->v_head_dim : q;
  const int64_t inner = moe ? m.moe->expert_intermediate : m.intermediate;
  const double copies = moe ? dbl(m.moe->num_experts) : 1.0;
  const int64_t r = l.rank.value_or(0);
  double p = 0;
  if (!l.targets) return p;
  for (const auto& t : *l.targets) {
    const bool mlp = t == "gate_proj" || t == "up_proj" || t == "down_proj";
    if (experts != (mlp && moe)) continue;
    if (t == "q_proj") p += dbl(r * (h + q));
    else if (t == "k_proj" || t == "v_proj") p += dbl(r * (h + kv));
    else if (t == "o_proj") p += dbl(r * (o_in + h));
    else if (mlp) p += copies * dbl(r * (h + inner));
  }
  return p;
}

FrozenParams frozen_model_params(const ModelSpec& m) {
  FrozenParams f;
  for (int64_t i = 0; i < m.layers; ++i) {
    const LayerParams lp = layer_params(m, i);
    f.dense += dbl(lp.attention + lp.norms + lp.dense_mlp + lp.router + lp.shared_experts);
    f.expert += dbl(lp.routed_experts);
  }
  f.dense += dbl(input_embedding_params(m) + output_head_params(m) + final_norm_params(m));
  return f;
}

std::vector<std::vector<int64_t>> stage_layer_ids(const ModelSpec& m, const TrainingPlan& t) {
  if (t.schedule == Schedule::dualpipe) {
    // DualPipe (DeepSeek-V3 report, Sec. 3.2.1): rank r holds stage r of one direction and
    // stage pp-1-r of the other, the model's layers split into pp stages.
    const std::vector<int64_t> counts = t.stage_layers.empty() ? split_layers(m.layers, t.pp, m.mtp_layers) : t.stage_layers;
    std::vector<std::vector<int64_t>> stage(static_cast<size_t>(t.pp));
    int64_t next = 0;
    for (int64_t s = 0; s < t.pp; ++s)
      for (int64_t k = 0; k < counts[static_cast<size_t>(s)]; ++k) stage[static_cast<size_t>(s)].push_back(next++);
    std::vector<std::vector<int64_t>> ranks(static_cast<size_t>(t.pp));
    for (int64_t r = 0; r < t.pp; ++r) {
      ranks[static_cast<size_t>(r)] = stage[static_cast<size_t>(r)];
      const auto& other = stage[static_cast<size_t>(t.pp - 1 - r)];
      ranks[static_cast<size_t>(r)].insert(ranks[static_cast<size_t>(r)].end(), other.begin(), other.end());
    }
    return ranks;
  }
  const int64_t vpp = t.vpp.value_or(1);
  const int64_t stages = t.pp * vpp;
  const std::vector<int64_t> counts = t.stage_layers.empty() ? split_layers(m.layers, stages, m.mtp_layers) : t.stage_layers;
  std::vector<std::vector<int64_t>> ranks(static_cast<size_t>(t.pp));
  int64_t next = 0;
  for (int64_t j = 0; j < stages; ++j) {
    const int64_t rank = j % t.pp;
    for (int64_t k = 0; k < counts[static_cast<size_t>(j)]; ++k) ranks[static_cast<size_t>(rank)].push_back(next++);
  }
  return ranks;
}

TrainingMemory training_memory(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t, EvalCache* cache) {
  TrainingMemory out;
  training_memory(m, sys, t, out, cache);
  return out;
}

void training_memory(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t, TrainingMemory& out,
                     EvalCache* cache) {
  out.stages.clear();
  out.peak_stage = 0;
  const int64_t vpp = t.vpp.value_or(1);
  const int64_t etp = t.etp.value_or(1);
  const int zero = t.zero.value_or(0);
  const Recompute rc = t.recompute.value_or(Recompute::none);
  const int64_t mb = t.micro_batch.value_or(1);
  const int64_t microbatches = num_microbatches(t);
  const double tp = dbl(t.tp);
  const double dense_group = dbl(t.dp * t.cp);
  const double expert_group = dbl(t.dp * t.cp * t.tp) / dbl(t.ep * etp);
  const double w_bytes = 2.0;  // 16-bit weights; FP8 parameters: the FP8 data and its cached transpose
  // Gradients: fp16 training keeps fp16 gradients (the ZeRO paper's 2 bytes); bf16 and fp8
  // training accumulate fp32 main gradients (Megatron-LM's main_grad buffer, PyTorch FSDP
  // mixed precision with an fp32 reduce dtype) unless grad_reduce_dtype says 16-bit.
  const double g_bytes = grad_bytes(t);
  // ZeRO-3 keeps (2 + 2 + K) bytes per parameter over the data-parallel group (Rajbhandari
  // et al. 2020, Sec. 5.3): 16-bit parameter and gradient shards beside the optimizer's K.
  // PyTorch FSDP2's fp32 shards with fp32 gradients and Adam's two moments come to the same
  // 16 bytes.
  const double shard_g_bytes = zero >= 3 ? 2.0 : g_bytes;
  const double k_bytes = t.memory.offload_optimizer ? 0.0 : optimizer_bytes_per_param(t.optimizer, t.bf16_moments);
  const bool lora = trains_adapters(t.mode);
  const LoraSpec lora_spec = lora ? resolved_lora(t) : LoraSpec{};

  const LoweringOptions lo = lowering_options(m, t);
  ShardContext sc;
  sc.micro_batch = mb;
  sc.seq_len = t.seq_len;
  sc.tp = t.tp;
  sc.cp = t.cp;
  sc.etp = etp;
  sc.sp = t.sp;
  sc.recompute = rc;
  const Framework fw = framework_of(t);
  sc.op_sac = fw == Framework::pytorch;
  sc.recompute_modules = t.recompute_modules;
  ShardContext sc_full = sc;
  sc_full.recompute = Recompute::none;
  const double tokens = dbl(mb) * dbl(t.seq_len) / dbl(t.cp);

  // Layers come in at most two kinds (dense, MoE); lower and measure each kind once (once
  // per cache for layouts that share these fields).
  MemVal local;
  MemVal* mv = &local;
  if (cache) {
    const MemKey key{&m, t.tp, t.cp, etp, mb, t.seq_len, attention_span(t), t.sp, static_cast<int>(rc),
                     rc == Recompute::full ? t.recompute_fraction : 1.0, t.recompute_modules, static_cast<int>(t.precision),
                     static_cast<int>(attention_of(t)), static_cast<int>(fw), t.fp8_blockwise.value_or(false),
                     lo.frozen_base ? std::max<int64_t>(1, lo.lora_rank) : 0, lo.lora_targets, lo.lora_dropout,
                     lo.base_keeps_inputs, lo.compiled_loss};
    auto& entries = cache->impl().memory;
    auto [it, inserted] = entries.try_emplace(key);
    mv = &it->second;
    if (inserted) mv->embedding = -1;
  } else {
    mv->embedding = -1;
  }
  const LayerKinds lk = layer_kinds(m);
  struct KindCost {
    double act, act_full;
  };
  auto kind_cost = [&](int k) -> KindCost {
    if (!mv->have[k]) {
      const auto ops = lower_layer(m, lk.first[k], lo);
      mv->act[k] = layer_activation_bytes(ops, lo, m, sc);
      mv->act_full[k] = layer_activation_bytes(ops, lo, m, sc_full);
      mv->have[k] = true;
    }
    return {mv->act[k], mv->act_full[k]};
  };
  if (mv->embedding < 0) {
    ShardContext e = sc;
    e.recompute = Recompute::none;  // neither the embedding nor the head is checkpointed
    mv->embedding = layer_activation_bytes(lower_embedding(m, lo), lo, m, e);
    mv->head = layer_activation_bytes(lower_head(m, lo), lo, m, e);
    // A multi-token prediction module follows the recompute policy of the layers; its pass
    // through the shared head is not checkpointed.
    mv->mtp = m.mtp_layers > 0 ? layer_activation_bytes(lower_mtp(m, lo), lo, m, sc) + mv->head : 0.0;
  }

  std::vector<RankKinds> scratch;
  const std::vector<RankKinds>& ranks = rank_kinds(m, t, cache, scratch);
  out.stages.reserve(static_cast<size_t>(t.pp));
  for (int64_t r = 0; r < t.pp; ++r) {
    StageMemory s;
    s.stage = r;
    const RankKinds& rk = ranks[static_cast<size_t>(r)];
    s.layers = rk.layers();
    double dense = 0, expert = 0, trainable_dense = 0, trainable_expert = 0;
    double linear = 0;  // linear-layer weights of the transformer layers (a quantized base's part)
    double act_total = 0, working = 0, max_layer_local = 0;
    double act_own = 0;  // DualPipe: the own-direction chunk's part of act_total
    // Every layer of a kind is alike, so each kind counts once times its number of layers.
    for (int k = 0; k < 2; ++k) {
      if (rk.n[k] == 0) continue;
      const double n = dbl(rk.n[k]);
      const LayerParams& lp = lk.params[k];
      const double layer_dense =
          dbl(lp.attention) / tp + dbl(lp.norms) + dbl(lp.dense_mlp) / tp + dbl(lp.router) + dbl(lp.shared_experts) / tp;
      const double layer_expert = dbl(lp.routed_experts) / dbl(t.ep * etp);
      linear += n * (dbl(lp.attention) / tp + dbl(lp.dense_mlp) / tp + dbl(lp.shared_experts) / tp + layer_expert);
      dense += n * layer_dense;
      expert += n * layer_expert;
      max_layer_local = std::max(max_layer_local, layer_dense + layer_expert);
      if (lora) {
        trainable_dense += n * lora_layer_params(m, lora_spec, k == 1, false) / tp;
        trainable_expert += n * lora_layer_params(m, lora_spec, k == 1, true) / dbl(t.ep * etp);
      }
      const KindCost kc = kind_cost(k);
      const double per_layer =
          rc == Recompute::full ? t.recompute_fraction * kc.act + (1.0 - t.recompute_fraction) * kc.act_full : kc.act;
      act_total += n * per_layer;
      act_own += dbl(rk.n_own[k]) * per_layer;
      if (rc != Recompute::none) working = std::max(working, kc.act_full);
    }
    const double layers_dense = dense;  // what follows is the stage's embedding, final norm and head
    const bool dual = t.schedule == Schedule::dualpipe;
    const bool first = r == 0 || (dual && r == t.pp - 1), last = r == t.pp - 1 || (dual && r == 0);
    if (first) {
      dense += input_embedding_params_per_rank(m, tp);
      act_total += mv->embedding;
      if (r == 0) act_own += mv->embedding;
    }
    if (last) {
      dense += dbl(final_norm_params(m));
      // Untied head; a tied head on a separate last stage keeps its own copy (Megatron-LM).
      if (!m.tied_embeddings || t.pp > 1) dense += dbl(m.vocab * m.hidden) / tp;
      act_total += mv->head;
      if (r == t.pp - 1) act_own += mv->head;
      if (m.mtp_layers > 0) {
        // Multi-token prediction modules on the last stage (Megatron-LM places them there):
        // each a transformer block like the last layer plus eh_proj and norms, and its own
        // copy of the embedding when the first stage is another rank (Megatron-Core
        // GPTModel builds the embedding where pre_process or mtp_process holds; DualPipe's
        // end ranks hold both ends already).
        const double n = dbl(m.mtp_layers);
        const LayerParams lp = layer_params(m, m.layers - 1);
        const double block_dense =
            dbl(lp.attention) / tp + dbl(lp.norms) + dbl(lp.dense_mlp) / tp + dbl(lp.router) + dbl(lp.shared_experts) / tp;
        const double block_expert = dbl(lp.routed_experts) / dbl(t.ep * etp);
        const double eh_proj = 2.0 * dbl(m.hidden) * dbl(m.hidden) / tp;
        dense += n * (block_dense + eh_proj + dbl(mtp_extra_params(m) - 2 * m.hidden * m.hidden));
        expert += n * block_expert;
        linear += n * (dbl(lp.attention) / tp + dbl(lp.dense_mlp) / tp + dbl(lp.shared_experts) / tp + block_expert + eh_proj);
        max_layer_local = std::max(max_layer_local, block_dense + block_expert);
        if (t.pp > 1 && !first) dense += dbl(m.vocab * m.hidden) / tp;
        act_total += n * mv->mtp;
        if (r == t.pp - 1) act_own += n * mv->mtp;
      }
      // Beyond the fp32 softmax the loss keeps (head activations), its backward holds:
      // Megatron-LM's fused vocab-parallel cross entropy turns that buffer into the
      // gradient in place and adds its 16-bit copy; PyTorch's F.cross_entropy on fp32
      // logits holds the log-softmax output's gradient and the input gradient, both fp32.
      // Under tensor parallelism the PyTorch stack computes it as loss parallel over the
      // vocabulary shards (torchtitan 9dec370: loss_parallel_enabled = tp > 1 unless
      // disabled), whose fused nll/log-softmax backward (torch/distributed/tensor/parallel/
      // loss.py, _nll_loss_and_log_softmax_backward: zeros_like(x), exp(x), their sum,
      // times grad_output) holds three fp32 shard-sized buffers beside the kept one.
      // Compiled (LoweringOptions::compiled_loss), the backward holds the measured buffers.
      const double pytorch_loss = lo.compiled_loss ? kCompiledLossBwdBufferBytes : t.tp > 1 ? 12.0 : 8.0;
      s.logits_bytes = tokens * dbl(m.vocab) / tp * (fw == Framework::pytorch ? pytorch_loss : lo.act_bytes);
    }
    if (!lora) {
      trainable_dense = dense;
      trainable_expert = expert;
    }
    s.params = dense + expert;
    const double zw = zero >= 3 ? 1.0 : 0.0, zg = zero >= 2 ? 1.0 : 0.0, zo = zero >= 1 ? 1.0 : 0.0;
    auto shard = [](double p, double group, double on) { return on > 0 ? p / group : p; };
    if (lora) {
      s.params += trainable_dense + trainable_expert;
      // The frozen base: its linear weights at the base's storage, the rest 16-bit.
      s.weights_bytes = linear * lora_spec.base_bytes_per_param + (dense + expert - linear) * w_bytes +
                        (trainable_dense + trainable_expert) * w_bytes;
    } else {
      s.weights_bytes = shard(dense, dense_group, zw) * w_bytes + shard(expert, expert_group, zw) * w_bytes;
      // Transformer Engine keeps each 16-bit GEMM weight's FP8 copy and its transpose (1 B
      // each) over the step's microbatches (te.pytorch.Linear, is_first_microbatch: "caching
      // of the FP8 versions of the weights"). FP8 parameters are those copies, data and
      // transpose in the 2 bytes above (fp8_params()).
      if (t.precision == DType::fp8 && fw == Framework::megatron && !t.fp8_blockwise.value_or(false) && !fp8_params(t))
        s.weights_bytes += linear * 2.0;
    }
    if (t.memory.reference_weights)
      s.reference_weights_bytes = shard(dense, dense_group, zw) * w_bytes + shard(expert, expert_group, zw) * w_bytes;
    if (t.memory.frozen_dense_params > 0 || t.memory.frozen_expert_params > 0)
      s.frozen_weights_bytes = shard(t.memory.frozen_dense_params / (tp * dbl(t.pp)), dense_group, zw) * w_bytes +
                               shard(t.memory.frozen_expert_params / dbl(t.ep * etp * t.pp), expert_group, zw) * w_bytes;
    s.gradients_bytes = shard(trainable_dense, dense_group, zg) * shard_g_bytes +
                        shard(trainable_expert, expert_group, zg) * shard_g_bytes;
    s.optimizer_bytes =
        shard(trainable_dense, dense_group, zo) * k_bytes + shard(trainable_expert, expert_group, zo) * k_bytes;
    if (zero >= 3 && t.pp > 1 && !lora) {
      // ZeRO-3 under pipeline parallelism keeps the stage's parameters gathered across
      // microbatches and accumulates unsharded gradients until the last backward:
      // torch.distributed.pipelining with FSDP2 turns resharding after forward and
      // per-microbatch gradient reduction off. FSDP2 accumulates them in its reduce dtype
      // (FSDPParam.to_accumulated_grad_if_needed), fp32 under the mixed precision PyTorch
      // stacks use for bf16 and fp8; otherwise in the parameter dtype.
      const double accumulated = fw == Framework::pytorch ? g_bytes : w_bytes;
      s.weights_bytes += (dense + expert) * w_bytes;
      s.gradients_bytes += (dense + expert) * accumulated;
    }

    // Activations: chunks in flight times the average chunk's kept bytes.
    // GPipe runs every forward before any backward: all microbatches are in flight.
    // DualPipe holds pp + 1 microbatches of one chunk (DeepSeek-V3 report, Table 2).
    // Megatron-Core's batch-level expert-parallel overlap warms up one chunk further and
    // builds a forward while the backward it is paired with releases an older one.
    s.inflight_microbatches = t.schedule == Schedule::gpipe      ? microbatches
                              : t.schedule == Schedule::dualpipe ? std::min(t.pp + 1, microbatches)
                              : ep_overlap_on(t) ? std::min(ep_overlap_warmup(t.pp, vpp, r, microbatches) + 1, microbatches * vpp)
                                                 : inflight_chunks(t.pp, vpp, r, microbatches);
    if (t.schedule == Schedule::dualpipe) {
      // DualPipe's PP + 1 (DeepSeek-V3 report, Table 2) split by direction: like 1F1B, the
      // chunk of stage r of its own direction holds pp - r microbatches and the reverse
      // direction's stage pp-1-r holds r + 1, half of the microbatches flowing each way.
      const int64_t half = std::max<int64_t>(1, microbatches / 2);
      s.activations_bytes = act_own * dbl(std::min(t.pp - r, half)) + (act_total - act_own) * dbl(std::min(r + 1, half));
    } else {
      s.activations_bytes = act_total / dbl(vpp) * dbl(s.inflight_microbatches);
    }
    s.recompute_working_bytes = working;

    // Communication buffers.
    if (zero >= 3 && !lora) {
      // ZeRO-3/FSDP: the current and the prefetched layer gathered in full, plus one
      // layer's gradients before reduce-scatter.
      s.comm_buffer_bytes = max_layer_local * (2.0 * w_bytes + g_bytes);
      // FSDP2 never reshards its root unit after forward ("the parameters would be freed
      // and all-gathered immediately", FSDPState._lazy_init in torch/distributed/
      // _composable/fsdp/_fsdp_state.py), and the PyTorch stacks wrap each transformer
      // block, leaving the embedding, final norm and head to the root (torchtitan 9dec370,
      // parallelize_llama.py apply_fsdp): those stay gathered in 16 bits from the first
      // forward to the end of the backward, through the loss's peak. Under pipeline
      // parallelism the whole stage is gathered already (above).
      if (fw == Framework::pytorch && t.pp == 1) s.comm_buffer_bytes += (dense - layers_dense) * w_bytes;
    } else if (zero == 2) {
      s.comm_buffer_bytes = 2.0 * grad_bucket_elements(t.dp) * g_bytes;
    }
    s.cuda_context_bytes = t.memory.cuda_context_bytes;
    const double frozen = s.reference_weights_bytes + s.frozen_weights_bytes;
    const double allocated = s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + s.activations_bytes + frozen +
                             s.logits_bytes + s.comm_buffer_bytes + s.recompute_working_bytes;
    s.allocator_reserve_bytes = allocated * t.memory.allocator_reserve_fraction;
    s.other_bytes = s.logits_bytes + s.comm_buffer_bytes + s.recompute_working_bytes + s.cuda_context_bytes +
                    s.allocator_reserve_bytes;
    s.total_bytes = s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + s.activations_bytes + frozen + s.other_bytes;
    s.capacity_bytes = sys.gpu.hbm_capacity_bytes;
    s.fits = s.total_bytes <= s.capacity_bytes;
    out.stages.push_back(s);
  }
  out.peak_stage = 0;
  for (size_t i = 1; i < out.stages.size(); ++i)
    if (out.stages[i].total_bytes > out.stages[out.peak_stage].total_bytes) out.peak_stage = i;
}

InferenceMemory inference_memory(const ModelSpec& m, const SystemSpec& sys, const InferencePlan& p,
                                 const EngineDefaults* defaults_in) {
  // Resolved here only when the caller has not (the serving loop passes its own), as the
  // serving loop resolves them, the scenario's own knobs on top.
  std::optional<EngineDefaults> resolved;
  if (!defaults_in) resolved = engine_defaults(p, m, sys.gpu, 0);
  const EngineDefaults& defaults = defaults_in ? *defaults_in : *resolved;
  InferenceMemory out;
  const double tp = dbl(p.tp), pp = dbl(p.pp);
  const int64_t ep = p.ep.value_or(1);
  // Attention DP: attention and dense layers whole on every GPU, each GPU with its own
  // sequences' KV cache; the replica's blocks are the GPUs' together.
  const int64_t adp = p.attention_dp_degree();
  const double attn_tp = adp > 1 ? 1.0 : tp;
  const double wb = dtype_bytes(p.weight_dtype);
  // Weights per GPU: layers split over pp, dense weights over tp; routed experts over ep
  // when expert parallelism is on, else tensor-parallel inside each expert (over tp).
  double dense = 0, expert = 0;
  for (int64_t i = 0; i < m.layers; ++i) {
    const LayerParams lp = layer_params(m, i);
    dense += dbl(lp.attention + lp.dense_mlp + lp.shared_experts) / attn_tp + dbl(lp.norms + lp.router);
    expert += dbl(lp.routed_experts) / (ep > 1 ? dbl(ep) : tp);
  }
  dense /= pp;
  expert /= pp;
  // The first stage holds the embedding (vocabulary rows over tp, positions replicated),
  // the last the final norm and head; the largest stage is what must fit.
  const double first = input_embedding_params_per_rank(m, tp);
  const double last = dbl(output_head_params(m)) / tp + dbl(final_norm_params(m));
  dense += p.pp == 1 ? first + last : std::max(first, last);
  out.weights_bytes = (dense + expert) * wb;

  // The step budget each GPU runs: the resolved budget (the scenario's, else the engine's)
  // is the attention-DP group's, a share for each rank where the engine divides it, the
  // whole of it on each rank (engine_defaults multiplied it by the ranks) where it does not.
  const int64_t max_tokens = (defaults.max_num_batched_tokens + adp - 1) / adp;
  const int64_t max_seqs = defaults.max_num_seqs;  // the scenario's, else the engine's (engine_defaults)
  const double ab = dtype_bytes(p.activation_dtype == DType::fp8 || p.activation_dtype == DType::int8
                                    ? DType::bf16
                                    : p.activation_dtype);
  // Profiling-pass peak: residual stream plus the widest intermediate of a layer for
  // max_num_batched_tokens tokens, and fp32 logits for max_num_seqs sequences; where the
  // profile gives the profiling run's measured logits cost (vLLM V1's dummy sampler over
  // max_num_seqs sequences and the whole vocabulary, gathered on every tensor-parallel
  // rank), the larger of the forward pass and that.
  const int64_t ffn = m.moe ? std::max(m.intermediate, m.moe->expert_intermediate * m.moe->top_k) : m.intermediate;
  const double widest = std::max(dbl(m.q_width() + 2 * m.kv_width()), dbl(ffn) * (m.gated_mlp ? 3.0 : 2.0)) / attn_tp;
  const double forward = dbl(max_tokens) * (4.0 * dbl(m.hidden) + widest) * ab;
  out.activation_peak_bytes =
      defaults.profile_logits_bytes_per_entry > 0
          ? std::max(forward, defaults.profile_activation_fixed_bytes +
                                  defaults.profile_logits_bytes_per_entry * dbl(max_seqs) * dbl(m.vocab))
          : forward + dbl(max_seqs) * dbl(m.vocab) / tp * 4.0;
  // Outside PyTorch's allocator: the profile's measured figure, a tensor-parallel rank's
  // where the model is split; profiles without one take the CUDA context with lazy module
  // loading (CUDA >= 11.7), about 300 MiB (pytorch/pytorch#107667).
  out.non_torch_bytes = p.tp > 1 ? defaults.non_torch_tp_bytes : defaults.non_torch_bytes;
  out.cudagraph_bytes = defaults.cudagraph_reserved_bytes;

  const DType kv = p.resolved_kv_dtype();
  double kv_per_token = kv_cache_bytes_per_token(m, kv) / pp;
  // KV heads split over tp; MLA's latent and GQA with fewer KV heads than tp are replicated.
  if (!m.mla) kv_per_token /= std::min(attn_tp, dbl(m.kv_heads));
  out.kv_bytes_per_token = kv_per_token;
  out.capacity_bytes = sys.gpu.hbm_capacity_bytes;
  out.block_size = p.engine.block_size.value_or(defaults.block_size);
  if (p.engine.kv_cache_tokens) {
    // A fixed pool: whole blocks of the tokens asked for, which must fit beside the rest.
    const int64_t blocks = std::max<int64_t>(1, *p.engine.kv_cache_tokens / out.block_size);
    out.fixed_pool = true;
    out.kv_budget_bytes = dbl(blocks) * dbl(out.block_size) * kv_per_token;
    out.num_blocks = blocks * adp;
    out.fits = out.weights_bytes + out.runtime_bytes() + out.kv_budget_bytes <= out.capacity_bytes;
  } else {
    const double util = defaults.gpu_memory_utilization;  // likewise resolved
    const double rest = out.weights_bytes + (defaults.activation_in_headroom ? 0.0 : out.activation_peak_bytes) +
                        out.non_torch_bytes + out.cudagraph_bytes;
    out.kv_budget_bytes = defaults.memory_fraction_of_free ? util * (out.capacity_bytes - rest)
                                                           : out.capacity_bytes * util - rest;
    out.num_blocks =
        out.kv_budget_bytes > 0
            ? static_cast<int64_t>(std::floor(out.kv_budget_bytes / (dbl(out.block_size) * kv_per_token))) * adp
            : 0;
    out.fits = out.num_blocks > 0;
  }
  out.max_cached_tokens = out.num_blocks * out.block_size;
  return out;
}

}  // namespace capsim
