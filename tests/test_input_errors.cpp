// Input errors: every problem in a scenario is reported at once, each with its JSON pointer,
// the offending value, the rule it breaks and (where one is close) the nearest valid key.
#include <gtest/gtest.h>

#include <limits>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "capsim/core/diagnostics.hpp"
#include "capsim/core/memory.hpp"
#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"
#include "capsim/io/scenario_io.hpp"

namespace capsim {

// Readable failure output for EXPECT_EQ on issues.
void PrintTo(const Issue& i, std::ostream* os) {
  *os << "{\"" << i.pointer << "\", \"" << i.value << "\", \"" << i.rule << "\", \"" << i.hint << "\"}";
}

namespace {

using nlohmann::json;

/// The issues scenario_from_json throws for `doc` (a test failure when it throws none).
std::vector<Issue> issues_of(const json& doc) {
  try {
    (void)io::scenario_from_json(doc);
  } catch (const InputError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "expected an InputError for " << doc.dump();
  return {};
}

/// The issues parse_json throws for `text`.
std::vector<Issue> parse_issues(const std::string& text) {
  try {
    (void)io::parse_json(text, "scenario.json");
  } catch (const InputError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "expected an InputError for " << text;
  return {};
}

/// The issues apply_overrides throws for `sets`.
std::vector<Issue> override_issues(json doc, const std::vector<std::string>& sets) {
  try {
    io::apply_overrides(doc, sets);
  } catch (const InputError& e) {
    return e.issues();
  }
  ADD_FAILURE() << "expected an InputError from apply_overrides";
  return {};
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

/// A valid training scenario: llama2-7b on one node of 8 H100s, plain data parallel.
json good_scenario() {
  return json::parse(R"({
    "id": "llama2-7b-8gpu",
    "kind": "training",
    "model": "llama2-7b",
    "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "training": {"tp": 1, "pp": 1, "dp": 8, "zero": 1, "micro_batch": 1, "global_batch": 64, "seq_len": 4096,
                 "recompute": "none", "precision": "bf16"}
  })");
}

// The good scenario itself is valid (all other tests change one thing in it).
TEST(GoodScenario, Parses) {
  const Scenario s = io::scenario_from_json(good_scenario());
  EXPECT_EQ(s.id, "llama2-7b-8gpu");
  EXPECT_EQ(s.model.layers, 32);
  EXPECT_EQ(s.system.gpu.id, "h100-sxm5-80gb");
  ASSERT_TRUE(s.training);
  EXPECT_EQ(s.training->dp, 8);
  EXPECT_EQ(s.training->zero, 1);
}

// The FP8 recipe belongs to FP8 training; the moments and attention DP keys take only
// their listed values.
TEST(TrainingKeys, Fp8RecipeNeedsFp8AndMomentsAreListed) {
  json doc = good_scenario();
  doc["training"]["fp8_recipe"] = "blockwise";
  doc["training"]["optimizer_moments"] = "fp16";
  const auto issues = issues_of(doc);
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].pointer, "/training/optimizer_moments");
  EXPECT_EQ(issues[1], (Issue{"/training/fp8_recipe", "\"blockwise\"", "applies only to precision \"fp8\"",
                               "remove it or set training.precision to \"fp8\""}));
  doc["training"]["precision"] = "fp8";
  doc["training"]["optimizer_moments"] = "bf16";
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_TRUE(s.training->fp8_blockwise.value_or(false));
  EXPECT_TRUE(s.training->bf16_moments);
}

// The gradient reduction dtype is fp32 or the training's own 16-bit dtype; "auto" leaves
// the default (fp32 unless the run trains in fp16).
TEST(TrainingKeys, GradReduceDtypeIsFp32OrTheTrainingDtype) {
  json doc = good_scenario();
  EXPECT_FALSE(io::scenario_from_json(doc).training->grad_reduce_fp32);
  EXPECT_EQ(grad_bytes(*io::scenario_from_json(doc).training), 4.0);
  doc["training"]["grad_reduce_dtype"] = "bf16";
  EXPECT_EQ(io::scenario_from_json(doc).training->grad_reduce_fp32, false);
  EXPECT_EQ(grad_bytes(*io::scenario_from_json(doc).training), 2.0);
  doc["training"]["grad_reduce_dtype"] = "fp16";
  auto issues = issues_of(doc);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0], (Issue{"/training/grad_reduce_dtype", "\"fp16\"",
                               "must be \"fp32\" or \"bf16\" with precision \"bf16\"", {}}));
  doc["training"]["precision"] = "fp16";
  EXPECT_EQ(grad_bytes(*io::scenario_from_json(doc).training), 2.0);
  doc["training"]["grad_reduce_dtype"] = "fp32";
  EXPECT_EQ(grad_bytes(*io::scenario_from_json(doc).training), 4.0);
  doc["training"]["grad_reduce_dtype"] = "auto";
  EXPECT_EQ(grad_bytes(*io::scenario_from_json(doc).training), 2.0);
}

// FP8 parameters belong to per-tensor FP8 full-parameter training on the Megatron stack;
// "auto" turns them on there, as the NVIDIA FP8 recipes do, and off elsewhere.
TEST(TrainingKeys, Fp8ParamGatherOnlyUnderMegatronFp8) {
  json doc = good_scenario();  // ZeRO-1: the Megatron stack
  EXPECT_FALSE(fp8_params(*io::scenario_from_json(doc).training));
  doc["training"]["precision"] = "fp8";
  EXPECT_TRUE(fp8_params(*io::scenario_from_json(doc).training));
  doc["training"]["fp8_param_gather"] = false;
  EXPECT_FALSE(fp8_params(*io::scenario_from_json(doc).training));
  doc["training"]["fp8_param_gather"] = "auto";
  EXPECT_TRUE(fp8_params(*io::scenario_from_json(doc).training));
  doc["training"]["fp8_recipe"] = "blockwise";
  EXPECT_FALSE(fp8_params(*io::scenario_from_json(doc).training));
  const Issue wrong{"/training/fp8_param_gather", "true",
                    "applies only to per-tensor FP8 (precision \"fp8\") full-parameter training on the Megatron stack",
                    "remove it or set it to false"};
  doc["training"]["fp8_param_gather"] = true;
  auto issues = issues_of(doc);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0], wrong);
  doc["training"].erase("fp8_recipe");
  doc["training"]["zero"] = 3;  // FSDP: the PyTorch stack
  issues = issues_of(doc);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0], wrong);
  doc["training"]["zero"] = 1;
  doc["training"]["precision"] = "bf16";
  issues = issues_of(doc);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0], wrong);
}

// Megatron-Core's batch-level expert-parallel overlap needs expert parallelism, the
// Megatron stack, no full recompute and, under a pipeline, the interleaved schedule: each
// rule broken is one issue naming it. The dispatcher takes its listed names or "auto".
TEST(TrainingKeys, EpOverlapNeedsWhatMegatronCoreChecks) {
  json doc = good_scenario();
  doc["model"] = "qwen3-30b-a3b";
  doc["training"]["ep"] = 8;
  doc["training"]["ep_overlap"] = true;
  EXPECT_TRUE(ep_overlap_on(*io::scenario_from_json(doc).training));
  doc["training"]["ep_overlap"] = "auto";
  EXPECT_FALSE(ep_overlap_on(*io::scenario_from_json(doc).training));
  auto rejected = [&](const json& patch, const std::string& why) {
    json bad = doc;
    bad["training"].update(patch);
    const auto issues = issues_of(bad);
    ASSERT_EQ(issues.size(), 1u) << patch.dump();
    EXPECT_EQ(issues[0], (Issue{"/training/ep_overlap", "true", "Megatron-Core's batch-level expert-parallel overlap " + why,
                                "remove it or set it to false"}));
  };
  doc["training"]["ep_overlap"] = true;
  rejected({{"ep", 1}}, "needs expert parallelism (ep > 1)");
  rejected({{"recompute", "full"}}, "does not run with full recompute");
  rejected({{"framework", "pytorch"}}, "is Megatron-Core's (framework \"megatron\")");
  rejected({{"pp", 2}, {"dp", 4}, {"ep", 4}}, "needs the interleaved schedule (vpp > 1) under a pipeline");
  rejected({{"schedule", "zb-h1"}}, "runs on Megatron-Core's 1F1B schedules");
  rejected({{"ep", 1}, {"recompute", "full"}},
           "needs expert parallelism (ep > 1); it does not run with full recompute");
  doc["training"]["moe_dispatcher"] = "hierarchical";
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_EQ(dispatcher_of(*s.training, s.model), MoeDispatcher::hierarchical);
  doc["training"]["moe_dispatcher"] = "auto";
  EXPECT_EQ(dispatcher_of(*io::scenario_from_json(doc).training, s.model), MoeDispatcher::alltoall);
  doc["training"]["moe_dispatcher"] = "deepep";
  const auto issues = issues_of(doc);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].pointer, "/training/moe_dispatcher");
}

// Rule: unknown keys are rejected, with the nearest valid key of that object as a hint.
// TP overlap: a share in [0, 1] or "auto" (the default, left unset); anything else is an
// issue at its pointer.
TEST(TrainingKeys, TpCommOverlapIsAShareOrAuto) {
  json doc = good_scenario();
  EXPECT_FALSE(io::scenario_from_json(doc).training->tp_comm_overlap);
  doc["training"]["tp_comm_overlap"] = "auto";
  EXPECT_FALSE(io::scenario_from_json(doc).training->tp_comm_overlap);
  doc["training"]["tp_comm_overlap"] = 0.25;
  EXPECT_EQ(io::scenario_from_json(doc).training->tp_comm_overlap, 0.25);
  doc["training"]["tp_comm_overlap"] = "yes";
  auto issues = issues_of(doc);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0], (Issue{"/training/tp_comm_overlap", "\"yes\"", "must be a number in [0, 1] or \"auto\"", {}}));
  doc["training"]["tp_comm_overlap"] = 1.5;
  issues = issues_of(doc);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].pointer, "/training/tp_comm_overlap");
  EXPECT_EQ(issues[0].rule, "must be in [0, 1]");
}

TEST(UnknownKey, TopLevel) {
  json doc = good_scenario();
  doc["measurd"] = {{"step_time_s", 1.0}};
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/measurd", "", "unknown key", "did you mean \"measured\"?"}}));
}

TEST(UnknownKey, InSystem) {
  json doc = good_scenario();
  doc["system"]["gpus_per_nodes"] = 8;
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/system/gpus_per_nodes", "", "unknown key", "did you mean \"gpus_per_node\"?"}}));
}

TEST(UnknownKey, InTraining) {
  json doc = good_scenario();
  doc["training"]["recomput"] = "full";
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/training/recomput", "", "unknown key", "did you mean \"recompute\"?"}}));
}

TEST(UnknownKey, NoHintWhenNothingIsClose) {
  json doc = good_scenario();
  doc["training"]["zzzzzzzzzzzz"] = 1;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/zzzzzzzzzzzz", "", "unknown key", ""}}));
}

TEST(UnknownKey, AllThreeAtOnce) {
  json doc = good_scenario();
  doc["measurd"] = 1;
  doc["system"]["gpus_per_nodes"] = 8;
  doc["training"]["recomput"] = "full";
  // Objects are read in the order system, training, top level.
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{
                                {"/system/gpus_per_nodes", "", "unknown key", "did you mean \"gpus_per_node\"?"},
                                {"/training/recomput", "", "unknown key", "did you mean \"recompute\"?"},
                                {"/measurd", "", "unknown key", "did you mean \"measured\"?"},
                            }));
}

// Rule: impossible layouts (heads, KV heads and experts vs tp/ep, pipeline depth vs layers,
// tp*pp*dp*cp vs num_gpus, global batch vs micro_batch*dp) are all reported together.
TEST(ImpossibleLayout, AllReportedAtOnce) {
  const json doc = json::parse(R"({
    "id": "bad-layout",
    "model": {"model_type": "mixtral", "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 4,
              "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8,
              "num_experts_per_tok": 2, "vocab_size": 32000},
    "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 16, "gpus_per_node": 8, "nic_gbps_per_gpu": 400},
    "training": {"tp": 3, "pp": 2, "vpp": 3, "dp": 2, "cp": 1, "ep": 3, "micro_batch": 4, "global_batch": 20,
                 "seq_len": 4096}
  })");
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{
                {"/training/tp", "3", "attention heads (32) must be divisible by tp", ""},
                {"/training/tp", "3", "key/value heads (8) must be divisible by tp (or tp by them)", ""},
                {"/system/num_gpus", "16", "tp*pp*dp*cp = 3*2*2*1 = 12 must equal num_gpus", ""},
                {"/training/vpp", "3", "pipeline stages pp*vpp = 6 exceed the model's 4 layers", ""},
                {"/training/ep", "3", "routed experts (8) must be divisible by ep", ""},
                {"/training/global_batch", "20", "must be divisible by micro_batch*dp = 4*2 = 8", ""},
            }));
}

TEST(ImpossibleLayout, PipelineDeeperThanModelWithoutInterleaving) {
  json doc = good_scenario();
  doc["training"]["pp"] = 64;
  doc["training"]["dp"] = 1;
  doc["system"]["num_gpus"] = 64;
  doc["system"]["nic_gbps_per_gpu"] = 400;
  EXPECT_EQ(
      issues_of(doc),
      (std::vector<Issue>{{"/training/pp", "64", "pipeline stages pp*vpp = 64 exceed the model's 32 layers", ""}}));
}

TEST(ImpossibleLayout, GlobalBatchWithAutoMicroBatchNeedsDp) {
  json doc = good_scenario();
  doc["training"]["micro_batch"] = "auto";
  doc["training"]["global_batch"] = 60;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/global_batch", "60", "must be divisible by dp = 8", ""}}));
}

TEST(ImpossibleLayout, EpWithoutExperts) {
  json doc = good_scenario();
  doc["training"]["ep"] = 2;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/ep", "2", "ep > 1 needs a mixture-of-experts model", ""}}));
}

TEST(ImpossibleLayout, SeveralNodesNeedANetwork) {
  json doc = good_scenario();
  doc["system"]["num_gpus"] = 16;
  doc["training"]["dp"] = 16;
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/system/nic_gbps_per_gpu", "", "is required when the job spans several nodes", ""}}));
}

// Rule: unknown presets (GPU, model) and model families are rejected with the nearest valid name.
TEST(UnknownPreset, GpuAndModelAndKeyTogether) {
  json doc = good_scenario();
  doc["model"] = "llama2-7";
  doc["system"]["gpu"] = "h100-sxm-80gb";
  doc["training"]["tpp"] = 2;
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{
                {"/model", "\"llama2-7\"",
                 "neither a model preset nor a readable config.json; presets: " + join(io::model_preset_names()),
                 "did you mean \"llama2-7b\"?"},
                {"/system/gpu", "\"h100-sxm-80gb\"", "unknown GPU preset; valid: " + join(io::gpu_preset_ids()),
                 "did you mean \"h100-sxm5-80gb\"?"},
                {"/training/tpp", "", "unknown key", "did you mean \"tp\"?"},
            }));
}

TEST(UnknownPreset, PresetListsAreTheDataFiles) {
  // The lists in the messages above, spelled out once.
  EXPECT_EQ(join(io::gpu_preset_ids()),
            "a100-sxm4-40gb, a100-sxm4-80gb, b200, h100-hbm2e-96gb, h100-pcie-80gb, h100-sxm5-80gb, h200-sxm-141gb, "
            "h800-sxm5-80gb");
  const auto models = io::model_preset_names();
  EXPECT_NE(std::find(models.begin(), models.end(), "llama2-7b"), models.end());
  EXPECT_EQ(std::find(models.begin(), models.end(), "index"), models.end());
}

TEST(UnknownPreset, GpuWithNothingClose) {
  json doc = good_scenario();
  doc["system"]["gpu"] = "tpu-v5";
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/system/gpu", "\"tpu-v5\"",
                                                 "unknown GPU preset; valid: " + join(io::gpu_preset_ids()), ""}}));
}

TEST(UnknownPreset, ModelType) {
  json doc = good_scenario();
  doc["model"] = json::parse(R"({"model_type": "lama", "hidden_size": 4096, "num_hidden_layers": 32})");
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/model/model_type", "\"lama\"",
                                 "unsupported model family; supported: gpt2, gpt_neox, llama, mistral, gemma, qwen2, "
                                 "qwen3, nemotron, mixtral, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss",
                                 "did you mean \"llama\"?"}}));
}

TEST(UnknownPreset, ModelTypeMissing) {
  json doc = good_scenario();
  doc["model"] = json::parse(R"({"hidden_size": 4096, "num_hidden_layers": 32})");
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/model/model_type", "", "is required in a config.json", ""}}));
}

TEST(UnknownPreset, ModelMissing) {
  json doc = good_scenario();
  doc.erase("model");
  EXPECT_EQ(
      issues_of(doc),
      (std::vector<Issue>{{"/model", "", "is required (a preset name, a config.json path, or a config object)", ""}}));
}

// Rule: malformed JSON is reported with the file, line and column of the offending token.
TEST(MalformedJson, MissingCommaNamesLineAndColumn) {
  // The comma is missing at the end of line 3; the parser stops at the next token, "model" on line 4.
  const std::string text = "{\n  \"id\": \"x\",\n  \"kind\": \"training\"\n  \"model\": \"llama2-7b\"\n}\n";
  EXPECT_EQ(parse_issues(text),
            (std::vector<Issue>{{"scenario.json", "",
                                 "malformed JSON at line 4, column 9: syntax error while parsing object - unexpected "
                                 "string literal; expected '}'",
                                 ""}}));
}

TEST(MalformedJson, TrailingComma) {
  EXPECT_EQ(parse_issues("{\n  \"tp\": [1, 2,]\n}"),
            (std::vector<Issue>{{"scenario.json", "",
                                 "malformed JSON at line 2, column 15: syntax error while parsing value - unexpected "
                                 "']'; expected '[', '{', or a literal",
                                 ""}}));
}

TEST(MalformedJson, InvalidLiteralKeepsTheWholeReason) {
  // nlohmann's message ends in "last read: '...'"; the reason must not be cut at that colon.
  EXPECT_EQ(parse_issues("{\"sp\": fals}"),
            (std::vector<Issue>{{"scenario.json", "",
                                 "malformed JSON at line 1, column 12: syntax error while parsing value - invalid "
                                 "literal; last read: '\"sp\": fals}'",
                                 ""}}));
}

TEST(MalformedJson, EmptyInput) {
  EXPECT_EQ(parse_issues(""), (std::vector<Issue>{{"scenario.json", "",
                                                   "malformed JSON at line 1, column 1: syntax error while parsing "
                                                   "value - unexpected end of input; expected '[', '{', or a literal",
                                                   ""}}));
}

TEST(MalformedJson, NotAnObject) {
  EXPECT_EQ(issues_of(json::array({1, 2})),
            (std::vector<Issue>{{"", "[1,2]", "a scenario must be a JSON object", ""}}));
}

// Rule: each key has a type; a value of another type is reported with what was expected.
TEST(WrongType, StringWhereIntegerExpected) {
  json doc = good_scenario();
  doc["training"]["tp"] = "4";
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/tp", "\"4\"", "must be an integer >= 1 or \"auto\"", ""}}));
}

TEST(WrongType, SeveralAtOnce) {
  json doc = good_scenario();
  doc["training"]["tp"] = "4";
  doc["training"]["micro_batch"] = "1";
  doc["training"]["sp"] = "yes";
  doc["training"]["precision"] = "bf61";
  doc["training"]["seq_len"] = 4096.5;
  doc["system"]["gpu"] = 100;
  doc["system"]["nic_gbps_per_gpu"] = "fast";
  EXPECT_EQ(
      issues_of(doc),
      (std::vector<Issue>{
          {"/system/gpu", "100", "must be a string", ""},
          {"/system/nic_gbps_per_gpu", "\"fast\"", "must be a number", ""},
          {"/training/tp", "\"4\"", "must be an integer >= 1 or \"auto\"", ""},
          {"/training/sp", "\"yes\"", "must be true, false or \"auto\"", ""},
          {"/training/micro_batch", "\"1\"", "must be an integer >= 1 or \"auto\"", ""},
          {"/training/seq_len", "4096.5", "must be an integer >= 1", ""},
          {"/training/precision", "\"bf61\"", "must be one of \"fp16\", \"bf16\", \"fp8\", \"auto\"", "did you mean \"bf16\"?"},
      }));
}

TEST(WrongType, WholeNumberFloatIsAnInteger) {
  json doc = good_scenario();
  doc["training"]["seq_len"] = 4096.0;
  EXPECT_EQ(io::scenario_from_json(doc).training->seq_len, 4096);
}

TEST(WrongType, HugeFloatIsNotAnInteger) {
  json doc = good_scenario();
  doc["system"]["num_gpus"] = 1e30;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/system/num_gpus", "1e+30", "must be an integer >= 1", ""}}));
}

TEST(WrongType, WholeNumberFloatForAutoKeys) {
  json doc = good_scenario();
  doc["training"]["micro_batch"] = 2.0;
  EXPECT_EQ(io::scenario_from_json(doc).training->micro_batch, 2);
  doc["training"]["micro_batch"] = 2.5;
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/training/micro_batch", "2.5", "must be an integer >= 1 or \"auto\"", ""}}));
}

// SCHEMA.md: a field the source did not publish holds "auto"; LoRA's rank and targets too.
TEST(WrongType, LoraRankAndTargetsAcceptAuto) {
  json doc = good_scenario();
  doc["training"]["mode"] = "lora";
  doc["training"]["lora"] = {{"rank", "auto"}, {"targets", "auto"}};
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_FALSE(s.training->lora->rank.has_value());
  EXPECT_FALSE(s.training->lora->targets.has_value());
  doc["training"]["lora"] = {{"rank", 0}, {"targets", "all"}};
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/training/lora/rank", "0", "must be an integer >= 1 or \"auto\"", ""},
                                {"/training/lora/targets", "\"all\"", "must be an array of module names or \"auto\"", ""}}));
  doc["training"]["lora"] = {{"rank", 8}, {"dropout", 1.0}};
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/training/lora/dropout", "1.0", "must be a probability in [0, 1) or \"auto\"", ""}}));
  doc["training"]["lora"] = {{"rank", 8}, {"dropout", "auto"}};
  EXPECT_FALSE(io::scenario_from_json(doc).training->lora->dropout.has_value());
  doc["training"]["lora"] = {{"rank", 8}, {"dropout", 0.1}};
  EXPECT_DOUBLE_EQ(*io::scenario_from_json(doc).training->lora->dropout, 0.1);
  doc["training"]["lora"] = {{"targets", {"q_proj"}}};
  {
    json d = good_scenario();
    d["training"]["effective_training_fraction"] = 0;
    EXPECT_EQ(issues_of(d), (std::vector<Issue>{{"/training/effective_training_fraction", "0",
                                                 "must be a share in (0, 1] or \"auto\"", ""}}));
    d["training"]["effective_training_fraction"] = "auto";
    EXPECT_FALSE(io::scenario_from_json(d).training->budget.effective_fraction.has_value());
  }
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/training/lora/rank", "", "is required (an integer or \"auto\")", ""}}));
}

// Packed sequences: a document is 1 to seq_len tokens, and context parallelism splits each
// into 2*cp chunks, so it needs at least that many.
TEST(TrainingKeys, DocumentTokensWithinTheSequenceAndTheContextChunks) {
  json doc = good_scenario();
  doc["training"]["document_tokens"] = 512;
  EXPECT_EQ(io::scenario_from_json(doc).training->document_tokens, 512);
  doc["training"]["document_tokens"] = 0;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/document_tokens", "0", "must be an integer >= 1", ""}}));
  doc["training"]["document_tokens"] = 8192;
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/training/document_tokens", "8192", "must be between 1 and seq_len = 4096", ""}}));
  doc["training"]["document_tokens"] = 6;
  doc["training"]["cp"] = 4;
  doc["training"]["dp"] = 2;
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/training/document_tokens", "6",
                                 "context parallelism splits each document into 2*cp = 8 chunks; needs at least that many tokens",
                                 ""}}));
}

TEST(TrainingKeys, LossIsThePyTorchStacks) {
  json doc = good_scenario();
  doc["training"]["framework"] = "pytorch";
  doc["training"]["loss"] = "compiled";
  EXPECT_EQ(io::scenario_from_json(doc).training->compiled_loss, std::optional<bool>(true));
  doc["training"]["loss"] = "auto";
  EXPECT_EQ(io::scenario_from_json(doc).training->compiled_loss, std::nullopt);
  doc["training"]["loss"] = "fused";
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/loss", "\"fused\"", "must be one of \"eager\", \"compiled\", \"auto\"", ""}}));
  doc["training"]["framework"] = "megatron";
  doc["training"]["loss"] = "compiled";
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/training/loss", "\"compiled\"",
                                 "applies to the PyTorch stack (framework \"pytorch\"); the Megatron stack runs its fused "
                                 "vocabulary-parallel cross entropy",
                                 "remove it or set framework to \"pytorch\""}}));
}

TEST(WrongType, ScheduleAutoAndRecomputeModules) {
  json doc = good_scenario();
  doc["training"]["schedule"] = "auto";
  doc["training"]["recompute_modules"] = {"layernorm", "mla_up_proj"};
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_TRUE(s.training->schedule_auto);
  EXPECT_EQ(s.training->recompute_modules, kRecomputeLayernorm | kRecomputeMlaUpProj);
  doc["training"]["recompute_modules"] = {"layernorms"};
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/recompute_modules/0", "\"layernorms\"",
                                                 "must be one of core_attn, layernorm, mla_up_proj, moe_act, mlp",
                                                 "did you mean \"layernorm\"?"}}));
}

TEST(WrongType, NestedObjectNotAnObject) {
  json doc = good_scenario();
  doc["training"]["mode"] = "lora";
  doc["training"]["lora"] = 5;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/lora", "5", "must be an object or \"auto\"", ""}}));
  doc = json::parse(R"({
    "kind": "inference", "model": "llama2-7b", "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 8},
    "inference": {"tp": 3, "engine": 5, "workload": "offline"}
  })");
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{
                                {"/inference/engine", "5", "must be an object", ""},
                                {"/inference/workload", "\"offline\"", "must be an object", ""},
                                {"/inference/tp", "3", "attention heads (32) must be divisible by tp", ""},
                            }));
}

TEST(WrongType, EngineStepKnobs) {
  const json doc = json::parse(R"({
    "kind": "inference", "model": "llama2-7b", "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 1},
    "inference": {"tp": 1, "workload": {"mode": "offline", "num_requests": 10, "input_tokens": 100, "output_tokens": 10},
                  "fp8_scaling": "channel", "slo": {"ttft_ms": -1, "tpot": 50},
                  "engine": {"cuda_graphs": "yes", "cuda_graph_max_tokens": 0, "scheduler_steps": 0, "step_overhead_ms": -1,
                             "eager_host_us_per_layer": -5, "preemption": "evict", "swap_space_gib": -4}}
  })");
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{
                                {"/inference/fp8_scaling", "\"channel\"", "must be one of \"tensor\", \"block\", \"auto\"", ""},
                                {"/inference/slo/ttft_ms", "-1", "must be a number >= 0", ""},
                                {"/inference/slo/tpot", "", "unknown key", ""},
                                {"/inference/engine/cuda_graph_max_tokens", "0", "must be an integer >= 1 or \"auto\"", ""},
                                {"/inference/engine/scheduler_steps", "0", "must be an integer >= 1 or \"auto\"", ""},
                                {"/inference/engine/cuda_graphs", "\"yes\"", "must be true or false", ""},
                                {"/inference/engine/step_overhead_ms", "-1", "must be a number >= 0", ""},
                                {"/inference/engine/eager_host_us_per_layer", "-5", "must be a number >= 0", ""},
                                {"/inference/engine/preemption", "\"evict\"", "must be one of \"recompute\", \"swap\", \"partial\", \"cached\"", ""},
                                {"/inference/engine/swap_space_gib", "-4", "must be a number >= 0", ""},
                            }));
}

// Replicas left auto fill the GPUs: num_gpus / (tp * pp).
TEST(Auto, ServingReplicasFillTheGpus) {
  json doc = json::parse(R"({
    "kind": "inference", "model": "llama2-7b", "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 16, "gpus_per_node": 8,
                                                           "nic_gbps_per_gpu": 400},
    "inference": {"tp": 4, "pp": 1, "replicas": "auto",
                  "workload": {"mode": "offline", "num_requests": 10, "input_tokens": 100, "output_tokens": 10}}
  })");
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_TRUE(s.inference->replicas_auto);
  EXPECT_EQ(s.inference->replicas, 4);
  doc["inference"]["tp"] = 32;  // more than the GPUs: one replica, and the layout rule says why
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/system/num_gpus", "16", "tp*pp*replicas = 32 exceeds num_gpus", ""}}));
}

// Serving tp or pp "auto" is what the GPUs leave beside the stated degrees and replicas, as
// the replicas' "auto" is; two unknowns leave the layout open, an input error naming them.
TEST(Auto, ServingDegreesTakeTheGpusLeft) {
  json doc = json::parse(R"({
    "kind": "inference", "model": "llama2-70b", "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "inference": {"tp": "auto", "pp": 1, "replicas": 2,
                  "workload": {"mode": "offline", "num_requests": 10, "input_tokens": 100, "output_tokens": 10}}
  })");
  Scenario s = io::scenario_from_json(doc);
  EXPECT_TRUE(s.inference->tp_auto);
  EXPECT_EQ(s.inference->tp, 4);
  doc["inference"]["tp"] = 4;
  doc["inference"]["pp"] = "auto";
  doc["inference"]["replicas"] = 1;
  s = io::scenario_from_json(doc);
  EXPECT_EQ(s.inference->pp, 2);
  doc["inference"]["tp"] = "auto";
  doc["inference"]["replicas"] = "auto";
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/inference", "tp, pp, replicas",
                                 "at most one of tp, pp and replicas can be \"auto\": the GPUs left over then set it",
                                 "state the others as the source ran them"}}));
}

// Unpublished serving data types are the checkpoint's: a 16-bit checkpoint serves 16-bit
// weights and activations; DeepSeek-V3-architecture releases are FP8 (block-scaled), with
// FP8 activations on Hopper and weight-only FP8 (W8A16) on Ampere.
TEST(Auto, ServingDtypesAreTheCheckpoints) {
  json doc = json::parse(R"({
    "kind": "inference", "model": "llama2-7b", "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 1},
    "inference": {"tp": 1, "weight_dtype": "auto", "activation_dtype": "auto", "kv_dtype": "auto",
                  "workload": {"mode": "offline", "num_requests": 10, "input_tokens": 100, "output_tokens": 10}}
  })");
  Scenario s = io::scenario_from_json(doc);
  EXPECT_TRUE(s.inference->weight_dtype_auto && s.inference->activation_dtype_auto);
  EXPECT_EQ(s.inference->weight_dtype, DType::bf16);
  EXPECT_EQ(s.inference->activation_dtype, DType::bf16);
  doc["model"] = "deepseek-v3";
  doc["system"]["num_gpus"] = 8;
  doc["inference"]["tp"] = 8;
  s = io::scenario_from_json(doc);
  EXPECT_EQ(s.inference->weight_dtype, DType::fp8);
  EXPECT_EQ(s.inference->activation_dtype, DType::fp8);
  doc["system"]["gpu"] = "a100-sxm4-80gb";
  s = io::scenario_from_json(doc);
  EXPECT_EQ(s.inference->weight_dtype, DType::fp8);
  EXPECT_EQ(s.inference->activation_dtype, DType::bf16);
  doc["inference"]["weight_dtype"] = "fp6";
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/inference/weight_dtype", "\"fp6\"",
                                                 "must be one of \"bf16\", \"fp16\", \"fp8\", \"int8\", \"int4\", \"auto\"",
                                                 "did you mean \"fp16\"?"}}));
}

// A 16-bit checkpoint that leaves no room for the KV cache is not what the source ran:
// "auto" then serves its FP8 quantization where the GPU has FP8 tensor cores, and keeps the
// checkpoint's (a "does not fit" answer) where it has none.
TEST(Auto, ServingWeightsThatDoNotFitTakeFp8) {
  json doc = json::parse(R"({
    "kind": "inference", "model": "llama3.1-405b", "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "inference": {"tp": 8, "weight_dtype": "auto", "activation_dtype": "auto",
                  "workload": {"mode": "offline", "num_requests": 10, "input_tokens": 100, "output_tokens": 10}}
  })");
  Scenario s = io::scenario_from_json(doc);
  EXPECT_EQ(s.inference->weight_dtype, DType::fp8);
  EXPECT_EQ(s.inference->activation_dtype, DType::fp8);
  EXPECT_TRUE(inference_memory(s.model, s.system, *s.inference).fits);
  InferencePlan bf16 = *s.inference;
  bf16.weight_dtype = bf16.activation_dtype = DType::bf16;
  EXPECT_FALSE(inference_memory(s.model, s.system, bf16).fits);
  doc["system"]["gpu"] = "a100-sxm4-80gb";
  s = io::scenario_from_json(doc);
  EXPECT_EQ(s.inference->weight_dtype, DType::bf16);
  // A checkpoint that fits keeps its own data type.
  doc["system"]["gpu"] = "h200-sxm-141gb";
  doc["model"] = "llama3-70b";
  EXPECT_EQ(io::scenario_from_json(doc).inference->weight_dtype, DType::bf16);
}

// gpus_per_node "auto" is the default 8-GPU node, as absent.
TEST(Auto, GpusPerNodeIsTheReferenceNode) {
  json doc = good_scenario();
  doc["system"]["gpus_per_node"] = "auto";
  const Scenario a = io::scenario_from_json(doc);
  doc["system"].erase("gpus_per_node");
  EXPECT_EQ(a.system.gpus_per_node, io::scenario_from_json(doc).system.gpus_per_node);
  EXPECT_EQ(a.system.gpus_per_node, 8);
  doc["system"]["gpus_per_node"] = "eight";
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/system/gpus_per_node", "\"eight\"", "must be an integer >= 1", ""}}));
}

// A serving workload's request count left "auto" is the benchmark clients' default.
TEST(Auto, UnpublishedRequestCountIsTheBenchmarkDefault) {
  json doc = json::parse(R"({
    "kind": "inference", "model": "llama2-7b", "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 1},
    "inference": {"tp": 1, "workload": {"mode": "poisson", "qps": 4, "num_requests": "auto", "input_tokens": 100, "output_tokens": 10}}
  })");
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_EQ(s.inference->workload.num_requests, kBenchmarkDefaultPrompts);
  EXPECT_TRUE(s.inference->workload.num_requests_auto);
  doc["inference"]["workload"]["num_requests"] = 0;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/inference/workload/num_requests", "0", "must be an integer >= 1", ""}}));
}

// cuda_graphs "auto" is the engine profile's default.
TEST(Auto, CudaGraphsTakeTheEngines) {
  json doc = json::parse(R"({
    "kind": "inference", "model": "llama2-7b", "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 1},
    "inference": {"tp": 1, "engine": {"name": "vllm", "version": "0.5.3", "cuda_graphs": "auto"},
                  "workload": {"mode": "offline", "num_requests": 10, "input_tokens": 100, "output_tokens": 10}}
  })");
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_FALSE(s.inference->engine.cuda_graphs.has_value());
}

// QLoRA's base is 4-bit NormalFloat unless stated; alpha and double quantization accept "auto"
// (alpha does not change the cost; double quantization off, bitsandbytes' default).
TEST(Auto, QloraBaseIsNormalFloat) {
  json doc = good_scenario();
  doc["training"]["mode"] = "qlora";
  doc["training"]["lora"] = json::parse(R"({"rank": 8, "targets": ["q_proj", "v_proj"], "alpha": "auto",
                                             "base_dtype": "auto", "double_quant": "auto"})");
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_DOUBLE_EQ(s.training->lora->base_bytes_per_param, 0.5 + 4.0 / 64);
  doc["training"]["lora"].erase("base_dtype");
  EXPECT_DOUBLE_EQ(io::scenario_from_json(doc).training->lora->base_bytes_per_param, 0.5 + 4.0 / 64);
  doc["training"]["mode"] = "lora";
  EXPECT_DOUBLE_EQ(io::scenario_from_json(doc).training->lora->base_bytes_per_param, LoraSpec{}.base_bytes_per_param);
}

// FP8 weights on a GPU without FP8 tensor cores run weight-only (W8A16, vLLM's FP8 Marlin on
// Ampere); FP8 activations there are an input error.
TEST(WrongType, Fp8WeightsWithoutFp8TensorCoresRunWeightOnly) {
  json doc = json::parse(R"({
    "kind": "inference", "model": "llama2-7b", "system": {"gpu": "a100-sxm4-80gb", "num_gpus": 1},
    "inference": {"tp": 1, "weight_dtype": "fp8", "activation_dtype": "bf16",
                  "workload": {"mode": "offline", "num_requests": 10, "input_tokens": 100, "output_tokens": 10}}
  })");
  EXPECT_EQ(io::scenario_from_json(doc).inference->weight_dtype, DType::fp8);
  doc["inference"]["activation_dtype"] = "fp8";
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/inference/activation_dtype", "\"fp8\"", "needs FP8 tensor cores, which a100-sxm4-80gb does not have",
                                 "use bf16 activations (FP8 weights then run weight-only, W8A16) or a GPU with FP8 (Hopper or later)"}}));
}

TEST(WrongType, MultiStepWithSpeculativeDecoding) {
  const json doc = json::parse(R"({
    "kind": "inference", "model": "llama2-7b", "system": {"gpu": "h100-sxm5-80gb", "num_gpus": 1},
    "inference": {"tp": 1, "workload": {"mode": "offline", "num_requests": 10, "input_tokens": 100, "output_tokens": 10},
                  "engine": {"scheduler_steps": 8}, "speculative": {"k": 3, "acceptance": 0.7, "draft_cost_fraction": 0.1}}
  })");
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/inference/engine/scheduler_steps", "8",
                                                 "cannot be combined with speculative decoding (vLLM's multi-step "
                                                 "scheduler does not verify drafts)",
                                                 ""}}));
}

TEST(WrongType, FrameworkChoices) {
  json doc = good_scenario();
  doc["training"]["framework"] = "deepspeed";
  const auto issues = issues_of(doc);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].pointer, "/training/framework");
  EXPECT_EQ(issues[0].rule, "must be one of \"megatron\", \"pytorch\", \"auto\"");
  doc["training"]["framework"] = "pytorch";
  EXPECT_EQ(io::scenario_from_json(doc).training->framework, Framework::pytorch);
  doc["training"]["framework"] = "auto";
  EXPECT_FALSE(io::scenario_from_json(doc).training->framework.has_value());
}

TEST(WrongType, SectionNotAnObject) {
  json doc = good_scenario();
  doc["training"] = 5;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training", "5", "must be an object", ""}}));
}

// Rule: a layout rule does not judge a default standing in for a value that was itself rejected.
TEST(WrongType, NoFollowOnLayoutIssueForARejectedValue) {
  json doc = good_scenario();
  doc["training"]["global_batch"] = "64";
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/global_batch", "\"64\"", "must be an integer >= 1", ""}}));
  doc = good_scenario();
  doc["system"]["num_gpus"] = "8";
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/system/num_gpus", "\"8\"", "must be an integer >= 1", ""}}));
  doc = good_scenario();
  doc["system"]["num_gpus"] = 16;
  doc["training"]["dp"] = 16;
  doc["system"]["nic_gbps_per_gpu"] = "fast";
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/system/nic_gbps_per_gpu", "\"fast\"", "must be a number", ""}}));
}

TEST(WrongType, LayoutStillCheckedBesideOtherProblems) {
  // An unknown key or a bad optimizer name does not hide a layout problem.
  json doc = good_scenario();
  doc["training"]["optimizer"] = "adamw8bit";
  doc["training"]["tp"] = 3;
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{
                {"/training/optimizer", "\"adamw8bit\"",
                 "must be one of \"adamw\", \"adam\", \"sgd\", \"adafactor\", \"lion\", \"adam8bit\", \"auto\"",
                 "did you mean \"adam8bit\"?"},
                {"/training/tp", "3", "attention heads (32) must be divisible by tp", ""},
                {"/training/tp", "3", "key/value heads (32) must be divisible by tp (or tp by them)", ""},
                {"/system/num_gpus", "8", "tp*pp*dp*cp = 3*1*8*1 = 24 must equal num_gpus", ""},
            }));
}

// Rule: counts and sizes must be >= 1 (zero >= 0, rates >= 0); negative values are rejected.
TEST(NegativeNumber, Rejected) {
  json doc = good_scenario();
  doc["training"]["tp"] = -2;
  doc["training"]["pp"] = 0;
  doc["training"]["zero"] = -1;
  doc["training"]["cuda_context_mib"] = -5;
  doc["system"]["nic_gbps_per_gpu"] = -1;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{
                                {"/system/nic_gbps_per_gpu", "-1", "must be a number >= 0", ""},
                                {"/training/tp", "-2", "must be an integer >= 1 or \"auto\"", ""},
                                {"/training/pp", "0", "must be an integer >= 1 or \"auto\"", ""},
                                {"/training/zero", "-1", "must be an integer >= 0 or \"auto\"", ""},
                                {"/training/cuda_context_mib", "-5", "must be a number >= 0", ""},
                            }));
}

TEST(NegativeNumber, ZeroStageAboveThree) {
  json doc = good_scenario();
  doc["training"]["zero"] = 4;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/zero", "4", "must be 0, 1, 2, 3 or \"auto\"", ""}}));
}

TEST(NegativeNumber, InModelConfig) {
  json doc = good_scenario();
  doc["model"] = json::parse(R"({"model_type": "llama", "num_hidden_layers": -4})");
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/model/num_hidden_layers", "-4", "must be a positive integer", ""}}));
}

// Rule: "auto" is accepted where the schema allows it (the evaluator resolves it) and nowhere else.
TEST(Auto, AcceptedWhereTheSchemaAllowsIt) {
  json doc = good_scenario();
  for (const char* k : {"micro_batch", "recompute", "vpp", "etp", "zero"}) doc["training"][k] = "auto";
  const Scenario s = io::scenario_from_json(doc);
  ASSERT_TRUE(s.training);
  EXPECT_FALSE(s.training->micro_batch);
  EXPECT_FALSE(s.training->recompute);
  EXPECT_FALSE(s.training->vpp);
  EXPECT_FALSE(s.training->etp);
  EXPECT_FALSE(s.training->zero);
}

TEST(Auto, AbsentMicroBatchIsAuto) {
  json doc = good_scenario();
  doc["training"].erase("micro_batch");
  EXPECT_FALSE(io::scenario_from_json(doc).training->micro_batch);
}

TEST(Layout, DualPipeNeedsEvenStagesAndMicrobatches) {
  json doc = good_scenario();  // 8 GPUs, global batch 64, micro batch 1
  doc["training"]["schedule"] = "dualpipe";
  doc["training"]["pp"] = 2;
  doc["training"]["dp"] = 4;
  doc["training"]["global_batch"] = 12;  // 3 microbatches
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/global_batch", "12",
                                                 "DualPipe needs an even microbatch count of at least 2*pp = 4; "
                                                 "global_batch/(micro_batch*dp) = 3",
                                                 ""}}));
  doc["training"]["pp"] = 1;
  doc["training"]["dp"] = 8;
  doc["training"]["global_batch"] = 64;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/pp", "1", "DualPipe needs an even number of pipeline stages", ""}}));
}

TEST(Auto, LayoutFieldsAndOptimizerAccepted) {
  json doc = good_scenario();
  for (const char* key : {"tp", "pp", "dp", "cp", "sp", "optimizer"}) doc["training"][key] = "auto";
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_EQ(s.training->auto_layout, unsigned{kAutoTp | kAutoPp | kAutoDp | kAutoCp | kAutoSp});
  EXPECT_TRUE(s.training->optimizer_auto);
  EXPECT_EQ(s.training->optimizer, Optimizer::adamw);
}

TEST(Auto, AbsentDpIsAutoBesideAutoTensorParallel) {
  json doc = good_scenario();
  doc["training"].erase("dp");
  doc["training"]["tp"] = "auto";
  EXPECT_EQ(io::scenario_from_json(doc).training->auto_layout, unsigned{kAutoTp | kAutoDp});
}

TEST(Auto, LayoutWithNoCandidateIsOneIssue) {
  json doc = good_scenario();  // 8 GPUs
  doc["training"]["tp"] = "auto";
  doc["training"]["dp"] = 3;
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training", "auto: tp",
                                                 "no layout of 8 GPUs with the given fields satisfies the layout rules",
                                                 ""}}));
}

// Degrees whose products overflow int64 are input errors, never a wrapped product (or a
// division by one that wrapped to zero).
TEST(Auto, AbsurdDegreesAreInputErrors) {
  json doc = good_scenario();
  doc["system"]["num_gpus"] = std::numeric_limits<int64_t>::max();
  doc["system"]["gpus_per_node"] = std::numeric_limits<int64_t>::max();
  doc["system"]["nic_gbps_per_gpu"] = 400;
  for (const char* key : {"tp", "pp", "dp", "cp"}) doc["training"][key] = "auto";
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training", "auto: tp, pp, dp, cp",
                                                 "no layout of 9223372036854775807 GPUs with the given fields "
                                                 "satisfies the layout rules",
                                                 ""}}));
  doc = good_scenario();
  doc["training"]["tp"] = int64_t{1} << 62;
  doc["training"]["pp"] = 4;
  const std::vector<Issue> issues = issues_of(doc);
  ASSERT_FALSE(issues.empty());
  EXPECT_EQ(issues.back(), (Issue{"/system/num_gpus", "8",
                                  "tp*pp*dp*cp = 4611686018427387904*4*8*1 = 9223372036854775807 must equal num_gpus", ""}));
}

TEST(Auto, NicRateTakesTheReferenceNodes) {
  json doc = good_scenario();
  doc["system"]["num_gpus"] = 16;
  doc["system"]["nic_gbps_per_gpu"] = "auto";
  doc["training"]["dp"] = 16;
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_TRUE(s.system.nic_auto);
  EXPECT_EQ(s.system.nic_gbps_per_gpu, 400.0);  // DGX H100: 8x ConnectX-7 400 Gb/s
  doc["system"]["gpu"] = "h100-pcie-80gb";
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/system/nic_gbps_per_gpu", "\"auto\"", "is required when the job spans several nodes",
                                 "h100-pcie-80gb has no reference node to take it from; give the Gb/s per GPU"}}));
}

// Precision the source did not publish: accepted, also on a GPU without FP8 tensor cores
// (evaluate_training then has bf16 only to choose from).
TEST(Auto, AcceptedForPrecision) {
  json doc = good_scenario();
  doc["training"]["precision"] = "auto";
  EXPECT_TRUE(io::scenario_from_json(doc).training->precision_auto);
  doc["system"]["gpu"] = "a100-sxm4-80gb";
  EXPECT_NO_THROW((void)io::scenario_from_json(doc));
}

// Rule: --set path=value overrides (dotted or JSON-pointer paths) apply before validation.
TEST(Overrides, DottedAndPointerPathsChangeValues) {
  json doc = good_scenario();
  io::apply_overrides(doc, {"training.tp=2", "/training/dp=4", "training.recompute=full", "system.gpu=\"b200\""});
  EXPECT_EQ(doc["training"]["tp"], 2);
  EXPECT_EQ(doc["training"]["dp"], 4);
  EXPECT_EQ(doc["training"]["recompute"], "full");  // not valid JSON: taken as a string
  EXPECT_EQ(doc["system"]["gpu"], "b200");
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_EQ(s.training->tp, 2);
  EXPECT_EQ(s.training->dp, 4);
  EXPECT_EQ(s.training->recompute, Recompute::full);
  EXPECT_EQ(s.system.gpu.id, "b200");
}

TEST(Overrides, CreatesMissingObjects) {
  json doc = good_scenario();
  io::apply_overrides(doc, {"training.lora.rank=8"});
  EXPECT_EQ(doc["training"]["lora"]["rank"], 8);
}

// Rule: a path through a value that is not an object (a preset name, a number) says which
// part holds what, instead of the JSON library's message.
TEST(Overrides, PathThroughAValueThatIsNotAnObject) {
  json doc = good_scenario();
  doc["model"] = "llama3-8b";
  EXPECT_EQ(override_issues(doc, {"model.hidden_size=4096", "training.tp.x=3"}),
            (std::vector<Issue>{
                {"--set", "model.hidden_size=4096",
                 "\"model\" is \"llama3-8b\", not an object, so a preset's keys cannot be set below it; replace the "
                 "name with the whole object to change its fields",
                 ""},
                {"--set", "training.tp.x=3", "\"training.tp\" is " + doc["training"]["tp"].dump() +
                     ", not an object, so its keys cannot be set below it", ""},
            }));
}

TEST(Overrides, ValueWithEqualsSign) {
  json doc = good_scenario();
  io::apply_overrides(doc, {"id=a=b"});
  EXPECT_EQ(doc["id"], "a=b");
}

TEST(Overrides, MalformedSetStrings) {
  EXPECT_EQ(override_issues(good_scenario(), {"training.tp", "=4", "training.dp=8"}),
            (std::vector<Issue>{
                {"--set", "training.tp", "must look like path=value (e.g. training.tp=4)", ""},
                {"--set", "=4", "must look like path=value (e.g. training.tp=4)", ""},
            }));
}

TEST(Overrides, UnknownKeyIsReportedByTheReader) {
  json doc = good_scenario();
  io::apply_overrides(doc, {"training.tensor_parallel=2"});
  EXPECT_EQ(issues_of(doc), (std::vector<Issue>{{"/training/tensor_parallel", "", "unknown key", ""}}));
  doc = good_scenario();
  io::apply_overrides(doc, {"training.microbatch=2"});
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{{"/training/microbatch", "", "unknown key", "did you mean \"micro_batch\"?"}}));
}

TEST(Overrides, LayoutBrokenByOverride) {
  json doc = good_scenario();
  io::apply_overrides(doc, {"training.tp=3"});
  EXPECT_EQ(issues_of(doc),
            (std::vector<Issue>{
                {"/training/tp", "3", "attention heads (32) must be divisible by tp", ""},
                {"/training/tp", "3", "key/value heads (32) must be divisible by tp (or tp by them)", ""},
                {"/system/num_gpus", "8", "tp*pp*dp*cp = 3*1*8*1 = 24 must equal num_gpus", ""},
            }));
}

// Rule: a model config is a foreign Hugging Face file: keys the simulator does not need are ignored.
TEST(ForeignConfig, ExtraKeysInModelAreAccepted) {
  json doc = good_scenario();
  doc["model"] = json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "rope_type": "llama3"},
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "transformers_version": "4.43.0.dev0",
    "quantization_config": {"quant_method": "fp8"}, "some_future_key": {"nested": [1, 2, 3]}, "use_cache": true
  })");
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_EQ(s.model.family, Family::llama);
  EXPECT_EQ(s.model.hidden, 4096);
  EXPECT_EQ(s.model.kv_heads, 8);
  EXPECT_EQ(s.model.vocab, 128256);
  EXPECT_EQ(s.model.name, "llama2-7b-8gpu");  // an inline config takes the scenario id as its name
}

// Rule: validation cases (data/validation/SCHEMA.md) are scenarios as they are written.
TEST(ValidationCase, FirstTrainingCaseParses) {
  // The first case of training-public.json, with the long text fields shortened.
  const json doc = json::parse(R"json({
    "id": "narayanan21-t1-1.7b",
    "kind": "training",
    "source": {"title": "Narayanan et al. 2021 (SC21)", "ref": "Table 1", "url": "https://arxiv.org/abs/2104.04473"},
    "model": {
      "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 2304, "n_layer": 24, "n_head": 24,
      "n_positions": 2048, "n_inner": 9216, "vocab_size": 51200, "activation_function": "gelu_new",
      "layer_norm_epsilon": 1e-05, "tie_word_embeddings": true
    },
    "system": {"gpu": "a100-sxm4-80gb", "num_gpus": 32, "gpus_per_node": 8, "nic_gbps_per_gpu": 200},
    "training": {
      "tp": 1, "pp": 1, "vpp": 1, "dp": 32, "cp": 1, "ep": 1, "etp": 1, "sp": false, "zero": 0,
      "micro_batch": "auto", "global_batch": 512, "seq_len": 2048, "recompute": "full", "precision": "fp16",
      "optimizer": "adamw"
    },
    "measured": {"step_time_s": 3.528},
    "derivation": {"step_time_s": "F/(TFLOP/s per GPU x 1e12 x num_gpus)"},
    "caveats": ["model: gpt2-type config written from the published shape."]
  })json");
  const Scenario s = io::scenario_from_json(doc);
  EXPECT_EQ(s.id, "narayanan21-t1-1.7b");
  EXPECT_EQ(s.model.family, Family::gpt2);
  EXPECT_EQ(s.model.layers, 24);
  EXPECT_EQ(s.model.hidden, 2304);
  EXPECT_EQ(s.system.gpu.id, "a100-sxm4-80gb");
  EXPECT_EQ(s.system.num_gpus, 32);
  ASSERT_TRUE(s.training);
  EXPECT_EQ(s.training->dp, 32);
  EXPECT_FALSE(s.training->micro_batch);
  EXPECT_EQ(s.training->recompute, Recompute::full);
  EXPECT_EQ(s.training->precision, DType::fp16);
  EXPECT_EQ(s.training->global_batch, 512);
}

}  // namespace
}  // namespace capsim
