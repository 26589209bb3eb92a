// Hugging Face config.json files (a model given by path, or a preset).
#include <nlohmann/json.hpp>

#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  return fuzz::reader([&] {
    const nlohmann::json cfg = io::parse_json(fuzz::as_text(data, size), "config.json");
    (void)io::model_from_hf_config(cfg, "/model", "fuzz");
  });
}
