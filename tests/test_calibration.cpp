// Calibration: published nccl-tests logs import to their printed bus bandwidths, fits
// recover known parameters from noisy synthetic measurements, and a profile changes
// predictions exactly where it measured and nowhere else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "capsim/core/calibration.hpp"
#include "capsim/core/step.hpp"
#include "capsim/core/train.hpp"
#include "capsim/hw/calibrated.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/calibration_io.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/scenario_io.hpp"

namespace capsim {
namespace {

namespace fs = std::filesystem;

/// The issues of the input error `f` throws; none when it reads.
template <class F>
std::vector<Issue> issues_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.issues();
  }
  return {};
}
const fs::path kLogs = fs::path(CAPSIM_TEST_SOURCE_DIR) / "data" / "nccl-tests";

struct LogCase {
  const char* file;
  CalOp op;
  int64_t ranks, nodes;
  double last_oop_busbw, last_ip_busbw;  // SOURCES.md, "largest-size busbw"
};

class NcclTestsImport : public ::testing::TestWithParam<LogCase> {};

TEST_P(NcclTestsImport, LargestSizeBusBandwidthAndGroup) {
  const LogCase c = GetParam();
  const RawFile r = io::import_nccl_tests(kLogs / c.file);
  std::vector<RawMeasurement> rows;
  for (const auto& m : r.rows)
    if (m.coll == c.op) rows.push_back(m);
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows.back().ranks, c.ranks);
  EXPECT_EQ(rows.back().nodes, c.nodes);
  const RawMeasurement& oop = rows[rows.size() - 2];
  const RawMeasurement& ip = rows.back();
  EXPECT_FALSE(oop.in_place);
  EXPECT_TRUE(ip.in_place);
  EXPECT_DOUBLE_EQ(oop.busbw_gbps, c.last_oop_busbw);
  EXPECT_DOUBLE_EQ(ip.busbw_gbps, c.last_ip_busbw);
  // The time column reproduces the printed bus bandwidth (to its rounding) from 64 KiB up.
  for (const auto& m : rows)
    if (m.bytes >= 65536 && m.busbw_gbps > 1) {
      EXPECT_NEAR(m.bytes / m.time_s / 1e9 * busbw_factor(c.op, c.ranks), m.busbw_gbps, 0.01 * m.busbw_gbps + 0.01)
          << c.file << " at " << m.bytes << " B";
    }
}

INSTANTIATE_TEST_SUITE_P(
    PublishedLogs, NcclTestsImport,
    ::testing::Values(LogCase{"dgx-h100-8gpu-allreduce-nvls.txt", CalOp::all_reduce, 8, 1, 479.90, 479.99},
                      LogCase{"a100-8gpu-nvlink-allreduce.txt", CalOp::all_reduce, 8, 1, 232.44, 231.59},
                      LogCase{"a100-8gpu-nvlink-allreduce-mpi-noisy.txt", CalOp::all_reduce, 8, 1, 232.81, 232.93},
                      LogCase{"hgx-h100-2node-ib-allreduce.txt", CalOp::all_reduce, 16, 2, 469.21, 469.10},
                      LogCase{"abci-a100-2node-ib-sharp-allreduce-oldformat.txt", CalOp::all_reduce, 16, 2, 105.46, 105.51},
                      LogCase{"oci-a100-2node-rdma-allreduce.txt", CalOp::all_reduce, 16, 2, 237.94, 237.52},
                      LogCase{"h100-1node-8gpu-5coll-ge32MB.txt", CalOp::all_reduce, 8, 1, 482.27, 482.12},
                      LogCase{"h100-1node-8gpu-5coll-ge32MB.txt", CalOp::all_gather, 8, 1, 361.86, 366.03},
                      LogCase{"h100-1node-8gpu-5coll-ge32MB.txt", CalOp::reduce_scatter, 8, 1, 364.76, 365.09},
                      LogCase{"h100-1node-8gpu-5coll-ge32MB.txt", CalOp::all_to_all, 8, 1, 348.03, 347.25},
                      LogCase{"h100-1node-8gpu-5coll-ge32MB.txt", CalOp::send_recv, 8, 1, 367.25, 367.23},
                      LogCase{"h100-10node-80gpu-5coll-ge32MB.txt", CalOp::all_reduce, 80, 10, 320.54, 322.70},
                      LogCase{"h100-10node-80gpu-5coll-ge32MB.txt", CalOp::all_to_all, 80, 10, 50.38, 50.58},
                      LogCase{"h100-10node-80gpu-5coll-ge32MB.txt", CalOp::send_recv, 80, 10, 15.22, 15.23},
                      LogCase{"t4-2gpu-allreduce-J.json", CalOp::all_reduce, 2, 1, 5.731221, 5.717374}));

TEST(NcclTestsImport, HeaderFacts) {
  const RawFile r = io::import_nccl_tests(kLogs / "hgx-h100-2node-ib-allreduce.txt");
  EXPECT_EQ(r.header.source, "nccl-tests");
  EXPECT_EQ(r.header.nccl, "2.26.2");
  EXPECT_EQ(io::import_nccl_tests(kLogs / "t4-2gpu-allreduce-J.json").header.nccl, "2.29.3");
  EXPECT_EQ(io::import_nccl_tests(kLogs / "h100-1node-8gpu-5coll-ge32MB.txt").header.gpu, "NVIDIA H100 80GB HBM3");
}

TEST(NcclTestsImport, RoundTripsThroughTheRawFormat) {
  const RawFile r = io::import_nccl_tests(kLogs / "h100-10node-80gpu-5coll-ge32MB.txt");
  const fs::path tmp = fs::temp_directory_path() / "capsim-test-raw.jsonl";
  io::write_file_atomic(tmp, io::raw_to_text(r));
  const RawFile back = io::read_raw(tmp);
  EXPECT_EQ(back.rows, r.rows);
  fs::remove(tmp);
}

// Grouped expert GEMMs measured on an H100 (data/calibration/raw/h100-torch-probe-grouped.jsonl):
// each line is `groups` GEMMs of m x n x k run by the kernel `impl`; they keep both through
// the raw format, count the FLOPs of every group, and stay out of a fitted profile's GEMM
// table (a grouped kernel's rate is not one m x n x k's). A group count under one is an
// input error.
TEST(RawFile, GroupedGemmLinesKeepTheirGroupsAndStayOutOfTheFit) {
  const RawFile r = io::read_raw(fs::path(CAPSIM_TEST_DATA_DIR) / "calibration" / "raw" / "h100-torch-probe-grouped.jsonl");
  ASSERT_EQ(r.rows.size(), 354u);
  std::set<std::string> impls;
  for (const RawMeasurement& m : r.rows) {
    ASSERT_EQ(m.kind, RawMeasurement::Kind::gemm);
    EXPECT_GE(m.batch, 4);
    impls.insert(m.op);
  }
  EXPECT_EQ(impls, (std::set<std::string>{"grouped_mm", "per_expert_loop", "scaled_grouped_mm"}));
  const RawMeasurement& first = r.rows.front();  // Qwen3-30B-A3B, 128 experts of 1536 x 2048
  EXPECT_EQ(first.batch, 128);
  EXPECT_DOUBLE_EQ(first.flops(), 2.0 * static_cast<double>(first.m) * 1536.0 * 2048.0 * 128.0);
  const fs::path tmp = fs::temp_directory_path() / "capsim-test-grouped.jsonl";
  io::write_file_atomic(tmp, io::raw_to_text(r));
  EXPECT_EQ(io::read_raw(tmp).rows, r.rows);
  const CalibrationProfile fitted = fit_profile({r}, "grouped");
  EXPECT_TRUE(fitted.gemm.empty());
  // The grouped kernels' lines make one table per dtype and expert count (the per-expert
  // loop of plain GEMMs is left out): 128, 16, 4, 32 and 8 experts, bf16 and FP8.
  ASSERT_EQ(fitted.grouped_gemm.size(), 10u);
  for (const GemmTable& t : fitted.grouped_gemm) EXPECT_TRUE(t.groups == 128 || t.groups == 16 || t.groups == 4 || t.groups == 32 || t.groups == 8);
  // One group is a plain GEMM, the same as a line without the key, and the fit takes it.
  io::write_file_atomic(tmp, R"({"schema": "capsim-calibration-raw/1", "kind": "header", "source": "capsim-calibrate"}
{"kind": "gemm", "dtype": "bf16", "m": 4096, "n": 4096, "k": 4096, "groups": 1, "time_s": 2e-4}
{"kind": "gemm", "dtype": "bf16", "m": 4096, "n": 4096, "k": 4096, "time_s": 2e-4}
)");
  const RawFile plain = io::read_raw(tmp);
  ASSERT_EQ(plain.rows.size(), 2u);
  EXPECT_EQ(plain.rows[0], plain.rows[1]);
  EXPECT_EQ(fit_profile({plain}, "plain").gemm.size(), 1u);
  io::write_file_atomic(tmp, R"({"schema": "capsim-calibration-raw/1", "kind": "header", "source": "capsim-calibrate"}
{"kind": "gemm", "dtype": "bf16", "m": 16, "n": 1536, "k": 2048, "groups": 0, "time_s": 1e-5}
)");
  const std::vector<Issue> bad = issues_of([&] { (void)io::read_raw(tmp); });
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].pointer, tmp.string() + ":2/groups");
  EXPECT_EQ(bad[0].rule, "must be at least 1");
  fs::remove(tmp);
}

// A profile fitted from measured grouped expert GEMMs prices a batched GEMM over that many
// experts by the grouped kernel's measured rate: exactly at a measured point, by log2
// interpolation in the rows between two, and by the plain table or the roofline where the
// shape or the expert count was not measured. The grouped tables survive the profile's JSON.
TEST(CalibratedCostModel, GroupedGemmsFromTheirOwnTable) {
  const RawFile r = io::read_raw(fs::path(CAPSIM_TEST_DATA_DIR) / "calibration" / "raw" / "h100-torch-probe-grouped.jsonl");
  const CalibrationProfile p = fit_profile({r}, "grouped");
  SystemSpec sys;
  sys.gpu = io::load_gpu("h100-sxm5-80gb");
  const hw::RooflineCostModel base(sys);
  const hw::CalibratedCostModel cal(base, p);
  // Qwen3-30B-A3B with all 128 experts on one GPU, gate/up (1536 x 2048), bf16.
  auto measured = [&](int64_t m) {
    for (const RawMeasurement& x : r.rows)
      if (x.batch == 128 && x.n == 1536 && x.k == 2048 && x.m == m && x.op == "grouped_mm") return x.time_s;
    return -1.0;
  };
  ASSERT_GT(measured(256), 0.0);
  EXPECT_NEAR(cal.gemm(256, 1536, 2048, DType::bf16, 128).value / measured(256), 1.0, 1e-9);
  // Between 256 and 512 rows: the rate between the two measured rates.
  const double flops = 2.0 * 362 * 1536 * 2048 * 128;
  const double rate = flops / cal.gemm(362, 1536, 2048, DType::bf16, 128).value;
  const double lo = 2.0 * 256 * 1536 * 2048 * 128 / measured(256), hi = 2.0 * 512 * 1536 * 2048 * 128 / measured(512);
  EXPECT_GT(rate, std::min(lo, hi));
  EXPECT_LT(rate, std::max(lo, hi));
  // Not measured: another expert count, another shape, a plain GEMM.
  EXPECT_EQ(cal.gemm(256, 1536, 2048, DType::bf16, 64).value, base.gemm(256, 1536, 2048, DType::bf16, 64).value);
  EXPECT_EQ(cal.gemm(256, 1000, 2048, DType::bf16, 128).value, base.gemm(256, 1000, 2048, DType::bf16, 128).value);
  EXPECT_EQ(cal.gemm(256, 1536, 2048, DType::bf16, 1).value, base.gemm(256, 1536, 2048, DType::bf16, 1).value);
  const std::vector<std::string> s = p.supplies();
  EXPECT_NE(std::find(s.begin(), s.end(), "grouped_gemm_fp8_x16"), s.end());
  const fs::path tmp = fs::temp_directory_path() / "capsim-test-grouped-profile.json";
  io::write_file_atomic(tmp, io::profile_to_json(p));
  const CalibrationProfile q = io::read_profile(tmp);
  ASSERT_EQ(q.grouped_gemm.size(), p.grouped_gemm.size());
  const hw::CalibratedCostModel back(base, q);
  EXPECT_DOUBLE_EQ(back.gemm(362, 1536, 2048, DType::bf16, 128).value, cal.gemm(362, 1536, 2048, DType::bf16, 128).value);
  // A grouped table without its expert count is an input error where it is.
  nlohmann::json j = nlohmann::json::parse(io::profile_to_json(p));
  j["grouped_gemm"][0].erase("groups");
  io::write_file_atomic(tmp, j.dump());
  const std::vector<Issue> bad = issues_of([&] { (void)io::read_profile(tmp); });
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].pointer, tmp.string() + "/grouped_gemm/0/groups");
  EXPECT_EQ(bad[0].rule, "is required: the GEMMs a grouped kernel runs, at least 2");
  fs::remove(tmp);
}

TEST(NcclTestsImport, UnnamedAmbiguousCollectiveAsksForOp) {
  // An all-gather table with its "Collective test starting" line removed: all-gather and
  // all-to-all share busbw = algbw (n-1)/n and no reduction.
  std::string text = io::read_text_file(kLogs / "h100-1node-8gpu-5coll-ge32MB.txt");
  const size_t a = text.find("# Collective test starting: all_gather_perf");
  const size_t b = text.find("# Collective test concluded: all_gather_perf");
  std::string section = text.substr(a, b - a);
  section.erase(0, section.find('\n') + 1);
  const fs::path tmp = fs::temp_directory_path() / "capsim-test-ag.txt";
  io::write_file_atomic(tmp, section);
  try {
    (void)io::import_nccl_tests(tmp);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(format_issue(e.issues()[0]),
              tmp.string() + ": cannot tell which collective a table measured (all_gather and all_to_all look alike); pass --op");
  }
  EXPECT_EQ(io::import_nccl_tests(tmp, CalOp::all_gather).rows.front().coll, CalOp::all_gather);
  fs::remove(tmp);
}

TEST(NcclTestsImport, SrunLabelPrefixesAreStripped) {
  // The same log as `srun --label` prints it: every line starts with "<task>: ".
  const std::string text = io::read_text_file(kLogs / "hgx-h100-2node-ib-allreduce.txt");
  std::string labelled;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    labelled += " 0: " + text.substr(start, end == std::string::npos ? std::string::npos : end - start + 1);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  const fs::path tmp = fs::temp_directory_path() / "capsim-test-srun.txt";
  io::write_file_atomic(tmp, labelled);
  EXPECT_EQ(io::import_nccl_tests(tmp).rows, io::import_nccl_tests(kLogs / "hgx-h100-2node-ib-allreduce.txt").rows);
  fs::remove(tmp);
}

TEST(NcclTestsImport, MalformedJsonIsAnInputError) {
  const fs::path tmp = fs::temp_directory_path() / "capsim-test-badj.json";
  io::write_file_atomic(tmp, R"({"version":3,"args":["all_reduce_perf"],"config":{"ngpus":2,"devices":[{"hostname":"a"}]},)"
                             R"("results":[{"size":"x","out_of_place":{"time":"y"}}]})");
  try {
    (void)io::import_nccl_tests(tmp);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_NE(format_issue(e.issues()[0]).find(": malformed nccl-tests -J output: "), std::string::npos);
  }
  fs::remove(tmp);
}

TEST(RawFile, BadLinesAllReported) {
  const fs::path tmp = fs::temp_directory_path() / "capsim-test-bad.jsonl";
  io::write_file_atomic(tmp,
                        "{\"schema\":\"capsim-calibration-raw/1\",\"kind\":\"header\",\"source\":\"capsim-calibrate\"}\n"
                        "{\"kind\":\"gemm\",\"dtype\":\"bf17\",\"m\":1,\"n\":1,\"k\":1,\"time_s\":1e-3}\n"
                        "{\"kind\":\"collective\",\"op\":\"all_reduce\",\"ranks\":1,\"bytes\":8,\"time_s\":-1}\n"
                        "{\"kind\":\"gemm\",\"dtype\":\"bf16\",\"m\":1,\"n\":1\n");
  try {
    (void)io::read_raw(tmp);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    std::vector<std::string> got;
    for (const auto& i : e.issues()) got.push_back(format_issue(i));
    const std::string f = tmp.string();
    EXPECT_EQ(got, (std::vector<std::string>{
                       f + ":2/dtype: unknown dtype (got bf17); one of bf16, fp16, fp8, int8",
                       f + ":3/time_s: must be finite and >= 0 (got -1)",
                       f + ":3/ranks: must be at least 2 (got 1)",
                       f + ":4: is not a JSON object (a line cut short?)",
                   }));
  }
  fs::remove(tmp);
}

TEST(CollectiveFit, RecoversLatencyAndBandwidthFromNoisyMeasurements) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> noise(-0.03, 0.03);
  for (auto [op, ranks, alpha, busbw] : {std::tuple{CalOp::all_reduce, 8, 20e-6, 300.0},
                                         std::tuple{CalOp::all_gather, 16, 45e-6, 90.0},
                                         std::tuple{CalOp::all_to_all, 64, 300e-6, 40.0}}) {
    std::vector<double> bytes, secs;
    for (double b = 8; b <= 4.0 * (1ull << 30); b *= 2)
      for (int rep = 0; rep < 3; ++rep) {
        bytes.push_back(b);
        secs.push_back((alpha + b * busbw_factor(op, ranks) / (busbw * 1e9)) * (1 + noise(rng)));
      }
    const CollectiveFit f = fit_collective(op, ranks, ranks > 8 ? ranks / 8 : 1, bytes, secs);
    EXPECT_NEAR(f.alpha_s, alpha, 0.05 * alpha) << to_string(op);
    EXPECT_NEAR(f.busbw_gbps, busbw, 0.03 * busbw) << to_string(op);
    EXPECT_LT(f.error.mape, 0.03);
    EXPECT_LT(f.error.loo_mape, 0.035);
    EXPECT_EQ(f.error.points, 30);
    // Outside the measured sizes the latency-bandwidth line extrapolates.
    EXPECT_NEAR(f.time(64.0 * (1ull << 30)), f.alpha_s + 64.0 * (1ull << 30) * busbw_factor(op, ranks) / (f.busbw_gbps * 1e9), 1e-12);
  }
}

TEST(GemmTable, MeasuredPointsExactInterpolatedInsideNothingOutside) {
  GemmTable t;
  t.dtype = DType::bf16;
  // Rate rises with every dimension: 100 + 10 log2(m n k / 2^27).
  for (int64_t m : {512, 2048, 8192})
    for (int64_t n : {512, 2048, 8192})
      for (int64_t k : {512, 2048, 8192}) {
        t.m.push_back(m), t.n.push_back(n), t.k.push_back(k);
        t.tflops.push_back(100 + 10 * std::log2(static_cast<double>(m * n * k) / 134217728.0));
      }
  EXPECT_DOUBLE_EQ(*t.at(2048, 2048, 2048), 100 + 10 * std::log2(8589934592.0 / 134217728.0));
  // Linear in log2 of each dimension, so the interpolation is exact for this rate.
  EXPECT_NEAR(*t.at(1024, 4096, 2048), 100 + 10 * std::log2(1024.0 * 4096 * 2048 / 134217728.0), 1e-9);
  // Monotone between corners.
  EXPECT_LT(*t.at(1024, 2048, 2048), *t.at(1536, 2048, 2048));
  EXPECT_FALSE(t.at(256, 2048, 2048).has_value());
  EXPECT_FALSE(t.at(2048, 2048, 16384).has_value());
  // A rate linear in log2 of each dimension is predicted exactly from its neighbours:
  // every point with a neighbour on both sides of some axis counts, with no error.
  gemm_leave_one_out(t);
  EXPECT_EQ(t.error.points, 19);  // 27 grid points less the 8 corners
  EXPECT_NEAR(t.error.loo_mape, 0.0, 1e-12);
  // A bump at the centre shows up as leave-one-out error there.
  for (size_t i = 0; i < t.tflops.size(); ++i)
    if (t.m[i] == 2048 && t.n[i] == 2048 && t.k[i] == 2048) t.tflops[i] *= 1.2;
  gemm_leave_one_out(t);
  EXPECT_NEAR(t.error.max_abs, 0.2 / 1.2, 1e-9);
}

Scenario tp8_scenario() {
  return io::load_scenario(fs::path(CAPSIM_TEST_SOURCE_DIR) / ".." / "examples" / "llama3-8b-h100.json",
                           {"training.tp=8", "training.dp=8", "training.pp=1", "training.cp=1", "training.sp=false"});
}

TEST(CalibratedCostModel, ChangesOnlyWhatTheProfileMeasured) {
  const Scenario s = tp8_scenario();
  const hw::RooflineCostModel base(s.system);
  CalibrationProfile p;
  p.name = "ar8";
  p.collectives.push_back(fit_collective(CalOp::all_reduce, 8, 1, {1e3, 1e6, 1e9}, {30e-6, 40e-6, 5e-3}));
  const hw::CalibratedCostModel cal(base, p);
  const Group node8{8, 8}, two_nodes{16, 8};
  for (double b : {1e4, 1e7, 1e8}) {
    EXPECT_DOUBLE_EQ(cal.collective(CollectiveKind::all_reduce, Bytes(b), node8).value, p.collectives[0].time(b));
    EXPECT_NE(cal.collective(CollectiveKind::all_reduce, Bytes(b), node8).value,
              base.collective(CollectiveKind::all_reduce, Bytes(b), node8).value);
    EXPECT_EQ(cal.collective(CollectiveKind::all_gather, Bytes(b), node8).value,
              base.collective(CollectiveKind::all_gather, Bytes(b), node8).value);
    EXPECT_EQ(cal.collective(CollectiveKind::all_reduce, Bytes(b), two_nodes).value,
              base.collective(CollectiveKind::all_reduce, Bytes(b), two_nodes).value);
    EXPECT_EQ(cal.p2p(Bytes(b), false).value, base.p2p(Bytes(b), false).value);
    EXPECT_EQ(cal.memory_bound(Bytes(b)).value, base.memory_bound(Bytes(b)).value);
  }
  EXPECT_EQ(cal.gemm(4096, 4096, 4096, DType::bf16).value, base.gemm(4096, 4096, 4096, DType::bf16).value);
  AttentionShape a;
  a.q_len = a.kv_len = 4096;
  EXPECT_EQ(cal.attention(a, false).value, base.attention(a, false).value);

  // A TP=8 step without sequence parallelism (TP all-reduces): TP communication moves,
  // compute does not.
  const TrainEvaluation e0 = evaluate_training(s, &base), e1 = evaluate_training(s, &cal);
  ASSERT_TRUE(e0.step && e1.step);
  EXPECT_EQ(e0.step->compute_s, e1.step->compute_s);
  EXPECT_EQ(e0.step->recompute_s, e1.step->recompute_s);
  EXPECT_NE(e0.step->total_tp_s, e1.step->total_tp_s);
  bool tagged = false;
  for (const auto& [k, v] : cal.provenance())
    if (k == "all_reduce_8_intra") tagged = v == "calibration:ar8";
  EXPECT_TRUE(tagged);
}

TEST(CalibrationProfile, SameInputSameBytes) {
  const RawFile a = io::import_nccl_tests(kLogs / "h100-10node-80gpu-5coll-ge32MB.txt");
  const RawFile b = io::import_nccl_tests(kLogs / "dgx-h100-8gpu-allreduce-nvls.txt");
  EXPECT_EQ(io::profile_to_json(fit_profile({a, b}, "p")), io::profile_to_json(fit_profile({a, b}, "p")));
  EXPECT_EQ(io::raw_to_text(a), io::raw_to_text(io::import_nccl_tests(kLogs / "h100-10node-80gpu-5coll-ge32MB.txt")));
}

TEST(CalibrationProfile, JsonRoundTripKeepsPredictions) {
  RawFile raw = io::import_nccl_tests(kLogs / "h100-1node-8gpu-5coll-ge32MB.txt");
  RawMeasurement g;
  g.kind = RawMeasurement::Kind::gemm;
  g.m = g.n = g.k = 4096;
  g.time_s = 2.0 * 4096.0 * 4096 * 4096 / 700e12;
  raw.rows.push_back(g);
  const CalibrationProfile p = fit_profile({raw}, "h100");
  const fs::path tmp = fs::temp_directory_path() / "capsim-test-profile.json";
  io::write_file_atomic(tmp, io::profile_to_json(p));
  const CalibrationProfile q = io::read_profile(tmp);
  fs::remove(tmp);
  ASSERT_EQ(q.collectives.size(), 5u);
  for (size_t i = 0; i < 5; ++i)
    for (double b : {1e6, 1e8, 3e9, 1e11}) EXPECT_DOUBLE_EQ(p.collectives[i].time(b), q.collectives[i].time(b));
  ASSERT_TRUE(q.gemm_table(DType::bf16));
  EXPECT_NEAR(*q.gemm_table(DType::bf16)->at(4096, 4096, 4096), 700.0, 1e-6);
}

// The 8-bit GEMMs' K depth (RooflineCostModel::gemm_efficiency) against PyTorch's grouped
// GEMMs on an H100 (data/calibration/raw/h100-torch-probe-grouped.jsonl), FP8 time over
// bf16 time of the same problem at 512-4,096 rows an expert: Qwen3-235B-A22B's
// tensor-parallel down projection (N 4,096, K 192, 128 experts), where FP8 gained nothing,
// and its expert-parallel one (K 1,536, 16 experts) and DeepSeek-V3's EP8 gate and up
// (K 7,168, 32 experts), where it ran 1.5-1.9x bf16. The ratios cancel the boost clock the
// kernels ran at. With K0 counted in each type's own K loop the model reads the K = 192
// ratios 0.82 against a measured 0.99-1.04 and the others within 12%; with the 16-bit K0
// for both types it read the K = 192 ones at 0.58-0.67 of the measured.
TEST(RooflineGemm, EightBitGainFollowsKOnMeasuredGroupedGemms) {
  SystemSpec sys;
  sys.gpu = io::load_gpu("h100-sxm5-80gb");
  const hw::RooflineCostModel cost(sys);
  const RawFile raw = io::read_raw(fs::path(CAPSIM_TEST_DATA_DIR) / "calibration" / "raw" / "h100-torch-probe-grouped.jsonl");
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::map<DType, double>> times;
  for (const RawMeasurement& m : raw.rows)
    if (m.kind == RawMeasurement::Kind::gemm && m.op != "per_expert_loop" && m.m >= 512)
      times[{m.m, m.n, m.k, m.batch}][m.dtype] = m.time_s;
  int checked = 0;
  for (const auto& [shape, t] : times) {
    const auto [rows, n, k, groups] = shape;
    if (!t.contains(DType::fp8) || !t.contains(DType::bf16)) continue;
    if (!(k == 192 || (k == 1536 && n == 4096) || (k == 7168 && groups == 32))) continue;
    const double measured = t.at(DType::fp8) / t.at(DType::bf16);
    const double model = cost.gemm(rows, n, k, DType::fp8, groups).value / cost.gemm(rows, n, k, DType::bf16, groups).value;
    EXPECT_NEAR(model / measured, 1.0, k == 192 ? 0.22 : 0.12) << rows << " x " << n << " x " << k << " x " << groups;
    ++checked;
  }
  EXPECT_EQ(checked, 11);
}

}  // namespace
}  // namespace capsim

namespace capsim {
namespace {

// A whole training step against ones measured on an H200 and an H100 SXM5
// (calibrate/torch_probe.py train-clock, data/calibration/raw/h200-torch-probe-train-clock-
// run2.json and h100-torch-probe-train-clock.json): forward, backward and fused AdamW over
// eight Llama-3-8B-shaped layers, one 8,192-token sequence, bf16, eager PyTorch 2.11, whose
// SDPA ran cuDNN's fused attention (the kernel names in the files). The median step over the
// second half of each run, with the GPU at its 700 W limit (SM clock median 1515 and 1500
// MHz), is 185.6 ms (H200) and 187.2 ms (H100). The kernels sum to 180 and 184 ms: GEMMs 117
// and 116 ms (733-738 TFLOP/s of the 85.8 TFLOP of matrix work), attention 34 ms, elementwise
// 20-23 ms, AdamW 9.3-11.3 ms. The loop's AdamW keeps bf16 weights and moments (14 bytes a
// parameter) where capsim's step keeps fp32 master weights and moments (30 bytes), so the
// optimizer is held apart: the forward and backward, the step less the optimizer, against
// the measured step less its AdamW kernels. capsim, told the attention kernel, read the
// whole step 197 ms (+6%) and 208 ms (+11%) with the typical large-GEMM rate; with the rate
// measured at the power cap (RooflineGemm.SustainedLargeGemmsOnAnH100AndAnH200) its forward
// and backward read 174 ms (-1.2%) and 180 ms (+2.4%). The AdamW kernels themselves set the
// presets' optimizer_stream (0.61 and 0.72 of the stream rate), which
// OptimizerStep.MeasuredShareOfTheStreamRate holds.
TEST(CalibratedCostModel, WholeStepAgainstMeasuredH200AndH100TrainingLoops) {
  struct Run {
    const char* gpu;
    const char* file;
    size_t min_steps;
    double measured, low, high;
  };
  for (const Run& r : {Run{"h200-sxm-141gb", "h200-torch-probe-train-clock-run2.json", 100, 0.1856, -0.03, 0.0},
                       Run{"h100-sxm5-80gb", "h100-torch-probe-train-clock.json", 60, 0.1872, 0.01, 0.04}}) {
    const nlohmann::json m = io::read_json_file(fs::path(CAPSIM_TEST_DATA_DIR) / "calibration" / "raw" / r.file);
    std::vector<double> steps;
    for (const auto& st : m["steps"]) steps.push_back(st["step_s"].get<double>());
    ASSERT_GE(steps.size(), r.min_steps) << r.gpu;
    std::vector<double> late(steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2), steps.end());
    std::sort(late.begin(), late.end());
    const double measured = late[late.size() / 2];
    EXPECT_NEAR(measured, r.measured, 0.0005) << r.gpu;
    double adamw = 0;
    for (const auto& [name, k] : m["kernels"].items())
      if (name.find("FusedOptimizerTensorListMetadata") != std::string::npos) adamw += k["us_per_step"].get<double>() * 1e-6;
    ASSERT_GT(adamw, 0.009) << r.gpu;
    EXPECT_EQ(m["params"].get<int64_t>(), 8 * (4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096 + 2 * 4096));
    nlohmann::json doc = nlohmann::json::parse(R"({
      "id": "eight-layer-loop", "kind": "training",
      "model": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                "intermediate_size": 14336, "num_hidden_layers": 8, "num_attention_heads": 32,
                "num_key_value_heads": 8, "vocab_size": 128, "max_position_embeddings": 8192,
                "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
                "tie_word_embeddings": false},
      "system": {"gpu": "", "num_gpus": 1, "gpus_per_node": 1, "nic_gbps_per_gpu": "auto"},
      "training": {"tp": 1, "pp": 1, "vpp": 1, "dp": 1, "cp": 1, "ep": 1, "etp": 1, "sp": false, "zero": 0,
                   "micro_batch": 1, "global_batch": 1, "seq_len": 8192, "recompute": "none",
                   "precision": "bf16", "optimizer": "adamw", "framework": "pytorch", "attention": "cudnn"}})");
    doc["system"]["gpu"] = r.gpu;
    const Scenario s = io::scenario_from_json(doc);
    const hw::RooflineCostModel cost(s.system);
    const TrainEvaluation e = evaluate_training(s, &cost);
    ASSERT_TRUE(e.step.has_value());
    const double err = (e.step->step_s - e.step->optimizer_s) / (measured - adamw) - 1.0;
    EXPECT_GT(err, r.low) << r.gpu;
    EXPECT_LT(err, r.high) << r.gpu;
  }
}

// NVIDIA's cudnn-frontend benchmark of a whole training iteration (NVIDIA/cudnn-frontend
// benchmark/Llama-3.2-1B-Training/README.md and training_perf.py at 7606332): Hugging Face
// transformers' LlamaForCausalLM with Llama-3.2-1B's config (16 layers, hidden 2048, 32 query
// and 8 KV heads of 64, SwiGLU 8192, vocabulary 128,256, tied embeddings), bf16 weights,
// inputs given as embeddings, logits cast to fp32 for the loss, SGD; eager PyTorch 2.7 with
// cuDNN 9.9 (NGC 25.04), one H200 with its clock locked at 1500 MHz, mean of 100 iterations
// for six batch x sequence shapes under SDPA's cuDNN and flash backends. capsim, told the
// kernel and the eager stack, reads all twelve within 10% with nothing fitted to them (the
// lock is 6% under the 1600 MHz the presets take for sustained tensor work; its SGD is
// priced with fp32 master weights, some 8 ms over the loop's bf16 update): cuDNN +9.3% at
// 1 x 16k down to 0.0% at 24 x 768, flash +5.3% down to -0.8%. The time the flash backend
// adds over cuDNN's, 76, 40 and 17 ms at 16k, 8k and 4k, reads 63, 34 and 14 ms: the cuDNN
// 9.9 kernel is a little faster against FlashAttention-2 than the presets' cuDNN table
// (the FlashAttention-3 paper's cuDNN of 2024).
TEST(CrossCheck, HuggingFaceLlama32OneBTrainingLoopOnH200) {
  struct Point {
    int64_t batch, seq;
    double cudnn, flash;  // seconds per iteration, the README's table
  };
  const Point points[] = {{1, 16384, 0.424, 0.500}, {2, 8192, 0.357, 0.397}, {3, 4096, 0.243, 0.260},
                          {6, 2048, 0.229, 0.240},  {12, 1024, 0.222, 0.228}, {24, 768, 0.329, 0.336}};
  nlohmann::json doc = nlohmann::json::parse(R"({
    "model": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
              "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
              "max_position_embeddings": 131072, "hidden_act": "silu", "rms_norm_eps": 1e-05,
              "rope_theta": 500000.0, "tie_word_embeddings": true},
    "system": {"gpu": "h200-sxm-141gb", "num_gpus": 1, "gpus_per_node": 8},
    "training": {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "zero": 0, "recompute": "none", "precision": "bf16",
                 "optimizer": "sgd", "framework": "pytorch", "elementwise": "eager", "loss": "eager"}})");
  std::vector<double> abs_errors;
  for (const Point& p : points) {
    double predicted[2] = {0, 0};
    int i = 0;
    for (const char* kernel : {"cudnn", "flash2"}) {
      doc["training"]["micro_batch"] = p.batch;
      doc["training"]["global_batch"] = p.batch;
      doc["training"]["seq_len"] = p.seq;
      doc["training"]["attention"] = kernel;
      const Scenario s = io::scenario_from_json(doc);
      const hw::RooflineCostModel cost(s.system);
      const TrainEvaluation e = evaluate_training(s, &cost);
      ASSERT_TRUE(e.step.has_value()) << p.seq << " " << kernel;
      predicted[i] = e.step->step_s;
      const double err = predicted[i] / (i == 0 ? p.cudnn : p.flash) - 1.0;
      EXPECT_LT(std::abs(err), 0.10) << p.batch << " x " << p.seq << " " << kernel << " " << err;
      abs_errors.push_back(std::abs(err));
      ++i;
    }
    EXPECT_GT(predicted[1], predicted[0]) << p.seq;  // FlashAttention-2 is the slower backend
    if (p.seq >= 4096) EXPECT_GT((predicted[1] - predicted[0]) / (p.flash - p.cudnn), 0.75) << p.seq;
  }
  std::sort(abs_errors.begin(), abs_errors.end());
  EXPECT_LT(0.5 * (abs_errors[5] + abs_errors[6]), 0.03);
}

// A fused optimizer step streams at the GPU's measured share of the stream rate: PyTorch's
// fused AdamW over 1,744,896,000 bf16 parameters and moments (14 bytes each) took 11.336 ms on
// an H100 SXM5 and 9.349 ms on an H200 (the training loops above), 0.72 and 0.61 of the
// presets' stream rates; a part with none measured streams at the stream rate.
TEST(OptimizerStep, MeasuredShareOfTheStreamRate) {
  const double params = 1744896000.0;
  for (const auto& [gpu, ms] : {std::pair{"h100-sxm5-80gb", 11.336}, std::pair{"h200-sxm-141gb", 9.349}}) {
    SystemSpec sys;
    sys.gpu = io::load_gpu(gpu);
    const hw::RooflineCostModel cost(sys);
    // 14 bytes a parameter: bf16 moments save 8 of AdamW's 30, and the fp32 master copy
    // (read and written, 8 bytes) the loop did not keep.
    const double t = optimizer_step_seconds(cost, sys, params * 14.0 / 22.0, Optimizer::adamw, true);
    EXPECT_NEAR(t / (ms * 1e-3), 1.0, 0.01) << gpu;
  }
  SystemSpec a100;
  a100.gpu = io::load_gpu("a100-sxm4-80gb");
  const hw::RooflineCostModel cost(a100);
  EXPECT_EQ(a100.gpu.efficiency.optimizer_stream.value, 0.0);
  EXPECT_DOUBLE_EQ(optimizer_step_seconds(cost, a100, params, Optimizer::adamw, false),
                   cost.memory_bound(Bytes(params * 30.0)).value);
}

// A cross-node send is one network hop of NCCL's latency and then the bytes at the sender's
// NIC rate (its line rate times nic_efficiency): 2 MiB on H100 NDR 400 Gb/s takes
// 9.3 us + 2 MiB / 46.25 GB/s = 54.6 us, and twice the bytes take twice the streaming time.
TEST(RooflineP2p, CrossNodeSendIsOneHopThenTheNicRate) {
  const Scenario s = io::load_scenario(fs::path(CAPSIM_TEST_SOURCE_DIR) / ".." / "examples" / "llama3-8b-h100.json");
  ASSERT_EQ(s.system.nic_gbps_per_gpu, 400.0);
  const hw::RooflineCostModel m(s.system);
  const double nic = 400.0 / 8.0 * 1e9 * s.system.gpu.efficiency.nic_efficiency.value;
  const double mib2 = 2.0 * 1024 * 1024;
  const double t = m.p2p(Bytes(mib2), true).value;
  const double lat = m.p2p(Bytes(1), true).value - 1.0 / nic;
  EXPECT_NEAR(lat, 9.3e-6, 1e-9);
  EXPECT_NEAR(t, 9.3e-6 + mib2 / nic, 1e-9);
  EXPECT_NEAR(m.p2p(Bytes(2.0 * mib2), true).value - t, mib2 / nic, 1e-9);
  // Never faster than the NIC's line rate allows.
  EXPECT_GE(t, mib2 / (400.0 / 8.0 * 1e9));
}

}  // namespace
}  // namespace capsim

namespace capsim {
namespace {

// The default cost model against published nccl-tests logs of collectives that span nodes
// (out-of-place times, every size from 8 KiB): NCCL's latency-bandwidth model with the
// presets' bus bandwidths. Per log and collective, the median |relative error| and the
// signed extremes are held to what the model reaches today (a ratchet). The all-reduce
// busbw-by-size curve of 8-GPU nodes it replaced was off by a median 28-31 % on the 1-, 2-
// and 4-GPU-a-node logs, up to +174 % at 32 MiB, and by +117 % at 1 MiB on the 2-node one.
// What is left: 8 GPUs a node over 10 nodes reads 10-58 % fast at 32-256 MiB (the ring's
// latency there is about 600 us, NCCL's own model says 150-370 us), and the 2-node log reads
// 15-35% fast from 8 KiB to 512 KiB and 8 MiB to 128 MiB, between NCCL's protocol switches
// (its NVLS tree, 469 GB/s at 16 GiB, is within 2% at 512 KiB-2 MiB and 1-16 GiB).
TEST(RooflineCollectives, AcrossNodesAgainstPublishedLogs) {
  struct Log {
    fs::path file;
    CalOp op;
    double median, low, high;  // bounds on the median |error| and the signed extremes
  };
  const fs::path more = fs::path(CAPSIM_TEST_SOURCE_DIR) / "data" / "nccl-tests-10node";
  const std::vector<Log> logs = {
      {kLogs / "hgx-h100-2node-ib-allreduce.txt", CalOp::all_reduce, 0.19, -0.36, 0.0},
      {more / "h100-10node-10gpu-1pernode-5coll-ge32MB.txt", CalOp::all_reduce, 0.06, 0.0, 0.07},
      {more / "h100-10node-10gpu-1pernode-5coll-ge32MB.txt", CalOp::all_gather, 0.04, 0.01, 0.10},
      {more / "h100-10node-10gpu-1pernode-5coll-ge32MB.txt", CalOp::reduce_scatter, 0.05, 0.03, 0.11},
      {more / "h100-10node-20gpu-2pernode-5coll-ge32MB.txt", CalOp::all_reduce, 0.07, 0.01, 0.07},
      {more / "h100-10node-20gpu-2pernode-5coll-ge32MB.txt", CalOp::all_gather, 0.08, 0.05, 0.23},
      {more / "h100-10node-20gpu-2pernode-5coll-ge32MB.txt", CalOp::reduce_scatter, 0.07, 0.01, 0.22},
      {more / "h100-10node-40gpu-4pernode-5coll-ge32MB.txt", CalOp::all_reduce, 0.07, -0.39, 0.07},
      {more / "h100-10node-40gpu-4pernode-5coll-ge32MB.txt", CalOp::all_gather, 0.09, 0.05, 0.20},
      {more / "h100-10node-40gpu-4pernode-5coll-ge32MB.txt", CalOp::reduce_scatter, 0.09, 0.03, 0.20},
      {kLogs / "h100-10node-80gpu-5coll-ge32MB.txt", CalOp::all_reduce, 0.15, -0.58, -0.04},
      {kLogs / "h100-10node-80gpu-5coll-ge32MB.txt", CalOp::all_gather, 0.18, -0.38, -0.09},
      {kLogs / "h100-10node-80gpu-5coll-ge32MB.txt", CalOp::reduce_scatter, 0.26, -0.40, -0.08},
  };
  const GpuSpec h100 = io::load_gpu("h100-sxm5-80gb");
  for (const Log& l : logs) {
    const RawFile r = io::import_nccl_tests(l.file);
    std::vector<double> err;
    for (const RawMeasurement& m : r.rows) {
      if (m.coll != l.op || m.in_place || m.bytes < 8192) continue;
      SystemSpec sys;
      sys.gpu = h100;
      sys.gpus_per_node = 8;
      sys.num_gpus = m.ranks;
      sys.nic_gbps_per_gpu = 400;
      const hw::RooflineCostModel cost(sys);
      const CollectiveKind k = l.op == CalOp::all_reduce   ? CollectiveKind::all_reduce
                               : l.op == CalOp::all_gather ? CollectiveKind::all_gather
                                                           : CollectiveKind::reduce_scatter;
      err.push_back(cost.collective(k, Bytes(m.bytes), Group{m.ranks, m.ranks / m.nodes}).value / m.time_s - 1.0);
    }
    const std::string what = l.file.filename().string() + " " + std::string(to_string(l.op));
    ASSERT_GE(err.size(), 10u) << what;
    std::vector<double> abs_err;
    for (double e : err) abs_err.push_back(std::fabs(e));
    std::sort(abs_err.begin(), abs_err.end());
    EXPECT_LE(abs_err[abs_err.size() / 2], l.median) << what;
    EXPECT_GE(*std::min_element(err.begin(), err.end()), l.low) << what;
    EXPECT_LE(*std::max_element(err.begin(), err.end()), l.high) << what;
  }
}

// The roofline's GEMM against kernel tables (data/calibration/raw/): published ones (vLLM's
// benchmarks/kernels/bench_fp8_gemm.py output in vLLM PRs #49363 on H100 and #18778 / #19566
// on B200: CUTLASS per-tensor FP8 with the activation already quantized, and torch BF16) and
// cuBLASLt measured on an H200 (calibrate/torch_probe.py, two runs) and an H100 (one run;
// the short kernels ran at 1965-1980 MHz, about 1.23x the sustained clock the model charges,
// so larger GEMMs read 6-20% slow). The H200 rows' 17-512-row medians moved 2-3 points
// faster when the Hopper presets' large-GEMM rate was measured at the power cap (below), and
// B200's 0.2 points slower when 8-bit GEMMs took their own K depth (gemm_efficiency: a
// tile's fixed time counted in the 8-bit K loop). The bounds record where the model stands, by regime, so that a change to
// it shows here. Up to 16 rows the kernels stream the weights: the bare roofline has no
// fixed time and reads fast (H100 within 15%; B200 and the H200's small shapes 9-73% fast);
// the serving iteration model adds the preset's gemm_tail_us (B200's fitted to these rows)
// and is within a median 6-9% (H100, H200) / 16% (B200). From 17 to 512 rows the Hopper
// presets fill the SMs as cuBLASLt does, with narrower tiles or split K
// (gemm_split_k_min): a median within 20% and no overcharge beyond 2x, where one 256-wide
// tile per 128 rows charged up to 4x. B200 takes the same figure (not measured there): its
// BF16 (cuBLASLt) rows read -30..+6% where they read up to 3.5x slow, its CUTLASS FP8 rows
// 28-61% fast for the bare kernel (the serving model adds gemm_tail_us; docs/engines.md,
// "Where the figures are weak").
TEST(RooflineGemm, AgainstPublishedKernelTables) {
  struct Table {
    const char* gpu;
    const char* file;
    double small_m_low, small_m_high;  // signed error bounds up to 16 rows
    double mid_low, mid_high;           // signed error bounds from 17 to 512 rows
    double mid_median_low, mid_median_high;
    double stream_median;  // the weight stream plus gemm_tail_us, up to 16 rows
  };
  const std::vector<Table> tables = {
      {"h100-sxm5-80gb", "h100-vllm-gemm-public.jsonl", -0.15, 0.03, -0.21, 0.12, -0.06, -0.04, 0.07},
      {"b200", "b200-vllm-gemm-public.jsonl", -0.59, -0.08, -0.62, 0.07, -0.30, -0.28, 0.17},
      {"h200-sxm-141gb", "h200-torch-probe-run1.jsonl", -0.57, -0.06, -0.56, 0.86, -0.14, -0.12, 0.08},
      {"h200-sxm-141gb", "h200-torch-probe-run2.jsonl", -0.73, 0.01, -0.70, 1.02, -0.21, -0.19, 0.10},
      {"h100-sxm5-80gb", "h100-torch-probe-run1.jsonl", -0.47, 0.04, -0.45, 0.66, -0.10, -0.09, 0.09},
  };
  const fs::path dir = fs::path(CAPSIM_TEST_DATA_DIR) / "calibration" / "raw";
  for (const Table& t : tables) {
    SystemSpec sys;
    sys.gpu = io::load_gpu(t.gpu);
    const hw::RooflineCostModel cost(sys);
    const RawFile raw = io::read_raw(dir / t.file);
    ASSERT_GE(raw.rows.size(), 15u) << t.file;
    // The serving iteration model's weight stream: bytes at the rate the cost model streams
    // a gigabyte, plus the preset's fixed kernel time.
    const double rate = 1e9 / cost.memory_bound(Bytes(1e9)).value;
    const double tail = sys.gpu.efficiency.gemm_tail_us.value * 1e-6;
    double small_lo = 1e9, small_hi = -1e9, mid_lo = 1e9, mid_hi = -1e9;
    std::vector<double> stream_err, mid_err;
    for (const RawMeasurement& m : raw.rows) {
      if (m.kind != RawMeasurement::Kind::gemm) continue;
      const double e = cost.gemm(m.m, m.n, m.k, m.dtype, 1).value / m.time_s - 1.0;
      if (m.m <= 16) {
        small_lo = std::min(small_lo, e), small_hi = std::max(small_hi, e);
        const double bytes = static_cast<double>(m.n * m.k) * dtype_bytes(m.dtype) + static_cast<double>(m.m * (m.n + m.k)) * 2.0;
        stream_err.push_back(std::fabs((bytes / rate + tail) / m.time_s - 1.0));
      } else if (m.m <= 512) {
        mid_lo = std::min(mid_lo, e), mid_hi = std::max(mid_hi, e);
        mid_err.push_back(e);
      }
    }
    std::sort(stream_err.begin(), stream_err.end());
    std::sort(mid_err.begin(), mid_err.end());
    ASSERT_GE(stream_err.size(), 4u) << t.file;
    ASSERT_GE(mid_err.size(), 4u) << t.file;
    EXPECT_LE(stream_err[stream_err.size() / 2], t.stream_median) << t.file;
    EXPECT_GE(small_lo, t.small_m_low) << t.file;
    EXPECT_LE(small_hi, t.small_m_high) << t.file;
    EXPECT_GE(mid_lo, t.mid_low) << t.file;
    EXPECT_LE(mid_hi, t.mid_high) << t.file;
    const double mid_median = mid_err[mid_err.size() / 2];
    EXPECT_GE(mid_median, t.mid_median_low) << t.file;
    EXPECT_LE(mid_median, t.mid_median_high) << t.file;
  }
}

// The Hopper SXM presets' large-GEMM rate (the fraction of the rated peak at the sustained
// clock) against 8192 x 8192 x 8192 GEMMs run back to back until the board sat at its 700 W
// limit (data/calibration/raw/*-torch-probe-sustained.jsonl): on an H200 for 25 s (bf16 665
// TFLOP/s, per-tensor FP8 1233) and on an H100 SXM5 for 15 s (680 and 1226). The presets'
// efficiencies are the geometric mean of the two boards' (the typical 0.75 and 0.70 read them
// 6-10% slow), so each board is within 1.5%.
TEST(RooflineGemm, SustainedLargeGemmsOnAnH100AndAnH200) {
  for (const auto& [gpu, file] : {std::pair{"h200-sxm-141gb", "h200-torch-probe-sustained.jsonl"},
                                  std::pair{"h100-sxm5-80gb", "h100-torch-probe-sustained.jsonl"}}) {
    SystemSpec sys;
    sys.gpu = io::load_gpu(gpu);
    const hw::RooflineCostModel cost(sys);
    const RawFile raw = io::read_raw(fs::path(CAPSIM_TEST_DATA_DIR) / "calibration" / "raw" / file);
    ASSERT_EQ(raw.rows.size(), 2u);
    for (const RawMeasurement& m : raw.rows) {
      ASSERT_EQ(m.kind, RawMeasurement::Kind::gemm);
      ASSERT_EQ(m.m, 8192);
      const double e = cost.gemm(m.m, m.n, m.k, m.dtype, 1).value / m.time_s - 1.0;
      EXPECT_LT(std::fabs(e), 0.015) << gpu << " " << to_string(m.dtype);
    }
  }
}

}  // namespace
}  // namespace capsim
