// Memory bandwidth (copy, triad) and kernel launch overhead.
#include <cstdio>

#include "suites.hpp"

namespace capsim::calibrate {
namespace {

__global__ void copy_kernel(float4* __restrict__ dst, const float4* __restrict__ src, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void triad_kernel(float4* __restrict__ a, const float4* __restrict__ b, const float4* __restrict__ c,
                             float s, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 x = b[i];
    const float4 y = c[i];
    a[i] = make_float4(x.x + s * y.x, x.y + s * y.y, x.z + s * y.z, x.w + s * y.w);
  }
}

/// 256 threads per block, 8 blocks per SM of grid-stride loop: enough loads in flight to
/// saturate HBM (STREAM-like kernels on A100/H100 peak there).
constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;

}  // namespace

bool run_memory(Context& ctx) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx.device);
  const unsigned blocks = static_cast<unsigned>(std::max(1, sms * kBlocksPerSm));
  /// Array sizes 1 MiB..4 GiB doubling (quick: every 4x): from L2-resident to far past it.
  const int step = ctx.quick ? 2 : 1;
  for (int log2 = 20; log2 <= 32; log2 += step) {
    const size_t array_bytes = size_t{1} << log2;
    const size_t n4 = array_bytes / sizeof(float4);
    for (const bool triad : {false, true}) {
      const int arrays = triad ? 3 : 2;
      JsonLine line;
      line.add("kind", "memory")
          .add("op", triad ? "triad" : "copy")
          .add("bytes", static_cast<int64_t>(array_bytes) * arrays);
      if (ctx.raw->has(line)) continue;
      if (array_bytes * static_cast<size_t>(arrays) > usable_memory()) continue;
      float4* buf[3] = {nullptr, nullptr, nullptr};
      bool ok = true;
      for (int i = 0; i < arrays; ++i) ok = ok && cudaMalloc(&buf[i], array_bytes) == cudaSuccess;
      if (!ok) {
        cudaGetLastError();
        for (float4* p : buf) cudaFree(p);
        continue;
      }
      for (int i = 0; i < arrays; ++i) fill_values(buf[i], array_bytes / sizeof(float), 0, ctx.stream);
      const auto launch = [&](cudaStream_t st) {
        if (triad) {
          triad_kernel<<<blocks, kThreads, 0, st>>>(buf[0], buf[1], buf[2], 3.0f, n4);
        } else {
          copy_kernel<<<blocks, kThreads, 0, st>>>(buf[0], buf[1], n4);
        }
      };
      const Stats s = time_launches(launch, ctx.stream, ctx.timing, nullptr);
      for (float4* p : buf) cudaFree(p);
      if (!record(ctx, line, s)) return false;
    }
  }
  return true;
}

bool run_launch(Context& ctx) {
  JsonLine line;
  line.add("kind", "launch");
  if (ctx.raw->has(line)) return true;
  TimingConfig cfg = ctx.timing;
  /// 1000 empty launches per batch: the queue stays full, so the batch time is the launch rate,
  /// not one launch's latency; event overhead spreads to under 1 ns per launch.
  cfg.fixed_inner = 1000;
  cfg.l2_flush = false;
  const Stats s = time_launches([](cudaStream_t st) { launch_empty_kernel(st); }, ctx.stream, cfg, nullptr);
  return record(ctx, line, s);
}

}  // namespace capsim::calibrate
