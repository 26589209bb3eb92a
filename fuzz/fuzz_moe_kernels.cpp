// MoE kernel families (data/moe_kernels.json, or a folder given by CAPSIM_DATA_DIR): every
// family the document names, read with its figures.
#include <nlohmann/json.hpp>

#include "capsim/io/engines.hpp"
#include "capsim/io/json_read.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  return fuzz::reader([&] {
    const nlohmann::json doc = io::parse_json(fuzz::as_text(data, size), "moe_kernels.json");
    if (doc.is_object() && doc.contains("families") && doc["families"].is_object())
      for (auto it = doc["families"].begin(); it != doc["families"].end(); ++it)
        (void)io::moe_kernel_family_from_json(doc, "moe_kernels.json", it.key(), "/knobs/moe_kernel/value");
    (void)io::moe_kernel_family_from_json(doc, "moe_kernels.json", "triton", "/knobs/moe_kernel/value");
  });
}
