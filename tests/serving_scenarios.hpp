#pragma once
// Serving scenarios several test files build on.
#include "capsim/core/scenario.hpp"
#include "capsim/io/presets.hpp"

namespace capsim::testing {

/// DeepSeek-V3 in FP8 on one 8-GPU H200 node, tensor-parallel 8 (EP and the engine as the
/// test sets them).
inline Scenario deepseek_on_h200() {
  Scenario s;
  s.model = io::load_model("deepseek-v3");
  s.system.gpu = io::load_gpu("h200-sxm-141gb");
  s.system.num_gpus = 8;
  s.system.gpus_per_node = 8;
  InferencePlan p;
  p.tp = 8;
  p.weight_dtype = DType::fp8;
  p.activation_dtype = DType::fp8;
  s.inference = p;
  return s;
}

}  // namespace capsim::testing
