// Validation reports given as a baseline (capsim validate --baseline): read, checked, and set
// against a fixed report and against themselves, then printed as the comparison table.
#include <nlohmann/json.hpp>

#include "capsim/io/json_read.hpp"
#include "capsim/io/validation.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  static const nlohmann::json fixed = {
      {"schema", "capsim-validation-report/1"},
      {"cases",
       {{{"file", "f.json"}, {"id", "a-1"}, {"status", "ok"}, {"groups", {{"source", "a"}, {"engine", "vllm 0.8.4"}}},
         {"error", {{"ttft_mean_ms", -0.2}, {"tpot_mean_ms", 0.1}}}},
        {{"file", "f.json"}, {"id", "b-1"}, {"status", "unsupported"}, {"reason", "r"}}}}};
  return fuzz::reader([&] {
    const nlohmann::json baseline = io::parse_json(fuzz::as_text(data, size), "report.json");
    io::check_validation_report(baseline, "report.json");
    for (const nlohmann::json* run : {&fixed, &baseline}) {
      const nlohmann::json cmp = io::compare_reports(*run, baseline, {"source", "engine"}, "report.json");
      (void)io::comparison_table(cmp, "report.json");
    }
  });
}
