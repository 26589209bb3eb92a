#pragma once
/// Model architecture as plain values, independent of any file format. io/ builds a
/// ModelSpec from a Hugging Face config.json; everything else reads only this.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace capsim {

/// Hugging Face `model_type` families the reader understands (gpt_oss last: engine profiles
/// list them from gpt2 to gpt_oss).
enum class Family {
  gpt2,
  gpt_neox,
  llama,
  mistral,
  gemma,
  qwen2,
  qwen3,
  nemotron,
  mixtral,
  qwen3_moe,
  deepseek_v2,
  deepseek_v3,
  gpt_oss,
};

std::string_view to_string(Family f);

/// Numeric formats for weights, activations, KV cache and tensor-core math.
enum class DType { fp32, tf32, bf16, fp16, fp8, int8, int4, fp4 };

std::string_view to_string(DType d);
/// Storage size of one element in bytes (int4/fp4: 0.5).
double dtype_bytes(DType d);

enum class NormKind { layernorm, rmsnorm };

/// MLP nonlinearity. Gated variants (SwiGLU, GeGLU) have two input projections.
enum class Activation { gelu, silu, relu, relu2 };

/// Multi-head latent attention (DeepSeek-V2/V3).
struct MlaSpec {
  int64_t q_lora_rank = 0;  ///< 0: plain q projection h -> heads*(nope+rope)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool operator==(const MlaSpec&) const = default;
};

/// Mixture-of-experts feed-forward.
/// A measured point of how unevenly a trained router loads expert-parallel ranks.
struct RankImbalancePoint {
  int64_t ep = 0;              ///< expert-parallel ranks, experts placed in order
  double max_over_mean = 1.0;  ///< busiest rank's routed tokens over the mean
  bool operator==(const RankImbalancePoint&) const = default;
};

struct MoeSpec {
  int64_t num_experts = 0;          ///< routed experts per MoE layer
  int64_t top_k = 0;                ///< routed experts per token
  int64_t expert_intermediate = 0;  ///< FFN width of one routed expert
  int64_t shared_experts = 0;       ///< always-active experts (DeepSeek)
  int64_t shared_intermediate = 0;  ///< FFN width of one shared expert
  bool router_bias = false;         ///< DeepSeek-V3 e_score_correction_bias (E params)
  /// Group-limited routing (DeepSeek config n_group, topk_group): experts in n_group
  /// groups, each token routed within its topk_group best groups; 0 = unlimited. Laid
  /// out one group per node, this is DeepSeek-V3's node-limited routing (report Sec. 2.1.2:
  /// each token to at most M = 4 nodes).
  int64_t n_group = 0, topk_group = 0;
  /// The router's skew over expert-parallel ranks without rebalancing, by EP size, for
  /// large batches (data/moe_routing.json, with its source); empty: as uniform as chance.
  std::vector<RankImbalancePoint> rank_imbalance;
  std::string rank_imbalance_source;  ///< the file's source key for those points
  bool operator==(const MoeSpec&) const = default;
};

/// One transformer architecture. Dimensions are per layer; `moe_layer[i]` says whether
/// layer i uses the MoE feed-forward (else the dense one of width `intermediate`).
struct ModelSpec {
  std::string name;
  Family family = Family::llama;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;       ///< query/key head width (explicit head_dim or hidden/heads)
  int64_t intermediate = 0;   ///< dense FFN width
  int64_t vocab = 0;
  int64_t max_position = 0;   ///< max_position_embeddings
  bool learned_positions = false;  ///< GPT-2 style position table of max_position rows
  bool tied_embeddings = false;
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;       ///< per-head RMSNorm on q and k (Qwen3)
  bool parallel_residual = false;  ///< GPT-NeoX: attention and MLP read the same input
  NormKind norm = NormKind::rmsnorm;
  bool gated_mlp = true;
  Activation activation = Activation::silu;
  double dropout = 0.0;       ///< residual/attention dropout probability in training
  std::optional<MlaSpec> mla;
  std::optional<MoeSpec> moe;
  std::vector<bool> moe_layer;  ///< size `layers` when moe is set, else empty
  /// Sliding-window attention: a layer flagged in `sliding_layer` lets each query attend to
  /// the `sliding_window` most recent keys, its own included (Hugging Face's sliding_window
  /// with layer_types; Mistral applies it to every layer, Qwen2 above max_window_layers,
  /// gpt-oss to every other layer); 0: every layer attends to the whole context.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layer;  ///< size `layers` when sliding_window > 0, else empty
  /// A learned logit per query head that joins each softmax as an extra column ("sinks",
  /// gpt-oss): `heads` parameters a layer, no keys or values.
  bool attention_sinks = false;
  /// Weight block of the model's published FP8 checkpoint when it is block-scaled
  /// (config.json quantization_config.weight_block_size), 0 when per-tensor or unknown.
  int64_t fp8_weight_block = 0;
  /// Multi-token prediction modules trained beside the model (config.json
  /// num_nextn_predict_layers; DeepSeek-V3 report Sec. 2.2: each is an RMSNorm of the hidden
  /// state and of the next token's embedding, a 2h -> h projection, one transformer block
  /// and the shared output head). Training only: serving and parameter counts leave them out.
  int64_t mtp_layers = 0;
  /// Keys as the Hugging Face config states them (0 where it has none), for launchers that
  /// read the config literally rather than by model family: TGI's (launcher/src/main.rs,
  /// RawConfig) sizes its prefill budget from these.
  struct ConfigKeys {
    int64_t intermediate_size = 0, num_attention_heads = 0, num_key_value_heads = 0, num_hidden_layers = 0;
    int64_t head_dim = 0, num_experts_per_tok = 0, n_shared_experts = 0, num_local_experts = 0;
    bool operator==(const ConfigKeys&) const = default;
  };
  ConfigKeys config_keys;

  bool operator==(const ModelSpec&) const = default;

  bool is_moe_layer(int64_t i) const { return moe && moe_layer[static_cast<size_t>(i)]; }
  bool is_sliding_layer(int64_t i) const { return sliding_window > 0 && sliding_layer[static_cast<size_t>(i)]; }
  int64_t sliding_layers() const;  ///< how many layers have a sliding window
  int64_t q_width() const;   ///< width of the attention query projection output
  int64_t kv_width() const;  ///< width of one of K or V (GQA), or MLA's per-head total
};

/// Parameter counts by kind, exact integers.
struct ParamCounts {
  int64_t total = 0;      ///< every trainable weight, tied embeddings once
  int64_t active = 0;     ///< per token: non-expert + top-k routed + shared experts
  int64_t embedding = 0;  ///< input embedding + position table + untied output head
  bool operator==(const ParamCounts&) const = default;
};

/// Parameters of one decoder layer, split by how they shard.
struct LayerParams {
  int64_t attention = 0;   ///< q/k/v/o (or MLA) projections and biases, tensor-parallel
  int64_t norms = 0;       ///< layer norms (replicated over tensor parallel)
  int64_t dense_mlp = 0;   ///< dense FFN (0 on MoE layers)
  int64_t router = 0;      ///< MoE router (replicated over expert parallel)
  int64_t shared_experts = 0;  ///< shared expert FFNs (dense-like sharding)
  int64_t routed_expert = 0;   ///< ONE routed expert's FFN
  int64_t routed_experts = 0;  ///< all routed experts of the layer
  int64_t total() const {
    return attention + norms + dense_mlp + router + shared_experts + routed_experts;
  }
};

LayerParams layer_params(const ModelSpec& m, int64_t layer);
/// Input embedding rows plus the learned position table (if any).
int64_t input_embedding_params(const ModelSpec& m);
/// The same on one tensor-parallel rank: the vocabulary rows split over `tp`, the position
/// table replicated.
double input_embedding_params_per_rank(const ModelSpec& m, double tp);
/// Output head (0 when tied) plus the final norm.
int64_t output_head_params(const ModelSpec& m);
int64_t final_norm_params(const ModelSpec& m);
ParamCounts count_params(const ModelSpec& m);

/// KV-cache bytes one token occupies over all layers at `dtype` (MLA: compressed latent
/// plus the shared rope key, as FlashMLA/vLLM cache it).
double kv_cache_bytes_per_token(const ModelSpec& m, DType dtype);

/// Keys a query attends to on average in causal attention over `span` tokens when each
/// attends to at most `window` of them (0: no window): span/2 without one (the causal
/// half), else (span w - w^2/2) / span once the span passes the window, continuous at
/// span = w.
double mean_attended_keys(int64_t span, int64_t window);

/// Forward FLOPs for one token at position-averaged context `seq_len`, causal:
/// 2 x active matmul parameters (excluding the input embedding lookup) plus attention
/// score and value products 2 x 2 x q-heads x head widths x the keys each layer's query
/// attends to on average (seq_len / 2, or mean_attended_keys within a sliding window).
double forward_flops_per_token(const ModelSpec& m, int64_t seq_len);
/// Matmul weights one token meets in the forward (active parameters without the embedding
/// lookup and the final norm; a tied output head counts): forward_flops_per_token is twice
/// these plus the attention scores and values.
double forward_matmul_params(const ModelSpec& m);

/// Expected largest of n independent standard normal draws, E[max Z_i] =
/// integral of x n phi(x) Phi(x)^(n-1) dx (0 for n <= 1), by quadrature.
double expected_max_standard_normal(int64_t n);

/// The router's own skew over `ep` ranks for large batches: MoeSpec::rank_imbalance at
/// that EP size, interpolated in log2 EP from 1 at EP 1, the largest listed held beyond
/// it; 1 with no points or ep <= 1.
double ep_router_skew(const MoeSpec& e, int64_t ep);

/// The busiest of `ep` expert-parallel ranks' routed tokens over the mean when `tokens`
/// tokens each pick top_k of the routed experts, laid out in order over the ranks: the
/// router's measured skew at that EP size (MoeSpec::rank_imbalance, interpolated in
/// log2 EP) plus the sampling spread of the busiest rank. A rank's count is a sum of
/// per-token hypergeometric draws (k of E experts, E/ep of them local): mean T k / ep,
/// variance T k (1/ep)(1 - 1/ep)(E - k)/(E - 1); the busiest of ep such counts lies about
/// `z_ep` = expected_max_standard_normal(ep) standard deviations above the mean (normal
/// approximation). 1 for ep <= 1. Pass `z_ep` when it is already known.
double ep_rank_imbalance(const MoeSpec& e, double tokens, int64_t ep, double z_ep = -1.0);

}  // namespace capsim
