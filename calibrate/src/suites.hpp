// The measurement suites: each measures its grid, skips what --resume already has, and appends
// one line per measurement to the raw file.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "matmul.hpp"
#include "monitor.hpp"
#include "raw_writer.hpp"
#include "timing.hpp"

namespace capsim::calibrate {

/// A GEMM shape asked for by --gemm-shapes ("dtype m n k" lines).
struct GemmRequest {
  Dtype dtype = Dtype::bf16;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

/// This process's place in an MPI job: capsim-calibrate built with MPI (CAPSIM_CALIBRATE_MPI)
/// and started by a launcher with more than one rank. The defaults describe a plain run.
struct World {
  int rank = 0;
  int size = 1;           ///< > 1: MPI mode (one rank per GPU)
  int local_rank = 0;     ///< among the ranks that share this node's memory
  int local_size = 1;
  std::vector<int> node;  ///< per world rank: the lowest world rank on its node (MPI mode only)
  int nodes = 1;          ///< distinct nodes
};

/// Starts MPI when built with it and a launcher's environment is present, and fills `w`; a
/// one-rank job finalizes at once and runs as a plain one. No-op without MPI. False (with a
/// note) when the launcher announced more ranks than MPI sees (a mismatched MPI library).
bool mpi_start(int* argc, char*** argv, World* w);
/// Ends MPI mode: finalizes on rc 0, else aborts the job with rc (a rank that failed alone
/// would leave its peers waiting in a collective). Returns rc.
int mpi_end(int rc, const World& w);

/// What every suite needs; owned by main.
struct Context {
  int device = 0;
  int device_count = 1;
  int compute_capability = 0;  ///< major*10 + minor
  bool quick = false;
  TimingConfig timing;
  RawFile* raw = nullptr;
  Cupti* cupti = nullptr;
  const Monitor* monitor = nullptr;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::vector<GemmRequest> extra_gemms;
  World world;
};

/// Adds time_s, p10_s, p90_s, repeats, cupti_kernel_s and the NVML reading, then appends the
/// line; false (with a note to stderr) when the file cannot be written.
bool record(Context& ctx, JsonLine line, const Stats& stats);

/// Device memory free now, less a 512 MiB margin for cuBLASLt, CUPTI and the CUDA context.
size_t usable_memory();

bool run_gemm(Context& ctx);
bool run_attention(Context& ctx);
bool run_memory(Context& ctx);
bool run_launch(Context& ctx);
bool run_nccl(Context& ctx);

}  // namespace capsim::calibrate
