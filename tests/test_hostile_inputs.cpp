// Hostile inputs: each is an input error with where and why, never a crash, a hang or an
// "internal error" (docs/hardening.md lists them with what each gets).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "capsim/core/diagnostics.hpp"
#include "capsim/io/calibration_io.hpp"
#include "capsim/io/engines.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/plan_io.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/sweep.hpp"

namespace capsim {

void PrintTo(const Issue& i, std::ostream* os);

namespace {

namespace fs = std::filesystem;

/// The issues parse_json throws for `text`.
std::vector<Issue> parse_issues(const std::string& text) {
  try {
    (void)io::parse_json(text, "in.json");
  } catch (const InputError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "expected an InputError for " << text.substr(0, 200);
  return {};
}

/// The issues read_text_file throws for `path`.
std::vector<Issue> read_issues(const fs::path& path, std::uintmax_t max_bytes = io::kMaxInputFileBytes) {
  try {
    (void)io::read_text_file(path, max_bytes);
  } catch (const InputError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "expected an InputError for " << path;
  return {};
}

// Rule: a number beyond the range of a double is an input error at its line and column.
TEST(HostileJson, NumberBeyondDoubleRange) {
  EXPECT_EQ(parse_issues("{\n  \"tp\": 1,\n  \"qps\": 1e309\n}"),
            (std::vector<Issue>{{"in.json", "1e309",
                                 "number at line 3, column 10 is beyond the range of a double (about 1.8e308)", ""}}));
  EXPECT_EQ(parse_issues("[-2e400]"),
            (std::vector<Issue>{{"in.json", "-2e400",
                                 "number at line 1, column 2 is beyond the range of a double (about 1.8e308)", ""}}));
}

// Rule: nesting is bounded (a deep tree overflows the stack when printed); 256 levels pass.
TEST(HostileJson, NestingDeeperThanTheLimit) {
  const std::string ok = std::string(io::kMaxJsonDepth, '[') + std::string(io::kMaxJsonDepth, ']');
  EXPECT_NO_THROW((void)io::parse_json(ok, "in.json"));
  EXPECT_EQ(parse_issues(std::string(100000, '[') + std::string(100000, ']')),
            (std::vector<Issue>{
                {"in.json", "", "arrays and objects nested deeper than 256 levels at line 1, column 257", ""}}));
  EXPECT_EQ(parse_issues("{\"a\": \"[{[\",\n \"b\": " + std::string(300, '[')),
            (std::vector<Issue>{
                {"in.json", "", "arrays and objects nested deeper than 256 levels at line 2, column 262", ""}}));
}

// Rule: a key twice in one object is rejected with both places (the parser would keep the last).
TEST(HostileJson, DuplicateKey) {
  EXPECT_EQ(parse_issues("{\n  \"training\": {\"tp\": 2,\n                \"pp\": 1, \"tp\": 4}\n}"),
            (std::vector<Issue>{{"in.json#/training/tp", "\"tp\"",
                                 "key appears twice in one object, at line 2, column 16 and line 3, column 26",
                                 "keep one of them"}}));
  // The pointer counts array elements and escapes '~' and '/' (RFC 6901).
  EXPECT_EQ(parse_issues(R"({"a": [1, {"x": 0}, [2], {"b/c~": {"k": 1, "k": 2}}]})")[0].pointer, "in.json#/a/3/b~1c~0/k");
  // The same key in two different objects is fine.
  EXPECT_NO_THROW((void)io::parse_json(R"({"a": {"tp": 1}, "b": {"tp": 2}, "tp": [{"tp": 3}]})", "in.json"));
}

// Rule: only regular files are read: a device or a folder would never end or is not input.
TEST(HostileFile, NotARegularFile) {
  EXPECT_EQ(read_issues("/dev/zero"),
            (std::vector<Issue>{{"/dev/zero", "", "is not a regular file (a folder, FIFO or device)", ""}}));
  EXPECT_EQ(read_issues(fs::temp_directory_path()),
            (std::vector<Issue>{
                {fs::temp_directory_path().string(), "", "is not a regular file (a folder, FIFO or device)", ""}}));
}

// Rule: a file above the size limit is rejected before it is read.
TEST(HostileFile, LargerThanTheLimit) {
  const fs::path p = fs::temp_directory_path() / "capsim-hostile-large.json";
  {
    std::ofstream out(p, std::ios::binary);
    out << std::string(3u << 20, ' ');
  }
  EXPECT_EQ(read_issues(p, std::uintmax_t{2} << 20),
            (std::vector<Issue>{{p.string(), "3145728 bytes", "is larger than the limit of 2 MiB for this kind of input", ""}}));
  fs::remove(p);
}

// Rule: bytes that are not UTF-8 (from --set, file names, foreign logs) are replaced in
// reports and messages, which stay valid JSON instead of failing to print.
TEST(HostileText, InvalidUtf8IsReplacedWhenPrinted) {
  const nlohmann::json j = {{"id", std::string("a\xff" "b")}};
  EXPECT_EQ(io::dump_text(j), "{\"id\":\"a\xef\xbf\xbd" "b\"}");
  EXPECT_EQ(io::brief(j["id"]), "\"a\xef\xbf\xbd" "b\"");
}

/// The values of the single axis of a sweep over training.seq_len with `range`.
std::vector<std::string> range_values(const std::string& range) {
  const fs::path p = fs::temp_directory_path() / "capsim-hostile-sweep.json";
  {
    std::ofstream out(p);
    out << R"({"base": {"kind": "training", "model": "llama2-7b",
                        "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 8, "gpus_per_node": 8},
                        "training": {"tp": 1, "pp": 1, "dp": 8, "global_batch": 64, "seq_len": 4096}},
              "axes": [{"path": "training.seq_len", "range": )"
        << range << "}]}";
  }
  const io::SweepSpec spec = io::load_sweep(p);
  fs::remove(p);
  return spec.axes.at(0).values.at(0);
}

// Rule: ranges always advance: integers above 2^53 are counted exactly, and a range whose
// start is its stop has one value even where adding the step changes nothing.
TEST(HostileSweep, RangesThatWouldNotAdvance) {
  EXPECT_EQ(range_values(R"({"start": 9007199254740993, "stop": 9007199254740995})"),
            (std::vector<std::string>{"9007199254740993", "9007199254740994", "9007199254740995"}));
  EXPECT_EQ(range_values(R"({"start": 1e300, "stop": 1e300})"), (std::vector<std::string>{"1e+300"}));
}

/// Writes `text` to a file named `name` in the temporary folder.
fs::path temp_file(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / name;
  std::ofstream out(p, std::ios::binary);
  out << text;
  return p;
}

/// The issues `read` throws, formatted.
template <class F>
std::vector<std::string> issues_of(F&& read) {
  try {
    read();
  } catch (const InputError& e) {
    std::vector<std::string> out;
    for (const auto& i : e.issues()) out.push_back(format_issue(i));
    return out;
  }
  ADD_FAILURE() << "expected an InputError";
  return {};
}

// Rule: a raw calibration line that is JSON the strict reader refuses (a number beyond the
// range of a double, a key twice) is an input error at file:line, like any bad line.
TEST(HostileCalibration, RawLineWithANumberBeyondDoubleRange) {
  const std::string header = R"({"schema":"capsim-calibration-raw/1","kind":"header"})";
  const fs::path p = temp_file("capsim-hostile-raw.jsonl", header + "\n" + R"({"kind":"launch","time_s":1e309})" + "\n");
  const auto got = issues_of([&] { (void)io::read_raw(p); });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], p.string() + ":2: number at line 1, column 27 is beyond the range of a double (about 1.8e308) "
                                 "(got 1e309)");
  const fs::path q = temp_file("capsim-hostile-raw-header.jsonl", R"({"schema":1e999})");
  EXPECT_EQ(issues_of([&] { (void)io::read_raw(q); }).size(), 2u);  // the number, and no header
  fs::remove(p);
  fs::remove(q);
}

// Rule: a raw GEMM row's shape is whole numbers up to 2^31; 1e300 or 2.5 is an input error
// with its place, not an undefined conversion.
TEST(HostileCalibration, RawShapeBeyondLimits) {
  const std::string header = R"({"schema":"capsim-calibration-raw/1","kind":"header"})";
  const fs::path p = temp_file("capsim-hostile-raw-shape.jsonl",
                               header + "\n" + R"({"kind":"gemm","dtype":"bf16","m":1e300,"n":2.5,"k":4096,"time_s":0.001})" + "\n");
  const auto got = issues_of([&] { (void)io::read_raw(p); });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(got[0].find("/m: must be a whole number from 0 to 2^31 (got 1e+300)"), std::string::npos) << got[0];
  EXPECT_NE(got[1].find("/n: must be a whole number from 0 to 2^31 (got 2.5)"), std::string::npos) << got[1];
  fs::remove(p);
}

// Rule: an integer of a calibration profile given as a float beyond int64 (1e300 ranks) is an
// input error, not a conversion with undefined result.
TEST(HostileCalibration, ProfileIntegerBeyondInt64) {
  const fs::path p = temp_file("capsim-hostile-profile.json", R"({"schema": "capsim-calibration-profile/1",
    "collectives": [{"op": "all_reduce", "ranks": 1e300, "nodes": 1, "alpha_s": 1e-5, "busbw_gbps": 100,
                     "size_bytes": [1024], "time_s": [1e-5]}]})");
  const auto got = issues_of([&] { (void)io::read_profile(p); });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("malformed profile: "), std::string::npos) << got[0];
  EXPECT_NE(got[0].find("1e+300"), std::string::npos) << got[0];
  fs::remove(p);
}

/// A shipped preset as JSON, to be broken one place at a time.
nlohmann::json shipped(const std::string& folder, const std::string& id) {
  return io::read_json_file(io::data_dir() / folder / (id + ".json"));
}

// Rule: a GPU preset is outside input (CAPSIM_DATA_DIR may point anywhere): a fact or an
// efficiency without its "value", a source that is not a string, a shape that is not three
// numbers and an attention table without rising lengths are input errors at their place,
// all at once (a missing "value" was read through a dangling reference).
TEST(HostileDataFile, GpuPresetWithMissingAndMistypedFields) {
  nlohmann::json g = shipped("gpus", "h100-sxm5-80gb");
  g["facts"]["sm_count"].erase("value");
  g["efficiency"]["gemm_bf16"].erase("value");
  g["efficiency"]["hbm"]["source"] = nlohmann::json::array({7});
  g["efficiency"]["gemm_fp8"]["shape"] = nlohmann::json::array({8192, "n", 8192});
  g["efficiency"]["attention_fwd"]["seq_len"] = nlohmann::json::array();
  g["efficiency"]["attention_bwd"]["hdim128_causal"] = nlohmann::json::array({2.0});
  g["name"] = 5;
  const auto got = issues_of([&] { (void)io::gpu_from_json(g, "gpu.json"); });
  const std::vector<std::string> want = {
      "gpu.json#/name: must be a string (got 5)",
      "gpu.json#/facts/sm_count/value: is required (a number, or null)",
      "gpu.json#/efficiency/gemm_bf16/value: must be a positive number",
      "gpu.json#/efficiency/hbm/source: every source must be a string (a key of \"sources\") (got 7)",
      "gpu.json#/efficiency/hbm/source: every efficiency needs a source",
      "gpu.json#/efficiency/gemm_fp8/shape: must be [m, n, k], each at least 1 (got [8192,\"n\",8192])",
      "gpu.json#/efficiency/attention_fwd/seq_len: is required: sequence lengths, rising from above 0",
      "gpu.json#/efficiency/attention_bwd/hdim128_causal: must list one efficiency in (0, 1] per seq_len entry",
  };
  for (const auto& w : want) EXPECT_NE(std::find(got.begin(), got.end(), w), got.end()) << "missing: " << w;
  EXPECT_EQ(got.size(), want.size());
}

// Rule: a fused optimizer step's share of the stream rate is in (0, 1] and sourced, or null
// (not measured: the stream rate); a missing record is an error.
TEST(HostileDataFile, GpuPresetOptimizerStreamShare) {
  nlohmann::json g = shipped("gpus", "h100-sxm5-80gb");
  g["efficiency"]["optimizer_stream"]["value"] = 1.4;
  auto got = issues_of([&] { (void)io::gpu_from_json(g, "gpu.json"); });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "gpu.json#/efficiency/optimizer_stream/value: must be at most 1 (a share of the stream rate) (got 1.4)");
  g["efficiency"]["optimizer_stream"]["value"] = 0;
  got = issues_of([&] { (void)io::gpu_from_json(g, "gpu.json"); });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "gpu.json#/efficiency/optimizer_stream/value: must be a positive number (got 0)");
  g["efficiency"].erase("optimizer_stream");
  got = issues_of([&] { (void)io::gpu_from_json(g, "gpu.json"); });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "gpu.json#/efficiency/optimizer_stream: is required");
  g["efficiency"]["optimizer_stream"] = {{"value", nullptr}, {"source", nlohmann::json::array()}};
  EXPECT_EQ(io::gpu_from_json(g, "gpu.json").efficiency.optimizer_stream.value, 0.0);
}

// Rule: NCCL's thread-block counts are whole, positive and sourced, or null (not measured:
// the computation beside that communication is not slowed); a missing record is an error.
TEST(HostileDataFile, GpuPresetNcclBlockCounts) {
  nlohmann::json g = shipped("gpus", "h100-sxm5-80gb");
  g["efficiency"]["nccl_ctas_nvlink"]["value"] = 24.5;
  g["efficiency"]["nccl_ctas_network"]["value"] = -16;
  g["efficiency"].erase("nccl_p2p_ctas_nvlink");
  const auto got = issues_of([&] { (void)io::gpu_from_json(g, "gpu.json"); });
  const std::vector<std::string> want = {
      "gpu.json#/efficiency/nccl_ctas_nvlink/value: must be a whole number of thread blocks (one per NCCL channel) (got 24.5)",
      "gpu.json#/efficiency/nccl_ctas_network/value: must be a positive number (got -16)",
      "gpu.json#/efficiency/nccl_p2p_ctas_nvlink: is required",
  };
  for (const auto& w : want) EXPECT_NE(std::find(got.begin(), got.end(), w), got.end()) << "missing: " << w;
  EXPECT_EQ(got.size(), want.size());
  nlohmann::json unmeasured = shipped("gpus", "h100-sxm5-80gb");
  for (const char* key : {"nccl_ctas_nvlink", "nccl_ctas_network", "nccl_p2p_ctas_nvlink"}) {
    unmeasured["efficiency"][key]["value"] = nullptr;
    unmeasured["efficiency"][key]["source"] = nlohmann::json::array();
  }
  const GpuSpec none = io::gpu_from_json(unmeasured, "gpu.json");
  EXPECT_EQ(none.efficiency.nccl_ctas_nvlink.value, 0.0);
  EXPECT_EQ(none.efficiency.nccl_p2p_ctas_nvlink.value, 0.0);
}

// Rule: the 16-bit fused-MoE line is two figures of one fit; a preset giving one without the
// other is an input error at the missing one's place.
TEST(HostileDataFile, GpuPresetWithHalfA16BitMoeLine) {
  nlohmann::json g = shipped("gpus", "h100-sxm5-80gb");
  g["efficiency"]["moe_kernel_fixed_us_bf16"]["value"] = nullptr;
  const auto got = issues_of([&] { (void)io::gpu_from_json(g, "gpu.json"); });
  const std::vector<std::string> want = {
      "gpu.json#/efficiency/moe_kernel_fixed_us_bf16: must be given together with moe_kernel_hbm_bf16 (a line needs both)"};
  EXPECT_EQ(got, want);
  g["efficiency"].erase("moe_kernel_hbm_bf16");
  const auto missing = issues_of([&] { (void)io::gpu_from_json(g, "gpu.json"); });
  EXPECT_EQ(missing, std::vector<std::string>{"gpu.json#/efficiency/moe_kernel_hbm_bf16: is required"});
}

// Rule: an efficiency figure the model does not read is an input error at its place, not
// a number silently left out; the retired cross-node size curve says what replaced it.
TEST(HostileDataFile, GpuPresetWithUnknownEfficiencyFigures) {
  nlohmann::json g = shipped("gpus", "h100-sxm5-80gb");
  g["efficiency"]["gemm_bf17"] = g["efficiency"]["gemm_bf16"];
  g["efficiency"]["busbw_curve_network"] = g["efficiency"]["busbw_curve_nvlink"];
  const auto got = issues_of([&] { (void)io::gpu_from_json(g, "gpu.json"); });
  const std::vector<std::string> want = {
      "gpu.json#/efficiency/busbw_curve_network: is no longer read: collectives across nodes follow NCCL's "
      "latency-bandwidth model (remove it; measured sweeps belong in a calibration profile, capsim calibrate fit)",
      "gpu.json#/efficiency/gemm_bf17: unknown efficiency figure"};
  EXPECT_EQ(got, want);
}

// Rule: an engine profile's id, name or label of another type is an input error, not a
// type error escaping the reader.
TEST(HostileDataFile, EngineProfileWithMistypedNames) {
  nlohmann::json e = shipped("engines", "vllm-v1");
  e["id"] = 1;
  e["label"] = nlohmann::json::array();
  const auto got = issues_of([&] { (void)io::engine_profile_from_json(e, "engine.json"); });
  const std::vector<std::string> want = {
      "engine.json#/id: must be a string (got 1)",
      "engine.json#/label: must be a string (got [])",
      "engine.json#/id: is required",
  };
  EXPECT_EQ(got, want);
}

// A knob that names one of two rules takes only those two words: what "auto" runs for
// max_num_seqs, the capture size a scenario leaves, what the memory fraction is a fraction
// of, the kernel of block-FP8 linear layers, how MLA's down projections run, where a shared
// expert runs, how tokens reach the experts behind attention DP.
TEST(HostileDataFile, EngineProfileWithAnUnknownRuleWord) {
  struct Case {
    const char* profile;
    const char* knob;
    nlohmann::json value;
    const char* want;
  };
  const std::vector<Case> cases = {
      {"trtllm", "batch_limits_auto", "largest",
       "engine.json#/knobs/batch_limits_auto/value: must be \"default\" or \"trtllm-bench\" (got \"largest\")"},
      {"trtllm", "cuda_graph_max_tokens_auto", 512,
       "engine.json#/knobs/cuda_graph_max_tokens_auto/value: must be \"default\" or \"max_num_seqs\" (got 512)"},
      {"trtllm", "gpu_memory_utilization_of", "weights",
       "engine.json#/knobs/gpu_memory_utilization_of/value: must be \"total\" or \"free\" (got \"weights\")"},
      {"sglang-0.4", "activation_peak", "none",
       "engine.json#/knobs/activation_peak/value: must be \"in_share\" or \"in_headroom\" (got \"none\")"},
      {"sglang-0.5", "block_fp8_gemm", "cublas",
       "engine.json#/knobs/block_fp8_gemm/value: must be \"fixed_tile\" or \"deepgemm\" (got \"cublas\")"},
      {"sglang-0.5", "shared_expert", true,
       "engine.json#/knobs/shared_expert/value: must be \"separate\" or \"fused\" (got true)"},
      {"lmdeploy-turbomind-0.1", "tp_all_reduce", "custom",
       "engine.json#/knobs/tp_all_reduce/value: must be \"engine_kernel\" or \"nccl\" (got \"custom\")"},
      {"tgi-3", "max_num_batched_tokens_auto", "compute",
       "engine.json#/knobs/max_num_batched_tokens_auto/value: must be \"default\" or \"tgi-launcher\" (got \"compute\")"},
      {"sglang-0.5", "mla_down_projections", "merged",
       "engine.json#/knobs/mla_down_projections/value: must be \"separate\" or \"fused\" (got \"merged\")"},
      {"trtllm", "moe_dp_exchange", "deepep",
       "engine.json#/knobs/moe_dp_exchange/value: must be \"all_to_all\" or \"gather_reduce_scatter\" (got \"deepep\")"},
      {"vllm-v0.6", "activation_quant", "per_token",
       "engine.json#/knobs/activation_quant/value: must be \"fused\" or \"separate\" (got \"per_token\")"},
      {"lmdeploy-turbomind", "residual_norm", "fused",
       "engine.json#/knobs/residual_norm/value: must be \"separate\" or \"in_all_reduce\" (got \"fused\")"},
      {"lmdeploy-turbomind-0.1", "mlp_gate_up", 2,
       "engine.json#/knobs/mlp_gate_up/value: must be \"fused\" or \"separate\" (got 2)"},
      {"lmdeploy-turbomind", "int4_gated_activation", "epilogue",
       "engine.json#/knobs/int4_gated_activation/value: must be \"separate\" or \"in_gemm\" (got \"epilogue\")"},
      {"vllm-v1", "rope_kv_write", "inline",
       "engine.json#/knobs/rope_kv_write/value: must be \"separate\", \"fused\" or \"in_attention\" (got \"inline\")"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.knob);
    nlohmann::json e = shipped("engines", c.profile);
    e["knobs"][c.knob]["value"] = c.value;
    const auto got = issues_of([&] { (void)io::engine_profile_from_json(e, "engine.json"); });
    EXPECT_EQ(got, std::vector<std::string>{c.want});
  }
}

// SGLang's deployment-sized knobs: a memory reserve with an unknown or out-of-range figure,
// a share table out of order or above 1, and a negative context threshold are reported
// together, each at its place.
TEST(HostileDataFile, EngineProfileWithBrokenDeploymentRules) {
  nlohmann::json e = shipped("engines", "sglang-0.5");
  e["knobs"]["memory_reserve"]["value"]["gib"] = 10;
  e["knobs"]["cuda_graph_max_tokens_tp4"]["value"] = -1;
  const auto got = issues_of([&] { (void)io::engine_profile_from_json(e, "engine.json"); });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "engine.json#/knobs/cuda_graph_max_tokens_tp4/value: must be an integer >= 0 (got -1)");
  EXPECT_EQ(got[1].substr(0, got[1].find(" (got")),
            "engine.json#/knobs/memory_reserve/value: must be an object of numbers in [0, 1e9] with fixed_mib, of: "
            "fixed_mib, mib_per_prefill_token, min_prefill_tokens, mib_per_graph_seq, mib_per_model_gpu, "
            "mib_per_dp_graph_seq, mib_per_dp_graph_seq_large, large_graph_seqs, min_mib, min_above_gpu_mib");
  nlohmann::json f = shipped("engines", "sglang-0.4");
  f["knobs"]["gpu_memory_utilization_by_tp"]["value"] = nlohmann::json::array({{4, 0.85}, {2, 0.87}});
  nlohmann::json g = shipped("engines", "sglang-0.4");
  g["knobs"]["gpu_memory_utilization_by_tp"]["value"] = nlohmann::json::array({{1, 1.5}});
  nlohmann::json h = shipped("engines", "vllm-v0.6");
  h["knobs"]["chunked_prefill_above_context"]["value"] = -32768;
  const std::string table_rule = "must be [[tensor-parallel degree, fraction in (0, 1]], ...], degrees ascending from 1";
  EXPECT_EQ(issues_of([&] { (void)io::engine_profile_from_json(f, "engine.json"); }),
            std::vector<std::string>{"engine.json#/knobs/gpu_memory_utilization_by_tp/value: " + table_rule +
                                     " (got [[4,0.85],[2,0.87]])"});
  EXPECT_EQ(issues_of([&] { (void)io::engine_profile_from_json(g, "engine.json"); }),
            std::vector<std::string>{"engine.json#/knobs/gpu_memory_utilization_by_tp/value: " + table_rule + " (got [[1,1.5]])"});
  EXPECT_EQ(issues_of([&] { (void)io::engine_profile_from_json(h, "engine.json"); }),
            std::vector<std::string>{"engine.json#/knobs/chunked_prefill_above_context/value: must be an integer >= 0 (got -32768)"});
}

// vLLM V1's graph-piece knobs: a negative time and a rule value that is not a boolean
// are reported together, each at its place.
TEST(HostileDataFile, EngineProfileWithBrokenGraphPieceKnobs) {
  nlohmann::json e = shipped("engines", "vllm-v1");
  e["knobs"]["piecewise_graph_us_per_layer"]["value"] = -15;
  e["knobs"]["full_graph_decode_steps"]["by_release"][0]["value"] = "yes";
  const auto got = issues_of([&] { (void)io::engine_profile_from_json(e, "engine.json"); });
  EXPECT_EQ(got, (std::vector<std::string>{
                     "engine.json#/knobs/piecewise_graph_us_per_layer/value: must be a number >= 0 (got -15)",
                     "engine.json#/knobs/full_graph_decode_steps/by_release/0/value: must be true or false (got \"yes\")"}));
}

// SGLang's admission estimate: a minimum above the start, a negative clip and a ratio that
// is not a number are reported together.
TEST(HostileDataFile, EngineProfileWithBrokenAdmissionEstimate) {
  nlohmann::json e = shipped("engines", "sglang-0.5");
  e["knobs"]["admission_output_ratio_min"]["value"] = 0.9;
  e["knobs"]["admission_output_clip"]["value"] = -1;
  e["knobs"]["admission_output_ratio_decay_steps"]["value"] = "fast";
  const auto got = issues_of([&] { (void)io::engine_profile_from_json(e, "engine.json"); });
  EXPECT_EQ(got, (std::vector<std::string>{
                     "engine.json#/knobs/admission_output_ratio_decay_steps/value: must be a number >= 0 (got \"fast\")",
                     "engine.json#/knobs/admission_output_clip/value: must be an integer >= 1 (got -1)",
                     "engine.json#/knobs/admission_output_ratio_min/value: must be at most admission_output_ratio_init "
                     "(0.7), itself at most 1 (got 0.9)"}));
}

// A GPU rule of a knob: every broken field is reported at its place, all at once.
TEST(HostileDataFile, EngineProfileWithBrokenGpuRules) {
  nlohmann::json e = shipped("engines", "vllm-v1");
  e["knobs"]["max_num_seqs"]["llm_class"] = 0;
  e["knobs"]["max_num_seqs"]["by_gpu"] = nlohmann::json::array(
      {{{"gpus", "h100"}, {"value", 1024}},
       {{"min_hbm_gib", -1}, {"versions", {{"from", "latest"}}}, {"value", 1.5}, {"colour", "red"}},
       {{"llm_class", 16384}},
       {{"versions", {{"from", "0.9.0"}, {"to", "0.8.5"}}}, {"value", 256}}});
  e["knobs"]["max_num_batched_tokens"]["by_gpu"] = 8192;
  const auto got = issues_of([&] { (void)io::engine_profile_from_json(e, "engine.json"); });
  const std::vector<std::string> want = {
      "engine.json#/knobs/max_num_seqs/llm_class: must be an integer >= 1 (got 0)",
      "engine.json#/knobs/max_num_seqs/by_gpu/0/gpus: must be a list of GPU preset id parts (got \"h100\")",
      "engine.json#/knobs/max_num_seqs/by_gpu/1/min_hbm_gib: must be a number >= 0 (got -1)",
      "engine.json#/knobs/max_num_seqs/by_gpu/1/value: must be an integer >= 1 (got 1.5)",
      "engine.json#/knobs/max_num_seqs/by_gpu/1/versions: must be {\"from\": release, \"to\": release} (either or both) (got {\"from\":\"latest\"})",
      "engine.json#/knobs/max_num_seqs/by_gpu/1/colour: unknown rule key (gpus, except, min_hbm_gib, value, llm_class, versions, note)",
      "engine.json#/knobs/max_num_seqs/by_gpu/2/value: is required",
      "engine.json#/knobs/max_num_seqs/by_gpu/3/versions: holds no release: \"from\" must come before \"to\" "
      "(\"to\" is excluded) (got {\"from\":\"0.9.0\",\"to\":\"0.8.5\"})",
      "engine.json#/knobs/max_num_batched_tokens/by_gpu: must be a list of rules (got 8192)",
  };
  EXPECT_EQ(got, want);
}

// The releases a profile covers: a bound that is not a release, or a range that holds none.
TEST(HostileDataFile, EngineProfileWithBrokenVersionRange) {
  nlohmann::json e = shipped("engines", "vllm-v1");
  e["versions"] = {{"from", "0.9.0"}, {"to", "0.8.0"}};
  EXPECT_EQ(issues_of([&] { (void)io::engine_profile_from_json(e, "engine.json"); }),
            std::vector<std::string>{"engine.json#/versions: holds no release: \"from\" must come before \"to\" "
                                     "(\"to\" is excluded) (got {\"from\":\"0.9.0\",\"to\":\"0.8.0\"})"});
  e["versions"] = {{"from", "latest"}, {"to", nullptr}};
  EXPECT_EQ(issues_of([&] { (void)io::engine_profile_from_json(e, "engine.json"); }),
            std::vector<std::string>{"engine.json#/versions: must be {\"from\": release, \"to\": release} (either "
                                     "or both) (got {\"from\":\"latest\",\"to\":null})"});
  e["versions"] = {{"from", "0.8.0"}, {"to", nullptr}};  // as shipped: open above
  EXPECT_NO_THROW((void)io::engine_profile_from_json(e, "engine.json"));
}

// A knob's release ranges (by_release): every broken entry is reported at its place, all at
// once, and a wrongly typed value is reported whichever release is asked for.
TEST(HostileDataFile, EngineProfileWithBrokenReleaseRanges) {
  nlohmann::json e = shipped("engines", "vllm-v0");
  e["knobs"]["block_size"]["by_release"] = nlohmann::json::array(
      {{{"versions", {{"to", "0.3.0"}}}, {"value", "sixteen"}, {"source", {"vllm_pr2192"}}},
       {{"versions", {{"until", "0.4.1"}}}, {"value", 32}, {"source", {"nowhere"}}, {"colour", "red"}},
       {{"versions", nlohmann::json::object()}, {"source", nlohmann::json::array()}},
       7,
       {{"versions", {{"from", "0.4.1"}, {"to", "0.4.1"}}}, {"value", 16}, {"source", {"vllm_pr2192"}}}});
  e["knobs"]["chunked_prefill"]["by_release"] = true;
  const auto got = issues_of([&] { (void)io::engine_profile_from_json(e, "engine.json", "0.5.4"); });
  const std::vector<std::string> want = {
      "engine.json#/knobs/block_size/by_release/1/versions: must be {\"from\": release, \"to\": release} (either or both) (got {\"until\":\"0.4.1\"})",
      "engine.json#/knobs/block_size/by_release/1/source: must name an entry of \"sources\" (got \"nowhere\")",
      "engine.json#/knobs/block_size/by_release/1/colour: unknown key (versions, value, source, note)",
      "engine.json#/knobs/block_size/by_release/2/versions: must be {\"from\": release, \"to\": release} (either or both) (got {})",
      "engine.json#/knobs/block_size/by_release/2/source: every release range needs a source",
      "engine.json#/knobs/block_size/by_release/2/value: is required",
      "engine.json#/knobs/block_size/by_release/3: must be an object (got 7)",
      "engine.json#/knobs/block_size/by_release/4/versions: holds no release: \"from\" must come before \"to\" "
      "(\"to\" is excluded) (got {\"from\":\"0.4.1\",\"to\":\"0.4.1\"})",
      "engine.json#/knobs/block_size/by_release/0/value: must be an integer >= 1 (got \"sixteen\")",
      "engine.json#/knobs/chunked_prefill/by_release: must be a list of {\"versions\", \"value\", \"source\"} (got true)",
  };
  EXPECT_EQ(got, want);
}

// A plan's serving goal with an object where its list of weight types belongs (found by
// fuzz_plan): an input error at that pointer, beside the file's other problems, not an
// uncaught exception.
TEST(HostilePlan, WeightTypesThatAreNotAList) {
  const auto got = issues_of([] {
    (void)io::load_plan(fs::path(CAPSIM_TEST_SOURCE_DIR) / ".." / "fuzz" / "corpus" / "plan" / "serve-weight-dtypes-object.json");
  });
  ASSERT_EQ(got.size(), 8u);
  EXPECT_NE(std::find(got.begin(), got.end(),
                      "/serving/weight_dtypes: must be a non-empty list of weight types (got {\"dist\":\"fixez\",\"meYn\":100})"),
            got.end());
}

}  // namespace
}  // namespace capsim
