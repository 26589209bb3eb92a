#include "capsim/core/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace capsim {

namespace {

double dbl(int64_t v) { return static_cast<double>(v); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

/// Piecewise-linear interpolation of y over x in log-log space; x sorted, inside range.
double loglog(const std::vector<double>& x, const std::vector<double>& y, double q) {
  if (x.size() == 1 || q <= x.front()) return y.front();
  if (q >= x.back()) return y.back();
  const size_t i = static_cast<size_t>(std::upper_bound(x.begin(), x.end(), q) - x.begin());
  const double f = (std::log(q) - std::log(x[i - 1])) / (std::log(x[i]) - std::log(x[i - 1]));
  return std::exp(std::log(y[i - 1]) + f * (std::log(y[i]) - std::log(y[i - 1])));
}

/// Weighted least squares for t = a + b s with weights 1/t^2 (relative error).
std::pair<double, double> ab_fit(const std::vector<double>& s, const std::vector<double>& t, size_t skip) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == skip || t[i] <= 0) continue;
    const double w = 1.0 / (t[i] * t[i]);
    sw += w, sx += w * s[i], sy += w * t[i], sxx += w * s[i] * s[i], sxy += w * s[i] * t[i];
  }
  const double det = sw * sxx - sx * sx;
  if (sw == 0) return {0, 0};
  if (std::abs(det) <= 1e-9 * std::max(1e-300, sw * sxx)) {
    // One size: a small message measures latency, a large one bandwidth.
    /// 1 MiB: where NCCL all-reduce leaves its latency floor on NVLink (a100 nccl-tests log).
    const double mean_s = sx / sw, mean_t = sy / sw;
    return mean_s >= 1048576.0 ? std::pair{0.0, mean_t / mean_s} : std::pair{mean_t, 0.0};
  }
  double b = (sw * sxy - sx * sy) / det;
  double a = (sy - b * sx) / sw;
  // Physical constraints: neither term negative; refit the other alone.
  if (b < 0) return {sy / sw, 0.0};
  if (a < 0) {
    // t = b s, weighted: minimise sum ((b s - t)/t)^2.
    double num = 0, den = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i == skip || t[i] <= 0) continue;
      num += s[i] / t[i];
      den += s[i] * s[i] / (t[i] * t[i]);
    }
    return {0.0, den > 0 ? num / den : 0.0};
  }
  return {a, b};
}

}  // namespace

std::string_view to_string(CalOp op) {
  switch (op) {
    case CalOp::all_reduce: return "all_reduce";
    case CalOp::all_gather: return "all_gather";
    case CalOp::reduce_scatter: return "reduce_scatter";
    case CalOp::all_to_all: return "all_to_all";
    case CalOp::send_recv: return "send_recv";
  }
  return "?";
}

std::optional<CalOp> parse_cal_op(std::string_view s) {
  if (s == "all_reduce" || s == "allreduce") return CalOp::all_reduce;
  if (s == "all_gather" || s == "allgather") return CalOp::all_gather;
  if (s == "reduce_scatter" || s == "reducescatter") return CalOp::reduce_scatter;
  if (s == "all_to_all" || s == "alltoall") return CalOp::all_to_all;
  if (s == "send_recv" || s == "sendrecv") return CalOp::send_recv;
  return std::nullopt;
}

double busbw_factor(CalOp op, int64_t ranks) {
  const double n = dbl(std::max<int64_t>(1, ranks));
  switch (op) {
    case CalOp::all_reduce: return 2.0 * (n - 1.0) / n;
    case CalOp::send_recv: return 1.0;
    default: return (n - 1.0) / n;
  }
}

double RawMeasurement::flops() const {
  if (kind == Kind::gemm) return 2.0 * dbl(m) * dbl(n) * dbl(k) * dbl(std::max<int64_t>(1, batch));
  if (kind == Kind::attention) return attention_flops(batch, heads, seq_q, seq_kv, head_dim, causal, backward);
  return 0;
}

double attention_flops(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t head_dim, bool causal,
                       bool backward) {
  double f = 4.0 * dbl(batch) * dbl(heads) * dbl(seq_q) * dbl(seq_kv) * dbl(head_dim);
  if (causal) f *= 0.5;
  return backward ? 2.5 * f : f;
}

double CollectiveFit::time(double bytes) const {
  if (!size_bytes.empty() && bytes >= size_bytes.front() && bytes <= size_bytes.back())
    return loglog(size_bytes, time_s, bytes);
  const double bw = busbw_gbps * 1e9;
  return alpha_s + (bw > 0 ? bytes * busbw_factor(op, ranks) / bw : 0.0);
}

CollectiveFit fit_collective(CalOp op, int64_t ranks, int64_t nodes, const std::vector<double>& bytes,
                             const std::vector<double>& seconds) {
  CollectiveFit f;
  f.op = op;
  f.ranks = ranks;
  f.nodes = nodes;
  f.inter = nodes > 1;
  // Median time per size over repeats and in/out-of-place runs.
  std::map<double, std::vector<double>> by_size;
  for (size_t i = 0; i < bytes.size() && i < seconds.size(); ++i)
    if (bytes[i] > 0 && seconds[i] > 0) by_size[bytes[i]].push_back(seconds[i]);
  for (const auto& [b, ts] : by_size) {
    f.size_bytes.push_back(b);
    f.time_s.push_back(median(ts));
  }
  const size_t none = static_cast<size_t>(-1);
  const auto [a, b] = ab_fit(f.size_bytes, f.time_s, none);
  f.alpha_s = a;
  const double factor = busbw_factor(op, ranks);
  f.busbw_gbps = b > 0 ? factor / b / 1e9 : 0.0;
  double sum = 0, loo = 0;
  for (size_t i = 0; i < f.size_bytes.size(); ++i) {
    FitPoint p{f.size_bytes[i], f.time_s[i], a + b * f.size_bytes[i]};
    sum += std::abs(p.rel_err());
    f.error.max_abs = std::max(f.error.max_abs, std::abs(p.rel_err()));
    f.residuals.push_back(p);
    if (f.size_bytes.size() > 2) {
      const auto [la, lb] = ab_fit(f.size_bytes, f.time_s, i);
      loo += std::abs((la + lb * f.size_bytes[i] - f.time_s[i]) / f.time_s[i]);
    }
  }
  const double np = dbl(static_cast<int64_t>(f.size_bytes.size()));
  f.error.points = static_cast<int64_t>(f.size_bytes.size());
  f.error.mape = np > 0 ? sum / np : 0;
  f.error.loo_mape = np > 2 ? loo / np : 0;
  return f;
}

std::optional<double> GemmTable::at(int64_t qm, int64_t qn, int64_t qk) const {
  for (size_t i = 0; i < tflops.size(); ++i)
    if (m[i] == qm && n[i] == qn && k[i] == qk) return tflops[i];
  // The grid cell around the query along each axis.
  // The nearest measured values at or below and at or above q (one scan, no copies: this
  // runs for every GEMM a calibrated model prices).
  auto axis = [](const std::vector<int64_t>& v, int64_t q) -> std::optional<std::pair<int64_t, int64_t>> {
    std::optional<int64_t> lo, hi;
    for (int64_t x : v) {
      if (x <= q && (!lo || x > *lo)) lo = x;
      if (x >= q && (!hi || x < *hi)) hi = x;
    }
    if (!lo || !hi) return std::nullopt;
    return std::make_pair(*lo, *hi);
  };
  const auto am = axis(m, qm), an = axis(n, qn), ak = axis(k, qk);
  if (!am || !an || !ak) return std::nullopt;
  auto find = [&](int64_t a, int64_t b, int64_t c) -> std::optional<double> {
    for (size_t i = 0; i < tflops.size(); ++i)
      if (m[i] == a && n[i] == b && k[i] == c) return tflops[i];
    return std::nullopt;
  };
  auto frac = [](std::pair<int64_t, int64_t> p, int64_t q) {
    return p.first == p.second ? 0.0 : (std::log2(dbl(q)) - std::log2(dbl(p.first))) /
                                           (std::log2(dbl(p.second)) - std::log2(dbl(p.first)));
  };
  const double fm = frac(*am, qm), fn = frac(*an, qn), fk = frac(*ak, qk);
  double v = 0;
  for (int c = 0; c < 8; ++c) {
    const int64_t a = c & 1 ? am->second : am->first, b = c & 2 ? an->second : an->first,
                  d = c & 4 ? ak->second : ak->first;
    const double w = (c & 1 ? fm : 1 - fm) * (c & 2 ? fn : 1 - fn) * (c & 4 ? fk : 1 - fk);
    if (w == 0) continue;
    const auto r = find(a, b, d);
    if (!r) return std::nullopt;  // incomplete cell: do not guess
    v += w * *r;
  }
  return v;
}

void gemm_leave_one_out(GemmTable& t) {
  t.error = FitError{};
  auto find = [&](int64_t a, int64_t b, int64_t c) -> std::optional<double> {
    for (size_t i = 0; i < t.tflops.size(); ++i)
      if (t.m[i] == a && t.n[i] == b && t.k[i] == c) return t.tflops[i];
    return std::nullopt;
  };
  // The nearest measured coordinate below and above `v` on one axis, others fixed.
  auto neighbours = [&](size_t i, int axis) -> std::optional<double> {
    int64_t lo = 0, hi = 0;
    for (size_t j = 0; j < t.tflops.size(); ++j) {
      if (j == i) continue;
      const int64_t c[3] = {t.m[j], t.n[j], t.k[j]}, q[3] = {t.m[i], t.n[i], t.k[i]};
      bool same = true;
      for (int a = 0; a < 3; ++a)
        if (a != axis && c[a] != q[a]) same = false;
      if (!same) continue;
      if (c[axis] < q[axis] && c[axis] > lo) lo = c[axis];
      if (c[axis] > q[axis] && (hi == 0 || c[axis] < hi)) hi = c[axis];
    }
    if (lo == 0 || hi == 0) return std::nullopt;
    auto at = [&](int64_t v) {
      return axis == 0 ? find(v, t.n[i], t.k[i]) : axis == 1 ? find(t.m[i], v, t.k[i]) : find(t.m[i], t.n[i], v);
    };
    const auto ylo = at(lo), yhi = at(hi);
    if (!ylo || !yhi || *ylo <= 0 || *yhi <= 0) return std::nullopt;
    const int64_t q = axis == 0 ? t.m[i] : axis == 1 ? t.n[i] : t.k[i];
    const double f = (std::log(dbl(q)) - std::log(dbl(lo))) / (std::log(dbl(hi)) - std::log(dbl(lo)));
    return *ylo + f * (*yhi - *ylo);  // as GemmTable::at: linear in log2 of each dimension
  };
  double sum = 0;
  for (size_t i = 0; i < t.tflops.size(); ++i) {
    double pred = 0;
    int n = 0;
    for (int axis = 0; axis < 3; ++axis)
      if (auto p = neighbours(i, axis)) pred += *p, ++n;
    if (n == 0 || t.tflops[i] <= 0) continue;
    const double e = std::abs(pred / n - t.tflops[i]) / t.tflops[i];
    sum += e;
    t.error.max_abs = std::max(t.error.max_abs, e);
    ++t.error.points;
  }
  t.error.loo_mape = t.error.points > 0 ? sum / dbl(t.error.points) : 0.0;
}

std::optional<double> AttentionTable::at(double s) const {
  if (seq.empty() || s < seq.front() || s > seq.back()) return std::nullopt;
  return loglog(seq, tflops, s);
}

std::vector<std::string> CalibrationProfile::supplies() const {
  std::vector<std::string> out;
  for (const auto& g : gemm) out.push_back("gemm_" + std::string(to_string(g.dtype)));
  for (const auto& g : grouped_gemm)
    out.push_back("grouped_gemm_" + std::string(to_string(g.dtype)) + "_x" + std::to_string(g.groups));
  for (const auto& a : attention)
    out.push_back(std::string("attention_") + (a.backward ? "bwd" : "fwd") + (a.causal ? "_causal" : "") + "_d" +
                  std::to_string(a.head_dim));
  if (hbm_gbps) out.push_back("hbm");
  if (launch_s) out.push_back("kernel_launch");
  for (const auto& c : collectives)
    out.push_back(std::string(to_string(c.op)) + "_" + std::to_string(c.ranks) + (c.inter ? "_inter" : "_intra"));
  return out;
}

const GemmTable* CalibrationProfile::gemm_table(DType d) const {
  for (const auto& g : gemm)
    if (g.dtype == d) return &g;
  return nullptr;
}

const GemmTable* CalibrationProfile::grouped_gemm_table(DType d, int64_t groups) const {
  for (const auto& g : grouped_gemm)
    if (g.dtype == d && g.groups == groups) return &g;
  return nullptr;
}

const CollectiveFit* CalibrationProfile::collective(CalOp op, int64_t ranks, bool inter) const {
  for (const auto& c : collectives)
    if (c.op == op && c.ranks == ranks && c.inter == inter) return &c;
  return nullptr;
}

const AttentionTable* CalibrationProfile::attention_table(bool backward, bool causal, int64_t head_dim) const {
  for (const auto& a : attention)
    if (a.backward == backward && a.causal == causal && a.head_dim == head_dim) return &a;
  return nullptr;
}

CalibrationProfile fit_profile(const std::vector<RawFile>& raws, const std::string& name) {
  CalibrationProfile p;
  p.name = name;
  // dtype, groups (0: a plain GEMM), m, n, k -> TFLOP/s
  std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t>, std::vector<double>> gemm;
  std::map<std::tuple<bool, bool, int64_t, int64_t>, std::vector<double>> attn;    // bwd,causal,d,seq
  std::map<std::tuple<int, int64_t, int64_t>, std::pair<std::vector<double>, std::vector<double>>> coll;
  std::vector<double> bw_large, bw_any, launch;
  for (const RawFile& r : raws) {
    p.sources.push_back(r.header);
    if (p.gpu.empty()) p.gpu = r.header.gpu;
    for (const RawMeasurement& x : r.rows) {
      if (x.time_s <= 0) continue;
      switch (x.kind) {
        case RawMeasurement::Kind::gemm:
          // A grouped GEMM's rate belongs to its kernel and the number of experts, not to one
          // m x n x k: one grouped kernel's lines make the grouped tables (a per-expert loop
          // of plain GEMMs is not what a grouped GEMM prices), plain GEMMs the plain table.
          if (x.batch > 1 ? x.op == "per_expert_loop" : !x.op.empty()) break;
          gemm[{static_cast<int>(x.dtype), x.batch > 1 ? x.batch : 0, x.m, x.n, x.k}].push_back(x.flops() / x.time_s / 1e12);
          break;
        case RawMeasurement::Kind::attention:
          // Fused kernels only (op names a stand-in otherwise); prefill/training shapes
          // (decode shapes are memory-bound).
          if (x.seq_q == x.seq_kv && (x.op.empty() || x.op == "cudnn"))
            attn[{x.backward, x.causal, x.head_dim, x.seq_q}].push_back(x.flops() / x.time_s / 1e12);
          break;
        case RawMeasurement::Kind::memory:
          bw_any.push_back(x.bytes / x.time_s / 1e9);
          /// 256 MiB and up: far beyond any L2 (50-60 MB on Hopper), so HBM streams.
          if (x.bytes >= 256.0 * 1024 * 1024) bw_large.push_back(x.bytes / x.time_s / 1e9);
          break;
        case RawMeasurement::Kind::launch: launch.push_back(x.time_s); break;
        case RawMeasurement::Kind::collective: {
          auto& v = coll[{static_cast<int>(x.coll), x.ranks, x.nodes}];
          v.first.push_back(x.bytes);
          v.second.push_back(x.time_s);
          break;
        }
      }
    }
  }
  for (const auto& [key, vals] : gemm) {
    // Named copies, not structured bindings: clang before 16 cannot capture those in a lambda.
    const int dt = std::get<0>(key);
    const int64_t groups = std::get<1>(key), m = std::get<2>(key), n = std::get<3>(key), k = std::get<4>(key);
    std::vector<GemmTable>& tables = groups > 0 ? p.grouped_gemm : p.gemm;
    auto it = std::find_if(tables.begin(), tables.end(),
                           [&](const GemmTable& g) { return static_cast<int>(g.dtype) == dt && g.groups == groups; });
    if (it == tables.end()) {
      tables.push_back(GemmTable{});
      tables.back().dtype = static_cast<DType>(dt);
      tables.back().groups = groups;
      it = tables.end() - 1;
    }
    it->m.push_back(m), it->n.push_back(n), it->k.push_back(k), it->tflops.push_back(median(vals));
  }
  for (std::vector<GemmTable>* tables : {&p.gemm, &p.grouped_gemm})
    for (GemmTable& t : *tables) gemm_leave_one_out(t);
  for (const auto& [key, vals] : attn) {
    auto [bwd, causal, d, s] = key;
    AttentionTable* t = nullptr;
    for (auto& a : p.attention)
      if (a.backward == bwd && a.causal == causal && a.head_dim == d) t = &a;
    if (!t) {
      p.attention.push_back(AttentionTable{bwd, causal, d, {}, {}});
      t = &p.attention.back();
    }
    t->seq.push_back(dbl(s));
    t->tflops.push_back(median(vals));
  }
  if (!bw_large.empty()) p.hbm_gbps = median(bw_large);
  else if (!bw_any.empty()) p.hbm_gbps = *std::max_element(bw_any.begin(), bw_any.end());
  if (!launch.empty()) p.launch_s = median(launch);
  for (const auto& [key, v] : coll)
    p.collectives.push_back(fit_collective(static_cast<CalOp>(std::get<0>(key)), std::get<1>(key), std::get<2>(key),
                                           v.first, v.second));
  return p;
}

}  // namespace capsim
