#include "capsim/io/engines.hpp"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"

namespace capsim::io {

using nlohmann::json;
namespace fs = std::filesystem;

std::vector<std::string> engine_profile_ids() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(data_dir() / "engines", ec))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> release_number(const std::string& version) {
  std::vector<int> out;
  size_t i = 0;
  while (i < version.size() && std::isdigit(static_cast<unsigned char>(version[i]))) {
    int v = 0;
    size_t digits = 0;
    while (i < version.size() && std::isdigit(static_cast<unsigned char>(version[i])) && digits < 6) {
      v = v * 10 + (version[i] - '0');
      ++i;
      ++digits;
    }
    if (i < version.size() && std::isdigit(static_cast<unsigned char>(version[i]))) return {};  // absurdly long
    out.push_back(v);
    if (i + 1 < version.size() && version[i] == '.' && std::isdigit(static_cast<unsigned char>(version[i + 1]))) ++i;
    else break;
  }
  return out;
}

std::vector<int> release_order(const std::string& written) {
  // A leading "v" (a git tag as written: "v0.8.4") is the release itself.
  const bool git_tag = written.size() > 1 && (written[0] == 'v' || written[0] == 'V') &&
                       std::isdigit(static_cast<unsigned char>(written[1]));
  const std::string version = git_tag ? written.substr(1) : written;
  std::vector<int> out = release_number(version);
  if (out.empty()) return out;
  // Skip the numbers already read, then rank the tag that follows (PEP 440 order:
  // .devN < aN < bN < rcN < the release < .postN).
  size_t i = 0;
  for (size_t n = 0; n < out.size(); ++n) {
    while (i < version.size() && std::isdigit(static_cast<unsigned char>(version[i]))) ++i;
    if (n + 1 < out.size()) ++i;  // the dot between components
  }
  out.resize(std::max<size_t>(out.size(), 4), 0);
  std::string tag;
  while (i < version.size() && (version[i] == '.' || version[i] == '-' || version[i] == '_')) ++i;
  while (i < version.size() && std::isalpha(static_cast<unsigned char>(version[i])))
    tag += static_cast<char>(std::tolower(static_cast<unsigned char>(version[i++])));
  int tag_n = 0;
  for (size_t digits = 0; i < version.size() && std::isdigit(static_cast<unsigned char>(version[i])) && digits < 6; ++i, ++digits)
    tag_n = tag_n * 10 + (version[i] - '0');
  int rank = 4;  // a release
  if (tag == "dev") rank = 0;
  else if (tag == "a" || tag == "alpha") rank = 1;
  else if (tag == "b" || tag == "beta") rank = 2;
  else if (tag == "rc" || tag == "c") rank = 3;
  else if (tag == "post") rank = 5;
  else tag_n = 0;  // a local or unknown suffix orders as the release itself
  out.push_back(rank);
  out.push_back(tag_n);
  return out;
}

namespace {

/// Release numbers compared component by component, missing components as 0.
int compare(const std::vector<int>& a, const std::vector<int>& b) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const int x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

/// `want` within [from, to); an empty bound is open.
bool in_release_range(const std::vector<int>& want, const std::vector<int>& from, const std::vector<int>& to) {
  return (from.empty() || compare(want, from) >= 0) && (to.empty() || compare(want, to) < 0);
}

/// Distance between two releases for "nearest": the first differing component decides,
/// weighted so that a major release is farther than any minor one.
double distance(const std::vector<int>& a, const std::vector<int>& b) {
  double d = 0, w = 1e6;
  for (size_t i = 0; i < std::max(a.size(), b.size()) && i < 3; ++i, w /= 1e3) {
    const int x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    d += w * std::abs(x - y);
  }
  return d;
}

const char* const kReleaseRangeShape = "must be {\"from\": release, \"to\": release} (either or both)";

/// Reads a release range, {"from": release, "to": release} with either bound left out but
/// not both (`from` inclusive, `to` exclusive), into `from` and `to`; returns what is wrong
/// with it, or null. A range whose lower bound is not below its upper one holds no release,
/// which a data file never means.
const char* read_release_range(const json& v, std::string& from, std::string& to) {
  if (!v.is_object() || v.empty()) return kReleaseRangeShape;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if ((it.key() != "from" && it.key() != "to") || !it.value().is_string() ||
        release_order(it.value().get<std::string>()).empty())
      return kReleaseRangeShape;
    (it.key() == "from" ? from : to) = it.value().get<std::string>();
  }
  if (!from.empty() && !to.empty() && compare(release_order(from), release_order(to)) >= 0)
    return "holds no release: \"from\" must come before \"to\" (\"to\" is excluded)";
  return nullptr;
}

/// A figure's or knob's source list: non-empty, every entry named in `sources`.
void check_sources(const json& holder, const std::string& at, const char* missing, const json& sources,
                   std::vector<Issue>& issues) {
  const json& src = holder.contains("source") ? holder["source"] : json();
  if (!src.is_array() || src.empty()) {
    issues.push_back({at + "/source", "", missing, {}});
    return;
  }
  for (const json& s : src)
    if (!s.is_string() || !sources.contains(s.get<std::string>()))
      issues.push_back({at + "/source", brief(s), "must name an entry of \"sources\"", {}});
}

/// One value a knob may take: its own, or one of its release ranges'.
struct KnobValue {
  const json* value;
  std::string at;  ///< JSON pointer of the value, for errors
  bool in_force;
};

/// The values of a knob's release ranges (`by_release`, at `at`), each checked for its
/// shape and sources; the first range holding `want` is in force (for `want` empty, the
/// first without an upper bound), and `chosen` names it ("releases 0.3.1-0.4.1").
std::vector<KnobValue> release_range_values(const json& rel, const std::string& at, const std::vector<int>& want,
                                            const json& sources, std::vector<Issue>& issues, std::string& chosen) {
  std::vector<KnobValue> out;
  if (!rel.is_array()) {
    issues.push_back({at, brief(rel), "must be a list of {\"versions\", \"value\", \"source\"}", {}});
    return out;
  }
  for (size_t i = 0; i < rel.size(); ++i) {
    const json& r = rel[i];
    const std::string rat = at + "/" + std::to_string(i);
    if (!r.is_object()) {
      issues.push_back({rat, brief(r), "must be an object", {}});
      continue;
    }
    std::string from, to;
    const char* problem = r.contains("versions") ? read_release_range(r["versions"], from, to) : kReleaseRangeShape;
    const bool ok = problem == nullptr;
    if (!ok) issues.push_back({rat + "/versions", r.contains("versions") ? brief(r["versions"]) : "", problem, {}});
    check_sources(r, rat, "every release range needs a source", sources, issues);
    for (auto it = r.begin(); it != r.end(); ++it)
      if (it.key() != "versions" && it.key() != "value" && it.key() != "source" && it.key() != "note")
        issues.push_back({rat + "/" + it.key(), "", "unknown key (versions, value, source, note)", {}});
    if (!r.contains("value")) {
      issues.push_back({rat + "/value", "", "is required", {}});
      continue;
    }
    const bool holds = ok && chosen.empty() &&
                       (want.empty() ? to.empty() : in_release_range(want, release_order(from), release_order(to)));
    if (holds) chosen = "releases " + from + "-" + to;
    out.push_back({&r["value"], rat + "/value", holds});
  }
  return out;
}

struct Candidate {
  std::string id;
  json doc;
  std::vector<int> from, to;  ///< [from, to); `to` empty = open
};

}  // namespace

std::vector<std::string> moe_kernel_family_names() {
  const json doc = read_json_file(data_dir() / "moe_kernels.json");
  std::vector<std::string> out;
  if (doc.contains("families") && doc["families"].is_object())
    for (auto it = doc["families"].begin(); it != doc["families"].end(); ++it) out.push_back(it.key());
  std::sort(out.begin(), out.end());
  return out;
}

MoeKernel moe_kernel_family(const std::string& name, const std::string& pointer) {
  const fs::path path = data_dir() / "moe_kernels.json";
  return moe_kernel_family_from_json(read_json_file(path), path.string(), name, pointer);
}

MoeKernel moe_kernel_family_from_json(const json& doc, const std::string& origin, const std::string& name,
                                      const std::string& pointer) {
  if (!doc.is_object() || !doc.contains("schema") || doc["schema"] != "capsim-moe-kernels/1" || !doc.contains("families") ||
      !doc["families"].is_object())
    throw InputError({{origin, "", "not a capsim-moe-kernels/1 file (\"schema\" and \"families\" required)", {}}});
  const json& fams = doc["families"];
  if (!fams.contains(name)) {
    std::string list;
    std::vector<std::string> names;
    for (auto it = fams.begin(); it != fams.end(); ++it) names.push_back(it.key());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    const std::string near = nearest(name, names);
    throw InputError({{pointer, "\"" + name + "\"", "unknown MoE kernel family; valid: " + list,
                       near.empty() ? "" : "did you mean \"" + near + "\"?"}});
  }
  const json sources = doc.contains("sources") && doc["sources"].is_object() ? doc["sources"] : json::object();
  std::vector<Issue> issues;
  MoeKernel out;
  out.family = name;
  const json& fam = fams[name];
  const std::string at = origin + "#/families/" + name;
  if (fam.contains("rates") && fam["rates"].is_object()) {
    for (auto it = fam["rates"].begin(); it != fam["rates"].end(); ++it) {
      MoeKernelRates r;
      r.target = it.key();
      const json& g = it.value();
      const std::string gat = at + "/rates/" + r.target;
      auto flag = [&](const char* key, bool& out_b) {
        if (!g.contains(key)) return;
        if (!g[key].is_boolean()) issues.push_back({gat + "/" + key, brief(g[key]), "must be true or false", {}});
        else out_b = g[key].get<bool>();
      };
      flag("fp8_only", r.fp8_only);
      flag("fp8_block_only", r.fp8_block_only);
      // Every figure: a value with the sources it comes from.
      auto figure = [&](const char* key, std::optional<double>& out_v, double min, double max) {
        if (!g.contains(key)) return;
        const json& f = g[key];
        const std::string fat = gat + "/" + key;
        if (!f.is_object() || !f.contains("value") || !f["value"].is_number() || f["value"].get<double>() < min ||
            f["value"].get<double>() > max || (min == 0 && max <= 1 && f["value"].get<double>() == 0)) {
          issues.push_back({fat, brief(f), max <= 1 ? "must be {\"value\": a fraction in (0, 1], \"source\": [...]}"
                                                    : "must be {\"value\": microseconds >= 0, \"source\": [...]}", {}});
          return;
        }
        check_sources(f, fat, "every figure needs a source", sources, issues);
        out_v = f["value"].get<double>();
      };
      figure("hbm", r.hbm, 0, 1.0);
      figure("fixed_us", r.fixed_us, 0, 1e6);
      figure("expert_us", r.expert_us, 0, 1e6);
      figure("compute_fp8", r.compute_fp8, 0, 1.0);
      figure("compute_bf16", r.compute_bf16, 0, 1.0);
      // The FP8 compute fraction by rows per expert: rows ascending, a fraction for each.
      if (g.contains("compute_fp8_by_rows")) {
        const json& f = g["compute_fp8_by_rows"];
        const std::string fat = gat + "/compute_fp8_by_rows";
        const bool shape = f.is_object() && f.contains("rows") && f.contains("value") && f["rows"].is_array() &&
                           f["value"].is_array() && !f["rows"].empty() && f["rows"].size() == f["value"].size();
        bool ok = shape;
        for (size_t i = 0; ok && i < f["rows"].size(); ++i) {
          const json& x = f["rows"][i];
          const json& y = f["value"][i];
          ok = x.is_number() && y.is_number() && x.get<double>() >= 1 && y.get<double>() > 0 && y.get<double>() <= 1 &&
               (i == 0 || x.get<double>() > f["rows"][i - 1].get<double>());
          if (ok) r.compute_fp8_by_rows.emplace_back(x.get<double>(), y.get<double>());
        }
        if (!ok) {
          r.compute_fp8_by_rows.clear();
          issues.push_back({fat, brief(f),
                            "must be {\"rows\": [ascending counts >= 1], \"value\": [a fraction in (0, 1] for each], "
                            "\"source\": [...]}",
                            {}});
        } else {
          check_sources(f, fat, "every figure needs a source", sources, issues);
        }
      }
      // Any other key (besides a note) is an unknown figure; the message lists the known ones.
      static const std::vector<std::string> kFigures = {"hbm",         "fixed_us",          "expert_us",
                                                        "compute_fp8", "compute_fp8_by_rows", "compute_bf16",
                                                        "fp8_only",    "fp8_block_only"};
      for (auto f = g.begin(); f != g.end(); ++f)
        if (f.key() != "note" && std::find(kFigures.begin(), kFigures.end(), f.key()) == kFigures.end()) {
          std::string known;
          for (const auto& k : kFigures) known += (known.empty() ? "" : ", ") + k;
          issues.push_back({gat + "/" + f.key(), "", "unknown figure (" + known + ")", {}});
        }
      out.rates.push_back(std::move(r));
    }
  }
  if (!issues.empty()) throw InputError(std::move(issues));
  return out;
}

EngineProfile engine_profile_from_json(const json& doc, const std::string& origin, const std::string& release) {
  std::vector<Issue> issues;
  ObjectReader top(doc, origin + "#", issues);
  std::string schema;
  if (!doc.is_object() || !top.string("schema", schema) || schema != "capsim-engine/1")
    throw InputError({{origin, "", "not a capsim-engine/1 file (no \"schema\": \"capsim-engine/1\")", {}}});
  EngineProfile p;
  p.id.clear();  // the defaults name the built-in profile; a file names itself
  p.name.clear();
  top.string("id", p.id);
  top.string("name", p.name);
  if (const json* a = top.get("aliases")) {
    const bool ok = a->is_array() && std::all_of(a->begin(), a->end(), [](const json& x) {
      if (!x.is_string()) return false;
      const std::string v = x.get<std::string>();
      return !v.empty() && std::none_of(v.begin(), v.end(), [](unsigned char c) { return std::isupper(c) != 0; });
    });
    if (!ok) issues.push_back({origin + "#/aliases", brief(*a), "must be an array of lower-case names", {}});
  }
  p.label = p.id;
  top.string("label", p.label);
  if (p.id.empty()) issues.push_back({origin + "#/id", "", "is required", {}});
  if (p.name.empty()) issues.push_back({origin + "#/name", "", "is required", {}});
  if (doc.contains("versions")) {
    // The releases the profile covers; a null bound is open.
    json range = doc["versions"];
    if (range.is_object())
      for (const char* bound : {"from", "to"})
        if (range.contains(bound) && range[bound].is_null()) range.erase(bound);
    std::string from, to;
    if (const char* problem = range.is_object() && range.empty() ? nullptr : read_release_range(range, from, to))
      issues.push_back({origin + "#/versions", brief(doc["versions"]), problem, {}});
  }
  const json sources = doc.contains("sources") && doc["sources"].is_object() ? doc["sources"] : json::object();
  if (!doc.contains("knobs") || !doc["knobs"].is_object()) {
    issues.push_back({origin + "#/knobs", "", "is required (an object of knobs, each {value, source})", {}});
    throw InputError(std::move(issues));
  }
  const json& k = doc["knobs"];
  std::vector<std::string> known;
  const std::vector<int> want = release_order(release);
  // A knob's values, after checking that each has sources the file lists: its own value
  // and those of its release ranges, every one to be checked, the one in force for
  // `release` marked (release_range_values; the knob's own where no range holds it).
  auto knob = [&](const char* key) -> std::vector<KnobValue> {
    known.emplace_back(key);
    const std::string at = origin + "#/knobs/" + key;
    if (!k.contains(key) || !k[key].is_object() || !k[key].contains("value")) {
      issues.push_back({at, "", "is required ({\"value\": ..., \"source\": [...]})", {}});
      return {};
    }
    check_sources(k[key], at, "every knob needs a source", sources, issues);
    std::vector<KnobValue> out{{&k[key]["value"], at + "/value", true}};
    if (!k[key].contains("by_release")) return out;
    std::string chosen;
    for (KnobValue& v : release_range_values(k[key]["by_release"], at + "/by_release", want, sources, issues, chosen))
      out.push_back(std::move(v));
    if (!chosen.empty()) {
      out.front().in_force = false;
      p.release_values.push_back(std::string(key) + " (" + chosen + ")");
    }
    return out;
  };
  // Whether a knob only some engines have is in the file; one left out is still a known
  // name (not an "unknown knob").
  auto has_knob = [&](const char* key) {
    if (k.contains(key)) return true;
    known.emplace_back(key);
    return false;
  };
  auto integer = [&](const char* key, int64_t& out, int64_t min) {
    for (const KnobValue& v : knob(key)) {
      if (!v.value->is_number_integer() || v.value->get<int64_t>() < min)
        issues.push_back({v.at, brief(*v.value), "must be an integer >= " + std::to_string(min), {}});
      else if (v.in_force)
        out = v.value->get<int64_t>();
    }
  };
  auto number = [&](const char* key, double& out, double scale) {
    for (const KnobValue& v : knob(key)) {
      if (!v.value->is_number() || v.value->get<double>() < 0)
        issues.push_back({v.at, brief(*v.value), "must be a number >= 0", {}});
      else if (v.in_force)
        out = v.value->get<double>() * scale;
    }
  };
  auto boolean = [&](const char* key, bool& out) {
    for (const KnobValue& v : knob(key)) {
      if (!v.value->is_boolean()) issues.push_back({v.at, brief(*v.value), "must be true or false", {}});
      else if (v.in_force) out = v.value->get<bool>();
    }
  };
  EngineDefaults& d = p.knobs;
  integer("max_num_seqs", d.max_num_seqs, 1);
  integer("max_num_batched_tokens", d.max_num_batched_tokens, 1);
  // The batch limits may depend on the usage context and the GPU (DeploymentKnob).
  auto deployment = [&](const char* key, DeploymentKnob& out) {
    if (!k.contains(key) || !k[key].is_object()) return;
    const std::string at = origin + "#/knobs/" + key;
    const json& kj = k[key];
    auto count = [&](const json& v, const std::string& where, int64_t& into) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1) issues.push_back({where, brief(v), "must be an integer >= 1", {}});
      else into = v.get<int64_t>();
    };
    if (kj.contains("llm_class")) {
      int64_t v = 0;
      count(kj["llm_class"], at + "/llm_class", v);
      if (v > 0) out.llm_class = v;
    }
    if (!kj.contains("by_gpu")) return;
    if (!kj["by_gpu"].is_array()) {
      issues.push_back({at + "/by_gpu", brief(kj["by_gpu"]), "must be a list of rules", {}});
      return;
    }
    for (size_t i = 0; i < kj["by_gpu"].size(); ++i) {
      const json& r = kj["by_gpu"][i];
      const std::string rat = at + "/by_gpu/" + std::to_string(i);
      if (!r.is_object()) {
        issues.push_back({rat, brief(r), "must be an object", {}});
        continue;
      }
      GpuKnobRule rule;
      auto names = [&](const char* f, std::vector<std::string>& into) {
        if (!r.contains(f)) return;
        bool ok = r[f].is_array();
        if (ok)
          for (const json& n : r[f]) ok = ok && n.is_string() && !n.get<std::string>().empty();
        if (!ok) issues.push_back({rat + "/" + f, brief(r[f]), "must be a list of GPU preset id parts", {}});
        else for (const json& n : r[f]) into.push_back(n.get<std::string>());
      };
      names("gpus", rule.gpus);
      names("except", rule.except);
      if (r.contains("min_hbm_gib")) {
        if (!r["min_hbm_gib"].is_number() || r["min_hbm_gib"].get<double>() < 0)
          issues.push_back({rat + "/min_hbm_gib", brief(r["min_hbm_gib"]), "must be a number >= 0", {}});
        else rule.min_hbm_bytes = r["min_hbm_gib"].get<double>() * 1024.0 * 1024.0 * 1024.0;
      }
      if (!r.contains("value")) issues.push_back({rat + "/value", "", "is required", {}});
      else count(r["value"], rat + "/value", rule.value);
      if (r.contains("llm_class")) {
        int64_t v = 0;
        count(r["llm_class"], rat + "/llm_class", v);
        if (v > 0) rule.llm_class = v;
      }
      if (r.contains("versions"))
        if (const char* problem = read_release_range(r["versions"], rule.from, rule.to))
          issues.push_back({rat + "/versions", brief(r["versions"]), problem, {}});
      for (auto it = r.begin(); it != r.end(); ++it) {
        static const std::vector<std::string> keys{"gpus", "except", "min_hbm_gib", "value", "llm_class", "versions", "note"};
        if (std::find(keys.begin(), keys.end(), it.key()) == keys.end())
          issues.push_back({rat + "/" + it.key(), "", "unknown rule key (gpus, except, min_hbm_gib, value, llm_class, versions, note)", {}});
      }
      out.by_gpu.push_back(std::move(rule));
    }
  };
  deployment("max_num_seqs", d.max_num_seqs_by);
  deployment("max_num_batched_tokens", d.max_num_batched_tokens_by);
  // The card figure of an engine whose launcher sizes the prefill budget (TGI 3).
  if (has_knob("launcher_card_tflops")) {
    integer("launcher_card_tflops", d.launcher_card_tflops, 0);
    deployment("launcher_card_tflops", d.launcher_card_tflops_by);
  }
  integer("unchunked_min_batched_tokens", d.unchunked_min_batched_tokens, 1);
  if (has_knob("chunked_prefill_above_context")) integer("chunked_prefill_above_context", d.chunked_prefill_above_context, 0);
  integer("block_size", d.block_size, 1);
  number("gpu_memory_utilization", d.gpu_memory_utilization, 1.0);
  if (has_knob("cuda_graph_max_tokens_tp4")) integer("cuda_graph_max_tokens_tp4", d.cuda_graph_max_tokens_tp4, 0);
  // The memory share by tensor-parallel degree: [[from tp, value], ...], degrees ascending.
  if (has_knob("gpu_memory_utilization_by_tp")) {
    for (const KnobValue& v : knob("gpu_memory_utilization_by_tp")) {
      std::vector<std::pair<int64_t, double>> table;
      bool ok = v.value->is_array() && !v.value->empty();
      for (size_t i = 0; ok && i < v.value->size(); ++i) {
        const json& e = (*v.value)[i];
        ok = e.is_array() && e.size() == 2 && e[0].is_number_integer() && e[0].get<int64_t>() >= 1 && e[1].is_number() &&
             e[1].get<double>() > 0 && e[1].get<double>() <= 1 && (table.empty() || e[0].get<int64_t>() > table.back().first);
        if (ok) table.emplace_back(e[0].get<int64_t>(), e[1].get<double>());
      }
      if (!ok)
        issues.push_back({v.at, brief(*v.value),
                          "must be [[tensor-parallel degree, fraction in (0, 1]], ...], degrees ascending from 1", {}});
      else if (v.in_force)
        d.gpu_memory_utilization_by_tp = std::move(table);
    }
  }
  // The memory share from the engine's reserve: an object of MiB figures.
  if (has_knob("memory_reserve")) {
    for (const KnobValue& v : knob("memory_reserve")) {
      static const std::vector<std::string> kFields = {
          "fixed_mib",          "mib_per_prefill_token",      "min_prefill_tokens", "mib_per_graph_seq",
          "mib_per_model_gpu",  "mib_per_dp_graph_seq",       "mib_per_dp_graph_seq_large",
          "large_graph_seqs",   "min_mib",                    "min_above_gpu_mib"};
      bool ok = v.value->is_object() && v.value->contains("fixed_mib");
      for (auto f = ok ? v.value->begin() : v.value->end(); ok && f != v.value->end(); ++f)
        ok = std::find(kFields.begin(), kFields.end(), f.key()) != kFields.end() && f.value().is_number() &&
             f.value().get<double>() >= 0 && f.value().get<double>() <= 1e9;
      if (!ok) {
        std::string list;
        for (const auto& f : kFields) list += (list.empty() ? "" : ", ") + f;
        issues.push_back({v.at, brief(*v.value), "must be an object of numbers in [0, 1e9] with fixed_mib, of: " + list, {}});
        continue;
      }
      if (!v.in_force) continue;
      const json& o = *v.value;
      MemoryReserveRule r;
      r.fixed_mib = o.value("fixed_mib", 0.0);
      r.mib_per_prefill_token = o.value("mib_per_prefill_token", 0.0);
      r.min_prefill_tokens = static_cast<int64_t>(o.value("min_prefill_tokens", 0.0));
      r.mib_per_graph_seq = o.value("mib_per_graph_seq", 0.0);
      r.mib_per_model_gpu = o.value("mib_per_model_gpu", 0.0);
      r.mib_per_dp_graph_seq = o.value("mib_per_dp_graph_seq", 0.0);
      r.mib_per_dp_graph_seq_large = o.value("mib_per_dp_graph_seq_large", 0.0);
      r.large_graph_seqs = static_cast<int64_t>(o.value("large_graph_seqs", 0.0));
      r.min_mib = o.value("min_mib", 0.0);
      r.min_above_gpu_mib = o.value("min_above_gpu_mib", 0.0);
      d.memory_reserve = r;
    }
  }
  // The start-up profiling run's memory beside the weights; absent: the forward pass and one
  // fp32 logits shard, 300 MiB of CUDA context, no graph reserve.
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  d.profile_logits_bytes_per_entry = d.profile_activation_fixed_bytes = d.cudagraph_reserved_bytes = 0;
  d.non_torch_bytes = d.non_torch_tp_bytes = 300.0 * 1024.0 * 1024.0;
  if (has_knob("profile_logits_bytes_per_entry"))
    number("profile_logits_bytes_per_entry", d.profile_logits_bytes_per_entry, 1.0);
  if (has_knob("profile_activation_fixed_gib")) number("profile_activation_fixed_gib", d.profile_activation_fixed_bytes, kGiB);
  if (has_knob("non_torch_gib")) {
    number("non_torch_gib", d.non_torch_bytes, kGiB);
    d.non_torch_tp_bytes = d.non_torch_bytes;
  }
  if (has_knob("non_torch_tp_gib")) number("non_torch_tp_gib", d.non_torch_tp_bytes, kGiB);
  if (has_knob("cudagraph_reserved_gib")) number("cudagraph_reserved_gib", d.cudagraph_reserved_bytes, kGiB);
  // Batch limits without a usage context; absent: none of the engine's own.
  d.engine_context_max_num_seqs = d.engine_context_max_num_batched_tokens = 0;
  if (has_knob("engine_context_max_num_seqs")) integer("engine_context_max_num_seqs", d.engine_context_max_num_seqs, 1);
  if (has_knob("engine_context_max_num_batched_tokens"))
    integer("engine_context_max_num_batched_tokens", d.engine_context_max_num_batched_tokens, 1);
  boolean("chunked_prefill", d.chunked_prefill);
  boolean("cuda_graphs", d.cuda_graphs);
  integer("cuda_graph_max_tokens", d.cuda_graph_max_tokens, 0);
  boolean("graph_prefill_steps", d.graph_prefill_steps);
  boolean("mixed_prefill_decode", d.mixed_prefill_decode);
  number("step_overhead_ms", d.step_overhead_s, 1e-3);
  number("step_overhead_us_per_seq", d.step_overhead_per_seq_s, 1e-6);
  boolean("host_overlaps_gpu", d.host_overlaps_gpu);
  number("request_overhead_ms", d.request_overhead_s, 1e-3);
  number("eager_host_us_dense_layer", d.eager_host_s_dense_layer, 1e-6);
  number("eager_host_us_moe_layer", d.eager_host_s_moe_layer, 1e-6);
  integer("scheduler_steps", d.scheduler_steps, 1);
  // How the decode attention kernel shares a KV head's loads among its query heads; absent:
  // the whole group.
  d.decode_heads_per_kv_load = 0;
  if (has_knob("decode_heads_per_kv_load")) integer("decode_heads_per_kv_load", d.decode_heads_per_kv_load, 0);
  for (const KnobValue& v : knob("preemption")) {
    const std::string mode = v.value->is_string() ? v.value->get<std::string>() : std::string();
    const std::optional<Preemption> parsed = preemption_from_string(mode);
    if (!parsed)
      issues.push_back({v.at, brief(*v.value), "must be \"recompute\", \"swap\", \"partial\" or \"cached\"", {}});
    else if (v.in_force)
      d.preemption = *parsed;
  }
  double swap_gib = 0;
  number("swap_space_gib", swap_gib, 1.0);
  // Behaviours only some engines have: a profile may leave them out (false).
  auto optional_boolean = [&](const char* key, bool& out) {
    if (has_knob(key)) boolean(key, out);
  };
  // A prefill batch that waits while sequences decode (TGI's router); absent: none waits.
  if (has_knob("prefill_wait_ratio")) number("prefill_wait_ratio", d.prefill_wait_ratio, 1.0);
  if (has_knob("prefill_wait_steps")) integer("prefill_wait_steps", d.prefill_wait_steps, 0);
  optional_boolean("unchunked_prefill_unbounded", d.unchunked_prefill_unbounded);
  optional_boolean("unchunked_prefill_with_decodes", d.unchunked_prefill_with_decodes);
  optional_boolean("unchunked_budget_is_model_context", d.unchunked_budget_is_model_context);
  optional_boolean("reserve_to_completion", d.reserve_to_completion);
  optional_boolean("preempt_fewest_outputs", d.preempt_fewest_outputs);
  // Admission by estimated future output tokens (SGLang); absent: by free blocks alone.
  if (has_knob("admission_output_ratio_init")) number("admission_output_ratio_init", d.admission_output_ratio_init, 1.0);
  if (has_knob("admission_output_ratio_min")) number("admission_output_ratio_min", d.admission_output_ratio_min, 1.0);
  if (has_knob("admission_output_ratio_decay_steps"))
    number("admission_output_ratio_decay_steps", d.admission_output_ratio_decay_steps, 1.0);
  if (has_knob("admission_output_clip")) integer("admission_output_clip", d.admission_output_clip, 1);
  if (has_knob("retract_decode_steps")) integer("retract_decode_steps", d.retract_decode_steps, 0);
  if (d.admission_output_ratio_init > 1.0 || d.admission_output_ratio_min > d.admission_output_ratio_init)
    issues.push_back({origin + "#/knobs/admission_output_ratio_min/value", brief(json(d.admission_output_ratio_min)),
                      "must be at most admission_output_ratio_init (" + brief(json(d.admission_output_ratio_init)) +
                          "), itself at most 1",
                      {}});
  optional_boolean("attention_dp", d.attention_dp);
  optional_boolean("dp_attention_divides_batched_tokens", d.dp_attention_divides_batched_tokens);
  optional_boolean("nccl_nvls", d.nccl_nvls);
  // Group-limited top-k routing beyond one fused kernel; absent: none (a fused kernel).
  d.grouped_topk_s = d.grouped_topk_s_per_token = 0;
  if (has_knob("grouped_topk_us")) number("grouped_topk_us", d.grouped_topk_s, 1e-6);
  if (has_knob("grouped_topk_ns_per_token")) number("grouped_topk_ns_per_token", d.grouped_topk_s_per_token, 1e-9);
  // Graphs captured in pieces around each layer's attention (vLLM V1); absent: whole graphs.
  d.piecewise_graph_s_per_layer = 0;
  d.full_graph_decode_steps = false;
  if (has_knob("piecewise_graph_us_per_layer")) number("piecewise_graph_us_per_layer", d.piecewise_graph_s_per_layer, 1e-6);
  // Absent for MLA layers: the same as any layer's.
  d.piecewise_graph_s_per_mla_layer = d.piecewise_graph_s_per_layer;
  if (has_knob("piecewise_graph_us_per_mla_layer"))
    number("piecewise_graph_us_per_mla_layer", d.piecewise_graph_s_per_mla_layer, 1e-6);
  optional_boolean("full_graph_decode_steps", d.full_graph_decode_steps);
  // The MoE kernel family (data/moe_kernels.json); a profile without one runs the GPU
  // presets' fused-MoE (Triton) figures.
  d.moe_kernel = MoeKernel{"triton", {}};
  if (has_knob("moe_kernel")) {
    for (const KnobValue& v : knob("moe_kernel")) {
      if (!v.value->is_string()) {
        issues.push_back({v.at, brief(*v.value), "must be a string naming a MoE kernel family", {}});
      } else {
        try {
          MoeKernel family = moe_kernel_family(v.value->get<std::string>(), v.at);
          if (v.in_force) d.moe_kernel = std::move(family);
        } catch (const InputError& e) {
          issues.insert(issues.end(), e.issues().begin(), e.issues().end());
        }
      }
    }
  }
  // Optional knobs that name one of a few rules: absent leaves `out` as it is (the engine's
  // own default); otherwise `out` is the index of the rule the profile names.
  auto named_rule = [&](const char* key, const std::vector<std::string>& words, size_t& out) {
    if (!has_knob(key)) return;
    std::string expected = "must be ";
    for (size_t i = 0; i < words.size(); ++i)
      expected += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + ("\"" + words[i] + "\"");
    for (const KnobValue& v : knob(key)) {
      const auto at = v.value->is_string() ? std::find(words.begin(), words.end(), v.value->get<std::string>()) : words.end();
      if (at == words.end())
        issues.push_back({v.at, brief(*v.value), expected, {}});
      else if (v.in_force)
        out = static_cast<size_t>(at - words.begin());
    }
  };
  // Knobs that name one of two rules: absent is the first, `out` is whether the profile
  // names the second.
  auto optional_rule = [&](const char* key, const char* first, const char* second, bool& out) {
    size_t rule = out ? 1 : 0;
    named_rule(key, {first, second}, rule);
    out = rule == 1;
  };
  // What max_num_seqs "auto" runs: the engine's default, or the batch limits its
  // benchmark launcher computes for the workload.
  optional_rule("batch_limits_auto", "default", "trtllm-bench", d.batch_limits_from_trtllm_bench);
  // What the memory fraction is a fraction of.
  optional_rule("gpu_memory_utilization_of", "total", "free", d.memory_fraction_of_free);
  // Where the activation peak goes: taken off the KV cache's share, or left to the headroom.
  optional_rule("activation_peak", "in_share", "in_headroom", d.activation_in_headroom);
  // What the capture size is when the scenario leaves it: the engine's default, or the
  // batch cap the launcher runs with.
  optional_rule("cuda_graph_max_tokens_auto", "default", "max_num_seqs", d.cuda_graphs_follow_max_num_seqs);
  // The kernel of block-scaled FP8 linear layers: a fixed tile shape, or DeepGEMM's per-shape
  // choice.
  optional_rule("block_fp8_gemm", "fixed_tile", "deepgemm", d.block_fp8_gemm_fills_sms);
  // An MLA model's query and key-value down projections: two GEMMs, or one over their
  // concatenated weights.
  optional_rule("mla_down_projections", "separate", "fused", d.mla_fused_down_projections);
  // How a layer's rotary and KV-cache write run: two kernels, one, or inside attention.
  {
    // In the order of EngineDefaults::RopeKvWrite.
    size_t rule = static_cast<size_t>(d.rope_kv_write);
    named_rule("rope_kv_write", {"separate", "fused", "in_attention"}, rule);
    d.rope_kv_write = static_cast<EngineDefaults::RopeKvWrite>(rule);
  }
  // Where a per-tensor FP8 or W8A8 layer quantizes its input: in the kernel that produced
  // it, or in a kernel of its own ahead of the GEMM.
  d.activation_quant_kernel = false;
  optional_rule("activation_quant", "fused", "separate", d.activation_quant_kernel);
  // Where the residual add and norm run under tensor parallelism: kernels of their own, or
  // inside the all-reduce.
  optional_rule("residual_norm", "separate", "in_all_reduce", d.residual_norm_in_all_reduce);
  // The model families the fusion is limited to (absent: every model).
  d.residual_norm_families.clear();
  if (has_knob("residual_norm_families")) {
    std::vector<std::string> families;  // every Family, first (gpt2) to last (gpt_oss)
    for (int f = static_cast<int>(Family::gpt2); f <= static_cast<int>(Family::gpt_oss); ++f)
      families.emplace_back(to_string(static_cast<Family>(f)));
    std::string all;
    for (const std::string& f : families) all += (all.empty() ? "" : ", ") + f;
    for (const KnobValue& v : knob("residual_norm_families")) {
      bool ok = v.value->is_array() && !v.value->empty();
      if (ok)
        for (const json& n : *v.value)
          ok = ok && n.is_string() && std::find(families.begin(), families.end(), n.get<std::string>()) != families.end();
      if (!ok) issues.push_back({v.at, brief(*v.value), "must be a non-empty list of model families (" + all + ")", {}});
      else if (v.in_force) d.residual_norm_families = v.value->get<std::vector<std::string>>();
    }
  }
  // A gated MLP's gate and up projections: one GEMM over both weights, or two.
  optional_rule("mlp_gate_up", "fused", "separate", d.mlp_gate_up_separate);
  // Where int4 weights apply a gated MLP's activation: a kernel of its own, or the GEMM.
  optional_rule("int4_gated_activation", "separate", "in_gemm", d.int4_silu_in_gemm);
  // Where a single shared expert runs: its own MLP, or inside the routed-expert kernel.
  optional_rule("shared_expert", "separate", "fused", d.fused_shared_expert);
  // How routed tokens reach the experts behind attention DP: all-to-alls, or an
  // all-gather of every rank's tokens and a reduce-scatter of the outputs.
  optional_rule("moe_dp_exchange", "all_to_all", "gather_reduce_scatter", d.moe_dp_gathers_tokens);
  // What an absent max_num_batched_tokens runs: the default, or TGI 3's launcher budget.
  optional_rule("max_num_batched_tokens_auto", "default", "tgi-launcher", d.prefill_budget_from_tgi_launcher);
  // The tensor-parallel all-reduce: the engine's own kernel where it beats NCCL, or NCCL.
  optional_rule("tp_all_reduce", "engine_kernel", "nccl", d.tp_all_reduce_nccl_only);
  // The prompts' attention kernel class: Hopper-native (FlashAttention-3 and the like) or
  // FlashAttention-2 (Ampere-style code).
  optional_rule("prefill_attention", "fa3", "fa2", d.prefill_attention_fa2);
  // What a sliding-window layer keeps of a sequence's keys and values: every token, as a
  // full-attention layer does, or only the window's. A profile without a source for it
  // keeps every token (the plan built in code is vLLM V1's newest release, which bounds it).
  d.sliding_window_kv_bounded = false;
  optional_rule("sliding_window_kv", "full", "window", d.sliding_window_kv_bounded);
  d.swap_space_bytes = swap_gib * 1024.0 * 1024.0 * 1024.0;
  if (d.gpu_memory_utilization > 1.0)
    issues.push_back({origin + "#/knobs/gpu_memory_utilization/value", std::to_string(d.gpu_memory_utilization),
                      "must be in (0, 1]", {}});
  for (auto it = k.begin(); it != k.end(); ++it)
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      const std::string n = nearest(it.key(), known);
      issues.push_back({origin + "#/knobs/" + it.key(), "", "unknown knob", n.empty() ? "" : "did you mean \"" + n + "\"?"});
    }
  if (!issues.empty()) throw InputError(std::move(issues));
  return p;
}

void keep_rules_for_release(EngineDefaults& knobs, const std::string& version) {
  const std::vector<int> want = release_order(version);
  for (DeploymentKnob* dk : {&knobs.max_num_seqs_by, &knobs.max_num_batched_tokens_by, &knobs.launcher_card_tflops_by})
    std::erase_if(dk->by_gpu, [&](const GpuKnobRule& r) {
      if (want.empty()) return !r.to.empty();
      return !in_release_range(want, release_order(r.from), release_order(r.to));
    });
}

EngineProfile select_engine_profile(const std::string& name_in, const std::string& version, const std::string& pointer) {
  // Names are lower case (SCHEMA.md); "vLLM" or "SGLang" as a source writes them is the same engine.
  std::string name = name_in.empty() ? "vllm" : name_in;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::vector<Candidate> cands;
  std::vector<std::string> names;
  for (const std::string& id : engine_profile_ids()) {
    const fs::path path = data_dir() / "engines" / (id + ".json");
    json doc = read_json_file(path);
    const std::string n = doc.is_object() && doc.contains("name") && doc["name"].is_string()
                              ? doc["name"].get<std::string>()
                              : std::string();
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    // The names a project also goes by (its repository, its Python package) select it too.
    bool alias = false;
    if (doc.is_object() && doc.contains("aliases") && doc["aliases"].is_array())
      for (const json& a : doc["aliases"]) alias = alias || (a.is_string() && a.get<std::string>() == name);
    if (n != name && !alias) continue;
    Candidate c{id, std::move(doc), {}, {}};
    if (c.doc.contains("versions") && c.doc["versions"].is_object()) {
      const json& v = c.doc["versions"];
      if (v.contains("from") && v["from"].is_string()) c.from = release_order(v["from"].get<std::string>());
      if (v.contains("to") && v["to"].is_string()) c.to = release_order(v["to"].get<std::string>());
    }
    cands.push_back(std::move(c));
  }
  if (cands.empty()) {
    std::string list;
    std::sort(names.begin(), names.end());
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    const std::string near = nearest(name, names);
    throw InputError({{pointer + "/name", "\"" + name + "\"", "no profile for this engine in data/engines; known: " + list,
                       near.empty() ? "" : "did you mean \"" + near + "\"?"}});
  }
  const std::vector<int> want = release_order(version);
  const Candidate* pick = nullptr;
  std::string match;
  if (name_in.empty()) {
    // No engine named: the newest vLLM.
    for (const auto& c : cands)
      if (!pick || compare(c.from, pick->from) > 0) pick = &c;
    match = "no engine named: the newest vLLM profile";
  } else if (want.empty()) {
    for (const auto& c : cands)
      if (!pick || compare(c.from, pick->from) > 0) pick = &c;
    match = "version \"" + version + "\" is not a release number: the newest " + name + " profile";
  } else {
    for (const auto& c : cands)
      if (in_release_range(want, c.from, c.to)) pick = &c;
    if (pick) {
      match = "version " + version + " is in the profile's range";
    } else {
      double best = 0;
      for (const auto& c : cands) {
        const double d = std::min(distance(want, c.from), c.to.empty() ? distance(want, c.from) : distance(want, c.to));
        if (!pick || d < best) {
          pick = &c;
          best = d;
        }
      }
      match = "version " + version + " is outside every " + name + " profile's range: the nearest one";
    }
  }
  EngineProfile p = engine_profile_from_json(pick->doc, (data_dir() / "engines" / (pick->id + ".json")).string(), version);
  keep_rules_for_release(p.knobs, version);
  p.version = version;
  p.match = match;
  return p;
}

}  // namespace capsim::io
