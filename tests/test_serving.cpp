// Serving: iteration-latency oracles and request-level identities.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <tuple>

#include "capsim/core/serving.hpp"
#include "capsim/hw/roofline.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/engines.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"

#include <nlohmann/json.hpp>

namespace capsim {
namespace {

Scenario serving_scenario(const std::string& model, const std::string& gpu, int64_t tp, ServingWorkload::Mode mode) {
  Scenario s;
  s.model = io::load_model(model);
  s.system.gpu = io::load_gpu(gpu);
  s.system.num_gpus = tp;
  s.system.gpus_per_node = 8;
  s.system.nic_gbps_per_gpu = 400;
  InferencePlan p;
  p.tp = tp;
  p.workload.mode = mode;
  p.workload.qps = 4;
  p.workload.concurrency = 16;
  p.workload.num_requests = 400;
  p.workload.input_tokens = {LengthDist::Kind::sharegpt, 227, 0, 0};
  p.workload.output_tokens = {LengthDist::Kind::sharegpt, 194, 0, 0};
  s.inference = p;
  return s;
}

/// Llama 2 7B on one A100 with a KV pool of `kv_tokens` in 16-token blocks: `n` requests of
/// fixed `input` and `output` tokens, all at once.
Scenario small_pool(int64_t n, int64_t input, int64_t output, int64_t kv_tokens) {
  Scenario s = serving_scenario("llama2-7b", "a100-sxm4-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->workload.num_requests = n;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, static_cast<double>(input), 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, static_cast<double>(output), 0, 0};
  s.inference->engine.kv_cache_tokens = kv_tokens;
  s.inference->engine.block_size = 16;
  return s;
}

/// The roofline, except that an all-to-all takes 1,000 s: shows whether a step runs one.
class SlowAllToAll : public CostModel {
 public:
  explicit SlowAllToAll(const SystemSpec& sys) : base_(sys) {}
  Seconds gemm(int64_t m, int64_t n, int64_t k, DType d, int64_t b) const override { return base_.gemm(m, n, k, d, b); }
  Seconds gemm_compute(int64_t m, int64_t n, int64_t k, DType d, int64_t b) const override {
    return base_.gemm_compute(m, n, k, d, b);
  }
  Seconds attention(const AttentionShape& a, bool bwd) const override { return base_.attention(a, bwd); }
  Seconds memory_bound(Bytes bytes) const override { return base_.memory_bound(bytes); }
  Seconds collective(CollectiveKind kind, Bytes bytes, const Group& g) const override {
    return kind == CollectiveKind::all_to_all ? Seconds(1000.0) : base_.collective(kind, bytes, g);
  }
  Seconds p2p(Bytes bytes, bool cross_node) const override { return base_.p2p(bytes, cross_node); }
  std::vector<std::pair<std::string, std::string>> provenance() const override { return base_.provenance(); }

 private:
  hw::RooflineCostModel base_;
};

// Expert parallel behind tensor-parallel attention moves no tokens: every rank holds every
// token after attention's all-reduce and the experts' partial outputs are summed by the
// layer's second all-reduce (vLLM's FusedMoE). Behind attention DP each rank holds only its
// own tokens, which are dispatched and combined by two all-to-alls per MoE layer.
TEST(Serving, ExpertParallelBehindTensorParallelAttentionRunsNoAllToAll) {
  Scenario s = serving_scenario("qwen3-30b-a3b", "h100-sxm5-80gb", 2, ServingWorkload::Mode::offline);
  s.inference->ep = 2;
  const SlowAllToAll cost(s.system);
  IterationBatch b;
  b.decodes = 64;
  b.decode_context = 1024;
  EXPECT_LT(IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b), 1.0);
  s.inference->attention_dp = true;
  const double moe_layers = static_cast<double>(s.model.layers);  // every Qwen3-30B-A3B layer routes
  EXPECT_GE(IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b), moe_layers * 2.0 * 1000.0);
}

// TensorRT-LLM's CutlassFusedMoE behind attention DP gathers every rank's tokens instead of
// dispatching them (fused_moe_cutlass.py): an all-gather of the hidden states (8-bit under
// per-tensor FP8, 16-bit under block-scaled FP8) with each token's top-k expert ids (int32)
// and weights (fp32), and a reduce-scatter of the 16-bit outputs; no all-to-all. Qwen3-30B-
// A3B (hidden 2048, top-8) on 2 GPUs, 64 decodes: all-gather of 64 x (2048 + 64) B and
// reduce-scatter of 64 x 2048 x 2 B per MoE layer.
TEST(Serving, GatheringEngineRunsNoAllToAllBehindAttentionDp) {
  Scenario s = serving_scenario("qwen3-30b-a3b", "h100-sxm5-80gb", 2, ServingWorkload::Mode::offline);
  s.inference->ep = 2;
  s.inference->attention_dp = true;
  s.inference->weight_dtype = s.inference->activation_dtype = DType::fp8;
  s.inference->profile = io::select_engine_profile("trtllm", "1.0", "/inference/engine");
  ASSERT_TRUE(s.inference->profile.knobs.moe_dp_gathers_tokens);
  IterationBatch b;
  b.decodes = 64;
  b.decode_context = 64.0 * 1000.0;
  const SlowAllToAll slow(s.system);
  const hw::RooflineCostModel cost(s.system);
  const double exchange = IterationModel(s.model, s.system, *s.inference, slow).parts(b).expert_exchange;
  Group ep;
  ep.size = 2;
  ep.per_node = 2;
  const double layers = 48.0;
  const double gather = cost.collective(CollectiveKind::all_gather, Bytes(64.0 * (2048.0 + 8.0 * 8.0)), ep).value;
  const double scatter = cost.collective(CollectiveKind::reduce_scatter, Bytes(64.0 * 2048.0 * 2.0), ep).value;
  EXPECT_NEAR(exchange, layers * (gather + scatter), 1e-12);
  // Block-scaled FP8 gathers the 16-bit hidden states: the fused kernel quantizes them.
  s.inference->fp8_block_scaling = true;
  const double block = IterationModel(s.model, s.system, *s.inference, slow).parts(b).expert_exchange;
  const double gather16 = cost.collective(CollectiveKind::all_gather, Bytes(64.0 * (2048.0 * 2.0 + 8.0 * 8.0)), ep).value;
  EXPECT_NEAR(block, layers * (gather16 + scatter), 1e-12);
  // Experts split over the group (ep 1) are fed the same way.
  s.inference->ep = 1;
  EXPECT_NEAR(IterationModel(s.model, s.system, *s.inference, slow).parts(b).expert_exchange,
              layers * (gather16 + scatter), 1e-12);
  s.inference->ep = 2;
  // The same deployment on an engine that dispatches runs the two all-to-alls.
  s.inference->profile.knobs.moe_dp_gathers_tokens = false;
  EXPECT_GE(IterationModel(s.model, s.system, *s.inference, slow).parts(b).expert_exchange, 1000.0);
}

// ep "auto" is the fastest of experts split inside the tp group (ep 1) and whole experts
// spread over it (ep = tp): the run equals the faster of the two runs with ep stated.
TEST(Serving, AutoExpertParallelismIsTheFasterLayout) {
  Scenario s = serving_scenario("qwen3-30b-a3b", "h100-sxm5-80gb", 2, ServingWorkload::Mode::offline);
  s.inference->workload.num_requests = 200;
  const hw::RooflineCostModel cost(s.system);
  s.inference->ep = std::nullopt;
  const ServingResult chosen = simulate_serving(s, cost);
  double rate[3] = {0, 0, 0};
  for (int64_t ep : {1, 2}) {
    s.inference->ep = ep;
    const ServingResult r = simulate_serving(s, cost);
    double tokens = 0;
    for (const auto& q : r.requests) tokens += static_cast<double>(q.output);
    rate[ep] = tokens / r.duration_s;
    if (ep == chosen.ep) {
      EXPECT_EQ(r.duration_s, chosen.duration_s);
    }
  }
  EXPECT_EQ(chosen.ep, rate[2] > rate[1] * 1.001 ? 2 : 1);
}

// Every request: end-to-end latency = TTFT + TPOT x (output - 1), exactly.
TEST(Serving, EndToEndIsTtftPlusTpot) {
  for (auto mode : {ServingWorkload::Mode::poisson, ServingWorkload::Mode::offline, ServingWorkload::Mode::concurrency}) {
    const Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, mode);
    const hw::RooflineCostModel cost(s.system);
    const ServingResult r = simulate_serving(s, cost, kServingSeed, false, TokenGaps::per_request);
    ASSERT_EQ(r.requests.size(), 400u);
    for (const auto& q : r.requests) {
      EXPECT_GT(q.ttft(), 0.0);
      EXPECT_DOUBLE_EQ(q.e2e(), q.ttft() + q.tpot() * static_cast<double>(q.output - 1));
      EXPECT_EQ(static_cast<int64_t>(q.itl.size()), q.output - 1);
    }
  }
}

// The GEMM price memo never changes a step: random iterations priced in one order on one
// model, in the reverse order on another (their memos then hold different shapes when each
// is asked) and each on a fresh model (a cold memo) take the same seconds, bit for bit, for
// a dense model on A100 and DeepSeek-V3 in block FP8 on H200 (experts, router and head).
TEST(Serving, GemmMemoDoesNotChangeAStep) {
  Scenario deepseek = serving_scenario("deepseek-v3", "h200-sxm-141gb", 8, ServingWorkload::Mode::offline);
  deepseek.inference->weight_dtype = deepseek.inference->activation_dtype = DType::fp8;
  for (const Scenario& s : {serving_scenario("llama3-8b", "a100-sxm4-80gb", 1, ServingWorkload::Mode::offline), deepseek}) {
    const hw::RooflineCostModel cost(s.system);
    std::mt19937_64 rng(11);
    std::vector<IterationBatch> batches(600);
    for (IterationBatch& b : batches) {
      b.decodes = static_cast<int64_t>(rng() % 300);
      b.decode_context = static_cast<double>(b.decodes) * static_cast<double>(1 + rng() % 4000);
      if (rng() % 3 == 0 || b.decodes == 0) {
        b.prefills.push_back({static_cast<int64_t>(1 + rng() % 5000), 0, true});
      }
    }
    const IterationModel forward(s.model, s.system, *s.inference, cost);
    const IterationModel backward(s.model, s.system, *s.inference, cost);
    std::vector<double> a(batches.size()), b(batches.size());
    for (size_t i = 0; i < batches.size(); ++i) a[i] = forward.gpu_seconds(batches[i]);
    for (size_t i = batches.size(); i-- > 0;) b[i] = backward.gpu_seconds(batches[i]);
    for (size_t i = 0; i < batches.size(); ++i) {
      EXPECT_EQ(a[i], b[i]) << i;
      if (i % 20 == 0) {
        EXPECT_EQ(a[i], IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(batches[i])) << i;
      }
    }
  }
}

// The run's gap tally lists exactly the gaps of every request's own list: the same count,
// the same percentiles bit for bit, the same mean to rounding; a run that keeps the tally
// alone has it unchanged and no per-request lists; and it holds fewer pairs than gaps (the
// sequences of a step share their gap: about one pair a step, at these small batches).
TEST(Serving, GapTallyMatchesThePerRequestGaps) {
  for (auto mode : {ServingWorkload::Mode::poisson, ServingWorkload::Mode::offline, ServingWorkload::Mode::concurrency}) {
    const Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, mode);
    const hw::RooflineCostModel cost(s.system);
    const ServingResult full = simulate_serving(s, cost, kServingSeed, false, TokenGaps::per_request);
    const ServingResult lean = simulate_serving(s, cost, kServingSeed, false, TokenGaps::tally);
    std::vector<double> all;
    for (const auto& q : full.requests) all.insert(all.end(), q.itl.begin(), q.itl.end());
    for (const auto& q : lean.requests) EXPECT_TRUE(q.itl.empty());
    ASSERT_EQ(full.token_gaps.total, static_cast<int64_t>(all.size()));
    EXPECT_EQ(lean.token_gaps.runs, full.token_gaps.runs);
    EXPECT_LT(full.token_gaps.runs.size() * 2, all.size());
    for (size_t i = 1; i < full.token_gaps.runs.size(); ++i)
      EXPECT_LT(full.token_gaps.runs[i - 1].first, full.token_gaps.runs[i].first);
    const std::vector<double> qs = {0.0, 0.1, 0.5, 0.9, 0.99, 1.0};
    std::vector<double> ms = all;
    for (double& g : ms) g *= 1e3;
    EXPECT_EQ(percentiles(full.token_gaps, 1e3, qs), percentiles(ms, qs));
    double sum = 0, tally_sum = 0;
    for (double g : ms) sum += g;
    for (const auto& [gap, count] : full.token_gaps.runs) tally_sum += static_cast<double>(count) * gap * 1e3;
    EXPECT_NEAR(tally_sum / static_cast<double>(ms.size()), sum / static_cast<double>(ms.size()), 1e-9 * sum / static_cast<double>(ms.size()));
  }
}

// The tally's compaction keeps every gap: adding more distinct values than it holds before
// merging gives the sorted, merged list.
TEST(Serving, GapTallyCompactionKeepsEveryGap) {
  GapTally t;
  std::vector<double> list;
  for (int64_t i = 0; i < 300000; ++i) {
    // 7919 is invertible modulo the prime 100003: every residue comes up, most three times.
    list.push_back(static_cast<double>((i * 7919) % 100003));
    t.add(list.back());
  }
  t.finish();
  EXPECT_EQ(t.total, 300000);
  ASSERT_EQ(t.runs.size(), 100003u);
  int64_t sum = 0;
  for (size_t i = 0; i < t.runs.size(); ++i) {
    EXPECT_EQ(t.runs[i].first, static_cast<double>(i));
    sum += t.runs[i].second;
  }
  EXPECT_EQ(sum, 300000);
  const std::vector<double> qs = {0.0, 0.25, 0.5, 0.99, 1.0};
  EXPECT_EQ(percentiles(t, 1.0, qs), percentiles(list, qs));
}

// Online clients reach an idle engine one by one: it starts a step on the first request it
// receives, and the others, sent at the same instant, wait for that step to end. An offline
// run queues every request before the engine's first step.
TEST(Serving, AnIdleEngineStartsOnTheFirstClientRequest) {
  for (auto mode : {ServingWorkload::Mode::concurrency, ServingWorkload::Mode::offline}) {
    Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, mode);
    s.inference->workload.concurrency = 8;
    s.inference->workload.num_requests = 8;
    s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 1024, 0, 0};
    s.inference->workload.output_tokens = {LengthDist::Kind::fixed, 4, 0, 0};
    // An engine that schedules when a step ends (ServingEngines.OverlappedHostAdmitsOneBatchLate
    // has the one that prepares the next batch during the step).
    s.inference->profile.knobs.host_overlaps_gpu = false;
    const hw::RooflineCostModel cost(s.system);
    const ServingResult r = simulate_serving(s, cost);
    ASSERT_EQ(r.requests.size(), 8u);
    const IterationModel im(s.model, s.system, *s.inference, cost);
    IterationBatch one;
    one.prefills.push_back({1024, 0, true});
    std::vector<double> ttft;
    for (const auto& q : r.requests) ttft.push_back(q.ttft());
    std::sort(ttft.begin(), ttft.end());
    // Every request first crosses the front end (EngineDefaults::request_overhead_s).
    const double front = r.engine.request_overhead_s;
    EXPECT_GT(front, 0.0);
    if (mode == ServingWorkload::Mode::offline) {
      EXPECT_DOUBLE_EQ(ttft.front(), ttft.back());
      EXPECT_GT(ttft.front(), front + im.seconds(one));
    } else {
      EXPECT_NEAR(ttft[0], front + im.seconds(one), 1e-12);
      // The other seven are prefilled together in the next step, beside the first's decode.
      IterationBatch rest;
      for (int i = 0; i < 7; ++i) rest.prefills.push_back({1024, 0, true});
      rest.decodes = 1;
      rest.decode_context = 1025;
      EXPECT_NEAR(ttft[1], front + im.seconds(one) + im.seconds(rest), 1e-9);
      EXPECT_DOUBLE_EQ(ttft[1], ttft[7]);
    }
  }
}

// At batch 1 a decode step streams the weights once: time ~ bytes / achievable bandwidth.
TEST(Serving, BatchOneDecodeIsBandwidthBound) {
  for (const char* model : {"llama3-8b", "llama3-70b"}) {
    Scenario s = serving_scenario(model, "h200-sxm-141gb", 1, ServingWorkload::Mode::offline);
    const hw::RooflineCostModel cost(s.system);
    const IterationModel im(s.model, s.system, *s.inference, cost);
    IterationBatch b;
    b.decodes = 1;
    b.decode_context = 128;
    const double t = im.gpu_seconds(b);  // the GPU's part; the engine's host time comes on top
    const double roofline = im.weight_bytes_per_gpu() / (s.system.gpu.hbm_bandwidth().value * s.system.gpu.efficiency.hbm.value);
    // Four GEMM kernels a layer (QKV, output, gate/up, down) and the head, each with the
    // GPU's fixed fill-and-drain time, and each layer's attention kernel with its own.
    const double gemm_kernels = 4.0 * static_cast<double>(s.model.layers) + 1.0;
    const double tails = gemm_kernels * s.system.gpu.efficiency.gemm_tail_us.value * 1e-6 +
                         static_cast<double>(s.model.layers) * s.system.gpu.efficiency.decode_attention_fixed_us.value * 1e-6;
    EXPECT_GT(tails, 0.0);
    EXPECT_GT(t, roofline + tails) << model;
    EXPECT_LT(t, 1.25 * roofline + tails) << model;  // plus the KV cache, norms and small kernels
  }
}

// The GPU idles between two dependent kernels, 1.3 us on Hopper even when a CUDA graph
// launches them (graph_kernel_gap_us): one gap for each kernel priced by its own duration.
// Llama 3 8B decodes run QKV, output, gate/up and down GEMMs and one attention kernel in
// each of 32 layers, then the head: 161 gaps, at any tensor parallelism (the all-reduces'
// figures hold their gaps). DeepSeek-V3 (MLA with a query LoRA: five projection GEMMs; 3
// dense layers, 58 with a router and an unfused shared expert) has 61 x 6 + 3 x 2 + 58 x 3
// + 1 = 547. An eager step has the same gaps and its host time on top; a GPU without the
// figure has none.
TEST(Serving, KernelsIdleTheGpuBetweenThem) {
  IterationBatch b;
  b.decodes = 4;
  b.decode_context = 4 * 512;
  for (int64_t tp : {1, 4}) {
    Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", tp, ServingWorkload::Mode::offline);
    const hw::RooflineCostModel cost(s.system);
    const double gap = s.system.gpu.efficiency.graph_kernel_gap_us.value * 1e-6;
    EXPECT_DOUBLE_EQ(gap, 1.3e-6);
    const StepParts graphed = IterationModel(s.model, s.system, *s.inference, cost).parts(b);
    EXPECT_NEAR(graphed.kernel_gaps, (32 * 5 + 1) * gap, 1e-15) << tp;
    EXPECT_EQ(graphed.eager_host, 0.0);
    s.inference->engine.cuda_graphs = false;
    const StepParts eager = IterationModel(s.model, s.system, *s.inference, cost).parts(b);
    EXPECT_EQ(eager.kernel_gaps, graphed.kernel_gaps);
    EXPECT_GT(eager.eager_host, 0.0);
  }
  Scenario d = serving_scenario("deepseek-v3", "h200-sxm-141gb", 8, ServingWorkload::Mode::offline);
  d.inference->profile = io::select_engine_profile("vllm", "0.11.0", "/inference/engine");
  const hw::RooflineCostModel dcost(d.system);
  EXPECT_NEAR(IterationModel(d.model, d.system, *d.inference, dcost).parts(b).kernel_gaps, 547 * 1.3e-6, 1e-15);
  Scenario a = serving_scenario("llama3-8b", "a100-sxm4-80gb", 1, ServingWorkload::Mode::offline);
  const hw::RooflineCostModel acost(a.system);
  EXPECT_EQ(IterationModel(a.model, a.system, *a.inference, acost).parts(b).kernel_gaps, 0.0);
}

// vLLM V1 captures each layer in graph pieces and runs the attention between them, so a
// graphed step idles at every layer's boundaries (15 us a layer, its PR #20059's ITL at
// 1 QPS); from 0.11.0 decode-only steps replay one whole graph (FULL_AND_PIECEWISE) and
// only steps with prompt tokens pay. An eager step pays its host time instead, and the
// other engines replay whole graphs.
TEST(Serving, PiecewiseGraphsIdleAtEachLayer) {
  IterationBatch decode;
  decode.decodes = 4;
  decode.decode_context = 4 * 512;
  IterationBatch mixed = decode;
  mixed.prefills.push_back({100, 0, true});
  auto gaps = [](const char* engine, const char* version, const IterationBatch& b, bool graphs) {
    Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
    s.inference->profile = io::select_engine_profile(engine, version, "/inference/engine");
    if (!graphs) s.inference->engine.cuda_graphs = false;
    const hw::RooflineCostModel cost(s.system);
    const IterationModel im(s.model, s.system, *s.inference, cost);
    // Less the kernels' own gaps: one a GEMM (4 a layer) and attention kernel, and the head.
    const double kernels = 32 * (4 + (b.decodes > 0) + !b.prefills.empty()) + 1;
    return im.parts(b).kernel_gaps - kernels * 1.3e-6;
  };
  EXPECT_NEAR(gaps("vllm", "0.8.4", decode, true), 32 * 15e-6, 1e-12);
  EXPECT_NEAR(gaps("vllm", "0.10.2", mixed, true), 32 * 15e-6, 1e-12);
  EXPECT_NEAR(gaps("vllm", "0.11.0", decode, true), 0.0, 1e-12);
  EXPECT_NEAR(gaps("vllm", "0.11.0", mixed, true), 32 * 15e-6, 1e-12);
  EXPECT_NEAR(gaps("vllm", "0.8.4", decode, false), 0.0, 1e-12);
  for (const auto& [engine, version] : {std::pair<const char*, const char*>{"vllm", "0.6.0"}, {"sglang", "0.4.5"},
                                        {"trtllm", "1.0"}, {"lmdeploy", "0.7.0"}})
    EXPECT_NEAR(gaps(engine, version, decode, true), 0.0, 1e-12) << engine;
  // A multi-head latent attention layer pays 50.8 us ((32.0 - 28.9) ms of TPOT over 61
  // layers, vLLM PR #42885): DeepSeek-V3's 547 kernel gaps plus 61 such boundaries, none
  // for a 0.11 decode step, and a profile without the figure charges the plain one. Before
  // 0.9.0 the attention op between the pieces also ran the rotary embedding (216 against
  // 149 us of host time, vLLM PR #17668): 50.8 x 216 / 149 = 73.6 us.
  auto mla_gaps = [&](const char* version, const IterationBatch& b, bool plain_only) {
    Scenario s = serving_scenario("deepseek-v3", "h200-sxm-141gb", 8, ServingWorkload::Mode::offline);
    s.inference->profile = io::select_engine_profile("vllm", version, "/inference/engine");
    if (plain_only)
      s.inference->profile.knobs.piecewise_graph_s_per_mla_layer = s.inference->profile.knobs.piecewise_graph_s_per_layer;
    const hw::RooflineCostModel cost(s.system);
    return IterationModel(s.model, s.system, *s.inference, cost).parts(b).kernel_gaps - 547 * 1.3e-6;
  };
  EXPECT_NEAR(mla_gaps("0.8.4", decode, false), 61 * 73.6e-6, 1e-12);
  EXPECT_NEAR(mla_gaps("0.10.2", decode, false), 61 * 50.8e-6, 1e-12);
  EXPECT_NEAR(mla_gaps("0.8.4", decode, true), 61 * 15e-6, 1e-12);
  EXPECT_NEAR(mla_gaps("0.11.0", decode, false), 0.0, 1e-12);
}

// A decode attention kernel over the cache takes the GPU's measured fixed time beyond its
// bytes at the stream rate (decode_attention_fixed_us), so one short sequence costs each
// layer that time, not a launch floor, and so does every batch: batched timings at 64
// sequences run that far above their bytes whether the kernel splits the keys or not. A GPU
// without the figure streams the bytes with the floor under them.
TEST(Serving, DecodeAttentionPaysItsKernelsFixedTime) {
  auto attention = [](const char* gpu, int64_t decodes, int64_t context, int64_t tp = 1) {
    Scenario s = serving_scenario("llama3-8b", gpu, tp, ServingWorkload::Mode::offline);
    const hw::RooflineCostModel cost(s.system);
    IterationBatch b;
    b.decodes = decodes;
    b.decode_context = static_cast<double>(decodes * context);
    return IterationModel(s.model, s.system, *s.inference, cost).parts(b).attention_kernels;
  };
  // Llama 3 8B: 8 KV heads of 128, 16-bit K and V: 4 KiB a token and layer; 32 layers.
  const double per_token = 8.0 * 128 * 2 * 2;
  for (const char* gpu : {"h100-sxm5-80gb", "h200-sxm-141gb"}) {
    const GpuSpec g = io::load_gpu(gpu);
    const double fixed = g.efficiency.decode_attention_fixed_us.value * 1e-6;
    const double rate = g.hbm_bandwidth().value * g.efficiency.hbm.value;
    ASSERT_GT(fixed, 10e-6) << gpu;
    for (const auto& [decodes, context] : {std::pair<int64_t, int64_t>{1, 1024}, {13, 2048}, {14, 2048}, {64, 2048}, {512, 1024}})
      EXPECT_NEAR(attention(gpu, decodes, context), 32 * (fixed + static_cast<double>(decodes * context) * per_token / rate), 1e-9)
          << gpu << " " << decodes;
    // Tensor parallel over 4 GPUs: 2 KV heads each, a quarter of the bytes.
    for (const int64_t decodes : {52, 53})
      EXPECT_NEAR(attention(gpu, decodes, 2048, 4), 32 * (fixed + static_cast<double>(decodes) * 2048.0 * per_token / 4.0 / rate), 1e-9) << gpu;
  }
  const GpuSpec a100 = io::load_gpu("a100-sxm4-80gb");
  EXPECT_EQ(a100.efficiency.decode_attention_fixed_us.value, 0.0);
  const hw::RooflineCostModel a100_cost(serving_scenario("llama3-8b", "a100-sxm4-80gb", 1, ServingWorkload::Mode::offline).system);
  EXPECT_NEAR(attention("a100-sxm4-80gb", 1, 1024), 32 * a100_cost.memory_bound(Bytes(1)).value, 1e-12);
  EXPECT_NEAR(attention("a100-sxm4-80gb", 64, 2048), 32 * a100_cost.memory_bound(Bytes(64 * 2048 * per_token)).value, 1e-12);
}

// A layer's small kernels (norms, rotary, the KV-cache write) each take at least the launch
// floor: at one decode token every one of them is floored, so the step's elementwise part
// is layers x kernels x floor. Llama 3 8B on vLLM runs four a layer (two residual norms,
// rotary, reshape_and_cache_flash); one fewer where the engine fuses rotary with the cache
// write, two fewer where its attention kernel does both. MLA adds its two latent norms,
// Qwen3 its per-head query and key norms.
TEST(Serving, EverySmallKernelOfALayerTakesALaunch) {
  IterationBatch b;
  b.decodes = 1;
  b.decode_context = 512;
  auto elementwise = [&](const char* model, const char* gpu, int64_t tp, std::optional<EngineDefaults::RopeKvWrite> rw) {
    Scenario s = serving_scenario(model, gpu, tp, ServingWorkload::Mode::offline);
    s.inference->profile = io::select_engine_profile("vllm", "0.8.4", "/inference/engine");
    EXPECT_EQ(s.inference->profile.knobs.rope_kv_write, EngineDefaults::RopeKvWrite::separate);
    if (rw) s.inference->profile.knobs.rope_kv_write = *rw;
    const hw::RooflineCostModel cost(s.system);
    const double floor = cost.memory_bound(Bytes(1)).value;
    return IterationModel(s.model, s.system, *s.inference, cost).parts(b).elementwise / floor;
  };
  using RW = EngineDefaults::RopeKvWrite;
  EXPECT_NEAR(elementwise("llama3-8b", "h100-sxm5-80gb", 1, std::nullopt), 32 * 4, 1e-9);
  EXPECT_NEAR(elementwise("llama3-8b", "h100-sxm5-80gb", 4, std::nullopt), 32 * 4, 1e-9);
  EXPECT_NEAR(elementwise("llama3-8b", "h100-sxm5-80gb", 1, RW::fused), 32 * 3, 1e-9);
  EXPECT_NEAR(elementwise("llama3-8b", "a100-sxm4-80gb", 1, RW::in_attention), 32 * 2, 1e-9);
  EXPECT_NEAR(elementwise("qwen3-8b", "h100-sxm5-80gb", 1, std::nullopt), 36 * 6, 1e-9);
  EXPECT_NEAR(elementwise("deepseek-v3", "h200-sxm-141gb", 8, std::nullopt), 61 * 6, 1e-9);
  // The engines say how they run them.
  EXPECT_EQ(io::select_engine_profile("trtllm", "1.0", "/e").knobs.rope_kv_write, RW::fused);
  EXPECT_EQ(io::select_engine_profile("lmdeploy", "0.2.0", "/e").knobs.rope_kv_write, RW::in_attention);
  EXPECT_EQ(io::select_engine_profile("lmdeploy", "0.7.0", "/e").knobs.rope_kv_write, RW::in_attention);
  EXPECT_EQ(io::select_engine_profile("sglang", "0.4.5", "/e").knobs.rope_kv_write, RW::separate);
  EXPECT_EQ(io::select_engine_profile("vllm", "0.5.3", "/e").knobs.rope_kv_write, RW::separate);
  // LMDeploy TurboMind from 0.7.2 adds the residual and normalizes inside its tensor-parallel
  // all-reduce: with its rotary and cache write inside attention, a layer at TP4 runs no
  // small kernel of its own, at TP1 its two norms.
  EXPECT_FALSE(io::select_engine_profile("lmdeploy", "0.7.1", "/e").knobs.residual_norm_in_all_reduce);
  for (const int64_t tp : {1, 4}) {
    Scenario l = serving_scenario("llama3-8b", "h100-sxm5-80gb", tp, ServingWorkload::Mode::offline);
    l.inference->profile = io::select_engine_profile("lmdeploy", "0.7.2", "/inference/engine");
    ASSERT_TRUE(l.inference->profile.knobs.residual_norm_in_all_reduce);
    const hw::RooflineCostModel cost(l.system);
    const double floor = cost.memory_bound(Bytes(1)).value;
    EXPECT_NEAR(IterationModel(l.model, l.system, *l.inference, cost).parts(b).elementwise, tp > 1 ? 0.0 : 32 * 2 * floor,
                1e-12);
  }
  // At prefill sizes the kernels move their bytes: two residual norms over the hidden
  // states (read and write the input and the residual), rotary over the 32 query and 8 key
  // heads, the cache write of 8 key and 8 value heads (read 16-bit, write 16-bit).
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->profile = io::select_engine_profile("vllm", "0.8.4", "/inference/engine");
  const hw::RooflineCostModel cost(s.system);
  IterationBatch p;
  p.prefills.push_back({.tokens = 8192, .cached = 0, .last = true});
  const double rate = 1e9 / cost.memory_bound(Bytes(1e9)).value;
  const double per_token = 2 * 4096 * 2 * 4 + (32 + 8) * 128 * 2 * 2 + 16 * 128 * 2 * 2;
  EXPECT_NEAR(IterationModel(s.model, s.system, *s.inference, cost).parts(p).elementwise, 32 * 8192 * per_token / rate,
              1e-9);
}

// vLLM quantizes a per-tensor FP8 (or W8A8) linear layer's 16-bit input in a kernel of its
// own (apply_fp8_linear: scaled_fp8_quant, then cutlass_scaled_mm; profile knob
// activation_quant): at one decode token each of a Llama layer's four GEMMs (qkv, o,
// gate_up, down) gains one floored pass; a MoE router, a 16-bit layer, gains none; BF16
// and block-scaled FP8 (quantized per token group already) are unchanged.
TEST(Serving, PerTensorFp8LayersQuantizeTheirInputFirst) {
  IterationBatch b;
  b.decodes = 1;
  b.decode_context = 512;
  auto parts = [&](const char* model, DType dt, bool separate) {
    Scenario s = serving_scenario(model, "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
    s.inference->profile = io::select_engine_profile("vllm", "0.8.4", "/inference/engine");
    EXPECT_TRUE(s.inference->profile.knobs.activation_quant_kernel);
    s.inference->profile.knobs.activation_quant_kernel = separate;
    s.inference->weight_dtype = s.inference->activation_dtype = dt;
    const hw::RooflineCostModel cost(s.system);
    return std::pair(IterationModel(s.model, s.system, *s.inference, cost).parts(b), cost.memory_bound(Bytes(1)).value);
  };
  const auto [fused, floor] = parts("llama3-8b", DType::fp8, false);
  const auto separate = parts("llama3-8b", DType::fp8, true).first;
  EXPECT_NEAR(separate.attention_projections - fused.attention_projections, 32 * 2 * floor, 1e-12);
  EXPECT_NEAR(separate.dense_mlp - fused.dense_mlp, 32 * 2 * floor, 1e-12);
  EXPECT_EQ(parts("llama3-8b", DType::bf16, true).first.gpu, parts("llama3-8b", DType::bf16, false).first.gpu);
  const StepParts moe_fused = parts("qwen3-30b-a3b", DType::fp8, false).first;
  const StepParts moe_separate = parts("qwen3-30b-a3b", DType::fp8, true).first;
  EXPECT_EQ(moe_separate.router, moe_fused.router);
  EXPECT_NEAR(moe_separate.attention_projections - moe_fused.attention_projections, 48 * 2 * floor, 1e-12);
  // The engines without a source for it keep the quantization in the producing kernel.
  EXPECT_FALSE(io::select_engine_profile("trtllm", "1.0", "/e").knobs.activation_quant_kernel);
  EXPECT_TRUE(io::select_engine_profile("vllm", "0.5.3", "/e").knobs.activation_quant_kernel);
}

// LMDeploy TurboMind ran a 16-bit gated MLP's gate and up projections as two GEMMs until
// 0.5 (w1, w3, then the activation; profile knob mlp_gate_up), one over both weights after:
// at one decode every layer pays one more GEMM's fixed time and the GPU's gap after it.
TEST(Serving, SeparateGateAndUpProjectionsRunTwoGemms) {
  IterationBatch b;
  b.decodes = 1;
  b.decode_context = 512;
  auto step = [&](const char* version) {
    Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
    s.inference->profile = io::select_engine_profile("lmdeploy", version, "/inference/engine");
    const hw::RooflineCostModel cost(s.system);
    return IterationModel(s.model, s.system, *s.inference, cost).parts(b);
  };
  EXPECT_TRUE(io::select_engine_profile("lmdeploy", "0.2.0", "/e").knobs.mlp_gate_up_separate);
  EXPECT_TRUE(io::select_engine_profile("lmdeploy", "0.4.1", "/e").knobs.mlp_gate_up_separate);
  EXPECT_FALSE(io::select_engine_profile("lmdeploy", "0.6.0", "/e").knobs.mlp_gate_up_separate);
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.8.4", "/e").knobs.mlp_gate_up_separate);
  const StepParts two = step("0.4.1"), one = step("0.6.0");
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  const GpuEfficiency& e = s.system.gpu.efficiency;
  EXPECT_NEAR(two.kernel_gaps - one.kernel_gaps, 32 * e.graph_kernel_gap_us.value * 1e-6, 1e-12);
  EXPECT_GE(two.dense_mlp - one.dense_mlp, 32 * e.gemm_tail_us.value * 1e-6 * 0.999);
  EXPECT_EQ(two.attention_projections, one.attention_projections);
  // Its int4 (AWQ) weights run one w1||w3 GEMM with the SiLU in the epilogue at every
  // release of the profile: no activation kernel, and no second GEMM even up to 0.4.
  auto int4 = [&](const char* version, bool in_gemm) {
    Scenario q = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
    q.inference->profile = io::select_engine_profile("lmdeploy", version, "/inference/engine");
    EXPECT_TRUE(q.inference->profile.knobs.int4_silu_in_gemm);
    q.inference->profile.knobs.int4_silu_in_gemm = in_gemm;
    q.inference->weight_dtype = DType::int4;
    const hw::RooflineCostModel cost(q.system);
    return std::pair(IterationModel(q.model, q.system, *q.inference, cost).parts(b), cost.memory_bound(Bytes(1)).value);
  };
  const auto [fused, floor] = int4("0.6.0", true);
  EXPECT_NEAR(int4("0.6.0", false).first.dense_mlp - fused.dense_mlp, 32 * floor, 1e-12);
  EXPECT_EQ(int4("0.4.1", true).first.dense_mlp, fused.dense_mlp);
  EXPECT_EQ(int4("0.4.1", true).first.kernel_gaps, fused.kernel_gaps);
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.8.4", "/e").knobs.int4_silu_in_gemm);
}

// DeepSeek's query and key-value down projections read the same hidden states; an engine
// that fuses them (SGLang from 0.4.6, TensorRT-LLM: profile knob mla_down_projections) runs
// one GEMM over both weights instead of two. At 4 decodes every one of the 61 layers saves
// at least one GEMM's fixed time and one read of the 7,168-wide activations (4 x 7,168 x 2
// bytes; exactly that where both GEMMs stream their weights, as cuBLASLt's narrow tiles and
// split K let them at 4 rows), and one kernel's gap.
TEST(Serving, FusedMlaDownProjectionsRunOneGemm) {
  Scenario d = serving_scenario("deepseek-v3", "h200-sxm-141gb", 8, ServingWorkload::Mode::offline);
  d.inference->profile = io::select_engine_profile("vllm", "0.8.4", "/inference/engine");
  ASSERT_FALSE(d.inference->profile.knobs.mla_fused_down_projections);
  const hw::RooflineCostModel cost(d.system);
  IterationBatch b;
  b.decodes = 4;
  b.decode_context = 4 * 512;
  const StepParts separate = IterationModel(d.model, d.system, *d.inference, cost).parts(b);
  d.inference->profile.knobs.mla_fused_down_projections = true;
  const StepParts fused = IterationModel(d.model, d.system, *d.inference, cost).parts(b);
  const GpuEfficiency& e = d.system.gpu.efficiency;
  const double rate = 1e9 / cost.memory_bound(Bytes(1e9)).value;
  EXPECT_GE(separate.attention_projections - fused.attention_projections,
            61 * (e.gemm_tail_us.value * 1e-6 + 4 * 7168 * 2 / rate) * (1.0 - 1e-12));
  EXPECT_NEAR(separate.kernel_gaps - fused.kernel_gaps, 61 * e.graph_kernel_gap_us.value * 1e-6, 1e-12);
  EXPECT_EQ(separate.routed_experts, fused.routed_experts);
  // The engines that fuse them say so; SGLang from the release after the change.
  EXPECT_TRUE(io::select_engine_profile("sglang", "0.5.7", "/e").knobs.mla_fused_down_projections);
  EXPECT_TRUE(io::select_engine_profile("sglang", "0.4.6", "/e").knobs.mla_fused_down_projections);
  EXPECT_FALSE(io::select_engine_profile("sglang", "0.4.5.post3", "/e").knobs.mla_fused_down_projections);
  EXPECT_TRUE(io::select_engine_profile("trtllm", "1.0", "/e").knobs.mla_fused_down_projections);
}

// The parts of a step (capsim infer --step-*) add up to the step the simulator charges, for
// dense, MoE (with and without expert parallel or attention DP), MLA and sliding-window
// models, over random mixes of decodes and prompt chunks.
TEST(Serving, StepPartsAddUpToTheStep) {
  struct Case {
    const char* model;
    const char* gpu;
    int64_t tp, ep;
    bool dp;
    DType dtype;
  };
  const Case cases[] = {{"llama3-8b", "h100-sxm5-80gb", 1, 1, false, DType::bf16},
                        {"llama3-70b", "h100-sxm5-80gb", 4, 1, false, DType::bf16},
                        {"mistral-7b", "a100-sxm4-80gb", 2, 1, false, DType::bf16},
                        {"gpt-oss-20b", "h100-sxm5-80gb", 2, 2, false, DType::bf16},
                        {"qwen3-30b-a3b", "h100-sxm5-80gb", 2, 1, false, DType::fp8},
                        {"deepseek-v3", "h200-sxm-141gb", 8, 1, false, DType::fp8},
                        {"deepseek-v3", "h200-sxm-141gb", 8, 8, false, DType::fp8},
                        {"deepseek-v3", "h200-sxm-141gb", 8, 8, true, DType::fp8}};
  std::mt19937_64 rng(7);
  for (const Case& c : cases) {
    Scenario s = serving_scenario(c.model, c.gpu, c.tp, ServingWorkload::Mode::offline);
    s.inference->ep = c.ep;
    s.inference->attention_dp = c.dp;
    s.inference->weight_dtype = s.inference->activation_dtype = c.dtype;
    const hw::RooflineCostModel cost(s.system);
    const IterationModel im(s.model, s.system, *s.inference, cost);
    for (int i = 0; i < 50; ++i) {
      IterationBatch b;
      b.decodes = std::uniform_int_distribution<int64_t>(0, 256)(rng);
      const int64_t context = std::uniform_int_distribution<int64_t>(1, 16384)(rng);
      b.decode_context = static_cast<double>(b.decodes * context);
      if (s.model.sliding_window > 0) {
        b.context_window = s.model.sliding_window;
        b.decode_window_context = static_cast<double>(b.decodes * std::min(context, s.model.sliding_window));
      }
      if (b.decodes == 0 || i % 3 == 0)
        b.prefills.push_back({std::uniform_int_distribution<int64_t>(1, 8192)(rng),
                              std::uniform_int_distribution<int64_t>(0, 8192)(rng), i % 2 == 0});
      const StepParts p = im.parts(b);
      const double sum = p.attention_projections + p.attention_kernels + p.elementwise + p.tp_all_reduce + p.dense_mlp +
                         p.routed_experts + p.router + p.shared_experts + p.expert_exchange + p.head + p.kernel_gaps +
                         p.eager_host;
      EXPECT_EQ(p.gpu, im.gpu_seconds(b)) << c.model;
      EXPECT_EQ(p.seconds, im.seconds(b)) << c.model;
      EXPECT_EQ(p.host, im.host_seconds(b)) << c.model;
      EXPECT_NEAR(sum, p.gpu, 1e-12 * p.gpu) << c.model << " step " << i;
      double listed = 0;  // the report's list of parts names every one of them
      for (const auto& [name, part] : kStepParts) listed += p.*part;
      EXPECT_NEAR(listed, sum, 1e-12 * sum) << c.model;
      for (double part : {p.attention_projections, p.attention_kernels, p.elementwise, p.tp_all_reduce, p.dense_mlp,
                          p.routed_experts, p.router, p.shared_experts, p.expert_exchange, p.head, p.kernel_gaps, p.eager_host})
        EXPECT_GE(part, 0.0) << c.model;
      // Every step idles between its kernels where the GPU has the gap measured, and a
      // graphed step with prompt tokens at its graph pieces' boundaries (vLLM V1's knobs:
      // decode-only steps are whole graphs); only an eager one adds host time.
      EXPECT_EQ(p.kernel_gaps > 0.0,
                s.system.gpu.efficiency.graph_kernel_gap_us.value > 0 || (im.replays_graph(b) && !b.prefills.empty()))
          << c.model;
      EXPECT_EQ(p.eager_host > 0.0, !im.replays_graph(b)) << c.model;
      // Dense models have no expert parts; a step without tensor parallelism no all-reduce;
      // no sequence emits a token without a decode or a prompt's last chunk.
      if (!s.model.moe) {
        EXPECT_EQ(p.routed_experts + p.router + p.shared_experts + p.expert_exchange, 0.0);
      }
      if (c.tp == 1) {
        EXPECT_EQ(p.tp_all_reduce, 0.0);
      }
      const bool emits = b.decodes > 0 || b.prefills.front().last;
      EXPECT_EQ(p.head > 0.0, emits) << c.model;
      // The expert exchange is attention DP's: without it the tensor-parallel all-reduce sums.
      EXPECT_EQ(p.expert_exchange > 0.0, c.dp) << c.model;
    }
  }
}

// An engine that turns NCCL's NVLS off (SGLang: NCCL_NVLS_ENABLE=0) pays the ring bus
// bandwidth for the all-reduces NCCL carries: a prompt step's large ones on 8x H100, while a
// small decode step's take the engine's own one-shot kernel either way.
TEST(Serving, NcclWithoutNvlsSlowsLargeAllReducesOnly) {
  Scenario s = serving_scenario("llama3-70b", "h100-sxm5-80gb", 8, ServingWorkload::Mode::offline);
  const hw::RooflineCostModel cost(s.system);
  IterationBatch prompt;
  prompt.prefills.push_back({8192, 0, true});
  IterationBatch decode;  // 64 KiB all-reduces: the one-shot kernel beats NCCL either way
  decode.decodes = 4;
  decode.decode_context = 4.0 * 2048.0;
  s.inference->profile.knobs.nccl_nvls = true;
  const IterationModel with(s.model, s.system, *s.inference, cost);
  s.inference->profile.knobs.nccl_nvls = false;
  const IterationModel without(s.model, s.system, *s.inference, cost);
  // 8192 tokens x 8192 hidden x 2 bytes: 128 MiB a call, two calls a layer.
  const double bytes = 8192.0 * 8192.0 * 2.0;
  Group ring{8, 8};
  ring.nvls = false;
  const double per_call = cost.collective(CollectiveKind::all_reduce, Bytes(bytes), ring).value -
                          cost.collective(CollectiveKind::all_reduce, Bytes(bytes), Group{8, 8}).value;
  EXPECT_GT(per_call, 0.0);
  EXPECT_NEAR(without.parts(prompt).tp_all_reduce - with.parts(prompt).tp_all_reduce,
              2.0 * static_cast<double>(s.model.layers) * per_call, 1e-9);
  EXPECT_EQ(without.parts(decode).tp_all_reduce, with.parts(decode).tp_all_reduce);
  // The profiles say so: SGLang off, vLLM at NCCL's default.
  for (const char* version : {"0.3.0", "0.4.5", "0.5.7"}) {
    EXPECT_FALSE(io::select_engine_profile("sglang", version, "/e").knobs.nccl_nvls) << version;
  }
  EXPECT_TRUE(io::select_engine_profile("vllm", "0.8.4", "/e").knobs.nccl_nvls);
}

// A run's time by part (the report's busy_by_part) adds up: the parts to the steps' GPU time,
// the steps, drafts and swap waits to the iterations' time on the timeline; drafts only with
// speculative decoding, swap waits only when KV blocks are swapped; nothing without the timeline.
TEST(Serving, BusyByPartAddsUpToTheRun) {
  auto check = [](const ServingResult& r, const char* what) {
    const BusyByPart& b = r.busy;
    const StepParts& p = b.steps;
    double parts = 0;
    for (const auto& [name, part] : kStepParts) parts += p.*part;
    EXPECT_NEAR(parts, p.gpu, 1e-9 * p.gpu) << what;
    EXPECT_GE(p.seconds, p.gpu) << what;
    EXPECT_NEAR(p.seconds + b.drafts_s + b.swaps_s, b.busy_s, 1e-9 * b.busy_s) << what;
    double timeline = 0;
    for (const auto& it : r.timeline) timeline += it.end - it.start;
    EXPECT_NEAR(b.busy_s, timeline, 1e-9 * timeline) << what;
    EXPECT_GT(b.busy_s, 0.0) << what;
  };
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->workload.num_requests = 64;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult plain = simulate_serving(s, cost, 7, true);
  check(plain, "plain");
  EXPECT_EQ(plain.busy.drafts_s, 0.0);
  EXPECT_EQ(plain.busy.swaps_s, 0.0);
  EXPECT_EQ(simulate_serving(s, cost, 7, false).busy.busy_s, 0.0);

  Scenario spec = s;
  spec.inference->speculative.k = 4;
  spec.inference->speculative.acceptance = 0.8;
  spec.inference->speculative.draft_cost_fraction = 0.05;
  const ServingResult drafted = simulate_serving(spec, cost, 7, true);
  check(drafted, "speculative");
  EXPECT_GT(drafted.busy.drafts_s, 0.0);

  Scenario multi = s;
  multi.inference->engine.scheduler_steps = 4;
  multi.inference->engine.chunked_prefill = false;
  check(simulate_serving(multi, cost, 7, true), "multi-step");

  Scenario swap = s;
  swap.inference->engine.gpu_memory_utilization = 0.24;
  swap.inference->engine.preemption = Preemption::swap;
  swap.inference->workload.num_requests = 48;
  swap.inference->workload.input_tokens = {LengthDist::Kind::fixed, 512, 0, 0};
  swap.inference->workload.output_tokens = {LengthDist::Kind::fixed, 512, 0, 0};
  const ServingResult swapped = simulate_serving(swap, cost, 7, true);
  check(swapped, "swap");
  EXPECT_GT(swapped.preemptions, 0);
  EXPECT_GT(swapped.busy.swaps_s, 0.0);
}

// Layers run eagerly add the engine's per-layer host time as a part of their own; a graph
// replay has none.
TEST(Serving, StepPartsShowTheEagerHostTime) {
  Scenario s = serving_scenario("gpt2", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  const hw::RooflineCostModel cost(s.system);
  IterationBatch b;
  b.decodes = 2;
  b.decode_context = 256;
  EXPECT_EQ(IterationModel(s.model, s.system, *s.inference, cost).parts(b).eager_host, 0.0);
  s.inference->engine.cuda_graphs = false;
  const IterationModel eager(s.model, s.system, *s.inference, cost);
  EXPECT_EQ(eager.parts(b).eager_host, eager.eager_host_seconds());
  EXPECT_NEAR(eager.parts(b).eager_host, 12 * 47e-6, 1e-12);
}

// A later chunk of a long prompt attends to the prompt already cached: only its attention
// kernels cost more; the projections, MLPs and all-reduces see the same tokens.
TEST(Serving, LaterPromptChunkPaysOnlyItsLongerAttention) {
  Scenario s = serving_scenario("llama3-70b", "h100-sxm5-80gb", 4, ServingWorkload::Mode::offline);
  const hw::RooflineCostModel cost(s.system);
  const IterationModel im(s.model, s.system, *s.inference, cost);
  IterationBatch first, later;
  first.prefills.push_back({8192, 0, true});
  later.prefills.push_back({8192, 24576, true});
  const StepParts a = im.parts(first), b = im.parts(later);
  EXPECT_GT(b.attention_kernels, a.attention_kernels);
  for (const auto& [name, part] : kStepParts)
    if (std::string(name) != "attention_kernels") {
      EXPECT_EQ(b.*part, a.*part) << name;
    }
  EXPECT_NEAR(b.gpu - a.gpu, b.attention_kernels - a.attention_kernels, 1e-12);
}

// With ep "auto" the step runs in the layout a run of the workload picks.
TEST(Serving, ServingStepTakesTheLayoutTheRunPicks) {
  Scenario s = serving_scenario("qwen3-30b-a3b", "h100-sxm5-80gb", 2, ServingWorkload::Mode::offline);
  s.inference->workload.num_requests = 64;
  s.inference->ep.reset();
  const hw::RooflineCostModel cost(s.system);
  IterationBatch b;
  b.decodes = 32;
  b.decode_context = 32.0 * 1000.0;
  const ServingResult run = simulate_serving(s, cost);
  const ServingStep step = serving_step(s, cost, b);
  EXPECT_EQ(step.ep, run.ep);
  EXPECT_EQ(step.attention_dp, run.attention_dp);
  Scenario fixed = s;
  fixed.inference->ep = run.ep;
  fixed.inference->attention_dp = run.attention_dp;
  EXPECT_EQ(step.parts.seconds, IterationModel(fixed.model, fixed.system, *fixed.inference, cost).seconds(b));
}

// A step that is not replayed as a CUDA graph adds the engine's host time per layer to
// its GPU time: 47 us per dense layer, 975 us per layer with routed experts (DeepSeek-V3:
// 3 dense + 58 MoE layers), or the user's measured figure for every layer.
TEST(Serving, EagerStepAddsHostTimePerLayer) {
  Scenario s = serving_scenario("gpt2", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->profile.knobs.host_overlaps_gpu = false;  // the step host time adds, hidden by nothing
  const hw::RooflineCostModel cost(s.system);
  IterationBatch b;
  b.decodes = 2;
  b.decode_context = 256;
  const double graphed = IterationModel(s.model, s.system, *s.inference, cost).seconds(b);
  s.inference->engine.cuda_graphs = false;
  EXPECT_NEAR(IterationModel(s.model, s.system, *s.inference, cost).seconds(b) - graphed, 12 * 47e-6, 1e-12);
  // With graphs on, a step larger than the largest captured size runs eagerly too.
  s.inference->engine.cuda_graphs = true;
  s.inference->engine.cuda_graph_max_tokens = 1;
  EXPECT_NEAR(IterationModel(s.model, s.system, *s.inference, cost).seconds(b) - graphed, 12 * 47e-6, 1e-12);
  s.inference->engine.cuda_graph_max_tokens = 2;
  EXPECT_DOUBLE_EQ(IterationModel(s.model, s.system, *s.inference, cost).seconds(b), graphed);
  // A measured figure replaces the defaults for every layer.
  s.inference->engine.cuda_graph_max_tokens = 1;
  s.inference->engine.eager_host_us_per_layer = 200;
  EXPECT_NEAR(IterationModel(s.model, s.system, *s.inference, cost).seconds(b) - graphed, 12 * 200e-6, 1e-12);

  // Without chunked prefill (vLLM V0) a prompt runs eagerly at any size; decodes replay.
  s.inference->engine.eager_host_us_per_layer.reset();
  s.inference->engine.cuda_graph_max_tokens = 512;
  IterationBatch prompt;
  prompt.prefills.push_back({100, 0, true});
  const double chunked = IterationModel(s.model, s.system, *s.inference, cost).seconds(prompt);
  s.inference->engine.chunked_prefill = false;
  // (The chunked engine replays the prompt step as graphs in pieces, 15 us a layer.)
  EXPECT_NEAR(IterationModel(s.model, s.system, *s.inference, cost).seconds(prompt) - chunked, 12 * (47e-6 - 15e-6), 1e-12);
  EXPECT_DOUBLE_EQ(IterationModel(s.model, s.system, *s.inference, cost).seconds(b), graphed);

  Scenario d = serving_scenario("deepseek-v3", "h200-sxm-141gb", 8, ServingWorkload::Mode::offline);
  const hw::RooflineCostModel dcost(d.system);
  const IterationModel graphs_on(d.model, d.system, *d.inference, dcost);
  EXPECT_NEAR(graphs_on.eager_host_seconds(), 3 * 47e-6 + 58 * 975e-6, 1e-12);
  IterationBatch prefill;
  prefill.prefills.push_back({513, 0, true});
  d.inference->engine.cuda_graph_max_tokens = 513;
  const double captured = IterationModel(d.model, d.system, *d.inference, dcost).seconds(prefill);
  // (The captured step pays the MLA layers' graph-piece boundaries, 50.8 us each.)
  EXPECT_NEAR(graphs_on.seconds(prefill) - captured, graphs_on.eager_host_seconds() - 61 * 50.8e-6, 1e-12);
}

// max_num_seqs "auto" on TensorRT-LLM runs the batch limits trtllm-bench computes
// (tuning.py calc_engine_setting), worked by hand for Llama-3-8B FP8 (8,030,261,248
// parameters, FP8 KV cache: 2 x 32 layers x 8 KV heads x 128 x 1 B = 65,536 B a token) on
// one H100 (NVML total 85,520,809,984 B) at KV fraction 0.9: KV room 69,741,493,862 B.
// 1000 in / 1000 out: 532.1 requests, cap 128 x ceil(532.1 / 128) = 640, budget 532.1 x 2
// = 1064 -> the 2048 floor (above 1000 + 640). 2048 in / 128 out: 489.1 requests -> 512;
// 489.1 x 17 = 8314 -> 1024 x 9 = 9216. A budget the scenario gives wins; an explicit cap
// turns the launcher off; each run keeps the first run's limits.
/// Llama-3-8B FP8 on one H100 under TensorRT-LLM with max_num_seqs "auto": 50 requests of
/// 1000 in / 1000 out.
Scenario trtllm_bench_llama3_8b() {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->profile = io::select_engine_profile("trtllm", "1.0", "/inference/engine");
  s.inference->weight_dtype = s.inference->activation_dtype = DType::fp8;
  s.inference->kv_dtype.reset();
  s.inference->engine.max_num_seqs_auto = true;
  s.inference->workload.num_requests = 50;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 1000, 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, 1000, 0, 0};
  return s;
}

TEST(Serving, AutoBatchLimitsAreTrtllmBenchs) {
  Scenario s = trtllm_bench_llama3_8b();
  ASSERT_TRUE(s.inference->profile.knobs.batch_limits_from_trtllm_bench);
  ASSERT_EQ(count_params(s.model).total, 8030261248);
  const hw::RooflineCostModel cost(s.system);
  ServingResult r = simulate_serving(s, cost);
  EXPECT_EQ(r.engine.max_num_seqs, 640);
  EXPECT_EQ(r.engine.max_num_batched_tokens, 2048);
  EXPECT_EQ(r.engine.cuda_graph_max_tokens, 640);
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 2048, 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, 128, 0, 0};
  r = simulate_serving(s, cost);
  EXPECT_EQ(r.engine.max_num_seqs, 512);
  EXPECT_EQ(r.engine.max_num_batched_tokens, 9216);
  s.inference->engine.max_num_batched_tokens = 4096;
  EXPECT_EQ(simulate_serving(s, cost).engine.max_num_batched_tokens, 4096);
  s.inference->engine.max_num_batched_tokens.reset();
  s.inference->engine.max_num_seqs = 100;
  r = simulate_serving(s, cost);
  EXPECT_EQ(r.engine.max_num_seqs, 100);
  EXPECT_EQ(r.engine.max_num_batched_tokens, 8192);  // the library's default
  s.inference->engine.max_num_seqs.reset();
  for (const ServingResult& run : simulate_serving_runs(s, cost)) {
    EXPECT_EQ(run.engine.max_num_seqs, 512);
    EXPECT_EQ(run.engine.max_num_batched_tokens, 9216);
  }
  // Weight-only INT4 is not among the quantizations it tunes for: the library's defaults.
  s.inference->weight_dtype = DType::int4;
  s.inference->activation_dtype = DType::bf16;
  r = simulate_serving(s, cost);
  EXPECT_EQ(r.engine.max_num_seqs, 2048);
  EXPECT_EQ(r.engine.max_num_batched_tokens, std::max<int64_t>(8192, 2048));
}

// trtllm-bench issues its dataset all at once or from a fixed number of clients
// (`throughput --concurrency`) and has no arrival rate, so requests arriving at a rate
// reach a server (trtllm-serve: BuildConfig's max_batch_size 2048, max_num_tokens 8192
// unless told), whose limits are the library's; a closed loop keeps trtllm-bench's.
TEST(Serving, AutoBatchLimitsUnderArrivalsAreTheServersDefaults) {
  Scenario s = trtllm_bench_llama3_8b();
  const hw::RooflineCostModel cost(s.system);
  s.inference->workload.mode = ServingWorkload::Mode::poisson;
  s.inference->workload.qps = 2.0;
  ASSERT_TRUE(s.inference->workload.rate_driven());
  ServingResult r = simulate_serving(s, cost);
  EXPECT_EQ(r.engine.max_num_seqs, 2048);
  EXPECT_EQ(r.engine.max_num_batched_tokens, 8192);
  EXPECT_EQ(r.launcher_max_num_batched_tokens, 0);
  s.inference->workload.mode = ServingWorkload::Mode::concurrency;
  s.inference->workload.concurrency = 16;
  ASSERT_FALSE(s.inference->workload.rate_driven());
  r = simulate_serving(s, cost);
  EXPECT_EQ(r.engine.max_num_seqs, 640);
  EXPECT_EQ(r.engine.max_num_batched_tokens, 2048);
  EXPECT_EQ(r.launcher_max_num_batched_tokens, 2048);
}

// One step of such a deployment is priced under the limits its run uses: trtllm-bench
// captures graphs up to its batch cap (640 at 1000/1000 above), so 600 decodes replay a
// graph where the library's own 128 would run them eagerly.
TEST(Serving, ServingStepRunsUnderTheLaunchersBatchLimits) {
  Scenario s = trtllm_bench_llama3_8b();
  const hw::RooflineCostModel cost(s.system);
  IterationBatch b;
  b.decodes = 600;
  b.decode_context = 600.0 * 1500.0;
  const ServingStep step = serving_step(s, cost, b);
  EXPECT_EQ(step.parts.eager_host, 0.0);
  EXPECT_TRUE(step.graph_replay);
  EXPECT_EQ(step.graph_max_tokens, 640);
  Scenario sized = s;
  sized.inference->attention_dp = false;
  sized.inference->engine.max_num_seqs = 640;
  sized.inference->engine.max_num_batched_tokens = 2048;
  EXPECT_EQ(step.parts.seconds, IterationModel(sized.model, sized.system, *sized.inference, cost).seconds(b));
  // A cap the scenario gives bounds the graphs instead: 600 decodes above 256 run eagerly.
  s.inference->engine.max_num_seqs = 256;
  const ServingStep capped = serving_step(s, cost, b);
  EXPECT_GT(capped.parts.eager_host, 0.0);
  EXPECT_FALSE(capped.graph_replay);
  EXPECT_EQ(capped.graph_max_tokens, 256);
}

// Under attention DP each rank's executor runs trtllm-bench's limits. Qwen3-30B-A3B FP8
// (30,532,122,624 parameters; 2 x 48 layers x max(2, 4) KV heads x 128 x 1 B = 49,152 B a
// token) on two H100s at 1000/1000: (2 x 85,520,809,984 - 30,532,122,624) x 0.9 B of KV room
// hold 1286.4 requests: a cap of 1536 and a budget of 2816 a rank, 3072 and 5632 in all.
TEST(Serving, AutoBatchLimitsApplyToEveryAttentionDpRank) {
  Scenario s = serving_scenario("qwen3-30b-a3b", "h100-sxm5-80gb", 2, ServingWorkload::Mode::offline);
  s.inference->profile = io::select_engine_profile("trtllm", "1.0", "/inference/engine");
  ASSERT_EQ(count_params(s.model).total, 30532122624);
  s.inference->weight_dtype = s.inference->activation_dtype = DType::fp8;
  s.inference->kv_dtype.reset();
  s.inference->ep = 2;
  s.inference->attention_dp = true;
  s.inference->engine.max_num_seqs_auto = true;
  s.inference->workload.num_requests = 40;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 1000, 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, 1000, 0, 0};
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost);
  EXPECT_EQ(r.engine.max_num_seqs, 3072);
  EXPECT_EQ(r.engine.max_num_batched_tokens, 5632);
}

// Elsewhere "auto" is what the engine runs when nobody sets it: its default for that
// release and GPU (vLLM's V0 256 on this run).
TEST(Serving, AutoMaxNumSeqsIsTheEngineDefaultWhereTheLauncherLeavesIt) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->workload.num_requests = 4000;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 128, 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, 128, 0, 0};
  s.inference->profile = io::select_engine_profile("vllm", "0.5.3", "/inference/engine");
  ASSERT_FALSE(s.inference->profile.knobs.batch_limits_from_trtllm_bench);
  s.inference->engine.max_num_seqs_auto = true;
  const hw::RooflineCostModel cost(s.system);
  EXPECT_EQ(simulate_serving(s, cost).engine.max_num_seqs, 256);
}

// trtllm-bench captures CUDA graphs up to the batch size it runs with (get_settings:
// cuda_graph_config max_batch_size = max_batch_size); a scenario's own capture size wins,
// and an engine whose profile does not say so keeps its default.
TEST(Serving, TrtllmBenchCapturesGraphsUpToItsBatch) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->profile = io::select_engine_profile("trtllm", "1.0", "/inference/engine");
  ASSERT_TRUE(s.inference->profile.knobs.cuda_graphs_follow_max_num_seqs);
  ASSERT_EQ(s.inference->profile.knobs.cuda_graph_max_tokens, 128);
  s.inference->engine.max_num_seqs = 1024;
  EXPECT_EQ(engine_defaults(*s.inference, s.model, s.system.gpu, 0).cuda_graph_max_tokens, 1024);
  s.inference->engine.max_num_seqs = 64;  // never below the library's own capture
  EXPECT_EQ(engine_defaults(*s.inference, s.model, s.system.gpu, 0).cuda_graph_max_tokens, 128);
  s.inference->engine.max_num_seqs = 1024;
  s.inference->engine.cuda_graph_max_tokens = 256;
  EXPECT_EQ(engine_defaults(*s.inference, s.model, s.system.gpu, 0).cuda_graph_max_tokens, 256);
  s.inference->engine.cuda_graph_max_tokens.reset();
  s.inference->profile = io::select_engine_profile("vllm", "0.8.4", "/inference/engine");
  EXPECT_FALSE(s.inference->profile.knobs.cuda_graphs_follow_max_num_seqs);
  EXPECT_EQ(engine_defaults(*s.inference, s.model, s.system.gpu, 0).cuda_graph_max_tokens,
            s.inference->profile.knobs.for_deployment(s.system.gpu.id, s.system.gpu.hbm_capacity_bytes, s.inference->llm_class)
                .cuda_graph_max_tokens);
}

// Small random workloads are replicated over consecutive seeds until 2,000 requests are
// simulated (at most 16 runs); each run is exactly the single run of its seed, and the
// report's metrics are the medians over the runs.
TEST(Serving, SmallRandomWorkloadsAreReplicated) {
  ServingWorkload w;
  w.mode = ServingWorkload::Mode::poisson;
  w.num_requests = 50;
  EXPECT_EQ(serving_replications(w), 16);
  w.num_requests = 500;
  EXPECT_EQ(serving_replications(w), 4);
  w.num_requests = 2000;
  EXPECT_EQ(serving_replications(w), 1);
  w.mode = ServingWorkload::Mode::offline;
  w.num_requests = 100;
  EXPECT_EQ(serving_replications(w), 1);  // fixed lengths at time 0: nothing is random
  w.input_tokens = {LengthDist::Kind::uniform, 100, 50, 150};
  EXPECT_EQ(serving_replications(w), 16);
  w.mode = ServingWorkload::Mode::trace;
  EXPECT_EQ(serving_replications(w), 1);

  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::poisson);
  s.inference->workload.num_requests = 700;  // three runs
  const hw::RooflineCostModel cost(s.system);
  const std::vector<ServingResult> runs = simulate_serving_runs(s, cost, 7);
  ASSERT_EQ(runs.size(), 3u);
  std::vector<double> p99;
  for (size_t i = 0; i < runs.size(); ++i) {
    const ServingResult one = simulate_serving(s, cost, 7 + i);
    EXPECT_DOUBLE_EQ(runs[i].duration_s, one.duration_s);
    p99.push_back(p99_latencies(one).first);
  }
  std::sort(p99.begin(), p99.end());
  EXPECT_LT(p99.front(), p99.back());  // the draws differ
  EXPECT_DOUBLE_EQ(p99_latencies(runs).first, p99[1]);
  const nlohmann::json report = io::serving_report(s, runs);
  EXPECT_DOUBLE_EQ(report["metrics"]["ttft_p99_ms"].get<double>(), p99[1]);
  EXPECT_EQ(report["run"]["replications"], 3);
}

/// The roofline model with every collective taking a fixed time.
class FixedCollectives final : public CostModel {
 public:
  FixedCollectives(const SystemSpec& s, double seconds) : base_(s), t_(seconds) {}
  Seconds gemm(int64_t m, int64_t n, int64_t k, DType d, int64_t b) const override { return base_.gemm(m, n, k, d, b); }
  Seconds gemm_compute(int64_t m, int64_t n, int64_t k, DType d, int64_t b) const override {
    return base_.gemm_compute(m, n, k, d, b);
  }
  Seconds attention(const AttentionShape& a, bool bwd) const override { return base_.attention(a, bwd); }
  Seconds memory_bound(Bytes b) const override { return base_.memory_bound(b); }
  Seconds collective(CollectiveKind, Bytes, const Group&) const override { return Seconds(t_); }
  Seconds p2p(Bytes b, bool x) const override { return base_.p2p(b, x); }
  std::vector<std::pair<std::string, std::string>> provenance() const override { return base_.provenance(); }

 private:
  hw::RooflineCostModel base_;
  double t_;
};

// A set cancel flag stops the replicated runs and the capacity search before their next
// simulated run; a clear flag changes nothing.
TEST(Serving, CancelFlagStopsRunsAndSearches) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::poisson);
  s.inference->workload.num_requests = 100;
  const hw::RooflineCostModel cost(s.system);
  std::atomic<bool> cancel{false};
  const std::vector<ServingResult> with_flag = simulate_serving_runs(s, cost, 7, false, &cancel);
  const std::vector<ServingResult> without = simulate_serving_runs(s, cost, 7);
  ASSERT_EQ(with_flag.size(), without.size());
  EXPECT_EQ(p99_latencies(with_flag), p99_latencies(without));
  const ServingSla sla;
  EXPECT_EQ(max_qps(s, cost, sla, 7, nullptr, &cancel), max_qps(s, cost, sla, 7));
  cancel = true;
  EXPECT_THROW(simulate_serving_runs(s, cost, 7, false, &cancel), ServingCancelled);
  EXPECT_THROW(meets_sla(s, cost, sla, 7, &cancel), ServingCancelled);
  EXPECT_THROW(max_qps(s, cost, sla, 7, nullptr, &cancel), ServingCancelled);
}

// A fixed KV pool larger than the GPU is a "does not fit" answer that names the pool and
// what else takes the memory; one that fits runs on exactly its blocks.
TEST(Serving, FixedKvPoolThatCannotFitIsAnAnswer) {
  Scenario s = serving_scenario("llama2-7b", "a100-sxm4-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->workload.num_requests = 50;
  const hw::RooflineCostModel cost(s.system);
  s.inference->engine.kv_cache_tokens = 9000000;
  try {
    simulate_serving(s, cost);
    FAIL() << "a 9M-token pool fitted";
  } catch (const ServingDoesNotFit& e) {
    EXPECT_NE(std::string(e.what()).find("no room for the KV cache: a pool of"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(kv_cache_tokens)"), std::string::npos) << e.what();
  }
  s.inference->engine.kv_cache_tokens = 4096;
  const ServingResult r = simulate_serving(s, cost);
  EXPECT_EQ(r.memory.max_cached_tokens, 4096);
  EXPECT_LE(r.peak_kv_utilization, 1.0);
}

// A request longer than the whole KV pool is a "does not fit" answer naming its length, the
// blocks it needs and those the replica has.
TEST(Serving, RequestLongerThanTheKvPoolIsAnAnswer) {
  Scenario s = small_pool(3, 5000, 100, 4096);
  const hw::RooflineCostModel cost(s.system);
  try {
    simulate_serving(s, cost);
    FAIL() << "a 5,100-token request ran in a 4,096-token pool";
  } catch (const ServingDoesNotFit& e) {
    EXPECT_EQ(std::string(e.what()),
              "a request cannot be scheduled: the longest, 5100 tokens with its output, needs 319 KV-cache blocks and a "
              "replica has 256 blocks of 16 tokens");
  }
}

// Two 32-token prompts making 100 tokens each in a pool of ten 16-token blocks: both hold
// 3 blocks after their prompts and grow in step to 5 each; at 48 tokens made the older one
// needs a sixth and the newer one (context 80, 79 tokens cached) stops. Recomputed, it later
// runs all 80 tokens again. Stopped partially, it gives up one block (keeping 64 cached
// tokens) and then one block each time the older one grows (blocks 7, 8 and 9), so it
// resumes with one block, 16 tokens, and runs 64: exactly one block fewer. The older
// request never waits, and finishes at the same time in both.
TEST(Serving, PartialPreemptionRecomputesOnlyTheBlocksTaken) {
  Scenario s = small_pool(2, 32, 100, 160);
  const hw::RooflineCostModel cost(s.system);
  auto prompt_tokens = [](const ServingResult& r) {
    int64_t sum = 0;
    for (const IterationRecord& it : r.timeline) sum += it.prefill_tokens;
    return sum;
  };
  s.inference->engine.preemption = Preemption::recompute;
  const ServingResult whole = simulate_serving(s, cost, 7, true, TokenGaps::per_request);
  s.inference->engine.preemption = Preemption::partial;
  const ServingResult part = simulate_serving(s, cost, 7, true, TokenGaps::per_request);
  EXPECT_EQ(part.engine.preemption, Preemption::partial);
  EXPECT_EQ(whole.preemptions, 1);
  EXPECT_EQ(part.preemptions, 1);
  EXPECT_EQ(prompt_tokens(whole), 2 * 32 + 80);
  EXPECT_EQ(prompt_tokens(part), 2 * 32 + 64);
  ASSERT_EQ(part.requests.size(), 2u);
  EXPECT_EQ(part.requests[0].finish, whole.requests[0].finish);
  EXPECT_LT(part.requests[1].finish, whole.requests[1].finish);
  for (const ServingResult* r : {&whole, &part}) {
    EXPECT_EQ(r->requests[1].preemptions, 1);
    EXPECT_EQ(r->requests[1].itl.size(), 99u);  // every token after the first, once
    EXPECT_LE(r->peak_kv_utilization, 1.0);
  }
}

// Where the stopped sequence's blocks go. Three prompts of 16, 8 and 400 tokens (2, 1 and
// 26 blocks of 16) fill a 29-block pool; at 8 tokens made the second needs a block and the
// third (408 tokens, 407 cached) stops. From then on the two others take one of its blocks
// at every 16 tokens they make: down to 14 blocks by 100 tokens made, when the second
// finishes and frees 7. The third needs 26 - 14 + 1 = 13 to resume, so it waits while the
// first grows from 8 blocks to the 20 its 316 tokens need. Partial (TurboMind): the first
// takes the 7 free blocks, then 5 of the stopped one's; it resumes with 9 blocks, 144
// tokens cached, and runs 264. Cached (vLLM V1's prefix cache, the stopped blocks the
// oldest to evict): the first takes all 12 from it; it resumes with 2 blocks, 32 tokens,
// and runs 376. Recompute runs all 408.
TEST(Serving, PreemptedBlocksGoToTheFreePoolOrToTheCache) {
  Scenario s = small_pool(3, 0, 0, 29 * 16);
  s.inference->workload.mode = ServingWorkload::Mode::trace;
  s.inference->workload.trace = {{0.0, 16, 300, "", 0}, {0.0, 8, 100, "", 0}, {0.0, 400, 10, "", 0}};
  const hw::RooflineCostModel cost(s.system);
  auto rerun_tokens = [&](Preemption p) {
    s.inference->engine.preemption = p;
    const ServingResult r = simulate_serving(s, cost, 7, true);
    EXPECT_EQ(r.preemptions, 1) << to_string(p);
    int64_t sum = 0;
    for (const IterationRecord& it : r.timeline) sum += it.prefill_tokens;
    return sum - (16 + 8 + 400);
  };
  EXPECT_EQ(rerun_tokens(Preemption::recompute), 408);
  EXPECT_EQ(rerun_tokens(Preemption::partial), 264);
  EXPECT_EQ(rerun_tokens(Preemption::cached), 376);
}

// Admission by estimated future tokens (SGLang's PrefillAdder): ten 100-token prompts asking
// for 500 tokens each, a pool of 100 blocks of 16 (1,600 tokens). A prompt joins only if
// its 100 tokens, its 500 output tokens and a block fit what is left: 1,600 -> 1,000 ->
// 400, so two start, where their blocks alone (7 each) would let all ten. The next step
// the two running hold 14 blocks and owe 499 tokens each at the starting ratio 0.7:
// 1,376 - 698.6 = 677.4 leaves room for one more. Without the estimate all ten start.
TEST(Serving, AdmissionReservesTheEstimatedOutputTokens) {
  Scenario s = small_pool(10, 100, 500, 1600);
  const hw::RooflineCostModel cost(s.system);
  const ServingResult plain = simulate_serving(s, cost, 7, true);
  ASSERT_FALSE(plain.timeline.empty());
  EXPECT_EQ(plain.timeline[0].prefill_tokens, 1000);
  EngineDefaults& k = s.inference->profile.knobs;
  k.admission_output_ratio_init = 0.7;
  k.admission_output_ratio_min = 0.098;
  k.admission_output_ratio_decay_steps = 600;
  const ServingResult estimated = simulate_serving(s, cost, 7, true);
  ASSERT_GE(estimated.timeline.size(), 2u);
  EXPECT_EQ(estimated.timeline[0].prefill_tokens, 200);
  EXPECT_EQ(estimated.timeline[1].prefill_tokens, 100);
  EXPECT_EQ(estimated.timeline[1].decodes, 2);
  EXPECT_EQ(estimated.requests.size(), 10u);
  for (const RequestResult& r : estimated.requests) EXPECT_GT(r.finish, 0.0);
  EXPECT_EQ(estimated.engine.admission_output_ratio_init, 0.7);
  // With partial preemption too, stopped sequences' blocks never keep the queue from
  // draining: every request of a pool too small for them all finishes.
  s.inference->engine.preemption = Preemption::partial;
  s.inference->workload.num_requests = 40;
  s.inference->workload.output_tokens = {LengthDist::Kind::uniform, 400, 100, 700};
  const ServingResult both = simulate_serving(s, cost, 7, false);
  EXPECT_GT(both.preemptions, 0);
  EXPECT_EQ(both.requests.size(), 40u);
  for (const RequestResult& r : both.requests) EXPECT_GT(r.finish, 0.0);
}

// The flag is also read inside one run: a long run stops within its first thousand or so
// events instead of finishing, also when the launcher sizes the batch limits first.
TEST(Serving, CancelFlagStopsOneLongRun) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::poisson);
  s.inference->workload.num_requests = 20000;
  const hw::RooflineCostModel cost(s.system);
  std::atomic<bool> cancel{true};
  EXPECT_THROW(simulate_serving(s, cost, 7, false, TokenGaps::none, &cancel), ServingCancelled);
  s.inference->engine.max_num_seqs.reset();
  s.inference->engine.max_num_seqs_auto = true;
  s.inference->profile.knobs.batch_limits_from_trtllm_bench = true;
  EXPECT_THROW(simulate_serving(s, cost, 7, false, TokenGaps::none, &cancel), ServingCancelled);
}

// Tensor-parallel all-reduces inside a node take the faster of NCCL and the engine's own
// kernel (H100: 13.2 us + 16.4 us/MiB); a GPU without that measurement, a group that spans
// nodes, or an engine without such a kernel uses NCCL.
TEST(Serving, TensorParallelAllReduceTakesTheFasterKernel) {
  Scenario s = serving_scenario("llama3-70b", "h100-sxm5-80gb", 8, ServingWorkload::Mode::offline);
  IterationBatch b;
  b.decodes = 64;
  b.decode_context = 64 * 1000;
  const double mib = 64.0 * 8192 * 2 / (1024.0 * 1024.0);
  const double custom = (13.2 + 16.4 * mib) * 1e-6;
  auto step = [&](const Scenario& sc, double collective) {
    const FixedCollectives cost(sc.system, collective);
    return IterationModel(sc.model, sc.system, *sc.inference, cost).seconds(b);
  };
  EXPECT_NEAR(step(s, 1.0) - step(s, 0.0), 2.0 * 80 * custom, 1e-9);  // NCCL slower: the engine kernel
  EXPECT_NEAR(step(s, 1e-6) - step(s, 0.0), 2.0 * 80 * 1e-6, 1e-9);   // NCCL faster: NCCL
  Scenario a = serving_scenario("llama3-70b", "a100-sxm4-80gb", 8, ServingWorkload::Mode::offline);
  EXPECT_NEAR(step(a, 1.0) - step(a, 0.0), 2.0 * 80 * 1.0, 1e-9);  // not measured on A100
  s.system.gpus_per_node = 4;  // TP 8 over two nodes
  EXPECT_NEAR(step(s, 1.0) - step(s, 0.0), 2.0 * 80 * 1.0, 1e-9);
  // An engine without its own kernel (LMDeploy TurboMind 0.2: ftNcclAllReduceSum) runs NCCL
  // inside the node too.
  s.system.gpus_per_node = 8;
  s.inference->profile = io::select_engine_profile("lmdeploy", "0.2.0", "/inference/engine");
  ASSERT_TRUE(s.inference->profile.knobs.tp_all_reduce_nccl_only);
  EXPECT_NEAR(step(s, 1.0) - step(s, 0.0), 2.0 * 80 * 1.0, 1e-9);
  // By release (the knob's by_release ranges): TurboMind's own kernels from 0.7.2 (PR #3163);
  // vLLM's custom all-reduce from 0.3.0 (PR #2192), off by default from 0.3.1 (PR #2808) until
  // 0.4.1 (PR #4040).
  const std::vector<std::pair<std::string, std::string>> nccl = {
      {"lmdeploy", "0.2.6"}, {"lmdeploy", "0.7.1"}, {"vllm", "0.2.7"}, {"vllm", "0.3.1"}, {"vllm", "0.4.0.post1"}};
  const std::vector<std::pair<std::string, std::string>> own = {
      {"lmdeploy", "0.7.2"}, {"lmdeploy", "0.7.3"}, {"lmdeploy", "main@abc (source build)"}, {"vllm", "0.3.0"},
      {"vllm", "0.4.1"},     {"vllm", "0.5.4"}};
  for (const auto& [engine, release] : nccl)
    EXPECT_TRUE(io::select_engine_profile(engine, release, "/inference/engine").knobs.tp_all_reduce_nccl_only) << engine << release;
  for (const auto& [engine, release] : own)
    EXPECT_FALSE(io::select_engine_profile(engine, release, "/inference/engine").knobs.tp_all_reduce_nccl_only) << engine << release;
}

// A prompt's attention runs the engine release's kernel class: FlashAttention-2 before the
// engine had Hopper kernels (vLLM < 0.7.0, SGLang < 0.4.3 on FlashInfer 0.1, TGI < 3.1.0,
// LMDeploy TurboMind always), FlashAttention-3 class after (and TensorRT-LLM). On H100 the
// step differs by exactly the layers' attention at the two kernels' rates; on A100, where
// both are FlashAttention-2, and for decodes, not at all.
TEST(Serving, PromptAttentionKernelFollowsTheEngineRelease) {
  const std::vector<std::pair<std::string, std::string>> fa2 = {
      {"vllm", "0.5.3"}, {"vllm", "0.6.6.post1"}, {"sglang", "0.3.0"}, {"sglang", "0.4.1"},
      {"tgi", "2.4.1"},  {"tgi", "3.0.2"},        {"lmdeploy", "0.2.0"}, {"lmdeploy", "0.6.0"}};
  const std::vector<std::pair<std::string, std::string>> fa3 = {
      {"vllm", "0.7.0"}, {"vllm", "0.8.4"}, {"sglang", "0.4.3"}, {"sglang", "0.5.7"}, {"tgi", "3.1.0"}, {"trtllm", "1.0"}};
  for (const auto& [engine, release] : fa2)
    EXPECT_TRUE(io::select_engine_profile(engine, release, "/inference/engine").knobs.prefill_attention_fa2) << engine << release;
  for (const auto& [engine, release] : fa3)
    EXPECT_FALSE(io::select_engine_profile(engine, release, "/inference/engine").knobs.prefill_attention_fa2) << engine << release;
  // A backend the source names sets the class where its name says it; others keep the release's.
  for (const auto& [release, backend, want] : std::vector<std::tuple<const char*, const char*, bool>>{
           {"0.8.4", "xformers", true}, {"0.8.4", "FA2", true}, {"0.8.4", "triton", true}, {"0.5.3", "fa3", false},
           {"0.5.3", "flashinfer", true}, {"0.8.4", "flashinfer", false}, {"0.8.4", "flash_attn", false}}) {
    nlohmann::json doc = {{"kind", "inference"},
                          {"model", "llama3-8b"},
                          {"system", {{"gpu", "h100-sxm5-80gb"}, {"num_gpus", 1}}},
                          {"inference",
                           {{"tp", 1},
                            {"engine", {{"name", "vllm"}, {"version", release}, {"attention_backend", backend}}},
                            {"workload", {{"mode", "offline"}, {"num_requests", 4}, {"input_tokens", 100}, {"output_tokens", 4}}}}}};
    EXPECT_EQ(io::scenario_from_json(doc).inference->profile.knobs.prefill_attention_fa2, want) << release << " " << backend;
  }

  for (const char* gpu : {"h100-sxm5-80gb", "a100-sxm4-80gb"}) {
    Scenario s = serving_scenario("llama3-8b", gpu, 1, ServingWorkload::Mode::offline);
    const hw::RooflineCostModel cost(s.system);
    IterationBatch prompt;
    prompt.prefills.push_back({8192, 0, true});
    IterationBatch decode;
    decode.decodes = 32;
    decode.decode_context = 32 * 4096;
    auto step = [&](bool fa2_kernel, const IterationBatch& b) {
      s.inference->profile.knobs.prefill_attention_fa2 = fa2_kernel;
      return IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
    };
    AttentionShape a;
    a.heads = s.model.heads;
    a.kv_heads = s.model.kv_heads;
    a.q_len = 8192;
    a.kv_len = 8192 / 2;  // causal: half the chunk on average
    a.causal = false;
    a.qk_dim = a.v_dim = s.model.head_dim;
    AttentionShape f2 = a;
    f2.kernel = AttentionKernel::flash2;
    const double per_layer = cost.attention(f2, false).value - cost.attention(a, false).value;
    EXPECT_NEAR(step(true, prompt) - step(false, prompt), static_cast<double>(s.model.layers) * per_layer, 1e-9) << gpu;
    EXPECT_EQ(step(true, decode), step(false, decode)) << gpu;
    if (std::string(gpu) == "h100-sxm5-80gb") EXPECT_GT(per_layer, 0.0);
    else EXPECT_EQ(per_layer, 0.0);
  }
}

// Goodput (vLLM benchmark_serving --goodput): requests whose TTFT and TPOT both meet the
// objectives, per second of the run; all of them under loose objectives, none under zero.
TEST(Serving, GoodputCountsRequestsWithinTheObjectives) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::poisson);
  s.inference->workload.qps = 30;
  s.inference->slo_ttft_ms = 60;
  s.inference->slo_tpot_ms = 12;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost);
  double good = 0, tokens = 0;
  for (const auto& q : r.requests)
    if (q.ttft() <= 0.060 && q.tpot() <= 0.012) {
      good += 1;
      tokens += static_cast<double>(q.output);
    }
  const nlohmann::json m = io::serving_metrics(r);
  EXPECT_GT(good, 0.0);
  EXPECT_LT(good, static_cast<double>(r.requests.size()));
  EXPECT_DOUBLE_EQ(m["slo_attainment"].get<double>(), good / static_cast<double>(r.requests.size()));
  EXPECT_DOUBLE_EQ(m["goodput_requests_per_s"].get<double>(), good / r.duration_s);
  EXPECT_DOUBLE_EQ(m["goodput_tokens_per_s"].get<double>(), tokens / r.duration_s);
  s.inference->slo_ttft_ms = 1e9;
  s.inference->slo_tpot_ms = 1e9;
  const nlohmann::json all = io::serving_metrics(simulate_serving(s, cost));
  EXPECT_DOUBLE_EQ(all["goodput_requests_per_s"].get<double>(), all["requests_per_s"].get<double>());
  s.inference->slo_ttft_ms = 0;
  EXPECT_DOUBLE_EQ(io::serving_metrics(simulate_serving(s, cost))["goodput_requests_per_s"].get<double>(), 0.0);
}

// ShareGPT prompts follow the benchmark histogram (sglang PR #1853) scaled to the mean:
// half of them under ~0.5 of the mean, none past the 1,024-token cap scaled likewise;
// replies are exponential with their mean.
TEST(Serving, ShareGptLengthsHaveTheirMeansAndShapes) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->workload.num_requests = 20000;
  s.inference->workload.input_tokens = {LengthDist::Kind::sharegpt, 215, 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::sharegpt, 199, 0, 0};
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost);
  std::vector<double> in, out;
  for (const auto& q : r.requests) {
    in.push_back(static_cast<double>(q.input));
    out.push_back(static_cast<double>(q.output));
  }
  auto mean = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return sum / static_cast<double>(v.size());
  };
  EXPECT_NEAR(mean(in), 215.0, 0.02 * 215.0);
  EXPECT_NEAR(mean(out), 199.0, 0.03 * 199.0);
  // Histogram median ~120 of mean ~242 tokens; exponential median ln 2 of the mean.
  EXPECT_NEAR(percentile(in, 0.5) / mean(in), 0.50, 0.05);
  EXPECT_NEAR(percentile(out, 0.5) / mean(out), std::log(2.0), 0.03);
  EXPECT_LE(*std::max_element(in.begin(), in.end()), std::ceil(1025.0 * 215.0 / 242.0));
  EXPECT_GE(*std::min_element(in.begin(), in.end()), 4.0);
}

// A per-step host overhead adds to every step exactly, and requests still satisfy
// e2e = TTFT + TPOT (output - 1).
TEST(Serving, StepOverheadAddsToEveryStep) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::poisson);
  const hw::RooflineCostModel cost(s.system);
  IterationBatch b;
  b.decodes = 7;
  b.decode_context = 7 * 300;
  b.prefills.push_back({200, 0, true});
  const double gpu = IterationModel(s.model, s.system, *s.inference, cost).gpu_seconds(b);
  // A measured per-step figure replaces the engine profile's host time.
  s.inference->engine.step_overhead_ms = 2.5;
  EXPECT_NEAR(IterationModel(s.model, s.system, *s.inference, cost).seconds(b) - gpu, 2.5e-3, 1e-12);
  const ServingResult r = simulate_serving(s, cost, kServingSeed, false, TokenGaps::per_request);
  for (const auto& q : r.requests) {
    EXPECT_DOUBLE_EQ(q.e2e(), q.ttft() + q.tpot() * static_cast<double>(q.output - 1));
    for (double gap : q.itl) EXPECT_GE(gap, 2.5e-3);
  }
}

// Decode of a small batch streams the touched experts' weights: with the GPU's fused-MoE
// kernel figures that costs fixed + a time per touched expert + bytes / (fraction x HBM
// peak) a layer, in place of bytes at the stream rate plus two GEMM tails. T tokens
// choosing top-k of E experts touch E (1 - (1 - k/E)^T) of them. 16-bit experts take the
// 16-bit line, FP8 experts the general one.
TEST(Serving, MoeDecodeStreamsExpertsAtTheFusedKernelRate) {
  for (DType w : {DType::bf16, DType::fp8}) {
    Scenario s = serving_scenario("qwen3-30b-a3b", "h200-sxm-141gb", 1, ServingWorkload::Mode::offline);
    s.inference->weight_dtype = w;
    s.inference->activation_dtype = w;
    const GpuEfficiency& e = s.system.gpu.efficiency;
    const bool bf16 = w == DType::bf16;
    const double hbm = bf16 ? e.moe_kernel_hbm_bf16.value : e.moe_kernel_hbm.value;
    const double fixed_us = bf16 ? e.moe_kernel_fixed_us_bf16.value : e.moe_kernel_fixed_us.value;
    const double expert_us = bf16 ? e.moe_kernel_expert_us_bf16.value : e.moe_kernel_expert_us.value;
    ASSERT_GT(hbm, 0);
    ASSERT_GT(fixed_us, 0);
    ASSERT_GT(expert_us, 0);
    EXPECT_NE(e.moe_kernel_hbm_bf16.value, e.moe_kernel_hbm.value);
    const hw::RooflineCostModel cost(s.system);
    IterationBatch b;
    b.decodes = 4;
    b.decode_context = 4 * 256;
    const double with = IterationModel(s.model, s.system, *s.inference, cost).seconds(b);
    Scenario plain = s;
    GpuEfficiency& pe = plain.system.gpu.efficiency;
    pe.moe_kernel_hbm.value = pe.moe_kernel_fixed_us.value = pe.moe_kernel_hbm_bf16.value = pe.moe_kernel_fixed_us_bf16.value = 0;
    const hw::RooflineCostModel plain_cost(plain.system);
    const double without = IterationModel(plain.model, plain.system, *plain.inference, plain_cost).seconds(b);
    const auto& moe = *s.model.moe;
    const double experts = static_cast<double>(moe.num_experts);
    const double touched = experts * (1.0 - std::pow(1.0 - static_cast<double>(moe.top_k) / experts, 4.0));
    const double bytes = touched * static_cast<double>(s.model.hidden * moe.expert_intermediate) * 3.0 * dtype_bytes(w);
    const double peak = s.system.gpu.hbm_bandwidth().value;
    const double fused = (fixed_us + expert_us * touched) * 1e-6 + bytes / (peak * hbm);
    const double stream = bytes / (peak * e.hbm.value) + 2.0 * e.gemm_tail_us.value * 1e-6;
    EXPECT_NEAR(with - without, static_cast<double>(s.model.layers) * (fused - stream), 1e-9) << to_string(w);
    EXPECT_GT(with, without) << to_string(w);
  }
}

// The fused-MoE decode line of the Hopper presets reproduces the published kernel
// timings it was fitted to, each shape within 16%: time = fixed + per-expert x experts
// touched + their bytes / (fraction x HBM peak), E (1 - (1 - k/E)^T) experts touched by T
// tokens (sglang PR #11730; vLLM PRs #36559 and #24700; vLLM PRs #24700 and #44818 for 16
// bits; the presets' notes).
TEST(Serving, FusedMoeLineReproducesThePublishedKernelTimes) {
  struct Bench {
    const char* gpu;
    bool bf16;
    double experts, top_k, expert_bytes;
    std::vector<std::pair<double, double>> tokens_us;
  };
  const std::vector<Bench> benches = {
      {"h200-sxm-141gb", false, 128, 8, 3.0 * 4096 * 192,
       {{1, 31.70}, {2, 36.56}, {4, 49.67}, {8, 66.87}, {16, 92.36}, {24, 117.38}, {32, 124.99}}},
      {"h200-sxm-141gb", false, 256, 8, 3.0 * 7168 * 1024,
       {{1, 77.48}, {2, 112.15}, {4, 190.71}, {8, 350.35}, {16, 569.30}, {24, 743.60}, {32, 877.37}}},
      {"h200-sxm-141gb", false, 512, 10, 3.0 * 2048 * 256,
       {{1, 29.97}, {2, 33.00}, {4, 46.43}, {8, 62.29}, {16, 99.91}, {24, 118.64}, {32, 136.56}}},
      {"h100-sxm5-80gb", false, 128, 8, 3.0 * 2048 * 768,
       {{1, 44.54}, {2, 59.94}, {4, 90.46}, {8, 129.77}, {16, 185.40}, {32, 238.37}, {64, 262.73}, {128, 273.72}}},
      {"h100-sxm5-80gb", true, 8, 2, 3.0 * 4096 * 7168 * 2,
       {{1, 144.03}, {4, 351.10}, {16, 471.49}, {64, 483.14}, {128, 491.39}}},
      {"h200-sxm-141gb", true, 128, 8, 3.0 * 2816 * 704 * 2, {{8, 200.0}, {32, 341.1}, {128, 409.1}}},
  };
  for (const Bench& b : benches) {
    const GpuSpec g = io::load_gpu(b.gpu);
    const GpuEfficiency& e = g.efficiency;
    const double hbm = b.bf16 ? e.moe_kernel_hbm_bf16.value : e.moe_kernel_hbm.value;
    const double fixed = b.bf16 ? e.moe_kernel_fixed_us_bf16.value : e.moe_kernel_fixed_us.value;
    const double per_expert = b.bf16 ? e.moe_kernel_expert_us_bf16.value : e.moe_kernel_expert_us.value;
    for (const auto& [tokens, us] : b.tokens_us) {
      const double touched = b.experts * (1.0 - std::pow(1.0 - b.top_k / b.experts, tokens));
      const double model = fixed + per_expert * touched + touched * b.expert_bytes / (hbm * g.hbm_bandwidth().value) * 1e6;
      EXPECT_NEAR(model / us, 1.0, 0.16) << b.gpu << " E=" << b.experts << " tokens " << tokens;
    }
  }
}

// A large prefill makes the fused MoE compute-bound: each MoE layer then costs the routed
// FLOPs (T tokens x top-k x 6 x hidden x expert width) over the kernel's measured
// fraction of the 8-bit peak, so doubling that fraction saves exactly half of it.
TEST(Serving, MoePrefillRunsAtTheFusedKernelComputeRate) {
  Scenario s = serving_scenario("qwen3-30b-a3b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->weight_dtype = DType::fp8;
  s.inference->activation_dtype = DType::fp8;
  const double frac = s.system.gpu.efficiency.moe_kernel_compute_fp8.value;
  ASSERT_GT(frac, 0);
  IterationBatch b;
  b.prefills.push_back({8192, 0, true});
  const hw::RooflineCostModel cost(s.system);
  const double base = IterationModel(s.model, s.system, *s.inference, cost).seconds(b);
  Scenario fast = s;
  fast.system.gpu.efficiency.moe_kernel_compute_fp8.value = 2 * frac;
  const hw::RooflineCostModel fast_cost(fast.system);
  const double faster = IterationModel(fast.model, fast.system, *fast.inference, fast_cost).seconds(b);
  const auto& moe = *s.model.moe;
  const double flops = 8192.0 * static_cast<double>(moe.top_k) * 6.0 * static_cast<double>(s.model.hidden) *
                       static_cast<double>(moe.expert_intermediate);
  const double per_layer = flops / (s.system.gpu.peak(DType::fp8).value * frac);
  EXPECT_NEAR(base - faster, static_cast<double>(s.model.layers) * per_layer * 0.5, 1e-9);
}

// KV blocks run out: the most recently admitted sequence is preempted. Recompute sends
// its tokens back through prefill; swap keeps them in host memory, so every prompt token is
// prefilled exactly once; with no swap space a swap engine recomputes like the default.
TEST(Serving, PreemptionBySwapOrRecompute) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->engine.gpu_memory_utilization = 0.24;  // about 11k tokens of KV cache
  s.inference->engine.preemption = Preemption::recompute;
  s.inference->workload.num_requests = 48;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 512, 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, 512, 0, 0};
  const hw::RooflineCostModel cost(s.system);
  auto prefilled = [](const ServingResult& r) {
    int64_t sum = 0;
    for (const auto& it : r.timeline) sum += it.prefill_tokens;
    return sum;
  };
  auto check = [](const ServingResult& r) {
    ASSERT_EQ(r.requests.size(), 48u);
    for (const auto& q : r.requests) {
      EXPECT_DOUBLE_EQ(q.e2e(), q.ttft() + q.tpot() * static_cast<double>(q.output - 1));
      EXPECT_EQ(static_cast<int64_t>(q.itl.size()), q.output - 1);
    }
  };
  const ServingResult recompute = simulate_serving(s, cost, 7, true, TokenGaps::per_request);
  check(recompute);
  EXPECT_GT(recompute.preemptions, 0);
  EXPECT_GT(prefilled(recompute), 48 * 512);

  s.inference->engine.preemption = Preemption::swap;
  const ServingResult swap = simulate_serving(s, cost, 7, true, TokenGaps::per_request);
  check(swap);
  EXPECT_GT(swap.preemptions, 0);
  EXPECT_EQ(prefilled(swap), 48 * 512);
  EXPECT_EQ(swap.engine.preemption, Preemption::swap);

  s.inference->engine.swap_space_gib = 0.0;
  const ServingResult no_space = simulate_serving(s, cost, 7, true, TokenGaps::per_request);
  EXPECT_EQ(no_space.preemptions, recompute.preemptions);
  EXPECT_EQ(prefilled(no_space), prefilled(recompute));
  EXPECT_DOUBLE_EQ(no_space.duration_s, recompute.duration_s);
}

// Utilisation over time conserves the run: the windows' decode and prefill tokens add up
// to the iterations', and busy shares stay within [0, 1] per replica.
TEST(Serving, UtilisationOverTimeConservesTokens) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::poisson);
  s.inference->replicas = 2;
  s.system.num_gpus = 2;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost, 11, true);
  ASSERT_FALSE(r.timeline.empty());
  const nlohmann::json u = io::utilization_over_time(r, 20);
  EXPECT_EQ(u["replicas"], 2);
  ASSERT_EQ(u["windows"].size(), 20u);
  const double width = u["window_s"].get<double>();
  double decode = 0, prefill = 0;
  for (const auto& w : u["windows"]) {
    decode += w["decode_tokens_per_s"].get<double>() * width;
    prefill += w["prefill_tokens_per_s"].get<double>() * width;
    EXPECT_GE(w["gpu_busy"].get<double>(), 0.0);
    EXPECT_LE(w["gpu_busy"].get<double>(), 1.0 + 1e-9);
  }
  double want_decode = 0, want_prefill = 0;
  for (const auto& it : r.timeline) {
    want_decode += static_cast<double>(it.decode_tokens);
    want_prefill += static_cast<double>(it.prefill_tokens);
  }
  EXPECT_NEAR(decode, want_decode, 1e-6 * want_decode);
  EXPECT_NEAR(prefill, want_prefill, 1e-6 * want_prefill);
  // Decode tokens are every output token after the first, also when a multi-step round
  // makes several per sequence.
  s.inference->engine.scheduler_steps = 4;
  const ServingResult m = simulate_serving(s, cost, 11, true);
  double made = 0, generated = 0;
  for (const auto& it : m.timeline) made += static_cast<double>(it.decode_tokens);
  for (const auto& q : m.requests) generated += static_cast<double>(q.output - 1);
  EXPECT_DOUBLE_EQ(made, generated);
}

// Block-scaled FP8 (128x128 weight blocks, 1x128 activation groups): each projection first
// quantizes its input per group, a memory-bound kernel (at batch 1 the launch floor), and
// large GEMMs run at the fixed-tile blockwise kernel's measured rate (vLLM's CUTLASS one,
// before DeepGEMM became its default), well below per-tensor FP8.
TEST(Serving, Fp8BlockScalingAddsQuantizationAndSlowsLargeGemms) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->profile.knobs.block_fp8_gemm_fills_sms = false;
  s.inference->weight_dtype = DType::fp8;
  s.inference->activation_dtype = DType::fp8;
  const hw::RooflineCostModel cost(s.system);
  IterationBatch decode;
  decode.decodes = 1;
  decode.decode_context = 128;
  IterationBatch prefill;
  prefill.prefills.push_back({8192, 0, true});
  // Against per-tensor FP8 whose quantization is fused into the kernel before it: four
  // projections a layer (QKV, output, gate/up, down), each behind one quantization.
  s.inference->profile.knobs.activation_quant_kernel = false;
  const IterationModel tensor(s.model, s.system, *s.inference, cost);
  Scenario b = s;
  b.inference->fp8_block_scaling = true;
  const IterationModel block(b.model, b.system, *b.inference, cost);
  EXPECT_NEAR(block.seconds(decode) - tensor.seconds(decode), 4.0 * 32.0 * cost.memory_bound(Bytes(1)).value, 1e-12);
  EXPECT_GT(block.seconds(prefill), 1.5 * tensor.seconds(prefill));
  // Where per-tensor FP8 quantizes in a kernel of its own too (vLLM), a decode pays the same.
  s.inference->profile.knobs.activation_quant_kernel = true;
  EXPECT_NEAR(block.seconds(decode), IterationModel(s.model, s.system, *s.inference, cost).seconds(decode), 1e-12);
}

// FP8 scaling "auto" follows the model's published FP8 checkpoint: DeepSeek-V3 models are
// released with 128x128 block scales; a config's quantization_config says so for others;
// a stated scaling wins.
TEST(Serving, Fp8ScalingFollowsTheCheckpoint) {
  EXPECT_EQ(io::load_model("deepseek-v3").fp8_weight_block, 128);
  EXPECT_EQ(io::load_model("llama3-8b").fp8_weight_block, 0);
  nlohmann::json cfg = {{"model_type", "llama"}, {"hidden_size", 4096}, {"intermediate_size", 14336},
                        {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                        {"vocab_size", 128256}, {"max_position_embeddings", 8192}};
  EXPECT_EQ(io::model_from_hf_config(cfg, "").fp8_weight_block, 0);
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  const ModelSpec blocked = io::model_from_hf_config(cfg, "");
  EXPECT_EQ(blocked.fp8_weight_block, 128);

  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->profile.knobs.block_fp8_gemm_fills_sms = false;  // the fixed-tile kernel
  s.inference->weight_dtype = DType::fp8;
  s.inference->activation_dtype = DType::fp8;
  const hw::RooflineCostModel cost(s.system);
  IterationBatch prefill;
  prefill.prefills.push_back({8192, 0, true});
  const double tensor = IterationModel(s.model, s.system, *s.inference, cost).seconds(prefill);
  s.model = blocked;
  const double automatic = IterationModel(s.model, s.system, *s.inference, cost).seconds(prefill);
  s.inference->fp8_block_scaling = true;
  EXPECT_DOUBLE_EQ(automatic, IterationModel(s.model, s.system, *s.inference, cost).seconds(prefill));
  EXPECT_GT(automatic, 1.5 * tensor);
  s.inference->fp8_block_scaling = false;
  EXPECT_DOUBLE_EQ(IterationModel(s.model, s.system, *s.inference, cost).seconds(prefill), tensor);
  s.inference->fp8_block_scaling.reset();
  EXPECT_EQ(io::serving_report(s, simulate_serving(s, cost))["resolved"]["fp8_scaling"], "block");
}

// Batched paged decode attention on an H100 SXM as published (onnxruntime PR #21414, nvbench
// GPU time, 64 query / 8 KV heads of 128, 16-bit, 64 sequences; Llama 3 70B's attention at
// TP1): FlashAttention-2 at page 256, 128 and 256 keys: 28.780 and 43.563 us (one split by
// its heuristic); the PR's own kernel at page 16, 256 and 512 keys: 39.474 and 61.917 us.
// The model (fixed time plus bytes at the stream rate) is within 15% of each; the bytes
// alone miss them by 28-61%.
TEST(Serving, BatchedDecodeAttentionAgainstPublishedH100Timings) {
  Scenario s = serving_scenario("llama3-70b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  const hw::RooflineCostModel cost(s.system);
  const IterationModel im(s.model, s.system, *s.inference, cost);
  ASSERT_EQ(s.model.heads, 64);
  ASSERT_EQ(s.model.kv_heads, 8);
  ASSERT_EQ(s.model.head_dim, 128);
  auto per_layer_us = [&](int64_t keys) {
    IterationBatch b;
    b.decodes = 64;
    b.decode_context = 64.0 * static_cast<double>(keys);
    return im.parts(b).attention_kernels / static_cast<double>(s.model.layers) * 1e6;
  };
  for (const auto& [keys, measured_us] :
       {std::pair<int64_t, double>{128, 28.780}, {256, 43.563}, {256, 39.474}, {512, 61.917}})
    EXPECT_NEAR(per_layer_us(keys), measured_us, 0.15 * measured_us) << keys;
}

// W4A16 (4-bit weights, 16-bit tensor cores) at batch 1 on a 70B model is 2-3.5x faster
// than bf16; the gain shrinks as the batch grows and compute takes over. (The attention
// kernel's fixed time, which both steps pay, weighs most at a few sequences, so the ratio's
// fall is checked from 16 sequences on.)
TEST(Serving, WeightOnlyInt4DecodeSpeedupShrinksWithBatch) {
  Scenario bf16 = serving_scenario("llama3-70b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  Scenario w4 = bf16;
  w4.inference->weight_dtype = DType::int4;
  const hw::RooflineCostModel cost(bf16.system);
  const IterationModel a(bf16.model, bf16.system, *bf16.inference, cost);
  const IterationModel b(w4.model, w4.system, *w4.inference, cost);
  auto ratio = [&](int64_t batch) {
    IterationBatch it;
    it.decodes = batch;
    it.decode_context = 512.0 * static_cast<double>(batch);
    return a.seconds(it) / b.seconds(it);
  };
  const double r1 = ratio(1);
  EXPECT_GE(r1, 2.0);
  EXPECT_LE(r1, 3.5);
  double prev = ratio(16);
  EXPECT_LE(prev, 3.5);
  for (int64_t batch : {64, 256, 1024}) {
    const double r = ratio(batch);
    EXPECT_LE(r, prev + 1e-9) << batch;
    prev = r;
  }
  EXPECT_LT(prev, 1.5);
}

// A request longer than the model's context (prompt and output past
// max_position_embeddings, 8,192 for Llama 3 8B) is simulated, with a warning that says the
// engines refuse it at their default maximum length; one that fits exactly has none.
TEST(Serving, RequestBeyondTheModelsContextIsWarnedOf) {
  auto warnings = [](int64_t input, int64_t output) -> nlohmann::json {
    Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
    EXPECT_EQ(s.model.max_position, 8192);
    s.inference->workload.num_requests = 4;
    s.inference->workload.input_tokens = {LengthDist::Kind::fixed, static_cast<double>(input), 0, 0};
    s.inference->workload.output_tokens = {LengthDist::Kind::fixed, static_cast<double>(output), 0, 0};
    const hw::RooflineCostModel cost(s.system);
    return io::serving_report(s, simulate_serving(s, cost))["warnings"];
  };
  EXPECT_EQ(warnings(8000, 192), nlohmann::json::array());
  EXPECT_EQ(warnings(8000, 500),
            nlohmann::json::array({"the longest request, 8500 tokens with its output, exceeds the model's "
                                   "max_position_embeddings 8192: engines refuse it at their default maximum length; it "
                                   "runs here as if the context were extended"}));
}

TEST(Serving, DeterministicForASeed) {
  const Scenario s = serving_scenario("llama3-8b", "a100-sxm4-80gb", 1, ServingWorkload::Mode::poisson);
  const hw::RooflineCostModel cost(s.system);
  const ServingResult a = simulate_serving(s, cost, 7), b = simulate_serving(s, cost, 7), c = simulate_serving(s, cost, 8);
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].finish, b.requests[i].finish);
    EXPECT_EQ(a.requests[i].input, b.requests[i].input);
  }
  EXPECT_NE(a.duration_s, c.duration_s);
}

// The engine sizes its KV cache exactly as vLLM does (see training_memory's serving half).
TEST(Serving, KvBlocksFollowTheEngineFormula) {
  const Scenario s = serving_scenario("llama3-70b", "h100-sxm5-80gb", 4, ServingWorkload::Mode::offline);
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost);
  const InferenceMemory& m = r.memory;
  EXPECT_EQ(m.num_blocks, static_cast<int64_t>((m.capacity_bytes * 0.9 - m.weights_bytes - m.activation_peak_bytes -
                                                m.non_torch_bytes - m.cudagraph_bytes) /
                                               (16.0 * m.kv_bytes_per_token)));
  EXPECT_LE(r.peak_kv_utilization, 1.0);
}

TEST(Serving, PercentileIsLinearBetweenRanks) {
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 0.99), 4.96);
}

// Selection gives the interpolation between the sorted neighbours exactly, for any order
// of the quantiles asked and with ties, empty and one-element inputs.
TEST(Serving, PercentilesEqualTheSortedInterpolation) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = trial % 7 == 0 ? trial % 2 : 1 + rng() % 300;
    std::vector<double> v(n);
    for (double& x : v) x = static_cast<double>(rng() % 50) * 0.37;  // many ties
    std::vector<double> qs{0.99, 0.0, 0.5, 1.0, 0.9, 0.5, 0.123};
    const std::vector<double> got = percentiles(v, qs);
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < qs.size(); ++i) {
      double want = 0;
      if (!sorted.empty()) {
        const double pos = qs[i] * static_cast<double>(sorted.size() - 1);
        const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, sorted.size() - 1);
        want = sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
      }
      ASSERT_EQ(got[i], want) << "n=" << n << " q=" << qs[i];
    }
  }
}

}  // namespace
}  // namespace capsim

namespace capsim {
namespace {

Scenario single_request(int64_t input, int64_t output, const std::string& model = "llama3-8b") {
  Scenario s = serving_scenario(model, "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->workload.num_requests = 1;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, static_cast<double>(input), 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, static_cast<double>(output), 0, 0};
  return s;
}

// Speculative decoding (Leviathan et al. 2023): each verification yields (1-a^(k+1))/(1-a)
// tokens; a lone request's time per token falls by about that factor over the step cost.
TEST(Serving, SpeculativeDecodingTokensPerVerification) {
  const Scenario base = single_request(128, 1001);
  Scenario spec = base;
  spec.inference->speculative.k = 4;
  spec.inference->speculative.acceptance = 0.8;
  spec.inference->speculative.draft_cost_fraction = 0.05;
  const hw::RooflineCostModel cost(base.system);
  const ServingResult a = simulate_serving(base, cost), b = simulate_serving(spec, cost);
  const double per_verify = (1.0 - std::pow(0.8, 5.0)) / (1.0 - 0.8);  // 3.3616
  const double speedup = a.requests[0].tpot() / b.requests[0].tpot();
  EXPECT_GT(speedup, 2.0);
  EXPECT_LT(speedup, per_verify);
  EXPECT_NEAR(static_cast<double>(b.iterations - 1), 1000.0 / per_verify, 2.0);  // one prefill + verifications
  EXPECT_DOUBLE_EQ(b.requests[0].e2e(), b.requests[0].ttft() + b.requests[0].tpot() * 1000.0);
}

// Multi-step scheduling: after the prefill, a lone request's 9 remaining tokens come in
// rounds of 4, 4 and 1 forward passes, each round streamed as one chunk whose gap is the
// sum of its passes (contexts growing by one token a pass); the engine's host time is
// paid once per round, by its first pass.
TEST(Serving, MultiStepRoundsStreamAsOneChunk) {
  Scenario s = single_request(128, 10);
  s.inference->engine.scheduler_steps = 4;
  s.inference->engine.step_overhead_ms = 0.0;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost, kServingSeed, false, TokenGaps::per_request);
  const IterationModel model(s.model, s.system, *s.inference, cost);
  auto pass = [&](int64_t context) {
    IterationBatch b;
    b.decodes = 1;
    b.decode_context = static_cast<double>(context);
    return model.seconds(b);
  };
  const RequestResult& q = r.requests[0];
  ASSERT_EQ(q.itl.size(), 3u);
  EXPECT_NEAR(q.itl[0], pass(129) + pass(130) + pass(131) + pass(132), 1e-12);
  EXPECT_NEAR(q.itl[1], pass(133) + pass(134) + pass(135) + pass(136), 1e-12);
  EXPECT_NEAR(q.itl[2], pass(137), 1e-12);
  EXPECT_NEAR(q.finish, q.first_token + q.itl[0] + q.itl[1] + q.itl[2], 1e-12);
  // The per-step host overhead is paid once per round, not once per pass.
  s.inference->engine.step_overhead_ms = 2.0;  // in place of 0
  const ServingResult with_overhead = simulate_serving(s, cost, kServingSeed, false, TokenGaps::per_request);
  const RequestResult& o = with_overhead.requests[0];
  EXPECT_NEAR(o.itl[0] - q.itl[0], 2e-3, 1e-12);
  EXPECT_NEAR(o.itl[2] - q.itl[2], 2e-3, 1e-12);
  EXPECT_EQ(r.iterations, 1 + 4 + 4 + 1);  // prefill, then the passes that ran
}

// Under load, prompts that arrive during a round wait for it: TTFT rises with the round
// length while every request still satisfies e2e = TTFT + TPOT (output - 1).
TEST(Serving, MultiStepDelaysNewPrompts) {
  Scenario s = serving_scenario("llama3-8b", "a100-sxm4-80gb", 1, ServingWorkload::Mode::poisson);
  s.inference->engine.chunked_prefill = false;
  const hw::RooflineCostModel cost(s.system);
  auto median_ttft = [&](const ServingResult& r) {
    std::vector<double> v;
    for (const auto& q : r.requests) v.push_back(q.ttft());
    return percentile(v, 0.5);
  };
  const double one = median_ttft(simulate_serving(s, cost));
  s.inference->engine.scheduler_steps = 10;
  const double ten = median_ttft(simulate_serving(s, cost));
  EXPECT_GT(ten, 1.5 * one);
}

// A multi-step round runs decodes only: when its block reservation preempts a sequence,
// the sequence waits for the round instead of being prefilled inside it for free; every
// prompt token is still prefilled and every request finishes.
TEST(Serving, MultiStepRoundsNeverCarryPrompts) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.inference->engine.gpu_memory_utilization = 0.25;
  s.inference->engine.scheduler_steps = 8;
  s.inference->engine.max_num_batched_tokens = 2048;
  s.inference->workload.num_requests = 400;
  s.inference->workload.input_tokens = {LengthDist::Kind::uniform, 3000, 1000, 5000};
  s.inference->workload.output_tokens = {LengthDist::Kind::uniform, 1750, 500, 3000};
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost, 2, true);  // a seed whose preemptions land inside rounds
  EXPECT_GT(r.preemptions, 0);
  double prefilled = 0, prompts = 0;
  bool rounds = false;
  for (const auto& it : r.timeline) {
    if (it.passes > 1) {
      rounds = true;
      EXPECT_EQ(it.prefill_tokens, 0);
    }
    prefilled += static_cast<double>(it.prefill_tokens);
  }
  EXPECT_TRUE(rounds);
  for (const auto& q : r.requests) {
    prompts += static_cast<double>(q.input);
    EXPECT_GT(q.finish, 0.0);
  }
  EXPECT_GE(prefilled, prompts);
}

// A sequence preempted on a decode-only replica goes back to the prefill pool (it cannot
// be prefilled where it was), so the run completes.
TEST(Serving, DisaggregatedDecodePreemptionReturnsToPrefillPool) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  s.system.num_gpus = 2;
  s.inference->prefill_replicas = 1;
  s.inference->decode_replicas = 1;
  s.inference->kv_transfer_over_network = false;
  s.inference->engine.gpu_memory_utilization = 0.25;
  s.inference->workload.num_requests = 60;
  s.inference->workload.input_tokens = {LengthDist::Kind::uniform, 3000, 1000, 5000};
  s.inference->workload.output_tokens = {LengthDist::Kind::uniform, 1750, 500, 3000};
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost, 3);
  EXPECT_GT(r.preemptions, 0);
  for (const auto& q : r.requests) EXPECT_GT(q.finish, 0.0);
}

// Prefix caching skips the cached part of a prompt's prefill.
TEST(Serving, PrefixCacheShortensPrefill) {
  const Scenario base = single_request(8000, 2);
  Scenario cached = base;
  cached.inference->workload.prefix_hit_rate = 0.9;
  const hw::RooflineCostModel cost(base.system);
  const double t0 = simulate_serving(base, cost).requests[0].ttft();
  const double t1 = simulate_serving(cached, cost).requests[0].ttft();
  EXPECT_LT(t1, 0.35 * t0);
}

}  // namespace
}  // namespace capsim

#include "capsim/io/scenario_io.hpp"

namespace capsim {
namespace {

// A recorded trace replays as given; requests that share a seen prefix skip its prefill.
TEST(Serving, TraceReplayWithSharedPrefixes) {
  const Scenario s = io::load_scenario(std::filesystem::path(CAPSIM_TEST_SOURCE_DIR) / "scenarios" / "serving-trace.json");
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost);
  ASSERT_EQ(r.requests.size(), 4u);
  EXPECT_DOUBLE_EQ(r.requests[1].arrival, 0.5);
  // The first carries its prefix cold; the second and fourth find it cached; the third has none.
  EXPECT_LT(r.requests[1].ttft(), 0.5 * r.requests[0].ttft());
  EXPECT_LT(r.requests[3].ttft(), 0.5 * r.requests[2].ttft());
}

// Disaggregation: prefills run on their own pool and hand the KV cache to decoders, so a
// burst of long prompts no longer stretches the decoders' steps.
TEST(Serving, DisaggregationKeepsDecodeStepsShort) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::poisson);
  s.system.num_gpus = 4;
  s.inference->workload.qps = 8;
  s.inference->workload.input_tokens = {LengthDist::Kind::fixed, 6000, 0, 0};
  s.inference->workload.output_tokens = {LengthDist::Kind::fixed, 200, 0, 0};
  s.inference->replicas = 4;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult colocated = simulate_serving(s, cost);
  Scenario d = s;
  d.inference->prefill_replicas = 2;
  d.inference->decode_replicas = 2;
  const ServingResult split = simulate_serving(d, cost);
  auto p99_itl = [](const ServingResult& r) { return percentiles(r.token_gaps, 1.0, {0.99}).front(); };
  EXPECT_LT(p99_itl(split), p99_itl(colocated));
  for (const auto& q : split.requests) EXPECT_DOUBLE_EQ(q.e2e(), q.ttft() + q.tpot() * static_cast<double>(q.output - 1));
}

// Least-outstanding routing serves every request and never leaves a replica idle while
// another holds a queue at an arrival.
TEST(Serving, LeastOutstandingRouterCompletes) {
  Scenario s = serving_scenario("llama3-8b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::poisson);
  s.system.num_gpus = 2;
  s.inference->replicas = 2;
  s.inference->router = InferencePlan::Router::least_outstanding;
  const hw::RooflineCostModel cost(s.system);
  const ServingResult r = simulate_serving(s, cost);
  for (const auto& q : r.requests) EXPECT_GT(q.finish, q.arrival);
}

}  // namespace
}  // namespace capsim

namespace capsim {
namespace {

// 2:4 sparsity halves the weight values (plus 2-bit metadata): bandwidth-bound decode of a
// bf16 70B model reads 0.5625 of the weight bytes.
TEST(Serving, SparseDecodeReadsFewerWeightBytes) {
  Scenario dense = serving_scenario("llama3-70b", "h200-sxm-141gb", 1, ServingWorkload::Mode::offline);
  Scenario sparse = dense;
  sparse.inference->sparse_24 = true;
  const hw::RooflineCostModel cost(dense.system);
  const IterationModel a(dense.model, dense.system, *dense.inference, cost);
  const IterationModel b(sparse.model, sparse.system, *sparse.inference, cost);
  IterationBatch it;
  it.decodes = 1;
  it.decode_context = 256;
  const double ratio = b.seconds(it) / a.seconds(it);
  EXPECT_GT(ratio, 0.5625);
  EXPECT_LT(ratio, 0.7);
}

// Sliding-window layers (Mistral 7B: a window of 4096 on every layer) read at most the
// window's keys: a decode over a longer context costs what one over the window costs
// unwindowed, and a prompt chunk past the window what a chunk attending to exactly the
// window does; inside the window nothing changes.
TEST(Serving, SlidingWindowCapsTheKeysAStepReads) {
  Scenario s = serving_scenario("mistral-7b", "h100-sxm5-80gb", 1, ServingWorkload::Mode::offline);
  ModelSpec full = s.model;
  full.sliding_window = 0;
  full.sliding_layer.clear();
  const hw::RooflineCostModel cost(s.system);
  const IterationModel windowed(s.model, s.system, *s.inference, cost);
  const IterationModel whole(full, s.system, *s.inference, cost);
  IterationBatch inside;
  inside.decodes = 4;
  inside.decode_context = 4 * 2000;
  inside.decode_window_context = 4 * 2000;
  inside.context_window = 4096;
  EXPECT_EQ(windowed.gpu_seconds(inside), whole.gpu_seconds(inside));
  IterationBatch past = inside;
  past.decode_context = 4 * 20000;
  past.decode_window_context = 4 * 4096;
  IterationBatch at_window = inside;
  at_window.decode_context = 4 * 4096;
  EXPECT_DOUBLE_EQ(windowed.gpu_seconds(past), whole.gpu_seconds(at_window));
  EXPECT_LT(windowed.gpu_seconds(past), whole.gpu_seconds(past));
  // A 2,000-token chunk after 8,000 cached tokens attends to 4,096 keys a query; unwindowed
  // that is the chunk after 3,096 (3,096 + 2,000 / 2).
  IterationBatch chunk;
  chunk.prefills.push_back({2000, 8000, false});
  IterationBatch equivalent;
  equivalent.prefills.push_back({2000, 3096, false});
  EXPECT_DOUBLE_EQ(windowed.gpu_seconds(chunk), whole.gpu_seconds(equivalent));
}

// Where the engine keeps only the window's keys and values in sliding-window layers (vLLM's
// hybrid KV cache manager from 0.9), a request holds the blocks of its full-attention layers'
// share of every token and of its sliding layers' share of the window (plus the block its
// oldest token opens); before it, every layer held every token. gpt-oss-20b alternates,
// window 128, blocks of 16: one 8,000 + 100-token request peaks at
// ceil(0.5 ceil(8100/16) + 0.5 ceil(143/16)) = 258 blocks, against 507.
TEST(Serving, SlidingWindowKvHoldsTheWindowWhereTheEngineDoes) {
  Scenario s = single_request(8000, 100, "gpt-oss-20b");
  s.inference->engine.block_size = 16;
  const hw::RooflineCostModel cost(s.system);
  auto peak_blocks = [&](const char* release) {
    s.inference->profile = io::select_engine_profile("vllm", release, "/inference/engine");
    const ServingResult r = simulate_serving(s, cost);
    return std::llround(r.peak_kv_utilization * static_cast<double>(r.memory.num_blocks));
  };
  EXPECT_TRUE(io::select_engine_profile("vllm", "0.11.0", "/inference/engine").knobs.sliding_window_kv_bounded);
  EXPECT_FALSE(io::select_engine_profile("vllm", "0.8.5", "/inference/engine").knobs.sliding_window_kv_bounded);
  EXPECT_FALSE(io::select_engine_profile("sglang", "0.5.7", "/inference/engine").knobs.sliding_window_kv_bounded);
  EXPECT_EQ(peak_blocks("0.11.0"), 258);
  EXPECT_EQ(peak_blocks("0.8.5"), 507);
}

}  // namespace
}  // namespace capsim
