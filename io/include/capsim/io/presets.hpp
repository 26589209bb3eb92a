#pragma once
/// Presets shipped in data/: GPUs (data/gpus/<id>.json) and models (Hugging Face
/// config.json files in data/models/<name>.json).

#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "capsim/core/gpu.hpp"
#include "capsim/core/model.hpp"

namespace capsim::io {

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

/// A model by preset name (data/models) or by path to a config.json file.
ModelSpec load_model(const std::string& name_or_path, const std::string& pointer = "/model",
                     const std::filesystem::path& base_dir = {});

}  // namespace capsim::io
