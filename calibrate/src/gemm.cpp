// GEMM suite: cuBLASLt, heuristic's top algorithm, C[m,n] = A[m,k] B[k,n] with A transposed (TN).
#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>

#include "suites.hpp"

namespace capsim::calibrate {

size_t usable_memory() {
  size_t free_bytes = 0;
  size_t total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
  /// 512 MiB kept back: cuBLASLt and CUPTI allocate on their own, and a failed cudaMalloc mid-run
  /// would cost a measurement.
  constexpr size_t kMargin = 512ull << 20;
  return free_bytes > kMargin ? free_bytes - kMargin : 0;
}

bool record(Context& ctx, JsonLine line, const Stats& stats) {
  if (!std::isfinite(stats.median_s) || stats.median_s <= 0) {
    // A failed launch (or events that did not complete) gives no time; writing 0 or null
    // would poison the fit, so the measurement is left out and a --resume run retries it.
    const cudaError_t e = cudaGetLastError();
    std::fprintf(stderr, "capsim-calibrate: %s not recorded: measurement failed (%s)\n", line.str().c_str(),
                 cudaGetErrorString(e));
    return true;
  }
  line.add("time_s", stats.median_s).add("p10_s", stats.p10_s).add("p90_s", stats.p90_s).add("repeats", stats.repeats);
  if (stats.cupti_kernel_s) line.add("cupti_kernel_s", *stats.cupti_kernel_s);
  if (ctx.monitor != nullptr) {
    if (const auto state = ctx.monitor->read(ctx.device)) {
      line.add("sm_clock_mhz", state->sm_clock_mhz).add("power_w", state->power_w).add("temp_c", state->temp_c);
    }
  }
  std::string why;
  if (!ctx.raw->append(line, &why)) {
    std::fprintf(stderr, "capsim-calibrate: %s\n", why.c_str());
    return false;
  }
  return true;
}

namespace {

std::vector<GemmRequest> gemm_grid(const Context& ctx) {
  /// Powers of two 256..16384 (full) or 512, 2048, 8192 (quick): the log grid the fit
  /// interpolates over; 27 shapes per dtype keep --quick within its five minutes.
  const std::vector<int64_t> sizes = ctx.quick ? std::vector<int64_t>{512, 2048, 8192}
                                               : std::vector<int64_t>{256, 512, 1024, 2048, 4096, 8192, 16384};
  std::vector<GemmRequest> out;
  std::set<std::tuple<int, int64_t, int64_t, int64_t>> seen;
  const auto push = [&](const GemmRequest& r) {
    if (seen.insert({static_cast<int>(r.dtype), r.m, r.n, r.k}).second) out.push_back(r);
  };
  for (const GemmRequest& r : ctx.extra_gemms) push(r);
  for (const Dtype d : {Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int8})
    for (const int64_t m : sizes)
      for (const int64_t n : sizes)
        for (const int64_t k : sizes) push({d, m, n, k});
  return out;
}

}  // namespace

bool run_gemm(Context& ctx) {
  std::set<Dtype> warned;
  for (const GemmRequest& r : gemm_grid(ctx)) {
    if (ctx.compute_capability < min_compute_capability(r.dtype)) {
      if (warned.insert(r.dtype).second)
        std::fprintf(stderr, "capsim-calibrate: gemm %s skipped: needs compute capability %d.%d\n",
                     dtype_name(r.dtype), min_compute_capability(r.dtype) / 10, min_compute_capability(r.dtype) % 10);
      continue;
    }
    JsonLine line;
    line.add("kind", "gemm").add("dtype", dtype_name(r.dtype)).add("m", r.m).add("n", r.n).add("k", r.k);
    if (ctx.raw->has(line)) continue;
    const MatmulShape shape{r.dtype, true, false, r.m, r.n, r.k, 1};
    if (matmul_bytes(shape) > usable_memory()) {
      std::fprintf(stderr, "capsim-calibrate: gemm %s %lld %lld %lld skipped: %zu bytes do not fit\n",
                   dtype_name(r.dtype), static_cast<long long>(r.m), static_cast<long long>(r.n),
                   static_cast<long long>(r.k), matmul_bytes(shape));
      continue;
    }
    std::string why;
    const auto mm = Matmul::create(ctx.lt, shape, ctx.workspace, ctx.workspace_bytes, ctx.stream, &why);
    if (!mm) {
      std::fprintf(stderr, "capsim-calibrate: gemm %s %lld %lld %lld skipped: %s\n", dtype_name(r.dtype),
                   static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k), why.c_str());
      cudaGetLastError();
      continue;
    }
    const Stats s = time_launches([&](cudaStream_t st) { mm->run(st); }, ctx.stream, ctx.timing, ctx.cupti);
    line.add("flops", 2.0 * static_cast<double>(r.m) * static_cast<double>(r.n) * static_cast<double>(r.k));
    if (!record(ctx, line, s)) return false;
  }
  return true;
}

}  // namespace capsim::calibrate
