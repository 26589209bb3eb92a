// GPU preset files (data/gpus/*.json, or a folder given by CAPSIM_DATA_DIR).
#include <nlohmann/json.hpp>

#include "capsim/io/json_read.hpp"
#include "capsim/io/presets.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  return fuzz::reader([&] {
    const nlohmann::json doc = io::parse_json(fuzz::as_text(data, size), "gpu.json");
    (void)io::gpu_from_json(doc, "gpu.json");
  });
}
