#pragma once
/// Serving-engine profiles (data/engines/ID.json, format capsim-engine/1): one file per
/// engine generation, each knob with its value and sources.

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "capsim/core/engine.hpp"

namespace capsim::io {

/// Profile ids shipped in data/engines/, sorted.
std::vector<std::string> engine_profile_ids();

/// MoE kernel families shipped in data/moe_kernels.json (format capsim-moe-kernels/1),
/// sorted.
std::vector<std::string> moe_kernel_family_names();

/// The family `name` with its rates per GPU; an unknown name is an InputError at
/// `pointer` that lists the valid ones.
MoeKernel moe_kernel_family(const std::string& name, const std::string& pointer);

/// The same from a capsim-moe-kernels/1 document; `origin` names it in errors.
MoeKernel moe_kernel_family_from_json(const nlohmann::json& doc, const std::string& origin, const std::string& name,
                                      const std::string& pointer);

/// Read one profile document; `origin` names it in errors. Every knob needs a value and a
/// non-empty source list. A knob may also give values for ranges of releases
/// (`by_release`: [{"versions": {"from", "to"}, "value", "source"}], `from` inclusive,
/// `to` exclusive), each sourced: the first range that holds `release` gives the knob's
/// value; without one, the knob's own value holds. For a `release` that is not a release
/// number ("" included), the first range without an upper bound holds (the newest
/// release's value), as for the GPU rules.
EngineProfile engine_profile_from_json(const nlohmann::json& doc, const std::string& origin, const std::string& release = "");

/// The profile for engine `name` at `version`: the one whose version range holds it, else
/// the nearest release, else (a version that is not a release number, or "auto") the
/// newest profile of that engine; `match` says which. An empty name selects the default
/// engine (vLLM V1). Throws InputError at `pointer` for an engine without a profile.
EngineProfile select_engine_profile(const std::string& name, const std::string& version, const std::string& pointer);

/// Drops the knobs' GPU rules (DeploymentKnob) whose release range excludes `version`;
/// for a version that is not a release number, those with an upper bound (the newest
/// release's rules stay). select_engine_profile applies it.
void keep_rules_for_release(EngineDefaults& knobs, const std::string& version);

/// "0.4.5.post3" -> {0, 4, 5}; "1.0.0rc2" -> {1, 0, 0}; empty when the string does not
/// start with a release number ("auto", "main@2e669133 ...").
std::vector<int> release_number(const std::string& version);

/// The release number padded to four components, then the rank of its tag and the
/// tag's number, in PEP 440 order (.devN < aN < bN < rcN < release < .postN), so that
/// "0.1.0a1" sorts before "0.1.0a2" and both before "0.1.0". Empty as release_number.
std::vector<int> release_order(const std::string& version);

}  // namespace capsim::io
