// Validation case files (capsim validate): every case is read and, where it can be, simulated.
#include <nlohmann/json.hpp>

#include "capsim/io/validation.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  return fuzz::reader([&] {
    const nlohmann::json report = io::run_validation({fuzz::write_input(fuzz::as_text(data, size), "cases.json")});
    (void)io::validation_table(report);
  });
}
