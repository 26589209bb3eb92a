// Memory model against closed forms from the literature, and invariants over random layouts.
#include <gtest/gtest.h>

#include <random>

#include "capsim/core/layout.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/core/step.hpp"
#include "capsim/core/workload.hpp"
#include "capsim/io/engines.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/presets.hpp"

namespace capsim {
namespace {

SystemSpec system_of(const std::string& gpu, int64_t n) {
  SystemSpec s;
  s.gpu = io::load_gpu(gpu);
  s.num_gpus = n;
  s.gpus_per_node = 8;
  s.nic_gbps_per_gpu = 400;
  return s;
}

TrainingPlan plan(int64_t dp, int zero) {
  TrainingPlan t;
  t.dp = dp;
  t.zero = zero;
  t.micro_batch = 1;
  t.global_batch = dp;
  t.seq_len = 2048;
  t.recompute = Recompute::full;
  t.precision = DType::fp16;  // the ZeRO paper's mixed precision: fp16 weights and gradients
  return t;
}

// BF16 moments (DeepSeek-V3 report Sec. 3.3.2) keep AdamW's fp32 master copy and its two
// moments in 2 bytes each: 8 bytes per parameter instead of 12; one-moment optimizers 6
// instead of 8.
TEST(ModelStates, Bf16MomentsSaveTwoBytesPerMoment) {
  const ModelSpec m = io::load_model("llama2-7b");
  const double psi = static_cast<double>(count_params(m).total);
  for (int zero : {0, 1, 3}) {
    TrainingPlan t = plan(8, zero);
    t.precision = DType::bf16;
    const StageMemory a = training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak();
    t.bf16_moments = true;
    const StageMemory b = training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak();
    EXPECT_DOUBLE_EQ(b.optimizer_bytes * 12.0, a.optimizer_bytes * 8.0) << "zero " << zero;
    EXPECT_DOUBLE_EQ(b.weights_bytes, a.weights_bytes);
    EXPECT_DOUBLE_EQ(b.gradients_bytes, a.gradients_bytes);
  }
  TrainingPlan t = plan(1, 0);
  t.bf16_moments = true;
  EXPECT_DOUBLE_EQ(training_memory(m, system_of("h100-sxm5-80gb", 1), t).peak().optimizer_bytes, 8 * psi);
  EXPECT_DOUBLE_EQ(optimizer_bytes_per_param(Optimizer::lion, true), 6.0);
  EXPECT_DOUBLE_EQ(optimizer_bytes_per_param(Optimizer::adam8bit, true), optimizer_bytes_per_param(Optimizer::adam8bit));
}

// Blockwise FP8 caches the routed experts' SwiGLU inputs in FP8 with an fp32 scale per 128
// values: each MoE layer keeps top_k x 2 x expert_intermediate x (2 - 1 - 4/128) bytes less
// per token; a dense model keeps the same.
TEST(Activations, BlockwiseFp8CachesMoeSwigluInputsInFp8) {
  auto act = [](const ModelSpec& m, bool blockwise) {
    TrainingPlan t = plan(8, 1);
    t.precision = DType::fp8;
    t.recompute = Recompute::none;
    t.ep = 8;
    if (!m.moe) t.ep = 1;
    t.fp8_blockwise = blockwise;
    const TrainingMemory mem = training_memory(m, system_of("h100-sxm5-80gb", 8), t);
    return mem.peak().activations_bytes;
  };
  const ModelSpec dense = io::load_model("llama3-8b");
  EXPECT_DOUBLE_EQ(act(dense, true), act(dense, false));
  const ModelSpec moe = io::load_model("qwen3-30b-a3b");
  int64_t moe_layers = 0;
  for (int64_t i = 0; i < moe.layers; ++i) moe_layers += moe.is_moe_layer(i) ? 1 : 0;
  const double per_token = static_cast<double>(moe.moe->top_k) * 2.0 * static_cast<double>(moe.moe->expert_intermediate) *
                           (1.0 - 4.0 / 128.0);
  EXPECT_NEAR(act(moe, false) - act(moe, true), per_token * 2048.0 * static_cast<double>(moe_layers),
              1e-6 * act(moe, false));
}

// Mixed-precision AdamW on one GPU: 2 (weights) + 2 (gradients) + 12 (fp32 master, m, v)
// bytes per parameter; a 7B model needs 14 + 14 + 28 + 28 + 28 = 112 GB of model states.
TEST(ModelStates, SingleGpuAdamIsSixteenBytesPerParam) {
  const ModelSpec m = io::load_model("llama2-7b");
  const double psi = static_cast<double>(count_params(m).total);
  const TrainingMemory mem = training_memory(m, system_of("h100-sxm5-80gb", 1), plan(1, 0));
  const StageMemory& s = mem.peak();
  EXPECT_DOUBLE_EQ(s.weights_bytes, 2 * psi);
  EXPECT_DOUBLE_EQ(s.gradients_bytes, 2 * psi);
  EXPECT_DOUBLE_EQ(s.optimizer_bytes, 12 * psi);
  // The seed example's arithmetic, for Psi = 7e9 exactly.
  EXPECT_DOUBLE_EQ(16.0 * 7e9, 112e9);
}

// bf16 training keeps fp32 main gradients: 2 + 4 + 12 bytes per parameter.
TEST(ModelStates, Bf16KeepsFp32Gradients) {
  const ModelSpec m = io::load_model("llama2-7b");
  const double psi = static_cast<double>(count_params(m).total);
  TrainingPlan t = plan(1, 0);
  t.precision = DType::bf16;
  const StageMemory s = training_memory(m, system_of("h100-sxm5-80gb", 1), t).peak();
  EXPECT_DOUBLE_EQ(s.weights_bytes + s.gradients_bytes + s.optimizer_bytes, 18 * psi);
  // ZeRO-3 holds (2 + 2 + 12)/N in any precision: DeepSpeed's 16-bit shards, or FSDP2's
  // fp32 parameter and gradient shards with two fp32 moments.
  for (int64_t n : {8, 64}) {
    TrainingPlan z = plan(n, 3);
    z.precision = DType::bf16;
    const StageMemory sz = training_memory(m, system_of("h100-sxm5-80gb", n), z).peak();
    EXPECT_NEAR(sz.weights_bytes + sz.gradients_bytes + sz.optimizer_bytes, 16 * psi / static_cast<double>(n), 1.0);
  }
}

// Gradients reduced in the 16-bit dtype (NeMo 2's performance recipes set
// grad_reduce_in_fp32 = False) keep a 2-byte main-gradient buffer instead of the fp32 one.
TEST(ModelStates, SixteenBitGradientReductionHalvesTheGradientBuffer) {
  const ModelSpec m = io::load_model("llama2-7b");
  const double psi = static_cast<double>(count_params(m).total);
  TrainingPlan t = plan(8, 1);
  t.precision = DType::bf16;
  const StageMemory fp32 = training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak();
  t.grad_reduce_fp32 = false;
  const StageMemory half = training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak();
  EXPECT_DOUBLE_EQ(fp32.gradients_bytes, 4.0 * psi);
  EXPECT_DOUBLE_EQ(half.gradients_bytes, 2.0 * psi);
  EXPECT_DOUBLE_EQ(half.optimizer_bytes, fp32.optimizer_bytes);
}

// Per-tensor FP8 on the Megatron stack: FP8 parameters hold each GEMM weight as FP8 data and
// its cached transpose (2 B, the 16-bit size); 16-bit weights add Transformer Engine's FP8
// copy and transpose, cached over the microbatches (2 B more per GEMM weight).
TEST(ModelStates, SixteenBitFp8WeightsKeepTheirFp8Copies) {
  const ModelSpec m = io::load_model("llama2-7b");
  const double psi = static_cast<double>(count_params(m).total);
  const LayerParams lp = layer_params(m, 0);
  const double gemm = static_cast<double>(m.layers) * static_cast<double>(lp.attention + lp.dense_mlp);
  TrainingPlan t = plan(8, 1);
  t.precision = DType::fp8;
  ASSERT_TRUE(fp8_params(t));
  EXPECT_DOUBLE_EQ(training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak().weights_bytes, 2.0 * psi);
  t.fp8_param_gather = false;
  EXPECT_DOUBLE_EQ(training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak().weights_bytes, 2.0 * psi + 2.0 * gemm);
}

// ZeRO (Rajbhandari et al. 2020, Fig. 1): per-GPU model states over N data-parallel ranks.
TEST(ModelStates, ZeroStagesShardAsThePaperStates) {
  const ModelSpec m = io::load_model("llama2-7b");
  const double psi = static_cast<double>(count_params(m).total);
  for (int64_t n : {2, 8, 64}) {
    const auto states = [&](int zero) {
      const StageMemory s = training_memory(m, system_of("h100-sxm5-80gb", n), plan(n, zero)).peak();
      return s.weights_bytes + s.gradients_bytes + s.optimizer_bytes;
    };
    const double nn = static_cast<double>(n);
    EXPECT_NEAR(states(0), 16 * psi, 1.0);
    EXPECT_NEAR(states(1), 2 * psi + 2 * psi + 12 * psi / nn, 1.0);
    EXPECT_NEAR(states(2), 2 * psi + 14 * psi / nn, 1.0);
    EXPECT_NEAR(states(3), 16 * psi / nn, 1.0);
  }
}

// A GPT layer (LayerNorm, GELU 4h MLP, dropout) with an attention that keeps its s x s
// scores, as Korthikanti et al. 2022 assume.
ModelSpec gpt_layer_model() {
  ModelSpec m;
  m.family = Family::gpt2;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 32;
  m.head_dim = 128;
  m.intermediate = 4 * 4096;
  m.layers = 4;
  m.vocab = 51200;
  m.max_position = 2048;
  m.norm = NormKind::layernorm;
  m.gated_mlp = false;
  m.activation = Activation::gelu;
  m.qkv_bias = m.o_bias = m.mlp_bias = true;
  m.dropout = 0.1;
  return m;
}

double korthikanti(const ModelSpec& m, int64_t tp, bool sp, Recompute rc, int64_t span = 2048) {
  LoweringOptions o;
  o.attention_span = span;
  o.attention = AttentionImpl::unfused;
  o.dropout = true;
  ShardContext c;
  c.micro_batch = 2;
  c.seq_len = 2048;
  c.tp = tp;
  c.sp = sp;
  c.recompute = rc;
  return layer_activation_bytes(lower_layer(m, 0, o), o, m, c);
}

TEST(Activations, KorthikantiTable2) {
  const ModelSpec m = gpt_layer_model();
  const double s = 2048, b = 2, h = 4096, a = 32;
  const double sbh = s * b * h;
  // No parallelism: sbh (34 + 5as/h).
  EXPECT_DOUBLE_EQ(korthikanti(m, 1, false, Recompute::none), sbh * (34 + 5 * a * s / h));
  for (int64_t tp : {2, 4, 8}) {
    const double t = static_cast<double>(tp);
    // Tensor parallel: sbh (10 + 24/t + 5as/(ht)).
    EXPECT_DOUBLE_EQ(korthikanti(m, tp, false, Recompute::none), sbh * (10 + 24 / t + 5 * a * s / (h * t)));
    // Tensor + sequence parallel: sbh/t (34 + 5as/h).
    EXPECT_DOUBLE_EQ(korthikanti(m, tp, true, Recompute::none), sbh / t * (34 + 5 * a * s / h));
    // Selective recompute with sequence parallel: 34 sbh/t.
    EXPECT_DOUBLE_EQ(korthikanti(m, tp, true, Recompute::selective), 34 * sbh / t);
  }
  // Full recompute keeps the layer input only: 2sbh.
  EXPECT_DOUBLE_EQ(korthikanti(m, 1, false, Recompute::full), 2 * sbh);
  // Packed documents of d tokens: each token's scores span its document, 5ad in place of 5as.
  const double d = 512;
  EXPECT_DOUBLE_EQ(korthikanti(m, 1, false, Recompute::none, 512), sbh * (34 + 5 * a * d / h));
}

TEST(Activations, FlashAttentionKeepsNoScores) {
  // Doubling the sequence doubles per-layer bytes exactly when no s^2 term is kept.
  const ModelSpec m = io::load_model("llama3-8b");
  auto bytes = [&](int64_t seq) {
    LoweringOptions o;
    o.attention_span = seq;
    ShardContext c;
    c.seq_len = seq;
    return layer_activation_bytes(lower_layer(m, 0, o), o, m, c);
  };
  EXPECT_DOUBLE_EQ(bytes(8192), 2 * bytes(4096));
}

// Narayanan et al. 2021 / Korthikanti et al. 2022 Sec. 4.2.3: the first stage of 1F1B
// holds p microbatches; with interleaving, p (1 + (p-1)/(p v)) microbatches' worth of
// its L/p layers.
// Op-level selective checkpointing (torchtitan's policy, the PyTorch framework) on a
// Llama 3 8B layer, per token: the layer input 2h; half of each projection's 16-bit output,
// (q + 2 kv) for QKV, h for the output projection, 2I for gate/up and h for down; the
// attention output 2q and its fp32 log-sum-exp 4 per head:
// 8192 + 6144 + 4096 + 28672 + 4096 + 32 x (256 + 4) = 59520 bytes.
// torchtitan's op-level policy counts the block's matmuls in call order (wq, wk, wv, wo,
// w1, w3, w2) and keeps the odd-numbered ones' outputs: beside the layer input h and the
// attention output with its fp32 log-sum-exp per head, wq (q), wv (kv), w1 (I) and w2 (h).
// Llama 3 8B: 2 (4096 + 4096 + 1024 + 4096 + 14336 + 4096) + 32 * 4 = 63616 B a token.
TEST(Activations, OpLevelCheckpointingKeepsOddNumberedMatmulOutputs) {
  const ModelSpec m = io::load_model("llama3-8b");
  TrainingPlan t = plan(8, 3);
  t.precision = DType::bf16;
  const LoweringOptions lo = lowering_options(m, t);
  ShardContext c;
  c.micro_batch = 2;
  c.seq_len = 4096;
  c.recompute = Recompute::selective;
  c.op_sac = true;
  const double tokens = 2.0 * 4096.0;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(lower_layer(m, 0, lo), lo, m, c), tokens * 63616.0);
  // Megatron-LM's selective recompute keeps far more: 8h + 4q + 4kv + 6I = 139264 a token.
  c.op_sac = false;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(lower_layer(m, 0, lo), lo, m, c), tokens * 139264.0);
}

// The framework follows the ZeRO stage unless given: FSDP (ZeRO-3) is PyTorch-native,
// Megatron-LM's distributed optimizer is ZeRO-1. It decides the loss's transient memory
// on the last stage, per logit: Megatron-LM's fused cross entropy adds a 16-bit gradient
// (2 B) to the fp32 softmax it keeps; PyTorch's F.cross_entropy on fp32 logits holds two
// fp32 gradients (8 B).
TEST(Activations, LossMemoryFollowsTheFramework) {
  const ModelSpec m = io::load_model("llama3-8b");
  TrainingPlan t = plan(8, 3);
  t.precision = DType::bf16;
  EXPECT_EQ(framework_of(t), Framework::pytorch);
  const double logits = 2048.0 * static_cast<double>(m.vocab);
  EXPECT_DOUBLE_EQ(training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak().logits_bytes, logits * 8.0);
  t.zero = 1;
  EXPECT_EQ(framework_of(t), Framework::megatron);
  EXPECT_DOUBLE_EQ(training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak().logits_bytes, logits * 2.0);
  t.framework = Framework::pytorch;
  EXPECT_EQ(framework_of(t), Framework::pytorch);
  EXPECT_DOUBLE_EQ(training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak().logits_bytes, logits * 8.0);
  // Under tensor parallelism PyTorch's loss parallel runs over the vocabulary shards, and
  // its fused nll/log-softmax backward holds three fp32 shard buffers (zeros_like(x),
  // exp(x), their sum) beside the kept log-softmax output: 12 B a logit of the shard.
  t.tp = 2;
  t.dp = 4;
  t.global_batch = 4;
  EXPECT_DOUBLE_EQ(training_memory(m, system_of("h100-sxm5-80gb", 8), t).stages.back().logits_bytes, logits / 2.0 * 12.0);
}

// A compiled loss (torch.compile, torchtitan since PR #1033) keeps the 16-bit logits (2 B a
// logit) instead of the fp32 log-softmax (4 B), and its backward holds 6 B a logit instead
// of 8 (apple/ml-cross-entropy's torch.compile benchmark): 4 B a logit less, on the last
// stage only, and nothing else changes.
TEST(Activations, CompiledLossKeepsTheSixteenBitLogits) {
  const ModelSpec m = io::load_model("llama3-8b");
  TrainingPlan t = plan(8, 3);
  t.precision = DType::bf16;
  ASSERT_EQ(framework_of(t), Framework::pytorch);
  const SystemSpec sys = system_of("h100-sxm5-80gb", 8);
  const double logits = 2048.0 * static_cast<double>(m.vocab);
  const StageMemory eager = training_memory(m, sys, t).peak();
  t.compiled_loss = true;
  const StageMemory compiled = training_memory(m, sys, t).peak();
  EXPECT_DOUBLE_EQ(compiled.logits_bytes, logits * 6.0);
  EXPECT_DOUBLE_EQ(eager.logits_bytes - compiled.logits_bytes, logits * 2.0);
  EXPECT_NEAR(eager.activations_bytes - compiled.activations_bytes, logits * 2.0, 1e-6 * logits);
  EXPECT_DOUBLE_EQ(eager.weights_bytes, compiled.weights_bytes);
  EXPECT_DOUBLE_EQ(eager.optimizer_bytes, compiled.optimizer_bytes);
  // And the step moves less loss traffic: 4 + 12 bytes a logit for eager's 22 + 26.
  const hw::RooflineCostModel cost(sys);
  t.compiled_loss.reset();
  const double e = analytical_step(m, sys, t, cost).step_s;
  t.compiled_loss = true;
  EXPECT_LT(analytical_step(m, sys, t, cost).step_s, e);
}

// ZeRO-3 under pipeline parallelism keeps each stage's gradients unsharded across
// microbatches; FSDP2 accumulates them in its fp32 reduce dtype (PyTorch framework),
// 2 bytes more per local parameter than in the 16-bit parameter dtype.
TEST(Pipeline, Zero3AccumulatesUnshardedGradientsInTheReduceDtype) {
  const ModelSpec m = io::load_model("llama2-7b");
  TrainingPlan t = plan(4, 3);
  t.precision = DType::bf16;
  t.pp = 2;
  t.global_batch = 16;
  t.framework = Framework::megatron;
  const StageMemory megatron = training_memory(m, system_of("h100-sxm5-80gb", 8), t).stages[0];
  t.framework = Framework::pytorch;
  const StageMemory pytorch = training_memory(m, system_of("h100-sxm5-80gb", 8), t).stages[0];
  EXPECT_DOUBLE_EQ(pytorch.gradients_bytes - megatron.gradients_bytes, 2.0 * pytorch.params);
  EXPECT_DOUBLE_EQ(pytorch.weights_bytes, megatron.weights_bytes);
}

// FSDP2 keeps its root unit gathered from forward to the end of backward (it never
// reshards the root after forward), and the PyTorch stacks leave the embedding, final
// norm and head to the root: the ZeRO-3 buffers hold them in 16 bits beside two gathered
// layers and one layer's fp32 gradients. Megatron's conventions gather the layers only.
TEST(ModelStates, Fsdp2KeepsItsRootUnitGathered) {
  const ModelSpec m = io::load_model("llama3-8b");
  TrainingPlan t = plan(8, 3);
  t.precision = DType::bf16;
  const double layer = static_cast<double>(count_params(m).total - 2 * m.vocab * m.hidden - m.hidden) /
                       static_cast<double>(m.layers);
  const double root = 2.0 * static_cast<double>(m.vocab * m.hidden) + static_cast<double>(m.hidden);
  EXPECT_DOUBLE_EQ(training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak().comm_buffer_bytes,
                   layer * (2.0 + 2.0 + 4.0) + root * 2.0);
  t.framework = Framework::megatron;
  EXPECT_DOUBLE_EQ(training_memory(m, system_of("h100-sxm5-80gb", 8), t).peak().comm_buffer_bytes,
                   layer * (2.0 + 2.0 + 4.0));
}

TEST(Pipeline, InflightMicrobatches) {
  for (int64_t p : {2, 4, 8, 16}) {
    EXPECT_EQ(inflight_chunks(p, 1, 0, 64), p);
    EXPECT_EQ(inflight_chunks(p, 1, p - 1, 64), 1);
    for (int64_t v : {2, 3, 4}) {
      const double chunks = static_cast<double>(inflight_chunks(p, v, 0, 64));
      const double pd = static_cast<double>(p), vd = static_cast<double>(v);
      EXPECT_DOUBLE_EQ(chunks / vd, pd * (1 + (pd - 1) / (pd * vd)));
    }
  }
  EXPECT_EQ(inflight_chunks(8, 1, 0, 3), 3);  // fewer microbatches than stages
}

// GPipe keeps every microbatch's activations until the backward starts (Huang et al. 2019).
TEST(Pipeline, GpipeHoldsAllMicrobatches) {
  const ModelSpec m = io::load_model("llama2-7b");
  TrainingPlan t;
  t.pp = 4;
  t.dp = 1;
  t.micro_batch = 1;
  t.global_batch = 16;
  t.seq_len = 4096;
  t.recompute = Recompute::full;
  const TrainingMemory one = training_memory(m, system_of("h100-sxm5-80gb", 4), t);
  t.schedule = Schedule::gpipe;
  const TrainingMemory gpipe = training_memory(m, system_of("h100-sxm5-80gb", 4), t);
  EXPECT_EQ(one.stages[0].inflight_microbatches, 4);
  EXPECT_EQ(gpipe.stages[0].inflight_microbatches, 16);
  EXPECT_EQ(gpipe.stages[3].inflight_microbatches, 16);
  EXPECT_DOUBLE_EQ(gpipe.stages[1].activations_bytes, 4.0 * one.stages[1].activations_bytes * 16.0 / (4.0 * 3.0));
}

TEST(Layout, DivisorsAscending) {
  EXPECT_EQ(divisors(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(divisors(12), (std::vector<int64_t>{1, 2, 3, 4, 6, 12}));
  EXPECT_EQ(divisors(49), (std::vector<int64_t>{1, 7, 49}));
  for (int64_t n = 1; n <= 300; ++n) {
    int64_t count = 0;
    for (int64_t i = 1; i <= n; ++i) count += n % i == 0;
    const std::vector<int64_t> d = divisors(n);
    EXPECT_EQ(static_cast<int64_t>(d.size()), count) << n;
    EXPECT_TRUE(std::is_sorted(d.begin(), d.end())) << n;
  }
}

TEST(Pipeline, SplitsUnevenLayersAsMegatron) {
  // Llama-3.1-405B: 126 layers on 16 stages -> 7, 8 x 14, 7.
  std::vector<int64_t> expect(16, 8);
  expect.front() = 7;
  expect.back() = 7;
  EXPECT_EQ(split_layers(126, 16), expect);
  // DeepSeek-V3: 61 layers on 16 stages; the first and last stages are lighter.
  const auto ds = split_layers(61, 16);
  int64_t sum = 0;
  for (auto v : ds) sum += v;
  EXPECT_EQ(sum, 61);
  EXPECT_LT(ds.front(), ds[1]);
  EXPECT_LT(ds.back(), ds[1]);
  EXPECT_EQ(split_layers(32, 4), (std::vector<int64_t>{8, 8, 8, 8}));
}

// Invariant over seeded random layouts: adding data-parallel GPUs under ZeRO-3 never
// raises per-GPU memory.
TEST(Invariants, Zero3MoreGpusNeverRaisesMemory) {
  const ModelSpec m = io::load_model("llama2-13b");
  std::mt19937_64 rng(20261129);
  for (int i = 0; i < 200; ++i) {
    TrainingPlan t;
    t.tp = int64_t{1} << (rng() % 4);
    t.pp = int64_t{1} << (rng() % 3);
    t.dp = int64_t{1} << (rng() % 6);
    t.zero = 3;
    t.sp = t.tp > 1 && rng() % 2;
    t.micro_batch = 1 + static_cast<int64_t>(rng() % 4);
    t.seq_len = 4096;
    t.global_batch = *t.micro_batch * t.dp * 2 * 64;
    t.recompute = static_cast<Recompute>(rng() % 3);
    TrainingPlan more = t;
    more.dp *= 2;
    const double a = training_memory(m, system_of("a100-sxm4-80gb", t.tp * t.pp * t.dp), t).peak().total_bytes;
    const double b =
        training_memory(m, system_of("a100-sxm4-80gb", more.tp * more.pp * more.dp), more).peak().total_bytes;
    EXPECT_LE(b, a) << "tp " << t.tp << " pp " << t.pp << " dp " << t.dp;
  }
}

TEST(Invariants, StageMemoryAddsUp) {
  const ModelSpec m = io::load_model("deepseek-v3");
  TrainingPlan t;
  t.tp = 2;
  t.pp = 8;
  t.vpp = 4;
  t.dp = 64;
  t.ep = 64;
  t.sp = true;
  t.zero = 1;
  t.micro_batch = 1;
  t.global_batch = 8192;
  t.seq_len = 4096;
  t.precision = DType::fp8;
  const TrainingMemory mem = training_memory(m, system_of("h100-sxm5-80gb", 1024), t);
  int64_t layers = 0;
  for (const auto& s : mem.stages) {
    layers += s.layers;
    EXPECT_DOUBLE_EQ(s.total_bytes,
                     s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + s.activations_bytes + s.other_bytes);
  }
  EXPECT_EQ(layers, 61);
}

// Serving memory: the KV budget is what is left of capacity x utilisation, and blocks
// hold exactly block_size tokens each.
TEST(Serving, BlocksFromBudget) {
  const ModelSpec m = io::load_model("llama3-70b");
  InferencePlan p;
  p.tp = 4;
  p.engine.gpu_memory_utilization = 0.9;
  const InferenceMemory mem = inference_memory(m, system_of("h100-sxm5-80gb", 4), p);
  EXPECT_DOUBLE_EQ(mem.kv_bytes_per_token, 327680.0 / 4);
  EXPECT_NEAR(mem.kv_budget_bytes,
              mem.capacity_bytes * 0.9 - mem.weights_bytes - mem.activation_peak_bytes - mem.non_torch_bytes -
                  mem.cudagraph_bytes,
              1.0);
  EXPECT_EQ(mem.num_blocks, static_cast<int64_t>(mem.kv_budget_bytes / (16 * mem.kv_bytes_per_token)));
  EXPECT_EQ(mem.max_cached_tokens, mem.num_blocks * 16);
  // fp8 KV doubles the tokens that fit, within one block of rounding.
  p.kv_dtype = DType::fp8;
  const InferenceMemory fp8 = inference_memory(m, system_of("h100-sxm5-80gb", 4), p);
  EXPECT_NEAR(static_cast<double>(fp8.num_blocks), 2.0 * static_cast<double>(mem.num_blocks), 2.0);
}

// vLLM V1 sizes its KV cache as gpu_memory_utilization x the GPU's memory less the weights,
// the start-up profiling run's activation peak (its dummy sampler over max_num_seqs x the
// vocabulary) and the memory outside PyTorch; from 0.21.0 less its estimate of the CUDA
// graphs too. The KV cache sizes vLLM printed for Llama 3.1 8B on one H100 at
// gpu_memory_utilization 0.95 (llm-d-planner's accuracy report, 0.19.0: 58.11 GiB at TP 1,
// and at TP 2 and 4 its printed parts, 63.76 and 67.44 GiB) and at 0.9 on an earlier
// release (llm-d-benchmark's empirical results: 51.38 GiB, its activation 4.76 GiB), within
// 1%: the model's GPU total is the driver's (79.65 GiB) where vLLM reads CUDA's (79.19).
TEST(Serving, VllmKvCacheMatchesItsPrintedSizes) {
  const ModelSpec m = io::load_model("llama3-8b");
  const double gib = 1024.0 * 1024.0 * 1024.0;
  struct Row {
    const char* version;
    int64_t tp;
    double util, kv_gib;
  };
  for (const Row& r : {Row{"0.19.0", 1, 0.95, 58.11}, Row{"0.19.0", 2, 0.95, 63.76}, Row{"0.19.0", 4, 0.95, 67.44},
                       Row{"0.16.0", 1, 0.90, 51.38}}) {
    SCOPED_TRACE(std::string(r.version) + " tp " + std::to_string(r.tp));
    InferencePlan p;
    p.tp = r.tp;
    p.profile = io::select_engine_profile("vllm", r.version, "/inference/engine");
    p.engine.gpu_memory_utilization = r.util;
    const InferenceMemory mem = inference_memory(m, system_of("h100-sxm5-80gb", r.tp), p);
    EXPECT_NEAR(mem.kv_budget_bytes / gib / r.kv_gib, 1.0, 0.01) << mem.kv_budget_bytes / gib;
  }
  // vLLM's V0 engine (PR #10511's own check, 0.6.5, 0.90): 53.29 GiB, within 1.5%. V0 takes
  // the CUDA context and the collectives' buffers off too (1.79 GiB at TP 1, 3.58 at TP 2);
  // its profiling forward runs the whole unchunked budget, the model's 8,192-token context
  // (1.26 GiB measured, 1.03 here).
  {
    InferencePlan v0;
    v0.profile = io::select_engine_profile("vllm", "0.6.5", "/inference/engine");
    v0.engine.gpu_memory_utilization = 0.9;
    const InferenceMemory mem = inference_memory(m, system_of("h100-sxm5-80gb", 1), v0);
    EXPECT_NEAR(mem.kv_budget_bytes / gib / 53.29, 1.0, 0.015) << mem.kv_budget_bytes / gib;
    EXPECT_NEAR(mem.activation_peak_bytes / gib / 1.26, 1.0, 0.2) << mem.activation_peak_bytes / gib;
    EXPECT_NEAR(mem.non_torch_bytes / gib, 1.79, 1e-9);
    v0.tp = 2;
    EXPECT_NEAR(inference_memory(m, system_of("h100-sxm5-80gb", 2), v0).non_torch_bytes / gib, 3.58, 1e-9);
  }
  // The sampler's share does not shrink with tensor parallelism (the logits are gathered
  // whole on every rank), and before 0.17.0 it is 2.5 times as large.
  InferencePlan p;
  p.tp = 4;
  p.profile = io::select_engine_profile("vllm", "0.16.0", "/inference/engine");
  const double before = inference_memory(m, system_of("h100-sxm5-80gb", 4), p).activation_peak_bytes;
  EXPECT_NEAR(before / gib, 38.9 * 1024 * 128256 / gib, 1e-9);
  p.profile = io::select_engine_profile("vllm", "0.19.0", "/inference/engine");
  const InferenceMemory after = inference_memory(m, system_of("h100-sxm5-80gb", 4), p);
  EXPECT_NEAR(after.activation_peak_bytes / gib, 0.20 + 14.07 * 1024 * 128256 / gib, 1e-9);
  EXPECT_EQ(after.cudagraph_bytes, 0.0);
  p.profile = io::select_engine_profile("vllm", "0.21.0", "/inference/engine");
  EXPECT_NEAR(inference_memory(m, system_of("h100-sxm5-80gb", 4), p).cudagraph_bytes / gib, 1.04, 1e-9);
  // An engine built from its engine arguments keeps the scheduler's own batch limits.
  p.engine_context = true;
  const EngineDefaults d = p.profile.knobs.for_deployment("h100-sxm5-80gb", 85.52e9, true, true);
  EXPECT_EQ(d.max_num_seqs, 128);
  EXPECT_EQ(d.max_num_batched_tokens, 2048);
  EXPECT_EQ(p.profile.knobs.for_deployment("h100-sxm5-80gb", 85.52e9, true, false).max_num_seqs, 1024);
}

// SGLang gives its KV cache mem_fraction_static of the memory free before the weights,
// less the weights (model_runner.py profile_max_num_token): the activations live in the
// headroom, so unlike vLLM's share nothing of the activation peak comes off it.
TEST(Serving, SglangKvShareLeavesTheActivationsToTheHeadroom) {
  const ModelSpec m = io::load_model("llama3-70b");
  InferencePlan p;
  p.tp = 4;
  p.engine.gpu_memory_utilization = 0.85;
  p.profile = io::select_engine_profile("sglang", "0.4.6", "/inference/engine");
  ASSERT_TRUE(p.profile.knobs.activation_in_headroom);
  const InferenceMemory mem = inference_memory(m, system_of("h100-sxm5-80gb", 4), p);
  EXPECT_GT(mem.activation_peak_bytes, 0.0);
  EXPECT_NEAR(mem.kv_budget_bytes, 0.85 * mem.capacity_bytes - mem.weights_bytes - mem.non_torch_bytes, 1.0);
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.8.4", "/inference/engine").knobs.activation_in_headroom);
}

// TensorRT-LLM's fraction is of the memory still free once the weights, the activation
// buffers and the context are in place (KvCacheConfig.free_gpu_memory_fraction), all of it
// for the KV cache: more room than vLLM's share of the whole GPU when the weights are large.
TEST(Serving, FreeMemoryFractionIsOfWhatTheRestLeaves) {
  const ModelSpec m = io::load_model("llama3-70b");
  InferencePlan p;
  p.tp = 4;
  p.engine.gpu_memory_utilization = 0.9;
  EngineDefaults d;
  d.memory_fraction_of_free = true;
  const SystemSpec sys = system_of("h100-sxm5-80gb", 4);
  const InferenceMemory free = inference_memory(m, sys, p, &d);
  const double rest = free.weights_bytes + free.activation_peak_bytes + free.non_torch_bytes + free.cudagraph_bytes;
  EXPECT_NEAR(free.kv_budget_bytes, 0.9 * (free.capacity_bytes - rest), 1.0);
  d.memory_fraction_of_free = false;
  const InferenceMemory total = inference_memory(m, sys, p, &d);
  EXPECT_NEAR(total.kv_budget_bytes, 0.9 * total.capacity_bytes - rest, 1.0);
  EXPECT_NEAR(free.kv_budget_bytes - total.kv_budget_bytes, 0.1 * rest, 1.0);
  EXPECT_TRUE(io::select_engine_profile("trtllm", "1.0", "/inference/engine").knobs.memory_fraction_of_free);
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.8.4", "/inference/engine").knobs.memory_fraction_of_free);
}

// A fixed KV pool (kv_cache_tokens) is whole blocks of the tokens asked for, whatever the
// memory share, and fits only beside the weights and activations: Llama-2-7B FP16 on
// A100-80GB with LMDeploy's benchmark pool of 1000 blocks of 128 tokens.
TEST(Serving, FixedKvPoolIsWholeBlocksThatMustFit) {
  const ModelSpec m = io::load_model("llama2-7b");
  InferencePlan p;
  p.tp = 1;
  p.engine.block_size = 128;
  p.engine.gpu_memory_utilization = 0.5;  // ignored beside a fixed pool
  p.engine.kv_cache_tokens = 128000 + 100;
  const InferenceMemory mem = inference_memory(m, system_of("a100-sxm4-80gb", 1), p);
  EXPECT_TRUE(mem.fixed_pool);
  EXPECT_EQ(mem.num_blocks, 1000);
  EXPECT_EQ(mem.max_cached_tokens, 128000);
  EXPECT_DOUBLE_EQ(mem.kv_budget_bytes, 128000.0 * 524288.0);  // 2 x 32 layers x 4096 x 2 B a token
  EXPECT_TRUE(mem.fits);
  p.engine.kv_cache_tokens = 200000;  // 97.7 GiB of KV on an 80 GB part
  EXPECT_FALSE(inference_memory(m, system_of("a100-sxm4-80gb", 1), p).fits);
}

}  // namespace
}  // namespace capsim

namespace capsim {
namespace {

// DualPipe (DeepSeek-V3 report, Table 2) holds two stages' parameters on every rank and
// PP + 1 microbatches of one chunk's activations.
TEST(Pipeline, DualPipeDoublesParametersAndHoldsPpPlusOne) {
  const ModelSpec m = io::load_model("llama2-7b");
  TrainingPlan t;
  t.pp = 4;
  t.dp = 1;
  t.micro_batch = 1;
  t.global_batch = 16;
  t.seq_len = 4096;
  t.recompute = Recompute::full;
  const TrainingMemory one = training_memory(m, system_of("h100-sxm5-80gb", 4), t);
  t.schedule = Schedule::dualpipe;
  const TrainingMemory dual = training_memory(m, system_of("h100-sxm5-80gb", 4), t);
  // Middle ranks hold no embedding or head: exactly twice the parameters.
  EXPECT_DOUBLE_EQ(dual.stages[1].params, 2.0 * one.stages[1].params);
  EXPECT_DOUBLE_EQ(dual.stages[1].weights_bytes, 2.0 * one.stages[1].weights_bytes);
  for (const auto& s : dual.stages) EXPECT_EQ(s.inflight_microbatches, 5);
  // One chunk is a stage's 8 layers: 5 microbatches of them.
  EXPECT_DOUBLE_EQ(dual.stages[1].activations_bytes, one.stages[1].activations_bytes / 3.0 * 5.0);
}

}  // namespace
}  // namespace capsim

namespace capsim {
namespace {

// Multi-token prediction (DeepSeek-V3 report Sec. 2.2; config.json num_nextn_predict_layers):
// the module takes the place of a layer in the last stage, as Megatron-LM's DeepSeek-V3
// layout "Et|(tt|)*30mL" places it, and on that stage adds exactly its block's parameters,
// eh_proj (2h x h), three RMSNorms and a copy of the embedding.
TEST(MultiTokenPrediction, LastStageHoldsTheModule) {
  const ModelSpec m = io::load_model("deepseek-v3");
  EXPECT_EQ(m.mtp_layers, 1);
  std::vector<int64_t> expect(16, 4);
  expect.front() = 3;
  expect.back() = 2;
  EXPECT_EQ(split_layers(61, 16, 1), expect);
  std::vector<int64_t> layout(32, 2);  // Et|(tt|)*30mL
  layout.front() = 1;
  layout.back() = 0;
  EXPECT_EQ(split_layers(61, 32, 1), layout);

  TrainingPlan t;
  t.pp = 16;
  t.dp = 8;
  t.ep = 64;
  t.zero = 1;
  t.micro_batch = 1;
  t.global_batch = 8 * 32;
  t.seq_len = 4096;
  t.precision = DType::fp8;
  t.stage_layers = expect;  // the same split with and without the module
  ModelSpec none = m;
  none.mtp_layers = 0;
  const SystemSpec sys = system_of("h800-sxm5-80gb", 2048);
  const TrainingMemory with = training_memory(m, sys, t);
  const TrainingMemory without = training_memory(none, sys, t);
  for (size_t r = 0; r + 1 < with.stages.size(); ++r) EXPECT_DOUBLE_EQ(with.stages[r].total_bytes, without.stages[r].total_bytes);
  const LayerParams lp = layer_params(m, 60);
  const double h = static_cast<double>(m.hidden);
  const double expected = static_cast<double>(lp.total() - lp.routed_experts) + static_cast<double>(lp.routed_experts) / 64.0 +
                          2.0 * h * h + 3.0 * h + static_cast<double>(m.vocab) * h;
  EXPECT_DOUBLE_EQ(with.stages.back().params - without.stages.back().params, expected);
  EXPECT_GT(with.stages.back().activations_bytes, without.stages.back().activations_bytes);
}

// Megatron-Core applies the routing probabilities inside the experts' fused activation, so
// its combine keeps no expert outputs; PyTorch-native MoE weights the returned outputs and
// keeps their top-k bf16 copies per token for the probabilities' gradient.
TEST(MoeCombine, MegatronKeepsNoExpertOutputs) {
  const ModelSpec m = io::load_model("deepseek-v3");
  TrainingPlan t;
  t.precision = DType::bf16;
  ShardContext sc;
  sc.micro_batch = 1;
  sc.seq_len = 4096;
  t.framework = Framework::megatron;
  const LoweringOptions mg = lowering_options(m, t);
  t.framework = Framework::pytorch;
  const LoweringOptions pt = lowering_options(m, t);
  EXPECT_TRUE(mg.probs_in_activation);
  EXPECT_FALSE(pt.probs_in_activation);
  const double a = layer_activation_bytes(lower_layer(m, 3, mg), mg, m, sc) / 4096.0;
  const double b = layer_activation_bytes(lower_layer(m, 3, pt), pt, m, sc) / 4096.0;
  EXPECT_DOUBLE_EQ(b - a, static_cast<double>(m.moe->top_k * m.hidden) * 2.0);
  // Dense layers have no combine.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(lower_layer(m, 0, mg), mg, m, sc),
                   layer_activation_bytes(lower_layer(m, 0, pt), pt, m, sc));
}

// DualPipe's PP + 1 microbatches split by direction: rank r's own chunk (stage r) holds
// pp - r of them as 1F1B's stage r does, the reverse direction's stage pp-1-r holds r + 1.
// The end ranks therefore hold 1F1B's first stage plus its last stage.
TEST(Pipeline, DualPipeEndRanksHoldFirstStageFullAndLastStageOnce) {
  const ModelSpec m = io::load_model("llama2-7b");
  TrainingPlan t;
  t.pp = 4;
  t.dp = 1;
  t.micro_batch = 1;
  t.global_batch = 16;
  t.seq_len = 4096;
  t.recompute = Recompute::selective;
  const TrainingMemory one = training_memory(m, system_of("h100-sxm5-80gb", 4), t);
  t.schedule = Schedule::dualpipe;
  const TrainingMemory dual = training_memory(m, system_of("h100-sxm5-80gb", 4), t);
  EXPECT_DOUBLE_EQ(dual.stages[0].activations_bytes, one.stages[0].activations_bytes + one.stages[3].activations_bytes);
  EXPECT_DOUBLE_EQ(dual.stages[3].activations_bytes, dual.stages[0].activations_bytes);
  EXPECT_EQ(dual.stages[0].inflight_microbatches, 5);
}


// Megatron-Core's all-to-all dispatcher moves the routed copies twice each way when an
// expert-parallel rank holds several experts (permutation 1 by destination rank, then
// sort_chunks_by_idxs by local expert; the combine undoes both); DeepEP under DualPipe, a
// rank with one expert, no expert parallelism and the PyTorch stacks make one pass.
TEST(MoeDispatch, MegatronAllToAllSortsByLocalExpertAfterTheExchange) {
  const ModelSpec m = io::load_model("deepseek-v3");
  TrainingPlan t;
  t.precision = DType::bf16;
  t.framework = Framework::megatron;
  auto passes = [&](int64_t ep, Schedule s, Framework f) {
    t.ep = ep;
    t.schedule = s;
    t.framework = f;
    return lowering_options(m, t).moe_permute_passes;
  };
  EXPECT_EQ(passes(8, Schedule::one_f_one_b, Framework::megatron), 2);
  EXPECT_EQ(passes(64, Schedule::one_f_one_b, Framework::megatron), 2);
  EXPECT_EQ(passes(1, Schedule::one_f_one_b, Framework::megatron), 1);
  EXPECT_EQ(passes(256, Schedule::one_f_one_b, Framework::megatron), 1);
  EXPECT_EQ(passes(8, Schedule::dualpipe, Framework::megatron), 1);
  EXPECT_EQ(passes(8, Schedule::one_f_one_b, Framework::pytorch), 1);
  // Each pass reads and writes the top-k 16-bit copies of every token.
  auto dispatch_bytes = [&](int64_t ep) {
    t.ep = ep;
    t.schedule = Schedule::one_f_one_b;
    t.framework = Framework::megatron;
    const LoweringOptions o = lowering_options(m, t);
    double dispatch = 0, combine = 0;
    for (const Op& op : lower_layer(m, 3, o)) {
      if (op.name == "token_dispatch") dispatch = op.bytes_per_token;
      if (op.name == "token_combine") combine = op.bytes_per_token;
    }
    EXPECT_DOUBLE_EQ(dispatch, combine);
    return dispatch;
  };
  const double one = 2.0 * static_cast<double>(m.hidden) * 2.0 * static_cast<double>(m.moe->top_k);
  EXPECT_DOUBLE_EQ(dispatch_bytes(1), one);
  EXPECT_DOUBLE_EQ(dispatch_bytes(8), 2.0 * one);
}

}  // namespace
}  // namespace capsim
