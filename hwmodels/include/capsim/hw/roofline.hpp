#pragma once
/// The default CostModel: roofline with measured efficiencies (data/gpus/<id>.json,
/// "efficiency") and latency-bandwidth collectives placed on the node/NIC topology.

#include "capsim/core/cost_model.hpp"
#include "capsim/core/scenario.hpp"

namespace capsim::hw {

/// NCCL's default tuning constants (src/graph/tuning.cc, "nccl_tuning" in hardware.json):
/// base latency of the Simple protocol and per-hop latencies, microseconds.
struct NcclLatency {
  double base_us = 8.4;             ///< ring/tree Simple base latency
  double nvlink_ring_hop_us = 3.4;  ///< NVLink, ring, Simple
  double nvlink_tree_hop_us = 4.0;  ///< NVLink, tree, Simple
  double net_ring_hop_us = 14.0;    ///< network, ring, Simple
  double net_tree_hop_us = 14.0;    ///< network, tree, Simple
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
