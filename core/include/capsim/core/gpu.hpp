#pragma once
/// GPU datasheet facts as plain values. Presets live in data/gpus/*.json, each fact
/// with its source; io/ reads them into this struct.

#include <array>
#include <string>
#include <vector>

#include "capsim/core/model.hpp"
#include "capsim/core/units.hpp"

namespace capsim {

enum class GpuArch { ampere, hopper, blackwell };

std::string_view to_string(GpuArch a);

/// An efficiency (fraction of peak) or rate with where it came from.
struct Sourced {
  double value = 0;
  std::string source;  ///< source ids or "calibration:<profile>"
  bool operator==(const Sourced&) const = default;
};

/// Attention kernel efficiency (fraction of the dense bf16 peak) by sequence length, for
/// head dims 64 and 128, causal or not. Lengths between entries interpolate in log space.
struct AttentionEfficiency {
  std::vector<double> seq_len;
  std::array<std::vector<double>, 4> table;  ///< [hdim64 nc, hdim64 causal, hdim128 nc, hdim128 causal]
  std::string source;
  bool operator==(const AttentionEfficiency&) const = default;
  /// Efficiency at `seq` keys for head dim `hdim` (<= 64 uses the 64 row, else 128).
  double at(double seq, int64_t hdim, bool causal) const;
};

/// Achievable bus bandwidth by message size, as a fraction of the large-message figure
/// (nccl-tests sweeps). Between entries the time follows the latency-bandwidth line through
/// the two measured points, so it rises monotonically between them; below the first,
/// time stays constant (latency-bound); above the last, the last fraction holds.
struct BusbwCurve {
  std::vector<double> size_bytes;
  std::vector<double> fraction;
  std::string source;
  bool operator==(const BusbwCurve&) const = default;
  double at(double bytes) const;
};

/// Measured efficiencies of a GPU from public microbenchmarks (data/gpus/<id>.json,
/// "efficiency"); a calibration profile replaces them.
struct GpuEfficiency {
  Sourced gemm_bf16, gemm_fp8, gemm_int8;  ///< best large-GEMM fraction of dense peak
  std::array<double, 3> gemm_bf16_shape{}, gemm_fp8_shape{}, gemm_int8_shape{};  ///< m,n,k measured (0 = unknown)
  Sourced gemm_k_half;  ///< K at which eff(K) = K/(K+K0) is one half
  /// Fewest K elements a split of a split-K GEMM takes: where this is set the GEMM library
  /// picks the tile (64 or 128 rows by 64, 128 or 256 columns) that fills the SMs best and,
  /// where even that leaves SMs idle, splits K over them; 0 = not measured: one 128-row tile
  /// (64 or 16 for fewer rows) by the architecture's widest, no split.
  Sourced gemm_split_k_min;
  /// FP8 GEMM with 128x128 weight-block and 1x128 activation-group scales (the serving
  /// engines' CUTLASS blockwise kernel) at large shapes, as a fraction of the dense fp8
  /// peak; 0 = not measured (per-tensor figure).
  Sourced gemm_fp8_block;
  /// Block-scaled FP8 GEMMs at training sizes (M of thousands), as a fraction of the FP8
  /// peak; 0 = not measured, gemm_fp8_block applies.
  Sourced gemm_fp8_block_large_m;
  /// Microseconds a weight-streaming GEMM kernel adds to bytes / achievable bandwidth
  /// (pipeline fill, wave tail, epilogue); 0 = not measured, no term added.
  Sourced gemm_tail_us;
  /// Microseconds of idle GPU between two dependent kernels of a replayed CUDA graph (the
  /// next kernel's launch and ramp after the previous one drains); 0 = not measured, no
  /// term added.
  Sourced graph_kernel_gap_us;
  /// A fused multi-tensor optimizer step (PyTorch's fused AdamW, Apex's and Transformer
  /// Engine's FusedAdam: multi_tensor_apply kernels over chunks of parameter lists) streams
  /// its bytes at this share of the stream rate of one large copy; 0 = not measured: the
  /// stream rate applies.
  Sourced optimizer_stream;
  /// Microseconds a decode attention kernel over the paged KV cache takes beyond its bytes
  /// at the achievable stream rate (the split-KV partial pass and its merge, their ramps and
  /// dependent loads), a profiler's device time; 0 = not measured: the floored stream
  /// applies.
  Sourced decode_attention_fixed_us;
  /// A serving engine's fused MoE layer (routing alignment, activation quantisation, the
  /// two grouped expert GEMMs, activation, combine) when it streams expert weights:
  /// time = moe_kernel_fixed_us + moe_kernel_expert_us x experts touched + their weight
  /// bytes / (moe_kernel_hbm x HBM peak). The per-expert term is the cost of an expert's
  /// own tiles starting (the small-expert shapes stream slower for it). 0 = not measured:
  /// the stream figure and two GEMM tails apply (no per-expert term).
  Sourced moe_kernel_hbm, moe_kernel_fixed_us, moe_kernel_expert_us;
  /// The same layer over 16-bit expert weights; 0 = not measured: the figures above apply.
  Sourced moe_kernel_hbm_bf16, moe_kernel_fixed_us_bf16, moe_kernel_expert_us_bf16;
  /// The same fused MoE layer when its grouped GEMMs are compute-bound (prefill): routed
  /// FLOPs over this fraction of the dense 8-bit (fp8/int8) or 16-bit peak. 0 = not
  /// measured: the GEMM efficiency model applies.
  Sourced moe_kernel_compute_fp8, moe_kernel_compute_bf16;
  /// The share of the shorter of weight streaming and compute the fused kernel does not
  /// hide behind the longer: time = max(stream, compute) + this x min(stream, compute).
  Sourced moe_kernel_unhidden;
  /// A serving engine's tensor-parallel all-reduce inside one NVLink domain (custom
  /// one-shot / NVLink SHARP multimem kernels, not NCCL): time = fixed + bytes x per-MiB
  /// cost. 0 = not measured: the NCCL model applies. The engine uses the faster of the two.
  Sourced engine_allreduce_fixed_us, engine_allreduce_us_per_mib;
  /// Sustained over rated tensor clock under long matrix-multiply load (power limit);
  /// 0 = not measured (rated clock). Scales compute-bound kernels, not memory-bound ones.
  Sourced sustained_tensor_clock;
  Sourced hbm;          ///< achievable fraction of HBM bandwidth (stream kernels)
  AttentionEfficiency attention_fwd, attention_bwd;  ///< the architecture's best fused kernel
  /// cuDNN fused attention (Transformer Engine's FusedAttention), forward and backward.
  AttentionEfficiency attention_cudnn_fwd, attention_cudnn_bwd;
  AttentionEfficiency attention_fa2;  ///< FlashAttention-2 (forward+backward), e.g. PyTorch SDPA
  /// FlashAttention (v1) and FlashAttention's Triton kernel (forward+backward); optional:
  /// empty where not measured (the FlashAttention-2 table applies).
  AttentionEfficiency attention_flash1, attention_flash_triton;
  Sourced allreduce_busbw_gbps, allgather_busbw_gbps, reducescatter_busbw_gbps, alltoall_busbw_gbps;
  /// All-reduce over all 8 GPUs of an NVSwitch node with NVLink SHARP (NCCL's default NVLS
  /// algorithm where the switch supports it); 0 = not measured, the ring figure applies.
  Sourced allreduce_nvls_busbw_gbps;
  Sourced nic_efficiency;  ///< achievable fraction of the scale-out NIC line rate
  Sourced alltoall_nic_efficiency;  ///< the same for all-to-all traffic
  /// Thread blocks (one per channel, each holding an SM no compute kernel shares) that
  /// NCCL's collectives run on a group inside one NVSwitch node and on a group spanning
  /// nodes over the scale-out network; 0 = not measured (overlap then slows no compute).
  Sourced nccl_ctas_nvlink, nccl_ctas_network;
  /// Blocks of NCCL's send/recv to one peer inside the node (its "p2p channels per peer").
  Sourced nccl_p2p_ctas_nvlink;
  BusbwCurve busbw_curve_nvlink;  ///< inside a node (across nodes: NCCL's latency-bandwidth model)
  bool operator==(const GpuEfficiency&) const = default;
};

/// Datasheet facts of one GPU part. Peaks are dense (no 2:4 sparsity); 0 = unsupported.
struct GpuSpec {
  std::string id;    ///< preset id, e.g. "h100-sxm5-80gb"
  std::string name;  ///< human name
  GpuArch arch = GpuArch::hopper;
  double peak_fp64_tflops = 0;
  double peak_tf32_tflops = 0;
  double peak_bf16_tflops = 0;
  double peak_fp16_tflops = 0;
  double peak_fp8_tflops = 0;
  double peak_int8_tops = 0;
  double peak_fp4_tflops = 0;
  double hbm_capacity_bytes = 0;  ///< usable device memory as the driver reports it
  double hbm_bandwidth_gbps = 0;  ///< GB/s (1e9)
  double l2_cache_mb = 0;
  int sm_count = 0;
  double boost_clock_mhz = 0;
  int nvlink_generation = 0;          ///< 0 = no NVLink
  double nvlink_bw_unidir_gbps = 0;   ///< per GPU, one direction, GB/s
  int pcie_generation = 0;
  double pcie_bw_unidir_gbps = 0;
  double tdp_w = 0;
  /// Scale-out line rate per GPU of the GPU's reference node (DGX A100: 200, DGX H100: 400),
  /// one direction, Gb/s; 0 where there is none (PCIe boards). SystemSpec::nic_auto.
  double reference_nic_gbps_per_gpu = 0;
  GpuEfficiency efficiency;

  bool operator==(const GpuSpec&) const = default;

  /// Dense tensor-core peak for math in `dtype` (FLOP/s); 0 when unsupported.
  FlopsPerSecond peak(DType dtype) const;
  BytesPerSecond hbm_bandwidth() const { return BytesPerSecond(hbm_bandwidth_gbps * kGB); }
  Bytes hbm_capacity() const { return Bytes(hbm_capacity_bytes); }
};

}  // namespace capsim
