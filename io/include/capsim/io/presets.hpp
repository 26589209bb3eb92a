#pragma once
/// Presets shipped in data/: GPUs (data/gpus/<id>.json) and models (Hugging Face
/// config.json files in data/models/<name>.json).

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "capsim/core/gpu.hpp"
#include "capsim/core/model.hpp"

namespace capsim::io {

/// Limits on a model's shape, each far beyond any published model (the largest have about
/// 130 layers, hidden 32768, vocabularies under 10^6, a few hundred experts): a larger
/// value is a typo, and would size allocations per layer or overflow parameter counts.
inline constexpr int64_t kMaxLayers = 4096;
inline constexpr int64_t kMaxHidden = int64_t{1} << 20;
inline constexpr int64_t kMaxHeads = int64_t{1} << 16;
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 16;
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;
inline constexpr int64_t kMaxIntermediate = int64_t{1} << 24;
inline constexpr int64_t kMaxExperts = int64_t{1} << 16;
/// Most parameters a model may have (10^15), so that int64 counts and their products with
/// bytes per parameter stay exact.
inline constexpr double kMaxParams = 1e15;

/// The data folder: $CAPSIM_DATA_DIR if set, else the one this build was configured with.
std::filesystem::path data_dir();

std::vector<std::string> gpu_preset_ids();
std::vector<std::string> model_preset_names();

/// Load GPU preset `id`; unknown ids throw InputError at `pointer` listing valid ids.
GpuSpec load_gpu(const std::string& id, const std::string& pointer = "/system/gpu");

/// A GPU datasheet file (capsim-gpu/1) into a GpuSpec.
GpuSpec gpu_from_json(const nlohmann::json& j, const std::string& origin);

/// Read a Hugging Face config.json object leniently: keys it does not need are ignored,
/// missing keys take the defaults of that model_type's config class in transformers.
/// Problems (unknown model_type, impossible shapes) throw InputError at `pointer`.
ModelSpec model_from_hf_config(const nlohmann::json& cfg, const std::string& pointer, std::string name = {});

/// A measured routing skew (data/moe_routing.json, capsim-moe-routing/1): the models it
/// holds for, matched by model_type, routed experts and experts per token.
struct MoeRoutingEntry {
  std::string model_type;
  int64_t num_experts = 0, top_k = 0;
  std::vector<RankImbalancePoint> points;  ///< by increasing EP size
  std::string source;                      ///< key of the file's sources
};

/// Parse and check a capsim-moe-routing/1 document; every problem throws at once as
/// InputError naming `origin` and the place.
std::vector<MoeRoutingEntry> moe_routing_from_json(const nlohmann::json& doc, const std::string& origin);

/// The shipped data/moe_routing.json, read once per data folder.
const std::vector<MoeRoutingEntry>& moe_routing();

/// The entry of moe_routing() that matches, or null.
const MoeRoutingEntry* moe_routing_for(const std::string& model_type, int64_t num_experts, int64_t top_k);

/// A model by preset name (data/models) or by path to a config.json file.
ModelSpec load_model(const std::string& name_or_path, const std::string& pointer = "/model",
                     const std::filesystem::path& base_dir = {});

}  // namespace capsim::io
