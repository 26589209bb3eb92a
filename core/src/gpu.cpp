#include "capsim/core/gpu.hpp"

namespace capsim {

std::string_view to_string(GpuArch a) {
  switch (a) {
    case GpuArch::ampere: return "ampere";
    case GpuArch::hopper: return "hopper";
    case GpuArch::blackwell: return "blackwell";
  }
  return "?";
}

FlopsPerSecond GpuSpec::peak(DType dtype) const {
  double t = 0;
  switch (dtype) {
    case DType::fp32:
    case DType::tf32: t = peak_tf32_tflops; break;
    case DType::bf16: t = peak_bf16_tflops; break;
    case DType::fp16: t = peak_fp16_tflops; break;
    case DType::fp8: t = peak_fp8_tflops; break;
    case DType::int8:
    case DType::int4: t = peak_int8_tops; break;
    case DType::fp4: t = peak_fp4_tflops; break;
  }
  return FlopsPerSecond(t * 1e12);
}

}  // namespace capsim
