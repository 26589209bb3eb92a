// Validation case files (capsim validate): every case is read and, where it can be, simulated.
#include <nlohmann/json.hpp>

#include "capsim/io/json_read.hpp"
#include "capsim/io/validation.hpp"
#include "fuzz_input.hpp"

namespace {

/// A case whose simulation alone takes seconds (a serving run of more than 1,000 requests, an
/// RL step of more than 4,096 rollouts) is left out: the reader is what is fuzzed, and a slow
/// unit would crowd out every other input in a bounded run. Such cases are a valid long run,
/// not a finding (the CLI shows progress for them).
bool too_slow_to_fuzz(const nlohmann::json& doc) {
  if (!doc.is_object() || !doc.contains("cases") || !doc["cases"].is_array()) return false;
  auto number_at = [](const nlohmann::json& c, const char* pointer) {
    const nlohmann::json::json_pointer p(pointer);
    return c.contains(p) && c[p].is_number() ? c[p].get<double>() : 0.0;
  };
  try {
    for (const auto& c : doc["cases"]) {
      if (!c.is_object()) continue;
      if (number_at(c, "/inference/workload/num_requests") > 1000) return true;
      if (number_at(c, "/training/rl/prompts_per_step") * number_at(c, "/training/rl/group_size") > 4096) return true;
    }
  } catch (const nlohmann::json::exception&) {
    // A shape the pointers cannot walk is the reader's to refuse.
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  return fuzz::reader([&] {
    if (too_slow_to_fuzz(io::parse_json(fuzz::as_text(data, size), "cases.json"))) return;
    const nlohmann::json report = io::run_validation({fuzz::write_input(fuzz::as_text(data, size), "cases.json")});
    (void)io::validation_table(report);
  });
}
