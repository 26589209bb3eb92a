// SM clock, power and temperature through NVML, loaded with dlopen from the driver's
// libnvidia-ml.so.1 so that the build needs neither nvml.h nor the library.
#pragma once

#include <optional>
#include <string>

namespace capsim::calibrate {

/// One reading of the GPU's state.
struct DeviceState {
  double sm_clock_mhz = 0;
  double power_w = 0;
  double temp_c = 0;
};

/// NVML when the driver provides it; every call answers nothing otherwise.
class Monitor {
 public:
  /// Loads NVML; false when the library or its symbols are missing.
  bool init();
  /// Reading for the CUDA device `cuda_device` (matched by PCI bus id).
  std::optional<DeviceState> read(int cuda_device) const;
  /// Driver version string ("580.65.06"), or empty.
  std::string driver_version() const;

 private:
  void* lib_ = nullptr;
};

/// Driver version from NVML, else from /proc/driver/nvidia/version, else empty.
std::string driver_version(const Monitor& monitor);

}  // namespace capsim::calibrate
