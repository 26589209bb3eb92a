#pragma once
/// Scenario files (the shape of a validation case, see data/validation/SCHEMA.md) to
/// Scenario values, strictly: unknown keys are rejected with the nearest valid key, and
/// every problem (bad types, impossible layouts, unknown presets) is reported at once.

#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "capsim/core/scenario.hpp"

namespace capsim::io {

/// Apply `--set path=value` overrides to a scenario document before it is read. `path`
/// is dotted (training.tp) or a JSON pointer (/training/tp); `value` is parsed as JSON
/// when it is valid JSON, else taken as a string. Creates missing objects on the way.
void apply_overrides(nlohmann::json& doc, const std::vector<std::string>& sets);

/// How `inference.engine` treats a key it does not know: rejected with the nearest valid
/// key (our scenario files), or ignored (published validation cases: SCHEMA.md says a
/// reader ignores an engine key it does not know).
enum class EngineKeys { reject_unknown, ignore_unknown };

/// Read a scenario document. `base_dir` resolves relative model paths. Throws InputError
/// with every problem found (schema and layout).
Scenario scenario_from_json(const nlohmann::json& doc, const std::filesystem::path& base_dir = {},
                            EngineKeys engine_keys = EngineKeys::reject_unknown);

/// Read a scenario document whose cluster a planner chooses: every key is checked as by
/// scenario_from_json, but not the rules that depend on the GPU and the GPU count (the
/// layout rules, FP8 support); the planner applies those to each cluster it tries.
Scenario scenario_template_from_json(const nlohmann::json& doc, const std::filesystem::path& base_dir = {});

/// A request trace: JSON Lines (`.jsonl`/`.json`: one object per line with arrival_s,
/// input_tokens, output_tokens, optional prefix_id and prefix_tokens) or CSV with a header
/// naming those columns. Every bad line is reported.
std::vector<TraceRequest> read_request_trace(const std::filesystem::path& path, const std::string& pointer);

/// Read a scenario file, applying overrides first.
Scenario load_scenario(const std::filesystem::path& path, const std::vector<std::string>& sets = {});

}  // namespace capsim::io
