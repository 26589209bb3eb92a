// One cuBLASLt matmul (optionally strided-batched) with its own buffers: the unit that the
// GEMM and attention suites time.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

namespace capsim::calibrate {

/// Element types of the GEMM suite (docs/calibration.md `dtype`).
enum class Dtype { bf16, fp16, fp8, int8 };

const char* dtype_name(Dtype d);
/// Parses "bf16", "fp16", "fp8", "int8"; false when unknown.
bool parse_dtype(const std::string& s, Dtype* out);
/// Lowest compute capability (major*10+minor) with tensor-core support for `d` in cuBLASLt.
int min_compute_capability(Dtype d);

/// Column-major D[m,n] = op(A) op(B), as cuBLASLt sees it; `batch` strided matrices of each.
struct MatmulShape {
  Dtype dtype = Dtype::bf16;
  bool trans_a = true;   ///< A stored k x m (TN, what nn.Linear gives; required for fp8 and int8)
  bool trans_b = false;  ///< B stored k x n
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t batch = 1;
};

/// Device bytes for A, B and D of `s` (workspace not included).
size_t matmul_bytes(const MatmulShape& s);

/// A planned matmul: descriptors, heuristic's top algorithm, buffers filled with values.
class Matmul {
 public:
  /// Null with `why` when cuBLASLt offers no algorithm or memory runs out.
  static std::unique_ptr<Matmul> create(cublasLtHandle_t handle, const MatmulShape& s, void* workspace,
                                        size_t workspace_bytes, cudaStream_t stream, std::string* why);
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  /// Enqueues the matmul on `stream`.
  void run(cudaStream_t stream) const;
  /// Enqueues the matmul on `stream` and returns cuBLASLt's status.
  cublasStatus_t launch(cudaStream_t stream) const;

 private:
  Matmul() = default;
  MatmulShape shape_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_desc_ = nullptr;
  cublasLtMatrixLayout_t b_desc_ = nullptr;
  cublasLtMatrixLayout_t d_desc_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  void* a_ = nullptr;
  void* b_ = nullptr;
  void* d_ = nullptr;
  void* scales_ = nullptr;  ///< two fp32 1.0 scales for fp8 A and B
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace capsim::calibrate
