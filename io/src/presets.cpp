#include "capsim/io/presets.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "capsim/io/json_read.hpp"

#ifndef CAPSIM_DATA_DIR
#define CAPSIM_DATA_DIR "data"
#endif

namespace capsim::io {

using nlohmann::json;
namespace fs = std::filesystem;

fs::path data_dir() {
  if (const char* env = std::getenv("CAPSIM_DATA_DIR"); env && *env) return fs::path(env);
  return fs::path(CAPSIM_DATA_DIR);
}

namespace {

std::vector<std::string> stems(const fs::path& dir, const std::string& skip = {}) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".json" && e.path().stem() != skip) out.push_back(e.path().stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

/// `o[key]` when `o` is an object holding `key`, else null (a const operator[] on a missing
/// key is undefined behaviour in nlohmann/json).
const json* member(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  const auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

/// The numbers of a JSON array, or false when it is not an array of numbers.
bool numbers(const json* a, std::vector<double>& out) {
  if (!a || !a->is_array()) return false;
  out.clear();
  for (const auto& x : *a) {
    if (!x.is_number()) return false;
    out.push_back(x.get<double>());
  }
  return true;
}

}  // namespace

std::vector<std::string> gpu_preset_ids() { return stems(data_dir() / "gpus"); }
std::vector<std::string> model_preset_names() { return stems(data_dir() / "models", "index"); }

GpuSpec gpu_from_json(const json& j, const std::string& origin) {
  std::vector<Issue> issues;
  GpuSpec g;
  if (!j.is_object() || !j.contains("facts") || !j["facts"].is_object()) {
    throw InputError({{origin, "", "not a capsim-gpu/1 file (no \"facts\" object)", {}}});
  }
  ObjectReader top(j, origin + "#", issues);
  top.string("id", g.id);
  g.name = g.id;
  top.string("name", g.name);
  std::string arch;
  top.string("architecture", arch);
  if (arch == "ampere") g.arch = GpuArch::ampere;
  else if (arch == "hopper") g.arch = GpuArch::hopper;
  else if (arch == "blackwell") g.arch = GpuArch::blackwell;
  else issues.push_back({origin + "#/architecture", arch, "must be ampere, hopper or blackwell", {}});
  const json& f = j["facts"];
  auto fact = [&](const char* key, bool required) -> double {
    const json* rec = member(f, key);
    if (!rec || !rec->is_object()) {
      if (required) issues.push_back({origin + "#/facts/" + key, "", "is required", {}});
      return 0.0;
    }
    const json* v = member(*rec, "value");
    if (!v) {
      issues.push_back({origin + "#/facts/" + key + "/value", "", "is required (a number, or null)", {}});
      return 0.0;
    }
    if (v->is_null()) return 0.0;
    if (!v->is_number()) {
      issues.push_back({origin + "#/facts/" + key + "/value", brief(*v), "must be a number or null", {}});
      return 0.0;
    }
    const json* source = member(*rec, "source");
    if (!source || !source->is_array() || source->empty())
      issues.push_back({origin + "#/facts/" + key + "/source", "", "every fact needs a source", {}});
    const double x = v->get<double>();
    if (x < 0) issues.push_back({origin + "#/facts/" + key + "/value", brief(*v), "must not be negative", {}});
    return x;
  };
  g.peak_fp64_tflops = fact("peak_fp64_tflops", true);
  g.peak_tf32_tflops = fact("peak_tf32_tflops", true);
  g.peak_bf16_tflops = fact("peak_bf16_tflops", true);
  g.peak_fp16_tflops = fact("peak_fp16_tflops", true);
  g.peak_fp8_tflops = fact("peak_fp8_tflops", true);
  g.peak_int8_tops = fact("peak_int8_tops", true);
  g.peak_fp4_tflops = fact("peak_fp4_tflops", false);
  g.hbm_capacity_bytes = fact("hbm_capacity_bytes", true);
  g.hbm_bandwidth_gbps = fact("hbm_bandwidth_gbps", true);
  g.l2_cache_mb = fact("l2_cache_mb", true);
  g.sm_count = static_cast<int>(fact("sm_count", true));
  g.boost_clock_mhz = fact("boost_clock_mhz", true);
  g.nvlink_generation = static_cast<int>(fact("nvlink_generation", true));
  g.nvlink_bw_unidir_gbps = fact("nvlink_bw_unidir_gbps", true);
  g.pcie_generation = static_cast<int>(fact("pcie_generation", true));
  g.pcie_bw_unidir_gbps = fact("pcie_bw_unidir_gbps", true);
  g.tdp_w = fact("tdp_w", true);
  g.reference_nic_gbps_per_gpu = fact("reference_nic_gbps_per_gpu", false);
  // Efficiencies from public microbenchmarks, each with its source.
  if (!j.contains("efficiency") || !j["efficiency"].is_object()) {
    issues.push_back({origin + "#/efficiency", "", "is required (measured efficiencies with sources)", {}});
  } else {
    const json& e = j["efficiency"];
    // Every figure read is recorded, so that one the model does not know is an error, not
    // a number silently left out.
    std::set<std::string> known;
    auto figure = [&](const char* key) {
      known.insert(key);
      return member(e, key);
    };
    // The source ids of an efficiency record, joined; a source that is not a string is an issue.
    auto src = [&](const json& rec, const std::string& at) {
      std::string s;
      const json* source = member(rec, "source");
      if (!source || !source->is_array()) return s;
      for (const auto& x : *source) {
        if (!x.is_string()) {
          issues.push_back({at + "/source", brief(x), "every source must be a string (a key of \"sources\")", {}});
          continue;
        }
        s += (s.empty() ? "" : ",") + x.get<std::string>();
      }
      return s;
    };
    auto sourced = [&](const char* key, Sourced& out, bool nullable) {
      const std::string at = origin + "#/efficiency/" + key;
      const json* rec = figure(key);
      if (!rec || !rec->is_object()) {
        issues.push_back({at, "", "is required", {}});
        return;
      }
      const json* v = member(*rec, "value");
      if (v && v->is_null() && nullable) return;
      if (!v || !v->is_number() || v->get<double>() <= 0) {
        issues.push_back({at + "/value", v ? brief(*v) : "", "must be a positive number", {}});
        return;
      }
      out.value = v->get<double>();
      out.source = src(*rec, at);
      if (out.source.empty()) issues.push_back({at + "/source", "", "every efficiency needs a source", {}});
    };
    auto shape = [&](const char* key, std::array<double, 3>& out) {
      const json* rec = figure(key);
      const json* sh = rec ? member(*rec, "shape") : nullptr;
      if (!sh || sh->is_null()) return;
      std::vector<double> v;
      if (!numbers(sh, v) || v.size() != 3 || !std::all_of(v.begin(), v.end(), [](double x) { return x >= 1; })) {
        issues.push_back({origin + "#/efficiency/" + key + "/shape", brief(*sh), "must be [m, n, k], each at least 1", {}});
        return;
      }
      std::copy(v.begin(), v.end(), out.begin());
    };
    sourced("gemm_bf16", g.efficiency.gemm_bf16, false);
    sourced("gemm_fp8", g.efficiency.gemm_fp8, true);
    sourced("gemm_int8", g.efficiency.gemm_int8, true);
    shape("gemm_bf16", g.efficiency.gemm_bf16_shape);
    shape("gemm_fp8", g.efficiency.gemm_fp8_shape);
    shape("gemm_int8", g.efficiency.gemm_int8_shape);
    sourced("gemm_k_half", g.efficiency.gemm_k_half, false);
    sourced("gemm_split_k_min", g.efficiency.gemm_split_k_min, true);
    sourced("gemm_tail_us", g.efficiency.gemm_tail_us, true);
    sourced("graph_kernel_gap_us", g.efficiency.graph_kernel_gap_us, true);
    sourced("optimizer_stream", g.efficiency.optimizer_stream, true);
    if (g.efficiency.optimizer_stream.value > 1.0)
      issues.push_back({origin + "#/efficiency/optimizer_stream/value", brief(json(g.efficiency.optimizer_stream.value)),
                        "must be at most 1 (a share of the stream rate)", {}});
    sourced("decode_attention_fixed_us", g.efficiency.decode_attention_fixed_us, true);
    sourced("gemm_fp8_block", g.efficiency.gemm_fp8_block, true);
    sourced("gemm_fp8_block_large_m", g.efficiency.gemm_fp8_block_large_m, true);
    sourced("moe_kernel_hbm", g.efficiency.moe_kernel_hbm, true);
    sourced("moe_kernel_fixed_us", g.efficiency.moe_kernel_fixed_us, true);
    sourced("moe_kernel_expert_us", g.efficiency.moe_kernel_expert_us, true);
    sourced("moe_kernel_hbm_bf16", g.efficiency.moe_kernel_hbm_bf16, true);
    sourced("moe_kernel_fixed_us_bf16", g.efficiency.moe_kernel_fixed_us_bf16, true);
    sourced("moe_kernel_expert_us_bf16", g.efficiency.moe_kernel_expert_us_bf16, true);
    if ((g.efficiency.moe_kernel_hbm_bf16.value > 0) != (g.efficiency.moe_kernel_fixed_us_bf16.value > 0))
      issues.push_back({origin + "#/efficiency/moe_kernel_fixed_us_bf16", "", "must be given together with moe_kernel_hbm_bf16 (a line needs both)", {}});
    sourced("moe_kernel_compute_fp8", g.efficiency.moe_kernel_compute_fp8, true);
    sourced("moe_kernel_compute_bf16", g.efficiency.moe_kernel_compute_bf16, true);
    sourced("moe_kernel_unhidden", g.efficiency.moe_kernel_unhidden, true);
    sourced("engine_allreduce_fixed_us", g.efficiency.engine_allreduce_fixed_us, true);
    sourced("engine_allreduce_us_per_mib", g.efficiency.engine_allreduce_us_per_mib, true);
    if ((g.efficiency.engine_allreduce_fixed_us.value > 0) != (g.efficiency.engine_allreduce_us_per_mib.value > 0))
      issues.push_back({origin + "#/efficiency/engine_allreduce_us_per_mib", "", "must be given together with engine_allreduce_fixed_us (a line needs both)", {}});
    sourced("sustained_tensor_clock", g.efficiency.sustained_tensor_clock, true);
    sourced("hbm", g.efficiency.hbm, false);
    sourced("allreduce_busbw_gbps", g.efficiency.allreduce_busbw_gbps, false);
    sourced("allreduce_nvls_busbw_gbps", g.efficiency.allreduce_nvls_busbw_gbps, true);
    sourced("allgather_busbw_gbps", g.efficiency.allgather_busbw_gbps, false);
    sourced("reducescatter_busbw_gbps", g.efficiency.reducescatter_busbw_gbps, false);
    sourced("alltoall_busbw_gbps", g.efficiency.alltoall_busbw_gbps, false);
    sourced("nic_efficiency", g.efficiency.nic_efficiency, false);
    sourced("alltoall_nic_efficiency", g.efficiency.alltoall_nic_efficiency, false);
    sourced("nccl_ctas_nvlink", g.efficiency.nccl_ctas_nvlink, true);
    sourced("nccl_ctas_network", g.efficiency.nccl_ctas_network, true);
    sourced("nccl_p2p_ctas_nvlink", g.efficiency.nccl_p2p_ctas_nvlink, true);
    for (const auto& [key, blocks] : {std::pair<const char*, double>{"nccl_ctas_nvlink", g.efficiency.nccl_ctas_nvlink.value},
                                      {"nccl_ctas_network", g.efficiency.nccl_ctas_network.value},
                                      {"nccl_p2p_ctas_nvlink", g.efficiency.nccl_p2p_ctas_nvlink.value}})
      if (blocks > 0 && blocks != std::floor(blocks))
        issues.push_back({origin + "#/efficiency/" + key + "/value", brief(json(blocks)),
                          "must be a whole number of thread blocks (one per NCCL channel)", {}});
    auto attention = [&](const char* key, AttentionEfficiency& out) {
      const std::string at = origin + "#/efficiency/" + key;
      const json* t = figure(key);
      if (!t || !t->is_object()) {
        issues.push_back({at, "", "is required", {}});
        return;
      }
      const char* rows[4] = {"hdim64_noncausal", "hdim64_causal", "hdim128_noncausal", "hdim128_causal"};
      std::vector<double> seq;
      if (!numbers(member(*t, "seq_len"), seq) || seq.empty()) {
        issues.push_back({at + "/seq_len", "", "is required: sequence lengths, rising from above 0", {}});
        return;
      }
      for (size_t i = 0; i < seq.size(); ++i) {
        if (!(seq[i] > 0) || (i > 0 && !(seq[i] > seq[i - 1]))) {
          issues.push_back({at + "/seq_len", "", "must rise from above 0", {}});
          return;
        }
      }
      bool ok = true;
      std::array<std::vector<double>, 4> table;
      for (size_t r = 0; r < 4; ++r) {
        const bool listed = numbers(member(*t, rows[r]), table[r]) && table[r].size() == seq.size() &&
                            std::all_of(table[r].begin(), table[r].end(), [](double x) { return x > 0 && x <= 1; });
        if (!listed) {
          issues.push_back({at + "/" + rows[r], "", "must list one efficiency in (0, 1] per seq_len entry", {}});
          ok = false;
        }
      }
      if (!ok) return;
      out.seq_len = std::move(seq);
      out.table = std::move(table);
      out.source = src(*t, at);
    };
    auto curve = [&](const char* key, BusbwCurve& out) {
      const json* rec = figure(key);
      if (!rec || !rec->is_object() || !numbers(member(*rec, "size_bytes"), out.size_bytes) ||
          !numbers(member(*rec, "fraction"), out.fraction) || out.size_bytes.size() != out.fraction.size() ||
          out.size_bytes.empty()) {
        out.size_bytes.clear();
        out.fraction.clear();
        issues.push_back({origin + "#/efficiency/" + key, "", "needs size_bytes and fraction arrays of one length", {}});
        return;
      }
      out.source = src(*rec, origin + "#/efficiency/" + key);
      for (size_t i = 0; i < out.size_bytes.size(); ++i) {
        const bool rising = i == 0 ? out.size_bytes[i] > 0 : out.size_bytes[i] > out.size_bytes[i - 1];
        if (!rising || !(out.fraction[i] > 0 && out.fraction[i] <= 1)) {
          issues.push_back({origin + "#/efficiency/" + key, "",
                            "needs sizes rising from above 0 and fractions in (0, 1]", {}});
          return;
        }
      }
      // Moving more bytes never takes less time: where a sweep's time dips between two
      // sizes (run-to-run noise), hold the time of the smaller size.
      for (size_t i = 1; i < out.size_bytes.size(); ++i)
        out.fraction[i] = std::min(out.fraction[i], out.fraction[i - 1] * out.size_bytes[i] / out.size_bytes[i - 1]);
    };
    curve("busbw_curve_nvlink", g.efficiency.busbw_curve_nvlink);
    attention("attention_fwd", g.efficiency.attention_fwd);
    attention("attention_bwd", g.efficiency.attention_bwd);
    attention("attention_fa2", g.efficiency.attention_fa2);
    // Optional: the older kernels, where a figure publishes them.
    if (e.contains("attention_flash1")) attention("attention_flash1", g.efficiency.attention_flash1);
    if (e.contains("attention_flash_triton")) attention("attention_flash_triton", g.efficiency.attention_flash_triton);
    // Optional: parts with no cuDNN measurement cost Transformer Engine's attention with the
    // fused tables.
    if (e.contains("attention_cudnn_fwd") || e.contains("attention_cudnn_bwd")) {
      attention("attention_cudnn_fwd", g.efficiency.attention_cudnn_fwd);
      attention("attention_cudnn_bwd", g.efficiency.attention_cudnn_bwd);
    }
    for (const auto& [key, value] : e.items()) {
      if (known.contains(key)) continue;
      issues.push_back({origin + "#/efficiency/" + key, "",
                        key == "busbw_curve_network"
                            ? "is no longer read: collectives across nodes follow NCCL's latency-bandwidth model "
                              "(remove it; measured sweeps belong in a calibration profile, capsim calibrate fit)"
                            : "unknown efficiency figure",
                        {}});
    }
  }
  if (g.peak_bf16_tflops <= 0) issues.push_back({origin + "#/facts/peak_bf16_tflops", "", "must be positive", {}});
  if (g.hbm_capacity_bytes <= 0)
    issues.push_back({origin + "#/facts/hbm_capacity_bytes", "", "must be positive", {}});
  if (!issues.empty()) throw InputError(std::move(issues));
  return g;
}

GpuSpec load_gpu(const std::string& id, const std::string& pointer) {
  const fs::path p = data_dir() / "gpus" / (id + ".json");
  std::error_code ec;
  if (id.empty() || id.find('/') != std::string::npos || !fs::exists(p, ec)) {
    const auto ids = gpu_preset_ids();
    const std::string n = nearest(id, ids);
    throw InputError({{pointer, "\"" + id + "\"", "unknown GPU preset; valid: " + list(ids),
                       n.empty() ? "" : "did you mean \"" + n + "\"?"}});
  }
  return gpu_from_json(read_json_file(p), p.string());
}

namespace {

struct Defaults {
  int64_t hidden, intermediate, layers, heads, kv_heads, vocab, max_pos;
  bool tied;
};

/// Defaults of each transformers config class (configuration_<family>.py, transformers 4.46).
Defaults family_defaults(Family f) {
  switch (f) {
    case Family::gpt2: return {768, 0, 12, 12, 12, 50257, 1024, true};
    case Family::gpt_neox: return {6144, 24576, 44, 64, 64, 50432, 2048, false};
    case Family::llama: return {4096, 11008, 32, 32, 32, 32000, 2048, false};
    case Family::mistral: return {4096, 14336, 32, 32, 8, 32000, 4096 * 32, false};
    case Family::gemma: return {3072, 24576, 28, 16, 16, 256000, 8192, true};
    case Family::qwen2: return {4096, 22016, 32, 32, 32, 151936, 32768, false};
    case Family::qwen3: return {4096, 22016, 32, 32, 32, 151936, 32768, false};
    case Family::nemotron: return {6144, 24576, 32, 48, 48, 256000, 4096, false};
    case Family::mixtral: return {4096, 14336, 32, 32, 8, 32000, 4096 * 32, false};
    case Family::qwen3_moe: return {2048, 6144, 24, 32, 4, 151936, 32768, false};
    case Family::deepseek_v2: return {4096, 11008, 30, 32, 32, 102400, 2048, false};
    case Family::deepseek_v3: return {7168, 18432, 61, 128, 128, 129280, 4096, false};
    case Family::gpt_oss: return {2880, 2880, 36, 64, 8, 201088, 131072, false};
  }
  return {};
}

bool parse_family(const std::string& s, Family& f) {
  static const std::pair<const char*, Family> table[] = {
      {"gpt2", Family::gpt2},          {"gpt_neox", Family::gpt_neox},   {"llama", Family::llama},
      {"mistral", Family::mistral},    {"gemma", Family::gemma},         {"qwen2", Family::qwen2},
      {"qwen3", Family::qwen3},        {"nemotron", Family::nemotron},   {"mixtral", Family::mixtral},
      {"qwen3_moe", Family::qwen3_moe}, {"deepseek_v2", Family::deepseek_v2}, {"deepseek_v3", Family::deepseek_v3},
      {"gpt_oss", Family::gpt_oss},
  };
  for (const auto& [name, fam] : table) {
    if (s == name) {
      f = fam;
      return true;
    }
  }
  return false;
}

/// Problems found while reading a config leniently (a known key with a wrong type).
thread_local std::vector<Issue>* g_config_issues = nullptr;
thread_local const std::string* g_config_pointer = nullptr;

/// Integer from the first present key, or `fallback`; JSON null counts as absent. A key
/// that is present with a value that is not a whole number is reported.
int64_t int_of(const json& c, std::initializer_list<const char*> keys, int64_t fallback) {
  for (const char* k : keys) {
    auto it = c.find(k);
    if (it == c.end() || it->is_null()) continue;
    if (it->is_number_integer()) return it->get<int64_t>();
    if (it->is_number_float()) {
      const double v = it->get<double>();
      if (v == std::trunc(v) && std::abs(v) < 9e18) return static_cast<int64_t>(v);
    }
    if (g_config_issues && g_config_pointer)
      g_config_issues->push_back({*g_config_pointer + "/" + k, brief(*it), "must be an integer", {}});
    return fallback;
  }
  return fallback;
}

bool bool_of(const json& c, const char* key, bool fallback) {
  auto it = c.find(key);
  return it != c.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

double num_of(const json& c, const char* key, double fallback) {
  auto it = c.find(key);
  return it != c.end() && it->is_number() ? it->get<double>() : fallback;
}

std::string str_of(const json& c, std::initializer_list<const char*> keys, const std::string& fallback) {
  for (const char* k : keys) {
    auto it = c.find(k);
    if (it != c.end() && it->is_string()) return it->get<std::string>();
  }
  return fallback;
}

/// Which layers attend through a sliding window, as the family's transformers modeling
/// code decides (transformers 4.56): the config's `layer_types` where it lists them
/// ("sliding_attention" / "full_attention"); else Mistral and Mixtral slide on every layer
/// when `sliding_window` is set (MistralConfig's default is 4096), Qwen2/Qwen3 on the
/// layers from `max_window_layers` up when `use_sliding_window` is true, and gpt-oss on every
/// other layer from the first (GptOssConfig: window 128). Other families have no window.
void read_sliding_window(const json& c, const std::string& pointer, ModelSpec& m, std::vector<Issue>& issues) {
  const Family f = m.family;
  const bool qwen = f == Family::qwen2 || f == Family::qwen3 || f == Family::qwen3_moe;
  const bool reads_window = qwen || f == Family::mistral || f == Family::mixtral || f == Family::gpt_oss;
  if (!reads_window) return;
  if (qwen && !bool_of(c, "use_sliding_window", false)) return;
  const int64_t family_window = f == Family::mistral ? 4096 : f == Family::gpt_oss ? 128 : 0;
  const auto it = c.find("sliding_window");
  int64_t window = family_window;
  if (it != c.end()) window = it->is_null() ? 0 : int_of(c, {"sliding_window"}, 0);
  if (it != c.end() && it->is_number() && window <= 0) {
    issues.push_back({pointer + "/sliding_window", brief(*it), "must be a positive integer or null", {}});
    return;
  }
  if (window <= 0 || m.layers <= 0 || m.layers > kMaxLayers) return;
  std::vector<bool> sliding(static_cast<size_t>(m.layers), false);
  if (auto lt = c.find("layer_types"); lt != c.end() && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != m.layers) {
      issues.push_back({pointer + "/layer_types", brief(*lt),
                        "must list one type per layer (" + std::to_string(m.layers) + ")", {}});
      return;
    }
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& v = (*lt)[i];
      if (v.is_string() && (v == "sliding_attention" || v == "full_attention")) {
        sliding[i] = v == "sliding_attention";
      } else {
        issues.push_back({pointer + "/layer_types/" + std::to_string(i), brief(v),
                          "must be \"sliding_attention\" or \"full_attention\"", {}});
        return;
      }
    }
  } else {
    const int64_t from = qwen ? int_of(c, {"max_window_layers"}, 28) : 0;
    for (int64_t i = 0; i < m.layers; ++i)
      sliding[static_cast<size_t>(i)] = f == Family::gpt_oss ? i % 2 == 0 : i >= from;
  }
  if (std::find(sliding.begin(), sliding.end(), true) == sliding.end()) return;
  m.sliding_window = window;
  m.sliding_layer = std::move(sliding);
}

}  // namespace

ModelSpec model_from_hf_config(const json& c, const std::string& pointer, std::string name) {
  if (!c.is_object()) throw InputError({{pointer, brief(c), "must be a Hugging Face config.json object", {}}});
  const std::string type = str_of(c, {"model_type"}, "");
  ModelSpec m;
  if (type.empty()) throw InputError({{pointer + "/model_type", "", "is required in a config.json", {}}});
  if (!parse_family(type, m.family)) {
    const std::vector<std::string> known = {"gpt2", "gpt_neox", "llama", "mistral", "gemma", "qwen2",
                                            "qwen3", "nemotron", "mixtral", "qwen3_moe", "deepseek_v2",
                                            "deepseek_v3", "gpt_oss"};
    const std::string n = nearest(type, known);
    throw InputError({{pointer + "/model_type", "\"" + type + "\"",
                       "unsupported model family; supported: gpt2, gpt_neox, llama, mistral, gemma, qwen2, qwen3, "
                       "nemotron, mixtral, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss",
                       n.empty() ? "" : "did you mean \"" + n + "\"?"}});
  }
  m.name = name.empty() ? str_of(c, {"_name_or_path"}, type) : std::move(name);
  std::vector<Issue> issues;
  g_config_issues = &issues;
  g_config_pointer = &pointer;
  struct Reset {
    ~Reset() {
      g_config_issues = nullptr;
      g_config_pointer = nullptr;
    }
  } reset;
  const Defaults d = family_defaults(m.family);
  const Family f = m.family;
  const bool gpt2 = f == Family::gpt2;
  m.hidden = int_of(c, {"hidden_size", "n_embd"}, d.hidden);
  m.layers = int_of(c, {"num_hidden_layers", "n_layer"}, d.layers);
  m.heads = int_of(c, {"num_attention_heads", "n_head"}, d.heads);
  m.kv_heads = gpt2 || f == Family::gpt_neox ? m.heads : int_of(c, {"num_key_value_heads"}, f == Family::llama || f == Family::qwen2 || f == Family::qwen3 || f == Family::deepseek_v2 || f == Family::deepseek_v3 || f == Family::gemma || f == Family::nemotron ? m.heads : d.kv_heads);
  m.vocab = int_of(c, {"vocab_size"}, d.vocab);
  m.max_position = int_of(c, {"max_position_embeddings", "n_positions"}, d.max_pos);
  const int64_t default_head_dim = m.heads > 0 ? m.hidden / m.heads : 0;
  const int64_t family_head_dim = f == Family::gemma                               ? 256
                                  : f == Family::qwen3 || f == Family::qwen3_moe ? 128
                                  : f == Family::gpt_oss                         ? 64
                                                                                 : default_head_dim;
  m.head_dim = int_of(c, {"head_dim"}, family_head_dim);
  m.tied_embeddings = bool_of(c, "tie_word_embeddings", d.tied);

  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) issues.push_back({pointer + "/" + key, std::to_string(v), "must be a positive integer", {}});
  };
  positive(gpt2 ? "n_embd" : "hidden_size", m.hidden);
  positive(gpt2 ? "n_layer" : "num_hidden_layers", m.layers);
  positive(gpt2 ? "n_head" : "num_attention_heads", m.heads);
  positive("vocab_size", m.vocab);
  if (auto it = c.find("head_dim"); it != c.end() && !it->is_null()) positive("head_dim", m.head_dim);
  // Sizes far beyond any published model are rejected before they size an allocation or
  // overflow a parameter count.
  const size_t issues_before_limits = issues.size();
  auto at_most = [&](const char* key, int64_t v, int64_t limit) {
    if (v > limit)
      issues.push_back({pointer + "/" + key, std::to_string(v), "must be at most " + std::to_string(limit) + " (the model size limit)", {}});
  };
  at_most(gpt2 ? "n_embd" : "hidden_size", m.hidden, kMaxHidden);
  at_most(gpt2 ? "n_layer" : "num_hidden_layers", m.layers, kMaxLayers);
  at_most(gpt2 ? "n_head" : "num_attention_heads", m.heads, kMaxHeads);
  at_most("num_key_value_heads", m.kv_heads, kMaxHeads);
  at_most("head_dim", m.head_dim, kMaxHeadDim);
  at_most("vocab_size", m.vocab, kMaxVocab);
  if (issues.size() > issues_before_limits) throw InputError(std::move(issues));
  if (m.kv_heads <= 0 || (m.heads > 0 && m.heads % m.kv_heads != 0))
    issues.push_back({pointer + "/num_key_value_heads", std::to_string(m.kv_heads),
                      "must be a positive divisor of num_attention_heads (" + std::to_string(m.heads) + ")", {}});

  switch (f) {
    case Family::gpt2: {
      m.norm = NormKind::layernorm;
      m.gated_mlp = false;
      m.activation = Activation::gelu;
      m.learned_positions = true;
      m.qkv_bias = m.o_bias = m.mlp_bias = true;
      m.intermediate = int_of(c, {"n_inner"}, 4 * m.hidden);
      m.dropout = num_of(c, "resid_pdrop", 0.1);
      break;
    }
    case Family::gpt_neox: {
      m.norm = NormKind::layernorm;
      m.gated_mlp = false;
      m.activation = Activation::gelu;
      const bool bias = bool_of(c, "attention_bias", true);
      m.qkv_bias = m.o_bias = bias;
      m.mlp_bias = true;
      m.parallel_residual = bool_of(c, "use_parallel_residual", true);
      m.intermediate = int_of(c, {"intermediate_size"}, d.intermediate);
      m.dropout = num_of(c, "hidden_dropout", 0.0);
      break;
    }
    case Family::nemotron: {
      // NemotronLayerNorm1P: LayerNorm with weight and bias; squared-ReLU, non-gated MLP.
      m.norm = NormKind::layernorm;
      m.gated_mlp = false;
      m.activation = Activation::relu2;
      m.qkv_bias = m.o_bias = bool_of(c, "attention_bias", false);
      m.mlp_bias = bool_of(c, "mlp_bias", false);
      m.intermediate = int_of(c, {"intermediate_size"}, d.intermediate);
      break;
    }
    default: {
      m.norm = NormKind::rmsnorm;
      m.gated_mlp = true;
      const std::string act = str_of(c, {"hidden_activation", "hidden_act"}, f == Family::gemma ? "gelu_pytorch_tanh" : "silu");
      m.activation = act.rfind("gelu", 0) == 0 ? Activation::gelu : Activation::silu;
      m.intermediate = int_of(c, {"intermediate_size"}, d.intermediate);
      const bool attn_bias = bool_of(c, "attention_bias", f == Family::gpt_oss);
      m.qkv_bias = f == Family::qwen2 ? true : attn_bias;
      m.o_bias = f == Family::qwen2 ? false : attn_bias;
      // gpt-oss's experts carry biases on both projections (GptOssExperts
      // gate_up_proj_bias, down_proj_bias); it has no config key for them.
      m.mlp_bias = f == Family::gpt_oss || bool_of(c, "mlp_bias", false);
      m.attention_sinks = f == Family::gpt_oss;
      m.qk_norm = f == Family::qwen3 || f == Family::qwen3_moe;
      m.dropout = num_of(c, "attention_dropout", 0.0);
      break;
    }
  }
  positive(gpt2 ? "n_inner" : "intermediate_size", m.intermediate);

  if (f == Family::mixtral || f == Family::gpt_oss) {
    // Every layer routes; gpt-oss's router is a linear layer with a bias (GptOssTopKRouter).
    const bool oss = f == Family::gpt_oss;
    MoeSpec e;
    e.num_experts = int_of(c, {"num_local_experts", "num_experts"}, oss ? 128 : 8);
    e.top_k = int_of(c, {"num_experts_per_tok"}, oss ? 4 : 2);
    e.expert_intermediate = m.intermediate;
    e.router_bias = oss;
    m.moe = e;
    m.moe_layer.assign(static_cast<size_t>(m.layers), true);
  } else if (f == Family::qwen3_moe) {
    MoeSpec e;
    e.num_experts = int_of(c, {"num_experts"}, 128);
    e.top_k = int_of(c, {"num_experts_per_tok"}, 8);
    e.expert_intermediate = int_of(c, {"moe_intermediate_size"}, 768);
    const int64_t step = std::max<int64_t>(1, int_of(c, {"decoder_sparse_step"}, 1));
    std::vector<int64_t> dense_only;
    if (auto it = c.find("mlp_only_layers"); it != c.end() && it->is_array())
      for (const auto& v : *it)
        if (v.is_number_integer()) dense_only.push_back(v.get<int64_t>());
    m.moe_layer.assign(static_cast<size_t>(std::max<int64_t>(0, m.layers)), false);
    for (int64_t i = 0; i < m.layers; ++i)
      m.moe_layer[static_cast<size_t>(i)] =
          e.num_experts > 0 && (i + 1) % step == 0 &&
          std::find(dense_only.begin(), dense_only.end(), i) == dense_only.end();
    m.moe = e;
  } else if (f == Family::deepseek_v2 || f == Family::deepseek_v3) {
    MlaSpec a;
    const bool v3 = f == Family::deepseek_v3;
    a.q_lora_rank = int_of(c, {"q_lora_rank"}, 0);
    if (auto it = c.find("q_lora_rank"); it == c.end()) a.q_lora_rank = 1536;  // class default
    a.kv_lora_rank = int_of(c, {"kv_lora_rank"}, 512);
    a.qk_nope_head_dim = int_of(c, {"qk_nope_head_dim"}, 128);
    a.qk_rope_head_dim = int_of(c, {"qk_rope_head_dim"}, 64);
    a.v_head_dim = int_of(c, {"v_head_dim"}, 128);
    m.mla = a;
    m.head_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;
    m.kv_heads = m.heads;
    const int64_t routed = int_of(c, {"n_routed_experts"}, v3 ? 256 : 0);
    if (routed > 0) {
      MoeSpec e;
      e.num_experts = routed;
      e.top_k = int_of(c, {"num_experts_per_tok"}, v3 ? 8 : 0);
      e.expert_intermediate = int_of(c, {"moe_intermediate_size"}, v3 ? 2048 : 1407);
      e.shared_experts = int_of(c, {"n_shared_experts"}, v3 ? 1 : 0);
      e.shared_intermediate = e.expert_intermediate;
      e.router_bias = str_of(c, {"topk_method"}, v3 ? "noaux_tc" : "greedy") == "noaux_tc";
      e.n_group = int_of(c, {"n_group"}, 0);
      e.topk_group = int_of(c, {"topk_group"}, 0);
      const int64_t first_dense = int_of(c, {"first_k_dense_replace"}, v3 ? 3 : 0);
      const int64_t freq = std::max<int64_t>(1, int_of(c, {"moe_layer_freq"}, 1));
      m.moe_layer.assign(static_cast<size_t>(std::max<int64_t>(0, m.layers)), false);
      for (int64_t i = 0; i < m.layers; ++i)
        m.moe_layer[static_cast<size_t>(i)] = i >= first_dense && i % freq == 0;
      if (e.top_k <= 0 || e.top_k > e.num_experts)
        issues.push_back({pointer + "/num_experts_per_tok", std::to_string(e.top_k),
                          "must be between 1 and n_routed_experts", {}});
      m.moe = e;
    }
  }
  read_sliding_window(c, pointer, m, issues);
  // FP8 checkpoint scaling: the config's quantization_config where it has one. DeepSeek-V3
  // architecture models are published in FP8 only with 128x128 weight blocks (DeepSeek-V3
  // technical report, Sec. 3.3.2; deepseek-ai/DeepSeek-V3 config.json weight_block_size).
  if (f == Family::deepseek_v3) m.fp8_weight_block = 128;
  if (f == Family::deepseek_v2 || f == Family::deepseek_v3) {
    m.mtp_layers = int_of(c, {"num_nextn_predict_layers"}, 0);
    if (m.mtp_layers < 0 || m.mtp_layers > m.layers)
      issues.push_back({pointer + "/num_nextn_predict_layers", std::to_string(m.mtp_layers),
                        "must be between 0 and num_hidden_layers", {}});
  }
  if (auto q = c.find("quantization_config"); q != c.end() && q->is_object()) {
    const auto method = q->find("quant_method");
    const auto block = q->find("weight_block_size");
    if (method != q->end() && method->is_string() && *method == "fp8")
      m.fp8_weight_block = block != q->end() && block->is_array() && !block->empty() && (*block)[0].is_number_integer()
                               ? (*block)[0].get<int64_t>()
                               : 0;
  }
  at_most(gpt2 ? "n_inner" : "intermediate_size", m.intermediate, kMaxIntermediate);
  if (m.moe) {
    const char* experts = f == Family::mixtral || f == Family::gpt_oss ? "num_local_experts"
                          : f == Family::qwen3_moe                 ? "num_experts"
                                                                   : "n_routed_experts";
    at_most(experts, m.moe->num_experts, kMaxExperts);
    at_most("moe_intermediate_size", m.moe->expert_intermediate, kMaxIntermediate);
    at_most("n_shared_experts", m.moe->shared_experts, kMaxExperts);
  }
  if (issues.empty()) {
    // A rough count (attention, MLP, experts, embeddings) in doubles, which cannot overflow.
    const double h = static_cast<double>(m.hidden), attn = static_cast<double>(m.heads + m.kv_heads) * 2 * static_cast<double>(m.head_dim);
    double per_layer = h * attn + 3 * h * static_cast<double>(m.intermediate);
    if (m.moe)
      per_layer += 3 * h * static_cast<double>(m.moe->expert_intermediate) *
                   static_cast<double>(m.moe->num_experts + m.moe->shared_experts);
    const double params = static_cast<double>(m.layers) * per_layer + 2 * h * static_cast<double>(m.vocab);
    if (params > kMaxParams) {
      char got[32];
      std::snprintf(got, sizeof got, "about %.2g parameters", params);
      issues.push_back({pointer, got, "a model may have at most 1e15 parameters", {}});
    }
  }
  if (m.moe && (m.moe->top_k <= 0 || m.moe->top_k > m.moe->num_experts) && f != Family::deepseek_v2 &&
      f != Family::deepseek_v3)
    issues.push_back({pointer + "/num_experts_per_tok", std::to_string(m.moe->top_k),
                      "must be between 1 and the number of experts", {}});
  if (!issues.empty()) throw InputError(std::move(issues));
  // The router's measured skew over expert-parallel ranks, where one is published.
  if (m.moe)
    if (const MoeRoutingEntry* e = moe_routing_for(type, m.moe->num_experts, m.moe->top_k)) {
      m.moe->rank_imbalance = e->points;
      m.moe->rank_imbalance_source = e->source;
    }
  // The literal keys (ModelSpec::ConfigKeys); one that is not a whole number from 1 to 2^24
  // (the model size limits) is taken as absent.
  auto stated = [&](const char* key) -> int64_t {
    if (!c.contains(key) || !c[key].is_number_integer()) return 0;
    const auto v = c[key].get<int64_t>();
    return v >= 1 && v <= (int64_t{1} << 24) ? v : 0;
  };
  m.config_keys = {stated("intermediate_size"), stated("num_attention_heads"), stated("num_key_value_heads"),
                   stated("num_hidden_layers"), stated("head_dim"), stated("num_experts_per_tok"),
                   stated("n_shared_experts"), stated("num_local_experts")};
  return m;
}

ModelSpec load_model(const std::string& name_or_path, const std::string& pointer, const fs::path& base_dir) {
  const fs::path preset = data_dir() / "models" / (name_or_path + ".json");
  std::error_code ec;
  if (!name_or_path.empty() && name_or_path.find('/') == std::string::npos && name_or_path != "index" &&
      fs::exists(preset, ec)) {
    return model_from_hf_config(read_json_file(preset), pointer, name_or_path);
  }
  fs::path p(name_or_path);
  // A relative path is relative to the scenario file's folder first, then to the current one.
  if (p.is_relative() && !base_dir.empty() && fs::exists(base_dir / p, ec)) p = base_dir / p;
  if (!name_or_path.empty() && fs::is_regular_file(p, ec)) {
    return model_from_hf_config(read_json_file(p), pointer, p.stem().string());
  }
  const auto names = model_preset_names();
  const std::string n = nearest(name_or_path, names);
  throw InputError({{pointer, "\"" + name_or_path + "\"",
                     "neither a model preset nor a readable config.json; presets: " + list(names),
                     n.empty() ? "" : "did you mean \"" + n + "\"?"}});
}

}  // namespace capsim::io
