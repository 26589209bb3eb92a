#include "capsim/core/step.hpp"

#include <algorithm>
#include <cmath>

#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/workload.hpp"
#include "eval_cache_impl.hpp"

namespace capsim {

namespace {

double dbl(int64_t v) { return static_cast<double>(v); }

/// SMs the all-to-all kernels occupy while they overlap another microbatch's computation:
/// "only 20 SMs are sufficient to fully utilize the bandwidths of IB and NVLink" (DeepSeek-V3
/// technical report, arXiv 2412.19437, Sec. 3.2.2, on H800's 132 SMs); DeepEP's default
/// (deep_ep/buffer.py, Buffer.num_sms = 20).
constexpr double kA2aOverlapSms = 20.0;

/// Bytes per parameter of the gradients and of the parameters an offloaded optimizer moves
/// over PCIe: 16-bit each way (Ren et al. 2021, ZeRO-Offload, Sec. 4.1: fp16 gradients
/// offloaded, fp16 parameters swapped back; 2M bytes each way for M parameters).
constexpr double kOffloadBytesPerParam = 2.0;

/// Bytes the block-scaled FP8 recipe (1x128 activation tiles, 128x128 weight tiles) moves
/// per GEMM-operand element it quantizes (the forward's inputs, the backward's output
/// gradients): row- and column-wise tiles are separate passes, and cached FP8 activations
/// are re-quantized for the weight gradient (DeepSeek-V3 report, arXiv 2412.19437, Sec.
/// 3.3). From DeepSeek's own training trace (deepseek-ai/profile-data train.json @4496024,
/// one DualPipe chunk pair of 4 MoE layers each way, 4,096 tokens, EP64, H800): its
/// quantization, cast and transpose kernels take 14,428 us for 4.68e9 such elements (4,096
/// tokens x 4 layers x 285,760: forward inputs of the MLA projections, the 8 routed and
/// the shared expert, their output gradients, the up-projections' recompute), at the
/// H800's achievable 3.0 TB/s (3,350 GB/s x 0.8955) 9.2 bytes each, against 4 for a fused
/// cast-transpose of a per-tensor recipe.
constexpr double kBlockwiseCastBytes = 9.2;

/// SMs a userbuffers bulk reduce-scatter holds while the weight-gradient GEMM it hides
/// under runs: Megatron-Bridge's H100 presets (comm_overlap.py,
/// userbuffers_{bf16,fp8}_h100_h8192_tp4_mbs1_seqlen8192) give the QKV and FC1 dgrad
/// reduce-scatters (qkv_wgrad, fc1_wgrad) 24 and 4 SMs: 14 on average.
constexpr double kUserbuffersBulkSms = (24.0 + 4.0) / 2.0;

/// Share of a pipelined tensor-parallel collective (the forward's all-gather before QKV and
/// FC1 and reduce-scatter after the projection and FC2, the backward's output-gradient
/// all-gather) that Transformer Engine's userbuffers overlap hides: its measured overlap
/// efficiency on H800 with 8-way TP at GPT-3 175B's shapes, m = 1024-8192, averages 20%
/// (range -40% to 80%; E = 1 - exposed time with overlap / exposed time of NCCL without
/// it): Chang et al., "FLUX", arXiv 2406.06858, Sec. 5.1 and 6, TE 1.4.0 with UserBuffer,
/// its best configuration per shape. Carried to every Hopper part.
constexpr double kUserbuffersPipelinedHidden = 0.20;

/// How much of a layer's tensor-parallel communication stays on the critical path.
/// Auto with userbuffers: in the backward, each block's reduce-scatter of the input
/// gradient (half the backward's traffic) runs under the weight-gradient GEMM, an
/// independent kernel, at the cost of the SMs it holds; it hides at most that GEMM's time.
/// The pipelined overlaps split the dependent GEMMs into chunks (forward all-gathers and
/// reduce-scatters, the backward's output-gradient all-gather, a full recompute's forward
/// collectives); their gain is shape-dependent (TransformerEngine issue #426: a 4096-wide
/// layer 2x slower with it; NVIDIA/Fuser PR #3591: "no clear win" on H100) and on average
/// kUserbuffersPipelinedHidden of their time.
struct TpExposure {
  double keep = 1.0;     ///< an explicit overlap share: 1 - share of every collective
  bool bulk = false;     ///< auto: userbuffers' bulk and pipelined overlaps
  double bulk_hidden = 0;  ///< share of the bulk reduce-scatter's time hidden
  double exposed_fwd(const LayerCost& lc) const {
    return bulk ? (1.0 - kUserbuffersPipelinedHidden) * lc.tp_fwd : keep * lc.tp_fwd;
  }
  double exposed_bwd(const LayerCost& lc) const {
    if (!bulk) return keep * lc.tp_bwd;
    // The backward's own collectives cost what the forward's do (tp_bwd adds a full
    // recompute's on top); half of them are the reduce-scatters, the rest pipelined.
    const double pipelined = std::max(0.0, lc.tp_bwd - 0.5 * lc.tp_fwd);
    return lc.tp_bwd - std::min(0.5 * lc.tp_fwd * bulk_hidden, lc.wgrad) - kUserbuffersPipelinedHidden * pipelined;
  }
};

TpExposure tp_exposure(const SystemSpec& sys, const TrainingPlan& t, const StepOptions& opt) {
  TpExposure e;
  if (opt.tp_overlap) {
    e.keep = 1.0 - *opt.tp_overlap;
  } else if (userbuffers_tp_overlap(sys, t)) {
    e.bulk = true;
    e.bulk_hidden = 1.0 - kUserbuffersBulkSms / dbl(std::max(1, sys.gpu.sm_count));
  }
  return e;
}

/// A group of `size` ranks whose consecutive members are `stride` ranks apart.
Group place(int64_t size, int64_t stride, int64_t gpn) {
  Group g;
  g.size = size;
  g.per_node = stride >= gpn ? 1 : std::max<int64_t>(1, std::min(size, gpn / stride));
  return g;
}

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
  /// PyTorch-native conventions: op-level selective checkpointing, eager ring-attention merges.
  bool pytorch = false;
  int64_t etp = 1;
  /// Block-scaled FP8 GEMMs run at most at this rate (FLOP/s); 0 = tensorwise scaling.
  double fp8_block_rate = 0;
  bool fp8_blockwise = false;  ///< block-scaled FP8 recipe (its quantization: kBlockwiseCastBytes)
  bool hierarchical_ep = false;  ///< tokens cross the network once per node (MoeDispatcher)
  const SystemSpec* sys = nullptr;
  double a2a_share = 0;  ///< a2a_sm_share of the plan's expert-parallel group and dispatcher
  /// Share of the layer kind being costed whose attention has a sliding window
  /// (ModelSpec::sliding_layer): layers of a kind differ only in it, so the kind's attention
  /// is the share-weighted mix of the two.
  double window_share = 0;
  /// operator_times: where each op's cost is recorded, under the block being costed.
  std::vector<OperatorTime>* parts = nullptr;
  const char* block = "";
};

/// Bytes a channel of an NCCL ring or tree collective must carry for NCCL to keep it:
/// topoGetAlgoInfo drops channels while nBytes < channels x threads x threshold, 512
/// threads and 64 bytes under the SIMPLE protocol large messages use (NVIDIA/nccl
/// v2.30.7-1, src/enqueue.cc and src/include/comm.h).
constexpr double kNcclBytesPerChannel = 512.0 * 64.0;

/// Scale-out bandwidth one NCCL send/recv channel to a network peer is sized for:
/// NCCL_P2P_PER_CHANNEL_NET_BW, 14 GB/s (NVIDIA/nccl v2.30.7-1, src/graph/paths.cc).
constexpr double kNcclP2pNetBytesPerChannel = 14e9;

/// Share of the GPU's SMs `blocks` thread blocks hold (one SM each; at least one SM left).
double sm_share(const SystemSpec& sys, double blocks) {
  if (blocks <= 0) return 0.0;
  const double sms = dbl(std::max(1, sys.gpu.sm_count));
  return std::min(blocks, sms - 1.0) / sms;
}

/// Share of the SMs NCCL's kernels hold while a transfer of `bytes` over `g` runs beside
/// computation: one thread block per channel (NVIDIA/nccl src/enqueue.cc, the grid is the
/// channel mask's population), and no compute kernel shares an SM with them ("NCCL CTAs
/// won't share an SM with compute kernels", NCCL's maintainer in NVIDIA/nccl#689). The
/// channel counts are the GPU preset's (nccl_ctas_*); a send/recv to a network peer uses
/// max(1, NIC bandwidth / 14 GB/s) channels (NCCL src/graph/paths.cc). 0 where the preset
/// has no measured count.
double nccl_sm_share(const SystemSpec& sys, const Group& g, double bytes, bool p2p) {
  if (g.size <= 1 || bytes <= 0) return 0.0;
  const GpuEfficiency& e = sys.gpu.efficiency;
  const bool network = g.nodes() > 1;
  double ctas = 0;
  if (!p2p) ctas = (network ? e.nccl_ctas_network : e.nccl_ctas_nvlink).value;
  else if (!network) ctas = e.nccl_p2p_ctas_nvlink.value;
  else if (e.nccl_ctas_network.value > 0)
    ctas = std::max(1.0, std::ceil(sys.nic_gbps_per_gpu / 8.0 * 1e9 / kNcclP2pNetBytesPerChannel));
  if (!p2p && ctas > 0) ctas = std::min(ctas, std::max(1.0, std::floor(bytes / kNcclBytesPerChannel)));
  return sm_share(sys, ctas);
}

/// One microbatch's forward run together with another's backward, each one's all-to-all
/// hidden behind the other's computation as far as that lasts (DualPipe, DeepSeek-V3 report
/// Sec. 3.2.1). `both` is the forward plus the backward with their all-to-all `ep` in it.
/// The all-to-all kernels hold SMs of their own while the other microbatch computes, so
/// the computation they overlap runs on the rest: an overlapped span E of a fixed amount of
/// work lasts E c/S longer on S SMs.
struct PairedPasses {
  double seconds = 0;  ///< the pair's time
  double exposed = 0;  ///< all-to-all beyond the computation it hides behind
  double slowed = 0;   ///< computation lengthened by the SMs the all-to-all holds
};
PairedPasses paired_passes(double both, double ep, double share) {
  PairedPasses p;
  const double busy = both - ep;
  p.exposed = std::max(0.0, ep - busy);
  p.slowed = (ep - p.exposed) * share;
  p.seconds = busy + p.exposed + p.slowed;
  return p;
}

/// One MoE layer's forward beside another microbatch's backward of it under Megatron-Core's
/// batch-level overlap, in the three columns of its schedule (Megatron-Core
/// model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run: communication
/// "combine_bwd | dispatch_fwd->dispatch_bwd | combine_fwd" against computation
/// "attn_fwd | mlp_bwd->mlp_bwd_dw->mlp_fwd | attn_bwd"): each column lasts the longer of
/// its two sides, the overlapped part of it on the SMs the all-to-all leaves.
struct EpPair {
  double saved = 0;      ///< against running the two one after the other
  double ep_hidden = 0;  ///< all-to-all time beside computation
  double slowed = 0;     ///< computation lengthened by the SMs the all-to-all holds
};
EpPair ep_overlap_pair(const LayerCost& lc, double share) {
  EpPair p;
  auto column = [&](double comm, double comp) {
    const double overlapped = std::min(comm, comp);
    p.ep_hidden += overlapped;
    p.slowed += overlapped * share;
    return std::max(comm, comp) + overlapped * share;
  };
  // One all-to-all each way and direction: dispatch and combine cost alike.
  const double a_f = lc.ep_fwd / 2.0, a_b = lc.ep_bwd / 2.0;
  const double attn_f = lc.fwd - lc.moe_block_fwd, attn_b = lc.bwd + lc.recompute - lc.moe_block_bwd;
  const double pair = column(a_b, attn_f) + column(a_f + a_b, lc.moe_block_bwd + lc.moe_block_fwd) + column(a_f, attn_b);
  p.saved = lc.fwd + lc.bwd + lc.recompute + lc.ep_fwd + lc.ep_bwd - pair;
  return p;
}

/// Share of the SMs the expert-parallel all-to-all holds while it overlaps computation: a
/// hierarchical dispatcher (DeepEP, HybridEP) the 20 SMs of kA2aOverlapSms; NCCL's
/// all-to-all (Megatron-Core's alltoall dispatcher, a grouped send/recv to every peer) its
/// send/recv channels: inside one node the node's count (nccl_p2p_ctas_nvlink, "32 p2p
/// channels" on an H100 node), across nodes the collective channels rounded up to a power
/// of two, from which NCCL sizes them (NVIDIA/nccl src/graph/paths.cc; "16 p2p channels"
/// on two H100 nodes, aws-do-eks); none where the preset has no count.
double a2a_sm_share(const SystemSpec& sys, const Group& ep, bool hierarchical) {
  if (hierarchical) return sm_share(sys, kA2aOverlapSms);
  const GpuEfficiency& e = sys.gpu.efficiency;
  if (ep.nodes() <= 1) return sm_share(sys, e.nccl_p2p_ctas_nvlink.value);
  const double network = e.nccl_ctas_network.value;
  return network > 0 ? sm_share(sys, std::exp2(std::ceil(std::log2(network)))) : 0.0;
}

/// CUDA streams Transformer Engine's GroupedLinear (Megatron-Core's TEGroupedMLP) spreads
/// its experts' GEMMs over, one cuBLAS GEMM per expert round-robin: at most 4 run at once
/// (transformer_engine/common/util/multi_stream.cpp, num_compute_streams = 4, TE v2.9;
/// gemm.h num_streams = 4 in v1.9-v2.4; the CUTLASS grouped GEMM of later releases is
/// opt-in, NVTE_USE_CUTLASS_GROUPED_GEMM).
constexpr int64_t kTeGroupedGemmStreams = 4;

/// The `local` experts' GEMMs of one kind: PyTorch's grouped matmul is one kernel over all
/// of them (a batched GEMM); Transformer Engine runs them four at a time, so each round's
/// tiles fill the SMs only as far as four experts' tiles do.
double expert_gemms(const Ctx& c, int64_t m, int64_t n, int64_t k, DType dt, int64_t local) {
  if (c.pytorch || local <= kTeGroupedGemmStreams) return c.cost.gemm(m, n, k, dt, local).value;
  const int64_t rounds = local / kTeGroupedGemmStreams, rest = local % kTeGroupedGemmStreams;
  return dbl(rounds) * c.cost.gemm(m, n, k, dt, kTeGroupedGemmStreams).value +
         (rest > 0 ? c.cost.gemm(m, n, k, dt, rest).value : 0.0);
}

double gemm_fwd_bwd(const Ctx& c, const Op& op, double& bwd_out, double& wgrad_out, double& flops_out) {
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
  auto run = [&](int64_t gm, int64_t gn, int64_t gk) {
    return op.expert ? expert_gemms(c, gm, gn, gk, dt, batch) : c.cost.gemm(gm, gn, gk, dt, batch).value;
  };
  double f = run(m, n, k);
  // Backward: input gradient [m x k] = dY [m x n] W^T, weight gradient [k x n] = X^T dY;
  // a frozen weight needs only the first.
  wgrad_out = op.frozen ? 0.0 : run(k, n, m);
  bwd_out = run(m, k, n) + wgrad_out;
  flops_out = 2.0 * dbl(m) * dbl(n) * dbl(k) * dbl(batch);
  if (dt == DType::fp8 && c.fp8_block_rate > 0) {
    // Block-scaled FP8 (1x128 activation, 128x128 weight tiles): the forward, input- and
    // weight-gradient GEMMs (the same FLOPs each) at the blockwise kernels' measured rate.
    const double floor = flops_out / c.fp8_block_rate;
    const double dgrad = std::max(bwd_out - wgrad_out, floor);
    f = std::max(f, floor);
    if (!op.frozen) wgrad_out = std::max(wgrad_out, floor);
    bwd_out = dgrad + wgrad_out;
  }
  if (dt == DType::fp8) {
    const double mk = dbl(m) * dbl(k) * dbl(batch), mn = dbl(m) * dbl(n) * dbl(batch), kn = dbl(k) * dbl(n) * dbl(batch);
    if (c.pytorch) {
      // torchao Float8Linear (torchtitan's fp8): each of the three GEMMs casts both of its
      // bf16 operands with dynamic tensorwise scales (read 2 B, write 1 B per element).
      f += c.cost.memory_bound(Bytes((mk + kn) * 3.0)).value;
      bwd_out += c.cost.memory_bound(Bytes((mn + kn) * 3.0)).value;
      if (!op.frozen) {
        const double w = c.cost.memory_bound(Bytes((mk + mn) * 3.0)).value;
        wgrad_out += w;
        bwd_out += w;
      }
    } else {
      // Transformer Engine (Megatron-LM, NeMo): the input is cast once in the forward and
      // the output gradient once in the backward, each by a fused cast-transpose kernel that
      // reads 2 B and writes the fp8 copy and its transpose (1 B each) for the other GEMM
      // (te.pytorch Linear: fp8_cast_transpose_fused on the input,
      // fp8_cast_transpose_bgrad_fused on grad_output); no transpose when no weight
      // gradient needs it. The fp8 weights are cast once per step and cached over the
      // microbatches (is_first_microbatch; see fp8_weight_cast_bytes). Block scaling
      // quantizes in separate passes (kBlockwiseCastBytes).
      const double per = c.fp8_blockwise ? kBlockwiseCastBytes * (op.frozen ? 3.0 / 4.0 : 1.0) : (op.frozen ? 3.0 : 4.0);
      f += c.cost.memory_bound(Bytes(mk * per)).value;
      bwd_out += c.cost.memory_bound(Bytes(mn * per)).value;
    }
  }
  if (op.adapter_rank > 0) {
    // LoRA adapters in 16-bit beside the base GEMM: A [k x r] then B [r x out], the wide
    // side split over tensor parallel ranks like the base weight. Their GEMMs are thin
    // (r of 8 to 64): reading X and writing the wide side bound them, not FLOPs, and the
    // smallest sit at the kernel launch floor.
    const int64_t r = op.adapter_rank;
    const int64_t out = std::max<int64_t>(1, (op.split == GemmSplit::column ? op.adapter_out * n / op.n : op.adapter_out));
    const DType a = DType::bf16;
    f += c.cost.gemm(m, r, k, a, batch).value + c.cost.gemm(m, out, r, a, batch).value;
    // Backward: through B (input and weight gradient), then through A (both again).
    const double awgrad = c.cost.gemm(r, out, m, a, batch).value + c.cost.gemm(k, r, m, a, batch).value;
    wgrad_out += awgrad;
    bwd_out += c.cost.gemm(m, r, out, a, batch).value + c.cost.gemm(m, k, r, a, batch).value + awgrad;
    flops_out += 2.0 * dbl(m) * dbl(r) * dbl(k + out) * dbl(batch);
  }
  return f;
}

/// A matrix multiply (or the router's): its forward, input and weight gradients, and
/// the recompute the policy reruns. `mm_count` counts the block's matrix multiplies for
/// op-level checkpointing.
void add_gemm_op(const Ctx& c, const Op& op, LayerCost& lc, int64_t& mm_count) {
  double bwd = 0, wgrad = 0, flops = 0;
  const double f = gemm_fwd_bwd(c, op, bwd, wgrad, flops);
  lc.fwd += f;
  lc.bwd += bwd;
  lc.wgrad += wgrad;
  lc.fwd_flops += flops;
  if (c.rc == Recompute::full) {
    lc.recompute += c.rc_fraction * f;
    lc.recompute_flops += c.rc_fraction * flops;
  } else if (c.rc == Recompute::selective && c.pytorch) {
    // Op-level checkpointing recomputes the matrix multiplies whose outputs it did
    // not save.
    const double rerun = 1.0 - op_sac_saved_share(op, mm_count);
    lc.recompute += rerun * f;
    lc.recompute_flops += rerun * flops;
  } else if (c.rc == Recompute::selective && (op.rerun & c.t.recompute_modules)) {
    lc.recompute += f;
    lc.recompute_flops += flops;
  }
}

/// Context parallelism's part of an attention op of shape `a` whose kernels take `f`
/// forward and `bw` backward: the keys and values it exchanges, the share of the SMs
/// that exchange holds, and the merge of the blocks' partial outputs.
void add_context_parallel(const Ctx& c, const Op& op, const AttentionShape& a, double f, double bw, LayerCost& lc) {
  const double tp = dbl(c.t.tp);
  if (c.t.cp > 1 && c.pytorch) {
    // PyTorch's context parallel (torch.distributed.tensor.experimental._attention,
    // late 2024, torchtitan's default "allgather" rotation): K and V, already repeated
    // to the query heads (torchtitan's repeat_kv precedes SDPA), are all-gathered over
    // the CP group once per forward, issued before the first (local, causal) block and
    // waited on after it, so only that block, 1/cp of the rank's attention under the
    // default round-robin load balancing, hides the gather. The backward gathers them
    // again behind its own first block and sends each block's key and value gradients
    // around the ring in fp32, the last wait exposed; full recompute reruns the
    // forward's gather.
    const double shard = c.tokens * dbl(a.heads) * dbl(op.qk_dim + op.v_dim);
    const double gather = c.cost.collective(CollectiveKind::all_gather, Bytes(shard * 2.0 * dbl(c.t.cp)), c.g.cp).value;
    const double grads = c.cost.p2p(Bytes(shard * 4.0), c.g.cp.nodes() > 1).value;
    const double exposed_f = std::max(0.0, gather - f / dbl(c.t.cp));
    const double exposed_b = std::max(0.0, gather - bw / dbl(c.t.cp));
    const double regather = c.rc == Recompute::full ? c.rc_fraction : 0.0;
    lc.cp_fwd += gather;
    lc.cp_bwd += (1.0 + regather) * gather + dbl(c.t.cp - 1) * grads;
    lc.cp_exposed_fwd += exposed_f;
    lc.cp_exposed_bwd += exposed_b + grads + regather * exposed_f;
    // The first block computes on the SMs the gather leaves.
    const double share = nccl_sm_share(*c.sys, c.g.cp, shard * 2.0 * dbl(c.t.cp), false);
    lc.fwd += (gather - exposed_f) * share;
    lc.bwd += (gather - exposed_b) * share;
    if (regather > 0) lc.recompute += regather * (gather - exposed_f) * share;
    lc.cp_slowed += (1.0 + regather) * (gather - exposed_f) * share + (gather - exposed_b) * share;
  } else if (c.t.cp > 1) {
    // Ring attention: cp-1 steps each passing this rank's K and V chunk, behind the
    // blocks of attention; the backward passes K, V and their gradients.
    const double kv_bytes = c.tokens * dbl(op.kv_heads * (op.qk_dim + op.v_dim)) / tp * 2.0;
    const bool cross = c.g.cp.nodes() > 1;
    const double step = c.cost.p2p(Bytes(kv_bytes), cross).value;
    lc.cp_fwd += dbl(c.t.cp - 1) * step;
    lc.cp_bwd += 2.0 * dbl(c.t.cp - 1) * step;
    const double ring_f = dbl(c.t.cp - 1) * step, ring_b = 2.0 * dbl(c.t.cp - 1) * step;
    lc.cp_exposed_fwd += std::max(0.0, ring_f - f);
    lc.cp_exposed_bwd += std::max(0.0, ring_b - bw);
    // The attention blocks compute on the SMs the ring's sends and receives leave.
    const double share = nccl_sm_share(*c.sys, c.g.cp, kv_bytes, true);
    lc.fwd += std::min(ring_f, f) * share;
    lc.bwd += std::min(ring_b, bw) * share;
    lc.cp_slowed += (std::min(ring_f, f) + std::min(ring_b, bw)) * share;
  }
  if (c.t.cp > 1) {
    // Each later ring step rescales and adds its partial output into the running one
    // with the log-sum-exps (the online-softmax merge of blockwise attention). A fused
    // merge (Transformer Engine) reads the fp32 accumulator and the 16-bit partial and
    // writes the accumulator: 10 bytes per output element. PyTorch's context parallel
    // runs it as eager ops on fp32 copies: convert the partial (2 + 4), subtract
    // (4 + 4 + 4), scale by the sigmoid of the log-sum-exp difference (4 + 4 + 4) and
    // subtract again (4 + 4 + 4): 42 bytes. The backward accumulates the query gradient
    // the same way and the key and value gradients of the chunk it holds: twice that.
    const double per_element = c.pytorch ? 42.0 : 10.0;
    const double merge_bytes = dbl(c.t.cp - 1) * c.tokens * dbl(a.heads) * dbl(op.v_dim) * per_element;
    const double merge = c.cost.memory_bound(Bytes(merge_bytes)).value;
    lc.fwd += merge;
    lc.bwd += 2.0 * merge;
    if (c.rc == Recompute::full) lc.recompute += c.rc_fraction * merge;
  }
}

/// The attention core: one problem per document, and under context parallelism the
/// exchange of keys and values and the merge of partial outputs.
void add_attention_op(const Ctx& c, const Op& op, LayerCost& lc) {
  // One attention problem per document: a packed sequence's documents each attend
  // within themselves (one varlen kernel over cu_seqlens, each document a causal
  // problem of its own length), a context-parallel rank holding 1/cp of every one.
  // The kernel runs the microbatch's documents as its batch; a fractional count of
  // documents (a mean length that does not divide the sequence) scales that call.
  const int64_t span = attention_span(c.t);
  const double docs = dbl(c.b) * dbl(c.s) / dbl(span);
  const int64_t batch = std::max<int64_t>(1, std::llround(docs));
  const double documents = docs / dbl(batch);
  AttentionShape a;
  a.batch = batch;
  a.heads = std::max<int64_t>(1, op.heads / c.t.tp);
  a.kv_heads = std::max<int64_t>(1, op.kv_heads / c.t.tp);
  a.q_len = std::max<int64_t>(1, span / c.t.cp);
  a.kv_len = span;
  a.qk_dim = op.qk_dim;
  a.v_dim = op.v_dim;
  a.causal = op.causal;
  a.kernel = attention_of(c.t);
  double f = documents * c.cost.attention(a, false).value;
  double bw = documents * c.cost.attention(a, true).value;
  double flops =
      documents * 2.0 * dbl(a.batch * a.heads) * dbl(a.q_len) * dbl(a.kv_len) * 0.5 * dbl(a.qk_dim + a.v_dim);
  if (c.window_share > 0 && span > c.m.sliding_window && a.kernel != AttentionKernel::unfused) {
    // A sliding window: a fused kernel visits only the key blocks inside each query's window
    // (FlashAttention's window_size; cuDNN's sliding-window mask), so a query attends to
    // mean_attended_keys of them, a non-causal problem that narrow. An unfused kernel
    // computes the whole score matrix and masks it, as without a window.
    AttentionShape w = a;
    w.kv_len = std::max<int64_t>(1, std::llround(mean_attended_keys(span, c.m.sliding_window)));
    w.causal = false;
    const double wf = documents * c.cost.attention(w, false).value;
    const double wb = documents * c.cost.attention(w, true).value;
    const double wflops = documents * 2.0 * dbl(w.batch * w.heads) * dbl(w.q_len) * dbl(w.kv_len) * dbl(w.qk_dim + w.v_dim);
    const double share = c.window_share;
    f = (1.0 - share) * f + share * wf;
    bw = (1.0 - share) * bw + share * wb;
    flops = (1.0 - share) * flops + share * wflops;
  }
  lc.fwd += f;
  lc.bwd += bw;
  lc.attn_fwd += f;
  lc.attn_bwd += bw;
  lc.fwd_flops += flops;
  const bool rerun = c.rc == Recompute::full ||
                     (c.rc == Recompute::selective && (c.pytorch ? a.kernel == AttentionKernel::unfused
                                                                 : (c.t.recompute_modules & kRecomputeCoreAttn) != 0));
  if (rerun) {
    // Megatron-LM's selective recompute reruns the attention core; op-level
    // checkpointing saves a fused attention's output instead (an unfused one reruns).
    const double share = c.rc == Recompute::full ? c.rc_fraction : 1.0;
    lc.recompute += share * f;
    lc.recompute_flops += share * flops;
  }
  add_context_parallel(c, op, a, f, bw, lc);
}

/// A memory-bound op (norm, activation, residual, dropout, rotary): its bytes over the
/// shard it runs on, forward and backward.
void add_memory_op(const Ctx& c, const Op& op, LayerCost& lc) {
  const double tp = dbl(c.t.tp);
  const double seq_div = c.t.sp ? tp : 1.0;
  double div = 1.0;
  switch (op.work) {
    case Shard::sequence: div = seq_div; break;
    case Shard::tensor: div = tp; break;
    case Shard::expert: div = tp / dbl(c.etp); break;
  }
  const double bytes = op.bytes_per_token * c.tokens / div;
  const double f = c.cost.memory_bound(Bytes(bytes)).value;
  lc.fwd += f;
  lc.bwd +=
      op.bwd_bytes_per_token >= 0 ? c.cost.memory_bound(Bytes(op.bwd_bytes_per_token * c.tokens / div)).value : 2.0 * f;
  if (c.rc == Recompute::full) lc.recompute += c.rc_fraction * f;
  else if (c.rc == Recompute::selective && c.pytorch) lc.recompute += f;  // rerun from saved outputs
  else if (c.rc == Recompute::selective && (op.rerun & c.t.recompute_modules)) lc.recompute += f;
}

/// The layer's tensor-parallel collectives.
void add_tp_collectives(const Ctx& c, bool moe_layer, LayerCost& lc) {
  // Tensor-parallel collectives: two per layer each way (attention and MLP blocks);
  // all-reduce, or reduce-scatter + all-gather with SP, of the b*s*h activations. Under
  // FP8 Transformer Engine gathers in FP8, one byte an element: the norm's output before
  // the QKV and FC1 GEMMs (LayerNormLinear: gather_along_first_dim of the FP8 ln_out), the
  // column-parallel inputs, and in the backward the row-parallel GEMMs' output gradient
  // (TE 1.9-1.13 layernorm_linear.py / linear.py / base.py grad_output_preprocess, 2.x with
  // the input quantizer); the reduce-scatters stay 16-bit.
  if (c.t.tp > 1) {
    const double act = c.tokens * dbl(c.m.hidden) * 2.0;
    const double gathered = c.gemm_dtype == DType::fp8 && !c.pytorch ? act / 2.0 : act;
    double one = 0;
    if (c.t.sp)
      one = c.cost.collective(CollectiveKind::reduce_scatter, Bytes(act), c.g.tp).value +
            c.cost.collective(CollectiveKind::all_gather, Bytes(gathered), c.g.tp).value;
    else
      one = c.cost.collective(CollectiveKind::all_reduce, Bytes(act), c.g.tp).value;
    const double blocks = moe_layer ? (c.etp > 1 ? 2.0 : 1.0) : 2.0;
    lc.tp_fwd = blocks * one;
    lc.tp_bwd = blocks * one * (c.rc == Recompute::full ? 1.0 + c.rc_fraction : 1.0);
  }
}

/// An MoE layer's expert-parallel dispatch and combine.
void add_ep_all_to_all(const Ctx& c, bool moe_layer, LayerCost& lc) {
  const double tp = dbl(c.t.tp);
  // Expert parallel: token dispatch and combine all-to-all, forward and backward.
  if (moe_layer && c.t.ep > 1) {
    const MoeSpec& e = *c.m.moe;
    // An all-to-all ends when its busiest rank has received its tokens (dispatch) and sent
    // their outputs back (combine): the rank with the most routed tokens moves moe_imbalance
    // times the mean.
    const double per_copy = c.tokens / tp * dbl(c.m.hidden) * 2.0 * c.opt.moe_imbalance;
    double a2a = c.cost.collective(CollectiveKind::all_to_all, Bytes(per_copy * dbl(e.top_k)), c.g.ep).value;
    const int64_t nodes = c.g.ep.nodes();
    if (nodes > 1 && c.hierarchical_ep) {
      // A hierarchical dispatcher (DeepSeek-V3 report, Sec. 3.2.2; DeepEP, HybridEP) sends a
      // token's copies across the network once per destination node, then fans them out
      // over NVLink inside the node; the two legs run at once, the slower one sets the time.
      // Nodes a token reaches: with top_k experts drawn uniformly over the EP group's nodes,
      // nodes x (1 - (1 - 1/nodes)^top_k) on average (occupancy of `nodes` bins by top_k
      // balls); node-limited routing (Sec. 2.1.2) caps it at topk_group nodes (groups per
      // node when the EP group spans fewer nodes than groups).
      double dests = dbl(nodes) * (1.0 - std::pow(1.0 - 1.0 / dbl(nodes), dbl(e.top_k)));
      if (e.n_group > 0 && e.topk_group > 0) {
        const int64_t group_reach = nodes <= e.n_group ? e.topk_group : e.topk_group * (nodes / e.n_group);
        dests = std::min(dests, dbl(group_reach));
      }
      const double network = c.cost.collective(CollectiveKind::all_to_all, Bytes(per_copy * dests), c.g.ep).value;
      Group node = c.g.ep;
      node.size = std::min(c.g.ep.per_node, c.g.ep.size);
      node.per_node = node.size;
      const double nvlink = c.cost.collective(CollectiveKind::all_to_all, Bytes(per_copy * dbl(e.top_k)), node).value;
      a2a = std::min(a2a, std::max(network, nvlink));
    }
    lc.ep_fwd = 2.0 * a2a;
    lc.ep_bwd = 2.0 * a2a * (c.rc == Recompute::full ? 1.0 + c.rc_fraction : 1.0);
  }
}

LayerCost layer_cost(const Ctx& c, const std::vector<Op>& ops, bool moe_layer) {
  LayerCost lc;
  int64_t mm_count = 0;  // op-level checkpointing counts the block's matrix multiplies
  for (const Op& op : ops) {
    const double fwd_before = lc.fwd, bwd_before = lc.bwd + lc.recompute;
    const double only_bwd_before = lc.bwd, rc_before = lc.recompute, flops_before = lc.fwd_flops;
    switch (op.kind) {
      case OpKind::gemm:
      case OpKind::router: add_gemm_op(c, op, lc, mm_count); break;
      case OpKind::attention: add_attention_op(c, op, lc); break;
      default: add_memory_op(c, op, lc); break;
    }
    if (op.moe_block) {
      lc.moe_block_fwd += lc.fwd - fwd_before;
      lc.moe_block_bwd += lc.bwd + lc.recompute - bwd_before;
    }
    if (c.parts)
      c.parts->push_back({c.block, op.name, 0, lc.fwd - fwd_before, lc.bwd - only_bwd_before, lc.recompute - rc_before,
                          lc.fwd_flops - flops_before, false});
  }
  add_tp_collectives(c, moe_layer, lc);
  add_ep_all_to_all(c, moe_layer, lc);
  return lc;
}

/// operator_times: a costed layer's collectives before overlap, as rows of its block.
void record_collectives(const Ctx& c, const LayerCost& lc) {
  if (!c.parts) return;
  const auto comm = [&](const char* name, double f, double b) {
    if (f + b > 0) c.parts->push_back({c.block, name, 0, f, b, 0, 0, true});
  };
  comm("tp_collectives", lc.tp_fwd, lc.tp_bwd);
  comm("cp_exchange", lc.cp_fwd, lc.cp_bwd);
  comm("ep_all_to_all", lc.ep_fwd, lc.ep_bwd);
}

}  // namespace

double pcie_bytes_per_s(const SystemSpec& sys) {
  return sys.pcie_gbps_per_gpu.value_or(sys.gpu.pcie_bw_unidir_gbps) * 1e9;
}

/// Bytes per parameter a fused optimizer step reads and writes: AdamW reads the fp32
/// gradient, master weight, m and v (16 B) and writes master, m, v (12 B) and the bf16
/// weight (2 B); SGD and Lion have one moment (22 B); 8-bit Adam one-byte moments
/// (18 B); Adafactor's factored moments are negligible (14 B). The gradient it reads is
/// fp32 whatever the reduction dtype: Megatron's optimizers step on fp32 copies of 16-bit
/// gradients (main_param.grad = model_grad.float()).
double optimizer_traffic(Optimizer o, bool bf16_moments) {
  // BF16 moments read and write 2 B less per moment.
  const double saved = bf16_moments ? 4.0 : 0.0;
  switch (o) {
    case Optimizer::adamw: return 30.0 - 2.0 * saved;
    case Optimizer::sgd:
    case Optimizer::lion: return 22.0 - saved;
    case Optimizer::adam8bit: return 18.0;
    case Optimizer::adafactor: return 14.0;
  }
  return 30.0;
}

double optimizer_step_seconds(const CostModel& cost, const SystemSpec& sys, double params, Optimizer o,
                              bool bf16_moments) {
  if (params <= 0) return 0.0;
  const double t = cost.memory_bound(Bytes(params * optimizer_traffic(o, bf16_moments))).value;
  const double share = sys.gpu.efficiency.optimizer_stream.value;
  return share > 0 ? t / share : t;
}

double dp_bucket_elems(const TrainingPlan& t, int64_t dp) {
  // PyTorch FSDP reduces per wrapped unit, a block, and DDP's 25 MB buckets are smaller
  // than a layer: one bucket a layer either way (the cap in grad_buckets).
  if (framework_of(t) == Framework::pytorch) return 1.0;
  return std::max(40e6, 1e6 * dbl(dp));
}

GradBuckets grad_buckets(double params, double embedding, double bucket_elems, int64_t layers) {
  GradBuckets b;
  const double cap = static_cast<double>(std::max<int64_t>(1, layers));
  embedding = std::clamp(embedding, 0.0, std::max(0.0, params));
  if (embedding <= 0) {
    b.count = static_cast<int64_t>(std::max(1.0, std::min(cap, std::ceil(params / bucket_elems))));
    b.each = b.last = params / static_cast<double>(b.count);
    return b;
  }
  // The layers' parameters fill whole buckets; what is left joins the embedding's.
  const double others = params - embedding;
  const double full = std::min(cap, std::floor(others / bucket_elems));
  b.count = static_cast<int64_t>(full) + 1;
  b.each = full > 0 ? (full == cap ? others / full : bucket_elems) : 0.0;
  b.last = params - b.each * full;
  return b;
}

double fp8_gemm_weight_params(const LayerParams& lp, int64_t tp) {
  return dbl(lp.attention + lp.dense_mlp + lp.shared_experts) / dbl(tp);
}

double fp8_weight_cast_bytes(const TrainingPlan& t, const LayerParams& lp) {
  if (t.precision != DType::fp8 || framework_of(t) == Framework::pytorch) return 0.0;
  const int64_t etp = t.etp.value_or(1);
  const double dense = fp8_gemm_weight_params(lp, t.tp);
  const double routed = dbl(lp.routed_experts) / dbl(t.ep * etp);
  if (!fp8_params(t)) {
    // Transformer Engine casts each fp8 GEMM weight (read 2 B, write the fp8 copy and its
    // transpose, 1 B each) on the first microbatch and reuses it for the rest of the step.
    return (dense + routed) * 4.0;
  }
  // FP8 parameters: the optimizer casts its fp32 master shard to FP8 (read 4 B, write 1;
  // Transformer Engine's cast_master_weights_to_fp8), the shards are gathered, and each
  // weight's transpose is made once for the step's backward passes (read 1, write 1).
  const int zero = t.zero.value_or(0);
  const double dense_shards = zero >= 1 ? dbl(t.dp * t.cp) : 1.0;
  const double expert_shards = zero >= 1 ? dbl(std::max<int64_t>(1, t.tp * t.cp * t.dp / (t.ep * etp))) : 1.0;
  return dense * (2.0 + 5.0 / dense_shards) + routed * (2.0 + 5.0 / expert_shards);
}

namespace {

/// Dense parameters of one multi-token prediction module on its rank (tensor-parallel
/// weights over tp): its block's non-expert weights, eh_proj and norms.
double mtp_dense_params(const ModelSpec& m, const TrainingPlan& t) {
  const LayerParams lp = layer_params(m, m.layers - 1);
  const double h = dbl(m.hidden);
  return (dbl(lp.attention) + dbl(lp.dense_mlp) + dbl(lp.shared_experts) + 2.0 * h * h) / dbl(t.tp) +
         dbl(lp.norms + lp.router) + dbl(mtp_extra_params(m)) - 2.0 * h * h;
}

}  // namespace

bool userbuffers_tp_overlap(const SystemSpec& sys, const TrainingPlan& t) {
  return framework_of(t) == Framework::megatron && sys.gpu.arch != GpuArch::ampere && sys.gpu.nvlink_generation > 0 &&
         t.tp > 1 && t.sp && t.tp <= sys.gpus_per_node;
}

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

namespace {

Ctx make_ctx(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t, const CostModel& cost,
             const StepOptions& opt) {
  Ctx c{m, t, cost, opt, layout_groups(t, sys.gpus_per_node)};
  c.sys = &sys;
  c.b = t.micro_batch.value_or(1);
  c.s = t.seq_len;
  c.tokens = dbl(c.b) * dbl(c.s) / dbl(t.cp);
  c.gemm_dtype = t.precision == DType::fp8 ? DType::fp8 : DType::bf16;
  c.rc = t.recompute.value_or(Recompute::none);
  c.rc_fraction = t.recompute_fraction;
  c.pytorch = framework_of(t) == Framework::pytorch;
  c.etp = t.etp.value_or(1);
  // The blockwise kernels' rate at training sizes as a fraction of the dense FP8 peak
  // (data/gpus gemm_fp8_block_large_m, DeepGEMM's published table), else at serving sizes.
  const GpuEfficiency& ge = sys.gpu.efficiency;
  const double block = ge.gemm_fp8_block_large_m.value > 0 ? ge.gemm_fp8_block_large_m.value : ge.gemm_fp8_block.value;
  c.fp8_blockwise = t.precision == DType::fp8 && t.fp8_blockwise.value_or(false);
  c.hierarchical_ep = dispatcher_of(t, m) == MoeDispatcher::hierarchical;
  if (t.ep > 1) c.a2a_share = a2a_sm_share(sys, c.g.ep, c.hierarchical_ep);
  if (c.fp8_blockwise && block > 0) c.fp8_block_rate = sys.gpu.peak(DType::fp8).value * block;
  return c;
}

KindCosts cost_kinds(const Ctx& c, const LoweringOptions& lo) {
  KindCosts k;
  const LayerKinds lk = layer_kinds(c.m);
  for (int kind = 0; kind < 2; ++kind) {
    k.count[kind] = lk.count[kind];
    if (lk.first[kind] < 0) continue;
    Ctx ck = c;
    ck.block = kind == 1 ? "moe_layer" : "layer";
    if (lk.sliding[kind] > 0) ck.window_share = dbl(lk.sliding[kind]) / dbl(lk.count[kind]);
    k.kinds[kind] = layer_cost(ck, lower_layer(c.m, lk.first[kind], lo), kind == 1);
    record_collectives(ck, k.kinds[kind]);
    k.have[kind] = true;
  }
  Ctx head_ctx = c;
  head_ctx.rc = Recompute::none;
  // The head's and embedding's collectives are not part of the step (analytical_step
  // charges their computation only), so they get no rows.
  head_ctx.block = "head";
  k.head = layer_cost(head_ctx, lower_head(c.m, lo), false);
  head_ctx.block = "embedding";
  k.emb = layer_cost(head_ctx, lower_embedding(c.m, lo), false);
  if (c.m.mtp_layers > 0) {
    // One multi-token prediction module: its block under the layers' recompute policy, then
    // the shared head again.
    LayerCost& x = k.mtp;
    Ctx mtp_ctx = c;
    mtp_ctx.block = "mtp";
    x = layer_cost(mtp_ctx, lower_mtp(c.m, lo), c.m.is_moe_layer(c.m.layers - 1));
    record_collectives(mtp_ctx, x);
    x.fwd += k.head.fwd;
    x.bwd += k.head.bwd;
    x.wgrad += k.head.wgrad;
    x.fwd_flops += k.head.fwd_flops;
  }
  k.fwd_flops_per_token = forward_flops_per_token(c.m, attention_span(c.t));
  return k;
}

}  // namespace

std::vector<OperatorTime> operator_times(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t,
                                         const CostModel& cost, const StepOptions& opt) {
  std::vector<OperatorTime> rows;
  Ctx c = make_ctx(m, sys, t, cost, opt);
  c.parts = &rows;
  const KindCosts k = cost_kinds(c, lowering_options(m, t));
  for (OperatorTime& r : rows) {
    if (r.block == "layer") r.count = k.count[0];
    else if (r.block == "moe_layer") r.count = k.count[1];
    else if (r.block == "head") r.count = 1 + m.mtp_layers;  // each prediction module runs the shared head again
    else if (r.block == "mtp") r.count = m.mtp_layers;
    else r.count = 1;
  }
  return rows;
}

PipelineCosts pipeline_costs(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t, const CostModel& cost,
                             const StepOptions& opt) {
  PipelineCosts pc;
  const Ctx c = make_ctx(m, sys, t, cost, opt);
  const LoweringOptions lo = lowering_options(m, t);
  const KindCosts k = cost_kinds(c, lo);
  const int64_t vpp = t.vpp.value_or(1);
  const TpExposure tpx = tp_exposure(sys, t, opt);
  ShardContext sc;
  sc.micro_batch = c.b;
  sc.seq_len = t.seq_len;
  sc.tp = t.tp;
  sc.cp = t.cp;
  sc.etp = c.etp;
  sc.sp = t.sp;
  sc.recompute = c.rc;
  sc.op_sac = c.pytorch;
  sc.recompute_modules = t.recompute_modules;
  ShardContext sc_none = sc;
  sc_none.recompute = Recompute::none;
  double act_kind[2] = {0, 0};
  for (int kind = 0; kind < 2; ++kind) {
    if (!k.have[kind]) continue;
    int64_t id = 0;
    while ((m.is_moe_layer(id) ? 1 : 0) != kind) ++id;
    const auto ops = lower_layer(m, id, lo);
    const double kept = layer_activation_bytes(ops, lo, m, sc);
    act_kind[kind] = c.rc == Recompute::full
                         ? t.recompute_fraction * kept + (1.0 - t.recompute_fraction) * layer_activation_bytes(ops, lo, m, sc_none)
                         : kept;
  }
  const double emb_act = layer_activation_bytes(lower_embedding(m, lo), lo, m, sc_none);
  const bool fp8_weights = fp8_params(t);
  const double head_act = layer_activation_bytes(lower_head(m, lo), lo, m, sc_none);

  const int64_t stages = t.pp * vpp;
  const std::vector<int64_t> counts = t.stage_layers.empty() ? split_layers(m.layers, stages, m.mtp_layers) : t.stage_layers;
  const bool dual = t.schedule == Schedule::dualpipe;
  const bool pair_layers = ep_overlap_on(t);
  const bool lora = trains_adapters(t.mode);
  const LoraSpec lora_spec = lora ? resolved_lora(t) : LoraSpec{};
  pc.chunks.assign(static_cast<size_t>(t.pp), std::vector<ChunkCost>(static_cast<size_t>(vpp)));
  std::vector<ChunkCost> by_stage(static_cast<size_t>(stages));
  int64_t next = 0;
  for (int64_t j = 0; j < stages; ++j) {
    ChunkCost& ch = by_stage[static_cast<size_t>(j)];
    for (int64_t n = 0; n < counts[static_cast<size_t>(j)]; ++n, ++next) {
      const LayerCost& lc = k.of(m, next);
      const double cp_f = lc.cp_exposed_fwd;
      const double cp_b = lc.cp_exposed_bwd;
      ch.fwd_s += lc.fwd + tpx.exposed_fwd(lc) + cp_f + lc.ep_fwd;
      ch.bwd_s += lc.bwd - lc.wgrad + lc.recompute + tpx.exposed_bwd(lc) + cp_b + lc.ep_bwd;
      ch.wgrad_s += lc.wgrad;
      ch.ep_s += lc.ep_fwd + lc.ep_bwd;
      if (pair_layers && m.is_moe_layer(next))
        ch.ep_pair_saved_s += ep_overlap_pair(lc, c.a2a_share).saved;
      ch.activation_bytes += act_kind[m.is_moe_layer(next) ? 1 : 0];
      ch.weight_cast_s += cost.memory_bound(Bytes(fp8_weight_cast_bytes(t, layer_params(m, next)))).value;
      if (lora) {
        // Only the adapters have gradients and optimizer state.
        const bool moe = m.is_moe_layer(next);
        ch.params += lora_layer_params(m, lora_spec, moe, false) / dbl(t.tp);
        ch.expert_params += lora_layer_params(m, lora_spec, moe, true) / dbl(t.ep * c.etp);
      } else {
        const LayerParams lp = layer_params(m, next);
        ch.params += fp8_gemm_weight_params(lp, t.tp) + dbl(lp.norms + lp.router);
        ch.expert_params += dbl(lp.routed_experts) / dbl(t.ep * c.etp);
        if (fp8_weights) ch.fp8_params += fp8_gemm_weight_params(lp, t.tp);
      }
      ++ch.layers;
    }
    if (j == 0) {
      ch.fwd_s += k.emb.fwd;
      ch.bwd_s += k.emb.bwd - k.emb.wgrad;
      ch.wgrad_s += k.emb.wgrad;
      ch.activation_bytes += emb_act;
      if (!lora) {
        ch.embedding_params = input_embedding_params_per_rank(m, dbl(t.tp));
        ch.params += ch.embedding_params;
      }
    }
    if (j == stages - 1) {
      ch.fwd_s += k.head.fwd;
      ch.bwd_s += k.head.bwd - k.head.wgrad;
      ch.wgrad_s += k.head.wgrad;
      ch.activation_bytes += head_act;
      if (!lora) ch.params += dbl(final_norm_params(m));
      if (!lora && (!m.tied_embeddings || t.pp > 1)) ch.params += dbl(m.vocab * m.hidden) / dbl(t.tp);
      if (m.mtp_layers > 0) {
        const double n = dbl(m.mtp_layers);
        const LayerCost& x = k.mtp;
        ch.fwd_s += n * (x.fwd + tpx.exposed_fwd(x) + x.ep_fwd);
        ch.bwd_s += n * (x.bwd - x.wgrad + x.recompute + tpx.exposed_bwd(x) + x.ep_bwd);
        ch.wgrad_s += n * x.wgrad;
        ch.ep_s += n * (x.ep_fwd + x.ep_bwd);
        ch.activation_bytes += n * (layer_activation_bytes(lower_mtp(m, lo), lo, m, sc) + head_act);
        if (!lora) {
          ch.params += n * mtp_dense_params(m, t);
          if (t.pp > 1 && !dual) ch.params += dbl(m.vocab * m.hidden) / dbl(t.tp);
          ch.expert_params += n * dbl(layer_params(m, m.layers - 1).routed_experts) / dbl(t.ep * c.etp);
        }
      }
    }
  }
  if (dual) {
    // Rank r runs stage r of the forward direction and stage pp-1-r of the reverse one.
    pc.chunks.assign(static_cast<size_t>(t.pp), std::vector<ChunkCost>(2));
    for (int64_t r = 0; r < t.pp; ++r) {
      pc.chunks[static_cast<size_t>(r)][0] = by_stage[static_cast<size_t>(r)];
      pc.chunks[static_cast<size_t>(r)][1] = by_stage[static_cast<size_t>(t.pp - 1 - r)];
    }
  } else {
    for (int64_t j = 0; j < stages; ++j)
      pc.chunks[static_cast<size_t>(j % t.pp)][static_cast<size_t>(j / t.pp)] = by_stage[static_cast<size_t>(j)];
  }
  if (t.pp > 1) {
    pc.p2p_bytes = c.tokens * dbl(m.hidden) * 2.0 / (t.sp ? dbl(t.tp) : 1.0);
    pc.p2p_cross_node = c.g.pp_cross_node;
    pc.p2p_s = cost.p2p(Bytes(pc.p2p_bytes), pc.p2p_cross_node).value;
  }
  return pc;
}

StepBreakdown analytical_step(const ModelSpec& m, const SystemSpec& sys, const TrainingPlan& t,
                              const CostModel& cost, const StepOptions& opt, EvalCache* cache) {
  StepBreakdown out;
  const Ctx c = make_ctx(m, sys, t, cost, opt);
  const int64_t vpp = t.vpp.value_or(1);
  const int64_t mb = num_microbatches(t);
  const int zero = t.zero.value_or(0);
  const bool fp8 = fp8_params(t);
  KindCosts kc_local;
  const KindCosts* kcp = nullptr;
  if (cache) {
    const LoweringOptions lo = lowering_options(m, t);
    const StepKey key{&m, &cost, t.tp, t.cp, c.etp, t.ep, c.b, t.seq_len, attention_span(t), sys.gpus_per_node, t.sp,
                      static_cast<int>(c.rc), c.rc == Recompute::full ? t.recompute_fraction : 1.0, t.recompute_modules,
                      static_cast<int>(t.precision), static_cast<int>(attention_of(t)), static_cast<int>(framework_of(t)),
                      opt.tp_overlap.value_or(-1.0), opt.moe_imbalance, trains_adapters(t.mode) ? std::max<int64_t>(1, lo.lora_rank) : 0,
                      lo.lora_targets, t.fp8_blockwise.value_or(false), lo.moe_permute_passes, t.eager_elementwise,
                      c.hierarchical_ep, lo.compiled_loss};
    auto& entries = cache->impl().step;
    auto it = entries.find(key);
    if (it == entries.end()) it = entries.emplace(key, cost_kinds(c, lo)).first;
    kcp = &it->second;
  } else {
    kc_local = cost_kinds(c, lowering_options(m, t));
    kcp = &kc_local;
  }
  const KindCosts& kc = *kcp;
  const LayerCost* kinds = kc.kinds;
  const bool* have = kc.have;
  const LayerCost& head = kc.head;
  const LayerCost& emb = kc.emb;

  std::vector<RankKinds> rank_scratch;
  const std::vector<RankKinds>& ranks = rank_kinds(m, t, cache, rank_scratch);
  const LayerKinds lk = layer_kinds(m);
  const TpExposure tpx = tp_exposure(sys, t, opt);
  const bool blocking_p2p = vpp == 1 && (t.schedule == Schedule::one_f_one_b || t.schedule == Schedule::gpipe);
  double pc_p2p = 0;
  if (t.pp > 1) {
    const double act = c.tokens * dbl(m.hidden) * 2.0 / (t.sp ? dbl(t.tp) : 1.0);
    pc_p2p = cost.p2p(Bytes(act), c.g.pp_cross_node).value;
  }
  double crit_p2p = 0, sum_p2p = 0;
  double worst = -1, worst_key = -1, sum_stage = 0;
  struct StageTime {
    double fwd, bwd, compute, recompute, tp, cp, ep, tp_total, cp_total, ep_total, params, fp8_params, wgrad, cp_slowed, ep_slowed;
    double embedding;  ///< of `params`, the input embedding's (the first stage's)
  } crit{}, first{};
  for (int64_t r = 0; r < t.pp; ++r) {
    StageTime st{};
    double params = 0;
    // Every layer of a kind costs the same: each kind counts once times its layers.
    const RankKinds& rk = ranks[static_cast<size_t>(r)];
    for (int k = 0; k < 2; ++k) {
      if (rk.n[k] == 0) continue;
      const double n = dbl(rk.n[k]);
      const LayerCost& lc = kinds[k];
      const double cp_f = lc.cp_exposed_fwd;
      const double cp_b = lc.cp_exposed_bwd;
      st.fwd += n * (lc.fwd + tpx.exposed_fwd(lc) + cp_f + lc.ep_fwd);
      st.bwd += n * (lc.bwd + lc.recompute + tpx.exposed_bwd(lc) + cp_b + lc.ep_bwd);
      st.compute += n * (lc.fwd + lc.bwd);
      st.wgrad += n * lc.wgrad;
      st.recompute += n * lc.recompute;
      st.tp += n * (tpx.exposed_fwd(lc) + tpx.exposed_bwd(lc));
      st.cp += n * (cp_f + cp_b);
      st.ep += n * (lc.ep_fwd + lc.ep_bwd);
      st.tp_total += n * (lc.tp_fwd + lc.tp_bwd);
      st.cp_total += n * (lc.cp_fwd + lc.cp_bwd);
      st.ep_total += n * (lc.ep_fwd + lc.ep_bwd);
      st.cp_slowed += n * lc.cp_slowed;
      const LayerParams& lp = lk.params[k];
      params += n * (fp8_gemm_weight_params(lp, t.tp) + dbl(lp.norms + lp.router));
      if (fp8) st.fp8_params += n * fp8_gemm_weight_params(lp, t.tp);
    }
    // DualPipe's end ranks each hold the first stage of one direction and the last of the
    // other: both ends of the model.
    const bool dual = t.schedule == Schedule::dualpipe && t.pp > 1;
    if (r == 0 || (dual && r == t.pp - 1)) {
      st.fwd += emb.fwd;
      st.bwd += emb.bwd;
      st.compute += emb.fwd + emb.bwd;
      // The token embedding (vocab-parallel) and any replicated position table.
      st.embedding = input_embedding_params_per_rank(m, dbl(t.tp));
      params += st.embedding;
    }
    if (r == t.pp - 1 || (dual && r == 0)) {
      st.fwd += head.fwd;
      st.bwd += head.bwd;
      st.compute += head.fwd + head.bwd;
      params += dbl(final_norm_params(m));
      if (!m.tied_embeddings || (t.pp > 1 && !dual)) params += dbl(m.vocab * m.hidden) / dbl(t.tp);
      if (m.mtp_layers > 0) {
        // Multi-token prediction modules after the last layer (see training_memory).
        const double n = dbl(m.mtp_layers);
        const LayerCost& x = kc.mtp;
        st.fwd += n * (x.fwd + tpx.exposed_fwd(x) + x.ep_fwd);
        st.bwd += n * (x.bwd + x.recompute + tpx.exposed_bwd(x) + x.ep_bwd);
        st.compute += n * (x.fwd + x.bwd);
        st.wgrad += n * x.wgrad;
        st.recompute += n * x.recompute;
        st.tp += n * (tpx.exposed_fwd(x) + tpx.exposed_bwd(x));
        st.ep += n * (x.ep_fwd + x.ep_bwd);
        st.tp_total += n * (x.tp_fwd + x.tp_bwd);
        st.ep_total += n * (x.ep_fwd + x.ep_bwd);
        params += n * mtp_dense_params(m, t);
        if (t.pp > 1 && !dual) params += dbl(m.vocab * m.hidden) / dbl(t.tp);
      }
    }
    st.params = params;
    if (r == 0) first = st;
    const double p2p = blocking_p2p ? pc_p2p * ((r < t.pp - 1 ? 1.0 : 0.0) + (r > 0 ? 1.0 : 0.0)) : 0.0;
    const double total = st.fwd + st.bwd + p2p;
    sum_stage += total;
    sum_p2p += p2p;
    // DualPipe hides the all-to-all behind the other microbatch's computation: the rank that
    // limits it is the one with the most computation (plus what stays exposed).
    const double key = dual ? std::max(total - st.ep, st.ep) : total;
    if (key > worst_key) {
      worst_key = key;
      worst = total;
      crit = st;
      crit_p2p = p2p;
      out.slowest_stage = r;
    }
  }
  const double t_mb = worst;
  out.microbatch_s = t_mb - crit_p2p;  // pipeline transfers are reported as exposed_pp
  // Pipeline bubble (Narayanan et al. 2021, Sec. 2.2): (p-1)/v microbatch times when
  // stages are equal; with uneven stages the fill and drain pass once through every
  // stage but the slowest, whose steady state the m microbatch times already count.
  out.bubble_s = t.pp > 1 ? (sum_stage - worst - (sum_p2p - crit_p2p)) / dbl(vpp) : 0.0;
  if (t.schedule == Schedule::zb_h1 && t.pp > 1 && worst > 0) {
    // ZB-H1 (Qi et al. 2023): weight-gradient passes fill the drain, bubble
    // (p-1)(F + B - 2W) with B the whole backward, i.e. (p-1)(F + B_input - W).
    out.bubble_s *= std::max(0.0, worst - 2.0 * crit.wgrad) / worst;
  }
  double per_mb_scale = dbl(mb);
  if (ep_overlap_on(t) && crit.ep > 0) {
    // Megatron-Core's batch-level overlap: forwards paired with earlier microbatches'
    // backwards through the steady state; the warm-up forwards and the cool-down backwards
    // run alone with their all-to-all exposed. The critical rank's share of paired passes.
    const int64_t total = mb * vpp;
    const double paired = dbl(total - ep_overlap_warmup(t.pp, vpp, out.slowest_stage, mb)) / dbl(total);
    const double moe_layers = dbl(ranks[static_cast<size_t>(out.slowest_stage)].n[1]);
    const EpPair pair = ep_overlap_pair(kinds[1], c.a2a_share);
    out.microbatch_s -= paired * moe_layers * pair.saved;
    crit.compute += paired * moe_layers * pair.slowed;
    crit.ep_slowed += paired * moe_layers * pair.slowed;
    crit.ep -= paired * moe_layers * pair.ep_hidden;
  }
  if (t.schedule == Schedule::dualpipe && t.pp > 1) {
    // DualPipe: each microbatch crosses one of the rank's two chunks, so a microbatch costs
    // half the rank's two-chunk time; the all-to-all hides inside overlapped
    // forward-backward pairs; bubble (PP/2 - 1)(F&B + B - 3W) (DeepSeek-V3 report, Table 2).
    // The all-to-all hides behind the other microbatch's computation only as far as that
    // lasts (the report sizes both about equal, Sec. 3.2.1); beyond it, it is exposed.
    const PairedPasses pair = paired_passes(worst, crit.ep, c.a2a_share);
    const double exposed = pair.exposed, slowed = pair.slowed;
    const double f = crit.fwd / 2.0, b = crit.bwd / 2.0, w = crit.wgrad / 2.0, ep = (crit.ep - exposed) / 2.0;
    const double fb = f + b - ep + slowed / 2.0;
    out.microbatch_s = pair.seconds / 2.0;
    crit.compute += slowed;
    crit.ep_slowed += slowed;
    out.bubble_s = dbl(t.pp / 2 - 1) * std::max(0.0, fb + b - 3.0 * w);
    per_mb_scale = dbl(mb) / 2.0;
    crit.ep = exposed;
  }
  out.compute_s = crit.compute * per_mb_scale;
  out.recompute_s = crit.recompute * per_mb_scale;
  out.exposed_tp_s = crit.tp * per_mb_scale;
  out.exposed_cp_s = crit.cp * per_mb_scale;
  out.exposed_ep_s = crit.ep * per_mb_scale;
  out.total_tp_s = crit.tp_total * per_mb_scale;
  out.total_cp_s = crit.cp_total * per_mb_scale;
  out.total_ep_s = crit.ep_total * per_mb_scale;
  out.cp_slowed_s = crit.cp_slowed * per_mb_scale;
  out.ep_slowed_s = crit.ep_slowed * per_mb_scale;

  // Pipeline send/recv of one microbatch's boundary activations (and gradients).
  // Blocking schedules (Megatron-LM's 1F1B, GPipe) pay them on the compute stream: once
  // per forward on every stage but the last and once per backward on every stage but the
  // first, folded into the stage times above. Interleaved and zero-bubble schedules
  // overlap them; fill and drain cross every virtual stage boundary once each way.
  if (t.pp > 1) {
    out.total_pp_s = 2.0 * pc_p2p * dbl(mb * vpp);
    if (blocking_p2p) {
      out.exposed_pp_s = dbl(mb) * crit_p2p + (sum_p2p - crit_p2p) / dbl(vpp);
    } else {
      out.exposed_pp_s = 2.0 * dbl(t.pp * vpp - 1) * pc_p2p;
    }
  }

  // Data parallel: gradients and (ZeRO >= 1) parameters of the critical stage.
  const double g_bytes = grad_bytes(t);
  double expert_params = 0;
  const RankKinds& crit_rank = ranks[static_cast<size_t>(out.slowest_stage)];
  for (int k = 0; k < 2; ++k)
    expert_params += dbl(crit_rank.n[k]) * dbl(lk.params[k].routed_experts) / dbl(t.ep * c.etp);
  if (m.mtp_layers > 0 && out.slowest_stage == t.pp - 1)
    expert_params += dbl(m.mtp_layers) * dbl(layer_params(m, m.layers - 1).routed_experts) / dbl(t.ep * c.etp);
  double dense_params = crit.params;
  if (trains_adapters(t.mode)) {
    // Only the adapters train: their gradients are reduced and stepped; the frozen base
    // has neither gradients nor optimizer state.
    const LoraSpec l = resolved_lora(t);
    dense_params = expert_params = 0;
    for (int k = 0; k < 2; ++k) {
      dense_params += dbl(crit_rank.n[k]) * lora_layer_params(m, l, k == 1, false) / dbl(t.tp);
      expert_params += dbl(crit_rank.n[k]) * lora_layer_params(m, l, k == 1, true) / dbl(t.ep * c.etp);
    }
  }
  // Collective times of the dense and expert groups are summed first, then hidden once
  // behind the compute they overlap with.
  struct DpCost {
    double ag = 0, rs = 0;                // ZeRO-3: per layer, per microbatch
    double ag_first = 0, rs_last = 0;     // ZeRO-3: the first unit gathered, the last reduced
    double grads = 0, gather = 0, last = 0;  // ZeRO 0-2: per step
  } dp;
  // SM share of the collectives, weighted by their time (nccl_sm_share).
  double dp_share_time = 0, dp_time = 0;
  auto weigh = [&](double seconds, const Group& grp, double bytes) {
    dp_share_time += seconds * nccl_sm_share(sys, grp, bytes, false);
    dp_time += seconds;
  };
  const double stage_layers = std::max(1.0, dbl(crit_rank.layers()));
  // Buckets per chunk as the discrete-event engine splits them (dp_bucket_elems).
  const double bucket_elems = dp_bucket_elems(t, c.g.dp.size);
  const double chunk_params = (dense_params + expert_params) / dbl(vpp);
  const double chunk_layers = std::max(1.0, std::floor(stage_layers / dbl(vpp)));
  const int64_t dp_buckets = vpp * grad_buckets(chunk_params, 0.0, bucket_elems, static_cast<int64_t>(chunk_layers)).count;
  // One collective per bucket: an all-reduce (ZeRO 0) or a reduce-scatter of the gradients
  // and an all-gather of the parameters (ZeRO 1-2), for one bucket of `params` parameters
  // (`ag` 0 under ZeRO 0).
  auto bucket_seconds = [&](double params, double gather_bytes, const Group& grp, double& rs, double& ag) {
    if (zero == 0) {
      rs = cost.collective(CollectiveKind::all_reduce, Bytes(params * g_bytes), grp).value;
      ag = 0;
    } else {
      rs = cost.collective(CollectiveKind::reduce_scatter, Bytes(params * g_bytes), grp).value;
      ag = cost.collective(CollectiveKind::all_gather, Bytes(params * gather_bytes), grp).value;
    }
  };
  // Bytes a parameter moves in the parameter all-gathers: 16-bit, FP8 weights one byte.
  // `embedding`: of `params`, the input embedding's (in the stage's first chunk).
  double last_bucket = 0;  // parameters of the critical stage's largest last bucket
  auto dp_group_cost = [&](double params, double gather_bytes, const Group& grp, double embedding) {
    if (grp.size <= 1 || params <= 0) return;
    if (zero >= 3) {
      // ZeRO-3 / FSDP: every microbatch gathers each layer's weights for forward and
      // backward and reduce-scatters its gradients, prefetched behind layer compute.
      // The unit that holds the input embedding is the forward's first gather and the
      // backward's last reduction (torchtitan shards the token embedding with the model's
      // root up to July 2025 and as a unit of its own since, pytorch/torchtitan #1094;
      // llm-foundry's FSDP wraps each block, the embedding stays in the root): at least
      // the table, where that is more than a layer.
      const double layer = params / stage_layers;
      const double edge = std::max(layer, embedding);
      const double ag = cost.collective(CollectiveKind::all_gather, Bytes(layer * gather_bytes), grp).value;
      const double rs = cost.collective(CollectiveKind::reduce_scatter, Bytes(layer * g_bytes), grp).value;
      dp.ag += ag;
      dp.rs += rs;
      dp.ag_first += edge > layer ? cost.collective(CollectiveKind::all_gather, Bytes(edge * gather_bytes), grp).value : ag;
      dp.rs_last += edge > layer ? cost.collective(CollectiveKind::reduce_scatter, Bytes(edge * g_bytes), grp).value : rs;
      weigh(2.0 * ag, grp, layer * gather_bytes);
      weigh(rs, grp, layer * g_bytes);
      return;
    }
    // Megatron-LM DDP buckets of max(40M, 1M x dp) elements (at most one per layer), each
    // its own collective; the last one cannot overlap. The chunk holding the input
    // embedding ends with the embedding's bucket (grad_buckets).
    auto add = [&](double bucket, double n) {
      double rs = 0, ag = 0;
      bucket_seconds(bucket, gather_bytes, grp, rs, ag);
      dp.grads += rs * n;
      dp.gather += ag * n;
      weigh(rs * n, grp, bucket * g_bytes);
      if (ag > 0) weigh(ag * n, grp, bucket * gather_bytes);
      return rs + ag;
    };
    if (embedding <= 0) {
      last_bucket = std::max(last_bucket, params / dbl(dp_buckets));
      dp.last += add(params / dbl(dp_buckets), dbl(dp_buckets));
      return;
    }
    const double others = (params - embedding) / dbl(vpp);
    const int64_t per_chunk = dp_buckets / vpp;
    if (vpp > 1) add(others / dbl(per_chunk), dbl((vpp - 1) * per_chunk));
    const GradBuckets b = grad_buckets(others + embedding, embedding, bucket_elems, static_cast<int64_t>(chunk_layers));
    if (b.count > 1) add(b.each, dbl(b.count - 1));
    last_bucket = std::max(last_bucket, b.last);
    dp.last += add(b.last, 1.0);
  };
  // Bytes a dense parameter moves in the all-gathers, its FP8 weights one.
  auto dense_gather_bytes = [&](double params, double fp8_params) {
    return params > 0 ? param_gather_bytes(fp8, params, fp8_params, 0.0) / params : 2.0;
  };
  const double crit_embedding = trains_adapters(t.mode) ? 0.0 : crit.embedding;
  dp_group_cost(dense_params, dense_gather_bytes(dense_params, crit.fp8_params), c.g.dp, crit_embedding);
  dp_group_cost(expert_params, fp8 ? 1.0 : 2.0, c.g.dp_expert, 0.0);
  if (zero < 3 && c.g.dp.size > 1 && crit_embedding <= 0 && !trains_adapters(t.mode) && first.embedding > 0) {
    // The first stage's last bucket, the embedding's, reduces after the pipeline's last
    // backward whichever stage is the slowest.
    const GradBuckets b = grad_buckets((first.params - first.embedding) / dbl(vpp) + first.embedding, first.embedding,
                                       bucket_elems, static_cast<int64_t>(chunk_layers));
    if (b.last > last_bucket) {
      double rs = 0, ag = 0;
      bucket_seconds(b.last, dense_gather_bytes(first.params, first.fp8_params), c.g.dp, rs, ag);
      dp.last = std::max(dp.last, rs + ag);
    }
  }
  double dp_total = 0, dp_exposed = 0;
  if (zero >= 3 && t.pp > 1) {
    // Under pipeline parallelism the stage's parameters stay gathered across microbatches
    // and gradients reduce once (see training_memory): one gather behind the first
    // forward, one reduce-scatter behind the last backward.
    const double gather = stage_layers * dp.ag, reduce = stage_layers * dp.rs;
    dp_total = gather + reduce;
    dp_exposed = opt.overlap_dp ? std::max(dp.ag_first, gather - crit.fwd) + std::max(dp.rs_last, reduce - crit.bwd) : dp_total;
  } else if (zero >= 3) {
    const double lf = crit.fwd / stage_layers, lb = crit.bwd / stage_layers;
    const double per_mb =
        stage_layers * (std::max(0.0, dp.ag - lf) + std::max(0.0, dp.ag + dp.rs - lb)) + dp.ag_first + dp.rs_last;
    dp_total = dbl(mb) * stage_layers * (2.0 * dp.ag + dp.rs);
    dp_exposed = opt.overlap_dp ? dbl(mb) * per_mb : dp_total;
  } else {
    dp_total = dp.grads + dp.gather;
    // Reduction hides behind the last microbatch's backward, gathering behind the first
    // forward; the last bucket is always exposed.
    // With interleaving, each chunk's gradients are final as its last backward runs, which
    // spreads over the drain; on average half of the warm-up's worth of chunk backwards.
    const double window = vpp > 1 ? crit.bwd * (1.0 + dbl(inflight_chunks(t.pp, vpp, 0, mb)) / dbl(vpp)) / 2.0 : crit.bwd;
    dp_exposed = opt.overlap_dp ? std::max(dp.last, dp.grads - window) + std::max(0.0, dp.gather - crit.fwd) : dp_total;
  }
  out.total_dp_s = dp_total;
  out.exposed_dp_s = dp_exposed;
  // The computation the hidden collectives overlap runs on the SMs they leave: an overlapped
  // span E lasts E x share longer (as the all-to-all's, paired_passes).
  out.dp_sm_share = dp_time > 0 ? dp_share_time / dp_time : 0.0;
  out.dp_slowed_s = (dp_total - dp_exposed) * out.dp_sm_share;
  out.compute_s += out.dp_slowed_s;

  // Optimizer step over this GPU's shard of the parameters.
  const double local = (zero >= 1 ? dense_params / dbl(c.g.dp.size) : dense_params) +
                       (zero >= 1 ? expert_params / dbl(c.g.dp_expert.size) : expert_params);
  if (t.memory.offload_optimizer) {
    // ZeRO-Offload (Ren et al. 2021, Sec. 4.1, Fig. 5): this rank's 16-bit gradients go down
    // to host memory, CPU-Adam updates the fp32 master copy there, and the 16-bit
    // parameters come back up. Counted in sequence after the backward, without the overlap
    // of gradient copies with the backward that DeepSpeed may get: an upper bound.
    const double pcie = pcie_bytes_per_s(sys);
    const double gpus_sharing_cpu = dbl(std::max<int64_t>(1, std::min(sys.gpus_per_node, sys.num_gpus)));
    out.offload_d2h_s = local * kOffloadBytesPerParam / pcie;
    out.offload_h2d_s = local * kOffloadBytesPerParam / pcie;
    out.offload_cpu_s = local / (kCpuAdamParamsPerSecondPerNode / gpus_sharing_cpu);
    out.optimizer_s = out.offload_d2h_s + out.offload_cpu_s + out.offload_h2d_s;
  } else {
    out.optimizer_s = optimizer_step_seconds(cost, sys, local, t.optimizer, t.bf16_moments);
  }
  // Once-per-step fp8 weight casts ride with the optimizer step (both touch every weight once).
  for (int k = 0; k < 2; ++k)
    if (crit_rank.n[k] > 0)
      out.optimizer_s += dbl(crit_rank.n[k]) * cost.memory_bound(Bytes(fp8_weight_cast_bytes(t, lk.params[k]))).value;

  out.step_s = dbl(mb) * out.microbatch_s + out.bubble_s + out.exposed_pp_s + out.exposed_dp_s + out.dp_slowed_s +
               out.optimizer_s;

  // Throughput and utilisation.
  const double tokens_step = dbl(t.global_batch) * dbl(t.seq_len);
  out.tokens_per_s = tokens_step / out.step_s;
  out.tokens_per_s_per_gpu = out.tokens_per_s / dbl(sys.num_gpus);
  // Model FLOPs: the forward, input-gradient and weight-gradient matmuls (3x the forward).
  // A frozen base (adapter training) computes no weight gradient for its matmuls, 2 FLOPs a
  // parameter and token less, while its adapters (the top-k experts' on MoE layers) train
  // in full: MFU then measures the work the method needs, not a full fine-tune's.
  double model_per_token = 3.0 * kc.fwd_flops_per_token;
  if (trains_adapters(t.mode)) {
    const LoraSpec l = resolved_lora(t);
    double adapters = 0;
    for (int k = 0; k < 2; ++k) {
      if (lk.count[k] == 0) continue;
      double layer = lora_layer_params(m, l, k == 1, false);
      if (k == 1) layer += lora_layer_params(m, l, true, true) * dbl(m.moe->top_k) / dbl(m.moe->num_experts);
      adapters += dbl(lk.count[k]) * layer;
    }
    model_per_token += 6.0 * adapters - 2.0 * forward_matmul_params(m);
  }
  out.model_flops_per_step = model_per_token * tokens_step;
  double recompute_flops_per_token = 0;
  for (int k = 0; k < 2; ++k)
    if (have[k]) recompute_flops_per_token += dbl(kc.count[k]) * kinds[k].recompute_flops * dbl(t.tp) / c.tokens;
  out.hardware_flops_per_step = out.model_flops_per_step + recompute_flops_per_token * tokens_step;
  out.model_tflops_per_gpu = out.model_flops_per_step / out.step_s / dbl(sys.num_gpus) / 1e12;
  const double peak = sys.gpu.peak(t.precision == DType::fp16 ? DType::fp16 : DType::bf16).value;
  out.mfu = out.model_flops_per_step / out.step_s / (dbl(sys.num_gpus) * peak);
  out.hfu = out.hardware_flops_per_step / out.step_s / (dbl(sys.num_gpus) * peak);
  return out;
}

}  // namespace capsim
