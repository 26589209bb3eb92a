#include "capsim/core/workload.hpp"

#include <iterator>

namespace capsim {

namespace {

double d(int64_t v) { return static_cast<double>(v); }

/// A GEMM whose input (width k) is kept for the weight gradient unless `keep_input` is
/// false (the input is already kept by another operator).
Op gemm(std::string name, int64_t n, int64_t k, GemmSplit split, const LoweringOptions& o, bool keep_input,
        Shard input_shard, double per_token = 1.0, bool expert = false) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::gemm;
  op.n = n;
  op.k = k;
  op.per_token = per_token;
  op.split = split;
  op.expert = expert;
  op.frozen = o.frozen_base;
  op.flops_per_token = 2.0 * d(n) * d(k) * per_token;
  op.bytes_per_token = (d(k) + d(n)) * o.act_bytes * per_token;
  if (keep_input) op.saved.push_back({d(k) * o.gemm_input_bytes * per_token, input_shard, false});
  return op;
}

/// Bytes per element PyTorch eager code moves (LoweringOptions::eager_elementwise), 16-bit
/// in and out with fp32 intermediates. RMSNorm: .float() 2 + 4, pow 4 + 4, mean 4, x *
/// rsqrt 4 + 4, type_as 4 + 2, * weight 2 + 2 = 36 (a fused norm: 2 + 2). Rotary, per q/k
/// element: .float() 2 + 4, complex multiply 4 + 4, type_as 4 + 2 = 20 (fused: 2 + 2).
/// silu(gate) * up, per inner element: silu 2 + 2, product 2 + 2 + 2 = 10 (fused: 6).
constexpr double kEagerRmsNormBytes = 36.0, kEagerRotaryBytes = 20.0, kEagerGluBytes = 10.0;
/// Bytes per logit of PyTorch's eager fp32 cross entropy, forward and backward
/// (LoweringOptions::eager_loss).
constexpr double kEagerLossFwdBytes = 2.0 + 4.0 + 3.0 * 4.0 + 4.0, kEagerLossBwdBytes = 4.0 + 3.0 * 4.0 + 4.0 + 4.0 + 2.0;
/// The same loss compiled (LoweringOptions::compiled_loss). What it holds, per logit, as
/// apple/ml-cross-entropy's benchmark measured torch.compile's cross entropy (README @
/// 18e76ad, A100, PyTorch 2.4.1, 8,192 tokens x 256,000 logits): forward 4,000 MiB, the
/// 16-bit logits it keeps (2 bytes a logit); forward and backward 16,000 MiB (8 bytes), so
/// the backward adds 6, an fp32 gradient and its 16-bit cast (eager: 28,000 MiB, 14 bytes).
/// Traffic: the forward's two reductions over the 16-bit logits (row max, sum of
/// exponentials: 2 + 2); the backward reads them once more, writes the fp32 gradient and
/// casts it (2 + 4 + 4 + 2). The backward's buffers: kCompiledLossBwdBufferBytes.
constexpr double kCompiledLossKeptBytes = 2.0;
constexpr double kCompiledLossFwdBytes = 2.0 + 2.0, kCompiledLossBwdBytes = 2.0 + 4.0 + 4.0 + 2.0;
/// Bytes per logit of Megatron-Core's vocab-parallel cross entropy with its fused kernels
/// (megatron/core/fusions/fused_cross_entropy.py, the cross_entropy_loss_fusion path NeMo
/// and Megatron-Bridge recipes turn on). Forward: the fp32 copy and its row max (read 2,
/// write 4), exp(logits - max) in place (4 + 4), the row sum (4), the division by it in
/// place, which leaves the softmax kept for backward (4 + 4). Backward: the softmax scaled
/// in place by the loss gradient (4 + 4), then cast to the logits' 16-bit type for the
/// output layer (4 + 2). The unfused default (tensor_parallel/cross_entropy.py) reads the
/// fp32 copy once more for the max and subtracts in a pass of its own: 38 forward bytes.
constexpr double kMegatronLossFwdBytes = 2.0 + 4.0 + 8.0 + 4.0 + 8.0, kMegatronLossBwdBytes = 8.0 + 6.0;

Op norm(std::string name, int64_t width, const LoweringOptions& o, Shard shard = Shard::sequence) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::norm;
  op.flops_per_token = 0;
  op.bytes_per_token = 2.0 * d(width) * o.act_bytes;
  if (o.eager_elementwise && o.rmsnorm) op.bytes_per_token = d(width) * kEagerRmsNormBytes;
  op.saved.push_back({d(width) * o.act_bytes, shard, false});  // its input
  return op;
}

Op dropout(std::string name, int64_t width, const LoweringOptions& o) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::elementwise;
  op.bytes_per_token = 2.0 * d(width) * o.act_bytes;
  if (o.dropout) op.saved.push_back({d(width) * 1.0, Shard::sequence, false});  // 1-byte mask
  return op;
}

Op residual(std::string name, int64_t width, const LoweringOptions& o) {
  Op op;
  op.name = std::move(name);
  op.kind = OpKind::elementwise;
  op.bytes_per_token = 3.0 * d(width) * o.act_bytes;
  return op;
}

Op attention(const ModelSpec& m, int64_t qk_dim, int64_t v_dim, int64_t kv_heads, const LoweringOptions& o,
             bool fused_qkv = false, int64_t window = 0) {
  Op op;
  op.name = "core_attention";
  op.kind = OpKind::attention;
  op.heads = m.heads;
  op.kv_heads = kv_heads;
  op.qk_dim = qk_dim;
  op.v_dim = v_dim;
  op.causal = true;
  // QK^T and PV: 2 FLOPs per multiply-add, averaged over causal positions (s/2 keys, or
  // mean_attended_keys within a sliding window).
  op.flops_per_token = 2.0 * d(m.heads) * d(qk_dim + v_dim) * mean_attended_keys(o.attention_span, window);
  const double q = d(m.heads * qk_dim), k = d(kv_heads * qk_dim), v = d(kv_heads * v_dim);
  op.bytes_per_token = (q + k + v + d(m.heads * v_dim)) * o.act_bytes;
  // The q, k, v attention keeps (LoweringOptions::qkv_views): the fused projection's
  // output stays alive through V's view beside the rotated q and k, or grouped K and V are
  // kept expanded to the query heads.
  double kept_qkv = q + k + v;
  if (fused_qkv && o.qkv_views)
    kept_qkv = kv_heads == m.heads ? q + k + (q + k + v) : q + d(m.heads * qk_dim) + d(m.heads * v_dim);
  if (o.attention == AttentionImpl::flash) {
    // FlashAttention (Dao et al. 2022, Alg. 2): q, k, v and the fp32 log-sum-exp per head;
    // the output is kept by the output projection.
    op.saved.push_back({kept_qkv * o.act_bytes, Shard::tensor, false});
    op.saved.push_back({d(m.heads) * 4.0, Shard::tensor, true});
  } else {
    // Korthikanti et al. 2022, Sec. 4.1: Q and K for QK^T, V, then per head and key:
    // softmax output (2 B), dropout mask (1 B), dropout output (2 B) = 5as per token.
    op.saved.push_back({kept_qkv * o.act_bytes, Shard::tensor, false});
    // Without dropout only the softmax output is kept.
    const double scores = d(m.heads) * d(o.attention_span);
    op.saved.push_back({scores * (o.dropout ? 2.0 * o.act_bytes + 1.0 : o.act_bytes), Shard::tensor, true});
  }
  return op;
}

Op activation_fn(const ModelSpec& m, int64_t inner, const LoweringOptions& o, double per_token, Shard shard) {
  Op op;
  op.name = m.gated_mlp ? "glu_activation" : "activation";
  op.kind = OpKind::elementwise;
  const double in = d(inner) * (m.gated_mlp ? 2.0 : 1.0);
  op.bytes_per_token = (in + d(inner)) * o.act_bytes * per_token;
  if (o.eager_elementwise && m.gated_mlp) op.bytes_per_token = d(inner) * kEagerGluBytes * per_token;
  op.flops_per_token = 0;
  op.work = shard;
  const double in_bytes = shard == Shard::expert ? o.moe_act_input_bytes : o.act_bytes;
  op.saved.push_back({in * in_bytes * per_token, shard, false});  // its input(s)
  // Eager silu(gate) * up also keeps SiLU's output for the product's gradient.
  if (o.eager_glu && m.gated_mlp) op.saved.push_back({d(inner) * o.act_bytes * per_token, shard, false});
  return op;
}

/// Dense (or shared-expert) FFN: up (or gate+up) projection, activation, down projection.
void add_ffn(std::vector<Op>& ops, const ModelSpec& m, int64_t inner, const LoweringOptions& o,
             const std::string& prefix, bool keep_input) {
  Op up = gemm(prefix + (m.gated_mlp ? "gate_up_proj" : "up_proj"), inner * (m.gated_mlp ? 2 : 1), m.hidden,
               GemmSplit::column, o, keep_input, Shard::sequence);
  if (m.gated_mlp) up.calls = {inner, inner};  // w1 (gate), then w3 (up)
  ops.push_back(up);
  ops.push_back(activation_fn(m, inner, o, 1.0, Shard::tensor));
  ops.push_back(gemm(prefix + "down_proj", m.hidden, inner, GemmSplit::row, o, true, Shard::tensor));
}

/// Mark what each selective-recompute module discards and reruns (Megatron-LM
/// recompute_modules "layernorm", "mla_up_proj", "moe_act"; output-discarding checkpoints:
/// the module's output, kept by the operator that reads it, is dropped and rerun).
void tag_recompute_modules(std::vector<Op>& ops, const ModelSpec& m) {
  for (Op& op : ops) {
    const std::string& n = op.name;
    if (n == "input_norm" || n == "post_attention_norm") op.rerun = kRecomputeLayernorm;
    // The GEMMs that keep a norm's output as their input (kv_down_proj shares q's copy).
    const bool reads_norm = n == "q_down_proj" || n == "q_proj" || n == "qkv_proj" || op.kind == OpKind::router ||
                            n == "gate_up_proj" || n == "up_proj";
    if (reads_norm && !op.saved.empty()) op.saved[0].module |= kRecomputeLayernorm;
    if (m.mla && (n == "q_up_proj" || n == "kv_up_proj")) op.rerun = kRecomputeMlaUpProj;
    if (m.mla && op.kind == OpKind::attention && !op.saved.empty()) op.saved[0].module |= kRecomputeMlaUpProj;
    if (op.work == Shard::expert && op.kind == OpKind::elementwise) op.rerun = kRecomputeMoeAct;
    if (n == "expert_down_proj" && !op.saved.empty()) op.saved[0].module |= kRecomputeMoeAct;
  }
  // The dense MLP block (add_ffn without a prefix): fc1 keeps the block's input, the
  // checkpoint's; the activation's and fc2's inputs are dropped and all three rerun.
  for (size_t i = 0; i + 2 < ops.size(); ++i) {
    if (ops[i].name != "gate_up_proj" && ops[i].name != "up_proj") continue;
    ops[i].rerun |= kRecomputeMlp;
    for (size_t j : {i + 1, i + 2}) {
      ops[j].rerun |= kRecomputeMlp;
      for (Saved& s : ops[j].saved) s.module |= kRecomputeMlp;
    }
  }
}

enum LoraBit : unsigned { kQ = 1, kK = 2, kV = 4, kO = 8, kGate = 16, kUp = 32, kDown = 64 };

/// Attach LoRA adapters to the layer's GEMMs by the HF module names they stand for.
/// Shared experts carry none (lora_layer_params counts MLP targets on routed experts only
/// in MoE layers).
void attach_adapters(std::vector<Op>& ops, const ModelSpec& m, const LoweringOptions& o) {
  if (o.lora_rank <= 0 || o.lora_targets == 0) return;
  const unsigned t = o.lora_targets;
  const int64_t q = m.heads * m.head_dim, kv = m.kv_heads * m.head_dim;
  for (Op& op : ops) {
    if (op.kind != OpKind::gemm) continue;
    int64_t adapters = 0, out = 0;
    auto add = [&](unsigned bit, int64_t width) {
      if (t & bit) {
        ++adapters;
        out += width;
      }
    };
    const std::string& n = op.name;
    const bool routed = n.rfind("expert_", 0) == 0;
    const std::string base = routed ? n.substr(7) : n;
    if (n == "qkv_proj") {
      add(kQ, q);
      add(kK, kv);
      add(kV, kv);
    } else if (n == "q_proj") {
      add(kQ, op.n);
    } else if (n == "o_proj") {
      add(kO, op.n);
    } else if (n.rfind("shared_", 0) != 0 && base == "gate_up_proj") {
      add(kGate, op.n / 2);
      add(kUp, op.n / 2);
    } else if (n.rfind("shared_", 0) != 0 && base == "up_proj") {
      add(kUp, op.n);
    } else if (n.rfind("shared_", 0) != 0 && base == "down_proj") {
      add(kDown, op.n);
    }
    op.adapter_rank = adapters * o.lora_rank;
    op.adapter_out = out;
  }
}

/// How a GEMM's input splits over ranks: a row-split GEMM reads the tensor-parallel (or
/// expert) shard, the others the sequence.
Shard input_shard(const Op& op) {
  return op.split == GemmSplit::row ? (op.expert ? Shard::expert : Shard::tensor) : Shard::sequence;
}

/// A frozen base's GEMMs keep no input unless an adapter reads it (LoweringOptions::
/// base_keeps_inputs). The attention output, which the output projection kept, is then kept
/// by attention itself: FlashAttention's backward reads it (Dao 2023, FlashAttention-2,
/// Alg. 2: D = rowsum(dO * O)); rerun with the core under selective recompute.
void drop_frozen_inputs(std::vector<Op>& ops, const LoweringOptions& o) {
  Op* attention_op = nullptr;
  for (Op& op : ops) {
    if (op.kind == OpKind::attention) attention_op = &op;
    if (op.kind != OpKind::gemm && op.kind != OpKind::router) continue;
    if (op.adapter_rank > 0) {
      // The adapter's A reads the GEMM's input: kept once, here, even where the GEMM left
      // it to another that shares it.
      if (op.saved.empty()) {
        op.saved.push_back({d(op.k) * o.gemm_input_bytes * op.per_token, input_shard(op), false});
      }
      continue;
    }
    const bool kept_attention_output = op.name == "o_proj" && !op.saved.empty();
    op.saved.clear();
    if (kept_attention_output && attention_op && o.attention == AttentionImpl::flash)
      attention_op->saved.push_back(
          {d(attention_op->heads) * d(attention_op->v_dim) * o.act_bytes, Shard::tensor, true});
  }
}

/// What the adapters keep beyond their input (the frozen GEMMs' inputs are settled by
/// then): dropout's 1-byte mask and, where the base GEMM keeps its own input (a 4-bit
/// base), the dropped-out copy the adapter reads; the scattered output of LitGPT's partial
/// qkv adapters (LoweringOptions::qkv_adapter_pad).
void keep_adapter_state(std::vector<Op>& ops, const LoweringOptions& o) {
  for (Op& op : ops) {
    if (op.kind != OpKind::gemm || op.adapter_rank <= 0) continue;
    const Shard in_shard = input_shard(op);
    if (o.lora_dropout > 0) {
      op.saved.push_back({d(op.k) * 1.0 * op.per_token, in_shard, false});
      if (o.base_keeps_inputs) op.saved.push_back({d(op.k) * o.act_bytes * op.per_token, in_shard, false});
    }
    // Adapters on only some of q, k, v (op.n is the fused q + k + v width).
    if (o.qkv_adapter_pad && op.name == "qkv_proj" && op.adapter_out < op.n)
      op.saved.push_back({d(op.adapter_out) * o.act_bytes * op.per_token, Shard::tensor, false});
  }
}

}  // namespace

LoweringOptions lowering_options(const ModelSpec& m, const TrainingPlan& t) {
  LoweringOptions o;
  o.attention_span = attention_span(t);
  o.act_bytes = 2.0;
  // Transformer Engine keeps the fp8 cast of each GEMM input for the weight gradient.
  o.gemm_input_bytes = t.precision == DType::fp8 ? 1.0 : 2.0;
  o.moe_act_input_bytes = t.precision == DType::fp8 && t.fp8_blockwise.value_or(false) ? 1.0 + 4.0 / 128.0 : o.act_bytes;
  o.attention = attention_of(t) == AttentionKernel::unfused ? AttentionImpl::unfused : AttentionImpl::flash;
  // Megatron-Core's grouped experts apply the routing probabilities in their activation
  // (NVIDIA/Megatron-LM megatron/core/transformer/moe/experts.py, TEGroupedMLP with
  // weighted_bias_swiglu_impl, 2025 releases); PyTorch-native MoE weights the outputs.
  o.probs_in_activation = framework_of(t) != Framework::pytorch;
  if (m.moe && framework_of(t) == Framework::megatron && t.ep > 1 && m.moe->num_experts / t.ep > 1 &&
      t.schedule != Schedule::dualpipe)
    o.moe_permute_passes = 2;
  o.dropout = m.dropout > 0.0;
  o.eager_elementwise = t.eager_elementwise;
  o.compiled_loss = framework_of(t) == Framework::pytorch && t.compiled_loss.value_or(false);
  o.eager_loss = framework_of(t) == Framework::pytorch && !o.compiled_loss;
  o.rmsnorm = m.norm == NormKind::rmsnorm;
  if (trains_adapters(t.mode)) {
    o.frozen_base = true;
    const LoraSpec l = resolved_lora(t);
    o.base_keeps_inputs = l.base_bytes_per_param < 1.0;  // a 4-bit base: bitsandbytes
    o.eager_glu = framework_of(t) == Framework::pytorch;
    o.lora_rank = l.rank.value_or(0);
    o.lora_dropout = l.dropout.value_or(0.0);
    // The PyTorch adapter stack's defaults are LitGPT's (lora_defaults), and so is its
    // attention module.
    o.qkv_views = o.qkv_adapter_pad = framework_of(t) == Framework::pytorch;
    static const char* const names[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    for (const std::string& target : l.targets.value_or(std::vector<std::string>{}))
      for (unsigned i = 0; i < 7; ++i)
        if (target == names[i]) o.lora_targets |= 1u << i;
  }
  return o;
}

std::vector<Op> lower_layer(const ModelSpec& m, int64_t layer, const LoweringOptions& o) {
  std::vector<Op> ops;
  const int64_t h = m.hidden;
  ops.push_back(norm("input_norm", h, o));
  if (m.mla) {
    const auto& a = *m.mla;
    const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    if (a.q_lora_rank > 0) {
      ops.push_back(gemm("q_down_proj", a.q_lora_rank, h, GemmSplit::none, o, true, Shard::sequence));
      ops.push_back(norm("q_norm", a.q_lora_rank, o));
      ops.push_back(gemm("q_up_proj", m.heads * qk, a.q_lora_rank, GemmSplit::column, o, true, Shard::sequence));
    } else {
      ops.push_back(gemm("q_proj", m.heads * qk, h, GemmSplit::column, o, true, Shard::sequence));
    }
    // kv_down reads the same normed input as q_down/q_proj: kept once.
    ops.push_back(gemm("kv_down_proj", a.kv_lora_rank + a.qk_rope_head_dim, h, GemmSplit::none, o, false,
                       Shard::sequence));
    ops.push_back(norm("kv_norm", a.kv_lora_rank, o));
    ops.push_back(gemm("kv_up_proj", m.heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank,
                       GemmSplit::column, o, true, Shard::sequence));
    ops.push_back(attention(m, qk, a.v_head_dim, m.heads, o));
    ops.push_back(gemm("o_proj", h, m.heads * a.v_head_dim, GemmSplit::row, o, true, Shard::tensor));
  } else {
    const int64_t q = m.heads * m.head_dim, kv = m.kv_heads * m.head_dim;
    Op qkv = gemm("qkv_proj", q + 2 * kv, h, GemmSplit::column, o, true, Shard::sequence);
    qkv.calls = {q, kv, kv};  // wq, wk, wv
    ops.push_back(qkv);
    if (!m.learned_positions) {
      // Rotary embedding applied to q and k: one read and one write of each.
      Op rope;
      rope.name = "rotary";
      rope.kind = OpKind::elementwise;
      rope.work = Shard::tensor;
      rope.bytes_per_token = o.eager_elementwise ? d(q + kv) * kEagerRotaryBytes : 2.0 * d(q + kv) * o.act_bytes;
      ops.push_back(rope);
    }
    if (m.qk_norm) {
      Op qn = norm("qk_norm", q + kv, o, Shard::tensor);
      ops.push_back(qn);
    }
    ops.push_back(attention(m, m.head_dim, m.head_dim, m.kv_heads, o, true,
                            m.is_sliding_layer(layer) ? m.sliding_window : 0));
    ops.push_back(gemm("o_proj", h, q, GemmSplit::row, o, true, Shard::tensor));
  }
  ops.push_back(dropout("attn_dropout", h, o));
  ops.push_back(residual("attn_residual", h, o));
  ops.push_back(norm("post_attention_norm", h, o));
  if (m.is_moe_layer(layer)) {
    const auto& e = *m.moe;
    // Router reads the normed input and keeps it; the expert GEMMs keep their own copies.
    Op router = gemm("router", e.num_experts, h, GemmSplit::none, o, true, Shard::sequence);
    router.kind = OpKind::router;
    ops.push_back(router);
    Op probs;
    probs.name = "router_softmax_topk";
    probs.kind = OpKind::elementwise;
    probs.bytes_per_token = d(e.num_experts) * 4.0 * 2.0;
    probs.saved.push_back({d(e.num_experts) * 4.0, Shard::sequence, false});  // fp32 probabilities
    ops.push_back(probs);
    Op dispatch;
    dispatch.name = "token_dispatch";
    dispatch.kind = OpKind::permute;
    dispatch.per_token = d(e.top_k);
    dispatch.bytes_per_token = 2.0 * d(h) * o.act_bytes * d(e.top_k) * d(o.moe_permute_passes);
    ops.push_back(dispatch);
    // Each token's top-k copies enter the experts; their inputs are kept (replicated over etp).
    Op up = gemm("expert_" + std::string(m.gated_mlp ? "gate_up_proj" : "up_proj"),
                 e.expert_intermediate * (m.gated_mlp ? 2 : 1), h, GemmSplit::column, o, true, Shard::sequence,
                 d(e.top_k), true);
    ops.push_back(up);
    ops.push_back(activation_fn(m, e.expert_intermediate, o, d(e.top_k), Shard::expert));
    ops.push_back(gemm("expert_down_proj", h, e.expert_intermediate, GemmSplit::row, o, true, Shard::expert,
                       d(e.top_k), true));
    Op combine;
    combine.name = "token_combine";
    combine.kind = OpKind::permute;
    combine.per_token = d(e.top_k);
    combine.bytes_per_token = 2.0 * d(h) * o.act_bytes * d(e.top_k) * d(o.moe_permute_passes);
    if (!o.probs_in_activation)
      combine.saved.push_back({d(h) * o.act_bytes * d(e.top_k), Shard::sequence, false});  // expert outputs
    ops.push_back(combine);
    if (e.shared_experts > 0) add_ffn(ops, m, e.shared_experts * e.shared_intermediate, o, "shared_", false);
  } else {
    add_ffn(ops, m, m.intermediate, o, "", true);
  }
  if (m.is_moe_layer(layer)) {
    bool inside = false;
    for (Op& op : ops) inside = op.moe_block = inside || op.name == "token_dispatch";
  }
  ops.push_back(dropout("mlp_dropout", h, o));
  ops.push_back(residual("mlp_residual", h, o));
  tag_recompute_modules(ops, m);
  attach_adapters(ops, m, o);
  if (o.frozen_base && !o.base_keeps_inputs) drop_frozen_inputs(ops, o);
  if (o.frozen_base) keep_adapter_state(ops, o);
  return ops;
}

std::vector<Op> lower_embedding(const ModelSpec& m, const LoweringOptions& o) {
  std::vector<Op> ops;
  Op emb;
  emb.name = "embedding";
  emb.kind = OpKind::embedding;
  emb.bytes_per_token = 2.0 * d(m.hidden) * o.act_bytes;
  ops.push_back(emb);
  ops.push_back(dropout("embedding_dropout", m.hidden, o));
  return ops;
}

std::vector<Op> lower_head(const ModelSpec& m, const LoweringOptions& o) {
  std::vector<Op> ops;
  ops.push_back(norm("final_norm", m.hidden, o));
  // A frozen head (adapter training) keeps no input (drop_frozen_inputs).
  ops.push_back(gemm("lm_head", m.vocab, m.hidden, GemmSplit::column, o, !o.frozen_base, Shard::sequence));
  Op ce;
  ce.name = "cross_entropy";
  ce.kind = OpKind::logits;
  // Every rank holds its vocabulary shard of every token's logits (Megatron-LM's
  // vocab-parallel loss, torchtitan's loss_parallel under TP).
  ce.work = Shard::tensor;
  ce.bytes_per_token = d(m.vocab) * (o.compiled_loss ? kCompiledLossFwdBytes : o.eager_loss ? kEagerLossFwdBytes : kMegatronLossFwdBytes);
  ce.bwd_bytes_per_token =
      d(m.vocab) * (o.compiled_loss ? kCompiledLossBwdBytes : o.eager_loss ? kEagerLossBwdBytes : kMegatronLossBwdBytes);
  // Megatron-LM's vocab-parallel cross entropy (and PyTorch's eager log-softmax) keeps the
  // fp32 softmax of the logits shard; a compiled loss keeps the 16-bit logits.
  ce.saved.push_back({d(m.vocab) * (o.compiled_loss ? kCompiledLossKeptBytes : 4.0), Shard::tensor, false});
  ops.push_back(ce);
  return ops;
}

std::vector<Op> lower_mtp(const ModelSpec& m, const LoweringOptions& o) {
  std::vector<Op> ops;
  ops.push_back(norm("mtp_hidden_norm", m.hidden, o));
  ops.push_back(norm("mtp_embedding_norm", m.hidden, o));
  ops.push_back(gemm("mtp_eh_proj", m.hidden, 2 * m.hidden, GemmSplit::column, o, true, Shard::sequence));
  std::vector<Op> block = lower_layer(m, m.layers - 1, o);
  ops.insert(ops.end(), std::make_move_iterator(block.begin()), std::make_move_iterator(block.end()));
  return ops;
}

int64_t mtp_extra_params(const ModelSpec& m) { return 3 * m.hidden + 2 * m.hidden * m.hidden; }

double layer_activation_bytes(const std::vector<Op>& ops, const LoweringOptions& o, const ModelSpec& m,
                              const ShardContext& c) {
  const double tokens = static_cast<double>(c.micro_batch) * static_cast<double>(c.seq_len) /
                        static_cast<double>(c.cp);
  const double tp = static_cast<double>(c.tp);
  const double seq_div = c.sp ? tp : 1.0;
  if (c.recompute == Recompute::full) {
    // Only the layer input is kept (sequence-sharded under SP).
    return tokens * static_cast<double>(m.hidden) * o.act_bytes / seq_div;
  }
  if (c.recompute == Recompute::selective && c.op_sac) {
    // torchtitan's op-level policy saves the outputs of odd-numbered matrix multiplies
    // and of scaled-dot-product attention; everything else in the layer is recomputed
    // from the layer input.
    double bytes = tokens * static_cast<double>(m.hidden) * o.act_bytes / seq_div;
    int64_t mm_count = 0;
    for (const Op& op : ops) {
      if (op.kind == OpKind::gemm || op.kind == OpKind::router) {
        const double out = static_cast<double>(op.n) * op.per_token * o.act_bytes * op_sac_saved_share(op, mm_count);
        const double div = op.expert ? static_cast<double>(c.etp) : op.split == GemmSplit::column ? tp : seq_div;
        bytes += tokens * out / div;
      } else if (op.kind == OpKind::attention && o.attention == AttentionImpl::flash) {
        // Scaled-dot-product attention's output and log-sum-exp; an unfused attention's
        // batched matmuls and softmax are not on the save list and are recomputed.
        bytes += tokens * static_cast<double>(op.heads) * (static_cast<double>(op.v_dim) * o.act_bytes + 4.0) / tp;
      }
    }
    return bytes;
  }
  double bytes = 0;
  for (const Op& op : ops) {
    for (const Saved& s : op.saved) {
      if (c.recompute == Recompute::selective &&
          ((s.selective && (c.recompute_modules & kRecomputeCoreAttn)) || (s.module & c.recompute_modules)))
        continue;
      double div = 1.0;
      switch (s.shard) {
        case Shard::sequence: div = seq_div; break;
        case Shard::tensor: div = tp; break;
        case Shard::expert: div = static_cast<double>(c.etp); break;
      }
      bytes += tokens * s.bytes_per_token / div;
    }
  }
  return bytes;
}

double op_sac_saved_share(const Op& op, int64_t& count) {
  if (op.expert) return 0.5;
  if (op.calls.empty()) return ++count % 2 == 1 ? 1.0 : 0.0;
  double saved = 0, total = 0;
  for (const int64_t width : op.calls) {
    total += d(width);
    if (++count % 2 == 1) saved += d(width);
  }
  return total > 0 ? saved / total : 0.0;
}

double ops_forward_flops_per_token(const std::vector<Op>& ops) {
  double f = 0;
  for (const Op& op : ops) f += op.flops_per_token;
  return f;
}

}  // namespace capsim
