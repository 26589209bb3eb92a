#include "capsim/hw/roofline.hpp"

#include <algorithm>
#include <cmath>

namespace capsim::hw {

namespace {

double dbl(int64_t v) { return static_cast<double>(v); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Shortest time a kernel launched from the host occupies the stream: 80 tiny kernels
/// launched one by one take 260 us (CUDA.jl documentation, "Graphs"), 3.25 us each.
constexpr double kKernelLaunchS = 3.25e-6;

}  // namespace

RooflineCostModel::RooflineCostModel(const SystemSpec& system) : sys_(system) {}

double RooflineCostModel::clock_factor() const {
  const double f = sys_.gpu.efficiency.sustained_tensor_clock.value;
  return f > 0 ? f : 1.0;
}

double RooflineCostModel::shape_factor(int64_t m, int64_t n, int64_t k, int64_t batch, double k0) const {
  const GpuSpec& g = sys_.gpu;
  const int64_t sms = std::max(1, g.sm_count);
  // One tile configuration: the share of the SMs its tiles (times the K splits) fill in
  // their last wave, the share of each tile holding output, and the K depth of each split.
  // Tiles that leave SMs idle split K over them, up to one wave and at most `split_cap` ways.
  const auto factor = [&](int64_t tm, int64_t tn, int64_t split_cap) {
    const int64_t row_tiles = ceil_div(m, tm), col_tiles = ceil_div(n, tn);
    const int64_t tiles = row_tiles * col_tiles * batch;
    const int64_t split = tiles < sms ? std::min(sms / tiles, split_cap) : 1;
    const int64_t units = tiles * split;
    const int64_t waves = ceil_div(units, sms);
    const double wave = dbl(units) / dbl(waves * sms);
    const double pad = dbl(m) * dbl(n) / (dbl(row_tiles * tm) * dbl(col_tiles * tn));
    const double kk = dbl(k) / dbl(split);
    return wave * pad * kk / (kk + k0);
  };
  // A narrow N takes a narrower tile: a GEMM is its own transpose (C^T = B^T A^T), and cuBLAS
  // runs both operand orders, its nvjet kernels naming the layout beside tiles such as 64x8
  // (H200, DeepSeek-V3 router at 4 tokens: nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT, vLLM
  // issue #28084) and 16x64 (B200, 8 x 1024 x 2048: nvjet_sm100_tss_16x64_64x16_4x1_v_bz_TNN,
  // vLLM PR #41300). A rank-32 adapter or a 128-expert router is not padded to 256 columns.
  const auto cols = [&](int64_t want) { return n >= want ? want : (n >= 128 ? 128 : (n > 16 ? 64 : 16)); };
  // The tiles cuBLAS picks for large problems: 128x256 on Hopper and Blackwell (CUTLASS sm90
  // default), 128x128 on Ampere; 64-row tiles for skinny M and 16 rows (one tensor-core MMA)
  // for decode-sized M.
  const int64_t wide = g.arch == GpuArch::ampere ? 128 : 256;
  const int64_t tm0 = m >= 128 ? 128 : (m > 16 ? 64 : 16), tn0 = cols(wide);
  double best = factor(tm0, tn0, 1);
  const double split_min = g.efficiency.gemm_split_k_min.value;
  if (split_min > 0 && ceil_div(m, tm0) * ceil_div(n, tn0) * batch < sms) {
    // Where measured (data/calibration/raw/h200-torch-probe-kernels.json) and those tiles
    // leave SMs idle in their only wave, cuBLASLt sizes its tile to fill them (nvjet_sm90
    // 64x64 for 128 x 4096 x 4096, 128x64 at 256 rows, 128x128 at 512) and, where its tiles
    // still leave SMs idle, splits K over them and sums the partial products in
    // cublasLt::splitKreduce_kernel (128 x 4096 x 14336: ..._128x64_..._splitK_TNT). The
    // best fill over its tile sizes, each split to at most one wave with at least
    // gemm_split_k_min of K a split. A GEMM of a wave or more keeps the large tile, whose
    // partial last wave the measured large-GEMM efficiency is taken against.
    // Decode-sized M has one tile height (16) and the architecture's width; each distinct
    // (rows, columns) pair is tried once (cols() folds the widths a narrow N cannot use).
    const int64_t max_split = static_cast<int64_t>(std::clamp(dbl(k) / split_min, 1.0, dbl(sms)));
    if (m <= 16) {
      best = std::max(best, factor(16, cols(wide), max_split));
    } else {
      const int64_t widths[3] = {cols(64), cols(128), cols(256)};
      for (const int64_t tm : {int64_t{64}, int64_t{128}})
        for (size_t i = 0; i < 3; ++i)
          if (i == 0 || widths[i] != widths[i - 1]) best = std::max(best, factor(tm, widths[i], max_split));
    }
  }
  return best;
}

double RooflineCostModel::gemm_efficiency(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch) const {
  const GpuEfficiency& e = sys_.gpu.efficiency;
  const Sourced* base = &e.gemm_bf16;
  const std::array<double, 3>* ref = &e.gemm_bf16_shape;
  if (dtype == DType::fp8 && e.gemm_fp8.value > 0) {
    base = &e.gemm_fp8;
    ref = &e.gemm_fp8_shape;
  } else if ((dtype == DType::int8 || dtype == DType::int4) && e.gemm_int8.value > 0) {
    base = &e.gemm_int8;
    ref = &e.gemm_int8_shape;
  }
  // The measured figure is the best over a shape search: cuBLAS ran it with the tile
  // configuration that fills the SMs, so it is taken as the full-wave efficiency and only
  // its K depth is normalised out.
  //
  // K depth: a tile spends a fixed time (prologue, epilogue: scales, conversion, the output
  // store) besides its K loop, so eff(K) = K / (K + K0) with K0 that fixed time in K loop
  // units; gemm_k_half is K0 measured on 16-bit GEMMs. An 8-bit tensor core runs the K loop
  // at its peak's ratio to the 16-bit one and leaves the fixed time as it is, so K0 grows by
  // that ratio (2 on Hopper). Measured: PyTorch's grouped GEMMs at Qwen3-235B-A22B's
  // tensor-parallel down projection (K = 192, 128 experts, 512-4,096 rows an expert, H100)
  // run FP8 at 316-381 TFLOP/s and bf16 at 317-390, FP8 gaining nothing, where at K = 1,536
  // to 7,168 it runs 1.6-1.9x bf16 (data/calibration/raw/h100-torch-probe-grouped.jsonl).
  const GpuSpec& g = sys_.gpu;
  const double k0 = e.gemm_k_half.value * (base == &e.gemm_fp8    ? g.peak(DType::fp8).value / g.peak(DType::bf16).value
                                           : base == &e.gemm_int8 ? g.peak(DType::int8).value / g.peak(DType::bf16).value
                                                                  : 1.0);
  const double k_ref = (*ref)[2] > 0 ? (*ref)[2] : 16384.0;  // unknown shape: a large-K problem
  const double ref_factor = k_ref / (k_ref + k0);
  const double eff = base->value * shape_factor(m, n, k, batch, k0) / ref_factor;
  return std::min(eff, 0.97);
}

Seconds RooflineCostModel::gemm(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch) const {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return Seconds(0);
  const GpuSpec& g = sys_.gpu;
  DType math = dtype;
  if (math == DType::fp8 && g.peak_fp8_tflops <= 0) math = DType::bf16;
  const double peak = g.peak(math == DType::fp32 ? DType::bf16 : math).value * clock_factor();
  const double flops = 2.0 * dbl(m) * dbl(n) * dbl(k) * dbl(batch);
  const double t_compute = flops / (peak * gemm_efficiency(m, n, k, math, batch));
  const double eb = dtype_bytes(math == DType::fp8 ? DType::fp8 : DType::bf16);
  const double bytes = (dbl(m) * dbl(k) * eb + dbl(k) * dbl(n) * eb + dbl(m) * dbl(n) * 2.0) * dbl(batch);
  const double t_mem = stream_time(bytes);
  // The GEMM kernel alone: casting bf16 operands to fp8 is the training engine's business
  // (step.cpp prices it as each framework runs it).
  const double t = std::max(t_compute, t_mem);
  return Seconds(std::max(kKernelLaunchS, t));
}

Seconds RooflineCostModel::gemm_compute(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch) const {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return Seconds(0);
  const GpuSpec& g = sys_.gpu;
  DType math = dtype;
  if (math == DType::fp8 && g.peak_fp8_tflops <= 0) math = DType::bf16;
  if (math == DType::int4 || math == DType::fp32) math = DType::bf16;
  const double peak = g.peak(math).value * clock_factor();
  const double flops = 2.0 * dbl(m) * dbl(n) * dbl(k) * dbl(batch);
  return Seconds(std::max(kKernelLaunchS, flops / (peak * gemm_efficiency(m, n, k, math, batch))));
}

Seconds RooflineCostModel::attention(const AttentionShape& a, bool backward) const {
  const GpuSpec& g = sys_.gpu;
  const double causal_factor = a.causal && a.q_len > 1 ? 0.5 : 1.0;
  const double pairs = dbl(a.q_len) * dbl(a.kv_len) * causal_factor;
  if (a.kernel == AttentionKernel::unfused) {
    // Scores S = Q K^T and output O = P V as batched GEMMs over (batch x heads), the
    // softmax (with scale, mask and dropout) as memory-bound passes over the s x s scores:
    // forward reads and writes the scores (2 B each), writes a 1-byte dropout mask and the
    // dropped probabilities; backward has twice the GEMMs and three read-write passes.
    const int64_t bh = a.batch * a.heads;
    const double scores = dbl(bh) * dbl(a.q_len) * dbl(a.kv_len);
    double t = 0;
    if (!backward) {
      t += gemm(a.q_len, a.kv_len, a.qk_dim, DType::bf16, bh).value;
      t += gemm(a.q_len, a.v_dim, a.kv_len, DType::bf16, bh).value;
      t += stream_time(scores * (2.0 + 2.0 + 1.0 + 2.0));
    } else {
      t += gemm(a.q_len, a.qk_dim, a.kv_len, DType::bf16, bh).value + gemm(a.kv_len, a.qk_dim, a.q_len, DType::bf16, bh).value;
      t += gemm(a.q_len, a.kv_len, a.v_dim, DType::bf16, bh).value + gemm(a.kv_len, a.v_dim, a.q_len, DType::bf16, bh).value;
      t += stream_time(scores * 3.0 * (2.0 + 2.0));
    }
    return Seconds(t);
  }
  double flops = 2.0 * dbl(a.batch) * dbl(a.heads) * pairs * dbl(a.qk_dim + a.v_dim);
  // Backward: five matrix products to the forward's two (Dao 2023, FlashAttention-2 Sec. 3).
  if (backward) flops *= 2.5;
  const GpuEfficiency& e = g.efficiency;
  const AttentionEfficiency& cudnn = backward ? e.attention_cudnn_bwd : e.attention_cudnn_fwd;
  // FlashAttention (v1) and its Triton kernel at their own tables where the preset has
  // them, else at FlashAttention-2's (a lower bound on their time).
  const AttentionEfficiency* older = a.kernel == AttentionKernel::flash1          ? &e.attention_flash1
                                     : a.kernel == AttentionKernel::flash_triton ? &e.attention_flash_triton
                                                                                 : nullptr;
  const bool fa2_family = a.kernel == AttentionKernel::flash2 || older;
  const AttentionEfficiency& t = older && !older->seq_len.empty()                  ? *older
                                 : fa2_family && !e.attention_fa2.seq_len.empty() ? e.attention_fa2
                                 : a.kernel == AttentionKernel::cudnn && !cudnn.seq_len.empty()
                                     ? cudnn
                                     : (backward ? e.attention_bwd : e.attention_fwd);
  // Kernel efficiency at the length of the blocks it runs (a CP rank's chunk).
  const double len = static_cast<double>(std::min(a.q_len, a.kv_len));
  const double eff = std::max(0.05, t.at(len, std::max(a.qk_dim, a.v_dim), a.causal));
  const double t_compute = flops / (g.peak(DType::bf16).value * clock_factor() * eff);
  const double io = dbl(a.batch) * (dbl(a.q_len) * dbl(a.heads) * dbl(a.qk_dim + a.v_dim) +
                                    dbl(a.kv_len) * dbl(a.kv_heads) * dbl(a.qk_dim + a.v_dim)) *
                    2.0 * (backward ? 2.0 : 1.0);
  return Seconds(std::max({kKernelLaunchS, t_compute, stream_time(io)}));
}

double RooflineCostModel::stream_time(double bytes) const {
  const GpuSpec& g = sys_.gpu;
  return bytes / (g.hbm_bandwidth().value * g.efficiency.hbm.value);
}

Seconds RooflineCostModel::memory_bound(Bytes bytes) const {
  if (bytes.value <= 0) return Seconds(0);
  return Seconds(std::max(kKernelLaunchS, stream_time(bytes.value)));
}

double RooflineCostModel::bus_bandwidth(CollectiveKind kind, const Group& group) const {
  const GpuEfficiency& e = sys_.gpu.efficiency;
  double intra = 0;
  switch (kind) {
    case CollectiveKind::all_reduce:
      intra = e.allreduce_busbw_gbps.value;
      // NVLS where it was measured: the full 8-GPU NVSwitch node (smaller groups keep the
      // ring figure; no measurement of NVLS over them is at hand).
      if (group.nvls && e.allreduce_nvls_busbw_gbps.value > 0 && group.size == 8 && group.nodes() == 1)
        intra = e.allreduce_nvls_busbw_gbps.value;
      break;
    case CollectiveKind::all_gather: intra = e.allgather_busbw_gbps.value; break;
    case CollectiveKind::reduce_scatter: intra = e.reducescatter_busbw_gbps.value; break;
    case CollectiveKind::all_to_all: intra = e.alltoall_busbw_gbps.value; break;
  }
  intra *= kGB;
  if (group.nodes() <= 1) return intra;
  const double nic = sys_.nic_gbps_per_gpu / 8.0 * kGB * e.nic_efficiency.value;
  if (kind == CollectiveKind::all_to_all) {
    // Each rank sends (n-1)/n of its buffer, (n-per_node)/n of it through its own NIC.
    const double n = dbl(group.size), k = dbl(group.per_node);
    const double nic_a2a = sys_.nic_gbps_per_gpu / 8.0 * kGB * e.alltoall_nic_efficiency.value;
    return std::min(intra, nic_a2a * (n - 1.0) / (n - k));
  }
  // Rings cross each node boundary once per channel; per_node NICs carry them in parallel.
  return std::min(intra, dbl(group.per_node) * nic);
}

double RooflineCostModel::latency(CollectiveKind kind, const Group& group, const NcclProtocol& p) const {
  const double n = dbl(group.size), nodes = dbl(group.nodes());
  const double steps = kind == CollectiveKind::all_reduce ? 2.0 * (n - 1.0) : n - 1.0;
  const double inter = kind == CollectiveKind::all_reduce ? 2.0 * (nodes - 1.0) : nodes - 1.0;
  const double ring = p.ring_base_us + (steps - inter) * p.nvlink_ring_hop_us + inter * p.net_ring_hop_us;
  if (kind != CollectiveKind::all_reduce) return ring * 1e-6;
  const double tree = p.tree_base_us + 2.0 * (dbl(group.per_node - 1) * p.nvlink_tree_hop_us +
                                           std::log2(std::max(1.0, nodes)) * p.net_tree_hop_us);
  return std::min(ring, tree) * 1e-6;
}

Seconds RooflineCostModel::collective(CollectiveKind kind, Bytes bytes, const Group& group) const {
  if (group.size <= 1 || bytes.value <= 0) return Seconds(0);
  const double n = dbl(group.size);
  const double factor = kind == CollectiveKind::all_reduce ? 2.0 * (n - 1.0) / n : (n - 1.0) / n;
  const GpuEfficiency& e = sys_.gpu.efficiency;
  const double lat = latency(kind, group);
  const double bw = bus_bandwidth(kind, group);
  if (group.nodes() > 1) {
    // The all-to-all NIC efficiency was measured at large buffers, across its many
    // parallel peers.
    if (kind == CollectiveKind::all_to_all) return Seconds(std::max(lat, bytes.value * factor / bw));
    // Across nodes, NCCL's own cost model: latency plus bytes over bus bandwidth for each
    // protocol, the faster one (src/graph/tuning.cc): Simple at the full bus bandwidth
    // after its per-hop latency, which grows with the ring's length, or LL at half of
    // it, capped, after LL's. Against the published 10-node H100 logs with 1, 2, 4 and 8
    // GPUs a node (tests/data/nccl-tests-10node/, tests/data/nccl-tests/h100-10node-*) the
    // median error falls from 17-25% to 4-9% (1-4 GPUs a node) and from 26-30% to 17-18%
    // (8 GPUs, all-gather and reduce-scatter) against the all-reduce busbw-by-size curve of
    // 8-GPU nodes this replaces, which charged a node of few GPUs a full node's latency.
    const double ll_cap = (group.nodes() == 2 ? nccl_.ll_max_gbps_two_nodes : nccl_.ll_max_gbps_more_nodes) * kGB;
    const double simple = latency(kind, group, nccl_.simple) + bytes.value * factor / bw;
    const double ll = lat + bytes.value * factor / std::min(0.5 * bw, ll_cap);
    double t = std::min(simple, ll);
    const double nvls = e.allreduce_nvls_busbw_gbps.value * kGB;
    if (kind == CollectiveKind::all_reduce && group.nvls && nvls > 0 && group.per_node == 8) {
      // Where the node's NVSwitch reduces (NVLS, measured over the full 8-GPU node), NCCL
      // also weighs the NVLS tree: at the NVLS bus bandwidth, capped by the nodes' NICs,
      // which a 2-node tree uses both ways ("Handle 2 node case of NVLSTree": interBw x 2).
      // Against the published 2-node H100 log (469 GB/s at 16 GiB) this gives 69-75 us at
      // 512 KiB-2 MiB (measured 70-76) and 68 ms at 16 GiB (measured 69).
      const double nodes = dbl(group.nodes());
      const double inter = (group.nodes() == 2 ? 2.0 : 1.0) * dbl(group.per_node) * sys_.nic_gbps_per_gpu / 8.0 * kGB *
                           e.nic_efficiency.value;
      const double tree_lat = nccl_.nvls_tree_nvlink_us + 2.0 * std::log2(nodes) * nccl_.nvls_tree_net_hop_us;
      t = std::min(t, tree_lat * 1e-6 + bytes.value * factor / std::min(nvls, inter));
    }
    return Seconds(t);
  }
  // Inside a node, the bus bandwidth at this message size from the measured NVLink sweep;
  // NCCL's latency model is the floor.
  const BusbwCurve& curve = e.busbw_curve_nvlink;
  const double frac = std::max(1e-6, curve.at(bytes.value));
  const double t = bytes.value * factor / (bw * frac);
  return Seconds(std::max(lat, t));
}

Seconds RooflineCostModel::p2p(Bytes bytes, bool cross_node) const {
  if (bytes.value <= 0) return Seconds(0);
  const GpuEfficiency& e = sys_.gpu.efficiency;
  if (cross_node) {
    // One send over the sender's own NIC (GPUDirect RDMA): one network hop of latency, then
    // the bytes at the NIC's achievable rate (NDR 400 Gb/s: "46-48 GB/s per NIC", NCCL's
    // maintainers in NVIDIA/nccl-tests#290; nic_efficiency). The multi-node busbw curve does
    // not apply: its small-message loss is the ring's 2(n-1) hops of latency across up to
    // 512 nodes, which a single peer-to-peer transfer does not cross. Check: 2 MiB this way
    // takes 55 us on H100 NDR, against 76 us for a whole 16-rank all-reduce of 2 MiB over
    // two such nodes (tests/data/nccl-tests/hgx-h100-2node-ib-allreduce.txt).
    const double nic = sys_.nic_gbps_per_gpu / 8.0 * kGB * e.nic_efficiency.value;
    const double lat = (nccl_.ll.ring_base_us + nccl_.ll.net_ring_hop_us) * 1e-6;
    return Seconds(lat + bytes.value / nic);
  }
  // One NVLink peer at the ring all-reduce bus bandwidth (the per-link achievable rate).
  const double frac = std::max(1e-6, e.busbw_curve_nvlink.at(bytes.value));
  return Seconds(std::max((nccl_.ll.ring_base_us + nccl_.ll.nvlink_ring_hop_us) * 1e-6,
                          bytes.value / (e.allreduce_busbw_gbps.value * kGB * frac)));
}

std::vector<std::pair<std::string, std::string>> RooflineCostModel::provenance() const {
  const GpuEfficiency& e = sys_.gpu.efficiency;
  std::vector<std::pair<std::string, std::string>> p = {
      {"gemm_bf16", e.gemm_bf16.source},
      {"gemm_k_half", e.gemm_k_half.source},
      {"sustained_tensor_clock", e.sustained_tensor_clock.source.empty() ? "rated clock" : e.sustained_tensor_clock.source},
      {"hbm", e.hbm.source},
      {"attention_fwd", e.attention_fwd.source},
      {"attention_bwd", e.attention_bwd.source},
      {"allreduce_busbw", e.allreduce_busbw_gbps.source},
      {"allreduce_nvls_busbw", e.allreduce_nvls_busbw_gbps.source.empty() ? "not measured (ring figure)" : e.allreduce_nvls_busbw_gbps.source},
      {"allgather_busbw", e.allgather_busbw_gbps.source},
      {"reducescatter_busbw", e.reducescatter_busbw_gbps.source},
      {"alltoall_busbw", e.alltoall_busbw_gbps.source},
      {"nic_efficiency", e.nic_efficiency.source},
      {"alltoall_nic_efficiency", e.alltoall_nic_efficiency.source},
      {"nccl_latency", "nccl_tuning"},
      {"busbw_curve_nvlink", e.busbw_curve_nvlink.source},
  };
  if (e.gemm_fp8.value > 0) p.push_back({"gemm_fp8", e.gemm_fp8.source});
  if (e.gemm_tail_us.value > 0) p.push_back({"gemm_tail_us", e.gemm_tail_us.source});
  if (e.graph_kernel_gap_us.value > 0) p.push_back({"graph_kernel_gap_us", e.graph_kernel_gap_us.source});
  if (e.optimizer_stream.value > 0) p.push_back({"optimizer_stream", e.optimizer_stream.source});
  if (e.decode_attention_fixed_us.value > 0)
    p.push_back({"decode_attention_fixed_us", e.decode_attention_fixed_us.source});
  return p;
}

}  // namespace capsim::hw
