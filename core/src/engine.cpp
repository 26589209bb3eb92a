#include "capsim/core/engine.hpp"

#include <algorithm>

namespace capsim {

namespace {

bool contains_any(const std::string& id, const std::vector<std::string>& parts) {
  return std::any_of(parts.begin(), parts.end(), [&](const std::string& p) { return id.find(p) != std::string::npos; });
}

}  // namespace

std::string_view to_string(Preemption p) {
  switch (p) {
    case Preemption::recompute: return "recompute";
    case Preemption::swap: return "swap";
    case Preemption::partial: return "partial";
    case Preemption::cached: return "cached";
  }
  return "?";
}

std::optional<Preemption> preemption_from_string(std::string_view s) {
  for (Preemption p : {Preemption::recompute, Preemption::swap, Preemption::partial, Preemption::cached})
    if (to_string(p) == s) return p;
  return std::nullopt;
}

bool GpuKnobRule::matches(const std::string& gpu_id, double hbm_bytes) const {
  if (!gpus.empty() && !contains_any(gpu_id, gpus)) return false;
  if (contains_any(gpu_id, except)) return false;
  return hbm_bytes >= min_hbm_bytes;
}

int64_t DeploymentKnob::resolve(int64_t base, const std::string& gpu_id, double hbm_bytes, bool llm_class_context) const {
  for (const GpuKnobRule& r : by_gpu)
    if (r.matches(gpu_id, hbm_bytes)) return llm_class_context ? r.llm_class.value_or(r.value) : r.value;
  return llm_class_context ? llm_class.value_or(base) : base;
}

EngineDefaults EngineDefaults::for_deployment(const std::string& gpu_id, double hbm_bytes, bool llm_class_context,
                                              bool engine_context) const {
  EngineDefaults d = *this;
  d.max_num_seqs = max_num_seqs_by.resolve(max_num_seqs, gpu_id, hbm_bytes, llm_class_context);
  d.max_num_batched_tokens = max_num_batched_tokens_by.resolve(max_num_batched_tokens, gpu_id, hbm_bytes, llm_class_context);
  if (engine_context && engine_context_max_num_seqs > 0) {
    d.max_num_seqs = engine_context_max_num_seqs;
    d.max_num_batched_tokens = engine_context_max_num_batched_tokens;
  }
  d.launcher_card_tflops = launcher_card_tflops_by.resolve(launcher_card_tflops, gpu_id, hbm_bytes, llm_class_context);
  d.max_num_seqs_by = {};
  d.max_num_batched_tokens_by = {};
  d.launcher_card_tflops_by = {};
  return d;
}

}  // namespace capsim
