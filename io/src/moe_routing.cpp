#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"

namespace capsim::io {

using nlohmann::json;

std::vector<MoeRoutingEntry> moe_routing_from_json(const json& doc, const std::string& origin) {
  std::vector<Issue> issues;
  std::vector<MoeRoutingEntry> out;
  ObjectReader top(doc, origin + "#", issues);
  std::string schema;
  top.string("schema", schema, true);
  if (!schema.empty() && schema != "capsim-moe-routing/1")
    issues.push_back({top.at("schema"), "\"" + schema + "\"", "must be \"capsim-moe-routing/1\"", {}});
  top.allow("note");
  const json* sources = top.get("sources");
  if (sources && !sources->is_object())
    issues.push_back({top.at("sources"), brief(*sources), "must be an object of sources, each {title, url}", {}});
  const json* models = top.get("models");
  if (!models || !models->is_array()) {
    issues.push_back({top.at("models"), models ? brief(*models) : "", models ? "must be a list of models" : "is required", {}});
  } else {
    for (size_t i = 0; i < models->size(); ++i) {
      const std::string at = origin + "#/models/" + std::to_string(i);
      ObjectReader r((*models)[i], at, issues);
      if (!(*models)[i].is_object()) continue;
      MoeRoutingEntry e;
      r.string("model_type", e.model_type, true);
      r.integer("num_experts", e.num_experts, true, 1);
      const bool k_ok = r.integer("top_k", e.top_k, true, 1);
      if (k_ok && e.num_experts > 0 && e.top_k > e.num_experts)
        issues.push_back({r.at("top_k"), std::to_string(e.top_k), "must be at most num_experts", {}});
      if (r.string("source", e.source, true) && sources && sources->is_object() && !sources->contains(e.source))
        issues.push_back({r.at("source"), "\"" + e.source + "\"", "is not a key of /sources", {}});
      r.allow("note");
      const json* points = r.get("rank_imbalance");
      if (!points || !points->is_array() || points->empty()) {
        issues.push_back({r.at("rank_imbalance"), points ? brief(*points) : "",
                          points ? "must be a non-empty list of {ep, max_over_mean}" : "is required", {}});
      } else {
        int64_t last_ep = 1;
        for (size_t j = 0; j < points->size(); ++j) {
          ObjectReader p((*points)[j], r.at("rank_imbalance") + "/" + std::to_string(j), issues);
          if (!(*points)[j].is_object()) continue;
          RankImbalancePoint pt;
          const bool ep_ok = p.integer("ep", pt.ep, true, 2);
          if (ep_ok && pt.ep <= last_ep)
            issues.push_back({p.at("ep"), std::to_string(pt.ep), "must be larger than the point before (and than 1)", {}});
          if (ep_ok) last_ep = std::max(last_ep, pt.ep);
          // The busiest of ep ranks holds between the mean and all routed tokens.
          if (p.number("max_over_mean", pt.max_over_mean, true, 1.0) && ep_ok &&
              pt.max_over_mean > static_cast<double>(pt.ep))
            issues.push_back({p.at("max_over_mean"), brief((*points)[j]["max_over_mean"]),
                              "must be at most ep (the busiest rank holds at most every routed token)", {}});
          p.finish();
          e.points.push_back(pt);
        }
      }
      r.finish();
      out.push_back(std::move(e));
    }
  }
  top.finish();
  if (!issues.empty()) throw InputError(std::move(issues));
  return out;
}

const std::vector<MoeRoutingEntry>& moe_routing() {
  // Read once per data folder (the folder can be switched with $CAPSIM_DATA_DIR).
  static std::mutex mu;
  static std::map<std::string, std::vector<MoeRoutingEntry>> by_dir;
  const std::filesystem::path path = data_dir() / "moe_routing.json";
  const std::lock_guard<std::mutex> lock(mu);
  auto it = by_dir.find(path.string());
  if (it == by_dir.end())
    it = by_dir.emplace(path.string(), moe_routing_from_json(read_json_file(path), path.string())).first;
  return it->second;
}

const MoeRoutingEntry* moe_routing_for(const std::string& model_type, int64_t num_experts, int64_t top_k) {
  for (const MoeRoutingEntry& e : moe_routing())
    if (e.model_type == model_type && e.num_experts == num_experts && e.top_k == top_k) return &e;
  return nullptr;
}

}  // namespace capsim::io
