// Plan files (capsim plan): model, offers with prices, a training or serving goal.
#include "capsim/io/plan_io.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  return fuzz::reader([&] { (void)io::load_plan(fuzz::write_input(fuzz::as_text(data, size), "plan.json")); });
}
