// Serving benchmark result files (capsim calibrate serving-steps): read, steps recovered,
// report built.
#include "capsim/core/step_timeline.hpp"
#include "capsim/io/serving_steps.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  const std::string_view text = fuzz::as_text(data, size);
  return fuzz::reader([&] {
    const io::BenchmarkRequests b = io::read_benchmark_requests(fuzz::write_input(text, "result.json"));
    const StepTimeline t = recover_steps(b.requests);
    (void)io::serving_steps_report(b, t, 8);
  });
}
