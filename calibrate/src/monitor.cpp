#include "monitor.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <fstream>
#include <sstream>

namespace capsim::calibrate {
namespace {

// The few NVML entry points we use, declared from the documented C API (nvml.h).
using NvmlDevice = void*;
using NvmlInit = int (*)();
using NvmlByPci = int (*)(const char*, NvmlDevice*);
using NvmlClock = int (*)(NvmlDevice, int, unsigned int*);
using NvmlPower = int (*)(NvmlDevice, unsigned int*);
using NvmlTemp = int (*)(NvmlDevice, int, unsigned int*);
using NvmlDriver = int (*)(char*, unsigned int);

constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;         ///< NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;  ///< NVML_TEMPERATURE_GPU

template <typename F>
F symbol(void* lib, const char* name) {
  return lib == nullptr ? nullptr : reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

bool Monitor::init() {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  const auto nvml_init = symbol<NvmlInit>(lib_, "nvmlInit_v2");
  if (nvml_init == nullptr || nvml_init() != kNvmlSuccess) {
    lib_ = nullptr;
    return false;
  }
  return true;
}

std::optional<DeviceState> Monitor::read(int cuda_device) const {
  const auto by_pci = symbol<NvmlByPci>(lib_, "nvmlDeviceGetHandleByPciBusId_v2");
  const auto clock = symbol<NvmlClock>(lib_, "nvmlDeviceGetClockInfo");
  const auto power = symbol<NvmlPower>(lib_, "nvmlDeviceGetPowerUsage");
  const auto temp = symbol<NvmlTemp>(lib_, "nvmlDeviceGetTemperature");
  if (by_pci == nullptr || clock == nullptr || power == nullptr || temp == nullptr) return std::nullopt;
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, cuda_device) != cudaSuccess) return std::nullopt;
  NvmlDevice dev = nullptr;
  if (by_pci(bus_id, &dev) != kNvmlSuccess) return std::nullopt;
  unsigned int mhz = 0;
  unsigned int milliwatts = 0;
  unsigned int celsius = 0;
  if (clock(dev, kNvmlClockSm, &mhz) != kNvmlSuccess || power(dev, &milliwatts) != kNvmlSuccess ||
      temp(dev, kNvmlTemperatureGpu, &celsius) != kNvmlSuccess)
    return std::nullopt;
  return DeviceState{static_cast<double>(mhz), milliwatts * 1e-3, static_cast<double>(celsius)};
}

std::string Monitor::driver_version() const {
  const auto get = symbol<NvmlDriver>(lib_, "nvmlSystemGetDriverVersion");
  char buf[96] = {};
  if (get == nullptr || get(buf, sizeof buf) != kNvmlSuccess) return {};
  return buf;
}

std::string driver_version(const Monitor& monitor) {
  std::string v = monitor.driver_version();
  if (!v.empty()) return v;
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  <date>"
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return {};
  const auto pos = line.find("Kernel Module");
  if (pos == std::string::npos) return {};
  std::istringstream words(line.substr(pos + 13));
  words >> v;
  return v;
}

}  // namespace capsim::calibrate
