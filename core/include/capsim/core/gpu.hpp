#pragma once
/// GPU datasheet facts as plain values. Presets live in data/gpus/*.json, each fact
/// with its source; io/ reads them into this struct.

#include <string>

#include "capsim/core/model.hpp"
#include "capsim/core/units.hpp"

namespace capsim {

enum class GpuArch { ampere, hopper, blackwell };

std::string_view to_string(GpuArch a);

/// Datasheet facts of one GPU part. Peaks are dense (no 2:4 sparsity); 0 = unsupported.
struct GpuSpec {
  std::string id;    ///< preset id, e.g. "h100-sxm5-80gb"
  std::string name;  ///< human name
  GpuArch arch = GpuArch::hopper;
  double peak_fp64_tflops = 0;
  double peak_tf32_tflops = 0;
  double peak_bf16_tflops = 0;
  double peak_fp16_tflops = 0;
  double peak_fp8_tflops = 0;
  double peak_int8_tops = 0;
  double peak_fp4_tflops = 0;
  double hbm_capacity_bytes = 0;  ///< usable device memory as the driver reports it
  double hbm_bandwidth_gbps = 0;  ///< GB/s (1e9)
  double l2_cache_mb = 0;
  int sm_count = 0;
  double boost_clock_mhz = 0;
  int nvlink_generation = 0;          ///< 0 = no NVLink
  double nvlink_bw_unidir_gbps = 0;   ///< per GPU, one direction, GB/s
  int pcie_generation = 0;
  double pcie_bw_unidir_gbps = 0;
  double tdp_w = 0;

  bool operator==(const GpuSpec&) const = default;

  /// Dense tensor-core peak for math in `dtype` (FLOP/s); 0 when unsupported.
  FlopsPerSecond peak(DType dtype) const;
  BytesPerSecond hbm_bandwidth() const { return BytesPerSecond(hbm_bandwidth_gbps * kGB); }
  Bytes hbm_capacity() const { return Bytes(hbm_capacity_bytes); }
};

}  // namespace capsim
