#pragma once
/// A cost model that answers from a calibration profile where the profile measured the
/// case (GEMM shape inside its grid, collective with the same op, group size and scope,
/// attention pass/mask/head dim inside the measured lengths) and from the base model
/// everywhere else.

#include "capsim/core/calibration.hpp"
#include "capsim/core/cost_model.hpp"

namespace capsim::hw {

class CalibratedCostModel final : public CostModel {
 public:
  /// Both must outlive this object.
  CalibratedCostModel(const CostModel& base, const CalibrationProfile& profile) : base_(base), p_(profile) {}

  Seconds gemm(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch = 1) const override;
  Seconds gemm_compute(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch = 1) const override;
  Seconds attention(const AttentionShape& a, bool backward) const override;
  Seconds memory_bound(Bytes bytes) const override;
  Seconds collective(CollectiveKind kind, Bytes bytes, const Group& group) const override;
  Seconds p2p(Bytes bytes, bool cross_node) const override;
  /// The measured launch-to-launch time where the profile has one.
  /// The base model's sources, with "calibration:<profile>" for what the profile supplies.
  std::vector<std::pair<std::string, std::string>> provenance() const override;

 private:
  std::optional<double> gemm_time(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch) const;
  const CostModel& base_;
  const CalibrationProfile& p_;
};

}  // namespace capsim::hw
