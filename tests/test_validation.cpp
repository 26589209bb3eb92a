// Accuracy against the published training measurements in data/validation: every case
// must be simulated, and the error may not grow past the figures recorded here (a
// regression fails CI). README "Accuracy" shows the current table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "capsim/core/diagnostics.hpp"
#include "capsim/io/calibration_io.hpp"
#include "capsim/io/report.hpp"
#include "capsim/io/scenario_io.hpp"
#include "capsim/io/validation.hpp"

namespace capsim {
namespace {

const std::filesystem::path kTraining = std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "validation" / "training-public.json";

TEST(Validation, TrainingCasesAllSimulated) {
  const nlohmann::json r = io::run_validation({kTraining});
  size_t n = 0;
  for (const auto& c : r["cases"]) {
    EXPECT_EQ(c["status"], "ok") << c["id"] << ": " << c.value("reason", std::string());
    ++n;
  }
  EXPECT_GE(n, 124u);
  EXPECT_EQ(r["summary"]["training-public.json"]["step_time_s"]["unsupported"], 0);
}

// A source that does not publish the layout or the network writes "auto" (SCHEMA.md): every
// training and post-training case still runs with its tp, pp, dp, cp, ep, sp, optimizer and
// nic_gbps_per_gpu left to capsim.
TEST(Validation, CasesRunWithTheirLayoutLeftAuto) {
  const std::filesystem::path dir = kTraining.parent_path();
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / "capsim-auto-layout-cases.json";
  nlohmann::json doc = {{"schema", "capsim-validation/1"}, {"cases", nlohmann::json::array()}};
  for (const char* file : {"training-public.json", "posttraining-public.json"}) {
    std::ifstream in(dir / file);
    const nlohmann::json cases = nlohmann::json::parse(in)["cases"];
    for (nlohmann::json c : cases) {
      for (const char* key : {"tp", "pp", "dp", "cp", "ep", "sp", "optimizer"})
        if (c["training"].contains(key)) c["training"][key] = "auto";
      c["system"]["nic_gbps_per_gpu"] = "auto";
      doc["cases"].push_back(c);
    }
  }
  std::ofstream(tmp) << doc.dump();
  const nlohmann::json r = io::run_validation({tmp});
  std::filesystem::remove(tmp);
  ASSERT_EQ(r["cases"].size(), doc["cases"].size());
  for (const auto& c : r["cases"]) {
    EXPECT_EQ(c["status"], "ok") << c["id"] << ": " << c.value("reason", std::string());
    for (const char* key : {"tp", "pp", "dp"}) EXPECT_TRUE(c["resolved"].contains(key)) << c["id"] << " " << key;
  }
}

// Any one key a source may leave unpublished: every training key of every training case
// set to "auto" alone (SCHEMA.md: a field the source did not publish holds "auto") is
// resolved, never refused.
TEST(Validation, EveryTrainingKeyLeftAutoAloneResolves) {
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / "capsim-auto-key-cases.json";
  nlohmann::json doc = {{"schema", "capsim-validation/1"}, {"cases", nlohmann::json::array()}};
  std::ifstream in(kTraining);
  const nlohmann::json cases = nlohmann::json::parse(in)["cases"];
  for (const nlohmann::json& c : cases)
    for (const auto& [key, value] : c["training"].items()) {
      // The batch, the sequence and the precision define the run rather than describe it.
      if (key == "global_batch" || key == "seq_len" || key == "precision" || key == "mode" || value == "auto") continue;
      nlohmann::json v = c;
      v["id"] = c["id"].get<std::string>() + "/" + key;
      v["training"][key] = "auto";
      doc["cases"].push_back(v);
    }
  ASSERT_GT(doc["cases"].size(), 1000u);
  std::ofstream(tmp) << doc.dump();
  const nlohmann::json r = io::run_validation({tmp});
  std::filesystem::remove(tmp);
  ASSERT_EQ(r["cases"].size(), doc["cases"].size());
  for (const auto& c : r["cases"]) EXPECT_EQ(c["status"], "ok") << c["id"] << ": " << c.value("reason", std::string());
}

// The same one level down, for the post-training blocks: every key of every post-training
// case's training block, and every key of the objects inside it (rl and its rollout, engine,
// pools, models and lengths; lora), set to "auto" alone, reads; so does each block that may
// be "auto" as a whole. Only what defines the job stays stated: the batch, the sequence,
// the precision, the mode, the algorithm and the teacher.
TEST(Validation, EveryPostTrainingKeyLeftAutoAloneReads) {
  const std::set<std::string> defining = {"global_batch", "seq_len", "precision", "mode", "algorithm", "teacher"};
  std::ifstream in(kTraining.parent_path() / "posttraining-public.json");
  const nlohmann::json cases = nlohmann::json::parse(in)["cases"];
  size_t variants = 0;
  std::map<std::string, int> tried;  // each key on its first three cases is enough
  const auto reads = [&](const nlohmann::json& c, const std::string& what) {
    if (++tried[what] > 3) return;
    ++variants;
    try {
      (void)io::scenario_from_json(c, {}, io::EngineKeys::ignore_unknown);
    } catch (const InputError& e) {
      ADD_FAILURE() << c["id"].get<std::string>() << " " << what << ": " << e.what();
    }
  };
  for (const nlohmann::json& c : cases) {
    // Each scalar (or whole object) at pointer p of the training block, one at a time.
    std::vector<nlohmann::json::json_pointer> keys;
    const auto walk = [&](const auto& self, const nlohmann::json& o, const nlohmann::json::json_pointer& at) -> void {
      for (const auto& [key, value] : o.items()) {
        if (defining.count(key) || value == "auto") continue;
        keys.push_back(at / key);
        if (value.is_object() && key != "models") self(self, value, at / key);
        if (key == "models" && value.is_object())
          for (const auto& [role, m] : value.items())
            if (m != "auto") keys.push_back(at / key / role);
      }
    };
    walk(walk, c["training"], nlohmann::json::json_pointer("/training"));
    for (const auto& p : keys) {
      nlohmann::json v = c;
      v[p] = "auto";
      reads(v, p.to_string());
    }
    for (const char* block : {"lora", "preference", "offload"}) {
      nlohmann::json v = c;
      if (!v["training"].contains(block)) continue;
      v["training"][block] = "auto";
      reads(v, std::string("/training/") + block);
    }
  }
  EXPECT_GT(variants, 100u);
}

/// The training cases whose ids start with one of `prefixes`, run with `training.attention`
/// set to `kernel` (a what-if: the schema has no such field; the sources say which kernel
/// ran); `count` of them are expected.
nlohmann::json run_with_attention(std::initializer_list<const char*> prefixes, const char* kernel, size_t count) {
  io::ValidationWhatIf w;
  for (const char* p : prefixes) w.only.push_back(std::string(p) + "*");
  w.sets = {std::string("training.attention=") + kernel};
  nlohmann::json r = io::run_validation({kTraining}, nullptr, 1, {}, w);
  EXPECT_EQ(r["cases"].size(), count);
  EXPECT_EQ(r["what_if"]["set"], nlohmann::json::array({w.sets[0]}));
  return r;
}

// The Megatron-LM runs of 2021-22 computed attention as batched GEMMs around fused
// scale-mask-softmax kernels: Narayanan et al. 2021, Sec. 4.2 ("two custom kernels to enable
// the fusion of scale, mask, and softmax (reduction) operations"), and Korthikanti et al.
// 2022, whose activation memory counts the attention's softmax output, dropout mask and
// dropout output (its Eq. 1, 5as/h: only unfused attention keeps them). The schema has no
// field for the kernel, so the validation runs them with the default FlashAttention-2 (1.7B
// -36%, selective recompute 8-13 points faster than full). With `attention: "unfused"`, as
// the papers describe their runs, capsim's unfused kernel model reproduces them: the
// weak-scaling table (Table 1) and the PTD-P rows of Table 2 within 12%, Korthikanti's Table 5
// within 7% for both recompute policies. (DeepSpeed's ZeRO-3 rows of Table 2 are another
// implementation's communication and stay out.)
TEST(Validation, MegatronLm2021RunsReproducedWithUnfusedAttention) {
  const nlohmann::json r =
      run_with_attention({"narayanan21-t1-", "narayanan21-t2-ptdp-", "korthikanti22-"}, "unfused", 24);
  for (const auto& c : r["cases"]) {
    ASSERT_EQ(c["status"], "ok") << c["id"];
    const std::string id = c["id"];
    const double e = c["error"]["step_time_s"];
    EXPECT_LT(std::abs(e), id.rfind("korthikanti22-", 0) == 0 ? 0.07 : 0.12) << id << " " << e;
  }
}

// llm-foundry's benchmark tables were measured by scripts/train/benchmarking/
// submit_benchmarks.py, whose --attn_impl defaults to "triton" and which sweep.sh never
// overrides (mosaicml/llm-foundry at 1ef7b4d21, b2a43a147, 5e85bd62d, the commits that wrote
// the A100, H100 and large-scale tables): MPT's Triton attention, FlashAttention's
// flash_attn_triton.py. The schema has no field for the kernel, so the validation runs them
// with the PyTorch stack's FlashAttention-2 (family median -13.2%, every row fast but two).
// With `attention: "flash-triton"`, the kernel at the FlashAttention-2 paper's bars for it
// (A100 80GB: 68 TFLOP/s causal head dim 128 at 2k, against FlashAttention-2's 155), the
// family reads 5.5% median, and the A100 rows, measured on the GPU that figure was, within
// 10% each.
TEST(Validation, LlmFoundryRunsWithTheTritonAttentionTheirScriptSelected) {
  const nlohmann::json r = run_with_attention({"llmfoundry-"}, "flash-triton", 22);
  std::vector<double> abs_errors;
  for (const auto& c : r["cases"]) {
    ASSERT_EQ(c["status"], "ok") << c["id"];
    const std::string id = c["id"];
    const double e = c["error"]["step_time_s"];
    abs_errors.push_back(std::abs(e));
    if (id.rfind("llmfoundry-a100", 0) == 0) EXPECT_LT(std::abs(e), 0.10) << id << " " << e;
  }
  ASSERT_EQ(abs_errors.size(), 22u);
  std::sort(abs_errors.begin(), abs_errors.end());
  EXPECT_LT(0.5 * (abs_errors[10] + abs_errors[11]), 0.065);
}

// A what-if over the published cases: globs over case ids select, overrides change each
// selected case that has the path's first key; everything wrong with the what-if is one
// input error, before any case runs.
TEST(Validation, WhatIfSelectsAndOverridesCases) {
  EXPECT_TRUE(io::glob_match("llmfoundry-*", "llmfoundry-h100-bf16-mpt-1b-seq2048-512gpu"));
  EXPECT_TRUE(io::glob_match("*-t1-?.7b", "narayanan21-t1-1.7b"));
  EXPECT_TRUE(io::glob_match("*", ""));
  EXPECT_FALSE(io::glob_match("llmfoundry-*", "nemo-longseq-llama2-7b-4k"));
  EXPECT_FALSE(io::glob_match("*-t1-?.7b", "narayanan21-t1-18.4b"));
  io::ValidationWhatIf w;
  w.only = {"nemo-longseq-llama2-7b-4k", "nemo-longseq-llama2-7b-8?"};
  w.sets = {"training.attention=flash2", "inference.tp=2"};  // the second applies to no training case
  try {
    io::run_validation({kTraining}, nullptr, 1, {}, w);
    FAIL() << "an override that applies to no case is an input error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("inference.tp=2"), std::string::npos) << e.what();
  }
  w.sets = {"training.attention=flash2"};
  const nlohmann::json r = io::run_validation({kTraining}, nullptr, 1, {}, w);
  ASSERT_EQ(r["cases"].size(), 2u);
  EXPECT_EQ(r["cases"][1]["id"], "nemo-longseq-llama2-7b-8k");
  // The override reached the model: FlashAttention-2 is slower than the cuDNN kernel the
  // Megatron stack runs on Hopper by default.
  io::ValidationWhatIf plain;
  plain.only = w.only;
  const nlohmann::json base = io::run_validation({kTraining}, nullptr, 1, {}, plain);
  EXPECT_GT(r["cases"][0]["predicted"]["step_time_s"].get<double>(), base["cases"][0]["predicted"]["step_time_s"].get<double>());
  EXPECT_NE(io::validation_table(r).find("what-if, not the published configurations: --only nemo-longseq-llama2-7b-4k"),
            std::string::npos);
  // Every problem at once: a malformed override, a glob without a match; and an override
  // no selected case can take is an error too, with the first case's reason.
  w.only = {"nothing-*"};
  w.sets = {"bogus"};
  try {
    io::run_validation({kTraining}, nullptr, 1, {}, w);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.issues().size(), 2u) << e.what();
  }
  w.only = {"nemo-longseq-*"};
  w.sets = {"training.attention=flash9"};
  try {
    io::run_validation({kTraining}, nullptr, 1, {}, w);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("leaves no selected case readable; the first, nemo-longseq-llama2-7b-4k"),
              std::string::npos)
        << e.what();
  }
}

// NVIDIA's DGX Cloud 24.11 MaxText recipe (NVIDIA/dgxc-benchmarking v24.11.1,
// maxtext/configure.sh) runs attention=cudnn_flash_te with NVTE_FUSED_ATTN=1: Transformer
// Engine's cuDNN fused attention. The schema has no kernel field and ZeRO-3 files the rows
// under the PyTorch stack, whose default is FlashAttention-2 (+6.6%, +9.5%, +16.9%, +8.2%);
// with `attention: "cudnn"`, as the recipe sets it, they read +2.8% to +10.8%.
TEST(Validation, MaxTextRunsWithTheCudnnAttentionTheirRecipeSets) {
  const nlohmann::json r = run_with_attention({"dgxc2411-h100-bf16-maxtext-", "dgxc2411-h100-fp8-maxtext-"}, "cudnn", 4);
  for (const auto& c : r["cases"]) {
    ASSERT_EQ(c["status"], "ok") << c["id"];
    const double e = c["error"]["step_time_s"];
    EXPECT_LT(std::abs(e), 0.12) << c["id"] << " " << e;
  }
}

// torchtitan's benchmark table (benchmarks/llama3_h100_202412_torchtitan.md, torchtitan
// 9dec370) lists each run's features: the "FSDP" rows ran without torch.compile,
// torchtitan's default (training.compile false),
// so its RMSNorm, rotary embedding and SwiGLU run as eager PyTorch; the schema cannot say
// so and the validation runs every row fused (-20.3% and -22.9% for those two). With
// `elementwise: "eager"` they read -6.4% and -9.4%.
TEST(Validation, TorchtitanRowsWithoutCompileRunEager) {
  io::ValidationWhatIf w;
  w.only = {"torchtitan-t1-llama31-8b-8gpu-fsdp", "torchtitan-t3-llama31-8b-128gpu-fsdp"};
  w.sets = {"training.elementwise=eager"};
  const nlohmann::json r = io::run_validation({kTraining}, nullptr, 1, {}, w);
  ASSERT_EQ(r["cases"].size(), 2u);
  for (const auto& c : r["cases"]) {
    ASSERT_EQ(c["status"], "ok") << c["id"];
    const double e = c["error"]["step_time_s"];
    EXPECT_LT(std::abs(e), 0.11) << c["id"] << " " << e;
  }
}

TEST(Validation, TrainingErrorBounds) {
  const nlohmann::json r = io::run_validation({kTraining});
  const auto& s = r["summary"]["training-public.json"];
  // Recorded bounds (current model plus a small margin; all inside the targets of step time
  // median 15% and p90 35%, peak memory median 15%); lower them as the model improves.
  // Median 0.115 and p90 0.275 until the 500 W H100 (torchtitan's Grand Teton part) took
  // its sustained tensor rate from cuBLAS GEMMs measured at that power limit (FBGEMM PR
  // #2546): 0.948 -> 0.861 of its rating, torchtitan 17.7% -> 10.8%, p90 26.6% -> 24.3%.
  // 0.11 until the computation beside data-parallel and context-parallel communication ran
  // on the SMs NCCL's channels leave (16-24 of 132 on Hopper; NCCL logs and source): 10.5%
  // -> 10.3%, the families that read fast moved toward their measurements (llmfoundry
  // 10.5% -> 9.0%, mcore24 8.1% -> 5.7%, nemo 21.2% -> 20.6%, torchtitan 10.8% -> 10.1%),
  // the NVIDIA DGX Cloud recipes, already slow, away (dgxc2411 6.5% -> 8.1%). 0.105 until
  // the Megatron stack kept 16-bit optimizer states where full-precision ones would have
  // forced recomputation, as NVIDIA's Nemotron-4 340B recipe does (distributed_fused_adam
  // dtype bf16): its 128-GPU runs ran without recompute, +26.8% / +13.1% / +13.7% -> +1.9%
  // / -2.9% / -2.3%, median 10.3% -> 9.5%. 0.10 -> 0.112 when the Hopper SXM presets took
  // their large-GEMM rate from 8192^3 GEMMs held at the 700 W cap on an H100 and an H200
  // (bf16 0.75 -> 0.813, FP8 0.70 -> 0.743 of the peak at the sustained clock; the model had
  // read both boards 6-10% slow): the NVIDIA-tuned families that read slow moved to their
  // measurements (dgxc2411 7.0% -> 5.7%, signed +4.1% -> -0.8%; mbridge 9.9% -> 8.0%), those
  // already fast further away (llmfoundry 9.0% -> 13.2%, mcore24 6.0% -> 10.9%, nemo2409
  // 6.6% -> 10.3%, nemo 19.5% -> 20.3%): 9.5% -> 11.1%. What those runs pay that a GEMM
  // does not is still missing. 0.112 -> 0.109 when 8-bit GEMMs counted a tile's fixed time
  // in their own K loop's units (twice the 16-bit K0 on Hopper; FP8 grouped GEMMs at K = 192
  // measured no faster than bf16) and the Hopper presets recorded the 8192^3 shape their
  // large-GEMM rate was measured at: the FP8 runs' short-K GEMMs (weight gradients over a
  // microbatch's tokens, tensor-parallel projections) read 1-2% slower, 11.1% -> 10.8%
  // (nemo2409 10.2% -> 9.7%, nemo 20.3% -> 20.1%, dgxc2411 5.7% -> 5.5%).
  EXPECT_LE(s["step_time_s"]["median_abs_error"].get<double>(), 0.109);
  // p90 0.265 until op-level checkpointing kept torchtitan's odd-numbered matmul outputs
  // (wq, wv, w1, w2) instead of half of every projection: 45% of a Llama block's matmul
  // FLOPs rerun, not 50%, so its selective-recompute runs, already too fast, lost 1-2%.
  // 0.25 -> 0.235 (23.5% -> 23.0%) with cuDNN's measured causal backward ratio (below).
  EXPECT_LE(s["step_time_s"]["p90_abs_error"].get<double>(), 0.235);
  // Memory 12.6% / 22.7% until torchtitan's interleaved 405B run took its framework's two
  // stages per rank (+22.6% -> +0.5%, step -27.7% -> -9.5%); 11.5% until the matmul
  // outputs above (Llama 3.1 8B selective rows -13.2% -> -10.8%); 11% until FSDP2's root
  // unit (embedding, final norm, head) stayed gathered through the peak (8B rows -10.8% ->
  // -8.4%, their torch.compile rows -4.5% -> -2.0%).
  EXPECT_LE(s["peak_memory_gib"]["median_abs_error"].get<double>(), 0.09);
  // p90 0.23 until PyTorch's loss parallel held its four fp32 logit-shard buffers
  // (torchtitan's 70B TP8 rows -27.5% -> -16.6%, -22.9% -> -11.3%).
  EXPECT_LE(s["peak_memory_gib"]["p90_abs_error"].get<double>(), 0.175);
  // Per source family, step time: every family of five cases or more within 20%, and each
  // within its recorded figure (a ratchet, lowered as the model improves).
  const std::map<std::string, double> family_bounds = {
      // korthikanti22 0.075 until each tensor-parallel rank ran the loss over its own
      // vocabulary shard only (its TP8 runs read 0.4 points faster).
      // dgxc2411 0.09 and nemo2409 0.08 until the 16-bit optimizer states above.
      // dgxc2411 0.07 -> 0.06, llmfoundry 0.095 -> 0.135, mcore24 0.06 -> 0.11, mbridge
      // 0.10 -> 0.085, nemo 0.20 -> 0.205 and nemo2409 0.07 -> 0.105 with the measured
      // Hopper GEMM rate (above).
      {"dgxc2411", 0.06}, {"korthikanti22", 0.076}, {"llmfoundry", 0.135},
      // mcore24 0.03 and narayanan21 0.145 until a cross-node send took one network hop at
      // the NIC's rate instead of the many-node all-reduce curve (2 MiB: 726 -> 55 us): the
      // pipeline sends of their 70B-462B and PP runs got cheaper, and those runs already read
      // a few percent fast (mcore24 70B -1.6% -> -5.0%, 177B -2.7% -> -6.2%).
      // mcore24 0.05, nemo 0.205 and nemo2409 0.08 until userbuffers' pipelined overlaps
      // hid FLUX's measured 20% of their collectives (arXiv 2406.06858, TE 1.4 on H800):
      // the NVIDIA-tuned families that read slow moved toward the measurements (dgxc2411
      // 8.4% -> 6.3%, signed +6.2% -> +4.4%; mbridge 9.1% -> 8.0%), those already fast
      // further away (mcore24 4.7% -> 7.4%, nemo 20.4% -> 21.3%, nemo2409 7.7% -> 8.3%).
      // mcore24 0.08 until collectives across nodes took NCCL's latency-bandwidth model
      // instead of the busbw-by-size curve of 8-GPU nodes, which charged data-parallel
      // groups of one or two GPUs a node up to 2.7x the published 10-node logs' times: the
      // 70B-177B runs' gradient traffic got cheaper and they read 0.2-0.9 points faster.
      {"mcore24", 0.11},
      // mbridge rose from 0.095 when Megatron's all-to-all dispatcher made its second
      // permutation (sort by local expert): Qwen3-30B-A3B -20% -> -14%, Qwen3-235B -7% ->
      // -4%, DeepSeek-V3 +7% -> +10%, so the middle of the six moved up.
      {"mbridge", 0.085},
      // nemo rose from 0.18 when userbuffers' bulk backward overlap became the Megatron
      // default on Hopper, and from 0.19 to 0.2013 when FP8 runs gathered their sequence-
      // parallel activations in FP8 as Transformer Engine does (since 1.2): its long-sequence
      // Llama-2 7B FP8 runs were already too fast, so they were the one family over 20%.
      // nemo 0.21 -> 0.20 (20.6% -> 19.5%) when cuDNN's causal attention backward took the
      // causal/non-causal ratio its own benchmark measured (0.86-0.92 at 4K-16K) instead of
      // the forward kernel's: those attention-bound runs read 1-1.5 points slower.
      // nemo2409 0.105 -> 0.10 with the 8-bit GEMMs' K depth (above).
      {"narayanan21", 0.15}, {"nemo", 0.205}, {"nemo2409", 0.10},
      // torchtitan 0.17 until its checkpointing kept the matmul outputs its policy names;
      // 0.18 until its 500 W GPUs took the tensor rate measured at that limit.
      {"torchtitan", 0.105}};
  // Families allowed over 20% (the model is missing something there; the bound above holds).
  // nemo: its step times are derived from published TFLOP/s under an attention-FLOP
  // convention the source does not state (42% between the two readings), and its long-
  // sequence FP8 runs read fast; 19.5% -> 20.3% with the measured Hopper GEMM rate.
  const std::set<std::string> over_twenty = {"nemo"};
  const nlohmann::json groups = io::group_errors(r, "source");
  std::map<std::string, size_t> cases_of;
  for (const auto& c : r["cases"]) ++cases_of[c["groups"]["source"].get<std::string>()];
  for (const auto& [family, bound] : family_bounds) {
    ASSERT_TRUE(groups.contains(family)) << family;
    const double median = groups[family]["step_time_s"]["median_abs_error"].get<double>();
    EXPECT_LE(median, bound) << family;
    if (cases_of[family] >= 5 && !over_twenty.contains(family)) {
      EXPECT_LE(median, 0.20) << family;
    }
  }
}

// The shipped H100 network profile (data/calibration, fitted from published nccl-tests
// logs) applies to the H100 cases only and makes them no worse.
TEST(Validation, PublicH100NetworkProfileHelps) {
  const CalibrationProfile p =
      io::read_profile(std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "calibration" / "h100-nccl-tests-public.json");
  const nlohmann::json base = io::run_validation({kTraining}), cal = io::run_validation({kTraining}, &p);
  const auto& b = base["summary"]["training-public.json"]["step_time_s"];
  const auto& c = cal["summary"]["training-public.json"]["step_time_s"];
  EXPECT_LE(c["median_abs_error"].get<double>(), 0.13);
  EXPECT_LE(c["median_abs_error"].get<double>(), b["median_abs_error"].get<double>());
  for (size_t i = 0; i < base["cases"].size(); ++i) {
    const auto& bc = base["cases"][i];
    if (bc["id"].get<std::string>().rfind("narayanan21", 0) == 0 || bc["id"].get<std::string>().rfind("korthikanti22", 0) == 0) {
      EXPECT_EQ(bc["predicted"], cal["cases"][i]["predicted"]) << bc["id"] << ": an A100 case must not change";
    }
  }
}

// Serving: every offline-throughput and serving-percentile case is simulated, and each
// metric's median |error| stays within the figure recorded here (the current model plus a
// small margin: a ratchet, lowered as the model improves). The goals are 12% for every
// metric and 15% for TTFT; the TTFT P50/P99 and ITL P99 bounds are above them today.
TEST(Validation, ServingCasesAllSimulatedWithinRecordedBounds) {
  const auto dir = std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "validation";
  const nlohmann::json r = io::run_validation({dir / "inference-public.json", dir / "serving-percentiles-public.json"});
  size_t n = 0;
  for (const auto& c : r["cases"]) {
    EXPECT_EQ(c["status"], "ok") << c["id"] << ": " << c.value("reason", std::string());
    ++n;
  }
  EXPECT_EQ(n, 82u);
  const std::map<std::string, std::map<std::string, double>> bounds = {
      {"inference-public.json",
       // ITL P50 0.09 -> 0.10 and throughput 0.09 -> 0.065 when Hopper GEMMs of 17-512 rows
       // filled the SMs as cuBLASLt does (narrower tiles or split K, gemm_split_k_min, measured
       // on an H200): TensorRT-LLM's offline runs, slow, came closer (-7.7% -> -5.0% signed);
       // SGLang's H100 runs' ITL P50 moved a point away. Throughput 0.065 -> 0.075 when the
       // decode attention kernel paid its fixed time at every batch (batched H100 timings
       // published at 64 sequences): TensorRT-LLM's offline runs, slow, read 1-3 points slower
       // (-5.0% -> -6.4% signed); its XQA kernel's batched timings are not published.
       {{"throughput_tokens_per_s", 0.075}, {"tpot_p50_ms", 0.075}, {"ttft_p50_ms", 0.12}, {"itl_p50_ms", 0.10}}},
      {"serving-percentiles-public.json",
       // ITL mean 0.035, TPOT P50 0.035 and P99 0.13 until expert-parallel ranks waited for the
       // busiest one (ep_rank_imbalance): at decode batches the busiest of 8 ranks streams
       // ~12% more touched experts than the mean (binomial spread), so the DeepSeek-R1 EP8
       // runs' TPOT moved from -3..-5% to +4..+7% (vLLM) and TensorRT-LLM's, already slow,
       // further; their TTFT, prefill at the router's measured skew, came closer.
       // ITL mean 0.06 and TPOT P50 0.055 until SGLang's block-FP8 linear layers ran on
       // DeepGEMM (profile knob block_fp8_gemm): its DP-attention DeepSeek-R1 runs, which the
       // case schema records as plain TP8, decode 8-11% faster than measured, while SGLang
       // 0.4.5.post3 (+17% -> +3%) and 0.5.7 (+50% -> +31%) came closer.
       // TPOT mean 0.08 -> 0.085 and P50 0.07 -> 0.075 with the GPU's idle time between
       // kernels (graph_kernel_gap_us) and vLLM V1's host time refitted under it (0.9 ->
       // 1.4 ms a step, its blog's 1.69x over V0): vLLM 0.8.4's DeepSeek-R1 mean TPOTs on
       // the DGX H200, -1..+6%, read +1..+9%, those on Nebius H200 (-6..-7%) -4..-5%.
       // TPOT P50 0.075 -> 0.065 and mean 0.085 -> 0.09 when SGLang (0.4.6+) and TensorRT-LLM
       // ran DeepSeek's query and key-value down projections as one GEMM (profile knob
       // mla_down_projections): TensorRT-LLM's DeepSeek-R1 decodes, slow, came 3-7 points
       // closer, its 10,000-token run, fast, read 3 points faster, which moved the mean's median.
       // ITL mean 0.07 -> 0.085, TPOT mean 0.09 -> 0.095 and P50 0.065 -> 0.085 when every
       // small kernel of a layer took its own launch (norms, MLA's latent norms, rotary, the
       // KV-cache write; profile knob rope_kv_write): DeepSeek-R1's 61 layers run six where
       // one floored pass stood, about 1 ms more of a 40-50 ms step, and the DeepSeek-R1 runs
       // on H200 around the medians, slow already (vLLM 0.8.4 +2..+9%, TensorRT-LLM +12..+29%),
       // read 2-3 points slower.
       // ITL mean 0.085 -> 0.095, TPOT mean 0.095 -> 0.115 and P50 0.085 -> 0.097 when a
       // decode attention kernel took its measured fixed time on Hopper
       // (decode_attention_fixed_us, 15.2 us: FA3 and FlashInfer at one sequence of 1,024
       // keys) and the host times fitted to engine blogs were refitted under it: every
       // DeepSeek-R1 run here is on H200 and most read slow already (vLLM 0.8.4 +2..+12%
       // -> +3..+14%, SGLang 0.5.7 +27..+35% -> +34..+40%); the A100 runs have no figure.
       // ITL mean 0.095 -> 0.10, TPOT mean 0.115 -> 0.12 and P50 0.097 -> 0.107 when vLLM
       // V1's graphed steps paid the boundaries of their graph pieces (15 us a layer before
       // 0.11.0; profile knobs piecewise_graph_us_per_layer, full_graph_decode_steps) and
       // V1's host time was refitted under them (1.4 -> 0.9 ms a step): vLLM 0.8.4's 61-layer
       // DeepSeek-R1 decodes, slow already, read about a point slower.
       // ITL mean 0.10 -> 0.175 and P50 0.05 -> 0.055 when the fused MoE kernel's decode line
       // was refitted to four published kernel benchmarks on Hopper instead of one small-expert
       // shape (26.6 us + 0.122 us a touched expert + bytes at 0.817 of the HBM peak, where
       // 22.6 us + bytes at 0.543 stood): DeepSeek-R1's TP8 experts (5.5 MB a GPU) stream about
       // a quarter faster, SGLang 0.5.7's decodes, slow, came closer (+31..+37% -> +15..+19%),
       // vLLM 0.8.4's moved from -2..+4% to -9..-22% (slower host CPUs on the DGX H200, the
       // source says; the two engines ran the same Triton kernel and tuned config, and vLLM
       // 0.8.4 measured 28% slower than SGLang 0.4.5.post3 on the same Nebius H200 node).
       // ITL mean 0.175 -> 0.155 when the group-limited routing that vLLM before 0.10.2 and
       // SGLang before 0.4.5.post1 ran as compiled PyTorch ops took its measured time (profile
       // knobs grouped_topk_us, grouped_topk_ns_per_token; SGLang PR #5371, vLLM PR #21107):
       // vLLM 0.8.4's DeepSeek-R1 decodes, fast, came 1.6 ms a step closer, its prompt steps
       // (0.3 ms a layer at 8,192 tokens) later.
       // ITL mean 0.155 -> 0.145 when a multi-head latent attention layer's graph pieces took
       // their measured boundary time (vLLM PR #42885, 50.8 us a layer; profile knob
       // piecewise_graph_us_per_mla_layer): vLLM 0.8.4's DeepSeek-R1 decodes, fast, came 4-5
       // points closer.
       // ITL mean 0.145 -> 0.135 when that boundary, before vLLM 0.9.0, held the rotary
       // embedding's PyTorch ops too (73.6 us a layer; vLLM PR #17668 timed the op's host time
       // at 216 us with it, 149 us without): the same decodes, 4-17% fast, came 2-3 points
       // closer.
       // ITL mean 0.135 -> 0.115 when vLLM V1 paid the host time per running sequence that
       // asynchronous scheduling hides (12.8 us a sequence, vLLM PR #23914; profile knobs
       // step_overhead_us_per_seq, and step_overhead_ms 0.7 -> 0): vLLM 0.8.4's DeepSeek-R1
       // decodes at 50-150 sequences, 10-15% fast, came 2-3 points closer.
       {{"itl_p50_ms", 0.055}, {"itl_mean_ms", 0.115},
        // ITL P99 0.185 -> 0.18 (17.4%) when LMDeploy TurboMind up to 0.4 ran the gate and up
        // projections as two GEMMs (profile knob mlp_gate_up): its A100 runs' ITLs, a few
        // percent fast, came 0.5-1 point closer. 0.18 -> 0.175 with the decode attention
        // kernel's fixed time (above).
        // With the Hopper GEMMs' measured tile and split-K fill (gemm_split_k_min: one 128x256
        // tile per 128 rows had charged the decode steps' narrow projections 2-4x what
        // cuBLASLt takes on an H200) and the host times refitted under it (vLLM 0.5 8.0 ms +
        // 165 us a sequence, 0.6 7.7 ms, V1 0.7 ms): ITL mean 0.10 -> 0.095, P99 0.175 ->
        // 0.15, TPOT mean 0.12 -> 0.10, P50 0.107 -> 0.06. The DeepSeek-R1 decodes on H200,
        // slow, came closer (vLLM 0.8.4 on the DGX H200 +4..+15% -> -10..+4%, TensorRT-LLM
        // +16..+34% -> +7..+22%); vLLM 0.8.4 on Nebius H200 went from 0..+7% to -8..-10%.
        // ITL P99 0.15 -> 0.19, TPOT mean 0.10 -> 0.165 and P50 0.06 -> 0.135 with the fused
        // MoE line (above).
        // ITL P99 0.19 -> 0.165, TPOT mean 0.165 -> 0.155 and P50 0.135 -> 0.125 with the
        // group-limited routing (above).
        // ITL P99 0.165 -> 0.17, TPOT mean 0.155 -> 0.145 and P50 0.125 -> 0.095 with MLA's
        // graph pieces (above).
        // ITL P99 0.17 -> 0.165 and TPOT mean 0.145 -> 0.13 with the pre-0.9.0 boundary (above).
        // ITL P99 0.165 -> 0.17 (0.161 -> 0.165) and TPOT mean 0.13 -> 0.125 with vLLM V1's
        // host time per sequence (above): the P99 median of 50 sits among vLLM 0.8.4 ShareGPT
        // runs whose ITL tails, late already, read 2 points later.
        // TPOT P50 0.095 -> 0.10 (9.1% -> 9.7% median of 15) with the measured Hopper GEMM
        // rate (the training bounds): the InferenceX H200 rows' prompt steps, which share
        // the decodes' steps, got shorter.
        {"itl_p99_ms", 0.17}, {"tpot_mean_ms", 0.125}, {"tpot_p50_ms", 0.10},
        // TPOT P99 0.165 -> 0.14 when SGLang 0.5 fused DeepSeek's shared expert into the
        // routed-expert kernel (profile knob shared_expert). 0.14 -> 0.175 when every step
        // paid the GPU's idle time between its kernels (graph_kernel_gap_us, 1.3 us on
        // Hopper; DeepSeek-R1's 61 layers add 0.7 ms to a 40 ms decode step) and vLLM V1's
        // host time was refitted under it: the cases around the median of 19, slow at P99
        // already, moved away (vLLM 0.8.4's ShareGPT runs +13.0% and +15.9% to +17-18%,
        // SGLang 0.5.7 at concurrency 8 +10.2% -> +14.2%).
        // 0.175 -> 0.19, throughput 0.065 -> 0.07 and requests 0.07 -> 0.075 with the layers'
        // small kernels (above): the same DeepSeek-R1 runs. 0.19 -> 0.205 and requests
        // 0.075 -> 0.09 with the decode attention kernel's fixed time (above), 0.09 -> 0.095
        // with vLLM V1's graph pieces (above).
        // TPOT P99 0.205 -> 0.115, throughput 0.07 -> 0.065 and requests 0.095 -> 0.08 with the
        // GEMMs' measured fill (above).
        // TPOT P99 0.115 -> 0.155, throughput 0.065 -> 0.085 and requests 0.08 -> 0.14 with the
        // fused MoE line (above).
        // TPOT P99 0.155 -> 0.14, throughput 0.085 -> 0.075 and requests 0.14 -> 0.095 with
        // the group-limited routing (above).
        // TPOT P99 0.14 -> 0.125, throughput 0.075 -> 0.065 and requests 0.095 -> 0.08 with
        // MLA's graph pieces (above).
        // Throughput 0.065 -> 0.06 and requests 0.08 -> 0.06 with the pre-0.9.0 boundary (above).
        {"tpot_p99_ms", 0.125}, {"throughput_tokens_per_s", 0.06}, {"requests_per_s", 0.06},
        // TTFT P50 rose from 0.19 when engines one batch ahead (SGLang 0.4+, TensorRT-LLM)
        // began admitting a request that arrives mid-step to the batch after next: the
        // median of 20 cases sits between two SGLang DeepSeek-R1 cases at 0.21 and 0.29.
        // TTFT mean (0.17) and P50 rose again when expert parallel behind tensor-parallel
        // attention stopped paying two all-to-alls it never runs: the DeepSeek-R1 EP8 runs
        // whose measured TTFT sits far above any prefill cost (vLLM 0.8.4 EP8 prefills at
        // half its TP8 run's speed; TensorRT-LLM's first requests) read earlier still.
        // Both came down again (0.185 -> 0.175, 0.28 -> 0.26) with the router's skew.
        // TTFT mean 0.175 -> 0.13 when an idle engine began its first step on the first
        // client's request instead of the whole simultaneous burst.
        // With DeepGEMM: 0.13 -> 0.12 and P99 0.34 -> 0.30.
        // P99 0.297 -> 0.301 when every request paid the front end's own time (vLLM V1 7 ms,
        // SGLang 0.5 6.6 ms, measured at concurrency 1): the DGX H200 DeepSeek-R1 runs whose
        // P99 read a few percent late read a little later.
        // P99 0.31 -> 0.32 and ITL P99 0.175 -> 0.185 when the H200 preset took its NVLS
        // all-reduce figure (480 GB/s, the same source as its size curve, which was a share
        // of it) and SGLang's profiles their NCCL_NVLS_ENABLE=0: vLLM 0.8.4's DeepSeek-R1
        // prompt steps on 8x H200 run 4% faster, their long-prompt TTFTs from -5..-7% to
        // -10..-11% (the measured 8,192-token steps, 520-538 ms, now read 503 ms).
        // P50 0.26 -> 0.165 and P99 0.32 -> 0.31 with the kernel gaps: the prompt steps'
        // decodes run longer, and vLLM 0.8.4's first tokens, early, come later.
        // Mean 0.12 -> 0.13, P50 0.165 -> 0.18 and P99 0.31 -> 0.315 with the layers' small
        // kernels: prompt steps share their step with decodes that now run longer, and the
        // DeepSeek-R1 TTFTs that read late (SGLang 0.4.5.post3 on Nebius H200, vLLM 0.8.4's
        // EP8 ShareGPT run) read later. P50 0.18 -> 0.165 with the decode attention kernel's
        // fixed time (the prompt steps' decodes run longer; the median sits between vLLM
        // 0.8.4 runs that read early). 0.165 -> 0.185 with vLLM V1's graph pieces: its
        // ShareGPT DeepSeek-R1 runs, whose short prompts share steps with decodes, read 2-5
        // points later (+8..+10% -> +10..+15%).
        // P99 0.315 -> 0.305 with the GEMMs' measured fill (above).
        // Mean 0.13 -> 0.14, P50 0.185 -> 0.295 and P99 0.305 -> 0.31 with the fused MoE line
        // (above): vLLM 0.8.4's prompt steps, early already, run faster still.
        // Mean 0.14 -> 0.135, P50 0.295 -> 0.24 and P99 0.31 -> 0.29 with the group-limited
        // routing (above): vLLM 0.8.4's long-prompt TTFTs, early, came closer.
        // Mean 0.135 -> 0.13, P50 0.24 -> 0.215 and P99 0.29 -> 0.28 with MLA's graph pieces
        // (above). Mean 0.13 -> 0.12 when SGLang admitted by its estimate of the running
        // requests' output tokens (profile knobs admission_output_ratio_*): its 200-prompt
        // DeepSeek-R1 run stopped thrashing the KV pool. Mean 0.12 -> 0.125 when SGLang 0.4
        // requests paid its front end's own time (6.7 ms, a published TTFT less TPOT): the
        // Nebius SGLang 0.4.5.post3 run near the median, late already, reads 2 points later.
        // P50 0.215 -> 0.205 and P99 0.28 -> 0.30 with the pre-0.9.0 boundary (above): the
        // P99 median of 24 sits between a case near 20% and one at 36.5%, and the vLLM 0.8.4
        // runs below it (isl1000 on both hosts, early) read 5 points earlier as their decodes
        // lengthen and the prompt steps land elsewhere in the arrival stream.
        // P50 0.205 -> 0.20 with vLLM V1's host time per sequence (above). P99 0.30 -> 0.29
        // (29.5% -> 28.5%) when 8-bit GEMMs counted a tile's fixed time in their own K loop:
        // FP8 prompt steps' short-K GEMMs read slower, the early DeepSeek-R1 TTFTs later.
        {"ttft_mean_ms", 0.125}, {"ttft_p50_ms", 0.20}, {"ttft_p99_ms", 0.29}}},
  };
  for (const auto& [file, metrics] : bounds)
    for (const auto& [metric, bound] : metrics) {
      const auto& m = r["summary"][file][metric];
      EXPECT_EQ(m["unsupported"], 0) << file << " " << metric;
      EXPECT_LE(m["median_abs_error"].get<double>(), bound) << file << " " << metric;
    }
  // Per source family (all metrics pooled): every family of five cases or more within 25%,
  // and each within its recorded figure.
  // vllmspot 0.075 -> 0.085 when SGLang's block-FP8 layers ran on DeepGEMM (its DP-attention
  // runs, recorded as plain TP8, read 8-11% fast); inferencex870 0.35 -> 0.32 and llmie
  // 0.075 -> 0.06 with it; inferencex870 0.32 -> 0.28 with SGLang's fused shared expert.
  // vllmspot 0.082 -> 0.085 (bound 0.09) with the front end's per-request time (its vLLM
  // 0.8.4 TTFTs, a few percent late already, read 2-3 points later).
  // llmie 0.06 -> 0.08 and vllmspot 0.09 -> 0.11 with the H200's NVLS all-reduce figure:
  // their vLLM 0.8.4 DeepSeek-R1 TTFTs read 4-5 points earlier.
  // inferencex870 0.28 -> 0.29 and llmie 0.08 -> 0.065 with the graph gaps: SGLang 0.5.7's
  // DeepSeek-R1 decodes, 19-32% slow already, read 2-4 points slower, vLLM 0.8.4's on Nebius
  // H200, 6-8% fast, read 5-6% fast.
  // inferencex870 0.29 -> 0.26 with SGLang 0.5's fused MLA down projections (its TPOTs
  // +24..+34% -> +19..+32%).
  // inferencex870 0.26 -> 0.31 and llmie 0.065 -> 0.08 with the layers' small kernels: SGLang
  // 0.5.7's DeepSeek-R1 TPOTs, +19..+32% slow, read +27..+35% (six floored kernels a layer
  // where one stood; SGLang may overlap or fuse some of them on DeepSeek, not established).
  // inferencex870 0.31 -> 0.34, llmie 0.08 -> 0.085 and vllmspot 0.11 -> 0.115 with the
  // decode attention kernel's fixed time on Hopper: the same slow DeepSeek-R1 decodes.
  // vllmspot 0.115 -> 0.13 with vLLM V1's graph pieces (its vLLM 0.8.4 runs).
  // llmie 0.085 -> 0.11, trtllm 0.09 -> 0.06 and vllmspot 0.13 -> 0.10 with the Hopper
  // GEMMs' measured tile and split-K fill: vLLM 0.8.4's DeepSeek-R1 runs on the Nebius H200,
  // 0..+7% slow, read 8-10% fast, the same runs on the DGX H200 (slower host CPUs, the
  // source says) and TensorRT-LLM's, slow, came closer.
  // trtllm 0.06 -> 0.07 with the decode attention kernel's fixed time at every batch (above).
  // inferencex870 0.34 -> 0.16, llmie 0.11 -> 0.13 and vllmspot 0.10 -> 0.18 with the fused
  // MoE kernel's decode line refitted to four published Hopper benchmarks (above): SGLang's
  // DeepSeek-R1 decodes, slow, came closer; vLLM 0.8.4's read 9-22% fast. vllmspot 0.18 ->
  // 0.155 with the group-limited routing vLLM 0.8.4 ran as compiled PyTorch ops (above).
  // lmdeploy 0.065 -> 0.062 with TurboMind's partial preemption; llmie 0.129 -> 0.126 and
  // vllmspot 0.154 -> 0.152 with MLA's graph pieces (above); llmie 0.126 -> 0.090 with
  // SGLang's admission by estimated output tokens (above); vllmspot 0.152 -> 0.140 with the
  // pre-0.9.0 MLA boundary (above). llmie 0.090 -> 0.084 and vllmspot 0.140 -> 0.137 with
  // vLLM V1's host time per sequence (above).
  const std::map<std::string, double> family_bounds = {{"inferencex870", 0.16}, {"llmie", 0.09}, {"lmdeploy", 0.065},
                                                       {"sglang", 0.11},         {"trtllm", 0.07},  {"vllmspot", 0.14}};
  const nlohmann::json groups = io::group_errors(r, "source");
  std::map<std::string, size_t> cases_of;
  for (const auto& c : r["cases"]) ++cases_of[c["groups"]["source"].get<std::string>()];
  for (const auto& [family, bound] : family_bounds) {
    ASSERT_TRUE(groups.contains(family)) << family;
    const double median = groups[family]["(all)"]["median_abs_error"].get<double>();
    EXPECT_LE(median, bound) << family;
    if (cases_of[family] >= 5) {
      EXPECT_LE(median, 0.25) << family;
    }
  }
}

// Grouping: the source family is the case id up to its first "-"; the signed median keeps
// the direction of the errors; "(all)" pools every metric of the group.
TEST(Validation, GroupErrorsBySourceFamily) {
  nlohmann::json r;
  r["cases"] = nlohmann::json::array();
  auto add = [&](const char* source, const char* engine, double e1, double e2) {
    r["cases"].push_back({{"status", "ok"},
                          {"groups", {{"source", source}, {"engine", engine}}},
                          {"error", {{"ttft_mean_ms", e1}, {"tpot_mean_ms", e2}}}});
  };
  add("a", "vllm 0.8.4", -0.5, 0.1);
  add("a", "vllm 0.8.4", -0.3, 0.2);
  add("a", "sglang 0.5.7", -0.1, 0.3);
  add("b", "sglang 0.5.7", 0.4, -0.2);
  r["cases"].push_back({{"status", "unsupported"}, {"groups", {{"source", "c"}}}, {"error", nlohmann::json::object()}});
  const nlohmann::json g = io::group_errors(r, "source");
  EXPECT_FALSE(g.contains("c"));
  EXPECT_EQ(g["a"]["ttft_mean_ms"]["n"], 3);
  EXPECT_DOUBLE_EQ(g["a"]["ttft_mean_ms"]["median_abs_error"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(g["a"]["ttft_mean_ms"]["signed_median_error"].get<double>(), -0.3);
  EXPECT_EQ(g["a"]["(all)"]["n"], 6);
  EXPECT_DOUBLE_EQ(g["a"]["(all)"]["median_abs_error"].get<double>(), 0.25);  // 0.1 0.1 0.2 0.3 0.3 0.5
  EXPECT_DOUBLE_EQ(g["b"]["(all)"]["signed_median_error"].get<double>(), 0.1);
  const nlohmann::json e = io::group_errors(r, "engine");
  EXPECT_EQ(e["sglang 0.5.7"]["ttft_mean_ms"]["n"], 2);
}

// Grouping by the job's size: one GPU, one 8-GPU node, then each factor of 8, read from
// system.num_gpus; tables print count-named groups by their count, then the others.
TEST(Validation, GroupErrorsByJobSize) {
  const nlohmann::json r = io::run_validation({kTraining});
  std::map<std::string, std::string> by_id;
  for (const nlohmann::json& c : r["cases"]) by_id[c["id"].get<std::string>()] = c["groups"]["gpus"].get<std::string>();
  EXPECT_EQ(by_id.at("nemo-longseq-llama2-7b-4k"), "2-8");          // 4 GPUs
  EXPECT_EQ(by_id.at("torchtitan-t1-llama31-8b-8gpu-fsdp"), "2-8");  // 8
  EXPECT_EQ(by_id.at("nemo-longseq-llama2-7b-16k"), "9-64");         // 16
  EXPECT_EQ(by_id.at("nemo-longseq-llama2-7b-64k"), "9-64");         // 64
  EXPECT_EQ(by_id.at("nemo-longseq-llama2-7b-128k"), "65-512");      // 128
  EXPECT_EQ(by_id.at("nemo-longseq-llama2-7b-1024k"), "513-4096");   // 1024
  const nlohmann::json g = io::group_errors(r, "gpus");
  size_t n = 0;
  for (auto it = g.begin(); it != g.end(); ++it) n += it.value()["step_time_s"]["n"].get<size_t>();
  EXPECT_EQ(n, 124u);  // every simulated step time in exactly one group
  nlohmann::json names;
  for (const char* k : {"?", "9-64", "4097+", "1", "513-4096", "2-8", "65-512"}) names[k] = nlohmann::json::object();
  EXPECT_EQ(io::ordered_group_names(names),
            (std::vector<std::string>{"1", "2-8", "9-64", "65-512", "513-4096", "4097+", "?"}));
  const std::string table = io::group_table(g, "gpus");
  EXPECT_LT(table.find("  2-8 "), table.find("  9-64 "));
  EXPECT_LT(table.find("  9-64 "), table.find("  65-512 "));
  EXPECT_LT(table.find("  65-512 "), table.find("  513-4096 "));
}

// A run against a baseline report: medians before and after per file and metric and per
// group, the case metrics whose error changed (a metric one side lacks as null), and the
// cases only one side has or only one side could simulate. Cases match by file and id.
TEST(Validation, CompareReportsAgainstABaseline) {
  auto report = [](std::initializer_list<nlohmann::json> cases) {
    return nlohmann::json{{"schema", "capsim-validation-report/1"}, {"cases", cases}};
  };
  auto ok = [](const char* file, const char* id, nlohmann::json error) {
    const std::string source = std::string(id).substr(0, std::string(id).find('-'));
    return nlohmann::json{{"file", file}, {"id", id}, {"status", "ok"}, {"groups", {{"source", source}}}, {"error", error}};
  };
  auto unsupported = [](const char* file, const char* id) {
    return nlohmann::json{{"file", file}, {"id", id}, {"status", "unsupported"}, {"reason", "r"}};
  };
  const nlohmann::json before = report({ok("f.json", "a-1", {{"ttft", -0.4}, {"tpot", 0.1}}),
                                        ok("f.json", "a-2", {{"ttft", 0.2}}),
                                        ok("g.json", "a-1", {{"ttft", 0.3}}),  // same id, other file
                                        ok("f.json", "b-1", {{"ttft", -0.1}}),
                                        unsupported("f.json", "c-1")});
  const nlohmann::json after = report({ok("f.json", "a-1", {{"ttft", -0.2}, {"tpot", 0.1}, {"itl", 0.05}}),
                                       ok("f.json", "a-2", {{"ttft", 0.2}}),
                                       ok("g.json", "a-1", {{"ttft", 0.3}}),
                                       unsupported("f.json", "b-1"),
                                       ok("f.json", "c-1", {{"ttft", 0.5}}),
                                       ok("f.json", "d-1", {{"ttft", 0.0}})});
  const nlohmann::json c = io::compare_reports(after, before, {"source"}, "base.json");
  ASSERT_EQ(c["moved"].size(), 2u);
  EXPECT_EQ(c["moved"][0], (nlohmann::json{{"file", "f.json"}, {"id", "a-1"}, {"metric", "itl"}, {"before", nullptr}, {"after", 0.05}}));
  EXPECT_EQ(c["moved"][1], (nlohmann::json{{"file", "f.json"}, {"id", "a-1"}, {"metric", "ttft"}, {"before", -0.4}, {"after", -0.2}}));
  EXPECT_EQ(c["added"], (nlohmann::json::array({{{"file", "f.json"}, {"id", "d-1"}}})));
  EXPECT_TRUE(c["removed"].empty());
  ASSERT_EQ(c["status_changed"].size(), 2u);
  EXPECT_EQ(c["status_changed"][0]["id"], "b-1");
  EXPECT_EQ(c["status_changed"][0]["after"], "unsupported");
  EXPECT_EQ(c["status_changed"][1]["id"], "c-1");
  // f.json ttft: before -0.4, 0.2, -0.1 (|.| median 0.2, signed median -0.1); after -0.2,
  // 0.2, 0.5, 0.0 (|.| median 0.2, signed median 0.1).
  const nlohmann::json& t = c["metrics"]["f.json"]["ttft"];
  EXPECT_EQ(t["before"]["n"], 3);
  EXPECT_DOUBLE_EQ(t["before"]["median_abs_error"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(t["before"]["signed_median_error"].get<double>(), -0.1);
  EXPECT_EQ(t["after"]["n"], 4);
  EXPECT_DOUBLE_EQ(t["after"]["median_abs_error"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(t["after"]["signed_median_error"].get<double>(), 0.1);
  EXPECT_TRUE(c["metrics"]["f.json"]["itl"]["before"].is_null());
  // Groups: the source family "b" has no simulated case after.
  EXPECT_EQ(c["groups"]["source"]["b"]["ttft"]["before"]["n"], 1);
  EXPECT_TRUE(c["groups"]["source"]["b"]["ttft"]["after"].is_null());
  EXPECT_EQ(c["groups"]["source"]["a"]["(all)"]["after"]["n"], 5);
  // Removed: a case only the baseline has.
  const nlohmann::json r = io::compare_reports(report({ok("f.json", "a-2", {{"ttft", 0.2}})}), before, {}, "base.json");
  EXPECT_EQ(r["removed"].size(), 4u);
  EXPECT_TRUE(r["moved"].empty());
  // The same report: nothing moved.
  const nlohmann::json same = io::compare_reports(before, before, {"source"}, "base.json");
  EXPECT_TRUE(same["moved"].empty() && same["added"].empty() && same["removed"].empty() && same["status_changed"].empty());
  const std::string table = io::comparison_table(c, "base.json");
  EXPECT_NE(table.find("against base.json: 2 case metrics moved, 1 cases added, 0 removed, 2 changed status"), std::string::npos) << table;
  EXPECT_NE(table.find("-40.0% -> -20.0%"), std::string::npos) << table;
}

// A baseline that is not a validation report is an input error naming every problem, or the
// one that says what kind of file it is.
TEST(Validation, BaselineMustBeAValidationReport) {
  auto messages = [](const nlohmann::json& j) {
    std::vector<std::string> out;
    try {
      io::check_validation_report(j, "b.json");
    } catch (const InputError& e) {
      for (const Issue& i : e.issues()) out.push_back(format_issue(i));
    }
    return out;
  };
  EXPECT_EQ(messages(nlohmann::json{{"schema", "capsim-validation/1"}, {"cases", nlohmann::json::array()}}),
            (std::vector<std::string>{"b.json#/schema: must be \"capsim-validation-report/1\" (got \"capsim-validation/1\"); this is "
                                      "a validation file; give the report `capsim validate FILE --format json -o REPORT` writes"}));
  nlohmann::json bad = {{"schema", "capsim-validation-report/1"},
                        {"cases",
                         {{{"file", "f.json"}, {"id", "a-1"}, {"status", "ok"}, {"groups", nlohmann::json::object()}, {"error", {{"ttft", "x"}}}},
                          {{"file", "f.json"}, {"id", "a-1"}, {"status", "unsupported"}},
                          {{"file", "f.json"}, {"status", "ok"}},
                          {{"file", "f.json"}, {"id", "a-2"}, {"status", "ok"}, {"error", nlohmann::json::object()}}}}};
  EXPECT_EQ(messages(bad), (std::vector<std::string>{
                               "b.json#/cases/0/error/ttft: must be a finite number (got \"x\")",
                               "b.json#/cases/1/id: appears twice in the same file (got \"a-1\")",
                               "b.json#/cases/2/id: must be a string",
                               "b.json#/cases/3/groups: must be an object of group names (source, engine, gpu, gpus, model, mode); give "
                               "a report written by `capsim validate --format json`"}));
  EXPECT_TRUE(messages(nlohmann::json{{"schema", "capsim-validation-report/1"}, {"cases", nlohmann::json::array()}}).empty());
}

// Real case files: every case carries its groups, and the source family is the id's prefix.
TEST(Validation, CasesCarryTheirGroups) {
  const auto dir = std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "validation";
  const nlohmann::json r = io::run_validation({dir / "posttraining-public.json"});
  for (const auto& c : r["cases"]) {
    const std::string id = c["id"];
    EXPECT_EQ(c["groups"]["source"], id.substr(0, id.find('-')));
    for (const char* k : {"engine", "gpu", "model", "mode"}) EXPECT_TRUE(c["groups"].contains(k)) << id << " " << k;
  }
}

// Post-training: the GRPO iterations are simulated (serving simulator for the rollout,
// training engine for scoring and updates), QLoRA peak memory with the NF4 base (Dettmers
// et al. 2023), and the LoRA cases (with "auto" NIC rates on one node) are simulated.
TEST(Validation, PostTrainingGrpoAndQloraSimulated) {
  const auto dir = std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "validation";
  const nlohmann::json r = io::run_validation({dir / "posttraining-public.json"});
  size_t grpo = 0, qlora = 0, lora_ok = 0;
  for (const auto& c : r["cases"]) {
    const std::string id = c["id"];
    if (id.find("grpo") != std::string::npos) {
      EXPECT_EQ(c["status"], "ok") << id << ": " << c.value("reason", std::string());
      EXPECT_TRUE(c["predicted"].contains("step_time_s")) << id;
      EXPECT_TRUE(c["predicted"].contains("throughput_tokens_per_s")) << id;
      ++grpo;
    } else if (id.find("qlora") != std::string::npos) {
      EXPECT_EQ(c["status"], "ok") << id;
      ++qlora;
    } else if (c["status"] == "ok") {
      ++lora_ok;
    }
  }
  EXPECT_EQ(grpo, 22u);
  EXPECT_EQ(qlora, 4u);
  EXPECT_EQ(lora_ok, 2u);
}

// Post-training accuracy as ratchets over one run of the file: the median |error| stays
// within the figure recorded here (the current model plus a small margin); lower it as the
// model improves.
// GRPO, the 22 NeMo RL iterations: today step time 15.3%, throughput 17.6% (17.7% and 21.4%
// before the refit took NeMo RL's published refit times).
// LoRA/QLoRA peak memory, the six LitGPT rows: today median 7.6%, p90 7.8%, all too low
// (27.8% and 29.5% before frozen GEMMs kept no input and 4-bit bases kept every one; 20.4%
// and 21.2% before the adapters' dropout and LitGPT's attention module were counted). What is
// left, about 4h bytes a token and layer, is PyTorch 2.1's mean keeping its input in the
// eager RMSNorm (pytorch/pytorch#109876), which later releases dropped.
TEST(Validation, PostTrainingErrorBounds) {
  const auto dir = std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "validation";
  const nlohmann::json r = io::run_validation({dir / "posttraining-public.json"});
  const nlohmann::json g = io::group_errors(r, "mode");
  ASSERT_TRUE(g.contains("grpo"));
  EXPECT_EQ(g["grpo"]["step_time_s"]["n"], 22);
  // 15.2% and 18.0% while 16-bit expert weights streamed at the block-FP8 kernel's 0.543 of
  // HBM; at the 16-bit kernel's own figures (vLLM's BF16 fused-MoE benchmarks) the split
  // Qwen3-235B and DeepSeek-V3 rollouts moved from +39..+58% and +16..+17% to +11..+26% and
  // +6%, while Qwen3-30B-A3B (every placement) and the colocated DeepSeek-V3 runs read
  // faster still: what those rollouts spend beyond the kernels is not modelled.
  // 17.8% and 21.5% until the colocated optimizer state moved at NeMo RL's measured
  // per-tensor pageable rate (1.8 GB/s, NVIDIA-NeMo/RL#3976) instead of the PCIe line rate:
  // every on-policy run gained 7-40 s a step (Llama-3.1-8B -17.8% -> -10.6%, Qwen3-235B
  // -8..-16% -> -2..-8%, DeepSeek-V3 -18..-19% -> -1..+10%). 10.6% until the NeMo RL v0.6
  // rollouts (vLLM 0.17.1) scheduled asynchronously, vLLM's default from 0.14.0 (their step
  // host time hides behind the GPU), and the training and log-prob passes moved Megatron-
  // Core's fused cross-entropy traffic (12.0% -> 11.4% tokens/s). Issue-level bar: 15%.
  // 10.2% and 11.7% until collectives across nodes took NCCL's latency-bandwidth model:
  // the rollouts at TP16 over two nodes all-reduce about 512 KiB twice a layer, which the
  // published 2-node H100 log times at 70 us; the busbw-by-size curve said 90 us (+28%),
  // NCCL's model says 50-53 us (-28%), so Qwen3-235B on-policy moved from -3..-10% to
  // -15..-21% and DeepSeek-V3 FP8 from -14..-21% to -20..-27%, while the model is 2-6x
  // closer to the logs at the megabytes the training collectives move.
  // 14.8% and 18.4% until GEMMs with fewer than 256 output columns took tiles as narrow as
  // their N (cuBLAS runs a GEMM as its transpose, so narrow N is priced like narrow M): the
  // MoE routers (128 experts) and the absorbed-MLA value products of the rollouts and the
  // training passes lost their padding. Seven runs moved toward their measurements (the
  // split Qwen3-235B +26.4% -> +21.1% and +8.0% -> +3.3%, DeepSeek-V3 on 256 GPUs +8.4% ->
  // +6.9%), eight already fast away (Qwen3-235B on-policy -15..-21% -> -18..-23%, Qwen3-30B
  // -33..-34% -> -34..-36%), which moved the median; NeMo 24.07's LoRA rows (outside the
  // validation files) went from +12.9/+16.3/-1.2% to +8.8/+12.7/-2.5%.
  // Tokens/s 19.0% until every step paid the GPU's idle time between kernels
  // (graph_kernel_gap_us) and vLLM V1's host time was refitted under it: 18 of the 22 runs
  // moved toward their measurements (DeepSeek-V3 FP8 +27% -> +23..+25%, Qwen3-235B
  // on-policy +22..+30% -> +20..+27%), four already slow away (the split Qwen3-235B -16.5%
  // and -19.1% -> -17.9% and -21.7%), which moved the median to 19.6%.
  // Step 16.6% -> 13.2% and tokens/s 19.6% -> 17.4% when every small kernel of a layer took
  // its own launch (norms, MLA's latent norms, Qwen3's per-head norms, rotary, the KV-cache
  // write): the rollouts' decode steps, fast, run longer (Qwen3-30B-A3B's 48 layers with
  // per-head norms run six where one floored pass stood).
  // Step 13.2% -> 12.3% and tokens/s 17.4% -> 14.5% when a decode attention kernel took its
  // measured fixed time on Hopper (decode_attention_fixed_us): the rollouts' decode steps,
  // fast, run longer again. Tokens/s 14.5% -> 15.2% when vLLM V1's host time was refitted
  // under its graph pieces' boundaries (1.4 -> 0.9 ms a step): the rollouts on releases
  // that replay decodes as whole graphs (0.11.0 on) lost half a millisecond a step.
  // Step 12.3% -> 16.5% and tokens/s 15.2% -> 20.1% when Hopper GEMMs of 17-512 rows filled
  // the SMs as cuBLASLt does on an H200 (narrower tiles or split K, gemm_split_k_min; the
  // rollouts' BF16 projections are those cuBLASLt GEMMs) and vLLM V1's host time was refitted
  // under it (0.9 -> 0.7 ms): the rollouts' decode steps, fast already, run faster (Llama-3.1
  // 8B on-policy -8% -> -21%, Qwen3-32B -2% -> -17%). What they still miss is outside the
  // GEMMs; the decode attention kernel's rate is the first suspect (PyTorch's
  // FlashAttention-2 streams the cache at 2.5 TB/s on the same H200 once it stops splitting,
  // where the model takes 4.3; vLLM V1's FA3 kernel was not measured).
  // 0.17 and 0.205 until the asynchronous rollouts ran vLLM's async class built from engine
  // arguments, whose batch limits are the scheduler's own (128 sequences, 2,048 tokens;
  // NeMo RL's VllmAsyncGenerationWorker), and vLLM V1's start-up profiling run took its
  // measured memory off the KV cache (its dummy sampler over max_num_seqs x the vocabulary):
  // Qwen3-30B-A3B's asynchronous runs, 29-35% fast with 256 sequences a replica, read 7-14%
  // slow; step 15.0% -> 13.3%, tokens/s 18.6% -> 16.6%.
  EXPECT_LE(g["grpo"]["step_time_s"]["median_abs_error"].get<double>(), 0.14);
  EXPECT_LE(g["grpo"]["throughput_tokens_per_s"]["median_abs_error"].get<double>(), 0.175);
  // The tail too (today 33.3% and 50.1%: Qwen3-30B-A3B's v0.6 runs, 31% fast, read 33% fast
  // once vLLM 0.17.1 overlaps its host time, 31.4% and 46.6% before; 36.6% and 49.5% before
  // the published refit
  // times, which took DeepSeek-V3 on-policy from -26..-32% to -13..-15%): colocated refit
  // and offload, and deep staleness,
  // brought it down from 45% and 78%. Tokens/s rose from 37% when small all-reduces across
  // nodes stopped costing the 1 MiB time (the published 2-node logs: 32 us at 8 KiB): the
  // rollouts at TP16 across two nodes (Qwen3-235B, on-policy) moved from +18..+46% to
  // -2..-10%, DeepSeek-V3's FP8 ones at TP16 from -4..-15% to -32..-39% (their decode is
  // missing something the old over-priced all-reduce stood in for).
  // (0.34 and 0.51 before the narrow-N tiles above.)
  // (0.35 and 0.54 before the GEMMs' measured fill, above.)
  // (0.37 and 0.59 before the asynchronous rollouts' batch limits, above: today 25.1% and
  // 35.4%.)
  EXPECT_LE(g["grpo"]["step_time_s"]["p90_abs_error"].get<double>(), 0.27);
  EXPECT_LE(g["grpo"]["throughput_tokens_per_s"]["p90_abs_error"].get<double>(), 0.38);

  const nlohmann::json by_source = io::group_errors(r, "source");
  ASSERT_TRUE(by_source.contains("litgpt"));
  const nlohmann::json& lora = by_source["litgpt"]["peak_memory_gib"];
  EXPECT_EQ(lora["n"], 6);
  EXPECT_LE(lora["median_abs_error"].get<double>(), 0.08);
  EXPECT_LE(lora["p90_abs_error"].get<double>(), 0.08);
  EXPECT_LT(lora["signed_median_error"].get<double>(), 0.0);
}

TEST(Validation, Deterministic) {
  const std::string a = io::dump(io::run_validation({kTraining}));
  const std::string b = io::dump(io::run_validation({kTraining}));
  EXPECT_EQ(a, b);
}

// Cases run on worker threads; the report is the same, byte for byte, for any count.
TEST(Validation, ThreadCountDoesNotChangeTheReport) {
  const auto dir = std::filesystem::path(CAPSIM_TEST_DATA_DIR) / "validation";
  const std::string one = io::dump(io::run_validation({kTraining, dir / "posttraining-public.json"}, nullptr, 1));
  const std::string three = io::dump(io::run_validation({kTraining, dir / "posttraining-public.json"}, nullptr, 3));
  EXPECT_EQ(one, three);
}

TEST(Validation, SummaryStatistics) {
  const io::ErrorSummary s = io::summarize_errors({0.3, 0.1, 0.2, 0.5, 0.4});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.median_abs, 0.3);
  EXPECT_DOUBLE_EQ(s.p90_abs, 0.46);  // linear between ranks: 0.4 + 0.6 * (0.5 - 0.4)
  EXPECT_DOUBLE_EQ(s.max_abs, 0.5);
}

}  // namespace
}  // namespace capsim
