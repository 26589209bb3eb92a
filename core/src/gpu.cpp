#include "capsim/core/gpu.hpp"

#include <algorithm>
#include <cmath>

namespace capsim {

std::string_view to_string(GpuArch a) {
  switch (a) {
    case GpuArch::ampere: return "ampere";
    case GpuArch::hopper: return "hopper";
    case GpuArch::blackwell: return "blackwell";
  }
  return "?";
}

double AttentionEfficiency::at(double seq, int64_t hdim, bool causal) const {
  const size_t row = (hdim <= 64 ? 0 : 2) + (causal ? 1 : 0);
  const auto& v = table[row];
  if (seq_len.empty() || v.empty()) return 0.0;
  if (seq <= seq_len.front()) return v.front();
  if (seq >= seq_len.back()) return v.back();
  size_t i = 1;
  while (seq_len[i] < seq) ++i;
  const double x0 = std::log(seq_len[i - 1]), x1 = std::log(seq_len[i]);
  const double w = (std::log(seq) - x0) / (x1 - x0);
  return v[i - 1] + w * (v[i] - v[i - 1]);
}

double BusbwCurve::at(double bytes) const {
  if (size_bytes.empty()) return 1.0;
  if (bytes <= size_bytes.front()) return fraction.front() * bytes / size_bytes.front();
  if (bytes >= size_bytes.back()) return fraction.back();
  size_t i = 1;
  while (size_bytes[i] < bytes) ++i;
  // Between two measured sizes the time follows the latency-bandwidth (Hockney) line
  // through both points, t = alpha + bytes / beta: linear in bytes, so it rises
  // monotonically from one measured time to the next.
  const double t0 = size_bytes[i - 1] / fraction[i - 1], t1 = size_bytes[i] / fraction[i];
  const double t = t0 + (bytes - size_bytes[i - 1]) * (t1 - t0) / (size_bytes[i] - size_bytes[i - 1]);
  return bytes / t;
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
