#include "capsim/hw/calibrated.hpp"

#include <algorithm>

namespace capsim::hw {

namespace {
double dbl(int64_t v) { return static_cast<double>(v); }
CalOp cal_op(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce: return CalOp::all_reduce;
    case CollectiveKind::all_gather: return CalOp::all_gather;
    case CollectiveKind::reduce_scatter: return CalOp::reduce_scatter;
    case CollectiveKind::all_to_all: return CalOp::all_to_all;
  }
  return CalOp::all_reduce;
}
}  // namespace

std::optional<double> CalibratedCostModel::gemm_time(int64_t m, int64_t n, int64_t k, DType dtype,
                                                     int64_t batch) const {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return std::nullopt;
  auto rate_in = [&](const GemmTable* t) -> std::optional<double> {
    if (!t) return std::nullopt;
    const auto r = t->at(m, n, k);
    return r && *r > 0 ? r : std::nullopt;
  };
  // A batched GEMM over experts where the profile measured that many in one grouped kernel,
  // else the plain GEMM's rate.
  auto rate = batch > 1 ? rate_in(p_.grouped_gemm_table(dtype, batch)) : std::nullopt;
  if (!rate) rate = rate_in(p_.gemm_table(dtype));
  if (!rate) return std::nullopt;
  const double s = 2.0 * dbl(m) * dbl(n) * dbl(k) * dbl(batch) / (*rate * 1e12);
  return std::max(s, p_.launch_s.value_or(0.0));
}

Seconds CalibratedCostModel::gemm(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch) const {
  if (auto t = gemm_time(m, n, k, dtype, batch)) return Seconds(*t);
  return base_.gemm(m, n, k, dtype, batch);
}

Seconds CalibratedCostModel::gemm_compute(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch) const {
  if (auto t = gemm_time(m, n, k, dtype, batch)) return Seconds(*t);
  return base_.gemm_compute(m, n, k, dtype, batch);
}

Seconds CalibratedCostModel::attention(const AttentionShape& a, bool backward) const {
  if ((a.kernel == AttentionKernel::fused || a.kernel == AttentionKernel::cudnn) && a.q_len == a.kv_len && a.qk_dim == a.v_dim) {
    if (const AttentionTable* t = p_.attention_table(backward, a.causal, a.qk_dim)) {
      if (auto rate = t->at(dbl(a.q_len)); rate && *rate > 0) {
        const double flops = attention_flops(a.batch, a.heads, a.q_len, a.kv_len, a.qk_dim, a.causal, backward);
        return Seconds(std::max(flops / (*rate * 1e12), p_.launch_s.value_or(0.0)));
      }
    }
  }
  return base_.attention(a, backward);
}

Seconds CalibratedCostModel::memory_bound(Bytes bytes) const {
  if (p_.hbm_gbps && *p_.hbm_gbps > 0 && bytes.value > 0) {
    const double launch = p_.launch_s ? *p_.launch_s : base_.memory_bound(Bytes(1)).value;
    return Seconds(std::max(launch, bytes.value / (*p_.hbm_gbps * 1e9)));
  }
  return base_.memory_bound(bytes);
}

Seconds CalibratedCostModel::collective(CollectiveKind kind, Bytes bytes, const Group& group) const {
  if (group.size > 1 && bytes.value > 0)
    if (const CollectiveFit* f = p_.collective(cal_op(kind), group.size, group.nodes() > 1))
      return Seconds(f->time(bytes.value));
  return base_.collective(kind, bytes, group);
}

Seconds CalibratedCostModel::p2p(Bytes bytes, bool cross_node) const {
  // A send/recv measurement of any group size times one pair's transfer (nccl-tests'
  // sendrecv has every rank send to the next); a 2-rank one is preferred.
  if (bytes.value > 0) {
    const CollectiveFit* f = p_.collective(CalOp::send_recv, 2, cross_node);
    for (const auto& c : p_.collectives)
      if (!f && c.op == CalOp::send_recv && c.inter == cross_node) f = &c;
    if (f) return Seconds(f->time(bytes.value));
  }
  return base_.p2p(bytes, cross_node);
}

std::vector<std::pair<std::string, std::string>> CalibratedCostModel::provenance() const {
  auto out = base_.provenance();
  const std::string tag = "calibration:" + p_.name;
  auto set = [&](const std::string& key) {
    for (auto& [k, v] : out)
      if (k == key) {
        v = tag;
        return;
      }
    out.emplace_back(key, tag);
  };
  for (const auto& key : p_.supplies()) set(key);
  return out;
}

}  // namespace capsim::hw
