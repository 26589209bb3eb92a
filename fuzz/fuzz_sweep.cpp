// Sweep specs: base, axes (values, ranges, zips) and outputs.
#include "capsim/io/sweep.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  return fuzz::reader([&] {
    const io::SweepSpec spec = io::load_sweep(fuzz::write_input(fuzz::as_text(data, size), "sweep.json"));
    if (spec.rows() > 0) (void)spec.overrides(spec.rows() - 1);
  });
}
