#pragma once
/// The default CostModel: roofline with measured efficiencies (data/gpus/<id>.json,
/// "efficiency") and latency-bandwidth collectives placed on the node/NIC topology.

#include "capsim/core/cost_model.hpp"
#include "capsim/core/scenario.hpp"

namespace capsim::hw {

/// NCCL's default tuner constants for one protocol (NVIDIA/nccl src/graph/tuning.cc,
/// ncclTunerConstantsDefaults; "nccl_tuning" in hardware.json), microseconds.
struct NcclProtocol {
  double ring_base_us;        ///< baseLatencies, ring
  double tree_base_us;        ///< baseLatencies, tree
  double nvlink_ring_hop_us;  ///< hwLatencies NVLINK, ring
  double nvlink_tree_hop_us;  ///< hwLatencies NVLINK, tree
  double net_ring_hop_us;     ///< hwLatencies NET, ring
  double net_tree_hop_us;     ///< hwLatencies NET, tree
};

/// The protocols NCCL's tuner weighs for collectives across nodes (and, for all-reduce over
/// NVLS nodes, the NVLS tree). LL, which it picks for small messages, is the latency floor
/// everywhere: 8 H100s, ring LL all-reduce 6.6 + 14 x 0.6 = 15.0 us against 13.7-17 us
/// measured below 4 KiB (dgx-h100-8gpu-allreduce-nvls nccl-tests log); 2 nodes of 8,
/// 6.6 + 28 x 0.6 + 2 x 2.7 = 28.8 us against about 30 us (hgx-h100-2node-ib log). Simple
/// carries large messages.
struct NcclLatency {
  NcclProtocol ll{6.6, 6.8, 0.6, 0.6, 2.7, 5.0};
  NcclProtocol simple{8.4, 8.4, 3.4, 4.0, 14.0, 14.0};
  /// LL's bus bandwidth across nodes is capped (llMaxBws, x86 Intel hosts): 39 GB/s over
  /// two nodes, 20.4 GB/s over more; within that, half the link rate ("busBw * .5").
  double ll_max_gbps_two_nodes = 39.0;
  double ll_max_gbps_more_nodes = 20.4;
  /// NVLS tree all-reduce (NVLink SHARP inside each node, a tree between nodes), Simple
  /// protocol only: base 0, one NVLS step over NVLink (hwLatencies NVLINK NVLS_TREE 25 us),
  /// then 2 log2(nodes) network hops (NET NVLS_TREE 20.9 us).
  double nvls_tree_nvlink_us = 25.0;
  double nvls_tree_net_hop_us = 20.9;
};

/// Every kernel occupies its stream for at least a host launch (3.25 us, see roofline.cpp),
/// which is what bounds decode steps of many tiny kernels.
class RooflineCostModel final : public CostModel {
 public:
  explicit RooflineCostModel(const SystemSpec& system);

  Seconds gemm(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch = 1) const override;
  Seconds gemm_compute(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch = 1) const override;
  Seconds attention(const AttentionShape& a, bool backward) const override;
  Seconds memory_bound(Bytes bytes) const override;
  Seconds collective(CollectiveKind kind, Bytes bytes, const Group& group) const override;
  Seconds p2p(Bytes bytes, bool cross_node) const override;
  std::vector<std::pair<std::string, std::string>> provenance() const override;

  /// Fraction of dense peak a GEMM of this shape reaches: the measured large-GEMM
  /// efficiency (taken as the full-wave figure), scaled by wave and tile quantization
  /// over the SMs and by the K-depth factor K/(K+K0) relative to the K it was measured at.
  double gemm_efficiency(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch = 1) const;
  /// Bus bandwidth (B/s) a collective reaches on `group`: the NVLink figure inside a
  /// node; across nodes the smaller of it and per_node x NIC rate x NIC efficiency.
  double bus_bandwidth(CollectiveKind kind, const Group& group) const;
  /// Latency term (s) from NCCL's model for a protocol (LL by default, the floor):
  /// min(ring, tree) for all-reduce, ring otherwise.
  double latency(CollectiveKind kind, const Group& group) const { return latency(kind, group, nccl_.ll); }
  double latency(CollectiveKind kind, const Group& group, const NcclProtocol& p) const;
  /// Sustained over rated tensor clock (1 when not measured).
  double clock_factor() const;

 private:
  /// `k0`: the K at which a tile's fixed time equals its K loop (gemm_k_half in the
  /// dtype's K units, see gemm_efficiency).
  double shape_factor(int64_t m, int64_t n, int64_t k, int64_t batch, double k0) const;
  /// Seconds to stream `bytes` through HBM at the achievable bandwidth (no launch floor).
  double stream_time(double bytes) const;
  SystemSpec sys_;
  NcclLatency nccl_;
};

}  // namespace capsim::hw
