#pragma once
/// Lowering: one decoder layer (and the model's ends) into operators with FLOPs, shapes
/// and the bytes each keeps for backward. Memory and time both derive from this list.
/// Quantities are per token of one sequence, at full (unsharded) width; consumers apply
/// tensor/sequence/context/expert parallel sharding.

#include <cstdint>
#include <string>
#include <vector>

#include "capsim/core/model.hpp"
#include "capsim/core/scenario.hpp"

namespace capsim {

enum class OpKind { gemm, attention, norm, elementwise, router, permute, embedding, logits };

/// How a tensor is split over the tensor-parallel group.
enum class Shard {
  sequence,  ///< full width per token: replicated over TP, split over TP with SP
  tensor,    ///< split over TP (heads or FFN columns)
  expert,    ///< routed-expert tensor, split over expert tensor parallel (etp)
};

/// A tensor an operator keeps for its backward pass.
struct Saved {
  double bytes_per_token = 0;
  Shard shard = Shard::sequence;
  bool selective = false;  ///< recomputed (so not kept) under selective recompute
  /// RecomputeModule whose selective recompute discards it (0: kept); `selective` stands
  /// for core attention.
  unsigned module = 0;
};

/// How a GEMM's weight is split over tensor parallel ranks (Megatron-LM terms).
enum class GemmSplit { none, column, row };

struct Op {
  std::string name;
  OpKind kind = OpKind::gemm;
  // GEMM: each token multiplies [1 x k] by [k x n], `per_token` times (top-k experts).
  int64_t n = 0, k = 0;
  double per_token = 1.0;
  GemmSplit split = GemmSplit::none;
  bool expert = false;  ///< routed expert weight (sharded over ep, etp)
  /// Frozen weight (LoRA's base): the backward computes the input gradient only, and the
  /// optimizer never sees it.
  bool frozen = false;
  /// LoRA adapters on this GEMM's weight (Hu et al. 2021, Sec. 4.1: h = W0 x + B A x):
  /// A maps the k inputs to `adapter_rank` (the ranks of every adapter reading this input,
  /// summed), B maps them to `adapter_out` of the n outputs; 0 = none.
  int64_t adapter_rank = 0, adapter_out = 0;
  /// RecomputeModule whose selective recompute reruns this operator's forward (0: none).
  unsigned rerun = 0;
  /// Part of a MoE layer's expert block, from the token dispatch through the shared
  /// experts: what Megatron-Core's batch-level overlap runs against the all-to-all
  /// (LayerCost::moe_block_fwd).
  bool moe_block = false;
  // Attention: q heads, kv heads, head widths; keys attended span the sequence (or, packed,
  // its document: LoweringOptions::attention_span).
  int64_t heads = 0, kv_heads = 0, qk_dim = 0, v_dim = 0;
  bool causal = true;
  /// Forward FLOPs per token at full width (attention: over the lowering's attention_span, causal).
  double flops_per_token = 0;
  /// Bytes read and written per token in the forward pass (memory-bound kernels).
  double bytes_per_token = 0;
  /// Bytes per token of its backward; negative: twice the forward's.
  double bwd_bytes_per_token = -1;
  /// A fused GEMM's separate matrix multiplies in the reference PyTorch model, by output
  /// width in call order (torchtitan's Llama: wq, wk, wv; w1 before w3); empty: one of
  /// width n. Op-level checkpointing counts them one by one (op_sac_saved_share).
  std::vector<int64_t> calls;
  /// How that traffic splits over ranks (sequence: over TP only with SP).
  Shard work = Shard::sequence;
  std::vector<Saved> saved;
};

/// How attention keeps its state for backward.
enum class AttentionImpl {
  flash,    ///< FlashAttention: keeps q, k, v and the log-sum-exp, no s x s scores
  unfused,  ///< keeps softmax output, dropout mask and dropout output (s x s per head)
};

/// Bytes per logit the backward of a compiled cross entropy holds beside the 16-bit logits
/// it kept: 6, an fp32 gradient and its 16-bit cast (apple/ml-cross-entropy README @
/// 18e76ad, torch.compile on A100: 16,000 MiB forward and backward against 4,000 MiB
/// forward for 8,192 x 256,000 logits).
inline constexpr double kCompiledLossBwdBufferBytes = 6.0;

struct LoweringOptions {
  /// Keys a causal attention problem spans: the sequence, or the documents a packed
  /// sequence holds (attention_span).
  int64_t attention_span = 2048;
  double act_bytes = 2;         ///< activation element size (bf16/fp16)
  double gemm_input_bytes = 2;  ///< saved GEMM inputs (1 with fp8 training: cast copies)
  /// Saved input of a routed expert's activation function (SwiGLU): 16-bit, or FP8 with an
  /// fp32 scale per 128 values under blockwise FP8 (DeepSeek-V3 report Sec. 3.3.2).
  double moe_act_input_bytes = 2;
  AttentionImpl attention = AttentionImpl::flash;
  /// Routing probabilities applied inside the routed experts' fused activation
  /// (Megatron-Core TEGroupedMLP: weighted_bias_swiglu_impl / weighted_squared_relu_impl on
  /// permuted_probs), so the combine only sums the returned expert outputs and keeps none
  /// of them; otherwise the combine weights them and keeps them for the probabilities'
  /// gradient.
  bool probs_in_activation = false;
  /// Passes over the routed tokens' top-k copies in each of the dispatch and the combine.
  /// Megatron-Core's all-to-all dispatcher moves them twice each way when an expert-parallel
  /// rank holds more than one expert: "permutation 1" groups a rank's tokens by destination
  /// before the all-to-all, and sort_chunks_by_idxs then regroups what arrived from the EP
  /// ranks by local expert for the grouped GEMM ("unpermutation 2" undoes it before the
  /// combine's all-to-all, then "unpermutation 1"; a drop-and-pad dispatch makes the same
  /// copy with a transpose and contiguous()): NVIDIA/Megatron-LM
  /// megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher
  /// dispatch_postprocess / combine_preprocess. DeepEP (DualPipe, DeepSeek-V3 report Sec.
  /// 3.2.2) hands each rank its tokens already laid out for its experts: one pass.
  int moe_permute_passes = 1;
  bool dropout = false;         ///< training with dropout keeps 1-byte masks
  bool frozen_base = false;     ///< LoRA: every base weight frozen
  /// A frozen GEMM keeps no input for backward: only a weight gradient reads it
  /// (Transformer Engine's Linear: backward_needs_input = is_grad_enabled and
  /// weight.requires_grad; PyTorch's mm saves its first operand only when the second
  /// requires grad). A 4-bit base is the exception: bitsandbytes' MatMul4Bit keeps its input
  /// whenever any input needs a gradient (bitsandbytes 0.41.1, autograd/_functions.py,
  /// MatMul4Bit.forward: ctx.tensors = (A, B)).
  bool base_keeps_inputs = false;
  /// The gated activation as PyTorch eager code runs it, silu(x_gate) * x_up: SiLU keeps
  /// its input and the product keeps both of its operands (3 tensors of the inner width),
  /// where a fused SwiGLU (Megatron-LM bias_swiglu_impl) keeps only its input (2). Set for
  /// PyTorch stacks training adapters, whose frozen down projection no longer keeps the
  /// product.
  bool eager_glu = false;
  /// Norms, rotary embedding and the gated activation as PyTorch eager code runs them, one
  /// kernel per operator with fp32 intermediates (torchtitan's default norm_type "rmsnorm",
  /// torchtitan/models/norms.py RMSNorm: x.float(), pow, mean, x * rsqrt, type_as, * weight;
  /// apply_rotary_emb: q/k .float(), complex multiply, type_as; FeedForward:
  /// silu(w1(x)) * w3(x)); TrainingPlan::eager_elementwise. Traffic only: what is kept for
  /// backward is unchanged.
  bool eager_elementwise = false;
  /// The loss as the PyTorch stacks compute it, one kernel per operator:
  /// F.cross_entropy on the logits cast to fp32 (torchtitan 9dec370 train.py loss_fn, left
  /// uncompiled there even with --training.compile: "compiling loss function causes CUDA
  /// errors"). Per logit, forward: the cast (2 + 4 bytes), then log_softmax, whose CUDA
  /// kernel for rows wider than a block reads its input three times (max, sum of
  /// exponentials, output) and writes once (16); backward: nll_loss's zeroed gradient (4),
  /// log_softmax's backward reading the gradient twice and the output once and writing once
  /// (16), the cast back (4 + 2). 22 bytes forward and 26 backward, where a fused
  /// vocab-parallel cross entropy reads the 16-bit logits and writes the fp32 softmax it
  /// keeps (6) and turns it into the gradient in place (12).
  bool eager_loss = false;
  /// The same loss compiled (TrainingPlan::compiled_loss): Inductor fuses the cast,
  /// log-softmax and loss into reductions over the 16-bit logits, which it keeps for the
  /// backward instead of an fp32 log-softmax; the backward writes the 16-bit gradient.
  bool compiled_loss = false;
  bool rmsnorm = true;  ///< the model's norms are RMSNorm (eager code); LayerNorm is one kernel
  int64_t lora_rank = 0;        ///< LoRA rank per adapter
  /// Dropout on the adapters' input: PyTorch's fused dropout keeps a 1-byte mask per
  /// element (native_dropout), and the adapter's A keeps the dropped-out copy, a tensor of
  /// its own beside the input the base GEMM reads.
  double lora_dropout = 0;
  /// Attention as LitGPT's CausalSelfAttention feeds it (lit_gpt/model.py, commit 8641822):
  /// one fused qkv Linear whose output is viewed per head. With as many key/value heads as
  /// query heads, V reaches attention as a view of that output, so what attention keeps for
  /// backward holds the whole fused output alive beside the rotated copies of q and k; with
  /// grouped heads, K and V are expanded to the query heads and copied
  /// (k.expand(...).reshape(...)), and attention keeps them at the query heads' width.
  bool qkv_views = false;
  /// LitGPT's LoRAQKVLinear with adapters on only some of q, k, v (lit_gpt/lora.py,
  /// zero_pad): the adapters' output is scattered into the fused width by index_copy, whose
  /// backward keeps its source (PyTorch derivatives.yaml, index_copy: source gradient
  /// grad.index_select(dim, index).expand_as(source)).
  bool qkv_adapter_pad = false;
  /// Adapted HF projections: bits of q, k, v, o, gate, up, down (in that order).
  unsigned lora_targets = 0;
};

/// Options as a training plan implies them (fp8 keeps fp8 GEMM inputs; dropout when the
/// model's config enables it).
LoweringOptions lowering_options(const ModelSpec& m, const TrainingPlan& t);

/// The operators of decoder layer `layer`, in forward order.
std::vector<Op> lower_layer(const ModelSpec& m, int64_t layer, const LoweringOptions& o);

/// Input embedding (lookup, dropout) operators; they live on the first pipeline stage.
std::vector<Op> lower_embedding(const ModelSpec& m, const LoweringOptions& o);

/// Final norm, output head GEMM and cross-entropy; they live on the last pipeline stage.
std::vector<Op> lower_head(const ModelSpec& m, const LoweringOptions& o);

/// One multi-token prediction module without its output head (DeepSeek-V3 report Sec. 2.2,
/// Eq. 21-22): RMSNorms of the previous depth's hidden state and of the shifted tokens'
/// embeddings, the 2h -> h projection of their concatenation (eh_proj), then one transformer
/// block of the kind of the model's last layer (DeepSeek-V3's MTP layer 61 is an MoE
/// layer). It runs on the last pipeline stage, followed by the shared head (lower_head).
std::vector<Op> lower_mtp(const ModelSpec& m, const LoweringOptions& o);

/// Parameters of one multi-token prediction module beyond its transformer block: the two
/// RMSNorms, eh_proj (2h x h) and the shared head's own final norm.
int64_t mtp_extra_params(const ModelSpec& m);

/// The parallel context that turns per-token full-width quantities into per-GPU ones.
struct ShardContext {
  int64_t micro_batch = 1;
  int64_t seq_len = 2048;
  int64_t tp = 1, cp = 1, etp = 1;
  bool sp = false;
  Recompute recompute = Recompute::none;
  /// Selective recompute as PyTorch's op-level checkpointing (torchtitan's policy) rather
  /// than Megatron-LM's core-attention recompute.
  bool op_sac = false;
  unsigned recompute_modules = kRecomputeCoreAttn;  ///< TrainingPlan::recompute_modules
};

/// Bytes one layer keeps for backward on one GPU for one microbatch, as its operators
/// state them. Full recompute keeps only the layer input (Korthikanti et al. 2022, Sec. 4.2).
/// Op-level selective checkpointing keeps the layer input, the attention output with its
/// log-sum-exp, and the outputs of the odd-numbered matrix multiplies (op_sac_saved_share).
double layer_activation_bytes(const std::vector<Op>& ops, const LoweringOptions& o, const ModelSpec& m,
                              const ShardContext& c);

/// torchtitan's op-level selective checkpointing (torchtitan 9dec370,
/// torchtitan/parallelisms/parallelize_llama.py, _custom_policy): a block's matrix
/// multiplies (aten.mm) are counted in call order, the output of every odd-numbered one is
/// saved and the rest are recomputed in backward. Returns the share of a GEMM's output
/// width that is saved and advances `count` past the matrix multiplies it stands for
/// (Op::calls). Routed experts run as grouped GEMMs, not aten.mm calls: they leave the
/// count alone and are taken at half their output, the policy's average.
double op_sac_saved_share(const Op& op, int64_t& count);

/// Sum of forward FLOPs per token over the operators.
double ops_forward_flops_per_token(const std::vector<Op>& ops);

}  // namespace capsim
