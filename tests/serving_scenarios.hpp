#pragma once
// Serving scenarios several test files build on.
#include <cstdint>
#include <string>

#include "capsim/core/scenario.hpp"
#include "capsim/io/presets.hpp"

namespace capsim::testing {

/// A model preset served tensor-parallel over `tp` GPUs of one 8-GPU node of a GPU preset,
/// every other setting at its default.
inline Scenario on_one_node(const std::string& model, const std::string& gpu, int64_t tp) {
  Scenario s;
  s.model = io::load_model(model);
  s.system.gpu = io::load_gpu(gpu);
  s.system.num_gpus = tp;
  s.system.gpus_per_node = 8;
  InferencePlan p;
  p.tp = tp;
  s.inference = p;
  return s;
}

/// DeepSeek-V3 in FP8 on one 8-GPU H200 node, tensor-parallel 8 (EP and the engine as the
/// test sets them).
inline Scenario deepseek_on_h200() {
  Scenario s = on_one_node("deepseek-v3", "h200-sxm-141gb", 8);
  s.inference->weight_dtype = DType::fp8;
  s.inference->activation_dtype = DType::fp8;
  return s;
}

}  // namespace capsim::testing
