#include "capsim/core/eval_cache.hpp"

#include "eval_cache_impl.hpp"

#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"

namespace capsim {

EvalCache::EvalCache() : impl_(std::make_unique<Impl>()) {}
EvalCache::~EvalCache() = default;
EvalCache::EvalCache(EvalCache&&) noexcept = default;
EvalCache& EvalCache::operator=(EvalCache&&) noexcept = default;

LayerKinds layer_kinds(const ModelSpec& m) {
  LayerKinds out;
  for (int64_t i = 0; i < m.layers; ++i) {
    const int k = m.is_moe_layer(i) ? 1 : 0;
    if (m.is_sliding_layer(i)) ++out.sliding[k];
    if (out.count[k]++ == 0) {
      out.first[k] = i;
      out.params[k] = layer_params(m, i);
    }
  }
  return out;
}

namespace {
void count_kinds(const ModelSpec& m, const TrainingPlan& t, std::vector<RankKinds>& out) {
  const auto ranks = stage_layer_ids(m, t);
  out.assign(ranks.size(), RankKinds{});
  for (size_t r = 0; r < ranks.size(); ++r)
    for (int64_t id : ranks[r]) ++out[r].n[m.is_moe_layer(id) ? 1 : 0];
  if (t.schedule == Schedule::dualpipe) {
    // stage_layer_ids lists stage r's layers first.
    const std::vector<int64_t> counts = t.stage_layers.empty() ? split_layers(m.layers, t.pp, m.mtp_layers) : t.stage_layers;
    for (size_t r = 0; r < ranks.size(); ++r)
      for (int64_t i = 0; i < counts[r]; ++i) ++out[r].n_own[m.is_moe_layer(ranks[r][static_cast<size_t>(i)]) ? 1 : 0];
  }
}
}  // namespace

const std::vector<RankKinds>& rank_kinds(const ModelSpec& m, const TrainingPlan& t, EvalCache* cache,
                                         std::vector<RankKinds>& scratch) {
  if (!cache || !t.stage_layers.empty()) {
    count_kinds(m, t, scratch);
    return scratch;
  }
  const StageKey key{&m, t.pp, t.vpp.value_or(1), t.schedule == Schedule::dualpipe};
  auto& entries = cache->impl().stages;
  for (const auto& e : entries)
    if (e.first == key) return e.second;
  entries.emplace_back(key, std::vector<RankKinds>{});
  count_kinds(m, t, entries.back().second);
  return entries.back().second;
}

}  // namespace capsim
