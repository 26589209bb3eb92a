#include "capsim/core/cost_model.hpp"

namespace capsim {

std::string_view to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_to_all: return "all_to_all";
  }
  return "?";
}

std::string_view to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::fused: return "fused";
    case AttentionKernel::cudnn: return "cudnn";
    case AttentionKernel::flash2: return "flash2";
    case AttentionKernel::flash1: return "flash1";
    case AttentionKernel::flash_triton: return "flash-triton";
    case AttentionKernel::unfused: return "unfused";
  }
  return "?";
}

}  // namespace capsim
