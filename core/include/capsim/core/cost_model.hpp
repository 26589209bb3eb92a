#pragma once
/// The interface between the engines (core) and hardware models (hwmodels): seconds for
/// one operator or one collective on one GPU of a given system.

#include <cstdint>
#include <string>
#include <vector>

#include "capsim/core/model.hpp"
#include "capsim/core/units.hpp"

namespace capsim {

enum class CollectiveKind { all_reduce, all_gather, reduce_scatter, all_to_all };

std::string_view to_string(CollectiveKind k);

/// A communication group as it lies on the cluster: `size` ranks, `per_node` of them in
/// each node they span (so size/per_node nodes).
struct Group {
  int64_t size = 1;
  int64_t per_node = 1;
  /// NCCL may run all-reduces over this group with NVLink SHARP where the GPU preset measured
  /// it (NCCL_NVLS_ENABLE left at NCCL's default); an engine that turns NVLS off clears it.
  bool nvls = true;
  int64_t nodes() const { return (size + per_node - 1) / per_node; }
  bool operator==(const Group&) const = default;
};

/// Which attention implementation runs.
enum class AttentionKernel {
  fused,    ///< the architecture's best fused kernel: FlashAttention-3 on Hopper, FA2 on Ampere
  /// Transformer Engine's FusedAttention: cuDNN's fused attention, which TE selects on sm90
  /// (with context parallelism too); the preset's cuDNN table where it has one, else `fused`.
  cudnn,
  flash2,   ///< FlashAttention-2 (PyTorch SDPA's flash backend, flash-attn 2.x)
  flash1,   ///< FlashAttention (v1): flash-attn 1.x, what 2022-23 PyTorch stacks ran
  /// FlashAttention's Triton kernel (flash_attn_triton.py), MPT / llm-foundry's attn_impl
  /// "triton"; the preset's FlashAttention-2 table where it has none of its own.
  flash_triton,
  unfused,  ///< batched GEMMs for QK^T and PV around a fused softmax (Megatron-LM before flash)
};

std::string_view to_string(AttentionKernel k);

/// Attention call on one GPU: `batch` sequences of `q_len` queries over `kv_len` keys.
struct AttentionShape {
  int64_t batch = 1;
  int64_t heads = 1;     ///< query heads on this GPU
  int64_t kv_heads = 1;  ///< key/value heads on this GPU
  int64_t q_len = 1;
  int64_t kv_len = 1;
  int64_t qk_dim = 128;
  int64_t v_dim = 128;
  bool causal = true;
  AttentionKernel kernel = AttentionKernel::fused;
};

/// Costs of operators on one GPU of the system a CostModel was built for.
class CostModel {
 public:
  virtual ~CostModel() = default;
  /// C[m x n] = A[m x k] B[k x n], `batch` independent such products (grouped GEMM).
  virtual Seconds gemm(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch = 1) const = 0;
  /// Tensor-core time of the same GEMM alone: no memory side, no input casts (weights
  /// already quantized, as in serving).
  virtual Seconds gemm_compute(int64_t m, int64_t n, int64_t k, DType dtype, int64_t batch = 1) const = 0;
  /// FlashAttention-style fused attention, forward or backward.
  virtual Seconds attention(const AttentionShape& a, bool backward) const = 0;
  /// A kernel limited by HBM bandwidth moving `bytes`.
  virtual Seconds memory_bound(Bytes bytes) const = 0;
  /// A collective over `group` where `bytes` is the full (unsharded) buffer size: the
  /// all-reduce buffer, the all-gather output, the reduce-scatter input, the all-to-all
  /// send buffer of one rank.
  virtual Seconds collective(CollectiveKind kind, Bytes bytes, const Group& group) const = 0;
  /// Point-to-point transfer between two GPUs, inside a node or across nodes.
  virtual Seconds p2p(Bytes bytes, bool cross_node) const = 0;
  /// Where each efficiency used came from: name -> source.
  virtual std::vector<std::pair<std::string, std::string>> provenance() const = 0;
};

}  // namespace capsim
