// Raw calibration measurements (JSON Lines with a header line).
#include "capsim/io/calibration_io.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  return fuzz::reader([&] {
    const RawFile raw = io::read_raw(fuzz::write_input(fuzz::as_text(data, size), "raw.jsonl"));
    (void)io::raw_to_text(raw);
  });
}
