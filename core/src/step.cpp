#include "capsim/core/step.hpp"

#include <algorithm>
#include <cmath>

#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/workload.hpp"

namespace capsim {

namespace {

double dbl(int64_t v) { return static_cast<double>(v); }

/// A group of `size` ranks whose consecutive members are `stride` ranks apart.
Group place(int64_t size, int64_t stride, int64_t gpn) {
  Group g;
  g.size = size;
  g.per_node = stride >= gpn ? 1 : std::max<int64_t>(1, std::min(size, gpn / stride));
  return g;
}

/// Per-microbatch costs of one layer on one GPU.
struct LayerCost {
  double fwd = 0, bwd = 0;         ///< compute
  double recompute = 0;            ///< extra forward under the policy
  double attn_fwd = 0, attn_bwd = 0;
  double tp_fwd = 0, tp_bwd = 0;   ///< TP collectives (bwd includes recompute's)
  double cp_fwd = 0, cp_bwd = 0;   ///< CP exchange before overlap
  double ep_fwd = 0, ep_bwd = 0;
  double fwd_flops = 0, recompute_flops = 0;
};

struct Ctx {
  const ModelSpec& m;
  const TrainingPlan& t;
  const CostModel& cost;
  const StepOptions& opt;
  LayoutGroups g;
  int64_t b = 1, s = 1;
  double tokens = 0;  ///< per GPU per microbatch, before SP: b*s/cp
  DType gemm_dtype = DType::bf16;
  Recompute rc = Recompute::none;
  double rc_fraction = 1.0;  ///< share of layers recomputed under full recompute
  int64_t etp = 1;
};

double gemm_fwd_bwd(const Ctx& c, const Op& op, double& bwd_out, double& flops_out) {
  const int64_t tp = c.t.tp;
  int64_t n = op.n, k = op.k;
  int64_t m = static_cast<int64_t>(std::llround(c.tokens * op.per_token));
  int64_t batch = 1;
  DType dt = c.gemm_dtype;
  if (op.kind == OpKind::router || op.name == "lm_head") dt = DType::bf16;
  if (op.expert) {
    // Expert GEMMs: tokens routed to this rank's E/ep experts, split over etp.
    const int64_t local = std::max<int64_t>(1, c.m.moe->num_experts / c.t.ep);
    const double routed = c.tokens * op.per_token / dbl(tp) * dbl(c.etp) * c.opt.moe_imbalance;
    m = std::max<int64_t>(1, static_cast<int64_t>(std::llround(routed / dbl(local))));
    batch = local;
    if (op.split == GemmSplit::column) n = std::max<int64_t>(1, n / c.etp);
    if (op.split == GemmSplit::row) k = std::max<int64_t>(1, k / c.etp);
  } else {
    if (op.split == GemmSplit::column) n = std::max<int64_t>(1, n / tp);
    if (op.split == GemmSplit::row) k = std::max<int64_t>(1, k / tp);
  }
  const double f = c.cost.gemm(m, n, k, dt, batch).value;
  // Backward: input gradient [m x k] = dY [m x n] W^T, weight gradient [k x n] = X^T dY.
  bwd_out = c.cost.gemm(m, k, n, dt, batch).value + c.cost.gemm(k, n, m, dt, batch).value;
  flops_out = 2.0 * dbl(m) * dbl(n) * dbl(k) * dbl(batch);
  return f;
}

LayerCost layer_cost(const Ctx& c, const std::vector<Op>& ops, bool moe_layer) {
  LayerCost lc;
  const double tp = dbl(c.t.tp);
  const double seq_div = c.t.sp ? tp : 1.0;
  for (const Op& op : ops) {
    switch (op.kind) {
      case OpKind::gemm:
      case OpKind::router: {
        double bwd = 0, flops = 0;
        const double f = gemm_fwd_bwd(c, op, bwd, flops);
        lc.fwd += f;
        lc.bwd += bwd;
        lc.fwd_flops += flops;
        if (c.rc == Recompute::full) {
          lc.recompute += c.rc_fraction * f;
          lc.recompute_flops += c.rc_fraction * flops;
        }
        break;
      }
      case OpKind::attention: {
        AttentionShape a;
        a.batch = c.b;
        a.heads = std::max<int64_t>(1, op.heads / c.t.tp);
        a.kv_heads = std::max<int64_t>(1, op.kv_heads / c.t.tp);
        a.q_len = c.s / c.t.cp;
        a.kv_len = c.s;
        a.qk_dim = op.qk_dim;
        a.v_dim = op.v_dim;
        a.causal = op.causal;
        a.kernel = c.t.attention;
        const double f = c.cost.attention(a, false).value;
        const double bw = c.cost.attention(a, true).value;
        lc.fwd += f;
        lc.bwd += bw;
        lc.attn_fwd += f;
        lc.attn_bwd += bw;
        const double flops = 2.0 * dbl(a.batch * a.heads) * dbl(a.q_len) * dbl(a.kv_len) * 0.5 * dbl(a.qk_dim + a.v_dim);
        lc.fwd_flops += flops;
        if (c.rc != Recompute::none) {
          const double share = c.rc == Recompute::full ? c.rc_fraction : 1.0;
          lc.recompute += share * f;
          lc.recompute_flops += share * flops;
        }
        if (c.t.cp > 1) {
          // Ring attention: cp-1 steps each passing this rank's K and V chunk; the
          // backward passes K, V and their gradients.
          const double kv_bytes = c.tokens * dbl(op.kv_heads * (op.qk_dim + op.v_dim)) / tp * 2.0;
          const bool cross = c.g.cp.nodes() > 1;
          const double step = c.cost.p2p(Bytes(kv_bytes), cross).value;
          lc.cp_fwd += dbl(c.t.cp - 1) * step;
          lc.cp_bwd += 2.0 * dbl(c.t.cp - 1) * step;
        }
        break;
      }
      default: {
        double div = 1.0;
        switch (op.work) {
          case Shard::sequence: div = seq_div; break;
          case Shard::tensor: div = tp; break;
          case Shard::expert: div = tp / dbl(c.etp); break;
        }
        const double bytes = op.bytes_per_token * c.tokens / div;
        const double f = c.cost.memory_bound(Bytes(bytes)).value;
        lc.fwd += f;
        lc.bwd += 2.0 * f;
        if (c.rc == Recompute::full) lc.recompute += c.rc_fraction * f;
        break;
      }
    }
  }
  // Tensor-parallel collectives: two per layer each way (attention and MLP blocks);
  // all-reduce, or reduce-scatter + all-gather with SP, of the b*s*h activations.
  if (c.t.tp > 1) {
    const double act = c.tokens * dbl(c.m.hidden) * 2.0;
    double one = 0;
    if (c.t.sp)
      one = c.cost.collective(CollectiveKind::reduce_scatter, Bytes(act), c.g.tp).value +
            c.cost.collective(CollectiveKind::all_gather, Bytes(act), c.g.tp).value;
    else
      one = c.cost.collective(CollectiveKind::all_reduce, Bytes(act), c.g.tp).value;
    const double blocks = moe_layer ? (c.etp > 1 ? 2.0 : 1.0) : 2.0;
    lc.tp_fwd = blocks * one;
    lc.tp_bwd = blocks * one * (c.rc == Recompute::full ? 1.0 + c.rc_fraction : 1.0);
  }
  // Expert parallel: token dispatch and combine all-to-all, forward and backward.
  if (moe_layer && c.t.ep > 1) {
    const double sent = c.tokens / tp * dbl(c.m.moe->top_k) * dbl(c.m.hidden) * 2.0;
    const double a2a = c.cost.collective(CollectiveKind::all_to_all, Bytes(sent), c.g.ep).value;
    lc.ep_fwd = 2.0 * a2a;
    lc.ep_bwd = 2.0 * a2a * (c.rc == Recompute::full ? 1.0 + c.rc_fraction : 1.0);
  }
  return lc;
}

/// Bytes per parameter a fused optimizer step reads and writes: AdamW reads the fp32
/// gradient, master weight, m and v (16 B) and writes master, m, v (12 B) and the bf16
/// weight (2 B); SGD and Lion have one moment (22 B); 8-bit Adam one-byte moments
/// (18 B); Adafactor's factored moments are negligible (14 B).
double optimizer_traffic(Optimizer o) {
  switch (o) {
    case Optimizer::adamw: return 30.0;
    case Optimizer::sgd:
    case Optimizer::lion: return 22.0;
    case Optimizer::adam8bit: return 18.0;
    case Optimizer::adafactor: return 14.0;
  }
  return 30.0;
}

}  // namespace

LayoutGroups layout_groups(const TrainingPlan& t, int64_t gpn) {
  LayoutGroups g;
  const int64_t etp = t.etp.value_or(1);
  g.tp = place(t.tp, 1, gpn);
  g.cp = place(t.cp, t.tp, gpn);
  g.dp = place(t.dp * t.cp, t.tp, gpn);  // gradients reduce over DP x CP
  g.etp = place(etp, 1, gpn);
  g.ep = place(t.ep, etp, gpn);
  const int64_t edp = std::max<int64_t>(1, t.tp * t.cp * t.dp / (t.ep * etp));
  g.dp_expert = place(edp, t.ep * etp, gpn);
  g.pp_cross_node = t.tp * t.cp * t.dp >= gpn;
  return g;
}

StepBreakdown analytical_step(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t,
                              const CostModel& cost, const StepOptions& opt) {
  StepBreakdown out;
  Ctx c{m, t, cost, opt, layout_groups(t, sys.gpus_per_node)};
  c.b = t.micro_batch.value_or(1);
  c.s = t.seq_len;
  c.tokens = dbl(c.b) * dbl(c.s) / dbl(t.cp);
  c.gemm_dtype = t.precision == DType::fp8 ? DType::fp8 : DType::bf16;
  c.rc = t.recompute.value_or(Recompute::none);
  c.rc_fraction = t.recompute_fraction;
  c.etp = t.etp.value_or(1);
  const int64_t vpp = t.vpp.value_or(1);
  const int64_t mb = num_microbatches(t);
  const int zero = t.zero.value_or(0);
  const LoweringOptions lo = lowering_options(m, t);

  // Cost each layer kind once.
  LayerCost kinds[2];
  bool have[2] = {false, false};
  for (int64_t i = 0; i < m.layers; ++i) {
    const int k = m.is_moe_layer(i) ? 1 : 0;
    if (!have[k]) {
      kinds[k] = layer_cost(c, lower_layer(m, i, lo), k == 1);
      have[k] = true;
    }
  }
  Ctx head_ctx = c;
  head_ctx.rc = Recompute::none;
  const LayerCost head = layer_cost(head_ctx, lower_head(m, lo), false);
  const LayerCost emb = layer_cost(head_ctx, lower_embedding(m, lo), false);

  const auto ranks = stage_layer_ids(m, t);
  const double tp_keep = 1.0 - opt.tp_overlap;
  double worst = -1, sum_stage = 0;
  struct StageTime {
    double fwd, bwd, compute, recompute, tp, cp, ep, tp_total, cp_total, ep_total, params;
  } crit{};
  for (int64_t r = 0; r < t.pp; ++r) {
    StageTime st{};
    double params = 0;
    for (int64_t id : ranks[static_cast<size_t>(r)]) {
      const LayerCost& lc = kinds[m.is_moe_layer(id) ? 1 : 0];
      const double cp_f = std::max(0.0, lc.cp_fwd - lc.attn_fwd);
      const double cp_b = std::max(0.0, lc.cp_bwd - lc.attn_bwd);
      st.fwd += lc.fwd + tp_keep * lc.tp_fwd + cp_f + lc.ep_fwd;
      st.bwd += lc.bwd + lc.recompute + tp_keep * lc.tp_bwd + cp_b + lc.ep_bwd;
      st.compute += lc.fwd + lc.bwd;
      st.recompute += lc.recompute;
      st.tp += tp_keep * (lc.tp_fwd + lc.tp_bwd);
      st.cp += cp_f + cp_b;
      st.ep += lc.ep_fwd + lc.ep_bwd;
      st.tp_total += lc.tp_fwd + lc.tp_bwd;
      st.cp_total += lc.cp_fwd + lc.cp_bwd;
      st.ep_total += lc.ep_fwd + lc.ep_bwd;
      const LayerParams lp = layer_params(m, id);
      params += (dbl(lp.attention) + dbl(lp.dense_mlp) + dbl(lp.shared_experts)) / dbl(t.tp) + dbl(lp.norms + lp.router);
    }
    if (r == 0) {
      st.fwd += emb.fwd;
      st.bwd += emb.bwd;
      st.compute += emb.fwd + emb.bwd;
      params += dbl(m.vocab * m.hidden) / dbl(t.tp);
    }
    if (r == t.pp - 1) {
      st.fwd += head.fwd;
      st.bwd += head.bwd;
      st.compute += head.fwd + head.bwd;
      if (!m.tied_embeddings || t.pp > 1) params += dbl(m.vocab * m.hidden) / dbl(t.tp);
    }
    st.params = params;
    const double total = st.fwd + st.bwd;
    sum_stage += total;
    if (total > worst) {
      worst = total;
      crit = st;
      out.slowest_stage = r;
    }
  }
  const double t_mb = worst;
  out.microbatch_s = t_mb;
  // Pipeline bubble (Narayanan et al. 2021, Sec. 2.2): (p-1)/v microbatch times when
  // stages are equal; with uneven stages the fill and drain pass once through every
  // stage but the slowest, whose steady state the m microbatch times already count.
  out.bubble_s = t.pp > 1 ? (sum_stage - worst) / dbl(vpp) : 0.0;
  const double per_mb_scale = dbl(mb);
  out.compute_s = crit.compute * per_mb_scale;
  out.recompute_s = crit.recompute * per_mb_scale;
  out.exposed_tp_s = crit.tp * per_mb_scale;
  out.exposed_cp_s = crit.cp * per_mb_scale;
  out.exposed_ep_s = crit.ep * per_mb_scale;
  out.total_tp_s = crit.tp_total * per_mb_scale;
  out.total_cp_s = crit.cp_total * per_mb_scale;
  out.total_ep_s = crit.ep_total * per_mb_scale;

  // Pipeline send/recv of one microbatch's boundary activations; on the critical path
  // once per forward and backward for each microbatch without interleaving (Megatron's
  // blocking 1F1B), during fill and drain with interleaving (overlapped p2p).
  if (t.pp > 1) {
    const double act = c.tokens * dbl(m.hidden) * 2.0 / (t.sp ? dbl(t.tp) : 1.0);
    const double p = cost.p2p(Bytes(act), c.g.pp_cross_node).value;
    out.total_pp_s = 2.0 * p * dbl(mb * vpp);
    out.exposed_pp_s = vpp == 1 ? 2.0 * p * dbl(mb + t.pp - 1) : 2.0 * p * dbl(t.pp - 1) * dbl(vpp);
  }

  // Data parallel: gradients and (ZeRO >= 1) parameters of the critical stage.
  const double grad_bytes = t.precision == DType::fp16 ? 2.0 : 4.0;  // fp32 main grads with bf16/fp8
  double expert_params = 0;
  for (int64_t id : ranks[static_cast<size_t>(out.slowest_stage)])
    expert_params += dbl(layer_params(m, id).routed_experts) / dbl(t.ep * c.etp);
  const double dense_params = crit.params;
  // Collective times of the dense and expert groups are summed first, then hidden once
  // behind the compute they overlap with.
  struct DpCost {
    double ag = 0, rs = 0;                // ZeRO-3: per layer, per microbatch
    double grads = 0, gather = 0, last = 0;  // ZeRO 0-2: per step
  } dp;
  const double stage_layers = std::max(1.0, dbl(ranks[static_cast<size_t>(out.slowest_stage)].size()));
  auto dp_group_cost = [&](double params, const Group& grp) {
    if (grp.size <= 1 || params <= 0) return;
    if (zero >= 3) {
      // ZeRO-3 / FSDP: every microbatch gathers each layer's weights for forward and
      // backward and reduce-scatters its gradients, prefetched behind layer compute.
      const double layer = params / stage_layers;
      dp.ag += cost.collective(CollectiveKind::all_gather, Bytes(layer * 2.0), grp).value;
      dp.rs += cost.collective(CollectiveKind::reduce_scatter, Bytes(layer * grad_bytes), grp).value;
      return;
    }
    // Megatron-LM DDP buckets of max(40M, 1M x dp) elements; the last one cannot overlap.
    const double bucket = std::min(params, std::max(40e6, 1e6 * dbl(grp.size)));
    if (zero == 0) {
      dp.grads += cost.collective(CollectiveKind::all_reduce, Bytes(params * grad_bytes), grp).value;
      dp.last += cost.collective(CollectiveKind::all_reduce, Bytes(bucket * grad_bytes), grp).value;
    } else {
      dp.grads += cost.collective(CollectiveKind::reduce_scatter, Bytes(params * grad_bytes), grp).value;
      dp.gather += cost.collective(CollectiveKind::all_gather, Bytes(params * 2.0), grp).value;
      dp.last += cost.collective(CollectiveKind::reduce_scatter, Bytes(bucket * grad_bytes), grp).value +
                 cost.collective(CollectiveKind::all_gather, Bytes(bucket * 2.0), grp).value;
    }
  };
  dp_group_cost(dense_params, c.g.dp);
  dp_group_cost(expert_params, c.g.dp_expert);
  double dp_total = 0, dp_exposed = 0;
  if (zero >= 3 && t.pp > 1) {
    // Under pipeline parallelism the stage's parameters stay gathered across microbatches
    // and gradients reduce once (see training_memory): one gather behind the first
    // forward, one reduce-scatter behind the last backward.
    const double gather = stage_layers * dp.ag, reduce = stage_layers * dp.rs;
    dp_total = gather + reduce;
    dp_exposed = opt.overlap_dp ? std::max(dp.ag, gather - crit.fwd) + std::max(dp.rs, reduce - crit.bwd) : dp_total;
  } else if (zero >= 3) {
    const double lf = crit.fwd / stage_layers, lb = crit.bwd / stage_layers;
    const double per_mb = stage_layers * (std::max(0.0, dp.ag - lf) + std::max(0.0, dp.ag + dp.rs - lb)) + dp.ag + dp.rs;
    dp_total = dbl(mb) * stage_layers * (2.0 * dp.ag + dp.rs);
    dp_exposed = opt.overlap_dp ? dbl(mb) * per_mb : dp_total;
  } else {
    dp_total = dp.grads + dp.gather;
    // Reduction hides behind the last microbatch's backward, gathering behind the first
    // forward; the last bucket is always exposed.
    dp_exposed = opt.overlap_dp ? std::max(dp.last, dp.grads - crit.bwd) + std::max(0.0, dp.gather - crit.fwd) : dp_total;
  }
  out.total_dp_s = dp_total;
  out.exposed_dp_s = dp_exposed;

  // Optimizer step over this GPU's shard of the parameters.
  const double local = (zero >= 1 ? dense_params / dbl(c.g.dp.size) : dense_params) +
                       (zero >= 1 ? expert_params / dbl(c.g.dp_expert.size) : expert_params);
  out.optimizer_s = t.memory.offload_optimizer ? 0.0 : cost.memory_bound(Bytes(local * optimizer_traffic(t.optimizer))).value;

  out.step_s = dbl(mb) * t_mb + out.bubble_s + out.exposed_pp_s + out.exposed_dp_s + out.optimizer_s;

  // Throughput and utilisation.
  const double tokens_step = dbl(t.global_batch) * dbl(t.seq_len);
  out.tokens_per_s = tokens_step / out.step_s;
  out.tokens_per_s_per_gpu = out.tokens_per_s / dbl(sys.num_gpus);
  out.model_flops_per_step = 3.0 * forward_flops_per_token(m, t.seq_len) * tokens_step;
  double recompute_flops_per_token = 0;
  for (int k = 0; k < 2; ++k)
    if (have[k]) {
      int64_t count = 0;
      for (int64_t i = 0; i < m.layers; ++i) count += (m.is_moe_layer(i) ? 1 : 0) == k ? 1 : 0;
      recompute_flops_per_token += dbl(count) * kinds[k].recompute_flops * dbl(t.tp) / c.tokens;
    }
  out.hardware_flops_per_step = out.model_flops_per_step + recompute_flops_per_token * tokens_step;
  out.model_tflops_per_gpu = out.model_flops_per_step / out.step_s / dbl(sys.num_gpus) / 1e12;
  const double peak = sys.gpu.peak(t.precision == DType::fp16 ? DType::fp16 : DType::bf16).value;
  out.mfu = out.model_flops_per_step / out.step_s / (dbl(sys.num_gpus) * peak);
  out.hfu = out.hardware_flops_per_step / out.step_s / (dbl(sys.num_gpus) * peak);
  return out;
}

}  // namespace capsim
