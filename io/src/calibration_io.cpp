#include "capsim/io/calibration_io.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "capsim/io/json_read.hpp"

namespace capsim::io {

using nlohmann::json;

namespace {

constexpr const char* kRawSchema = "capsim-calibration-raw/1";
constexpr const char* kProfileSchema = "capsim-calibration-profile/1";

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType d : {DType::fp32, DType::tf32, DType::bf16, DType::fp16, DType::fp8, DType::int8, DType::int4, DType::fp4})
    if (to_string(d) == s) return d;
  return std::nullopt;
}

std::string_view kind_name(RawMeasurement::Kind k) {
  switch (k) {
    case RawMeasurement::Kind::gemm: return "gemm";
    case RawMeasurement::Kind::attention: return "attention";
    case RawMeasurement::Kind::memory: return "memory";
    case RawMeasurement::Kind::launch: return "launch";
    case RawMeasurement::Kind::collective: return "collective";
  }
  return "?";
}

/// Reads one measurement line, recording problems under `where`.
RawMeasurement read_row(const json& j, const std::string& where, std::vector<Issue>& issues) {
  RawMeasurement r;
  auto num = [&](const char* key, bool required) -> double {
    if (!j.contains(key)) {
      if (required) issues.push_back({where + "/" + key, "", "is required", ""});
      return 0;
    }
    if (!j[key].is_number()) {
      issues.push_back({where + "/" + key, brief(j[key]), "must be a number", ""});
      return 0;
    }
    const double v = j[key].get<double>();
    if (!std::isfinite(v) || v < 0) issues.push_back({where + "/" + key, brief(j[key]), "must be finite and >= 0", ""});
    return v;
  };
  // Shapes and counts: whole numbers up to 2^31 (a GEMM dimension, a sequence length, a
  // rank count); larger ones are typing errors, and beyond int64 the conversion is undefined.
  auto integer = [&](const char* key) -> int64_t {
    const double v = num(key, true);
    if (!std::isfinite(v) || v < 0) return 0;
    if (v > 2147483648.0 || v != std::floor(v)) {
      issues.push_back({where + "/" + key, brief(j[key]), "must be a whole number from 0 to 2^31", ""});
      return 0;
    }
    return static_cast<int64_t>(v);
  };
  auto str = [&](const char* key) -> std::string {
    if (!j.contains(key) || !j[key].is_string()) {
      issues.push_back({where + "/" + key, j.contains(key) ? brief(j[key]) : "", "is required (a string)", ""});
      return "";
    }
    return j[key].get<std::string>();
  };
  auto boolean = [&](const char* key) {
    if (!j.contains(key)) return false;
    if (!j[key].is_boolean()) {
      issues.push_back({where + "/" + key, brief(j[key]), "must be true or false", ""});
      return false;
    }
    return j[key].get<bool>();
  };
  auto dtype = [&]() {
    const std::string s = str("dtype");
    const auto d = parse_dtype(s);
    if (!d && !s.empty()) issues.push_back({where + "/dtype", s, "unknown dtype", "one of bf16, fp16, fp8, int8"});
    return d.value_or(DType::bf16);
  };
  const std::string kind = str("kind");
  r.time_s = num("time_s", true);
  r.p10_s = num("p10_s", false);
  r.p90_s = num("p90_s", false);
  if (kind == "gemm") {
    r.kind = RawMeasurement::Kind::gemm;
    r.dtype = dtype();
    r.m = integer("m"), r.n = integer("n"), r.k = integer("k");
    // A grouped GEMM (an MoE layer's experts): `groups` GEMMs of m x n x k, and which
    // kernel ran them (`impl`: grouped_mm, scaled_grouped_mm, per_expert_loop).
    if (j.contains("groups")) {
      r.batch = integer("groups");
      if (r.batch < 1) issues.push_back({where + "/groups", brief(j["groups"]), "must be at least 1", ""});
      if (r.batch == 1) r.batch = 0;  // one group is a plain GEMM, as a line without the key reads
    }
    if (j.contains("impl") && j["impl"].is_string()) r.op = j["impl"].get<std::string>();
  } else if (kind == "attention") {
    r.kind = RawMeasurement::Kind::attention;
    const std::string pass = str("pass");
    if (pass != "fwd" && pass != "bwd") issues.push_back({where + "/pass", pass, "must be fwd or bwd", ""});
    r.backward = pass == "bwd";
    r.causal = boolean("causal");
    r.dtype = dtype();
    r.batch = integer("batch"), r.heads = integer("heads"), r.head_dim = integer("head_dim");
    r.kv_heads = j.contains("kv_heads") ? integer("kv_heads") : r.heads;
    r.seq_q = integer("seq_q"), r.seq_kv = integer("seq_kv");
    // Which kernel ran: fused (cuDNN SDPA, the default) or a stand-in such as
    // "cublaslt-bmm" (the two GEMMs alone), which the fit does not take as fused attention.
    if (j.contains("impl") && j["impl"].is_string()) r.op = j["impl"].get<std::string>();
  } else if (kind == "memory") {
    r.kind = RawMeasurement::Kind::memory;
    r.op = str("op");
    r.bytes = num("bytes", true);
  } else if (kind == "launch") {
    r.kind = RawMeasurement::Kind::launch;
  } else if (kind == "collective") {
    r.kind = RawMeasurement::Kind::collective;
    const std::string op = str("op");
    const auto c = parse_cal_op(op);
    if (!c && !op.empty())
      issues.push_back({where + "/op", op, "unknown collective",
                        "one of all_reduce, all_gather, reduce_scatter, all_to_all, send_recv"});
    r.coll = c.value_or(CalOp::all_reduce);
    r.ranks = integer("ranks");
    r.nodes = j.contains("nodes") ? integer("nodes") : 1;
    if (r.ranks < 2) issues.push_back({where + "/ranks", std::to_string(r.ranks), "must be at least 2", ""});
    if (r.nodes < 1) issues.push_back({where + "/nodes", std::to_string(r.nodes), "must be at least 1", ""});
    r.bytes = num("bytes", true);
    r.in_place = boolean("in_place");
    r.busbw_gbps = num("busbw_gbps", false);
  } else if (!kind.empty()) {
    issues.push_back({where + "/kind", kind, "unknown measurement kind",
                      "one of gemm, attention, memory, launch, collective"});
  }
  return r;
}

}  // namespace

RawFile read_raw(const std::filesystem::path& path) {
  const std::string text = read_text_file(path);
  RawFile out;
  std::vector<Issue> issues;
  std::istringstream in(text);
  std::string line;
  int64_t no = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(no);
    json j;
    try {
      j = parse_json(line, where);
    } catch (const InputError& e) {
      // Valid JSON the strict reader refuses (a number beyond a double, a key twice): its
      // own words. Otherwise the line is no JSON at all.
      if (e.issues().front().rule.rfind("malformed JSON", 0) != 0) {
        issues.insert(issues.end(), e.issues().begin(), e.issues().end());
        continue;
      }
      if (!header)
        throw InputError({{where, "", std::string("first line must be the header with schema \"") + kRawSchema +
                                          "\"; it is not JSON",
                           "an nccl-tests log? convert it with capsim calibrate import-nccl-tests"}});
      issues.push_back({where, "", "is not a JSON object (a line cut short?)", ""});
      continue;
    }
    if (!j.is_object()) {
      issues.push_back({where, brief(j), "must be a JSON object", ""});
      continue;
    }
    if (!header) {
      header = true;
      if (!j.contains("schema") || j["schema"] != kRawSchema || !j.contains("kind") || j["kind"] != "header") {
        issues.push_back({where, brief(j.value("schema", json())), std::string("first line must be the header with schema \"") + kRawSchema + "\"", "see docs/calibration.md"});
        continue;
      }
      auto s = [&](const char* k) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string(); };
      out.header.source = s("source"), out.header.host = s("host"), out.header.gpu = s("gpu");
      out.header.driver = s("driver"), out.header.cuda_runtime = s("cuda_runtime"), out.header.cublas = s("cublas");
      out.header.cudnn = s("cudnn"), out.header.nccl = s("nccl"), out.header.created = s("created");
      out.header.gpu_count = j.contains("gpu_count") && j["gpu_count"].is_number_integer() ? j["gpu_count"].get<int64_t>() : 0;
      out.header.quick = j.contains("quick") && j["quick"].is_boolean() && j["quick"].get<bool>();
      continue;
    }
    out.rows.push_back(read_row(j, where, issues));
  }
  if (!header) issues.push_back({path.string(), "", "is empty: no header line", "see docs/calibration.md"});
  if (!issues.empty()) throw InputError(issues);
  out.header.file = path.filename().string();
  return out;
}

std::string raw_to_text(const RawFile& raw) {
  std::string out;
  json h = json::object();
  h["schema"] = kRawSchema;
  h["kind"] = "header";
  h["source"] = raw.header.source;
  auto put = [&](const char* k, const std::string& v) {
    if (!v.empty()) h[k] = v;
  };
  put("host", raw.header.host), put("gpu", raw.header.gpu), put("driver", raw.header.driver);
  put("cuda_runtime", raw.header.cuda_runtime), put("cublas", raw.header.cublas), put("cudnn", raw.header.cudnn);
  put("nccl", raw.header.nccl), put("created", raw.header.created);
  if (raw.header.gpu_count > 0) h["gpu_count"] = raw.header.gpu_count;
  h["quick"] = raw.header.quick;
  out += dump_text(h) + "\n";
  for (const RawMeasurement& r : raw.rows) {
    json j = json::object();
    j["kind"] = kind_name(r.kind);
    switch (r.kind) {
      case RawMeasurement::Kind::gemm:
        j["dtype"] = to_string(r.dtype), j["m"] = r.m, j["n"] = r.n, j["k"] = r.k, j["flops"] = r.flops();
        if (r.batch > 1) j["groups"] = r.batch;
        if (!r.op.empty()) j["impl"] = r.op;
        break;
      case RawMeasurement::Kind::attention:
        j["pass"] = r.backward ? "bwd" : "fwd", j["causal"] = r.causal, j["dtype"] = to_string(r.dtype);
        j["batch"] = r.batch, j["heads"] = r.heads, j["kv_heads"] = r.kv_heads, j["head_dim"] = r.head_dim;
        j["seq_q"] = r.seq_q, j["seq_kv"] = r.seq_kv, j["flops"] = r.flops();
        if (!r.op.empty()) j["impl"] = r.op;
        break;
      case RawMeasurement::Kind::memory: j["op"] = r.op, j["bytes"] = r.bytes; break;
      case RawMeasurement::Kind::launch: break;
      case RawMeasurement::Kind::collective:
        j["op"] = to_string(r.coll), j["ranks"] = r.ranks, j["nodes"] = r.nodes;
        j["scope"] = r.nodes > 1 ? "inter" : "intra", j["bytes"] = r.bytes, j["in_place"] = r.in_place;
        j["algbw_gbps"] = r.time_s > 0 ? r.bytes / r.time_s / 1e9 : 0.0;
        j["busbw_gbps"] = r.busbw_gbps;
        break;
    }
    j["time_s"] = r.time_s;
    if (r.p10_s > 0) j["p10_s"] = r.p10_s;
    if (r.p90_s > 0) j["p90_s"] = r.p90_s;
    out += dump_text(j) + "\n";
  }
  return out;
}

namespace {

/// "2.29.3" from NCCL's 22903 (major*10000 + minor*100 + patch).
std::string nccl_version(int64_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::vector<std::string> split_ws(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

/// The collective a table measured when nothing names it: the busbw/algbw ratio tells
/// all-reduce (2(n-1)/n) and send/recv (1) apart from the (n-1)/n family, where a
/// reduction names reduce-scatter; all-gather and all-to-all cannot be told apart.
std::optional<CalOp> infer_op(double ratio, int64_t ranks, const std::string& redop) {
  const double n = static_cast<double>(ranks);
  auto near = [](double a, double b) { return std::abs(a - b) <= 0.03 * b; };
  if (near(ratio, 2.0 * (n - 1) / n) && !near(ratio, (n - 1) / n)) return CalOp::all_reduce;
  if (near(ratio, (n - 1) / n) && redop != "none" && !redop.empty()) return CalOp::reduce_scatter;
  if (near(ratio, 1.0) && ranks > 2) return CalOp::send_recv;
  return std::nullopt;
}

RawFile import_json(const json& j, const std::filesystem::path& path, std::optional<CalOp> op,
                    std::vector<Issue>& issues) {
  RawFile out;
  out.header.source = "nccl-tests";
  out.header.file = path.filename().string();
  if (j.contains("nccl_version") && j["nccl_version"].is_number_integer()) {
    const int64_t v = j["nccl_version"].get<int64_t>();  // e.g. 22903 = 2.29.3
    out.header.nccl = nccl_version(v);
  }
  if (!op && j.contains("args") && j["args"].is_array() && !j["args"].empty() && j["args"][0].is_string()) {
    std::string exe = j["args"][0].get<std::string>();
    exe = exe.substr(exe.find_last_of('/') + 1);
    if (auto p = exe.find("_perf"); p != std::string::npos) op = parse_cal_op(exe.substr(0, p));
  }
  int64_t ranks = 0;
  std::set<std::string> hosts;
  const json& cfg = j.contains("config") ? j["config"] : json::object();
  const int64_t ngpus = cfg.value("ngpus", int64_t{1}), nthreads = cfg.value("nthreads", int64_t{1});
  if (cfg.contains("devices") && cfg["devices"].is_array()) {
    for (const auto& d : cfg["devices"]) {
      hosts.insert(d.value("hostname", ""));
      if (out.header.gpu.empty()) out.header.gpu = d.value("device_info", "");
    }
    // One entry per process: -g GPUs and -t threads each.
    ranks = static_cast<int64_t>(cfg["devices"].size()) * (cfg["devices"].size() == 1 ? ngpus * nthreads : 1);
  }
  if (ranks < 2) issues.push_back({path.string() + "/config", "", "names fewer than 2 ranks", ""});
  if (!op) issues.push_back({path.string() + "/args", "", "does not name the collective", "pass --op"});
  if (!j.contains("results") || !j["results"].is_array())
    issues.push_back({path.string() + "/results", "", "is required (nccl-tests -J output)", ""});
  if (!issues.empty()) return out;
  for (const auto& r : j["results"]) {
    for (const char* place : {"out_of_place", "in_place"}) {
      if (!r.contains(place) || !r[place].is_object()) continue;
      RawMeasurement m;
      m.kind = RawMeasurement::Kind::collective;
      m.coll = *op;
      m.ranks = ranks;
      m.nodes = static_cast<int64_t>(std::max<size_t>(1, hosts.size()));
      m.bytes = r.value("size", 0.0);
      m.time_s = r[place].value("time", 0.0) * 1e-6;
      m.busbw_gbps = r[place].value("bus_bw", 0.0);
      m.in_place = std::string(place) == "in_place";
      out.rows.push_back(m);
    }
  }
  out.header.gpu_count = ranks;
  return out;
}

}  // namespace

RawFile import_nccl_tests(const std::filesystem::path& path, std::optional<CalOp> op) {
  const std::string text = read_text_file(path);
  std::vector<Issue> issues;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    const json j = parse_json(text, path.string());
    RawFile r;
    try {
      r = import_json(j, path, op, issues);
    } catch (const json::exception& e) {
      issues.push_back({path.string(), "", std::string("malformed nccl-tests -J output: ") + e.what(), ""});
    }
    if (!issues.empty()) throw InputError(issues);
    return r;
  }
  RawFile out;
  out.header.source = "nccl-tests";
  out.header.file = path.filename().string();
  // One section per test: rank lines, a column header, rows.
  struct Section {
    std::optional<CalOp> op;
    std::vector<std::string> hosts;
    int64_t rank_lines = 0;
    std::vector<std::string> cols;
    std::vector<RawMeasurement> rows;
    std::vector<std::string> redops;
    std::vector<double> ratios;
  };
  std::vector<Section> sections(1);
  std::istringstream in(text);
  std::string line;
  int64_t no = 0, rows_seen = 0;
  while (std::getline(in, line)) {
    ++no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // `srun --label` prefixes every line with "<task>: ".
    if (const size_t colon = line.find(": "); colon != std::string::npos && colon > 0 && colon < 8) {
      const size_t lead = line.find_first_not_of(' ');
      if (lead < colon && std::all_of(line.begin() + static_cast<std::ptrdiff_t>(lead),
                                      line.begin() + static_cast<std::ptrdiff_t>(colon),
                                      [](unsigned char c) { return std::isdigit(c); }))
        line.erase(0, colon + 2);
    }
    if (line.rfind("# Collective test starting:", 0) == 0) {
      if (sections.back().rank_lines > 0 || !sections.back().rows.empty()) sections.emplace_back();
      std::string name = line.substr(line.find(':') + 1);
      name.erase(0, name.find_first_not_of(' '));
      if (auto p = name.find("_perf"); p != std::string::npos) name = name.substr(0, p);
      sections.back().op = parse_cal_op(name);
      continue;
    }
    if (auto p = line.find("nccl-library="); p != std::string::npos && out.header.nccl.empty()) {
      const int64_t v = std::atoll(line.c_str() + p + 13);
      out.header.nccl = nccl_version(v);
    }
    if (auto p = line.find("NCCL version "); p != std::string::npos && out.header.nccl.empty()) {
      std::string v = line.substr(p + 13);
      out.header.nccl = v.substr(0, v.find_first_of("+ "));
    }
    const auto w = split_ws(line);
    if (w.size() >= 2 && w[0] == "#" && w[1] == "Rank") {
      Section& s = sections.back();
      if (!s.rows.empty()) sections.emplace_back();
      ++sections.back().rank_lines;
      // "#  Rank  0 Group  0 Pid 123 on HOST device 0 [..] NAME" (old: without Group)
      for (size_t i = 0; i + 1 < w.size(); ++i)
        if (w[i] == "on") sections.back().hosts.push_back(w[i + 1]);
      if (out.header.gpu.empty()) {
        const auto b = line.find(']');
        if (b != std::string::npos) {
          std::string name = line.substr(b + 1);
          name.erase(0, name.find_first_not_of(' '));
          out.header.gpu = name;
        }
      }
      continue;
    }
    if (w.size() > 3 && w[0] == "#" && w[1] == "size" && w[2] == "count") {
      sections.back().cols.assign(w.begin() + 1, w.end());
      continue;
    }
    if (w.empty() || w[0][0] == '#') continue;
    Section& s = sections.back();
    if (s.cols.empty() || w.size() != s.cols.size() || !is_number(w[0])) continue;  // launcher noise, prose
    // Columns by name: the first time/algbw/busbw are out of place, the second in place.
    std::vector<size_t> time_idx, busbw_idx, algbw_idx;
    size_t redop_idx = static_cast<size_t>(-1);
    for (size_t i = 0; i < s.cols.size(); ++i) {
      if (s.cols[i] == "time") time_idx.push_back(i);
      if (s.cols[i] == "busbw") busbw_idx.push_back(i);
      if (s.cols[i] == "algbw") algbw_idx.push_back(i);
      if (s.cols[i] == "redop") redop_idx = i;
    }
    if (time_idx.empty() || busbw_idx.size() != time_idx.size()) {
      issues.push_back({path.string() + ":" + std::to_string(no), "", "column header has no time/busbw columns", ""});
      continue;
    }
    ++rows_seen;
    for (size_t place = 0; place < time_idx.size(); ++place) {
      if (!is_number(w[time_idx[place]])) continue;
      RawMeasurement m;
      m.kind = RawMeasurement::Kind::collective;
      m.bytes = std::strtod(w[0].c_str(), nullptr);
      m.time_s = std::strtod(w[time_idx[place]].c_str(), nullptr) * 1e-6;
      m.busbw_gbps = std::strtod(w[busbw_idx[place]].c_str(), nullptr);
      m.in_place = place == 1;
      if (place < algbw_idx.size()) {
        const double alg = std::strtod(w[algbw_idx[place]].c_str(), nullptr);
        if (alg >= 1.0) s.ratios.push_back(m.busbw_gbps / alg);
      }
      s.rows.push_back(m);
    }
    if (redop_idx < w.size()) s.redops.push_back(w[redop_idx]);
  }
  for (Section& s : sections) {
    if (s.rows.empty()) continue;
    const int64_t ranks = s.rank_lines;
    std::set<std::string> hosts(s.hosts.begin(), s.hosts.end());
    const int64_t nodes = static_cast<int64_t>(std::max<size_t>(1, hosts.size()));
    std::optional<CalOp> cop = op ? op : s.op;
    if (!cop && !s.ratios.empty()) {
      std::vector<double> r = s.ratios;
      std::sort(r.begin(), r.end());
      cop = infer_op(r[r.size() / 2], ranks, s.redops.empty() ? "" : s.redops.front());
    }
    if (ranks < 2) {
      issues.push_back({path.string(), "", "a table without at least 2 \"# Rank\" lines: the group size is unknown", ""});
      continue;
    }
    if (!cop) {
      issues.push_back({path.string(), "", "cannot tell which collective a table measured (all_gather and all_to_all look alike)",
                        "pass --op"});
      continue;
    }
    for (RawMeasurement& m : s.rows) {
      m.coll = *cop;
      m.ranks = ranks;
      m.nodes = nodes;
      out.rows.push_back(m);
    }
    out.header.gpu_count = std::max(out.header.gpu_count, ranks);
  }
  if (issues.empty() && out.rows.empty())
    issues.push_back({path.string(), "", "holds no nccl-tests table (a \"#  size  count ...\" header and rows)", ""});
  if (!issues.empty()) throw InputError(issues);
  return out;
}

std::string profile_to_json(const CalibrationProfile& p) {
  json j = json::object();
  j["schema"] = kProfileSchema;
  j["name"] = p.name;
  j["gpu"] = p.gpu;
  json src = json::array();
  for (const auto& h : p.sources) {
    json s = {{"file", h.file}, {"source", h.source}};
    for (auto [k, v] : {std::pair{"host", &h.host}, {"gpu", &h.gpu}, {"driver", &h.driver}, {"cuda_runtime", &h.cuda_runtime},
                        {"cublas", &h.cublas}, {"cudnn", &h.cudnn}, {"nccl", &h.nccl}, {"created", &h.created}})
      if (!v->empty()) s[k] = *v;
    src.push_back(s);
  }
  j["sources"] = src;
  auto tables = [](const std::vector<GemmTable>& ts) {
    json g = json::array();
    for (const auto& t : ts) {
      json pts = json::array();
      for (size_t i = 0; i < t.tflops.size(); ++i) pts.push_back({t.m[i], t.n[i], t.k[i], t.tflops[i]});
      json e = {{"dtype", to_string(t.dtype)}};
      if (t.groups > 0) e["groups"] = t.groups;
      e["points_m_n_k_tflops"] = pts;
      e["loo_mape"] = t.error.loo_mape;
      e["loo_max_abs_rel_err"] = t.error.max_abs;
      e["loo_points"] = t.error.points;
      g.push_back(e);
    }
    return g;
  };
  const json g = tables(p.gemm);
  j["gemm"] = g;
  if (!p.grouped_gemm.empty()) j["grouped_gemm"] = tables(p.grouped_gemm);
  json a = json::array();
  for (const auto& t : p.attention)
    a.push_back({{"pass", t.backward ? "bwd" : "fwd"}, {"causal", t.causal}, {"head_dim", t.head_dim}, {"seq", t.seq}, {"tflops", t.tflops}});
  j["attention"] = a;
  if (p.hbm_gbps) j["hbm_gbps"] = *p.hbm_gbps;
  if (p.launch_s) j["launch_s"] = *p.launch_s;
  json c = json::array();
  for (const auto& f : p.collectives) {
    json res = json::array();
    for (const auto& r : f.residuals) res.push_back({r.x, r.measured, r.predicted, r.rel_err()});
    json busbw = json::array();  // derived from size_bytes and time_s (nccl-tests definition); not read back
    for (size_t i = 0; i < f.size_bytes.size(); ++i)
      busbw.push_back(f.size_bytes[i] * busbw_factor(f.op, f.ranks) / f.time_s[i] / 1e9);
    c.push_back({{"op", to_string(f.op)},
                 {"ranks", f.ranks},
                 {"nodes", f.nodes},
                 {"scope", f.inter ? "inter" : "intra"},
                 {"alpha_s", f.alpha_s},
                 {"busbw_gbps", f.busbw_gbps},
                 {"size_bytes", f.size_bytes},
                 {"time_s", f.time_s},
                 {"busbw_gbps_by_size", busbw},
                 {"residuals_bytes_measured_fit_relerr", res},
                 {"mape", f.error.mape},
                 {"max_abs_rel_err", f.error.max_abs},
                 {"loo_mape", f.error.loo_mape}});
  }
  j["collectives"] = c;
  return dump_text(j, 2) + "\n";
}

namespace {

/// An integer of a profile: a JSON integer, or a whole float within int64_t (converting any
/// other float to an integer is undefined behaviour); else a JSON error like a wrong type.
int64_t profile_int(const json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= -9.2e18 && d <= 9.2e18 && d == std::trunc(d)) return static_cast<int64_t>(d);
    throw json::out_of_range::create(406, "number is not an integer within int64 range: " + brief(v), nullptr);
  }
  throw json::type_error::create(302, std::string("type must be number, but is ") + v.type_name(), nullptr);
}

}  // namespace

CalibrationProfile read_profile(const std::filesystem::path& path) {
  const json j = read_json_file(path);
  std::vector<Issue> issues;
  const std::string where = path.string();
  if (!j.is_object() || !j.contains("schema") || j["schema"] != kProfileSchema) {
    issues.push_back({where + "/schema", j.is_object() ? brief(j.value("schema", json())) : brief(j),
                      std::string("must be \"") + kProfileSchema + "\"", "make one with capsim calibrate fit"});
    throw InputError(issues);
  }
  CalibrationProfile p;
  // Tables are interpolated in log-log: x rising from above 0 and one y above 0 per x.
  auto table = [&](const std::string& ptr, const char* xname, const std::vector<double>& x, const char* yname,
                   const std::vector<double>& y) {
    if (x.empty() || x.size() != y.size()) {
      issues.push_back({ptr, std::to_string(x.size()) + " and " + std::to_string(y.size()) + " entries",
                        std::string(xname) + " and " + yname + " must be non-empty and of one length",
                        "make one with capsim calibrate fit"});
      return;
    }
    for (size_t i = 0; i < x.size(); ++i)
      if (!std::isfinite(x[i]) || !(x[i] > 0) || (i > 0 && !(x[i] > x[i - 1]))) {
        issues.push_back({ptr + "/" + xname + "/" + std::to_string(i), json(x[i]).dump(), "must rise from above 0", {}});
        return;
      }
    for (size_t i = 0; i < y.size(); ++i)
      if (!std::isfinite(y[i]) || !(y[i] > 0)) {
        issues.push_back({ptr + "/" + yname + "/" + std::to_string(i), json(y[i]).dump(), "must be a positive number", {}});
        return;
      }
  };
  try {
    p.name = j.value("name", path.stem().string());
    p.gpu = j.value("gpu", "");
    for (const auto& s : j.value("sources", json::array())) {
      RawHeader h;
      h.file = s.value("file", ""), h.source = s.value("source", ""), h.gpu = s.value("gpu", ""), h.host = s.value("host", "");
      h.nccl = s.value("nccl", ""), h.driver = s.value("driver", ""), h.created = s.value("created", "");
      h.cuda_runtime = s.value("cuda_runtime", ""), h.cublas = s.value("cublas", ""), h.cudnn = s.value("cudnn", "");
      p.sources.push_back(h);
    }
    for (const char* section : {"gemm", "grouped_gemm"}) {
      const bool grouped = std::string(section) == "grouped_gemm";
      for (size_t i = 0; i < j.value(section, json::array()).size(); ++i) {
        const json& g = j[section][i];
        GemmTable t;
        const std::string ptr = where + "/" + section + "/" + std::to_string(i);
        const auto d = parse_dtype(g.at("dtype").get<std::string>());
        if (!d) issues.push_back({ptr + "/dtype", brief(g["dtype"]), "unknown dtype", ""});
        t.dtype = d.value_or(DType::bf16);
        if (grouped) {
          t.groups = g.contains("groups") ? profile_int(g["groups"]) : 0;
          if (t.groups < 2) issues.push_back({ptr + "/groups", g.contains("groups") ? brief(g["groups"]) : "",
                                              "is required: the GEMMs a grouped kernel runs, at least 2", ""});
        }
        for (const auto& pt : g.at("points_m_n_k_tflops")) {
          t.m.push_back(profile_int(pt.at(0))), t.n.push_back(profile_int(pt.at(1))), t.k.push_back(profile_int(pt.at(2)));
          t.tflops.push_back(pt.at(3).get<double>());
        }
        if (t.tflops.empty())
          issues.push_back({ptr + "/points_m_n_k_tflops", "[]", "must hold at least one point", "make one with capsim calibrate fit"});
        for (size_t k = 0; k < t.tflops.size(); ++k)
          if (t.m[k] < 1 || t.n[k] < 1 || t.k[k] < 1 || !std::isfinite(t.tflops[k]) || !(t.tflops[k] > 0)) {
            issues.push_back({ptr + "/points_m_n_k_tflops/" + std::to_string(k), brief(g["points_m_n_k_tflops"][k]),
                              "must be [m, n, k, tflops] with m, n, k >= 1 and tflops > 0", {}});
            break;
          }
        t.error.loo_mape = g.value("loo_mape", 0.0);
        t.error.max_abs = g.value("loo_max_abs_rel_err", 0.0);
        t.error.points = g.contains("loo_points") ? profile_int(g["loo_points"]) : 0;
        (grouped ? p.grouped_gemm : p.gemm).push_back(t);
      }
    }
    for (size_t i = 0; i < j.value("attention", json::array()).size(); ++i) {
      const json& a = j["attention"][i];
      AttentionTable t;
      t.backward = a.at("pass").get<std::string>() == "bwd";
      t.causal = a.at("causal").get<bool>();
      t.head_dim = profile_int(a.at("head_dim"));
      t.seq = a.at("seq").get<std::vector<double>>();
      t.tflops = a.at("tflops").get<std::vector<double>>();
      table(where + "/attention/" + std::to_string(i), "seq", t.seq, "tflops", t.tflops);
      p.attention.push_back(t);
    }
    if (j.contains("hbm_gbps")) p.hbm_gbps = j["hbm_gbps"].get<double>();
    if (j.contains("launch_s")) p.launch_s = j["launch_s"].get<double>();
    for (size_t i = 0; i < j.value("collectives", json::array()).size(); ++i) {
      const json& c = j["collectives"][i];
      CollectiveFit f;
      const auto op = parse_cal_op(c.at("op").get<std::string>());
      if (!op) issues.push_back({where + "/collectives/" + std::to_string(i) + "/op", brief(c["op"]), "unknown collective", ""});
      f.op = op.value_or(CalOp::all_reduce);
      f.ranks = profile_int(c.at("ranks"));
      f.nodes = profile_int(c.at("nodes"));
      f.inter = f.nodes > 1;
      f.alpha_s = c.at("alpha_s").get<double>();
      f.busbw_gbps = c.at("busbw_gbps").get<double>();
      f.size_bytes = c.at("size_bytes").get<std::vector<double>>();
      f.time_s = c.at("time_s").get<std::vector<double>>();
      table(where + "/collectives/" + std::to_string(i), "size_bytes", f.size_bytes, "time_s", f.time_s);
      if (f.ranks < 2 || f.nodes < 1)
        issues.push_back({where + "/collectives/" + std::to_string(i), brief(c.at("ranks")) + " ranks, " + brief(c.at("nodes")) + " nodes",
                          "needs ranks >= 2 and nodes >= 1", {}});
      for (const auto& r : c.value("residuals_bytes_measured_fit_relerr", json::array()))
        f.residuals.push_back({r.at(0).get<double>(), r.at(1).get<double>(), r.at(2).get<double>()});
      f.error.mape = c.value("mape", 0.0), f.error.max_abs = c.value("max_abs_rel_err", 0.0);
      f.error.loo_mape = c.value("loo_mape", 0.0), f.error.points = static_cast<int64_t>(f.residuals.size());
      p.collectives.push_back(f);
    }
  } catch (const json::exception& e) {
    issues.push_back({where, "", std::string("malformed profile: ") + e.what(), "make one with capsim calibrate fit"});
  }
  if (!issues.empty()) throw InputError(issues);
  return p;
}

}  // namespace capsim::io

namespace capsim::io {

namespace {
/// The GPU model token ("a100", "h100", "h200", "h800", "b200", ...) in a name or id.
std::string gpu_token(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (size_t i = 0; i + 3 < s.size(); ++i)
    if ((s[i] == 'a' || s[i] == 'h' || s[i] == 'b' || s[i] == 'l') && std::isdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 2])) && std::isdigit(static_cast<unsigned char>(s[i + 3])) &&
        (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1]))))
      return s.substr(i, 4);
  return "";
}
}  // namespace

bool profile_matches(const CalibrationProfile& p, const GpuSpec& gpu) {
  const std::string want = gpu_token(p.gpu);
  if (want.empty()) return true;  // the profile does not say: the user vouches for it
  const std::string have = gpu_token(gpu.id).empty() ? gpu_token(gpu.name) : gpu_token(gpu.id);
  return want == have;
}

CostModels::CostModels(const SystemSpec& sys, const CalibrationProfile* profile)
    : base_(std::make_unique<hw::RooflineCostModel>(sys)) {
  if (profile && profile_matches(*profile, sys.gpu)) cal_ = std::make_unique<hw::CalibratedCostModel>(*base_, *profile);
}

const CostModel& CostModels::get() const {
  if (cal_) return *cal_;
  return *base_;
}

nlohmann::json calibration_json(const CalibrationProfile& p) {
  return {{"profile", p.name}, {"gpu", p.gpu}, {"supplies", p.supplies()}};
}

bool add_calibration(nlohmann::json& report, const CalibrationProfile& p, const GpuSpec* gpu) {
  report["calibration"] = calibration_json(p);
  if (!gpu) return true;
  const bool used = profile_matches(p, *gpu);
  report["calibration"]["applied"] = used;
  return used;
}

}  // namespace capsim::io
