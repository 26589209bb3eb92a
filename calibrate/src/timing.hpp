// Timing of GPU operations: warm-up, back-to-back launches between CUDA events, batches
// repeated until their spread settles; optional kernel time from the CUPTI activity API.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <optional>

namespace capsim::calibrate {

/// How hard to try; `quick_config` and `full_config` give the two presets.
struct TimingConfig {
  int warmup = 10;                ///< untimed launches first (clocks up, caches and heuristics warm)
  int min_batches = 10;           ///< timed batches at least
  int max_batches = 50;           ///< timed batches at most, stable or not
  double target_batch_s = 2e-3;   ///< a batch lasts about this long (event resolution is ~0.5 us)
  int max_inner = 200;            ///< launches per batch at most
  int fixed_inner = 0;            ///< launches per batch when > 0 (no estimate)
  double max_spread = 0.05;       ///< stop when (p90 - p10) / median is below this
  bool l2_flush = false;          ///< write 2x L2 before each launch; then one launch per batch
};

/// Full runs: 10 warm-ups, 10..50 batches of ~2 ms.
TimingConfig full_config();
/// --quick: 3 warm-ups, 5..15 batches of ~0.5 ms, so the whole run stays under 5 minutes.
TimingConfig quick_config();

/// Per-operation time in seconds over the timed batches.
struct Stats {
  double median_s = 0;
  double p10_s = 0;
  double p90_s = 0;
  int repeats = 0;                        ///< timed batches (each the mean of its launches)
  std::optional<double> cupti_kernel_s;   ///< summed kernel time of one operation, from CUPTI
};

/// Records kernel durations through the CUPTI activity API (CONCURRENT_KERNEL kind).
class Cupti {
 public:
  /// Registers the buffer callbacks; false (with a note to stderr) when CUPTI cannot be used.
  bool init();
  bool ok() const { return ok_; }
  /// Discards older records and starts recording kernels.
  void begin();
  /// Stops recording; returns the summed kernel duration in seconds and the kernel count.
  double end(int64_t* kernels);

 private:
  bool ok_ = false;
};

/// Median / p10 / p90 of samples taken by `one_sample` (seconds each) until stable.
Stats sample_until_stable(const std::function<double()>& one_sample, const TimingConfig& cfg);

/// Times `launch` (one operation, enqueued on `stream`); CUPTI kernel time when `cupti` is given.
Stats time_launches(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream, const TimingConfig& cfg,
                    Cupti* cupti);

/// Enqueues an empty kernel (launch overhead measurement).
void launch_empty_kernel(cudaStream_t stream);

/// Fills `count` elements with deterministic values in [-1, 1]; `kind`: 0 fp32, 1 bf16, 2 fp16,
/// 3 fp8 e4m3, 4 int8 (values in [-64, 64]), 5 int32 zero.
void fill_values(void* ptr, size_t count, int kind, cudaStream_t stream);

}  // namespace capsim::calibrate
