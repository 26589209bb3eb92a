#include "timing.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cupti.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace capsim::calibrate {

TimingConfig full_config() { return TimingConfig{}; }

TimingConfig quick_config() {
  TimingConfig c;
  c.warmup = 3;
  c.min_batches = 5;
  c.max_batches = 15;
  c.target_batch_s = 0.5e-3;
  c.max_inner = 50;
  return c;
}

namespace {

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double pos = p * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] * (1 - frac) + sorted[hi] * frac;
}

struct CuptiTotals {
  std::mutex mutex;
  double kernel_s = 0;
  int64_t kernels = 0;
  bool recording = false;
};

CuptiTotals& totals() {
  static CuptiTotals t;
  return t;
}

/// 8 MiB activity buffers: CUPTI's own samples use this size; a kernel record is ~200 bytes.
constexpr size_t kCuptiBufferBytes = 8u << 20;
/// CUPTI requires activity buffers aligned to 8 bytes.
constexpr size_t kCuptiAlign = 8;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kCuptiAlign, kCuptiBufferBytes));
  *size = *buffer != nullptr ? kCuptiBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  CUpti_Activity* record = nullptr;
  double sum = 0;
  int64_t count = 0;
  while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      sum += static_cast<double>(k->end - k->start) * 1e-9;
      ++count;
    }
  }
  std::free(buffer);
  auto& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.recording) {
    t.kernel_s += sum;
    t.kernels += count;
  }
}

__global__ void empty_kernel() {}

__global__ void fill_kernel(void* ptr, size_t count, int kind) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    // A cheap integer hash gives values that vary (zeros would let the GPU clock higher).
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    h ^= h >> 15;
    const float v = static_cast<float>(h & 0xffff) / 32768.0f - 1.0f;
    switch (kind) {
      case 0: static_cast<float*>(ptr)[i] = v; break;
      case 1: static_cast<__nv_bfloat16*>(ptr)[i] = __float2bfloat16(v); break;
      case 2: static_cast<__half*>(ptr)[i] = __float2half(v); break;
      case 3: static_cast<__nv_fp8_e4m3*>(ptr)[i] = __nv_fp8_e4m3(v); break;
      case 4: static_cast<int8_t*>(ptr)[i] = static_cast<int8_t>(v * 64.0f); break;
      default: static_cast<int32_t*>(ptr)[i] = 0; break;
    }
  }
}

/// 256 threads per block and at most 4096 blocks: enough to fill any current GPU.
constexpr int kFillThreads = 256;
constexpr size_t kFillMaxBlocks = 4096;

struct L2Flush {
  void* buffer = nullptr;
  size_t bytes = 0;
};

L2Flush& l2_flush_buffer() {
  static L2Flush f;
  if (f.buffer == nullptr) {
    int device = 0;
    int l2 = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device);
    f.bytes = 2 * static_cast<size_t>(std::max(l2, 1 << 20));  // 2x L2: evicts all of it
    if (cudaMalloc(&f.buffer, f.bytes) != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it, or the next timed batch reads as failed
      f.buffer = nullptr;
    }
  }
  return f;
}

void flush_l2(cudaStream_t stream) {
  static int calls = 0;
  const L2Flush& f = l2_flush_buffer();
  if (f.buffer != nullptr) cudaMemsetAsync(f.buffer, ++calls & 0xff, f.bytes, stream);
}

}  // namespace

bool Cupti::init() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "capsim-calibrate: CUPTI unavailable; timing with CUDA events only\n");
    return ok_ = false;
  }
  return ok_ = true;
}

void Cupti::begin() {
  if (!ok_) return;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    auto& t = totals();
    std::lock_guard<std::mutex> lock(t.mutex);
    t.kernel_s = 0;
    t.kernels = 0;
    t.recording = true;
  }
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "capsim-calibrate: CUPTI kernel activity unavailable; timing with CUDA events only\n");
    ok_ = false;
  }
}

double Cupti::end(int64_t* kernels) {
  *kernels = 0;
  if (!ok_) return 0;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  auto& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.recording = false;
  *kernels = t.kernels;
  return t.kernel_s;
}

Stats sample_until_stable(const std::function<double()>& one_sample, const TimingConfig& cfg) {
  std::vector<double> samples;
  Stats s;
  for (int b = 0; b < cfg.max_batches; ++b) {
    samples.push_back(one_sample());
    if (static_cast<int>(samples.size()) < cfg.min_batches) continue;
    std::vector<double> sorted = samples;
    std::sort(sorted.begin(), sorted.end());
    s.median_s = percentile(sorted, 0.5);
    s.p10_s = percentile(sorted, 0.1);
    s.p90_s = percentile(sorted, 0.9);
    if (s.median_s > 0 && (s.p90_s - s.p10_s) / s.median_s < cfg.max_spread) break;
  }
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  s.median_s = percentile(sorted, 0.5);
  s.p10_s = percentile(sorted, 0.1);
  s.p90_s = percentile(sorted, 0.9);
  s.repeats = static_cast<int>(samples.size());
  return s;
}

Stats time_launches(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream, const TimingConfig& cfg,
                    Cupti* cupti) {
  cudaGetLastError();  // a stale, non-sticky error from earlier set-up is not this measurement's
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  bool failed = false;  ///< a launch or the events failed: the numbers are not to be recorded
  const auto timed_batch = [&](int inner) {
    if (cfg.l2_flush) flush_l2(stream);
    cudaEventRecord(start, stream);
    for (int i = 0; i < inner; ++i) launch(stream);
    cudaEventRecord(stop, stream);
    float ms = 0;
    // Event status, not cudaGetLastError: libraries may leave a harmless runtime error behind,
    // while a faulting kernel makes the (sticky) error show up here.
    if (cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess)
      failed = true;
    return static_cast<double>(ms) * 1e-3 / inner;
  };

  for (int i = 0; i < cfg.warmup; ++i) {
    if (cfg.l2_flush) flush_l2(stream);
    launch(stream);
  }
  cudaStreamSynchronize(stream);

  int inner = 1;
  if (cfg.fixed_inner > 0) {
    inner = cfg.fixed_inner;
  } else if (!cfg.l2_flush) {
    const double one = timed_batch(1);
    inner = one > 0 ? static_cast<int>(std::clamp(cfg.target_batch_s / one, 1.0, static_cast<double>(cfg.max_inner)))
                    : cfg.max_inner;
  }
  Stats s = sample_until_stable([&] { return timed_batch(inner); }, cfg);
  if (failed) {
    s.median_s = s.p10_s = s.p90_s = std::nan("");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return s;
  }

  if (cupti != nullptr && cupti->ok()) {
    /// Up to 20 operations under CUPTI: enough to average out one-off kernels, cheap when slow.
    const int ops = std::max(1, std::min(inner, 20));
    cupti->begin();
    for (int i = 0; i < ops; ++i) {
      if (cfg.l2_flush) flush_l2(stream);
      launch(stream);
    }
    cudaStreamSynchronize(stream);
    int64_t kernels = 0;
    const double sum = cupti->end(&kernels);
    if (kernels > 0) s.cupti_kernel_s = sum / ops;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return s;
}

void launch_empty_kernel(cudaStream_t stream) { empty_kernel<<<1, 1, 0, stream>>>(); }

void fill_values(void* ptr, size_t count, int kind, cudaStream_t stream) {
  if (count == 0) return;
  const size_t blocks = std::min(kFillMaxBlocks, (count + kFillThreads - 1) / kFillThreads);
  fill_kernel<<<static_cast<unsigned>(blocks), kFillThreads, 0, stream>>>(ptr, count, kind);
}

}  // namespace capsim::calibrate
