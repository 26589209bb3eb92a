// Parameter counts against the exact published counts (data/models/index.json cites each).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace capsim
