#pragma once
/// A cost model that answers from a base model and records every GEMM shape asked of it:
/// run a scenario through it to learn exactly which GEMMs it costs (capsim calibrate
/// shapes, for capsim-calibrate --gemm-shapes).

#include <mutex>
#include <set>
#include <tuple>

#include "capsim/core/cost_model.hpp"

namespace capsim::hw {

class RecordingCostModel final : public CostModel {
 public:
  using Shape = std::tuple<DType, int64_t, int64_t, int64_t>;  ///< dtype, m, n, k
  explicit RecordingCostModel(const CostModel& base) : base_(base) {}

  Seconds gemm(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch = 1) const override {
    note(m, n, k, dtype);
    return base_.gemm(m, n, k, dtype, batch);
  }
  Seconds gemm_compute(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch = 1) const override {
    note(m, n, k, dtype);
    return base_.gemm_compute(m, n, k, dtype, batch);
  }
  Seconds attention(const AttentionShape& a, bool backward) const override { return base_.attention(a, backward); }
  Seconds memory_bound(Bytes bytes) const override { return base_.memory_bound(bytes); }
  Seconds collective(CollectiveKind kind, Bytes bytes, const Group& group) const override {
    return base_.collective(kind, bytes, group);
  }
  Seconds p2p(Bytes bytes, bool cross_node) const override { return base_.p2p(bytes, cross_node); }
  std::vector<std::pair<std::string, std::string>> provenance() const override { return base_.provenance(); }

  /// The distinct shapes seen, ordered.
  std::set<Shape> shapes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return shapes_;
  }

 private:
  void note(int64_t m, int64_t n, int64_t k, DType d) const {
    if (m <= 0 || n <= 0 || k <= 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    shapes_.insert({d, m, n, k});
  }
  const CostModel& base_;
  mutable std::mutex mu_;
  mutable std::set<Shape> shapes_;
};

}  // namespace capsim::hw
