// nccl-tests -J output (JSON).
#include "capsim/io/calibration_io.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace capsim;
  const std::string_view text = fuzz::as_text(data, size);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{') return 0;  // the text target's
  return fuzz::reader([&] {
    const RawFile raw = io::import_nccl_tests(fuzz::write_input(text, "nccl.json"));
    (void)io::raw_to_text(raw);
  });
}
