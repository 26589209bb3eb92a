// Fitted calibration profiles (capsim calibrate fit output, read by --calibration).
#include "capsim/io/calibration_io.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  return fuzz::reader([&] {
    const CalibrationProfile p = io::read_profile(fuzz::write_input(fuzz::as_text(data, size), "profile.json"));
    (void)io::profile_to_json(p);
  });
}
