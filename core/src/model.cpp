#include "capsim/core/model.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numbers>

namespace capsim {

std::string_view to_string(Family f) {
  switch (f) {
    case Family::gpt2: return "gpt2";
    case Family::gpt_neox: return "gpt_neox";
    case Family::llama: return "llama";
    case Family::mistral: return "mistral";
    case Family::gemma: return "gemma";
    case Family::qwen2: return "qwen2";
    case Family::qwen3: return "qwen3";
    case Family::nemotron: return "nemotron";
    case Family::mixtral: return "mixtral";
    case Family::qwen3_moe: return "qwen3_moe";
    case Family::deepseek_v2: return "deepseek_v2";
    case Family::deepseek_v3: return "deepseek_v3";
    case Family::gpt_oss: return "gpt_oss";
  }
  return "?";
}

std::string_view to_string(DType d) {
  switch (d) {
    case DType::fp32: return "fp32";
    case DType::tf32: return "tf32";
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp8: return "fp8";
    case DType::int8: return "int8";
    case DType::int4: return "int4";
    case DType::fp4: return "fp4";
  }
  return "?";
}

double dtype_bytes(DType d) {
  switch (d) {
    case DType::fp32:
    case DType::tf32: return 4.0;
    case DType::bf16:
    case DType::fp16: return 2.0;
    case DType::fp8:
    case DType::int8: return 1.0;
    case DType::int4:
    case DType::fp4: return 0.5;
  }
  return 0.0;
}

int64_t ModelSpec::q_width() const {
  if (mla) return heads * (mla->qk_nope_head_dim + mla->qk_rope_head_dim);
  return heads * head_dim;
}

int64_t ModelSpec::kv_width() const {
  if (mla) return heads * (mla->qk_nope_head_dim + mla->qk_rope_head_dim);
  return kv_heads * head_dim;
}

int64_t ModelSpec::sliding_layers() const {
  if (sliding_window <= 0) return 0;
  return static_cast<int64_t>(std::count(sliding_layer.begin(), sliding_layer.end(), true));
}

namespace {

/// Parameters of one normalisation layer over `width` features.
int64_t norm_params(const ModelSpec& m, int64_t width) {
  return m.norm == NormKind::layernorm ? 2 * width : width;
}

/// One FFN of width `inner`: gated (gate, up, down) or plain (up, down), with biases.
int64_t ffn_params(const ModelSpec& m, int64_t inner) {
  const int64_t h = m.hidden;
  int64_t p = (m.gated_mlp ? 3 : 2) * h * inner;
  if (m.mlp_bias) p += (m.gated_mlp ? 2 : 1) * inner + h;
  return p;
}

int64_t attention_params(const ModelSpec& m) {
  const int64_t h = m.hidden;
  if (m.mla) {
    // DeepSeek-V2 paper (arXiv 2405.04434) Sec. 2.1.2, as implemented in the HF
    // modeling files: optional q LoRA (with its RMSNorm), joint kv down-projection that
    // also yields the shared rope key, kv RMSNorm, kv up-projection, output projection.
    const auto& a = *m.mla;
    const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    int64_t p = 0;
    if (a.q_lora_rank > 0) {
      p += h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.heads * qk;
    } else {
      p += h * m.heads * qk;
    }
    p += h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank;
    p += a.kv_lora_rank * m.heads * (a.qk_nope_head_dim + a.v_head_dim);
    p += m.heads * a.v_head_dim * h;
    return p;
  }
  const int64_t q = m.heads * m.head_dim;
  const int64_t kv = m.kv_heads * m.head_dim;
  int64_t p = h * q + 2 * h * kv + q * h;
  if (m.qkv_bias) p += q + 2 * kv;
  if (m.o_bias) p += h;
  if (m.qk_norm) p += 2 * m.head_dim;
  if (m.attention_sinks) p += m.heads;
  return p;
}

}  // namespace

LayerParams layer_params(const ModelSpec& m, int64_t layer) {
  LayerParams p;
  p.attention = attention_params(m);
  p.norms = 2 * norm_params(m, m.hidden);
  if (m.is_moe_layer(layer)) {
    const auto& e = *m.moe;
    p.router = e.num_experts * m.hidden + (e.router_bias ? e.num_experts : 0);
    p.routed_expert = ffn_params(m, e.expert_intermediate);
    p.routed_experts = e.num_experts * p.routed_expert;
    p.shared_experts = e.shared_experts > 0 ? ffn_params(m, e.shared_experts * e.shared_intermediate) : 0;
  } else {
    p.dense_mlp = ffn_params(m, m.intermediate);
  }
  return p;
}

int64_t input_embedding_params(const ModelSpec& m) {
  return m.vocab * m.hidden + (m.learned_positions ? m.max_position * m.hidden : 0);
}

double input_embedding_params_per_rank(const ModelSpec& m, double tp) {
  return static_cast<double>(m.vocab * m.hidden) / tp + static_cast<double>(input_embedding_params(m) - m.vocab * m.hidden);
}

int64_t final_norm_params(const ModelSpec& m) { return norm_params(m, m.hidden); }

int64_t output_head_params(const ModelSpec& m) {
  return m.tied_embeddings ? 0 : m.vocab * m.hidden;
}

ParamCounts count_params(const ModelSpec& m) {
  ParamCounts c;
  c.embedding = input_embedding_params(m) + output_head_params(m);
  c.total = c.embedding + final_norm_params(m);
  c.active = c.total;
  for (int64_t i = 0; i < m.layers; ++i) {
    const LayerParams lp = layer_params(m, i);
    c.total += lp.total();
    c.active += lp.total() - lp.routed_experts;
    if (m.is_moe_layer(i)) c.active += m.moe->top_k * lp.routed_expert;
  }
  return c;
}

double kv_cache_bytes_per_token(const ModelSpec& m, DType dtype) {
  const double b = dtype_bytes(dtype);
  if (m.mla) {
    // Compressed latent c_kv plus the decoupled rope key (DeepSeek-V2 Sec. 2.1.3).
    return static_cast<double>(m.layers * (m.mla->kv_lora_rank + m.mla->qk_rope_head_dim)) * b;
  }
  return static_cast<double>(2 * m.layers * m.kv_heads * m.head_dim) * b;
}

double forward_matmul_params(const ModelSpec& m) {
  const ParamCounts c = count_params(m);
  // Active parameters without the embedding lookup and the final norm; a tied output head
  // multiplies by the embedding matrix, so it counts.
  return static_cast<double>(c.active - input_embedding_params(m) - final_norm_params(m) +
                             (m.tied_embeddings ? m.vocab * m.hidden : 0));
}

double mean_attended_keys(int64_t span, int64_t window) {
  const double s = static_cast<double>(span);
  if (window <= 0 || span <= window) return s / 2.0;
  const double w = static_cast<double>(window);
  return w - w * w / (2.0 * s);
}

double forward_flops_per_token(const ModelSpec& m, int64_t seq_len) {
  const double matmul_params = forward_matmul_params(m);
  int64_t qk = m.head_dim, v = m.head_dim;
  if (m.mla) {
    qk = m.mla->qk_nope_head_dim + m.mla->qk_rope_head_dim;
    v = m.mla->v_head_dim;
  }
  // Causal: on average a token attends to seq_len/2 keys; within a sliding window to
  // mean_attended_keys of them.
  const int64_t sliding = m.sliding_layers();
  double attn = 2.0 * static_cast<double>((m.layers - sliding) * m.heads * (qk + v)) * static_cast<double>(seq_len) / 2.0;
  if (sliding > 0)
    attn += 2.0 * static_cast<double>(sliding * m.heads * (qk + v)) * mean_attended_keys(seq_len, m.sliding_window);
  return 2.0 * matmul_params + attn;
}

double expected_max_standard_normal(int64_t n) {
  if (n <= 1) return 0.0;
  // Simpson's rule over [-10, 10]: the integrand is below 1e-20 outside it for any n a
  // cluster has (n phi(x) Phi(x)^(n-1) decays like phi(x) on the left and n phi(x) on the
  // right).
  constexpr int kSteps = 4000;
  constexpr double a = -10.0, b = 10.0, h = (b - a) / kSteps;
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * std::numbers::pi);
  const double nn = static_cast<double>(n);
  auto f = [&](double x) {
    const double phi = inv_sqrt_2pi * std::exp(-0.5 * x * x);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    return x * nn * phi * std::pow(cdf, nn - 1.0);
  };
  double sum = f(a) + f(b);
  for (int i = 1; i < kSteps; ++i) sum += f(a + h * i) * (i % 2 == 1 ? 4.0 : 2.0);
  return sum * h / 3.0;
}

double ep_router_skew(const MoeSpec& e, int64_t ep) {
  if (ep <= 1 || e.rank_imbalance.empty()) return 1.0;
  double x0 = 0.0, y0 = 1.0;  // EP 1
  const double x = std::log2(static_cast<double>(ep));
  for (const RankImbalancePoint& p : e.rank_imbalance) {
    const double x1 = std::log2(static_cast<double>(p.ep));
    if (x <= x1) return x1 > x0 ? y0 + (p.max_over_mean - y0) * (x - x0) / (x1 - x0) : p.max_over_mean;
    x0 = x1;
    y0 = p.max_over_mean;
  }
  return e.rank_imbalance.back().max_over_mean;
}

double ep_rank_imbalance(const MoeSpec& e, double tokens, int64_t ep, double z_ep) {
  if (ep <= 1 || e.num_experts <= 0 || e.top_k <= 0 || tokens <= 0) return 1.0;
  const double skew = ep_router_skew(e, ep);
  const double E = static_cast<double>(e.num_experts), k = static_cast<double>(e.top_k), r = static_cast<double>(ep);
  const double cv = E > 1.0 ? std::sqrt((r - 1.0) * (E - k) / (tokens * k * (E - 1.0))) : 0.0;
  const double z = z_ep >= 0.0 ? z_ep : expected_max_standard_normal(ep);
  // The busiest rank holds at most all routed slots (ep times the mean).
  return std::min(r, skew + z * cv);
}

}  // namespace capsim
