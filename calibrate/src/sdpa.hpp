// cuDNN fused scaled-dot-product attention (flash attention), forward and backward, built
// with the cuDNN 9 backend graph API (no cudnn-frontend): matmul, pointwise, reduction and
// reshape operations in the pattern that cuDNN's fused attention engines recognise.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "matmul.hpp"

namespace capsim::calibrate {

/// One attention call: Q [batch, heads, seq_q, head_dim]; K, V [batch, heads, seq_kv, head_dim].
struct SdpaShape {
  Dtype dtype = Dtype::bf16;  ///< bf16 or fp16 (I/O); accumulation and softmax in fp32
  bool backward = false;
  bool causal = false;        ///< top-left aligned mask (row >= column kept)
  bool stats = true;          ///< forward writes the softmax statistics (training); false for inference
  int64_t batch = 1;
  int64_t heads = 1;
  int64_t head_dim = 64;
  int64_t seq_q = 1;
  int64_t seq_kv = 1;
};

/// Device bytes the tensors of `s` take (cuDNN's workspace not included).
size_t sdpa_bytes(const SdpaShape& s);

/// A finalized cuDNN execution plan with its buffers, filled with values.
class Sdpa {
 public:
  /// Null with `why` when the graph, the heuristics, every engine config or the first checked
  /// run fails. `handle` must be bound to `stream`.
  static std::unique_ptr<Sdpa> create(cudnnHandle_t handle, const SdpaShape& s, cudaStream_t stream,
                                      std::string* why);
  ~Sdpa();
  Sdpa(const Sdpa&) = delete;
  Sdpa& operator=(const Sdpa&) = delete;

  /// Enqueues the attention call on the handle's stream; returns cuDNN's status.
  cudnnStatus_t launch(cudaStream_t stream) const;

 private:
  Sdpa() = default;
  cudnnHandle_t handle_ = nullptr;
  std::vector<cudnnBackendDescriptor_t> descs_;  ///< everything created, destroyed in reverse
  cudnnBackendDescriptor_t plan_ = nullptr;
  cudnnBackendDescriptor_t pack_ = nullptr;
  std::vector<void*> buffers_;                   ///< device allocations
  std::unique_ptr<float[]> scalars_;             ///< host values of the by-value tensors
  void* zero_ = nullptr;                         ///< dQ accumulator to clear per call (cuDNN < 9.6)
  size_t zero_bytes_ = 0;
  friend class SdpaBuilder;
};

}  // namespace capsim::calibrate
