// Parameter counts against the exact published counts (data/models/index.json cites each).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "capsim/core/diagnostics.hpp"
#include "capsim/core/model.hpp"
#include "capsim/io/presets.hpp"

namespace capsim {
namespace {

struct Expected {
  const char* preset;
  int64_t total;
  int64_t active;  ///< 0: dense (active == total)
};

// Sources: Llama 2 paper / HF safetensors.total (minus rotary buffers); keras-hub presets;
// model cards; formula totals from the configs, as listed in data/models/index.json.
const Expected kExpected[] = {
    {"gpt2", 124439808, 0},
    {"gpt2-xl", 1557611200, 0},
    {"gpt3-175b", 174604259328, 0},
    {"gpt-neox-20b", 20554567680, 0},
    {"gemma-7b", 8537680896, 0},
    {"llama2-7b", 6738415616, 0},
    {"llama2-13b", 13015864320, 0},
    {"llama2-70b", 68976648192, 0},
    {"llama3-8b", 8030261248, 0},
    {"llama3-70b", 70553706496, 0},
    {"llama3.1-405b", 405853388800, 0},
    {"mistral-7b", 7241732096, 0},
    {"mixtral-8x7b", 46702792704, 12879925248},
    {"qwen2.5-72b", 72706203648, 0},
    {"qwen3-8b", 8190735360, 0},
    {"qwen3-30b-a3b", 30532122624, 3353032704},
    {"qwen3-235b-a22b", 235093634560, 22190763520},
    {"deepseek-v2", 235741434880, 21375800320},
    {"deepseek-v2-lite", 15706484224, 2661150208},
    {"deepseek-v3", 671026419200, 37552297472},
    {"gpt-oss-120b", 116829156672, 5711982912},
    {"gpt-oss-20b", 20914757184, 4187440704},
};

class ParamCount : public ::testing::TestWithParam<Expected> {};

TEST_P(ParamCount, MatchesPublishedExactCount) {
  const Expected& e = GetParam();
  const ModelSpec m = io::load_model(e.preset);
  const ParamCounts c = count_params(m);
  EXPECT_EQ(c.total, e.total) << e.preset;
  EXPECT_EQ(c.active, e.active == 0 ? e.total : e.active) << e.preset;
}

INSTANTIATE_TEST_SUITE_P(Presets, ParamCount, ::testing::ValuesIn(kExpected),
                         [](const auto& test_param) {
                           std::string n = test_param.param.preset;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(KvCache, Llama3_70bBf16) {
  // 2 (K,V) x 80 layers x 8 KV heads x 128 x 2 bytes.
  EXPECT_DOUBLE_EQ(kv_cache_bytes_per_token(io::load_model("llama3-70b"), DType::bf16), 327680.0);
}

TEST(KvCache, DeepSeekV3MlaBf16) {
  // (kv_lora_rank 512 + rope 64) x 61 layers x 2 bytes.
  EXPECT_DOUBLE_EQ(kv_cache_bytes_per_token(io::load_model("deepseek-v3"), DType::bf16), 70272.0);
}

// gpt-oss against its model card (OpenAI, arXiv 2508.10925, Table 1): 116.83B and 20.91B
// parameters, 5.13B and 3.61B active per token without the input embedding (capsim's
// matmul parameters); a window of 128 keys on every other layer from the first.
TEST(GptOss, MatchesTheModelCard) {
  struct Card {
    const char* preset;
    double total_b, active_b;
    int64_t layers;
  };
  for (const Card& c : {Card{"gpt-oss-120b", 116.83, 5.13, 36}, Card{"gpt-oss-20b", 20.91, 3.61, 24}}) {
    const ModelSpec m = io::load_model(c.preset);
    EXPECT_NEAR(static_cast<double>(count_params(m).total) / 1e9, c.total_b, 0.005) << c.preset;
    EXPECT_NEAR(forward_matmul_params(m) / 1e9, c.active_b, 0.005) << c.preset;
    ASSERT_EQ(m.layers, c.layers);
    EXPECT_EQ(m.sliding_window, 128);
    EXPECT_EQ(m.sliding_layers(), c.layers / 2);
    for (int64_t i = 0; i < m.layers; ++i) EXPECT_EQ(m.is_sliding_layer(i), i % 2 == 0) << c.preset << " layer " << i;
  }
}

ModelSpec read_config(const char* text) { return io::model_from_hf_config(nlohmann::json::parse(text), "/model"); }

std::vector<Issue> config_issues(const char* text) {
  try {
    read_config(text);
  } catch (const InputError& e) {
    return e.issues();
  }
  return {};
}

// Which layers slide, as each family's transformers code decides; the window leaves the
// parameter count alone.
TEST(SlidingWindow, ConfigRulesPerFamily) {
  // MistralConfig's default window is 4096 on every layer; null turns it off.
  const ModelSpec mistral = read_config(R"({"model_type": "mistral", "num_hidden_layers": 4})");
  EXPECT_EQ(mistral.sliding_window, 4096);
  EXPECT_EQ(mistral.sliding_layers(), 4);
  EXPECT_EQ(read_config(R"({"model_type": "mistral", "num_hidden_layers": 4, "sliding_window": null})").sliding_window, 0);
  // Qwen2 slides only with use_sliding_window, on the layers from max_window_layers up.
  EXPECT_EQ(read_config(R"({"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 1024})").sliding_window, 0);
  const ModelSpec qwen = read_config(R"({"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 1024,
                                        "use_sliding_window": true, "max_window_layers": 2})");
  EXPECT_EQ(qwen.sliding_window, 1024);
  EXPECT_EQ(qwen.sliding_layer, (std::vector<bool>{false, false, true, true}));
  // layer_types, where the config lists them, decide.
  const ModelSpec listed = read_config(R"({"model_type": "mistral", "num_hidden_layers": 3, "sliding_window": 512,
    "layer_types": ["full_attention", "sliding_attention", "full_attention"]})");
  EXPECT_EQ(listed.sliding_layer, (std::vector<bool>{false, true, false}));
  // Families without a window in their modeling code ignore the key.
  EXPECT_EQ(read_config(R"({"model_type": "llama", "sliding_window": 512})").sliding_window, 0);
  ModelSpec unwindowed = mistral;
  unwindowed.sliding_window = 0;
  unwindowed.sliding_layer.clear();
  EXPECT_EQ(count_params(mistral), count_params(unwindowed));
}

TEST(SlidingWindow, ConfigErrorsNameThePlace) {
  EXPECT_EQ(config_issues(R"({"model_type": "mistral", "sliding_window": 0})"),
            (std::vector<Issue>{{"/model/sliding_window", "0", "must be a positive integer or null", ""}}));
  EXPECT_EQ(config_issues(R"({"model_type": "gpt_oss", "num_hidden_layers": 2, "layer_types": ["sliding_attention"]})"),
            (std::vector<Issue>{{"/model/layer_types", "[\"sliding_attention\"]", "must list one type per layer (2)", ""}}));
  EXPECT_EQ(
      config_issues(R"({"model_type": "gpt_oss", "num_hidden_layers": 2, "layer_types": ["sliding_attention", "chunked_attention"]})"),
      (std::vector<Issue>{
          {"/model/layer_types/1", "\"chunked_attention\"", "must be \"sliding_attention\" or \"full_attention\"", ""}}));
}

// mean_attended_keys against the mean of min(p, w) over positions p = 1..s: span/2 inside
// the window, and within half a key of the exact mean beyond it (the continuous form drops
// w / 2s); the forward FLOPs count those keys on the sliding layers.
TEST(SlidingWindow, MeanAttendedKeysAndFlops) {
  EXPECT_EQ(mean_attended_keys(1000, 0), 500.0);
  EXPECT_EQ(mean_attended_keys(1000, 4096), 500.0);
  for (int64_t s : {128, 129, 1000, 8192}) {
    for (int64_t w : {64, 128, 4096}) {
      double sum = 0;
      for (int64_t p = 1; p <= s; ++p) sum += static_cast<double>(std::min(p, w));
      if (s > w) {
        EXPECT_NEAR(mean_attended_keys(s, w), sum / static_cast<double>(s), 0.5) << s << " " << w;
      }
    }
  }
  const ModelSpec m = io::load_model("gpt-oss-120b");
  const double per_layer = 2.0 * static_cast<double>(m.heads) * static_cast<double>(2 * m.head_dim);
  const double expected = 2.0 * forward_matmul_params(m) + per_layer * (18.0 * 4096.0 + 18.0 * mean_attended_keys(8192, 128));
  EXPECT_NEAR(forward_flops_per_token(m, 8192), expected, 1e-9 * expected);
}

}  // namespace
}  // namespace capsim
