#pragma once
/// The default CostModel: roofline with measured efficiencies (data/gpus/<id>.json,
/// "efficiency") and latency-bandwidth collectives placed on the node/NIC topology.

#include "capsim/core/cost_model.hpp"
#include "capsim/core/scenario.hpp"

namespace capsim::hw {

/// NCCL's default tuning constants (src/graph/tuning.cc, "nccl_tuning" in hardware.json),
/// microseconds. The latency floor is the LL protocol's, which NCCL picks for small
/// messages: 8 H100s, ring LL all-reduce 6.6 + 14 x 0.6 = 15.0 us against 13.7-17 us
/// measured below 4 KiB (dgx-h100-8gpu-allreduce-nvls nccl-tests log); 2 nodes of 8,
/// 6.6 + 28 x 0.6 + 2 x 2.7 = 28.8 us against about 30 us (hgx-h100-2node-ib log).
struct NcclLatency {
  double ring_base_us = 6.6;        ///< ring, LL
  double tree_base_us = 6.8;        ///< tree, LL
  double nvlink_ring_hop_us = 0.6;  ///< NVLink, ring, LL
  double nvlink_tree_hop_us = 0.6;  ///< NVLink, tree, LL
  double net_ring_hop_us = 2.7;     ///< network, ring, LL
  double net_tree_hop_us = 5.0;     ///< network, tree, LL
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
  /// Latency term (s) from NCCL's model: min(ring, tree) for all-reduce, ring otherwise.
  double latency(CollectiveKind kind, const Group& group) const;
  /// Sustained over rated tensor clock (1 when not measured).
  double clock_factor() const;

 private:
  double shape_factor(int64_t m, int64_t n, int64_t k, int64_t batch) const;
  /// Seconds to stream `bytes` through HBM at the achievable bandwidth (no launch floor).
  double stream_time(double bytes) const;
  SystemSpec sys_;
  NcclLatency nccl_;
};

}  // namespace capsim::hw
