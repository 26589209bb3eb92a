// Scenario documents: the bytes parsed as the CLI parses a scenario file, then read.
#include <nlohmann/json.hpp>

#include "capsim/io/json_read.hpp"
#include "capsim/io/scenario_io.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  return fuzz::reader([&] {
    const nlohmann::json doc = io::parse_json(fuzz::as_text(data, size), "scenario.json");
    (void)io::scenario_from_json(doc, fuzz::scratch_dir());
  });
}
