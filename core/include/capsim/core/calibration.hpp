#pragma once
/// Calibration: raw microbenchmark measurements (docs/calibration.md) and the profile fitted
/// from them, which a CalibratedCostModel (hwmodels) puts in front of the default model.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capsim/core/cost_model.hpp"
#include "capsim/core/model.hpp"

namespace capsim {

/// The collectives calibration measures: the CostModel's four plus send/recv.
enum class CalOp { all_reduce, all_gather, reduce_scatter, all_to_all, send_recv };
std::string_view to_string(CalOp op);
std::optional<CalOp> parse_cal_op(std::string_view s);  ///< also nccl-tests names: alltoall, sendrecv
/// nccl-tests' bus-bandwidth factor: 2(n-1)/n all-reduce, (n-1)/n all-gather,
/// reduce-scatter and all-to-all, 1 send/recv (nccl-tests doc/PERFORMANCE.md).
double busbw_factor(CalOp op, int64_t ranks);

/// FLOPs of one attention call: QK^T and PV, 4 b h s_q s_kv d, half of it under a causal
/// mask; the backward pass does 2.5 times the forward's matmul work (FlashAttention-2
/// paper, Sec. 4.1).
double attention_flops(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t head_dim, bool causal,
                       bool backward);

struct RawHeader {
  std::string source;  ///< capsim-calibrate or nccl-tests
  std::string host, gpu, driver, cuda_runtime, cublas, cudnn, nccl, created, file;
  int64_t gpu_count = 0;
  bool quick = false;
  bool operator==(const RawHeader&) const = default;
};

/// One measurement line. Fields not used by a kind stay zero.
struct RawMeasurement {
  enum class Kind { gemm, attention, memory, launch, collective };
  Kind kind = Kind::gemm;
  double time_s = 0, p10_s = 0, p90_s = 0;
  DType dtype = DType::bf16;                       ///< gemm, attention
  int64_t m = 0, n = 0, k = 0;                     ///< gemm
  bool backward = false, causal = false;           ///< attention
  /// attention: the batch; gemm: the groups of a grouped GEMM (an MoE layer's experts, each
  /// m x n x k; 0 or 1 for a plain GEMM)
  int64_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0, seq_q = 0, seq_kv = 0;
  std::string op;  ///< memory: copy, triad; attention: impl (empty = fused); gemm: impl (empty = cuBLASLt)
  double bytes = 0;                                ///< memory: moved; collective: nccl-tests size
  CalOp coll = CalOp::all_reduce;                  ///< collective
  int64_t ranks = 0, nodes = 0;
  bool in_place = false;
  double busbw_gbps = 0;
  double flops() const;  ///< gemm 2mnk (times the groups); attention from its shape
  bool operator==(const RawMeasurement&) const = default;
};

struct RawFile {
  RawHeader header;
  std::vector<RawMeasurement> rows;
};

/// A fitted point: what was measured, what the fit predicts there, and their gap.
struct FitPoint {
  double x = 0;          ///< bytes (collectives) or sequence length (attention)
  double measured = 0;   ///< seconds
  double predicted = 0;  ///< seconds, from the fit
  double rel_err() const { return measured > 0 ? (predicted - measured) / measured : 0.0; }
};

/// Error summary of a fit: mean and largest |relative error| over its points and the
/// mean |relative error| predicting each point from a fit without it (leave-one-out).
struct FitError {
  double mape = 0, max_abs = 0, loo_mape = 0;
  int64_t points = 0;
};

/// t(bytes) = alpha + bytes * factor / busbw for one collective, group size and scope,
/// plus the measured bus bandwidth per size (interpolated in log space in range).
struct CollectiveFit {
  CalOp op = CalOp::all_reduce;
  int64_t ranks = 0, nodes = 0;
  bool inter = false;  ///< the group spans nodes
  double alpha_s = 0, busbw_gbps = 0;
  std::vector<double> size_bytes, time_s;  ///< per size: median over repeats and in/out of place
  std::vector<FitPoint> residuals;
  FitError error;
  /// Seconds for `bytes`: the measured table inside its range (log-log interpolation),
  /// the latency-bandwidth fit outside.
  double time(double bytes) const;
};

/// Achieved TFLOP/s of GEMMs of one dtype over measured (m, n, k).
struct GemmTable {
  DType dtype = DType::bf16;
  /// A grouped table's GEMMs one kernel runs over (an MoE layer's experts, each m x n x k;
  /// tflops counts all of them); 0 for a plain GEMM table.
  int64_t groups = 0;
  std::vector<int64_t> m, n, k;   ///< per point
  std::vector<double> tflops;     ///< per point (median over repeats)
  /// Leave-one-out: each point predicted by interpolation (as `at`) between its two
  /// neighbours along each axis (others equal) without it; mean and largest |relative
  /// error| over the points that have neighbours on some axis. The table reproduces its
  /// own points exactly, so this is the error to expect between measured shapes.
  FitError error;
  /// TFLOP/s at (m, n, k): the point when measured; inside a full grid cell, trilinear
  /// interpolation in log2 space of the eight corners (monotone between them); else none
  /// (the caller falls back to the roofline).
  std::optional<double> at(int64_t qm, int64_t qn, int64_t qk) const;
};

/// Achieved TFLOP/s of fused attention by sequence length for one pass, mask and head dim.
struct AttentionTable {
  bool backward = false, causal = false;
  int64_t head_dim = 0;
  std::vector<double> seq, tflops;  ///< sorted by seq
  std::optional<double> at(double s) const;  ///< log interpolation inside the range only
};

struct CalibrationProfile {
  std::string name;  ///< file stem, shown in reports
  std::string gpu;   ///< GPU name from the raw files
  std::vector<RawHeader> sources;
  std::vector<GemmTable> gemm;
  /// Grouped expert GEMMs (PyTorch's grouped kernels, one kernel over the experts), one
  /// table per dtype and group count.
  std::vector<GemmTable> grouped_gemm;
  std::vector<AttentionTable> attention;
  std::optional<double> hbm_gbps;  ///< achieved streaming bandwidth (median of large copies/triads)
  std::optional<double> launch_s;  ///< launch-to-launch time of an empty kernel
  std::vector<CollectiveFit> collectives;

  /// Names of what the profile measured, as reports list them: gemm_<dtype>,
  /// grouped_gemm_<dtype>_x<groups>,
  /// attention_<fwd|bwd>[_causal]_d<head dim>, hbm, kernel_launch, <collective>_<ranks>_<intra|inter>.
  std::vector<std::string> supplies() const;

  const GemmTable* gemm_table(DType d) const;
  const GemmTable* grouped_gemm_table(DType d, int64_t groups) const;
  const CollectiveFit* collective(CalOp op, int64_t ranks, bool inter) const;
  const AttentionTable* attention_table(bool backward, bool causal, int64_t head_dim) const;
};

/// Fits one collective's latency-bandwidth model to (bytes, seconds) points by weighted
/// least squares on relative error (weights 1/t^2), with residuals and leave-one-out error.
CollectiveFit fit_collective(CalOp op, int64_t ranks, int64_t nodes, const std::vector<double>& bytes,
                             const std::vector<double>& seconds);

/// The profile from raw files: GEMM and attention tables, bandwidth, launch time and one
/// collective fit per (collective, group size, scope).
CalibrationProfile fit_profile(const std::vector<RawFile>& raws, const std::string& name);

/// Fills `t.error` (leave-one-out along the grid axes).
void gemm_leave_one_out(GemmTable& t);

}  // namespace capsim
