#include "matmul.hpp"

#include "timing.hpp"

namespace capsim::calibrate {
namespace {

struct TypeInfo {
  cudaDataType_t ab;
  cudaDataType_t d;
  cublasComputeType_t compute;
  cudaDataType_t scale;
  size_t ab_bytes;
  size_t d_bytes;
  int fill_kind;  ///< fill_values kind for A and B
};

TypeInfo type_info(Dtype d) {
  switch (d) {
    case Dtype::bf16: return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, 2, 2, 1};
    case Dtype::fp16: return {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F, 2, 2, 2};
    // fp8: bf16 output as in Transformer Engine's linear layers.
    case Dtype::fp8: return {CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, 1, 2, 3};
    case Dtype::int8: return {CUDA_R_8I, CUDA_R_32I, CUBLAS_COMPUTE_32I, CUDA_R_32I, 1, 4, 4};
  }
  return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, 2, 2, 1};
}

size_t a_elems(const MatmulShape& s) { return static_cast<size_t>(s.m * s.k * s.batch); }
size_t b_elems(const MatmulShape& s) { return static_cast<size_t>(s.k * s.n * s.batch); }
size_t d_elems(const MatmulShape& s) { return static_cast<size_t>(s.m * s.n * s.batch); }

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t batch) {
  cublasLtMatrixLayout_t l = nullptr;
  if (cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), rows) !=
      CUBLAS_STATUS_SUCCESS)
    return nullptr;
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    const int64_t stride = rows * cols;
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
  }
  return l;
}

}  // namespace

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
    case Dtype::fp8: return "fp8";
    case Dtype::int8: return "int8";
  }
  return "bf16";
}

bool parse_dtype(const std::string& s, Dtype* out) {
  for (const Dtype d : {Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int8}) {
    if (s == dtype_name(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

int min_compute_capability(Dtype d) {
  // fp8 tensor cores arrived with Ada (8.9) and Hopper (9.0); bf16 with Ampere (8.0);
  // fp16 and int8 tensor cores with Volta (7.0) and Turing (7.5).
  switch (d) {
    case Dtype::fp8: return 89;
    case Dtype::bf16: return 80;
    case Dtype::int8: return 75;
    case Dtype::fp16: return 70;
  }
  return 80;
}

size_t matmul_bytes(const MatmulShape& s) {
  const TypeInfo t = type_info(s.dtype);
  return (a_elems(s) + b_elems(s)) * t.ab_bytes + d_elems(s) * t.d_bytes;
}

std::unique_ptr<Matmul> Matmul::create(cublasLtHandle_t handle, const MatmulShape& s, void* workspace,
                                       size_t workspace_bytes, cudaStream_t stream, std::string* why) {
  const TypeInfo t = type_info(s.dtype);
  std::unique_ptr<Matmul> mm(new Matmul());
  mm->shape_ = s;
  mm->handle_ = handle;
  mm->workspace_ = workspace;
  mm->workspace_bytes_ = workspace_bytes;

  if (cublasLtMatmulDescCreate(&mm->op_, t.compute, t.scale) != CUBLAS_STATUS_SUCCESS) {
    *why = "cublasLtMatmulDescCreate failed";
    return nullptr;
  }
  const cublasOperation_t ta = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(mm->op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(mm->op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);

  mm->a_desc_ = make_layout(t.ab, s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k, s.batch);
  mm->b_desc_ = make_layout(t.ab, s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n, s.batch);
  mm->d_desc_ = make_layout(t.d, s.m, s.n, s.batch);
  if (mm->a_desc_ == nullptr || mm->b_desc_ == nullptr || mm->d_desc_ == nullptr) {
    *why = "cublasLtMatrixLayoutCreate failed";
    return nullptr;
  }

  if (cudaMalloc(&mm->a_, a_elems(s) * t.ab_bytes) != cudaSuccess ||
      cudaMalloc(&mm->b_, b_elems(s) * t.ab_bytes) != cudaSuccess ||
      cudaMalloc(&mm->d_, d_elems(s) * t.d_bytes) != cudaSuccess) {
    cudaGetLastError();
    *why = "out of device memory";
    return nullptr;
  }
  fill_values(mm->a_, a_elems(s), t.fill_kind, stream);
  fill_values(mm->b_, b_elems(s), t.fill_kind, stream);

  if (s.dtype == Dtype::fp8) {
    // Per-tensor scales of 1.0, as Transformer Engine passes its amax-derived scales.
    if (cudaMalloc(&mm->scales_, 2 * sizeof(float)) != cudaSuccess) {
      cudaGetLastError();
      *why = "out of device memory";
      return nullptr;
    }
    const float ones[2] = {1.0f, 1.0f};
    cudaMemcpy(mm->scales_, ones, sizeof ones, cudaMemcpyHostToDevice);
    const float* a_scale = static_cast<const float*>(mm->scales_);
    const float* b_scale = a_scale + 1;
    cublasLtMatmulDescSetAttribute(mm->op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale);
    cublasLtMatmulDescSetAttribute(mm->op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale);
  }

  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                       sizeof workspace_bytes);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, mm->op_, mm->a_desc_, mm->b_desc_, mm->d_desc_,
                                                           mm->d_desc_, pref, 1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || returned == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    *why = "cuBLASLt heuristic offers no algorithm";
    return nullptr;
  }
  mm->algo_ = result.algo;
  // One checked run: a matmul that cuBLASLt refuses at launch (or that faults) would otherwise
  // be timed as an empty stream and recorded as a near-zero time.
  if (const cublasStatus_t rs = mm->launch(stream); rs != CUBLAS_STATUS_SUCCESS) {
    cudaStreamSynchronize(stream);
    *why = std::string("cublasLtMatmul failed: ") + cublasLtGetStatusString(rs);
    return nullptr;
  }
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    *why = std::string("matmul failed on the GPU: ") + cudaGetErrorString(e);
    return nullptr;
  }
  return mm;
}

Matmul::~Matmul() {
  if (op_ != nullptr) cublasLtMatmulDescDestroy(op_);
  if (a_desc_ != nullptr) cublasLtMatrixLayoutDestroy(a_desc_);
  if (b_desc_ != nullptr) cublasLtMatrixLayoutDestroy(b_desc_);
  if (d_desc_ != nullptr) cublasLtMatrixLayoutDestroy(d_desc_);
  cudaFree(a_);
  cudaFree(b_);
  cudaFree(d_);
  cudaFree(scales_);
}

void Matmul::run(cudaStream_t stream) const { launch(stream); }

cublasStatus_t Matmul::launch(cudaStream_t stream) const {
  const float alpha_f = 1.0f;
  const float beta_f = 0.0f;
  const int32_t alpha_i = 1;
  const int32_t beta_i = 0;
  const bool integer = shape_.dtype == Dtype::int8;
  const void* alpha = integer ? static_cast<const void*>(&alpha_i) : static_cast<const void*>(&alpha_f);
  const void* beta = integer ? static_cast<const void*>(&beta_i) : static_cast<const void*>(&beta_f);
  return cublasLtMatmul(handle_, op_, alpha, a_, a_desc_, b_, b_desc_, beta, d_, d_desc_, d_, d_desc_, &algo_,
                        workspace_, workspace_bytes_, stream);
}

}  // namespace capsim::calibrate
